"""Features: schedule tokens (TLP style), flat summary features and operator classes.

One featurizer serves Ansor steps and MetaSchedule trace instructions alike: both arrive in the canonical typed
``steps`` column (see ``schema.py``) and are mapped onto one shared vocabulary of schedule primitives where the
primitives mean the same thing (split/tile, reorder, fuse, loop annotations, compute_at, inline, cache read/write,
rfactor, pragma/unroll, storage_align, thread binding). Bookkeeping instructions that carry no schedule decision
(MetaSchedule's GetBlock, GetLoops, the Split that replays a SamplePerfectTile, ...) are dropped.

MetaSchedule, so that a primitive reads the same from both sources (version 2; the session-30 audit of the real
databases found each of these):

- ``Bind`` is an annotation (block, thread or vthread binding), as Ansor's AN steps of those kinds are, not a
  primitive of its own (the ``bind`` slot stays, unused, so that Ansor's tokens keep their layout);
- ``Annotate`` is read by its key: ``meta_schedule.parallel`` / ``vectorize`` are those annotations, the unroll
  keys (``meta_schedule.unroll_explicit`` / ``unroll_implicit``, ``pragma_auto_unroll_max_step``) are the unroll
  pragma with its depth (Ansor's ``PR auto_unroll_max_step$N``): the value of the SampleCategorical just before it
  (the schedule rule samples the depth there and annotates at once) or its literal; any other key is a pragma
  without a depth, as every Annotate was in version 1;
- a SampleCategorical's chosen value is its ``log_extent`` (vector lanes, a thread extent, an unroll depth):
  version 1 read every one as an unroll depth;
- the stage index is Ansor's only (MetaSchedule's Fuse put its preserve_unit_iters flag there).

Measured before keeping them (bennu-a100-resnet34, GBDT and attention, within-task and 20%-of-tasks held out,
seed 0; throwaway flags over this module, session 30), three more changes the audit asked for were tried and
dropped, because each lost what the models rank with:

- ending the trace at ``EnterPostproc`` (the postprocessors' splits, binds and unroll literals follow from the
  decisions before it, and they push 12,834 of the 20,112 real records past ``SEQ_LEN``): attention within-task
  PCA 0.923 -> 0.909. The tail is kept, cropped where it must be;
- dropping a SamplePerfectTile's outermost factor so that ``log_len1..`` name the same loops as Ansor's SP (whose
  lengths are the inner factors: ``[4, 2, 2, 8]`` of 128 where MetaSchedule writes ``[1, 4, 2, 2, 8]``): GBDT
  within-task PCA 0.894 -> 0.874. The slots still differ by that one factor between the sources; giving Ansor its
  outermost factor (extent / product) would align them without the loss, and change every Ansor feature and so
  every Ansor number measured so far;
- counting only the steps that become tokens in ``log_n_steps``: no gain (0.896 either way).

What stays different: the tile slots above.

MetaSchedule's Fuse and Reorder name the loops they take, and the reader keeps how many (one -1 per loop, as a
list: ``readers.MS_LOOP_LIST_KINDS``; Ansor's FU and RE list their iterators). The tokens do not read that count
(``log_list_items`` is 0 for them, as in version 2): tried as a version 3 (session 32; bennu's Fuse takes 1 to 4
loops, its Reorder 4 to 29), measured on bennu-a100-resnet34 (split seeds 0-2, model seed 0; a ``/tmp`` script
over ``train_model`` / ``evaluate_model``, both versions' trees side by side), mean PCA / top-1, without -> with the
count: within-task GBDT 0.898 / 0.968 -> 0.899 / 0.970, attention 0.913 / 0.983 -> 0.917 / 0.985 (PCA up in all six
runs); a fifth of the tasks held out (four test tasks a split) GBDT 0.723 / 0.942 -> 0.720 / 0.910, attention
0.790 / 0.939 -> 0.777 / 0.932 (PCA -1.6, -2.1 and -0.1 points by split); and ``hybrid`` pruning at 0.45 over ten
seeds (``benchmarks/prune.py ... --seeds 0-9 --ratios 0.45 0.7 --methods hybrid random``) top-1 against full data
+0.19 -> -1.06 points (the issue's 0.45 bar met -> not met; PCA -0.01 -> -0.12, at 0.7 -1.58 -> -1.54). A loop count
mostly tells one task's loop nest from another's, which helps within a task and misleads on tasks never trained on.

Version 2 against version 1 on bennu-a100-resnet34 (20,112 real A100 programs; split seeds 0-2, model seed 0;
throwaway ``/tmp`` script over ``train_model`` / ``evaluate_model``), mean PCA / top-1: within-task GBDT 0.898 /
0.968 -> 0.899 / 0.971, attention 0.912 / 0.983 -> 0.915 / 0.976; a fifth of the tasks held out GBDT 0.732 / 0.929
-> 0.720 / 0.939, attention 0.777 / 0.939 -> 0.794 / 0.925. On the embedded CPU sample (within-task, split seeds
0-4) GBDT 0.722 / 0.729 -> 0.719 / 0.745, attention 0.691 / 0.755 -> 0.695 / 0.782: the same within the seeds'
spread, with the primitives now meaning the same from both sources. Ansor's tokens and flat features are
bit-identical between the versions (sha256 over the 215,042 real Ansor records).

Token vector (``TOKEN_DIM`` floats): one-hot primitive (``PRIMS``), one-hot loop annotation (``ANNOTATIONS``) and
numeric parameters (``NUMERIC``): log2(1+extent), log2 of up to five tile lengths, log2(1+unroll value), the stage
index / 16, log2(1+number of list items). Sequences are cropped/padded to ``SEQ_LEN`` tokens with a mask.
``FEATURE_VERSION`` changes whenever any of this changes; models record it and refuse other versions.
"""
from __future__ import annotations

