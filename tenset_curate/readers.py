"""Readers: Ansor/TenSet JSON lines (v0.2-v0.6, plain or gzip) and MetaSchedule JSON databases.

A reader turns one input unit (one log file, or one MetaSchedule database = workload file + record file) into
column batches of ``schema.RECORD_SCHEMA`` plus quarantine rows. It never drops a line silently: every line of the
source is a row, a quarantined line (with the reason), or a comment/blank line, and ``FileStats`` checks
``rows + quarantined + comments == lines``.

Speed matters (TenSet has 52M records): a line is parsed once with orjson and its fields are appended to plain
Python lists (one list per column, flat value lists plus offsets for the nested ``steps``), which become Arrow
arrays in bulk. Target strings and workload keys repeat across a file, so their parses are cached.

Ansor logs have a compiled fast path (``_scan.c``, see its header): blocks of whole lines go to C, which returns
every line it can convert exactly as the Python code here would as packed column arrays, and hands back every other
line (unusual escapes, non-ASCII text, huge integers, malformed steps, invalid JSON, ...) to the Python code, which
gives the reference row or quarantine reason. Both paths read the same blocks (``iter_chunks``), so they agree on
every file, broken streams included (tests/test_scan.py). ``TENSET_CURATE_PURE_PYTHON=1`` turns the fast path off.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import math
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

try:  # vectorised step typing; the pure-Python reference below is the fallback and the test oracle
    from .fast_steps import steps_from_json
except ImportError:  # pragma: no cover
    steps_from_json = None

try:  # the compiled Ansor line scanner (_scan.c, built by `pip install`); without it the Python reader runs
    from . import _scan
except ImportError:  # pragma: no cover - a build without a C compiler
    _scan = None
_ms_trace = getattr(_scan, "ms_trace", None)  # its MetaSchedule trace path (_Columns.add_ms_trace)

from .schema import (
    ERROR_NAMES,
    FAILED_COST_THRESHOLD,
    HW_PARAM_NAMES,
    QUARANTINE_SCHEMA,
    RECORD_SCHEMA,
    STEP_TYPE,
    WORKLOAD_SCHEMA,
)

BATCH_ROWS = 10_000
MS_FAILURE_ERROR_NO = ERROR_NAMES.index("UNKNOWN_ERROR")


class InputError(ValueError):
    """A whole input cannot be read (missing file, unknown format). Names the file."""


@dataclass
class FileStats:
    source_file: str
    lines: int = 0
    rows: int = 0
    quarantined: int = 0
    comments: int = 0  # blank lines, '#' comment lines and (Ansor, as TVM reads them) lines starting with a space
    failed: int = 0  # rows whose measurement failed (is_valid false)
    hardware_rules: dict = field(default_factory=dict)
    hardware: dict = field(default_factory=dict)
    stream_error: str | None = None

    def check(self) -> None:
        if self.rows + self.quarantined + self.comments != self.lines:
            raise AssertionError(
                f"{self.source_file}: unbalanced counts: {self.rows} rows + {self.quarantined} quarantined + "
                f"{self.comments} comments != {self.lines} lines"
            )

    def to_dict(self) -> dict:
        return {
            "lines": self.lines,
            "rows": self.rows,
            "quarantined": self.quarantined,
            "comments": self.comments,
            "failed": self.failed,
            "hardware": dict(sorted(self.hardware.items())),
            "hardware_rules": dict(sorted(self.hardware_rules.items())),
            "stream_error": self.stream_error,
        }


# --------------------------------------------------------------------------------------------------------------
# Targets and workload keys


_TARGET_INT_ATTRS = {
    "num-cores": "num_cores",
    "num_cores": "num_cores",
    "max_num_threads": "max_num_threads",
    "max-num-threads": "max_num_threads",
    "thread_warp_size": "warp_size",
    "thread-warp-size": "warp_size",
}


def _as_int(v):
    try:
        x = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    if not -(1 << 63) <= x < (1 << 63):
        raise ValueError(f"target attribute {x} is outside int64")
    return x


# Every step kind TVM's auto_scheduler writes, with the arguments its reader takes, in order
# (src/auto_scheduler/transform_step.cc: StepReadFromRecord and each step's ``Step(dmlc::JSONReader*)``; the steps
# reader in measure_record.cc then checks the step's list has ended). "i" is an integer (null and booleans are read
# as integers, as before), "L" a list of integers, "s" a string. A step of another kind, or with other arguments,
# makes TVM's own reader fail the line, so it is quarantined: an argument missing, added or out of order would
# otherwise move every later value of the step into another feature. The layout is checked, not the values' ranges
# (TVM reads an int32, and a bool for SP's inner_to_outer and FFSP's factor_or_nparts). _scan.c and fast_steps.py
# keep the same table.
ANSOR_STEP_ARGS = {
    "AN": (("stage_id", "i"), ("iter_id", "i"), ("annotation", "i")),
    "FU": (("stage_id", "i"), ("fused_ids", "L")),
    "PR": (("stage_id", "i"), ("iter_id", "i"), ("pragma_type", "s")),
    "RE": (("stage_id", "i"), ("after_ids", "L")),
    "SP": (("stage_id", "i"), ("iter_id", "i"), ("extent", "i"), ("lengths", "L"), ("inner_to_outer", "i")),
    "FSP": (("stage_id", "i"), ("iter_id", "i"), ("src_step_id", "i"), ("n_split", "i")),
    "FFSP": (("stage_id", "i"), ("iter_id", "i"), ("src_step_ids", "L"), ("level", "i"), ("factor_or_nparts", "i")),
    "SA": (("stage_id", "i"), ("iter_id", "i"), ("factor", "i"), ("offset", "i")),
    "CA": (("stage_id", "i"), ("target_stage_id", "i"), ("target_iter_id", "i")),
    "CI": (("stage_id", "i"),),
    "CR": (("stage_id", "i"),),
    "CHR": (("stage_id", "i"), ("scope_name", "s"), ("reader_stage_ids", "L")),
    "CHW": (("stage_id", "i"), ("scope_name", "s")),
    "RF": (("stage_id", "i"), ("iter_id", "i"), ("factor_iter_id", "i")),
}
ANSOR_STEP_KINDS = frozenset(ANSOR_STEP_ARGS)
ANSOR_STEP_SIGNATURES = {k: "".join(t for _, t in v) for k, v in ANSOR_STEP_ARGS.items()}  # "SP": "iiiLi"
# MetaSchedule instructions whose inputs are the loops they act on, as Ansor's FU and RE list their iterators: the
# reader keeps how many (_Columns._add_ms_trace_py; _scan.c's ms_trace keeps the same list)
MS_LOOP_LIST_KINDS = frozenset({"Fuse", "Reorder"})


def ansor_step_signature(args) -> str:
    """The layout of a step's arguments (after its kind) in ``ANSOR_STEP_ARGS``' letters; "?" for a value no
    argument can be (a float, an object)."""
    out = []
    for a in args:
        t = type(a)
        out.append("i" if t is int or t is bool or a is None else "L" if t is list else "s" if t is str else "?")
    return "".join(out)


def _bad_step_args(step: list) -> str:
    """The quarantine reason for a step of a known kind whose arguments are not the ones TVM reads."""
    kind = step[0]
    want = ", ".join(f"{n} (a list)" if t == "L" else f"{n} (a string)" if t == "s" else n
                     for n, t in ANSOR_STEP_ARGS[kind])
    return f"step {kind} takes [{want}] as TVM reads it, not {str(step)[:80]}"


DEVICE_ATTRS = ("arch", "mcpu", "model", "mtriple")  # the target attributes that tell one machine from another


def device_of(kind: str | None, *attrs: str | None) -> str:
    """A target as a device: its kind and whichever of ``DEVICE_ATTRS`` (in that order) it names, for example
    ``cuda -arch=sm_86`` or ``llvm -mcpu=znver4``. Two logs of one task on devices that differ here are two
    machines: TenSet keys a task by (workload key, target) and takes each one's best cost apart."""
    return " ".join([kind or "?"] + [f"-{a}={v}" for a, v in zip(DEVICE_ATTRS, attrs) if v])


