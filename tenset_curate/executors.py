"""Executors: one function mapped over independent work items, on local processes or on Ray tasks.

``map_unordered(fn, items, executor=..., workers=..., address=...)`` yields ``fn(item)`` for every item in
completion order. The callers (``convert``: one item per group of inputs) make results independent of that order
(shards are named by content, the manifest is written with sorted keys), so the output is byte-identical whichever
executor ran it and with however many workers.

- ``local``, ``workers <= 1``: in this process, in the given order (no pickling, no pool).
- ``local``, ``workers > 1``: a ``ProcessPoolExecutor`` of ``workers - 1`` processes (forkserver: safe after the
  parent ran threaded Polars/Arrow code), and this process is the last worker, so no core waits for the pool's
  processes to start and import. Every worker, this process included, takes the biggest item left (longest
  processing time first: the small items are what is left at the end, when they even out the finish). A pool
  process gets its next item when it returns one, never a queued second item that would leave this process idle
  at the end (with one, the two sides of a 2-worker convert of the real logs finished 0.25-0.3 s apart in a 1.5 s
  run). Measured on `curate convert` of the 245 MB of real Ansor logs, 2 cores: ``python benchmarks/convert.py``
  (``w2_vs_w1``, reports/convert.md). Until session 15 this process took the smallest items first, which left a
  full-size group for the end whatever the plan's tail held: with convert's smaller tail groups
  (``convert.plan_groups``) and biggest-first here, the two sides finish within 10 ms and a 2-worker convert takes
  1.55 s instead of 1.62 s (medians of 8 interleaved rounds, 1 worker 2.61 s either way).
- ``ray``: one Ray task per item (``num_cpus=1`` each), biggest first. Without ``address`` a local Ray instance is
  started with ``num_cpus=workers`` (so ``workers`` tasks run at once); with ``address`` (``"auto"``, or
  ``"ray://host:10001"``) it connects to that cluster and uses all its CPUs. A Ray instance that is already
  initialised (``ray.init`` called by the caller) is used as it is. Tasks import ``tenset_curate`` on the workers:
  on a cluster, install the package on every node (the inputs and the output folder must be on a filesystem all
  nodes see, at the same path).

``fn`` must be a module-level function of an importable module (Ray and process pools pickle it by reference).
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterable, Iterator

EXECUTORS = ("local", "ray")
RAY_INSTALL = "pip install 'tenset-curate[ray]'  (or: pip install 'ray==2.60.0')"


class ExecutorError(ValueError):
    pass


MAIN_GUARD = ("a script that runs tenset_curate with workers > 1 must keep its top-level code under "
              "`if __name__ == \"__main__\":`, because every worker process imports the main script")


class WorkerLost(RuntimeError):
    """A pool process stopped without returning its item (killed: the out-of-memory killer, a signal; or it failed
    while it started: most often an unguarded script, ``MAIN_GUARD``). Nothing the command wrote is left half-done
    (writes are atomic); the same command run again, or with one worker, finishes it."""


def refuse_while_importing_main(what: str) -> None:
    """Fail at once, with the reason, when ``what`` is called by a process that is importing the main script to
    become a pool worker (multiprocessing marks that process ``_inheriting``): the script's top-level code is
    running again in the worker, where it would take the dataset lock its parent holds or start a pool of its own,
    and the parent would only see its pool broken."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(f"{what} was called while a worker process was importing the main script: {MAIN_GUARD}")


def require_ray():
    """Import Ray or fail with the command that installs it."""
    try:
        import ray
    except ImportError:
        raise ExecutorError(f"the ray executor needs Ray, which is not installed: {RAY_INSTALL}") from None
    return ray


def resolve_executor(executor: str, address: str | None) -> str:
    """The executor a command runs on: an ``address`` names a Ray cluster, so it implies ``ray`` (``local`` with an
    address dropped the address without a word, where ``curate run --address`` switched to Ray). An unknown name is
    refused here, before the command makes its output folder."""
    if executor not in EXECUTORS:
        raise ExecutorError(f"unknown executor {executor!r} ({' | '.join(EXECUTORS)})")
    return "ray" if address and executor == "local" else executor


def check_executor(executor: str) -> None:
    if executor not in EXECUTORS:
        raise ExecutorError(f"unknown executor {executor!r} ({' | '.join(EXECUTORS)})")
    if executor == "ray":
        require_ray()


