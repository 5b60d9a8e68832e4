"""Within-task standardised features (``features.task_relative``) and the rankers that use them.

- The transform itself, on real flat features: equal to a per-task numpy reference, invariant to record order, 0 for
  a feature constant within a task and for a one-record task.
- A ranker with ``task_relative`` scores a record from its task's peers only: scoring one task alone or mixed with
  other tasks gives the same scores; ``predict`` without task ids is refused with a clear error.
- Directories saved before the option existed (no ``task_relative`` in config.json) load with the raw features and
  predict exactly as before.
- The point of it, on real logs: a GBDT trained on K80 tasks and tested zero-shot on the same tasks measured on
  MI50 picks better programs with the within-task features than with the raw ones, and beats a random pick.
- Tokens centred within their task (``features.task_centred_tokens``, the attention ranker's ``token_relative``):
  against a per-task, per-position reference on real tokens; padding stays 0; an attention ranker with them scores a
  record from its task's peers only; directories saved before the option existed load with it off.
- Training holds them as ``features.TaskCentredTokens`` (one mean sequence per task, rows centred on demand): every
  selection of it equals the dense array's rows bit for bit, and an attention ranker trained on it predicts exactly
  what the same ranker trained on the dense array predicts. A part of the records (``training._part``) holds a
  ``features.RowView`` of the token tensor, not a copy, and reads the same tokens.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lightgbm")

from tenset_curate.features import RowView, TaskCentredTokens, task_centred_tokens, task_relative  # noqa: E402
from tenset_curate.metrics import evaluate_predictions, random_topk_expectation  # noqa: E402
from tenset_curate.model import AttentionRanker, GBDTRanker, load_model  # noqa: E402
from tenset_curate.splits import write_split  # noqa: E402
from tenset_curate.training import _part, arrays, fit_on_frame, labelled_split  # noqa: E402

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "ansor"
pytestmark = pytest.mark.skipif(not (REAL / "roller-k80").is_dir() or not (REAL / "roller-mi50").is_dir(),
                                reason="real roller-k80 / roller-mi50 logs not found")


@pytest.fixture(scope="module")
def two_gpus(k80_mi50_dataset):
    """The conftest's 24 tasks measured on both GPUs, with a hardware-wise split: K80 trains, MI50 is tested."""
    write_split(k80_mi50_dataset, "k80_mi50", "hardware", train_hw=["roller-k80"], test_hw=["roller-mi50"], seed=0)
    df = labelled_split(k80_mi50_dataset, "k80_mi50")
    return df, arrays(df)


def _saved_without(model, out: Path, hparam: str):
    """``model`` saved, its config.json stripped of ``hparam`` (a directory written before the option existed),
    loaded back."""
    out = model.save(out)
    cfg = json.loads((out / "config.json").read_text())
    del cfg["hparams"][hparam]
    (out / "config.json").write_text(json.dumps(cfg))
    return load_model(out)