DEVICE_COLUMNS = [f"target_{c}" for c in ("kind", *DEVICE_ATTRS)]


def devices_by_hardware(records) -> dict[str, set[str]]:
    """Per hardware name, the devices (``device_of``) of ``records`` (an Arrow table or batch with ``hardware`` and
    ``DEVICE_COLUMNS``): convert's summary and ``curate info`` both ask, and warn when a name has several."""
    t = pa.Table.from_batches([records]) if isinstance(records, pa.RecordBatch) else records
    out: dict[str, set[str]] = {}
    for d in t.select(["hardware", *DEVICE_COLUMNS]).group_by(["hardware", *DEVICE_COLUMNS]).aggregate([]).to_pylist():
        if d["target_kind"]:
            out.setdefault(d["hardware"], set()).add(device_of(*(d[c] for c in DEVICE_COLUMNS)))
    return out


@lru_cache(maxsize=4096)
def parse_target(target: str) -> tuple:
    """Parse a TVM target, either the old command-line string (``cuda -keys=cuda,gpu -arch=sm_80``) or a JSON dict.

    Returns a tuple (kind, keys, mcpu, arch, model, mtriple, num_cores, max_num_threads, warp_size, attrs_json).
    Every attribute is kept in ``attrs_json``; nothing the string names is dropped.
    """
    attrs: dict = {}
    s = target.strip()
    if s.startswith("{"):
        d = orjson.loads(s)
        if not isinstance(d, dict):
            raise ValueError("target JSON is not an object")
        attrs = d
        kind = str(d.get("kind", ""))
        keys = d.get("keys") or []
        keys = [str(k) for k in keys] if isinstance(keys, list) else [str(keys)]
    else:
        parts = s.split()
        if not parts:
            raise ValueError("empty target string")
        kind = parts[0]
        attrs["kind"] = kind
        for p in parts[1:]:
            if p.startswith("-"):
                p = p.lstrip("-")
                k, sep, v = p.partition("=")
                attrs[k] = v if sep else True
            else:  # a stray token, e.g. a -libs value split by spaces: keep it
                attrs.setdefault("_tokens", []).append(p)
        keys = attrs.get("keys")
        keys = keys.split(",") if isinstance(keys, str) else []
    ints = {"num_cores": None, "max_num_threads": None, "warp_size": None}
    for k, name in _TARGET_INT_ATTRS.items():
        if k in attrs and ints[name] is None:
            ints[name] = _as_int(attrs[k])

    def sv(k):
        v = attrs.get(k)
        return None if v is None or v is True else str(v)

    return (
        kind,
        keys,
        sv("mcpu"),
        sv("arch"),
        sv("model"),
        sv("mtriple"),
        ints["num_cores"],
        ints["max_num_threads"],
        ints["warp_size"],
        orjson.dumps(attrs, option=orjson.OPT_SORT_KEYS).decode(),
    )


_INT_ONLY = {int}
_INT_FLOAT = {int, float}
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_MD5 = re.compile(r"^[0-9a-f]{32}$")


def _flatten_numeric(x, nums: list, strs: list) -> None:
    if isinstance(x, bool):
        nums.append(float(x))
    elif isinstance(x, (int, float)):
        nums.append(float(x))
    elif isinstance(x, str):
        strs.append(x)
    elif isinstance(x, list):
        for y in x:
            _flatten_numeric(y, nums, strs)
    elif x is None:
        strs.append("None")
    else:
        raise ValueError(f"unexpected {type(x).__name__} in workload key")


@lru_cache(maxsize=65536)
def parse_workload_key(key: str) -> tuple:
    """Parse an Ansor workload key in any of its three styles.

    TenSet flat ``["<md5>", 1, 56, 56, 64, ...]``, nested ``["<md5>", [1, 56, 56, 64], ...]`` and registered
    names ``["conv2d_layer", 128, ..., "SAME"]``. Returns (name, hash, numeric args, string args): ``name`` is the
    registered name or the md5, ``hash`` the md5 for TenSet keys and a blake2b of the key otherwise.
    """
    v = orjson.loads(key)
    if not isinstance(v, list) or not v or not isinstance(v[0], str):
        raise ValueError("workload key is not a JSON list starting with a name or hash")
    name = v[0]
    nums: list = []
    strs: list = []
    _flatten_numeric(v[1:], nums, strs)
    whash = name if _MD5.match(name) else hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    return name, whash, nums, strs


@lru_cache(maxsize=65536)
def task_id_of(workload_key: str, target_kind: str) -> str:
    return hashlib.blake2b(f"{workload_key}\x00{target_kind}".encode(), digest_size=8).hexdigest()


# --------------------------------------------------------------------------------------------------------------
# Column builder


