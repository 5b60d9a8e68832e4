"""Experiment: what limits the cost models on programs of tasks, operators and hardware they did not train on.

    python benchmarks/transfer_limits.py tasks  [--split-seeds 0 1 2] [--models attention gbdt]
    python benchmarks/transfer_limits.py pooled [--split-seeds 0 1 2] [--models attention gbdt]
    python benchmarks/transfer_limits.py epochs [--splits no_depthwise k80_mi50] [--seeds 0]
    python benchmarks/transfer_limits.py cap    [--splits k80_tasks within_k80] [--split-seeds 0 1 2] [--caps 90 180 360] \
        [--seeds 0]

Reads the datasets and splits of ``benchmarks/model_splits.py`` (cached under --work); the product's defaults, 24
epochs, attention with one thread; one JSON line per run (PCA / top-1 / top-5 on the test part).

- ``tasks``: the ``k80_tasks`` split (a fifth of roller-k80's tasks held out) trained on a quarter, a half and all of
  its training tasks (two seeded draws of the quarter and the half): does unseen-task accuracy grow with the number
  of tasks the model learns from?
- ``pooled``: the same held-out K80 tasks, trained on K80's other tasks alone and on those plus roller-mi50's records
  of every layer not held out (the held-out layers' MI50 logs, matched by log file name, stay out): does another
  GPU's data teach the model more about unseen tasks?
- ``epochs``: the attention model trained for the full 24 epochs with no early stopping, scored after every epoch on
  the validation part (held-back records of the training tasks, what early stopping reads) and on the test part.

- ``cap``: every training task kept, its programs capped (``labelled_split``'s ``max_per_task``, what ``curate
  train --max-per-task`` does; the test part whole): at a TenSet-sized split, which a 24 GiB machine cannot hold
  whole, is it better to keep all tasks with fewer programs each, or fewer tasks (``tasks``)?

Measured (session 18, 2 cores; reports/model_splits.md, "What limits transfer"; ``cap`` session 20, "Programs per
task at scale").
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_splits import convert_sets, split_frame  # noqa: E402

from tenset_curate.metrics import evaluate_predictions  # noqa: E402
from tenset_curate.splits import write_split  # noqa: E402
from tenset_curate.training import (_part, arrays, balanced_rows, fit_on_frame, labelled_split,  # noqa: E402
                                    lambdarank_weight_for, make_model)


def _score(df: pl.DataFrame, kind: str, seed: int, epochs: int) -> dict:
    part = df["part"].to_numpy()
    t0 = time.perf_counter()
    m, d = fit_on_frame(df, kind, seed=seed, epochs=epochs, **({"num_threads": 1} if kind == "attention" else {}))
    test = _part(d, part == "test")  # the arrays fit_on_frame featurised: the frame is not featurised twice
    r = evaluate_predictions(test["task_ids"], test["labels"], m.predict(test))
    return {"train": int((part == "train").sum()), "test": int((part == "test").sum()),
            **{k: round(float(r[k]), 4) for k in ("pca", "top1", "top5")},
            "seconds": round(time.perf_counter() - t0, 1)}


def tasks_curve(ds: dict, a) -> None:
    for ss in a.split_seeds:
        df = split_frame(ds, "k80_tasks", ss)
        is_test = df["part"] == "test"
        train_tasks = sorted(df.filter(~is_test)["task_id"].unique().to_list())
        for frac, draws in ((0.25, 2), (0.5, 2), (1.0, 1)):
            for draw in range(draws):
                n = max(1, int(round(frac * len(train_tasks))))
                keep = train_tasks if frac == 1.0 else \
                    np.random.default_rng(1000 * ss + draw).choice(train_tasks, n, replace=False).tolist()
                sub = df.filter(is_test | pl.col("task_id").is_in(keep))
                for kind in a.models:
                    print(json.dumps({"mode": "tasks", "split_seed": ss, "fraction": frac, "draw": draw,
                                      "train_tasks": n, "model": kind, **_score(sub, kind, 0, a.epochs)}), flush=True)


def pooled(ds: dict, a) -> None:
    write_split(ds["gpu"], "within_all", "within-task", seed=0)  # labels per (hardware, task) and the valid draw
    gpu = labelled_split(ds["gpu"], "within_all")
    layer = pl.col("source_file").map_elements(lambda f: Path(f).name, return_dtype=pl.Utf8)
    for ss in a.split_seeds:
        k80 = split_frame(ds, "k80_tasks", ss)
        held = k80.filter(pl.col("part") == "test").select(layer.alias("layer"))["layer"].unique().to_list()
        mi50 = (gpu.filter((pl.col("hardware") == "roller-mi50") & ~layer.is_in(held))
                .with_columns(pl.when(pl.col("part") == "test").then(pl.lit("train")).otherwise(pl.col("part"))
                              .alias("part")).select(k80.columns))
        both = pl.concat([k80, mi50], how="vertical_relaxed")
        for name, df in (("k80", k80), ("k80+mi50", both)):
            for kind in a.models:
                print(json.dumps({"mode": "pooled", "split_seed": ss, "train_on": name, "held_layers": len(held),
                                  "model": kind, **_score(df, kind, 0, a.epochs)}), flush=True)


def epochs(ds: dict, a) -> None:
    for split in a.splits:
        df = split_frame(ds, split)
        d, part = arrays(df), df["part"].to_numpy()
        rows = balanced_rows(np.flatnonzero(part == "train"), d["groups"]["hardware"])
        w = lambdarank_weight_for(df)
        for seed in a.seeds:
            hist = {}
            for name in ("valid", "test"):  # the same seeded run twice: only what it is scored on differs
                m = make_model("attention", seed, a.epochs, "cpu", False, num_threads=1, patience=10 ** 6,
                               lambdarank_weight=w)
                m.fit(_part(d, rows), _part(d, part == name))
                hist[name] = m.history
            for hv, ht in zip(hist["valid"], hist["test"]):
                print(json.dumps({"mode": "epochs", "split": split, "seed": seed, "epoch": hv["epoch"],
                                  "valid_pca": round(hv["valid_pca"], 4),
                                  **{f"test_{k}": round(ht[f"valid_{k}"], 4) for k in ("pca", "top1", "top5")}}),
                      flush=True)


def cap_curve(ds: dict, a) -> None:
    for split in a.splits:
        for ss in (a.split_seeds if split == "k80_tasks" else [None]):
            for cap in [*a.caps, None]:
                df = split_frame(ds, split, ss, max_per_task=cap, seed=0)
                tasks = df.filter(pl.col("part") == "train").select("hardware", "task_id").n_unique()
                for kind in a.models:
                    for seed in a.seeds:
                        print(json.dumps({"mode": "cap", "split": split, "split_seed": ss, "max_per_task": cap,
                                          "train_tasks": tasks, "model": kind, "seed": seed,
                                          **_score(df, kind, seed, a.epochs)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["tasks", "pooled", "epochs", "cap"])
    ap.add_argument("--realdata", default=str(Path(__file__).resolve().parents[2] / "shared" / "realdata"))
    ap.add_argument("--work", default="/tmp/tc-bench-model-splits")
    ap.add_argument("--models", nargs="+", default=["attention", "gbdt"], choices=["attention", "gbdt", "mlp"])
    ap.add_argument("--split-seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--splits", nargs="+", default=["no_depthwise", "k80_mi50"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--caps", nargs="+", type=int, default=[90, 180, 360])
    a = ap.parse_args()
    ds = convert_sets(a.realdata, a.work)
    {"tasks": tasks_curve, "pooled": pooled, "epochs": epochs, "cap": cap_curve}[a.mode](ds, a)


if __name__ == "__main__":
    main()
