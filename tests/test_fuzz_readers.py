"""Fuzzing the log readers and ``convert`` with mutated REAL log lines.

Every generated input starts from real lines of several real logs (Ansor v0.2-v0.6 from tvm-ci-logs, roller-k80,
roller-mi50, mmperf-a100 and bennu; MetaSchedule databases of mlc-llm-vicuna-metal and bennu-a100-resnet34) and is
then mutated: truncated lines, flipped / inserted / deleted bytes, a random JSON node replaced by a value of another
type (including NaN / Infinity / 1e400 / 2**64 tokens and 10-10,000 levels of nested brackets), costs replaced by
NaN / inf / huge / negative / zero / empty lists, error numbers, target strings and hardware params rewritten,
workload keys rewritten inside their JSON, invalid UTF-8, a BOM, CRLF endings, blank and comment lines; at file
level empty files, files without a final newline, plain, gzip, truncated gzip, bit-flipped gzip, multi-member gzip,
gzip with trailing garbage and fake gzip magic; for MetaSchedule also broken workload lines (bad base64, wrong length
header, non-UTF-8 body, wrong types, a deleted line that shifts the indices) and records pointing at missing or
broken workload indices.

For EVERY input the oracle checks: no exception escapes (the readers must quarantine, never raise); no hang (a
watchdog alarm per example, plus the Hypothesis deadline); ``rows + quarantined + comments == lines``; ``lines`` is
exactly the number of lines written (computed independently from the bytes); the row lines and the quarantined lines
are disjoint and together are exactly the non-comment lines; Ansor record ids hash the exact line written there;
every MetaSchedule row names the workload its index points at; every quarantine entry has a file, a line and a
reason; no row with ``is_valid == False`` has a ``mean_cost``; every ``mean_cost`` is finite, > 0 and < 1e9; a valid
row has error 0 and costs all in (0, 1e9) whose mean is ``mean_cost``. ``convert`` is covered too (manifest counts,
Parquet read back from disk).

Number of generated inputs (each generated LINE is one input; each test asserts its minimum):
  default ``ci`` profile (max_examples = 100), about 25 s on 2 shared cores:
    test_fuzz_ansor_lines       200 examples x >= 50 lines                       >= 10,000 lines (~14,700 run)
    test_fuzz_metaschedule      100 databases x >= 20 records + 20-25 workloads  >=  4,000 lines (~5,500 run)
    test_fuzz_files             100 files x 0-24 lines + a container mutation    (~1,250 lines, not counted below)
    test_fuzz_convert            30 datasets x >= 10 lines                       >=    300 lines (~1,450 run)
                                                                        at least    14,300 lines (~22,900 run)
  ``nightly`` profile (HYPOTHESIS_PROFILE=nightly, max_examples = 5000): 50x as many (>= 715,000 lines).

Product bugs this suite found (B1 int64 overflow, B2 deep nesting, B3 orjson stack overflow, B4 hardware folder
collision; B5 in test_concurrency.py) are fixed; the tests at the end of this file keep them fixed. ``known_bug``
is the hook for isolating a newly found bug line by line while the fuzzers keep guarding every other property.
"""
from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import zlib
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from tenset_curate import readers as R
from tenset_curate.convert import _safe_part, convert
from tenset_curate.readers import InputError
from tenset_curate.schema import FAILED_COST_THRESHOLD, QUARANTINE_SCHEMA, RECORD_SCHEMA

REPO = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("TENSET_CURATE_REALDATA", REPO.parent / "shared" / "realdata"))

pytestmark = pytest.mark.skipif(not (REAL / "ansor").is_dir(), reason=f"real logs not found under {REAL}")

BOM = b"\xef\xbb\xbf"
HW = R.HardwareContext(None, None, "fuzz")
SCALE = max(1, settings.default.max_examples) / 100  # 1 in the ci profile, 50 in nightly
HANG_SECONDS = 120  # watchdog per example: a hang, not a slow example (the Hypothesis deadline catches those)

# Thousands of small files per test: on tmpfs a write+read costs ~30 us, on this machine's /tmp ~1.3 ms.
SCRATCH = os.environ.get("TENSET_FUZZ_TMP") or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)

KNOWN_HITS: Counter = Counter()  # known-bug triggers met by the fuzzers (reported in the count assertions)


# ----------------------------------------------------------------------------------------------------------------
# Seeds: real lines


ANSOR_SEED_FILES = [
    "ansor/tvm-ci-logs/conv2d.json.gz",  # v0.6 + comment lines
    "ansor/tvm-ci-logs/matmul.json.gz",
    "ansor/tvm-ci-logs/resnet-18-NHWC-B1-cuda.json.gz",
    "ansor/tvm-ci-logs/resnet-50-NHWC-B1-llvm.json.gz",  # TenSet flat keys, older layouts
    "ansor/tvm-ci-logs/sparse_dense.json.gz",
    "ansor/bennu/x86_resnet18.json.gz",  # nested keys
    "ansor/bennu/cpu_matmul_all_compile_errors.json.gz",  # every measurement failed
    "ansor/bennu/cuda_a100_mobilenet.json.gz",
    "ansor/mmperf-a100/matmul_16x512x64.json.gz",  # compile / runtime failures
    "ansor/roller-k80/conv/*.json.gz",
    "ansor/roller-mi50/pooling/*.json.gz",
    "ansor/roller-k80/depthwise/*.json.gz",  # registered names with "SAME"
]


def _gz_lines(path: Path, limit: int | None = None) -> list[bytes]:
    out = []
    with gzip.open(path, "rb") as fh:
        for raw in fh:
            out.append(raw.rstrip(b"\n"))
            if limit is not None and len(out) >= limit:
                break
    return out


