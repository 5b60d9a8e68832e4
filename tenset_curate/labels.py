"""Labels as TenSet defines them.

TenSet labels a measurement with its normalised throughput (``python/tvm/auto_scheduler/dataset.py`` calls
``get_per_store_features_from_measure_pairs``, whose C++ side, ``GetPerStoreFeaturesFromMeasurePairs`` in
``src/auto_scheduler/feature.cc``, computes it): a record's cost is the mean of its ``costs`` (``FloatArrayMean``),
and its label is the task's minimum cost / its cost, so the best program scores 1 and every other one lies in
(0, 1]. A task is (workload key, target).

Where we differ, on purpose: the minimum is taken over the task's *valid* records on that hardware only (TenSet's
includes the failed ones, whose cost is 1e10, so it only matters for a task where every record failed); failed or
invalid records (``is_valid`` false, null ``mean_cost``) get label 0 and keep ``is_valid = false``, and training and
metrics leave them out unless asked (``include_failed``; TenSet keeps them with a label of about 1e-14). The mean
is computed in float64 where TenSet casts it to float32 and divides in float32: on the 204,617 valid real Ansor
records here, 80,406 labels differ from TenSet's by at most 1.3e-7 and no pair of records changes its order
(session-30 audit), so PCA and top-k are unchanged. A pruned dataset's labels are its own: ``prune`` merges the
costs of duplicate schedules into the record it keeps (``prune.merge_duplicates``), whose mean then moves.
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
