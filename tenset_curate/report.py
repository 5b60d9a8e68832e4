"""``curate report pca``: the baselines and the attention model on a dataset's splits, full and pruned data.

Deterministic on CPU (fixed seeds, one thread, metrics rounded to 3 decimals) so CI can regenerate the committed
``reports/pca.md`` and fail when it no longer matches. The same on every x86-64 CPU too: numpy, PyTorch and MKL pick
SIMD code by CPU at run time, and their AVX2 and AVX-512 paths round differently (numpy's log2 and exp differ in the
last bits; with torch's AVX2 kernels, ``ATEN_CPU_CAPABILITY=avx2``, on an AVX-512 machine the MLP and attention
rows of the embedded sample moved by 0.001-0.08). ``pca_report`` therefore runs in a fresh process whose environment
(``portable_numerics_env``) makes each library take its baseline code path, the one every x86-64 CPU runs: numpy
with every dispatched SIMD target disabled, ``ATEN_CPU_CAPABILITY=default``, OpenBLAS's Nehalem kernel. MKL has no
such path: its ``MKL_CBWR=COMPATIBLE`` branch (what this module used until session 21) summed the TenSet MLP's
256-wide products in another order on an Intel Xeon (Sapphire Rapids) than on the AMD EPYC that wrote the committed
report (MLP rows moved by up to 0.35), so the report's models train inside ``mkl_free_numerics``, which keeps MKL out
of the computation altogether: products in ATen's own kernels, and the few functions ATen hands to MKL's vector
maths (exp, log, log2, sqrt: Adam's too) in MKL-free forms. Checked by regenerating the report under another MKL
branch (``tests/test_report.py``). What is left to the CPU is the C library's run-time choice among its own
variants of some maths functions (glibc's pow has an FMA one, taken on every x86-64 CPU with FMA: Intel since 2013,
AMD since 2012). Across vendors: the committed report was written on an AMD EPYC until session 20 and on an
Intel Xeon since; the MKL-free form has not yet been regenerated on AMD. The library versions are pinned for CI by
``tests/constraints.txt``.

Splits: within-task always; operator-wise (the second most common operator class by tasks held out, so the most
common one still trains) when the data has two or more classes of two or more tasks; hardware-wise (the first hardware
name in sorted order trains, the second is tested) when it has two or more; network-wise when a networks table exists.
The report says what each split held out and how many records each part has.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

from .storage import names_damaged_shard

MODELS = ["gbdt", "mlp", "attention"]
HP = {"gbdt": {"n_estimators": 200, "num_threads": 1}, "mlp": {"num_threads": 1},
      "attention": {"num_threads": 1}}


def _splits(ds: Path) -> list[tuple[str, str, dict]]:
    from .features import dataset_operator_classes
    from .prune import load_records

    recs = load_records(ds, ["record_id", "hardware", "task_id", "workload_key", "workload_name", "source_file"])
    out = [("within_task", "within-task", {})]
    ops = dataset_operator_classes(recs, ds)
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
    """Environment variables under which numpy, PyTorch and OpenBLAS compute the same bits on every x86-64 CPU
    (their baseline code paths; read at import, so they apply to a new process)."""
    env = {PORTABLE_FLAG: "1", "ATEN_CPU_CAPABILITY": "default"}
    targets = _numpy_dispatch_targets()
    if targets:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(targets)
    if platform.machine().lower() in ("x86_64", "amd64"):
        env.update(OPENBLAS_CORETYPE="Nehalem")  # MKL is kept out of the computation (mkl_free_numerics)
    return env


PRODUCT_CHUNK = 1 << 20  # elements of one broadcast product held at once (4 MB: it stays in cache)


def _rows_product(x, weight):
    """``x @ weight.T`` for x [n, k], weight [m, k]: ``(x[:, None, :] * weight).sum(-1)`` (the sum runs over the
    contiguous k), in blocks of rows so that the [rows, m, k] product stays about ``PRODUCT_CHUNK`` elements."""
    import torch

    rows = max(1, PRODUCT_CHUNK // max(1, weight.shape[0] * weight.shape[1]))
    if x.shape[0] <= rows:
        return (x.unsqueeze(-2) * weight).sum(-1)
    return torch.cat([(x[i:i + rows].unsqueeze(-2) * weight).sum(-1) for i in range(0, x.shape[0], rows)])


def _matmul(a, b):
    """``a @ b`` (2-D, or batched and broadcast) as a broadcast product summed over the shared dimension."""
    if a.dim() == 2 and b.dim() == 2:
        return _rows_product(a, b.t())
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)


def _linear(x, weight, bias=None):
    y = _rows_product(x.reshape(-1, x.shape[-1]), weight).reshape(*x.shape[:-1], weight.shape[0])
    return y if bias is None else y + bias


def _matmul_any(a, b):
    """``torch.matmul``'s rules for 1-D operands, over ``_matmul``."""
    if a.dim() == 1 and b.dim() == 1:
        return (a * b).sum()
    if a.dim() == 1:
        return _matmul(a.unsqueeze(0), b).squeeze(-2)
    if b.dim() == 1:
        return _matmul(a, b.unsqueeze(-1)).squeeze(-1)
    return _matmul(a, b)


