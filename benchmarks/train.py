"""Training and inference throughput per model, on CPU (and CUDA when --device cuda is given).

    python benchmarks/train.py --logs ../shared/realdata/ansor/roller-k80 --records 50000 --epochs 3

Converts the logs (cached), takes a within-task split, trains each model for a fixed number of epochs and times
training (records x epochs / s) and inference (records / s) in the same process. Writes reports/train.md/.json
(or reports/train_<device>.* for other devices).
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import polars as pl

from tenset_curate.convert import convert
from tenset_curate.splits import write_split
from tenset_curate.training import arrays, labelled_split, make_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", nargs="+", default=["../shared/realdata/ansor/roller-k80"])
    ap.add_argument("--work", default="/tmp/tc-bench-train")
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", nargs="+", default=["attention", "mlp", "gbdt"])
    a = ap.parse_args()
    ds = Path(a.work) / "ds"
    convert(a.logs, ds, workers=2)
    write_split(ds, "wt", "within-task")
    df = labelled_split(ds, "wt")
    df = df.filter(pl.col("part") == "train").head(a.records)
    d = arrays(df)
    n = len(d["labels"])
    res = {"records": n, "device": a.device, "threads": os.cpu_count(), "models": {}}
    for kind in a.models:
        hp = {"n_estimators": 100 * a.epochs} if kind == "gbdt" else {"patience": 10**6}
        m = make_model(kind, seed=0, epochs=a.epochs, device=a.device, **hp)
        t0 = time.perf_counter()
        m.fit({k: d[k] for k in ("tokens", "mask", "flat", "task_ids", "labels")}, None)
        t_fit = time.perf_counter() - t0
        t0 = time.perf_counter()
        m.predict(d)
        t_pred = time.perf_counter() - t0
        res["models"][kind] = {"train_records_per_s": round(n * (a.epochs if kind != "gbdt" else 1) / t_fit),
                               "fit_seconds": round(t_fit, 2), "inference_records_per_s": round(n / t_pred)}
        print(kind, res["models"][kind], flush=True)
    suffix = "" if a.device == "cpu" else f"_{a.device}"
    out = Path("reports") / f"train{suffix}"
    out.parent.mkdir(exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Training benchmark", "", f"Command: `python {' '.join(sys.argv)}`", "",
             f"{n} training records, device {a.device}, {os.cpu_count()} cores", "",
             "| model | train records/s | inference records/s | fit s |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {v['train_records_per_s']} | {v['inference_records_per_s']} | {v['fit_seconds']} |"
              for k, v in res["models"].items()]
    lines += ["", "gbdt: records/s counts one pass over the data for all boosting rounds together."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
