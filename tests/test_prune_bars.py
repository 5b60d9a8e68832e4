"""The curation issue's bars as the prune benchmark computes them (evaluate_prune.against_bars)."""
import pytest

from tenset_curate.evaluate_prune import against_bars, bars_markdown


def _rows(full, hyb45, hyb70, rnd70):
    rows = []
    for s in range(3):
        rows.append({"method": "full", "ratio": 0.0, "seed": s, "pca": full[s], "top1": 0.9})
        rows.append({"method": "hybrid", "ratio": 0.45, "seed": s, "pca": hyb45[s], "top1": 0.9})
        rows.append({"method": "hybrid", "ratio": 0.7, "seed": s, "pca": hyb70[s], "top1": 0.9})
        rows.append({"method": "random", "ratio": 0.7, "seed": s, "pca": rnd70[s], "top1": 0.9})
    return rows


def test_bars_pair_by_seed_and_apply_the_thresholds():
    # seed-to-seed swings of 0.02 (the test split), the method 0.004-0.006 above random on every seed
    r = against_bars(_rows([0.70, 0.72, 0.74], [0.698, 0.718, 0.738], [0.695, 0.716, 0.734],
                           [0.690, 0.711, 0.728]))
    h45, h70 = r
    assert h45["pca_vs_full"] == pytest.approx(-0.002) and h45["met"]
    assert h70["pca_vs_random"] == pytest.approx(0.0053333, abs=1e-6)
    assert h70["pca_paired_sd"] == pytest.approx(0.0005774, abs=1e-6)
    assert h70["pca_margin_sd"] > 2 and h70["pca_margin_own_sd"] < 1  # paired: clear; against raw seed sd: not
    assert h70["met"]
    # 0.45 losing 0.4 points fails; 0.7 with a margin inside the paired noise fails
    h45, h70 = against_bars(_rows([0.70, 0.72, 0.74], [0.696, 0.716, 0.736], [0.695, 0.716, 0.734],
                                  [0.699, 0.708, 0.732]))
    assert not h45["met"] and not h70["met"]
    assert any("not met" in line for line in bars_markdown(_rows([0.7] * 3, [0.69] * 3, [0.7] * 3, [0.7] * 3)))


def test_one_seed_leaves_the_margin_over_random_undecided():
    """With one seed the paired sd was 0 and any margin over random, however small, counted as infinitely many sds
    (bar met). Now the sd and the margin are None and the 0.7 bar is undecided, unless the loss against full data
    already fails it."""
    rows = [r for r in _rows([0.70] * 3, [0.699] * 3, [0.695] * 3, [0.6949] * 3) if r["seed"] == 0]
    h45, h70 = against_bars(rows)
    assert h45["met"] and h70["pca_vs_random"] == pytest.approx(0.0001)
    assert h70["pca_paired_sd"] is None and h70["pca_margin_sd"] is None and h70["met"] is None
    assert any("undecided (one seed)" in line and "one seed: no sd" in line for line in bars_markdown(rows))
    lost = [r for r in _rows([0.70] * 3, [0.699] * 3, [0.68] * 3, [0.6] * 3) if r["seed"] == 0]
    assert against_bars(lost)[1]["met"] is False  # 2 PCA points lost: fails whatever the margin
