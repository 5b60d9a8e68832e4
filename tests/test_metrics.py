"""TenSet metrics (tenset_curate/metrics.py): hand-computed cases and properties."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenset_curate.metrics import (
    evaluate_predictions,
    pairwise_accuracy,
    pairwise_accuracy_reference,
    peak_score,
    random_topk_expectation,
    random_topk_per_task,
    topk_score,
)


def _tenset_pca(preds, labels):
    """TenSet's metric_pairwise_comp_accuracy, as a matrix expression (metric.py)."""
    n = len(preds)
    if n <= 1:
        return 0.5
    p = (np.reshape(preds, (-1, 1)) - preds) > 0
    l_ = (np.reshape(labels, (-1, 1)) - labels) > 0
    return np.triu(p == l_, k=1).sum() / (n * (n - 1) / 2)


# ------------------------------------------------------------------------------------------
# pairwise comparison accuracy
# ------------------------------------------------------------------------------------------
def test_pca_hand_computed_without_ties():
    labels = np.array([0.1, 0.4, 0.2, 1.0])
    preds = np.array([1.0, 3.0, 4.0, 5.0])
    # pairs (i<j): (0,1) ok, (0,2) ok, (0,3) ok, (1,2) label 0.4>0.2 but pred 3<4 wrong, (1,3) ok, (2,3) ok
    assert pairwise_accuracy(preds, labels) == pytest.approx(5 / 6)
    assert pairwise_accuracy(preds, labels, "sign") == pytest.approx(5 / 6)


def test_pca_ties_follow_tenset():
    # TenSet: pair i<j correct iff [p_i > p_j] == [l_i > l_j]; '<' and '==' share a bucket.
    # label tie: correct iff p_i <= p_j -> depends on record order
    assert pairwise_accuracy([1.0, 2.0], [0.5, 0.5]) == 1.0
    assert pairwise_accuracy([2.0, 1.0], [0.5, 0.5]) == 0.0
    # prediction tie: correct iff l_i <= l_j
    assert pairwise_accuracy([3.0, 3.0], [0.2, 0.9]) == 1.0
    assert pairwise_accuracy([3.0, 3.0], [0.9, 0.2]) == 0.0
    # both tied: correct
    assert pairwise_accuracy([3.0, 3.0], [0.5, 0.5]) == 1.0
    # mixed: preds [2,1,1], labels [1,1,3]: (0,1) T vs F wrong, (0,2) T vs F wrong, (1,2) F vs F ok
    assert pairwise_accuracy([2.0, 1.0, 1.0], [1.0, 1.0, 3.0]) == pytest.approx(1 / 3)
    # the symmetric sign variant: a tie is correct only when both are tied
    assert pairwise_accuracy([2.0, 1.0, 1.0], [1.0, 1.0, 3.0], "sign") == 0.0
    assert pairwise_accuracy([1.0, 2.0], [0.5, 0.5], "sign") == 0.0
    assert pairwise_accuracy([3.0, 3.0], [0.5, 0.5], "sign") == 1.0


def test_pca_single_record_task_is_half_and_bad_mode_refused():
    assert pairwise_accuracy([0.3], [1.0]) == 0.5
    assert pairwise_accuracy([], []) == 0.5
    with pytest.raises(ValueError):
        pairwise_accuracy([1.0, 2.0], [1.0, 2.0], tie_mode="kendall")


def test_pca_blocked_matches_tenset_on_large_task_with_ties():
    rng = np.random.default_rng(3)
    n = 2500  # several row blocks
    preds = rng.integers(0, 40, n).astype(float)
    labels = rng.integers(0, 30, n) / 30.0
    assert pairwise_accuracy(preds, labels) == pytest.approx(_tenset_pca(preds, labels), abs=1e-12)


# ------------------------------------------------------------------------------------------
# top-k and TenSet peak score
# ------------------------------------------------------------------------------------------
def test_topk_hand_computed_and_normalised():
    labels = np.array([0.2, 1.0, 0.5, 0.4])
    preds = np.array([0.9, 0.1, 0.8, 0.3])  # ranking by pred: 0, 2, 3, 1
    assert topk_score(preds, labels, 1) == pytest.approx(0.2)
    assert topk_score(preds, labels, 2) == pytest.approx(0.5)
    assert topk_score(preds, labels, 4) == pytest.approx(1.0)
    assert topk_score(preds, labels, 5) == pytest.approx(1.0)  # fewer than k records: all picked
    # normalised by the best label present, not by 1
    assert topk_score([0.0, 0.0, 1.0], [0.1, 0.5, 0.25], 1) == pytest.approx(0.5)
    # TenSet average peak score@k: mean of the best-so-far curve over the first k picks
    assert peak_score(preds, labels, 4) == pytest.approx((0.2 + 0.5 + 0.5 + 1.0) / 4)
    assert peak_score(preds, labels, 1) == topk_score(preds, labels, 1)
    # tied predictions: the later record is picked first (TenSet argsort(...)[::-1], stable)
    assert topk_score([1.0, 1.0], [0.3, 0.6], 1) == pytest.approx(1.0)


