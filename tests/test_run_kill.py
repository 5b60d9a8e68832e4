"""Crash safety of ``curate run``: SIGKILL a whole pipeline at >= 20 stratified random points, resume, compare.

The pipeline (written by the test) runs the quickstart steps ``convert -> splits -> prune -> train -> evaluate ->
report`` on the embedded sample ``data/sample-cpu`` (2,070 MetaSchedule records of 14 tasks), with ``random``
pruning and a 20-tree LightGBM ranker trained on the full and on the pruned data, so one uninterrupted run takes a
few seconds and the whole test stays within ~2-3 minutes on 2 loaded cores.

What is checked:

- The runs import a copy of ``tenset_curate`` taken when the test starts: step keys include the code version, so
  an edit of the working tree during the test would (rightly) change every key.
- The uninterrupted reference is ``python -m tenset_curate.cli run p.toml`` (the real CLI, a fresh process). Its
  duration is measured, and so is the moment its work directory appears (before that the interpreter is starting up
  and importing; nothing can be written). The kill delays are stratified over the measured working window
  ``[work dir appears, exit]``: one uniform draw in each of ``N_KILLS`` equal slices.
- Each attempt starts the CLI in a fresh project state (in its own session, so the whole process group dies), and
  SIGKILLs it at its delay. While it is dead, every file visible under a final name (not ``*.tmp-*``) must be complete:
  Parquet opens with pyarrow and is byte-identical to the reference's file of the same path; every other output
  (JSON minus timing fields, Markdown/text minus timings, LightGBM weights) equals the reference's; ``state.json``
  and the dataset ``manifest.json`` parse and each of their entries equals the reference's entry; a visible
  ``catalog.duckdb`` opens and answers a query; a run summary parses.
- Then ``curate run`` again (the CLI, to completion). The steps that ``state.json`` recorded as finished at death must
  be reported ``skipped`` and the others ``ran`` (resume from the last finished step). All outputs must be
  byte-identical to the reference (timing fields and timing text stripped; ``catalog.duckdb`` is compared by the
  results of DuckDB queries through ``run_sql``, the ``curate sql`` path, on both the converted and the pruned
  dataset); no temporary file may be left anywhere in the project.
- The kills must have landed in at least two different steps (read from ``state.json`` at death), and printed: a
  histogram of the phases hit.
"""
from __future__ import annotations

import collections
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import orjson
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample-cpu"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}

pytestmark = pytest.mark.skipif(not SAMPLE.is_dir(), reason="data/sample-cpu missing")

N_KILLS = 20
STEPS = ["convert", "splits", "prune", "train", "evaluate", "report"]
WORKDIR = "runs/k"
PIPE = f"""
[pipeline]
name = "killtest"
workdir = "{WORKDIR}"
steps = {orjson.dumps(STEPS).decode()}

[convert]
inputs = ["data/sample-cpu"]

[splits]
split = [{{ name = "within_task", scheme = "within-task", seed = 0 }}]

[prune]
ratio = 0.45
method = "random"
seed = 0

[train]
split = "within_task"
data = ["full", "pruned"]
models = ["gbdt"]
epochs = 1
seed = 0

[train.gbdt]
n_estimators = 20
num_threads = 1

[evaluate]
split = "within_task"

[report]
title = "kill test"
command = "curate run p.toml"
out = "reports/k.md"
"""
CMD = [sys.executable, "-m", "tenset_curate.cli", "run", "p.toml"]
OUT_ROOTS = ("runs", "reports")  # everything the pipeline writes lies under these
TIMING_KEYS = {"built_at", "since", "started", "finished", "elapsed"}
RUN_LOGS = {f"{WORKDIR}/summary.json", f"{WORKDIR}/summary.md"}  # per-run logs: statuses and times differ
MERGED = {f"{WORKDIR}/state.json", f"{WORKDIR}/convert/manifest.json"}  # grow entry by entry during a run
TIME_TEXT = re.compile(rb"\d+(?:\.\d+)? s\b")

QUERIES = [
    "SELECT count(*) AS n, count(DISTINCT task_id) AS tasks, md5(string_agg(record_id, ',' ORDER BY record_id)) AS h "
    "FROM records",
    "SELECT hardware, task_id, count(*) AS n, min(mean_cost) AS best, sum(CASE WHEN is_valid THEN 1 ELSE 0 END) AS v "
    "FROM records GROUP BY ALL ORDER BY ALL",
    "SELECT * FROM tasks ORDER BY task_id",
    "SELECT count(*) AS n, md5(string_agg(workload_key, ',' ORDER BY workload_key)) AS h FROM workloads",
]
SPLIT_QUERY = ("SELECT part, count(*) AS n, md5(string_agg(record_id, ',' ORDER BY record_id)) AS h "
               "FROM split_within_task GROUP BY part ORDER BY part")


