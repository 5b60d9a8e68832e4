"""Crash safety: SIGKILL ``convert`` and ``prune`` at random points, resume, compare with an uninterrupted run.

What is checked:

- ``convert`` on real inputs (fast default: 8 roller-k80 logs + the mlc-llm-vicuna-metal MetaSchedule database;
  ``slow``: 40 roller-k80 logs + the bennu-a100-resnet34 database, 20,089 trials) runs in a subprocess (in its own
  process group, so a ``workers=2`` pool dies with it) and is SIGKILLed after a random delay in
  [0, measured uninterrupted duration] (stratified: one delay per slice of the duration), at least 20 times,
  alternating workers=1 and workers=2. While it is dead, every visible ``*.parquet`` must open with pyarrow and be
  byte-identical to the reference shard of the same name (shards are named by content, so a visible one must be
  complete), ``manifest.json`` must parse and each input entry in it must equal the reference's entry and name only
  existing shards. Then ``convert`` is rerun to completion and all Parquet shards plus ``manifest.json`` (minus
  timing fields) must be byte-identical to the uninterrupted reference; no temporary file may be left.
- ``prune`` (method ``random``, a 3-log dataset) the same way, >= 20 kill points; the pruned shards,
  ``manifest.json`` and ``prune.json`` (minus ``seconds``) must equal a reference prune.
- A read-only dataset directory makes ``convert`` raise ``OutputError`` naming the path, leaving every earlier
  output byte-identical (and the dataset usable again once writable). Root ignores permission bits, so as root the
  converting subprocess runs under ``setpriv --bounding-set=-dac_override,-dac_read_search,-fowner``: uid 0
  without those capabilities is bound by the mode bits, so ``chmod 0o555`` really makes the directory read-only
  (the test first proves that a write there fails, and skips if it cannot). A path where a file stands instead of
  the output directory is covered too (works for any user).
- Determinism: ``workers=1`` and ``workers=2`` produce byte-identical shards and manifests.

Slow tests run only when selected explicitly (``-m slow``) or with ``TENSET_CURATE_SLOW=1``.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from tenset_curate.convert import convert
from tenset_curate.storage import OutputError

from _outputs import TIMING_KEYS, assert_same_content, strip_timing  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("TENSET_CURATE_REALDATA", REPO.parent / "shared" / "realdata"))
K80 = REAL / "ansor" / "roller-k80"

pytestmark = pytest.mark.skipif(not K80.is_dir(), reason=f"real logs not found under {REAL}")

N_KILLS = 20
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}

CONVERT_CODE = (
    "import json, sys\n"
    "from tenset_curate.convert import convert\n"
    "convert(json.loads(sys.argv[1]), sys.argv[2], workers=int(sys.argv[3]))\n"
)
PRUNE_CODE = (
    "import sys\n"
    "from tenset_curate.prune import prune\n"
    "prune(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5]))\n"
)


def slow_selected(config) -> bool:
    expr = config.getoption("-m") or ""
    return os.environ.get("TENSET_CURATE_SLOW") == "1" or ("slow" in expr and "not slow" not in expr)


@pytest.fixture
def run_slow(request):
    if not slow_selected(request.config):
        pytest.skip("slow: select with -m slow or TENSET_CURATE_SLOW=1")


# ----------------------------------------------------------------------------------------------------------------
# Inputs and helpers


def _copy_inputs(dest: Path, n_k80: int, ms_db: str) -> list[str]:
    """Copies (plain copyfile: the shared files are read-only) of n roller-k80 logs and one MetaSchedule db."""
    hw = dest / "k80"
    hw.mkdir(parents=True)
    for f in sorted(K80.rglob("*.json.gz"))[:n_k80]:
        shutil.copyfile(f, hw / f.name)
    ms = dest / ms_db
    ms.mkdir()
    for f in (REAL / "metaschedule" / ms_db).iterdir():
        shutil.copyfile(f, ms / f.name)
    return [str(hw), str(ms)]


@pytest.fixture(scope="module")
def small_inputs(tmp_path_factory) -> list[str]:
    return _copy_inputs(tmp_path_factory.mktemp("crash-in"), 8, "mlc-llm-vicuna-metal")


def norm_json(path: Path) -> bytes:
    return orjson.dumps(strip_timing(orjson.loads(path.read_bytes())), option=orjson.OPT_SORT_KEYS)


def snapshot(out: Path, json_files=("manifest.json",)) -> dict[str, bytes]:
    """Every Parquet file (bytes) and the named JSON files (minus timing fields), by relative path."""
    snap = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}
    for name in json_files:
        if (out / name).exists():
            snap[name] = norm_json(out / name)
    return snap


def assert_same(snap: dict, ref: dict, what: str) -> None:
    assert sorted(snap) == sorted(ref), f"{what}: files differ: extra {sorted(set(snap) - set(ref))}, " \
                                        f"missing {sorted(set(ref) - set(snap))}"
    diff = [k for k in ref if snap[k] != ref[k]]
    assert not diff, f"{what}: not byte-identical to the uninterrupted run: {diff}"


def no_temp_files(out: Path) -> None:
    left = [p.relative_to(out).as_posix() for p in out.rglob("*") if ".tmp-" in p.name]
    assert not left, f"temporary files left behind: {left}"


def start(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, env=ENV, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run_to_end(code: str, *args: str, timeout: float = 600) -> float:
    t0 = time.monotonic()
    p = start(code, *args)
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err.decode()[-2000:]
    return time.monotonic() - t0


def kill_after(p: subprocess.Popen, delay: float) -> bool:
    """SIGKILL the whole process group after ``delay`` s; True when the process was still running."""
    try:
        p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
    if p.poll() is not None:  # finished (or failed) on its own
        _, err = p.communicate()
        assert p.returncode == 0, err.decode()[-2000:]
        return False
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:  # exited in between
        pass
    _, err = p.communicate()
    assert p.returncode in (0, -signal.SIGKILL), err.decode()[-2000:]
    return p.returncode == -signal.SIGKILL


def check_visible_while_dead(out: Path, ref: dict, ref_manifest: dict | None) -> None:
    """A killed run may have written some outputs; whatever is visible under a final name must be complete."""
    for p in out.rglob("*.parquet"):
        rel = p.relative_to(out).as_posix()
        if any(".tmp-" in part for part in p.relative_to(out).parts):
            continue  # under a temporary name or inside a staging folder (prune's): not visible to readers
        pq.read_table(p)  # opens and decodes
        assert rel in ref, f"{rel}: a shard the uninterrupted run does not have"
        assert p.read_bytes() == ref[rel], f"{rel}: visible but not the complete shard"
    m = out / "manifest.json"
    if m.exists():
        man = orjson.loads(m.read_bytes())  # parses
        if ref_manifest is not None:
            for label, entry in man.get("inputs", {}).items():
                assert strip_timing(entry) == strip_timing(ref_manifest["inputs"][label]), label
                for rel in entry["outputs"]:
                    assert (out / rel).exists(), f"manifest names {rel}, which does not exist"


def kill_points(n: int, duration: float, rng: random.Random) -> list[float]:
    """Stratified random delays covering [0, duration]: one uniform draw in each of n equal slices."""
    return [(i + rng.random()) / n * duration for i in range(n)]


def _kill_and_resume(base: Path, n_kills: int, launch, check_dead, resume) -> dict:
    """Attempts until ``n_kills`` runs were SIGKILLed: ``launch(attempt, out)`` starts a run into ``out`` and returns
    (process, delay in s, description); a killed run's ``out`` goes through ``check_dead``; every attempt then
    ``resume(out, attempt, description)``s to completion, leaves no temporary file, and ``out`` is removed."""
    stats = {"killed": 0, "finished_first": 0, "visible_shards_max": 0}
    attempt = 0
    while stats["killed"] < n_kills:
        assert attempt < 3 * n_kills, f"only {stats['killed']} kills in {attempt} attempts"
        out = base / f"kill{attempt}"
        p, delay, what = launch(attempt, out)
        killed = kill_after(p, delay)
        attempt += 1
        if killed:
            stats["killed"] += 1
            if out.exists():
                check_dead(out)
                stats["visible_shards_max"] = max(stats["visible_shards_max"], len(list(out.rglob("*.parquet"))))
        else:
            stats["finished_first"] += 1
        resume(out, attempt, what)
        no_temp_files(out)
        shutil.rmtree(out)
    return stats


# ----------------------------------------------------------------------------------------------------------------
# convert


def _convert_kill_test(inputs: list[str], base: Path, n_kills: int, seed: int) -> dict:
    rng = random.Random(seed)
    args = json.dumps(inputs)
    ref_dir = base / "ref"
    d1 = run_to_end(CONVERT_CODE, args, str(ref_dir), "1")
    ref = snapshot(ref_dir)
    ref_manifest = orjson.loads((ref_dir / "manifest.json").read_bytes())
    ref2_dir = base / "ref2"
    d2 = run_to_end(CONVERT_CODE, args, str(ref2_dir), "2")
    assert_same(snapshot(ref2_dir), ref, "workers=2 reference")
    shutil.rmtree(ref2_dir)
    durations = {1: d1, 2: d2}
    delays = kill_points(n_kills, 1.0, rng)

    def launch(attempt: int, out: Path):
        workers = 1 + attempt % 2
        frac = delays[attempt] if attempt < len(delays) else rng.random() * 0.9
        p = start(CONVERT_CODE, args, str(out), str(workers))
        return p, frac * durations[workers], f"workers={workers}, killed after {frac:.2f} of the run"

    def resume(out: Path, attempt: int, what: str) -> None:
        s = convert(inputs, out, workers=1)  # resume to completion
        assert s["totals"]["balanced"] and not s["errors"], s
        assert_same(snapshot(out), ref, f"attempt {attempt} ({what})")

    stats = _kill_and_resume(base, n_kills, launch, lambda out: check_visible_while_dead(out, ref, ref_manifest),
                             resume)
    stats["durations"] = {k: round(v, 2) for k, v in durations.items()}
    return stats


def test_convert_sigkill_resume_is_byte_identical(small_inputs, tmp_path):
    stats = _convert_kill_test(small_inputs, tmp_path, N_KILLS, seed=1)
    print(f"\nconvert kill test: {stats}")
    assert stats["killed"] >= N_KILLS
    assert stats["visible_shards_max"] > 0, "no kill landed after the first shard: kill points too early"


@pytest.mark.slow
def test_convert_sigkill_resume_is_byte_identical_moderate(run_slow, tmp_path):
    inputs = _copy_inputs(tmp_path / "in", 40, "bennu-a100-resnet34")
    stats = _convert_kill_test(inputs, tmp_path / "runs", N_KILLS, seed=2)
    print(f"\nconvert kill test (40 logs + resnet34): {stats}")
    assert stats["killed"] >= N_KILLS


def test_workers_1_and_2_are_byte_identical(small_inputs, tmp_path):
    gb = 3 << 20  # ~2 logs a group: several groups for the two workers to share
    s1 = convert(small_inputs, tmp_path / "w1", workers=1, group_bytes=gb)
    s2 = convert(small_inputs, tmp_path / "w2", workers=2, group_bytes=gb)
    assert s1["totals"] == s2["totals"]
    a, b = snapshot(tmp_path / "w1"), snapshot(tmp_path / "w2")
    assert len([k for k in a if k.startswith("records/")]) >= 4
    assert_same(b, a, "workers=2 vs workers=1")
    # and a rerun on unchanged inputs is a no-op that changes nothing
    s3 = convert(small_inputs, tmp_path / "w1", workers=2, group_bytes=gb)
    assert s3["nothing_to_do"] and s3["inputs_unchanged"] == s1["inputs_seen"]
    assert_same(snapshot(tmp_path / "w1"), a, "no-op rerun")


# ----------------------------------------------------------------------------------------------------------------
# prune


@pytest.fixture(scope="module")
def prune_dataset(k80_three_logs_dataset) -> Path:
    return k80_three_logs_dataset


PRUNE_JSON = ("manifest.json", "prune.json")


def _prune_kill_test(ds: Path, base: Path, method: str, n_kills: int, seed: int) -> dict:
    from tenset_curate.prune import prune

    rng = random.Random(seed)
    ref_dir = base / "ref"
    duration = run_to_end(PRUNE_CODE, str(ds), str(ref_dir), "0.5", method, "0")
    ref = snapshot(ref_dir, PRUNE_JSON)
    assert any(k.endswith(".parquet") for k in ref)
    delays = kill_points(n_kills, duration, rng)

    def launch(attempt: int, out: Path):
        delay = delays[attempt] if attempt < len(delays) else rng.random() * 0.9 * duration
        return start(PRUNE_CODE, str(ds), str(out), "0.5", method, "0"), delay, f"killed after {delay:.2f} s"

    def check_dead(out: Path) -> None:
        check_visible_while_dead(out, ref, None)
        for name in PRUNE_JSON:
            if (out / name).exists():
                orjson.loads((out / name).read_bytes())

    def resume(out: Path, attempt: int, what: str) -> None:
        prune(ds, out, 0.5, method, 0)  # resume into the same directory
        assert_same(snapshot(out, PRUNE_JSON), ref, f"prune attempt {attempt} ({what})")

    stats = {"duration": round(duration, 2), **_kill_and_resume(base, n_kills, launch, check_dead, resume)}
    return stats


def test_prune_sigkill_rerun_is_byte_identical(prune_dataset, tmp_path):
    stats = _prune_kill_test(prune_dataset, tmp_path, "random", N_KILLS, seed=3)
    print(f"\nprune kill test: {stats}")
    assert stats["killed"] >= N_KILLS


@pytest.mark.slow
def test_prune_cluster_sigkill_rerun_is_byte_identical(run_slow, prune_dataset, tmp_path):
    stats = _prune_kill_test(prune_dataset, tmp_path, "cluster", N_KILLS, seed=4)
    print(f"\nprune (cluster) kill test: {stats}")
    assert stats["killed"] >= N_KILLS


# ----------------------------------------------------------------------------------------------------------------
# read-only output


CATCH_CODE = (
    "import json, sys\n"
    "from tenset_curate.convert import convert\n"
    "from tenset_curate.storage import OutputError\n"
    "try:\n"
    "    s = convert(json.loads(sys.argv[1]), sys.argv[2])\n"
    "    print(json.dumps({'raised': None, 'errors': s['errors']}))\n"
    "except Exception as e:\n"
    "    print(json.dumps({'raised': type(e).__name__, 'output_error': isinstance(e, OutputError), "
    "'msg': str(e)}))\n"
)
PROBE_CODE = (
    "import sys\n"
    "try:\n"
    "    open(sys.argv[1], 'w').close()\n"
    "    print('writable')\n"
    "except PermissionError:\n"
    "    print('read-only')\n"
)


def unprivileged_prefix() -> list[str] | None:
    """How to run a subprocess that the permission bits bind. None: not possible here."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner,-linux_immutable"]


