"""Pruning keeps the same records on every CPU: OpenBLAS picks its matrix kernels by CPU (AVX, AVX2, AVX-512), and
before prune's k-means worked on a grid of exact integers (prune._kmeans_pick) the three kernels made three different
kept sets of the embedded sample at ratio 0.45, so reports/pca.md regenerated on another machine no longer matched
the committed one. Each run here is a fresh process with ``OPENBLAS_CORETYPE`` forcing one kernel."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

# OpenBLAS kernel -> the CPU flag it needs
KERNELS = {"Sandybridge": "avx", "Haswell": "avx2", "SkylakeX": "avx512f"}

SCRIPT = """
import hashlib, sys
from pathlib import Path
from tenset_curate.convert import convert
from tenset_curate.prune import load_records, prune
w = Path(sys.argv[1])
convert([sys.argv[2]], w / "ds")
prune(w / "ds", w / "pruned", 0.45, "hybrid", 0, report=False)
ids = sorted(load_records(w / "pruned", ["record_id"])["record_id"].to_list())
print(len(ids), hashlib.sha256("\\n".join(ids).encode()).hexdigest())
"""


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}


def _openblas_dynamic() -> bool:
    cfg = np.show_config(mode="dicts") if "mode" in np.show_config.__code__.co_varnames else {}
    blas = cfg.get("Build Dependencies", {}).get("blas", {})
    config = str(blas.get("openblas configuration", ""))
    return "openblas" in str(blas.get("name", "")).lower() and "DYNAMIC_ARCH" in config


def test_hybrid_prune_keeps_the_same_records_whatever_blas_kernel_the_cpu_gets(tmp_path):
    if not _openblas_dynamic():
        pytest.skip("numpy is not linked to a DYNAMIC_ARCH OpenBLAS: its kernel cannot be forced")
    flags = _cpu_flags()
    kernels = [k for k, flag in KERNELS.items() if flag in flags]
    if len(kernels) < 2:
        pytest.skip(f"this CPU runs fewer than two of OpenBLAS's x86 kernels ({kernels})")
    out = {}
    for k in kernels:
        env = dict(os.environ, OPENBLAS_CORETYPE=k, OPENBLAS_VERBOSE="2")
        r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / k), str(REPO / "data" / "sample-cpu")],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"Core: {k}" in r.stdout + r.stderr, f"OpenBLAS did not take kernel {k}: {r.stdout[-500:]}"
        out[k] = r.stdout.strip().splitlines()[-1]
    n_kept = {v.split()[0] for v in out.values()}
    assert len(n_kept) == 1 and int(n_kept.pop()) > 0
    assert len(set(out.values())) == 1, out