# ----------------------------------------------------------------------------------------------------------------
# helpers


def strip_timing(obj):
    if isinstance(obj, dict):
        return {k: strip_timing(v) for k, v in obj.items() if "seconds" not in k and k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [strip_timing(v) for v in obj]
    return obj


def normalise(rel: str, data: bytes) -> bytes:
    """An output's bytes minus wall-clock timings (JSON keys *seconds* and the like; 'N.NN s' in text)."""
    if rel.endswith(".json"):
        return orjson.dumps(strip_timing(orjson.loads(data)), option=orjson.OPT_SORT_KEYS)
    if rel.endswith((".md", ".txt")):
        return TIME_TEXT.sub(b"<t> s", data)
    return data


def output_files(project: Path) -> list[Path]:
    return sorted(p for r in OUT_ROOTS if (project / r).exists() for p in (project / r).rglob("*") if p.is_file())


def _is_temp(p: Path, project: Path) -> bool:
    """Under a temporary name, or inside a temporary (staging) folder such as prune's ``.stage.tmp-<pid>/``."""
    return any(".tmp" in part for part in p.relative_to(project).parts)


def snapshot(project: Path) -> dict[str, bytes]:
    """Every output file by path, timings stripped; the lock, the catalog (compared by queries) and the run
    summaries (a resumed run reports 'skipped' where the reference ran) are left out."""
    snap = {}
    for p in output_files(project):
        rel = p.relative_to(project).as_posix()
        if p.name in (".lock", "catalog.duckdb") or rel in RUN_LOGS or _is_temp(p, project):  # temp files: see below
            continue
        snap[rel] = normalise(rel, p.read_bytes())
    return snap


def query_results(project: Path) -> dict[str, str]:
    """DuckDB query results (CSV) through run_sql (what ``curate sql`` runs) on the converted and pruned datasets."""
    from tenset_curate.catalog import run_sql

    res = {}
    for ds in ("convert", "prune"):
        root = project / WORKDIR / ds
        for i, q in enumerate(QUERIES):
            res[f"{ds}:{i}"] = run_sql(root, q, fmt="csv")
    res["convert:split"] = run_sql(project / WORKDIR / "convert", SPLIT_QUERY, fmt="csv")
    return res


def temp_files(project: Path) -> list[str]:
    return [p.relative_to(project).as_posix() for r in OUT_ROOTS if (project / r).exists()
            for p in (project / r).rglob("*") if ".tmp" in p.name]


def clean(project: Path) -> None:
    for r in OUT_ROOTS:
        if (project / r).exists():
            shutil.rmtree(project / r)


def start(project: Path, log: Path) -> subprocess.Popen:
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(project.parent / "code"), ENV["PYTHONPATH"]])}
    with open(log, "wb") as fh:
        return subprocess.Popen(CMD, cwd=project, env=env, start_new_session=True, stdout=fh, stderr=subprocess.STDOUT)


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def run_to_end(project: Path, log: Path, timeout: float = 600) -> None:
    p = start(project, log)
    assert p.wait(timeout=timeout) == 0, tail(log)


def kill_after(p: subprocess.Popen, delay: float, log: Path) -> bool:
    """SIGKILL the process group after ``delay`` s; True when it was still running (False: it finished first)."""
    try:
        p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    assert p.returncode in (0, -signal.SIGKILL), tail(log)
    return p.returncode == -signal.SIGKILL


def finished_steps(project: Path) -> list[str]:
    st = project / WORKDIR / "state.json"
    return list(orjson.loads(st.read_bytes())) if st.exists() else []


def phase_at_death(project: Path) -> str:
    if not (project / WORKDIR).exists():
        return "before start"
    done = finished_steps(project)
    todo = [s for s in STEPS if s not in done]
    return f"in {todo[0]}" if todo else "run summary"


def check_visible_while_dead(project: Path, ref: dict[str, bytes], ref_raw: dict[str, bytes]) -> None:
    """Whatever a killed run left under a final name must be complete (and the reference's)."""
    for p in output_files(project):
        rel = p.relative_to(project).as_posix()
        if _is_temp(p, project) or p.name == ".lock":
            continue
        data = p.read_bytes()
        if p.name == "catalog.duckdb":
            con = duckdb.connect(str(p), read_only=True, config={"file_search_path": str(p.parent)})
            try:
                con.execute("SELECT count(*) FROM catalog_info").fetchall()
            finally:
                con.close()
        elif rel in RUN_LOGS:
            if rel.endswith(".json"):
                s = orjson.loads(data)
                assert [r["step"] for r in s["steps"]] == STEPS, rel
            else:
                assert data.startswith(b"# Run of"), rel
        elif rel in MERGED:
            got, want = orjson.loads(data), orjson.loads(ref_raw[rel])
            if rel.endswith("manifest.json"):
                got, want = got.get("inputs", {}), want["inputs"]
            for k, v in got.items():
                assert strip_timing(v) == strip_timing(want.get(k)), (f"{rel}: entry {k} differs from the "
                                                                        f"reference: {v} != {want.get(k)}")
        else:
            assert rel in ref, f"{rel}: visible after a kill, but the uninterrupted run has no such file"
            if p.suffix == ".parquet":
                pq.read_table(p)
            assert normalise(rel, data) == ref[rel], f"{rel}: visible under its final name but not complete"


