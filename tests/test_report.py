"""CI regenerates reports/pca.md from the embedded sample and fails when the committed one no longer matches, on any
x86-64 CPU: the report trains under portable numerics (report.portable_numerics_env, report.mkl_free_numerics)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "reports" / "pca.md"


def _regenerate(tmp_path: Path) -> str:
    from tenset_curate.report import pca_report

    committed = COMMITTED.read_text()
    cmd_line = [x for x in committed.splitlines() if x.startswith("Reproduce:")][0]
    epochs = int(cmd_line.split("--epochs")[1].strip(" `")) if "--epochs" in cmd_line else 8
    out = pca_report(REPO / "data" / "sample-cpu", tmp_path / "pca.md", epochs=epochs,
                     command=cmd_line.split("`")[1])
    return out.read_text().replace(str(REPO) + "/", "")


@pytest.mark.skipif(not COMMITTED.exists(), reason="reports/pca.md not generated yet")
def test_pca_report_is_reproducible_whatever_simd_code_the_cpu_gets(tmp_path, monkeypatch):
    """Regenerated from an environment that asks every library for the wide SIMD code a CPU may get: torch's AVX2
    kernels and numpy's AVX2 loops (they moved the sample's MLP and attention rows by up to 0.08 before the report
    ran in its portable-numerics process) and MKL's best branch for this CPU (``MKL_CBWR=AUTO``: on an Intel Xeon,
    the AVX-512 branch gave other MLP rows than the COMPATIBLE branch, which itself differed between Intel and AMD,
    until the report's models ran inside ``mkl_free_numerics``)."""
    from tenset_curate.report import _numpy_dispatch_targets

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    wide = [t for t in _numpy_dispatch_targets() if t not in ("X86_V3", "AVX2", "FMA3", "F16C", "AVX")]
    if wide:
        monkeypatch.setenv("NPY_DISABLE_CPU_FEATURES", " ".join(wide))
    assert _regenerate(tmp_path) == COMMITTED.read_text(), \
        "reports/pca.md is stale: rerun `curate report pca` and commit it"


