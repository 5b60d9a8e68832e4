"""Executors: one function mapped over independent work items, on local processes or on Ray tasks.

``map_unordered(fn, items, executor=..., workers=..., address=...)`` yields ``fn(item)`` for every item in
completion order. The callers (``convert``: one item per group of inputs) make results independent of that order
(shards are named by content, the manifest is written with sorted keys), so the output is byte-identical whichever
executor ran it and with however many workers.

- ``local``, ``workers <= 1``: in this process, in the given order (no pickling, no pool).
- ``local``, ``workers > 1``: a ``ProcessPoolExecutor`` of ``workers - 1`` processes (forkserver: safe after the
  parent ran threaded Polars/Arrow code), biggest item first, and this process is the last worker: it takes items
  from the tail of the queue (the smallest, not yet started ones) while the pool works, so no core waits for the
  pool's processes to start and import. Measured on `curate convert` of the 245 MB of real Ansor logs, 2 cores, 4
  interleaved rounds: 1 worker 2.22-2.40 s; 2 workers 1.46-1.62 s with two pool processes, 1.41-1.46 s with one
  plus this process (median speed-up 1.47x -> 1.57x).
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
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterable, Iterator

EXECUTORS = ("local", "ray")
RAY_INSTALL = "pip install 'tenset-curate[ray]'  (or: pip install 'ray==2.60.0')"


class ExecutorError(ValueError):
    pass


def require_ray():
    """Import Ray or fail with the command that installs it."""
    try:
        import ray
    except ImportError:
        raise ExecutorError(f"the ray executor needs Ray, which is not installed: {RAY_INSTALL}") from None
    return ray


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
    Ray); ``workers - 1`` processes, the caller being the last worker. Forkserver, not fork: a forked child inherits the locks of the parent's threads (Polars' and Arrow's
    pools, held by whatever the parent was doing) and can deadlock on its first query."""
    if executor != "local" or workers <= 1:
        yield None
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=workers - 1, mp_context=multiprocessing.get_context("forkserver"),
                               initializer=_one_thread_each)
    try:
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "POLARS_MAX_THREADS")


def _one_thread_each() -> None:
    """Pool worker start-up: one thread per library (BLAS, OpenMP, Polars), as Ray does for its workers, so
    ``workers`` processes use ``workers`` cores instead of each spreading over all of them. Runs before the task's
    module imports NumPy or Polars (a forkserver child starts without them); a value the user set is kept."""
    for k in THREAD_ENV:
        os.environ.setdefault(k, "1")


def _local_pool(fn, items, workers, shared=None):
    """The pool's processes take the items from the front (biggest first); this process takes them from the back,
    one at a time, while it waits (an item is this process's only when it can still cancel the pool's future)."""
    from concurrent.futures import FIRST_COMPLETED, wait

    with (nullcontext(shared) if shared is not None else process_pool("local", workers)) as pool:
        futs = [pool.submit(fn, it) for it in items]
        open_ = set(range(len(futs)))  # not yet yielded, not taken by this process
        tail = len(futs) - 1  # the pool starts items in order: once one cannot be cancelled, none before it can
        try:
            while open_:
                for i in sorted(i for i in open_ if futs[i].done()):
                    open_.discard(i)
                    yield futs[i].result()
                if tail >= 0 and futs[tail].cancel():
                    i, tail = tail, tail - 1
                    open_.discard(i)
                    yield fn(items[i])
                    continue
                tail = -1
                if open_:
                    wait([futs[i] for i in open_], return_when=FIRST_COMPLETED)
        finally:
            for f in futs:
                f.cancel()


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