import re

import numpy as np
import polars as pl

from .readers import MS_LOOP_LIST_KINDS

PRIMS = ["split", "follow_split", "reorder", "fuse", "annotation", "compute_at", "compute_root", "inline",
         "cache_read", "cache_write", "rfactor", "pragma", "storage_align", "bind", "sample", "tensorize"]
ANNOTATIONS = ["unroll", "vectorize", "parallel", "vthread", "block_bind", "thread_bind", "tensorize"]
NUMERIC = ["log_extent", "log_len1", "log_len2", "log_len3", "log_len4", "log_len5", "log_unroll", "stage",
           "log_list_items"]
SEQ_LEN = 64
TOKEN_DIM = len(PRIMS) + len(ANNOTATIONS) + len(NUMERIC)
FEATURE_VERSION = f"tok2-L{SEQ_LEN}-D{TOKEN_DIM}"

# step kind (Ansor short name or MetaSchedule instruction) -> primitive; absent kinds are dropped
ANSOR_KIND_TO_PRIM = {
    "SP": "split", "FSP": "follow_split", "FFSP": "follow_split", "RE": "reorder", "FU": "fuse",
    "AN": "annotation", "CA": "compute_at", "CR": "compute_root", "CI": "inline", "CHR": "cache_read",
    "CHW": "cache_write", "RF": "rfactor", "PR": "pragma", "SA": "storage_align",
}
KIND_TO_PRIM = {
    **ANSOR_KIND_TO_PRIM,
    # MetaSchedule (Annotate by its key: MS_ANNOTATE)
    "SamplePerfectTile": "split", "SamplePartitionedTile": "split", "Reorder": "reorder", "Fuse": "fuse",
    "Parallel": "annotation", "Vectorize": "annotation", "Unroll": "annotation", "Bind": "annotation",
    "ComputeAt": "compute_at", "ReverseComputeAt": "compute_at", "ComputeInline": "inline",
    "ReverseComputeInline": "inline", "CacheRead": "cache_read", "CacheWrite": "cache_write",
    "ReindexCacheRead": "cache_read", "ReindexCacheWrite": "cache_write", "RFactor": "rfactor",
    "StorageAlign": "storage_align", "SampleCategorical": "sample",
    "SampleComputeLocation": "sample", "Tensorize": "tensorize", "Blockize": "tensorize",
}
# Ansor IteratorAnnotation enum -> annotation
ANSOR_ANN = {1: "unroll", 2: "vectorize", 3: "parallel", 4: "vthread", 5: "block_bind", 6: "thread_bind",
             7: "block_bind", 8: "thread_bind", 9: "block_bind", 10: "thread_bind", 11: "tensorize"}
