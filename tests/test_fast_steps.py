"""``fast_steps.steps_from_json`` (vectorised step typing) must equal the pure-Python reference exactly.

The oracle is ``readers._Columns.add_ansor_steps`` (the reference semantics), assembled here independently with
``pa.array(list_of_list_of_dicts, type=list<STEP_TYPE>)``; when ``readers.steps_from_json_reference`` exists it
is checked too. Inputs: every record of several real logs, hypothesis-generated step lists (valid and malformed),
byte-level mutations of valid texts (invalid JSON included) and hand-written edge cases.
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest

from tenset_curate import fast_steps, readers
from tenset_curate.fast_steps import STEPS_TYPE, steps_from_json, steps_from_json_slow

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

REAL = Path(os.environ.get("TENSET_CURATE_REALDATA",
                           Path(__file__).resolve().parents[2] / "shared" / "realdata")) / "ansor"
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


@pytest.fixture(autouse=True)
def _fast_path_for_every_batch(monkeypatch):
    """Small batches normally go straight to the slow path; the tests want the fast path on every batch."""
    monkeypatch.setattr(fast_steps, "_MIN_FAST_RECORDS", 0)


# --------------------------------------------------------------------------------------------------------------
# Oracle


def _ref_record(blob: bytes):
    """(list of step dicts, None) or ([], reason) for one record, using readers._Columns.add_ansor_steps."""
    try:
        steps = orjson.loads(blob)
        if type(steps) is not list:
            raise ValueError("steps is not a list")
        c = readers._Columns()
        c.add_ansor_steps(steps)
    except ValueError as e:
        return [], str(e)
    out = []
    for i, kind in enumerate(c.step_kind):
        lists = []
        for j in range(c.lists_off[i], c.lists_off[i + 1]):
            lists.append(c.lists_val[c.lists_inner_off[j]:c.lists_inner_off[j + 1]])
        out.append({
            "kind": kind,
            "ints": c.ints_val[c.ints_off[i]:c.ints_off[i + 1]],
            "lists": lists,
            "strs": c.strs_val[c.strs_off[i]:c.strs_off[i + 1]],
            "floats": c.floats_val[c.floats_off[i]:c.floats_off[i + 1]],
        })
    for s in out:  # the reference would crash building the batch; fast_steps reports the record instead
        for x in s["ints"] + [y for lst in s["lists"] for y in lst]:
            if not I64_MIN <= x <= I64_MAX:
                return [], "OUT_OF_RANGE"
    return out, None


def reference(blobs: list[bytes]) -> tuple[pa.ListArray, dict[int, str]]:
    rows, bad = [], {}
    for i, b in enumerate(blobs):
        r, reason = _ref_record(b)
        rows.append(r)
        if reason is not None:
            bad[i] = reason
    return pa.array(rows, type=STEPS_TYPE), bad


def check(blobs: list[bytes]) -> tuple[pa.ListArray, dict[int, str]]:
    """Assert fast == slow == oracle (== readers.steps_from_json_reference when in range); return the result."""
    arr, bad = steps_from_json(blobs)
    exp, exp_bad = reference(blobs)
    assert isinstance(arr, pa.ListArray) and arr.type == STEPS_TYPE and len(arr) == len(blobs)
    arr.validate(full=True)
    assert set(bad) == set(exp_bad), (sorted(bad)[:5], sorted(exp_bad)[:5])
    for i, reason in exp_bad.items():
        if reason == "OUT_OF_RANGE":
            assert "out of int64 range" in bad[i]
        else:
            assert bad[i] == reason, (i, bad[i], reason)
    if not arr.equals(exp):
        for i in range(len(blobs)):
            assert arr[i].as_py() == exp[i].as_py(), (i, blobs[i][:300])
        raise AssertionError("arrays differ only in layout")
    slow, slow_bad = steps_from_json_slow(blobs)
    assert slow.equals(arr) and slow_bad == bad
    ref_fn = getattr(readers, "steps_from_json_reference", None)
    if ref_fn is not None and "OUT_OF_RANGE" not in exp_bad.values():
        r_arr, r_bad = ref_fn(blobs)
        assert r_arr.equals(arr) and r_bad == bad
    return arr, bad


def _fast_only(blobs: list[bytes]) -> bool:
    """True when no record was handed to the slow path (spied through steps_from_json_slow)."""
    calls = []
    orig = fast_steps.steps_from_json_slow
    fast_steps.steps_from_json_slow = lambda b: calls.append(len(b)) or orig(b)
    try:
        steps_from_json(blobs)
    finally:
        fast_steps.steps_from_json_slow = orig
    return not calls


# --------------------------------------------------------------------------------------------------------------
# Real logs


def _real_blobs(path: Path) -> list[bytes]:
    out = []
    with gzip.open(path, "rb") as f:
        for line in f:
            s = line.strip()
            if not s or s[:1] == b"#":
                continue
            try:
                rec = orjson.loads(s)
                state = rec["i"][1]
            except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
                continue
            if type(state) is list and len(state) == 2 and type(state[1]) is list:
                out.append(orjson.dumps(state[1]))
    return out


def _real_files() -> list[Path]:
    picks = []
    for source, n in [("roller-k80", 4), ("roller-mi50", 4), ("mmperf-a100", 3), ("bennu", 3), ("tvm-ci-logs", 5)]:
        files = sorted((REAL / source).rglob("*.json*"))
        step = max(1, len(files) // n)
        picks += files[::step][:n]
    return picks


@pytest.mark.skipif(not REAL.is_dir(), reason="real logs not available")
@pytest.mark.parametrize("path", _real_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_logs(path):
    blobs = _real_blobs(path)
    assert blobs, f"no records in {path}"
    arr, bad = check(blobs)
    assert not bad
    assert _fast_only(blobs)  # real logs never need the slow path
    assert sum(arr.value_lengths().to_pylist()) == sum(len(orjson.loads(b)) for b in blobs)


@pytest.mark.skipif(not REAL.is_dir(), reason="real logs not available")
def test_real_logs_in_small_chunks(monkeypatch):
    """Chunking (inner cache chunks and outer batches) does not change the result."""
    blobs = _real_blobs(sorted((REAL / "roller-k80").rglob("*.json.gz"))[0])[:3000]
    full, _ = steps_from_json(blobs)
    monkeypatch.setattr(fast_steps, "_CACHE_BYTES", 1000)
    monkeypatch.setattr(fast_steps, "_CHUNK_BYTES", 50_000)
    arr, bad = steps_from_json(blobs)
    assert not bad and arr.equals(full)
    # mixed with slow-path records, in chunks
    mixed = []
    for i, b in enumerate(blobs[:600]):
        mixed.append(b if i % 7 else b.replace(b"[", b"[ ", 1))
    check(mixed)


# --------------------------------------------------------------------------------------------------------------
# Hand-written cases


CASES = [
    b'[["CHW",3,"local"],["SP",3,0,128,[2,4,1,16],1],["RE",3,[0,5,10]],["CHR",2,"shared",[3]],'
    b'["PR",5,0,"auto_unroll_max_step$1024"]]',
    b"[]",
    b'[["AN"]]',
    b'[[""]]',
    b'[["AN",[]]]',
    b'[["AN",[],[],[]],["SP",[1],[-2,3]]]',
    # laid out as TVM reads each kind (readers.ANSOR_STEP_ARGS), with edge values
    b'[["SP",-1,0,9223372036854775807,[9223372036854775807,-9223372036854775808,1234567890123456789],'
    b'-9223372036854775808]]',
    b'[["AN",10,99,100],["FSP",999,1000,12345678,1234567890123456],["FFSP",0,1,[],-5,-55],["SA",0,0,0,0]]',
    b'[["SP",null,true,false,[null,true,false,3],1],["RF",1,2,3],["CR",0]]',
    b'[["PR",1,2,"[1,2]"],["CHW",0,"\\""],["FU",0,[]],["RE",1,[2,1,0]],["CA",1,2,3]]',
    # and not: an argument out of order, missing, added, or a float
    b'[["SP",1,0,[2],4,1]]',
    b'[["CHR",2,[3],"shared"]]',
    b'[["CI",1,2]]',
    b'[["CA",1,2]]',
    b'[["AN",1,2,1.5]]',
    b'[["FU",0,1]]',
    b'[["AN",-1,0,-0,9223372036854775807,-9223372036854775808]]',
    b'[["AN",[9223372036854775807,-9223372036854775808,1234567890123456789]]]',
    b'[["AN",9223372036854775808]]',  # beyond int64: orjson reads it as an int
    b'[["AN",18446744073709551615]]',
    b'[["AN",18446744073709551616]]',  # beyond uint64: orjson reads it as a float
    b'[["AN",-9223372036854775809]]',
    b'[["AN",[18446744073709551615]]]',
    b'[["AN",10,99,100,999,1000,12345678,123456789,1234567890123456]]',
    b'[["AN",[10,99,100,-5,-55,-555,0]]]',
    b'[["AN",1.5,2.0,1e20,-1e-7]]',
    b'[["AN",[1.5]]]',
    b'[["AN",null,true,false,[null,true,false,3]]]',
    b'[["AN","x","y"],["SP","[1,2]",",","]","[[","\\"","\\\\","\\n","\\u0000"]]',
    b'[["\\u00e9t\xc3\xa9",1],["\xe2\x82\xac","\xf0\x9f\x98\x80"]]',
    b'[["A,B",1],["[x]",[2]]]',
    b'[["AN",{}]]',
    b'[["AN",{"a":1}]]',
    b"[{}]",
    b"[1]",
    b'["AN"]',
    b"[null]",
    b"[[]]",
    b"[[1]]",
    b"[[[]]]",
    b'[[["AN"]]]',
    b'[["AN",[[1]]]]',
    b'[["AN",[["x"]]]]',
    b'[["AN",["x"]]]',
    b'[["AN",[1,"x"]]]',
    b'[["AN",[1,[2]]]]',
    b"{}",
    b"5",
    b'"x"',
    b"null",
    b"",
    b"[",
    b"]",
    b"[[",
    b"[]]",
    b"[][]",
    b"[],[]",
    b'[["AN",1,]]',
    b'[["AN",,1]]',
    b'[["AN"1]]',
    b'[["AN" 1]]',
    b'[["AN",01]]',
    b'[["AN",-]]',
    b'[["AN",1-2]]',
    b'[["AN",--1]]',
    b'[["AN",+1]]',
    b'[["AN","x""y"]]',
    b'[["AN","x]]',
    b'[["AN",x"]]',
    b'[["AN"],]',
    b'[,["AN"]]',
    b'[["AN"]["SP"]]',
    b'[["AN"]] ',
    b' [["AN"]]',
    b'[["AN", 1]]',
    b'[["AN",1]]]',
    b'[["AN",1]',
    b'[["A\x01",1]]',
    b'[["A\x7f",1]]',
    b'[["A\xff",1]]',
    b'[["AN",1e5]]',
    b'[["AN",1E5]]',
    b'[["AN",1.]]',
    b'[["AN",0x10]]',
    b'[["AN",Infinity]]',
    b'[["AN",NaN]]',
    b'[["AN",tru]]',
    b'[["' + b"K" * 70 + b'",1]]',
    b'[["AN",' + b"1" * 25 + b"]]",
    b"[" + b",".join([b'["S",%d,[%d,%d]]' % (i, i, -i) for i in range(500)]) + b"]",
]


def test_cases_one_by_one():
    for blob in CASES:
        check([blob])


def test_cases_batched():
    arr, bad = check(CASES)
    assert 0 not in bad and 1 not in bad
    # and with every case between valid records
    good = CASES[0]
    mixed = []
    for b in CASES:
        mixed += [good, b, good]
    check(mixed)


def test_empty_batch():
    arr, bad = steps_from_json([])
    assert len(arr) == 0 and arr.type == STEPS_TYPE and bad == {}


def test_typical_record_stays_fast():
    assert _fast_only([CASES[0], b"[]", b'[["SP",0,-12,1000000,[1000000,-3],0],["CHR",1,"x y",[]],["CI",7]]'])
    assert not _fast_only([b'[["AN",null]]'])
    assert not _fast_only([b'[["AN","\\""]]'])


def test_pretty_json_and_many_tokens():
    steps = [["SP", 3, 0, 128, [2, 4, 1, 16], 1], ["PR", 5, 0, "auto_unroll_max_step$1024"]]
    check([json.dumps(steps).encode(), json.dumps(steps, indent=2).encode()])
    big = orjson.dumps([["FU", i, list(range(40))] for i in range(2000)])  # > 65k tokens: slow path
    arr, bad = check([CASES[0], big, CASES[0]])
    assert not bad and len(arr[1]) == 2000


def test_small_batches_use_the_slow_path(monkeypatch):
    monkeypatch.setattr(fast_steps, "_MIN_FAST_RECORDS", 8)
    assert not _fast_only([CASES[0]] * 7)
    assert _fast_only([CASES[0]] * 8)
    check(CASES[:7])


def test_non_list_input_type():
    arr, bad = check([b"[]"] * 3)
    arr2, bad2 = steps_from_json(iter([b"[]"] * 3))
    assert arr2.equals(arr) and bad2 == bad


# --------------------------------------------------------------------------------------------------------------
# Hypothesis

_ints = st.one_of(
    st.integers(-3, 200),
    st.integers(-(10**6), 10**9),
    st.integers(I64_MIN, I64_MAX),
    st.sampled_from([I64_MIN, I64_MAX, I64_MAX + 1, (1 << 64) - 1, -(10**18), 10**18, 0]),
)
_text = st.one_of(
    st.sampled_from(["SP", "FU", "AN", "local", "shared", "auto_unroll_max_step$1024", "", "x,y", "[1]", "]"]),
    st.text(max_size=12),
    st.text(alphabet='[],"\\ 0123456789-abc\n\té€😀', max_size=10),
)
# a step's kind: mostly one TVM writes (others quarantine the record, readers.ANSOR_STEP_KINDS), so most records
# reach the typing the fast path does
_kind = st.one_of(st.sampled_from(sorted(readers.ANSOR_STEP_KINDS)), st.sampled_from(sorted(readers.ANSOR_STEP_KINDS)),
                  st.sampled_from(sorted(readers.ANSOR_STEP_KINDS)), _text)
_floats = st.floats(allow_nan=True, allow_infinity=True)
_list_elem = st.one_of(_ints, st.none(), st.booleans())
_good_arg = st.one_of(_ints, _ints, _text, st.lists(_ints, max_size=6), st.lists(_list_elem, max_size=4), st.none(),
                      st.booleans(), _floats)
_any_step = st.builds(lambda k, a: [k, *a], _kind, st.lists(_good_arg, max_size=7))
# a step laid out as TVM reads its kind (readers.ANSOR_STEP_ARGS): the records the fast path types itself
_sig_arg = {"i": st.one_of(_ints, _ints, _ints, st.none(), st.booleans()), "L": st.lists(_list_elem, max_size=6),
            "s": _text}
_sig_arg_valid = {"i": _ints, "L": st.lists(_ints, max_size=6), "s": _text}


def _laid_out(args: dict):
    return st.sampled_from(sorted(readers.ANSOR_STEP_SIGNATURES.items())).flatmap(
        lambda ks: st.tuples(*[args[c] for c in ks[1]]).map(lambda a: [ks[0], *a]))


_typed_step = _laid_out(_sig_arg)
_good_step = st.one_of(_typed_step, _typed_step, _any_step)
_bad_arg = st.one_of(
    st.dictionaries(st.text(max_size=3), _ints, max_size=2),
    st.lists(st.one_of(_text, _floats, st.lists(_ints, max_size=2), st.just({})), min_size=1, max_size=3).map(
        lambda xs: [1, *xs]),
)
_bad_step = st.one_of(
    st.just([]),
    _ints,
    _text,
    st.none(),
    st.dictionaries(st.text(max_size=3), _ints, max_size=2),
    st.lists(_good_arg, min_size=1, max_size=4).filter(lambda s: type(s[0]) is not str),
    st.builds(lambda k, a, b: [k, *a, b], _text, st.lists(_good_arg, max_size=3), _bad_arg),
)
_record = st.lists(st.one_of(_good_step, _good_step, _good_step, _bad_step), max_size=12)
_valid_record = st.lists(
    st.one_of(_laid_out(_sig_arg_valid), _laid_out(_sig_arg_valid), _laid_out(_sig_arg_valid),
              st.builds(lambda k, a: [k, *a], _kind,
                        st.lists(st.one_of(_ints, _text, st.lists(_ints, max_size=6)), max_size=7))),
    max_size=12,
)


def _dumps(x) -> bytes | None:
    try:
        return orjson.dumps(x)
    except (TypeError, orjson.JSONEncodeError):  # ints beyond 64 bits cannot be written
        return None


@given(st.lists(_record, max_size=8))
@settings(max_examples=300)
def test_hypothesis_records(records):
    blobs = [b for b in map(_dumps, records) if b is not None]
    check(blobs)


@given(st.lists(_valid_record, min_size=1, max_size=8))
@settings(max_examples=200)
def test_hypothesis_valid_records(records):
    blobs = [b for b in map(_dumps, records) if b is not None]
    assume(blobs)
    arr, bad = check(blobs)
    for i, rec in enumerate(records[: len(blobs)]):
        if i not in bad:
            assert len(arr[i]) == len(rec)


@given(st.lists(_valid_record, min_size=1, max_size=4), st.data())
@settings(max_examples=300)
def test_hypothesis_mutated_bytes(records, data):
    """Byte flips, insertions, deletions and truncations: invalid JSON is reported exactly like the reference."""
    blobs = [b for b in map(_dumps, records) if b is not None]
    assume(blobs)
    out = []
    for b in blobs:
        b = bytearray(b)
        for _ in range(data.draw(st.integers(0, 3))):
            op = data.draw(st.sampled_from(["set", "ins", "del", "cut"]))
            pos = data.draw(st.integers(0, max(len(b) - 1, 0)))
            ch = data.draw(st.sampled_from(list(b'[]",-0123456789 ae.{}:\\\x00\xc3')))
            if op == "set" and b:
                b[pos] = ch
            elif op == "ins":
                b.insert(pos, ch)
            elif op == "del" and b:
                del b[pos]
            elif op == "cut":
                del b[pos:]
        out.append(bytes(b))
    check(out)


def _int_steps(xs: list) -> tuple[bytes, list]:
    """A record holding ``xs`` as the integers of FSP steps (four each, the last padded with 0) and as the list of
    one RE step, laid out as TVM reads them; with the integers the steps hold, in order."""
    padded = xs + [0] * (-len(xs) % 4)
    steps = [["FSP", *padded[i:i + 4]] for i in range(0, len(padded), 4)] + [["RE", 0, xs]]
    return orjson.dumps(steps), padded + [0]


@given(st.lists(st.integers(I64_MIN, I64_MAX), min_size=1, max_size=50))
def test_hypothesis_ints_roundtrip(xs):
    blob, ints = _int_steps(xs)
    arr, bad = check([blob])
    assert not bad
    steps = arr[0].as_py()
    assert [x for s in steps for x in s["ints"]] == ints and steps[-1]["lists"] == [xs]
    assert _fast_only([blob])


def test_int_parsing_exhaustive_small():
    xs = list(range(-1200, 1200)) + [10**k for k in range(19)] + [-(10**k) for k in range(19)]
    xs += [10**k - 1 for k in range(1, 19)] + [I64_MAX, I64_MIN, I64_MAX - 1, I64_MIN + 1]
    blob, ints = _int_steps(xs)
    arr, bad = check([blob])
    assert not bad and arr[0].as_py()[-1]["lists"] == [xs]
    vals = np.asarray(arr.flatten().field("ints").flatten())
    assert vals.tolist() == ints
