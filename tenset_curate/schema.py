"""The canonical record schema: one row per measurement, whatever log it came from.

Every reader (Ansor/TenSet JSON lines v0.2-v0.6, MetaSchedule JSON databases) produces rows of
``RECORD_SCHEMA``; every later step (labels, features, pruning, splits, training) reads them.
The README's "Data model" section mirrors this module; keep both in step.

Columns
-------
record_id        16 hex digits: blake2b-64 of the raw line bytes (MetaSchedule: of workload hash + raw record line);
                 stable across runs (64 bits: a collision among TenSet's 52M records has odds of about 1 in 10^4).
                 A line logged twice, byte for byte, gives two records of one id (bennu's MetaSchedule database has
                 12 such pairs); a split holds one row per id, so both records take its part
source_file      path of the input file as given to ``convert`` (relative to the input root when one was given)
line             1-based line number inside the (decompressed) source file
format           ``ansor`` or ``metaschedule``
log_version      Ansor's ``"v"`` field (``v0.2`` ... ``v0.6``); ``ms`` for MetaSchedule
hardware         hardware name (see ``hardware_rule``)
hardware_rule    which rule named it: ``target-model`` (``-model=`` in the target), ``measure_records`` (the folder
                 under ``measure_records/``), ``cli`` (``--hardware``), ``parent-folder`` (the file's parent folder)
target           the raw target: Ansor's target string, MetaSchedule's target dict as canonical JSON
target_kind      llvm, cuda, rocm, metal, opencl, ...
target_keys      ``-keys=`` / ``keys``
target_mcpu, target_arch, target_model, target_mtriple    as named in the target, else null
target_num_cores, target_max_num_threads, target_warp_size   ints, else null
target_attrs     every target attribute as canonical JSON (nothing dropped)
hw_*             Ansor's 8 HardwareParams (v0.3+): num_cores, vector_unit_bytes, cache_line_bytes,
                 max_shared_memory_per_block, max_local_memory_per_block, max_threads_per_block,
                 max_vthread_extent, warp_size; null when the log does not carry them
workload_key     the raw workload key string (Ansor) or the MetaSchedule workload's structural hash
workload_name    registered name (``conv2d_layer``), the md5 of a TenSet flat/nested key, or the PrimFunc name
workload_hash    md5 for TenSet keys; blake2b of the key otherwise; the MetaSchedule structural hash
workload_args    every numeric argument of the workload key, flattened in order (float64)
workload_str_args every string argument of the key after its name (``"SAME"``, dtypes)
task_id          hex digest of (workload_key, target_kind): one tuning task
steps            the schedule, typed: list of {kind, ints, lists, strs, floats}. Ansor: one item per step
                 (``SP`` with ints [stage, iter, extent, inner_to_outer] and lists [[lengths]]). MetaSchedule:
                 one item per trace instruction; ``ints`` holds integer attrs, ``lists`` holds list attrs and the
                 instruction's decision, ``strs`` the string attrs (inputs are SSA names and are dropped; a Fuse or
                 Reorder first gets one -1 per loop it names, as a list: readers.MS_LOOP_LIST_KINDS)
n_steps          len(steps)
costs            the measured costs in seconds, as logged (placeholders such as 1e10 kept)
mean_cost        mean of costs for a valid measurement, as float32 (7 significant digits; Ansor logs costs with 6, and
                 the exact values stay in ``costs``); NULL for every failed or invalid one (never finite)
error_no         Ansor MeasureErrorNo (0 = ok); MetaSchedule: 0, or 8 (UNKNOWN_ERROR) for a failed trial (run_secs
                 of 1e10: MetaSchedule does not log why)
error_name       the error's name (NO_ERROR, COMPILE_HOST, RUNTIME_DEVICE, ...)
is_valid         error_no == 0 and every cost finite and positive and below the failure threshold, and the mean,
                 rounded to float32, still positive and below it
all_cost         Ansor's all_cost (compile + run seconds); null for MetaSchedule
timestamp        Ansor's timestamp (seconds since epoch); null for MetaSchedule
"""
from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "2"  # 2: mean_cost float32

# A cost at or above this is a failure placeholder (Ansor and MetaSchedule both log 1e10).
FAILED_COST_THRESHOLD = 1e9

# auto_scheduler.MeasureErrorNo, in order.
ERROR_NAMES = [
    "NO_ERROR",
    "INSTANTIATION_ERROR",
    "COMPILE_HOST",
    "COMPILE_DEVICE",
    "RUNTIME_DEVICE",
    "WRONG_ANSWER",
    "BUILD_TIMEOUT",
    "RUN_TIMEOUT",
    "UNKNOWN_ERROR",
]

HW_PARAM_NAMES = [
    "num_cores",
    "vector_unit_bytes",
    "cache_line_bytes",
    "max_shared_memory_per_block",
    "max_local_memory_per_block",
    "max_threads_per_block",
    "max_vthread_extent",
    "warp_size",
]

STEP_TYPE = pa.struct(
    [
        ("kind", pa.string()),
        ("ints", pa.list_(pa.int64())),
        ("lists", pa.list_(pa.list_(pa.int64()))),
        ("strs", pa.list_(pa.string())),
        ("floats", pa.list_(pa.float64())),
    ]
)

RECORD_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("source_file", pa.string()),
        ("line", pa.int64()),
        ("format", pa.string()),
        ("log_version", pa.string()),
        ("hardware", pa.string()),
        ("hardware_rule", pa.string()),
        ("target", pa.string()),
        ("target_kind", pa.string()),
        ("target_keys", pa.list_(pa.string())),
        ("target_mcpu", pa.string()),
        ("target_arch", pa.string()),
        ("target_model", pa.string()),
        ("target_mtriple", pa.string()),
        ("target_num_cores", pa.int64()),
        ("target_max_num_threads", pa.int64()),
        ("target_warp_size", pa.int64()),
        ("target_attrs", pa.string()),
    ]
    + [(f"hw_{n}", pa.int64()) for n in HW_PARAM_NAMES]
    + [
        ("workload_key", pa.string()),
        ("workload_name", pa.string()),
        ("workload_hash", pa.string()),
        ("workload_args", pa.list_(pa.float64())),
        ("workload_str_args", pa.list_(pa.string())),
        ("task_id", pa.string()),
        ("steps", pa.list_(STEP_TYPE)),
        ("n_steps", pa.int32()),
        ("costs", pa.list_(pa.float64())),
        ("mean_cost", pa.float32()),
        ("error_no", pa.int32()),
        ("error_name", pa.string()),
        ("is_valid", pa.bool_()),
        ("all_cost", pa.float64()),
        ("timestamp", pa.float64()),
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        ("source_file", pa.string()),
        ("line", pa.int64()),
        ("reason", pa.string()),
        ("raw", pa.string()),
    ]
)

# MetaSchedule workloads: the IRModule is kept so features can be extracted without the original script.
WORKLOAD_SCHEMA = pa.schema(
    [
        ("workload_key", pa.string()),
        ("workload_name", pa.string()),
        ("source_file", pa.string()),
        ("line", pa.int64()),
        ("ir_module_json", pa.string()),
    ]
)

COLUMNS = RECORD_SCHEMA.names