class _Columns:
    """Flat per-column Python lists, turned into one Arrow record batch at a time."""

    __slots__ = (
        "scalar",
        "target_keys",
        "wl_args",
        "wl_str_args",
        "costs",
        "step_offsets",
        "step_kind",
        "ints_off",
        "ints_val",
        "lists_off",
        "lists_inner_off",
        "lists_val",
        "strs_off",
        "strs_val",
        "floats_off",
        "floats_val",
        "steps_json",
        "raws",
        "rows",
        "hwctx",
        "source_file",
        "n",
    )

    SCALARS = [
        "record_id", "source_file", "line", "format", "log_version", "hardware", "hardware_rule", "target",
        "target_kind", "target_mcpu", "target_arch", "target_model", "target_mtriple", "target_num_cores",
        "target_max_num_threads", "target_warp_size", "target_attrs",
    ] + [f"hw_{n}" for n in HW_PARAM_NAMES] + [
        "workload_key", "workload_name", "workload_hash", "task_id", "n_steps", "mean_cost", "error_no",
        "error_name", "is_valid", "all_cost", "timestamp",
    ]

    def __init__(self):
        self.scalar = {c: [] for c in self.SCALARS}
        self.target_keys = []
        self.wl_args = []
        self.wl_str_args = []
        self.costs = []
        self.step_offsets = [0]
        self.step_kind = []
        self.ints_off = [0]
        self.ints_val = []
        self.lists_off = [0]
        self.lists_inner_off = [0]
        self.lists_val = []
        self.strs_off = [0]
        self.strs_val = []
        self.floats_off = [0]
        self.floats_val = []
        self.steps_json = []  # Ansor: compact JSON of each record's steps, typed in bulk by to_batch
        self.raws = []  # Ansor: the raw lines, to quarantine a record whose steps turn out malformed
        self.rows = []  # Ansor: one tuple per record, expanded into columns by _ansor_columns
        self.hwctx = None
        self.source_file = None
        self.n = 0

    def to_batch(self) -> tuple[pa.RecordBatch, dict[int, str]]:
        """Build the batch; returns it with {row: reason} for rows whose steps are malformed (Ansor only)."""
        bad: dict[int, str] = {}
        if self.rows:
            self._ansor_columns()
        if self.steps_json:
            steps, bad = steps_from_json(self.steps_json)
            self.scalar["n_steps"] = steps.value_lengths().fill_null(0).cast(pa.int32())
        else:
            steps = self._built_steps()
        cols = {}
        for f in RECORD_SCHEMA:
            name = f.name
            if name == "steps":
                cols[name] = steps
            elif name == "target_keys":
                cols[name] = pa.array(self.target_keys, f.type)
            elif name == "workload_args":
                cols[name] = pa.array(self.wl_args, f.type)
            elif name == "workload_str_args":
                cols[name] = pa.array(self.wl_str_args, f.type)
            elif name == "costs":
                cols[name] = pa.array(self.costs, f.type)
            else:
                cols[name] = pa.array(self.scalar[name], f.type)
        return pa.RecordBatch.from_pydict(cols, schema=RECORD_SCHEMA), bad

    def _ansor_columns(self) -> None:
        """Expand the per-record tuples of an Ansor batch into columns; per-target and per-key parses run once per
        distinct value, the rest are list comprehensions (a per-record append to 40 lists costs more)."""
        (lines, raws, versions, targets, wkeys, hwps, blobs, costs, means, errs, valids, all_costs,
         stamps) = map(list, zip(*self.rows))
        s = self.scalar
        n = len(lines)
        blake = hashlib.blake2b
        s["record_id"] = [blake(r, digest_size=8).hexdigest() for r in raws]
        s["source_file"] = [self.source_file] * n
        s["line"] = lines
        s["format"] = ["ansor"] * n
        s["log_version"] = versions
        s["target"] = targets
        tg = {t: parse_target(t) for t in set(targets)}
        per = [tg[t] for t in targets]
        names = ["target_kind", "target_keys", "target_mcpu", "target_arch", "target_model", "target_mtriple",
                 "target_num_cores", "target_max_num_threads", "target_warp_size", "target_attrs"]
        for j, name in enumerate(names):
            if name == "target_keys":
                self.target_keys = [x[1] for x in per]
            else:
                s[name] = [x[j] for x in per]
        res = {t: self.hwctx.resolve(v[4]) for t, v in tg.items()}
        s["hardware"] = [res[t][0] for t in targets]
        s["hardware_rule"] = [res[t][1] for t in targets]
        none8 = (None,) * 8
        hw_cols = list(zip(*[h if h is not None else none8 for h in hwps]))
        for j, name in enumerate(HW_PARAM_NAMES):
            s[f"hw_{name}"] = list(hw_cols[j])
        wk = {k: parse_workload_key(k) for k in set(wkeys)}
        s["workload_key"] = wkeys
        s["workload_name"] = [wk[k][0] for k in wkeys]
        s["workload_hash"] = [wk[k][1] for k in wkeys]
        self.wl_args = [wk[k][2] for k in wkeys]
        self.wl_str_args = [wk[k][3] for k in wkeys]
        tid = {(k, t): task_id_of(k, tg[t][0]) for k, t in set(zip(wkeys, targets))}
        s["task_id"] = [tid[kt] for kt in zip(wkeys, targets)]
        self.steps_json = blobs
        self.raws = list(zip(lines, raws))
        self.costs = costs
        s["mean_cost"] = means
        s["error_no"] = errs
        s["error_name"] = [ERROR_NAMES[e] if e < len(ERROR_NAMES) else f"ERROR_{e}" for e in errs]
        s["is_valid"] = valids
        s["all_cost"] = all_costs
        s["timestamp"] = stamps

    def _built_steps(self) -> pa.ListArray:
        n_steps_total = len(self.step_kind)
        ints = pa.ListArray.from_arrays(pa.array(self.ints_off, pa.int32()), pa.array(self.ints_val, pa.int64()))
        inner = pa.ListArray.from_arrays(
            pa.array(self.lists_inner_off, pa.int32()), pa.array(self.lists_val, pa.int64())
        )
        lists = pa.ListArray.from_arrays(pa.array(self.lists_off, pa.int32()), inner)
        strs = pa.ListArray.from_arrays(pa.array(self.strs_off, pa.int32()), pa.array(self.strs_val, pa.string()))
        floats = pa.ListArray.from_arrays(
            pa.array(self.floats_off, pa.int32()), pa.array(self.floats_val, pa.float64())
        )
        step_struct = pa.StructArray.from_arrays(
            [pa.array(self.step_kind, pa.string()), ints, lists, strs, floats], fields=list(STEP_TYPE)
        )
        assert len(step_struct) == n_steps_total
        return pa.ListArray.from_arrays(pa.array(self.step_offsets, pa.int32()), step_struct)

    # -- steps ---------------------------------------------------------------------------------------------------

    def add_ansor_steps(self, steps: list) -> int:
        """Append Ansor steps; raise ValueError on a malformed step (the caller rolls back)."""
        n_ints, n_lists = len(self.ints_val), len(self.lists_val)
        kinds = self.step_kind
        ints_val, ints_off = self.ints_val, self.ints_off
        lists_val, lists_inner_off, lists_off = self.lists_val, self.lists_inner_off, self.lists_off
        strs_val, strs_off = self.strs_val, self.strs_off
        floats_val, floats_off = self.floats_val, self.floats_off
        for s in steps:
            if type(s) is not list or not s or type(s[0]) is not str:
                raise ValueError(f"step is not a list starting with its kind: {str(s)[:60]}")
            if s[0] not in ANSOR_STEP_KINDS:
                raise ValueError(f"unknown step kind {s[0][:20]!r} (TVM writes {', '.join(sorted(ANSOR_STEP_KINDS))})")
            if ansor_step_signature(s[1:]) != ANSOR_STEP_SIGNATURES[s[0]]:
                raise ValueError(_bad_step_args(s))
            kinds.append(s[0])
            for a in s[1:]:
                t = type(a)
                if t is int:
                    ints_val.append(a)
                elif t is list:
                    for x in a:
                        if type(x) is not int:
                            if x is None:  # Ansor writes null for an unknown split length
                                x = -1
                            elif type(x) is bool:
                                x = int(x)
                            else:
                                raise ValueError(f"non-integer list element {x!r} in step {s[0]}")
                        lists_val.append(x)
                    lists_inner_off.append(len(lists_val))
                elif t is str:
                    strs_val.append(a)
                elif a is None:
                    ints_val.append(-1)
                else:  # a bool (the signature let nothing else through)
                    ints_val.append(int(a))
            ints_off.append(len(ints_val))
            lists_off.append(len(lists_inner_off) - 1)
            strs_off.append(len(strs_val))
            floats_off.append(len(floats_val))
        for vals, start in ((ints_val, n_ints), (lists_val, n_lists)):  # Arrow int64 would fail the whole batch
            if len(vals) > start and not _I64_MIN <= min(vals[start:]) <= max(vals[start:]) <= _I64_MAX:
                x = next(x for x in vals[start:] if not _I64_MIN <= x <= _I64_MAX)
                raise ValueError(f"integer {x} out of int64 range")
        self.step_offsets.append(len(kinds))
        return len(steps)

    def add_ms_trace(self, insts: list, decisions: list) -> int:
        """Append a MetaSchedule trace: one step per instruction, its decision folded in. A step holds the literal
        inputs (SSA names are dropped; a Fuse or Reorder counts its loops, ``_add_ms_trace_py``) and the
        attributes, then the instruction's decision, each value in its typed list. The compiled ``_scan.ms_trace``
        does it where it is sure to do what ``_add_ms_trace_py`` does (tests/test_scan.py compares the two on every
        real trace and on mutated ones); otherwise, or with the compiled path off (``scan_enabled``), the Python path
        runs."""
        if _ms_trace is not None and scan_enabled():
            mark = self.mark()
            n = _ms_trace(insts, decisions, self.step_lists())
            if n is not None:
                return n
            self.rollback_steps(*mark)
        return self._add_ms_trace_py(insts, decisions)

    def step_lists(self) -> tuple:
        """The lists a schedule is appended to, in ``_scan.ms_trace``'s order: kinds, then ints, lists, strs and
        floats (values and per-step offsets), then the per-record step offsets."""
        return (self.step_kind, self.ints_val, self.ints_off, self.lists_val, self.lists_inner_off, self.lists_off,
                self.strs_val, self.strs_off, self.floats_val, self.floats_off, self.step_offsets)

    def _add_ms_trace_py(self, insts: list, decisions: list) -> int:
        """The reference (and fallback) path of ``add_ms_trace``: literal inputs inline (SSA names are skipped on
        their first character), attributes and decisions by ``_add_ms_value``. A Fuse or Reorder
        (``MS_LOOP_LIST_KINDS``) also gets, first among its lists, one -1 per loop it takes (an input that is an SSA
        name: a first character that is an ASCII letter or '_'), as an Ansor FU or RE step lists its iterators: the
        number of loops fused or reordered is the instruction's parameter."""
        dec = {}
        for d in decisions:
            if type(d) is not list or len(d) != 2 or type(d[0]) is not int:
                raise ValueError(f"malformed decision {str(d)[:60]}")
            dec[d[0]] = d[1]
        kinds_append = self.step_kind.append
        ints = self.ints_val
        ints_append, strs_append, floats_append = ints.append, self.strs_val.append, self.floats_val.append
        ints_off, lists_off, strs_off, floats_off = self.ints_off, self.lists_off, self.strs_off, self.floats_off
        lists_inner_off, strs, floats = self.lists_inner_off, self.strs_val, self.floats_val
        add_value = self._add_ms_value
        for idx, inst in enumerate(insts):
            if type(inst) is not list or len(inst) != 4 or type(inst[0]) is not str:
                raise ValueError(f"malformed trace instruction {str(inst)[:60]}")
            kind, inputs, attrs, _outputs = inst
            if type(inputs) is not list or type(attrs) is not list:
                raise ValueError(f"malformed trace instruction {kind}")
            kinds_append(kind)
            n_names = 0
            for a in inputs:  # SSA names are dropped (counted); literal inputs are kept
                t = type(a)
                if t is str:
                    if a:
                        c = a[0]
                        if c == '"':
                            strs_append(a.strip('"'))
                        elif (c == "-" or c.isdigit()) and _is_int_str(a):  # an SSA name starts with a letter
                            ints_append(_i64(int(a)))
                        elif c.isascii() and (c.isalpha() or c == "_"):
                            n_names += 1
                elif t is int:
                    ints_append(_i64(a))
                elif t is float:
                    floats_append(a)
            if kind in MS_LOOP_LIST_KINDS:  # the loops it takes, one -1 each (named, not numbered, in a trace)
                self.lists_val.extend([-1] * n_names)
                lists_inner_off.append(len(self.lists_val))
            for a in attrs:
                add_value(a)
            if idx in dec:
                add_value(dec.pop(idx))
            ints_off.append(len(ints))
            lists_off.append(len(lists_inner_off) - 1)
            strs_off.append(len(strs))
            floats_off.append(len(floats))
        if dec:
            raise ValueError(f"decision for a missing instruction index {sorted(dec)[:3]}")
        self.step_offsets.append(len(self.step_kind))
        return len(insts)

    def _add_ms_value(self, a) -> None:
        t = type(a)
        if t is int:
            self.ints_val.append(_i64(a))
        elif t is bool:
            self.ints_val.append(int(a))
        elif t is float:
            self.floats_val.append(a)
        elif t is str:
            self.strs_val.append(a)
        elif a is None:
            pass
        elif t is list:
            types = set(map(type, a))
            if types <= _INT_ONLY:  # (an empty list too)
                vals = self.lists_val
                if a and not _I64_MIN <= min(a) <= max(a) <= _I64_MAX:
                    bad = next(x for x in a if not _I64_MIN <= x <= _I64_MAX)  # the first, as _i64 would name it
                    raise ValueError(f"integer {bad} out of int64 range")
                vals.extend(a)
                self.lists_inner_off.append(len(vals))
            elif types <= _INT_FLOAT:
                self.floats_val.extend(map(float, a))
            else:
                for x in a:
                    self._add_ms_value(x)
        elif t is dict:
            self.strs_val.append(orjson.dumps(a, option=orjson.OPT_SORT_KEYS).decode())
        else:
            raise ValueError(f"unexpected {t.__name__} in trace")

    def rollback_steps(self, n_kinds: int, n_ints: int, n_lists_inner: int, n_lists_val: int, n_strs: int,
                       n_floats: int, n_steps_off: int) -> None:
        del self.step_kind[n_kinds:]
        del self.ints_val[n_ints:]
        del self.ints_off[n_kinds + 1:]
        del self.lists_val[n_lists_val:]
        del self.lists_inner_off[n_lists_inner:]
        del self.lists_off[n_kinds + 1:]
        del self.strs_val[n_strs:]
        del self.strs_off[n_kinds + 1:]
        del self.floats_val[n_floats:]
        del self.floats_off[n_kinds + 1:]
        del self.step_offsets[n_steps_off:]

    def mark(self) -> tuple:
        return (len(self.step_kind), len(self.ints_val), len(self.lists_inner_off), len(self.lists_val),
                len(self.strs_val), len(self.floats_val), len(self.step_offsets))


