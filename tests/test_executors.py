"""``executors.map_unordered`` with local processes: every item once, the caller working as the last worker, errors
and early closes that neither hang nor lose an item. Real forkserver processes (what ``curate convert --workers``
and ``curate prune --workers`` run on)."""
from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import pytest

from tenset_curate.executors import map_unordered, process_pool


@contextmanager
def watchdog(seconds: int = 60):
    def fire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def work(x):
    time.sleep(0.03)  # 40 items: 1.2 s of work, far longer than a pool process takes to start
    return x, os.getpid()


def fail_on(x):
    if x == 7:
        raise ValueError(f"item {x} is bad")
    return x


def die_on(x):
    if x == 0 and os.environ.get("TC_TEST_PARENT") != str(os.getpid()):
        os._exit(1)  # the pool process dies on the first item it is handed
    time.sleep(0.01)
    return x


def test_every_item_once_and_the_caller_works_too():
    items = list(range(40))
    with watchdog():
        out = list(map_unordered(work, items, workers=2, cost=lambda x: x))
    assert sorted(x for x, _ in out) == items
    pids = {p for _, p in out}
    assert os.getpid() in pids and len(pids) == 2  # this process and one pool process shared the work
    mine = sorted(x for x, p in out if p == os.getpid())
    theirs = sorted(x for x, p in out if p != os.getpid())
    assert mine and theirs
    # every worker takes the biggest item left: the caller starts with one of the biggest, as the pool does, and the
    # smallest are the last done (so the small items even out the finish)
    assert max(mine) >= len(items) - 3 and max(theirs) >= len(items) - 3
    assert max(x for x, _ in out[-4:]) < 8


def test_three_workers_and_a_shared_pool():
    with watchdog(), process_pool("local", 3) as pool:
        a = list(map_unordered(work, range(30), workers=3, pool=pool))
        b = list(map_unordered(work, range(30, 50), workers=3, pool=pool))
    assert sorted(x for x, _ in a) == list(range(30)) and sorted(x for x, _ in b) == list(range(30, 50))
    assert len({p for _, p in a + b}) == 3


@pytest.mark.parametrize("workers", [1, 2])
def test_an_error_in_an_item_is_raised(workers):
    with watchdog(), pytest.raises(ValueError, match="item 7 is bad"):
        list(map_unordered(fail_on, range(20), workers=workers))


def test_closing_early_does_not_hang():
    with watchdog():
        it = map_unordered(work, range(200), workers=2)
        first = next(it)
        it.close()
    assert first[0] in range(200)


def test_a_dead_pool_process_raises_instead_of_hanging(monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    from tenset_curate.executors import WorkerLost

    monkeypatch.setenv("TC_TEST_PARENT", str(os.getpid()))
    with watchdog(), pytest.raises(WorkerLost) as e:
        list(map_unordered(die_on, range(12), workers=2, cost=lambda x: -x))  # item 0 first: the pool's
    assert isinstance(e.value.__cause__, BrokenProcessPool) and "out-of-memory killer" in str(e.value)


def test_an_address_sends_convert_and_prune_to_ray(k80_three_logs_dataset, tmp_path, monkeypatch):
    """``--address`` names a Ray cluster, so it implies ``--executor ray`` for convert and prune as for ``curate
    run`` (prune ran locally and dropped it). Ray itself is stood in for by a recorder that runs the items here: this
    checks where the work is sent, ``tests/test_ray.py`` runs Ray for real."""
    from pathlib import Path

    import tenset_curate.executors as ex
    from tenset_curate.convert import convert
    from tenset_curate.prune import prune

    sent = []

    def ray_tasks(fn, items, workers, address):
        sent.append(address)
        return (fn(it) for it in items)

    monkeypatch.setattr(ex, "require_ray", lambda: None)
    monkeypatch.setattr(ex, "_ray_tasks", ray_tasks)
    s = prune(k80_three_logs_dataset, tmp_path / "p", 0.45, "random", address="auto")
    assert sent == ["auto", "auto"] and s["records_after"] > 0  # pass 1 and pass 2
    logs = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "ansor" / "roller-k80" / "pooling"
    convert(sorted(logs.glob("*.json.gz"))[:2], tmp_path / "c", address="auto")
    assert sent == ["auto"] * 3
    prune(k80_three_logs_dataset, tmp_path / "q", 0.45, "random")  # no address: local, as before
    assert sent == ["auto"] * 3


SLEEPER = """
import sys, time
from tenset_curate.executors import map_unordered
from tenset_curate.storage import dataset_lock

def nap(x):
    time.sleep(120)
    return x

if __name__ == "__main__":
    with dataset_lock(sys.argv[1], what="sleeper"):
        results = map_unordered(nap, range(int(sys.argv[2])), workers=2)
        print("started", flush=True)
        list(results)
"""


def _sleeper(tmp_path, items: int = 4):
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path / "ds"), str(items)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True, env=env)
    assert p.stdout.readline() == b"started\n"
    time.sleep(1.0)  # the pool process is on its item
    return p


def _group_left(pgid: int) -> list[str]:
    """Live (not zombie) processes of a process group."""
    import subprocess

    out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True).stdout.split()
    return [s for s in out if not s.startswith("Z")]