def assert_same(snap: dict, ref: dict, what: str) -> None:
    assert sorted(snap) == sorted(ref), (f"{what}: files differ: extra {sorted(set(snap) - set(ref))}, "
                                         f"missing {sorted(set(ref) - set(snap))}")
    diff = [k for k in ref if snap[k] != ref[k]]
    shown = {k: (snap[k][:600], ref[k][:600]) for k in diff if not k.endswith((".parquet", ".txt"))}
    assert not diff, f"{what}: not byte-identical to the uninterrupted run: {diff}; (got, want): {shown}"


# ----------------------------------------------------------------------------------------------------------------
# the test


@pytest.fixture()
def project(tmp_path) -> Path:
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    shutil.copytree(SAMPLE, proj / "data" / "sample-cpu")
    (proj / "p.toml").write_text(PIPE)
    # The runs import a frozen copy of the package: every step key includes the code version (a hash of the
    # package's source), so an edit of the working tree during the test would rightly change every key.
    shutil.copytree(REPO / "tenset_curate", tmp_path / "code" / "tenset_curate",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return proj


def test_run_sigkill_resume_is_byte_identical(project, tmp_path):
    rng = random.Random(9)
    log = tmp_path / "run.log"
    # the uninterrupted reference, in the same place as every attempt (the manifests record absolute paths)
    t0 = time.monotonic()
    p = start(project, log)
    t_work = None
    while p.poll() is None:
        if t_work is None and (project / WORKDIR).exists():
            t_work = time.monotonic() - t0
        time.sleep(0.01)
    duration = time.monotonic() - t0
    assert p.returncode == 0, tail(log)
    assert t_work is not None, "the reference run finished before its work directory was seen"
    ref = snapshot(project)
    ref_raw = {rel: (project / rel).read_bytes() for rel in MERGED}
    ref_queries = query_results(project)
    assert ref_queries["convert:0"].splitlines()[1].startswith("2070,14,"), ref_queries["convert:0"]
    # records, workloads and networks (the collector's workloads.json) of the dataset and of its pruned copy, the split
    assert len([k for k in ref if k.endswith(".parquet")]) == 7 and f"{WORKDIR}/train/gbdt-pruned/model.txt" in ref
    assert not temp_files(project)
    clean(project)

    window = duration - t_work
    delays = [t_work + (i + rng.random()) / N_KILLS * window for i in range(N_KILLS)]
    phases: collections.Counter = collections.Counter()
    kills = attempt = finished_first = 0
    leftovers: list[str] = []  # asserted last, so one failure does not hide the byte comparisons of the others
    while kills < N_KILLS:
        assert attempt < 3 * N_KILLS, f"only {kills} kills in {attempt} attempts"
        delay = delays[attempt] if attempt < len(delays) else t_work + rng.random() * 0.9 * window
        attempt += 1
        p = start(project, log)
        if kill_after(p, delay, log):
            kills += 1
            phase = phase_at_death(project)
            phases[phase] += 1
            check_visible_while_dead(project, ref, ref_raw)
        else:
            finished_first += 1
        done_at_death = finished_steps(project)
        run_to_end(project, log)  # curate run again
        what = f"attempt {attempt} (killed after {delay:.2f} s, steps finished then: {done_at_death})"
        summary = orjson.loads((project / WORKDIR / "summary.json").read_bytes())
        statuses = {r["step"]: r["status"] for r in summary["steps"]}
        assert statuses == {s: "skipped" if s in done_at_death else "ran" for s in STEPS}, f"{what}: {statuses}"
        assert_same(snapshot(project), ref, what)
        assert query_results(project) == ref_queries, f"{what}: DuckDB query results differ"
        left = temp_files(project)
        if left:
            leftovers.append(f"{what}: {left}")
        clean(project)
    print(f"\ncurate run kill test: duration {duration:.2f} s (work dir after {t_work:.2f} s), {kills} kills in "
          f"{attempt} attempts ({finished_first} finished first); phases at death: {dict(phases)}")
    assert kills >= N_KILLS
    assert len([ph for ph in phases if ph.startswith("in ")]) >= 2, f"kills did not land inside steps: {phases}"
    assert not leftovers, "temporary files a killed run left were never removed by the resumed run:\n" + \
        "\n".join(leftovers)
