"""``curate info``: what a dataset holds, per hardware and operator class."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from .features import dataset_operator_classes
from .readers import DEVICE_COLUMNS, devices_by_hardware
from .storage import names_damaged_shard


@names_damaged_shard()
def dataset_info(dataset: Path) -> dict:
    """What ``curate info`` prints: records, tasks and quarantined lines (by kind of reason,
    ``quarantine_reasons``); per (hardware, operator class) records, tasks and failure rate; the rules that named
    the operator classes; per hardware its target kinds (several: one name over several machines); the splits it
    holds (scheme, counts, and for a split ``curate prune --split`` carried, where from); for a pruned dataset, what
    it was pruned from and how. FileNotFoundError when ``dataset`` holds no records."""
    from .prune import record_files
    from .splits import split_info

    dataset = Path(dataset)
    lf = pl.scan_parquet(record_files(dataset))
    recs = lf.select("hardware", "task_id", "workload_name", "workload_key", "source_file", "is_valid",
                     *DEVICE_COLUMNS).collect()
    ops = dataset_operator_classes(recs, dataset)
    j = recs.join(ops, on="task_id", how="left")
    by = (j.group_by("hardware", "op_class").agg(pl.len().alias("records"), pl.col("task_id").n_unique().alias("tasks"),
                                                 (1 - pl.col("is_valid").mean()).alias("failure_rate"))
          .sort("hardware", "op_class"))
    splits = []
    for f in sorted((dataset / "splits").glob("*.parquet")):
        i = split_info(dataset, f.stem)
        splits.append({"name": f.stem, "scheme": i.get("scheme"), "counts": i.get("counts", {}),
                       **({"pruned": i["pruned"]} if isinstance(i.get("pruned"), dict) else {})})
    pruned = pruned_from(dataset)
    q = sorted((dataset / "quarantine").glob("*.parquet"))
    nq = pl.scan_parquet(q).select(pl.len()).collect().item() if q else 0
    return {"dataset": str(dataset), "records": recs.height, "tasks": recs.select("hardware", "task_id").n_unique(),
            "quarantined": nq, "quarantine_reasons": quarantine_reasons(dataset) if nq else [],
            "by_hardware_operator": by.to_dicts(), "splits": splits, "pruned_from": pruned,
            "op_rules": dict(ops.group_by("op_rule").len().sort("op_rule").iter_rows()),
            # per hardware, the target kinds and the devices (readers.device_of) of its records: more than one is
            # one name for several machines
            "target_kinds": {h: k for h, k in recs.group_by("hardware").agg(
                pl.col("target_kind").drop_nulls().unique().sort()).sort("hardware").iter_rows()},
            "targets": {h: sorted(d) for h, d in sorted(devices_by_hardware(
                recs.select("hardware", *DEVICE_COLUMNS).to_arrow()).items())}}


def pruned_from(dataset: Path) -> dict | None:
    """For a dataset ``curate prune`` wrote, its manifest's record: ``{"from": source, method, ratio_requested, ...}``;
    None for any other dataset (or an unreadable manifest)."""
    import orjson

    try:
        man = orjson.loads((Path(dataset) / "manifest.json").read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(man, dict) or "pruned_from" not in man:
        return None
    return {"from": man["pruned_from"], **(man.get("prune") or {})}


QUARANTINE_REASONS_SHOWN = 5


def quarantine_reasons(dataset: Path, top: int = QUARANTINE_REASONS_SHOWN) -> list[dict]:
    """What the dataset's quarantine holds, by kind of reason, the most lines first (at most ``top`` kinds):
    ``{"reason", "lines", "first"}``, ``first`` naming the first such line (file and line). A reason's kind is its
    text without the reader's prefixes ("invalid record: ", the error's class, "malformed steps: ") and up to the
    first ", not " or ": ", where the line's own values follow. ``curate convert`` and ``curate info`` print them, so
    a malformed line is named without a query; ``curate sql "SELECT * FROM quarantine"`` lists every one."""
    files = sorted((Path(dataset) / "quarantine").glob("*.parquet"))
    if not files:
        return []
    kind = (pl.col("reason").str.replace(r"^(invalid record: )?([A-Za-z]+Error: )?(malformed steps: )?", "")
            .str.split(", not ").list.first().str.split(": ").list.first())
    first = pl.struct("source_file", "line").sort_by("source_file", "line", nulls_last=True).first()
    g = (pl.scan_parquet(files).select(kind.alias("kind"), "source_file", "line")
         .group_by("kind").agg(pl.len().alias("lines"), first.alias("first"))  # aggregates only: any size
         .collect().unnest("first").sort(["lines", "source_file", "line"], descending=[True, False, False],
                                         nulls_last=True).head(top))
    return [{"reason": r["kind"], "lines": int(r["lines"]),
             "first": r["source_file"] + (f" line {r['line']}" if r["line"] is not None else "")}
            for r in g.iter_rows(named=True)]
