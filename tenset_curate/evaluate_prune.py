"""Does pruning keep what a cost model learns? Train one fixed proxy ranker on full and on pruned training data.

The held-out test part of a within-task split (TenSet's scheme, seeded) is fixed first; only the training part is
pruned (so the pruning never sees test labels), by the requested method and by random pruning at the same ratio
(the control). The same proxy (LightGBM lambdarank over the flat features, fixed hyper-parameters) is trained on
each and scored with TenSet's metrics on the same test records. ``model`` swaps the proxy for one of the product's
models, trained as ``curate train`` trains it (``curate prune --evaluate-model``): the methods do not rank the same
for every model (reports/prune_models.md: hybrid helps the proxy and costs the attention model PCA against random).
"""
from __future__ import annotations

import numbers
import time
from pathlib import Path

import numpy as np
import polars as pl

from .features import featurize
from .labels import with_labels
from .metrics import evaluate_predictions
from .prune import check_prune_args, load_records, select
from .splits import make_split
from .storage import atomic_savefig

# Queries of at most 64 records with lambdarank's truncation at 64: every pair of a query counts, as in PCA.
# The proxy used before (queries cut at 2000 records, truncation 64, 300 trees at 0.05) optimised only the top of
# very long queries, so its PCA ROSE as training data was removed (K80 full 0.741, random pruning at 0.9 0.748):
# it made pruning look free. This one: K80 full 0.814 (the issue measured 0.823 with its own LightGBM proxy),
# random pruning at 0.7 0.796 (seed 0). The proxy keeps the raw flat features (task_relative=False, the ranker's
# default before the within-task features) so that the committed prune reports stay comparable.
PROXY = dict(n_estimators=600, learning_rate=0.1, num_leaves=31, max_group_size=64, lambdarank_truncation_level=64,
             early_stopping_rounds=50, eval_every=10, num_threads=2, task_relative=False)


def _proxy_fit_eval(train: pl.DataFrame, test: pl.DataFrame, ftr: dict, fte: dict, seed: int) -> dict:
    from .model import GBDTRanker

    def arr(df, f):
        gid = df.select(pl.concat_str(["hardware", "task_id"], separator="/").alias("g"))["g"]
        return {"flat": f["flat"], "task_ids": gid.rank("dense").to_numpy().astype(np.int64),
                "labels": df["label"].to_numpy().astype(np.float32)}

    tr = arr(train, ftr)
    m = GBDTRanker(seed=seed, progress=False, **PROXY)
    m.fit(tr, None)
    te = arr(test, fte)
    r = evaluate_predictions(te["task_ids"], te["labels"], m.predict(te))
    return {k: round(float(r[k]), 4) for k in ("pca", "top1", "top5")}


EVAL_MODELS = ("proxy", "attention", "gbdt", "mlp")  # the proxy, or one of the product's models


def valid_draw(df: pl.DataFrame, seed: int) -> np.ndarray:
    """A tenth of each task's records (at least one of a task with two or more), drawn by record id and seed: the
    validation part a product model stops early on."""
    from .splits import _u01, _within

    return _within(df, _u01(df["record_id"], seed, "prune-models-valid"), 0.1)


def _model_fit_eval(kind: str, kept: pl.DataFrame, test: pl.DataFrame, ops: pl.DataFrame, seed: int, epochs: int,
                    valid: pl.DataFrame | None = None) -> dict:
    """One of the product's models trained on ``kept`` the way ``curate train`` trains it (``training.fit_on_frame``:
    the split's own hyperparameters, within-task statistics over each task's records in the frame, attention on one
    thread) and scored on ``test``. It stops early on ``valid`` when given (records the pruning never saw), else on
    a tenth of the kept records: all that a pruned dataset's user has."""
    from .training import _part, fit_on_frame

    if valid is None:
        parts = [kept.with_columns(pl.Series("part", np.where(valid_draw(kept, seed), "valid", "train")))]
    else:
        parts = [kept.with_columns(pl.lit("train").alias("part")), valid.with_columns(pl.lit("valid").alias("part"))]
    frame = pl.concat(parts + [test.with_columns(pl.lit("test").alias("part"))], how="vertical_relaxed")
    frame = frame.join(ops, on="task_id", how="left", maintain_order="left")
    m, d = fit_on_frame(frame, kind, seed=seed, epochs=epochs, **({"num_threads": 1} if kind == "attention" else {}))
    te = _part(d, (frame["part"] == "test").to_numpy())
    r = evaluate_predictions(te["task_ids"], te["labels"], m.predict(te))
    return {k: round(float(r[k]), 4) for k in ("pca", "top1", "top5")}


