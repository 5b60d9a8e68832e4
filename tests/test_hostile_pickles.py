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


def test_extension_registry_goes_through_allow_list(tmp_path):
    """EXT1 looks (module, name) up in copyreg's registry and must still hit find_class."""
    sentinel = tmp_path / "PWNED"
    code = 0xF1
    copyreg.add_extension("os", "system", code)
    try:
        data = _pickle(_call(pickle.EXT1 + bytes([code]), _s(_sh(sentinel))), proto=2)
        path = tmp_path / NAME
        path.write_bytes(data)
        with pytest.raises(HostilePickleError, match=r"os\.system") as ei:
            read_network_info(path)
        assert os.fspath(path) in str(ei.value)
    finally:
        copyreg.remove_extension("os", "system", code)
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
