"""Training at scale: `curate train` on 16 copies of the real Ansor logs (3.4M records), with and without a cap on
programs per task.

    python benchmarks/train_scale.py [--copies 16] [--caps 100] [--epochs 1]

Uses the copies ``benchmarks/scale.py`` makes (copy c >= 1 renames every workload, so each copy is the same work
under its own task ids; cached under /tmp/tc-bench-scale/in) and converts copies 0..N-1 into one dataset (cached).
A task-wise split holds out a fifth of the tasks (unseen tasks stand in for unseen networks: the copies carry no
network_info). Each command runs in a fresh interpreter calling the CLI (`curate train`, `curate evaluate`) and
reports its peak RSS (``VmHWM``: ``ru_maxrss`` would start at this script's RSS when it forked the child) and
wall time:

- ``curate train`` without a cap, which the memory check should refuse before reading the records whole;
- ``curate train --max-per-task N`` for each cap (attention, ``--epochs``), then ``curate evaluate`` of that model on
  the test part.

The copies repeat the same work under new names, so a held-out task's twin from another copy usually trains: the
metrics printed are not a transfer result; the run measures time and memory.

Measured before ``curate evaluate`` read in chunks of whole tasks (session 20, same machine, same model): the
evaluate row took 79 s at a 13.7 GB peak (now 119 s at 4.5 GB).

Writes reports/train_scale.md/.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHILD = r"""
import json, sys, time
from tenset_curate.cli import app
t0 = time.perf_counter()
code = 0
try:
    code = app(sys.argv[1:], standalone_mode=False) or 0  # a typer.Exit comes back as its code here
except SystemExit as e:
    code = e.code
except Exception as e:
    code = type(e).__name__
print("RESULT " + json.dumps({"exit": code, "seconds": round(time.perf_counter() - t0, 1),
                              "peak_rss_mb": round(int([x for x in open("/proc/self/status")
                                                        if x.startswith("VmHWM:")][0].split()[1]) / 1024)}))
"""


def run_cli(args: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True)
    res = json.loads([x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1][7:])
    out = "\n".join(x for x in r.stdout.splitlines() if not x.startswith("RESULT "))
    try:  # the command's --json: its headline numbers
        js = json.loads(out)
        res["said"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in js.items()
                       if k in ("train_records", "valid", "lambdarank_weight", "max_per_task", "pca", "top1", "top5",
                                "n_tasks", "n_records")}
    except ValueError:
        res["said"] = out[-1000:]
    res["stderr_tail"] = "\n".join(x for x in r.stderr.splitlines() if "epoch" not in x)[-1500:]
    return res


def main() -> None:
    from scale import make_copy

    from tenset_curate.convert import convert
    from tenset_curate.splits import write_split
    from tenset_curate.training import BYTES_PER_TRAINING_RECORD, available_memory

    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", default=str(Path(__file__).resolve().parents[2] / "shared" / "realdata" / "ansor"))
    ap.add_argument("--work", default="/tmp/tc-bench-scale")
    ap.add_argument("--copies", type=int, default=16)
    ap.add_argument("--caps", nargs="+", type=int, default=[100])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--out", default="reports/train_scale.md")
    a = ap.parse_args()
    work = Path(a.work)
    inputs = []
    for c in range(a.copies):
        make_copy(Path(a.logs), work / "in" / f"c{c:02d}", c)
        inputs.append(work / "in" / f"c{c:02d}")
    ds = work / f"train-{a.copies}x"
    t0 = time.perf_counter()
    s = convert(inputs, ds, workers=2)
    t_convert = time.perf_counter() - t0
    t0 = time.perf_counter()
    info = write_split(ds, "tasks", "task", test_fraction=0.2, seed=0)
    t_split = time.perf_counter() - t0
    avail = available_memory()
    runs = []
    r = run_cli(["train", str(ds), "--split", "tasks", "--model", "attention", "--out", str(work / "m-all"),
                 "--epochs", str(a.epochs), "--json"])
    runs.append({"command": "curate train (no cap)", **r})
    print(json.dumps(runs[-1]), flush=True)
    for cap in a.caps:
        m = work / f"m-cap{cap}"
        r = run_cli(["train", str(ds), "--split", "tasks", "--model", "attention", "--out", str(m), "--epochs",
                     str(a.epochs), "--max-per-task", str(cap), "--json"])
        runs.append({"command": f"curate train --max-per-task {cap}", **r})
        print(json.dumps(runs[-1]), flush=True)
        r = run_cli(["evaluate", str(m), str(ds), "--split", "tasks", "--json"])
        runs.append({"command": f"curate evaluate (model of --max-per-task {cap})", **r})
        print(json.dumps(runs[-1]), flush=True)
    rows = s["totals"]["rows"]
    lines = ["# Training at scale", "", f"Command: `python {' '.join(sys.argv)}`", "",
             f"Dataset: {a.copies} copies of every real Ansor log under ../shared/realdata/ansor (each copy its own "
             f"task ids, `benchmarks/scale.py`), {rows:,} records, converted in {t_convert:.0f} s (cached when "
             f"re-run). Split `tasks`: a fifth of the tasks held out ({json.dumps(info.get('counts', info))}; "
             f"{t_split:.0f} s). Machine: {os.cpu_count()} cores, {avail / 2**30:.1f} GiB available at the start; "
             f"the memory check counts {BYTES_PER_TRAINING_RECORD // 1000} KB a record. Each row is a fresh "
             f"interpreter running the command; attention, {a.epochs} epoch(s). The copies repeat the same work "
             "under new names, so a held-out task's twin usually trains: the metrics are no transfer result; the run "
             "measures time and memory.", "",
             "| command | exit | seconds | peak RSS MB | what it printed |", "|---|---|---:|---:|---|"]
    for r in runs:
        said = (json.dumps(r["said"]) if r["said"] else r["stderr_tail"]).strip().replace("\n", " ").replace("|", "/")
        lines.append(f"| {r['command']} | {r['exit']} | {r['seconds']} | {r['peak_rss_mb']} | {said[:700]} |")
    Path(a.out).write_text("\n".join(lines) + "\n")
    Path(a.out).with_suffix(".json").write_text(json.dumps({"records": rows, "convert_s": t_convert,
                                                            "split": info, "runs": runs}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
