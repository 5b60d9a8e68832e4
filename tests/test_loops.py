"""loops.py: the loop extents replayed from Ansor's steps, checked against what the hardware allows on real logs,
against a record-by-record evaluation, and on a real record worked by hand."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenset_curate.features import featurize
from tenset_curate.loops import STEP_OUTPUTS, loop_extents, loop_tokens, replay
from tenset_curate.prune import load_records

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata"
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample-cpu"

# Ansor's IteratorAnnotation: 4 vthread, 5/7/9 blockIdx.x/y/z, 6/8/10 threadIdx.x/y/z
THREAD_IDX = (6, 8, 10)


@pytest.fixture(scope="module")
def ansor_records(tmp_path_factory) -> pl.DataFrame:
    """Every real Ansor log of a few kinds: two GPUs' roller logs (two per operator folder), the A100 mmperf logs
    the TVM CI logs and bennu's (CUDA and LLVM, several log versions)."""
    from tenset_curate.convert import convert

    ansor = REAL / "ansor"
    if not (ansor / "roller-k80").is_dir():
        pytest.skip(f"real Ansor logs not found under {ansor}")
    base = tmp_path_factory.mktemp("loops")
    picked = []
    for hw in ("roller-k80", "roller-mi50"):
        for op in sorted(p for p in (ansor / hw).iterdir() if p.is_dir()):
            picked += [(hw, f) for f in sorted(op.glob("*.json*"))[:2]]
    for hw in ("mmperf-a100", "tvm-ci-logs", "bennu"):
        picked += [(hw, f) for f in sorted((ansor / hw).rglob("*.json*"))]
    for hw, f in picked:
        d = base / "in" / hw
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, d / f"{f.parent.name}-{f.name}")
    convert(sorted((base / "in").iterdir()), base / "ds", workers=1)
    return load_records(base / "ds")


