"""CI regenerates reports/pca.md from the embedded sample and fails when the committed one no longer matches."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not (REPO / "reports" / "pca.md").exists(), reason="reports/pca.md not generated yet")
def test_pca_report_is_reproducible(tmp_path):
    from tenset_curate.report import pca_report

    committed = (REPO / "reports" / "pca.md").read_text()
    cmd_line = [x for x in committed.splitlines() if x.startswith("Reproduce:")][0]
    epochs = int(cmd_line.split("--epochs")[1].strip(" `")) if "--epochs" in cmd_line else 8
    out = pca_report(REPO / "data" / "sample-cpu", tmp_path / "pca.md", epochs=epochs,
                     command=cmd_line.split("`")[1])
    fresh = out.read_text().replace(str(REPO) + "/", "")
    assert fresh == committed, "reports/pca.md is stale: rerun `curate report pca` and commit it"
