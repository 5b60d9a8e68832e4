"""TenSet network_info pickles read through the restricted unpickler (tenset_curate.netinfo).

The real files are ResNet-50 task pickles (llvm = Graviton2, cuda) from ../shared/realdata/network_info;
those tests skip when the folder is missing.  Nothing here calls pickle.load*: the real files
reference TVM classes and are only ever read with netinfo.RestrictedUnpickler.
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
import pickletools
import re
import struct
import sys
from pathlib import Path

import pytest

from tenset_curate import netinfo
from tenset_curate.netinfo import (
    ALLOWED_GLOBALS,
    NETWORKS_SCHEMA,
    NetInfoError,
    networks_table,
    parse_network_filename,
    read_network_info,
    restricted_load_file,
)

REPO = Path(__file__).resolve().parents[1]
REAL_DIR = Path(os.environ.get("TENSET_CURATE_REALDATA", REPO.parent / "shared" / "realdata")) / "network_info"
LLVM = REAL_DIR / "((resnet_50,[(1,3,224,224)]),llvm).task.pkl.gz"
CUDA = REAL_DIR / "((resnet_50,[(1,3,224,224)]),cuda).task.pkl.gz"

needs_real = pytest.mark.skipif(not (LLVM.exists() and CUDA.exists()), reason=f"real network_info files missing in {REAL_DIR}")

MD5 = re.compile(r"^[0-9a-f]{32}$")

# What the two real files hold (found by reading them; asserted below so a regression shows up).
N_TASKS = 27
WEIGHT_SUM = 56
LLVM_TARGET = "llvm -keys=cpu -link-params=0 -mattr=+neon,+v8.2a,+dotprod -model=graviton2 -mtriple=aarch64-linux-gnu"
CUDA_TARGET = "cuda -keys=cuda,gpu -max_num_threads=1024 -thread_warp_size=32"
# Task positions where llvm and cuda differ: the winograd 3x3 convolutions, whose tile size differs.
WINOGRAD_DIFF = [3, 8, 13, 18]


# --------------------------------------------------------------------------- a tiny pickle assembler


def _s(text: str) -> bytes:
    b = text.encode()
    return pickle.BINUNICODE + struct.pack("<I", len(b)) + b


def _g(module: str, name: str) -> bytes:
    return _s(module) + _s(name) + pickle.STACK_GLOBAL


def _int(n: int) -> bytes:
    return pickle.BININT + struct.pack("<i", n)


def _dict(items: dict[str, bytes]) -> bytes:
    return pickle.EMPTY_DICT + pickle.MARK + b"".join(_s(k) + v for k, v in items.items()) + pickle.SETITEMS


def _list(items: list[bytes]) -> bytes:
    return pickle.EMPTY_LIST + (pickle.MARK + b"".join(items) + pickle.APPENDS if items else b"")


def _new_object(module: str, name: str, state: bytes) -> bytes:
    return _g("tvm.runtime.object", "_new_object") + _g(module, name) + pickle.TUPLE1 + pickle.REDUCE + state + pickle.BUILD


def _tvm_string(text: str) -> bytes:
    handle = json.dumps({"root": 1, "nodes": [{"type_key": ""}, {"type_key": "runtime.String", "repr_str": text}]})
    obj = _new_object("tvm.runtime.object", "Object", _dict({"handle": _s(handle)}))
    return (
        _g("tvm.runtime.container", "String") + _s(text) + pickle.TUPLE1 + pickle.NEWOBJ
        + pickle.NONE + _dict({"__tvm_object__": obj}) + pickle.TUPLE2 + pickle.BUILD
    )


def _llvm_target_json(mcpu: str = "core-avx2") -> str:
    nodes = [
        {"type_key": ""},
        {"type_key": "Target", "attrs": {"attrs": "6", "host": "0", "keys": "4", "kind": "2", "tag": "0"}},
        {"type_key": "TargetKind", "attrs": {"default_keys": "4", "device_type": "1", "name": "3"}},
        {"type_key": "runtime.String", "repr_str": "llvm"},
        {"type_key": "Array", "data": [5]},
        {"type_key": "runtime.String", "repr_str": "cpu"},
        {"type_key": "Map", "keys": ["num-cores", "mcpu"], "data": [7, 8]},
        {"type_key": "IntImm", "attrs": {"dtype": "int32", "span": "0", "value": "4"}},
        {"type_key": "runtime.String", "repr_str": mcpu},
    ]
    return json.dumps({"root": 1, "nodes": nodes, "b64ndarrays": [], "attrs": {"tvm_version": "0.8.dev0"}})


def _search_task(key: str, target: bytes, desc: str | None = None) -> bytes:
    fields = {
        "compute_dag": _new_object("tvm.auto_scheduler.compute_dag", "ComputeDAG", _dict({"tensors": _s("{}")})),
        "workload_key": _tvm_string(key),
        "target": target,
        "target_host": pickle.NONE,
        "layout_rewrite_option": _int(2),
    }
    if desc is not None:
        fields["desc"] = _s(desc)
    return _new_object("tvm.auto_scheduler.search_task", "SearchTask", _dict(fields))


def _pickle(body: bytes) -> bytes:
    return pickle.PROTO + b"\x04" + body + pickle.STOP


def _deframe(data: bytes) -> list[tuple[str, bytes]]:
    """(opcode name, opcode bytes) for every op of ``data`` except FRAME (so ops can be spliced)."""
    ops = list(pickletools.genops(data))
    out = []
    for k, (op, _arg, pos) in enumerate(ops):
        end = ops[k + 1][2] if k + 1 < len(ops) else len(data)
        if op.name != "FRAME":
            out.append((op.name, data[pos:end]))
    return out


# --------------------------------------------------------------------------- real files


@needs_real
@pytest.mark.parametrize("path,kind,target", [(LLVM, "llvm", LLVM_TARGET), (CUDA, "cuda", CUDA_TARGET)])
def test_real_file_rows(path, kind, target):
    rows = read_network_info(path)
    assert len(rows) == N_TASKS > 0
    assert [r["task_index"] for r in rows] == list(range(len(rows)))
    for r in rows:
        assert set(r) == set(NETWORKS_SCHEMA.names)
        key = json.loads(r["workload_key"])
        assert isinstance(key, list) and MD5.match(key[0]), r["workload_key"]
        # TenSet's flat style: the md5 then only ints
        assert all(type(x) is int for x in key[1:])
        # written exactly as TenSet logs write it: json.dumps' default separators
        assert r["workload_key"] == json.dumps(key)
        assert type(r["task_weight"]) is int and r["task_weight"] > 0
        assert r["network"] == "resnet_50"
        assert r["input_shape"] == "[[1,3,224,224]]"
        assert r["batch_size"] == 1
        assert r["target_kind"] == kind
        assert r["target"] == target
        # TVM 0.8.dev0 SearchTask pickles carry no desc: the compute DAG's operations stand in for it
        assert r["task_desc"].split("+")[0] in ("T_add", "T_relu", "tensor") and "+" in r["task_desc"]
        assert r["source_file"] == os.fspath(path)
    assert sum(r["task_weight"] for r in rows) == WEIGHT_SUM
    # every task of the real network gets an operator class from it: its key names none (an md5 and shapes)
    from collections import Counter

    from tenset_curate.features import classify_operator

    assert Counter(classify_operator(r["task_desc"]) for r in rows) == {"conv2d": 24, "dense": 1, "pooling": 2}
    assert len({r["workload_key"] for r in rows}) == len(rows)  # no task listed twice


@needs_real
def test_real_file_string_handle_matches_key():
    """The String's embedded TVM JSON (repr_str) spells the same key as the str content."""
    tasks, weights = restricted_load_file(LLVM)
    assert len(tasks) == len(weights) == N_TASKS
    for t in tasks:
        wk = t.state["workload_key"]
        _none, slots = wk.state
        handle = json.loads(slots["__tvm_object__"].state["handle"])
        assert handle["nodes"][1]["repr_str"] == str(wk)


