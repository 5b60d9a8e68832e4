"""Fine-tuning on the target hardware (training.fine_tune_hardware, Ranker.fine_tune, fit_on_frame's
``fine_tune``) on a real few-shot hardware split: roller-k80 pooling logs in training, 10% of roller-mi50's moved
in, the rest of roller-mi50 tested."""
from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

pytest.importorskip("torch")
pytest.importorskip("lightgbm")

from tenset_curate.metrics import evaluate_predictions  # noqa: E402
from tenset_curate.model import load_model  # noqa: E402
from tenset_curate.splits import split_info, write_split  # noqa: E402
from tenset_curate.training import _part, arrays, fine_tune_hardware, fit_on_frame, labelled_split  # noqa: E402

SMALL = {"attention": dict(epochs=3, num_threads=1, finetune_epochs=3),
         "gbdt": dict(n_estimators=60, num_threads=1, eval_every=5, early_stopping_rounds=20, finetune_rounds=40)}


@pytest.fixture(scope="module")
def ds(pooling_few_shot_dataset):
    write_split(pooling_few_shot_dataset, "ft_zs", "hardware", train_hw=["roller-k80"], test_hw=["roller-mi50"], seed=0)
    write_split(pooling_few_shot_dataset, "ft_within", "within-task", seed=0)
    return pooling_few_shot_dataset


@pytest.fixture(scope="module")
def few_shot(ds):
    return labelled_split(ds, "fs")


def test_auto_fine_tunes_only_on_a_few_shot_splits_target_hardware(ds, few_shot):
    assert fine_tune_hardware(few_shot) == ["roller-mi50"]
    assert fine_tune_hardware(labelled_split(ds, "ft_zs")) == []  # zero-shot: the test hardware never trains
    within = labelled_split(ds, "ft_within")
    assert fine_tune_hardware(within) == []  # every test hardware is every training one
    # a within-task split where one hardware has no test records (its tasks too small to test) is no few-shot
    # split: each tested hardware trains on most of its records (it was fine-tuned on them, and said so)
    one_tested = within.filter((pl.col("part") != "test") | (pl.col("hardware") == "roller-k80"))
    assert set(one_tested.filter(pl.col("part") == "train")["hardware"]) == {"roller-k80", "roller-mi50"}
    assert fine_tune_hardware(one_tested) == []
    # the split's record decides where there is one: only a hardware split with a few-shot share fine-tunes, even
    # where a per-task cap leaves a within-task split fewer training than test records
    assert fine_tune_hardware(few_shot, info=split_info(ds, "fs")) == ["roller-mi50"]
    assert fine_tune_hardware(few_shot, info={"scheme": "within-task"}) == []
    assert fine_tune_hardware(few_shot, info=split_info(ds, "ft_zs")) == []
    assert fine_tune_hardware(few_shot, "none") == [] and fine_tune_hardware(few_shot, None) == []
    assert fine_tune_hardware(few_shot, "roller-k80,roller-mi50") == ["roller-k80", "roller-mi50"]
    assert fine_tune_hardware(few_shot, "roller-k80, roller-mi50 ") == ["roller-k80", "roller-mi50"]  # as typed
    with pytest.raises(ValueError, match="roller-a100"):
        fine_tune_hardware(few_shot, ["roller-a100"])


@pytest.mark.parametrize("kind", ["attention", "gbdt"])
def test_fine_tuned_model_is_never_worse_on_the_targets_validation_records(kind, few_shot, tmp_path):
    d = arrays(few_shot)
    part = few_shot["part"].to_numpy()
    on = d["groups"]["hardware"] == "roller-mi50"
    valid = _part(d, (part == "valid") & on)
    assert len(valid["labels"]) > 20
    base, _ = fit_on_frame(few_shot, kind, fine_tune=None, **SMALL[kind])
    tuned, _ = fit_on_frame(few_shot, kind, **SMALL[kind])
    assert base.fine_tuned is None
    n_train = int(((part == "train") & on).sum())
    assert tuned.fine_tuned["hardware"] == ["roller-mi50"] and tuned.fine_tuned["records"] == n_train
    pca = {name: evaluate_predictions(valid["task_ids"], valid["labels"], m.predict(valid))["pca"]
           for name, m in (("base", base), ("tuned", tuned))}
    assert pca["tuned"] >= pca["base"] - 1e-12
    phases = [h.get("phase") for h in tuned.history]
    assert "fine-tune" in phases and phases.index("fine-tune") > 0  # trained on everything first
    # the directory keeps what fine-tuning did and predicts the same
    tuned.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["fine_tuned"]["hardware"] == ["roller-mi50"]
    again = load_model(tmp_path / "m")
    assert again.fine_tuned == tuned.fine_tuned
    np.testing.assert_allclose(again.predict(valid), tuned.predict(valid), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["attention", "gbdt"])
