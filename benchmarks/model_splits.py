"""Cost-model quality on the issue's splits of the real GPU logs: attention vs GBDT vs MLP vs random.

    python benchmarks/model_splits.py [--realdata ../shared/realdata] [--epochs 24] [--models attention gbdt mlp]
        [--splits ...] [--seeds 0 1 2] [--split-seeds 0 1 2 3 4 5] [--merge]
    python benchmarks/model_splits.py --add-runs OTHER.json [...]    # fold more seeds run elsewhere into --out

Converts roller-k80 and roller-mi50 (cached under --work), makes the splits of issue #6 and trains each model on the
train part (valid part for early stopping), scoring TenSet's metrics on the test part:

- ``within_k80``: within-task on roller-k80 alone (TenSet's 90/10 per task);
- ``k80_mi50``: hardware-wise, trained on K80, tested on MI50 (zero-shot);
- ``k80_mi50_fs10``: the same with 10% of MI50's records moved into training;
- ``no_depthwise``: operator-wise, depthwise held out (both GPUs);
- ``k80_tasks``: task-wise on roller-k80, a fifth of the tasks held out (the network-wise bar's question, programs of
  tasks the model never saw, for logs without network_info). One held-out set of ~20 tasks is a small sample of
  tasks (attention PCA 0.73-0.81 over six sets), so ``--split-seeds`` draws several and reports their spread.

``random`` is the exact expectation of a uniformly random ranking (metrics.random_topk_expectation; PCA 0.5).
Writes reports/model_splits.md and .json. Attention trains with one thread (on a shared 2-core machine a second
thread slows it down, see reports/train.md).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from tenset_curate.convert import convert
from tenset_curate.metrics import evaluate_predictions, random_topk_expectation
from tenset_curate.splits import write_split
from tenset_curate.training import _part, arrays, fit_on_frame, labelled_split

SPLITS = {
    "within_k80": ("k80", dict(scheme="within-task", seed=0)),
    "k80_mi50": ("gpu", dict(scheme="hardware", train_hw=["roller-k80"], test_hw=["roller-mi50"], seed=0)),
    "mi50_k80": ("gpu", dict(scheme="hardware", train_hw=["roller-mi50"], test_hw=["roller-k80"], seed=0)),
    "k80_mi50_fs10": ("gpu", dict(scheme="hardware", train_hw=["roller-k80"], test_hw=["roller-mi50"],
                                  few_shot=0.1, seed=0)),
    "no_depthwise": ("gpu", dict(scheme="operator", holdout=["depthwise"], seed=0)),
    # more operator classes held out: one operator says little about operator-wise transfer
    "no_pooling": ("gpu", dict(scheme="operator", holdout=["pooling"], seed=0)),
    "no_dense": ("gpu", dict(scheme="operator", holdout=["dense"], seed=0)),
    "k80_tasks": ("k80", dict(scheme="task", test_fraction=0.2, seed=0)),
}


EXTRA_SPLITS = ("mi50_k80",)  # runnable by name, not rows of the report


def convert_sets(realdata: str | Path, work: str | Path) -> dict[str, Path]:
    """The two converted datasets the splits read (cached: an unchanged convert does nothing)."""
    real, work = Path(realdata) / "ansor", Path(work)
    ds = {"k80": work / "k80", "gpu": work / "gpu"}
    convert([real / "roller-k80"], ds["k80"], workers=2)
    convert([real / "roller-k80", real / "roller-mi50"], ds["gpu"], workers=2)
    return ds


def split_frame(ds: dict[str, Path], name: str, split_seed: int | None = None, **read):
    """Write split ``name`` of ``SPLITS`` into its dataset and return the labelled records with their part.
    ``split_seed`` replaces the split's own seed (another held-out set of tasks, operators' records, ...); the
    split is then stored as ``NAME@SEED``. ``read``: passed to ``labelled_split`` (``max_per_task``, ``seed``)."""
    which, kw = SPLITS[name]
    kw = dict(kw)
    if split_seed is not None and split_seed != kw.get("seed", 0):
        kw["seed"], name = split_seed, f"{name}@{split_seed}"
    write_split(ds[which], name, kw.pop("scheme"), **kw)
    return labelled_split(ds[which], name, **read)


def row_name(name: str, split_seeds: list[int]) -> str:
    """The table's name for a split run over several split seeds: ``k80_tasks@0-5`` (``k80_tasks@0,2`` when not
    a range); the plain name for the split's own seed alone."""
    if split_seeds == [SPLITS[name][1].get("seed", 0)]:
        return name
    r = list(range(split_seeds[0], split_seeds[-1] + 1))
    return f"{name}@{split_seeds[0]}-{split_seeds[-1]}" if split_seeds == r and len(r) > 1 else \
        f"{name}@{','.join(map(str, split_seeds))}"