def _evaluate(expr, steps: list[dict]):
    """One record's value of a ``replay`` expression, computed from its own steps (not loops.py's evaluation)."""
    if expr is None:
        return None
    op = expr[0]
    if op == "L":
        lengths = (steps[expr[1]]["lists"] or [[]])[0]
        return lengths[expr[2]] if expr[2] < len(lengths) else None
    if op == "E":
        return steps[expr[1]]["ints"][2]
    if op == "C":
        a, b = _evaluate(expr[1], steps), _evaluate(expr[2], steps)
        return None if a is None or not b else -(-a // b)
    vals = [_evaluate(x, steps) for x in expr[1]]
    return None if any(v is None for v in vals) else math.prod(vals)


def _annotated(records: pl.DataFrame, ext: pl.DataFrame) -> pl.DataFrame:
    """Every AN step with its annotation and the replayed extent, joined to its record's hardware limits."""
    an = (pl.DataFrame({"steps": records["steps"]}).with_row_index("rid").explode("steps")
          .with_columns(pl.int_range(pl.len()).over("rid").alias("k")).unnest("steps")
          .filter(pl.col("kind") == "AN").select("rid", "k", pl.col("ints").list.get(2).alias("ann")))
    meta = records.with_row_index("rid").select("rid", "hardware", "target_kind", "is_valid",
                                                "hw_max_threads_per_block")
    return an.join(ext, on=["rid", "k"], how="left").join(meta, on="rid")


def test_a_real_matmul_schedule_worked_by_hand():
    """roller-k80's matmul_layer 65536x1024x1024, one record's steps: the cache-write stage is tiled
    [256 | 1 | 32 | 8 | 1] x [2 | 4 | 32 | 2 | 2], its consumer follows with [1, 32, 8] and [4, 32, 4], and the
    output stage binds 256 * 2 blocks, 1 * 4 virtual threads and 32 * 32 threads; the shared-memory loads fetch
    cooperatively with the same 1024 threads."""
    def S(kind, ints, lists=(), strs=()):
        return {"kind": kind, "ints": list(ints), "lists": [list(x) for x in lists], "strs": list(strs), "floats": []}

    steps = [S("CHW", [2]), S("SP", [2, 0, 65536, 1], [[1, 32, 8, 1]]), S("SP", [2, 5, 1024, 1], [[4, 32, 2, 2]]),
             S("SP", [2, 10, 1024, 1], [[4, 1]]), S("RE", [2], [[0, 5, 1, 6, 2, 7, 10, 11, 3, 8, 12, 4, 9]]),
             S("FSP", [3, 0, 1, 3]), S("FSP", [3, 4, 2, 3]), S("RE", [3], [[0, 4, 1, 5, 2, 6, 3, 7]]),
             S("CA", [2, 3, 5]), S("CHR", [1], [[2]]), S("CA", [2, 3, 6]), S("CHR", [0], [[3]]),
             S("CA", [1, 4, 6]), S("FU", [5], [[0, 1]]), S("AN", [5, 0, 5]), S("FU", [5], [[1, 2]]),
             S("AN", [5, 1, 4]), S("FU", [5], [[2, 3]]), S("AN", [5, 2, 6]), S("FU", [3], [[0, 1]]),
             S("SP", [3, 0, 16, 1], [[1]]), S("AN", [3, 1, 2]), S("FFSP", [3, 0, 1, 1], [[2, 1]]),
             S("AN", [3, 1, 6]), S("FU", [1], [[0, 1]]), S("SP", [1, 0, 32, 1], [[32]]), S("AN", [1, 1, 2]),
             S("FFSP", [1, 0, 1, 1], [[2, 1]]), S("AN", [1, 1, 6]),
             S("PR", [4, 0], strs=["auto_unroll_max_step$64"])]
    ext = loop_extents(pl.Series("steps", [steps]))
    got = {k: {c: v for c, v in zip(STEP_OUTPUTS, row) if not math.isnan(v)}
           for k, *row in ext.select("k", *STEP_OUTPUTS).iter_rows()}
    assert got[5] == {"follow_len1": 1, "follow_len2": 32, "follow_len3": 8}
    assert got[6] == {"follow_len1": 4, "follow_len2": 32, "follow_len3": 4}
    assert got[13] == {"fused_extent": 512} and got[14] == {"ann_extent": 512}  # blockIdx.x
    assert got[15] == {"fused_extent": 4} and got[16] == {"ann_extent": 4}  # vthread
    assert got[17] == {"fused_extent": 1024} and got[18] == {"ann_extent": 1024}  # threadIdx.x
    assert got[21] == {"ann_extent": 1}  # the shared stage's vectorised loop: 16 fused elements, split by 1
    assert got[22] == {"follow_len1": 1024} and got[23] == {"ann_extent": 1024}  # cooperative fetch
    assert got[26] == {"ann_extent": 32} and got[28] == {"ann_extent": 1024}
    assert got[19] == {} and got[24] == {}  # FU of loops no step measured: unknown, not guessed

    # as token columns: log2(1 + extent) at the step's position in features.token_tensor
    steps_s = pl.Series("steps", [steps])
    cols = loop_tokens(steps_s, 64)
    assert cols.shape == (1, 64, len(STEP_OUTPUTS))
    assert cols[0, 18, STEP_OUTPUTS.index("ann_extent")] == pytest.approx(math.log2(1025))
    assert cols[0, 17, STEP_OUTPUTS.index("fused_extent")] == pytest.approx(math.log2(1025))
    assert cols[0, 5, STEP_OUTPUTS.index("follow_len2")] == pytest.approx(math.log2(33))
    assert not cols[0, 19].any() and not cols[0, len(steps):].any()
    mask = featurize(pl.DataFrame({"steps": steps_s, "n_steps": [len(steps)],
                                   "workload_args": [[65536.0, 1024.0, 1024.0]]}))["mask"]
    assert (cols.any(2) <= mask).all()  # only where token_tensor has a token
    assert np.array_equal(loop_tokens(steps_s, 16), cols[:, :16])  # cropped as the tokens are


def test_thread_extents_are_known_and_within_the_gpus_limit(ansor_records):
    """The threadIdx bindings of the real GPU records get their extents, and no valid program has more threads per
    block than its hardware allows (a wrong replay of splits, fuses or reorders gives other products)."""
    an = _annotated(ansor_records, loop_extents(ansor_records["steps"]))
    thr = an.filter(pl.col("ann").is_in(THREAD_IDX) & pl.col("hw_max_threads_per_block").is_not_null())
    assert thr.height > 10_000
    assert set(thr["hardware"].unique()) >= {"roller-k80", "roller-mi50"}
    # a binding of a loop no step split or fused (one TVM CI softmax record binds its stage's untouched loop 0)
    # stays unknown; the roller logs' multi-level tiling measures every one
    assert thr["ann_extent"].is_nan().mean() < 1e-3
    assert thr.filter(pl.col("hardware").str.starts_with("roller"))["ann_extent"].is_nan().sum() == 0
    per_stage = (thr.filter(pl.col("is_valid") & pl.col("ann_extent").is_not_nan()).join(
        ansor_records.with_row_index("rid").select("rid", "steps"), on="rid")
        .with_columns(pl.col("steps").list.get(pl.col("k")).struct.field("ints").list.first().alias("stage"))
        .group_by("rid", "stage").agg(pl.col("ann_extent").product(), pl.col("hw_max_threads_per_block").first()))
    assert (per_stage["ann_extent"] <= per_stage["hw_max_threads_per_block"]).all()
    assert per_stage["ann_extent"].max() > 256  # not all trivially small


def test_cpu_parallel_and_vectorised_loops_are_known(ansor_records):
    """On the LLVM logs most loops an AN parallelises or vectorises come from splits and fuses the replay follows
    (the rest fuse loops of stages no step split, whose extents only the compute DAG knows). A vectorised loop is
    the innermost length of a split, which Ansor's sketch policy caps (``max_innermost_split_factor``, 64 unless
    changed): a replay that mixed up iterators would hand it outer loops' extents too."""
    an = _annotated(ansor_records, loop_extents(ansor_records["steps"])).filter(pl.col("target_kind") == "llvm")
    if an.height == 0:
        pytest.skip("no LLVM Ansor records among the real logs")
    par = an.filter(pl.col("ann").is_in([2, 3]))  # vectorize, parallel
    assert par.height > 1000
    assert par["ann_extent"].is_not_nan().mean() > 0.6
    known = par.filter(pl.col("ann_extent").is_not_nan())
    assert (known["ann_extent"] >= 1).all()
    vec = known.filter(pl.col("ann") == 2)["ann_extent"]
    assert vec.len() > 500 and vec.max() <= 64 and vec.n_unique() > 3
    assert known.filter(pl.col("ann") == 3)["ann_extent"].max() > 64  # parallel loops are outer ones


def test_the_grouped_replay_equals_a_record_by_record_evaluation(ansor_records):
    """loops.py replays one record per step structure and evaluates the rest with numpy; evaluating each record's
    own expressions one by one must give the same numbers (every log kind, 3,000 records)."""
    idx = np.random.default_rng(0).choice(ansor_records.height, min(3000, ansor_records.height), replace=False)
    sub = ansor_records[idx]
    ext = loop_extents(sub["steps"])
    got = {(r, k): row for r, k, *row in ext.select("rid", "k", *STEP_OUTPUTS).iter_rows()}
    checked = 0
    for r, steps in enumerate(sub["steps"].to_list()):
        for k, exprs in replay(steps).items():
            want = [_evaluate(e, steps) for e in exprs]
            have = [None if math.isnan(v) else v for v in got[(r, k)]]
            assert have == [None if w is None else float(w) for w in want], (r, k, steps[k])
            checked += 1
        assert {k for (rr, k) in got if rr == r} == set(replay(steps))
    assert checked > 30_000


def test_metaschedule_traces_get_no_loop_extents(tmp_path):
    """MetaSchedule traces name loops by SSA values the schema drops: their loop columns stay 0."""
    from tenset_curate.convert import convert

    convert([SAMPLE], tmp_path / "ds")
    df = load_records(tmp_path / "ds")
    assert df.height > 1000 and set(df["format"].unique()) == {"metaschedule"}
    assert loop_extents(df["steps"]).height == 0
    assert not loop_tokens(df["steps"], 64).any()
    assert featurize(df.head(50))["tokens"].any()  # the traces do have tokens: only the loop columns are empty


_step = st.fixed_dictionaries({
    "kind": st.sampled_from(["SP", "FSP", "FFSP", "FU", "RE", "AN", "CHR", "CHW", "RF", "CA", "PR", "XX"]),
    "ints": st.lists(st.one_of(st.none(), st.integers(-3, 40), st.just(2**40)), max_size=5),
    "lists": st.lists(st.lists(st.one_of(st.none(), st.integers(-2, 64), st.just(2**40)), max_size=6), max_size=2),
})


@given(st.lists(st.lists(_step, max_size=25), min_size=1, max_size=6))
def test_malformed_steps_never_raise(records):
    """Indices out of range (2**40 included: no list grows to it), negative or missing values, follow splits of later
    or non-split steps, empty fuse lists: the replay leaves what it cannot follow unknown and never raises; known
    extents are positive."""
    ext = loop_extents(pl.Series("steps", records, dtype=pl.List(pl.Struct(
        {"kind": pl.String, "ints": pl.List(pl.Int64), "lists": pl.List(pl.List(pl.Int64)), "strs": pl.List(pl.String),
         "floats": pl.List(pl.Float64)}))))
    vals = ext.select(STEP_OUTPUTS).to_numpy()
    assert np.all(np.isnan(vals) | (vals >= 1))
    assert set(ext["rid"].to_list()) <= set(range(len(records)))