def test_a_command_killed_with_sigkill_leaves_no_pool_process_holding_its_output(tmp_path):
    """Found by the kill audit (session 29): after kill -9 of a --workers 2 command (what the OOM killer does), the
    pool process, the forkserver and the resource tracker lived on for minutes, holding the command's stdout, so
    `curate convert ... | tee log` never finished. A pool process now exits within a second of its command."""
    p = _sleeper(tmp_path)
    os.kill(p.pid, signal.SIGKILL)
    with watchdog(30):
        assert p.stdout.read() == b""  # EOF: every holder of the pipe is gone
    p.wait()
    time.sleep(0.5)
    assert _group_left(p.pid) == []


def test_ctrl_c_stops_the_pool_at_once_releases_the_lock_and_prints_no_worker_traceback(tmp_path):
    """Found by the kill audit (session 29): Ctrl-C (SIGINT to the whole process group) printed a pool process's
    KeyboardInterrupt traceback, and once left the command waiting in the pool's shutdown for good, holding its
    dataset lock. The pool processes now ignore SIGINT and the command stops them instead of waiting."""
    from tenset_curate.storage import writer_of

    p = _sleeper(tmp_path)
    os.killpg(p.pid, signal.SIGINT)
    with watchdog(30):
        _, err = p.communicate()
    assert p.returncode != 0 and b"ForkServerProcess" not in err and err.count(b"Traceback") <= 1, err[-2000:]
    time.sleep(0.5)
    assert _group_left(p.pid) == [] and writer_of(tmp_path / "ds") is None


def test_a_pool_process_killed_mid_item_is_an_error_that_says_what_happened(tmp_path):
    """A pool process killed while on its item (the OOM killer, kill -9 of that process) left the command with
    concurrent.futures' BrokenProcessPool traceback and no word on what to do; it is now ``WorkerLost``, which says
    so, and the command's lock is released."""
    from tenset_curate.storage import writer_of

    p = _sleeper(tmp_path, items=1)  # the one item goes to the pool; this process waits for it
    kids = [int(x) for x in os.popen(f"ps -o pid= -g {p.pid}").read().split() if int(x) != p.pid]
    workers = [k for k in kids if os.popen(f"ps -o args= -p {k}").read().strip() and
               os.popen(f"ps -o ppid= -p {k}").read().strip() != str(p.pid)]
    assert len(workers) == 1, kids  # the forkserver's child: the pool process, on its item
    os.kill(workers[0], signal.SIGKILL)
    with watchdog(30):
        _, err = p.communicate()
    assert p.returncode == 1 and b"WorkerLost: a worker process stopped before it returned its work" in err, err[-2000:]
    assert b'if __name__ == "__main__":' in err  # a script, not the curate command: the usual cause is named
    assert writer_of(tmp_path / "ds") is None


UNGUARDED = """
import sys
from tenset_curate.convert import convert
convert([sys.argv[1]], sys.argv[2], workers=2)
print("converted", flush=True)
"""


def test_a_script_without_the_main_guard_is_told_so(tmp_path):
    """A notebook user's script that calls ``convert(..., workers=2)`` at its top level (found by the metrics audit,
    session 30): every pool process imports the main script, ran that convert again, met the dataset lock its
    parent held and died; the parent failed with BrokenProcessPool after a LockedError about 'another process'. The
    worker now refuses with the reason, and the parent's error names the guard."""
    import subprocess
    import sys
    from pathlib import Path

    from conftest import _REAL as REAL
    from tenset_curate.storage import writer_of

    src = REAL / "ansor" / "roller-k80" / "pooling"
    if not src.is_dir():
        pytest.skip(f"real logs not found under {REAL}")
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with watchdog(120):
        r = subprocess.run([sys.executable, str(script), str(src), str(tmp_path / "ds")], capture_output=True,
                           env=env, cwd=tmp_path)
    assert r.returncode == 1 and b"converted" not in r.stdout
    assert b"convert was called while a worker process was importing the main script" in r.stderr, r.stderr[-3000:]
    assert b"LockedError" not in r.stderr and b"WorkerLost" in r.stderr
    assert writer_of(tmp_path / "ds") is None
    script.write_text("if __name__ == '__main__':\n" + "".join(f"    {x}\n" for x in UNGUARDED.strip().splitlines()))
    with watchdog(120):
        r = subprocess.run([sys.executable, str(script), str(src), str(tmp_path / "ds")], capture_output=True,
                           env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == b"converted\n", r.stderr[-3000:]


def test_the_cli_is_told_apart_from_a_script():
    """The guard hint is for scripts; the ``curate`` command (console script or ``python -m``) is not told it."""
    import subprocess
    import sys

    from tenset_curate.executors import _main_is_the_cli

    assert not _main_is_the_cli()  # pytest's main
    probe = "from tenset_curate.executors import _main_is_the_cli; print(_main_is_the_cli())"
    as_script = subprocess.run([sys.executable, "-c", "import tenset_curate.cli; " + probe], capture_output=True)
    as_console = subprocess.run([sys.executable, "-c", "from tenset_curate.cli import app; " + probe],
                                capture_output=True)
    assert (as_script.stdout, as_console.stdout) == (b"False\n", b"True\n"), (as_script.stderr, as_console.stderr)