# the table above this line is written by each run; the notes below it (analyses, older tables) are kept
NOTES_MARK = "<!-- benchmarks/model_splits.py writes everything above this line and keeps the notes below -->"


def _seeds(row: dict) -> str:
    if row["model"] == "random":
        return "-"
    return " ".join(str(x) for x in row.get("seeds", [0]))


def _cell(row: dict, k: str) -> str:
    sd = row.get(f"{k}_sd")
    return f"{row[k]:.3f}" + (f" +- {sd:.3f}" if sd is not None else "")


def summarise(row: dict, kruns: list[dict]) -> dict:
    """``row`` (split, model, record counts) completed from its runs (one per (split seed, model seed)): the mean of
    each metric, its sd over runs when there are several (a random ranking's PCA is exactly 0.5), the mean train
    seconds, the model seeds, and the runs themselves when there are several."""
    random = row["model"] == "random"
    row = {**row, "seconds": 0 if random else round(float(np.mean([x["seconds"] for x in kruns])), 1)}
    if not random:
        row["seeds"] = list(dict.fromkeys(x["seed"] for x in kruns))
    for k in ("pca", "top1", "top5"):
        v = np.array([x[k] for x in kruns])
        row[k] = round(float(v.mean()), 4)
        if len(kruns) > 1 and (not random or k != "pca"):
            row[f"{k}_sd"] = round(float(v.std(ddof=1)), 4)
    if len(kruns) > 1:
        row["runs"] = kruns
    return row


def _runs(row: dict) -> list[dict]:
    """A row's runs; a one-run row keeps its only run in the row itself."""
    if "runs" in row:
        return row["runs"]
    split_seed = {"split_seed": row["split_seeds"][0]} if "split_seeds" in row else {}
    return [{**split_seed, "seed": row.get("seeds", [0])[0], **{k: row[k] for k in ("pca", "top1", "top5", "seconds")}}]


