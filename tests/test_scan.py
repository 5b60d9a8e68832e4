"""The compiled Ansor scanner (``tenset_curate/_scan.c``) must give exactly what the pure-Python reader gives.

``read_ansor`` runs twice on every input, once with ``TENSET_CURATE_PURE_PYTHON=1`` (the reference: orjson and
readers.py's checks) and once with the scanner, and the two results must be identical: every column of every row
(floats compared bit for bit, NaN included), the quarantine (line, reason and raw text), and the file's counts.
Inputs: every real Ansor log under ../shared/realdata, the same in tiny read blocks (lines cut across blocks), the
fuzz suite's mutated real lines and broken containers (tests/test_fuzz_readers.py) with random block sizes, and
hand-written edge cases. Other tests check that the scanner really converts the real lines itself (not by handing
them all back), its blake2b against hashlib and its fsum against math.fsum.
"""
from __future__ import annotations

import gzip
import hashlib
import math
import os
import random
import shutil
import struct
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fuzz_readers import (
    REAL,
    RECORD_SCHEMA,
    ansor_lines,
    ansor_seeds,
    ansor_specs,
    assemble,
    check_ansor,
    container,
    containers,
    explained,
    run_ansor,
    scratch,
    watchdog,
)

from tenset_curate import readers as R
from tenset_curate.schema import FAILED_COST_THRESHOLD

pytestmark = [
    pytest.mark.skipif(not (REAL / "ansor").is_dir(), reason=f"real logs not found under {REAL}"),
    pytest.mark.skipif(R._scan is None, reason="the C scanner was not built (no C compiler at install time)"),
]


@contextmanager
def pure_python(on: bool):
    old = os.environ.get("TENSET_CURATE_PURE_PYTHON")
    os.environ["TENSET_CURATE_PURE_PYTHON"] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TENSET_CURATE_PURE_PYTHON"]
        else:
            os.environ["TENSET_CURATE_PURE_PYTHON"] = old


@contextmanager
def chunk_bytes(n: int):
    old = R.CHUNK_BYTES
    R.CHUNK_BYTES = n
    try:
        yield
    finally:
        R.CHUNK_BYTES = old


FLOAT_COLUMNS = {"costs", "mean_cost", "all_cost", "timestamp", "workload_args"}  # steps.floats: never NaN in JSON


def _norm(x):
    """to_pylist values with every float as its repr (so NaN == NaN and -0.0 != 0.0)."""
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, list):
        return [_norm(y) for y in x]
    if isinstance(x, dict):
        return {k: _norm(v) for k, v in x.items()}
    return x


def read_both(path: Path, label: str = "f.json"):
    """(sink, table) from the Python reader and from the scanner; an exception must be the same in both."""
    out = []
    for pure in (True, False):
        with pure_python(pure):
            try:
                out.append(run_ansor(path, label))
            except Exception as e:  # noqa: BLE001 - compared right below
                out.append(e)
    py, c = out
    if isinstance(py, Exception) or isinstance(c, Exception):
        assert type(py) is type(c) and str(py) == str(c), (py, c)
        return None
    return py, c


def assert_same(py, c) -> None:
    (s1, t1), (s2, t2) = py, c
    assert s1.stats.to_dict() == s2.stats.to_dict()
    assert sorted(s1.quarantine, key=lambda q: q[1]) == sorted(s2.quarantine, key=lambda q: q[1])
    assert t1.schema == t2.schema == RECORD_SCHEMA
    assert t1.num_rows == t2.num_rows
    for name in t1.column_names:
        if name not in FLOAT_COLUMNS and t1[name].equals(t2[name]):
            continue  # (no floats inside, or Arrow's equality would call NaN unequal and -0.0 equal to 0.0)
        a, b = _norm(t1[name].to_pylist()), _norm(t2[name].to_pylist())
        if a != b:
            i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            raise AssertionError(f"column {name}, row {i} (line {t1['line'][i]}): {a[i]!r} != {b[i]!r}")