def _reference(flat: np.ndarray, tids: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    out = np.zeros(flat.shape, np.float64)
    for t in np.unique(tids):
        m = tids == t
        x = flat[m].astype(np.float64)
        out[m] = (x - x.mean(0)) / (x.std(0) + eps)
    return out


def test_transform_matches_a_per_task_reference_on_real_features(two_gpus):
    _, d = two_gpus
    flat, tids = d["flat"], d["task_ids"]
    z = task_relative(flat, tids)
    assert z.shape == flat.shape and z.dtype == np.float32
    np.testing.assert_allclose(z, _reference(flat, tids), atol=2e-4)
    # record order does not matter
    perm = np.random.default_rng(0).permutation(len(flat))
    np.testing.assert_allclose(task_relative(flat[perm], tids[perm]), z[perm], atol=1e-5)
    # features constant within every task (the workload's own arguments) carry nothing relative
    wl = [i for i in range(flat.shape[1]) if all(np.ptp(flat[tids == t, i]) == 0 for t in np.unique(tids))]
    assert wl and np.all(z[:, wl] == 0)
    # varying ones are standardised inside each task
    t0 = tids == tids[0]
    var = np.flatnonzero(flat[t0].std(0) > 0.1)
    assert var.size and np.allclose(z[t0][:, var].mean(0), 0, atol=1e-4)
    assert np.allclose(z[t0][:, var].std(0), flat[t0][:, var].std(0) / (flat[t0][:, var].std(0) + 1e-3), atol=1e-3)
    # a one-record task is all zeros
    assert np.all(task_relative(flat[:1], tids[:1]) == 0)


def test_scores_depend_only_on_the_records_task(two_gpus, tmp_path):
    df, d = two_gpus
    part = df["part"].to_numpy()
    m, _ = fit_on_frame(df, "gbdt", seed=0, n_estimators=40, num_threads=1)
    assert m.hparams["task_relative"] is True
    test = _part(d, part == "test")
    mixed = m.predict(test)
    tids = test["task_ids"]
    for t in np.unique(tids)[:3]:
        one = _part(test, tids == t)
        np.testing.assert_allclose(m.predict(one), mixed[tids == t], rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="task_ids"):
        m.predict({"flat": test["flat"]})
    # a directory written before the option existed: no task_relative in its config -> raw features, as trained
    raw, _ = fit_on_frame(df, "gbdt", seed=0, n_estimators=40, num_threads=1, task_relative=False)
    old = _saved_without(raw, tmp_path / "old", "task_relative")
    assert isinstance(old, GBDTRanker) and old.hparams["task_relative"] is False
    np.testing.assert_array_equal(old.predict({"flat": test["flat"]}), raw.predict(test))


def test_within_task_features_transfer_to_another_gpu(two_gpus):
    """K80 -> MI50 zero-shot on 24 real tasks (measured: top-1 0.618 -> 0.772, random 0.645; PCA 0.647 -> 0.706).
    The full-size run (benchmarks/model_splits.py, 162k records) moved GBDT's top-1 from 0.509 to 0.816 and PCA from
    0.632 to 0.720 with these features."""
    df, d = two_gpus
    part = df["part"].to_numpy()
    test = _part(d, part == "test")
    res = {}
    for tr in (False, True):
        m, _ = fit_on_frame(df, "gbdt", seed=0, num_threads=1, task_relative=tr)
        res[tr] = evaluate_predictions(test["task_ids"], test["labels"], m.predict(test))
    rnd = random_topk_expectation(test["task_ids"], test["labels"], 1)
    print({tr: {k: round(float(r[k]), 3) for k in ("pca", "top1", "top5")} for tr, r in res.items()},
          "random top-1", round(rnd, 3))
    assert res[True]["n_tasks"] >= 20  # tasks with valid MI50 records
    assert res[True]["top1"] > res[False]["top1"] + 0.05
    assert res[True]["top1"] > rnd + 0.05
    assert res[True]["pca"] > res[False]["pca"]


def test_cli_train_switch_and_evaluate(two_gpus, k80_mi50_dataset, tmp_path):
    """``curate train --raw-features`` trains on the raw flat features, the default adds the within-task ones; both
    directories evaluate with ``curate evaluate`` (task statistics over the whole split)."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    r = CliRunner()
    got = {}
    for flag, name in ((["--raw-features"], "raw"), ([], "default")):
        out = tmp_path / name
        res = r.invoke(app, ["train", str(k80_mi50_dataset), "--split", "k80_mi50", "--model", "gbdt", "--out",
                             str(out), "--json", *flag])
        assert res.exit_code == 0, res.output
        assert json.loads((out / "config.json").read_text())["hparams"]["task_relative"] is (name == "default")
        ev = r.invoke(app, ["evaluate", str(out), str(k80_mi50_dataset), "--split", "k80_mi50", "--json"])
        assert ev.exit_code == 0, ev.output
        got[name] = json.loads(ev.output)
    assert got["default"]["top1"] > got["raw"]["top1"]


def test_centred_tokens_match_a_per_task_per_position_reference(two_gpus):
    _, d = two_gpus
    tok, mask, tids = d["tokens"], d["mask"], d["task_ids"]
    rel = task_centred_tokens(tok, mask, tids)
    assert rel.shape == tok.shape and rel.dtype == np.float32
    np.testing.assert_array_equal(rel, d["tok_rel"])  # training.arrays computes it over the whole frame
    for t in np.unique(tids)[:4]:
        m = tids == t
        x, mk = tok[m].astype(np.float64), mask[m]
        for pos in (0, 3, int(mk.sum(1).max()) - 1):
            real = mk[:, pos]
            ref = x[real, pos] - x[real, pos].mean(0)
            np.testing.assert_allclose(rel[m][real, pos], ref, atol=1e-4)
            assert np.all(rel[m][~real, pos] == 0)  # padding stays 0
    # something varies within tasks (else the feature would carry nothing), and order does not matter
    assert np.abs(rel).max() > 0.5
    perm = np.random.default_rng(1).permutation(len(tok))
    np.testing.assert_allclose(task_centred_tokens(tok[perm], mask[perm], tids[perm]), rel[perm], rtol=1e-6, atol=1e-6)


def test_attention_with_centred_tokens_scores_from_the_task_only(two_gpus, tmp_path):
    df, d = two_gpus
    part = df["part"].to_numpy()
    m, _ = fit_on_frame(df, "attention", seed=0, epochs=2, num_threads=1)
    assert m.hparams["token_relative"] is True and m.input_dims["token_dim"] == d["tokens"].shape[2]
    assert m.net.tok_mean.shape[0] == 2 * d["tokens"].shape[2]  # raw tokens + centred ones
    test = _part(d, part == "test")
    own = {k: v for k, v in test.items() if k not in ("flat_rel", "tok_rel")}  # statistics from the records given
    mixed = m.predict(own)
    tids = test["task_ids"]
    for t in np.unique(tids)[:3]:
        np.testing.assert_allclose(m.predict(_part(own, tids == t)), mixed[tids == t], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="task_ids"):
        m.predict({"tokens": test["tokens"], "mask": test["mask"], "flat": test["flat"], "flat_rel": test["flat_rel"]})
    # a directory written before token_relative existed (session 5: task_relative only) loads without it
    old_kind, _ = fit_on_frame(df, "attention", seed=0, epochs=2, num_threads=1, token_relative=False)
    old = _saved_without(old_kind, tmp_path / "old", "token_relative")
    assert isinstance(old, AttentionRanker) and old.hparams["token_relative"] is False
    assert old.hparams["task_relative"] is True
    np.testing.assert_array_equal(old.predict(test), old_kind.predict(test))


def test_lazy_centred_tokens_equal_the_dense_ones_under_every_selection(two_gpus):
    _, d = two_gpus
    tok, mask, tids = d["tokens"], d["mask"], d["task_ids"]
    lazy, dense = d["tok_rel"], task_centred_tokens(tok, mask, tids)
    assert isinstance(lazy, TaskCentredTokens)  # training.arrays keeps the per-task means, not a dense copy
    assert lazy.mean.nbytes * 20 < dense.nbytes and lazy.shape == dense.shape and len(lazy) == len(dense)
    rng = np.random.default_rng(0)
    sel = rng.random(len(tok)) < 0.6
    idx = rng.integers(0, len(tok), 500)  # with repeats, as training's hardware balancing makes
    for rows in (sel, idx, np.flatnonzero(sel)[::-1]):
        part = lazy[rows]
        np.testing.assert_array_equal(np.asarray(part), dense[rows])
        inner = rng.integers(0, len(part), 64)
        np.testing.assert_array_equal(np.asarray(part[inner]), dense[rows][inner])  # a selection of a selection
        for lmax in (5, tok.shape[1]):  # what a training batch asks for: some rows, cropped
            np.testing.assert_array_equal(part.take(tok[rows], mask[rows], inner, lmax), dense[rows][inner, :lmax])
            np.testing.assert_array_equal(part.take(tok[rows], mask[rows], slice(3, 40), lmax),
                                          dense[rows][3:40, :lmax])


def test_attention_trained_on_lazy_centred_tokens_predicts_as_on_dense_ones(two_gpus):
    df, d = two_gpus
    part = df["part"].to_numpy()
    dense = dict(d, tok_rel=np.asarray(d["tok_rel"]))
    preds = []
    for data in (d, dense):
        m = AttentionRanker(seed=0, epochs=2, num_threads=1)
        m.fit(_part(data, part == "train"), _part(data, part == "valid") if (part == "valid").any() else None)
        preds.append(m.predict(_part(data, part == "test")))
    np.testing.assert_array_equal(preds[0], preds[1])
    assert np.unique(preds[0]).size > 10  # the model ranks, it does not score everything alike


def test_a_part_views_the_token_tensor_instead_of_copying_it(two_gpus):
    df, d = two_gpus
    part = df["part"].to_numpy()
    train = _part(d, part == "train")
    view = train["tokens"]
    assert isinstance(view, RowView) and view.base is d["tokens"]  # no copy of the tensor
    expect = d["tokens"][part == "train"]
    assert view.shape == expect.shape and len(view) == len(expect) and view.dtype == expect.dtype
    np.testing.assert_array_equal(np.asarray(view), expect)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(view), 300)
    np.testing.assert_array_equal(view[rows, :7], expect[rows, :7])  # what a batch reads
    np.testing.assert_array_equal(view[5:40], expect[5:40])
    again = _part(train, rows)  # a part of a part (hardware balancing repeats rows) still reads the one tensor
    assert again["tokens"].base is d["tokens"]
    np.testing.assert_array_equal(np.asarray(again["tokens"]), expect[rows])
    np.testing.assert_array_equal(np.asarray(again["tok_rel"]), task_centred_tokens(
        d["tokens"], d["mask"], d["task_ids"])[part == "train"][rows])
