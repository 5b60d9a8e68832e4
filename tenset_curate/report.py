"""``curate report pca``: the baselines and the attention model on a dataset's splits, full and pruned data.

Deterministic on CPU (fixed seeds, one thread, metrics rounded to 3 decimals) so CI can regenerate the committed
``reports/pca.md`` and fail when it no longer matches. The same on every x86-64 CPU too: numpy, PyTorch and MKL pick
SIMD code by CPU at run time, and their AVX2 and AVX-512 paths round differently (numpy's log2 and exp differ in the
last bits; with torch's AVX2 kernels, ``ATEN_CPU_CAPABILITY=avx2``, on this AVX-512 machine the MLP and attention
rows of the embedded sample moved by 0.001-0.08). ``pca_report`` therefore runs in a fresh process whose environment
(``portable_numerics_env``) makes each library take its baseline code path, the one every x86-64 CPU runs: numpy
with every dispatched SIMD target disabled, ``ATEN_CPU_CAPABILITY=default``, ``MKL_CBWR=COMPATIBLE``, OpenBLAS's
Nehalem kernel. The library versions are pinned for CI by ``tests/constraints.txt``.

Splits: within-task always; operator-wise (the most common non-trivial operator class held out) when the data has two
or more classes; hardware-wise when it has two or more hardware names; network-wise when a networks table exists.
"""
from __future__ import annotations

import importlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

MODELS = ["gbdt", "mlp", "attention"]
HP = {"gbdt": {"n_estimators": 200, "num_threads": 1}, "mlp": {"num_threads": 1},
      "attention": {"num_threads": 1}}


def _splits(ds: Path) -> list[tuple[str, str, dict]]:
    from .features import operator_classes
    from .prune import load_records

    recs = load_records(ds, ["record_id", "hardware", "task_id", "workload_key", "workload_name", "source_file"])
    out = [("within_task", "within-task", {})]
    ops = operator_classes(recs)
    counts = recs.join(ops, on="task_id").group_by("op_class").agg(pl.col("task_id").n_unique().alias("t")).filter(
        (pl.col("op_class") != "unknown") & (pl.col("t") >= 2)).sort(["t", "op_class"], descending=[True, False])
    if counts.height >= 2:
        out.append(("operator", "operator", {"holdout": [counts["op_class"][1]]}))
    hws = sorted(recs["hardware"].unique())
    if len(hws) >= 2:
        out.append(("hardware", "hardware", {"train_hw": [hws[0]], "test_hw": [hws[1]]}))
    if list((ds / "networks").glob("*.parquet")):
        out.append(("network", "network", {}))
    return out


PORTABLE_FLAG = "TENSET_CURATE_PORTABLE_NUMERICS"


def _numpy_dispatch_targets() -> list[str]:
    """The SIMD targets this numpy build dispatches to at run time (above its compiled baseline)."""
    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return [str(t) for t in getattr(importlib.import_module(name), "__cpu_dispatch__", [])]
        except ImportError:
            continue
    return []


def portable_numerics_env() -> dict[str, str]:
    """Environment variables under which numpy, PyTorch, MKL and OpenBLAS compute the same bits on every x86-64 CPU
    (their baseline code paths; read at import, so they apply to a new process)."""
    env = {PORTABLE_FLAG: "1", "ATEN_CPU_CAPABILITY": "default"}
    targets = _numpy_dispatch_targets()
    if targets:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(targets)
    if platform.machine().lower() in ("x86_64", "amd64"):
        env.update(MKL_CBWR="COMPATIBLE", OPENBLAS_CORETYPE="Nehalem")
    return env


