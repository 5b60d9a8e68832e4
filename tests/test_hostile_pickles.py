"""Hostile network_info pickles: every payload must be refused before it runs.

Each payload, were it unpickled by plain ``pickle``, would create a sentinel file in ``tmp_path``;
the restricted unpickler must raise ``HostilePickleError`` naming the offending ``module.name`` and
the file, and the sentinel must not exist afterwards.  Nothing in this file unpickles with the
standard loader: payloads are only checked for well-formedness with ``pickletools.genops``.
"""
from __future__ import annotations

import copyreg
import functools
import gzip
import io
import os
import pickle
import pickletools
import random
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenset_curate.netinfo import (
    HostilePickleError,
    NetInfoError,
    PickleTooLargeError,
    read_network_info,
    restricted_loads,
)

REPO = Path(__file__).resolve().parents[1]
REAL_DIR = Path(os.environ.get("TENSET_CURATE_REALDATA", REPO.parent / "shared" / "realdata")) / "network_info"
LLVM = REAL_DIR / "((resnet_50,[(1,3,224,224)]),llvm).task.pkl.gz"
needs_real = pytest.mark.skipif(not LLVM.exists(), reason=f"real network_info file missing: {LLVM}")

NAME = "((resnet_50,[(1,3,224,224)]),llvm).task.pkl"


# --------------------------------------------------------------------------- assembler


def _s(text: str) -> bytes:
    b = text.encode()
    return pickle.BINUNICODE + struct.pack("<I", len(b)) + b


def _g(module: str, name: str) -> bytes:  # STACK_GLOBAL
    return _s(module) + _s(name) + pickle.STACK_GLOBAL


def _global0(module: str, name: str) -> bytes:  # protocol-0 GLOBAL
    return pickle.GLOBAL + module.encode() + b"\n" + name.encode() + b"\n"


def _call(callable_: bytes, *args: bytes) -> bytes:
    return callable_ + pickle.MARK + b"".join(args) + pickle.TUPLE + pickle.REDUCE


def _int(n: int) -> bytes:
    return pickle.BININT + struct.pack("<i", n)


def _dict(items: dict[str, bytes]) -> bytes:
    return pickle.EMPTY_DICT + pickle.MARK + b"".join(_s(k) + v for k, v in items.items()) + pickle.SETITEMS


def _list(items: list[bytes]) -> bytes:
    return pickle.EMPTY_LIST + pickle.MARK + b"".join(items) + pickle.APPENDS


def _new_object(module: str, name: str, state: bytes) -> bytes:
    return _call(_g("tvm.runtime.object", "_new_object"), _g(module, name)) + state + pickle.BUILD


def _pickle(body: bytes, proto: int = 4) -> bytes:
    return pickle.PROTO + bytes([proto]) + body + pickle.STOP


def _sh(sentinel: Path) -> str:
    return f"touch '{sentinel}'"


def _py(sentinel: Path) -> str:
    return f"open({str(sentinel)!r}, 'w').close()"