def _addmm(input, m1, m2, *, beta=1, alpha=1):
    prod = _matmul(m1, m2)
    prod = prod if alpha == 1 else prod * alpha
    return prod if beta == 0 else (input if beta == 1 else input * beta) + prod


def _einsum(equation, *operands):
    """Two-operand ``torch.einsum`` without ellipsis or repeated indices of one operand (what the models use)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    ins, _, out = eq.partition("->")
    specs = ins.split(",")
    if len(specs) != len(operands) or "." in eq or not _ or any(len(set(x)) != len(x) for x in specs):
        raise NotImplementedError(f"mkl_free_numerics: einsum {equation!r} is not supported")
    letters = list(dict.fromkeys("".join(specs)))
    prod = None
    for spec, t in zip(specs, operands):
        t = t.permute([spec.index(c) for c in letters if c in spec])
        for i, c in enumerate(letters):
            if c not in spec:
                t = t.unsqueeze(i)
        prod = t if prod is None else prod * t
    summed = [i for i, c in enumerate(letters) if c not in out]
    if summed:
        prod = prod.sum(dim=summed)
    kept = [c for c in letters if c in out]
    return prod.permute([kept.index(c) for c in out])


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    import torch
    import torch.nn.functional as F

    if is_causal or enable_gqa:
        raise NotImplementedError("mkl_free_numerics: causal or grouped-query attention is not supported")
    scale = 1.0 / query.shape[-1] ** 0.5 if scale is None else scale
    z = (query.unsqueeze(-2) * key.unsqueeze(-3)).sum(-1) * scale
    if attn_mask is not None:
        z = z.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else z + attn_mask
    w = torch.softmax(z, dim=-1)
    if dropout_p > 0:
        w = F.dropout(w, dropout_p)
    return _matmul(w, value)


def _exp(x):
    """exp(x) as pow(e, x) in float64 (ATen's pow kernel, the C library's pow), rounded to x's dtype."""
    import torch

    return torch.pow(math.e, x.double()).to(x.dtype)


def _log(x):
    """log(x) as log1p(x - 1) in float64 (x - 1 is exact there for every float32 x below 2**29)."""
    return x.double().sub(1).log1p().to(x.dtype)


def _log2(x):
    return x.double().sub(1).log1p().div(math.log(2.0)).to(x.dtype)


def _sqrt(x):
    """sqrt(x) as 1 / rsqrt(x) in float64 (0 -> 1 / inf = 0, inf -> 1 / 0 = inf)."""
    return x.double().rsqrt().reciprocal().to(x.dtype)


MKL_FREE_UNARY = {"exp": _exp, "log": _log, "log2": _log2, "sqrt": _sqrt}
MKL_ONLY_UNARY = ("tanh", "erf", "erfc", "erfinv", "log10", "sin", "cos", "tan", "acos", "asin", "atan", "trunc")


def _foreach_inplace(f, xs) -> None:
    for x in xs:
        x.copy_(f(x))


def _unsupported(name):
    def f(*args, **kwargs):
        raise NotImplementedError(f"mkl_free_numerics: torch's {name} runs in MKL's vector maths, whose results "
                                  "depend on the CPU; give it an MKL-free form in tenset_curate/report.py first")
    return f