def _i64(x: int) -> int:
    if not _I64_MIN <= x <= _I64_MAX:
        raise ValueError(f"integer {x} out of int64 range")
    return x


def _is_int_str(s: str) -> bool:
    return s.lstrip("-").isdigit()


# --------------------------------------------------------------------------------------------------------------
# Costs


def summarize_costs(costs, error_no: int) -> tuple[list, float | None, bool]:
    """Return (costs as floats, mean_cost or None, is_valid). A failed or invalid measurement never gets a mean.

    The mean is rounded to float32, the type of the mean_cost column (so the row holds exactly what this returns);
    a mean that rounds to 0 or up to the failure threshold makes the measurement invalid."""
    if type(costs) is not list:
        raise ValueError("costs is not a list")
    out = []
    ok = error_no == 0 and len(costs) > 0
    for c in costs:
        t = type(c)
        if t is float or t is int:
            c = float(c)
        elif t is str:  # e.g. "inf" / "nan" written by hand-edited logs
            try:
                c = float(c)
            except ValueError:
                raise ValueError(f"non-numeric cost {c[:20]!r}") from None
        elif c is None:
            c = math.nan
        else:
            raise ValueError(f"non-numeric cost of type {t.__name__}")
        if not (0.0 < c < FAILED_COST_THRESHOLD):  # catches NaN, inf, <= 0 and 1e10 placeholders
            ok = False
        out.append(c)
    mean = _f32(math.fsum(out) / len(out)) if ok else None
    if mean is not None and not 0.0 < mean < FAILED_COST_THRESHOLD:  # rounded to 0 or up to the threshold
        mean, ok = None, False
    return out, mean, ok


_F32 = struct.Struct("<f")


def _f32(x: float) -> float:
    """``x`` rounded to float32 (what the mean_cost column stores), as a Python float."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:  # beyond float32's range: inf, which no valid mean is
        return math.inf


# --------------------------------------------------------------------------------------------------------------
# Hardware naming


@dataclass(frozen=True)
class HardwareContext:
    """What the file-level rules know. ``-model=`` in a record's target overrides all of them."""

    measure_records: str | None  # the folder under measure_records/
    cli: str | None  # --hardware
    parent_folder: str  # the input folder given on the command line, else the file's parent folder

    def resolve(self, model: str | None) -> tuple[str, str]:
        if model:
            return model, "target-model"
        if self.measure_records:
            return self.measure_records, "measure_records"
        if self.cli:
            return self.cli, "cli"
        return self.parent_folder, "parent-folder"


def hardware_context(path: Path, cli: str | None, input_root: Path | None) -> HardwareContext:
    """The names a file's path gives, read from the path as given, symbolic links NOT followed: a TenSet layout
    whose ``measure_records/<hardware>/`` files or folders link to logs kept elsewhere is named by the layout,
    not by where the links point."""
    parts = Path(os.path.abspath(path)).parts
    mr = None
    for i, p in enumerate(parts[:-2]):
        if p == "measure_records":
            mr = parts[i + 1]
    if input_root is not None and input_root.is_dir():
        parent = Path(os.path.abspath(input_root)).name
    else:
        parent = Path(os.path.abspath(path)).parent.name
    return HardwareContext(mr, cli, parent)


