"""The README's Python API section: its table names functions that exist and that the CLI calls, and its example
runs on the embedded sample and prints what the README shows (so the example cannot rot silently)."""
from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## The Python API")
    return text[start: text.index("\n## ", start + 1)]


def test_the_api_table_names_the_functions_the_cli_calls():
    sec = _section()
    names = re.findall(r"`(tenset_curate\.[a-z_.]+|splits\.[a-z_]+)\(", sec)
    assert len(names) >= 12, names
    cli = (ROOT / "tenset_curate" / "cli.py").read_text(encoding="utf-8")
    for dotted in names:
        dotted = dotted if dotted.startswith("tenset_curate.") else "tenset_curate." + dotted
        mod, fn = dotted.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(mod), fn)), dotted
        if fn not in ("load_records", "load_model"):  # the two readers; every other one is a command's function
            short = mod.rsplit(".", 1)[1]
            assert re.search(rf"from \.{short} import [^\n]*\b{fn}\b", cli), f"cli.py does not call {dotted}"


def test_the_api_example_runs_and_prints_what_the_readme_shows(tmp_path):
    sec = _section()
    code = re.search(r"```python\n(.*?)```", sec, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", sec, re.S).group(1)
    (tmp_path / "data").symlink_to(ROOT / "data")  # "run from the repository root": its data/ without its outputs
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == shown, r.stdout
    assert (tmp_path / "models" / "sample-pruned" / "config.json").is_file()
