"""Workload registry, the MetaSchedule collector, and the committed data/sample-cpu database.

The TVM tests run real TVM (no mocks): they build every built-in workload, and tune two tiny
workloads for a few trials on the local CPU (about a minute on 2 cores).
"""
from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tenset_curate import workloads as W

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = ROOT / "data" / "sample-cpu"

from _tvm import HAS_TVM, tvm_importable  # noqa: E402
needs_tvm = pytest.mark.skipif(not HAS_TVM, reason="apache-tvm is not installed")


def _tvm_importable() -> bool:
    return tvm_importable()


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def _db_file(d: Path, name: str) -> Path:
    for cand in (d / name, d / (name + ".gz")):
        if cand.exists():
            return cand
    raise FileNotFoundError(d / name)


def _read_db(d: Path):
    with _open(_db_file(d, "database_workload.json")) as f:
        workloads = [json.loads(line) for line in f if line.strip()]
    with _open(_db_file(d, "database_tuning_record.json")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return workloads, records


# ---------------------------------------------------------------------------------------------
# Registry (no TVM needed)
# ---------------------------------------------------------------------------------------------

def test_importing_workloads_and_collect_does_not_import_tvm():
    code = (
        "import sys, tenset_curate.workloads, tenset_curate.collect; "
        "assert 'tvm' not in sys.modules, [m for m in sys.modules if m.startswith('tvm')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_sets_and_names():
    sets = W.list_sets()
    for name in ("sample", "heldout", "resnet18", "mobilenet_v2", "bert", "all"):
        assert sets[name], name
    assert len(sets["sample"]) >= 12
    assert len(sets["heldout"]) >= 4
    assert not set(sets["sample"]) & set(sets["heldout"])
    assert set(sets["all"]) == set(W.WORKLOADS)
    assert "resnet18.conv2d_nchw.56x56x64.k3s1" in W.WORKLOADS
    for w in W.WORKLOADS.values():
        assert w.name.startswith(w.network + "."), w.name
        assert w.op_class in W.OP_CLASSES
        assert w.flops > 0
    # every op class the brief asks for is present
    classes = {w.op_class for w in W.WORKLOADS.values()}
    assert {"conv2d", "depthwise_conv2d", "fused_conv2d", "dense", "batch_matmul", "pooling",
            "softmax", "elementwise"} <= classes
    ops = {w.op for w in W.WORKLOADS.values()}
    assert {"conv2d_nchw", "conv2d_nhwc", "max_pool2d", "global_avg_pool2d"} <= ops


def test_get_workloads_from_file_and_name(tmp_path):
    names = ["bert_base.softmax.12x128x128", "resnet18.dense.1x512x1000"]
    p = tmp_path / "wl.json"
    p.write_text(json.dumps(names))
    assert [w.name for w in W.get_workloads(p)] == names
    assert [w.name for w in W.get_workloads(str(p))] == names
    # a collector's workloads.json is accepted too
    p2 = tmp_path / "workloads.json"
    p2.write_text(json.dumps({"version": 1, "workloads": [{"name": n} for n in names]}))
    assert [w.name for w in W.get_workloads(p2)] == names
    assert [w.name for w in W.get_workloads("resnet18.dense.1x512x1000")] == names[1:]
    assert len(W.get_workloads("sample")) == len(W.WORKLOAD_SETS["sample"])
    with pytest.raises(KeyError):
        W.get_workloads("no-such-set")
    p.write_text(json.dumps(["nope.dense.1x1x1"]))
    with pytest.raises(KeyError):
        W.get_workloads(p)


def test_flops_by_hand():
    # ResNet-18 fc: [1, 512] x [1000, 512]^T, one multiply + one add per MAC
    assert W.WORKLOADS["resnet18.dense.1x512x1000"].flops == 2 * 1 * 512 * 1000
    # ResNet-18 layer1 3x3 conv, pad 1: 56x56 output, 64 -> 64 channels
    assert W.WORKLOADS["resnet18.conv2d_nchw.56x56x64.k3s1"].flops == 2 * 56 * 56 * 64 * 64 * 3 * 3
    # 1x1 stride-2 downsample: 56 -> 28
    assert W.WORKLOADS["resnet18.conv2d_nchw.56x56x64.o128.k1s2"].flops == 2 * 28 * 28 * 128 * 64
    # MobileNet-V2 depthwise 3x3, stride 2: 112 -> 56, 96 channels
    assert W.WORKLOADS["mobilenet_v2.depthwise_conv2d_nchw.112x112x96.k3s2"].flops == 2 * 56 * 56 * 96 * 9
    # BERT attention scores: 12 heads, 128x128 output, K = 64
    assert W.WORKLOADS["bert_base.batch_matmul.12x128x128x64"].flops == 2 * 12 * 128 * 128 * 64
    # fused conv + bias + relu: conv + one add + one max per output element
    out = 28 * 28 * 128
    assert W.WORKLOADS["resnet18.conv2d_bias_relu_nchw.56x56x64.o128.k3s2"].flops == (
        2 * out * 64 * 9 + out + out)


# ---------------------------------------------------------------------------------------------
# TVM: building the workloads
# ---------------------------------------------------------------------------------------------

@pytest.mark.tvm
@needs_tvm
def test_every_builtin_workload_builds_a_valid_primfunc():
    if not _tvm_importable():
        pytest.skip("tvm is not importable")
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    import tvm_ffi

    hashes = {}
    for name, w in W.WORKLOADS.items():
        mod = W.build_prim_func(w)
        hashes.setdefault(tvm_ffi.structural_hash(mod), []).append(name)
        assert isinstance(mod, tvm.IRModule), name
        func = mod["main"]
        assert isinstance(func, tvm.tirx.PrimFunc), name
        assert tvm.s_tir.analysis.verify_well_formed(mod), name  # the s_tir (block) verifier
        tvm.s_tir.Schedule(mod)  # a schedule can be created on it (checks the block tree)
        n_in = {"dense": 2, "batch_matmul": 2, "softmax": 1, "add": 2}.get(w.op)
        if n_in is None:
            n_in = 3 if w.op_class == "fused_conv2d" else (1 if w.op_class == "pooling" else 2)
        assert len(func.params) == n_in + 1, name
        # our analytic count agrees with TVM's own FLOP counter for every workload
        assert float(estimate_tir_flops(mod)) == float(w.flops), name

    # no two names are the same program (they would share one database workload)
    assert all(len(v) == 1 for v in hashes.values()), [v for v in hashes.values() if len(v) > 1]

    # spot-check shapes: NCHW conv output and NHWC conv output
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    def out_shape(name):
        info = ArgInfo.from_prim_func(W.build_prim_func(name)["main"])[-1]
        return [int(x) for x in info.shape]

    assert out_shape("resnet18.conv2d_nchw.56x56x64.o128.k1s2") == [1, 128, 28, 28]
    assert out_shape("mobilenet_v2.conv2d_nhwc.28x28x192.o32.k1s1") == [1, 28, 28, 32]
    assert out_shape("mobilenet_v2.depthwise_conv2d_nchw.112x112x96.k3s2") == [1, 96, 56, 56]
    assert out_shape("resnet18.max_pool2d.112x112x64.k3s2") == [1, 64, 56, 56]
    assert out_shape("bert_base.batch_matmul.12x128x64x128") == [12, 128, 64]


@pytest.mark.tvm
@needs_tvm
def test_flops_match_tvm_for_dense_and_conv_by_hand():
    if not _tvm_importable():
        pytest.skip("tvm is not importable")
    from tvm.s_tir.analysis import estimate_tir_flops

    dense = W.build_prim_func("bert_base.dense.128x768x3072")
    assert float(estimate_tir_flops(dense)) == 2 * 128 * 768 * 3072
    conv = W.build_prim_func("resnet18.conv2d_nchw.56x56x64.k3s1")
    assert float(estimate_tir_flops(conv)) == 2 * 56 * 56 * 64 * 64 * 9


# ---------------------------------------------------------------------------------------------
# TVM: a real, tiny collection run
# ---------------------------------------------------------------------------------------------

def _make_failing_f_build(marker: str):
    """A LocalBuilder build function that fails for modules whose TVMScript mentions ``marker``
    and otherwise builds normally. A closure, so cloudpickle ships it to the workers by value."""

    def f_build(mod, target, _params):
        from tvm.tirx import build as tvm_build  # collect._make_f_build's build
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        if marker in mod.script():
            raise RuntimeError("deliberate build failure (test)")
        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return tvm_build(mod, target=target)

    return f_build


@pytest.mark.tvm
@pytest.mark.slow
@needs_tvm
def test_tiny_collect_keeps_every_measured_candidate(tmp_path):
    if not _tvm_importable():
        pytest.skip("tvm is not importable")
    from tenset_curate.collect import collect

    dense = "resnet18.dense.1x512x1000"
    pool = "resnet18.global_avg_pool2d.7x7x512"  # every build fails on purpose
    out = tmp_path / "db"
    trials = 8
    summary = collect(
        [dense, pool], trials, out, target="auto", seed=0, trials_per_iter=trials,
        population_size=32, f_build=_make_failing_f_build("adaptive_pool"), keep_logs=False,
        progress=False,
    )

    # a standard MetaSchedule database plus the side files
    for name in ("database_workload.json", "database_tuning_record.json", "hardware.json",
                 "workloads.json", "collection.json"):
        assert (out / name).is_file(), name
    db_workloads, records = _read_db(out)
    assert len(db_workloads) == 2

    side = json.loads((out / "workloads.json").read_text())["workloads"]
    by_name = {e["name"]: e for e in side}
    assert set(by_name) == {dense, pool}

    # every measured candidate is a record: counts from the measure callback == database lines
    assert summary["n_records"] == len(records) == sum(e["n_measured"] for e in side)
    assert by_name[dense]["n_measured"] == trials
    for e in side:
        idx = e["workload_index"]
        assert db_workloads[idx][0] == e["structural_hash"]
        mine = [r for i, r in records if i == idx]
        assert len(mine) == e["n_records"] == e["n_measured"] > 0
        failed = [r for r in mine if any(s >= 1e9 for s in r[1])]
        assert len(failed) == e["n_failed"] == e["n_build_errors"] + e["n_run_errors"]
        assert e["flops"] == e["flops_tvm"] == W.WORKLOADS[e["name"]].flops
        assert e["op_class"] == W.WORKLOADS[e["name"]].op_class

    # the failed builds are stored, with MetaSchedule's 1e10 placeholder
    pool_recs = [r for i, r in records if i == by_name[pool]["workload_index"]]
    assert pool_recs and all(r[1] == [1e10] for r in pool_recs)
    assert by_name[pool]["n_failed"] == by_name[pool]["n_build_errors"] == len(pool_recs)
    # the dense workload measured real, finite latencies
    dense_recs = [r for i, r in records if i == by_name[dense]["workload_index"]]
    ok = [r for r in dense_recs if all(0 < s < 1e9 for s in r[1])]
    assert ok, "no successful dense measurement"
    assert by_name[dense]["best_latency_s"] == pytest.approx(min(sum(r[1]) / len(r[1]) for r in ok))
    # each record carries the trace, the target and the argument info
    for r in dense_recs:
        (insts, decisions), run_secs, target, args_info = r[:4]
        assert insts and target["kind"] == "llvm" and target["num-cores"] >= 1 and len(args_info) == 3

    # the workload blob decodes to the PrimFunc we built
    import tvm
    import tvm_ffi
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    blob = base64.b64decode(db_workloads[by_name[dense]["workload_index"]][1])
    stored = tvm.ir.load_json(blob[8:].decode())
    assert tvm_ffi.structural_equal(stored, _normalize_mod(W.build_prim_func(dense)["main"]))

    hw = json.loads((out / "hardware.json").read_text())
    assert hw["cpu_model"]
    assert hw["logical_cores"] >= 1
    assert isinstance(hw["isa_flags"], list)
    assert hw["tvm_version"] and hw["tvm_version"].split(".")[:2] == tvm.__version__.split(".")[:2]
    assert hw["target"] == summary["target"]
    assert hw["target"]["kind"] == "llvm" and hw["target"]["num-cores"] >= 1
    for key in ("kind", "mcpu", "num-cores"):
        if key in hw["target"]:
            assert records[0][1][2][key] == hw["target"][key]

    # rerunning resumes: nothing left to do, nothing duplicated
    again = collect([dense], trials, out, trials_per_iter=trials, keep_logs=False, progress=False)
    assert again["n_records"] == len(records)
    assert [r["seed"] for r in again["runs"]] == [0, 0] and again["runs"][1]["n_measured"] == 0
    assert again["runs"][1]["workloads_tuned"] == []

    # topping one workload up with another seed: its seeds are both runs', the skipped workload keeps its own
    # (a resumed run wrote its seed on every workload, those it skipped included)
    more = collect([dense], trials + 4, out, seed=1, trials_per_iter=4, population_size=32, keep_logs=False,
                   progress=False)
    side = {e["name"]: e for e in json.loads((out / "workloads.json").read_text())["workloads"]}
    assert (side[dense]["seeds"], side[dense]["seed"]) == ([0, 1], None)
    assert (side[pool]["seeds"], side[pool]["seed"]) == ([0], 0)
    assert [r["seed"] for r in more["runs"]] == [0, 0, 1] and more["seeds"] == [0, 1]
    assert more["runs"][2]["workloads_tuned"] == [dense] and more["runs"][2]["n_measured"] > 0
    assert more["n_records"] == len(records) + more["runs"][2]["n_measured"]


@pytest.mark.tvm
@needs_tvm
def test_cli_collect_prints_one_json_document_on_stdout(tmp_path):
    """``curate collect``'s stdout is its summary, once, as one JSON document (it was printed twice, and
    MetaSchedule's task tables went to stdout too): a script can pipe it into a JSON reader. Progress and
    MetaSchedule's own logging go to stderr. A fresh interpreter: MetaSchedule's logging is process-wide state."""
    if not _tvm_importable():
        pytest.skip("tvm is not importable")
    out = tmp_path / "db"
    r = subprocess.run([sys.executable, "-m", "tenset_curate.cli", "collect", "--workloads",
                        "resnet50.global_avg_pool2d.7x7x2048", "--trials", "2", "--trials-per-iter", "2",
                        "--population", "4", "--out", str(out), "--no-logs"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)  # the whole of stdout, or this raises
    assert summary["n_records"] == 2 and summary["out_dir"] == str(out)
    assert "Total trials" in r.stderr and "Total trials" not in r.stdout  # MetaSchedule's table: stderr
    assert (out / "database_tuning_record.json").is_file()


# ---------------------------------------------------------------------------------------------
# The committed sample (no TVM needed)
# ---------------------------------------------------------------------------------------------

def test_committed_sample_database():
    if not SAMPLE_DIR.exists():
        pytest.skip("data/sample-cpu is not present")
    db_workloads, records = _read_db(SAMPLE_DIR)
    side = json.loads((SAMPLE_DIR / "workloads.json").read_text())["workloads"]
    hw = json.loads((SAMPLE_DIR / "hardware.json").read_text())

    assert len(side) >= 12
    assert len(db_workloads) >= 12
    assert len(records) >= 2000
    hashes = [h for h, _ in db_workloads]
    used = {i for i, _ in records}
    for e in side:
        assert e["name"] in W.WORKLOADS, e["name"]
        assert e["structural_hash"] in hashes, e["name"]
        assert hashes[e["workload_index"]] == e["structural_hash"], e["name"]
        assert e["workload_index"] in used, e["name"]
        n = sum(1 for i, _ in records if i == e["workload_index"])
        assert n == e["n_records"], e["name"]
    assert sum(e["n_records"] for e in side) == len(records)
    assert hw["cpu_model"] and hw["logical_cores"] >= 1 and hw["tvm_version"]
    # failures are stored, never dropped: they carry the 1e10 placeholder
    n_failed = sum(1 for _, r in records if any(s >= 1e9 for s in r[1]))
    assert n_failed == sum(e["n_failed"] for e in side)


def test_committed_sample_is_the_projects_own_collection():
    """The embedded sample was measured here (``curate collect``), not copied from ../shared/realdata: it
    shares no tuning record and no workload with any MetaSchedule database there, and every record was
    measured for the CPU target that its ``hardware.json`` / ``collection.json`` describe."""
    shared = ROOT.parent / "shared" / "realdata" / "metaschedule"
    if not SAMPLE_DIR.exists() or not shared.is_dir():
        pytest.skip("data/sample-cpu or ../shared/realdata/metaschedule is not present")
    mine_w, mine_r = _read_db(SAMPLE_DIR)
    target = json.loads((SAMPLE_DIR / "collection.json").read_text())["target"]
    assert target["kind"] == "llvm"
    for _, rec in mine_r:
        assert rec[2]["kind"] == "llvm" and rec[2].get("mcpu") == target["mcpu"], rec[2]
    mine_rec = {json.dumps(rec, sort_keys=True) for _, rec in mine_r}  # the record itself, whatever its index
    mine_hash = {h for h, _ in mine_w}
    dbs = [p for p in shared.iterdir() if p.is_dir()]
    assert dbs
    for d in dbs:
        w, r = _read_db(d)
        assert not mine_hash & {h for h, _ in w}, d
        assert not mine_rec & {json.dumps(rec, sort_keys=True) for _, rec in r}, d


_UNNAMED_HANDLER_SCRIPT = """
import logging, sys
from pathlib import Path
from tvm.s_tir.meta_schedule.logging import create_loggers
from tenset_curate.collect import MS_LOGGER, _unnamed_handlers_detached
log_dir = sys.argv[1]
logger = logging.getLogger(MS_LOGGER)
foreign = logging.NullHandler()  # no name, like pytest's LogCaptureHandler
logger.addHandler(foreign)
params = [{"log_dir": log_dir, "logger_name": MS_LOGGER + ".task_0"}]
try:
    create_loggers(log_dir=log_dir, params=params)  # what tune_tir does on its own
    print("no error")
except AttributeError as e:
    print("fails:", e)
with _unnamed_handlers_detached(MS_LOGGER) as detached:
    print("detached:", foreign in detached and foreign not in logger.handlers)
    create_loggers(log_dir=log_dir, params=params)
print("given back:", foreign in logger.handlers)
print("logging set up:", (Path(log_dir) / (MS_LOGGER + ".task_0.log")).is_file())
"""


@needs_tvm
def test_metaschedule_logging_survives_an_unnamed_handler_on_its_logger(tmp_path):
    """MetaSchedule rebuilds its logging from the names of the handlers on its logger and fails on an unnamed one
    (pytest >= 9.2 puts its capture handlers there); tuning detaches those for the run and gives them back after.
    In a fresh interpreter: MetaSchedule's logging is process-wide state the other tuning tests share."""
    r = subprocess.run([sys.executable, "-c", _UNNAMED_HANDLER_SCRIPT, str(tmp_path)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = [x for x in r.stdout.splitlines() if x.split(":")[0] in ("no error", "fails", "detached", "given back",
                                                                    "logging set up")]  # not MetaSchedule's own lines
    assert out[0].startswith("fails:") and "format" in out[0]
    assert out[1:] == ["detached: True", "given back: True", "logging set up: True"]


@needs_tvm
def test_bad_workloads_and_models_are_clean_errors(tmp_path):
    """``curate collect --workloads foo`` and ``curate verify --model <no model>`` ended in tracebacks (KeyError,
    ModelLoadError), and the refused verify left an empty ``--out`` folder; ``--population 0`` tuned nothing and
    exited 0."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    r = CliRunner().invoke(app, ["collect", "--workloads", "foo", "--trials", "1", "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert "error: 'foo' is neither a workload set" in r.output
    r = CliRunner().invoke(app, ["collect", "--population", "0", "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "--population" in r.output
    r = CliRunner().invoke(app, ["verify", "--model", str(tmp_path / "nope"), "--trials", "1", "--seeds", "1",
                                 "--out", str(tmp_path / "v")])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert f"error: no config.json in {tmp_path / 'nope'}" in r.output
    assert not (tmp_path / "v").exists()  # a refused verify made its --out folder before the models loaded


@needs_tvm
def test_collect_and_verify_refuse_bad_arguments_before_tvm_or_any_folder(tmp_path):
    """Found by a CLI fuzz (session 35): an --out that is a file (or under one) ended in FileExistsError or
    NotADirectoryError tracebacks; --trials past 64 bits failed in TVM's FFI, and --trials-per-iter so large after
    the tuning, when the summary printed; --seed -1 was refused by MetaSchedule after the folder was made; a target
    that is not JSON and a workloads file that is not JSON gave the decoder's message naming neither."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    (tmp_path / "afile").write_text("x")
    wl = ["--workloads", "resnet18.dense.1x512x1000"]
    cases = [(["collect", *wl, "--trials", "1", "--out", str(tmp_path / "afile")],
              "afile: a file is in the way of the folder the collection goes into"),
             (["collect", *wl, "--trials", "1", "--out", str(tmp_path / "afile" / "sub")],
              "afile/sub: a file is in the way"),
             (["collect", *wl, "--trials", str(2 ** 70), "--out", str(tmp_path / "c")],
              f"trials {2 ** 70}: an integer of at most 64 bits"),
             (["collect", *wl, "--trials", "1", "--trials-per-iter", str(2 ** 70), "--out", str(tmp_path / "c")],
              f"trials_per_iter {2 ** 70}: an integer of at most 64 bits"),
             (["collect", *wl, "--trials", "1", "--seed", "-1", "--out", str(tmp_path / "c")],
              "seed -1: an integer, at least 0"),
             (["collect", *wl, "--trials", "1", "--seed", str(2 ** 32), "--out", str(tmp_path / "c")],
              f"seed {2 ** 32}: at most 2**32 - 1"),
             (["collect", *wl, "--trials", "1", "--target", '{"kind": 5', "--out", str(tmp_path / "c")],
              """target '{"kind": 5': not a JSON object (Expecting"""),
             (["collect", "--workloads", str(tmp_path / "afile"), "--trials", "1", "--out", str(tmp_path / "c")],
              "afile: not a JSON list of workload names"),
             (["collect", "--workloads", "bogus-target-test", "--trials", "1", "--target", "bogus!",
               "--out", str(tmp_path / "c")], "'bogus-target-test' is neither a workload set"),
             (["collect", *wl, "--trials", "1", "--target", "bogus!", "--out", str(tmp_path / "c")],
              "target 'bogus!': TVM 0.27 takes dict targets only"),
             (["verify", "--model", str(tmp_path / "nope"), *wl, "--trials", "1", "--seeds", "1", "--out",
               str(tmp_path / "afile")], "afile: a file is in the way of the folder the report goes into"),
             # a GPU target started and failed in TVM's tuning, leaving a partial folder
             (["collect", *wl, "--trials", "1", "--target", '{"kind": "cuda"}', "--out", str(tmp_path / "c")],
              "collect and verify tune and measure on this machine's CPU, an llvm target"),
             # names separated by commas, as verify takes them (collect refused them)
             (["collect", "--workloads", "resnet18.dense.1x512x1000,nosuch.wl", "--trials", "1", "--out",
               str(tmp_path / "c")], "unknown workload 'nosuch.wl'"),
             (["verify", "--model", str(tmp_path / "m"), "--model", str(tmp_path / "m"), *wl, "--trials", "1",
               "--seeds", "1", "--out", str(tmp_path / "v")], f"--model {tmp_path / 'm'} given more than once"),
             (["verify", "--model", str(tmp_path / "nope"), *wl, "--trials", "1", "--seeds", "1", "--out",
               str(tmp_path / "v")], f"no config.json in {tmp_path / 'nope'}: no such folder")]
    for argv, said in cases:
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (argv, r.output)
        assert "error: " in r.output and said in " ".join(r.output.split()), (argv, r.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # no folder made by a refused command
