"""Collect a MetaSchedule performance dataset on the local CPU.

``collect(workloads, trials, out_dir)`` tunes each workload with MetaSchedule (``ms.tune_tir``)
against one shared ``JSONDatabase`` in ``out_dir``, so the output is a standard MetaSchedule
database (``database_workload.json`` + ``database_tuning_record.json``) that every reader of
MetaSchedule logs accepts. MetaSchedule's ``AddToDatabase`` callback commits every measured
candidate, failed ones included (``run_secs = [1e10]``); nothing is filtered. Beside the
database it writes

* ``hardware.json``: CPU model, cores, ISA flags, memory, TVM version, the target dict;
* ``workloads.json``: per workload its name, op class, network, FLOPs, the MetaSchedule
  structural hash and workload index it got in the database, and its measured/failed counts;
* ``collection.json``: the totals of the whole database, this run's settings and timings, and ``runs``: every
  run that wrote to the folder (a resumed collection adds one), with its seed and what it measured.

A workload's ``seeds`` (``workloads.json``) are the seeds of the runs that measured its records, ``seed`` the one
seed when they share it (None when runs with different seeds topped it up); before, a resumed run wrote its own
seed on every workload, those it skipped included.

Side files are written atomically (tmp + ``os.replace``); the database files are append-only
(MetaSchedule appends one line per record), so an interrupted run leaves a valid database and a
rerun with the same ``out_dir`` resumes: workloads that already hold ``trials`` records are
skipped, the others are topped up.

TVM 0.27 traps handled here (see shared/notes/tvm-0.27-facts.md):

* ``tvm.s_tir.tensor_intrin`` takes 35-50 s to import (CUDA/ROCm intrinsics). The default
  LocalBuilder build function imports it in every builder worker, and the worker pool is
  recreated for every batch, so with the default 30 s timeout every build times out. We give
  LocalBuilder an ``f_build`` that does not import it, a timeout well above the worker's start-up,
  and in the tuning process register only the x86 intrinsics (the package is made importable
  without running its ``__init__``; any other submodule still imports on demand).
* llvm targets must carry ``num-cores``; the old ``"llvm -mcpu=..."`` strings are rejected.
* ``num_tuning_cores=1``: with 2 the same seed gave different batches.

Run it as ``python -m tenset_curate.collect --workloads sample --trials 200 --out DIR``.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import logging
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from .netinfo import COLLECTOR_WORKLOADS_FILE
from .workloads import Workload, get_workloads

__all__ = [
    "collect",
    "collect_command",
    "detect_hardware",
    "resolve_target",
    "count_records",
    "DB_WORKLOAD",
    "DB_RECORD",
    "FAILED_RUN_SECS",
    "main",
]

log = logging.getLogger("tenset_curate.collect")

DB_WORKLOAD = "database_workload.json"
DB_RECORD = "database_tuning_record.json"
HARDWARE_JSON = "hardware.json"
WORKLOADS_JSON = COLLECTOR_WORKLOADS_FILE  # convert reads each workload's network from it (netinfo)
COLLECTION_JSON = "collection.json"

# MetaSchedule's placeholder for a failed measurement, and the threshold we read it with.
FAILED_RUN_SECS = 1e10
_FAILED_THRESHOLD = 1e9

# ISA flags worth recording (the ones TVM / LLVM code generation cares about).
_ISA_FLAGS = (
    "sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "sse4a", "popcnt", "aes", "pclmulqdq",
    "avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "adx",
    "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512ifma", "avx512vbmi",
    "avx512_vbmi2", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512_bitalg",
    "avx512_vpopcntdq", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
    # aarch64 names
    "asimd", "asimddp", "sve", "sve2", "i8mm", "bf16", "fphp", "asimdhp",
)


# --------------------------------------------------------------------------------------------
# Small utilities
# --------------------------------------------------------------------------------------------

def _write_json_atomic(path: Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, _default_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _default_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _jsonable(v: Any) -> Any:
    """TVM FFI values (Array, Map, String, IntImm) as plain JSON values."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if hasattr(v, "items"):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)) or (hasattr(v, "__len__") and hasattr(v, "__getitem__")):
        return [_jsonable(x) for x in v]
    if hasattr(v, "value"):
        return _jsonable(v.value)
    return str(v)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _open_text(path: Path):
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _db_path(out_dir: Path, name: str) -> Path:
    """The plain database file if present, else its ``.gz``; the plain path when neither is."""
    p = out_dir / name
    if p.exists():
        return p
    gz = out_dir / (name + ".gz")
    return gz if gz.exists() else p


