"""Training and inference throughput per model, on CPU (and CUDA when --device cuda is given).

    python benchmarks/train.py --logs ../shared/realdata/ansor/roller-k80 --records 50000 --epochs 3

Converts the logs (cached), takes a within-task split, trains each model for a fixed number of epochs and times
training (records x epochs / s) and inference (records / s; the fastest of ``PREDICT_REPEATS`` passes) in the same
process, for each thread count in --threads. Every model is first fitted once on a few hundred records (not timed)
so that one-off costs (lazy imports of torch.optim and friends, ~3 s) are not charged to the first model measured.
``attention-v1`` is the attention model as it was before the speed work (d_model 64, 2 layers, one position per
token, SDPA; the hyper-parameters old model directories load with), trained on the first --baseline-records records
only (it is ~10x slower); the report gives the attention model's speed as a ratio to it, measured in the same run.
``attention-kind`` is the attention model with ``positions="kind"``, what ``curate train`` trains when the test
operators do not train; its inference time is also given as a ratio to the attention model's, over alternating
passes (``_paired_inference``).
Writes reports/train.md/.json (or reports/train_<device>.* for other devices).
"""
import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from tenset_curate.convert import convert
from tenset_curate.splits import write_split
from tenset_curate.training import arrays, labelled_split, make_model

# the attention architecture before patching (what AttentionRanker._legacy_hparams + the old defaults give)
ATTENTION_V1 = dict(d_model=64, n_heads=4, n_layers=2, ff_mult=2, head_hidden=128, patch=1, attn_impl="sdpa",
                    loss="lambdarank", lr=1e-3, tasks_per_batch=8, records_per_task=64)
KEYS = ("tokens", "mask", "flat", "task_ids", "labels")
PREDICT_REPEATS = 3  # inference is timed as the fastest of this many passes over the records


def _fit_and_time(kind: str, d: dict, epochs: int, threads: int, device: str):
    base = "attention" if kind.startswith("attention") else kind
    hp = {"num_threads": threads}
    if kind == "attention-kind":  # positions by primitive (training.positions_for picks it for held-out operators)
        hp["positions"] = "kind"
    if kind == "gbdt":
        hp["n_estimators"] = 100 * epochs
    else:
        hp["patience"] = 10**6
    if kind == "attention-v1":
        hp.update(ATTENTION_V1)
    warm = {k: d[k][:400] for k in KEYS}
    make_model(base, seed=0, epochs=1, device=device, **{**hp, **({"n_estimators": 5} if kind == "gbdt" else {})}
               ).fit(warm, None)
    n = len(d["labels"])
    m = make_model(base, seed=0, epochs=epochs, device=device, **hp)
    t0 = time.perf_counter()
    m.fit({k: d[k] for k in KEYS}, None)
    t_fit = time.perf_counter() - t0
    m.predict({k: d[k][:2048] for k in KEYS})  # warm-up of the inference path
    t_pred = float("inf")
    for _ in range(PREDICT_REPEATS):  # the fastest of a few passes: one 0.5 s pass moves by 30% on a shared machine
        t0 = time.perf_counter()
        m.predict(d)
        t_pred = min(t_pred, time.perf_counter() - t0)
    passes = epochs if kind != "gbdt" else 1
    return m, {"records": n, "threads": threads, "train_records_per_s": round(n * passes / t_fit),
               "fit_seconds": round(t_fit, 2), "inference_records_per_s": round(n / t_pred)}