def test_pca_report_refuses_bad_arguments_at_once_and_raises_its_process_errors_as_themselves(tmp_path):
    """Found by the Python API audit (session 29): every failure was RuntimeError("... portable-numerics process
    (exit 1)" + the child's traceback), and epochs=0 was refused after copying, pruning and splitting."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app
    from tenset_curate.readers import InputError
    from tenset_curate.report import pca_report

    for kw, err, match in (({"dataset": tmp_path / "nope"}, FileNotFoundError, "nope: no such dataset or logs"),
                           ({"epochs": 0}, ValueError, "epochs 0: an integer, at least 1"),
                           ({"ratio": 1.5}, ValueError, "ratio 1.5: the fraction removed"),
                           # the session-35 audit: None wrote the report to ./None after every fit, and a folder
                           # was found only when the report was written
                           ({"out": None}, TypeError, "out None: the path of the report's Markdown file"),
                           ({"out": tmp_path}, ValueError, "a folder; the report is a Markdown file")):
        with pytest.raises(err, match=match):
            pca_report(**{"dataset": REPO / "data" / "sample-cpu", "out": tmp_path / "r.md", **kw})
    assert not Path("None").exists() and sorted(p.name for p in tmp_path.iterdir()) == []
    (tmp_path / "empty").mkdir()  # no logs in it: refused by convert, inside the fresh process
    with pytest.raises(InputError, match="no logs found in"):
        pca_report(tmp_path / "empty", tmp_path / "r.md")
    (tmp_path / "notes.json").write_text('{"a": 1}\n')  # a file of no record: named, not the temporary dataset
    with pytest.raises(ValueError, match=r"notes.json: no measurement record in it \(1 line\(s\) quarantined\)"):
        pca_report(tmp_path / "notes.json", tmp_path / "r.md")
    r = CliRunner().invoke(app, ["report", "pca", "--dataset", str(tmp_path / "empty"), "--out",
                                 str(tmp_path / "r.md")])
    assert r.exit_code == 2 and "error: no logs found in" in r.output and isinstance(r.exception, SystemExit)
    assert not (tmp_path / "r.md").exists()
    # the dataset first, as every other command takes it (it was "Got unexpected extra argument(s)")
    r = CliRunner().invoke(app, ["report", "pca", str(tmp_path / "empty"), "--out", str(tmp_path / "r.md")])
    assert r.exit_code == 2 and "error: no logs found in" in r.output, r.output
    r = CliRunner().invoke(app, ["report", "pca", str(tmp_path / "empty"), "--dataset", str(tmp_path / "x")])
    assert r.exit_code == 2 and "the dataset is given twice" in r.output, r.output


def test_mkl_free_numerics_computes_what_torch_computes():
    """Each replacement agrees with torch's own function, values and gradients, in the shapes the models use (the
    row-blocked product included), and the MKL vector functions without an MKL-free form refuse to run."""
    import torch
    import torch.nn.functional as F

    from tenset_curate.report import PRODUCT_CHUNK, mkl_free_numerics

    g = torch.Generator().manual_seed(0)

    def rand(*shape, positive=False):
        x = torch.rand(*shape, generator=g, dtype=torch.float32) * 4
        return (x + 0.05 if positive else x - 2).requires_grad_()

    big = PRODUCT_CHUNK // (64 * 32) * 3 + 7  # rows of a linear layer's input: several blocks and a partial one
    cases = {
        "linear": (lambda x, w, b: F.linear(x, w, b), [rand(5, big, 32), rand(64, 32), rand(64)]),
        "linear_nobias": (lambda x, w: F.linear(x, w), [rand(9, 32), rand(16, 32)]),
        "matmul_1d_2d": (lambda a, b: a @ b, [rand(7), rand(7, 3)]),
        "matmul_2d_1d": (lambda a, b: torch.matmul(a, b), [rand(4, 7), rand(7)]),
        "matmul_batched": (lambda a, b: a.matmul(b), [rand(2, 3, 4, 5), rand(3, 5, 6)]),
        "mm": (torch.mm, [rand(6, 5), rand(5, 4)]),
        "bmm": (torch.bmm, [rand(3, 6, 5), rand(3, 5, 4)]),
        "addmm": (lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=2.0), [rand(6, 4), rand(6, 5), rand(5, 4)]),
        "baddbmm": (lambda i, a, b: torch.baddbmm(i, a, b, alpha=0.25), [rand(3, 1, 4), rand(3, 6, 5), rand(3, 5, 4)]),
        "einsum": (lambda m, x: torch.einsum("nl,nld->nd", m, x), [rand(4, 6), rand(4, 6, 3)]),
        "sdpa_bool": (lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=torch.tensor([True, True, False, True, False])[None, None, None, :]),
            [rand(2, 2, 5, 4), rand(2, 2, 5, 4), rand(2, 2, 5, 4)]),
        "sdpa_float": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.full((5, 5), 0.3)),
                       [rand(2, 5, 4), rand(2, 5, 4), rand(2, 5, 4)]),
        "exp": (torch.exp, [rand(50)]),
        "exp_method": (lambda x: (x * 3).exp(), [rand(50)]),
        "log": (torch.log, [rand(50, positive=True)]),
        "log2": (lambda x: torch.log2(1.0 + x), [rand(50, positive=True)]),
        "sqrt": (lambda x: x.sqrt(), [rand(50, positive=True)]),
    }
    for name, (f, args) in cases.items():
        want = f(*args)
        gw = torch.autograd.grad(want.sum(), args)
        with mkl_free_numerics():
            got = f(*args)
            gg = torch.autograd.grad(got.sum(), args)
        assert got.shape == want.shape and got.dtype == want.dtype, name
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)
        for a, b in zip(gg, gw):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=f"{name} gradient")
    with torch.no_grad():  # the in-place and _foreach forms (Adam's sqrt)
        xs = [rand(10, positive=True).detach() for _ in range(2)]
        want = [x.sqrt() for x in xs]
        with mkl_free_numerics():
            roots = torch._foreach_sqrt(xs)
            inplace = [x.clone() for x in xs]
            torch._foreach_sqrt_(inplace)
            y = xs[0].clone().exp_()
        for r, w, i in zip(roots, want, inplace):
            torch.testing.assert_close(r, w)
            torch.testing.assert_close(i, w)
        torch.testing.assert_close(y, xs[0].exp())
        assert torch.equal(torch.tensor([0.0, float("inf")]).sqrt(), torch.tensor([0.0, float("inf")]))
        with mkl_free_numerics():
            assert torch.equal(torch.tensor([0.0, float("inf")]).sqrt(), torch.tensor([0.0, float("inf")]))
            with pytest.raises(NotImplementedError, match="tanh"):
                torch.tanh(xs[0])


_FIT = r"""
import hashlib, json, sys, tempfile
from pathlib import Path
import torch
from tenset_curate.convert import convert
from tenset_curate.report import HP, mkl_free_numerics
from tenset_curate.splits import write_split
from tenset_curate.training import fit_on_frame, labelled_split, part_arrays
ds = Path(tempfile.mkdtemp()) / "ds"
convert([Path(sys.argv[1])], ds)
write_split(ds, "w", "within-task", seed=0)
df = labelled_split(ds, "w")
test = part_arrays(df, "test")
out = {}
with mkl_free_numerics():
    for kind in ("mlp", "attention"):
        m, _ = fit_on_frame(df, kind, seed=0, epochs=2, **HP[kind])
        out[kind] = hashlib.sha256(m.predict(test).tobytes()).hexdigest()
g = torch.Generator().manual_seed(0)
x, w = torch.rand(512, 256, generator=g), torch.rand(256, 256, generator=g)
control = [torch.exp(x), torch.sqrt(x), torch.log2(x + 1), x @ w]  # what MKL computes outside the context
out["control"] = hashlib.sha256(b"".join(t.numpy().tobytes() for t in control)).hexdigest()
print(json.dumps(out))
"""


def test_a_fit_inside_mkl_free_numerics_does_not_depend_on_mkls_branch():
    """The same MLP and attention fits (two epochs on the sample) in two processes, one on MKL's COMPATIBLE branch
    and one on its best branch for this CPU, give the same predictions bit for bit: nothing inside the context ran
    in MKL. The control (exp, sqrt, log2 and a product outside the context) shows the two branches differ here."""
    from tenset_curate.report import portable_numerics_env

    runs = {}
    for branch in ("COMPATIBLE", "AUTO"):
        env = {**os.environ, **portable_numerics_env(), "MKL_CBWR": branch}
        r = subprocess.run([sys.executable, "-c", _FIT, str(REPO / "data" / "sample-cpu")], env=env,
                           capture_output=True, text=True, check=True)
        runs[branch] = json.loads(r.stdout.strip().splitlines()[-1])
    if runs["COMPATIBLE"]["control"] == runs["AUTO"]["control"]:
        pytest.skip("MKL's COMPATIBLE and AUTO branches compute the same bits on this CPU: nothing to tell apart")
    assert runs["COMPATIBLE"]["mlp"] == runs["AUTO"]["mlp"]
    assert runs["COMPATIBLE"]["attention"] == runs["AUTO"]["attention"]
