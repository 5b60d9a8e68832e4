"""Ranking metrics for cost models, following TenSet's definitions.

References (tlc-pack/tenset):

* ``python/tvm/auto_scheduler/cost_model/metric.py`` -- ``metric_pairwise_comp_accuracy``,
  ``metric_peak_score``, ``max_curve``.
* ``scripts/train_model.py`` -- ``evaluate_model``: every metric is computed per task (a task =
  one workload on one target) and the per-task values are averaged with
  ``np.average(values, weights=[len(test_set.throughputs[t]) for t in tasks])``, i.e. weighted by
  the task's number of test records.

Definitions implemented here
----------------------------

Pairwise comparison accuracy (PCA), ``pairwise_accuracy``
    TenSet::

        def vec_to_pair_com(vec):
            return (vec.reshape((-1, 1)) - vec) > 0

        def metric_pairwise_comp_accuracy(preds, labels):
            n = len(preds)
            if n <= 1:
                return 0.5
            preds = vec_to_pair_com(preds)
            labels = vec_to_pair_com(labels)
            correct_ct = np.triu(np.logical_not(np.logical_xor(preds, labels)), k=1).sum()
            return correct_ct / (n * (n-1) / 2)

    i.e. over ALL pairs ``i < j`` (record order within the task), a pair is correct iff
    ``[pred_i > pred_j] == [label_i > label_j]``; the denominator is ``n (n-1) / 2``; a task with
    ``n <= 1`` records scores 0.5.

    **Ties (TenSet's behaviour, written down).** TenSet does *not* compare signs: "<" and "=="
    fall in the same bucket. Hence, for ``i < j``:

    * label tie ``label_i == label_j``: counted correct iff ``pred_i <= pred_j``;
    * prediction tie ``pred_i == pred_j``: counted correct iff ``label_i <= label_j``;
    * both tied: correct.

    So ties are *not* excluded from the denominator, and their score depends on the record
    order (a constant predictor scores the fraction of pairs with ``label_i <= label_j``, not
    0.5). Without ties in labels or predictions this equals the sign definition.
    ``tie_mode="sign"`` gives the symmetric variant ``sign(pred_i - pred_j) ==
    sign(label_i - label_j)`` (a tie is correct only when both are tied); the default is
    ``tie_mode="tenset"``, TenSet's exact rule.

    Implementation: O(n^2) comparisons done in row blocks of ~4M pairs (numpy), so tasks of
    several thousand records take milliseconds and memory stays bounded.

Top-k score, ``topk_score`` (keys ``top1``, ``top5``)
    The label of the best record among the model's k highest predictions, divided by the best
    label among the task's evaluated records: ``max(labels[top-k by pred]) / max(labels)``. The
    labels are TenSet throughput labels (``min_cost / cost``, in (0, 1]), so 1.0 means the model's
    top-k contains the best measured schedule. Picks use TenSet's order
    ``np.argsort(preds)[::-1][:k]`` made deterministic with a stable sort: among tied
    predictions the record with the larger index is picked first. TenSet's default sort leaves
    the order of ties to NumPy's version and CPU (NumPy >= 1.25 sorts with SIMD code that does
    not keep tied items in order, from n = 4 on), so top-k on tied predictions can differ from a
    TenSet run by the choice among the ties; PCA does not depend on it. A task with fewer than k
    records picks all of them (score 1).

    ``top1`` equals TenSet's "average peak score@1".

TenSet "average peak score@k", ``peak_score`` (key ``peak5``)
    TenSet's ``metric_peak_score``: ``mean(max_curve(labels[top-k picks]) / max(labels))`` --
    the mean over m = 1..k of the best-so-far among the first m picks. This is what TenSet's
    ``train_model.py`` prints as "average peak score@5"; it is <= ``top5``. Reported for
    comparability with the TenSet paper / scripts.

Aggregation
    Mean over tasks weighted by each task's number of evaluated records (TenSet's
    ``evaluate_model``), overall and per value of any grouping column (operator class,
    hardware...).

Valid records
    A record is evaluated when its label is finite and > 0 (TenSet labels of measured records are
    in (0, 1]; failed measurements carry no usable label), and ``valid`` (optional mask) is True.
    Predictions of evaluated records must be finite.

    **Failed records, where we differ from TenSet.** TenSet keeps a failed measurement (its cost
    list ``[1e10]``) in the test set: its label is the task's min cost / 1e10 (about 1e-14), and a
    task whose every record failed labels them all 1.0. We label failed records 0 and leave them
    out by default (the issue's rule: excluded "unless asked for"). ``include_failed=True`` asks:
    they are evaluated with label 0, which orders them below every measured program as TenSet's
    near-zero label does, so a model that ranks a failing program first loses top-k and pairs for
    it; a task with no measured record is skipped (it has no best program to normalise by, where
    TenSet scores its all-tied labels).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

__all__ = [
    "pairwise_accuracy",
    "pairwise_accuracy_reference",
    "topk_score",
    "peak_score",
    "evaluate_predictions",
    "random_topk_expectation",
    "random_topk_per_task",
    "task_slices",
]

_BLOCK_PAIRS = 1 << 22  # comparisons per block in pairwise_accuracy
_TIE_MODES = ("tenset", "sign")


# --------------------------------------------------------------------------------------------
# per-task metrics
# --------------------------------------------------------------------------------------------
def pairwise_accuracy(preds: np.ndarray, labels: np.ndarray, tie_mode: str = "tenset") -> float:
    """Pairwise comparison accuracy of one task (TenSet ``metric_pairwise_comp_accuracy``).

    ``tie_mode="tenset"`` (default): pair ``i<j`` correct iff ``[p_i>p_j] == [l_i>l_j]``
    (TenSet, see module docstring for the tie consequences). ``tie_mode="sign"``: correct iff
    ``sign(p_i-p_j) == sign(l_i-l_j)``. ``n <= 1`` -> 0.5.
    """
    if tie_mode not in _TIE_MODES:
        raise ValueError(f"tie_mode must be one of {_TIE_MODES}, got {tie_mode!r}")
    p = np.asarray(preds, dtype=np.float64).ravel()
    l = np.asarray(labels, dtype=np.float64).ravel()
    if p.shape != l.shape:
        raise ValueError(f"preds and labels differ in length: {p.shape} vs {l.shape}")
    n = p.shape[0]
    if n <= 1:
        return 0.5
    rows = max(1, _BLOCK_PAIRS // n)
    correct = 0
    for s in range(0, n - 1, rows):
        e = min(n - 1, s + rows)
        # rows i in [s, e), columns j in [s, n); keep j > i  <=> column offset > row offset
        pi, li = p[s:e, None], l[s:e, None]
        pj, lj = p[None, s:], l[None, s:]
        if tie_mode == "tenset":
            ok = (pi > pj) == (li > lj)
        else:
            ok = (np.sign(pi - pj) == np.sign(li - lj))
        correct += int(np.count_nonzero(np.triu(ok, k=1)))
    return correct / (n * (n - 1) / 2)


def pairwise_accuracy_reference(preds, labels, tie_mode: str = "tenset") -> float:
    """Plain double loop over pairs, for tests (O(n^2) Python)."""
    n = len(preds)
    if n <= 1:
        return 0.5
    good = 0
    for i in range(n):
        for j in range(i + 1, n):
            if tie_mode == "tenset":
                good += (preds[i] > preds[j]) == (labels[i] > labels[j])
            else:
                good += np.sign(preds[i] - preds[j]) == np.sign(labels[i] - labels[j])
    return good / (n * (n - 1) / 2)


def _topk_order(preds: np.ndarray, k: int) -> np.ndarray:
    # TenSet: np.argsort(preds)[::-1][:top_k]; stable sort -> deterministic tie order
    return np.argsort(preds, kind="stable")[::-1][:k]


def topk_score(preds: np.ndarray, labels: np.ndarray, k: int) -> float:
    """``max(labels[top-k by pred]) / max(labels)`` for one task (see module docstring)."""
    p = np.asarray(preds, dtype=np.float64).ravel()
    l = np.asarray(labels, dtype=np.float64).ravel()
    if l.size == 0:
        return float("nan")
    best = l.max()
    return float(l[_topk_order(p, k)].max() / best)


def peak_score(preds: np.ndarray, labels: np.ndarray, k: int) -> float:
    """TenSet ``metric_peak_score``: mean of the best-so-far curve of the top-k picks / max."""
    p = np.asarray(preds, dtype=np.float64).ravel()
    l = np.asarray(labels, dtype=np.float64).ravel()
    if l.size == 0:
        return float("nan")
    curve = np.maximum.accumulate(l[_topk_order(p, k)]) / l.max()
    return float(curve.mean())


# --------------------------------------------------------------------------------------------
# grouping helpers
# --------------------------------------------------------------------------------------------
def task_slices(task_ids: np.ndarray):
    """Return (order, unique_ids, starts, counts): ``order`` is a stable sort by task id, so the
    records of task ``unique_ids[t]`` are ``order[starts[t]:starts[t]+counts[t]]`` in their
    original relative order (TenSet's pairs i<j follow the record order)."""
    t = np.asarray(task_ids).ravel()
    order = np.argsort(t, kind="stable")
    uniq, starts, counts = np.unique(t[order], return_index=True, return_counts=True)
    return order, uniq, starts, counts


def cap_queries(rows: np.ndarray, groups: np.ndarray, cap: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Ranking queries from ``rows`` sorted by group (``groups[i]`` is the group of ``rows[i]``): (rows, query
    sizes), a group of more than ``cap`` rows shuffled by ``rng`` and cut into near-equal queries of at most ``cap``.
    LightGBM's lambdarank refuses a query of over 10,000 rows, and with truncation at 64 a long query trains only its
    top (the GBDT ranker and the importance proxy both use this)."""
    _, starts, counts = np.unique(groups, return_index=True, return_counts=True)
    if counts.size == 0 or counts.max() <= cap:
        return rows, counts
    out, sizes = [], []
    for s0, c in zip(starts, counts):
        part = rows[s0:s0 + c]
        if c > cap:
            for piece in np.array_split(part[rng.permutation(c)], -(-c // cap)):
                out.append(piece)
                sizes.append(len(piece))
        else:
            out.append(part)
            sizes.append(c)
    return np.concatenate(out), np.asarray(sizes)


def _valid_mask(labels: np.ndarray, valid: np.ndarray | None, include_failed: bool = False) -> np.ndarray:
    m = np.isfinite(labels) & ((labels >= 0) if include_failed else (labels > 0))
    if valid is not None:
        valid = np.asarray(valid, dtype=bool).ravel()
        if valid.shape != labels.shape:
            raise ValueError("valid must have one entry per record")
        m &= valid
    return m


def _py(v):
    return v.item() if isinstance(v, np.generic) else v


def _aggregate(per_task: dict, idx: np.ndarray, metric_keys: Iterable[str]) -> dict:
    w = per_task["n_records"][idx].astype(np.float64)
    out = {}
    for key in metric_keys:
        vals = per_task[key][idx]
        out[key] = float(np.average(vals, weights=w)) if w.sum() > 0 else float("nan")
    out["n_tasks"] = int(idx.size)
    out["n_records"] = int(w.sum())
    return out


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------
def evaluate_predictions(
    task_ids: np.ndarray,
    labels: np.ndarray,
    preds: np.ndarray,
    groups: dict[str, np.ndarray] | None = None,
    *,
    valid: np.ndarray | None = None,
    ks: tuple[int, ...] = (1, 5),
    peak_ks: tuple[int, ...] = (5,),
    tie_mode: str = "tenset",
    include_failed: bool = False,
) -> dict:
    """Evaluate predictions task by task and aggregate like TenSet's ``evaluate_model``.

    Parameters
    ----------
    task_ids, labels, preds: one entry per record (any order; records of a task need not be
        contiguous, their relative order is kept for the i<j pairs).
    groups: optional ``{name: per-record key array}`` (e.g. operator class, hardware). The key
        must be constant within a task; the result gets ``by_<name>: {key: {...}}``.
    valid: optional per-record mask; records with non-finite or <= 0 labels are skipped, except
        that ``include_failed`` evaluates failed records (label 0) of tasks with a measured one
        (module docstring, "Failed records").
    ks: top-k scores to report (keys ``top{k}``); peak_ks: TenSet average peak scores
        (keys ``peak{k}``).

    Returns
    -------
    ``{'pca', 'top1', 'top5', 'peak5', 'n_tasks', 'n_records', 'by_<group>': {key: {same}},
    'per_task': {'task_id', 'n_records', 'pca', 'top1', ...: np.ndarray}}``. Aggregates are
    means over tasks weighted by the number of evaluated records per task.
    """
    task_ids = np.asarray(task_ids).ravel()
    labels = np.asarray(labels, dtype=np.float64).ravel()
    preds = np.asarray(preds, dtype=np.float64).ravel()
    if not (task_ids.shape == labels.shape == preds.shape):
        raise ValueError(
            f"task_ids/labels/preds lengths differ: {task_ids.shape}, {labels.shape}, {preds.shape}")
    keep = _valid_mask(labels, valid, include_failed)
    if include_failed and keep.any():  # a task with no measured record has no best program: skipped
        o, u, s, _ = task_slices(task_ids[keep])
        unmeasured = u[np.maximum.reduceat(labels[keep][o], s) <= 0]
        if unmeasured.size:
            keep &= ~np.isin(task_ids, unmeasured)
    if not np.all(np.isfinite(preds[keep])):
        raise ValueError("predictions of evaluated records must be finite")
    group_arrays = {}
    for name, arr in (groups or {}).items():
        arr = np.asarray(arr).ravel()
        if arr.shape != labels.shape:
            raise ValueError(f"group {name!r} must have one entry per record")
        group_arrays[name] = arr[keep]
    task_ids, labels, preds = task_ids[keep], labels[keep], preds[keep]

    order, uniq, starts, counts = task_slices(task_ids)
    n_t = uniq.size
    metric_keys = ["pca"] + [f"top{k}" for k in ks] + [f"peak{k}" for k in peak_ks]
    per_task = {"task_id": uniq, "n_records": counts.astype(np.int64)}
    for key in metric_keys:
        per_task[key] = np.empty(n_t, dtype=np.float64)
    group_of_task = {name: [] for name in group_arrays}
    for t in range(n_t):
        idx = order[starts[t]: starts[t] + counts[t]]
        p, l = preds[idx], labels[idx]
        per_task["pca"][t] = pairwise_accuracy(p, l, tie_mode)
        for k in ks:
            per_task[f"top{k}"][t] = topk_score(p, l, k)
        for k in peak_ks:
            per_task[f"peak{k}"][t] = peak_score(p, l, k)
        for name, arr in group_arrays.items():
            vals = arr[idx]
            if not np.all(vals == vals[0]):
                raise ValueError(f"group {name!r} is not constant within task {_py(uniq[t])!r}")
            group_of_task[name].append(vals[0])

    out = _aggregate(per_task, np.arange(n_t), metric_keys)
    for name, vals in group_of_task.items():
        vals = np.asarray(vals)
        per_task[name] = vals
        out[f"by_{name}"] = {
            _py(g): _aggregate(per_task, np.flatnonzero(vals == g), metric_keys)
            for g in np.unique(vals)
        }
    out["per_task"] = per_task
    return out


def _log_comb_table(n: int) -> np.ndarray:
    # log(m!) for m = 0..n
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))])


def _expected_max_of_random_subset(sorted_labels: np.ndarray, k: int, lf: np.ndarray) -> float:
    """E[max of a uniformly random k-subset] of ascending ``sorted_labels`` (exact):
    sum_r a_(r) * C(r-1, k-1) / C(n, k)."""
    n = sorted_labels.size
    if k >= n:
        return float(sorted_labels[-1])
    r = np.arange(k, n + 1)  # 1-based rank of the maximum
    log_p = (lf[r - 1] - lf[k - 1] - lf[r - k]) - (lf[n] - lf[k] - lf[n - k])
    return float(np.dot(sorted_labels[r - 1], np.exp(log_p)))


def random_topk_per_task(task_ids, labels, k: int, kind: str = "top", valid=None):
    """Exact expected top-k score (``kind='top'``) or TenSet average peak score
    (``kind='peak'``) per task of a model that ranks records uniformly at random.

    Returns ``(unique_task_ids, n_records, expectation)``."""
    if kind not in ("top", "peak"):
        raise ValueError("kind must be 'top' or 'peak'")
    if k < 1:
        raise ValueError("k must be >= 1")
    task_ids = np.asarray(task_ids).ravel()
    labels = np.asarray(labels, dtype=np.float64).ravel()
    keep = _valid_mask(labels, valid)
    task_ids, labels = task_ids[keep], labels[keep]
    order, uniq, starts, counts = task_slices(task_ids)
    lf = _log_comb_table(int(counts.max()) if counts.size else 0)
    exp_ = np.empty(uniq.size)
    for t in range(uniq.size):
        a = np.sort(labels[order[starts[t]: starts[t] + counts[t]]])
        n = a.size
        if kind == "top":
            exp_[t] = _expected_max_of_random_subset(a, k, lf) / a[-1]
        else:  # mean over m = 1..min(k, n) of E[max of first m picks]
            ms = range(1, min(k, n) + 1)
            exp_[t] = np.mean([_expected_max_of_random_subset(a, m, lf) for m in ms]) / a[-1]
    return uniq, counts, exp_


def random_topk_expectation(task_ids, labels, k: int, kind: str = "top", valid=None) -> float:
    """Exact expectation of the record-weighted top-k score (or TenSet peak score with
    ``kind='peak'``) of a uniformly random ranking -- the random baseline. Not sampled: per task
    ``E[max of k picks] = sum_r a_(r) C(r-1, k-1) / C(n, k)`` over the ascending labels."""
    _, counts, e = random_topk_per_task(task_ids, labels, k, kind=kind, valid=valid)
    if counts.sum() == 0:
        return float("nan")
    return float(np.average(e, weights=counts))
