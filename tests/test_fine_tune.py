"""Fine-tuning on the target hardware (training.fine_tune_hardware, Ranker.fine_tune, fit_on_frame's
``fine_tune``) on a real few-shot hardware split: roller-k80 pooling logs in training, 10% of roller-mi50's moved
in, the rest of roller-mi50 tested."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("lightgbm")

from tenset_curate.metrics import evaluate_predictions  # noqa: E402
from tenset_curate.model import load_model  # noqa: E402
from tenset_curate.splits import write_split  # noqa: E402
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
    assert fine_tune_hardware(labelled_split(ds, "ft_within")) == []  # every test hardware is every training one
    assert fine_tune_hardware(few_shot, "none") == [] and fine_tune_hardware(few_shot, None) == []
    assert fine_tune_hardware(few_shot, "roller-k80,roller-mi50") == ["roller-k80", "roller-mi50"]
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