def _real_files() -> list[Path]:
    return sorted((REAL / "ansor").rglob("*.json*")) if (REAL / "ansor").is_dir() else []


def _slow_lines(data: bytes) -> tuple[int, int, int]:
    """(lines, comment lines, lines the scanner handed back) for one decompressed log."""
    r = R._scan.scan(data, 1, True, FAILED_COST_THRESHOLD)
    return r["n_lines"], r["n_comments"], len(r["slow"]) // 24


# --------------------------------------------------------------------------------------------------------------
# Real logs


def test_every_real_log_is_identical():
    files = _real_files()
    assert len(files) >= 50
    rows = 0
    for f in files:
        both = read_both(f, f.name)
        assert both is not None, f
        try:
            assert_same(*both)
        except AssertionError as e:
            raise AssertionError(f"{f}: {e}") from None
        rows += both[0][0].stats.rows
    assert rows > 200_000


def test_the_scanner_converts_real_lines_itself():
    """Identical output would also come from handing every line back to Python: on the real logs the scanner must
    convert (nearly) every record itself. The one allowed kind of hand-back is a record Python quarantines."""
    lines = comments = slow = quarantined = 0
    for f in _real_files():
        data = gzip.open(f).read() if f.suffix == ".gz" else f.read_bytes()
        n, c, s = _slow_lines(data)
        lines, comments, slow = lines + n, comments + c, slow + s
        with pure_python(True):
            quarantined += run_ansor(f, f.name)[0].stats.quarantined
    assert lines > 200_000
    assert slow <= quarantined + lines // 10_000, (slow, quarantined, lines)


def test_real_logs_in_tiny_blocks():
    """Read blocks of a few hundred bytes: every line crosses a block boundary, many blocks hold no line end."""
    files = [f for f in _real_files() if "tvm-ci-logs" in str(f) or "bennu" in str(f)]
    assert files
    for f in files:
        for n in (97, 1000):
            with chunk_bytes(n):
                both = read_both(f, f.name)
            assert both is not None
            assert_same(*both)
            assert both[1][0].stats.lines == both[0][0].stats.lines > 0


# --------------------------------------------------------------------------------------------------------------
# Fuzz: the mutated real lines and broken containers of the fuzz suite, both readers


DIFF_EXAMPLES = max(1, int(150 * max(1, settings.default.max_examples) / 100))


def test_fuzz_both_readers_agree():
    count = {"files": 0, "rows": 0, "quarantined": 0, "broken": 0}

    @settings(max_examples=DIFF_EXAMPLES)
    @given(
        specs=st.lists(ansor_specs, min_size=30, max_size=80), how=st.one_of(st.just(("plain",)), containers),
        bom=st.booleans(), crlf=st.booleans(),
        final_newline=st.booleans(), block=st.sampled_from([R.CHUNK_BYTES, R.CHUNK_BYTES, 1, 7, 300, 4096]),
    )
    def run(specs, how, bom, crlf, final_newline, block):
        lines, descr = ansor_lines(specs)
        data = container(assemble(lines, bom=bom, crlf=crlf, final_newline=final_newline), how)
        with watchdog(), scratch() as d, explained(descr), chunk_bytes(block):
            p = d / "f.json"
            p.write_bytes(data)
            both = read_both(p)
            if both is None:
                return
            assert_same(*both)
            check_ansor(data, *both[1], "f.json")  # the fuzz suite's own oracle, on the scanner's output
        st_ = both[1][0].stats
        count["files"] += 1
        count["rows"] += st_.rows
        count["quarantined"] += st_.quarantined
        count["broken"] += st_.stream_error is not None

    run()
    print(f"\nscan differential fuzz: {count}")
    assert count["files"] >= DIFF_EXAMPLES // 2
    assert count["rows"] >= 500 and count["quarantined"] >= 300 and count["broken"] >= 1, count