def ensure_ray(address: str | None = None, workers: int = 1) -> bool:
    """Initialise Ray unless it already is. Returns True when this call started (or connected) it."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, logging_level="WARNING")
    else:
        ray.init(num_cpus=max(1, int(workers)), include_dashboard=False, logging_level="WARNING")
    return True


def _call_in(cwd: str, fn: Callable, item):
    """Ray task body: run ``fn(item)`` in the driver's working directory when this node has it (relative paths
    then mean the same as in the driver, even if the driver changed directory after Ray started)."""
    if cwd and os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)
    return fn(item)


def map_unordered(fn: Callable, items: Iterable, executor: str = "local", workers: int = 1,
                  address: str | None = None, cost: Callable | None = None, pool=None) -> Iterator:
    """Yield ``fn(item)`` for each item, in completion order. ``cost(item)`` (optional) orders the submission of
    parallel runs, biggest first, which keeps every worker busy to the end. Closing the generator early cancels
    what has not started. ``pool`` (from ``process_pool``) lets several calls share one set of local worker
    processes instead of starting a pool each."""
    check_executor(executor)
    items = list(items)
    if executor == "local" and workers <= 1:
        return (fn(it) for it in items)
    if cost is not None:
        items = sorted(items, key=lambda it: -cost(it))
    if executor == "local":
        return _local_pool(fn, items, workers, pool)
    return _ray_tasks(fn, items, workers, address)


@contextmanager
def process_pool(executor: str, workers: int):
    """A local process pool to pass to several ``map_unordered`` calls (None where none is needed: one worker, or
    Ray); ``workers - 1`` processes, the caller being the last worker. Forkserver, not fork: a forked child inherits
    the locks of the parent's threads (Polars' and Arrow's pools, held by whatever the parent was doing) and can
    deadlock on its first query."""
    if executor != "local" or workers <= 1:
        yield None
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    refuse_while_importing_main("a process pool")

    pool = ProcessPoolExecutor(max_workers=workers - 1, mp_context=multiprocessing.get_context("forkserver"),
                               initializer=_worker_start, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException as e:
        # Ctrl-C or an error: the workers are stopped, not waited for (shutdown waited for the item each was on,
        # and a Ctrl-C that reached a worker mid-item once left the command hung in shutdown, holding its lock)
        procs = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
        for p in procs:
            p.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(e, BrokenProcessPool):
            why = "killed, for example by the out-of-memory killer" + ("" if _main_is_the_cli() else
                                                                       f", or failed while starting; {MAIN_GUARD}")
            raise WorkerLost(f"a worker process stopped before it returned its work ({why}); its error, if it had "
                             f"one, is printed above; run the command again, or with one worker") from e
        raise
    else:
        pool.shutdown(cancel_futures=True)


def _main_is_the_cli() -> bool:
    """Whether this process is the ``curate`` command (its console script, or ``python -m tenset_curate.cli``)
    rather than a user's script, whose unguarded top-level code is the usual reason a pool breaks at start."""
    import sys

    main = sys.modules.get("__main__")
    cli = sys.modules.get("tenset_curate.cli")
    return cli is not None and (getattr(main, "app", None) is getattr(cli, "app", ())
                                or getattr(getattr(main, "__spec__", None), "name", None) == "tenset_curate.cli")


THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "POLARS_MAX_THREADS")


def _worker_start(parent: int) -> None:
    """Pool worker start-up.

    - One thread per library (BLAS, OpenMP, Polars), as Ray does for its workers, so ``workers`` processes use
      ``workers`` cores instead of each spreading over all of them. Runs before the task's module imports NumPy or
      Polars (a forkserver child starts without them); a value the user set is kept.
    - Ctrl-C is the command's to handle (the terminal sends it to every process of the group): a worker ignores it
      and is stopped by ``process_pool``, instead of printing its own KeyboardInterrupt traceback.
    - A worker whose command died without stopping it (kill -9, the OOM killer) exits within a second: it kept the
      command's stdout open, so a caller reading the output (``| tee``) never finished."""
    import signal
    import threading

    for k in THREAD_ENV:
        os.environ.setdefault(k, "1")
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while _alive(parent):
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs: a killed process whose parent has not reaped it yet (a zombie) does not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True


def _local_pool(fn, items, workers, shared=None):
    """The pool's ``workers - 1`` processes and this one take items from the front (biggest first); a pool process is
    handed its next item the moment it returns one (so none waits, and none holds a queued item that this process
    could have taken); this process takes one at a time, between collecting results."""
    import queue as queue_mod
    import threading
    from collections import deque

    with (nullcontext(shared) if shared is not None else process_pool("local", workers)) as pool:
        todo = deque(range(len(items)))  # deque pops are atomic: this thread and the pool's callbacks share it
        done: queue_mod.Queue = queue_mod.Queue()
        closed = threading.Event()

        def feed() -> None:  # runs here and in the pool's management thread (a future's callback)
            if closed.is_set():
                return
            try:
                i = todo.popleft()
            except IndexError:
                return
            try:
                f = pool.submit(fn, items[i])
            except RuntimeError:  # shutting down, or broken (a process died): the item stays for this process
                todo.appendleft(i)
                return
            f.add_done_callback(lambda f: (done.put(f), feed()))

        try:
            for _ in range(max(1, workers - 1)):
                feed()
            left = len(items)
            while left:
                while True:  # the pool's results first
                    try:
                        f = done.get_nowait()
                    except queue_mod.Empty:
                        break
                    left -= 1
                    yield f.result()
                if not left:
                    break
                try:
                    i = todo.popleft()
                except IndexError:  # nothing left to take: wait for the pool
                    f = done.get()
                    left -= 1
                    yield f.result()
                    continue
                left -= 1
                yield fn(items[i])
        finally:
            closed.set()


def _ray_tasks(fn, items, workers, address):
    ray = require_ray()
    ensure_ray(address, workers)
    task = ray.remote(num_cpus=1)(_call_in)
    cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
    window = max(4, 4 * cpus)  # tasks in flight: enough to keep every CPU busy, few enough to cancel quickly
    cwd = os.getcwd()
    fn_ref = ray.put(fn)
    pending = []
    it = iter(items)
    try:
        while True:
            for item in it:
                pending.append(task.remote(cwd, fn_ref, item))
                if len(pending) >= window:
                    break
            if not pending:
                return
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield ray.get(ref)
    finally:
        for ref in pending:
            ray.cancel(ref)
