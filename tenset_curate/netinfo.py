"""Which network each task belongs to: TenSet ``network_info`` pickles, read without running any code from them, and
the ``workloads.json`` that ``curate collect`` writes next to its MetaSchedule database
(:func:`collector_network_rows`).

TenSet's ``dataset/network_info/{network_task_key}.task.pkl`` files are pickles of
``(tasks, task_weights)`` written by ``auto_scheduler.extract_tasks`` (``tasks`` are TVM
``SearchTask`` objects); ``to_measure_programs/all_tasks.pkl`` is a pickled list of ``SearchTask``.
Loading them with :mod:`pickle` would import TVM and run whatever callables the file names, so
this module never does that.  Instead :class:`RestrictedUnpickler` resolves globals against an
explicit allow-list (:data:`ALLOWED_GLOBALS`) of the TVM names those files use, each mapped to an
inert stand-in class defined here that only stores the data the pickle hands it.  Nothing from
``tvm`` is imported.  Every other global -- ``os.system``, ``builtins.eval``, ``functools.partial``
and so on -- raises :class:`HostilePickleError` naming the offending ``module.name`` and the file.

What the real files contain (inspected with ``pickletools.genops``; TVM 0.8.dev0, protocol 4)::

    ([ tvm.runtime.object._new_object(tvm.auto_scheduler.search_task.SearchTask)
         BUILD {"compute_dag": _new_object(tvm.auto_scheduler.compute_dag.ComputeDAG)
                               BUILD {"tensors": <JSON graph>},
               "workload_key": tvm.runtime.container.String.__new__(String, '["<md5>", 1, ...]')
                               BUILD (None, {"__tvm_object__": _new_object(tvm.runtime.object.Object)
                                                               BUILD {"handle": <JSON>}}),
               "target": _new_object(tvm.target.target.Target) BUILD {"handle": <JSON graph>},
               "target_host": None,
               "hardware_params": _new_object(tvm.auto_scheduler.search_task.HardwareParams)
                                  BUILD {"handle": <JSON>},
               "layout_rewrite_option": 2,
               "task_input_names": _new_object(tvm.ir.container.Array) BUILD {"handle": <JSON>}},
       ...],
     [1, 1, 3, ...])

Before unpickling, the bytes are capped (``max_bytes``, 2 GiB by default, applied to the
*decompressed* size of ``.gz`` files while they stream) and the opcode stream is pre-scanned with
``pickletools.genops`` (which only parses) to refuse memo-index memory bombs, over-long counted
strings and protocol-5 buffer opcodes.  Every failure is a :class:`NetInfoError` (a ``ValueError``)
whose message starts with the file's path.

The rows :func:`read_network_info` builds hold only plain ``str``/``int`` values; the target string is
rebuilt from the Target's JSON graph the way TVM's ``Target.__str__`` prints it (kind, ``-keys=``,
then the attributes sorted by name), which is how TenSet's measurement logs spell it.
"""
from __future__ import annotations

import _compat_pickle
import ast
import gzip
import io
import json
import os
import pickle
import pickletools
import re
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow as pa

__all__ = [
    "ALLOWED_GLOBALS",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "HostilePickleError",
    "NETWORKS_SCHEMA",
    "NetInfoError",
    "PickleTooLargeError",
    "RestrictedUnpickler",
    "collector_network_rows",
    "networks_table",
    "parse_network_filename",
    "read_network_info",
    "restricted_load_file",
    "restricted_loads",
]

#: Refuse to decompress / unpickle more than this many bytes (2 GiB).
DEFAULT_MAX_DECOMPRESSED_BYTES = 2 * 1024**3

_CHUNK = 1 << 20
# Budget of JSON-graph node visits when rebuilding a target string (guards against DAG blow-up).
_TARGET_GRAPH_BUDGET = 10_000
_TARGET_STR_MAX = 1 << 16
_FILENAME_MAX = 4096


# --------------------------------------------------------------------------- errors


class NetInfoError(ValueError):
    """A network_info file could not be read: the message names the file and the reason."""


class HostilePickleError(NetInfoError):
    """The pickle names a global outside the allow-list (or abuses an allowed one)."""


class PickleTooLargeError(NetInfoError):
    """The (decompressed) pickle exceeds the configured size cap."""


def _where(source: Any) -> str:
    return "<bytes>" if source is None else os.fspath(source)


# --------------------------------------------------------------------------- inert stand-ins


class _StandIn:
    """Base of the inert stand-ins: a data holder; BUILD/__setstate__ only store what they get.

    Creating one with arguments is refused: the real files only create them through
    ``_new_object(cls)`` (which passes none), so arguments mean someone is trying to feed a
    constructor.
    """

    tvm_name = ""  # "module.name" of the TVM class it stands for

    def __new__(cls, *args: Any, **kwargs: Any):
        if args or kwargs:
            raise HostilePickleError(f"stand-in for {cls.tvm_name} called with constructor arguments")
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # args already refused in __new__
        pass

    def __setstate__(self, state: Any) -> None:
        object.__setattr__(self, "state", state)

    def field(self, key: str, default: Any = None) -> Any:
        state = self.__dict__.get("state")
        if isinstance(state, dict):
            return state.get(key, default)
        return default

    def __repr__(self) -> str:  # never repr the (attacker-controlled, possibly huge) state
        return f"<{type(self).__name__} stand-in for {self.tvm_name}>"