def test_evaluate_weights_by_records_and_groups():
    # task 7: one record (pca 0.5, top-k 1); task 3: 4 records with pca 5/6
    task_ids = np.array([3, 7, 3, 3, 3])
    labels = np.array([0.1, 1.0, 0.4, 0.2, 1.0])
    preds = np.array([1.0, 9.0, 3.0, 4.0, 5.0])
    hw = np.array(["k80", "t4", "k80", "k80", "k80"])
    r = evaluate_predictions(task_ids, labels, preds, groups={"hardware": hw})
    assert r["n_tasks"] == 2 and r["n_records"] == 5
    assert r["pca"] == pytest.approx((4 * 5 / 6 + 1 * 0.5) / 5)
    # task 3: top-1 pick is record with pred 5 -> label 1.0
    assert r["top1"] == pytest.approx(1.0) and r["top5"] == pytest.approx(1.0)
    assert r["by_hardware"]["k80"]["pca"] == pytest.approx(5 / 6)
    assert r["by_hardware"]["k80"]["n_records"] == 4
    assert r["by_hardware"]["t4"] == {"pca": 0.5, "top1": 1.0, "top5": 1.0, "peak5": 1.0,
                                      "n_tasks": 1, "n_records": 1}
    pt = r["per_task"]
    assert list(pt["task_id"]) == [3, 7] and list(pt["n_records"]) == [4, 1]
    assert pt["pca"][0] == pytest.approx(5 / 6) and pt["pca"][1] == 0.5
    assert list(pt["hardware"]) == ["k80", "t4"]


def test_evaluate_top1_weighted():
    task_ids = np.array([0, 0, 1, 1, 1])
    labels = np.array([1.0, 0.5, 0.2, 1.0, 0.5])
    preds = np.array([0.0, 1.0, 1.0, 0.0, 0.5])  # task 0 picks 0.5; task 1 picks 0.2
    r = evaluate_predictions(task_ids, labels, preds)
    assert r["top1"] == pytest.approx((2 * 0.5 + 3 * 0.2) / 5)
    assert r["top5"] == pytest.approx(1.0)


def test_evaluate_skips_invalid_records_and_checks_inputs():
    task_ids = np.array([0, 0, 0, 0])
    labels = np.array([0.5, 0.0, np.nan, 1.0])  # label 0 / NaN = failed measurement
    preds = np.array([0.0, 5.0, 5.0, 1.0])
    r = evaluate_predictions(task_ids, labels, preds)
    assert r["n_records"] == 2 and r["pca"] == 1.0 and r["top1"] == 1.0
    r = evaluate_predictions(task_ids, labels, preds, valid=np.array([True, True, True, False]))
    assert r["n_records"] == 1 and r["pca"] == 0.5
    with pytest.raises(ValueError, match="not constant"):
        evaluate_predictions(task_ids, labels, preds, groups={"hw": np.array(["a", "a", "a", "b"])})
    with pytest.raises(ValueError, match="finite"):
        evaluate_predictions(task_ids, labels, np.array([np.nan, 0, 0, 1.0]))
    with pytest.raises(ValueError):
        evaluate_predictions(task_ids, labels, preds[:3])


def test_include_failed_scores_failed_records_as_the_worst_and_skips_unmeasured_tasks():
    """The issue: failed records are excluded from metrics "unless asked for" (found missing by the session-30
    audit; TenSet keeps them in its test sets with a near-zero label)."""
    task_ids = np.array([0, 0, 0, 0, 1, 1])
    labels = np.array([0.5, 0.0, np.nan, 1.0, 0.0, 0.0])  # task 1: every measurement failed
    preds = np.array([0.0, 5.0, 5.0, 1.0, 1.0, 2.0])
    r = evaluate_predictions(task_ids, labels, preds, include_failed=True)
    # records 0, 1, 3 of task 0 (NaN is no label at all); the failing program is ranked first: top-1 0; pairs
    # (0,1) wrong, (0,3) right, (1,3) wrong
    assert (r["n_tasks"], r["n_records"], r["top1"], r["top5"]) == (1, 3, 0.0, 1.0)
    assert r["pca"] == pytest.approx(1 / 3)
    assert r["pca"] == _tenset_pca(preds[[0, 1, 3]], labels[[0, 1, 3]])
    default = evaluate_predictions(task_ids, labels, preds)
    assert (default["n_records"], default["pca"], default["top1"]) == (2, 1.0, 1.0)
    r = evaluate_predictions(task_ids, labels, preds, include_failed=True, valid=np.array([1, 0, 1, 1, 1, 1]) > 0)
    assert (r["n_records"], r["pca"]) == (2, 1.0)