@needs_real
def test_llvm_and_cuda_share_workload_keys():
    llvm = read_network_info(LLVM)
    cuda = read_network_info(CUDA)
    lk = [r["workload_key"] for r in llvm]
    ck = [r["workload_key"] for r in cuda]
    # same task order and weights in both files
    assert [r["task_weight"] for r in llvm] == [r["task_weight"] for r in cuda]
    same = [i for i, (a, b) in enumerate(zip(lk, ck)) if a == b]
    diff = [i for i, (a, b) in enumerate(zip(lk, ck)) if a != b]
    assert len(same) == 23 and len(set(lk) & set(ck)) == 23
    assert diff == WINOGRAD_DIFF
    for i in diff:
        a, b = json.loads(lk[i]), json.loads(ck[i])
        # winograd conv2d: same input shape and channels, different transformed-tile size
        assert a[1:5] == b[1:5] and len(a) == len(b) == 17
        assert a[5] == a[6] and b[5] == b[6] and a[5] != b[5]


@needs_real
def test_networks_table_real():
    table = networks_table([LLVM, CUDA])
    assert table.schema.equals(NETWORKS_SCHEMA, check_metadata=True)
    assert table.num_rows == 2 * N_TASKS
    assert table.column("target_kind").to_pylist() == ["llvm"] * N_TASKS + ["cuda"] * N_TASKS
    assert sum(table.column("task_weight").to_pylist()) == 2 * WEIGHT_SUM
    # a folder contributes its task files, sorted by name (cuda sorts before llvm)
    folder = networks_table(REAL_DIR)
    assert folder.num_rows == 2 * N_TASKS
    assert set(folder.column("source_file").to_pylist()) == {os.fspath(LLVM), os.fspath(CUDA)}