class SearchTaskStandIn(_StandIn):
    tvm_name = "tvm.auto_scheduler.search_task.SearchTask"


class ComputeDAGStandIn(_StandIn):
    tvm_name = "tvm.auto_scheduler.compute_dag.ComputeDAG"


class HardwareParamsStandIn(_StandIn):
    tvm_name = "tvm.auto_scheduler.search_task.HardwareParams"


class TargetStandIn(_StandIn):
    tvm_name = "tvm.target.target.Target"


class TvmObjectStandIn(_StandIn):
    tvm_name = "tvm.runtime.object.Object"


class ArrayStandIn(_StandIn):
    tvm_name = "tvm.ir.container.Array"


class TvmStringStandIn(str):
    """Stand-in for ``tvm.runtime.container.String`` (a ``str`` subclass in TVM too).

    Pickled as ``NEWOBJ(String, (text,))`` + ``BUILD (None, {"__tvm_object__": Object})``.
    Only a real ``str`` argument is accepted: calling ``str()`` on an arbitrary unpickled object
    could expand a shared-reference structure exponentially.
    """

    tvm_name = "tvm.runtime.container.String"

    def __new__(cls, *args: Any, **kwargs: Any):
        if kwargs or len(args) > 1 or (args and not isinstance(args[0], str)):
            raise HostilePickleError(f"stand-in for {cls.tvm_name} accepts only one str argument")
        return str.__new__(cls, args[0] if args else "")

    def __setstate__(self, state: Any) -> None:
        object.__setattr__(self, "state", state)

    def __reduce__(self):  # pragma: no cover - stand-ins are never re-pickled
        raise TypeError("stand-in objects are not picklable")


class _RestrictedNewObject:
    """Stand-in for ``tvm.runtime.object._new_object(cls)``: an empty instance of a stand-in class.

    An object with empty ``__slots__`` rather than a function, so a hostile ``BUILD`` aimed at it
    cannot write attributes onto a module-level object shared by every load.
    """

    __slots__ = ()
    tvm_name = "tvm.runtime.object._new_object"

    def __call__(self, cls: Any) -> Any:
        if not (isinstance(cls, type) and cls in _STAND_IN_CLASSES):
            raise HostilePickleError(
                "tvm.runtime.object._new_object called with something other than an allowed stand-in class"
            )
        return cls.__new__(cls)

    def __repr__(self) -> str:
        return "<stand-in for tvm.runtime.object._new_object>"


restricted_new_object = _RestrictedNewObject()

_STAND_IN_CLASSES = frozenset(
    {
        SearchTaskStandIn,
        ComputeDAGStandIn,
        HardwareParamsStandIn,
        TargetStandIn,
        TvmObjectStandIn,
        ArrayStandIn,
        TvmStringStandIn,
    }
)

#: The explicit allow-list: ``(module, name)`` found in TenSet's network_info pickles -> stand-in.
#: No builtins are needed by the real files, so none are allowed.
ALLOWED_GLOBALS: Mapping[tuple[str, str], Any] = MappingProxyType({
    ("tvm.runtime.object", "_new_object"): restricted_new_object,
    ("tvm.runtime.object", "Object"): TvmObjectStandIn,
    ("tvm.runtime.container", "String"): TvmStringStandIn,
    ("tvm.auto_scheduler.search_task", "SearchTask"): SearchTaskStandIn,
    ("tvm.auto_scheduler.search_task", "HardwareParams"): HardwareParamsStandIn,
    ("tvm.auto_scheduler.compute_dag", "ComputeDAG"): ComputeDAGStandIn,
    ("tvm.target.target", "Target"): TargetStandIn,
    ("tvm.ir.container", "Array"): ArrayStandIn,
})


