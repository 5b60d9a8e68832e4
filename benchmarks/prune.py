"""Pruning benchmark: speed per method and what each method costs a proxy ranker, against random pruning.

    python benchmarks/prune.py --logs ../shared/realdata/ansor/roller-k80 --seeds 0 1 2 --ratios 0.45 0.7

Converts the logs (cached under --work), fixes a within-task test split per seed, prunes only the training part
with every method and with random pruning at each ratio, trains the same LightGBM lambdarank proxy on each and
scores PCA / top-1 / top-5 on the same test records. Writes reports/prune.md and reports/prune_curve.png.
"""
import argparse
import json
import sys
import time
from pathlib import Path

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
    ap.add_argument("--methods", nargs="+", default=["hybrid", "cluster", "importance", "random"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--out", default="reports/prune.md")
    ap.add_argument("--rerender", action="store_true",
                    help="rewrite --out from its own raw rows (the speed table is kept as it is)")
    a = ap.parse_args()
    if a.rerender:
        return rerender(Path(a.out))
    ds = Path(a.work) / "dataset"
    convert(a.logs, ds, workers=2)
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
    rows = evaluate_methods(ds, a.ratios, a.methods, a.seeds)
    png = Path(a.out).with_name(Path(a.out).stem + "_curve.png")
    plot_curves(rows, png)
    lines = ["# Pruning benchmark", "", f"Command: `python {' '.join(sys.argv)}`", "",
             f"Logs: {', '.join(a.logs)}; {df.height} records; featurize {t_feat:.1f} s "
             f"({df.height / t_feat:.0f} records/s)", "", "## Selection speed (ratio 0.45, features precomputed)", "",
             "| method | records | seconds | records/s |", "|---|---:|---:|---:|"]
    lines += [f"| {r['method']} | {r['records']} | {r['seconds']} | {r['records_per_s']} |" for r in speed]
    lines += results_markdown(rows, png.name)
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:60]))


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


def rerender(out: Path) -> None:
    text = out.read_text()
    rows = json.loads(text.split("Raw rows:")[1].split("```json")[1].split("```")[0])
    head = text.split("\n## Proxy ranker")[0].rstrip("\n").split("\n")
    png = out.with_name(out.stem + "_curve.png")
    out.write_text("\n".join(head + results_markdown(rows, png.name)) + "\n")


if __name__ == "__main__":
    main()