# --------------------------------------------------------------------------------------------------------------
# Line streams


CHUNK_BYTES = 1 << 22  # a read block; lines are cut at its last newline


GZIP_MAGIC = b"\x1f\x8b"


def _gunzip(fh) -> Iterator[bytes]:
    """The decompressed bytes of a gzip stream, piece by piece as the compressed bytes arrive (members one after
    another, zero padding between them skipped, each member's CRC and length checked: what ``gzip`` reads). A
    stream cut short raises ``EOFError`` only after every byte decompressed before the cut was yielded, where
    ``gzip.open(...).read(n)`` drops the whole read that hit the end. Pieces are at most ``CHUNK_BYTES``."""
    d, fresh, buf, full = zlib.decompressobj(31), True, b"", False
    while True:
        raw = fh.read(1 << 20)
        if not raw and not full:
            break
        buf = buf + raw if buf else raw
        while buf or full:  # full: the last piece filled its limit, so zlib may hold more output
            if fresh:  # a member starts here: zero padding may come first, then the magic bytes
                buf = buf.lstrip(b"\0")
                if len(buf) < 2:
                    break  # the magic needs another read
                if buf[:2] != GZIP_MAGIC:
                    raise gzip.BadGzipFile(f"Not a gzipped file ({buf[:2]!r})")
                fresh = False
            out = d.decompress(buf, CHUNK_BYTES)
            full = len(out) == CHUNK_BYTES
            if out:
                yield out
            if d.eof:
                buf, d, fresh, full = d.unused_data, zlib.decompressobj(31), True, False
            else:
                buf = d.unconsumed_tail
    if not fresh or buf:
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")


def iter_chunks(path: Path) -> Iterator[tuple[int, bytes | None, str | None]]:
    """Yield (first_line_no, block, None): blocks of whole lines (newline-terminated, except a last line without
    one) of about ``CHUNK_BYTES``; on a broken stream, the whole lines read before the break, then (line_no, None,
    reason) last, for the line the break cuts through (the quarantined line; the reason says how many of its bytes
    were read).

    Handles gzip by magic bytes, not by name. Line endings, a BOM and CRs are left to the consumer."""
    n = 0
    buf = bytearray()
    try:
        with open(path, "rb") as fh:
            gz = fh.read(2) == GZIP_MAGIC
            fh.seek(0)
            pieces = _gunzip(fh) if gz else iter(lambda: fh.read(CHUNK_BYTES), b"")
            for piece in pieces:
                buf += piece
                if len(buf) < CHUNK_BYTES:
                    continue
                cut = buf.rfind(b"\n") + 1
                if cut == 0:  # no line ends in it yet: read on
                    continue
                chunk = bytes(buf[:cut])
                del buf[:cut]
                yield n + 1, chunk, None
                n += chunk.count(b"\n")
    except (EOFError, OSError, zlib.error, gzip.BadGzipFile) as e:
        cut = buf.rfind(b"\n") + 1
        if cut:  # the whole lines read before the break
            chunk = bytes(buf[:cut])
            del buf[:cut]
            yield n + 1, chunk, None
            n += chunk.count(b"\n")
        part = f"; {len(buf)} bytes of line {n + 1} read before it" if buf else ""
        yield n + 1, None, f"corrupt or truncated compressed stream after line {n}{part}: {type(e).__name__}: {e}"
        return
    if buf:
        yield n + 1, bytes(buf), None


def iter_lines(path: Path) -> Iterator[tuple[int, bytes | None, str | None]]:
    """Yield (line_no, raw_bytes, None) per line; on a broken stream yield (line_no, None, reason) last.

    Handles gzip (by magic bytes, not by name), a UTF-8 BOM and CRLF endings. The line terminator is stripped.
    """
    for first, chunk, err in iter_chunks(path):
        if chunk is None:
            yield first, None, err
            return
        for n, raw in block_lines(chunk, first):
            yield n, raw, None


def block_lines(chunk: bytes, first: int) -> Iterator[tuple[int, bytes]]:
    """(line_no, raw_bytes) of every line of an ``iter_chunks`` block: split on \\n, one trailing \\r dropped, a BOM
    dropped on line 1."""
    lines = chunk.split(b"\n")
    if chunk.endswith(b"\n"):
        lines.pop()
    for n, raw in enumerate(lines, first):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        yield n, raw


def detect_format(path: Path) -> str:
    """'metaschedule' for MetaSchedule database files, 'netinfo' for TenSet pickles, else 'ansor'."""
    name = path.name
    if name.startswith("database_tuning_record.json") or name.startswith("database_workload.json"):
        return "metaschedule"
    if name.endswith((".pkl", ".pkl.gz")):
        return "netinfo"
    return "ansor"


# --------------------------------------------------------------------------------------------------------------
# Ansor reader


class _Sink:
    """Collects rows and quarantine entries; yields record batches of at most BATCH_ROWS rows."""

    def __init__(self, source_file: str, hwctx: "HardwareContext | None" = None):
        self.source_file = source_file
        self.hwctx = hwctx
        self.cols = _Columns()
        self.quarantine: list[tuple] = []
        self.stats = FileStats(source_file)

    def quarantine_line(self, line: int, reason: str, raw: bytes | str | None) -> None:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", errors="backslashreplace")
        self.quarantine.append((self.source_file, line, reason, raw if raw is not None else ""))
        self.stats.quarantined += 1

    def flush(self) -> pa.RecordBatch | None:
        if self.cols.n == 0:
            return None
        cols = self.cols
        cols.hwctx = self.hwctx
        cols.source_file = self.source_file
        ansor = bool(cols.rows)
        b, bad = cols.to_batch()
        self.cols = _Columns()
        if bad:  # malformed steps found in bulk: the row becomes a quarantined line
            keep = [True] * b.num_rows
            for i, reason in sorted(bad.items()):
                keep[i] = False
                lineno, raw = cols.raws[i]
                self.quarantine_line(lineno, f"invalid record: malformed steps: {reason}", raw)
            b = b.filter(pa.array(keep))
        if ansor:  # Ansor rows are counted per batch, after malformed steps were taken out
            self.count_rows(b)
        return b if b.num_rows else None

    def stream_broken(self, line: int, reason: str) -> None:
        """The file's stream broke before ``line``: one quarantined line says so, and it counts as a line."""
        self.stats.stream_error = reason
        self.stats.lines += 1
        self.quarantine_line(line, reason, None)

    def count_rows(self, b: pa.RecordBatch) -> None:
        """Add a batch of Ansor rows to the file's counts (rows, failed, per hardware and naming rule)."""
        st = self.stats
        st.rows += b.num_rows
        st.failed += b.num_rows - pc.sum(b.column("is_valid")).as_py() if b.num_rows else 0
        for col, d in (("hardware", st.hardware), ("hardware_rule", st.hardware_rules)):
            vc = pc.value_counts(b.column(col))
            for name, cnt in zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist()):
                d[name] = d.get(name, 0) + cnt

    def quarantine_table(self) -> pa.Table:
        return quarantine_table(self.quarantine)


def quarantine_table(entries: list[tuple]) -> pa.Table:
    """(source_file, line, reason, raw) tuples as a QUARANTINE_SCHEMA table."""
    cols = list(zip(*entries)) if entries else [[], [], [], []]
    return pa.table([pa.array(list(c), f.type) for c, f in zip(cols, QUARANTINE_SCHEMA)], schema=QUARANTINE_SCHEMA)