# --------------------------------------------------------------------------- unpickling


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose ``find_class`` only resolves :data:`ALLOWED_GLOBALS`.

    Every GLOBAL / STACK_GLOBAL / INST / EXT* lookup goes through ``find_class``; anything not in the
    allow-list raises :class:`HostilePickleError` before a single object from it is created.
    Persistent IDs are refused too.
    """

    def __init__(self, file: Any, *, source: Any = None) -> None:
        super().__init__(file, fix_imports=False, encoding="utf-8", errors="strict")
        self._source = _where(source)

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except (KeyError, TypeError):
            pass
        raise HostilePickleError(
            f"{self._source}: refusing global {_safe_name(module)}.{_safe_name(name)}{_py3_alias(module, name)} "
            "(not in the network_info allow-list; nothing from this pickle was executed)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise HostilePickleError(f"{self._source}: refusing persistent id (not used by network_info pickles)")


def _py3_alias(module: Any, name: Any) -> str:
    """For Python-2 names (``commands.Popen``) that plain pickle would remap, say what they mean."""
    if not (isinstance(module, str) and isinstance(name, str)):
        return ""
    mod, nm = module, name
    if (mod, nm) in _compat_pickle.NAME_MAPPING:
        mod, nm = _compat_pickle.NAME_MAPPING[(mod, nm)]
    elif mod in _compat_pickle.IMPORT_MAPPING:
        mod = _compat_pickle.IMPORT_MAPPING[mod]
    if (mod, nm) == (module, name):
        return ""
    return f" (Python 3 name: {_safe_name(mod)}.{_safe_name(nm)})"


def _safe_name(text: Any) -> str:
    s = text if isinstance(text, str) else type(text).__name__
    s = s.encode("unicode_escape").decode("ascii")
    return s if len(s) <= 200 else s[:200] + "..."


# Opcodes TenSet's network_info pickles never contain and whose failure paths misbehave in CPython
# (protocol-5 out-of-band buffers; BYTEARRAY8 allocates its full declared size up front), or that get around
# ``find_class``: EXT1/2/4 take an object from copyreg's extension cache when another library registered a code
# and a plain ``pickle.loads`` used it. DUP, which CPython's pickler never writes, copies the top of the stack for one
# byte each: 20 MB of DUPs are an 18 GiB stack.
_REFUSED_OPCODES = frozenset({"NEXT_BUFFER", "READONLY_BUFFER", "BYTEARRAY8", "EXT1", "EXT2", "EXT4", "DUP"})
_MEMO_PUT = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MEMO_GET = frozenset({"GET", "BINGET", "LONG_BINGET"})
# Opcodes that change the object under them in place (a list appended to, a dict set, an object's state built):
# the result nests only as deep as what goes in, not one level per call.
_IN_PLACE = frozenset({"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"})
# The deepest nesting and the most stack items a network_info pickle may build. The real TenSet files nest 9 deep
# and hold at most a few hundred items on the stack; CPython hashes a 1,000,000-deep tuple (a dict key) without a
# recursion guard and dies with SIGSEGV.
MAX_PICKLE_DEPTH = 200
MAX_PICKLE_STACK = 1_000_000
_MARK = -1


def _prescan(data: bytes, where: str) -> None:
    """Walk the opcode stream (``pickletools.genops`` only parses; nothing is built or called).

    Refuses what the unpickler would turn into a memory bomb before it starts: a memo index far
    beyond the entries defined so far (``LONG_BINPUT 0x7fffffff`` makes CPython allocate and zero
    a 16 GiB memo table), a counted string/bytes longer than the data (caught by ``genops``), and
    the protocol-5 buffer opcodes.  Also finds truncation (no STOP) with a clear message.
    """
    memo_len = 0
    # the stack the unpickler would build, as the nesting depth of each item (_MARK for a mark), and the memo's
    stack: list[int] = []
    memo: dict[int, int] = {}
    end = -1
    try:
        for op, arg, pos in pickletools.genops(data):
            name = op.name
            if name in _REFUSED_OPCODES:
                raise (HostilePickleError if name.startswith("EXT") else NetInfoError)(
                    f"{where}: refusing opcode {name} at byte {pos} (not used by network_info pickles"
                    + ("; it names a global by a registry code, around the allow-list)" if name.startswith("EXT")
                       else ")"))
            if name == "MEMOIZE":
                memo_len += 1
            elif name in _MEMO_PUT:
                if not isinstance(arg, int) or arg < 0 or arg > memo_len:
                    raise NetInfoError(f"{where}: memo index {arg} at byte {pos} skips ahead of the {memo_len} entries defined")
                memo_len = max(memo_len, arg + 1)
            elif name in _MEMO_GET:
                if not isinstance(arg, int) or not 0 <= arg < memo_len:
                    raise NetInfoError(f"{where}: memo index {arg} at byte {pos} was never defined")
            _stack_effect(op, arg, pos, stack, memo, memo_len, where)
            if name == "STOP":
                end = pos + 1
        if end != len(data):
            raise NetInfoError(f"{where}: {len(data) - end} bytes after the pickle's end (STOP at byte {end - 1}); a "
                               "network_info file holds one pickle")
    except NetInfoError:
        raise
    except RecursionError:
        raise NetInfoError(f"{where}: pickle nests too deeply") from None
    except Exception as exc:  # noqa: BLE001 - genops raises ValueError for truncation / unknown opcodes
        raise NetInfoError(f"{where}: not a valid pickle ({type(exc).__name__}: {_short(exc)})") from None


def _stack_effect(op, arg, pos: int, stack: list, memo: dict, memo_len: int, where: str) -> None:
    """Apply one opcode's effect (pickletools' ``stack_before`` / ``stack_after``) to the depth stack; refuse nesting
    deeper than ``MAX_PICKLE_DEPTH`` or a stack over ``MAX_PICKLE_STACK`` items."""
    name = op.name
    if name in _MEMO_GET:
        stack.append(memo[arg])
    elif name == "MEMOIZE" or name in _MEMO_PUT:
        if not stack or stack[-1] == _MARK:
            raise NetInfoError(f"{where}: {name} at byte {pos} with nothing to store")
        memo[memo_len - 1 if name == "MEMOIZE" else arg] = stack[-1]
    else:
        before = op.stack_before
        popped: list[int] = []
        n = len(before)
        if pickletools.markobject in before:  # [below..., markobject, (any,) stackslice]: pop to the mark
            while stack and stack[-1] != _MARK:
                popped.append(stack.pop())
            if not stack:
                raise NetInfoError(f"{where}: {name} at byte {pos} without a MARK")
            stack.pop()
            n = before.index(pickletools.markobject)
        under = []
        for _ in range(n):
            if not stack or stack[-1] == _MARK:
                raise NetInfoError(f"{where}: {name} at byte {pos} finds the stack empty")
            under.append(stack.pop())
        for item in op.stack_after:
            if item is pickletools.markobject:
                stack.append(_MARK)
            elif name in _IN_PLACE and under:  # the container (deepest under the arguments) keeps its place
                stack.append(max(under[-1], 1 + max(under[:-1] + popped, default=-1)))
            else:
                stack.append(1 + max(under + popped, default=-1))
    if stack and stack[-1] > MAX_PICKLE_DEPTH:
        raise NetInfoError(f"{where}: the pickle nests deeper than {MAX_PICKLE_DEPTH} levels at byte {pos} (a "
                           "network_info file nests about 10)")
    if len(stack) > MAX_PICKLE_STACK:
        raise NetInfoError(f"{where}: the pickle stacks more than {MAX_PICKLE_STACK:,} items at byte {pos}")


def restricted_loads(data: bytes, *, source: Any = None) -> Any:
    """Unpickle ``data`` with :class:`RestrictedUnpickler`; every failure is a :class:`NetInfoError`."""
    where = _where(source)
    _prescan(data, where)
    try:
        return RestrictedUnpickler(io.BytesIO(data), source=source).load()
    except NetInfoError as exc:
        msg = str(exc)
        if where not in msg:
            raise type(exc)(f"{where}: {msg}") from None
        raise
    except RecursionError:
        raise NetInfoError(f"{where}: pickle nests too deeply") from None
    except MemoryError:
        raise NetInfoError(f"{where}: out of memory while unpickling") from None
    except Exception as exc:  # noqa: BLE001 - any malformed input becomes one clear error
        raise NetInfoError(
            f"{where}: not a valid network_info pickle ({type(exc).__name__}: {_short(exc)})"
        ) from None


def _short(exc: BaseException) -> str:
    s = str(exc)
    return s if len(s) <= 300 else s[:300] + "..."


def _read_capped(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, gunzipped when it is gzip; never more than ``max_bytes`` of output."""
    where = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
            fh.seek(0)
            if magic == b"\x1f\x8b":
                out = io.BytesIO()
                total = 0
                with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                    while True:
                        chunk = gz.read(_CHUNK)
                        if not chunk:
                            break
                        total += len(chunk)
                        if total > max_bytes:
                            raise PickleTooLargeError(
                                f"{where}: decompressed size exceeds the cap of {max_bytes} bytes "
                                "(gzip bomb?); raise max_bytes if the file is genuine"
                            )
                        out.write(chunk)
                return out.getvalue()
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise PickleTooLargeError(f"{where}: file size {size} exceeds the cap of {max_bytes} bytes")
            data = fh.read(size + 1)  # not max_bytes + 1: that reserves the whole cap (2 GiB) up front
            if len(data) > max_bytes:
                raise PickleTooLargeError(f"{where}: file exceeds the cap of {max_bytes} bytes")
            return data
    except NetInfoError:
        raise
    except MemoryError:
        raise NetInfoError(f"{where}: out of memory while reading the file") from None
    except (OSError, EOFError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError | IsADirectoryError | PermissionError):
            raise NetInfoError(f"{where}: cannot read file ({type(exc).__name__}: {_short(exc)})") from None
        raise NetInfoError(f"{where}: corrupt or truncated gzip data ({type(exc).__name__}: {_short(exc)})") from None


