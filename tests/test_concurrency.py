"""Concurrent use of one dataset directory: the writer lock, waiting writers, and readers during a write.

- Two processes converting into the same output: the second fails at once with ``LockedError`` naming the holder
  (its pid), and changes nothing; with ``wait=True`` it waits for the lock and then completes. The holder is made
  to hold the lock for a known time through ``convert``'s ``log`` callback, which runs inside the lock (no timing
  guesswork).
- Two writers started together with ``wait=True`` on different inputs: both complete, the dataset is the union and
  is byte-identical to a single run over all inputs (manifest consistent, every shard readable, no orphans).
- Readers never take the lock: DuckDB querying ``read_parquet('<out>/records/*/*.parquet')`` in a loop, and
  ``tenset_curate.catalog.run_sql`` when that module exists, keep working (no error, never a partial file, the
  row count never goes down) while a writer adds inputs; ``run_sql`` warns (``DatasetBeingWritten``) while the
  writer holds the dataset, and not after.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import duckdb
import orjson
import pyarrow.parquet as pq
import pytest

from tenset_curate.convert import convert
from tenset_curate.storage import DatasetBeingWritten, LockedError

from _outputs import assert_same_content  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("TENSET_CURATE_REALDATA", REPO.parent / "shared" / "realdata"))
K80 = REAL / "ansor" / "roller-k80"

pytestmark = pytest.mark.skipif(not K80.is_dir(), reason=f"real logs not found under {REAL}")

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}

# A convert that holds the lock for HOLD seconds after it took it: ``log`` is first called inside the lock.
HOLDER_CODE = (
    "import json, sys, time\n"
    "from tenset_curate.convert import convert\n"
    "hold = float(sys.argv[3])\n"
    "def log(msg, _done=[]):\n"
    "    if not _done:\n"
    "        _done.append(1)\n"
    "        print('LOCKED', flush=True)\n"
    "        time.sleep(hold)\n"
    "s = convert(json.loads(sys.argv[1]), sys.argv[2], log=log, wait=len(sys.argv) > 4)\n"
    "print(json.dumps({'converted': s['inputs_converted'], 'errors': s['errors']}), flush=True)\n"
)


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("conc-in") / "k80"
    d.mkdir()
    for f in sorted(K80.rglob("*.json.gz"))[:12]:
        shutil.copyfile(f, d / f.name)
    return d


def subset(logs: Path, dest: Path, names: list[str]) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        if not (dest / n).exists():
            os.link(logs / n, dest / n)
    return dest


def start_holder(inputs: list[str], out: Path, hold: float, wait: bool = False) -> subprocess.Popen:
    args = [sys.executable, "-c", HOLDER_CODE, json.dumps(inputs), str(out), str(hold)] + (["wait"] if wait else [])
    p = subprocess.Popen(args, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()  # blocks until the holder has the lock
    assert line.strip() == "LOCKED", (line, p.stderr.read() if p.poll() is not None else "")
    return p


def finish(p: subprocess.Popen) -> dict:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def files_snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def assert_consistent(out: Path) -> dict:
    """The manifest names exactly the shards on disk, each readable, with the rows the manifest says."""
    man = orjson.loads((out / "manifest.json").read_bytes())
    named = {rel for e in man["inputs"].values() for rel in e["outputs"]}
    on_disk = {p.relative_to(out).as_posix() for sub in ("records", "quarantine", "workloads", "networks")
               for p in (out / sub).rglob("*.parquet")} if out.exists() else set()
    assert named == on_disk, f"orphans {sorted(on_disk - named)}, missing {sorted(named - on_disk)}"
    left = [p.name for p in out.rglob("*") if ".tmp-" in p.name]
    assert not left, left
    rows = 0
    for rel in named:
        t = pq.read_table(out / rel)
        if rel.startswith("records/"):
            rows += t.num_rows
    for e in man["inputs"].values():
        assert e["rows"] + e["quarantined"] + e["comments"] == e["lines"]
    assert rows == sum(e["rows"] for e in man["inputs"].values())
    return man


def test_second_writer_fails_naming_the_holder(logs, tmp_path):
    names = sorted(os.listdir(logs))
    a = subset(logs, tmp_path / "a" / "k80", names[:4])
    out = tmp_path / "ds"
    convert([a], out)  # an existing dataset
    before = files_snapshot(out)
    more = subset(logs, tmp_path / "b" / "k80", names[4:6])
    holder = start_holder([str(a), str(more)], out, hold=2.5)
    try:
        t0 = time.monotonic()
        with pytest.raises(LockedError) as ei:
            convert([str(more)], out)
        assert holder.poll() is None, "the holder finished first: the refusal was not tested"
        assert time.monotonic() - t0 < 2.5, "the second writer should fail at once, not wait"
        msg = str(ei.value)
        assert str(out) in msg and f'"pid": {holder.pid}' in msg, msg
        assert "--wait" in msg or "wait" in msg
        assert files_snapshot(out) == before, "the refused writer changed the dataset"
    finally:
        res = finish(holder)
    assert res["converted"] == 2 and not res["errors"]
    man = assert_consistent(out)
    assert len(man["inputs"]) == 6


def test_bug_b5_refused_writer_erases_lock_holder(logs, tmp_path):
    """B5 (fixed): a refused writer used to truncate ``.lock`` in dataset_lock's ``finally``, erasing the holder's
    identity, so the next contender was told "unknown process". Two refused writers in a row: both name the holder."""
    names = sorted(os.listdir(logs))
    a = subset(logs, tmp_path / "a" / "k80", names[:2])
    out = tmp_path / "ds"
    holder = start_holder([str(a)], out, hold=3.0)
    try:
        with pytest.raises(LockedError):
            convert([str(a)], out)
        with pytest.raises(LockedError) as e2:
            convert([str(a)], out)
        lock_text = (out / ".lock").read_text()
    finally:
        finish(holder)
    assert f'"pid": {holder.pid}' in lock_text, f".lock now holds {lock_text!r}"
    assert f'"pid": {holder.pid}' in str(e2.value), str(e2.value)


def test_waiting_writer_proceeds_after_the_holder(logs, tmp_path):
    names = sorted(os.listdir(logs))
    a = subset(logs, tmp_path / "a" / "k80", names[:3])
    b = subset(logs, tmp_path / "b" / "k80", names[3:6])
    out = tmp_path / "ds"
    holder = start_holder([str(a)], out, hold=2.0)
    t0 = time.monotonic()
    s = convert([str(a), str(b)], out, wait=True)
    waited = time.monotonic() - t0
    res = finish(holder)
    assert waited >= 1.0, f"returned after {waited:.2f} s: did not wait for the holder"
    assert res["converted"] == 3 and not res["errors"]
    assert s["inputs_converted"] == 3 and s["inputs_unchanged"] == 3, s  # a's were done by the holder
    assert_consistent(out)
    ref = tmp_path / "ref"  # the same two runs, one after the other
    convert([str(a)], ref)
    convert([str(a), str(b)], ref)
    assert files_snapshot(out).keys() == files_snapshot(ref).keys()
    for rel, data in files_snapshot(ref).items():
        if rel.endswith(".parquet") or rel == "manifest.json":
            assert files_snapshot(out)[rel] == data, rel
    clean = tmp_path / "clean"  # and the content of one run over both
    convert([str(a), str(b)], clean)
    assert_same_content(out, clean, "waiting writer vs one clean run")


def test_two_waiting_writers_make_the_union(logs, tmp_path):
    names = sorted(os.listdir(logs))
    a = subset(logs, tmp_path / "a" / "k80", names[:4])
    b = subset(logs, tmp_path / "b" / "k80", names[4:8])
    out = tmp_path / "ds"
    code = ("import json, sys\nfrom tenset_curate.convert import convert\n"
            "s = convert(json.loads(sys.argv[1]), sys.argv[2], wait=True, workers=int(sys.argv[3]))\n"
            "print(json.dumps({'converted': s['inputs_converted'], 'errors': s['errors']}))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, json.dumps([str(x)]), str(out), w], cwd=REPO, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for x, w in ((a, "1"), (b, "2"))]
    results = [finish(p) for p in procs]
    assert [r["converted"] for r in results] == [4, 4] and not any(r["errors"] for r in results)
    man = assert_consistent(out)
    assert len(man["inputs"]) == 8
    ref = tmp_path / "ref"  # whichever writer went first, the content is the union's
    convert([str(a), str(b)], ref)
    assert_same_content(out, ref, "two waiting writers vs one run over both")


def count_rows(out: Path) -> int:
    con = duckdb.connect()
    try:
        return con.execute(f"SELECT count(*) FROM read_parquet('{out}/records/*/*.parquet')").fetchone()[0]
    finally:
        con.close()


def test_readers_keep_working_during_a_write(logs, tmp_path):
    names = sorted(os.listdir(logs))
    seed = subset(logs, tmp_path / "seed" / "k80", names[:2])
    out = tmp_path / "ds"
    convert([seed], out)
    initial = count_rows(out)
    try:
        from tenset_curate import catalog
    except ImportError:
        catalog = None
    grow = subset(logs, tmp_path / "grow" / "k80", names)
    ms = tmp_path / "ms" / "mlc-llm-vicuna-metal"
    ms.mkdir(parents=True)
    for f in (REAL / "metaschedule" / "mlc-llm-vicuna-metal").iterdir():
        shutil.copyfile(f, ms / f.name)
    stop = threading.Event()
    seen: dict = {"duckdb": [], "run_sql": [], "errors": [], "warned": []}

    def read_loop():
        con = duckdb.connect()
        while not stop.is_set():
            try:
                n = con.execute(f"SELECT count(*), count(DISTINCT record_id) FROM "
                                f"read_parquet('{out}/records/*/*.parquet')").fetchone()
                seen["duckdb"].append(n[0])
                if catalog is not None:
                    with warnings.catch_warnings(record=True) as w:  # only this thread warns while the test waits
                        warnings.simplefilter("always", DatasetBeingWritten)
                        t = catalog.run_sql(out, "SELECT count(*) AS n FROM records", fmt="arrow")
                    seen["run_sql"].append(t.column("n")[0].as_py())
                    seen["warned"].append(any(issubclass(x.category, DatasetBeingWritten) for x in w))
            except Exception as e:  # noqa: BLE001 - every failure is a test failure, reported below
                seen["errors"].append(f"{type(e).__name__}: {e}")
            time.sleep(0.01)

    t = threading.Thread(target=read_loop, daemon=True)
    t.start()
    try:
        writer = subprocess.run([sys.executable, "-c",
                                 "import json, sys\nfrom tenset_curate.convert import convert\n"
                                 "convert(json.loads(sys.argv[1]), sys.argv[2], workers=2)\n",
                                 json.dumps([str(seed), str(grow), str(ms)]), str(out)],
                                cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
        time.sleep(0.3)  # a few reads after the writer finished
    finally:
        stop.set()
        t.join(timeout=60)
    assert writer.returncode == 0, writer.stderr[-2000:]
    final = count_rows(out)
    print(f"\nreads during the write: duckdb {len(seen['duckdb'])}, run_sql {len(seen['run_sql'])}, "
          f"rows {initial} -> {final}")
    assert not seen["errors"], seen["errors"][:5]
    counts = seen["duckdb"]
    assert len(counts) >= 10, "too few reads overlapped the write"
    assert counts == sorted(counts), "the row count went down during the write"
    assert counts[0] >= initial and counts[-1] == final > initial
    assert len(set(counts)) >= 3, f"no read saw the dataset mid-write: {sorted(set(counts))}"
    if catalog is not None:
        assert seen["run_sql"] and seen["run_sql"][-1] == final
        assert seen["run_sql"] == sorted(seen["run_sql"])
        # the reads during the write were warned that they may see a state between two runs; the last, after it, not
        assert any(seen["warned"]) and not seen["warned"][-1]
    assert_consistent(out)
