"""Experiment (not the product's default): model input variants on the transfer splits of benchmarks/model_splits.py.

    python benchmarks/attention_variants.py SPLIT VARIANT [--model attention|gbdt] [--seed S]
    # SPLIT: k80_mi50 | no_depthwise | k80_mi50_fs10 | k80_tasks (| within_k80)
    # VARIANT: default | relonly | hw | tokrelonly | relall | taskvalid | loops | loopsrel | threads | quantile
    #          | opbalance

Needs the converted datasets and splits that ``python benchmarks/model_splits.py`` leaves under
/tmp/tc-bench-model-splits. 24 epochs, one thread; prints PCA / top-1 / top-5 on the test part as one JSON line.

- ``relonly``: the flat features only as standardised within the task (no raw ones). Measured before the tokens were
  centred within the task (seed 0; PCA / top-1 / top-5): k80_mi50 0.743/0.792/0.911 -> 0.742/0.768/0.901;
  no_depthwise 0.597/0.633/0.785 -> 0.605/0.687/0.810. The variant ``tokrel`` measured then (tokens plus the tokens
  centred within the task: k80_mi50 0.754/0.824/0.907, no_depthwise 0.645/0.751/0.833) became the default
  (``features.task_centred_tokens``, ``token_relative``). Re-measured on today's default (session 9, seed 0):
  k80_mi50 0.759/0.857/0.911 -> relonly 0.758/0.831/0.904; no_depthwise 0.660/0.789/0.863 -> 0.661/0.780/0.846.
- ``hw`` (session 9): the hardware a record was measured on as flat features, log2(1 + value) of ``HW_COLUMNS``
  (Ansor's HardwareParams and the target's max_num_threads; constant within a task, so they act only through
  interactions). Seed 0 unless said, against the default:
  k80_mi50_fs10 attention 0.831/0.909/0.956 -> 0.844/0.929/0.966, GBDT 0.794/0.919/0.965 -> 0.794/0.937/0.962;
  no_depthwise attention 0.660/0.789/0.863 -> 0.648/0.755/0.831, seed 1 0.640/0.738/0.841 -> 0.564/0.519/0.781;
  k80_mi50 (one hardware trains: the columns are constant and the model ignores them) 0.759/0.857/0.911 ->
  0.760/0.844/0.915. Hardware inputs help when the test hardware is among the training hardware (few-shot: +2
  top-1 points for both models, so GBDT still leads top-1) and hurt badly when an operator is held out (the model
  fits per-hardware habits of the training operators), so they are not in the product's features.
- ``tokrelonly`` / ``relall`` (session 11): the schedule tokens only as centred within the task (no raw copy), and
  for ``relall`` the flat features only as standardised within the task too: the model then sees nothing absolute.
  PCA / top-1 / top-5 against the default (default no_depthwise seeds 0/1/2: 0.660/0.789/0.863, 0.640/0.738/0.841,
  0.632/0.747/0.848): no_depthwise ``tokrelonly`` 0.672/0.798/0.860, 0.659/0.700/0.848, 0.658/0.765/0.862;
  ``relall`` 0.664/0.771/0.864, 0.670/0.751/0.860, 0.666/0.762/0.872 (mean 0.667/0.761/0.865 against
  0.644/0.758/0.851: steadier and better on PCA and top-5 with an operator held out). But ``relall`` loses
  everywhere else (seed 0 unless said): within_k80 0.871/0.972/0.992 -> 0.859/0.970/0.989 (top-1 under the 0.97
  bar), k80_mi50 0.759/0.857/0.911 -> 0.754/0.835/0.902 (seed 1: 0.749/0.829/0.900), k80_mi50_fs10 (before
  fine-tuning) 0.831/0.909/0.956 -> 0.818/0.902/0.954. Absolute tile sizes and extents matter within a hardware and
  across GPUs; only operator transfer does better without them. Not adopted. ``tokrelonly`` re-measured in session 13
  on the splits it had not seen (today's default, ``workload_args=False``): k80_tasks seeds 0/1/2
  0.736/0.897/0.942, 0.754/0.917/0.953, 0.756/0.939/0.956 (mean 0.749/0.918/0.951 against the default's
  0.749/0.928/0.954), k80_mi50 seed 0 0.748/0.823/0.912 (default 0.757/0.874/0.909), within_k80 seed 0
  0.865/0.967/0.990 (default 0.868/0.972/0.992, top-1 under the 0.97 bar). Unseen tasks gain nothing either.
- ``taskvalid`` (session 11): early stopping on 10% of the training *tasks*, held out whole, instead of 10% of the
  training records, so that validation, like the test part of a transfer split, sees only tasks the model did not
  train on. no_depthwise seeds 0/1/2: 0.656/0.773/0.861, 0.649/0.741/0.840, 0.625/0.715/0.828 (mean top-1 0.743
  against the default's 0.758; seed 2 stopped after a few epochs); k80_mi50 seed 0: 0.752/0.828/0.915 against
  0.759/0.857/0.911. Worse: splits keep validating on records.
- ``loops`` / ``loopsrel`` (session 13): the loop extents replayed from Ansor's steps (``loops.loop_tokens``: the
  loop each annotation binds, each fuse makes, each follow split's lengths) as 7 more token columns; ``loops``
  gives them raw and centred within the task like the other columns, ``loopsrel`` centred only (the raw copy 0).
  PCA / top-1 / top-5 against the default (today's, ``workload_args=False``):
  k80_tasks seeds 0/1/2 default 0.748/0.933/0.952, 0.746/0.918/0.953, 0.755/0.933/0.957; ``loops``
  0.764/0.933/0.952, 0.755/0.948/0.955, 0.755/0.917/0.956 (mean PCA 0.749 -> 0.758); ``loopsrel`` seed 0
  0.767/0.933/0.956. k80_mi50 seeds 0/1/2 default 0.757/0.874/0.909, 0.763/0.845/0.905, 0.759/0.844/0.916;
  ``loops`` 0.765/0.871/0.909, 0.763/0.823/0.913, 0.768/0.847/0.919 (mean 0.760/0.854/0.910 ->
  0.765/0.847/0.914); ``loopsrel`` seed 0 0.764/0.860/0.922. But no_depthwise seed 0 default 0.668/0.793/0.852;
  ``loops`` 0.570/0.652/0.761 (seed 1: 0.570/0.669/0.812), ``loopsrel`` 0.619/0.715/0.845; the annotation and
  fuse extents alone (centred only) 0.594/0.696/0.855, the follow-split lengths alone 0.628/0.589/0.801, only the
  threadIdx/vthread extents (raw and centred) 0.628/0.718/0.862, ``loops`` with the columns zeroed for a random
  half of the training records 0.629/0.732/0.838. Every form costs operator transfer 4-10 PCA and 6-14 top-1
  points (the bar there is top-1 >= 0.753): what the training operators' fast programs do with threads and
  blocks does not carry over to depthwise convolutions. Not adopted.
- ``threads`` (session 18): one more token column, the extent of the loop each thread or vthread binding binds
  (``loops.loop_tokens``' ``ann_extent`` at those tokens), raw and centred within the task. K80 -> MI50 zero-shot
  top-5 0.911 -> 0.920 over seeds 0-4 (higher in every seed), but MI50 -> K80 top-5 0.935 -> 0.930 (lower in every
  seed), unseen-task top-1 0.912 -> 0.900 over six held-out sets, no_depthwise seed 0 0.668 / 0.793 / 0.852 ->
  0.628 / 0.718 / 0.862. Not adopted (reports/model_splits.md, "What limits transfer").
- ``quantile`` (session 19): the raw flat features and the raw token columns each mapped through their training
  quantiles (64 bins, piecewise linear, onto [0, 1]; a value outside the training range maps to the edge, the way a
  tree's thresholds treat it), the tokens centred within the task after the mapping. The idea: GBDT leads PCA with
  depthwise held out because a network extrapolates linearly from inputs outside the training range and a tree does
  not. no_depthwise seeds 0 / 1 / 2: 0.667 / 0.763 / 0.871, 0.657 / 0.788 / 0.852, 0.654 / 0.813 / 0.867 (mean
  0.659 / 0.788 / 0.864 against the default's 0.656 / 0.779 / 0.848 and GBDT's 0.675 / 0.770 / 0.874); the flat
  features alone mapped (seed 0) 0.636 / 0.776 / 0.841, the tokens alone 0.638 / 0.810 / 0.870. k80_mi50 seed 0
  0.751 / 0.845 / 0.909 (default 0.759 / 0.857 / 0.911). Within a seed sd on the held-out operator, GBDT still
  leads its PCA, and zero-shot hardware loses: not adopted.
- ``opbalance`` (session 20): the training records of each operator class repeated round(sqrt(n_max / n_class))
  times, at most 4 (the hardware balancing's rule, by operator): conv2d 1x, pooling and dense 2x, elementwise and
  reduction 4x. The idea: with depthwise convolutions held out, the memory-bound classes (pooling above all, a
  window without a channel reduction) are closer to them than conv2d is, and conv2d is two thirds of the records.
  no_depthwise seeds 0 / 1 / 2: 0.659 / 0.801 / 0.865, 0.651 / 0.762 / 0.872, 0.650 / 0.761 / 0.858 (mean 0.653 /
  0.775 / 0.865 against the default's 0.656 / 0.779 / 0.848 and GBDT's 0.675 / 0.770 / 0.874); repeats of up to 8x
  (seed 0) 0.645 / 0.753 / 0.854. Trained on one class alone (throwaway harness, seed 0): pooling 0.520 / 0.339 /
  0.628, conv2d 0.648 / 0.752 / 0.836, so what carries over to depthwise comes from conv2d, not pooling. Not adopted.
  (This variant reproduces the harness's seed-0 row exactly.)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import polars as pl

from tenset_curate.features import ANNOTATIONS, PRIMS, TaskCentredTokens, task_centred_tokens
from tenset_curate.loops import STEP_OUTPUTS, loop_tokens
from tenset_curate.metrics import evaluate_predictions
from tenset_curate.training import _part, arrays, balanced_rows, labelled_split, make_model

from model_splits import SPLITS

HW_COLUMNS = ["hw_max_shared_memory_per_block", "hw_max_threads_per_block", "hw_max_vthread_extent", "hw_warp_size",
              "target_max_num_threads", "hw_vector_unit_bytes", "hw_cache_line_bytes"]


def hardware_columns(df: pl.DataFrame) -> np.ndarray:
    """log2(1 + value) of ``HW_COLUMNS`` per record (null or negative: 0)."""
    return np.stack([np.log2(1 + np.clip(df[c].fill_null(0).to_numpy().astype(np.float64), 0, None))
                     for c in HW_COLUMNS], axis=1).astype(np.float32)


def quantile_map(x: np.ndarray, fit: np.ndarray, bins: int = 64) -> np.ndarray:
    """Each column of ``x`` (last axis) mapped piecewise linearly onto [0, 1] through the quantiles of the same
    column of ``fit`` (rows = samples); values beyond the fitted range map to 0 or 1; a constant column to 0."""
    out = np.zeros(x.shape, np.float32)
    for j in range(x.shape[-1]):
        q = np.unique(np.quantile(fit[:, j], np.linspace(0, 1, bins + 1)))
        if len(q) > 1:
            out[..., j] = np.interp(x[..., j], q, np.linspace(0, 1, len(q)))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("split", choices=list(SPLITS))
    ap.add_argument("variant", choices=["default", "relonly", "hw", "tokrelonly", "relall", "taskvalid", "loops",
                                        "loopsrel", "threads", "quantile", "opbalance"])
    ap.add_argument("--model", choices=["attention", "gbdt"], default="attention")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="/tmp/tc-bench-model-splits")
    a = ap.parse_args(argv)
    df = labelled_split(Path(a.work) / SPLITS[a.split][0], a.split)
    d = arrays(df)
    part = df["part"].to_numpy()
    if a.variant == "taskvalid":  # the validation part: 10% of the training tasks, whole, instead of 10% of records
        part = part.copy()
        trv = (part == "train") | (part == "valid")
        tasks = df["hardware"] + "/" + df["task_id"]
        u = np.array([int.from_bytes(hashlib.blake2b(f"{a.seed}/{t}".encode(), digest_size=8).digest(), "little")
                      / 2 ** 64 for t in tasks.to_list()])
        part[trv] = np.where(u[trv] < 0.1, "valid", "train")
    hp = dict(num_threads=1) if a.model == "attention" else {}
    if a.variant == "relonly":
        d = dict(d, flat=d.pop("flat_rel"))
        hp["task_relative"] = False
    elif a.variant in ("tokrelonly", "relall"):  # the schedule tokens only as centred within the task
        d = dict(d, tokens=np.asarray(d.pop("tok_rel")))  # dense: these variants train on it as the tokens
        hp["token_relative"] = False
        if a.variant == "relall":  # ... and the flat features only as standardised within the task
            d = dict(d, flat=d.pop("flat_rel"))
            hp["task_relative"] = False
    elif a.variant == "hw":
        hw = hardware_columns(df)  # constant within a task: its within-task standardised value is 0
        d = dict(d, flat=np.concatenate([d["flat"], hw], 1), flat_rel=np.concatenate([d["flat_rel"], 0 * hw], 1))
    elif a.variant in ("loops", "loopsrel"):  # the replayed loop extents as more token columns
        base = d["tokens"].shape[2]
        toks = np.concatenate([d["tokens"], loop_tokens(df["steps"], d["tokens"].shape[1])], axis=2)
        if a.variant == "loopsrel":  # ... centred within the task only: the raw copy of those columns is 0
            rel = task_centred_tokens(toks, d["mask"], d["task_ids"])  # dense: the raw tokens now differ from it
            toks[:, :, base:] = 0
            d = dict(d, tokens=toks, tok_rel=rel)
        else:
            d = dict(d, tokens=toks, tok_rel=TaskCentredTokens.of(toks, d["mask"], d["task_ids"]))
    elif a.variant == "threads":  # one more token column: the extent a thread or vthread binding binds
        tok = d["tokens"]
        binds = sum(tok[:, :, len(PRIMS) + ANNOTATIONS.index(k)] for k in ("thread_bind", "vthread")) > 0
        ext = loop_tokens(df["steps"], tok.shape[1])[:, :, STEP_OUTPUTS.index("ann_extent")]
        toks = np.concatenate([tok, np.where(binds, ext, 0).astype(np.float32)[:, :, None]], axis=2)
        d = dict(d, tokens=toks, tok_rel=TaskCentredTokens.of(toks, d["mask"], d["task_ids"]))
    elif a.variant == "quantile":  # raw inputs through their training quantiles, saturating outside the range
        tr = part == "train"
        flat = quantile_map(d["flat"], d["flat"][tr])
        tok = quantile_map(d["tokens"], d["tokens"][tr][d["mask"][tr]]) * d["mask"][:, :, None]
        d = dict(d, flat=flat, tokens=tok, tok_rel=TaskCentredTokens.of(tok, d["mask"], d["task_ids"]))
    m = make_model(a.model, a.seed, 24, "cpu", False, **hp)
    rows = balanced_rows(np.flatnonzero(part == "train"), d["groups"]["hardware"])
    if a.variant == "opbalance":  # each operator class's rows repeated round(sqrt(n_max / n)) times, at most 4
        op = d["groups"]["op_class"]
        names, counts = np.unique(op[rows], return_counts=True)
        rep = {c: min(4, max(1, int(round(float(np.sqrt(counts.max() / n)))))) for c, n in zip(names, counts)}
        rows = np.concatenate([rows, *[rows[op[rows] == c] for c, r in rep.items() for _ in range(r - 1)]])
    t0 = time.time()
    m.fit(_part(d, rows), _part(d, part == "valid") if (part == "valid").any() else None)
    t = _part(d, part == "test")
    r = evaluate_predictions(t["task_ids"], t["labels"], m.predict(t))
    print(json.dumps({"split": a.split, "variant": a.variant, "model": a.model, "seed": a.seed,
                      **{k: round(float(r[k]), 4) for k in ("pca", "top1", "top5")},
                      "seconds": round(time.time() - t0)}), flush=True)


if __name__ == "__main__":
    main()
