"""``curate prune``: remove redundant records down to a ratio.

``ratio`` is the fraction of records REMOVED (0.45 keeps 55%). Methods:

- ``redundancy``: records of one (hardware, task) whose schedule tokens are identical (the same schedule measured
  again, or the same up to bookkeeping that does not change the program: SSA names, GetBlock/GetLoops, the Split
  that replays a SamplePerfectTile) collapse into one record whose costs are the union of theirs.
- ``cluster``: per (hardware, task), k-means on standardised flat features inside label-quantile strata; the record
  nearest each centre is kept, so the kept set covers the schedule space and the label range.
- ``importance``: an out-of-fold LightGBM lambdarank proxy (2 folds per task: a record is scored by the model that
  did not see it) scores each record by its rank error; informative (hard) records are kept, with a floor of
  easy ones drawn at random so the label distribution does not collapse.
- ``random``: the control.
- ``hybrid`` (default): redundancy first, then failed records, then cluster representatives for the remaining
  budget, mixed with importance picks in the share ``HYBRID_IMPORTANCE_SHARE``. Tuned on data
  (``benchmarks/prune.py``, roller-k80, 3 seeds, reports/prune.md): with half importance picks the proxy lost
  1.1 (ratio 0.45) and 3.5 (0.7) PCA points against full data, while cluster representatives alone gained 0.7
  and 1.2; the share is therefore 0.

Invariants (checked): deterministic for a seed; every (hardware, task) keeps its best valid record and at least
``min_keep`` records (or all it has); the achieved ratio is within 1% of the request whenever the minimums allow;
the output has the record schema.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import numpy as np
import polars as pl

from .features import featurize
from .labels import LABEL_KEYS, with_labels
from .schema import RECORD_SCHEMA

METHODS = ["redundancy", "cluster", "importance", "hybrid", "random"]
HYBRID_IMPORTANCE_SHARE = 0.0  # see the module docstring: importance picks hurt the proxy on real data


def load_records(dataset: Path, columns: list[str] | None = None) -> pl.DataFrame:
    files = sorted((Path(dataset) / "records").glob("*/*.parquet"))
    if not files:
        raise FileNotFoundError(f"{dataset}: no record shards under records/ (run curate convert first)")
    df = pl.concat([pl.read_parquet(f, columns=columns) for f in files], how="vertical")
    keys = [k for k in ("hardware", "task_id", "record_id") if k in df.columns]
    return df.sort(keys)


def _group_index(df: pl.DataFrame) -> np.ndarray:
    return df.select(pl.struct(LABEL_KEYS).rank("dense") - 1).to_series().to_numpy().astype(np.int64)


def dedup_keys(tokens: np.ndarray, mask: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """A 64-bit key per record: equal keys = same group and identical token sequence."""
    flat = np.ascontiguousarray(np.where(mask[:, :, None], tokens, 0).reshape(len(tokens), -1))
    keys = np.empty(len(tokens), dtype=np.uint64)
    for i in range(len(tokens)):
        h = hashlib.blake2b(flat[i].tobytes(), digest_size=8)
        h.update(int(groups[i]).to_bytes(8, "little"))
        keys[i] = int.from_bytes(h.digest(), "little")
    return keys


def allocate(sizes: np.ndarray, keep_total: int, min_keep: int) -> np.ndarray:
    """Records to keep per group: proportional to size, at least min(size, min_keep), summing to keep_total
    (largest remainder) whenever the minimums allow."""
    sizes = sizes.astype(np.int64)
    floor = np.minimum(sizes, min_keep)
    if keep_total <= floor.sum():
        return floor
    spare = keep_total - floor.sum()
    room = sizes - floor
    if room.sum() == 0:
        return floor
    share = spare * room / room.sum()
    base = np.minimum(np.floor(share).astype(np.int64), room)
    left = spare - base.sum()
    frac = share - base
    order = np.lexsort((np.arange(len(sizes)), -frac))
    for i in order:
        if left <= 0:
            break
        if base[i] < room[i]:
            base[i] += 1
            left -= 1
    return floor + base


def _kmeans_pick(x: np.ndarray, k: int, rng: np.random.Generator, iters: int = 8) -> np.ndarray:
    """Indices of the k points nearest k-means centres (k-means++ init, Lloyd iterations).

    Vectorised: squared distances as |x|^2 - 2 x.c + |c|^2 (one matrix product), centre updates as an
    assignment-matrix product, nearest-unpicked resolution over one argsort of the distance matrix."""
    n = len(x)
    if k >= n:
        return np.arange(n)
    xx = (x * x).sum(1)
    first = x[rng.integers(n)]
    c = np.empty((k, x.shape[1]), x.dtype)
    c[0] = first
    d2 = np.maximum(xx - 2 * (x @ first) + first @ first, 0.0)
    for j in range(1, k):
        tot = d2.sum()
        c[j] = x[rng.choice(n, p=d2 / tot)] if tot > 0 else x[rng.choice(n)]
        d2 = np.minimum(d2, np.maximum(xx - 2 * (x @ c[j]) + c[j] @ c[j], 0.0))
    rows = np.arange(n)
    for _ in range(iters):
        a = (xx[:, None] - 2 * (x @ c.T) + (c * c).sum(1)[None]).argmin(1)
        cnt = np.bincount(a, minlength=k)
        onehot = np.zeros((k, n), x.dtype)
        onehot[a, rows] = 1.0
        nz = cnt > 0
        c[nz] = (onehot @ x)[nz] / cnt[nz, None]
    dist = xx[:, None] - 2 * (x @ c.T) + (c * c).sum(1)[None]
    order = np.argsort(dist, axis=0, kind="stable")  # column j: points by distance to centre j
    picked = np.empty(k, np.int64)
    taken = np.zeros(n, bool)
    for j in range(k):  # nearest unpicked point to each centre, centres in order
        col = order[:, j]
        i = col[np.argmax(~taken[col])]
        taken[i] = True
        picked[j] = i
    return np.sort(picked)


def _cluster_select(idx: np.ndarray, k: int, flat: np.ndarray, labels: np.ndarray, rng) -> np.ndarray:
    if k >= len(idx):
        return idx
    x = flat[idx]
    sd = x.std(0)
    x = (x - x.mean(0)) / np.where(sd > 0, sd, 1)
    # label strata: quartiles of the label, each gets k proportional to its size
    q = np.quantile(labels[idx], [0.25, 0.5, 0.75])
    strata = np.searchsorted(q, labels[idx], side="right")
    sizes = np.bincount(strata, minlength=4)
    ks = allocate(sizes, k, 1 if k >= 4 else 0)
    out = []
    for s in range(4):
        m = np.flatnonzero(strata == s)
        if len(m) and ks[s]:
            out.append(m[_kmeans_pick(x[m], int(ks[s]), rng)])
    sel = np.concatenate(out) if out else np.array([], np.int64)
    return idx[np.sort(sel)]


def importance_scores(feats: dict, labels: np.ndarray, groups: np.ndarray, valid: np.ndarray, seed: int,
                      num_threads: int = 2) -> np.ndarray:
    """Out-of-fold rank error of a LightGBM lambdarank proxy: |rank of prediction - rank of label| / group size.

    Records are split in two folds inside each group; each fold is scored by the model trained on the other."""
    import lightgbm as lgb

    rng = np.random.default_rng(seed)
    n = len(labels)
    fold = rng.integers(0, 2, n)
    score = np.zeros(n)
    flat = feats["flat"]
    for f in (0, 1):
        tr = np.flatnonzero((fold != f) & valid)
        te = np.flatnonzero((fold == f) & valid)
        if len(tr) < 10 or len(te) == 0:
            continue
        order = np.argsort(groups[tr], kind="stable")
        tr = tr[order]
        _, counts = np.unique(groups[tr], return_counts=True)
        rel = np.clip(np.floor(labels[tr] * 30), 0, 30).astype(int)
        params = {"objective": "lambdarank", "learning_rate": 0.1, "num_leaves": 31, "seed": seed, "verbose": -1,
                  "num_threads": num_threads, "label_gain": list(range(31)), "deterministic": True,
                  "force_row_wise": True, "min_data_in_leaf": 20}
        m = lgb.train(params, lgb.Dataset(flat[tr], rel, group=counts), num_boost_round=60)
        pred = m.predict(flat[te])
        g = groups[te]
        pr = pl.DataFrame({"g": g, "p": pred, "y": labels[te]}).with_columns(
            pl.col("p").rank("average").over("g").alias("rp"), pl.col("y").rank("average").over("g").alias("ry"),
            pl.len().over("g").alias("n"))
        score[te] = ((pr["rp"] - pr["ry"]).abs() / pr["n"]).to_numpy()
    return score


def select(df: pl.DataFrame, ratio: float, method: str = "hybrid", seed: int = 0, min_keep: int = 8,
           feats: dict | None = None) -> tuple[np.ndarray, dict]:
    """Decide which rows of ``df`` (sorted, labelled) to keep. Returns (keep mask, info)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if not 0.0 <= ratio < 1.0:
        raise ValueError("ratio is the fraction removed and must lie in [0, 1)")
    rng = np.random.default_rng(seed)
    n = df.height
    groups = _group_index(df)
    labels = df["label"].to_numpy()
    valid = df["is_valid"].to_numpy()
    keep_total = int(round(n * (1 - ratio)))
    info: dict = {}
    # best valid record per group: always kept
    best = np.zeros(n, bool)
    lab_masked = np.where(valid, labels, -1.0)
    order = np.lexsort((-lab_masked, groups))
    first = np.ones(n, bool)
    first[1:] = groups[order][1:] != groups[order][:-1]
    best[order[first & (lab_masked[order] > 0)]] = True

    alive = np.ones(n, bool)  # candidates still available
    merged_into = None
    if method in ("redundancy", "hybrid"):
        feats = feats or featurize(df)
        keys = dedup_keys(feats["tokens"], feats["mask"], groups)
        # representative of each duplicate set: its best (highest label) member, so labels keep their scale
        o = np.lexsort((np.arange(n), -lab_masked, keys))
        rep = np.ones(n, bool)
        rep[1:] = keys[o][1:] != keys[o][:-1]
        is_rep = np.zeros(n, bool)
        is_rep[o[rep]] = True
        info["duplicates"] = int((~is_rep).sum())
        merged_into = keys
        if method == "redundancy":
            alive &= is_rep
            keep = alive.copy()
            if keep.sum() > keep_total:  # trim at random beyond the duplicates, minimums respected
                keep = _fill(keep, best, groups, keep_total, min_keep, rng, score=None)
            return keep, {**info, "merge_keys": merged_into}
        alive &= is_rep | best
    if method == "random":
        keep = _fill(np.ones(n, bool), best, groups, keep_total, min_keep, rng, score=None)
        return keep, info
    feats = feats or featurize(df)
    if method == "hybrid":
        # drop failures before any valid record, keeping at least one failure per group for failure modelling
        sizes = np.bincount(groups, minlength=groups.max() + 1)
        alloc = allocate(np.bincount(groups[alive], minlength=len(sizes)), keep_total, min_keep)
        info["failed_dropped_first"] = int((alive & ~valid).sum())
    else:
        alloc = allocate(np.bincount(groups, minlength=groups.max() + 1), keep_total, min_keep)
    keep = np.zeros(n, bool)
    keep |= best
    imp = None
    if method == "importance" or (method == "hybrid" and HYBRID_IMPORTANCE_SHARE > 0):
        imp = importance_scores(feats, labels, groups, valid, seed)
    by_group = np.argsort(groups, kind="stable")  # rows need not be sorted by group
    bounds = np.flatnonzero(np.diff(groups[by_group], prepend=-1, append=groups.max() + 1))
    for gi in range(len(bounds) - 1):
        lo, hi = bounds[gi], bounds[gi + 1]
        idx = by_group[lo:hi]
        k = int(alloc[groups[idx[0]]]) - int(keep[idx].sum())
        cand = idx[alive[idx] & ~keep[idx]]
        if method == "hybrid":
            cand_valid = cand[valid[cand]]
            if k > len(cand_valid):  # not enough valid ones: add failures
                keep[cand_valid] = True
                k -= len(cand_valid)
                failed = cand[~valid[cand]]
                keep[rng.permutation(failed)[:k]] = True
                continue
            cand = cand_valid
        if k <= 0 or len(cand) == 0:
            continue
        if k >= len(cand):
            keep[cand] = True
            continue
        if method == "cluster":
            keep[_cluster_select(cand, k, feats["flat"], labels, rng)] = True
        elif method == "importance":
            keep[_importance_pick(cand, k, imp, rng)] = True
        else:  # hybrid: cluster representatives, with a share of importance picks
            kc = k - int(round(k * HYBRID_IMPORTANCE_SHARE))
            sel = _cluster_select(cand, kc, feats["flat"], labels, rng) if kc else np.array([], np.int64)
            keep[sel] = True
            if k - len(sel) > 0:
                rest = cand[~keep[cand]]
                keep[_importance_pick(rest, k - len(sel), imp, rng)] = True
    return keep, {**info, "merge_keys": merged_into}