def run_bound(prefix: list[str], code: str, *args: str) -> str:
    p = subprocess.run(prefix + [sys.executable, "-c", code, *args], cwd=REPO, env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip().splitlines()[-1]


def chmod_dirs(root: Path, mode: int) -> None:
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        d.chmod(mode)


def all_outputs(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("scope,new_inputs", [("whole-tree", True), ("dataset-dir", True), ("whole-tree", False)],
                         ids=["read-only-tree+new-inputs", "read-only-top-dir+new-inputs",
                              "read-only-tree+unchanged-inputs"])
def test_read_only_output_dir_raises_output_error(small_inputs, tmp_path, scope, new_inputs):
    prefix = unprivileged_prefix()
    if prefix is None:
        pytest.skip("running as root without setpriv: cannot make a directory read-only for this process")
    k80, ms = small_inputs
    first = tmp_path / "in" / "k80"
    first.mkdir(parents=True)
    files = sorted(Path(k80).iterdir())
    for f in files[:3]:
        shutil.copyfile(f, first / f.name)
    ds = tmp_path / "ds"
    convert([first], ds)
    before = all_outputs(ds)
    if new_inputs:
        for f in files[3:5]:
            shutil.copyfile(f, first / f.name)
    try:
        if scope == "dataset-dir":
            ds.chmod(0o555)
        else:
            chmod_dirs(ds, 0o555)
        if run_bound(prefix, PROBE_CODE, str(ds / "probe")) != "read-only":
            pytest.skip("chmod 0o555 does not stop this process from writing (file system or capabilities)")
        res = json.loads(run_bound(prefix, CATCH_CODE, json.dumps([str(first)]), str(ds)))
    finally:
        chmod_dirs(ds, 0o755)
    print(f"\n{scope}, new inputs {new_inputs}: {res}")
    assert res["raised"] == "OutputError" and res["output_error"], res
    assert str(ds) in res["msg"], f"the message does not name the dataset path: {res['msg']}"
    after = all_outputs(ds)
    for rel, data in before.items():
        assert after.get(rel) == data, f"{rel}: an earlier output was changed or removed"
    extra = sorted(set(after) - set(before))
    assert not [x for x in extra if ".tmp-" in x], extra
    for rel in extra:  # a shard committed in a still-writable subfolder before the manifest failed: complete
        assert rel.endswith(".parquet"), extra
        pq.read_table(ds / rel)
    # writable again: the dataset recovers to what a clean run produces (the same rows and counts; the inputs
    # added later form a group of their own, so the shard layout follows the history)
    s = convert([first], ds)
    assert not s["errors"] and s["totals"]["balanced"]
    ref = tmp_path / "ref"
    convert([first], ref)
    assert_same_content(ds, ref, "after recovery")
    if not new_inputs:
        assert_same(snapshot(ds), snapshot(ref), "after recovery")


def test_output_path_is_a_file(small_inputs, tmp_path):
    """A file where the dataset directory should be: OutputError naming the path; the file is untouched."""
    target = tmp_path / "ds"
    target.write_bytes(b"not a directory")
    with pytest.raises(OutputError) as ei:
        convert(small_inputs[:1], target)
    assert str(target) in str(ei.value)
    assert target.read_bytes() == b"not a directory"
    inside = target / "sub"
    with pytest.raises(OutputError) as ei:
        convert(small_inputs[:1], inside)
    assert str(inside) in str(ei.value)
