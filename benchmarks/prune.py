"""Pruning benchmark: speed per method and what each method costs a proxy ranker, against random pruning.

    python benchmarks/prune.py --logs ../shared/realdata/ansor/roller-k80 --seeds 0 1 2 --ratios 0.45 0.7

Converts the logs (cached under --work), fixes a within-task test split per seed, prunes only the training part
with every method and with random pruning at each ratio, trains the same LightGBM lambdarank proxy on each and
scores PCA / top-1 / top-5 on the same test records. Writes reports/prune.md and reports/prune_curve.png.

Speed is measured twice: over the whole set, and on one real task cut to growing sizes (records per task), since
``cluster`` / ``hybrid`` run a k-means per task whose cost grows with the task's pool times its kept records.
``--speed-only`` re-measures both speed tables and keeps the proxy results of the existing report; ``--merge``
redoes the (method, ratio) pairs asked for (and full data) and keeps the report's other raw rows.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from tenset_curate.convert import convert
from tenset_curate.evaluate_prune import bars_markdown, evaluate_methods, plot_curves, summarize
from tenset_curate.features import featurize
from tenset_curate.labels import with_labels
from tenset_curate.prune import load_records, select


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", nargs="+", default=["../shared/realdata/ansor/roller-k80"])
    ap.add_argument("--work", default="/tmp/tc-bench-prune")
    ap.add_argument("--ratios", nargs="+", type=float, default=[0.45, 0.7])
    ap.add_argument("--methods", nargs="+", default=["hybrid", "density", "cluster", "importance", "random"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--out", default="reports/prune.md")
    ap.add_argument("--task-sizes", nargs="+", type=int, default=[250, 500, 1000, 2000, 4000])
    ap.add_argument("--speed-only", action="store_true",
                    help="re-measure the speed tables only; the proxy results of --out are kept")
    ap.add_argument("--merge", action="store_true",
                    help="keep the raw rows of --out for the (method, ratio) pairs this run does not redo")
    ap.add_argument("--rerender", action="store_true",
                    help="rewrite --out from its own raw rows (the speed table is kept as it is)")
    a = ap.parse_args()
    if a.rerender:
        return rerender(Path(a.out))
    if (a.speed_only or a.merge) and Path(a.out).exists():
        same_logs(Path(a.out), a.logs)
    ds = Path(a.work) / "dataset"
    convert(a.logs, ds, workers=2, only=True)  # a --work of other logs is refused, not mixed in
    df = with_labels(load_records(ds))
    t0 = time.perf_counter()
    f = featurize(df)
    t_feat = time.perf_counter() - t0
    speed = []
    for m in a.methods:
        t0 = time.perf_counter()
        keep, _ = select(df, 0.45, m, 0, 8, feats=f)
        dt = time.perf_counter() - t0
        speed.append({"method": m, "records": df.height, "seconds": round(dt, 2),
                      "records_per_s": round(df.height / dt)})
    per_task = task_size_speed(df, f, a.methods, a.task_sizes)
    head = ["# Pruning benchmark", "", f"Command: `python {' '.join(sys.argv)}`", "",
            f"Logs: {', '.join(a.logs)}; {df.height} records; featurize {t_feat:.1f} s "
            f"({df.height / t_feat:.0f} records/s)", "", "## Selection speed (ratio 0.45, features precomputed)", "",
            "| method | records | seconds | records/s |", "|---|---:|---:|---:|"]
    head += [f"| {r['method']} | {r['records']} | {r['seconds']} | {r['records_per_s']} |" for r in speed]
    head += ["", "## Selection speed against records per task (ratio 0.45, features precomputed)", "",
             f"One real task (the largest: {per_task['task_records']} records) cut to each size by a seeded random "
             "draw; records/s of `select` on it alone.", "",
             "| records per task | " + " | ".join(a.methods) + " |", "|---:|" + "---:|" * len(a.methods)]
    for n, r in per_task["rows"].items():
        head.append(f"| {n} | " + " | ".join(str(r[m]) for m in a.methods) + " |")
    if a.speed_only:  # the proxy rows' command stays; the speed tables say where they come from
        old = Path(a.out).read_text()
        head[2] = old.split("\n")[2].split(" Speed tables: ")[0] + f" Speed tables: `python {' '.join(sys.argv)}`."
        Path(a.out).write_text("\n".join(head) + "\n" + old[old.index("\n## Proxy ranker"):])
        print("\n".join(head))
        return
    rows = evaluate_methods(ds, a.ratios, a.methods, a.seeds)
    if a.merge and Path(a.out).exists():
        redone = {(r["method"], r["ratio"]) for r in rows}
        rows = [r for r in _raw_rows(Path(a.out).read_text()) if (r["method"], r["ratio"]) not in redone] + rows
        order = ["full", "hybrid", "density", "cluster", "importance", "random", "redundancy"]  # the report's order
        rows.sort(key=lambda r: (r["seed"], r["ratio"], order.index(r["method"]) if r["method"] in order else 99))
    png = Path(a.out).with_name(Path(a.out).stem + "_curve.png")
    plot_curves(rows, png)
    lines = head + results_markdown(rows, png.name)
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:60]))


def same_logs(report: Path, logs: list[str]) -> None:
    """Refuse to --merge into or --speed-only rewrite a report made from other logs: its rows would sit under this
    run's "Logs:" line (and a merged row would be scored against this set's full-data row)."""
    line = next((x for x in report.read_text().splitlines() if x.startswith("Logs: ")), None)
    if line is None:
        return
    was = line[len("Logs: "):].split("; ")[0].split(", ")
    if [str(Path(x).resolve()) for x in was] != [str(Path(x).resolve()) for x in logs]:
        raise SystemExit(f"{report} was made from {', '.join(was)}, not {', '.join(logs)}: --merge and --speed-only "
                         "would put two sets in one report; give another --out")


def task_size_speed(df: pl.DataFrame, f: dict, methods: list[str], sizes: list[int]) -> dict:
    """records/s of ``select`` at ratio 0.45 on the largest task of ``df`` cut to each size (seeded draw)."""
    keys = ["hardware", "task_id"]
    top = df.group_by(keys).len().sort(["len", *keys], descending=[True, False, False]).row(0, named=True)
    idx = np.flatnonzero(((df["hardware"] == top["hardware"]) & (df["task_id"] == top["task_id"])).to_numpy())
    rng = np.random.default_rng(0)
    out = {}
    for n in sorted(x for x in sizes if x <= len(idx)):
        sub = np.sort(rng.choice(idx, n, replace=False))
        frame = df[sub]
        feats = {k: v[sub] for k, v in f.items()}
        out[n] = {}
        for m in methods:
            t0 = time.perf_counter()
            select(frame, 0.45, m, 0, 8, feats=feats)
            out[n][m] = round(n / (time.perf_counter() - t0))
    return {"task_records": len(idx), "rows": out}


def results_markdown(rows: list[dict], png_name: str) -> list[str]:
    s = summarize(rows)
    lines = ["", "## Proxy ranker on pruned training data (mean over seeds, same test split)", "",
             "| method | ratio | PCA | sd | top-1 | sd | top-5 | seeds |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in s.iter_rows(named=True):
        lines.append(f"| {r['method']} | {r['ratio']} | {r['pca']:.4f} | {r['pca_sd'] or 0:.4f} | {r['top1']:.4f} | "
                     f"{r['top1_sd'] or 0:.4f} | {r['top5']:.4f} | {r['seeds']} |")
    lines += [""] + bars_markdown(rows)
    lines += ["", f"![curve]({png_name})", "", "Raw rows:", "", "```json", json.dumps(rows, indent=0), "```"]
    return lines


def _raw_rows(report: str) -> list[dict]:
    return json.loads(report.split("Raw rows:")[1].split("```json")[1].split("```")[0])


def rerender(out: Path) -> None:
    text = out.read_text()
    rows = _raw_rows(text)
    head = text.split("\n## Proxy ranker")[0].rstrip("\n").split("\n")
    png = out.with_name(out.stem + "_curve.png")
    out.write_text("\n".join(head + results_markdown(rows, png.name)) + "\n")


if __name__ == "__main__":
    main()
