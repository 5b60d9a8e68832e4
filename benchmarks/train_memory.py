"""Peak memory of training on real logs: the product's path against the dense within-task tokens it replaced.

    python benchmarks/train_memory.py [--realdata ../shared/realdata] [--split no_depthwise] [--models attention gbdt]

Uses the converted K80 + MI50 logs and the splits of ``benchmarks/model_splits.py`` (cached under --work). Each
measurement runs in a fresh interpreter: the split read, then ``training.fit_on_frame`` for one epoch (``gbdt``:
50 rounds), as ``curate train`` does; peak RSS is the kernel's ``VmHWM`` of the child (its ``ru_maxrss`` would
start at the RSS this script had when it forked the child: up to 2 GB before session 20 moved the split read out
of this script, which floored the smaller rows), and the RSS after each stage is sampled too. ``attention-dense`` is the attention model with the within-task centred tokens held as a dense array
(``np.asarray`` of ``training.arrays``' ``tok_rel``) and the training part's token tensor copied
(``training._part`` without ``features.RowView``): what training held before those two, run in the same script as
the baseline. Every variant but one reads what ``curate train`` reads (``training.training_frame``: the records of
the tasks that train, the test records of other tasks left out). ``attention-onepass`` reads the split as
``curate train`` did before session 20 (every record of the dataset read whole and sorted, then joined to the
split, test part included). Also fits on the first half of the records, to show how peak
memory grows with the record count, and (``--caps``) on the split with each task's training programs capped
(``max_per_task``, what ``curate train --max-per-task`` reads). Writes reports/train_memory.md/.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHILD = r"""
import json, os, sys, time
import numpy as np
from pathlib import Path
import tenset_curate.training as T

dataset, split, variant, fraction = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
cap = None if sys.argv[5] == "none" else int(sys.argv[5])
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
def vmhwm_kb():  # this process's peak RSS; ru_maxrss would also count the parent's RSS at the fork
    return int([x for x in open("/proc/self/status") if x.startswith("VmHWM:")][0].split()[1])
stages = {}
def mark(name):
    stages[name] = round(rss())
if variant == "attention-onepass":  # labelled_split before its two passes (session 19's code)
    import polars as pl
    from tenset_curate.splits import read_split
    recs = T.with_labels(T.load_records(Path(dataset)))
    sp = read_split(Path(dataset), split).select("record_id", "part")
    df = recs.join(sp, on="record_id", how="inner")
    ops = T.operator_classes(df)  # the K80 + MI50 logs: no networks table, so no task descriptions
    df = df.join(ops.select("task_id", "op_class"), on="task_id", how="left").filter(pl.col("is_valid"))
    del recs
    hp = {}
else:  # what curate train reads: the tasks that train, the split's settings decided on the light index
    df, hp, _ = T.training_frame(Path(dataset), split, "attention" if variant.startswith("attention") else variant,
                                 cap, memory_check=False)
if fraction < 1:
    df = df.head(int(len(df) * fraction))
mark("read")
kind = "attention" if variant.startswith("attention") else variant
if variant == "attention-dense":
    orig = T.arrays
    def dense(frame):
        d = orig(frame)
        d["tok_rel"] = np.asarray(d["tok_rel"])
        return d
    T.arrays = dense
    def copied_part(d, mask):  # training._part before features.RowView: every array of the part copied
        out = {k: np.asarray(v)[mask] for k, v in d.items() if isinstance(v, np.ndarray)}
        out["groups"] = {k: v[mask] for k, v in d["groups"].items()}
        return out
    T._part = copied_part
tokens_mb = len(df) * 64 * 32 * 4 / 2**20
hp.update({"num_threads": 1} if kind != "gbdt" else {"n_estimators": 50})
t0 = time.perf_counter()
m, d = T.fit_on_frame(df, kind, seed=0, epochs=1, **hp)
mark("fit_on_frame")
print(json.dumps({"variant": variant, "records": len(df), "fraction": fraction, "max_per_task": cap,
                  "tokens_mb": round(tokens_mb),
                  "peak_rss_mb": round(vmhwm_kb() / 1024),
                  "stages_rss_mb": stages, "seconds": round(time.perf_counter() - t0, 1)}))
