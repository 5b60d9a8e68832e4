"""Cost models on network-wise splits of a MetaSchedule collection the project made itself.

    curate collect --workloads all --trials 100 --out /tmp/tc-bench-networks/collected   # ~40 min on 2 cores
    python benchmarks/network_split.py --collected /tmp/tc-bench-networks/collected [--models attention gbdt mlp]
        [--seeds 0 1 2] [--epochs 24] [--out reports/network_split.md]

The GPU logs under ../shared have no network_info that matches them, so the network-wise bar of the model issue
could only be approached there by holding out random tasks (``k80_tasks`` in benchmarks/model_splits.py). A
collection by ``curate collect`` knows which network every layer comes from (its workloads.json; convert turns it
into the networks table), so here the split is the real one: every layer of the held-out networks is test, the
models train on the other networks' layers. Splits: TenSet's default (its test networks that the data has held out
together) and each network held out alone; and, for reference, the within-task split of the same data (TenSet's
90/10 per task). The attention model trains with one thread; the LambdaRank weight
follows the split (0.05: no test task trains).

Writes the Markdown table to --out and the rows to the same name with .json. ``random`` is the exact expectation
of a random ranking (PCA 0.5).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from tenset_curate.convert import convert
from tenset_curate.metrics import evaluate_predictions, random_topk_expectation
from tenset_curate.splits import TENSET_TEST_NETWORKS, load_dataset_tables, write_split
from tenset_curate.training import _part, arrays, fit_on_frame, labelled_split


def network_splits(nets: pl.DataFrame) -> dict[str, list[str]]:
    """{split name: held-out networks}: TenSet's default holdout (when the data has any of its test networks) and
    each network alone."""
    names = sorted(set(nets["network"].drop_nulls()))
    out = {}
    tenset = [n for n in TENSET_TEST_NETWORKS if n in names]
    if tenset and len(tenset) < len(names):
        out["tenset_default"] = tenset
    for n in names:
        out[f"no_{n}"] = [n]
    return out


def _mean_sd(v: list[float]) -> str:
    a = np.array(v)
    return f"{a.mean():.3f}" + (f" +- {a.std(ddof=1):.3f}" if len(a) > 1 else "")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--collected", required=True, help="a curate collect output folder (database + workloads.json)")
    ap.add_argument("--work", default="/tmp/tc-bench-networks/dataset")
    ap.add_argument("--models", nargs="+", default=["attention", "gbdt", "mlp"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--splits", nargs="+", default=None, help="split names (default: all, within_task first)")
    ap.add_argument("--out", default="reports/network_split.md")
    a = ap.parse_args(argv)
    ds = Path(a.work)
    convert([Path(a.collected)], ds)
    recs, nets = load_dataset_tables(ds)
    if nets is None:
        raise SystemExit(f"{a.collected}: no networks table (no collector workloads.json beside the database)")
    splits = {"within_task": None, **network_splits(nets)}  # within-task: the same data's in-distribution reference
    if a.splits:
        splits = {k: v for k, v in splits.items() if k in a.splits}
    per_net = nets.group_by("network").agg(pl.col("workload_key").n_unique().alias("tasks"))
    rows = []
    for name, held in splits.items():
        if held is None:
            write_split(ds, name, "within-task", seed=0)
        else:
            write_split(ds, name, "network", holdout=held, seed=0)
        df = labelled_split(ds, name)
        part = df["part"].to_numpy()
        base = {"split": name, "held_out": held or ["- (10% of each task)"],
                "test_tasks": int(df.filter(pl.col("part") == "test")["task_id"].n_unique()),
                "train_tasks": int(df.filter(pl.col("part") == "train")["task_id"].n_unique()),
                "train_records": int((part == "train").sum()), "test_records": int((part == "test").sum())}
        at, test = len(rows), None
        for kind in a.models:
            hp = {"num_threads": 1} if kind == "attention" else {}
            for seed in (a.seeds if kind != "mlp" else a.seeds[:1]):
                t0 = time.perf_counter()
                m, d = fit_on_frame(df, kind, seed=seed, epochs=a.epochs, **hp)
                secs = time.perf_counter() - t0
                if test is None:  # the arrays fit_on_frame featurised: the frame is featurised once per fit only
                    test = _part(d, part == "test")
                r = evaluate_predictions(test["task_ids"], test["labels"], m.predict(test))
                rows.append({**base, "model": kind, "seed": seed, "seconds": round(secs, 1),
                             **{k: round(float(r[k]), 4) for k in ("pca", "top1", "top5")}})
                print(json.dumps(rows[-1]), flush=True)
        if test is None:  # no model asked for: featurise for the random baseline alone
            test = _part(arrays(df), part == "test")
        rows.insert(at, {**base, "model": "random", "pca": 0.5,
                         **{f"top{k}": round(float(random_topk_expectation(test["task_ids"], test["labels"], k)), 4)
                            for k in (1, 5)}})
    lines = ["# Cost models on network-wise splits of the project's own MetaSchedule collection", "",
             f"Command: `python {' '.join(['benchmarks/network_split.py', *(argv if argv is not None else sys.argv[1:])])}`",
             "", "Networks in the collection (layers = tasks): "
             + ", ".join(f"{n} {t}" for n, t in sorted(per_net.iter_rows())) + f"; {recs.height} records.", "",
             "Test part of each split (every layer of the held-out networks); TenSet's metrics; mean +- sd over model "
             "seeds (MLP: the first seed only).", "",
             "| split | held out | train / test tasks | train / test records | model | seeds | PCA | top-1 | top-5 |",
             "|---|---|---|---|---|---|---:|---:|---:|"]
    for name in splits:
        sub = [r for r in rows if r["split"] == name]
        for kind in ["random", *a.models]:
            k = [r for r in sub if r["model"] == kind]
            if not k:
                continue
            r0 = k[0]
            seeds = "-" if kind == "random" else " ".join(str(r["seed"]) for r in k)
            lines.append(f"| {name} | {', '.join(r0['held_out'])} | {r0['train_tasks']} / {r0['test_tasks']} | "
                         f"{r0['train_records']} / {r0['test_records']} | {kind} | {seeds} | "
                         + " | ".join(_mean_sd([r[m] for r in k]) for m in ("pca", "top1", "top5")) + " |")
    loo = [n for n in splits if n.startswith("no_")]
    if len(loo) > 1:
        lines += ["", f"Mean over the {len(loo)} one-network-out splits (each split's seed mean, then the mean over "
                  "splits):", "", "| model | PCA | top-1 | top-5 |", "|---|---:|---:|---:|"]
        for kind in ["random", *a.models]:
            per = [[float(np.mean([r[m] for r in rows if r["split"] == n and r["model"] == kind]))
                    for m in ("pca", "top1", "top5")] for n in loo
                   if any(r["split"] == n and r["model"] == kind for r in rows)]
            if per:
                mean = np.mean(per, axis=0)
                lines.append(f"| {kind} | {mean[0]:.3f} | {mean[1]:.3f} | {mean[2]:.3f} |")
    mark = "<!-- benchmarks/network_split.py writes everything above this line and keeps the notes below -->"
    old_text = Path(a.out).read_text() if Path(a.out).is_file() else ""
    Path(a.out).write_text("\n".join(lines) + "\n\n" + mark + (old_text.split(mark, 1)[1] if mark in old_text else "\n"))
    Path(a.out).with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
