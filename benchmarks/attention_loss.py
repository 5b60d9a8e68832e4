"""Experiment: the attention model's seed spread and the weight of LambdaRank in its ``ranknet+lambdarank`` loss,
on the transfer splits of benchmarks/model_splits.py.

    python benchmarks/attention_loss.py --splits k80_mi50 --weights 0.05 --seeds 1 2
    python benchmarks/attention_loss.py --splits k80_mi50 no_depthwise --weights 0.25 1.0

Converts and splits like ``benchmarks/model_splits.py`` (same cache under --work), trains the attention model with
the product's defaults except the LambdaRank weight (``model.ranknet_lambdarank_loss``; default 0.05), 24 epochs, one
thread, and prints one JSON line per (split, weight, seed): PCA / top-1 / top-5 on the test part.

Measured (session 8, 2 cores; reports/model_splits.md "Seed spread and the LambdaRank weight"):

- k80_mi50, weight 0.05, seeds 0/1/2: PCA 0.759/0.764/0.754, top-1 0.857/0.839/0.839, top-5 0.911/0.914/0.912;
- k80_mi50, seed 0, weight 0.25: 0.757/0.843/0.910; weight 1.0: 0.755/0.801/0.902;
- no_depthwise, seed 0, weight 0.05: 0.660/0.789/0.863; 0.25: 0.658/0.805/0.859; 1.0: 0.611/0.670/0.817.

More weight on the top of the list does not lift zero-shot top-5, and at 1.0 costs top-1 everywhere: 0.05 stays.
"""
from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import tenset_curate.model as model
from tenset_curate.metrics import evaluate_predictions
from tenset_curate.training import _part, arrays, fit_on_frame

from model_splits import SPLITS, convert_sets, split_frame


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--realdata", default=str(Path(__file__).resolve().parents[2] / "shared" / "realdata"))
    ap.add_argument("--work", default="/tmp/tc-bench-model-splits")
    ap.add_argument("--splits", nargs="+", default=["k80_mi50"], choices=list(SPLITS))
    ap.add_argument("--weights", nargs="+", type=float, default=[0.05])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--epochs", type=int, default=24)
    a = ap.parse_args(argv)
    ds = convert_sets(a.realdata, a.work)
    default_loss = model._LOSSES["ranknet+lambdarank"]
    try:
        for name in a.splits:
            df = split_frame(ds, name)
            test = _part(arrays(df), df["part"].to_numpy() == "test")
            for w in a.weights:
                model._LOSSES["ranknet+lambdarank"] = functools.partial(model.ranknet_lambdarank_loss, weight=w)
                for seed in a.seeds:
                    t0 = time.perf_counter()
                    m, _ = fit_on_frame(df, "attention", seed=seed, epochs=a.epochs, num_threads=1)
                    r = evaluate_predictions(test["task_ids"], test["labels"], m.predict(test))
                    print(json.dumps({"split": name, "weight": w, "seed": seed,
                                      **{k: round(float(r[k]), 4) for k in ("pca", "top1", "top5")},
                                      "seconds": round(time.perf_counter() - t0)}), flush=True)
    finally:
        model._LOSSES["ranknet+lambdarank"] = default_loss


if __name__ == "__main__":
    main()