def read_workload_hashes(out_dir: str | os.PathLike) -> list[str]:
    """Structural hashes in ``database_workload.json[.gz]``, in workload-index order."""
    path = _db_path(Path(out_dir), DB_WORKLOAD)
    if not path.exists():
        return []
    out = []
    with _open_text(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(str(json.loads(line)[0]))
    return out


def iter_record_secs(out_dir: str | os.PathLike) -> Iterator[tuple[int, list[float]]]:
    """(workload index, run_secs) of every record of a database's tuning-record file, in file order."""
    path = _db_path(Path(out_dir), DB_RECORD)
    if not path.exists():
        return
    with _open_text(path) as f:
        for line in f:
            if not line.strip():
                continue
            idx, rec = json.loads(line)
            yield int(idx), [float(s) for s in (rec[1] or [])]


def valid_mean_secs(secs: list[float]) -> float | None:
    """Mean of a record's run_secs; None for a failed record (no run, or a run outside (0, 1e9) s)."""
    return sum(secs) / len(secs) if secs and all(0 < s < _FAILED_THRESHOLD for s in secs) else None


def count_records(out_dir: str | os.PathLike) -> dict[int, dict[str, int]]:
    """Per workload index: ``{"records": n, "failed": n_failed}`` from the tuning-record file.

    A record is failed when any of its run_secs is >= 1e9 (MetaSchedule stores 1e10)."""
    counts: dict[int, dict[str, int]] = {}
    for idx, secs in iter_record_secs(out_dir):
        failed = (not secs) or any(s >= _FAILED_THRESHOLD for s in secs)
        c = counts.setdefault(idx, {"records": 0, "failed": 0})
        c["records"] += 1
        c["failed"] += int(failed)
    return counts


def _best_latency(out_dir: Path, index: int) -> float | None:
    means = [m for idx, secs in iter_record_secs(out_dir) if idx == index
             for m in [valid_mean_secs(secs)] if m is not None]
    return min(means) if means else None


# --------------------------------------------------------------------------------------------
# Hardware and target
# --------------------------------------------------------------------------------------------

def _cpuinfo() -> dict[str, Any]:
    info: dict[str, Any] = {}
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return info
    for line in text.splitlines():
        if ":" not in line:
            continue
        k, v = (s.strip() for s in line.split(":", 1))
        if k in ("model name", "Hardware", "Model") and "model_name" not in info:
            info["model_name"] = v
        elif k == "vendor_id" and "vendor" not in info:
            info["vendor"] = v
        elif k == "CPU implementer" and "vendor" not in info:
            info["vendor"] = v
        elif k == "cpu family" and "family" not in info:
            info["family"] = v
        elif k == "model" and "model" not in info:
            info["model"] = v
        elif k == "stepping" and "stepping" not in info:
            info["stepping"] = v
        elif k == "cache size" and "cache_size" not in info:
            info["cache_size"] = v
        elif k in ("flags", "Features") and not flags:
            flags = set(v.split())
    if "pni" in flags:  # the kernel's name for SSE3
        flags.add("sse3")
    info["isa_flags"] = [f for f in _ISA_FLAGS if f in flags]
    info["all_flags"] = sorted(flags)
    return info


def detect_hardware(target: dict | None = None) -> dict[str, Any]:
    """What ``hardware.json`` holds. Imports TVM only for its version string when available."""
    cpu = _cpuinfo()
    hw: dict[str, Any] = {
        "cpu_model": cpu.get("model_name") or platform.processor() or platform.machine(),
        "cpu_vendor": cpu.get("vendor"),
        "cpu_family": cpu.get("family"),
        "cpu_model_id": cpu.get("model"),
        "cpu_stepping": cpu.get("stepping"),
        "cache_size": cpu.get("cache_size"),
        "machine": platform.machine(),
        "logical_cores": os.cpu_count(),
        "physical_cores": None,
        "affinity_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": None,
        "isa_flags": cpu.get("isa_flags", []),
        "all_cpu_flags": cpu.get("all_flags", []),
        "os": platform.platform(),
        "python": platform.python_version(),
        "tvm_version": None,
        "tvm_ffi_version": None,
        "target": target,
    }
    with contextlib.suppress(Exception):
        import psutil  # noqa: PLC0415

        hw["physical_cores"] = psutil.cpu_count(logical=False)
        hw["memory_bytes"] = int(psutil.virtual_memory().total)
    with contextlib.suppress(Exception):
        from importlib.metadata import version  # noqa: PLC0415

        hw["tvm_version"] = version("apache-tvm")
        hw["tvm_ffi_version"] = version("apache-tvm-ffi")
    if hw["tvm_version"] is None and "tvm" in sys.modules:
        hw["tvm_version"] = getattr(sys.modules["tvm"], "__version__", None)
    return hw


def resolve_target(target: str | dict = "auto", num_cores: int | None = None) -> dict[str, Any]:
    """A MetaSchedule-ready llvm target dict.

    ``"auto"``: ``{"kind": "llvm", "mcpu": <detected>, "num-cores": os.cpu_count()}``. A dict or a
    JSON object string is taken as given, with ``num-cores`` added to llvm targets that lack it.
    ``"llvm"`` is the host llvm target without ``mcpu``."""
    import tvm  # noqa: PLC0415

    cores = int(num_cores or os.cpu_count() or 1)
    if isinstance(target, str):
        t = target.strip()
        if t == "auto":
            detected = tvm.target.Target.from_device(tvm.cpu()).export()
            d: dict[str, Any] = {"kind": "llvm"}
            if detected.get("mcpu"):
                d["mcpu"] = str(detected["mcpu"])
            d["num-cores"] = cores
            target = d
        elif t.startswith("{"):
            try:
                target = json.loads(t)
            except json.JSONDecodeError as e:  # said "Expecting ',' delimiter: ..." naming no option
                raise ValueError(f"target {target!r}: not a JSON object ({e})") from None
        elif re.fullmatch(r"[a-z_]+", t):
            target = {"kind": t}
        else:
            raise ValueError(
                f"target {target!r}: TVM 0.27 takes dict targets only; pass 'auto', a kind such as "
                "'llvm', or a JSON object like '{\"kind\": \"llvm\", \"mcpu\": \"core-avx2\"}'"
            )
    d = dict(target)
    if d.get("kind") != "llvm":  # {"kind": "cuda"} started, failed in TVM's tuning and left a partial folder
        raise ValueError(f"target {target!r}: collect and verify tune and measure on this machine's CPU, an llvm "
                         "target ('auto', 'llvm', or a JSON object of kind llvm)")
    if "num-cores" not in d:
        d["num-cores"] = cores
    tvm.target.Target(d)  # validate
    return d


# --------------------------------------------------------------------------------------------
# TVM set-up (lazy)
# --------------------------------------------------------------------------------------------

def _register_x86_intrinsics_only() -> None:
    """Make ``tvm.s_tir.tensor_intrin`` importable without its 35-50 s ``__init__``.

    ``TuneContext`` does ``import tvm.s_tir.tensor_intrin`` only for its side effect of
    registering tensor intrinsics. We create the package module from its spec without executing
    it (so ``tensor_intrin.cuda`` and friends stay importable on demand) and import the x86
    intrinsics, the only ones an x86 llvm target uses. No-op if the package is already imported.
    """
    import importlib  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    import tvm.s_tir  # noqa: PLC0415

    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:  # pragma: no cover
        return
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[name] = pkg
    tvm.s_tir.tensor_intrin = pkg  # type: ignore[attr-defined]
    if platform.machine().lower() in ("x86_64", "amd64", "i686", "x86"):
        importlib.import_module(name + ".x86")
    elif platform.machine().lower() in ("aarch64", "arm64"):
        importlib.import_module(name + ".arm_cpu")


def _make_f_build():
    """LocalBuilder build function that skips ``import tvm.s_tir.tensor_intrin``.

    Returned as a closure so cloudpickle ships it to the builder workers by value (the workers
    need not be able to import ``tenset_curate``)."""

    def f_build(mod, target, _params):
        # what MetaSchedule's default_build calls (tvm.driver.build), without its DeprecationWarning: that function
        # is now tvm.tirx.build with the "default" pipeline
        from tvm.tirx import build as tvm_build  # noqa: PLC0415
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # noqa: PLC0415

        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return tvm_build(mod, target=target)

    return f_build


def _make_counter_class():
    """A MeasureCallback that counts what was measured, batch by batch (class built lazily)."""
    from tvm.ir.utils import derived_object  # noqa: PLC0415
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback  # noqa: PLC0415

    @derived_object
    class MeasureCounter(PyMeasureCallback):
        def __init__(self, label: str, flops: int, progress: bool = True) -> None:
            super().__init__()
            self.label = label
            self.flops = flops
            self.progress = progress
            self.batches: list[dict[str, Any]] = []
            self.t0 = time.time()

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            n = len(measure_candidates)
            build_err = sum(1 for b in builder_results if b.error_msg is not None)
            run_err = 0
            best = None
            for b, r in zip(builder_results, runner_results):
                if b.error_msg is not None:
                    continue
                if r.error_msg is not None or r.run_secs is None:
                    run_err += 1
                    continue
                secs = [float(s.value) if hasattr(s, "value") else float(s) for s in r.run_secs]
                if secs:
                    m = sum(secs) / len(secs)
                    best = m if best is None else min(best, m)
            now = time.time()
            prev = self.batches[-1]["t"] if self.batches else self.t0
            self.batches.append(
                {"t": now, "n": n, "build_errors": build_err, "run_errors": run_err,
                 "best_s": best, "seconds": round(now - prev, 3)}
            )
            if self.progress:
                total = sum(b["n"] for b in self.batches)
                gf = f"{self.flops / best / 1e9:.2f} GFLOP/s" if best else "n/a"
                log.info(
                    "%s: batch %d, %d candidates (%d build / %d run errors) in %.1f s; "
                    "%d measured so far; batch best %s",
                    self.label, len(self.batches), n, build_err, run_err, now - prev, total, gf,
                )

        @property
        def measured(self) -> int:
            return sum(b["n"] for b in self.batches)

    return MeasureCounter


def _find_workload_index(out_dir: Path, mod, shash: str) -> int | None:
    hashes = read_workload_hashes(out_dir)
    hits = [i for i, h in enumerate(hashes) if h == shash]
    if len(hits) == 1:
        return hits[0]
    # Fall back to structural equality (hash collisions, or a different hash rendering).
    import base64  # noqa: PLC0415

    import tvm  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415

    path = _db_path(out_dir, DB_WORKLOAD)
    if not path.exists():
        return None
    with _open_text(path) as f:
        for i, line in enumerate(l for l in f if l.strip()):
            blob = base64.b64decode(json.loads(line)[1])
            if tvm_ffi.structural_equal(tvm.ir.load_json(blob[8:].decode()), mod):
                return i
    return None


# --------------------------------------------------------------------------------------------
# collect
# --------------------------------------------------------------------------------------------

def collect(
    workloads: str | os.PathLike | Iterable[str | Workload],
    trials: int,
    out_dir: str | os.PathLike,
    target: str | dict = "auto",
    seed: int = 0,
    trials_per_iter: int = 64,
    population_size: int = 128,
    num_tuning_cores: int = 1,
    builder_workers: int | None = None,
    builder_timeout_s: float = 120.0,
    runner_timeout_s: float = 30.0,
    number: int = 3,
    repeat: int = 3,
    min_repeat_ms: int = 20,
    cost_model: str = "xgb",
    resume: bool = True,
    gzip_db: bool = False,
    keep_logs: bool = True,
    progress: bool = True,
    f_build: Any = None,
) -> dict[str, Any]:
    """Tune ``workloads`` on the local CPU, ``trials`` measured candidates each, into ``out_dir``.

    ``workloads``: a set name, a workload name, a JSON file of names, or an iterable of names /
    ``Workload`` objects. Every measured candidate is kept in the MetaSchedule JSON database.
    Each workload is tuned by its own ``ms.tune_tir`` call (fresh cost model, same ``seed``).
    MetaSchedule may measure fewer than ``trials`` candidates when a workload's search space
    runs out of new schedules (small element-wise ops). Returns the summary also written to
    ``collection.json``.

    ``f_build``: LocalBuilder build function ``(mod, target, params) -> runtime.Module``; the
    default skips the slow intrinsics import. It runs in worker processes, so it must be
    picklable by cloudpickle (a closure or a module-level function of an importable module).
    """
    from .storage import check_int, file_in_the_way

    for name, v in (("trials", trials), ("trials_per_iter", trials_per_iter), ("population_size", population_size)):
        check_int(name, v, 1)  # past 64 bits it failed in TVM's FFI, or after the tuning when the summary printed
    check_int("seed", seed, 0)
    if seed >= 1 << 32:  # MetaSchedule's, said after TVM started and the folder was made
        raise ValueError(f"seed {seed}: at most 2**32 - 1")
    if isinstance(workloads, (str, os.PathLike)):
        wls = get_workloads(workloads)
    else:
        wls = [w if isinstance(w, Workload) else get_workloads(w)[0] for w in workloads]
    if not wls:
        raise ValueError(f"no workloads to tune in {workloads!r}")

    out = Path(out_dir)
    if file_in_the_way(out):  # a FileExistsError traceback
        raise ValueError(f"{out}: a file is in the way of the folder the collection goes into")
    resolve_target(target)  # a bad target before the folder is made (it was left empty)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    started_at = _now()

    # Resume from a gzipped database: MetaSchedule appends to plain files.
    for name in (DB_WORKLOAD, DB_RECORD):
        gz = out / (name + ".gz")
        if gz.exists() and not (out / name).exists():
            if not resume:
                raise FileExistsError(f"{gz} exists and resume=False")
            from .storage import atomic_write_with

            def unzip(tmp: Path, gz: Path = gz) -> None:  # a kill mid-copy must not leave a short plain database
                with gzip.open(gz, "rb") as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst)

            atomic_write_with(out / name, unzip)
            gz.unlink()
    if not resume and ((out / DB_RECORD).exists() or (out / DB_WORKLOAD).exists()):
        raise FileExistsError(f"{out} already holds a database and resume=False")

    import tvm  # noqa: PLC0415
    import tvm_ffi  # noqa: PLC0415
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    from tvm.s_tir.analysis import estimate_tir_flops  # noqa: PLC0415
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod  # noqa: PLC0415

    _register_x86_intrinsics_only()

    target_dict = resolve_target(target)
    tvm_target = tvm.target.Target(target_dict)
    hardware = detect_hardware(target_dict)
    hardware["tvm_version"] = hardware["tvm_version"] or tvm.__version__
    hardware["target_canonical"] = _jsonable(tvm_target.export())
    hardware["detected_at"] = started_at
    _write_json_atomic(out / HARDWARE_JSON, hardware)

    database = ms.database.JSONDatabase(
        path_workload=str(out / DB_WORKLOAD),
        path_tuning_record=str(out / DB_RECORD),
        allow_missing=True,
        module_equality="structural",
    )
    Counter = _make_counter_class()

    # Previous side file (resume): keep per-workload stats of earlier runs.
    previous: dict[str, dict[str, Any]] = {}
    if resume and (out / WORKLOADS_JSON).exists():
        with contextlib.suppress(Exception):
            with open(out / WORKLOADS_JSON, encoding="utf-8") as f:
                for entry in json.load(f).get("workloads", []):
                    previous[entry["name"]] = entry

    earlier_runs: list[dict[str, Any]] = []
    if resume and (out / COLLECTION_JSON).exists():
        with contextlib.suppress(Exception):
            earlier_runs = _runs_of(json.loads((out / COLLECTION_JSON).read_text(encoding="utf-8")))

    entries: dict[str, dict[str, Any]] = dict(previous)
    order = list(previous)  # keep earlier workloads first
    builder_workers = builder_workers or os.cpu_count() or 1

    for i, w in enumerate(wls):
        mod = _normalize_mod(build_prim_func_checked(w))
        shash = str(tvm_ffi.structural_hash(mod))
        flops_tvm = float(estimate_tir_flops(mod))
        existing_idx = _find_workload_index(out, mod, shash) if resume else None
        have = count_records(out).get(existing_idx, {}).get("records", 0) if existing_idx is not None else 0
        todo = trials - have
        prev = previous.get(w.name, {})
        counter = None
        tune_s = 0.0
        if todo > 0:
            log.info("[%d/%d] %s: tuning %d trials (%d already in the database)",
                     i + 1, len(wls), w.name, todo, have)
            counter = Counter(w.name, w.flops, progress)
            callbacks = list(ms.measure_callback.MeasureCallback.create("default")) + [counter]
            builder = ms.builder.LocalBuilder(
                max_workers=builder_workers, timeout_sec=builder_timeout_s,
                f_build=f_build or _make_f_build(),
            )
            runner = ms.runner.LocalRunner(
                timeout_sec=runner_timeout_s,
                evaluator_config=ms.runner.EvaluatorConfig(
                    number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                    enable_cpu_cache_flush=False,
                ),
            )
            task_name = re.sub(r"[^A-Za-z0-9_]", "_", w.name)
            t0 = time.time()
            with contextlib.ExitStack() as stack:
                work_dir = str(out / "logs" / task_name) if keep_logs else stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="tenset-collect-"))
                _tune_one(ms, tvm, mod, task_name, tvm_target, work_dir, todo, trials_per_iter,
                          builder, runner, database, cost_model, num_tuning_cores, callbacks,
                          population_size, seed)
            tune_s = time.time() - t0
            with contextlib.suppress(Exception):
                runner.pool.shutdown()
        else:
            log.info("[%d/%d] %s: %d records already, skipped", i + 1, len(wls), w.name, have)

        idx = _find_workload_index(out, mod, shash)
        counts = count_records(out).get(idx, {"records": 0, "failed": 0}) if idx is not None else {
            "records": 0, "failed": 0}
        measured_now = counter.measured if counter is not None else 0
        seeds = _seeds_of(prev)
        if measured_now and seed not in seeds:
            seeds.append(seed)
        measured_total = int(prev.get("n_measured", have)) + measured_now
        best = _best_latency(out, idx) if idx is not None else None
        entry = {
            "name": w.name,
            "op": w.op,
            "op_class": w.op_class,
            "network": w.network,
            "layer": w.layer,
            "args": w.args,
            "dtype": w.dtype,
            "flops": w.flops,
            "flops_tvm": flops_tvm,
            "structural_hash": shash,
            "workload_index": idx,
            "trials_requested": trials if counter is not None else int(prev.get("trials_requested", trials)),
            "n_measured": measured_total,
            "n_records": counts["records"],
            "n_failed": counts["failed"],
            "n_build_errors": int(prev.get("n_build_errors", 0))
            + (sum(b["build_errors"] for b in counter.batches) if counter else 0),
            "n_run_errors": int(prev.get("n_run_errors", 0))
            + (sum(b["run_errors"] for b in counter.batches) if counter else 0),
            "n_batches": int(prev.get("n_batches", 0)) + (len(counter.batches) if counter else 0),
            "best_latency_s": best,
            "best_gflops": (w.flops / best / 1e9) if best else None,
            "tune_seconds": round(float(prev.get("tune_seconds", 0.0)) + tune_s, 2),
            "seed": seeds[0] if len(seeds) == 1 else None,
            "seeds": seeds,
        }
        if counter is not None and counts["records"] != have + measured_now:
            log.warning("%s: database holds %d records but %d candidates were measured",
                        w.name, counts["records"], have + measured_now)
        if w.name not in entries:
            order.append(w.name)
        entries[w.name] = entry
        _write_json_atomic(out / WORKLOADS_JSON, {"version": 1, "workloads": [entries[n] for n in order]})

    # Totals over the whole database (every workload, including ones from earlier runs).
    all_counts = count_records(out)
    finished_at = _now()
    this_run = {"started_at": started_at, "finished_at": finished_at, "seed": seed, "trials": trials,
                "n_measured": sum(e["n_measured"] for e in entries.values())
                - sum(int(previous.get(n, {}).get("n_measured", 0)) for n in entries),
                "workloads_tuned": [n for n in order if entries[n]["n_measured"]
                                    > int(previous.get(n, {}).get("n_measured", 0))]}
    runs = [*earlier_runs, this_run]
    summary = {
        "version": 1,
        "started_at": started_at,
        "finished_at": finished_at,
        "wall_seconds": round(time.time() - t_start, 1),
        "workload_set": os.fspath(workloads) if isinstance(workloads, (str, os.PathLike)) else None,
        "n_workloads": len(entries),
        "n_workload_entries_in_db": len(read_workload_hashes(out)),
        "n_records": sum(c["records"] for c in all_counts.values()),
        "n_failed": sum(c["failed"] for c in all_counts.values()),
        "n_measured": sum(e["n_measured"] for e in entries.values()),
        "tune_seconds": round(sum(e["tune_seconds"] for e in entries.values()), 1),
        "settings": {
            "trials": trials, "seed": seed, "trials_per_iter": trials_per_iter,
            "population_size": population_size, "num_tuning_cores": num_tuning_cores,
            "builder_workers": builder_workers, "builder_timeout_s": builder_timeout_s,
            "runner_timeout_s": runner_timeout_s, "number": number, "repeat": repeat,
            "min_repeat_ms": min_repeat_ms, "enable_cpu_cache_flush": False,
            "cost_model": cost_model if isinstance(cost_model, str) else type(cost_model).__name__,
            "search_strategy": "evolutionary",
        },
        "target": target_dict,
        "out_dir": str(out),
        "seeds": sorted({sd for e in entries.values() for sd in _seeds_of(e)}),
        "runs": runs,
    }
    if gzip_db:
        for name in (DB_WORKLOAD, DB_RECORD):
            _gzip_file(out / name)
        summary["database_files"] = [DB_WORKLOAD + ".gz", DB_RECORD + ".gz"]
    else:
        summary["database_files"] = [DB_WORKLOAD, DB_RECORD]
    _write_json_atomic(out / COLLECTION_JSON, summary)
    return summary