@functools.lru_cache(maxsize=None)
def ansor_seeds() -> tuple[bytes, ...]:
    seeds: list[bytes] = []
    for rel in ANSOR_SEED_FILES:
        files = sorted(REAL.glob(rel)) if "*" in rel else [REAL / rel]
        lines = _gz_lines(files[0])
        head, rest = lines[:20], lines[20:]
        step = max(1, len(rest) // 20)
        seeds += head + rest[::step][:20]
    assert sum(1 for s in seeds if s.startswith(b"#")) >= 3, "seed set lost its comment lines"
    seeds.sort(key=lambda s: s.startswith(b"#"))  # seed 0 (what a shrunk example uses) is a record, not a comment
    return tuple(seeds)


@functools.lru_cache(maxsize=None)
def ms_dbs() -> dict[str, tuple[tuple[bytes, ...], tuple[bytes, ...]]]:
    d = REAL / "metaschedule"
    return {
        "vicuna": (tuple(_gz_lines(d / "mlc-llm-vicuna-metal/database_workload.json.gz")),
                   tuple(_gz_lines(d / "mlc-llm-vicuna-metal/database_tuning_record.json.gz"))),
        "resnet34": (tuple(_gz_lines(d / "bennu-a100-resnet34/database_workload.json.gz")),
                     tuple(_gz_lines(d / "bennu-a100-resnet34/database_tuning_record.json.gz", limit=80))),
    }


# ----------------------------------------------------------------------------------------------------------------
# Mutations


class Raw:
    """Raw JSON text spliced in place of a node (NaN, 1e400, 10,000 nested brackets: what orjson cannot dump)."""

    __slots__ = ("text",)

    def __init__(self, text: bytes):
        self.text = text

    def __repr__(self) -> str:
        t = self.text
        return f"Raw({t[:24]!r}{'...' if len(t) > 24 else ''} len={len(t)})"


def deep(depth: int, obj: bool) -> Raw:
    if obj:
        return Raw(b'{"a":' * depth + b"1" + b"}" * depth)
    return Raw(b"[" * depth + b"]" * depth)


RAW_TOKENS = [
    b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1e-400", b"-0.0", b"1E+2", b"18446744073709551615",
    b"18446744073709551616", b"9223372036854775808", b"-9223372036854775809", b"1" * 400, b"01", b"1.", b".5",
    b"-", b"tru", b"nul", b'"\\ud800"', b'"\\u0000"', b'"\xff\xfe"', b'"\xc3"', b"[1,]", b"{,}", b"",
]
SPECIAL = [
    None, True, False, 0, 1, -1, 7, 2**31 - 1, 2**31, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 0.0, -0.0, 5e-324,
    1e-9, 1.0, 1e9, math.nextafter(1e9, 0), 1e10, 1e308, -1e-3, "", "nan", "inf", "-inf", "Infinity", "1e10",
    "0.001", "0", "x", "\u00e9\u20ac\U0001d11e", "#", " ", "\u0000", "a" * 2000, [], [[]], [None], [1, 2, 3],
    ["SP", 0], {}, {"a": 1}, {"kind": "cuda"},
]
DEPTHS = [10, 300, 900, 1000, 2000, 10_000]
INSERTS = [
    b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\r", b"\n", b"\r\n", BOM, b"\\", b'"', b"#", b" ", b"[", b"]",
    b"{", b",", b"\t", b"\x1f\x8b", b"NaN", b"\\u0000", b"\\ud800",
]
WHOLE_LINES = [
    b"", b"   ", b"\t", b"#", b"# a comment", b"  # indented comment", b"\x0c", b"\x00", b"\r", BOM, b"[" * 10_000,
    b"[" * 10_000 + b"]" * 10_000, b"{" * 5_000, b"{}", b"[]", b"null", b"1", b'"str"', b"\xff\xfe\xfd",
    b'{"i": [], "r": []}', b'{"i": [[], [[], []]], "r": [[], 0, 0, 0], "v": "v0.6"}', b"[0, []]", b"[0]",
]
COST_VALUES = [0, 0.0, -0.0, -1.0, 5e-324, 1e-12, 1e-4, 0.5, 1e9, math.nextafter(1e9, 0), 1e10, 1e308, 2**63,
               "nan", "inf", "-inf", "1e-3", "", None, True, "x", []]
TARGET_EDITS = [
    " -model=k80", " -model=", " -model=a/b", " -model=a_b", " -num_cores=4", " -num_cores=99999999999999999999",
    " -max_num_threads=abc", " -thread_warp_size=-1", " -keys=", " -libs=cudnn cublas", " --", " -",
    "=REPLACE=", "=REPLACE=   ", '=REPLACE={"kind": "cuda", "keys": ["gpu"], "model": "t4"}', '=REPLACE={"kind": 3}',
    "=REPLACE=[]", "=REPLACE={", '=REPLACE={"kind": "llvm", "num_cores": 1e300}', "=REPLACE=\u00e9 -model=\u20ac",
    "=DEEP-KEYS=",  # a JSON target whose keys nest 2000 deep (built in mutate: short repr in failure reports)
]
MS_TARGET_KEYS = ["kind", "keys", "model", "max_num_threads", "thread_warp_size", "tag", "mcpu", "host", "arch"]
WIDX = [-1, 0, 1, 2, 19, 20, 22, 23, 24, 10**6, 2**63 - 1, True, None, "0", 1.0, []]

def _random_json(rng, depth: int = 0):
    """A random JSON value (the pool below is fixed: Hypothesis draws indices into it, which is fast)."""
    r = rng.random()
    if depth < 3 and r < 0.25:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 3 and r < 0.4:
        return {rng.choice(["a", "kind", "i", "r", "", "\u00e9"]): _random_json(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
    return rng.choice([
        None, rng.random() < 0.5, rng.randint(-(2**63), 2**64 - 1), rng.randint(-5, 100),
        rng.uniform(-1e12, 1e12), rng.random() * 1e-3, "".join(rng.choice("ab_#[]\"{}\u00e9 \t0") for _ in range(
            rng.randint(0, 6))),
    ])


def _pools():
    import random

    rng = random.Random(20240601)
    # nesting deeper than ~900 triggers known bug B2; kept rare so that few examples need the isolation pass
    values = (SPECIAL + [Raw(t) for t in RAW_TOKENS] + [deep(d, o) for d in DEPTHS for o in (False, True)
                                                        if d < 900 or (d in (1000, 10_000) and not o)]
              + [_random_json(rng) for _ in range(150)])
    cost_atoms = COST_VALUES + [Raw(b"NaN"), Raw(b"Infinity"), Raw(b"-Infinity"), Raw(b"1e400"), Raw(b"1e-400")]
    costs = [[], [Raw(b"NaN")], "1e-3", None, {}, 0.001, [1e9], [math.nextafter(1e9, 0)] * 3, [5e-324] * 3]
    for _ in range(120):
        k = rng.randint(1, 4)
        costs.append([rng.choice(cost_atoms) if rng.random() < 0.5 else rng.uniform(0, 2e9) * rng.random() ** 8
                      for _ in range(k)])
    errnos = [0, 1, 2, 4, 6, 8, 9, 100, -1, 2**31 - 1, 2**31, True, None, "0", 0.0, Raw(b"NaN"), [],
              deep(2000, False)]
    hwps = [[0] * 8, [1] * 7, [1] * 9, [2**63] + [1] * 7, [2**64 - 1] * 8, [2**63 - 1] * 8, [-1] * 8, [1.5] * 8,
            [None] * 8, [True] * 8, None, 3, "x", {}, []]
    return values, costs, errnos, hwps


VALUE_POOL, COST_POOL, ERRNO_POOL, HWP_POOL = _pools()
B64_JUNK = [b"!", b"=", b"\\n", b"\xff", b" "]
LEN_DELTAS = [-1, 1, 2**32, -8, 2**64 - 1]
BODIES = [b"\xff\xfe not utf-8", b"", b"{", b"[]", b'{"nodes": 3}',
          b'{"nodes": [{"type_key": "tir.Block", "attrs": {"name_hint": "9"}}]}',
          b'{"nodes": [{"type_key": "tir.Block", "attrs": {"name_hint": "0"}}]}']
WL_EXTRA_LINES = [b"", b"# removed workload", b"   "]


def _kind_table(weights: dict) -> list[str]:
    table = [k for k, w in weights.items() for _ in range(w)]
    assert len(table) == 100, len(table)
    return table


# A mutation spec is (kind code 0-99, a, b): plain integers, cheap for Hypothesis to draw and to shrink (a code
# below the keep weight means "keep the real line"); ``decode`` turns it into the readable mutation it stands for.
_BYTE_KINDS = {"truncate": 5, "flip": 5, "insert": 6, "delete": 3, "line": 5, "node": 12}
ANSOR_KINDS = _kind_table({"keep": 40, **_BYTE_KINDS, "costs": 8, "error_no": 4, "target": 4, "wkey": 4,
                           "hwparams": 2, "task_len": 2})
MS_RECORD_KINDS = _kind_table({"keep": 45, **_BYTE_KINDS, "widx": 7, "run_secs": 8, "ms_target": 4})
MS_WORKLOAD_KINDS = _kind_table({"keep": 70, "truncate": 3, "flip": 3, "insert": 3, "delete": 2, "line": 3,
                                 "node": 4, "b64_junk": 4, "len_header": 4, "body": 4})

idx = st.integers(0, 2**20)
# (kind code, one 56-bit integer split into a seed index and the parameters a, b): two draws per line
spec = st.tuples(st.integers(0, 99), st.integers(0, 2**56 - 1))


def split_spec(sp: tuple) -> tuple[int, int, int, int]:
    """(kind code, seed index, a, b). Hypothesis draws small integers often: the seed index and ``b`` come from a
    multiplicative hash of all the bits, so they spread out even then (and shrink to 0 with the integer)."""
    code, v = sp
    h = (v * 0x9E3779B97F4A7C15) % 2**64
    return code, h >> 44, v & 0xFFFFF, (h >> 20) & 0xFFFFF


def decode(table: list[str], sp: tuple) -> tuple:
    code, _, a, b = split_spec(sp)
    kind = table[code]
    if kind == "keep":
        return ("keep",)
    if kind == "truncate":
        return ("truncate", a)
    if kind == "flip":
        flips = [(a, b % 255 + 1)] + ([(a * 7919 + b, (b >> 8) % 255 + 1)] if b & 1 else [])
        return ("flip", flips)
    if kind == "insert":
        return ("insert", a, INSERTS[b % len(INSERTS)])
    if kind == "delete":
        return ("delete", a, b % 64 + 1)
    if kind == "line":
        pool = WL_EXTRA_LINES if table is MS_WORKLOAD_KINDS else WHOLE_LINES
        return ("line", pool[b % len(pool)])
    if kind in ("node", "wkey"):
        return (kind, a, VALUE_POOL[b % len(VALUE_POOL)])
    if kind in ("costs", "run_secs"):
        return (kind, COST_POOL[b % len(COST_POOL)])
    if kind == "error_no":
        return ("error_no", ERRNO_POOL[b % len(ERRNO_POOL)])
    if kind == "target":
        return ("target", TARGET_EDITS[b % len(TARGET_EDITS)])
    if kind == "hwparams":
        return ("hwparams", HWP_POOL[b % len(HWP_POOL)])
    if kind == "task_len":
        return ("task_len", b % 9)
    if kind == "widx":
        return ("widx", WIDX[b % len(WIDX)])
    if kind == "ms_target":
        return ("ms_target", MS_TARGET_KEYS[a % len(MS_TARGET_KEYS)], VALUE_POOL[b % len(VALUE_POOL)])
    if kind == "b64_junk":
        return ("b64_junk", a, B64_JUNK[b % len(B64_JUNK)])
    if kind == "len_header":
        return ("len_header", LEN_DELTAS[b % len(LEN_DELTAS)])
    if kind == "body":
        return ("body", BODIES[b % len(BODIES)])
    raise AssertionError(kind)  # pragma: no cover


@contextmanager
def explained(descr):
    """On failure, print the decoded mutations (the drawn integers alone are not readable)."""
    try:
        yield
    except BaseException:
        for line in descr():
            note(line)
        raise


def node_paths(obj, limit: int = 5000) -> list[tuple]:
    paths: list[tuple] = [()]
    stack = [((), obj)]
    while stack and len(paths) < limit:
        p, o = stack.pop()
        if isinstance(o, list):
            items = enumerate(o)
        elif isinstance(o, dict):
            items = o.items()
        else:
            continue
        for k, v in items:
            paths.append(p + (k,))
            stack.append((p + (k,), v))
    return paths


def set_path(obj, path: tuple, value):
    if not path:
        return value
    cur = obj
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return obj


def has_raw(v) -> bool:
    if isinstance(v, Raw):
        return True
    if isinstance(v, list):
        return any(has_raw(x) for x in v)
    if isinstance(v, dict):
        return any(has_raw(x) for x in v.values())
    return False


def dumps_raw(obj) -> bytes:
    raws: list[bytes] = []

    def sub(o):
        if isinstance(o, Raw):
            raws.append(o.text)
            return f"@@RAW{len(raws) - 1}@@"
        if isinstance(o, list):
            return [sub(x) for x in o]
        if isinstance(o, dict):
            return {k: sub(v) for k, v in o.items()}
        return o

    out = orjson.dumps(sub(obj))
    for i, t in enumerate(raws):
        out = out.replace(f'"@@RAW{i}@@"'.encode(), t, 1)
    return out


def _b64_workload(body: bytes, header_delta: int = 0) -> str:
    n = (len(body) + header_delta) % 2**64
    return base64.b64encode(n.to_bytes(8, "little") + body).decode()


def mutate(raw: bytes, mut: tuple) -> bytes:
    kind = mut[0]
    if kind == "keep":
        return raw
    if kind == "truncate":
        return raw[: mut[1] % (len(raw) + 1)]
    if kind == "flip":
        b = bytearray(raw)
        for pos, x in mut[1]:
            if b:
                b[pos % len(b)] ^= x
        return bytes(b)
    if kind == "insert":
        p = mut[1] % (len(raw) + 1)
        return raw[:p] + mut[2] + raw[p:]
    if kind == "delete":
        p = mut[1] % (len(raw) + 1)
        return raw[:p] + raw[p + mut[2]:]
    if kind == "line":
        return mut[1]
    try:  # structural mutations: need the line's JSON (comment lines stay as they are)
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    try:
        if kind == "node":
            paths = node_paths(obj)
            obj = set_path(obj, paths[mut[1] % len(paths)], mut[2])
        elif kind == "costs":
            obj["r"][0] = mut[1]
        elif kind == "error_no":
            obj["r"][1] = mut[1]
        elif kind == "target":
            edit = mut[1]
            if edit == "=DEEP-KEYS=":
                obj["i"][0][1] = '{"kind": "cuda", "keys": ' + "[" * 2000 + "]" * 2000 + "}"
            elif edit.startswith("=REPLACE="):
                obj["i"][0][1] = edit[len("=REPLACE="):]
            else:
                obj["i"][0][1] += edit
        elif kind == "wkey":
            key = orjson.loads(obj["i"][0][0])
            paths = node_paths(key)
            key = set_path(key, paths[mut[1] % len(paths)], mut[2])
            obj["i"][0][0] = dumps_raw(key).decode("utf-8", "replace")
        elif kind == "hwparams":
            task = obj["i"][0]
            if len(task) > 2:
                task[2] = mut[1]
            else:
                task += [mut[1]]
        elif kind == "task_len":
            task = obj["i"][0]
            obj["i"][0] = (task + [None] * 8)[: mut[1]]
        elif kind == "widx":
            obj[0] = mut[1]
        elif kind == "run_secs":
            obj[1][1] = mut[1]
        elif kind == "ms_target":
            obj[1][2][mut[1]] = mut[2]
        elif kind == "b64_junk":
            s = obj[1]
            p = mut[1] % (len(s) + 1)
            obj[1] = s[:p] + mut[2].decode("latin-1") + s[p:]
        elif kind == "len_header":
            blob = base64.b64decode(obj[1])
            obj[1] = _b64_workload(blob[8:], mut[1])
        elif kind == "body":
            obj[1] = _b64_workload(mut[1])
        else:  # pragma: no cover
            raise AssertionError(kind)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        return raw  # the mutation does not apply to this line's shape: the line is still an input
    return dumps_raw(obj) if any(has_raw(x) for x in mut[1:]) else orjson.dumps(obj)


# ----------------------------------------------------------------------------------------------------------------
# File assembly and the oracle


def assemble(lines: list[bytes], bom: bool = False, crlf: bool = False, final_newline: bool = True) -> bytes:
    term = b"\r\n" if crlf else b"\n"
    data = term.join(lines)
    if lines and final_newline:
        data += term
    return (BOM + data) if bom else data


def plain_lines(plain: bytes) -> list[bytes]:
    """The lines a correct reader sees: split on \\n only, one trailing \\r dropped, a BOM dropped on line 1."""
    parts = plain.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    out = []
    for i, p in enumerate(parts, 1):
        if p.endswith(b"\r"):
            p = p[:-1]
        if i == 1 and p.startswith(BOM):
            p = p[3:]
        out.append(p)
    return out


def is_comment(raw: bytes, ansor: bool) -> bool:
    """Blank and '#' lines; in an Ansor log also a line starting with a space, which TVM's RecordReader skips."""
    s = raw.strip()
    return not s or s[:1] == b"#" or (ansor and raw[:1] == b" ")


def container(plain: bytes, how: tuple) -> bytes:
    kind = how[0]
    if kind == "plain":
        return plain
    gz = gzip.compress(plain, mtime=0)
    if kind == "gzip":
        return gz
    if kind == "gzip_trunc":
        return gz[: how[1] % len(gz)]
    if kind == "gzip_flip":
        b = bytearray(gz)
        b[how[1] % len(b)] ^= how[2]
        return bytes(b)
    if kind == "gzip_concat":
        half = len(plain) // 2
        return gzip.compress(plain[:half], mtime=0) + gzip.compress(plain[half:], mtime=0)
    if kind == "gzip_trailer":
        return gz + how[1]
    if kind == "fake_magic":
        return b"\x1f\x8b" + plain
    raise AssertionError(kind)  # pragma: no cover


containers = st.one_of(
    st.just(("plain",)), st.just(("gzip",)), st.tuples(st.just("gzip_trunc"), idx),
    st.tuples(st.just("gzip_flip"), idx, st.integers(1, 255)), st.just(("gzip_concat",)),
    st.tuples(st.just("gzip_trailer"), st.sampled_from([b"\x00" * 8, b"garbage", b"\x1f\x8b", b"\x1f", b"\n"])),
    st.just(("fake_magic",)),
)


def decoded(data: bytes) -> bytes | None:
    """What the bytes decompress to, or None when the stream is broken (the reader must then say so)."""
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        return gzip.decompress(data)
    except (EOFError, OSError, ValueError, zlib.error):
        return None


class Hang(Exception):
    pass


# Batch sizes: the real one, and small ones that put batch boundaries (and the flush that moves rows with malformed
# steps to the quarantine) inside every example; fewer than 8 records per batch also take the steps' slow path.
batch_rows = st.sampled_from([R.BATCH_ROWS, R.BATCH_ROWS, 1, 3, 8, 17])


@contextmanager
def batch_size(n: int):
    old = R.BATCH_ROWS
    R.BATCH_ROWS = n
    try:
        yield
    finally:
        R.BATCH_ROWS = old


@contextmanager
def watchdog(seconds: int = HANG_SECONDS):
    def fire(signum, frame):
        raise Hang(f"example still running after {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextmanager
def scratch():
    d = Path(tempfile.mkdtemp(prefix="fuzz-", dir=SCRATCH))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def known_bug(exc: BaseException) -> str | None:
    """Signature of a known, still-open product bug (documented by an xfail(strict=True) test), else None.

    An exception it recognises makes the fuzzers isolate the trigger lines (bisection), replace them by comments and
    re-check the example, so one open bug does not hide every other property. Nothing is open today: B1 (int64
    overflow) and B2 (deep nesting) are fixed, so every exception fails the example. To register a new bug, return
    its id here for its exception (type and message) and add the xfail test; remove both once it is fixed."""
    return None


def check_rows(tbl: pa.Table) -> None:
    """Record invariants on rows (batches from a reader or a Parquet shard read back)."""
    assert tbl.schema.equals(RECORD_SCHEMA), tbl.schema
    valid = tbl.column("is_valid").to_pylist()
    mean = tbl.column("mean_cost").to_pylist()
    costs = tbl.column("costs").to_pylist()
    err = tbl.column("error_no").to_pylist()
    for v, m, c, e in zip(valid, mean, costs, err):
        assert v is not None and e is not None and e >= 0
        if not v:
            assert m is None, f"invalid row has mean_cost {m}"
        if m is not None:
            assert math.isfinite(m) and 0.0 < m < FAILED_COST_THRESHOLD, f"mean_cost {m!r}"
        if v:
            assert e == 0 and c, (e, c)
            assert all(x is not None and 0.0 < x < FAILED_COST_THRESHOLD for x in c), c
            # mean_cost is float32: the exact mean rounded to the nearest float32
            assert m is not None and m == struct.unpack("<f", struct.pack("<f", math.fsum(c) / len(c)))[0], (m, c)
    n_steps = tbl.column("n_steps")
    lens = pc.fill_null(pc.list_value_length(tbl.column("steps")), 0).cast(pa.int32())
    assert n_steps.to_pylist() == lens.to_pylist()
    for col in ("record_id", "source_file", "line", "format", "hardware", "task_id", "workload_key"):
        assert tbl.column(col).null_count == 0, col


def check_quarantine(entries: list[tuple], n_lines: dict[str, int]) -> None:
    for src, line, reason, raw in entries:
        assert isinstance(src, str) and src in n_lines, (src, list(n_lines))
        assert isinstance(line, int) and 1 <= line <= n_lines[src], (src, line, n_lines[src])
        assert isinstance(reason, str) and reason.strip(), (src, line, reason)
        assert isinstance(raw, str)


def check_coverage(raws: list[bytes] | None, n_lines: int, row_lines: list[int], q_lines: list[int],
                   ansor: bool = False) -> None:
    """Row lines and quarantined lines: no duplicates, disjoint, and exactly the non-comment lines."""
    assert len(set(row_lines)) == len(row_lines), "a line became two rows"
    assert len(set(q_lines)) == len(q_lines), "a line was quarantined twice"
    assert not set(row_lines) & set(q_lines), "a line is both a row and quarantined"
    assert all(1 <= x <= n_lines for x in row_lines + q_lines)
    if raws is not None:
        non_comment = {i for i, r in enumerate(raws, 1) if not is_comment(r, ansor)}
        assert set(row_lines) | set(q_lines) == non_comment


def run_ansor(path: Path, label: str) -> tuple[R._Sink, pa.Table]:
    sink = R._Sink(label)
    batches = list(R.read_ansor(path, label, HW, sink))
    tbl = pa.Table.from_batches(batches, schema=RECORD_SCHEMA)
    return sink, tbl


def check_ansor(data: bytes, sink: R._Sink, tbl: pa.Table, label: str) -> None:
    st_ = sink.stats
    st_.check()
    plain = decoded(data)
    check_rows(tbl)
    assert tbl.num_rows == st_.rows
    assert st_.failed == tbl.num_rows - sum(tbl.column("is_valid").to_pylist())
    assert set(tbl.column("source_file").to_pylist()) <= {label}
    check_quarantine(sink.quarantine, {label: st_.lines})
    row_lines = tbl.column("line").to_pylist()
    q_lines = [q[1] for q in sink.quarantine]
    if plain is None:  # broken stream: the reader must say so, in a quarantined last line
        assert st_.stream_error and "corrupt or truncated" in st_.stream_error
        assert sink.quarantine and sink.quarantine[-1][1] == st_.lines
        check_coverage(None, st_.lines, row_lines, q_lines)
        return
    raws = plain_lines(plain)
    assert st_.stream_error is None, st_.stream_error
    assert st_.lines == len(raws), (st_.lines, len(raws))
    assert st_.comments == sum(is_comment(r, True) for r in raws)
    check_coverage(raws, st_.lines, row_lines, q_lines, ansor=True)
    for rid, line in zip(tbl.column("record_id").to_pylist(), row_lines):
        assert rid == hashlib.blake2b(raws[line - 1], digest_size=8).hexdigest(), f"line {line}: wrong record id"


def read_ansor_tolerant(d: Path, name: str, lines: list[bytes], fmt_opts: dict, how=("plain",)):
    """Write and read one Ansor file; a known-bug trigger line is replaced by a comment and the file re-read."""
    path = d / name
    data = container(assemble(lines, **fmt_opts), how)
    path.write_bytes(data)
    try:
        sink, tbl = run_ansor(path, name)
    except Exception as e:  # noqa: BLE001 - classified right below
        bug = known_bug(e)
        if bug is None:
            raise
        lines = replace_ansor_triggers(d, lines, bug)
        data = container(assemble(lines, **fmt_opts), how)
        path.write_bytes(data)
        sink, tbl = run_ansor(path, name)
    return data, sink, tbl, lines


def find_triggers(n: int, fails) -> list[int]:
    """Indices i in range(n) whose line alone triggers a known bug, by bisection (``fails(indices) -> bug|None``)."""
    out: list[int] = []

    def go(ix: list[int]) -> None:
        if not ix or fails(ix) is None:
            return
        if len(ix) == 1:
            out.append(ix[0])
            return
        mid = len(ix) // 2
        before = len(out)
        go(ix[:mid])
        go(ix[mid:])
        assert len(out) > before, f"lines {ix[0]}..{ix[-1]} fail together but no half does: context-dependent"

    go(list(range(n)))
    return out


def _probe(run, path: Path, lines: list[bytes]):
    def fails(ix: list[int]) -> str | None:
        path.write_bytes(assemble([lines[i] for i in ix]))
        try:
            run(path)
        except Exception as e:  # noqa: BLE001
            b = known_bug(e)
            if b is None:
                raise
            return b
        return None

    return fails


def _replace(lines: list[bytes], triggers: list[int], bug: str, fails) -> list[bytes]:
    assert triggers, f"{bug} raised for the file but by no single line: context-dependent failure"
    out = list(lines)
    for i in triggers:
        b = fails([i])
        KNOWN_HITS[b] += 1
        out[i] = b"# known bug trigger removed: " + b.encode()
    note(f"{len(triggers)} known-bug trigger line(s) replaced ({bug})")
    return out


def replace_ansor_triggers(d: Path, lines: list[bytes], bug: str) -> list[bytes]:
    fails = _probe(lambda p: run_ansor(p, "probe"), d / "probe.json", lines)
    return _replace(lines, find_triggers(len(lines), fails), bug, fails)


def ansor_lines(specs) -> tuple[list[bytes], callable]:
    seeds = ansor_seeds()
    muts = [(i, decode(ANSOR_KINDS, sp)) for i, sp in specs]
    lines = [mutate(seeds[i], m) for i, m in muts]
    return lines, lambda: [f"line {n}: seed {i} {m!r}"[:300] for n, (i, m) in enumerate(muts, 1) if m[0] != "keep"]


ansor_specs = spec.map(lambda sp: (split_spec(sp)[1] % len(ansor_seeds()), sp))


# ----------------------------------------------------------------------------------------------------------------
# 1. Ansor lines, readers directly


ANSOR_EXAMPLES = int(200 * SCALE)
ANSOR_MIN_LINES = 50


def test_fuzz_ansor_lines(tmp_path):
    count = {"lines": 0, "rows": 0, "quarantined": 0, "examples": 0}

    @settings(max_examples=ANSOR_EXAMPLES)
    @given(
        specs=st.lists(ansor_specs, min_size=ANSOR_MIN_LINES, max_size=100),
        bom=st.booleans(), crlf=st.booleans(), final_newline=st.booleans(), batch=batch_rows,
    )
    def run(specs, bom, crlf, final_newline, batch):
        lines, descr = ansor_lines(specs)
        with watchdog(), scratch() as d, explained(descr), batch_size(batch):
            data, sink, tbl, _ = read_ansor_tolerant(d, "fuzz.json", lines,
                                                     dict(bom=bom, crlf=crlf, final_newline=final_newline))
            check_ansor(data, sink, tbl, "fuzz.json")
        count["lines"] += len(specs)
        count["rows"] += sink.stats.rows
        count["quarantined"] += sink.stats.quarantined
        count["examples"] += 1

    run()
    print(f"\nansor fuzz: {count}, known-bug triggers so far: {dict(KNOWN_HITS)}")
    assert count["lines"] >= ANSOR_EXAMPLES * ANSOR_MIN_LINES, count
    # the mutations leave enough lines intact that the row path is exercised as hard as the quarantine path
    assert count["rows"] >= count["lines"] // 5 and count["quarantined"] >= count["lines"] // 10, count


# ----------------------------------------------------------------------------------------------------------------
# 2. MetaSchedule databases, readers directly


def run_ms(wl: Path, rec: Path, label: str, wl_label: str) -> tuple[R._Sink, pa.Table]:
    sink = R._Sink(label)
    batches = list(R.read_metaschedule(wl, rec, label, HW, sink, wl_label))
    return sink, pa.Table.from_batches(batches, schema=RECORD_SCHEMA)


def check_ms(wl_data: bytes, rec_data: bytes, sink: R._Sink, tbl: pa.Table, label: str, wl_label: str) -> None:
    st_, ws = sink.stats, sink.workload_stats
    st_.check()
    ws.check()
    check_rows(tbl)
    assert tbl.num_rows == st_.rows
    assert set(tbl.column("format").to_pylist()) <= {"metaschedule"}
    check_quarantine(sink.quarantine, {label: st_.lines, wl_label: ws.lines})
    wtab = sink.workloads
    assert wtab.num_rows == ws.rows
    # workload file
    wl_plain = decoded(wl_data)
    w_rows = wtab.column("line").to_pylist()
    w_q = [q[1] for q in sink.quarantine if q[0] == wl_label]
    if wl_plain is None:
        assert ws.stream_error and "corrupt or truncated" in ws.stream_error
        check_coverage(None, ws.lines, w_rows, w_q)
        wl_index = None
    else:
        wraws = plain_lines(wl_plain)
        assert ws.stream_error is None and ws.lines == len(wraws), (ws.lines, len(wraws), ws.stream_error)
        check_coverage(wraws, ws.lines, w_rows, w_q)
        # a workload's index counts the non-comment lines; a broken line keeps its index
        wl_index = [i for i, r in enumerate(wraws, 1) if not is_comment(r, False)]
    w_hash = dict(zip(w_rows, wtab.column("workload_key").to_pylist()))
    # record file
    rec_plain = decoded(rec_data)
    row_lines = tbl.column("line").to_pylist()
    q_lines = [q[1] for q in sink.quarantine if q[0] == label]
    if rec_plain is None:
        assert st_.stream_error and "corrupt or truncated" in st_.stream_error
        check_coverage(None, st_.lines, row_lines, q_lines)
        return
    raws = plain_lines(rec_plain)
    assert st_.stream_error is None and st_.lines == len(raws), (st_.lines, len(raws), st_.stream_error)
    check_coverage(raws, st_.lines, row_lines, q_lines)
    for line, key, rid in zip(row_lines, tbl.column("workload_key").to_pylist(), tbl.column("record_id").to_pylist()):
        raw = raws[line - 1]
        widx = orjson.loads(raw)[0]
        if wl_index is not None:
            assert 0 <= widx < len(wl_index), f"record line {line} kept with workload index {widx}"
            wline = wl_index[widx]
            assert wline in w_hash, f"record line {line} kept although workload line {wline} is broken"
            assert key == w_hash[wline], f"record line {line}: workload {key} != {w_hash[wline]}"
        h = hashlib.blake2b(digest_size=8)
        h.update(key.encode() + b"\n" + raw)
        assert rid == h.hexdigest()


def read_ms_tolerant(d: Path, wl_lines, rec_lines, wl_how=("plain",), rec_how=("plain",), crlf=False):
    wl = d / "database_workload.json"
    rec = d / "database_tuning_record.json"
    wl_data = container(assemble(wl_lines, crlf=crlf), wl_how)
    wl.write_bytes(wl_data)

    def write_rec(lines):
        data = container(assemble(lines, crlf=crlf), rec_how)
        rec.write_bytes(data)
        return data

    rec_data = write_rec(rec_lines)
    try:
        sink, tbl = run_ms(wl, rec, "db/database_tuning_record.json", "db/database_workload.json")
    except Exception as e:  # noqa: BLE001
        bug = known_bug(e)
        if bug is None:
            raise
        fails = _probe(lambda p: run_ms(wl, p, "probe", "probe-wl"), d / "probe.json", rec_lines)
        out = _replace(rec_lines, find_triggers(len(rec_lines), fails), bug, fails)
        rec_lines = out
        rec_data = write_rec(rec_lines)
        sink, tbl = run_ms(wl, rec, "db/database_tuning_record.json", "db/database_workload.json")
    return wl_data, rec_data, sink, tbl, rec_lines


MS_EXAMPLES = int(100 * SCALE)
MS_MIN_RECORDS = 20


@st.composite
def ms_database(draw, min_records=MS_MIN_RECORDS, max_records=60):
    dbs = ms_dbs()
    name = draw(st.sampled_from(sorted(dbs)))
    wl_seed, rec_seed = dbs[name]
    wl_muts = [decode(MS_WORKLOAD_KINDS, sp) for sp in draw(st.lists(spec, min_size=len(wl_seed),
                                                                       max_size=len(wl_seed)))]
    wl_lines = [mutate(s, m) for s, m in zip(wl_seed, wl_muts)]
    extra = draw(st.lists(st.tuples(idx, st.sampled_from([b"", b"# comment", b"[\"h\", \"!!\"]", b"{}"])),
                          max_size=2))
    for pos, ln in extra:  # blank / comment / broken lines between workloads
        wl_lines.insert(pos % (len(wl_lines) + 1), ln)
    specs = [(split_spec(sp)[1] % len(rec_seed), sp)
             for sp in draw(st.lists(spec, min_size=min_records, max_size=max_records))]
    rec_muts = [(i, decode(MS_RECORD_KINDS, sp)) for i, sp in specs]
    rec_lines = [mutate(rec_seed[i], m) for i, m in rec_muts]
    descr = [f"{name}: workload line {n}: {m!r}"[:300] for n, m in enumerate(wl_muts, 1) if m[0] != "keep"]
    descr += [f"{name}: record line {n}: seed {i} {m!r}"[:300] for n, (i, m) in enumerate(rec_muts, 1)
              if m[0] != "keep"]
    descr += [f"extra workload lines {extra!r}"] if extra else []
    return MSDb(name, wl_lines, rec_lines, descr)


class MSDb(tuple):
    """(name, workload lines, record lines, description) with a short repr (the lines are megabytes)."""

    def __new__(cls, *items):
        return super().__new__(cls, items)

    def __repr__(self) -> str:
        return f"MSDb({self[0]!r}, {len(self[1])} workload lines, {len(self[2])} record lines, mutations={self[3]!r})"


ms_containers = st.integers(0, 9).flatmap(lambda r: st.just(("plain",)) if r < 8 else containers)


def test_fuzz_metaschedule(tmp_path):
    count = {"lines": 0, "rows": 0, "quarantined": 0, "examples": 0}

    @settings(max_examples=MS_EXAMPLES)
    @given(db=ms_database(), wl_how=ms_containers, rec_how=ms_containers, crlf=st.booleans(), batch=batch_rows)
    def run(db, wl_how, rec_how, crlf, batch):
        name, wl_lines, rec_lines, descr = db
        with watchdog(), scratch() as d, explained(lambda: descr), batch_size(batch):
            wl_data, rec_data, sink, tbl, _ = read_ms_tolerant(d, wl_lines, rec_lines, wl_how, rec_how, crlf)
            check_ms(wl_data, rec_data, sink, tbl, "db/database_tuning_record.json", "db/database_workload.json")
        count["lines"] += len(wl_lines) + len(rec_lines)
        count["rows"] += sink.stats.rows
        count["quarantined"] += sink.stats.quarantined
        count["examples"] += 1

    run()
    print(f"\nmetaschedule fuzz: {count}, known-bug triggers so far: {dict(KNOWN_HITS)}")
    assert count["lines"] >= MS_EXAMPLES * (MS_MIN_RECORDS + 20), count
    assert count["rows"] >= count["lines"] // 10 and count["quarantined"] >= count["lines"] // 20, count


# ----------------------------------------------------------------------------------------------------------------
# 3. File-level mutations: containers, empty files, BOM, CRLF, missing final newline


FILE_EXAMPLES = int(100 * SCALE)


def test_fuzz_files(tmp_path):
    count = Counter()

    @settings(max_examples=FILE_EXAMPLES)
    @given(
        specs=st.lists(ansor_specs, max_size=12),
        how=containers, bom=st.booleans(), crlf=st.booleans(), final_newline=st.booleans(),
        blank=st.sampled_from([None, b"", b"   ", b"# c", b"\r"]),
    )
    def run(specs, how, bom, crlf, final_newline, blank):
        lines, descr = ansor_lines(specs)
        if blank is not None:  # interleave blank / comment lines
            lines = [x for ln in lines for x in (ln, blank)]
        with watchdog(), scratch() as d, explained(descr):
            data, sink, tbl, _ = read_ansor_tolerant(d, "f.json", lines, dict(bom=bom, crlf=crlf,
                                                                              final_newline=final_newline), how)
            check_ansor(data, sink, tbl, "f.json")
        count["lines"] += len(lines)
        count["files"] += 1
        count["broken_streams"] += sink.stats.stream_error is not None
        count["empty_files"] += not lines

    run()
    print(f"\nfile fuzz: {dict(count)}")
    assert count["files"] >= FILE_EXAMPLES
    assert count["broken_streams"] >= 1 and count["empty_files"] >= 1, dict(count)


@pytest.mark.parametrize("data,lines,comments", [
    (b"", 0, 0),
    (b"\n", 1, 1),
    (b"\r\n\r\n", 2, 2),
    (BOM, 1, 1),
    (BOM + b"# c\r\n", 1, 1),
    (b"   \n\t\n#\n", 3, 3),
    (gzip.compress(b""), 0, 0),
    (gzip.compress(BOM + b"\r\n"), 1, 1),
])
def test_empty_and_blank_files(tmp_path, data, lines, comments):
    p = tmp_path / "e.json"
    p.write_bytes(data)
    sink, tbl = run_ansor(p, "e.json")
    assert (sink.stats.lines, sink.stats.comments, sink.stats.rows, sink.stats.quarantined) == (lines, comments, 0, 0)
    sink.stats.check()


def test_truncated_gzip_yields_prefix_then_stream_error(tmp_path):
    """A truncated gzip: every line read before the break is the true line; then one quarantined stream error."""
    seeds = [s for s in ansor_seeds() if not is_comment(s, True)][:200]
    plain = assemble(seeds)
    gz = gzip.compress(plain, mtime=0)
    raws = plain_lines(plain)
    for cut in (2, 10, len(gz) // 3, len(gz) // 2, len(gz) - 9, len(gz) - 1):
        p = tmp_path / f"t{cut}.json.gz"
        p.write_bytes(gz[:cut])
        sink, tbl = run_ansor(p, "t.json")
        sink.stats.check()
        assert sink.stats.stream_error, cut
        assert sink.quarantine[-1][1] == sink.stats.lines
        check_rows(tbl)
        last = sink.stats.lines - 1  # the line before the stream error may be cut short
        for rid, line in zip(tbl.column("record_id").to_pylist(), tbl.column("line").to_pylist()):
            if line < last:
                assert rid == hashlib.blake2b(raws[line - 1], digest_size=8).hexdigest()


# ----------------------------------------------------------------------------------------------------------------
# 4. convert end to end: manifest and Parquet read back


CONVERT_EXAMPLES = max(1, int(30 * SCALE))
CONVERT_MIN_LINES = 10


@st.composite
def convert_inputs(draw):
    files = []
    for k in range(draw(st.integers(1, 2))):
        specs = draw(st.lists(ansor_specs, min_size=CONVERT_MIN_LINES, max_size=40))
        how = draw(st.integers(0, 9).flatmap(
            lambda r: st.just(("plain",)) if r < 6 else st.just(("gzip",)) if r < 8 else containers))
        opts = dict(bom=draw(st.booleans()), crlf=draw(st.booleans()), final_newline=draw(st.booleans()))
        files.append((f"log{k}.json" + (".gz" if how[0] != "plain" else ""), ansor_lines(specs)[0], opts, how))
    ms = draw(st.none() | ms_database(min_records=5, max_records=20))
    return files, ms


def check_dataset(out: Path, summary: dict, expect: dict) -> None:
    """``expect``: label -> (file bytes as written, None) or MS: label -> (record bytes, workload bytes)."""
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert summary["totals"]["balanced"], summary["totals"]
    assert summary["inputs_failed"] == 0 and not summary["errors"], summary["errors"]
    assert set(manifest["inputs"]) == set(expect), (sorted(manifest["inputs"]), sorted(expect))
    shards = sorted((out / "records").glob("*/*.parquet"))
    parts = [pq.read_table(s, schema=RECORD_SCHEMA) for s in shards]
    for shard, part in zip(shards, parts):  # a row lives in the folder of its hardware name (B4: names may share one)
        folders = {f"hardware={_safe_part(h)}" for h in part.column("hardware").unique().to_pylist()}
        assert folders == {shard.parent.name}, (shard, folders)
    tbl = pa.concat_tables(parts) if parts else RECORD_SCHEMA.empty_table()
    # partitioning columns would change the schema: the shards are read file by file
    check_rows(tbl)
    qfiles = sorted((out / "quarantine").glob("*.parquet"))
    qtbl = pa.concat_tables([pq.read_table(q) for q in qfiles]) if qfiles else QUARANTINE_SCHEMA.empty_table()
    assert qtbl.schema.equals(QUARANTINE_SCHEMA)
    for col in ("source_file", "line", "reason"):
        assert qtbl.column(col).null_count == 0
    entries = list(zip(*(qtbl.column(c).to_pylist() for c in QUARANTINE_SCHEMA.names)))
    n_lines = {}
    for label, e in manifest["inputs"].items():
        assert e["rows"] + e["quarantined"] + e["comments"] == e["lines"], (label, e)
        src = f"{label}/database_tuning_record.json" if e["format"] == "metaschedule" else label
        n_lines[src] = e["lines"]
        if e["format"] == "metaschedule":
            wf = e["workload_file"]
            assert wf["rows"] + wf["quarantined"] + wf["comments"] == wf["lines"], wf
            n_lines[f"{label}/database_workload.json"] = wf["lines"]
    check_quarantine(entries, n_lines)
    for label, (data, wl_data) in expect.items():
        e = manifest["inputs"][label]
        src = f"{label}/database_tuning_record.json" if wl_data is not None else label
        mine = tbl.filter(pc.equal(tbl.column("source_file"), src))
        assert mine.num_rows == e["rows"], (label, mine.num_rows, e["rows"])
        row_lines = mine.column("line").to_pylist()
        q_lines = [q[1] for q in entries if q[0] == src]
        plain = decoded(data)
        if plain is None:
            assert e["stream_error"], label
            check_coverage(None, e["lines"], row_lines, q_lines)
        else:
            raws = plain_lines(plain)
            assert e["stream_error"] is None and e["lines"] == len(raws), (label, e, len(raws))
            check_coverage(raws, e["lines"], row_lines, q_lines, ansor=wl_data is None)
        if wl_data is not None:
            wl_plain = decoded(wl_data)
            wf = e["workload_file"]
            if wl_plain is not None:
                assert wf["lines"] == len(plain_lines(wl_plain)), (wf, len(plain_lines(wl_plain)))


def test_fuzz_convert(tmp_path):
    count = Counter()

    @settings(max_examples=CONVERT_EXAMPLES)
    @given(inp=convert_inputs())
    def run(inp):
        files, ms = inp
        with watchdog(), scratch() as d:
            root = d / "in" / "fuzzhw"
            root.mkdir(parents=True)
            expect = {}
            ansor = {}
            for name, lines, opts, how in files:
                ansor[name] = (lines, opts, how)
            if ms is not None:
                _, wl_lines, rec_lines, _ = ms
                (root / "msdb").mkdir()

            def write_all():
                expect.clear()
                for name, (lines, opts, how) in ansor.items():
                    data = container(assemble(lines, **opts), how)
                    (root / name).write_bytes(data)
                    expect[f"fuzzhw/{name}"] = (data, None)
                if ms is not None:
                    wl_data = assemble(wl_lines)
                    rec_data = assemble(rec_lines)
                    (root / "msdb" / "database_workload.json").write_bytes(wl_data)
                    (root / "msdb" / "database_tuning_record.json").write_bytes(rec_data)
                    expect["fuzzhw/msdb"] = (rec_data, wl_data)

            write_all()
            out = d / "out"
            for attempt in range(4):
                try:
                    summary = convert([root], out)
                except Exception as e:  # noqa: BLE001
                    bug = known_bug(e)
                    if bug is None or attempt == 3:
                        raise
                    # isolate with the readers, then convert again from scratch
                    for name, (lines, opts, how) in list(ansor.items()):
                        try:
                            run_ansor(root / name, name)
                        except Exception as e2:  # noqa: BLE001
                            if known_bug(e2) is None:
                                raise
                            ansor[name] = (replace_ansor_triggers(d, lines, bug), opts, how)
                    if ms is not None:
                        iso = d / "iso"
                        iso.mkdir(exist_ok=True)
                        rec_lines = read_ms_tolerant(iso, wl_lines, rec_lines)[4]
                    shutil.rmtree(out, ignore_errors=True)
                    write_all()
                    continue
                break
            check_dataset(out, summary, expect)
        count["lines"] += sum(len(f[1]) for f in files) + (len(ms[1]) + len(ms[2]) if ms else 0)
        count["examples"] += 1
        count["ms"] += ms is not None

    run()
    print(f"\nconvert fuzz: {dict(count)}, known-bug triggers so far: {dict(KNOWN_HITS)}")
    assert count["lines"] >= CONVERT_EXAMPLES * CONVERT_MIN_LINES, dict(count)
    assert count["ms"] >= 1


def test_convert_documented_errors(tmp_path):
    """The documented whole-input failures: a missing input and a MetaSchedule record file without workloads."""
    with pytest.raises(InputError, match="nope"):
        convert([tmp_path / "nope"], tmp_path / "out")
    d = tmp_path / "db"
    d.mkdir()
    (d / "database_tuning_record.json").write_bytes(b"")
    with pytest.raises(InputError, match="database_workload"):
        convert([d], tmp_path / "out2")


# ----------------------------------------------------------------------------------------------------------------
# Regression tests for the product bugs found by this suite (all fixed)


def _real_ansor_line() -> dict:
    return orjson.loads(next(s for s in ansor_seeds() if s.startswith(b'{"i"')))


def _real_ms_line() -> tuple[list[bytes], dict]:
    wl, rec = ms_dbs()["vicuna"]
    return list(wl), orjson.loads(rec[0])


def _ansor_case(case: str) -> bytes:
    r = _real_ansor_line()
    task = r["i"][0]
    if case == "hwparams-2**63":
        r["i"][0] = task[:2] + [[2**63, 1, 1, 1, 1, 1, 1, 1]]
    elif case == "target-num_cores-1e20":
        task[1] += " -num_cores=99999999999999999999"
    elif case == "json-target-num_cores-1e300":
        task[1] = '{"kind": "llvm", "num_cores": 1e300}'
    elif case == "workload-key-2000-deep":
        task[0] = '["abc", ' + "[" * 2000 + "1" + "]" * 2000 + "]"
    elif case == "error_no-2000-deep":
        r["r"][1] = Raw(b"[" * 2000 + b"]" * 2000)
    elif case == "json-target-keys-2000-deep":
        task[1] = '{"kind": "cuda", "keys": ' + "[" * 2000 + "]" * 2000 + "}"
    return dumps_raw(r)


@pytest.mark.parametrize("case", ["hwparams-2**63", "target-num_cores-1e20", "json-target-num_cores-1e300"])
def test_bug_b1_int64_overflow_ansor(tmp_path, case):
    good = dumps_raw(_real_ansor_line())
    p = tmp_path / "b1.json"
    p.write_bytes(good + b"\n" + _ansor_case(case) + b"\n" + good + b"\n")
    sink, tbl = run_ansor(p, "b1.json")
    assert tbl.num_rows == 2 and [q[1] for q in sink.quarantine] == [2]


def _ms_case(case: str) -> bytes:
    wl, r = _real_ms_line()
    insts = r[1][0][0]
    if case == "attr-2**63":
        insts[0][2] = [[2**63]]
    elif case == "int-input-1e20":
        insts[0][1] = ["99999999999999999999"]
    elif case == "target-max_num_threads-2**63":
        r[1][2]["max_num_threads"] = 2**63
    elif case == "attr-2000-deep":
        insts[0][2] = Raw(b"[" * 2000 + b"]" * 2000)
    elif case == "decision-2000-deep":
        r[1][0][1] = [Raw(b"[" * 2000 + b"]" * 2000)]
    return dumps_raw(r)


def _run_ms_case(tmp_path, case):
    wl, r = _real_ms_line()
    (tmp_path / "wl.json").write_bytes(assemble(wl))
    good = dumps_raw(r)
    (tmp_path / "rec.json").write_bytes(good + b"\n" + _ms_case(case) + b"\n" + good + b"\n")
    sink, tbl = run_ms(tmp_path / "wl.json", tmp_path / "rec.json", "rec", "wl")
    assert tbl.num_rows == 2 and [q[1] for q in sink.quarantine] == [2]


@pytest.mark.parametrize("case", ["attr-2**63", "int-input-1e20", "target-max_num_threads-2**63"])
def test_bug_b1_int64_overflow_metaschedule(tmp_path, case):
    _run_ms_case(tmp_path, case)


@pytest.mark.parametrize("case", ["workload-key-2000-deep", "error_no-2000-deep", "json-target-keys-2000-deep"])
def test_bug_b2_deep_nesting_ansor(tmp_path, case):
    good = dumps_raw(_real_ansor_line())
    p = tmp_path / "b2.json"
    p.write_bytes(good + b"\n" + _ansor_case(case) + b"\n" + good + b"\n")
    sink, tbl = run_ansor(p, "b2.json")
    assert tbl.num_rows == 2 and [q[1] for q in sink.quarantine] == [2]


@pytest.mark.parametrize("case", ["attr-2000-deep", "decision-2000-deep"])
def test_bug_b2_deep_nesting_metaschedule(tmp_path, case):
    _run_ms_case(tmp_path, case)


def _orjson_version() -> tuple:
    return tuple(int(x) for x in orjson.__version__.split(".")[:3] if x.isdigit())


def test_bug_b3_orjson_stack_overflow_kills_convert(tmp_path):
    good = dumps_raw(_real_ansor_line())
    src = tmp_path / "in" / "hw"
    src.mkdir(parents=True)
    (src / "deep.json").write_bytes(good + b"\n" + b"[" * 1_000_000 + b"]" * 1_000_000 + b"\n" + good + b"\n")
    code = ("import sys, json; from tenset_curate.convert import convert; "
            "s = convert([sys.argv[1]], sys.argv[2]); print(json.dumps(s['totals']))")
    p = subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "out")], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"convert died: rc {p.returncode} {p.stderr[-500:]}"
    tot = orjson.loads(p.stdout.strip().splitlines()[-1])
    assert (tot["rows"], tot["quarantined"]) == (2, 1)


def test_bug_b4_hardware_name_collision(tmp_path):
    r = _real_ansor_line()
    lines = []
    for m in ("a/b", "a_b", "a/b"):
        r2 = orjson.loads(orjson.dumps(r))
        r2["i"][0][1] += f" -model={m}"
        lines.append(orjson.dumps(r2))
    d = tmp_path / "in"
    d.mkdir()
    (d / "c.json").write_bytes(assemble(lines))
    s = convert([d / "c.json"], tmp_path / "out")
    assert s["errors"] == {} and s["totals"]["rows"] == 3, s["errors"]
    # the two names stay two hardware, though their partition folders would collide
    from tenset_curate.prune import load_records

    assert sorted(load_records(tmp_path / "out", ["hardware"])["hardware"].to_list()) == ["a/b", "a/b", "a_b"]
    assert s["rows_per_hardware"] == {"a/b": 2, "a_b": 1}


@pytest.mark.parametrize("case", ["target-num_cores-1e20", "workload-key-2000-deep"])
def test_bug_b1_b2_one_line_aborts_convert(tmp_path, case):
    good = dumps_raw(_real_ansor_line())
    d = tmp_path / "in"
    d.mkdir()
    (d / "a_good.json").write_bytes(good + b"\n")
    (d / "b_bad.json").write_bytes(good + b"\n" + _ansor_case(case) + b"\n")
    s = convert([d], tmp_path / "out")
    assert not s["errors"] and (s["totals"]["rows"], s["totals"]["quarantined"]) == (2, 1), s
