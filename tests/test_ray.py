"""The Ray executor for real: a local Ray instance (2 CPUs, no dashboard), no mocks. Its outputs must equal the
local executor's byte for byte: convert + prune on real roller-k80 logs, and a small pipeline on the sample."""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from tenset_curate.convert import convert  # noqa: E402
from tenset_curate.executors import map_unordered  # noqa: E402
from tenset_curate.pipeline import run  # noqa: E402
from tenset_curate.prune import prune  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
K80 = REPO.parent / "shared" / "realdata" / "ansor" / "roller-k80"
SAMPLE = REPO / "data" / "sample-cpu"


@pytest.fixture(scope="module")
def ray_local():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    if started:
        ray.shutdown()


def _strip(obj, paths=False):
    """Without wall-clock timings (keys named *seconds*) and, with paths=True, the dataset's own path."""
    if isinstance(obj, dict):
        return {k: _strip(v, paths) for k, v in obj.items()
                if "seconds" not in k and not (paths and k in ("source", "pruned_from"))}
    if isinstance(obj, list):
        return [_strip(v, paths) for v in obj]
    return obj


def _tree(root: Path, skip=(".lock", "catalog.duckdb")) -> dict:
    """Every file under root: Parquet and Markdown by bytes, JSON minus timing fields and the dataset's own path."""
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name in skip:
            continue
        data = p.read_bytes()
        if p.suffix == ".json":
            data = json.dumps(_strip(json.loads(data), paths=True), sort_keys=True).encode()
        elif p.suffix == ".md":
            data = b"\n".join(x for x in data.split(b"\n") if b" s\n" not in x + b"\n" and b"; seed" not in x)
        out[p.relative_to(root).as_posix()] = hashlib.sha256(data).hexdigest()
    return out


def _inputs(tmp_path: Path) -> list[Path]:
    """Two real logs of each operator class, plus a truncated copy of one (a failed stream, quarantined)."""
    files = []
    for op in sorted(d for d in K80.iterdir() if d.is_dir()):
        files += sorted(op.glob("*.json.gz"))[:2]
    bad = tmp_path / "in" / "truncated.json.gz"
    bad.parent.mkdir(parents=True)
    data = files[0].read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    return files + [bad]


@pytest.mark.skipif(not K80.exists(), reason="shared/realdata missing")
def test_convert_and_prune_on_ray_equal_local(ray_local, tmp_path):
    ins = _inputs(tmp_path)
    gb = 3 << 20  # ~3 logs a group: several groups, so the Ray tasks share real work
    a = convert(ins, tmp_path / "local", workers=1, group_bytes=gb)
    b = convert(ins, tmp_path / "ray", workers=2, executor="ray", group_bytes=gb)
    assert a["inputs_converted"] == b["inputs_converted"] == len(ins)
    assert a["totals"]["balanced"] and a["totals"]["rows"] > 5000
    assert a["totals"]["quarantined"] > 0  # the truncated stream
    ta, tb = _tree(tmp_path / "local"), _tree(tmp_path / "ray")
    assert ta == tb
    assert sum(k.startswith("records/") for k in ta) >= 4
    assert _strip(a["totals"]) == _strip(b["totals"])
    # prune, sharded by task: units of ~2,000 records as Ray tasks write the same bytes as one local process
    pa = prune(tmp_path / "local", tmp_path / "pl", 0.45, "hybrid", seed=0, unit_records=2000)
    pb = prune(tmp_path / "ray", tmp_path / "pr", 0.45, "hybrid", seed=0, unit_records=2000, executor="ray",
               workers=2)
    assert pa["units"] == pb["units"] >= 3
    assert pa["records_after"] == pb["records_after"] < pa["records_before"]
    assert _tree(tmp_path / "pl") == _tree(tmp_path / "pr")


def test_map_unordered_on_ray_returns_all_and_raises(ray_local):
    # a function the workers can import by reference (a test module is not importable there)
    assert sorted(map_unordered(math.sqrt, [0, 1, 4, 9, 16], executor="ray", workers=2)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="math domain error"):
        list(map_unordered(math.sqrt, [4, 9, -1, 16, 25, 36], executor="ray", workers=2))


PIPE = """
[pipeline]
workdir = "runs/t"
steps = ["convert", "splits", "prune"]
[convert]
inputs = ["data/sample-cpu", "logs"]
[splits]
split = [{ name = "within_task", scheme = "within-task", seed = 0 }]
[prune]
ratio = 0.45
method = "cluster"
"""


@pytest.mark.skipif(not (SAMPLE.exists() and K80.exists()), reason="data/sample-cpu or shared/realdata missing")
def test_pipeline_on_ray_equals_local_and_skips_after_local(ray_local, tmp_path):
    (tmp_path / "data").mkdir()
    shutil.copytree(SAMPLE, tmp_path / "data" / "sample-cpu")
    logs = tmp_path / "logs"
    logs.mkdir()
    for f in sorted(K80.glob("*/*.json.gz"))[:3]:
        (logs / f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
    (tmp_path / "p.toml").write_text(PIPE)
    s = run(tmp_path / "p.toml", cwd=tmp_path)
    assert [r["status"] for r in s["steps"]] == ["ran"] * 3
    want = _tree(tmp_path / "runs", skip=(".lock", "catalog.duckdb", "summary.json", "summary.md"))
    # the executor is not part of any key: the same outputs are already there
    s = run(tmp_path / "p.toml", cwd=tmp_path, executor="ray", workers=2)
    assert [r["status"] for r in s["steps"]] == ["skipped"] * 3
    shutil.rmtree(tmp_path / "runs")
    s = run(tmp_path / "p.toml", cwd=tmp_path, executor="ray", workers=2)
    assert [r["status"] for r in s["steps"]] == ["ran"] * 3 and s["executor"] == "ray"
    got = _tree(tmp_path / "runs", skip=(".lock", "catalog.duckdb", "summary.json", "summary.md"))
    assert got == want