def _mkl_free_table() -> dict:
    """The torch functions ``mkl_free_numerics`` replaces: products and MKL's vector maths (``MKL_FREE_UNARY``: the
    function, the Tensor method, its in-place form and the ``_foreach`` forms Adam calls)."""
    import torch
    import torch.nn.functional as F

    T = torch.Tensor
    table = {F.linear: _linear, torch.matmul: _matmul_any, T.matmul: _matmul_any, T.__matmul__: _matmul_any,
             T.__rmatmul__: lambda a, b: _matmul_any(b, a), torch.mm: _matmul, T.mm: _matmul,
             torch.bmm: _matmul, T.bmm: _matmul, torch.addmm: _addmm, T.addmm: _addmm, torch.baddbmm: _addmm,
             T.baddbmm: _addmm, torch.einsum: _einsum, F.scaled_dot_product_attention: _sdpa}
    for name, f in MKL_FREE_UNARY.items():
        table[getattr(torch, name)] = table[getattr(T, name)] = f
        table[getattr(T, name + "_")] = lambda x, f=f: x.copy_(f(x))
        table[getattr(torch, f"_foreach_{name}")] = lambda xs, f=f: [f(x) for x in xs]
        table[getattr(torch, f"_foreach_{name}_")] = lambda xs, f=f: _foreach_inplace(f, xs)
    for name in MKL_ONLY_UNARY:
        for owner in (torch, T):
            for n in (name, name + "_"):
                if hasattr(owner, n):
                    table[getattr(owner, n)] = _unsupported(n)
    return table


@contextlib.contextmanager
def mkl_free_numerics():
    """Inside this context PyTorch computes without MKL: every matrix product it is asked for (``nn.Linear``,
    ``matmul``/``@``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``, two-operand ``einsum``,
    ``scaled_dot_product_attention``) is a broadcast product summed over the shared dimension in ATen's own
    elementwise and reduction kernels (their autograd too), and the functions ATen hands to MKL's vector maths
    (``MKL_FREE_UNARY``: exp, log, log2, sqrt, with their Tensor, in-place and ``_foreach`` forms) run in float64
    through ATen kernels that do not (pow, log1p, rsqrt); the other MKL vector functions raise
    ``NotImplementedError`` rather than run CPU-dependent code.

    Why: MKL picks its kernels, blocking and vector maths by CPU; even its ``MKL_CBWR=COMPATIBLE`` branch gave the
    TenSet MLP other bits on an Intel Xeon than on an AMD EPYC (module docstring), and on one CPU the sample's
    report changed with ``MKL_CBWR`` (AVX512 against COMPATIBLE). ATen's kernels under
    ``ATEN_CPU_CAPABILITY=default`` are one code path on every x86-64 CPU. The price is speed (products are not
    blocked: the report's MLP fits take about 15 times longer), fine for the embedded sample the report trains on.
    ``tests/test_report.py`` checks each replacement against torch's own function and that a fit inside this
    context gives the same bits under two MKL branches."""
    from torch.overrides import TorchFunctionMode

    table = _mkl_free_table()

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return table.get(func, func)(*args, **(kwargs or {}))

    with _Mode():
        yield


FIT_COST = {"mlp": 3, "attention": 2, "gbdt": 1}  # relative time of one fit on the sample: the long ones start first


def _report_fit(item):
    """One cell group of the report: train ``kind`` on the split's train part (full data, or only the records
    ``kept`` by pruning, test records always kept) and score the test part. Runs in the report's own process or in
    one of its pool processes (the same numbers either way: one thread, matrix products in ATen's own kernels)."""
    from .metrics import evaluate_predictions
    from .training import data_hash, fit_on_frame, labelled_split, part_arrays

    i, ds, name, data, kind, kept, epochs, seed = item
    df = labelled_split(Path(ds), name)
    d_test = part_arrays(df, "test")
    frame = df if kept is None else df.filter((pl.col("part") == "test") | pl.col("record_id").is_in(kept))
    with mkl_free_numerics():
        m, _ = fit_on_frame(frame, kind, seed=seed, epochs=epochs, data_manifest_hash=data_hash(Path(ds), name),
                            **HP[kind])
        r = evaluate_predictions(d_test["task_ids"], d_test["labels"], m.predict(d_test))
    return i, (name, kind, data, r["pca"], r["top1"], r["top5"]), \
        ((m.hparams["lambdarank_weight"], m.hparams["positions"]) if kind == "attention" else None)