def _importance_pick(cand: np.ndarray, k: int, imp: np.ndarray, rng) -> np.ndarray:
    """The top 3/4 of k by out-of-fold rank error, the last 1/4 at random from the rest."""
    if k >= len(cand):
        return cand
    k_top = (3 * k) // 4
    o = cand[np.lexsort((cand, -imp[cand]))]
    top = o[:k_top]
    rest = o[k_top:]
    return np.concatenate([top, rng.permutation(rest)[: k - k_top]])


def _fill(pool: np.ndarray, best: np.ndarray, groups: np.ndarray, keep_total: int, min_keep: int, rng,
          score) -> np.ndarray:
    """Random selection inside ``pool``: best records, then per-group allocation at random."""
    alloc = allocate(np.bincount(groups[pool], minlength=groups.max() + 1), keep_total, min_keep)
    keep = best & pool
    perm = rng.permutation(len(groups))
    taken = np.bincount(groups[keep], minlength=len(alloc))
    for i in perm:
        if pool[i] and not keep[i] and taken[groups[i]] < alloc[groups[i]]:
            keep[i] = True
            taken[groups[i]] += 1
    return keep


def merge_duplicates(df: pl.DataFrame, keep: np.ndarray, merge_keys: np.ndarray | None) -> pl.DataFrame:
    """Kept representatives absorb the costs of the duplicates they stand for; mean_cost is recomputed."""
    kept = df.filter(pl.Series(keep))
    if merge_keys is None:
        return kept
    allc = df.select(pl.Series("k", merge_keys), "costs", "is_valid").filter(pl.col("is_valid")).group_by(
        "k").agg(pl.col("costs").list.explode(keep_nulls=False, empty_as_null=False).alias("mcosts"), pl.len().alias("n_merged"))
    kk = pl.Series("k", merge_keys).filter(pl.Series(keep))
    kept = kept.with_columns(kk).join(allc, on="k", how="left", maintain_order="left")
    kept = kept.with_columns(
        pl.when(pl.col("is_valid") & (pl.col("n_merged") > 1)).then(pl.col("mcosts")).otherwise(pl.col("costs"))
        .alias("costs")
    ).with_columns(
        pl.when(pl.col("is_valid")).then(pl.col("costs").list.mean()).otherwise(None).alias("mean_cost")
    )
    return kept.drop("k", "mcosts", "n_merged")