@needs_real
def test_plain_pkl_and_all_tasks(tmp_path):
    raw = gzip.decompress(LLVM.read_bytes())
    plain = tmp_path / LLVM.name[: -len(".gz")]
    plain.write_bytes(raw)
    assert read_network_info(plain)[5]["workload_key"] == read_network_info(LLVM)[5]["workload_key"]

    # all_tasks.pkl: the same tasks as a bare list (cut the pickle after the task list)
    ops = _deframe(raw)
    first_appends = next(i for i, (name, _b) in enumerate(ops) if name == "APPENDS")
    body = b"".join(b for _n, b in ops[: first_appends + 1])
    all_tasks = tmp_path / "all_tasks.pkl"
    all_tasks.write_bytes(body + pickle.STOP)
    rows = read_network_info(all_tasks)
    assert len(rows) == N_TASKS
    assert all(r["network"] is None and r["task_weight"] is None and r["input_shape"] is None for r in rows)
    assert [r["workload_key"] for r in rows] == [r["workload_key"] for r in read_network_info(LLVM)]
    gz = tmp_path / "all_tasks.pkl.gz"
    gz.write_bytes(gzip.compress(body + pickle.STOP))
    assert networks_table([gz]).num_rows == N_TASKS


@needs_real
def test_no_tvm_imported():
    """In a fresh interpreter (other tests of the suite import tvm in this one)."""
    import subprocess

    code = ("import sys; from tenset_curate.netinfo import read_network_info; "
            f"read_network_info({str(LLVM)!r}); "
            "print(any(m == 'tvm' or m.startswith('tvm.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------- synthetic files


def test_synthetic_task_with_desc_and_string_target(tmp_path):
    key1 = '["0123456789abcdef0123456789abcdef", 1, 7, 7, 512]'
    key2 = '["conv2d_layer", 1, 7, 7, 512, "SAME"]'
    tasks = _list([
        _search_task(key1, _new_object("tvm.target.target", "Target", _dict({"handle": _s(_llvm_target_json())})), desc="dense"),
        _search_task(key2, _s("cuda -keys=cuda,gpu -arch=sm_80")),
    ])
    path = tmp_path / "((bert_base,[(4,128)]),llvm).task.pkl"
    path.write_bytes(_pickle(tasks + _list([_int(3), _int(1)]) + pickle.TUPLE2))
    rows = read_network_info(path)
    assert rows[0] == {
        "network": "bert_base", "input_shape": "[[4,128]]", "batch_size": 4,
        "target": "llvm -keys=cpu -mcpu=core-avx2 -num-cores=4", "target_kind": "llvm",
        "workload_key": key1, "task_weight": 3, "task_index": 0, "task_desc": "dense",
        "source_file": os.fspath(path),
    }
    assert rows[1]["target"] == "cuda -keys=cuda,gpu -arch=sm_80" and rows[1]["target_kind"] == "cuda"
    assert rows[1]["task_desc"] is None and rows[1]["task_weight"] == 1
    assert networks_table(path).num_rows == 2


@pytest.mark.parametrize(
    "body,match",
    [
        (_s("hello"), "expected \\(tasks, task_weights\\)"),
        (_list([_s("x")]) + _list([_int(1)]) + pickle.TUPLE2, "not a SearchTask"),
        (_list([_search_task('["a"]', _s("llvm"))]) + _list([]) + pickle.TUPLE2, "1 tasks but 0 weights"),
        (_list([_search_task('["a"]', _s("llvm"))]) + _list([_int(0)]) + pickle.TUPLE2, "weight is not a positive int"),
        (_list([_search_task("not json", _s("llvm"))]) + _list([_int(1)]) + pickle.TUPLE2, "not JSON"),
        (_list([_search_task('["a"]', _int(5))]) + _list([_int(1)]) + pickle.TUPLE2, "unreadable target"),
        (_list([_search_task('["a"]', _s(""))]) + _list([_int(1)]) + pickle.TUPLE2, "empty target"),
    ],
)
def test_structure_errors_name_the_file(tmp_path, body, match):
    path = tmp_path / "((x,[(1,2)]),llvm).task.pkl"
    path.write_bytes(_pickle(body))
    with pytest.raises(NetInfoError, match=match) as ei:
        read_network_info(path)
    assert os.fspath(path) in str(ei.value)


def test_target_graph_blowup_is_bounded(tmp_path):
    """A target JSON graph that shares nodes (a DAG) cannot expand exponentially."""
    nodes = [
        {"type_key": ""},
        {"type_key": "Target", "attrs": {"attrs": "5", "host": "0", "keys": "0", "kind": "2", "tag": "0"}},
        {"type_key": "TargetKind", "attrs": {"name": "3"}},
        {"type_key": "runtime.String", "repr_str": "llvm"},
        {"type_key": "runtime.String", "repr_str": "x" * 100},
        {"type_key": "Map", "keys": ["a"], "data": [6]},
    ]
    for i in range(6, 60):  # node i = Array [i+1, i+1, ...]: 8**54 leaves if expanded
        nodes.append({"type_key": "Array", "data": [i + 1] * 8})
    nodes.append({"type_key": "runtime.String", "repr_str": "y"})
    target = _new_object("tvm.target.target", "Target", _dict({"handle": _s(json.dumps({"root": 1, "nodes": nodes}))}))
    path = tmp_path / "t.task.pkl"
    path.write_bytes(_pickle(_list([_search_task('["a"]', target)]) + _list([_int(1)]) + pickle.TUPLE2))
    with pytest.raises(NetInfoError, match="too large"):
        read_network_info(path)


def test_allow_list_is_explicit_and_inert():
    assert all(mod.startswith("tvm.") for mod, _ in ALLOWED_GLOBALS)
    assert not any(mod in {"builtins", "__builtin__", "os", "posix", "subprocess", "functools", "operator", "codecs"}
                   for mod, _ in ALLOWED_GLOBALS)
    for obj in ALLOWED_GLOBALS.values():
        assert obj is netinfo.restricted_new_object or obj.__module__ == netinfo.__name__


# --------------------------------------------------------------------------- file names


@pytest.mark.parametrize(
    "name,expected",
    [
        ("((resnet_50,[(1,3,224,224)]),llvm).task.pkl", ("resnet_50", [(1, 3, 224, 224)], "llvm")),
        ("/a/b/((resnet_50,[(1,3,224,224)]),cuda).task.pkl.gz", ("resnet_50", [(1, 3, 224, 224)], "cuda")),
        ("((bert_base,[(1,128)]),llvm).task.pkl", ("bert_base", [(1, 128)], "llvm")),
        ("((resnet3d_18,[(4,3,112,112,16)]),llvm).task.pkl", ("resnet3d_18", [(4, 3, 112, 112, 16)], "llvm")),
        ("((two,[(1,3),(2,4)]),llvm -mcpu=core-avx2).task.pkl", ("two", [(1, 3), (2, 4)], "llvm -mcpu=core-avx2")),
        # the spelling dump_network_info.py's f-string produces
        ("(('resnet_18', [(8, 3, 256, 256)]), 'llvm').task.pkl", ("resnet_18", [(8, 3, 256, 256)], "llvm")),
        ("(('dcgan', [(1, 3, 64, 64)]), 'cuda -arch=sm_80').task.pkl.gz", ("dcgan", [(1, 3, 64, 64)], "cuda -arch=sm_80")),
        ("(resnet_50,[(1,3,224,224)]).relay.pkl", ("resnet_50", [(1, 3, 224, 224)], None)),
        ("('mobilenet_v2', [(1, 3, 224, 224)]).relay.pkl", ("mobilenet_v2", [(1, 3, 224, 224)], None)),
        (Path("((resnet_50,[(1,)]),llvm).task.pkl"), ("resnet_50", [(1,)], "llvm")),
    ],
)
def test_parse_network_filename(name, expected):
    assert parse_network_filename(name) == expected


@pytest.mark.parametrize(
    "name",
    ["all_tasks.pkl", "all_tasks.pkl.gz", "x.task.pkl", "((resnet_50,[(1,a)]),llvm).task.pkl",
     "(('a', __import__('os')), 'llvm').task.pkl", "(('a', [(1.5,)]), 'llvm').task.pkl", "((a,[(1,2)]),).task.pkl",
     "x" * 5000],
)
def test_parse_network_filename_rejects(name):
    with pytest.raises(ValueError):
        parse_network_filename(name)


@needs_real
def test_a_renamed_network_file_keeps_its_network_from_the_stem(tmp_path):
    """A (tasks, weights) file whose name is not TenSet's ((name,[shapes]),target) form (resnet50.task.pkl.gz) had
    network None in every row, without a word, and the network split skipped its tasks (the pickle audit)."""
    import shutil

    src = sorted(REAL_DIR.glob("*.task.pkl.gz"))[0]
    dst = tmp_path / "resnet50.task.pkl.gz"
    shutil.copyfile(src, dst)
    rows = read_network_info(dst)
    assert {r["network"] for r in rows} == {"resnet50"} and {r["input_shape"] for r in rows} == {None}
    odd = tmp_path / "a b(c).task.pkl.gz"  # not a plain name either: no network rather than a guess
    shutil.copyfile(src, odd)
    assert {r["network"] for r in read_network_info(odd)} == {None}