def read_ansor(path: Path, source_file: str, hw: HardwareContext, sink: _Sink | None = None) -> Iterator:
    """Yield RecordBatches for one Ansor/TenSet log; ``sink.stats`` and ``sink.quarantine`` fill as it goes."""
    sink = sink or _Sink(source_file)
    sink.hwctx = hw
    if scan_enabled():
        yield from _read_ansor_scan(path, sink)
        return
    for lineno, raw, err in iter_lines(path):
        if raw is None:
            sink.stream_broken(lineno, err)
            break
        sink.stats.lines += 1
        _ansor_line(sink, lineno, raw)
        if sink.cols.n >= BATCH_ROWS:
            b = sink.flush()
            if b is not None:
                yield b
    b = sink.flush()
    if b is not None:
        yield b


# what a malformed record raises in the Python reader's checks (the line is quarantined with the message)
_VALIDATION_ERRORS = (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError)


def scan_enabled() -> bool:
    """Whether the compiled paths run (Ansor logs through the scanner, MetaSchedule traces through ``ms_trace``):
    built, and not turned off by TENSET_CURATE_PURE_PYTHON."""
    return _scan is not None and os.environ.get("TENSET_CURATE_PURE_PYTHON", "") in ("", "0")


_SKIP = object()


def _json_line(sink: _Sink, lineno: int, raw: bytes):
    """The line's JSON value; ``_SKIP`` for a comment or blank line (counted) and for invalid JSON (quarantined)."""
    stripped = raw.strip()
    if not stripped or stripped[:1] == b"#":
        sink.stats.comments += 1
        return _SKIP
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        sink.quarantine_line(lineno, f"invalid JSON: {e}", raw)
        return _SKIP


def _ansor_line(sink: _Sink, lineno: int, raw: bytes) -> None:
    """One line through the Python reader: a comment, a row in ``sink.cols``, or a quarantined line. A line that
    starts with a space is a comment, as in TVM's ``RecordReaderNode::ReadNext`` (``measure_record.cc``: "skip
    comment lines begin with '#' or ' '"), so no line TVM's ``load_records`` passes over becomes a row."""
    if raw[:1] == b" ":
        sink.stats.comments += 1
        return
    rec = _json_line(sink, lineno, raw)
    if rec is _SKIP:
        return
    try:
        _add_ansor_record(sink.cols, rec, raw, lineno, sink.stats)
    except _VALIDATION_ERRORS as e:
        sink.quarantine_line(lineno, f"invalid record: {type(e).__name__}: {e}", raw)


def _read_ansor_scan(path: Path, sink: _Sink) -> Iterator:
    """``read_ansor`` with the compiled scanner: per block, the rows C converted, and the lines it handed back
    run through ``_ansor_line``; the two sets of rows are merged in line order."""
    st = sink.stats
    for first, chunk, err in iter_chunks(path):
        if chunk is None:
            sink.stream_broken(first, err)
            break
        if len(chunk) > SCAN_MAX_BYTES:  # a block of one huge line (the scanner's offsets are int32): all Python
            fast, lines = None, list(block_lines(chunk, first))
            st.lines += len(lines)
        else:
            r = _scan.scan(chunk, first, first == 1, FAILED_COST_THRESHOLD)
            st.lines += r["n_lines"]
            st.comments += r["n_comments"]
            fast, demoted = _scan_batch(r, sink.source_file, sink.hwctx)
            slow = np.frombuffer(r["slow"], np.int64).reshape(-1, 3)
            if len(demoted):
                slow = np.concatenate([slow, demoted])
                slow = slow[np.argsort(slow[:, 0], kind="stable")]
            lines = [(lineno, chunk[s:e]) for lineno, s, e in slow.tolist()]
        for lineno, raw in lines:
            _ansor_line(sink, lineno, raw)
        py = sink.flush()
        if fast is not None:
            sink.count_rows(fast)
        if fast is not None and py is not None:
            t = pa.Table.from_batches([fast, py]).sort_by("line").combine_chunks()
            out = t.to_batches()[0]
        else:
            out = fast if fast is not None else py
        if out is not None:
            yield out


SCAN_MAX_BYTES = _scan.MAX_BLOCK_BYTES if _scan is not None else 0  # _scan.c refuses larger blocks


_TARGET_COLUMNS = ["target_kind", "target_keys", "target_mcpu", "target_arch", "target_model", "target_mtriple",
                   "target_num_cores", "target_max_num_threads", "target_warp_size", "target_attrs", "hardware",
                   "hardware_rule"]
_KEY_COLUMNS = ["workload_name", "workload_hash", "workload_args", "workload_str_args"]


def _row_table(names: list[str], values: tuple | None) -> pa.Table:
    return pa.table({c: pa.array([None if values is None else values[j]], RECORD_SCHEMA.field(c).type)
                     for j, c in enumerate(names)})


@lru_cache(maxsize=4096)
def _target_row(target: str, hwctx: HardwareContext) -> pa.Table | None:
    """What the Python reader derives from a target string, as a one-row table; None when it does not parse."""
    try:
        t = parse_target(target)
    except _VALIDATION_ERRORS:
        return None
    return _row_table(_TARGET_COLUMNS, t + hwctx.resolve(t[4]))


@lru_cache(maxsize=65536)
def _key_row(key: str) -> pa.Table | None:
    try:
        return _row_table(_KEY_COLUMNS, parse_workload_key(key))
    except _VALIDATION_ERRORS:
        return None


def _per_unique(ids: np.ndarray, uniq: list[str], row, names: list[str]) -> tuple[pa.Table, np.ndarray]:
    """The derived columns of every row (one-row tables per distinct string, taken per row), and which rows'
    string did not parse."""
    u, inv = np.unique(ids, return_inverse=True)
    rows = [row(uniq[i]) for i in u.tolist()]
    bad = np.array([x is None for x in rows])
    null = _row_table(names, None)
    tab = pa.concat_tables([x if x is not None else null for x in rows]).take(inv.astype(np.int32))
    return tab, bad[inv]


