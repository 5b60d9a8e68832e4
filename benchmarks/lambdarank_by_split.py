"""Experiment: the attention model's LambdaRank weight (0.05 against 0.25) on splits that did not choose it.

    python benchmarks/lambdarank_by_split.py [--cases within_mi50 within_a100 ...] [--weights 0.05 0.25]
        [--seeds 0 1 2] [--realdata ../shared/realdata] [--work /tmp/tc-bench-lambdarank] [--out FILE.jsonl]

``training.lambdarank_weight_for`` gives the attention model 0.25 when most test records are of tasks it trains on
and 0.05 otherwise. The rule came from the five splits of ``benchmarks/model_splits.py`` (``benchmarks/
attention_loss.py --weights``); this script checks it on other real sets and directions (24 epochs, one thread,
the product's defaults but the weight; PCA / top-1 / top-5 on the test part, one JSON line per run):

- tasks trained on: within-task on roller-mi50 alone, on mmperf's A100 matmuls (Ansor) and on bennu's ResNet-34
  on an A100 (MetaSchedule); few-shot MI50 -> K80 (MI50 trains with 10% of K80's records, the rest of K80 tested);
- tasks not trained on: zero-shot MI50 -> K80; a fifth of roller-mi50's tasks held out.

Measured (session 17, 2 cores, seeds 0-2; reports/model_splits.md, "The LambdaRank weight by split").
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tenset_curate.convert import convert
from tenset_curate.metrics import evaluate_predictions
from tenset_curate.splits import write_split
from tenset_curate.training import _part, fit_on_frame, labelled_split, seen_task_share

# case: (logs under --realdata, split scheme and arguments)
CASES = {
    "within_mi50": (["ansor/roller-mi50"], dict(scheme="within-task", seed=0)),
    "within_a100": (["ansor/mmperf-a100"], dict(scheme="within-task", seed=0)),
    "within_ms_resnet34": (["metaschedule/bennu-a100-resnet34"], dict(scheme="within-task", seed=0)),
    "mi50_k80_fs10": (["ansor/roller-k80", "ansor/roller-mi50"],
                      dict(scheme="hardware", train_hw=["roller-mi50"], test_hw=["roller-k80"], few_shot=0.1, seed=0)),
    "mi50_k80": (["ansor/roller-k80", "ansor/roller-mi50"],
                 dict(scheme="hardware", train_hw=["roller-mi50"], test_hw=["roller-k80"], seed=0)),
    "mi50_tasks": (["ansor/roller-mi50"], dict(scheme="task", test_fraction=0.2, seed=0)),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--realdata", default=str(Path(__file__).resolve().parents[2] / "shared" / "realdata"))
    ap.add_argument("--work", default="/tmp/tc-bench-lambdarank")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--weights", nargs="+", type=float, default=[0.05, 0.25])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--out", default=None, help="also append the JSON lines to this file")
    a = ap.parse_args()
    for name in a.cases:
        logs, kw = CASES[name]
        ds = Path(a.work) / "+".join(Path(p).name for p in logs)
        convert([Path(a.realdata) / p for p in logs], ds, workers=2)  # cached: an unchanged convert does nothing
        kw = dict(kw)
        write_split(ds, name, kw.pop("scheme"), **kw)
        df = labelled_split(ds, name)
        part = df["part"].to_numpy()
        for w in a.weights:
            for seed in a.seeds:
                t0 = time.perf_counter()
                m, d = fit_on_frame(df, "attention", seed=seed, epochs=a.epochs, num_threads=1, lambdarank_weight=w)
                test = _part(d, part == "test")
                r = evaluate_predictions(test["task_ids"], test["labels"], m.predict(test))
                line = json.dumps({"case": name, "weight": w, "seed": seed, "pca": round(r["pca"], 4),
                                   "top1": round(r["top1"], 4), "top5": round(r["top5"], 4),
                                   "test_records": int((part == "test").sum()),
                                   "test_records_of_trained_tasks": round(seen_task_share(df), 4),
                                   "seconds": round(time.perf_counter() - t0, 1)})
                print(line, flush=True)
                if a.out:
                    with open(a.out, "a") as f:
                        f.write(line + "\n")


if __name__ == "__main__":
    main()