# ------------------------------------------------------------------------------------------
# random baseline (exact expectation)
# ------------------------------------------------------------------------------------------
def test_random_topk_expectation_hand_computed():
    labels = np.array([1.0, 0.5, 0.25])
    tids = np.zeros(3, dtype=np.int64)
    assert random_topk_expectation(tids, labels, 1) == pytest.approx(1.75 / 3)
    # subsets of 2: {1,.5}->1, {1,.25}->1, {.5,.25}->.5
    assert random_topk_expectation(tids, labels, 2) == pytest.approx(2.5 / 3)
    assert random_topk_expectation(tids, labels, 5) == pytest.approx(1.0)
    # weighting by records: add a 1-record task (always 1)
    tids2 = np.array([0, 0, 0, 1])
    labels2 = np.array([1.0, 0.5, 0.25, 0.3])
    assert random_topk_expectation(tids2, labels2, 1) == pytest.approx((3 * 1.75 / 3 + 1.0) / 4)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_random_expectation_equals_average_over_all_orders(k):
    rng = np.random.default_rng(k)
    tids = np.array([0] * 5 + [1] * 3)
    labels = np.round(rng.uniform(0.05, 1.0, 8), 2)
    labels[6] = labels[5]  # a label tie
    # exact: average the realised score over every possible ranking (= every permutation of preds)
    per_task = []
    for t in (0, 1):
        lt = labels[tids == t]
        for kind, fn in (("top", topk_score), ("peak", peak_score)):
            vals = [fn(np.array(p, dtype=float), lt, k) for p in itertools.permutations(range(lt.size))]
            _, _, e = random_topk_per_task(np.zeros(lt.size), lt, k, kind=kind)
            assert e[0] == pytest.approx(np.mean(vals), abs=1e-12)
        per_task.append(np.mean([topk_score(np.array(p, float), lt, k)
                                 for p in itertools.permutations(range(lt.size))]))
    assert random_topk_expectation(tids, labels, k) == pytest.approx((5 * per_task[0] + 3 * per_task[1]) / 8)


# ------------------------------------------------------------------------------------------
# properties
# ------------------------------------------------------------------------------------------
_unique_labels = st.lists(st.floats(0.001, 1.0, allow_nan=False), min_size=2, max_size=60, unique=True)


@settings(max_examples=60)
@given(_unique_labels, st.integers(1, 4), st.randoms(use_true_random=False))
def test_perfect_is_one_and_reversed_is_zero(labels, n_tasks, rnd):
    labels = np.array(labels)
    tids = np.array([rnd.randrange(n_tasks) for _ in labels])
    sizes = np.bincount(tids)
    multi = sizes[tids] >= 2  # tasks with one record score 0.5 by rule
    if not multi.any():
        return
    tids, labels = tids[multi], labels[multi]
    # a strictly increasing function of the labels (ranks: labels * 3 + 1 can round two close labels to one value)
    perfect = evaluate_predictions(tids, labels, np.argsort(np.argsort(labels)).astype(float) * 3.0 + 1.0)
    assert perfect["pca"] == 1.0 and perfect["top1"] == 1.0
    for mode in ("tenset", "sign"):
        assert evaluate_predictions(tids, labels, -labels, tie_mode=mode)["pca"] == 0.0
        assert evaluate_predictions(tids, labels, labels, tie_mode=mode)["pca"] == 1.0


@settings(max_examples=80)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 8)), min_size=0, max_size=70),
       st.sampled_from(["tenset", "sign"]))
def test_pca_equals_bruteforce_with_ties(pairs, mode):
    preds = np.array([p for p, _ in pairs], dtype=float)
    labels = np.array([l_ for _, l_ in pairs], dtype=float) / 8.0
    assert pairwise_accuracy(preds, labels, mode) == pytest.approx(
        pairwise_accuracy_reference(list(preds), list(labels), mode), abs=1e-12)
    if mode == "tenset":
        assert pairwise_accuracy(preds, labels) == pytest.approx(_tenset_pca(preds, labels), abs=1e-12)


@settings(max_examples=40)
@given(st.integers(0, 10_000))
def test_evaluate_equals_bruteforce_on_random_tasks(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    tids = rng.integers(0, 5, n)
    labels = rng.uniform(0.01, 1.0, n)
    preds = rng.normal(size=n)
    r = evaluate_predictions(tids, labels, preds)
    pcas, ws = [], []
    for t in np.unique(tids):  # records of a task keep their relative order
        sel = tids == t
        pcas.append(pairwise_accuracy_reference(list(preds[sel]), list(labels[sel])))
        ws.append(sel.sum())
    assert r["pca"] == pytest.approx(np.average(pcas, weights=ws), abs=1e-12)
    # without ties the metrics do not depend on the record order
    perm = rng.permutation(n)
    r2 = evaluate_predictions(tids[perm], labels[perm], preds[perm])
    for key in ("pca", "top1", "top5", "peak5"):
        assert r2[key] == pytest.approx(r[key], abs=1e-12)