class _Call:
    """pickle.dumps(_Call(f, *args)) is a pickle that calls f(*args) when loaded."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


# --------------------------------------------------------------------------- payloads


def _payloads(sentinel: Path) -> dict[str, tuple[bytes, str]]:
    """name -> (pickle bytes, offending global that must be named)."""
    sh, py = _sh(sentinel), _py(sentinel)
    task_ok = _new_object(
        "tvm.auto_scheduler.search_task", "SearchTask",
        _dict({"workload_key": _s('["0123456789abcdef0123456789abcdef", 1]'), "target": _s("llvm")}),
    )
    return {
        # protocol-0 GLOBAL + REDUCE
        "os.system": (_pickle(_call(_global0("os", "system"), _s(sh)), proto=2), "os.system"),
        # what pickle.dumps really writes for os.system on Linux
        "posix.system": (pickle.dumps(_Call(os.system, sh), protocol=4), "posix.system"),
        "subprocess.Popen": (pickle.dumps(_Call(subprocess.Popen, ["touch", str(sentinel)]), protocol=4), "subprocess.Popen"),
        # protocol 2 writes the Python 2 name, which plain pickle maps back to subprocess.Popen
        "commands.Popen": (
            pickle.dumps(_Call(subprocess.Popen, ["touch", str(sentinel)]), protocol=2),
            "commands.Popen (Python 3 name: subprocess.Popen)",
        ),
        "builtins.eval": (pickle.dumps(_Call(eval, py), protocol=4), "builtins.eval"),
        "builtins.exec": (pickle.dumps(_Call(exec, py), protocol=3), "builtins.exec"),
        # __import__('os') is stored in the memo, then getattr(memo, 'system')(cmd)
        "builtins.__import__": (
            _pickle(
                _call(_g("builtins", "__import__"), _s("os")) + pickle.MEMOIZE + pickle.POP
                + _call(_call(_g("builtins", "getattr"), pickle.BINGET + b"\x00", _s("system")), _s(sh))
            ),
            "builtins.__import__",
        ),
        # getattr(__import__('os'), 'system')(cmd): getattr is the first global
        "builtins.getattr": (
            _pickle(_call(_call(_g("builtins", "getattr"), _call(_g("builtins", "__import__"), _s("os")), _s("system")), _s(sh))),
            "builtins.getattr",
        ),
        "functools.partial": (pickle.dumps(_Call(functools.partial(os.system, sh)), protocol=4), "functools.partial"),
        "operator.attrgetter": (
            _pickle(_call(_g("operator", "attrgetter"), _s("system"))),
            "operator.attrgetter",
        ),
        "codecs.encode": (_pickle(_call(_g("codecs", "encode"), _s("x"), _s("rot13"))), "codecs.encode"),
        # nested reduce: an allowed reduce whose argument is a hostile reduce
        "nested-allowed-outer": (
            _pickle(_call(_g("tvm.runtime.object", "_new_object"), _call(_g("posix", "system"), _s(sh)))),
            "posix.system",
        ),
        # nested reduce: a hostile reduce whose argument is another reduce
        "nested-hostile-outer": (
            pickle.dumps(_Call(eval, _Call(str, py)), protocol=4),
            "builtins.eval",
        ),
        # INST: 'i' module\nname\n with the MARKed args
        "INST": (pickle.MARK + _s(sh) + pickle.INST + b"os\nsystem\n" + pickle.STOP, "os.system"),
        # OBJ: MARK class args OBJ
        "OBJ": (_pickle(pickle.MARK + _g("subprocess", "Popen") + _s("touch") + pickle.OBJ), "subprocess.Popen"),
        # a TenSet-looking file: valid SearchTask, weights, but the target is os.system(cmd)
        "smuggled-in-tenset": (
            _pickle(
                _list([
                    task_ok,
                    _new_object(
                        "tvm.auto_scheduler.search_task", "SearchTask",
                        _dict({
                            "workload_key": _s('["0123456789abcdef0123456789abcdef", 1]'),
                            "target": _call(_g("posix", "system"), _s(sh)),
                        }),
                    ),
                ])
                + _list([_int(1), _int(1)]) + pickle.TUPLE2
            ),
            "posix.system",
        ),
        # a class name spelled like an allowed one, in the wrong module
        "lookalike-module": (
            _pickle(_call(_g("tvm.runtime.object", "_new_object"), _g("tvm.auto_scheduler.search_task.os", "SearchTask"))),
            "tvm.auto_scheduler.search_task.os.SearchTask",
        ),
    }


PAYLOAD_NAMES = list(_payloads(Path("/nonexistent")))


@pytest.mark.parametrize("gz", [False, True], ids=["pkl", "pkl.gz"])
@pytest.mark.parametrize("which", PAYLOAD_NAMES)
def test_hostile_payload_refused(tmp_path, which, gz):
    sentinel = tmp_path / "PWNED"
    data, offender = _payloads(sentinel)[which]
    list(pickletools.genops(data))  # the payload is a well-formed pickle
    path = tmp_path / (NAME + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(HostilePickleError) as ei:
        read_network_info(path)
    msg = str(ei.value)
    assert offender in msg
    assert os.fspath(path) in msg
    assert isinstance(ei.value, ValueError)
    assert not sentinel.exists()


def test_hostile_bytes_name_the_source():
    with pytest.raises(HostilePickleError, match=r"somewhere\.pkl: refusing global posix\.system"):
        restricted_loads(pickle.dumps(_Call(os.system, "true")), source="somewhere.pkl")


def test_extension_codes_are_refused_even_when_the_registry_cache_holds_them(tmp_path):
    """EXT1/2/4 look (module, name) up in copyreg's registry; once a plain ``pickle.loads`` in the process has used
    a code, the C unpickler takes the object from ``copyreg._extension_cache`` without asking ``find_class`` (found
    by the session-30 audit: the restricted load returned ``os.getcwd()``). The opcodes are refused outright."""
    sentinel = tmp_path / "PWNED"
    code = 0xF1
    copyreg.add_extension("os", "getcwd", code)
    try:
        copyreg._extension_cache[code] = os.getcwd  # what a plain unpickling of EXT1 <code> elsewhere leaves there
        for ext in (pickle.EXT1 + bytes([code]), pickle.EXT2 + struct.pack("<H", code),
                    pickle.EXT4 + struct.pack("<i", code)):
            data = _pickle(_call(ext), proto=2)
            path = tmp_path / NAME
            path.write_bytes(data)
            with pytest.raises(HostilePickleError, match=r"refusing opcode EXT") as ei:
                read_network_info(path)
            assert os.fspath(path) in str(ei.value)
    finally:
        copyreg.remove_extension("os", "getcwd", code)
        copyreg.clear_extension_cache()
    assert not sentinel.exists()


@pytest.mark.parametrize(
    "body,offender",
    [
        # _new_object fed something other than a stand-in class
        (_call(_g("tvm.runtime.object", "_new_object"), _s("os")), "tvm.runtime.object._new_object"),
        # a stand-in class called directly with constructor arguments
        (_call(_g("tvm.auto_scheduler.search_task", "SearchTask"), _s("x")), "tvm.auto_scheduler.search_task.SearchTask"),
        # String built from a non-str (would str() an arbitrary object graph)
        (_call(_g("tvm.runtime.container", "String"), _list([_int(1)])), "tvm.runtime.container.String"),
        (_call(_g("tvm.runtime.container", "String"), _s("a"), _s("b")), "tvm.runtime.container.String"),
    ],
)
def test_allowed_globals_cannot_be_abused(tmp_path, body, offender):
    path = tmp_path / NAME
    path.write_bytes(_pickle(body))
    with pytest.raises(HostilePickleError) as ei:
        read_network_info(path)
    assert offender in str(ei.value) and os.fspath(path) in str(ei.value)


def test_build_cannot_mutate_allowed_objects(tmp_path):
    """BUILD aimed at the allowed callable or a stand-in class must fail and change nothing."""
    from tenset_curate import netinfo

    for target in (_g("tvm.runtime.object", "_new_object"), _g("tvm.auto_scheduler.search_task", "SearchTask")):
        for state in (_dict({"poison": _s("x")}), pickle.NONE + _dict({"poison": _s("x")}) + pickle.TUPLE2):
            path = tmp_path / NAME
            path.write_bytes(_pickle(target + state + pickle.BUILD))
            _assert_clear_error(path)
    assert not hasattr(netinfo.restricted_new_object, "poison")
    assert not hasattr(netinfo.SearchTaskStandIn, "poison")
    with pytest.raises(TypeError):
        netinfo.ALLOWED_GLOBALS[("os", "system")] = None  # read-only mapping


@pytest.mark.parametrize(
    "body,match",
    [
        # LONG_BINPUT with a huge index: CPython would allocate and zero a memo table that large
        (_s("x") + pickle.LONG_BINPUT + struct.pack("<I", 10_000_000), "memo index 10000000"),
        (_s("x") + pickle.PUT + b"99999999\n", "memo index 99999999"),
        (pickle.LONG_BINGET + struct.pack("<I", 7), "memo index 7 .* never defined"),
        # a counted bytes claiming 1 TiB
        (pickle.BINBYTES8 + struct.pack("<Q", 1 << 40) + b"abc", "not a valid pickle"),
        (pickle.BYTEARRAY8 + struct.pack("<Q", 3) + b"abc", "refusing opcode BYTEARRAY8"),
        (pickle.NEXT_BUFFER, "refusing opcode NEXT_BUFFER"),
        (_s("x") + b"\xff", "not a valid pickle"),  # unknown opcode
    ],
)
def test_memory_bomb_opcodes_refused_before_unpickling(tmp_path, body, match):
    path = tmp_path / NAME
    path.write_bytes(_pickle(body, proto=5))
    _assert_clear_error(path, match)


def test_persistent_id_refused(tmp_path):
    path = tmp_path / NAME
    path.write_bytes(_pickle(_s("x") + pickle.BINPERSID))
    with pytest.raises(HostilePickleError, match="persistent id") as ei:
        read_network_info(path)
    assert os.fspath(path) in str(ei.value)


@needs_real
def test_global_smuggled_into_real_file(tmp_path):
    """The real Graviton2 ResNet-50 pickle with one hardware_params swapped for posix.system(cmd)."""
    sentinel = tmp_path / "PWNED"
    raw = gzip.decompress(LLVM.read_bytes())
    ops = list(pickletools.genops(raw))
    pieces, inserted = [], 0
    for k, (op, arg, pos) in enumerate(ops):
        end = ops[k + 1][2] if k + 1 < len(ops) else len(raw)
        if op.name == "FRAME":
            continue  # drop framing so the splice keeps the stream consistent
        pieces.append(raw[pos:end])
        # after the 20th task's "layout_rewrite_option" key, push a hostile call instead of ...
        if op.name == "BININT1" and arg == 2 and ops[k - 1][0].name in ("BINGET", "MEMOIZE"):
            inserted += 1
            if inserted == 20:
                pieces[-1] = _call(_g("posix", "system"), _s(_sh(sentinel)))
    assert inserted == 27
    data = b"".join(pieces)
    list(pickletools.genops(data))
    path = tmp_path / LLVM.name
    path.write_bytes(gzip.compress(data))
    with pytest.raises(HostilePickleError, match=r"posix\.system") as ei:
        read_network_info(path)
    assert os.fspath(path) in str(ei.value)
    assert not sentinel.exists()
    # the unmodified, de-framed stream still reads
    clean = tmp_path / "clean" / LLVM.name
    clean.parent.mkdir()
    clean.write_bytes(gzip.compress(b"".join(raw[pos:(ops[k + 1][2] if k + 1 < len(ops) else len(raw))]
                                             for k, (op, _a, pos) in enumerate(ops) if op.name != "FRAME")))
    assert len(read_network_info(clean)) == 27


# --------------------------------------------------------------------------- garbage and bombs


def _assert_clear_error(path: Path, match: str | None = None) -> NetInfoError:
    with pytest.raises(NetInfoError, match=match) as ei:
        read_network_info(path)
    assert os.fspath(path) in str(ei.value)
    return ei.value


@needs_real
@pytest.mark.parametrize("frac", [0.0001, 0.5, 0.999])
def test_truncated_pickle(tmp_path, frac):
    raw = gzip.decompress(LLVM.read_bytes())
    path = tmp_path / NAME
    path.write_bytes(raw[: int(len(raw) * frac)])
    err = _assert_clear_error(path)
    assert not isinstance(err, HostilePickleError)


@needs_real
def test_truncated_gzip(tmp_path):
    data = LLVM.read_bytes()
    path = tmp_path / LLVM.name
    path.write_bytes(data[: len(data) // 2])
    _assert_clear_error(path, "corrupt or truncated gzip")


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / NAME
    path.write_bytes(rng.randbytes(4096))
    _assert_clear_error(path)
    gz = tmp_path / (NAME + ".gz")
    gz.write_bytes(b"\x1f\x8b" + rng.randbytes(4096))
    _assert_clear_error(gz)


def test_empty_and_text_files(tmp_path):
    empty = tmp_path / "empty.task.pkl"
    empty.write_bytes(b"")
    _assert_clear_error(empty, "empty file")
    text = tmp_path / "notes.task.pkl"
    text.write_text("this is not a pickle\n")
    _assert_clear_error(text)
    missing = tmp_path / "missing.task.pkl"
    _assert_clear_error(missing, "cannot read file")


def test_gzip_bomb_over_cap(tmp_path):
    # 64 MiB of zeros compresses to ~64 KiB; with a 1 MiB cap it must stop early.
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz:
        chunk = b"\0" * (1 << 20)
        for _ in range(64):
            gz.write(chunk)
    path = tmp_path / (NAME + ".gz")
    path.write_bytes(buf.getvalue())
    assert path.stat().st_size < 1 << 20
    with pytest.raises(PickleTooLargeError, match="exceeds the cap") as ei:
        read_network_info(path, max_bytes=1 << 20)
    assert os.fspath(path) in str(ei.value)


def test_plain_file_over_cap(tmp_path):
    path = tmp_path / NAME
    path.write_bytes(_pickle(_s("x" * 5000)))
    with pytest.raises(PickleTooLargeError, match="exceeds the cap") as ei:
        read_network_info(path, max_bytes=1000)
    assert os.fspath(path) in str(ei.value)


# --------------------------------------------------------------------------- fuzz

_REAL_RAW = gzip.decompress(LLVM.read_bytes()) if LLVM.exists() else b""
_OP_POSITIONS = [pos for _op, _arg, pos in pickletools.genops(_REAL_RAW)] if _REAL_RAW else [0]

_flip = st.tuples(
    st.one_of(st.sampled_from(_OP_POSITIONS), st.integers(0, max(len(_REAL_RAW) - 1, 0))),
    st.integers(1, 255),
)


@needs_real
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(_flip, min_size=1, max_size=6), gz=st.booleans())
def test_fuzz_byte_flips(tmp_path, flips, gz):
    data = bytearray(_REAL_RAW)
    for pos, xor in flips:
        data[pos] ^= xor
    path = tmp_path / (NAME + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(bytes(data), compresslevel=1) if gz else bytes(data))
    try:
        rows = read_network_info(path)
    except ValueError as exc:
        assert isinstance(exc, NetInfoError)
        assert os.fspath(path) in str(exc)
    else:
        assert all(isinstance(r["workload_key"], str) and isinstance(r["target"], str) for r in rows)


@needs_real
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4))
def test_fuzz_gzip_container_flips(tmp_path, flips):
    data = bytearray(LLVM.read_bytes())
    for pos, xor in flips:
        data[pos % len(data)] ^= xor
    path = tmp_path / LLVM.name
    path.write_bytes(bytes(data))
    try:
        read_network_info(path)
    except ValueError as exc:
        assert isinstance(exc, NetInfoError) and os.fspath(path) in str(exc)


# --------------------------------------------------------------------------- session-30 audit: small files, big work


def _task_obj(key: bytes, target: bytes) -> bytes:
    state = pickle.EMPTY_DICT + _s("workload_key") + key + pickle.SETITEM + _s("target") + target + pickle.SETITEM
    return _call(_g("tvm.runtime.object", "_new_object"), _g("tvm.auto_scheduler.search_task", "SearchTask")) + \
        state + pickle.BUILD


KEY = _s('["9847f8cc0b305137f49f2c5c0c8ab25d", 1, 2048]')


def _file(tmp_path, tasks: list[bytes], weights: list[bytes], tail: bytes = b"") -> Path:
    path = tmp_path / NAME
    path.write_bytes(_pickle(_list(tasks) + _list(weights) + pickle.TUPLE2) + tail)
    return path


def test_a_deeply_nested_tuple_is_refused_before_it_is_built(tmp_path):
    """A 1 KB gzip of a 1,000,000-deep tuple used as a dict key made CPython's unpickler hash it without a recursion
    guard: SIGSEGV, `curate convert` gone with exit 139 and no word. Run in a child so a regression fails the test
    instead of killing pytest."""
    import sys

    deep = pickle.EMPTY_TUPLE + pickle.TUPLE1 * 1_000_000
    path = tmp_path / (NAME + ".gz")
    path.write_bytes(gzip.compress(_pickle(pickle.EMPTY_DICT + deep + pickle.NONE + pickle.SETITEM)))
    assert path.stat().st_size < 3000
    code = ("import sys; from tenset_curate.netinfo import read_network_info, NetInfoError\n"
            "try:\n    read_network_info(sys.argv[1])\nexcept NetInfoError as e:\n    print(e)")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "nests deeper than 200 levels" in r.stdout and str(path) in r.stdout


def test_one_object_many_times_is_refused_not_multiplied(tmp_path):
    """A task pickled once and listed 1,000,000 times (a memo GET is 2 bytes) gave 1,000,000 rows and 1.1 GB from a
    2.4 KB file; the stack-copy opcode DUP did the same (a stack of 20M copies from 19 KB)."""
    one = _task_obj(KEY, _s("cuda")) + pickle.BINPUT + b"\x00"
    path = _file(tmp_path, [one] + [pickle.BINGET + b"\x00"] * 1000, [_int(1)] * 1001)
    with pytest.raises(NetInfoError, match="task 1 is task 0 again"):
        read_network_info(path)
    path = _file(tmp_path, [_task_obj(KEY, _s("cuda")) + pickle.DUP * 10], [_int(1)])
    with pytest.raises(NetInfoError, match="refusing opcode DUP"):
        read_network_info(path)


def test_one_huge_key_shared_by_many_tasks_is_refused(tmp_path):
    """Distinct tasks sharing one 1.5 MB workload key through the memo: each row copied and parsed it (63 s for 3,000
    tasks, or an ArrowMemoryError traceback naming no file)."""
    big = _s('["x"' + ", 1" * 500_000 + "]") + pickle.BINPUT + b"\x00"
    tasks = [_task_obj(big, _s("cuda"))] + [_task_obj(pickle.BINGET + b"\x00", _s("cuda"))] * 3
    with pytest.raises(NetInfoError, match=r"task 0 workload_key is 1,500,005 characters"):
        read_network_info(_file(tmp_path, tasks, [_int(1)] * 4))


def test_a_shared_target_and_key_are_read_once_per_file(tmp_path, monkeypatch):
    """Tasks that share a target object and a key (as a memo lets any file do) parse each once."""
    from tenset_curate import netinfo

    calls = []
    real = netinfo._target_string
    monkeypatch.setattr(netinfo, "_target_string", lambda o: calls.append(1) or real(o))
    tgt = _s("cuda -keys=cuda,gpu") + pickle.BINPUT + b"\x00"
    tasks = [_task_obj(KEY, tgt)] + [_task_obj(_s(f'["k{i}", 1]'), pickle.BINGET + b"\x00") for i in range(50)]
    rows = read_network_info(_file(tmp_path, tasks, [_int(2)] * 51))
    assert len(rows) == 51 and {r["target"] for r in rows} == {"cuda -keys=cuda,gpu"} and len(calls) == 1
    assert [r["task_weight"] for r in rows] == [2] * 51


def test_bytes_after_the_pickle_and_a_weight_beyond_int64_are_refused(tmp_path):
    """Data after STOP (junk, or a gzip file of two members: two pickles) was dropped without a word; a weight of
    2**70 passed read_network_info and failed later in networks_table with an OverflowError naming no file."""
    task = _task_obj(KEY, _s("cuda"))
    with pytest.raises(NetInfoError, match=r"4 bytes after the pickle's end"):
        read_network_info(_file(tmp_path, [task], [_int(1)], tail=b"junk"))
    two = tmp_path / (NAME + ".gz")
    one = _pickle(_list([task]) + _list([_int(1)]) + pickle.TUPLE2)
    two.write_bytes(gzip.compress(one) + gzip.compress(one))
    with pytest.raises(NetInfoError, match=r"bytes after the pickle's end"):
        read_network_info(two)
    huge = pickle.LONG1 + bytes([9]) + (1 << 70).to_bytes(9, "little")
    with pytest.raises(NetInfoError, match=r"task 0 weight is not a positive int \(below 2\*\*63\)") as ei:
        read_network_info(_file(tmp_path, [task], [huge]))
    assert NAME in str(ei.value)


@needs_real
def test_the_real_files_pass_the_new_limits_unchanged(tmp_path):
    """The real TenSet pickles nest 10 deep and stack at most 48 items: far inside the limits."""
    from tenset_curate import netinfo

    for f in sorted(REAL_DIR.glob("*.task.pkl.gz")):
        data = gzip.decompress(f.read_bytes())
        netinfo._prescan(data, str(f))
        rows = read_network_info(f)
        assert len(rows) == 27 and sum(r["task_weight"] for r in rows) == 56