def test_fine_tuning_on_reversed_labels_keeps_the_weights_it_started_from(kind, few_shot):
    """Labels that rank the target's programs backwards can only lower validation PCA: fine-tuning must give up
    and leave the model as it was (best_epoch None, the same predictions)."""
    d = arrays(few_shot)
    part = few_shot["part"].to_numpy()
    on = d["groups"]["hardware"] == "roller-mi50"
    m, _ = fit_on_frame(few_shot, kind, fine_tune=None, **SMALL[kind])
    valid = _part(d, (part == "valid") & on)
    before = m.predict(valid)
    train = _part(d, (part == "train") & on)
    train["labels"] = (1.0 - train["labels"] + 1e-3).astype(np.float32)  # best becomes worst
    m.fine_tune(train, valid)
    assert m.fine_tuned["best_epoch"] is None
    np.testing.assert_array_equal(m.predict(valid), before)
    assert any(h.get("phase") == "fine-tune" for h in m.history)  # it did try


def test_mlp_fine_tunes_too_and_cli_reports_it(ds, tmp_path):
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    r = CliRunner().invoke(app, ["train", str(ds), "--split", "fs", "--model", "mlp", "--out", str(tmp_path / "m"),
                                 "--epochs", "2", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["fine_tuned"]["hardware"] == ["roller-mi50"] and s["fine_tuned"]["records"] > 0
    # fine-tuning runs no more epochs than the training (--epochs 2 fine-tuned for the default 8)
    history = json.loads((tmp_path / "m" / "config.json").read_text())["history"]
    assert sum(h.get("phase") == "fine-tune" for h in history) == 2
    r = CliRunner().invoke(app, ["train", str(ds), "--split", "fs", "--model", "mlp", "--out", str(tmp_path / "n"),
                                 "--epochs", "1", "--fine-tune", "roller-a100"])
    assert r.exit_code == 2 and "roller-a100" in r.output and "no training records" in r.output
    r = CliRunner().invoke(app, ["train", str(ds), "--split", "fs", "--model", "mlp", "--out", str(tmp_path / "o"),
                                 "--epochs", "1", "--fine-tune", "none", "--json"])
    assert r.exit_code == 0 and "fine_tuned" not in json.loads(r.output)


def test_auto_lambdarank_weight_follows_whether_the_test_tasks_are_trained_on(ds, few_shot, tmp_path):
    """``lambdarank_weight="auto"`` (training.lambdarank_weight_for): 0.25 when most test records are of (hardware,
    task) pairs that train (within-task, few-shot), 0.05 when the test tasks never train (zero-shot hardware, held-out
    tasks) or there is no test part; a number given is kept; the directory records the weight trained with."""
    import polars as pl

    import tenset_curate.model as M
    from tenset_curate.training import SEEN_TASK_LAMBDARANK_WEIGHT, lambdarank_weight_for, seen_task_share

    write_split(ds, "ft_tasks", "task", test_fraction=0.3, seed=0)
    within, zs, tasks = (labelled_split(ds, n) for n in ("ft_within", "ft_zs", "ft_tasks"))
    assert seen_task_share(within) == 1.0 and seen_task_share(few_shot) == 1.0
    assert seen_task_share(zs) == 0.0 and seen_task_share(tasks) == 0.0
    assert seen_task_share(within.filter(pl.col("part") != "test")) is None
    # some test tasks no longer train: the share counts the test records of the tasks that still do
    held = tasks.filter(pl.col("part") == "test")["task_id"].unique()
    mixed = within.filter(~(pl.col("task_id").is_in(held.implode()) & (pl.col("part") != "test")))
    test = mixed.filter(pl.col("part") == "test")
    assert seen_task_share(mixed) == pytest.approx(1 - test["task_id"].is_in(held.implode()).mean())
    assert 0 < seen_task_share(mixed) < 1
    assert SEEN_TASK_LAMBDARANK_WEIGHT == 0.25 and M.LAMBDARANK_WEIGHT == 0.05
    for frame, w in ((within, 0.25), (few_shot, 0.25), (zs, 0.05), (tasks, 0.05),
                     (within.filter(pl.col("part") != "test"), 0.05)):
        assert lambdarank_weight_for(frame) == w
    small = dict(epochs=1, num_threads=1, fine_tune=None)
    m, _ = fit_on_frame(within, "attention", **small)
    assert m.hparams["lambdarank_weight"] == 0.25
    m.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["hparams"]["lambdarank_weight"] == 0.25
    assert fit_on_frame(zs, "attention", **small)[0].hparams["lambdarank_weight"] == 0.05
    assert fit_on_frame(within, "attention", lambdarank_weight=0.05, **small)[0].hparams["lambdarank_weight"] == 0.05
    assert "lambdarank_weight" not in fit_on_frame(within, "gbdt", n_estimators=5, num_threads=1,
                                                   fine_tune=None)[0].hparams


def test_cli_prints_the_lambdarank_weight_and_takes_one(ds, tmp_path):
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    base = ["train", str(ds), "--model", "attention", "--epochs", "1", "--fine-tune", "none"]
    r = CliRunner().invoke(app, base + ["--split", "ft_zs", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    assert "LambdaRank weight 0.05 (0% of the test records are of tasks it trains on)" in r.output
    r = CliRunner().invoke(app, base + ["--split", "ft_zs", "--out", str(tmp_path / "b"), "--lambdarank-weight", "0.4",
                                        "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["lambdarank_weight"] == 0.4 and s["test_records_of_trained_tasks"] == 0.0
    assert json.loads((tmp_path / "b" / "config.json").read_text())["hparams"]["lambdarank_weight"] == 0.4
    r = CliRunner().invoke(app, base + ["--split", "ft_zs", "--out", str(tmp_path / "c"), "--lambdarank-weight", "x"])
    assert r.exit_code == 2 and "auto or a number" in r.output
    r = CliRunner().invoke(app, ["train", str(ds), "--model", "gbdt", "--split", "ft_zs", "--out", str(tmp_path / "d"),
                                 "--lambdarank-weight", "0.1"])
    assert r.exit_code == 2 and "attention only" in r.output


def test_submodular_picks_take_the_best_then_the_most_new_steps():
    """AutoTVM's rule with a knob per token position: the model's first candidate, then the one with the most token
    rows no pick has at that position (ties: the one the model ranks higher); padding (-1) never counts."""
    import numpy as np

    from tenset_curate.model import submodular_picks

    rows = np.array([[0, 1, 2, -1],   # the model's best
                     [0, 1, 2, -1],   # a repeat of it: nothing new
                     [0, 1, 3, -1],   # one new step
                     [4, 5, 2, -1],   # two new steps
                     [0, 6, 2, 9],    # two new steps too (a step where the best has padding counts): ranked lower
                     [0, 1, 2, 8]])
    assert submodular_picks(rows, 1) == [0]
    assert submodular_picks(rows, 3) == [0, 3, 4]  # after [3], row 4 still has 6 and 9 new, row 2 only 3
    assert submodular_picks(rows, 6) == [0, 3, 4, 2, 5, 1]  # then 2 (3 new), 5 (8 new), the repeat last
    assert submodular_picks(rows, 9) == submodular_picks(rows, 6)


def test_auto_diverse_top_k_reorders_only_the_top_of_tasks_the_model_has_not_seen(ds, tmp_path):
    """``diverse_top_k="auto"`` (training.diverse_top_k_for): 5 when the test tasks do not train (zero-shot
    hardware here, real roller logs), 0 when they do (within-task). With 5, each task's best-scored program stays
    first, only the task's best-scored 4% (at least 5) change places, by trading score values (each task keeps
    its values), and the first five differ from one another in their schedule steps more than the plain top five
    do; the plain order's PCA moves by less than 0.005. Saved and loaded, the model predicts the same."""
    import numpy as np
    import polars as pl

    from tenset_curate.metrics import evaluate_predictions, task_slices
    from tenset_curate.model import DIVERSE_SHARE, AttentionRanker, load_model, token_rows
    from tenset_curate.training import _part, diverse_top_k_for, part_arrays

    within, zs = labelled_split(ds, "ft_within"), labelled_split(ds, "ft_zs")
    assert diverse_top_k_for(within) == 0 and diverse_top_k_for(zs) == 5
    assert diverse_top_k_for(within.filter(pl.col("part") != "test")) == 5  # no test part: a model for new tasks
    small = dict(epochs=2, num_threads=1, fine_tune=None)
    assert fit_on_frame(within, "attention", **small)[0].hparams["diverse_top_k"] == 0
    assert "diverse_top_k" not in fit_on_frame(zs, "gbdt", n_estimators=5, num_threads=1, fine_tune=None)[0].hparams
    m, d = fit_on_frame(zs, "attention", **small)
    assert m.hparams["diverse_top_k"] == 5 and m.hparams["diverse_share"] == DIVERSE_SHARE
    test = _part(d, zs["part"].to_numpy() == "test")
    plain, diverse = AttentionRanker.__mro__[1].predict(m, test), m.predict(test)
    order, _, starts, counts = task_slices(test["task_ids"])
    more_varied = 0
    for s, c in zip(starts, counts):
        idx = order[s: s + c]
        top = idx[np.argsort(-plain[idx], kind="stable")]
        assert np.argmax(diverse[idx]) == np.argmax(plain[idx])
        n_pool = max(5, math.ceil(DIVERSE_SHARE * c))
        pool = top[:n_pool]
        assert np.array_equal(diverse[top[n_pool:]], plain[top[n_pool:]])
        assert np.array_equal(np.sort(diverse[pool]), np.sort(plain[pool]))
        first5 = idx[np.argsort(-diverse[idx], kind="stable")[:5]]
        ids = token_rows(test["tokens"], test["mask"], np.concatenate([first5, top[:5]]))
        steps = [len({(j, v) for r in part for j, v in enumerate(r) if v >= 0}) for part in (ids[:5], ids[5:])]
        more_varied += steps[0] >= steps[1]  # distinct (position, step) pairs over the five
    assert more_varied == len(starts)
    assert (diverse != plain).any()
    a, b = (evaluate_predictions(test["task_ids"], test["labels"], p)["pca"] for p in (plain, diverse))
    assert abs(a - b) < 0.005
    m.save(tmp_path / "m")
    assert np.array_equal(load_model(tmp_path / "m").predict(test), diverse)
    assert np.array_equal(m.predict(part_arrays(zs, "test")), diverse)


def test_curate_train_diverse_top_k_option(ds, tmp_path):
    """``curate train --diverse-top-k``: auto (the split's rule) or a whole number, kept in the model directory;
    attention only; anything else is refused naming the option."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    base = ["train", str(ds), "--split", "ft_zs", "--epochs", "1", "--fine-tune", "none", "--json"]
    r = CliRunner().invoke(app, base + ["--model", "attention", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0 and json.loads(r.output)["diverse_top_k"] == 5
    r = CliRunner().invoke(app, base + ["--model", "attention", "--out", str(tmp_path / "b"), "--diverse-top-k", "0"])
    assert r.exit_code == 0 and json.loads(r.output)["diverse_top_k"] == 0
    assert json.loads((tmp_path / "b" / "config.json").read_text())["hparams"]["diverse_top_k"] == 0
    r = CliRunner().invoke(app, base + ["--model", "attention", "--out", str(tmp_path / "c"), "--diverse-top-k", "x"])
    assert r.exit_code == 2 and "--diverse-top-k must be auto or a whole number" in r.output
    r = CliRunner().invoke(app, base + ["--model", "gbdt", "--out", str(tmp_path / "d"), "--diverse-top-k", "3"])
    assert r.exit_code == 2 and "--diverse-top-k applies to --model attention only" in r.output