def _scan_batch(r: dict, source_file: str, hwctx: HardwareContext) -> tuple[pa.RecordBatch | None, np.ndarray]:
    """The RecordBatch of the rows ``_scan.scan`` converted, and the (line, start, end) rows whose target or
    workload key does not parse (they go back to the Python reader, which quarantines them with the reason)."""
    line = np.frombuffer(r["line"], np.int64)
    n = len(line)
    if n == 0:
        return None, np.empty((0, 3), np.int64)
    so = np.frombuffer(r["strings_off"], np.uint32).tolist()
    sd = r["strings"]
    uniq = [sd[a:b].decode() for a, b in zip(so[:-1], so[1:])]
    strings = pa.array(uniq, pa.string())

    def i32(k):
        return np.frombuffer(r[k], np.int32)

    def i64(k):
        return np.frombuffer(r[k], np.int64)

    def f64(k):
        return np.frombuffer(r[k], np.float64)

    def flag(k):
        return np.frombuffer(r[k], np.bool_)

    lst = pa.ListArray.from_arrays
    tid, kid = i32("target_id"), i32("key_id")
    ttab, tbad = _per_unique(tid, uniq, lambda t: _target_row(t, hwctx), _TARGET_COLUMNS)
    ktab, kbad = _per_unique(kid, uniq, _key_row, _KEY_COLUMNS)
    bad = tbad | kbad
    span = i64("span").reshape(-1, 2)
    demoted = np.column_stack([line[bad], span[bad]]) if bad.any() else np.empty((0, 3), np.int64)

    # a row of each (target, key) pair, for its target kind
    pairs, first, pinv = np.unique(tid.astype(np.int64) * len(uniq) + kid, return_index=True, return_inverse=True)
    kinds = ttab.column("target_kind").to_pylist()
    task_ids = [None if kinds[i] is None else task_id_of(uniq[p % len(uniq)], kinds[i])
                for p, i in zip(pairs.tolist(), first.tolist())]
    err = i32("error_no")
    errs, err_inv = np.unique(err, return_inverse=True)
    err_names = [ERROR_NAMES[e] if e < len(ERROR_NAMES) else f"ERROR_{e}" for e in errs.tolist()]
    hw = i64("hw").reshape(-1, 8)
    hw_missing = ~flag("hw_ok")
    valid = flag("valid")
    n_str = len(r["str_off"]) // 4 - 1
    n_kind = len(r["kind_off"]) // 4 - 1
    step = pa.StructArray.from_arrays(
        [
            pa.Array.from_buffers(pa.string(), n_kind, [None, pa.py_buffer(r["kind_off"]), pa.py_buffer(r["kind"])]),
            lst(pa.array(i32("ints_off")), pa.array(i64("ints"))),
            lst(pa.array(i32("lists_off")), lst(pa.array(i32("inner_off")), pa.array(i64("lists")))),
            lst(pa.array(i32("strs_off")), pa.Array.from_buffers(
                pa.string(), n_str, [None, pa.py_buffer(r["str_off"]), pa.py_buffer(r["str"])])),
            lst(pa.array(i32("floats_off")), pa.array(f64("floats"))),
        ],
        fields=list(STEP_TYPE),
    )
    step_off = i32("step_off")
    zeros = np.zeros(n, np.int32)
    cols = {
        "record_id": pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(
            np.arange(0, 16 * (n + 1), 16, dtype=np.int32)), pa.py_buffer(r["record_id"])]),
        "source_file": pa.array([source_file], pa.string()).take(zeros),
        "line": pa.array(line),
        "format": pa.array(["ansor"], pa.string()).take(zeros),
        "log_version": strings.take(i32("version_id")),
        "target": strings.take(tid),
        "workload_key": strings.take(kid),
        "task_id": pa.array(task_ids, pa.string()).take(pinv.astype(np.int32)),
        "steps": lst(pa.array(step_off), step),
        "n_steps": pa.array(np.diff(step_off)),
        "costs": lst(pa.array(i32("cost_off")), pa.array(f64("costs"))),
        "mean_cost": pa.array(np.frombuffer(r["mean"], np.float32), mask=~valid),
        "error_no": pa.array(err),
        "error_name": pa.array(err_names, pa.string()).take(err_inv.astype(np.int32)),
        "is_valid": pa.array(valid),
        "all_cost": pa.array(f64("all_cost"), mask=~flag("all_cost_ok")),
        "timestamp": pa.array(f64("timestamp"), mask=~flag("timestamp_ok")),
    }
    for tab in (ttab, ktab):
        for name in tab.column_names:
            cols[name] = tab.column(name).combine_chunks()
    for j, name in enumerate(HW_PARAM_NAMES):
        cols[f"hw_{name}"] = pa.array(hw[:, j], mask=hw_missing)
    b = pa.RecordBatch.from_arrays([cols[f.name] for f in RECORD_SCHEMA], schema=RECORD_SCHEMA)
    if bad.any():
        b = b.filter(pa.array(~bad))
    return (b if b.num_rows else None), demoted


ANSOR_VERSIONS = frozenset(f"v0.{i}" for i in range(1, 7))  # a line without "v" is v0.1


def _add_ansor_record(cols: _Columns, rec, raw: bytes, lineno: int, st: FileStats) -> None:
    if type(rec) is not dict:
        raise ValueError("record is not a JSON object")
    for k in ("i", "r"):
        if k not in rec:
            raise ValueError(f"record has no key {k!r} (an Ansor record holds 'i', 'r' and 'v')")
    inp = rec["i"]
    res = rec["r"]
    version = rec.get("v", "v0.1")
    if type(version) is not str:
        raise ValueError("version 'v' is not a string")
    if version not in ANSOR_VERSIONS:
        raise ValueError(f"unknown log version {version[:40]!r} (Ansor wrote v0.1 ... v0.6)")
    if type(inp) is not list or len(inp) != 2 or type(inp[0]) is not list:
        raise ValueError("'i' is not [task, state]")
    task = inp[0]
    if not 2 <= len(task) <= 6:
        raise ValueError(f"task tuple has {len(task)} items (expected 2 to 6)")
    wkey, target = task[0], task[1]
    if type(wkey) is not str or type(target) is not str:
        raise ValueError("workload key or target is not a string")
    hwp = task[2] if len(task) > 2 else None
    if hwp is not None:
        if type(hwp) is not list or len(hwp) != 8 or not set(map(type, hwp)) <= _INT_ONLY:
            raise ValueError("hardware params are not 8 integers")
        if not (_I64_MIN <= min(hwp) and max(hwp) <= _I64_MAX):
            raise ValueError("a hardware param is outside int64")
    state = inp[1]
    if type(state) is not list or len(state) != 2 or type(state[1]) is not list:
        raise ValueError("state is not [[], steps]")
    if type(res) is not list or len(res) < 4:
        raise ValueError("'r' is not [costs, error_no, all_cost, timestamp]")
    costs, error_no, all_cost, ts = res[0], res[1], res[2], res[3]
    if type(error_no) is not int or not 0 <= error_no < 1 << 31:
        raise ValueError(f"error_no {error_no!r} is not a non-negative integer")
    if all_cost is not None and type(all_cost) not in (int, float):
        raise ValueError("all_cost is not a number")
    if ts is not None and type(ts) not in (int, float):
        raise ValueError("timestamp is not a number")
    cost_list, mean, valid = summarize_costs(costs, error_no)
    parse_target(target)  # validate now (cached), so a bad target quarantines this line
    parse_workload_key(wkey)
    cols.rows.append((lineno, raw, version, target, wkey, hwp, orjson.dumps(state[1]), cost_list, mean, error_no,
                      valid, float(all_cost) if all_cost is not None else None,
                      float(ts) if ts is not None else None))
    cols.n += 1


def _append_target(s: dict, tgt: tuple) -> None:
    s["target_kind"].append(tgt[0])
    s["target_mcpu"].append(tgt[2])
    s["target_arch"].append(tgt[3])
    s["target_model"].append(tgt[4])
    s["target_mtriple"].append(tgt[5])
    s["target_num_cores"].append(tgt[6])
    s["target_max_num_threads"].append(tgt[7])
    s["target_warp_size"].append(tgt[8])
    s["target_attrs"].append(tgt[9])


# --------------------------------------------------------------------------------------------------------------
# MetaSchedule reader


def ms_workload_name(mod_json: str) -> str:
    """Name a MetaSchedule workload by its TIR blocks (``pad_temp+conv2d_nchw+T_add``), from the IRModule JSON."""
    try:
        g = orjson.loads(mod_json)
        nodes = g["nodes"]
        names = []
        for node in nodes:  # TVM <= 0.2x: {"type_key", "attrs"}; TVM 0.27 (tvm-ffi): {"type", "data"}
            if not isinstance(node, dict):
                continue
            tk = node.get("type_key") or node.get("type") or ""
            if tk in ("tir.Block", "tir.SBlock", "s_tir.SBlock", "tirx.SBlock", "tirx.Block") or tk.endswith(".SBlock"):
                fields = node.get("attrs") or node.get("data") or {}
                ref = fields.get("name_hint") if isinstance(fields, dict) else None
                if ref is not None:
                    target = nodes[int(ref)]
                    nm = target.get("repr_str")
                    if nm is None and "data" in target:
                        nm = target["data"]
                    if isinstance(nm, str) and nm != "root" and nm not in names:
                        names.append(nm)
        if names:
            return "+".join(names)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        pass
    return "unknown"


def _decode_ms_workload(b64: str) -> str:
    blob = base64.b64decode(b64, validate=True)
    if len(blob) < 8:
        raise ValueError("workload blob shorter than its 8-byte length header")
    n = int.from_bytes(blob[:8], "little")
    body = blob[8:]
    if n != len(body):
        raise ValueError(f"workload blob length header {n} != {len(body)} bytes")
    return body.decode("utf-8")