# --------------------------------------------------------------------------------------------------------------
# Hand-written edge cases


def _seed() -> bytes:
    return next(s for s in ansor_seeds() if b'"v": "v0.6"' in s and b'\\"' in s and b"[[" in s)


def _cases() -> dict[str, tuple[bytes, bool | None]]:
    """name -> (line, handled in C?); None: either is fine. Built from one real v0.6 line."""
    s = _seed()
    costs = s[s.index(b'"r": [[') + 7: s.index(b"]", s.index(b'"r": [['))]
    r_at = s.index(b'"r": [[')

    def sub(old: bytes, new: bytes, count: int = 1) -> bytes:
        assert old in s, old
        return s.replace(old, new, count)

    def with_costs(c: bytes) -> bytes:
        return s.replace(b'"r": [[' + costs + b"]", b'"r": [[' + c + b"]", 1)

    def with_r_tail(tail: bytes) -> bytes:  # replaces error_no, all_cost, timestamp
        end = s.index(b"]", r_at + 7)
        close = s.index(b"]", end + 1)
        return s[: end + 1] + b", " + tail + s[close:]

    first_step = s.index(b"[[\"", s.index(b"[[], [")) + 1
    return {
        "real": (s, True),
        "compact": (s.replace(b", ", b",").replace(b": ", b":"), True),
        "pretty spaces": (s.replace(b'": ', b'"  :\t ').replace(b'{"i"', b'{ \t "i"'), True),
        "no v": (sub(b', "v": "v0.6"', b""), True),
        "v null": (sub(b'"v": "v0.6"', b'"v": null'), False),
        "v twice": (sub(b'"v": "v0.6"', b'"v": "v0.6", "v": "v0.5"'), False),
        "v unknown": (sub(b'"v": "v0.6"', b'"v": "v9.9"'), False),
        "v0.7": (sub(b'"v": "v0.6"', b'"v": "v0.7"'), False),
        "v0.2": (sub(b'"v": "v0.6"', b'"v": "v0.2"'), True),
        "extra key": (sub(b'"v": "v0.6"', b'"v": "v0.6", "x": {"a": [1, 2.5, null, true]}'), True),
        "escaped slash": (sub(b"cuda", b"cu\\/da"), True),
        "escaped newline in target": (sub(b"cuda", b"cu\\nda"), None),
        "unicode escape": (sub(b"cuda", b"cu\\u0064a"), False),
        "non-ascii": (sub(b"cuda", "cuđa".encode()), False),
        "invalid utf8": (sub(b"cuda", b"cu\xffda"), False),
        "control byte": (sub(b"cuda", b"cu\x01da"), False),
        "hw null": (s[: s.index(b"[", s.index(b"thread_warp_size"))] + b"null" +
                    s[s.index(b"]", s.index(b"thread_warp_size")) + 1:], True),
        "hw bool": (sub(b"[-1, 16, 64", b"[true, 16, 64"), False),
        "hw 7 items": (sub(b"[-1, 16, 64", b"[16, 64"), False),
        "hw int64 min": (sub(b"[-1, 16, 64", b"[-9223372036854775808, 16, 64"), True),
        "hw 2**63": (sub(b"[-1, 16, 64", b"[9223372036854775808, 16, 64"), False),
        "costs ints": (with_costs(b"1, 2, 3"), True),
        "costs empty": (with_costs(b""), True),
        "costs null": (with_costs(costs + b", null"), True),
        "costs string": (with_costs(b'"inf"'), False),
        "costs bool": (with_costs(b"true"), False),
        "costs 1e10": (with_costs(b"1e10"), True),
        "costs 1e400": (with_costs(b"1e400"), False),
        "costs 1e-400": (with_costs(b"1e-400"), False),
        "costs subnormal": (with_costs(b"4e-320"), False),
        "costs -0.0": (with_costs(b"-0.0"), True),
        "costs long digits": (with_costs(b"0.1234567890123456789012345, 3.0000000000000004e-05"), True),
        "costs exponent forms": (with_costs(b"1E-5, 2.5e+1, 7e0, 1e-22, 123456789e-30"), True),
        "costs leading zero": (with_costs(b"01.5"), False),
        "costs 2**64": (with_costs(b"18446744073709551616"), False),
        "error_no bool": (with_r_tail(b'true, 1.5, 1600000000], "v": "v0.6"}'), None),
        "error_no 2**31": (with_r_tail(b'2147483648, 1.5, 1600000000'), False),
        "error_no 7 all_cost null ts float": (with_r_tail(b"7, null, 1600000000.25"), True),
        "all_cost string": (with_r_tail(b'0, "x", 1600000000'), False),
        "step null arg": (s[:first_step] + b'["SP", null, true, false, [1, null, true], 0], ' + s[first_step:], True),
        # arguments TVM's reader does not take for the kind (readers.ANSOR_STEP_ARGS): both quarantine the line
        "step float arg": (s[:first_step] + b'["AN", 1, 2, 2.5], ' + s[first_step:], False),
        "step string for int": (s[:first_step] + b'["AN", 1, 2, "s"], ' + s[first_step:], False),
        "step list for int": (s[:first_step] + b'["CA", 1, [2], 3], ' + s[first_step:], False),
        "step int for list": (s[:first_step] + b'["FU", 1, 2], ' + s[first_step:], False),
        "step args out of order": (s[:first_step] + b'["CHR", 1, [2], "shared"], ' + s[first_step:], False),
        "step arg missing": (s[:first_step] + b'["SP", 1, 0, 128, [2, 4]], ' + s[first_step:], False),
        "step arg added": (s[:first_step] + b'["CI", 1, 0], ' + s[first_step:], False),
        # a kind TVM does not write: its reader fails the line (StepReadFromRecord), so both quarantine it
        "step kind unknown": (s[:first_step] + b'["ZZ", 1, 2], ' + s[first_step:], False),
        "step float in list": (s[:first_step] + b'["XX", [1.5]], ' + s[first_step:], False),
        "step object arg": (s[:first_step] + b'["XX", {}], ' + s[first_step:], False),
        "step without kind": (s[:first_step] + b"[1, 2], " + s[first_step:], False),
        "empty step": (s[:first_step] + b"[], " + s[first_step:], False),
        "step kind escaped": (s[:first_step] + b'["X\\"Y", 1], ' + s[first_step:], False),
        "deep nesting": (sub(b'"v": "v0.6"', b'"v": "v0.6", "x": ' + b"[" * 200 + b"]" * 200), False),
        "trailing garbage": (s + b" x", False),
        "trailing spaces": (s + b"  \t", True),
        "vertical tab": (s + b"\x0b", False),
        "truncated": (s[: len(s) // 2], False),
        "not an object": (b"[1, 2, 3]", False),
        "nan literal": (with_costs(b"NaN"), False),
        "comment": (b"# " + s, None),
        "blank": (b"  \t\x0c", None),
    }


def test_edge_cases_one_file_and_one_by_one(tmp_path):
    cases = _cases()
    lines = [line for line, _ in cases.values()]
    for name, data in [("all", assemble(lines)), ("all crlf bom", assemble(lines, bom=True, crlf=True))] + [
        (n, assemble([line])) for n, (line, _) in cases.items()
    ]:
        p = tmp_path / "e.json"
        p.write_bytes(data)
        both = read_both(p)
        assert both is not None, name
        try:
            assert_same(*both)
        except AssertionError as e:
            raise AssertionError(f"case {name!r}: {e}") from None
    # the cases cover both outcomes of the Python reader, and the scanner takes the ones it should
    with pure_python(True):
        p.write_bytes(assemble(lines))
        sink, tbl = run_ansor(p, "e.json")
    assert tbl.num_rows >= 20 and sink.stats.quarantined >= 15
    for name, (line, fast) in cases.items():
        if fast is None:
            continue
        n, c, slow = _slow_lines(line)
        assert n == 1 and c == 0
        assert slow == (0 if fast else 1), f"case {name!r}: expected {'C' if fast else 'Python'}"


def test_bom_only_on_the_first_line_and_blocks(tmp_path):
    s = _seed()
    data = assemble([s, b"\xef\xbb\xbf" + s, s], bom=True)
    p = tmp_path / "b.json"
    p.write_bytes(data)
    for n in (R.CHUNK_BYTES, 5):
        with chunk_bytes(n):
            py, c = read_both(p)
        assert_same(py, c)
        assert c[0].stats.rows == 2 and c[0].stats.quarantined == 1  # a BOM inside the file is invalid JSON


def test_a_line_starting_with_a_space_is_a_comment_as_tvm_reads_it(tmp_path):
    """TVM's ``RecordReaderNode::ReadNext`` skips a line whose first byte is '#' or ' ' ("skip comment lines begin
    with '#' or ' '"), so TenSet's loaders never see such a line; both readers count it as a comment instead of
    making it a row. A line led by a tab is not one TVM skips: it stays a record."""
    s = _seed()
    data = assemble([s, b" " + s, b"  " + s, s, b"\t" + s, b" # note"], bom=True)
    p = tmp_path / "c.json"
    p.write_bytes(data)
    py, c = read_both(p)
    assert_same(py, c)
    st_ = c[0].stats
    assert (st_.lines, st_.rows, st_.comments, st_.quarantined) == (6, 3, 3, 0)
    assert c[1].column("line").to_pylist() == [1, 4, 5]


# --------------------------------------------------------------------------------------------------------------
# The scanner's building blocks


def test_blake2b64_matches_hashlib():
    rng = random.Random(0)
    for n in list(range(0, 300)) + [1023, 1024, 1025, 4096, 100_000]:
        data = bytes(rng.getrandbits(8) for _ in range(n))
        assert R._scan.blake2b64(data) == hashlib.blake2b(data, digest_size=8).hexdigest(), n


@given(st.lists(st.floats(min_value=5e-324, max_value=1e9, exclude_max=True), min_size=1, max_size=40))
@settings(max_examples=500)
def test_fsum_matches_math_fsum(xs):
    assert R._scan.fsum(np.array(xs, np.float64).tobytes()) == math.fsum(xs)


def test_fsum_hard_cases():
    for xs in ([1e-16, 1.0, 1e-16], [0.1] * 10, [1e8, 1.0, -1e8 + 1e-8], [2.0**-1074] * 3 + [1.0],
               [1.0, 1e100, 1.0, -1e100]):
        assert R._scan.fsum(struct.pack(f"{len(xs)}d", *xs)) == math.fsum(xs), xs


def test_pure_python_switch(tmp_path):
    with pure_python(True):
        assert not R.scan_enabled()
    with pure_python(False):
        assert R.scan_enabled()


def test_convert_writes_the_same_shards_with_either_reader(tmp_path):
    """End to end: ``convert`` over real logs (one group with comment lines, failures and two hardware) writes
    byte-identical Parquet shards and the same manifest counts whichever reader ran; the summary names it."""
    from tenset_curate.convert import convert

    src = tmp_path / "in"
    for sub in ("tvm-ci-logs", "bennu"):
        shutil.copytree(REAL / "ansor" / sub, src / sub)
    s0 = _seed()  # plus lines the scanner hands back: valid (a \u escape) and quarantined ones, between its own
    (src / "mixed").mkdir()
    (src / "mixed" / "m.json").write_bytes(assemble(
        [s0, s0.replace(b"cuda", b"cu\\u0064a", 1), s0[:100], s0, b"{}", s0.replace(b"[[", b"[[true, ", 1), s0]))
    out = {}
    for pure in (True, False):
        with pure_python(pure):
            d = tmp_path / ("py" if pure else "c")
            s = convert([src], d, workers=1)
        assert s["ansor_reader"] == ("python" if pure else "compiled")
        assert s["totals"]["rows"] > 1000 and s["totals"]["quarantined"] > 0 and s["totals"]["comments"] > 0
        shards = {p.relative_to(d / "records").as_posix(): p.read_bytes() for p in (d / "records").rglob("*.parquet")}
        out[pure] = (s["totals"], shards)
    assert out[True][0] == out[False][0]
    assert out[True][1].keys() == out[False][1].keys() and out[True][1]
    for name in out[True][1]:
        assert out[True][1][name] == out[False][1][name], name


def test_a_block_too_big_for_the_scanner_goes_to_python(tmp_path, monkeypatch):
    """Blocks over SCAN_MAX_BYTES (one huge line) are read by the Python reader, with the same result."""
    s = _seed()
    p = tmp_path / "big.json"
    p.write_bytes(assemble([s, b"# c", s[:50], s], bom=True, crlf=True))
    monkeypatch.setattr(R, "SCAN_MAX_BYTES", 10)
    with chunk_bytes(1):
        py, c = read_both(p)
    assert_same(py, c)
    assert c[0].stats.rows == 2 and c[0].stats.quarantined == 1 and c[0].stats.comments == 1


# ---------------------------------------------------------------------------------------------- MetaSchedule traces

MS_VALUES = [0, -1, 7, 1 << 63, -(1 << 63), (1 << 63) - 1, -(1 << 63) - 1, True, False, 1.5, -0.0, float("inf"), 1e308,
             "", "x", "b0", '"q"', '""', '"', '"a"b"', "-", "--", "-3", "--3", "12", "007", "-0", "1" * 19, "1" * 20,
             "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1a", "1_000", "²", "٣", "ä",
             '"ä"', None, [], [1, 2], [1, 2.0], [2.5], [1, "a"], [True, 1], [[1, 2], [3]], [1, 1 << 63], [1.0, 1 << 1100],
             [1 << 1100], {"b": 1, "a": [1]}, [{"k": 1}], [None, [None]], (1,), 1j,
             "l7", "_t", "Z", "-x", "$v", "ä1"]  # the last six: loop names a Fuse or Reorder counts, and not


def _deep(n):
    v: list = [1]
    for _ in range(n):
        v = [v, "s"]
    return v


def _real_ms_traces() -> list:
    """Every trace of the real MetaSchedule databases."""
    import orjson

    return [orjson.loads(line)[1][0] for db in sorted((REAL / "metaschedule").iterdir())
            for line in gzip.open(db / "database_tuning_record.json.gz").read().split(b"\n") if line.strip()]


def _ms_traces(traces: list):
    """``traces``, then mutated copies (values from MS_VALUES, deep nesting, broken instructions and decisions,
    decisions for missing or repeated indices)."""
    import copy

    yield from traces
    rng = random.Random(15)
    values = MS_VALUES + [_deep(10), _deep(70)]
    for _ in range(3000):
        insts, decs = copy.deepcopy(rng.choice(traces))
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if insts and r < 0.45:
                inst = insts[rng.randrange(len(insts))]
                if isinstance(inst, list) and len(inst) == 4:
                    part = inst[rng.choice([1, 2])]
                    if isinstance(part, list):
                        part.insert(rng.randint(0, len(part)), rng.choice(values))
            elif r < 0.65 and decs:
                i = rng.randrange(len(decs))
                ok = isinstance(decs[i], list) and decs[i] and rng.random() < 0.85
                decs[i] = [decs[i][0], rng.choice(values)] if ok else rng.choice(values)
            elif r < 0.75:
                decs.append([rng.choice([-1, 0, len(insts), len(insts) + 5, True]), rng.choice(values)])
            elif r < 0.85 and insts:
                insts[rng.randrange(len(insts))] = rng.choice(values + [["K", [], [], []], ["K", "x", [], []],
                                                                        ["K", [], [], [], []], [1, [], [], []],
                                                                        ["Fuse", ["l1", "_2", "3", "-x"], [1], []],
                                                                        ["Reorder", ["ä", "B", '"s"'], [], []]])
            elif decs and isinstance(d := decs[rng.randrange(len(decs))], list):
                decs.append(list(d))  # the same index twice: the last one counts
        yield insts, decs


def _ms_columns(path: str, insts, decisions):
    c = R._Columns()
    try:
        n = c.add_ms_trace(insts, decisions) if path == "c" else c._add_ms_trace_py(insts, decisions)
        err = None
    except Exception as e:  # noqa: BLE001 - the error itself is compared
        n, err = None, f"{type(e).__name__}: {e}"
    return n, err, (None if err else repr(c.step_lists()))


def test_ms_trace_matches_the_python_path():
    """``_scan.ms_trace`` (through ``add_ms_trace``) gives the Python path's columns, or hands the trace back so that
    the Python path gives its result or error: on every real trace and on 3,000 mutated ones. It must also take the
    real traces itself (not hand them all back)."""
    import copy

    assert R._ms_trace is not None
    taken = real = handed_back_valid = 0
    real_traces = _real_ms_traces()
    n_real = len(real_traces)
    with pure_python(False), watchdog(300):
        for k, (insts, decs) in enumerate(_ms_traces(real_traces)):
            got = _ms_columns("c", copy.deepcopy(insts), copy.deepcopy(decs))
            want = _ms_columns("py", copy.deepcopy(insts), copy.deepcopy(decs))
            assert got == want, f"trace {k}: {got[1]!r} vs {want[1]!r}"
            direct = R._ms_trace(copy.deepcopy(insts), copy.deepcopy(decs), R._Columns().step_lists())
            taken += direct is not None
            handed_back_valid += direct is None and want[1] is None
            real += k < n_real
            if k == n_real - 1:
                assert taken == n_real, f"only {taken} of {n_real} real traces taken by the compiled path"
    assert real == n_real
    assert taken > n_real + 500  # mutated traces it is sure of are taken too
    assert handed_back_valid > 50  # and the unusual valid ones (dicts, deep nesting, ...) go to the Python path


def test_the_scanner_knows_the_step_kinds_the_python_reader_knows(tmp_path):
    """_scan.c keeps its own copy of readers.ANSOR_STEP_ARGS' kinds and layouts: a step of every kind, laid out as
    TVM reads it, is a row on both paths, and the two tables are the same (a kind or layout only the scanner knew
    would be a row there and quarantined here)."""
    import re

    from tenset_curate.readers import ANSOR_STEP_KINDS, ANSOR_STEP_SIGNATURES

    src = (Path(__file__).resolve().parents[1] / "tenset_curate" / "_scan.c").read_text()
    array = src[src.index("step_args[] = {"):]
    array = array[: array.index("};")]
    assert dict(re.findall(r'\{"([A-Z]+)", "([iLs]*)"\}', array)) == ANSOR_STEP_SIGNATURES
    assert set(ANSOR_STEP_SIGNATURES) == ANSOR_STEP_KINDS
    s = _seed()
    first_step = s.index(b"[[\"", s.index(b"[[], [")) + 1
    arg = {"i": "3", "L": "[0, 1]", "s": '"local"'}
    lines = [s[:first_step] + f'["{k}", {", ".join(arg[c] for c in sig)}], '.encode() + s[first_step:]
             for k, sig in sorted(ANSOR_STEP_SIGNATURES.items())]
    p = tmp_path / "kinds.json"
    p.write_bytes(assemble(lines))
    both = read_both(p)
    assert_same(*both)
    with pure_python(True):
        sink, tbl = run_ansor(p, "kinds.json")
    assert tbl.num_rows == len(ANSOR_STEP_KINDS) and sink.stats.quarantined == 0
    assert _slow_lines(assemble(lines))[2] == 0  # and the scanner took every one itself