def _seeds_of(entry: dict[str, Any]) -> list[int]:
    """The seeds of the runs that measured a workload's records; a ``workloads.json`` entry written before
    ``seeds`` existed has one ``seed``, that of the run that measured it (none when it measured nothing)."""
    if "seeds" in entry:
        return [int(x) for x in entry["seeds"]]
    return [int(entry["seed"])] if entry.get("seed") is not None and int(entry.get("n_measured", 0)) else []


def _runs_of(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs an earlier ``collection.json`` records; one written before ``runs`` existed was one run."""
    if "runs" in summary:
        return list(summary["runs"])
    settings = summary.get("settings", {})
    return [{"started_at": summary.get("started_at"), "finished_at": summary.get("finished_at"),
             "seed": settings.get("seed"), "trials": settings.get("trials"),
             "n_measured": summary.get("n_measured"), "workloads_tuned": None}]


MS_LOGGER = "tvm.s_tir.meta_schedule"


@contextlib.contextmanager
def _unnamed_handlers_detached(name: str):
    """Detach the handlers without a name from logger ``name`` for the block, and attach them again after it.

    MetaSchedule's ``tune_tir`` rebuilds its logging with ``logging.config.dictConfig`` from the names of the handlers
    already on its logger, and fails on an unnamed one (``'NoneType' object has no attribute 'format'`` in
    ``meta_schedule/logging.py``). pytest 9.2 puts its unnamed capture handlers on that logger (it does not
    propagate), and so can an application's own logging set-up."""
    logger = logging.getLogger(name)
    detached = [h for h in logger.handlers if h.get_name() is None]
    for h in detached:
        logger.removeHandler(h)
    try:
        yield detached
    finally:
        for h in detached:
            if h not in logger.handlers:
                logger.addHandler(h)


def _tune_one(ms, tvm, mod, task_name, tvm_target, work_dir, todo, trials_per_iter, builder, runner,
              database, cost_model, num_tuning_cores, callbacks, population_size, seed) -> None:
    if cost_model == "xgb":
        cm = ms.cost_model.CostModel.create("xgb", num_tuning_cores=num_tuning_cores)
    else:
        cm = cost_model
    with _unnamed_handlers_detached(MS_LOGGER):
        ms.tune_tir(
            mod=tvm.IRModule({task_name: mod["main"]}),
            target=tvm_target,
            work_dir=work_dir,
            max_trials_global=todo,
            num_trials_per_iter=min(trials_per_iter, todo),
            builder=builder,
            runner=runner,
            database=database,
            cost_model=cm,
            measure_callbacks=callbacks,
            strategy=ms.search_strategy.EvolutionarySearch(population_size=population_size),
            num_tuning_cores=num_tuning_cores,
            seed=seed,
        )


def build_prim_func_checked(w: Workload):
    from .workloads import build_prim_func  # noqa: PLC0415

    mod = build_prim_func(w)
    return mod["main"]


def _gzip_file(path: Path) -> None:
    """``path`` -> ``path.gz`` (reproducible: no name, mtime 0), atomically; removes ``path``."""
    if not path.exists():
        return
    gz = path.with_name(path.name + ".gz")
    fd, tmp = tempfile.mkstemp(prefix=f".{gz.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, _default_file_mode())
        with os.fdopen(fd, "wb") as raw, open(path, "rb") as src:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as dst:
                shutil.copyfileobj(src, dst)
        os.replace(tmp, gz)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    path.unlink()


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

def collect_command(
    workloads: str,
    trials: int,
    out: str,
    target: str = "auto",
    seed: int = 0,
    trials_per_iter: int = 64,
    population_size: int = 128,
    gzip_db: bool = False,
    keep_logs: bool = True,
) -> dict[str, Any]:
    """CLI entry (``curate collect``, ``python -m tenset_curate.collect``): logs progress to stderr and returns the
    summary, which the caller prints; stdout is left to that one JSON document (MetaSchedule's own console logging,
    which its logging config sends to stdout, goes to stderr while it tunes)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    with contextlib.redirect_stdout(sys.stderr):
        return collect(
            workloads, trials, out, target=target, seed=seed, trials_per_iter=trials_per_iter,
            population_size=population_size, gzip_db=gzip_db, keep_logs=keep_logs,
        )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tenset_curate.collect",
        description="Tune workloads on the local CPU with MetaSchedule, keeping every measurement.",
    )
    p.add_argument("--workloads", required=True, help="set name (sample, heldout, resnet18, "
                   "mobilenet_v2, bert, all), a workload name, or a JSON file of names")
    p.add_argument("--trials", type=int, required=True, help="measured candidates per workload")
    p.add_argument("--out", required=True, help="output directory (MetaSchedule JSON database)")
    p.add_argument("--target", default="auto", help="'auto', 'llvm', or a JSON target dict")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trials-per-iter", type=int, default=64)
    p.add_argument("--population", type=int, default=128, help="evolutionary search population")
    p.add_argument("--gzip", action="store_true", help="gzip the database files at the end")
    p.add_argument("--no-logs", action="store_true", help="do not keep MetaSchedule's task logs")
    a = p.parse_args(argv)
    summary = collect_command(
        a.workloads, a.trials, a.out, target=a.target, seed=a.seed,
        trials_per_iter=a.trials_per_iter, population_size=a.population,
        gzip_db=a.gzip, keep_logs=not a.no_logs,
    )
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