"""


def measure(dataset: Path, split: str, variant: str, fraction: float, cap: int | None = None) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(dataset), split, variant, str(fraction), str(cap).lower()],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    from model_splits import SPLITS, convert_sets

    from tenset_curate.splits import write_split

    ap = argparse.ArgumentParser()
    ap.add_argument("--realdata", default=str(Path(__file__).resolve().parents[2] / "shared" / "realdata"))
    ap.add_argument("--work", default="/tmp/tc-bench-model-splits")
    ap.add_argument("--split", default="no_depthwise", choices=list(SPLITS))
    ap.add_argument("--models", nargs="+", default=["attention", "attention-dense", "attention-onepass", "gbdt"])
    ap.add_argument("--caps", nargs="+", type=int, default=[250, 100])
    ap.add_argument("--out", default="reports/train_memory.md")
    a = ap.parse_args(argv)
    ds = convert_sets(a.realdata, a.work)
    which, kw = SPLITS[a.split]
    kw = dict(kw)
    write_split(ds[which], a.split, kw.pop("scheme"), **kw)  # cached data, same seed: the same split; not read here
    dataset = ds[which]
    runs = []
    for variant in a.models:
        for fraction in (0.5, 1.0):
            r = measure(dataset, a.split, variant, fraction)
            r["kb_per_record"] = round(r["peak_rss_mb"] * 1024 / r["records"], 1)
            runs.append(r)
            print(json.dumps(r), flush=True)
    for cap in a.caps:
        r = measure(dataset, a.split, "attention", 1.0, cap)
        r["kb_per_record"] = round(r["peak_rss_mb"] * 1024 / r["records"], 1)
        runs.append(r)
        print(json.dumps(r), flush=True)
    by = {(r["variant"], r["fraction"]): r for r in runs if r.get("max_per_task") is None}
    lines = ["# Training memory", "",
             f"Command: `python {' '.join(['benchmarks/train_memory.py', *(argv if argv is not None else sys.argv[1:])])}`",
             "", f"Split `{a.split}` of the real K80 + MI50 logs; each row a fresh process reading the split and running "
             "`training.fit_on_frame` (1 epoch; GBDT 50 rounds) on what `curate train` reads (`training.training_frame`). Peak RSS is the child's `VmHWM`; "
             "the token tensor alone is records x 64 x 32 float32. `attention-dense` holds the within-task centred "
             "tokens as a dense array and copies the training part's token tensor, as training did before "
             "`features.TaskCentredTokens` and `features.RowView` (same script, same data). `attention-onepass` "
             "reads the split as `curate train` did before session 20 (every record read whole and sorted, then "
             "joined to the split, the test part included). Rows with a `max per task` read the split with each task's training programs capped "
             "(`curate train --max-per-task`); the test part stays whole.",
             f"{os.cpu_count()} cores.", "",
             "| model | max per task | records | peak RSS MB | KB per record | token tensor MB | "
             "RSS after the read MB | RSS after fit MB |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['variant']} | {r.get('max_per_task') or '-'} | {r['records']} | {r['peak_rss_mb']} | "
              f"{r['kb_per_record']} | {r['tokens_mb']} | "
              f"{r['stages_rss_mb']['read']} | {r['stages_rss_mb']['fit_on_frame']} |" for r in runs]
    if ("attention", 1.0) in by and ("attention-dense", 1.0) in by:
        new, old = by[("attention", 1.0)], by[("attention-dense", 1.0)]
        lines += ["", f"Attention, all records: peak {old['peak_rss_mb']} MB -> {new['peak_rss_mb']} MB "
                  f"({new['peak_rss_mb'] / old['peak_rss_mb']:.2f}x, same run)."]
    if ("attention", 1.0) in by and ("attention-onepass", 1.0) in by:
        new, old = by[("attention", 1.0)], by[("attention-onepass", 1.0)]
        lines += [f"What curate train reads against the one-pass read of every record: {old['records']} -> "
                  f"{new['records']} records, RSS after the read {old['stages_rss_mb']['read']} MB -> "
                  f"{new['stages_rss_mb']['read']} MB, peak "
                  f"{old['peak_rss_mb']} MB -> {new['peak_rss_mb']} MB."]
    for v in a.models:
        if (v, 0.5) in by and (v, 1.0) in by:
            h, f = by[(v, 0.5)], by[(v, 1.0)]
            lines.append(f"{v}: {f['records']} records take {(f['peak_rss_mb'] - h['peak_rss_mb']) * 1024 / (f['records'] - h['records']):.1f} "
                         f"KB of peak RSS per record more than {h['records']} do.")
    Path(a.out).write_text("\n".join(lines) + "\n")
    Path(a.out).with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