@names_damaged_shard()
def pca_report(dataset: Path, out: Path, epochs: int = 24, ratio: float = 0.45, seed: int = 0,
               command: str | None = None, workers: int = 2) -> Path:
    """Train the three models on full and pruned data of each split and write the Markdown table to ``out``; runs in
    a fresh process under ``portable_numerics_env`` unless this process already is one (module docstring). The fits
    are independent and run on ``workers`` processes; the report does not depend on how many. ``dataset``: a
    dataset, or logs (converted first). Returns ``out``. Bad arguments are refused before anything runs, and an
    error in the fresh process is raised here as its own type (ValueError, FileNotFoundError, ...)."""
    from .prune import check_prune_args

    check_prune_args(ratio, "hybrid", seed)
    from .storage import check_int

    check_int("epochs", epochs, 1)
    check_int("workers", workers, 1)
    if not Path(dataset).exists():
        raise FileNotFoundError(f"{dataset}: no such dataset or logs")
    if not isinstance(out, (str, os.PathLike)) or not str(out):  # None wrote the report to a file named None
        raise TypeError(f"out {out!r}: the path of the report's Markdown file")
    if Path(out).is_dir():  # found only when the report was written, after every model had trained
        raise ValueError(f"out {out}: a folder; the report is a Markdown file (e.g. {Path(out) / 'pca.md'})")
    if os.environ.get(PORTABLE_FLAG) != "1":
        return _in_portable_process(dataset, out, epochs, ratio, seed, command, workers)
    from .metrics import random_topk_expectation
    from .prune import prune
    from .splits import write_split
    from .storage import atomic_write_text
    from .executors import map_unordered
    from .training import labelled_split, part_arrays

    dataset, out = Path(dataset), Path(out)
    work = Path(tempfile.mkdtemp(prefix="tc-pca-"))
    try:
        ds = work / "ds"
        if (dataset / "manifest.json").exists() and (dataset / "records").exists():
            from .prune import record_files
            from .storage import damaged_inside, unreadable_shard

            record_files(dataset)  # an incomplete dataset or a shard cut short, named in the user's dataset
            # and one damaged inside (else named in the copy, which is gone): a read of every shard, as the copy
            # below reads every byte anyway
            bad = unreadable_shard(dataset)
            if bad:
                raise damaged_inside(*bad)
            shutil.copytree(dataset, ds, ignore=shutil.ignore_patterns("catalog.duckdb", ".lock"))
        else:
            from .convert import convert

            conv = convert([dataset], ds)
            if not conv["totals"]["rows"]:  # else prune named the temporary folder: "run curate convert ... --out /tmp/.."
                raise ValueError(f"{dataset}: no measurement record in it ({conv['totals']['quarantined']} line(s) "
                                 "quarantined); give a dataset, or Ansor/TenSet logs or a MetaSchedule database")
        pruned = work / "pruned"
        pruning = prune(ds, pruned, ratio, "hybrid", seed, report=False)
        from .prune import load_records

        kept = sorted(load_records(pruned, ["record_id"])["record_id"].to_list())
        rows, fits, made = [], [], []
        for name, scheme, kw in _splits(ds):
            try:
                info = write_split(ds, name, scheme, seed=seed, **kw)
            except ValueError as e:
                rows.append((name, "skipped", str(e), None, None, None))
                continue
            made.append(_split_words(name, info))
            df = labelled_split(ds, name)
            if not (df["part"] == "test").any():
                made[-1] += " (no valid test records: not scored)"
                continue
            d_test = part_arrays(df, "test")
            rows.append((name, "random", "", 0.5, random_topk_expectation(d_test["task_ids"], d_test["labels"], 1),
                         random_topk_expectation(d_test["task_ids"], d_test["labels"], 5)))
            for data in ("full", "pruned"):
                for kind in MODELS:
                    rows.append(None)  # filled in by the fit below, in this order
                    fits.append((len(rows) - 1, str(ds), name, data, kind, kept if data == "pruned" else None,
                                 epochs, seed))
        attention_hp = {}
        for i, row, hp in map_unordered(_report_fit, fits, workers=workers, cost=lambda f: FIT_COST[f[4]]):
            rows[i] = row
            if hp is not None:
                attention_hp[row[0]] = hp
        attention_hp = {name: attention_hp[name] for name, *_ in rows if name in attention_hp}  # in the table's order
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cmd = command or f"curate report pca --dataset {dataset} --out {out} --epochs {epochs}"
    lines = ["# PCA report", "", f"Reproduce: `{cmd}`", "",
             f"Dataset: `{dataset}`; models trained on the train part of each split, full data and after hybrid "
             f"pruning of the dataset at ratio {ratio} (test records are always kept for scoring), scored on the same "
             "test records with TenSet's "
             "metrics (tenset_curate/metrics.py). Seed 0, one thread, metrics rounded to 3 decimals.", "",
             f"Pruning kept {pruning['records_after']} of {pruning['records_before']} records (removed "
             f"{pruning['ratio_achieved']:.1%}). Splits: " + "; ".join(made) + ".", "",
             "| split | model | data | PCA | top-1 | top-5 |", "|---|---|---|---:|---:|---:|"]
    for name, kind, data, pca, t1, t5 in rows:
        if pca is None:
            lines.append(f"| {name} | - | - | skipped: {data} | | |")
        else:
            lines.append(f"| {name} | {kind} | {data or '-'} | {pca:.3f} | {t1:.3f} | {t5:.3f} |")
    if attention_hp:
        lines += ["", "The attention model's LambdaRank weight follows the split (`training.lambdarank_weight_for`: 0.25 "
                  "when most test records are of tasks that train, else 0.05): "
                  + ", ".join(f"{n} {w:g}" for n, (w, _) in attention_hp.items()) + "."]
        kind_pos = [n for n, (_, pos) in attention_hp.items() if pos == "kind"]
        if kind_pos:
            lines += ["", "Its positions follow the split too (`training.positions_for`: each step numbered by its "
                      "primitive where most test records are of operator classes that do not train, else absolute): "
                      "by primitive on " + ", ".join(kind_pos) + "."]
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "\n".join(lines) + "\n")
    return out