def add_runs(rows: list[dict], others: list[list[dict]]) -> list[dict]:
    """Fold the runs of ``others`` (rows of other runs of this benchmark, e.g. more model seeds run in another
    process) into ``rows`` of the same split and model; a (split seed, seed) run present in both must agree."""
    rows = [dict(r) for r in rows]
    at = {(r["split"], r["model"]): i for i, r in enumerate(rows)}
    for other in others:
        for o in other:
            i = at.get((o["split"], o["model"]))
            if i is None or o["model"] == "random":
                continue
            runs = {(x.get("split_seed"), x["seed"]): x for x in _runs(rows[i])}
            n = len(runs)
            for x in _runs(o):
                key = (x.get("split_seed"), x["seed"])
                if key in runs and any(runs[key][k] != x[k] for k in ("pca", "top1", "top5")):
                    raise SystemExit(f"{o['split']} / {o['model']}: seed {x['seed']} differs between the files "
                                     f"({runs[key]} against {x}): not the same code or data")
                runs.setdefault(key, x)
            if len(runs) == n:
                continue
            base = {k: rows[i][k] for k in ("split", "model", "train_records", "test_records", "split_seeds")
                    if k in rows[i]}
            rows[i] = summarise(base, sorted(runs.values(), key=lambda x: (x.get("split_seed") or 0, x["seed"])))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--realdata", default=str(Path(__file__).resolve().parents[2] / "shared" / "realdata"))
    ap.add_argument("--work", default="/tmp/tc-bench-model-splits")
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--models", nargs="+", default=["attention", "gbdt", "mlp"])
    ap.add_argument("--splits", nargs="+", default=[k for k in SPLITS if k not in EXTRA_SPLITS],  # the report's rows
                    choices=list(SPLITS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0],
                    help="train each model once per seed; the table shows the mean and the sd over seeds")
    ap.add_argument("--split-seeds", nargs="+", type=int, default=None,
                    help="run each split once per split seed (other held-out sets) and report the mean and the sd "
                         "over all (split seed, model seed) runs as one row NAME@FIRST-LAST")
    ap.add_argument("--out", default="reports/model_splits.md")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of --out's JSON for the (split, model) pairs this run does not train")
    ap.add_argument("--add-runs", nargs="+", default=None, metavar="JSON",
                    help="train nothing: fold the per-seed runs of these .json files (other runs of this benchmark, "
                         "e.g. more seeds run in another process) into --out's rows of the same split and model")
    a = ap.parse_args(argv)
    if a.add_runs:
        out = Path(a.out)
        old = json.loads(out.with_suffix(".json").read_text())
        rows = add_runs(old, [json.loads(Path(f).read_text()) for f in a.add_runs])
        if rows == old:
            print(f"{out}: no run in {', '.join(a.add_runs)} that it lacks; left as it is")
            return
        head = out.read_text().split("\n", 3)[2] if out.is_file() else ""
        command = head.removeprefix("Command: `").removesuffix("`") if head.startswith("Command: `") else ""
        # the command of the table's own runs stays first
        write_report(out, rows, f"{command}`; runs folded in by `{_command(argv)}")
        return
    ds = convert_sets(a.realdata, a.work)
    rows = []
    for name in a.splits:
        split_seeds = a.split_seeds or [SPLITS[name][1].get("seed", 0)]
        label = row_name(name, split_seeds)
        runs = {kind: [] for kind in ["random", *a.models]}
        sizes = []
        for ss in split_seeds:
            df = split_frame(ds, name, ss)
            d = arrays(df)
            part = df["part"].to_numpy()
            test = _part(d, part == "test")
            sizes.append(((part == "train").sum(), (part == "test").sum()))
            rnd = {"pca": 0.5, **{f"top{k}": random_topk_expectation(test["task_ids"], test["labels"], k)
                                  for k in (1, 5)}}
            runs["random"].append({"split_seed": ss, **{k: round(float(v), 4) for k, v in rnd.items()},
                                   "seconds": 0})
            for kind in a.models:
                hp = {"num_threads": 1} if kind == "attention" else {}
                for seed in a.seeds:
                    t0 = time.perf_counter()
                    m, _ = fit_on_frame(df, kind, seed=seed, epochs=a.epochs, **hp)
                    secs = time.perf_counter() - t0
                    r = evaluate_predictions(test["task_ids"], test["labels"], m.predict(test))
                    runs[kind].append({**({"split_seed": ss} if a.split_seeds else {}), "seed": seed,
                                       **{k: round(float(r[k]), 4) for k in ("pca", "top1", "top5")},
                                       "seconds": round(secs, 1),
                                       **({"fine_tuned": m.fine_tuned} if m.fine_tuned else {})})
                    print(json.dumps({"split": label, "model": kind, **runs[kind][-1]}), flush=True)
        train_n, test_n = (int(round(float(np.mean(v)))) for v in zip(*sizes))
        for kind, kruns in runs.items():
            rows.append(summarise({"split": label, "model": kind, "train_records": train_n, "test_records": test_n,
                                   **({"split_seeds": split_seeds} if a.split_seeds else {})}, kruns))
    if a.merge and Path(a.out).with_suffix(".json").is_file():
        done = {(r["split"], r["model"]) for r in rows}
        old = [r for r in json.loads(Path(a.out).with_suffix(".json").read_text())
               if (r["split"], r["model"]) not in done]
        order = {n: i for i, n in enumerate(SPLITS)}
        rows = sorted(old + rows, key=lambda r: (order.get(r["split"].split("@")[0], 99), r["split"],
                                                 r["model"] != "random", r["model"]))
    write_report(a.out, rows, _command(argv))


def _command(argv) -> str:
    """This run's command line, as the report's header shows it."""
    return f"python {' '.join(['benchmarks/model_splits.py', *(argv if argv is not None else sys.argv[1:])])}"


def write_report(out: str | Path, rows: list[dict], command: str) -> None:
    """The table of ``rows`` above the notes of ``out`` (kept), and the rows as ``out``'s .json."""
    lines = ["# Cost models on the real GPU logs, per split", "",
             f"Command: `{command}`",
             "", "Test part of each split; TenSet's metrics (tenset_curate/metrics.py); `random` is the exact "
             "expectation of a random ranking. Several seeds: the mean, +- the sd over seeds; train seconds per seed. "
             "`NAME@A-B`: the split drawn with split seeds A to B (other held-out sets), mean and sd over every "
             "(split seed, model seed) run; train and test records are the mean over the split seeds.",
             "",
             "| split | model | seeds | PCA | top-1 | top-5 | train records | test records | train seconds |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['split']} | {r['model']} | {_seeds(r)} | {_cell(r, 'pca')} | {_cell(r, 'top1')} | "
              f"{_cell(r, 'top5')} | {r['train_records']} | {r['test_records']} | {r['seconds']} |" for r in rows]
    old_text = Path(out).read_text() if Path(out).is_file() else ""
    notes = old_text.split(NOTES_MARK, 1)[1] if NOTES_MARK in old_text else ""
    Path(out).write_text("\n".join(lines) + "\n\n" + NOTES_MARK + notes)
    Path(out).with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
