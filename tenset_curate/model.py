"""Learned cost models (rankers) for tensor programs: attention, TenSet-MLP and LightGBM.

All three share one interface and are trained on numpy arrays (produced by ``features.py``)::

    data = {
        "tokens":   float32 [N, L, D]  schedule tokens, padded            (AttentionRanker)
        "mask":     bool    [N, L]     True = real token                  (AttentionRanker)
        "flat":     float32 [N, F]     flat summary features              (all; optional for attention)
        "task_ids": int64   [N]        group ids (a task = workload x target)
        "labels":   float32 [N]        TenSet throughput labels in [0, 1], higher is better
    }

    model = AttentionRanker(epochs=30, seed=0, feature_version="v3", data_manifest_hash=h)
    model.fit(train, valid)                  # early stopping on validation PCA (best state kept)
    scores = model.predict(test)             # float64 [N]; higher = predicted faster
    model.evaluate(test)                     # metrics.evaluate_predictions(...)
    model.save("models/attn")                # model.pt (state_dict) + config.json
    m = load_model("models/attn", expected_feature_version="v3")

Model directory
    ``config.json``: ``kind``, ``format_version``, ``hparams``, ``input_dims``,
    ``feature_version`` and ``data_manifest_hash`` (both given by the caller, stored verbatim),
    ``history`` (per-epoch / per-eval metrics), ``best_epoch``; plus the weights: ``model.pt``
    (``torch.save(state_dict)``; loaded ONLY with ``torch.load(..., weights_only=True)``, so a
    checkpoint carrying pickled code is refused with ``ModelLoadError``) or ``model.txt``
    (LightGBM text model). ``load(dir, expected_feature_version=...)`` raises
    ``ModelMismatchError`` naming both versions when they differ; inputs whose dimensions differ
    from the trained ones are refused the same way.

Loss (neural rankers)
    ``loss="lambdarank"`` (the MLP's default): TenSet's ``LambdaRankLoss``
    (``python/tvm/auto_scheduler/cost_model/mlp_model.py``, the default ``loss_type`` of TenSet's
    ``MLPModelInternal``; allRank's "lambdaRank" weighting scheme): rank the group by the
    predictions; gains ``G = (2^y - 1) / maxDCG``, discounts ``D = log2(1 + position)``; for every
    pair with ``y_i > y_j`` add ``|1/D_i - 1/D_j| * |G_i - G_j| * -log2(sigmoid(sigma (s_i - s_j)))``;
    summed over pairs. Differences from TenSet: (1) the loss is computed INSIDE each task (a
    batch holds ``tasks_per_batch`` tasks with up to ``records_per_task`` records each; the batch
    loss is the mean over its tasks of the per-task sum) whereas TenSet computes it over a
    shuffled batch of 512 records mixed across tasks (``batching="mixed"`` reproduces that);
    (2) ``-log2(sigmoid(x))`` is evaluated as ``softplus(-x) / ln 2`` instead of TenSet's
    ``log2(clamp(sigmoid(x), 1e-10) ** w)`` (same value, no gradient cut-off below x = -23).
    ``loss="ranknet"``: mean over pairs ``y_i > y_j`` of ``softplus(-(s_i - s_j))`` (RankNet).
    ``loss="ranknet+lambdarank"`` (the attention model's default): RankNet + ``lambdarank_weight`` x
    LambdaRank (RankNet's all-pairs objective is what PCA counts; the LambdaRank term weights the
    top of each task's list). The attention model's weight is the hyperparameter ``lambdarank_weight``
    (``LAMBDARANK_WEIGHT`` = 0.05). Measured with ``benchmarks/attention_loss.py --weights W --seeds
    0 1 2`` on the splits of ``benchmarks/model_splits.py`` (24 epochs, one thread; mean PCA / top-1 /
    top-5, weight 0.05 -> 0.25; reports/model_splits.md, "The LambdaRank weight"): within_k80
    0.869 / 0.969 / 0.991 -> 0.865 / 0.972 / 0.992 (top-1 per seed 0.972 / 0.973 / 0.962 -> 0.972 /
    0.972 / 0.971); k80_mi50_fs10 0.839 / 0.915 / 0.960 -> 0.842 / 0.925 / 0.966; but top-1 falls
    wherever the test programs are unlike the training ones: six held-out task sets 0.912 -> 0.900
    (three of six under 0.90), depthwise held out 0.779 -> 0.761, zero-shot MI50 0.854 -> 0.840. The
    heavier term learns the top of the training tasks' lists. So the model's own default stays 0.05,
    and ``training.fit_on_frame`` (``curate train``) picks the weight from the split: 0.25 when most
    test records are of tasks that train (``training.lambdarank_weight_for``; checked on six more
    real splits, reports/model_splits.md "The LambdaRank weight by split").

GBDT
    LightGBM ``lambdarank`` (or ``rank_xendcg``) grouped by task. These objectives need integer
    relevance grades: by default (``grade_mode="quantile"``) each record gets
    ``floor(n_grades * rank_lo / n)`` where ``rank_lo`` is the number of records of its task with a
    strictly smaller label, i.e. within-task quantile buckets 0..n_grades-1 (ties share a grade,
    the best record is in the top grade); ``grade_mode="linear"`` uses
    ``min(floor(label * n_grades), n_grades - 1)`` (labels are relative to the task's best).
    ``label_gain`` defaults to the linear gain ``[0, 1, ..., n_grades-1]`` (LightGBM's default
    ``2^g - 1`` over-weights the top bucket and hurts pairwise accuracy). Tasks are cut into random
    sub-groups of at most ``max_group_size`` records (64, the same as ``lambdarank_truncation_level``,
    so every pair of a sub-group counts, as in PCA). With sub-groups of up to 2000 (the earlier
    default, only LightGBM's 10000-row query limit in mind) lambdarank optimised the top 64 of long
    lists and all-pairs accuracy suffered: roller-k80 within-task PCA 0.764 -> 0.816, top-1 0.952 ->
    0.965, training 287 s -> 21 s (``benchmarks/model_splits.py``); the price is top-1 across
    hardware (K80 -> MI50 with 10% of MI50: 0.911 -> 0.863; zero-shot 0.532 -> 0.509). Early stopping uses the
    validation PCA (computed every ``eval_every`` rounds from LightGBM's incremental scores).

Within-task features (``task_relative``, on by default for attention and GBDT, off for TenSet's MLP)
    The flat features are given twice: as they are, and standardised within each task
    (``features.task_relative``: how a program differs from the other programs of its task). A ranking inside a task
    needs only that difference, and it carries over to hardware and operators the model has not seen, where the raw
    values fall outside the training range. The statistics come from ``data["flat_rel"]`` when the caller computed
    them over a task's whole record set (``training.arrays``), else from the records given together
    (``task_relative_inputs``). Measured with ``benchmarks/model_splits.py`` (seed 0; see reports/model_splits.md):
    GBDT K80 -> MI50 zero-shot PCA / top-1 / top-5 0.632 / 0.509 / 0.715 -> 0.720 / 0.816 / 0.905, attention
    0.727 / 0.512 / 0.781 -> 0.743 / 0.792 / 0.911; depthwise held out, GBDT top-1 0.513 -> 0.799 (random 0.653),
    attention 0.239 -> 0.633; within-task K80 attention 0.860 / 0.967 -> 0.864 / 0.970, GBDT PCA 0.816 -> 0.827;
    K80 + 10% MI50, attention PCA 0.821 -> 0.816 (top-1 0.777 -> 0.872).
    Directories saved before the option existed load with it off (``_legacy_hparams``) and predict as before.
    ``predict`` needs ``task_ids`` (or ``flat_rel``) for such a model.

Tokens centred within the task (``token_relative``, attention only, on by default)
    The same idea one level down: every schedule token is given twice, as it is and minus the mean token of its task
    at the same position (``features.task_centred_tokens``; ``data["tok_rel"]`` from ``training.arrays`` over the
    task's whole record set, else from the records given together, grouped by ``task_ids``). The attention layers
    then see which steps of a program differ from its task's other candidates, not only the flat summary of that
    difference. Measured on the transfer splits (``benchmarks/attention_variants.py``, seed 0, 24 epochs; PCA /
    top-1 / top-5): K80 -> MI50 zero-shot 0.743 / 0.792 / 0.911 -> 0.754 / 0.824 / 0.907; depthwise held out
    0.597 / 0.633 / 0.785 -> 0.645 / 0.751 / 0.833 (random top-1 0.653). Directories saved before it existed load
    with it off. The centred tokens are held as ``features.TaskCentredTokens`` (one mean sequence per task; each
    batch's rows are centred when the batch is built, with the same float32 operations as the dense array), and the
    training part reads the token tensor through a ``features.RowView`` instead of a copy: with a dense copy of the
    centred tokens and a copied training part, training on 172k real records peaked at 6.4 GB, now 3.4 GB
    (``benchmarks/train_memory.py``, same run).

Workload arguments (``workload_args``; attention only, off by default)
    The flat features end with the workload's numeric arguments (``features.FLAT_NAMES``' ``wl_arg*``: the operator's
    shape). They are the same for every program of a task, so inside a within-task ranking they act only through
    interactions, and for a task the model never saw they are values outside its training range; the loop extents
    the schedule tokens carry (``log_extent`` of every split) already tell the model how a tile fits its loop. The
    attention model reads them as 0 (``without_workload_args``); ``workload_args=True`` gives them back, and
    directories saved before the option existed load with it on. Measured on roller-k80 with a fifth of the tasks
    held out (``reports/model_splits.md``, "Workload arguments"): over three held-out sets x two model seeds PCA /
    top-1 0.787 / 0.904 -> 0.793 / 0.917, top-1 at least 0.905 in all six runs where the arguments let it fall to
    0.881; on ``benchmarks/model_splits.py``'s split ``k80_tasks`` (three seeds) 0.744 / 0.899 -> 0.749 / 0.928. The
    other splits moved by about a seed sd or less (K80 + 10% MI50: top-5 0.967 -> 0.960, sd 0.009; depthwise held
    out: top-1 0.758 -> 0.779).

Positions by primitive (``positions``; attention only, ``"absolute"`` by default)
    With ``"absolute"`` the tokens of each patch of ``patch`` (4) consecutive steps are concatenated, so each slot of
    a patch has its own input weights, plus a learned embedding of the patch's index. That fits the layouts of the
    step sequences the model trains on, and misreads an operator laid out otherwise: Ansor writes a depthwise conv2d
    with one reduction split fewer than a conv2d (36 steps, not 37), which moves every later step one slot on, and a
    pooling's sequence is unlike any other. ``"kind"`` numbers each step by its primitive and how many steps of that
    primitive came before it (``kind_positions``: the 8th split is split #7 wherever it sits), embeds each token with
    one weight matrix, adds a learned embedding of that number, and sums the tokens of a patch: a missing split moves
    only the splits after it. It transfers to held-out operators and costs within a task: measured with
    ``benchmarks/attention_loss.py`` (three seeds; PCA / top-1 / top-5, absolute -> kind) with depthwise held out
    0.656 / 0.779 / 0.879 -> 0.690 / 0.768 / 0.896, pooling held out 0.578 / 0.410 / 0.664 -> 0.897 / 0.950 / 0.971
    (absolute's seeds 0.40 to 0.70 PCA), dense held out 0.651 / 0.869 / 0.943 -> 0.633 / 0.828 / 0.936 (session 22's
    code; since the ``embedding_bag`` below the same seeds train to other weights, and over five seeds kind gives
    0.686 / 0.761 / 0.880, 0.887 / 0.976 / 0.986 and 0.623 / 0.736 / 0.918: reports/model_splits.md, "The operator
    rows on the current code"); seed 0
    within-task roller-k80 0.868 / 0.972 -> 0.852 / 0.966, K80 -> MI50 zero-shot 0.757 / 0.874 -> 0.744 / 0.842,
    unseen tasks 0.748 -> 0.739 PCA (reports/model_splits.md, "Positions by primitive"). So ``training.positions_for``
    (``curate train --positions auto``) picks ``"kind"`` where most test records are of operator classes the model
    does not train on. The bag is linear (``embed(sum of tokens) + sum of ids``), so it cannot tell which split of a
    patch had which tile lengths; a ReLU per token before the sum (each step's parameters read with its id) lifted
    depthwise held out to 0.699 / 0.781 / 0.878 and dropped pooling held out to 0.781 / 0.831 / 0.879 (three seeds,
    session 23): it learns what the training operators' splits mean, which a held-out operator does not share. The
    ids are computed once per dataset (``_feature_arrays``), not per batch; training runs at
    the same rate. The network's forward costs what the absolute one does (the patch sums of the id embeddings are
    one ``embedding_bag``), and ``kind_positions`` costs 0.04 s per 50k records (one counter per record and
    primitive, bumped column by column up to the longest record; the argsort it replaced took 0.09 s). Inference
    (``benchmarks/train.py``, ``attention-kind``, 50k roller-k80 records, 2 threads) went from 0.83x absolute's
    (92.8k against 112.0k records/s) to 0.91x (104.1k against 114.9k), 1.08x its time over alternating passes.
    Directories saved before the option existed load with ``"absolute"``.

Step dropout (``step_dropout``; attention only, 0 by default: off)
    During training, each real token of a record is left out with probability ``step_dropout`` (at least one stays),
    the rest close up and the kind ids are recounted (``AttentionRanker._train_inputs``): the model sees step
    layouts with steps missing, as an operator it never trained on writes them. Measured with
    ``benchmarks/attention_loss.py --splits no_depthwise no_dense no_pooling --seeds 0 1 2 3 4 --hp
    step_dropout=0.1`` (session 31, stopped after pooling's fourth seed; ``positions="kind"`` by the split rule),
    PCA / top-1 / top-5 against the default's five seeds (reports/model_splits.md): depthwise held out 0.697 / 0.768 /
    0.888 against 0.686 / 0.761 / 0.880 (top-1 sd over seeds 0.017 against 0.037; four seeds of five 10 points over a
    random pick, against three);
    dense held out 0.627 / 0.727 / 0.924 against 0.623 / 0.736 / 0.918; pooling held out seeds 0-3 0.849 / 0.947 /
    0.963, 0.871 / 0.925 / 0.995, 0.721 / 0.987 / 0.990 and 0.562 / 0.386 / 0.598, where every seed of the default
    ranks its top-1 at 0.96 or more. With 0.2, depthwise seeds 0-2 0.697 / 0.757 / 0.879. Leaving out split tokens
    only (p 0.2; a throwaway patch of ``_train_inputs``), seed 0: depthwise 0.695 / 0.787 / 0.889, pooling 0.432 /
    0.259 / 0.305. It helps one held-out class and wrecks another, so no split rule turns it on; the option stays
    for experiments.

Fine-tuning (``Ranker.fine_tune``; ``training.fit_on_frame`` calls it for a few-shot split's target hardware)
    A fitted model goes on training on one part of the data alone, typically the records of the hardware it will
    rank: the torch models for ``finetune_epochs`` (8) at ``finetune_lr`` (default: the model's ``lr``) with the same
    LR schedule, keeping the input normalisers of the first fit; LightGBM boosts up to ``finetune_rounds`` (300)
    more trees on top of the fitted trees up to their best iteration (``init_model``). With a validation part, early
    stopping on its PCA keeps the best epoch, and the model before fine-tuning counts as a candidate: fine-tuning
    never ends worse on the validation records than it started (``fine_tuned["best_epoch"]`` is None then).
    ``fine_tuned`` (records, best epoch, seconds, and the hardware ``fit_on_frame`` adds) is saved in config.json.

Reproducibility
    ``seed`` seeds torch (``torch.manual_seed``) and the numpy batch sampler;
    ``deterministic=True`` turns on ``torch.use_deterministic_algorithms`` (warn-only, restored
    after fit/predict); ``num_threads`` sets ``torch.set_num_threads`` for the duration of
    fit/predict (LightGBM: ``num_threads`` + ``deterministic`` + ``force_row_wise``). Two fits
    with the same seed, data, thread count and machine give identical predictions on CPU. For
    bitwise determinism on CUDA also export ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` before start-up.
    The device is taken only from the ``device`` argument (``"cpu"`` or ``"cuda"``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics as _metrics
from .features import FLAT_NAMES, PRIMS, RowView, TaskCentredTokens
from .storage import MODEL_CONFIG, MODEL_WEIGHTS

__all__ = [
    "ModelLoadError",
    "ModelMismatchError",
    "Ranker",
    "AttentionRanker",
    "MLPRanker",
    "GBDTRanker",
    "load_model",
    "kind_positions",
    "lambdarank_loss",
    "ranknet_loss",
]

FORMAT_VERSION = 1
CONFIG_NAME = MODEL_CONFIG
TORCH_WEIGHTS, LGB_WEIGHTS = MODEL_WEIGHTS
POSITIONS = ("absolute", "kind")  # AttentionRanker's ``positions``
KIND_OCCURRENCES = 16  # positions="kind": occurrences of one primitive told apart (later ones share the last)
KIND_CHUNK = 16384  # kind_positions' records per chunk: a [chunk, L, D] float32 slice is 134 MB at L=64, D=32


DEFAULT_EPOCHS = 24  # curate train, train_model and curate run's train step (the attention defaults were tuned at 24)
# the least value each of these hyper-parameters takes (any model that has it)
HPARAM_MINIMUMS = {"epochs": 1, "n_estimators": 1, "finetune_epochs": 0, "finetune_rounds": 0,
                   "lambdarank_weight": 0, "diverse_top_k": 0, "patience": 0, "pair_gap_power": 0}


# the values each of these hyper-parameters takes (any model that has it), checked when the model is made ("auto":
# training decides positions by the split, training.positions_for)
HPARAM_CHOICES = {"lr_schedule": ("cosine", "step", "constant"), "attn_impl": ("sdpa", "math"),
                  "positions": (*POSITIONS, "auto")}


class ModelLoadError(RuntimeError):
    """A model directory cannot be loaded (missing files, unsafe or corrupt weights)."""


class ModelMismatchError(ModelLoadError):
    """The model does not match what the caller expects (feature version, kind, input dims)."""


# ============================================================================================
# data helpers
# ============================================================================================
def _within_task(data: dict, key: str, x: np.ndarray, compute, what: str) -> np.ndarray:
    """``data[key]`` (within-task values the caller computed over whole tasks) checked against ``x``, else
    ``compute(x, task_ids)`` over the records given, grouped by ``data["task_ids"]``."""
    rel = data.get(key)
    if rel is not None:
        if not isinstance(rel, TaskCentredTokens):
            rel = np.asarray(rel, np.float32)
        if rel.shape != x.shape:
            raise ValueError(f"{key} has shape {rel.shape}, expected {x.shape}")
        return rel
    if data.get("task_ids") is None:
        raise ValueError(f"this model {what}: predict needs 'task_ids' (the task of each record; all zeros for "
                         "candidates of one task)")
    t = _as(data, "task_ids", np.int64, 1)
    if len(t) != len(x):
        raise ValueError(f"task_ids has {len(t)} entries for {len(x)} records")
    return compute(x, t)


def task_relative_inputs(data: dict, flat: np.ndarray) -> np.ndarray:
    """``[flat, within-task standardised flat]`` for a model with ``task_relative``. The task statistics come from
    ``data["flat_rel"]`` when the caller computed them over more of each task's records than it scores (``training
    .arrays`` does, over every record of the task in the dataset: features only, no labels), else from the records
    given, grouped by ``data["task_ids"]`` (the verifier's candidates of one task). More records give steadier
    statistics: on roller-k80's within-task split, statistics from the ~30 test records of a task gave GBDT PCA 0.798,
    from all of the task's records 0.827 (raw features 0.816)."""
    from .features import task_relative

    flat = np.asarray(flat, np.float32)
    rel = _within_task(data, "flat_rel", flat, task_relative,
                       "standardises features within tasks (task_relative=True)")
    return np.concatenate([flat, rel], axis=1)


# columns of features.FLAT_NAMES holding the workload's numeric arguments (its shape)
WORKLOAD_ARG_COLUMNS = np.array([i for i, n in enumerate(FLAT_NAMES) if n.startswith("wl_arg")])


DIVERSE_SHARE = 0.04  # diverse picks come from a task's best-scored 4% (at least k; reports/model_splits.md)


def token_rows(tokens, mask: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """[len(rows), L] int ids of the given records' token rows, equal ids for equal rows (value by value) at any
    position; -1 for padding."""
    msk = np.asarray(mask[rows], dtype=bool)
    tok = np.where(msk[:, :, None], np.asarray(tokens[rows], dtype=np.float32), 0) + np.float32(0)  # -0.0 -> 0.0
    n, L, D = tok.shape
    # each row's bytes as one opaque value: unique on them is a byte sort, 25x faster than unique(axis=0)
    _, ids = np.unique(np.ascontiguousarray(tok).reshape(n * L, D).view(np.dtype((np.void, 4 * D))).ravel(),
                       return_inverse=True)
    ids = ids.reshape(n, L).astype(np.int64)
    ids[~msk] = -1
    return ids


def submodular_picks(rows: np.ndarray, k: int) -> list[int]:
    """Positions of ``k`` picks among candidates in the model's order (``rows``: ``token_rows`` of each candidate):
    the first candidate, then each time the candidate with the most token rows no pick has at that position (ties:
    the earlier candidate). AutoTVM's ``submodular_pick`` (tvm/autotvm/tuner/model_based_tuner.py) with a knob per
    token position and its score weight 0, as its ``ModelBasedTuner`` calls it."""
    n, L = rows.shape
    k = min(k, n)
    if k == 0:
        return []
    real = rows >= 0
    covered = np.zeros((L, int(rows.max()) + 2), dtype=bool)  # [position, row id]
    pos = np.broadcast_to(np.arange(L), rows.shape)
    picks, free = [0], np.ones(n, dtype=bool)
    while True:
        p = picks[-1]
        free[p] = False
        covered[np.arange(L)[real[p]], rows[p][real[p]]] = True
        if len(picks) == k:
            return picks
        new = (real & ~covered[pos, np.where(real, rows, 0)]).sum(axis=1)
        new[~free] = -1
        picks.append(int(np.argmax(new)))  # argmax: the first of the ties, i.e. the one the model ranks higher


def diverse_top_k(scores: np.ndarray, task_ids: np.ndarray, tokens, mask: np.ndarray, k: int = 5,
                  share: float = DIVERSE_SHARE) -> np.ndarray:
    """Scores whose order puts, first in each task, ``k`` diverse picks among the task's best-scored ``share`` of
    its records (at least ``k``; ``submodular_picks``: the model's best, then the programs that add the most
    schedule steps the picks do not have yet). Only those records change places, by taking each other's score
    values (the largest value goes to the first pick, and so on): the rest of the order and every score value
    stay, and a task of at most ``k / share`` records keeps its top k as a set.

    Why: on hardware, operators or tasks the model has not trained on, its best-scored programs tend to share one
    habit of the training data (session 9: the zero-shot MI50 picks kept K80's virtual threads on batch and
    channel), so one wrong habit costs all five picks; picks that differ hedge it, as AutoTVM's diversity-aware
    selection of the programs it measures does. Measured in reports/model_splits.md, "Diverse top-5 picks"."""
    out = np.asarray(scores, dtype=np.float64).copy()
    if k < 2:
        return out
    task_order, _, starts, counts = _metrics.task_slices(np.asarray(task_ids))
    for s, c in zip(starts, counts):
        idx = task_order[s: s + c]
        m = min(int(c), max(k, math.ceil(share * c)))
        if m < 2:
            continue
        top = idx[np.argsort(-out[idx], kind="stable")[:m]]
        picks = submodular_picks(token_rows(tokens, mask, top), k)
        chosen = np.zeros(m, dtype=bool)
        chosen[picks] = True
        out[top[picks + list(np.flatnonzero(~chosen))]] = out[top]
    return out


def without_workload_args(flat: np.ndarray) -> np.ndarray:
    """``flat`` (laid out as ``features.FLAT_NAMES``, possibly followed by more columns) with the workload-argument
    columns set to 0, for a model with ``workload_args=False``. The arguments are one task's shape, the same for
    every program of the task: inside a ranking they can only act through interactions with other features, and
    for a task the model has not seen they are values outside its training range. A flat width other than
    ``FLAT_NAMES``' (features the caller made itself) is refused."""
    if flat.shape[1] < len(FLAT_NAMES):
        raise ValueError(f"workload_args=False needs flat features laid out as features.FLAT_NAMES "
                         f"({len(FLAT_NAMES)} columns), got {flat.shape[1]}")
    out = np.array(flat, np.float32, copy=True)
    out[:, WORKLOAD_ARG_COLUMNS] = 0.0
    return out


def kind_positions(tokens, mask: np.ndarray) -> np.ndarray:
    """Position ids for an attention model with ``positions="kind"``: for each real token, ``primitive index *
    KIND_OCCURRENCES + how many tokens of the same primitive came before it`` (the 8th ``split`` of a record is
    ``split #7`` wherever it sits; occurrences from ``KIND_OCCURRENCES - 1`` on share one id); 0 for padding.

    ``tokens``: [N, L, D] with the one-hot primitive first (``features.token_tensor``; a ``features.RowView`` is read
    in chunks, never copied whole); ``mask`` marks the real tokens. Ansor writes a depthwise conv2d with one reduction
    split fewer than a conv2d (36 steps, not 37), which moves every later step one slot on under absolute positions;
    here only the splits after the missing one move."""
    mask = np.asarray(mask, dtype=bool)
    P = len(PRIMS)
    if len(tokens.shape) != 3 or tuple(tokens.shape[:2]) != mask.shape or tokens.shape[2] < P:
        raise ValueError(f"kind_positions needs [N, L, >={P}] tokens (one-hot primitive first) and an [N, L] mask, "
                         f"got {tuple(tokens.shape)} and {mask.shape}")
    N, L = mask.shape
    out = np.zeros((N, L), np.int16)
    code = np.zeros(tokens.shape[2], np.float32)
    code[:P] = np.arange(1, P + 1)  # a dot product with the token reads 1 + its primitive; 0: none (padding)
    for a in range(0, N, KIND_CHUNK):
        m = mask[a: a + KIND_CHUNK]
        used = np.flatnonzero(m.any(axis=0))
        w = int(used[-1]) + 1 if used.size else 0  # columns past the chunk's longest record stay 0
        if w == 0:
            continue
        k = np.rint(np.asarray(tokens[a: a + KIND_CHUNK]) @ code)[:, :w].astype(np.int16)  # whole rows: one GEMV
        k[~m[:, :w]] = 0
        # occurrence = how many earlier tokens of the record have the same primitive: one counter per (record,
        # primitive) in a flat array, read and bumped column by column (w passes over the chunk; an argsort by
        # primitive did the same in twice the time)
        n = len(k)
        slot = k.T.astype(np.int32) + np.arange(n, dtype=np.int32) * (P + 1)  # [w, n]
        count = np.zeros(n * (P + 1), np.int16)
        occ = np.empty((w, n), np.int16)
        for j in range(w):
            c = count[slot[j]]
            occ[j] = c
            count[slot[j]] = c + 1
        occ = np.minimum(occ.T, KIND_OCCURRENCES - 1)
        out[a: a + KIND_CHUNK, :w] = np.where(k > 0, (k - 1) * KIND_OCCURRENCES + occ, 0)
    return out


def token_relative_inputs(data: dict, tokens: np.ndarray, mask: np.ndarray):
    """The tokens centred within their task (``features.task_centred_tokens``) for an attention model with
    ``token_relative``: from ``data["tok_rel"]`` when the caller computed them over a task's whole record set
    (``training.arrays``: a ``features.TaskCentredTokens``, or the dense array), else from the records given, grouped
    by ``data["task_ids"]`` (as a ``TaskCentredTokens``: per-task means, the rows centred batch by batch)."""
    return _within_task(data, "tok_rel", tokens, lambda x, t: TaskCentredTokens.of(x, mask, t),
                        "centres tokens within tasks (token_relative=True)")


def _as(data: dict, key: str, dtype, ndim: int, required: bool = True):
    if key not in data or data[key] is None:
        if required:
            raise KeyError(f"data dict is missing {key!r}")
        return None
    arr = data[key]
    if isinstance(arr, RowView) and arr.dtype == dtype and arr.ndim == ndim:
        return arr  # training's part of the token tensor: stays a view, read batch by batch
    arr = np.asarray(arr)
    if arr.dtype != dtype:
        arr = arr.astype(dtype)
    if arr.ndim != ndim:
        raise ValueError(f"data[{key!r}] must be {ndim}-D, got shape {arr.shape}")
    return arr


def _n_records(arrays: dict) -> int:
    ns = {k: len(v) for k, v in arrays.items() if v is not None}
    if len(set(ns.values())) > 1:
        raise ValueError(f"arrays disagree on the number of records: {ns}")
    return next(iter(ns.values())) if ns else 0


def _task_groups(task_ids: np.ndarray, min_size: int = 2) -> list[np.ndarray]:
    order, _, starts, counts = _metrics.task_slices(task_ids)
    return [order[s: s + c] for s, c in zip(starts, counts) if c >= min_size]


def _plan_epoch(groups: list[np.ndarray], n_records: int, rng: np.random.Generator,
                tasks_per_batch: int, records_per_task: int, batching: str) -> list[list[np.ndarray]]:
    """One epoch = every training record once. ``task``: each task is shuffled and cut into
    near-equal chunks of <= records_per_task; the chunks are shuffled and packed
    ``tasks_per_batch`` per batch. ``mixed`` (TenSet): one global shuffle, batches of
    tasks_per_batch*records_per_task records treated as one ranking group."""
    if batching == "mixed":
        allidx = np.concatenate(groups) if groups else np.zeros(0, np.int64)
        perm = allidx[rng.permutation(allidx.size)]
        bs = tasks_per_batch * records_per_task
        return [[perm[i: i + bs]] for i in range(0, perm.size, bs) if perm[i: i + bs].size >= 2]
    chunks: list[np.ndarray] = []
    for g in groups:
        g = g[rng.permutation(g.size)]
        n_chunks = -(-g.size // records_per_task)
        chunks.extend(np.array_split(g, n_chunks))
    order = rng.permutation(len(chunks))
    chunks = [chunks[i] for i in order]
    return [chunks[i: i + tasks_per_batch] for i in range(0, len(chunks), tasks_per_batch)]


@contextlib.contextmanager
def _torch_env(num_threads: int | None, deterministic: bool):
    """Torch's process-wide settings for one fit or prediction, each put back after: the thread count, the
    deterministic mode, and the random stream (the models seed torch inside; a notebook's ``torch.rand`` after a
    train or an evaluate drew from the model's seed)."""
    import torch

    import torch.utils.deterministic as tdet

    prev_threads = torch.get_num_threads()
    prev_det = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    prev_fill = tdet.fill_uninitialized_memory
    devices = range(torch.cuda.device_count()) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        try:
            if num_threads:
                torch.set_num_threads(int(num_threads))
            if deterministic:
                torch.use_deterministic_algorithms(True, warn_only=True)
                # deterministic mode also NaN-fills every new uninitialised tensor (a debugging aid that
                # does not change results): ~190 fill kernels per training step, off here
                tdet.fill_uninitialized_memory = False
            yield
        finally:
            torch.set_num_threads(prev_threads)
            torch.use_deterministic_algorithms(prev_det, warn_only=prev_warn)
            tdet.fill_uninitialized_memory = prev_fill


def _progress(iterable, enabled: bool, **kw):
    from tqdm.auto import tqdm

    return tqdm(iterable, disable=not _showing(enabled), leave=False, **kw)


def _showing(enabled: bool) -> bool:
    """Whether progress shows: asked for, and a terminal to show it on."""
    return enabled and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


def _epoch_line(enabled: bool, what: str, rec: dict, best: bool) -> None:
    """One line per epoch under the progress bar: the loss and the validation metrics it stops on (they were only
    in config.json's history; the session-30 training audit)."""
    if not _showing(enabled) or "valid_pca" not in rec:
        return
    from tqdm.auto import tqdm

    loss = f"loss {rec['train_loss']:.4f}, " if "train_loss" in rec else ""
    tqdm.write(f"{what}: {loss}valid PCA {rec['valid_pca']:.4f} top-1 {rec['valid_top1']:.4f} top-5 "
               f"{rec['valid_top5']:.4f}" + (" (best so far)" if best else ""), file=sys.stderr)


def _json_safe(obj):
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def _summary(m: dict) -> dict:
    return {k: v for k, v in m.items() if not isinstance(v, dict)}


# ============================================================================================
# losses
# ============================================================================================
def _pad_groups(scores, labels, sizes: np.ndarray):
    """Scatter flat per-record scores/labels into [G, Bmax] with a validity mask."""
    import torch

    g = sizes.size
    bmax = int(sizes.max())
    rows = np.repeat(np.arange(g), sizes)
    cols = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    r = torch.from_numpy(rows).to(scores.device)
    c = torch.from_numpy(cols).to(scores.device)
    S = scores.new_zeros((g, bmax)).index_put((r, c), scores)
    Y = labels.new_zeros((g, bmax)).index_put((r, c), labels)
    M = torch.zeros((g, bmax), dtype=torch.bool, device=scores.device)
    M[r, c] = True
    return S, Y, M


def lambdarank_loss(S, Y, M, sigma: float = 1.0, eps: float = 1e-10):
    """TenSet's LambdaRankLoss on padded groups ``S, Y, M: [G, B]`` (see module docstring).
    Returns the mean over groups of the per-group pair sum, and the number of pairs."""
    import torch
    import torch.nn.functional as F

    G_, B = S.shape
    neg_inf = torch.finfo(S.dtype).min
    _, idx = S.detach().masked_fill(~M, neg_inf).sort(dim=1, descending=True, stable=True)
    m_s = M.gather(1, idx)
    s_s = S.gather(1, idx).masked_fill(~m_s, 0.0)
    y_s = Y.gather(1, idx).masked_fill(~m_s, 0.0).clamp(min=0.0)
    y_ideal, _ = Y.masked_fill(~M, 0.0).clamp(min=0.0).sort(dim=1, descending=True)
    pos = torch.arange(1, B + 1, device=S.device, dtype=S.dtype)
    D = torch.log2(1.0 + pos)[None, :]
    max_dcg = ((torch.pow(2.0, y_ideal) - 1.0) / D).sum(dim=1).clamp(min=eps)
    gain = (torch.pow(2.0, y_s) - 1.0) / max_dcg[:, None]
    weights = (1.0 / D[:, :, None] - 1.0 / D[:, None, :]).abs() * (gain[:, :, None] - gain[:, None, :]).abs()
    pairs = m_s[:, :, None] & m_s[:, None, :] & (y_s[:, :, None] > y_s[:, None, :])
    diff = s_s[:, :, None] - s_s[:, None, :]
    losses = weights * F.softplus(-sigma * diff) / math.log(2.0)
    n_pairs = int(pairs.sum())
    loss = (losses * pairs).sum() / G_
    return loss, n_pairs


def ranknet_loss(S, Y, M, sigma: float = 1.0, gap_power: float = 0.0):
    """RankNet: mean over within-group pairs with y_i > y_j of softplus(-sigma (s_i - s_j)). ``gap_power`` p > 0:
    each pair weighted by its label gap (y_i - y_j)^p (a weighted mean), so near-ties count little (the attention
    model's ``pair_gap_power``)."""
    import torch.nn.functional as F

    pairs = M[:, :, None] & M[:, None, :] & (Y[:, :, None] > Y[:, None, :])
    diff = S[:, :, None] - S[:, None, :]
    n_pairs = int(pairs.sum())
    if gap_power:
        w = (Y[:, :, None] - Y[:, None, :]).clamp(min=0) ** gap_power * pairs
        return (F.softplus(-sigma * diff) * w).sum() / w.sum().clamp(min=1e-12), n_pairs
    loss = (F.softplus(-sigma * diff) * pairs).sum() / max(n_pairs, 1)
    return loss, n_pairs


LAMBDARANK_WEIGHT = 0.05  # the neural rankers' LambdaRank weight in ranknet+lambdarank (see module docstring)


def ranknet_lambdarank_loss(S, Y, M, sigma: float = 1.0, weight: float = LAMBDARANK_WEIGHT, gap_power: float = 0.0):
    """RankNet (all pairs: pairwise accuracy; ``gap_power``: pairs weighted by label gap) plus ``weight`` x
    LambdaRank (top of the list)."""
    a, n_pairs = ranknet_loss(S, Y, M, sigma=sigma, gap_power=gap_power)
    b, _ = lambdarank_loss(S, Y, M, sigma=sigma)
    return a + weight * b, n_pairs


_LOSSES = {"lambdarank": lambdarank_loss, "ranknet": ranknet_loss, "ranknet+lambdarank": ranknet_lambdarank_loss}


# ============================================================================================
# base class
# ============================================================================================
class Ranker:
    """Common interface: fit / predict / evaluate / save / load."""

    kind: str = ""
    weights_file: str = ""
    _defaults: dict[str, Any] = {}
    # values for hyper-parameters that config.json files written before the key existed lack:
    # they reproduce the architecture those files were trained with (the class defaults may differ)
    _legacy_hparams: dict[str, Any] = {}

    def __init__(self, *, seed: int = 0, progress: bool = True, feature_version: str | None = None,
                 data_manifest_hash: str | None = None, **hparams):
        unknown = set(hparams) - set(self._defaults)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown hyper-parameters {sorted(unknown)}")
        for name, lo in HPARAM_MINIMUMS.items():  # a model of 0 epochs trained nothing and was saved as if it had
            v = hparams.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not v >= lo:
                raise ValueError(f"{type(self).__name__}: {name} must be at least {lo}, not {v}")
        for name, choices in HPARAM_CHOICES.items():  # lr_schedule "bogus" failed at fit, after the models before it
            if name in hparams and hparams[name] not in choices:
                raise ValueError(f"{type(self).__name__}: {name} must be one of {', '.join(choices)}, "
                                 f"not {hparams[name]!r}")
        self.hparams = {**self._defaults, **hparams}
        self.seed = int(seed)
        self.progress = progress
        self.feature_version = feature_version
        self.data_manifest_hash = data_manifest_hash
        self.input_dims: dict[str, int] | None = None
        self.history: list[dict] = []
        self.best_epoch: int | None = None
        self.fit_seconds: float | None = None
        # after fine_tune: {"records", "best_epoch" (None: the weights before fine-tuning stayed best), "seconds"}
        # plus what the caller adds (training.fit_on_frame: the hardware)
        self.fine_tuned: dict | None = None
        # what the caller says the model trained on (training.train_model: the dataset, the split and the sha256 of
        # the split's file), so that an evaluation can tell a split made again under the same name
        self.trained_on: dict | None = None

    # ---- to implement -------------------------------------------------------------------
    def fit(self, train: dict, valid: dict | None = None) -> "Ranker":
        raise NotImplementedError

    def predict(self, data: dict) -> np.ndarray:
        raise NotImplementedError

    def fine_tune(self, train: dict, valid: dict | None = None) -> "Ranker":
        """Go on training a fitted model on ``train`` only (typically the records of the hardware it will rank),
        keeping what it learnt; with ``valid``, never ends worse on it than it started. Sets ``fine_tuned``."""
        raise NotImplementedError

    def _save_weights(self, path: Path) -> None:
        raise NotImplementedError

    def _load_weights(self, path: Path) -> None:
        raise NotImplementedError

    # ---- shared -------------------------------------------------------------------------
    def evaluate(self, data: dict, groups: dict[str, np.ndarray] | None = None) -> dict:
        preds = self.predict(data)
        return _metrics.evaluate_predictions(data["task_ids"], data["labels"], preds, groups)

    def flat_inputs(self, data: dict, flat: np.ndarray) -> np.ndarray:
        """The flat features the model sees: as given, but (``workload_args=False``) with the workload's shape
        arguments set to 0, plus (``task_relative``) each one standardised within its task
        (``task_relative_inputs``), appended after the raw ones."""
        if not self.hparams.get("workload_args", True):
            flat = without_workload_args(flat)
        if not self.hparams.get("task_relative") or flat.shape[1] == 0:
            return flat
        return task_relative_inputs(data, flat)

    def _require_fitted(self):
        if self.input_dims is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted")

    def _check_dims(self, dims: dict[str, int]):
        for k, v in dims.items():
            want = self.input_dims.get(k)
            if want is not None and v != want:
                raise ModelMismatchError(
                    f"{self.kind} model was trained with {k}={want}, got {k}={v}")

    def config(self) -> dict:
        return _json_safe({
            "kind": self.kind,
            "format_version": FORMAT_VERSION,
            "hparams": self.hparams,
            "seed": self.seed,
            "input_dims": self.input_dims,
            "feature_version": self.feature_version,
            "data_manifest_hash": self.data_manifest_hash,
            "history": self.history,
            "best_epoch": self.best_epoch,
            "fine_tuned": self.fine_tuned,
            "trained_on": self.trained_on,
            "fit_seconds": self.fit_seconds,
            "weights": self.weights_file,
            "library_versions": self._library_versions(),
        })

    def _library_versions(self) -> dict:
        return {"numpy": np.__version__}

    def save(self, directory: str | os.PathLike, *, feature_version: str | None = None,
             data_manifest_hash: str | None = None) -> Path:
        """Write weights + config.json into ``directory`` (created). ``feature_version`` /
        ``data_manifest_hash`` override the values given at construction. The config, written last, records the
        weights' sha256: a save killed between the two files leaves new weights under the old config, which
        ``load`` refuses instead of serving them as the model the config describes."""
        self._require_fitted()
        if feature_version is not None:
            self.feature_version = feature_version
        if data_manifest_hash is not None:
            self.data_manifest_hash = data_manifest_hash
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        from .storage import atomic_write_text, atomic_write_with, file_sha256

        atomic_write_with(d / self.weights_file, self._save_weights)
        cfg = {**self.config(), "weights_sha256": file_sha256(d / self.weights_file)}
        atomic_write_text(d / CONFIG_NAME, json.dumps(cfg, indent=2, sort_keys=True))
        return d

    @staticmethod
    def read_config(directory: str | os.PathLike) -> dict:
        path = Path(directory) / CONFIG_NAME
        try:
            cfg = json.loads(path.read_text())
        except (FileNotFoundError, NotADirectoryError) as e:  # a file given as the model: not a directory
            d = Path(directory)
            inside = sorted(q.name for q in d.iterdir() if (q / CONFIG_NAME).is_file()) if d.is_dir() else []
            from .storage import folder_kind

            hint = (": no such folder" if not d.exists() else
                    f": it holds models ({', '.join(inside[:5])}); give one of them" if inside else
                    ": it is a dataset, not a model" if folder_kind(d) == "dataset" else "")
            raise ModelLoadError(f"no {CONFIG_NAME} in {directory}{hint}") from e
        except json.JSONDecodeError as e:
            raise ModelLoadError(f"corrupt {path}: {e}") from e
        if not isinstance(cfg, dict) or "kind" not in cfg:
            raise ModelLoadError(f"{path} has no 'kind'")
        return cfg

    @classmethod
    def load(cls, directory: str | os.PathLike, *, expected_feature_version: str | None = None,
             **kwargs) -> "Ranker":
        """Load a model directory. ``expected_feature_version``: refuse (``ModelMismatchError``)
        a model trained on another feature version. ``kwargs`` override runtime settings
        (``device``, ``num_threads``, ``progress``, ``infer_batch_size``)."""
        cfg = cls.read_config(directory)
        for key, want in (("kind", str), ("hparams", dict), ("input_dims", dict), ("trained_on", dict),
                          ("history", list), ("fine_tuned", dict)):  # a hand-edited config ended in a TypeError
            if cfg.get(key) is not None and not isinstance(cfg[key], want):
                raise ModelLoadError(f"{Path(directory) / CONFIG_NAME}: {key} is {cfg[key]!r}, not a "
                                     f"{'string' if want is str else want.__name__}")
        kind = cfg["kind"]
        if cls is Ranker:
            if kind not in _KINDS:
                raise ModelLoadError(f"unknown model kind {kind!r} in {directory}")
            cls = _KINDS[kind]
        elif kind != cls.kind:
            raise ModelMismatchError(f"{directory} holds a {kind!r} model, not {cls.kind!r}")
        if cfg.get("format_version") != FORMAT_VERSION:
            raise ModelMismatchError(
                f"{directory}: format_version {cfg.get('format_version')!r}, expected {FORMAT_VERSION}")
        if expected_feature_version is not None and cfg.get("feature_version") != expected_feature_version:
            raise ModelMismatchError(
                f"feature version mismatch for {directory}: model was trained on feature_version="
                f"{cfg.get('feature_version')!r} but the caller expects {expected_feature_version!r}")
        runtime = {k: kwargs.pop(k) for k in list(kwargs) if k in ("progress",)}
        hp = dict(cfg.get("hparams") or {})
        for k, v in cls._legacy_hparams.items():
            hp.setdefault(k, v)
        hp.update(kwargs)
        try:
            obj = cls(seed=cfg.get("seed", 0), feature_version=cfg.get("feature_version"),
                      data_manifest_hash=cfg.get("data_manifest_hash"), **runtime, **hp)
        except (TypeError, ValueError) as e:  # an hparam the model does not have, or a value it refuses
            raise ModelLoadError(f"{Path(directory) / CONFIG_NAME}: its hparams do not make a {kind} model ({e})") \
                from None
        obj.input_dims = cfg.get("input_dims")
        obj.history = cfg.get("history") or []
        obj.best_epoch = cfg.get("best_epoch")
        obj.fine_tuned = cfg.get("fine_tuned")
        obj.trained_on = cfg.get("trained_on")
        obj.fit_seconds = cfg.get("fit_seconds")
        if obj.input_dims is None:
            raise ModelLoadError(f"{directory}: config.json has no input_dims (model never fitted?)")
        wpath = Path(directory) / cls.weights_file
        if not wpath.is_file():
            raise ModelLoadError(f"missing weights file {wpath}")
        from .storage import file_sha256

        if cfg.get("weights_sha256") not in (None, file_sha256(wpath)):  # (directories saved before it: no check)
            raise ModelLoadError(f"{directory}: {cls.weights_file} is not the file config.json describes (a save "
                                 "was interrupted between the two): train the model again")
        obj._load_weights(wpath)
        return obj


def load_model(directory: str | os.PathLike, *, expected_feature_version: str | None = None,
               **kwargs) -> Ranker:
    """Load any model directory, dispatching on config.json's ``kind``."""
    return Ranker.load(directory, expected_feature_version=expected_feature_version, **kwargs)


# ============================================================================================
# torch models
# ============================================================================================
def _build_attention_net(input_dims: dict, hp: dict):
    import torch
    from torch import nn
    import torch.nn.functional as F

    def _patches(p, mask, *ts):
        """Each [B, L, ...] tensor of ``ts`` as [B, L/p, p, ...] (zero-padded to whole patches of ``p`` tokens), and
        the patch mask (a patch is real when one of its tokens is)."""
        B, L = mask.shape
        Lp = -(-L // p)
        if Lp * p != L:
            ts = [F.pad(t, (0, 0, 0, Lp * p - L)) for t in ts]
            mask = F.pad(mask, (0, Lp * p - L))
        return [t.reshape(B, Lp, p, *t.shape[2:]) for t in ts], mask.view(B, Lp, p).any(dim=2)

    class EncoderLayer(nn.Module):
        """Post-norm Transformer encoder layer, same maths as ``nn.TransformerEncoderLayer``
        (batch_first, relu, norm_first=False) with a fused QKV projection. Written out because
        the built-in layer's inference fast path (nested tensors) is slower on CPU for these
        short sequences and warns; this one runs the same kernels in training and inference.
        ``attn_impl="sdpa"``: ``F.scaled_dot_product_attention`` with a boolean key mask;
        ``"math"``: softmax(q k^T / sqrt(d_head) + bias) v written out with batched matmuls (same
        function; faster on CPU for the handful of positions left after patching)."""

        def __init__(self, d: int, n_heads: int, ff: int, dropout: float, attn_impl: str):
            super().__init__()
            if d % n_heads:
                raise ValueError(f"d_model={d} is not divisible by n_heads={n_heads}")
            if attn_impl not in ("sdpa", "math"):
                raise ValueError("attn_impl must be 'sdpa' or 'math'")
            self.h, self.p, self.impl = n_heads, dropout, attn_impl
            self.scale = 1.0 / math.sqrt(d // n_heads)
            self.qkv = nn.Linear(d, 3 * d)
            self.out = nn.Linear(d, d)
            self.ff1 = nn.Linear(d, ff)
            self.ff2 = nn.Linear(ff, d)
            self.norm1 = nn.LayerNorm(d)
            self.norm2 = nn.LayerNorm(d)
            self.drop = nn.Dropout(dropout)

        def forward(self, x, attn_mask, attn_bias):
            B, L, d = x.shape
            q, k, v = self.qkv(x).view(B, L, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            if self.impl == "sdpa":
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                                   dropout_p=self.p if self.training else 0.0)
            else:
                z = torch.baddbmm(attn_bias.expand(B, self.h, 1, L).reshape(B * self.h, 1, L),
                                  q.reshape(B * self.h, L, -1), k.reshape(B * self.h, L, -1).transpose(1, 2),
                                  alpha=self.scale)
                # softmax written out: torch.softmax over a last dim of ~10 runs a slow kernel
                # (16% of inference time); every row has a real key, so the max is finite
                w = (z - z.detach().amax(dim=-1, keepdim=True)).exp()
                w = w / w.sum(dim=-1, keepdim=True)
                if self.training and self.p:
                    w = F.dropout(w, self.p)
                a = torch.bmm(w, v.reshape(B * self.h, L, -1)).view(B, self.h, L, -1)
            x = self.norm1(x + self.drop(self.out(a.transpose(1, 2).reshape(B, L, d))))
            return self.norm2(x + self.drop(self.ff2(self.drop(F.relu(self.ff1(x))))))

    class AttentionNet(nn.Module):
        def __init__(self):
            super().__init__()
            D, L, Fd = input_dims["token_dim"], input_dims["max_len"], input_dims["flat_dim"]
            d = hp["d_model"]
            self.patch = int(hp["patch"])
            if self.patch < 1:
                raise ValueError("patch must be >= 1")
            self.use_flat = bool(hp["use_flat"]) and Fd > 0
            self.clip = float(hp["input_clip"])
            self.register_buffer("tok_mean", torch.zeros(D))
            self.register_buffer("tok_std", torch.ones(D))
            self.register_buffer("flat_mean", torch.zeros(Fd))
            self.register_buffer("flat_std", torch.ones(Fd))
            self.positions = str(hp.get("positions", "absolute"))
            if self.positions == "absolute":
                self.embed = nn.Linear(D * self.patch, d)
                self.pos = nn.Parameter(torch.randn(-(-L // self.patch), d) * 0.02)
            elif self.positions == "kind":
                self.embed = nn.Linear(D, d)
                self.pos = nn.Parameter(torch.randn(len(PRIMS) * KIND_OCCURRENCES, d) * 0.02)
            else:
                raise ValueError(f"positions must be one of {', '.join(POSITIONS)}, not {self.positions!r}")
            self.layers = nn.ModuleList(
                EncoderLayer(d, hp["n_heads"], hp["ff_mult"] * d, hp["dropout"], hp["attn_impl"])
                for _ in range(hp["n_layers"]))
            head_in = d + (Fd if self.use_flat else 0)
            h = hp["head_hidden"]
            self.head = nn.Sequential(nn.Linear(head_in, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                                      nn.Linear(h, 1))

        def forward(self, tokens, mask, flat=None, kind_pos=None):
            # one new tensor, then in place: each fresh [B, L, D] temporary costs a page-faulting allocation
            x = (tokens - self.tok_mean).div_(self.tok_std).clamp_(-self.clip, self.clip)
            empty = ~mask.any(dim=1)
            if bool(empty.any()):  # a record without tokens: attend to position 0 only
                mask = mask.clone()
                mask[empty, 0] = True
            p = self.patch
            if self.positions == "kind":
                if kind_pos is None:  # the ranker passes them, computed once per dataset (_feature_arrays)
                    kind_pos = torch.from_numpy(kind_positions(tokens.cpu().numpy(), mask.cpu().numpy())).to(
                        tokens.device)
                return self._head(self._encode(*self._kind_embed(x, mask, kind_pos, p)), flat)
            if p > 1:  # p consecutive tokens -> one position; padding tokens are zeroed
                x = x.mul_(mask.unsqueeze(-1).to(x.dtype))  # x is this forward's own tensor
                (x,), mask = _patches(p, mask, x)
                x = x.flatten(2)
            return self._head(self._encode(self.embed(x) + self.pos[: x.shape[1]], mask), flat)

        def _kind_embed(self, x, mask, kind_pos, p):
            """``positions="kind"``: the tokens of each patch of ``p`` are summed (padding zeroed) and embedded, plus
            the sum of a learned embedding of each token's ``kind_positions`` id (its primitive and how many tokens of
            that primitive came before it). The embedding is linear, so this is the sum of each token's own
            embedding: a patch is a bag of tokens that knows which split, fuse, ... each one is, not which slot of
            the patch it sits in, and one extra or missing step shifts no other step's position."""
            x = x.mul_(mask.unsqueeze(-1).to(x.dtype))
            (x, ids, w), mask = _patches(p, mask, x, kind_pos.long().unsqueeze(-1), mask.to(x.dtype).unsqueeze(-1))
            # the patch sums of the id embeddings in one gather-and-add, never the [B, L, d] per-token embeddings
            pos = F.embedding_bag(ids.flatten(0, 1).flatten(1), self.pos, mode="sum",
                                  per_sample_weights=w.flatten(0, 1).flatten(1)).view(*mask.shape, -1)
            return self.embed(x.sum(dim=2)) + pos, mask

        def _encode(self, h, mask):
            attn_mask = mask[:, None, None, :]  # [B, 1, 1, L], True = may attend (key padding)
            attn_bias = torch.zeros(attn_mask.shape, dtype=h.dtype, device=h.device).masked_fill_(
                ~attn_mask, float("-inf"))
            for layer in self.layers:
                h = layer(h, attn_mask, attn_bias)
            m = mask.unsqueeze(-1).to(h.dtype)
            return (h * m).sum(dim=1) / m.sum(dim=1)

        def _head(self, pooled, flat):
            if self.use_flat:
                f = ((flat - self.flat_mean) / self.flat_std).clamp(-self.clip, self.clip)
                pooled = torch.cat([pooled, f], dim=1)
            return self.head(pooled).squeeze(-1)

    return AttentionNet()


def _build_mlp_net(input_dims: dict, hp: dict):
    import torch
    from torch import nn

    class TenSetMLP(nn.Module):
        """TenSet ``SegmentSumMLPModule`` with one segment (the flat feature row):
        encoder Linear-ReLU-Linear-ReLU, two residual Linear-ReLU blocks, linear decoder.
        Inputs are divided by TenSet's per-column max (here max |x|, 1 where 0)."""

        def __init__(self):
            super().__init__()
            F, H = input_dims["flat_dim"], hp["hidden_dim"]
            self.register_buffer("flat_scale", torch.ones(F))
            self.segment_encoder = nn.Sequential(nn.Linear(F, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU())
            self.l0 = nn.Sequential(nn.Linear(H, H), nn.ReLU())
            self.l1 = nn.Sequential(nn.Linear(H, H), nn.ReLU())
            self.decoder = nn.Linear(H, 1)

        def forward(self, flat):
            out = self.segment_encoder(flat / self.flat_scale)
            out = self.l0(out) + out
            out = self.l1(out) + out
            return self.decoder(out).squeeze(-1)

    return TenSetMLP()


class _TorchRanker(Ranker):
    weights_file = TORCH_WEIGHTS
    _common_defaults = dict(
        epochs=30, lr=1e-3, weight_decay=1e-6, lr_schedule="cosine", lr_step_epochs=10,
        lr_gamma=0.5, warmup_steps=0, grad_clip=1.0, tasks_per_batch=8, records_per_task=64,
        batching="task", loss="lambdarank", sigma=1.0, patience=5, min_delta=1e-4, task_relative=False,
        infer_batch_size=1024, device="cpu", num_threads=None, deterministic=True,
        finetune_epochs=8, finetune_lr=None, lambdarank_weight=LAMBDARANK_WEIGHT, pair_gap_power=0.0,
    )

    # subclasses: _build_net(), _net_inputs(arrays, idx, device), _feature_arrays(data),
    # _dims(arrays), _init_normalizer(net, arrays)

    def _library_versions(self) -> dict:
        import torch

        return {"numpy": np.__version__, "torch": torch.__version__}

    @property
    def device(self):
        import torch

        return torch.device(self.hparams["device"])

    def _net_dims(self) -> dict:
        d = dict(self.input_dims)
        if self.hparams["task_relative"]:
            d["flat_dim"] = 2 * d["flat_dim"]
        return d

    def _raw_flat_dim(self, arrays: dict) -> int:
        """The caller's flat width (``input_dims`` records it, not the doubled width the network sees)."""
        w = int(arrays["flat"].shape[1])
        return w // 2 if self.hparams["task_relative"] else w

    # ---- training -----------------------------------------------------------------------
    def fit(self, train: dict, valid: dict | None = None) -> "_TorchRanker":
        import torch

        hp = self.hparams
        t0 = time.perf_counter()
        self.input_dims = None
        data = self._training_arrays(train, valid)
        self.history, self.best_epoch, self.fine_tuned = [], None, None
        with _torch_env(hp["num_threads"], hp["deterministic"]):
            torch.manual_seed(self.seed)
            net = self._build_net()
            self._init_normalizer(net, data["arrays"])
            net.to(self.device)
            self.best_epoch = self._run_epochs(net, data, int(hp["epochs"]), float(hp["lr"]),
                                               np.random.default_rng(self.seed), phase="fit")
        self.net = net.eval()
        self.fit_seconds = time.perf_counter() - t0
        return self

    def fine_tune(self, train: dict, valid: dict | None = None) -> "_TorchRanker":
        """Go on training the fitted network on ``train`` alone (``finetune_epochs`` at ``finetune_lr``, default the
        model's ``lr``, with the same LR schedule), keeping its input normalisers; with ``valid``, the epoch of best
        validation PCA is kept, and the weights before fine-tuning win when no epoch beats them."""
        import torch

        self._require_fitted()
        hp = self.hparams
        t0 = time.perf_counter()
        data = self._training_arrays(train, valid)
        with _torch_env(hp["num_threads"], hp["deterministic"]):
            torch.manual_seed(self.seed + 1)
            lr = hp["lr"] if hp["finetune_lr"] is None else hp["finetune_lr"]
            best = self._run_epochs(self.net, data, int(hp["finetune_epochs"]), float(lr),
                                    np.random.default_rng(self.seed + 1), phase="fine-tune")
        self.net.eval()
        self.fine_tuned = {"records": int(len(data["labels"])), "best_epoch": best,
                           "seconds": round(time.perf_counter() - t0, 2)}
        self.fit_seconds = (self.fit_seconds or 0.0) + time.perf_counter() - t0
        return self

    def _training_arrays(self, train: dict, valid: dict | None) -> dict:
        """Checked model inputs of a training part and its validation part. An unfitted model takes its input
        dimensions from ``train``; a fitted one refuses other dimensions."""
        hp = self.hparams
        if hp["loss"] not in _LOSSES:
            raise ValueError(f"loss must be one of {sorted(_LOSSES)}, got {hp['loss']!r}")
        if hp.get("pair_gap_power") and "ranknet" not in hp["loss"]:  # else saved as if it had been used
            raise ValueError(f"pair_gap_power weights RankNet's pairs; loss {hp['loss']!r} has no RankNet term")
        if hp["batching"] not in ("task", "mixed"):
            raise ValueError("batching must be 'task' or 'mixed'")
        arrays = self._feature_arrays(train)
        task_ids = _as(train, "task_ids", np.int64, 1)
        labels = _as(train, "labels", np.float32, 1)
        _n_records(dict(arrays, task_ids=task_ids, labels=labels))
        if not np.all(np.isfinite(labels)):
            raise ValueError("training labels must be finite (drop invalid records before fit)")
        if self.input_dims is None:
            self.input_dims = self._dims(arrays)
        else:
            self._check_dims(self._dims(arrays))
        groups = _task_groups(task_ids, 2)
        if not groups:
            raise ValueError("training data has no task with >= 2 records")
        out = {"arrays": arrays, "labels": labels, "groups": groups, "valid": None}
        if valid is not None:
            v_arrays = self._feature_arrays(valid)
            self._check_dims(self._dims(v_arrays))
            out["valid"] = (v_arrays, _as(valid, "task_ids", np.int64, 1), _as(valid, "labels", np.float32, 1))
        return out

    def _run_epochs(self, net, data: dict, epochs: int, lr: float, rng: np.random.Generator,
                    phase: str) -> int | None:
        """Train ``net`` in place for up to ``epochs`` epochs (Adam at ``lr``, the LR schedule, early stopping on
        validation PCA with ``patience``), leave it holding the best validation epoch's weights and return that
        epoch (with no validation part: the last epoch). Fine-tuning counts the weights it started from as
        epoch -1 and returns None when they stay the best. Appends one ``history`` entry per epoch."""
        import torch

        hp = self.hparams
        arrays, labels, groups = data["arrays"], data["labels"], data["groups"]
        n_train = int(sum(g.size for g in groups))
        dev = self.device
        opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=hp["weight_decay"], foreach=True)
        steps_per_epoch = len(_plan_epoch(groups, n_train, np.random.default_rng(0),
                                          hp["tasks_per_batch"], hp["records_per_task"], hp["batching"]))
        sched = self._scheduler(opt, steps_per_epoch, epochs)
        loss_fn = _LOSSES[hp["loss"]]
        aug_rng = self._augment_rng(phase)
        gap = {"gap_power": float(hp.get("pair_gap_power") or 0.0)} if "ranknet" in hp["loss"] else {}
        if hp["loss"] == "ranknet+lambdarank":
            loss_fn = functools.partial(loss_fn, weight=float(hp["lambdarank_weight"]), **gap)
        elif gap:
            loss_fn = functools.partial(loss_fn, **gap)

        def valid_metrics():
            v_arrays, v_tasks, v_labels = data["valid"]
            return _metrics.evaluate_predictions(v_tasks, v_labels, self._predict_arrays(net, v_arrays))

        best_pca, best_state, best_epoch, bad = -np.inf, None, None, 0
        if phase == "fine-tune" and data["valid"] is not None:
            best_pca = valid_metrics()["pca"]
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        for epoch in range(epochs):
            te = time.perf_counter()
            net.train()
            batches = _plan_epoch(groups, n_train, rng, hp["tasks_per_batch"], hp["records_per_task"], hp["batching"])
            tot_loss, n_steps, n_seen = 0.0, 0, 0
            bar = _progress(batches, self.progress, desc=f"{self.kind} {phase} epoch {epoch}", unit="batch")
            for chunks in bar:
                idx = np.concatenate(chunks)
                sizes = np.fromiter((c.size for c in chunks), dtype=np.int64, count=len(chunks))
                scores = net(*self._train_inputs(arrays, idx, dev, aug_rng))
                y = torch.from_numpy(labels[idx]).to(dev)
                S, Y, M = _pad_groups(scores, y, sizes)
                loss, n_pairs = loss_fn(S, Y, M, sigma=hp["sigma"])
                n_seen += idx.size
                if n_pairs:
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    if hp["grad_clip"]:
                        torch.nn.utils.clip_grad_norm_(net.parameters(), hp["grad_clip"])
                    opt.step()
                    tot_loss += float(loss.detach())
                    n_steps += 1
                if sched is not None:
                    sched.step()
                if n_steps and n_steps % 20 == 0:
                    bar.set_postfix(loss=f"{tot_loss / n_steps:.4f}")
            train_s = time.perf_counter() - te
            rec = {"epoch": epoch, "train_loss": tot_loss / max(n_steps, 1),
                   "lr": opt.param_groups[0]["lr"], "train_records_per_s": n_seen / max(train_s, 1e-9),
                   "train_seconds": train_s}
            if phase != "fit":
                rec["phase"] = phase
            if data["valid"] is not None:
                m = valid_metrics()
                rec.update({f"valid_{k}": v for k, v in _summary(m).items()})
                if m["pca"] > best_pca + hp["min_delta"]:
                    best_pca, bad, best_epoch = m["pca"], 0, epoch
                    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
                else:
                    bad += 1
                _epoch_line(self.progress, f"{self.kind} {phase} epoch {epoch}", rec, bad == 0)
            self.history.append(_json_safe(rec))
            if data["valid"] is not None and bad >= hp["patience"]:
                break
        if best_state is not None:
            net.load_state_dict(best_state)
            return best_epoch
        return epoch if epochs else None

    def _augment_rng(self, phase: str) -> np.random.Generator | None:
        """The random stream of the training-time augmentation (its own, so a model without augmentation draws the
        same batches as before it existed); None when the model has none."""
        return None

    def _train_inputs(self, arrays: dict, idx: np.ndarray, dev, aug_rng):
        """The network inputs of a training batch: ``_net_inputs``, augmented where the model does so."""
        return self._net_inputs(arrays, idx, dev)

    def _scheduler(self, opt, steps_per_epoch: int, epochs: int):
        import torch

        hp = self.hparams
        total = max(1, epochs * steps_per_epoch)
        warm = int(hp["warmup_steps"])
        kind = hp["lr_schedule"]
        if kind == "constant":
            base = lambda s: 1.0  # noqa: E731
        elif kind == "cosine":
            base = lambda s: 0.5 * (1.0 + math.cos(math.pi * min(s, total) / total))  # noqa: E731
        elif kind == "step":
            step = max(1, hp["lr_step_epochs"] * steps_per_epoch)
            base = lambda s: hp["lr_gamma"] ** (s // step)  # noqa: E731
        else:
            raise ValueError("lr_schedule must be 'cosine', 'step' or 'constant'")
        if kind == "constant" and warm == 0:
            return None
        return torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: base(s) * (min(1.0, (s + 1) / warm) if warm else 1.0))

    # ---- inference ----------------------------------------------------------------------
    def predict(self, data: dict) -> np.ndarray:
        self._require_fitted()
        arrays = self._feature_arrays(data)
        self._check_dims(self._dims(arrays))
        with _torch_env(self.hparams["num_threads"], self.hparams["deterministic"]):
            return self._predict_arrays(self.net, arrays)

    def _predict_arrays(self, net, arrays: dict) -> np.ndarray:
        import torch

        n = _n_records(arrays)
        out = np.empty(n, dtype=np.float32)
        order = self._inference_order(arrays)
        bs = int(self.hparams["infer_batch_size"])
        dev = self.device
        was_training = net.training
        net.eval()
        with torch.inference_mode():
            for s in range(0, n, bs):
                idx = order[s: s + bs]
                out[idx] = net(*self._net_inputs(arrays, idx, dev)).float().cpu().numpy()
        net.train(was_training)
        return out.astype(np.float64)

    def _inference_order(self, arrays: dict) -> np.ndarray:
        return np.arange(_n_records(arrays))

    # ---- persistence --------------------------------------------------------------------
    def _save_weights(self, path: Path) -> None:
        import torch

        state = {k: v.detach().cpu() for k, v in self.net.state_dict().items()}
        torch.save(state, path)

    def _load_weights(self, path: Path) -> None:
        import torch

        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # UnpicklingError for anything beyond tensors / containers
            raise ModelLoadError(
                f"refusing to load {path}: not a plain tensor state_dict "
                f"(torch.load(weights_only=True) rejected it: {type(e).__name__}: {e})") from e
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise ModelLoadError(f"{path} does not hold a state_dict of tensors")
        with _torch_env(self.hparams["num_threads"], False):
            torch.manual_seed(self.seed)
            net = self._build_net()
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise ModelMismatchError(f"{path} does not match the architecture in config.json: {e}") from e
        self.net = net.to(self.device).eval()


class AttentionRanker(_TorchRanker):
    """Transformer encoder over schedule tokens (TLP-style): ``patch`` consecutive tokens are
    concatenated and linearly embedded into one position (padding tokens zeroed) + learned
    positional embedding, ``n_layers`` post-norm encoder layers (``d_model``, ``n_heads``,
    feed-forward ``ff_mult * d_model``, key-padding mask), masked mean pooling, optional flat
    features (z-scored) concatenated before a 2-hidden-layer MLP head; trained with a
    within-task ranking loss. Tokens are z-scored per dimension over the real training tokens.
    Batches are trimmed to their longest record; inference sorts records by length and runs 1024 records per
    batch: a batch's token tensor (1024 x up to 64 x 64 floats with ``token_relative``) then stays under glibc's
    mmap threshold and is reused from the heap, where 4096-record batches paid a page-faulting allocation per
    temporary (benchmarks/train.py, 50k K80 records, 2 threads: 60k -> 125k records/s, same predictions).

    Defaults (chosen on roller-k80, within-task split, 50k training records, 12-24 epochs,
    see reports/train.md): one layer, d_model 32, 2 heads, patches of 4 tokens, RankNet + 0.05
    LambdaRank (``lambdarank_weight``), lr 5e-3 with cosine decay, 16 tasks x 32 records per batch.
    Against the first version (d_model 64, 2 layers, one position per token, LambdaRank, lr 1e-3,
    8 x 64) this is ~10x faster to train and better: RankNet's all-pairs loss is what PCA measures
    (+4 PCA points at equal epochs), patches of 4 cost ~0.5 points against patches of 1-2, a wider
    or deeper encoder gained nothing. Model directories written before ``patch`` / ``attn_impl``
    existed load with ``_legacy_hparams`` (one token per position, SDPA) and predict as before."""

    kind = "attention"
    _defaults = dict(
        _TorchRanker._common_defaults,
        d_model=32, n_heads=2, n_layers=1, ff_mult=2, dropout=0.0, head_hidden=64,
        use_flat=True, input_clip=20.0, lr=5e-3, epochs=30, patch=4, attn_impl="math",
        loss="ranknet+lambdarank", tasks_per_batch=16, records_per_task=32, infer_batch_size=1024,
        task_relative=True, token_relative=True, workload_args=False, diverse_top_k=0, diverse_share=DIVERSE_SHARE,
        positions="absolute", step_dropout=0.0,
    )
    _legacy_hparams = dict(patch=1, attn_impl="sdpa", task_relative=False, token_relative=False, workload_args=True,
                           lambdarank_weight=0.05, positions="absolute")

    def predict(self, data: dict) -> np.ndarray:
        """Scores, higher = faster; with ``diverse_top_k`` = k > 1 and ``task_ids`` given, each task's first k in
        the order are diverse picks (``diverse_top_k``). Validation during training scores without them."""
        scores = super().predict(data)
        k = int(self.hparams.get("diverse_top_k") or 0)
        if k > 1 and data.get("task_ids") is not None:
            scores = diverse_top_k(scores, data["task_ids"], data["tokens"], data["mask"], k,
                                   float(self.hparams.get("diverse_share") or DIVERSE_SHARE))
        return scores

    def _feature_arrays(self, data: dict) -> dict:
        tokens = _as(data, "tokens", np.float32, 3)
        mask = _as(data, "mask", np.bool_, 2)
        flat = _as(data, "flat", np.float32, 2, required=False)
        if flat is None:
            flat = np.zeros((len(tokens), 0), np.float32)
        else:
            flat = self.flat_inputs(data, flat)
        if mask.shape != tokens.shape[:2]:
            raise ValueError(f"mask shape {mask.shape} does not match tokens {tokens.shape}")
        # effective length of each record = last real token + 1 (tokens may be right-padded)
        last = np.where(mask.any(axis=1), mask.shape[1] - np.argmax(mask[:, ::-1], axis=1), 1)
        arrays = {"tokens": tokens, "mask": mask, "flat": flat, "_len": last.astype(np.int64)}
        if self.hparams["token_relative"]:
            arrays["tok_rel"] = token_relative_inputs(data, tokens, mask)
        if self.hparams["positions"] == "kind":  # once per dataset, not per batch
            arrays["kind_pos"] = kind_positions(tokens, mask)
        _n_records(arrays)
        return arrays

    def _dims(self, arrays: dict) -> dict:
        t = arrays["tokens"]
        return {"token_dim": int(t.shape[2]), "flat_dim": self._raw_flat_dim(arrays),
                "max_len": int(t.shape[1])}

    def _check_dims(self, dims: dict):
        # shorter / longer padding is fine (batches are trimmed; over-long records are refused
        # in _net_inputs); token and flat widths must match
        super()._check_dims({k: v for k, v in dims.items() if k != "max_len"})

    def _net_dims(self) -> dict:
        d = super()._net_dims()
        if self.hparams["token_relative"]:
            d["token_dim"] = 2 * d["token_dim"]
        return d

    def _build_net(self):
        return _build_attention_net(self._net_dims(), self.hparams)

    def _tokens(self, arrays: dict, rows, lmax: int) -> np.ndarray:
        """The token vectors the network sees for ``rows`` (cropped to ``lmax``): the raw tokens, followed
        (``token_relative``) by the same tokens centred within their task."""
        tok = arrays["tokens"][rows, :lmax]
        if "tok_rel" not in arrays:
            return tok
        rel = arrays["tok_rel"]
        rel = rel.take(arrays["tokens"], arrays["mask"], rows, lmax) if isinstance(rel, TaskCentredTokens) else \
            rel[rows, :lmax]
        return np.concatenate([tok, rel], axis=2)

    def _init_normalizer(self, net, arrays: dict):
        import torch

        tok, mask, flat = arrays["tokens"], arrays["mask"], arrays["flat"]
        D = net.tok_mean.shape[0]
        n_real = int(mask.sum())
        if n_real:
            # mean / std over the real tokens, in chunks of records (cropped to the longest
            # record; no float64 copy of the whole tensor)
            lmax = int(arrays["_len"].max())
            s1 = torch.zeros(D, dtype=torch.float64)
            s2 = torch.zeros(D, dtype=torch.float64)
            for a in range(0, len(tok), 16384):
                x = torch.from_numpy(self._tokens(arrays, slice(a, a + 16384), lmax))
                m = torch.from_numpy(mask[a: a + 16384, :lmax]).to(x.dtype)
                s1 += torch.einsum("nl,nld->nd", m, x).double().sum(0)
                s2 += torch.einsum("nl,nld->nd", m, x * x).double().sum(0)
            s1, s2 = s1.numpy(), s2.numpy()
            mu = s1 / n_real
            sd = np.sqrt(np.maximum(s2 / n_real - mu * mu, 0.0))
            sd[sd < 1e-6] = 1.0
            net.tok_mean.copy_(torch.from_numpy(mu.astype(np.float32)))
            net.tok_std.copy_(torch.from_numpy(sd.astype(np.float32)))
        if flat.shape[1] and len(flat):
            f = flat.astype(np.float64)
            mu, sd = f.mean(0), f.std(0)
            # a flat feature constant over the training records (the hardware features when one hardware trains)
            # taught the network nothing, so it reads 0 whatever the value at inference: its input weights are
            # still their random initialisation, and another hardware's value would shift every score by noise
            sd[sd < 1e-6] = np.inf
            net.flat_mean.copy_(torch.from_numpy(mu.astype(np.float32)))
            net.flat_std.copy_(torch.from_numpy(sd.astype(np.float32)))

    def _net_inputs(self, arrays: dict, idx: np.ndarray, dev):
        import torch

        max_len = self.input_dims["max_len"]
        Lb = int(arrays["_len"][idx].max())
        if Lb > max_len:
            raise ModelMismatchError(f"records have {Lb} tokens, model was trained with max_len={max_len}")
        p = int(self.hparams["patch"])
        # round up to whole patches when the arrays are that wide (masked columns; saves a pad copy)
        Lb = min(-(-Lb // p) * p, arrays["tokens"].shape[1], max_len)
        tok = torch.from_numpy(np.ascontiguousarray(self._tokens(arrays, idx, Lb))).to(dev)
        mask = torch.from_numpy(np.ascontiguousarray(arrays["mask"][idx, :Lb])).to(dev)
        flat = torch.from_numpy(arrays["flat"][idx]).to(dev)
        if "kind_pos" in arrays:
            return tok, mask, flat, torch.from_numpy(np.ascontiguousarray(arrays["kind_pos"][idx, :Lb])).to(dev)
        return tok, mask, flat

    def _augment_rng(self, phase: str) -> np.random.Generator | None:
        p = float(self.hparams.get("step_dropout") or 0.0)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"step_dropout must be in [0, 1), not {p}")
        return np.random.default_rng([self.seed, 0x57E9, phase == "fit"]) if p > 0 else None

    def _train_inputs(self, arrays: dict, idx: np.ndarray, dev, aug_rng):
        """``step_dropout`` = p > 0: every real token of a training record is left out with probability p (at least
        one stays), the rest close up in order and the kind ids are recounted, so the model sees step layouts with
        steps missing, as an operator it never trained on writes them (a depthwise conv2d has one reduction split
        fewer than a conv2d, a dense has no spatial window). The centred token of each step goes with it."""
        inputs = self._net_inputs(arrays, idx, dev)
        if aug_rng is None:
            return inputs
        import torch

        tok, mask = inputs[0].cpu().numpy(), inputs[1].cpu().numpy()
        p = float(self.hparams["step_dropout"])
        keep = mask & (aug_rng.random(mask.shape) >= p)
        none = ~keep.any(axis=1)
        keep[none] = mask[none]
        order = np.argsort(~keep, axis=1, kind="stable")  # kept tokens first, in their order
        keep = np.take_along_axis(keep, order, axis=1)
        tok = np.take_along_axis(tok, order[:, :, None], axis=1) * keep[:, :, None]
        out = [torch.from_numpy(np.ascontiguousarray(tok)).to(dev), torch.from_numpy(keep).to(dev), inputs[2]]
        if len(inputs) > 3:
            out.append(torch.from_numpy(kind_positions(tok, keep)).to(dev))
        return tuple(out)

    def _inference_order(self, arrays: dict) -> np.ndarray:
        # group records of similar length so that batches are trimmed tightly
        return np.argsort(arrays["_len"], kind="stable")


class MLPRanker(_TorchRanker):
    """TenSet's MLP cost model (``MLPModelInternal``: SegmentSumMLP, hidden 256, Adam lr 7e-4,
    wd 1e-6, grad clip 0.5, LambdaRank loss, 50 epochs, constant LR -- TenSet's StepLR has
    gamma=1) over the flat features."""

    kind = "mlp"
    _defaults = dict(
        _TorchRanker._common_defaults,
        hidden_dim=256, lr=7e-4, weight_decay=1e-6, grad_clip=0.5, epochs=50, lr_schedule="constant",
        patience=8,
    )

    def _feature_arrays(self, data: dict) -> dict:
        return {"flat": self.flat_inputs(data, _as(data, "flat", np.float32, 2))}

    def _dims(self, arrays: dict) -> dict:
        return {"flat_dim": self._raw_flat_dim(arrays)}

    def _build_net(self):
        return _build_mlp_net(self._net_dims(), self.hparams)

    def _init_normalizer(self, net, arrays: dict):
        import torch

        scale = np.abs(arrays["flat"]).max(axis=0).astype(np.float32) if len(arrays["flat"]) else None
        if scale is not None:
            scale[~(scale > 0)] = 1.0
            net.flat_scale.copy_(torch.from_numpy(scale))

    def _net_inputs(self, arrays: dict, idx: np.ndarray, dev):
        import torch

        return (torch.from_numpy(arrays["flat"][idx]).to(dev),)


# ============================================================================================
# LightGBM
# ============================================================================================
def relevance_grades(task_ids: np.ndarray, labels: np.ndarray, n_grades: int = 16,
                     mode: str = "quantile") -> np.ndarray:
    """Integer relevance grades 0..n_grades-1 for LightGBM ranking objectives (see module doc)."""
    labels = np.asarray(labels, dtype=np.float64)
    if mode == "linear":
        return np.clip(np.floor(np.nan_to_num(labels, nan=0.0) * n_grades), 0, n_grades - 1).astype(np.int32)
    if mode != "quantile":
        raise ValueError("grade_mode must be 'quantile' or 'linear'")
    grades = np.zeros(labels.size, dtype=np.int32)
    order, _, starts, counts = _metrics.task_slices(task_ids)
    for s, c in zip(starts, counts):
        idx = order[s: s + c]
        l = labels[idx]
        rank_lo = np.searchsorted(np.sort(l), l, side="left")
        grades[idx] = np.minimum(rank_lo * n_grades // c, n_grades - 1)
    return grades


class GBDTRanker(Ranker):
    """LightGBM lambdarank over the flat features, one query per task (see module docstring)."""

    kind = "gbdt"
    weights_file = LGB_WEIGHTS
    _defaults = dict(
        objective="lambdarank", n_estimators=600, learning_rate=0.05, num_leaves=63,
        min_data_in_leaf=20, feature_fraction=0.9, lambda_l2=0.0, max_bin=255,
        lambdarank_truncation_level=64, n_grades=16, grade_mode="quantile", label_gain=None,
        max_group_size=64, early_stopping_rounds=100, eval_every=10, num_threads=None, task_relative=True,
        finetune_rounds=300,
    )
    # directories saved before the within-task features existed were trained on the raw flat features
    _legacy_hparams = dict(task_relative=False)

    def _library_versions(self) -> dict:
        import lightgbm

        return {"numpy": np.__version__, "lightgbm": lightgbm.__version__}

    def _params(self) -> dict:
        hp = self.hparams
        if hp["objective"] not in ("lambdarank", "rank_xendcg"):
            raise ValueError("objective must be 'lambdarank' or 'rank_xendcg'")
        gain = hp["label_gain"] if hp["label_gain"] is not None else list(range(hp["n_grades"]))
        p = dict(
            objective=hp["objective"], learning_rate=hp["learning_rate"], num_leaves=hp["num_leaves"],
            min_data_in_leaf=hp["min_data_in_leaf"], feature_fraction=hp["feature_fraction"],
            lambda_l2=hp["lambda_l2"], max_bin=hp["max_bin"], label_gain=[float(g) for g in gain],
            lambdarank_truncation_level=hp["lambdarank_truncation_level"], metric="None",
            seed=self.seed, deterministic=True, force_row_wise=True, verbosity=-1,
        )
        if hp["num_threads"]:
            p["num_threads"] = int(hp["num_threads"])
        return p

    def query_layout(self, task_ids: np.ndarray, rng: np.random.Generator):
        """Row order (records of a query contiguous) and query sizes; tasks over
        max_group_size rows are cut into random near-equal sub-groups."""
        order = _metrics.task_slices(task_ids)[0]
        cap = int(self.hparams["max_group_size"])
        return _metrics.cap_queries(order, np.asarray(task_ids)[order], cap, rng)

    def fit(self, train: dict, valid: dict | None = None) -> "GBDTRanker":
        t0 = time.perf_counter()
        self.input_dims = None
        self.history, self.best_epoch, self.fine_tuned = [], None, None
        if not _task_groups(_as(train, "task_ids", np.int64, 1), 2):  # as the torch models refuse it
            raise ValueError("training data has no task with >= 2 records")
        self.booster = self._boost(train, valid, int(self.hparams["n_estimators"]), None)
        best = self.booster.best_iteration
        self.best_epoch = int(best) if best and best > 0 else self.booster.current_iteration()
        self.fit_seconds = time.perf_counter() - t0
        return self

    def fine_tune(self, train: dict, valid: dict | None = None) -> "GBDTRanker":
        """Boost up to ``finetune_rounds`` more trees on ``train`` alone, on top of the fitted model's trees up to
        its best iteration (LightGBM's ``init_model``); with ``valid``, early stopping on its PCA, and the model
        before fine-tuning wins when the new trees do not beat it."""
        import lightgbm as lgb

        self._require_fitted()
        t0 = time.perf_counter()
        base = lgb.Booster(model_str=self.booster.model_to_string(num_iteration=self.best_epoch))
        n0 = base.current_iteration()
        start_pca = None
        if valid is not None:
            start_pca = _metrics.evaluate_predictions(valid["task_ids"], valid["labels"], self.predict(valid))["pca"]
        h0 = len(self.history)  # the entries _boost appends are this fine-tuning's
        booster = self._boost(train, valid, int(self.hparams["finetune_rounds"]), base)
        best = booster.best_iteration if booster.best_iteration and booster.best_iteration > 0 else None
        end = best or booster.current_iteration()
        best_pca = max((h["valid_pca"] for h in self.history[h0:]), default=None)
        kept = valid is None or (best_pca is not None and best_pca > start_pca)
        if kept:
            self.booster, self.best_epoch = booster, int(end)
        else:
            self.booster, self.best_epoch = base, n0
        self.fine_tuned = {"records": int(len(train["labels"])), "best_epoch": int(end) - n0 if kept else None,
                           "seconds": round(time.perf_counter() - t0, 2)}
        self.fit_seconds = (self.fit_seconds or 0.0) + time.perf_counter() - t0
        return self

    def _boost(self, train: dict, valid: dict | None, n_rounds: int, init_model):
        """LightGBM over ``train`` (queries = tasks cut to ``max_group_size``), early stopping on the validation
        PCA every ``eval_every`` rounds; ``init_model``: boost on top of these trees (fine-tuning)."""
        import lightgbm as lgb

        hp = self.hparams
        phase = "fit" if init_model is None else "fine-tune"
        flat = _as(train, "flat", np.float32, 2)
        task_ids = _as(train, "task_ids", np.int64, 1)
        labels = _as(train, "labels", np.float32, 1)
        _n_records({"flat": flat, "task_ids": task_ids, "labels": labels})
        if not np.all(np.isfinite(labels)):
            raise ValueError("training labels must be finite (drop invalid records before fit)")
        if self.input_dims is None:
            self.input_dims = {"flat_dim": int(flat.shape[1])}
        else:
            self._check_dims({"flat_dim": int(flat.shape[1])})
        flat = self.flat_inputs(train, flat)
        rng = np.random.default_rng(self.seed + (0 if init_model is None else 2))
        rows, sizes = self.query_layout(task_ids, rng)
        grades = relevance_grades(task_ids, labels, hp["n_grades"], hp["grade_mode"])
        params = self._params()
        dtrain = lgb.Dataset(flat[rows], grades[rows], group=sizes, params={"max_bin": hp["max_bin"]},
                             free_raw_data=True)
        callbacks = []
        feval = None
        valid_sets = None
        if valid is not None:
            vflat = _as(valid, "flat", np.float32, 2)
            self._check_dims({"flat_dim": int(vflat.shape[1])})
            vtask = _as(valid, "task_ids", np.int64, 1)
            vflat = self.flat_inputs(valid, vflat)
            vlab = _as(valid, "labels", np.float32, 1)
            vrows, vsizes = self.query_layout(vtask, np.random.default_rng(self.seed + 1))
            vgr = relevance_grades(vtask, vlab, hp["n_grades"], hp["grade_mode"])
            dvalid = lgb.Dataset(vflat[vrows], vgr[vrows], group=vsizes, reference=dtrain)
            valid_sets = [dvalid]
            # scored in the records' own order, as evaluate scores them (TenSet's PCA counts a pair of tied
            # predictions by the records' order: in LightGBM's query order the history differed from evaluate)
            back = np.empty(len(vrows), np.int64)
            back[vrows] = np.arange(len(vrows))
            state = {"calls": 0, "last": -np.inf}
            every = max(1, int(hp["eval_every"]))

            def valid_pca(preds, _ds):
                state["calls"] += 1
                it = state["calls"]
                if it == 1 or it % every == 0:
                    m = _metrics.evaluate_predictions(vtask, vlab, np.asarray(preds)[back])
                    state["last"] = m["pca"]
                    self.history.append(_json_safe(
                        {"iteration": it, **({"phase": phase} if init_model is not None else {}),
                         **{f"valid_{k}": v for k, v in _summary(m).items()}}))
                return "pca", state["last"], True

            feval = valid_pca
            callbacks.append(lgb.early_stopping(int(hp["early_stopping_rounds"]), verbose=False))
        bar = _progress(range(n_rounds), self.progress, desc=f"gbdt {phase}", unit="tree")
        if not getattr(bar, "disable", True):
            callbacks.append(lambda env: bar.update(1))
        booster = lgb.train(params, dtrain, num_boost_round=n_rounds, valid_sets=valid_sets,
                            valid_names=["valid"] if valid_sets else None, feval=feval,
                            callbacks=callbacks, init_model=init_model)
        bar.close()
        return booster

    def predict(self, data: dict) -> np.ndarray:
        self._require_fitted()
        flat = _as(data, "flat", np.float32, 2)
        self._check_dims({"flat_dim": int(flat.shape[1])})
        flat = self.flat_inputs(data, flat)
        kw = {"num_threads": int(self.hparams["num_threads"])} if self.hparams["num_threads"] else {}
        return np.asarray(self.booster.predict(flat, num_iteration=self.best_epoch, **kw), dtype=np.float64)

    def _save_weights(self, path: Path) -> None:
        self.booster.save_model(str(path), num_iteration=self.best_epoch)

    def _load_weights(self, path: Path) -> None:
        import lightgbm as lgb

        try:
            self.booster = lgb.Booster(model_file=str(path))
        except Exception as e:
            raise ModelLoadError(f"cannot read LightGBM model {path}: {e}") from e


_KINDS: dict[str, type[Ranker]] = {c.kind: c for c in (AttentionRanker, MLPRanker, GBDTRanker)}