MS_ANN = {"Parallel": "parallel", "Vectorize": "vectorize", "Unroll": "unroll", "Tensorize": "tensorize"}
TOKEN_KINDS = frozenset(KIND_TO_PRIM) | {"Annotate"}  # the step kinds that become tokens (Annotate: by its key)
# MetaSchedule Annotate key -> (primitive, annotation); a key not here is a pragma without a depth
MS_ANNOTATE = {
    "meta_schedule.parallel": ("annotation", "parallel"), "meta_schedule.vectorize": ("annotation", "vectorize"),
    "meta_schedule.unroll_explicit": ("pragma", None), "meta_schedule.unroll_implicit": ("pragma", None),
    "pragma_auto_unroll_max_step": ("pragma", None),
}

# Operator classes, matched in this order against a workload name / task description / folder name.
OP_CLASS_RULES = [
    # before dense: a sparse_dense (TVM's sparse x dense matmul) is not a dense layer; classing it dense was a guess
    ("sparse", re.compile(r"sparse", re.I)),
    ("depthwise", re.compile(r"depthwise|dwconv", re.I)),
    ("batch_matmul", re.compile(r"batch_matmul|bmm|batch_dense", re.I)),
    ("conv2d", re.compile(r"conv2d|conv3d|conv1d|(^|[_/+])conv($|[_/+])|winograd", re.I)),
    ("dense", re.compile(r"dense|matmul|gemm|(^|[_/+])mm($|[_/+])|linear", re.I)),
    ("pooling", re.compile(r"pool", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    # normalisation layers name themselves (TOPI's rms_norm, layer_norm, group_norm, ...): a reduction over the
    # normalised axes and an elementwise scale, a schedule space of its own (MLC-LLM's Relax databases)
    ("norm", re.compile(r"(^|[_/+])(rms|layer|group|instance|batch)_?norm($|[_/+])", re.I)),
    ("reduction", re.compile(r"reduc|(^|[_/+])(sum|mean|argmax|argmin)($|[_/+])", re.I)),
    ("elementwise", re.compile(r"elementwise|(^|[_/+])(T_)?(add|relu|multiply|subtract|divide|exp|sigmoid|tanh|"
                               r"cast|clip|layout_transform|bias_add)($|[_/+])", re.I)),
    # data movement, TVM's "injective" op pattern (and TE tag) short of elementwise: each output element reads one
    # input element at a computed index. Last, so an op fused with any of the above takes that class
    ("injective", re.compile(r"(^|[_/+])(T_)?(injective|reshape|squeeze|transpose|take|expand_dims|strided_slice|"
                             r"concatenate|gather|gather_nd|scatter|scatter_nd|batch_flatten|broadcast_to)($|[_/+])",
                             re.I)),
]
OP_CLASSES = [c for c, _ in OP_CLASS_RULES] + ["unknown"]


def classify_operator(name: str | None) -> str | None:
    if not name:
        return None
    for cls, rx in OP_CLASS_RULES:
        if rx.search(name):
            return cls
    return None


def operator_classes(tasks: pl.DataFrame, task_desc: dict[str, str] | None = None) -> pl.DataFrame:
    """One operator class per task: from the workload name, else the network_info task description, else the
    folder the log came from; ``unknown`` when none of them says (no guessing). ``op_rule`` records which rule.

    ``tasks`` needs columns task_id, workload_name, workload_key, source_file.
    """
    rows = []
    for tid, wname, wkey, src in tasks.select("task_id", "workload_name", "workload_key", "source_file").unique(
            "task_id", keep="first", maintain_order=True).iter_rows():
        cls, rule = classify_operator(wname), "workload-name"
        if cls is None and task_desc and wkey in task_desc:
            cls, rule = classify_operator(task_desc[wkey]), "task-desc"
        if cls is None and src and "/" in src:
            for folder in reversed(src.split("/")[:-1]):
                cls = classify_operator(folder)
                if cls:
                    rule = "folder"
                    break
        if cls is None:
            cls, rule = "unknown", "none"
        rows.append((tid, cls, rule))
    return pl.DataFrame(rows, schema={"task_id": pl.Utf8, "op_class": pl.Utf8, "op_rule": pl.Utf8}, orient="row")


def dataset_operator_classes(tasks: pl.DataFrame, dataset) -> pl.DataFrame:
    """``operator_classes`` of a dataset's records, with the task descriptions of its networks table (a TenSet key
    names no operator: the compute DAG's operations do, ``netinfo.dag_description``)."""
    from .netinfo import dataset_task_descriptions

    return operator_classes(tasks, dataset_task_descriptions(dataset) if dataset is not None else None)


def _log2p(x: pl.Expr) -> pl.Expr:
    return (x.cast(pl.Float64).clip(lower_bound=0) + 1).log(2)


def token_tensor(steps: pl.Series, seq_len: int = SEQ_LEN) -> tuple[np.ndarray, np.ndarray]:
    """Schedule tokens for each record: float32 [N, seq_len, TOKEN_DIM] and a bool mask [N, seq_len].

    Vectorised: the steps of all records are exploded into one table, mapped with Polars expressions and scattered
    into the tensor with numpy; no Python loop over steps.
    """
    n = len(steps)
    tokens = np.zeros((n, seq_len, TOKEN_DIM), dtype=np.float32)
    mask = np.zeros((n, seq_len), dtype=bool)
    if n == 0:
        return tokens, mask
    ex = _kept_steps(steps).filter(pl.col("pos") < seq_len)
    if ex.height == 0:
        return tokens, mask
    lens = pl.col("lists").list.first()
    ann = (
        pl.when(pl.col("kind") == "AN").then(
            pl.col("ints").list.get(2, null_on_oob=True).replace_strict(ANSOR_ANN, default=None))
        .when(pl.col("kind").is_in(list(MS_ANN))).then(pl.col("kind").replace_strict(MS_ANN, default=None))
        .when(pl.col("kind") == "Annotate").then(pl.col("ms_ann"))
        .when(pl.col("kind") == "Bind").then(
            pl.when(pl.col("strs").list.first().str.contains("threadIdx")).then(pl.lit("thread_bind"))
            .when(pl.col("strs").list.first().str.contains("vthread")).then(pl.lit("vthread"))
            .otherwise(pl.lit("block_bind")))
        .otherwise(None)
    )
    unroll = (
        pl.when(pl.col("kind") == "PR").then(
            pl.col("strs").list.first().str.extract(r"\$(\d+)$").cast(pl.Float64, strict=False))
        .when(pl.col("kind") == "Annotate").then(pl.col("ms_unroll"))
        .otherwise(None)
    )
    is_split = pl.col("prim") == "split"
    extent = (pl.when(pl.col("kind") == "SP").then(pl.col("ints").list.get(2, null_on_oob=True).cast(pl.Float64))
              .when(pl.col("kind") == "SampleCategorical").then(pl.col("ms_sampled"))
              .when(pl.col("kind").is_in(["SamplePerfectTile", "SamplePartitionedTile"]))
              .then(lens.list.eval(pl.element().cast(pl.Float64).clip(lower_bound=1)).list.eval(
                  pl.element().log()).list.sum().exp())
              .otherwise(None))
    cols = [
        pl.col("rid"), pl.col("pos"),
        pl.col("prim").replace_strict({p: i for i, p in enumerate(PRIMS)}, return_dtype=pl.Int32).alias("prim_i"),
        ann.replace_strict({a: i for i, a in enumerate(ANNOTATIONS)}, default=None, return_dtype=pl.Int32)
        .alias("ann_i"),
        _log2p(extent).fill_null(0).alias("log_extent"),
    ]
    for j in range(5):
        cols.append(pl.when(is_split).then(_log2p(lens.list.get(j, null_on_oob=True))).otherwise(None)
                    .fill_null(0).alias(f"log_len{j + 1}"))
    cols += [
        _log2p(unroll).fill_null(0).alias("log_unroll"),
        (pl.when(pl.col("kind").is_in(list(ANSOR_KIND_TO_PRIM))).then(pl.col("ints").list.first()).otherwise(None)
         .cast(pl.Float64).fill_null(0) / 16.0).alias("stage"),
        pl.when(pl.col("kind").is_in(list(MS_LOOP_LIST_KINDS))).then(0.0)  # not read: the module docstring
        .otherwise(_log2p(pl.col("lists").list.eval(pl.element().list.len()).list.sum().fill_null(0)))
        .alias("log_list_items"),
    ]
    t = ex.select(cols)
    rid = t["rid"].to_numpy().astype(np.int64)
    pos = t["pos"].to_numpy().astype(np.int64)
    tokens[rid, pos, t["prim_i"].to_numpy()] = 1.0
    ann_i = t["ann_i"].to_numpy()
    has = ~np.isnan(ann_i.astype(np.float64)) if ann_i.dtype.kind == "f" else np.ones(len(ann_i), bool)
    if t["ann_i"].null_count():
        has = t["ann_i"].is_not_null().to_numpy()
    tokens[rid[has], pos[has], len(PRIMS) + t["ann_i"].to_numpy()[has].astype(np.int64)] = 1.0
    base = len(PRIMS) + len(ANNOTATIONS)
    for j, name in enumerate(NUMERIC):
        tokens[rid, pos, base + j] = t[name].to_numpy().astype(np.float32)
    mask[rid, pos] = True
    return tokens, mask


def _kept_steps(steps: pl.Series) -> pl.DataFrame:
    """Every record's steps that become tokens, exploded (``rid``: the record, ``pos``: the token's position), with
    ``prim`` and the MetaSchedule columns (module docstring): ``ms_sampled``, a SampleCategorical's chosen value;
    for an Annotate, read by its key, ``ms_ann`` and ``ms_unroll``, the unroll depth from the SampleCategorical just
    before an unroll Annotate (the rule samples it there and annotates at once) or from its literal."""
    ex = pl.DataFrame({"steps": steps}).with_row_index("rid").explode("steps").drop_nulls("steps").unnest("steps")
    sampled = (pl.when(pl.col("kind") == "SampleCategorical")
               .then(pl.col("lists").list.first().list.get(pl.col("ints").list.last().fill_null(0), null_on_oob=True))
               .otherwise(None).cast(pl.Float64))
    if not ex["kind"].is_in(["Annotate", "SampleCategorical"]).any():  # an Ansor log: the plain mapping
        return (ex.with_columns(pl.col("kind").replace_strict(KIND_TO_PRIM, default=None).alias("prim"),
                                pl.lit(None, pl.Utf8).alias("ms_ann"), pl.lit(None, pl.Float64).alias("ms_unroll"),
                                pl.lit(None, pl.Float64).alias("ms_sampled"))
                .drop_nulls("prim").with_columns(pl.int_range(pl.len()).over("rid").alias("pos")))
    key = pl.col("strs").list.last()
    ex = ex.with_columns(
        sampled.alias("ms_sampled"),
        pl.when(pl.col("kind") == "Annotate")
        .then(key.replace_strict({k: p for k, (p, _) in MS_ANNOTATE.items()}, default="pragma"))
        .otherwise(pl.col("kind").replace_strict(KIND_TO_PRIM, default=None)).alias("prim"),
        pl.when(pl.col("kind") == "Annotate")
        .then(key.replace_strict({k: a for k, (_, a) in MS_ANNOTATE.items() if a}, default=None))
        .alias("ms_ann"),
        pl.when((pl.col("kind") == "Annotate") & key.is_in([k for k, (p, _) in MS_ANNOTATE.items() if p == "pragma"]))
        .then(pl.coalesce(sampled.shift(1).over("rid"), pl.col("ints").list.first().cast(pl.Float64)))
        .alias("ms_unroll"),
    )
    return ex.drop_nulls("prim").with_columns(pl.int_range(pl.len()).over("rid").alias("pos"))


FLAT_NAMES = (
    [f"n_{p}" for p in PRIMS] + [f"n_{a}" for a in ANNOTATIONS] + [f"mean_{x}" for x in NUMERIC]
    + [f"max_{x}" for x in NUMERIC] + ["log_n_steps"] + [f"wl_arg{i}" for i in range(8)]
)


def flat_features(tokens: np.ndarray, mask: np.ndarray, n_steps: np.ndarray, workload_args: pl.Series) -> np.ndarray:
    """Flat summary features for clustering and tree models: counts per primitive and annotation, mean and max of
    each numeric token parameter (tile-factor statistics, unroll depth), log step count, workload numeric args."""
    k = len(PRIMS) + len(ANNOTATIONS)
    counts = tokens[:, :, :k].sum(1)
    num = tokens[:, :, k:]
    m = mask[:, :, None]
    denom = np.maximum(mask.sum(1, keepdims=True), 1)
    mean = (num * m).sum(1) / denom
    mx = np.where(m, num, 0).max(1)
    wl = np.zeros((len(tokens), 8), np.float32)
    if len(workload_args):
        lst = workload_args.list.head(8).to_list()
        for i, a in enumerate(lst):
            if a:
                wl[i, : len(a)] = np.log2(1 + np.clip(np.asarray(a, np.float64), 0, None))
    return np.concatenate([counts, mean, mx, np.log2(1 + n_steps.astype(np.float32))[:, None], wl], axis=1).astype(
        np.float32)


TASK_RELATIVE_EPS = 1e-3


def task_relative(flat: np.ndarray, task_ids: np.ndarray, eps: float = TASK_RELATIVE_EPS) -> np.ndarray:
    """Each flat feature standardised within its task: ``(x - mean_task) / (std_task + eps)`` over the records given
    together (a task's training records when fitting; the records or candidates being ranked when predicting). A
    ranking inside a task only needs how a program differs from its peers, and that difference ("more unrolling
    than the other candidates", "a smaller inner tile") carries over to operators and hardware a model has not seen,
    where the raw values lie outside the training range. Measured with the GBDT ranker on the real GPU logs
    (``benchmarks/model_splits.py``, depthwise held out): top-1 0.513 with the raw features, 0.799 with raw plus
    these (random selection 0.653). A feature constant within a task is 0; a task of one record is all 0."""
    flat = np.asarray(flat, np.float32)
    out = np.zeros_like(flat)
    if len(flat) == 0 or flat.shape[1] == 0:
        return out
    from .metrics import task_slices

    order, _, starts, counts = task_slices(task_ids)
    x = flat[order].astype(np.float64)
    rep = np.repeat(np.arange(len(starts)), counts)
    mu = np.add.reduceat(x, starts, axis=0) / counts[:, None]
    dev = x - mu[rep]
    sd = np.sqrt(np.add.reduceat(dev * dev, starts, axis=0) / counts[:, None])
    out[order] = dev / (sd[rep] + eps)
    return out


def task_centred_tokens(tokens: np.ndarray, mask: np.ndarray, task_ids: np.ndarray) -> np.ndarray:
    """Each schedule token minus the mean token of its task at the same position (over the task's records that have
    a real token there, given together as for ``task_relative``); padding stays 0. The token-level counterpart of
    ``task_relative``: what this program's step at position i does differently from its task's other programs there
    (a longer inner split, another unroll depth). The attention ranker reads it next to the raw tokens
    (``token_relative``). Measured with ``benchmarks/model_splits.py`` splits (attention, seed 0, 24 epochs): depthwise
    held out top-1 0.633 -> 0.751 (random 0.653); K80 -> MI50 zero-shot top-1 0.792 -> 0.824.

    Dense: as large as ``tokens``. Training keeps ``TaskCentredTokens`` instead, which holds one mean token sequence
    per task and centres the rows a batch needs, with the same float32 operations (so the same bits)."""
    return np.asarray(TaskCentredTokens.of(tokens, mask, task_ids))


class TaskCentredTokens:
    """``task_centred_tokens`` without its dense array: the mean token sequence of each task (``mean``, float32
    ``[T, L, D]``) and the task of every record (``row``, indices into ``mean``). ``take(tokens, mask, rows, lmax)``
    centres the given rows only. Indexing with a record mask or index array (``training._part``) keeps ``mean`` and
    selects rows; ``len``, ``shape`` and ``np.asarray`` (the dense array) behave like the dense array's.

    It exists for memory: the dense array is as large as the token tensor (8 KB a record at 64 x 32 float32), and
    training held it next to the tokens and again in the copy of its training part (``benchmarks/train_memory.py``).
    The price is the centring of every batch: inference on 50k K80 records, 2 threads, best of 8 runs in one process,
    146k records/s against 163k with the dense array."""

    def __init__(self, mean: np.ndarray, row: np.ndarray, tokens: np.ndarray | None = None,
                 mask: np.ndarray | None = None, src_rows: np.ndarray | None = None):
        self.mean = mean
        self.row = np.asarray(row, np.int64)
        # the tokens and mask it was made from (references, not copies) and, for a selection of records, which of
        # their rows it holds: only np.asarray(self) reads them
        self._tokens, self._mask, self._src_rows = tokens, mask, src_rows

    @classmethod
    def of(cls, tokens: np.ndarray, mask: np.ndarray, task_ids: np.ndarray) -> "TaskCentredTokens":
        tokens = np.asarray(tokens, np.float32)
        mask = np.asarray(mask, np.bool_)
        if len(tokens) == 0:
            return cls(np.zeros((0,) + tokens.shape[1:], np.float32), np.zeros(0, np.int64), tokens, mask)
        from .metrics import task_slices

        order, _, starts, counts = task_slices(task_ids)
        mean = np.empty((len(starts),) + tokens.shape[1:], np.float32)
        row = np.empty(len(tokens), np.int64)
        for j, (s0, c) in enumerate(zip(starts, counts)):
            idx = order[s0:s0 + c]
            m = np.asarray(mask[idx], np.float32)[:, :, None]
            mu = (tokens[idx] * m).sum(0, dtype=np.float64) / np.maximum(m.sum(0), 1.0)  # float64: order-independent
            mean[j] = mu.astype(np.float32)
            row[idx] = j
        return cls(mean, row, tokens, mask)

    def take(self, tokens: np.ndarray, mask: np.ndarray, rows, lmax: int) -> np.ndarray:
        """The centred tokens of ``rows`` (an index array or slice of the records), cropped to ``lmax`` positions;
        ``tokens`` and ``mask`` are the records' full arrays, row for row with this object."""
        t = tokens[rows, :lmax]
        m = np.asarray(mask[rows, :lmax], np.float32)[:, :, None]
        return (t - self.mean[self.row[rows], :lmax]) * m

    @property
    def shape(self) -> tuple:
        return (len(self.row),) + self.mean.shape[1:]

    def __len__(self) -> int:
        return len(self.row)

    def __getitem__(self, rows) -> "TaskCentredTokens":
        src = np.arange(len(self.row)) if self._src_rows is None else self._src_rows
        return TaskCentredTokens(self.mean, self.row[rows], self._tokens, self._mask, src[rows])

    def __array__(self, dtype=None, copy=None):
        if self._tokens is None:
            raise ValueError("TaskCentredTokens made without its tokens cannot be made dense; use take()")
        if len(self.row) == 0:
            return np.zeros(self.shape, dtype or np.float32)
        rows = slice(None) if self._src_rows is None else self._src_rows
        out = self.take(self._tokens[rows], self._mask[rows], slice(None), self.mean.shape[1])
        return out if dtype is None else out.astype(dtype)


class RowView:
    """Some records of a large per-record array (the token tensor), without copying them: ``base`` and the selected
    record indices ``rows``. ``view[rows2, ...]`` reads ``base[rows[rows2], ...]`` (a batch: a small copy),
    ``RowView(view, rows2)`` is a view of a selection of the view, ``np.asarray(view)`` copies the whole selection,
    and ``len`` / ``shape`` / ``dtype`` / ``ndim`` are those of the selection. ``training._part`` hands the rankers
    their training part of the token tensor this way: a copy of it was the largest allocation of training after the
    tensor itself (``benchmarks/train_memory.py``)."""

    def __init__(self, base: np.ndarray, rows):
        rows = np.arange(len(base))[rows] if not isinstance(rows, np.ndarray) or rows.dtype == np.bool_ else rows
        if isinstance(base, RowView):  # a view of a view reads the same base array
            self.base, self.rows = base.base, base.rows[rows]
        else:
            self.base, self.rows = base, np.asarray(rows, np.int64)

    def __getitem__(self, key):
        if isinstance(key, tuple):
            return self.base[(self.rows[key[0]],) + key[1:]]
        return self.base[self.rows[key]]

    @property
    def shape(self) -> tuple:
        return (len(self.rows),) + self.base.shape[1:]

    @property
    def dtype(self):
        return self.base.dtype

    @property
    def ndim(self) -> int:
        return self.base.ndim

    def __len__(self) -> int:
        return len(self.rows)

    def __array__(self, dtype=None, copy=None):
        out = self.base[self.rows]
        return out if dtype is None else out.astype(dtype)


def featurize(df: pl.DataFrame, seq_len: int = SEQ_LEN) -> dict:
    """Arrays the models train on: tokens, mask, flat features (keys as model.py expects)."""
    tokens, mask = token_tensor(df["steps"], seq_len)
    flat = flat_features(tokens, mask, df["n_steps"].to_numpy(), df["workload_args"])
    return {"tokens": tokens, "mask": mask, "flat": flat}