def prune(dataset: Path, out: Path, ratio: float, method: str = "hybrid", seed: int = 0, min_keep: int = 8,
          report: bool = True) -> dict:
    """Prune ``dataset`` into a new dataset at ``out`` (same schema, own manifest, catalog and report)."""
    from .storage import (_explain, atomic_write_json, atomic_write_text, dataset_lock, remove_stale_tmp,
                          write_parquet_atomic)

    t0 = time.perf_counter()
    dataset, out = Path(dataset), Path(out)
    df = with_labels(load_records(dataset))
    keep, info = select(df, ratio, method, seed, min_keep)
    kept = merge_duplicates(df, keep, info.pop("merge_keys", None))
    achieved = 1 - kept.height / df.height
    secs = time.perf_counter() - t0
    with dataset_lock(out, what="curate prune"):
        remove_stale_tmp(out)
        # All or nothing: every new file (shards, prune.json, the report, the manifest, the catalog) is written into
        # a staging folder first; only when all of them exist are they renamed into place (renames need no space),
        # so a full disk or a kill before that leaves the earlier result exactly as it was.
        stage = out / f".stage.tmp-{os.getpid()}"
        shutil.rmtree(stage, ignore_errors=True)
        try:
            outputs = []
            for (hw,), part in kept.sort(["hardware", "task_id", "record_id"]).group_by("hardware",
                                                                                     maintain_order=True):
                from .convert import _safe_part

                rel = f"records/hardware={_safe_part(hw)}/part-pruned.parquet"
                write_parquet_atomic(stage / rel, part.select(RECORD_SCHEMA.names).to_arrow().cast(RECORD_SCHEMA))
                outputs.append(rel)
            summary = {
                "source": str(dataset), "method": method, "ratio_requested": ratio,
                "ratio_achieved": round(achieved, 6), "seed": seed, "min_keep": min_keep,
                "records_before": df.height, "records_after": kept.height, "seconds": round(secs, 3),
                **{k: v for k, v in info.items() if isinstance(v, (int, float, str))}, "outputs": outputs,
            }
            summary["per_hardware"] = _counts(df, kept, ["hardware"])
            files = list(outputs)
            atomic_write_json(stage / "prune.json", summary)
            files.append("prune.json")
            if report:
                atomic_write_text(stage / "prune_report.md", prune_report(df, kept, summary))
                files.append("prune_report.md")
            atomic_write_json(stage / "manifest.json", {"pruned_from": str(dataset), "prune": {
                k: summary[k] for k in ("method", "ratio_requested", "ratio_achieved", "seed", "min_keep")},
                "inputs": {}})
            files.append("manifest.json")
            try:
                from .catalog import CATALOG_NAME, build_catalog
            except ImportError:
                CATALOG_NAME = None
            if CATALOG_NAME:
                # the catalog's views depend on which tables exist: link the dataset's other tables in (no copy)
                for sub in ("splits", "tables"):
                    for f in sorted((out / sub).rglob("*")) if (out / sub).is_dir() else []:
                        if f.is_file() and ".tmp-" not in f.name:
                            dst = stage / f.relative_to(out)
                            dst.parent.mkdir(parents=True, exist_ok=True)
                            os.link(f, dst)
                build_catalog(stage)  # views hold relative paths: the file is valid once moved into out
                files.append(CATALOG_NAME)
            for rel in files:  # commit
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(stage / rel, out / rel)
            for p in (out / "records").glob("*/*.parquet"):
                if p.relative_to(out).as_posix() not in outputs:
                    p.unlink()
        except OSError as e:
            raise _explain(e, out) from e
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    if abs(achieved - ratio) > 0.01 and ratio > 0:
        summary["warning"] = (f"achieved ratio {achieved:.4f} differs from {ratio} by more than 1%: the per-task "
                              f"minimum of {min_keep} records (and best records) bound it")
    return summary


