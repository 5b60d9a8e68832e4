"""Experiment: one setting of hybrid's tuning constants against full data (and random), the way prune.py's
docstring reports its sweeps.

    python benchmarks/prune_sweep.py --logs ../shared/realdata/ansor/roller-mi50 --work /tmp/tc-bench-prune-mi50 \
        --set HYBRID_ALLOCATION_POWER=0.75 --ratios 0.45 0.7 --methods hybrid random

Converts the logs (cached under --work, the same cache as ``benchmarks/prune.py``), sets each ``--set NAME=VALUE``
on ``tenset_curate.prune`` (only the constants that exist there), runs ``evaluate_methods`` (the fixed LightGBM
proxy on full and on pruned training data, the same test split per seed) and prints one JSON line per (method,
ratio) of ``evaluate_prune.against_bars`` in points: mean PCA and top-1 against full data and, when ``random`` is
among the methods, the paired margin over random with the sd of the paired difference, and whether the bar is met.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import tenset_curate.prune as prune
from tenset_curate.convert import convert
from tenset_curate.evaluate_prune import against_bars, evaluate_methods


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", nargs="+", default=["../shared/realdata/ansor/roller-k80"])
    ap.add_argument("--work", default="/tmp/tc-bench-prune")
    ap.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", dest="consts")
    ap.add_argument("--ratios", nargs="+", type=float, default=[0.45, 0.7])
    ap.add_argument("--methods", nargs="+", default=["hybrid"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    a = ap.parse_args(argv)
    consts = {}
    for item in a.consts:
        name, value = item.split("=", 1)
        if not name.isupper() or not hasattr(prune, name):
            raise SystemExit(f"--set {name}: tenset_curate.prune has no such constant")
        consts[name] = type(getattr(prune, name))(json.loads(value))
    ds = Path(a.work) / "dataset"
    convert(a.logs, ds, workers=2, only=True)  # a --work of other logs is refused, not mixed in
    saved = {k: getattr(prune, k) for k in consts}
    try:
        for k, v in consts.items():
            setattr(prune, k, v)
        rows = evaluate_methods(ds, a.ratios, a.methods, a.seeds)
    finally:
        for k, v in saved.items():
            setattr(prune, k, v)
    for r in against_bars(rows, methods=tuple(a.methods), ratios=tuple(a.ratios)):
        out = {"logs": a.logs, "set": consts, "method": r["method"], "ratio": r["ratio"]}
        for metric in ("pca", "top1"):
            out[f"{metric}_vs_full_points"] = round(r[f"{metric}_vs_full"] * 100, 2)
            if r["method"] != "random" and f"{metric}_vs_random" in r:
                out[f"{metric}_vs_random_points"] = round(r[f"{metric}_vs_random"] * 100, 2)
                sd = r[f"{metric}_paired_sd"]  # None for one seed
                out[f"{metric}_vs_random_paired_sd"] = None if sd is None else round(sd * 100, 2)
        if r["method"] != "random" and r["ratio"] in (0.45, 0.7):  # the bars are set at these two
            out["bar_met"] = r["met"]
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
