"""Experiment: the attention model's seed spread and the weight of LambdaRank in its ``ranknet+lambdarank`` loss,
on the transfer splits of benchmarks/model_splits.py.

    python benchmarks/attention_loss.py --splits k80_mi50 --weights 0.05 --seeds 1 2
    python benchmarks/attention_loss.py --splits k80_mi50 no_depthwise --weights 0.25 1.0
    python benchmarks/attention_loss.py --splits k80_mi50 --hp dropout=0.2 --seeds 0 1 2
    python benchmarks/attention_loss.py --splits k80_mi50 --worst-tasks 5

Converts and splits like ``benchmarks/model_splits.py`` (same cache under --work), trains the attention model with
the product's defaults except the LambdaRank weight (``lambdarank_weight``; default ``model.LAMBDARANK_WEIGHT``),
24 epochs, one thread, and prints one JSON line per (split, weight, seed): PCA / top-1 / top-5 on the test part.
``--hp NAME=VALUE`` overrides any other hyperparameter of the attention model (``dropout``, ``d_model``, ``epochs``, ...);
``--worst-tasks N`` also prints the N test tasks that lose the most top-5 (1 - top-5, weighted like the aggregate).

Measured (session 8, 2 cores; reports/model_splits.md "Seed spread and the LambdaRank weight"):

- k80_mi50, weight 0.05, seeds 0/1/2: PCA 0.759/0.764/0.754, top-1 0.857/0.839/0.839, top-5 0.911/0.914/0.912;
- k80_mi50, seed 0, weight 0.25: 0.757/0.843/0.910; weight 1.0: 0.755/0.801/0.902;
- no_depthwise, seed 0, weight 0.05: 0.660/0.789/0.863; 0.25: 0.658/0.805/0.859; 1.0: 0.611/0.670/0.817.

More weight on the top of the list does not lift zero-shot top-5, and at 1.0 costs top-1 everywhere: 0.05 stays.
Session 16, ``--weights 0.15`` and ``0.25`` with seeds 0-2 on all five splits (reports/model_splits.md, "The
LambdaRank weight"): 0.25 holds within_k80's top-1 at 0.971-0.972 in every seed (0.05: 0.962-0.973) and lifts the
few-shot split's top-1 / top-5 to 0.925 / 0.966 (0.915 / 0.960), but lowers top-1 on unseen tasks (six held-out
sets 0.912 -> 0.900, three under 0.90), with depthwise held out (0.779 -> 0.761) and zero-shot (0.854 -> 0.840):
0.05 stayed the model's default (``model.LAMBDARANK_WEIGHT``); session 17 made ``fit_on_frame`` pick 0.25 for
splits whose test tasks train (``training.lambdarank_weight_for``, ``benchmarks/lambdarank_by_split.py``).
``--weights`` trains through the model's ``lambdarank_weight``.
Session 9, k80_mi50 (reports/model_splits.md "Where zero-shot top-5 is lost"): ``--hp dropout=0.2`` seeds 0/1/2
top-5 0.919/0.905/0.903 (mean 0.909 against the default's 0.912); dropout 0.1 / 0.3, ``d_model=64``, ``epochs=12``
(seed 0): 0.917 / 0.910, 0.910, 0.910. ``--worst-tasks 6``: six depthwise and conv2d tasks lose 3.05 of the 8.9
top-5 points, where MI50's fastest programs use another thread-block shape than K80's.
Session 14, ``--gap-power 1`` (RankNet's pairs weighted by their label gap, the model's ``pair_gap_power`` since
session 35; reports/model_splits.md "Gap-weighted pairs"): k80_tasks seeds 0/1/2 PCA 0.769/0.762/0.762 (default 0.748/0.746/0.755), but within_k80 seed 0
0.852/0.964/0.988 (default 0.868/0.972/0.992) and k80_mi50_fs10 seed 0 PCA 0.827 (0.841): not adopted.
``--gap-power 1 --then-default`` (then 8 epochs of the default loss): k80_tasks seeds 0/1/2 PCA 0.763/0.755/0.766,
within_k80 seed 0 0.867/0.970/0.991: a lead, not adopted (reports/model_splits.md).
Session 22 (reports/model_splits.md, "Positions by primitive"): ``fit_on_frame`` now picks the attention model's
``positions`` by split (``training.positions_for``: ``kind`` with an operator class held out), so the absolute
positions on such a split take ``--hp 'positions="absolute"'``. Three seeds each, absolute -> kind, PCA / top-1 /
top-5: no_depthwise 0.656 / 0.779 / 0.879 -> 0.690 / 0.768 / 0.896; no_pooling 0.578 / 0.410 / 0.664 -> 0.897 /
0.950 / 0.971; no_dense 0.651 / 0.869 / 0.943 -> 0.633 / 0.828 / 0.936. Session 25: since 8de3aee the kind model trains
to other weights from the same seed (``--splits no_dense --seeds 0``: 0.647 / 0.884 / 0.942 -> 0.607 / 0.677 / 0.921);
seeds 0-2 at HEAD no_depthwise 0.684 / 0.757 / 0.880, no_pooling 0.903 / 0.976 / 0.987, no_dense 0.612 / 0.772 / 0.924
(reports/model_splits.md, "The operator rows on the current code"). Seed 0, ``--hp 'positions="kind"'`` (weight 0.05
here on every split): within_k80 0.868 / 0.972 / 0.992 -> 0.852 / 0.966 / 0.989, k80_mi50 0.757 / 0.874 / 0.926 -> 0.744
/ 0.842 / 0.923, k80_mi50_fs10 0.844 / 0.904 / 0.968 -> 0.816 / 0.904 / 0.953, k80_tasks 0.748 / 0.933 / 0.954 -> 0.739
/ 0.930 / 0.954.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import polars as pl

import tenset_curate.model as model
from tenset_curate.metrics import evaluate_predictions
from tenset_curate.training import _part, arrays, fit_on_frame

from model_splits import SPLITS, convert_sets, split_frame


def print_worst_tasks(r: dict, test_df: pl.DataFrame, task_ids, n: int) -> None:
    """The n tasks whose top-5 loss (1 - top-5) weighs most in the aggregate (n_records / all records)."""
    pt = r["per_task"]
    share = (1 - pt["top5"]) * pt["n_records"] / pt["n_records"].sum()
    key_of = dict(zip(task_ids.tolist(), test_df["workload_key"].to_list()))
    for i in np.argsort(-share)[:n]:
        t = int(pt["task_id"][i])
        print(json.dumps({"task": key_of[t], "op_class": str(pt["op_class"][i]), "records": int(pt["n_records"][i]),
                          "top1": round(float(pt["top1"][i]), 3), "top5": round(float(pt["top5"][i]), 3),
                          "pca": round(float(pt["pca"][i]), 3), "top5_points_lost": round(float(share[i]) * 100, 2)}),
              flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--realdata", default=str(Path(__file__).resolve().parents[2] / "shared" / "realdata"))
    ap.add_argument("--work", default="/tmp/tc-bench-model-splits")
    ap.add_argument("--splits", nargs="+", default=["k80_mi50"], choices=list(SPLITS))
    ap.add_argument("--weights", nargs="+", type=float, default=[model.LAMBDARANK_WEIGHT],
                    help="LambdaRank weights to train with (the attention model's lambdarank_weight)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--hp", nargs="*", default=[], metavar="NAME=VALUE",
                    help="other attention hyperparameters (JSON values: dropout=0.2, d_model=64)")
    ap.add_argument("--worst-tasks", type=int, default=0)
    ap.add_argument("--gap-power", type=float, default=None,
                    help="weight RankNet's pairs by (label gap)^P instead of uniformly (gap_ranknet_lambdarank)")
    ap.add_argument("--then-default", action="store_true",
                    help="with --gap-power: after the fit, Ranker.fine_tune on the training part with the default loss")
    a = ap.parse_args(argv)
    hp = {k: json.loads(v) for k, v in (h.split("=", 1) for h in a.hp)}
    epochs = hp.pop("epochs", a.epochs)
    ds = convert_sets(a.realdata, a.work)
    for name in a.splits:
        df = split_frame(ds, name)
        is_test = df["part"].to_numpy() == "test"
        test = _part(arrays(df), is_test)
        for w in a.weights:
            for seed in a.seeds:
                t0 = time.perf_counter()
                gap = {"pair_gap_power": a.gap_power} if a.gap_power is not None else {}
                m, d = fit_on_frame(df, "attention", seed=seed, epochs=epochs, num_threads=1,
                                    lambdarank_weight=w, **({"fine_tune": None} if a.then_default else {}),
                                    **gap, **hp)
                if a.then_default:  # the default loss from here on (fine_tune reads the model's hparams)
                    m.hparams["pair_gap_power"] = 0.0
                    part = df["part"].to_numpy()
                    m.fine_tune(_part(d, part == "train"),
                                _part(d, part == "valid") if (part == "valid").any() else None)
                r = evaluate_predictions(test["task_ids"], test["labels"], m.predict(test),
                                         groups={"op_class": test["groups"]["op_class"]})
                print(json.dumps({"split": name, "weight": w, "seed": seed, **({"hp": hp} if hp else {}),
                                  **({"gap_power": a.gap_power} if a.gap_power is not None else {}),
                                  **({"then_default": True} if a.then_default else {}),
                                  **{k: round(float(r[k]), 4) for k in ("pca", "top1", "top5")},
                                  "seconds": round(time.perf_counter() - t0)}), flush=True)
                if a.worst_tasks:
                    print_worst_tasks(r, df.filter(pl.Series(is_test)), test["task_ids"], a.worst_tasks)


if __name__ == "__main__":
    main()
