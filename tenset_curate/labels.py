"""Labels as TenSet defines them.

TenSet (``scripts/common.py`` / ``python/tvm/auto_scheduler/dataset.py``, ``make_dataset_from_log_file``) labels a
measurement with its normalised throughput: for each task, ``min(costs of the task) / cost`` so the best program
scores 1 and every other one lies in (0, 1]. We compute it per (hardware, task): the minimum is taken over the
task's *valid* records on that hardware only. Failed or invalid records (``is_valid`` false, null ``mean_cost``)
get label 0 and keep ``is_valid = false``; training and metrics exclude them unless asked. The mean is taken from
``costs`` in float64, as TenSet does (the stored ``mean_cost`` is that mean rounded to float32, a compact summary).
"""
from __future__ import annotations

import polars as pl

LABEL_KEYS = ["hardware", "task_id"]


def with_labels(df: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """Add ``label`` (float64 in (0, 1], 0 for failures) and ``best_cost`` per (hardware, task). Needs the
    ``costs``, ``is_valid``, ``mean_cost``, ``hardware`` and ``task_id`` columns."""
    mean = pl.col("costs").list.mean()  # float64, as TenSet's np.mean(costs) (mean_cost is it rounded to float32)
    best = mean.filter(pl.col("is_valid")).min().over(LABEL_KEYS)
    return df.with_columns(best.alias("best_cost")).with_columns(
        pl.when(pl.col("is_valid") & pl.col("mean_cost").is_not_null())
        .then(pl.col("best_cost") / mean)
        .otherwise(0.0)
        .alias("label")
    )
