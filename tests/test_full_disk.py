"""A full output directory: ``convert`` and ``prune`` give a clear error and leave earlier outputs intact.

Two real mechanisms make the kernel refuse writes (no mocks, no patched ``open``):

- ``tmpfs``: a real tmpfs of 8 MiB mounted over a directory of the test (``mount -t tmpfs -o size=8m``; needs root,
  skipped otherwise), then filled with a filler file until ``write(2)`` fails with ENOSPC, then shrunk again by a
  chosen number of bytes. tmpfs limits root too (it has no reserved blocks), and ENOSPC comes back from ``write``
  mid-file exactly as on a full ext4/xfs disk.
- ``rlimit``: the command runs in a child with ``RLIMIT_FSIZE`` set and SIGXFSZ ignored (ignored dispositions
  survive ``execve``), so any write past the limit fails with EFBIG. This works for any user and goes through the
  same ``write(2)`` path; it limits each file's size rather than the directory's total, which is why the levels
  below are sized per file for it.

Each command is run at three levels, sized from the real outputs of a reference run:

- ``no-space``: nothing can be written (tmpfs: 0 bytes free; rlimit: 0 bytes), so even the lock file's holder line
  is refused;
- ``mid-shard``: half of the smallest new Parquet shard fits, so a shard write fails part way through;
- ``shards-fit``: the new shards fit but the DuckDB catalog (the last and largest file) does not.

What is asserted (the command runs in a subprocess that reports the exception it got):

- a clear error: ``OutputError`` whose message names the output path and says ENOSPC / EFBIG (``convert`` may
  instead report the failed inputs in its summary's ``errors``, which the CLI prints with exit status 1; each such
  error must then name the path and the errno);
- no temporary file is left and no partial file is visible under a final name: every Parquet file opens;
- earlier outputs intact: every file of the earlier run is byte-identical afterwards. The one exception is
  ``convert``'s ``manifest.json`` when new inputs' shards were committed before the disk filled up: it may gain
  their entries (as after a kill), while each earlier entry stays the same and every shard it names exists and is
  the reference's. New shards may only be complete ones (byte-identical to a clean run's);
- recovery: once space is back, the same command completes and the directory equals a clean run's.
"""
from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from tenset_curate.convert import convert
from tenset_curate.prune import prune

from _outputs import TIMING_KEYS, assert_same_content, strip_timing  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("TENSET_CURATE_REALDATA", REPO.parent / "shared" / "realdata"))
K80 = REAL / "ansor" / "roller-k80"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}

pytestmark = pytest.mark.skipif(not K80.is_dir(), reason=f"real logs not found under {REAL}")

TMPFS_SIZE = 8 << 20
LEVELS = ["no-space", "mid-shard", "shards-fit"]
ERRNO_WORDS = {"tmpfs": ("ENOSPC", "no space left"), "rlimit": ("EFBIG", "file too large")}

CHILD = (
    "import json, sys\n"
    "from tenset_curate.storage import OutputError\n"
    "cmd, args = sys.argv[1], json.loads(sys.argv[2])\n"
    "try:\n"
    "    if cmd == 'convert':\n"
    "        from tenset_curate.convert import convert\n"
    "        s = convert(*args)\n"
    "        res = {'raised': None, 'errors': s['errors']}\n"
    "    else:\n"
    "        from tenset_curate.prune import prune\n"
    "        prune(*args)\n"
    "        res = {'raised': None, 'errors': {}}\n"
    "except Exception as e:\n"
    "    res = {'raised': type(e).__name__, 'output_error': isinstance(e, OutputError), 'msg': str(e)}\n"
    "print(json.dumps(res))\n"
)


# ----------------------------------------------------------------------------------------------------------------
# the two mechanisms


