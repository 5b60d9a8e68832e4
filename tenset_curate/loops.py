"""Loop extents of an Ansor schedule, replayed from its steps without TVM.

An Ansor step names loops by position (``SP`` splits iterator 5 of stage 2, ``FU`` fuses iterators 0 and 1, ``AN``
binds iterator 0 to ``blockIdx.x``), so the step alone does not say how long the loop it annotates is. The
quantities that decide a GPU program's speed are exactly those lengths: threads per block (the extent bound to
``threadIdx``), blocks, virtual threads, the vectorised or unrolled length. Ansor gets them by replaying the steps
on the task's compute DAG; TVM 0.27 has no Ansor, and a record does not carry the DAG.

``loop_extents`` replays the loop structure the steps themselves describe. A split creates the iterators
``[ceil(extent / prod(lengths))] + lengths`` (inner-to-outer; the nparts form the other way round) with the extent
the step logs; a follow split (``FSP``) takes its lengths from the split it follows, a fused follow split (``FFSP``)
the product of one level of several splits; ``FU`` multiplies, ``RE`` permutes; cache read/write and rfactor insert
stages. Iterators no step has measured stay unknown, and so does anything computed from them (0 in the outputs);
a ``FSP`` on an unknown iterator takes the extent of the split it follows, which is what Ansor's multi-level tiling
produces (the cache-write stage and its consumer share their spatial extents).

Fast on millions of records because the replay is symbolic: records whose steps have the same structure (kinds,
stage and iterator indices, fuse and reorder lists, how many lengths each split has; not the lengths, logged
extents or pragma values) share one ``skeleton``, replayed once into expressions over their lengths and extents,
which numpy then evaluates for all of the skeleton's records at once.

MetaSchedule traces name loops by SSA values, which the canonical schema drops, so their outputs are 0.

Outputs per step (``STEP_OUTPUTS``): the extent of the iterator an ``AN`` annotates, the extent of the iterator an
``FU`` produces, and the up to ``FOLLOW_LENGTHS`` lengths an ``FSP``/``FFSP`` splits by (which a plain ``SP``
logs itself). ``loop_tokens`` lays them out as extra token columns, position for position with
``features.token_tensor``.

Not in the product's features (measured, session 13): appended to the attention model's schedule tokens (raw and
centred within the task), they lift PCA on tasks the model never saw (``k80_tasks``, three seeds: 0.749 -> 0.758)
and K80 -> MI50 zero-shot (0.760 -> 0.765, top-5 0.910 -> 0.914), but with depthwise convolutions held out every
form tried loses 4 to 10 PCA points and 6 to 14 top-1 points (seed 0: 0.668 / 0.793 -> 0.570-0.629 /
0.652-0.732), below the operator-wise bar. ``python benchmarks/attention_variants.py SPLIT loops`` (and
``loopsrel``) reproduces it; reports/model_splits.md, "Loop extents", has the table.
"""
from __future__ import annotations

import numpy as np
import polars as pl

FOLLOW_LENGTHS = 5
# no Ansor state has this many stages or iterators in a stage; a step naming a larger index is malformed and skipped
# (growing the replay's lists to it would take memory in proportion to the index)
MAX_INDEX = 4096
REPLAYED = ["SP", "FSP", "FFSP", "FU", "RE", "AN", "CHR", "CHW", "RF"]  # the step kinds that move loops or stages
STEP_OUTPUTS = ["ann_extent", "fused_extent"] + [f"follow_len{j + 1}" for j in range(FOLLOW_LENGTHS)]

# expressions: ("L", k, j) length j of split step k; ("E", k) the extent split step k logs; ("C", a, b) ceil(a / b);
# ("P", (a, b, ...)) product; None: unknown


def _prod(xs: list):
    if any(x is None for x in xs):
        return None
    if len(xs) == 1:
        return xs[0]
    return ("P", tuple(xs))


def _ceil_div(a, b):
    return None if a is None or b is None else ("C", a, b)


def _split_iters(e, lengths: list, inner_to_outer: bool) -> list:
    rest = _ceil_div(e, _prod(lengths))
    return [rest] + lengths if inner_to_outer else lengths + [rest]