def read_metaschedule(workload_path: Path, record_path: Path, source_file: str, hw: HardwareContext,
                      sink: _Sink | None = None, workload_source: str | None = None):
    """Yield RecordBatches for one MetaSchedule JSON database; ``sink.workloads`` gets WORKLOAD_SCHEMA rows.

    Each tuning record becomes one row. Failed trials (``run_secs`` of 1e10) are rows with ``is_valid`` false and a
    null ``mean_cost``. A record whose workload index is not in the workload file is quarantined.
    """
    sink = sink or _Sink(source_file)
    workload_source = workload_source or source_file
    wl_rows: list[tuple] = []
    workloads: list = []  # index -> (shash, name) or None
    wstats = FileStats(workload_source)
    for lineno, raw, err in iter_lines(workload_path):
        wstats.lines += 1
        if raw is None:
            wstats.stream_error = err
            sink.quarantine.append((workload_source, lineno, err, ""))
            wstats.quarantined += 1
            break
        if not raw.strip() or raw.strip()[:1] == b"#":
            wstats.comments += 1
            continue
        try:
            v = orjson.loads(raw)
            if type(v) is not list or len(v) != 2 or type(v[0]) is not str or type(v[1]) is not str:
                raise ValueError("workload line is not [structural_hash, base64]")
            mod_json = _decode_ms_workload(v[1])
            name = ms_workload_name(mod_json)
            workloads.append((v[0], name))
            wl_rows.append((v[0], name, workload_source, lineno, mod_json))
            wstats.rows += 1
        except (ValueError, UnicodeDecodeError, orjson.JSONDecodeError) as e:
            # keep the index aligned: a broken workload line still occupies its index
            workloads.append(None)
            sink.quarantine.append((workload_source, lineno, f"invalid workload: {e}",
                                    raw.decode("utf-8", "backslashreplace")))
            wstats.quarantined += 1
    sink.workload_stats = wstats
    sink.workloads = pa.table(
        [pa.array([r[i] for r in wl_rows], f.type) for i, f in enumerate(WORKLOAD_SCHEMA)], schema=WORKLOAD_SCHEMA
    )
    st = sink.stats
    cols = sink.cols
    blake = hashlib.blake2b
    for lineno, raw, err in iter_lines(record_path):
        if raw is None:
            sink.stream_broken(lineno, err)
            break
        st.lines += 1
        rec = _json_line(sink, lineno, raw)
        if rec is _SKIP:
            continue
        mark = cols.mark()
        try:
            _add_ms_record(cols, rec, raw, lineno, source_file, hw, st, workloads, blake)
        except _VALIDATION_ERRORS as e:
            cols.rollback_steps(*mark)
            sink.quarantine_line(lineno, f"invalid record: {type(e).__name__}: {e}", raw)
            continue
        if cols.n >= BATCH_ROWS:
            b = sink.flush()
            if b is not None:
                yield b
            cols = sink.cols
    b = sink.flush()
    if b is not None:
        yield b


READER_VERSION = "3"  # 3: Ansor steps whose arguments are not the ones TVM reads are quarantined, and MetaSchedule's
# Fuse and Reorder keep how many loops they take (2: MetaSchedule records' workload_args from their args_info; 1: always
# empty)


def ms_workload_args(args_info) -> list[float]:
    """The numbers a MetaSchedule record's ``args_info`` gives its workload (``[["TENSOR", dtype, shape], ...]``, the
    entry function's buffers as ``ArgInfo.as_json`` writes them): every shape, flattened in order. An Ansor workload
    key lists the same kind of numbers (its tensors' shapes), which ``workload_args`` holds for Ansor records. A
    missing or malformed ``args_info`` (TVM treats it as optional) gives none."""
    out: list[float] = []
    if type(args_info) is not list:
        return out
    for a in args_info:
        if type(a) is list and len(a) == 3 and a[0] == "TENSOR" and type(a[2]) is list:
            out.extend(float(x) for x in a[2] if type(x) is int and _I64_MIN <= x <= _I64_MAX)
    return out


def _add_ms_record(cols, rec, raw, lineno, source_file, hw, st, workloads, blake) -> None:
    if type(rec) is not list or len(rec) != 2 or type(rec[0]) is not int or type(rec[1]) is not list:
        raise ValueError("record is not [workload_index, [...]]")
    widx, body = rec
    if not 0 <= widx < len(workloads) or workloads[widx] is None:
        raise ValueError(f"workload index {widx} is not in the workload file ({len(workloads)} workloads)")
    shash, wname = workloads[widx]
    if len(body) < 3:
        raise ValueError("tuning record has fewer than 3 items (trace, run_secs, target)")
    trace, run_secs, target = body[0], body[1], body[2]
    if type(trace) is not list or len(trace) != 2 or type(trace[0]) is not list or type(trace[1]) is not list:
        raise ValueError("trace is not [instructions, decisions]")
    if run_secs is None:
        run_secs = []
    if type(target) is not dict:
        raise ValueError("target is not a JSON object")
    target_str = orjson.dumps(target, option=orjson.OPT_SORT_KEYS).decode()
    tgt = parse_target(target_str)
    cost_list, mean, valid = summarize_costs(run_secs, 0)
    error_no = 0 if valid else MS_FAILURE_ERROR_NO
    n_steps = cols.add_ms_trace(trace[0], trace[1])
    hardware, rule = hw.resolve(tgt[4])
    s = cols.scalar
    h = blake(digest_size=8)
    h.update(shash.encode())
    h.update(b"\n")
    h.update(raw)
    s["record_id"].append(h.hexdigest())
    s["source_file"].append(source_file)
    s["line"].append(lineno)
    s["format"].append("metaschedule")
    s["log_version"].append("ms")
    s["hardware"].append(hardware)
    s["hardware_rule"].append(rule)
    s["target"].append(target_str)
    _append_target(s, tgt)
    cols.target_keys.append(tgt[1])
    for n in HW_PARAM_NAMES:
        s[f"hw_{n}"].append(None)
    s["workload_key"].append(shash)
    s["workload_name"].append(wname)
    s["workload_hash"].append(shash)
    cols.wl_args.append(ms_workload_args(body[3] if len(body) > 3 else None))
    cols.wl_str_args.append([])
    s["task_id"].append(task_id_of(shash, tgt[0]))
    s["n_steps"].append(n_steps)
    cols.costs.append(cost_list)
    s["mean_cost"].append(mean)
    s["error_no"].append(error_no)
    s["error_name"].append(ERROR_NAMES[error_no])
    s["is_valid"].append(valid)
    s["all_cost"].append(None)
    s["timestamp"].append(None)
    cols.n += 1
    st.rows += 1
    if not valid:
        st.failed += 1
    st.hardware[hardware] = st.hardware.get(hardware, 0) + 1
    st.hardware_rules[rule] = st.hardware_rules.get(rule, 0) + 1


def steps_from_json_reference(blobs: list[bytes]) -> tuple[pa.ListArray, dict[int, str]]:
    """Pure-Python typing of Ansor steps (the oracle for ``fast_steps``): one compact JSON text per record."""
    cols = _Columns()
    bad: dict[int, str] = {}
    for i, blob in enumerate(blobs):
        mark = cols.mark()
        try:
            steps = orjson.loads(blob)
            if type(steps) is not list:
                raise ValueError("steps is not a list")
            cols.add_ansor_steps(steps)
        except (ValueError, RecursionError) as e:
            cols.rollback_steps(*mark)
            cols.step_offsets.append(len(cols.step_kind))
            bad[i] = f"{type(e).__name__}: nesting too deep" if isinstance(e, RecursionError) else str(e)
    return cols._built_steps(), bad


if steps_from_json is None:
    steps_from_json = steps_from_json_reference