class Target:
    """A directory whose writes the kernel refuses beyond a budget set with ``limit(nbytes)``."""

    def __init__(self, mech: str, root: Path):
        self.mech, self.root, self.budget = mech, root, None

    def limit(self, nbytes: int) -> None:
        self.budget = nbytes
        if self.mech == "tmpfs":
            filler = self.root / "filler"
            with open(filler, "wb", buffering=0) as fh:
                chunk = b"\0" * 65536
                while True:
                    try:
                        fh.write(chunk)
                    except OSError as e:
                        assert e.errno == errno.ENOSPC, e
                        if len(chunk) == 1:
                            break
                        chunk = chunk[: len(chunk) // 2]
            probe = self.root / "probe"
            with pytest.raises(OSError) as ei:  # really full
                with open(probe, "wb", buffering=0) as fh:
                    fh.write(b"x" * 4096)
            assert ei.value.errno == errno.ENOSPC
            probe.unlink(missing_ok=True)
            os.truncate(filler, max(0, filler.stat().st_size - nbytes))

    def unlimit(self) -> None:
        self.budget = None
        if self.mech == "tmpfs":
            (self.root / "filler").unlink(missing_ok=True)

    def preexec(self):
        if self.mech != "rlimit" or self.budget is None:
            return None
        limit = self.budget

        def f():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        return f

    def run(self, cmd: str, *args) -> dict:
        p = subprocess.run([sys.executable, "-c", CHILD, cmd, json.dumps(args, default=str)], cwd=REPO,
                           env=ENV, capture_output=True, text=True, timeout=300, preexec_fn=self.preexec())
        assert p.returncode == 0 and p.stdout.strip(), f"the child died: rc {p.returncode}\n{p.stderr[-3000:]}"
        return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(params=["tmpfs", "rlimit"])
def target(request, tmp_path):
    mech = request.param
    root = tmp_path / "target"
    root.mkdir()
    if mech == "tmpfs":
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root")
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(root)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    yield Target(mech, root)
    if mech == "tmpfs":
        if subprocess.run(["umount", str(root)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(root)], capture_output=True)


# ----------------------------------------------------------------------------------------------------------------
# helpers


def files(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def snapshot(d: Path) -> dict[str, bytes]:
    """Parquet bytes and JSON minus timing fields: what two clean runs share (the catalog records its build time)."""
    snap = {}
    for rel, data in files(d).items():
        if rel.endswith(".parquet"):
            snap[rel] = data
        elif rel.endswith(".json"):
            snap[rel] = orjson.dumps(strip_timing(orjson.loads(data)), option=orjson.OPT_SORT_KEYS)
    return snap


def budget(level: str, mech: str, new_shards: list[int], catalog: int) -> int:
    if level == "no-space":
        return 0
    if level == "mid-shard":
        return min(new_shards) // 2
    # shards-fit: tmpfs counts the directory's total, rlimit each file's size
    b = (sum(new_shards) + 64 * 1024) if mech == "tmpfs" else max(new_shards) + 8 * 1024
    assert b < catalog, f"the catalog ({catalog} B) is not the biggest write; level shards-fit needs a rethink"
    return b


def assert_clear_error(res: dict, path: Path, mech: str) -> None:
    words = ERRNO_WORDS[mech]
    if res["raised"] is not None:
        assert res["raised"] == "OutputError" and res["output_error"], \
            f"not a clear OutputError: {res['raised']}: {res['msg']}"
        msgs = [res["msg"]]
    else:
        assert res["errors"], f"a write was refused but the command reported success: {res}"
        msgs = list(res["errors"].values())
    for m in msgs:
        assert str(path) in m, f"the error does not name {path}: {m}"
        assert any(w.lower() in m.lower() for w in words), f"the error does not say {words[0]}: {m}"


def no_temp_files(d: Path) -> None:
    left = [p.relative_to(d).as_posix() for p in d.rglob("*") if ".tmp" in p.name]
    assert not left, f"temporary files left behind: {left}"


# ----------------------------------------------------------------------------------------------------------------
# convert


@pytest.mark.parametrize("level", LEVELS)
def test_convert_into_a_full_directory(target, level, tmp_path):
    logs = sorted(K80.rglob("*.json.gz"))[:5]
    inp = tmp_path / "in" / "k80"
    inp.mkdir(parents=True)
    for f in logs[:3]:
        shutil.copyfile(f, inp / f.name)
    ds = target.root / "ds"
    s = convert([inp], ds)
    assert not s["errors"]
    before = files(ds)
    for f in logs[3:]:
        shutil.copyfile(f, inp / f.name)
    ref_dir = tmp_path / "ref"  # the same incremental run (three logs, then five), on an ordinary disk
    shutil.copytree(ds, ref_dir)
    convert([inp], ref_dir)
    ref = snapshot(ref_dir)
    ref_manifest = orjson.loads((ref_dir / "manifest.json").read_bytes())
    new_shards = [len(v) for k, v in ref.items() if k.endswith(".parquet") and k not in before]
    assert len(new_shards) == 1  # the two new logs make one group

    target.limit(budget(level, target.mech, new_shards, (ref_dir / "catalog.duckdb").stat().st_size))
    res = target.run("convert", [str(inp)], ds)
    print(f"\nconvert, {target.mech}, {level} (budget {target.budget} B): {res}")
    no_temp_files(ds)
    after = files(ds)
    for rel, data in before.items():
        assert rel in after, f"{rel}: an earlier output was removed"
        if rel == "manifest.json" and after[rel] != data:  # may have gained the entries of committed new shards
            man, old = orjson.loads(after[rel]), orjson.loads(data)
            for label, entry in old["inputs"].items():
                assert strip_timing(man["inputs"][label]) == strip_timing(entry), f"manifest entry {label} changed"
            for label, entry in man["inputs"].items():
                assert strip_timing(entry) == strip_timing(ref_manifest["inputs"][label]), label
                for o in entry["outputs"]:
                    assert o in after, f"the manifest names {o}, which does not exist"
        else:
            assert after[rel] == data, f"{rel}: an earlier output changed"
    for rel in sorted(set(after) - set(before)):
        assert rel.endswith(".parquet"), f"{rel}: a new file that is not a committed shard"
        pq.read_table(ds / rel)
        assert after[rel] == ref[rel], f"{rel}: visible under its final name but not complete"

    target.unlimit()  # space is back: the dataset recovers to exactly what the same run on a roomy disk produces
    s = convert([inp], ds)
    assert not s["errors"] and s["totals"]["balanced"]
    assert snapshot(ds) == ref
    clean = tmp_path / "clean"  # and holds what one clean run over all five logs holds
    convert([inp], clean)
    assert_same_content(ds, clean, "after recovery vs one clean run")
    no_temp_files(ds)
    assert_clear_error(res, ds, target.mech)  # last: so an unclear error does not hide the checks above


# ----------------------------------------------------------------------------------------------------------------
# prune


@pytest.fixture(scope="module")
def prune_source(k80_three_logs_dataset) -> Path:
    return k80_three_logs_dataset


@pytest.mark.parametrize("level", LEVELS)
def test_prune_into_a_full_directory(target, level, prune_source, tmp_path):
    out = target.root / "pruned"
    prune(prune_source, out, 0.5, "random", 0)  # the earlier result
    before = files(out)
    ref_dir = tmp_path / "ref"  # what the new prune writes on an ordinary disk
    prune(prune_source, ref_dir, 0.3, "random", 0)
    new_shards = [len(v) for k, v in files(ref_dir).items() if k.endswith(".parquet")]

    target.limit(budget(level, target.mech, new_shards, (ref_dir / "catalog.duckdb").stat().st_size))
    res = target.run("prune", prune_source, out, 0.3, "random", 0)
    print(f"\nprune, {target.mech}, {level} (budget {target.budget} B): {res}")
    no_temp_files(out)
    after = files(out)
    assert sorted(after) == sorted(before), f"files differ: {sorted(set(after) ^ set(before))}"
    changed = [rel for rel in before if after[rel] != before[rel]]
    assert not changed, f"earlier outputs changed by the failed prune: {changed}"

    target.unlimit()
    prune(prune_source, out, 0.3, "random", 0)
    assert snapshot(out) == snapshot(ref_dir)
    no_temp_files(out)
    assert_clear_error(res, out, target.mech)