def pca_report(dataset: Path, out: Path, epochs: int = 24, ratio: float = 0.45, seed: int = 0,
               command: str | None = None) -> Path:
    """Train the three models on full and pruned data of each split and write the Markdown table to ``out``; runs in
    a fresh process under ``portable_numerics_env`` unless this process already is one (module docstring)."""
    if os.environ.get(PORTABLE_FLAG) != "1":
        return _in_portable_process(dataset, out, epochs, ratio, seed, command)
    from .metrics import evaluate_predictions, random_topk_expectation
    from .prune import prune
    from .splits import write_split
    from .storage import atomic_write_text
    from .training import data_hash, fit_on_frame, labelled_split, part_arrays

    dataset, out = Path(dataset), Path(out)
    work = Path(tempfile.mkdtemp(prefix="tc-pca-"))
    try:
        ds = work / "ds"
        if (dataset / "manifest.json").exists() and (dataset / "records").exists():
            shutil.copytree(dataset, ds, ignore=shutil.ignore_patterns("catalog.duckdb", ".lock"))
        else:
            from .convert import convert

            convert([dataset], ds)
        pruned = work / "pruned"
        prune(ds, pruned, ratio, "hybrid", seed, report=False)
        from .prune import load_records

        kept = set(load_records(pruned, ["record_id"])["record_id"].to_list())
        rows, lambdarank = [], {}
        for name, scheme, kw in _splits(ds):
            try:
                write_split(ds, name, scheme, seed=seed, **kw)
            except ValueError as e:
                rows.append((name, "skipped", str(e), None, None, None))
                continue
            df = labelled_split(ds, name)
            if not (df["part"] == "test").any():
                continue
            d_test = part_arrays(df, "test")
            rows.append((name, "random", "", 0.5, random_topk_expectation(d_test["task_ids"], d_test["labels"], 1),
                         random_topk_expectation(d_test["task_ids"], d_test["labels"], 5)))
            for data in ("full", "pruned"):
                frame = df if data == "full" else df.filter(
                    (pl.col("part") == "test") | pl.col("record_id").is_in(list(kept)))
                for kind in MODELS:
                    m, _ = fit_on_frame(frame, kind, seed=seed, epochs=epochs,
                                        data_manifest_hash=data_hash(ds, name), **HP[kind])
                    r = evaluate_predictions(d_test["task_ids"], d_test["labels"], m.predict(d_test))
                    rows.append((name, kind, data, r["pca"], r["top1"], r["top5"]))
                    if kind == "attention":
                        lambdarank[name] = m.hparams["lambdarank_weight"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cmd = command or f"curate report pca --dataset {dataset} --out {out} --epochs {epochs}"
    lines = ["# PCA report", "", f"Reproduce: `{cmd}`", "",
             f"Dataset: `{dataset}`; models trained on the train part of each split, full data and after hybrid "
             f"pruning of the dataset at ratio {ratio} (test records are always kept for scoring), scored on the same "
             "test records with TenSet's "
             "metrics (tenset_curate/metrics.py). Seed 0, one thread, metrics rounded to 3 decimals.", "",
             "| split | model | data | PCA | top-1 | top-5 |", "|---|---|---|---:|---:|---:|"]
    for name, kind, data, pca, t1, t5 in rows:
        if pca is None:
            lines.append(f"| {name} | - | - | skipped: {data} | | |")
        else:
            lines.append(f"| {name} | {kind} | {data or '-'} | {pca:.3f} | {t1:.3f} | {t5:.3f} |")
    if lambdarank:
        lines += ["", "The attention model's LambdaRank weight follows the split (`training.lambdarank_weight_for`: 0.25 "
                  "when most test records are of tasks that train, else 0.05): "
                  + ", ".join(f"{n} {w:g}" for n, w in lambdarank.items()) + "."]
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "\n".join(lines) + "\n")
    return out


def _in_portable_process(dataset, out, epochs, ratio, seed, command) -> Path:
    """``pca_report`` run again by ``python -m tenset_curate.report`` under ``portable_numerics_env``."""
    args = [sys.executable, "-m", "tenset_curate.report", "--dataset", str(dataset), "--out", str(out),
            "--epochs", str(epochs), "--ratio", str(ratio), "--seed", str(seed)]
    if command is not None:
        args += ["--command", command]
    r = subprocess.run(args, env={**os.environ, **portable_numerics_env()}, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"curate report pca failed in its portable-numerics process (exit {r.returncode}):\n"
                           f"{r.stderr[-4000:]}")
    return Path(out)


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tenset_curate.report", description="pca_report in this process")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=24)
    ap.add_argument("--ratio", type=float, default=0.45)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--command")
    a = ap.parse_args(argv)
    pca_report(Path(a.dataset), Path(a.out), a.epochs, a.ratio, a.seed, a.command)


if __name__ == "__main__":
    main()