def restricted_load_file(path: str | os.PathLike, *, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> Any:
    """Read ``.pkl`` or ``.pkl.gz`` (gzip is detected by its magic bytes) with the restricted unpickler."""
    p = Path(path)
    data = _read_capped(p, max_bytes)
    if not data:
        raise NetInfoError(f"{os.fspath(p)}: empty file")
    return restricted_loads(data, source=os.fspath(p))


# --------------------------------------------------------------------------- file names

_UNQUOTED_RE = re.compile(r"^\(\((?P<net>[^,()\[\]]+),(?P<shapes>\[[^\]]*\])\),(?P<target>.+)\)$", re.S)
_SHAPES_RE = re.compile(r"^\[\s*(\(\s*[0-9]+\s*(,\s*[0-9]+\s*)*,?\s*\)\s*(,\s*\(\s*[0-9]+\s*(,\s*[0-9]+\s*)*,?\s*\)\s*)*,?)?\s*\]$")
_TUPLE_RE = re.compile(r"\(([^()]*)\)")
_RELAY_RE = re.compile(r"^\((?P<net>[^,()\[\]]+),(?P<shapes>\[[^\]]*\])\)$", re.S)


def _strip_suffixes(name: str) -> tuple[str, str]:
    base = os.path.basename(name)
    if base.endswith(".gz"):
        base = base[: -len(".gz")]
    for kind, suffix in (("task", ".task.pkl"), ("relay", ".relay.pkl"), ("model", ".model.pkl"), ("pkl", ".pkl")):
        if base.endswith(suffix):
            return base[: -len(suffix)], kind
    return base, ""


def _parse_shapes(text: str) -> list[tuple[int, ...]]:
    if not _SHAPES_RE.match(text):
        raise ValueError(f"bad input-shape list {text!r}")
    shapes = []
    for m in _TUPLE_RE.finditer(text):
        dims = tuple(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
        shapes.append(dims)
    return shapes


def parse_network_filename(name: str | os.PathLike) -> tuple[str, list[tuple[int, ...]], str | None]:
    """``((resnet_50,[(1,3,224,224)]),llvm).task.pkl[.gz]`` -> ``("resnet_50", [(1, 3, 224, 224)], "llvm")``.

    TenSet names a task file ``f"{((name, shapes), target)}.task.pkl"``; the published dataset has the
    quotes and spaces removed (``((resnet_50,[(1,3,224,224)]),llvm)``); both spellings are accepted,
    as is a ``.relay.pkl`` name (``(resnet_50,[(1,3,224,224)])``, target ``None``).  A leading folder
    and a trailing ``.gz`` are ignored.  Raises ``ValueError`` for any other name.
    """
    raw = os.fspath(name)
    if len(raw) > _FILENAME_MAX:
        raise ValueError("file name too long")
    stem, _kind = _strip_suffixes(raw)
    if "'" in stem or '"' in stem:
        try:
            value = ast.literal_eval(stem)  # literals only: no names, calls or attributes
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise ValueError(f"not a TenSet network file name: {os.path.basename(raw)!r}") from None
        target: str | None = None
        if (
            isinstance(value, tuple)
            and len(value) == 2
            and isinstance(value[0], tuple)
            and isinstance(value[1], str)
        ):
            value, target = value
        if (
            isinstance(value, tuple)
            and len(value) == 2
            and isinstance(value[0], str)
            and isinstance(value[1], (list, tuple))
            and all(isinstance(s, (list, tuple)) and all(type(d) is int for d in s) for s in value[1])
        ):
            return value[0], [tuple(s) for s in value[1]], target
        raise ValueError(f"not a TenSet network file name: {os.path.basename(raw)!r}")
    m = _UNQUOTED_RE.match(stem)
    if m:
        return m.group("net").strip(), _parse_shapes(m.group("shapes")), m.group("target").strip()
    m = _RELAY_RE.match(stem)
    if m:
        return m.group("net").strip(), _parse_shapes(m.group("shapes")), None
    raise ValueError(f"not a TenSet network file name: {os.path.basename(raw)!r}")


# --------------------------------------------------------------------------- target strings


class _Budget:
    def __init__(self, n: int) -> None:
        self.n = n

    def take(self) -> None:
        self.n -= 1
        if self.n < 0:
            raise ValueError("target JSON graph too large")


def _atomic(nodes: list, idx: Any, budget: _Budget) -> str | None:
    """String form of one attribute value node, as TVM's StringifyAtomicType / StringifyArray."""
    budget.take()
    i = int(idx)
    if i == 0:
        return None
    node = nodes[i]
    tk = node.get("type_key")
    if tk == "runtime.String":
        return str(node.get("repr_str", ""))
    if tk in ("IntImm", "FloatImm"):
        return str(node["attrs"]["value"])
    if tk == "Array":
        parts = [_atomic(nodes, j, budget) for j in node.get("data", [])]
        return ",".join(p for p in parts if p is not None)
    if tk == "Target":  # e.g. a nested host target; print its kind
        return _target_from_node(nodes, i, budget)
    raise ValueError(f"unexpected node type {tk!r} in target attributes")


def _target_from_node(nodes: list, root: int, budget: _Budget) -> str:
    budget.take()
    node = nodes[root]
    if node.get("type_key") != "Target":
        raise ValueError("target JSON root is not a Target")
    attrs = node["attrs"]
    kind_node = nodes[int(attrs["kind"])]
    kind = _atomic(nodes, kind_node["attrs"]["name"], budget) or ""
    out = [kind]
    keys_idx = int(attrs.get("keys", "0"))
    if keys_idx:
        keys = [_atomic(nodes, j, budget) for j in nodes[keys_idx].get("data", [])]
        keys = [k for k in keys if k]
        if keys:
            out.append("-keys=" + ",".join(keys))
    attrs_idx = int(attrs.get("attrs", "0"))
    if attrs_idx:
        amap = nodes[attrs_idx]
        if amap.get("type_key") not in ("Map", "StrMap"):
            raise ValueError("target attrs is not a Map")
        names = amap.get("keys", [])
        values = amap.get("data", [])
        if len(names) != len(values) or not all(isinstance(k, str) for k in names):
            raise ValueError("target attrs Map is malformed")
        for k, v in sorted(zip(names, values), key=lambda kv: kv[0]):
            val = _atomic(nodes, v, budget)
            if val is not None:
                out.append(f"-{k}={val}")
    s = " ".join(out)
    if len(s) > _TARGET_STR_MAX:
        raise ValueError("target string too long")
    return s


def _target_string(obj: Any) -> str:
    """The TVM target string for a pickled target (Target stand-in, String, or plain str)."""
    if isinstance(obj, str):  # plain str or String stand-in
        return str.__str__(obj)
    if isinstance(obj, TargetStandIn):
        handle = obj.field("handle")
        if not isinstance(handle, str):
            raise ValueError("Target has no JSON handle")
        graph = json.loads(handle)
        nodes = graph["nodes"]
        if not isinstance(nodes, list):
            raise ValueError("Target JSON has no node list")
        return _target_from_node(nodes, int(graph["root"]), _Budget(_TARGET_GRAPH_BUDGET))
    raise ValueError(f"target is a {type(obj).__name__}, expected a Target or a string")


def _target_kind(target: str) -> str:
    t = target.strip()
    if t.startswith("{"):
        d = json.loads(t)
        kind = d.get("kind") if isinstance(d, dict) else None
        if not isinstance(kind, str):
            raise ValueError("target JSON has no kind")
        return kind
    return t.split()[0] if t else ""


# --------------------------------------------------------------------------- rows

NETWORKS_SCHEMA = pa.schema(
    [
        pa.field("network", pa.string()),  # e.g. resnet_50; null for all_tasks.pkl
        pa.field("input_shape", pa.string()),  # JSON, e.g. [[1,3,224,224]]; null when not in the name
        pa.field("batch_size", pa.int64()),  # first dim of the first input shape
        pa.field("target", pa.string(), nullable=False),  # TVM target string, as TenSet logs write it
        pa.field("target_kind", pa.string(), nullable=False),  # llvm, cuda, ...
        pa.field("workload_key", pa.string(), nullable=False),  # exactly as in the logs
        pa.field("task_weight", pa.int64()),  # occurrences of the task in the network; null for all_tasks.pkl
        pa.field("task_index", pa.int64(), nullable=False),  # position in the pickled task list
        # SearchTask.desc when present and non-empty, else the compute DAG's operations (``dag_description``)
        pa.field("task_desc", pa.string()),
        pa.field("source_file", pa.string(), nullable=False),  # path as given
    ],
    metadata={b"tenset_curate.table": b"networks", b"version": b"1"},
)


WORKLOAD_KEY_MAX = 64 << 10  # characters; Ansor's keys are a name and the shape numbers, well under 1 KiB


DAG_JSON_MAX = 4 << 20  # characters of a compute DAG's JSON read for its description (the real ones: ~40 KB)
DAG_DESC_MAX = 1024


def dag_description(dag: Any) -> str | None:
    """The operations of a task's compute DAG, for its operator class: each ComputeOp's name and tag (its comma
    parts), in the DAG's order, joined by "+" ("T_relu+elemwise+T_add+broadcast+Conv2dOutput+conv2d_nhwc+..."). The
    TenSet pickles carry no ``SearchTask.desc`` and their workload keys name no operator (an md5 and the shapes),
    so this is how a task of a TenSet log gets a class (``features.operator_classes``' task-desc rule). None when
    the DAG cannot be read: a description is never required."""
    if not isinstance(dag, ComputeDAGStandIn):
        return None
    text = (dag.__dict__.get("state") or {}).get("tensors") if isinstance(dag.__dict__.get("state"), dict) else None
    if not isinstance(text, str) or len(text) > DAG_JSON_MAX:
        return None
    try:
        nodes = json.loads(str.__str__(text)).get("nodes")
    except (ValueError, AttributeError, RecursionError):
        return None
    out: list[str] = []
    for node in nodes if isinstance(nodes, list) else []:
        if not isinstance(node, dict) or node.get("type_key") not in ("ComputeOp", "te.ComputeOp"):
            continue
        attrs = node.get("attrs") if isinstance(node.get("attrs"), dict) else {}
        tag = attrs.get("tag")
        for v in [attrs.get("name")] + (tag.split(",") if isinstance(tag, str) else []):
            if isinstance(v, str) and v and v not in out:
                out.append(v)
    desc = "+".join(out)[:DAG_DESC_MAX]
    return desc or None


def dataset_task_descriptions(dataset: str | os.PathLike) -> dict[str, str]:
    """workload_key -> task description, from a dataset's networks table (empty when it has none). Read once per
    process for a given set of networks files (their names, sizes and mtimes): prune's pass 2 asks for it in every
    unit, and a TenSet-sized prune has thousands of units."""
    files = sorted((Path(dataset) / "networks").glob("*.parquet"))
    key = tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    if key not in _DESC_CACHE:
        import pyarrow.parquet as pq

        out: dict[str, str] = {}
        for f in files:
            t = pq.read_table(f, columns=["workload_key", "task_desc"])
            for k, d in zip(t.column(0).to_pylist(), t.column(1).to_pylist()):
                if d and k not in out:
                    out[k] = d
        _DESC_CACHE.clear()  # one dataset's table at a time: a process rarely reads two
        _DESC_CACHE[key] = out
    return dict(_DESC_CACHE[key])


_DESC_CACHE: dict[tuple, dict[str, str]] = {}


def _task_row(task: Any, index: int, where: str, seen: dict | None = None) -> dict[str, Any]:
    """One task's row. ``seen`` caches what tasks of one file share (a workload key, a target object): a pickle
    refers to one object many times for a byte each, so parsing it once per task let a 2 KB file take minutes."""
    seen = {} if seen is None else seen
    if not isinstance(task, SearchTaskStandIn):
        raise NetInfoError(f"{where}: task {index} is a {type(task).__name__}, not a SearchTask")
    state = task.__dict__.get("state")
    if not isinstance(state, dict):
        raise NetInfoError(f"{where}: task {index} has no state dict")
    key = state.get("workload_key")
    if not isinstance(key, str):
        raise NetInfoError(f"{where}: task {index} has no string workload_key")
    key = str.__str__(key)
    if len(key) > WORKLOAD_KEY_MAX:
        raise NetInfoError(f"{where}: task {index} workload_key is {len(key):,} characters (at most "
                           f"{WORKLOAD_KEY_MAX:,}; Ansor's are a name and shape numbers)")
    if ("key", key) not in seen:
        try:
            parsed = json.loads(key)
        except (ValueError, RecursionError):
            raise NetInfoError(f"{where}: task {index} workload_key is not JSON") from None
        if not isinstance(parsed, list) or not parsed or not isinstance(parsed[0], str):
            raise NetInfoError(f"{where}: task {index} workload_key is not a JSON list starting with a name")
        seen["key", key] = True
    tobj = state.get("target")
    try:
        if ("target", id(tobj)) not in seen:  # the object is alive for the whole file: its id is not reused
            target = _target_string(tobj)
            seen["target", id(tobj)] = (target, _target_kind(target))
        target, kind = seen["target", id(tobj)]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
        raise NetInfoError(f"{where}: task {index} has an unreadable target ({type(exc).__name__}: {_short(exc)})") from None
    if not kind:
        raise NetInfoError(f"{where}: task {index} has an empty target")
    desc = state.get("desc")
    desc = str.__str__(desc) if isinstance(desc, str) and desc else dag_description(state.get("compute_dag"))
    return {"target": target, "target_kind": kind, "workload_key": key, "task_index": index, "task_desc": desc}


def read_network_info(
    path: str | os.PathLike, *, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> list[dict[str, Any]]:
    """One plain row per task of a TenSet ``*.task.pkl[.gz]`` or ``all_tasks.pkl[.gz]`` file.

    Keys: network, input_shape (JSON string), batch_size, target, target_kind, workload_key,
    task_weight, task_index, task_desc, source_file (see :data:`NETWORKS_SCHEMA`).  The network and
    input shape come from the file name; for a bare task list (``all_tasks.pkl``) they and the
    weight are ``None``.  Raises :class:`NetInfoError` (a ``ValueError``) naming the file for
    anything it cannot read, :class:`HostilePickleError` for a pickle that names a foreign global.
    """
    where = os.fspath(path)
    obj = restricted_load_file(path, max_bytes=max_bytes)
    weights: list[Any] | None
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], list) and isinstance(obj[1], list):
        tasks, weights = obj
        if len(tasks) != len(weights):
            raise NetInfoError(f"{where}: {len(tasks)} tasks but {len(weights)} weights")
    elif isinstance(obj, list):
        tasks, weights = obj, None
    else:
        raise NetInfoError(
            f"{where}: expected (tasks, task_weights) or a list of tasks, got a {type(obj).__name__}"
        )

    network = input_shape = batch_size = None
    if weights is not None:
        try:
            network, shapes, _ = parse_network_filename(where)
        except ValueError:
            # a (tasks, weights) file renamed from TenSet's ((name,[shapes]),target) form, e.g. resnet50.task.pkl:
            # its stem is the network (the rows lost it without a word, and the network split skipped them)
            stem = _strip_suffixes(os.path.basename(where))[0]
            network = stem if re.fullmatch(r"[A-Za-z0-9_.-]{1,200}", stem) else None
        else:
            input_shape = json.dumps([list(s) for s in shapes], separators=(",", ":"))
            batch_size = shapes[0][0] if shapes and shapes[0] else None

    rows = []
    seen: dict = {}
    first: dict[int, int] = {}
    for i, task in enumerate(tasks):
        j = first.setdefault(id(task), i)
        if j != i:  # one pickled object listed again (a byte each): TenSet lists a task once, with its weight
            raise NetInfoError(f"{where}: task {i} is task {j} again (the same pickled object); a network_info file "
                               "lists each task once")
        row = _task_row(task, i, where, seen)
        weight = None
        if weights is not None:
            w = weights[i]
            if type(w) is not int or not 0 < w < 2 ** 63:
                raise NetInfoError(f"{where}: task {i} weight is not a positive int (below 2**63)")
            weight = w
        rows.append(
            {
                "network": network,
                "input_shape": input_shape,
                "batch_size": batch_size,
                "target": row["target"],
                "target_kind": row["target_kind"],
                "workload_key": row["workload_key"],
                "task_weight": weight,
                "task_index": row["task_index"],
                "task_desc": row["task_desc"],
                "source_file": where,
            }
        )
    return rows


def _is_task_file_name(name: str) -> bool:
    base = name[: -len(".gz")] if name.endswith(".gz") else name
    return base.endswith(".task.pkl") or base == "all_tasks.pkl"


def _expand(paths: Any) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out.extend(sorted(q for q in p.iterdir() if q.is_file() and _is_task_file_name(q.name)))
        else:
            out.append(p)
    return out


def networks_table(
    paths: Iterable[str | os.PathLike] | str | os.PathLike,
    *,
    max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> pa.Table:
    """Rows of every file as a :data:`NETWORKS_SCHEMA` table.

    A folder contributes its ``*.task.pkl[.gz]`` and ``all_tasks.pkl[.gz]`` files (sorted by name).
    """
    rows: list[dict[str, Any]] = []
    for p in _expand(paths):
        rows.extend(read_network_info(p, max_bytes=max_bytes))
    return pa.Table.from_pylist(rows, schema=NETWORKS_SCHEMA)


# --------------------------------------------------------------------------- the collector's workloads.json

COLLECTOR_WORKLOADS_FILE = "workloads.json"


def collector_network_rows(path: str | os.PathLike, source_file: str,
                           max_bytes: int = 64 << 20) -> tuple[list[dict[str, Any]], list[tuple], int]:
    """Network membership from the ``workloads.json`` that ``curate collect`` writes next to its MetaSchedule database
    (``{"version": 1, "workloads": [{"name", "network", "structural_hash", ...}, ...]}``; collect.py).

    The collector tunes real layers of named networks (workloads.py), so it knows which network each task comes from,
    as TenSet's network_info does for Ansor tasks; this is what lets the network-wise split run on MetaSchedule data
    the project collected. The key is the workload's ``structural_hash``, which is how MetaSchedule's
    ``database_workload.json`` names the task and so the records' ``workload_key``.

    Returns ``(rows, quarantine, entries)``: one row per workload entry (NETWORKS_SCHEMA's columns but the target,
    which the caller takes from the database's records; ``task_weight`` is null: the collector tunes each layer
    shape once and does not count its repeats), the ``(source_file, line, reason, raw)`` of each entry it cannot
    use, and the number of entries read (a document that is not valid JSON, or not this shape, counts as one
    quarantined entry, with the line of the JSON error)."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as e:
        return [], [(source_file, None, f"unreadable: {type(e).__name__}: {e}", "")], 1
    if len(data) > max_bytes:
        return [], [(source_file, None, f"larger than {max_bytes} bytes: not a collector's workloads.json", "")], 1
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        line = getattr(e, "lineno", None)
        msg = getattr(e, "msg", None) or _short(e)
        return [], [(source_file, line, f"not valid JSON: {msg}", "")], 1
    if not (isinstance(doc, dict) and isinstance(doc.get("workloads"), list)):
        return [], [(source_file, None, 'not a collector\'s workloads.json: expected {"version": 1, "workloads": [...]}',
                     "")], 1
    if doc.get("version") != 1:
        return [], [(source_file, None, f"unsupported workloads.json version {doc.get('version')!r} (reads 1)", "")], 1
    rows: list[dict[str, Any]] = []
    bad: list[tuple] = []
    for i, w in enumerate(doc["workloads"]):
        raw = json.dumps(w, sort_keys=True)[:2000]  # parsed from JSON, so it serialises back
        if not isinstance(w, dict):
            bad.append((source_file, None, f"workloads[{i}] is not an object", raw))
            continue
        key, net = w.get("structural_hash"), w.get("network")
        if not isinstance(key, str) or not key:
            bad.append((source_file, None, f"workloads[{i}] has no structural_hash", raw))
            continue
        if not isinstance(net, str) or not net:
            bad.append((source_file, None, f"workloads[{i}] has no network", raw))
            continue
        name = w.get("name")
        rows.append({"network": net, "input_shape": None, "batch_size": None, "workload_key": key,
                     "task_weight": None, "task_index": i, "task_desc": name if isinstance(name, str) else None,
                     "source_file": source_file})
    return rows, bad, len(doc["workloads"])