def replay(steps: list[dict]) -> dict[int, list]:
    """Symbolic replay of one record's steps: {step index: [expression per ``STEP_OUTPUTS``]} for the steps that
    have an output. ``steps`` is the record's ``steps`` column as Python dicts."""
    stages: list[list] = []
    out: dict[int, list] = {}
    nlen = [len((s.get("lists") or [[]])[0] or []) if s.get("kind") == "SP" else 0 for s in steps]

    def stage(s: int) -> list:
        while len(stages) <= s:
            stages.append([])
        return stages[s]

    def grow(lst: list, i: int) -> None:
        while len(lst) <= i:
            lst.append(None)

    def split_lengths(k: int) -> list:
        return [("L", k, j) for j in range(nlen[k])] if 0 <= k < len(steps) and steps[k]["kind"] == "SP" else []

    for k, s in enumerate(steps):
        kind, ints, lists = s.get("kind"), s.get("ints") or [], s.get("lists") or []
        if any(v is None for v in ints) or any(v > MAX_INDEX for v in ints[:2]):
            continue
        if kind in ("FU", "RE", "FFSP") and lists and any(v is not None and v > MAX_INDEX for v in lists[0] or []):
            continue
        if kind == "SP" and len(ints) >= 4 and ints[0] >= 0 and ints[1] >= 0:
            lst = stage(ints[0])
            grow(lst, ints[1])
            lst[ints[1]:ints[1] + 1] = _split_iters(("E", k), split_lengths(k), bool(ints[3]))
        elif kind == "FSP" and len(ints) >= 4 and min(ints) >= 0 and ints[2] < k:
            src, n_split = ints[2], ints[3]
            sl = split_lengths(src)
            if not sl or n_split < 1:
                continue
            lengths = sl[:n_split - 1] + [_prod(sl[n_split - 1:])]
            lst = stage(ints[0])
            grow(lst, ints[1])
            e = lst[ints[1]] if lst[ints[1]] is not None else ("E", src)
            lst[ints[1]:ints[1] + 1] = _split_iters(e, lengths, True)
            out[k] = [None, None] + (lengths + [None] * FOLLOW_LENGTHS)[:FOLLOW_LENGTHS]
        elif kind == "FFSP" and len(ints) >= 4 and min(ints) >= 0:
            srcs = lists[0] if lists else []
            if not srcs or any(v is None or not 0 <= v < k for v in srcs):
                continue
            level = ints[2]
            parts = [sl[level] if level < len(sl) else None for sl in (split_lengths(v) for v in srcs)]
            ln = _prod(parts)
            lst = stage(ints[0])
            grow(lst, ints[1])
            e = lst[ints[1]]
            lst[ints[1]:ints[1] + 1] = [_ceil_div(e, ln), ln] if ints[3] else [ln, _ceil_div(e, ln)]
            out[k] = [None, None, ln] + [None] * (FOLLOW_LENGTHS - 1)
        elif kind in ("FU", "RE") and ints and ints[0] >= 0:
            ids = lists[0] if lists else []  # the iterators fused, or the new order
            if not ids or any(v is None or v < 0 for v in ids):
                continue
            lst = stage(ints[0])
            grow(lst, max(ids))
            if kind == "RE":
                stages[ints[0]] = [lst[i] for i in ids] + lst[len(ids):]
                continue
            fused = _prod([lst[i] for i in ids])
            lst[min(ids):max(ids) + 1] = [fused]
            out[k] = [None, fused] + [None] * FOLLOW_LENGTHS
        elif kind == "AN" and len(ints) >= 2 and min(ints[:2]) >= 0:
            lst = stage(ints[0])
            grow(lst, ints[1])
            out[k] = [lst[ints[1]], None] + [None] * FOLLOW_LENGTHS
        elif kind in ("CHR", "CHW") and ints and ints[0] >= 0:  # the new stage comes after the one cached
            stage(ints[0])
            stages.insert(ints[0] + 1, [])
        elif kind == "RF" and ints and ints[0] >= 0:  # the rfactor stage comes before the original
            stage(ints[0])
            stages.insert(ints[0], [])
    return out


def _skeleton_hash() -> pl.Expr:
    """One hash per step of what ``replay`` reads: its index, kind, ints (a split's logged extent, ``ints[2]``, left out), lists
    (a split's lengths only counted)."""
    is_sp = pl.col("kind") == "SP"
    ints = pl.col("ints")
    sp_ints = pl.struct(ints.list.head(2).hash().alias("a"), ints.list.slice(3).hash().alias("b")).hash()
    lists = pl.when(is_sp).then(pl.col("lists").list.first().list.len().cast(pl.UInt64)).otherwise(
        pl.col("lists").hash())
    return pl.struct(pl.col("k"), pl.col("kind").hash().alias("kind"),
                     pl.when(is_sp).then(sp_ints).otherwise(ints.hash()).alias("ints"), lists.alias("lists")).hash()


def _explode(steps: pl.Series) -> pl.DataFrame:
    """One row per step: ``rid`` (the record's row in ``steps``), ``k`` (the step's index) and the step's fields."""
    return (pl.DataFrame({"steps": steps}).with_row_index("rid").explode("steps").drop_nulls("steps")
            .with_columns(pl.int_range(pl.len()).over("rid").alias("k")).unnest("steps"))


def loop_extents(steps: pl.Series) -> pl.DataFrame:
    """Per step of every record (``rid`` = row in ``steps``, ``k`` = step index) that has an output, one float64
    column per ``STEP_OUTPUTS`` (NaN: unknown). Steps without an output are absent."""
    return _exploded_loop_extents(_explode(steps), steps)