def _paired_inference(a, b, d: dict, passes: int = 2 * PREDICT_REPEATS + 1) -> float:
    """Median over alternating passes of b's inference time / a's, over the same records: a ratio that a noisy
    machine moves much less than the rates of separate runs."""
    ratios = []
    for _ in range(passes):
        t0 = time.perf_counter()
        a.predict(d)
        t1 = time.perf_counter()
        b.predict(d)
        ratios.append((time.perf_counter() - t1) / (t1 - t0))
    return float(np.median(ratios))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", nargs="+", default=["../shared/realdata/ansor/roller-k80"])
    ap.add_argument("--work", default="/tmp/tc-bench-train")
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--baseline-records", type=int, default=5000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=["attention", "attention-kind", "attention-v1", "mlp", "gbdt"])
    ap.add_argument("--out", default=None, help="report path without suffix (.md and .json are written); default "
                                                "reports/train, reports/train_DEVICE off the CPU")
    a = ap.parse_args()
    ds = Path(a.work) / "ds"
    convert(a.logs, ds, workers=2, only=True)  # a --work of other logs is refused, not mixed in
    write_split(ds, "wt", "within-task")
    df = labelled_split(ds, "wt")
    df = df.filter(pl.col("part") == "train").head(a.records)
    d = arrays(df)
    n = len(d["labels"])
    res = {"records": n, "device": a.device, "cpu_count": os.cpu_count(), "machine": platform.processor() or
           platform.machine(), "epochs": a.epochs, "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
           "command": f"python {' '.join(sys.argv)}", "runs": []}
    res["kind_vs_absolute"] = []
    for threads in a.threads:
        fitted = {}
        for kind in a.models:
            dd = {k: d[k][: a.baseline_records] for k in KEYS} if kind == "attention-v1" else d
            fitted[kind], r = _fit_and_time(kind, dd, a.epochs, threads, a.device)
            r = {"model": kind, **r}
            res["runs"].append(r)
            print(r, flush=True)
        if "attention" in fitted and "attention-kind" in fitted:
            x = _paired_inference(fitted["attention"], fitted["attention-kind"], d)
            res["kind_vs_absolute"].append({"threads": threads, "inference_time_ratio": round(x, 3)})
            print(res["kind_vs_absolute"][-1], flush=True)
    speedups = []
    for threads in a.threads:
        by = {r["model"]: r for r in res["runs"] if r["threads"] == threads}
        if "attention" in by and "attention-v1" in by:
            speedups.append({"threads": threads,
                             "train_x": round(by["attention"]["train_records_per_s"]
                                              / by["attention-v1"]["train_records_per_s"], 1),
                             "inference_x": round(by["attention"]["inference_records_per_s"]
                                                  / by["attention-v1"]["inference_records_per_s"], 1)})
    res["attention_speedup_vs_v1"] = speedups
    suffix = "" if a.device == "cpu" else f"_{a.device}"
    out = Path(a.out) if a.out else Path("reports") / f"train{suffix}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Training benchmark", "", f"Command: `{res['command']}`", "",
             f"{n} training records of {', '.join(a.logs)} (the first of a within-task split's train part), "
             f"{a.epochs} epochs, device "
             f"{a.device}, {os.cpu_count()} cores (shared with other jobs: compare ratios within this run, not "
             f"absolute numbers across runs; load average at start {res['loadavg_at_start']}; with the other core "
             "busy, 2-thread runs stall on thread hand-offs; inference is the fastest of "
             f"{PREDICT_REPEATS} passes). attention-v1 = the attention architecture before the speed work, "
             f"on the first {a.baseline_records} records.", "",
             "| model | threads | records | train records/s | inference records/s | fit s |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['threads']} | {r['records']} | {r['train_records_per_s']} | "
              f"{r['inference_records_per_s']} | {r['fit_seconds']} |" for r in res["runs"]]
    if speedups:
        lines += ["", "Attention model vs attention-v1, same run:", "", "| threads | training x | inference x |",
                  "|---:|---:|---:|"]
        lines += [f"| {s['threads']} | {s['train_x']} | {s['inference_x']} |" for s in speedups]
    if res["kind_vs_absolute"]:
        lines += ["", "attention-kind's inference time / attention's, median over alternating passes over the same "
                  "records (paired, so machine noise moves it less than the rates above):", "",
                  "| threads | time ratio |", "|---:|---:|"]
        lines += [f"| {r['threads']} | {r['inference_time_ratio']} |" for r in res["kind_vs_absolute"]]
    lines += ["", "Goal (issue 6): attention >= 20k records/s training and >= 100k records/s inference on 2 CPU cores.",
              "gbdt: records/s counts one pass over the data for all boosting rounds together."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
