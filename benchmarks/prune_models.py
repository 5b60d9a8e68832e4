"""Experiment: what pruning costs the models the product trains, not only the fixed LightGBM proxy.

    python benchmarks/prune_models.py --logs ../shared/realdata/ansor/roller-mi50 --work /tmp/tc-bench-prune-mi50 \
        --ratios 0.45 0.7 --methods hybrid random --seeds 0 1 2 --models attention

``evaluate_prune.evaluate_methods`` with ``model`` set: the same within-task test split per seed as the proxy's
evaluation, the same pruned training records (``prune.select`` on the training part only); the model is trained the
way ``curate train`` trains it and stops early on a tenth of the kept records (``--valid-from pool``: on a tenth of
each task's training records set aside before pruning, the same for every run). Prints one JSON line per run, then
one per (model, method, ratio) with the mean against full data and, with ``random`` among the methods, the margin
over random paired by seed, in points (margins in paired sds). The results, written up from those lines by hand:
reports/prune_models.md.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tenset_curate.convert import convert
from tenset_curate.evaluate_prune import EVAL_MODELS, evaluate_methods, paired_differences


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", nargs="+", default=["../shared/realdata/ansor/roller-mi50"])
    ap.add_argument("--work", default="/tmp/tc-bench-prune-mi50")
    ap.add_argument("--ratios", nargs="+", type=float, default=[0.45, 0.7])
    ap.add_argument("--methods", nargs="+", default=["hybrid", "random"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--models", nargs="+", default=["attention"], choices=list(EVAL_MODELS))
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--min-keep", type=int, default=8)
    ap.add_argument("--valid-from", choices=["kept", "pool"], default="kept")
    a = ap.parse_args(argv)
    ds = Path(a.work) / "dataset"
    convert(a.logs, ds, workers=2, only=True)  # a --work of other logs is refused, not mixed in
    for model in a.models:
        rows = evaluate_methods(ds, a.ratios, a.methods, a.seeds, a.min_keep, model, a.epochs, a.valid_from)
        for r in rows:
            print(json.dumps({"logs": a.logs, "model": model, "valid_from": a.valid_from, **r}), flush=True)
        for ratio in a.ratios:
            for method in a.methods:
                out = {"summary": True, "model": model, "method": method, "ratio": ratio}
                for k, v in paired_differences(rows, method, ratio, a.seeds).items():
                    if isinstance(v, float):  # differences in points, margins in paired sds
                        out[k] = round(v * 100, 2) if k.endswith(("_vs_full", "_vs_random", "_paired_sd")) else \
                            round(v, 2)
                print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