def prepare(dataset: Path, seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(train+valid frame, test frame) of a within-task split; labels relative to the full data."""
    recs = with_labels(load_records(dataset))
    sp, _ = make_split(recs, "within-task", seed=seed, valid_fraction=0.0)
    df = recs.join(sp.select("record_id", "part"), on="record_id")
    return df.filter(pl.col("part") != "test"), df.filter((pl.col("part") == "test") & pl.col("is_valid"))


def evaluate_methods(dataset: Path, ratios: list[float], methods: list[str], seeds: list[int],
                     min_keep: int = 8, model: str = "proxy", epochs: int = 24,
                     valid_from: str = "kept") -> list[dict]:
    """Rows of {method, ratio, seed, pca, top1, top5, kept, seconds}; method 'full' at ratio 0 is the baseline.
    ``kept``: the valid records the model trains on (a pruning keeps failed records too, which no model trains on:
    ``random`` draws over every record as pruning the dataset at random does, so on a set with many failed
    measurements it trains on fewer than a method that leaves them out; the prune audit found the column counting
    them, 9,946 for both hybrid and random on bennu where they trained on 9,387 and 7,688).

    ``model``: ``proxy`` (the fixed LightGBM ranker, ``PROXY``) or one of the product's models (``attention``,
    ``gbdt``, ``mlp``; ``_model_fit_eval``, ``epochs`` for the neural ones). ``valid_from`` (product models only):
    ``kept``, a tenth of the kept records validate; ``pool``, a tenth of each task's training records is set aside
    before pruning and validates every run (the pruning then runs on the rest)."""
    if model not in EVAL_MODELS:
        raise ValueError(f"unknown evaluation model {model!r}; choose from {', '.join(EVAL_MODELS)}")
    if valid_from not in ("kept", "pool"):
        raise ValueError(f"valid_from must be kept or pool, not {valid_from!r}")
    rows = []
    for seed in seeds:
        train, test = prepare(dataset, seed)
        pairs = train.filter(pl.col("is_valid")).group_by("hardware", "task_id").len().filter(pl.col("len") >= 2)
        if test.filter(pl.col("is_valid")).is_empty() or pairs.is_empty():
            raise ValueError(f"cannot evaluate pruning on {dataset}: no task has valid records enough to train on "
                             "and to test on (each task's test records are held out of its own records)")
        valid = ops = None
        if model != "proxy":
            from .features import dataset_operator_classes

            ops = dataset_operator_classes(pl.concat([train, test], how="vertical_relaxed"),
                                           dataset).select("task_id", "op_class")
            if valid_from == "pool":
                v = pl.Series(valid_draw(train, seed))
                valid, train = train.filter(v & pl.col("is_valid")), train.filter(~v)
        ftrain = featurize(train)
        ftest = featurize(test) if model == "proxy" else None
        valid_tr = train["is_valid"].to_numpy()

        def fit_eval(m: np.ndarray) -> dict:
            sub = train.filter(pl.Series(m))
            if model == "proxy":
                return _proxy_fit_eval(sub, test, {k: v[m] for k, v in ftrain.items()}, ftest, seed)
            return _model_fit_eval(model, sub, test, ops, seed, epochs, valid)

        rows.append({"method": "full", "ratio": 0.0, "seed": seed, **fit_eval(valid_tr), "kept": int(valid_tr.sum()),
                     "seconds": 0})
        for ratio in ratios:
            for method in methods:
                t0 = time.perf_counter()
                keep, _ = select(train, ratio, method, seed, min_keep, feats=ftrain)
                secs = time.perf_counter() - t0
                rows.append({"method": method, "ratio": ratio, "seed": seed, **fit_eval(keep & valid_tr),
                             "kept": int((keep & valid_tr).sum()), "seconds": round(secs, 2)})
    return rows


def check_evaluation_memory(dataset: Path) -> None:
    """MemoryError, before anything runs, when ``evaluate_pruning`` could not hold ``dataset`` in memory: it featurises
    every record and trains its proxy on all of them at once (about as much a record as ``curate train``)."""
    import pyarrow.parquet as pq

    from .prune import record_files
    from .training import check_training_memory

    n = sum(pq.ParquetFile(f).metadata.num_rows for f in record_files(dataset))
    check_training_memory(n, f"curate prune --evaluate on {dataset}", way_out=(
        "The evaluation trains its proxy on every record at once: prune without --evaluate, and evaluate on a "
        "subset (one hardware's logs converted apart, or benchmarks/prune.py on a sample of the tasks)."))


def evaluate_pruning(dataset: Path, ratio: float, method: str = "hybrid", seed: int = 0, min_keep: int = 8,
                     seeds: int = 1, model: str = "proxy", epochs: int = 24) -> dict:
    """What ``curate prune --evaluate`` prints: full data, ``method`` and random pruning at one ratio, over ``seeds``
    seeds from ``seed`` on (each its own within-task test split, shared by the three), judged by ``model`` (the
    proxy, or one of the product's models: ``evaluate_methods``).

    Returns ``{"model": ..., "seeds": [...], "full" | method | "random": {pca, top1, top5, kept} (means over the seeds),
    "runs": [one row per (method, seed)], "paired": {pca_vs_full, top1_vs_full, pca_vs_random, top1_vs_random,
    *_paired_sd}}``: the method's mean difference to full data and to random pruning, paired by seed, in
    fractions (0.003 = 0.3 PCA points), with the sd of the paired difference over seeds (None for one seed).
    One seed decides little: over ten seeds on the A100 sets the paired sd of hybrid against random pruning is
    0.2-0.4 PCA and 1.0-1.7 top-1 points (``benchmarks/prune_sweep.py``), the size of most differences between
    pruning settings."""
    import statistics as st

    if not isinstance(seeds, numbers.Integral) or isinstance(seeds, bool) or seeds < 1:
        raise ValueError(f"seeds {seeds!r}: how many seeds to evaluate over, at least 1")  # 0 ran one, quietly
    check_prune_args(ratio, method, seed, min_keep)
    seed_list = list(range(seed, seed + int(seeds)))
    methods = [method] if method == "random" else [method, "random"]
    rows = evaluate_methods(dataset, [ratio], methods, seed_list, min_keep, model, epochs)
    out: dict = {"model": model, "seeds": seed_list}
    for m in ["full"] + methods:
        mine = [r for r in rows if r["method"] == m]
        out[m] = {k: round(st.mean(r[k] for r in mine), 4) for k in ("pca", "top1", "top5")}
        out[m]["kept"] = round(st.mean(r["kept"] for r in mine))
    out["runs"] = [{k: r[k] for k in ("method", "seed", "pca", "top1", "top5", "kept")} for r in rows]
    paired = paired_differences(rows, method, ratio, seed_list)
    wanted = ("_vs_full",) if method == "random" else ("_vs_full", "_vs_random", "_paired_sd")  # not random vs itself
    out["paired"] = {k: (None if v is None or (k.endswith("_sd") and len(seed_list) < 2) else round(v, 4))
                     for k, v in paired.items() if k.endswith(wanted)}
    return out


EVALUATION_HEADING = "## Proxy evaluation (curate prune --evaluate)"


def model_words(model: str) -> str:
    """Which ranker an evaluation trained, in words."""
    if model == "proxy":
        return "The LightGBM lambdarank proxy (`evaluate_prune.PROXY`)"
    return (f"The product's {model} model (trained as `curate train` trains it, stopping early on a tenth of its "
            f"training records)")


def evaluation_markdown(ev: dict, method: str, ratio: float) -> list[str]:
    """The pruning report's section for an ``evaluate_pruning`` result."""
    seeds = ", ".join(map(str, ev["seeds"]))
    lines = [EVALUATION_HEADING, "",
             f"{model_words(ev.get('model', 'proxy'))} trained on the full training part of a "
             f"within-task split of the source dataset and on that part pruned by `{method}` at ratio {ratio}"
             + ("" if method == "random" else " and at random at the same ratio") + f"; scored on the same test "
             f"records. Seeds {seeds} (each its own test split); means over the seeds.", "",
             "| training data | PCA | top-1 | top-5 | valid training records |", "|---|---:|---:|---:|---:|"]
    for k in dict.fromkeys(["full", method, "random"]):
        v = ev[k]
        lines.append(f"| {k} | {v['pca']:.4f} | {v['top1']:.4f} | {v['top5']:.4f} | {v['kept']} |")
    return lines + ["", paired_sentence(ev, method)]


def paired_sentence(ev: dict, method: str) -> str:
    """An ``evaluate_pruning`` result's paired differences in one sentence, in points (what the CLI prints too)."""
    p = ev["paired"]
    pts = lambda v: "-" if v is None else f"{100 * v:+.2f}"  # noqa: E731
    sd = lambda k: "one seed: no sd" if p.get(k) is None else f"paired sd {100 * p[k]:.2f}"  # noqa: E731
    out = f"`{method}` against full data, in points: PCA {pts(p['pca_vs_full'])}, top-1 {pts(p['top1_vs_full'])}."
    if "pca_vs_random" in p:
        out += (f" Against random pruning: PCA {pts(p['pca_vs_random'])} ({sd('pca_paired_sd')}), top-1 "
                f"{pts(p['top1_vs_random'])} ({sd('top1_paired_sd')}).")
    return out


def record_evaluation(out: Path, ev: dict) -> None:
    """Add an ``evaluate_pruning`` result to a pruned dataset: ``evaluation`` in its prune.json and a section at the
    end of its prune_report.md (replacing one an earlier evaluation wrote), each file replaced atomically under the
    dataset's lock."""
    import orjson

    from .storage import atomic_write_json, atomic_write_text, dataset_lock

    out = Path(out)
    with dataset_lock(out, what="curate prune --evaluate"):
        summary = orjson.loads((out / "prune.json").read_bytes())
        summary["evaluation"] = ev
        atomic_write_json(out / "prune.json", summary)
        report = out / "prune_report.md"
        if report.exists():
            text = report.read_text()
            text = text.split("\n" + EVALUATION_HEADING, 1)[0].rstrip("\n") + "\n\n"
            section = evaluation_markdown(ev, summary["method"], summary["ratio_requested"])
            atomic_write_text(report, text + "\n".join(section) + "\n")


def summarize(rows: list[dict]) -> pl.DataFrame:
    return (pl.DataFrame(rows).group_by("method", "ratio").agg(
        pl.col("pca").mean().alias("pca"), pl.col("pca").std().alias("pca_sd"), pl.col("top1").mean().alias("top1"),
        pl.col("top1").std().alias("top1_sd"), pl.col("top5").mean().alias("top5"), pl.len().alias("seeds"))
        .sort("ratio", "method"))


def plot_curves(rows: list[dict], out_png: Path) -> None:
    from .storage import new_figure

    s = summarize(rows)
    full = s.filter(pl.col("method") == "full")
    fig, axes = new_figure(1, 2, figsize=(10, 3.8))
    for ax, metric in zip(axes, ("pca", "top1")):
        for (m,), g in s.filter(pl.col("method") != "full").group_by("method", maintain_order=True):
            g = g.sort("ratio")
            ax.errorbar(g["ratio"].to_numpy(), g[metric].to_numpy(), yerr=g[f"{metric}_sd"].fill_null(0).to_numpy(),
                        label=m, marker="o", capsize=3)
        if full.height:
            ax.axhline(full[metric][0], color="k", ls="--", label="full data")
        ax.set_xlabel("ratio removed")
        ax.set_ylabel(metric)
        ax.legend(fontsize=8)
    fig.tight_layout()
    Path(out_png).parent.mkdir(parents=True, exist_ok=True)
    atomic_savefig(fig, out_png, dpi=90)


def paired_differences(rows: list[dict], method: str, ratio: float, seeds: list[int]) -> dict:
    """``method`` at ``ratio`` against full data and random pruning at the same ratio, paired by seed (each seed has
    its own test split, shared by every method): per metric (PCA, top-1) the mean over seeds of the method's value
    minus full data's (``*_vs_full``) and minus random's (``*_vs_random``), the sd over seeds of the paired difference
    with random (``*_paired_sd``), and that margin in paired sds and in the larger of the two methods' own seed sds
    (``*_margin_sd``, ``*_margin_own_sd``). Keys against random only where every seed has a random row."""
    import statistics as st

    by = {(r["method"], r["ratio"], r["seed"]): r for r in rows}
    row = {"method": method, "ratio": ratio}
    for metric in ("pca", "top1"):
        own = [by[(method, ratio, s)][metric] for s in seeds]
        full = [by[("full", 0.0, s)][metric] for s in seeds if ("full", 0.0, s) in by]
        row[f"{metric}_vs_full"] = (st.mean(o - f for o, f in zip(own, full)) if len(full) == len(own) else None)
        if all(("random", ratio, s) in by for s in seeds):
            rnd = [by[("random", ratio, s)][metric] for s in seeds]
            d = [o - r for o, r in zip(own, rnd)]
            row[f"{metric}_vs_random"] = st.mean(d)
            if len(d) > 1:
                sd_pair, sd_own = st.stdev(d), max(st.stdev(own), st.stdev(rnd))
                row[f"{metric}_paired_sd"] = sd_pair
                row[f"{metric}_margin_sd"] = _in_sd(st.mean(d), sd_pair)
                row[f"{metric}_margin_own_sd"] = _in_sd(st.mean(d), sd_own)
            else:  # one seed has no spread to read a margin against (it read as infinitely many sds)
                for k in ("paired_sd", "margin_sd", "margin_own_sd"):
                    row[f"{metric}_{k}"] = None
    return row


def against_bars(rows: list[dict], methods: tuple[str, ...] = ("hybrid", "cluster"),
                 ratios: tuple[float, ...] = (0.45, 0.7)) -> list[dict]:
    """The curation issue's checks: ``paired_differences`` per (method, ratio) with every seed's row, and ``met``.

    Bars: at 0.45, PCA lost <= 0.003 and top-1 not lower than full data; at 0.7, PCA lost <= 0.01 and the margin
    over random greater than twice the seed sd on PCA or on top-1 (``margin_sd`` reads it against the paired sd,
    ``margin_own_sd`` against the larger of the two methods' own seed sds). ``met`` is None (undecided) at 0.7 when
    one seed leaves the margin without an sd and nothing else decides it."""
    seeds = sorted({r["seed"] for r in rows})
    have = {(r["method"], r["ratio"], r["seed"]) for r in rows}
    out = []
    for ratio in ratios:
        for m in methods:
            if not all((m, ratio, s) in have for s in seeds):
                continue
            row = paired_differences(rows, m, ratio, seeds)
            if ratio <= 0.45 + 1e-9:
                row["met"] = (row["pca_vs_full"] is not None and row["pca_vs_full"] >= -0.003
                              and row["top1_vs_full"] >= 0)
            else:
                margins = [row.get(f"{k}_margin_sd", 0) for k in ("pca", "top1")]
                if row["pca_vs_full"] is None or row["pca_vs_full"] < -0.01:
                    row["met"] = False
                elif any(m is not None and m > 2 for m in margins):
                    row["met"] = True
                else:  # None: undecided, one seed gives no sd to compare the margin over random with
                    row["met"] = None if None in margins else False
            out.append(row)
    return out


def _in_sd(mean: float, sd: float) -> float:
    """mean / sd; with no spread at all, +-inf for a difference that is always there, 0 for none."""
    if sd > 0:
        return mean / sd
    return 0.0 if mean == 0 else float("inf") if mean > 0 else float("-inf")


def bars_markdown(rows: list[dict]) -> list[str]:
    """Lines of the benchmark report's "against the issue's bars" table (see ``against_bars``)."""
    f = lambda v: "-" if v is None else f"{v:+.4f}"  # noqa: E731
    lines = ["## Against the issue's bars (paired by seed: the same test split per seed)", "",
             "| method | ratio | PCA vs full | top-1 vs full | PCA vs random (paired sd; margin in paired sd / own sd) | "
             "top-1 vs random (paired sd; margin) | bar |", "|---|---:|---:|---:|---|---|---|"]
    for r in against_bars(rows):
        cells = []
        for k in ("pca", "top1"):
            if f"{k}_vs_random" in r and r[f"{k}_paired_sd"] is None:
                cells.append(f"{f(r[f'{k}_vs_random'])} (one seed: no sd)")
            elif f"{k}_vs_random" in r:
                cells.append(f"{f(r[f'{k}_vs_random'])} ({r[f'{k}_paired_sd']:.4f}; {r[f'{k}_margin_sd']:.1f} / "
                             f"{r[f'{k}_margin_own_sd']:.1f})")
            else:
                cells.append("-")
        bar = "undecided (one seed)" if r["met"] is None else "met" if r["met"] else "not met"
        lines.append(f"| {r['method']} | {r['ratio']} | {f(r['pca_vs_full'])} | {f(r['top1_vs_full'])} | {cells[0]} | "
                     f"{cells[1]} | {bar} |")
    lines += ["", "Bars: ratio 0.45, at most 0.3 PCA points lost and top-1 not lower than full data; ratio 0.7, at most "
              "1 PCA point lost and better than random pruning at 0.7 by more than twice the seed sd (here: the sd "
              "of the paired difference) on PCA or top-1."]
    return lines