def _split_words(name: str, info: dict) -> str:
    """What a split held out and its parts' record counts, as the report says them."""
    held = ""
    if info.get("holdout"):
        held = f", {', '.join(map(str, info['holdout']))} held out"
    elif info.get("test_hw"):
        held = f", {', '.join(info['train_hw'])} -> {', '.join(info['test_hw'])}"
    counts = ", ".join(f"{k} {v}" for k, v in info.get("counts", {}).items())
    return f"{name} ({info.get('scheme', '?')}{held}: {counts} records)"


def _in_portable_process(dataset, out, epochs, ratio, seed, command, workers) -> Path:
    """``pca_report`` run again by ``python -m tenset_curate.report`` under ``portable_numerics_env``."""
    args = [sys.executable, "-m", "tenset_curate.report", "--dataset", str(dataset), "--out", str(out),
            "--epochs", str(epochs), "--ratio", str(ratio), "--seed", str(seed), "--workers", str(workers)]
    if command is not None:
        args += ["--command", command]
    r = subprocess.run(args, env={**os.environ, **portable_numerics_env()}, capture_output=True, text=True)
    *_, last = r.stderr.rstrip("\n").rpartition("\n")
    if r.returncode != 0 and last.startswith(ERROR_MARK):  # an error main() named: raised here as its own type
        err = json.loads(last[len(ERROR_MARK):])
        raise _ERRORS().get(err["type"], RuntimeError)(err["message"])
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
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    try:
        pca_report(Path(a.dataset), Path(a.out), a.epochs, a.ratio, a.seed, a.command, a.workers)
    except tuple(_ERRORS().values()) as e:
        print(ERROR_MARK + json.dumps({"type": type(e).__name__, "message": str(e)}), file=sys.stderr)
        sys.exit(2)


ERROR_MARK = "tenset-curate-error: "  # main()'s last stderr line for an error pca_report raises as its own type


def _ERRORS() -> dict:
    """The errors a caller of ``pca_report`` tells apart, by name (the ones the CLI turns into clean messages)."""
    from .readers import InputError
    from .storage import DamagedShard, IncompleteDataset, OutputError

    return {c.__name__: c for c in (ValueError, FileNotFoundError, InputError, OutputError, MemoryError,
                                    IncompleteDataset, DamagedShard)}


if __name__ == "__main__":
    main()