def _exploded_loop_extents(ex: pl.DataFrame, steps: pl.Series) -> pl.DataFrame:
    """``loop_extents`` of ``steps`` given ``_explode(steps)`` (``loop_tokens`` explodes once for both)."""
    schema = {"rid": pl.UInt32, "k": pl.Int64, **{c: pl.Float64 for c in STEP_OUTPUTS}}
    if ex.height == 0:
        return pl.DataFrame(schema=schema)
    # only the steps replay reads make a skeleton (records without any, such as MetaSchedule traces, have no output)
    ex = ex.with_columns(_skeleton_hash().alias("h"), pl.col("kind").is_in(REPLAYED).alias("replayed"))
    # a record's skeleton: the list of its steps' hashes
    per = ex.group_by("rid", maintain_order=True).agg(pl.col("h").filter(pl.col("replayed")).alias("skel"),
                                                      pl.len().alias("n"))
    rids = per["rid"].to_numpy().astype(np.int64)
    # step g of the exploded frame is step k of record rid: g = start[rid] + k
    start = np.full(len(steps), -1, np.int64)
    start[rids] = np.concatenate([[0], np.cumsum(per["n"].to_numpy())[:-1]])
    ints = ex["ints"]
    extent = np.where(ex["kind"].to_numpy() == "SP",
                      ints.list.get(2, null_on_oob=True).cast(pl.Float64).fill_null(np.nan).to_numpy(), np.nan)
    first = ex["lists"].list.first()
    lens_n = first.list.len().fill_null(0).to_numpy().astype(np.int64)
    lens_off = np.concatenate([[0], np.cumsum(lens_n)[:-1]])
    # the non-empty lists only: explode() gives an empty or null list one null row
    lens_val = first.filter(pl.Series(lens_n > 0)).explode().cast(pl.Float64).fill_null(np.nan).to_numpy()

    def length(g: np.ndarray, j: int) -> np.ndarray:
        ok = j < lens_n[g]
        out = np.full(len(g), np.nan)
        out[ok] = lens_val[lens_off[g[ok]] + j]
        return out

    frames = []
    groups = (pl.DataFrame({"rid": rids, "skel": per["skel"]}).filter(pl.col("skel").list.len() > 0)
              .group_by("skel", maintain_order=True).agg("rid"))
    for grp in groups["rid"].to_list():
        grp = np.asarray(grp, np.int64)
        exprs = replay(steps[int(grp[0])].to_list())
        if not exprs:
            continue
        base = start[grp]
        memo: dict = {}

        def ev(e):
            if e is None:
                return None
            if e in memo:
                return memo[e]
            op = e[0]
            if op == "L":
                v = length(base + e[1], e[2])
            elif op == "E":
                v = extent[base + e[1]]
            elif op == "C":
                a, b = ev(e[1]), ev(e[2])
                with np.errstate(divide="ignore", invalid="ignore"):
                    v = np.where(b > 0, np.ceil(a / np.where(b > 0, b, 1)), np.nan)
            else:
                v = np.prod(np.stack([ev(x) for x in e[1]]), axis=0)
            memo[e] = v
            return v

        ks = sorted(exprs)
        cols = {"rid": np.repeat(grp, len(ks)), "k": np.tile(np.asarray(ks, np.int64), len(grp))}
        nan = np.full(len(grp), np.nan)
        for c, name in enumerate(STEP_OUTPUTS):
            vals = [ev(exprs[k][c]) for k in ks]
            cols[name] = np.stack([nan if v is None else v for v in vals], axis=1).reshape(-1)
        frames.append(pl.DataFrame(cols))
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat(frames).with_columns(pl.col("rid").cast(pl.UInt32), pl.col("k").cast(pl.Int64))


def loop_tokens(steps: pl.Series, seq_len: int) -> np.ndarray:
    """float32 ``[N, seq_len, len(STEP_OUTPUTS)]``: log2(1 + extent) of ``loop_extents`` at each step's token
    position (the position ``features.token_tensor`` gives it: steps without a primitive are skipped, the sequence
    is cropped at ``seq_len``); 0 where unknown or where a step has no output."""
    from .features import TOKEN_KINDS

    out = np.zeros((len(steps), seq_len, len(STEP_OUTPUTS)), np.float32)
    if len(steps) == 0:
        return out
    every = _explode(steps)
    pos = (every.filter(pl.col("kind").is_in(list(TOKEN_KINDS))).select(
        "rid", "k", pl.int_range(pl.len()).over("rid").alias("pos")).filter(pl.col("pos") < seq_len))
    loops = pos.join(_exploded_loop_extents(every, steps), on=["rid", "k"], how="inner")
    if loops.height:
        r, p = loops["rid"].to_numpy().astype(np.int64), loops["pos"].to_numpy().astype(np.int64)
        for j, name in enumerate(STEP_OUTPUTS):
            v = loops[name].to_numpy()
            ok = v > 0  # NaN (unknown) compares False
            out[r[ok], p[ok], j] = np.log2(1 + v[ok]).astype(np.float32)
    return out