def _counts(before: pl.DataFrame, after: pl.DataFrame, keys: list[str]) -> list[dict]:
    b = before.group_by(keys).len().rename({"len": "before"})
    a = after.group_by(keys).len().rename({"len": "after"})
    return b.join(a, on=keys, how="left").fill_null(0).sort(keys).to_dicts()


def prune_report(before: pl.DataFrame, after: pl.DataFrame, summary: dict) -> str:
    from .features import operator_classes

    ops = operator_classes(before)
    lines = [f"# Pruning report: {summary['method']}, ratio {summary['ratio_requested']}", "",
             f"- records: {summary['records_before']} -> {summary['records_after']} "
             f"(removed {summary['ratio_achieved']:.2%}); seed {summary['seed']}; {summary['seconds']} s", ""]
    lines += ["## Kept per hardware", "", "| hardware | before | after |", "|---|---:|---:|"]
    lines += [f"| {r['hardware']} | {r['before']} | {r['after']} |" for r in summary["per_hardware"]]
    bo = before.join(ops, on="task_id").group_by("op_class").len().rename({"len": "before"})
    ao = after.join(ops, on="task_id").group_by("op_class").len().rename({"len": "after"})
    lines += ["", "## Kept per operator class", "", "| operator | before | after |", "|---|---:|---:|"]
    for r in bo.join(ao, on="op_class", how="left").fill_null(0).sort("op_class").iter_rows():
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} |")
    qs = [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]
    lb = before.filter(pl.col("is_valid"))["label"].quantile
    la = after.filter(pl.col("is_valid")).pipe(with_labels)["label"].quantile
    lines += ["", "## Label distribution (valid records)", "", "| quantile | before | after |", "|---|---:|---:|"]
    lines += [f"| {q} | {lb(q):.4f} | {la(q):.4f} |" for q in qs]
    pt = _counts(before, after, ["hardware", "task_id"])
    lines += ["", "## Kept per task", "", "| hardware | task | before | after |", "|---|---|---:|---:|"]
    lines += [f"| {r['hardware']} | {r['task_id']} | {r['before']} | {r['after']} |" for r in pt]
    return "\n".join(lines) + "\n"
