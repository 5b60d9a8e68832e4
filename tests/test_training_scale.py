"""Training on splits bigger than memory: ``labelled_split``'s two-pass read, its per-task cap (``max_per_task``),
scoring a part from its own tasks only (``tasks_of``) and the memory check ``curate train`` runs first.

On the conftest's 24 real tasks measured on K80 and MI50 (``k80_mi50_dataset``)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from tenset_curate.cli import app
from tenset_curate.features import operator_classes
from tenset_curate.labels import with_labels
from tenset_curate.metrics import evaluate_predictions
from tenset_curate.model import load_model
from tenset_curate.prune import load_records
from tenset_curate.splits import read_split, write_split
from tenset_curate.training import (BYTES_PER_TRAINING_RECORD, check_training_memory, evaluate_model, fit_on_frame,
                                    labelled_split, part_arrays, train_model, training_frame)

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "ansor"
pytestmark = pytest.mark.skipif(not (REAL / "roller-k80").is_dir() or not (REAL / "roller-mi50").is_dir(),
                                reason="real roller-k80 / roller-mi50 logs not found")


@pytest.fixture(scope="module")
def ds(k80_mi50_dataset):
    write_split(k80_mi50_dataset, "scale_wt", "within-task", seed=3)
    write_split(k80_mi50_dataset, "scale_hw", "hardware", train_hw=["roller-k80"], test_hw=["roller-mi50"], seed=0)
    return k80_mi50_dataset


def _one_pass(dataset: Path, split: str) -> pl.DataFrame:
    """What labelled_split returned before it read in two passes: every record read whole, labelled, joined to the
    split (whose order the rows take), operator classes added, failures dropped."""
    recs = with_labels(load_records(dataset))
    sp = read_split(dataset, split).select("record_id", "part")
    df = sp.join(recs, on="record_id", how="inner", maintain_order="left")
    df = df.select(*recs.columns, "part")
    ops = operator_classes(df)
    return df.join(ops.select("task_id", "op_class"), on="task_id", how="left",
                   maintain_order="left").filter(pl.col("is_valid"))


@pytest.mark.parametrize("split", ["scale_wt", "scale_hw"])
def test_two_pass_read_gives_the_one_pass_frame(ds, split):
    got = labelled_split(ds, split)
    want = _one_pass(ds, split)
    assert got.height == want.height > 10_000
    assert got.columns == want.columns
    assert got.equals(want)


def test_max_per_task_cuts_the_training_side_only_and_keeps_label_scale(ds):
    full = labelled_split(ds, "scale_wt")
    cap = labelled_split(ds, "scale_wt", max_per_task=40, seed=1)
    side = pl.col("part").is_in(["train", "valid"])
    n_full = full.filter(side).group_by("hardware", "task_id").len()
    n_cap = cap.filter(side).group_by("hardware", "task_id").len()
    both = n_full.join(n_cap, on=["hardware", "task_id"], suffix="_cap", how="left").fill_null(0)
    assert both.height >= 40  # 24 tasks on two GPUs (a task with no valid record on one GPU is not in the split)
    assert (both["len_cap"] == np.minimum(both["len"], 40)).all()  # every task keeps min(its records, 40)
    assert (both["len"] > 40).sum() > both.height // 2  # the cap bites on most tasks
    # the test part is whole, row for row
    assert cap.filter(pl.col("part") == "test").equals(full.filter(pl.col("part") == "test"))
    # labels keep the task's scale: the best record of the whole task, kept or not
    j = cap.select("record_id", "label", "best_cost").join(full.select("record_id", "label", "best_cost"),
                                                            on="record_id", suffix="_full")
    assert j.height == cap.height
    assert (j["label"] == j["label_full"]).all() and (j["best_cost"] == j["best_cost_full"]).all()
    # kept rows are rows of the full frame, in its order
    assert cap["record_id"].is_in(full["record_id"].implode()).all()
    pos = full.with_row_index("i").join(cap.select("record_id"), on="record_id", how="semi")["i"]
    assert pos.is_sorted()


def test_max_per_task_draw_is_seeded_and_order_free(ds):
    a = labelled_split(ds, "scale_wt", max_per_task=40, seed=1)["record_id"]
    assert a.equals(labelled_split(ds, "scale_wt", max_per_task=40, seed=1)["record_id"])
    b = labelled_split(ds, "scale_wt", max_per_task=40, seed=2)["record_id"]
    assert set(a.to_list()) != set(b.to_list())
    # a record's fate depends on the seed and its id alone: a smaller cap keeps a subset of a bigger one
    small = set(labelled_split(ds, "scale_wt", max_per_task=20, seed=1)["record_id"].to_list())
    assert small < set(a.to_list())
    with pytest.raises(ValueError, match="at least 2"):
        labelled_split(ds, "scale_wt", max_per_task=1)


def test_tasks_of_reads_only_the_parts_tasks_and_scores_the_same(ds, tmp_path):
    full = labelled_split(ds, "scale_hw")
    own = labelled_split(ds, "scale_hw", tasks_of="test")
    assert set(own["hardware"].unique().to_list()) == {"roller-mi50"}
    assert own.equals(full.filter(pl.col("hardware") == "roller-mi50"))
    d = part_arrays(full, "test")
    names = (full.filter(pl.col("part") == "test").select(pl.concat_str(["hardware", "task_id"], separator="/"))
             [:, 0].unique().sort().to_list())
    s = train_model(ds, "scale_hw", "gbdt", tmp_path / "g", seed=0, progress=False, n_estimators=40)
    assert s["train_records"] > 10_000
    train_model(ds, "scale_hw", "attention", tmp_path / "a", epochs=1, seed=0, progress=False, num_threads=1)
    for kind in ("g", "a"):
        m = load_model(tmp_path / kind)
        want = evaluate_predictions(d["task_ids"], d["labels"], m.predict(d), groups=d["groups"])
        assert 0.5 < want["pca"] < 1
        # the whole part at once, and in chunks of whole tasks of about 2,000 records (a dozen chunks)
        for chunk in (10 ** 9, 2000):
            got = evaluate_model(tmp_path / kind, ds, "scale_hw", chunk_records=chunk)
            for k in ("pca", "top1", "top5", "peak5", "n_tasks", "n_records"):
                assert got[k] == want[k], (kind, chunk, k)
            assert got["by_op_class"] == want["by_op_class"]
            assert got["per_task"]["task_id"].tolist() == names  # tasks named as the records name them
            assert np.array_equal(got["per_task"]["pca"], want["per_task"]["pca"])


def test_memory_check_names_the_way_out(monkeypatch):
    import tenset_curate.training as T

    check_training_memory(1_000_000, "x", available=1_000_000 * BYTES_PER_TRAINING_RECORD)  # fits: no error
    assert T.available_memory() > 2**28  # this Linux machine says what it has
    monkeypatch.setattr(T, "available_memory", lambda: None)
    check_training_memory(10 ** 9, "x")  # a machine that does not say: no refusal
    with pytest.raises(MemoryError) as e:
        check_training_memory(9_000_000, "split network of /data/tenset", available=24 * 2**30)
    msg = str(e.value)
    assert "split network of /data/tenset" in msg and "9,000,000 records" in msg
    assert "--max-per-task" in msg and "--no-memory-check" in msg
    assert f"{24 * 2**30 // BYTES_PER_TRAINING_RECORD:,}" in msg  # how many would fit


def test_cli_train_max_per_task_and_memory_refusal(ds, tmp_path, monkeypatch):
    r = CliRunner().invoke(app, ["train", str(ds), "--split", "scale_wt", "--model", "gbdt", "--out",
                                 str(tmp_path / "cap"), "--max-per-task", "30", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["max_per_task"] == 30 and s["train_records"] <= 48 * 30
    capped = json.loads((tmp_path / "cap" / "config.json").read_text())["data_manifest_hash"]
    r = CliRunner().invoke(app, ["evaluate", str(tmp_path / "cap"), str(ds), "--split", "scale_wt", "--json"])
    assert r.exit_code == 0, r.output
    ev = json.loads(r.stdout)
    per = ev["per_task"]  # lists a notebook can read, not numpy's str() of an array
    assert len(per["task_id"]) == len(per["pca"]) == ev["n_tasks"] >= 40
    assert all(t.split("/")[0] in ("roller-k80", "roller-mi50") for t in per["task_id"])
    assert all(isinstance(x, float) and 0 <= x <= 1 for x in per["pca"])
    r = CliRunner().invoke(app, ["train", str(ds), "--split", "scale_wt", "--model", "gbdt", "--out",
                                 str(tmp_path / "cap1"), "--max-per-task", "1"])
    assert r.exit_code == 2 and "max-per-task" in r.output
    # a machine with little memory: refused before the rows are read, with the way out named
    import tenset_curate.training as T
    monkeypatch.setattr(T, "available_memory", lambda: 100 * BYTES_PER_TRAINING_RECORD)
    r = CliRunner().invoke(app, ["train", str(ds), "--split", "scale_wt", "--model", "gbdt", "--out",
                                 str(tmp_path / "big")])
    assert r.exit_code == 2
    assert "records would need about" in r.output and "--max-per-task" in r.output
    assert not (tmp_path / "big").exists()
    r = CliRunner().invoke(app, ["train", str(ds), "--split", "scale_wt", "--model", "gbdt", "--out",
                                 str(tmp_path / "big"), "--max-per-task", "30", "--no-memory-check", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "big" / "config.json").read_text())["data_manifest_hash"] == capped


def test_include_failed_trains_and_scores_the_failed_measurements_when_asked(ds, tmp_path):
    """`curate train/evaluate --include-failed`: the issue excludes failed records from training and metrics
    "unless asked for", and nothing could ask (session-30 audit). Asked, they come in with label 0; the measured
    records keep their labels."""
    from tenset_curate.training import split_index

    full = labelled_split(ds, "scale_wt")

    a, b = split_index(ds, "scale_wt"), split_index(ds, "scale_wt", include_failed=True)
    failed = b.filter(pl.col("label") == 0)
    assert failed.height > 100 and a.height + failed.height == b.height
    assert b.filter(pl.col("label") > 0).drop("op_class").equals(a.drop("op_class"))
    r = CliRunner().invoke(app, ["train", str(ds), "--split", "scale_wt", "--model", "gbdt", "--out",
                                 str(tmp_path / "f"), "--include-failed", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["failed_records_trained"] == failed.filter(pl.col("part") == "train").height
    assert s["train_records"] == b.filter(pl.col("part") == "train").height
    assert full.filter(pl.col("part") == "train").height == s["train_records"] - s["failed_records_trained"]
    scores = {}
    for flag in ([], ["--include-failed"]):
        r = CliRunner().invoke(app, ["evaluate", str(tmp_path / "f"), str(ds), "--split", "scale_wt", "--json"] + flag)
        assert r.exit_code == 0, r.output
        scores[bool(flag)] = json.loads(r.stdout)
    test = b.filter(pl.col("part") == "test")
    measured = test.group_by("hardware", "task_id").agg(pl.col("label").max()).filter(pl.col("label") > 0)
    n_with = test.join(measured.select("hardware", "task_id"), on=["hardware", "task_id"], how="semi").height
    assert scores[False]["n_records"] == test.filter(pl.col("label") > 0).height < scores[True]["n_records"] == n_with
    assert scores[True]["pca"] != scores[False]["pca"]


def test_training_reads_only_the_tasks_that_train_and_trains_the_same_model(ds, tmp_path):
    full = labelled_split(ds, "scale_hw")  # K80 trains, MI50 is tested: no MI50 task trains
    df, hp, share = training_frame(ds, "scale_hw", "attention")
    assert set(df["hardware"].unique().to_list()) == {"roller-k80"}
    assert df.equals(full.filter(pl.col("hardware") == "roller-k80"))
    assert share == 0.0 and hp["lambdarank_weight"] == 0.05 and hp["fine_tune"] == []  # decided with the test part
    wt, hp_wt, share_wt = training_frame(ds, "scale_wt", "attention")
    assert wt.equals(labelled_split(ds, "scale_wt"))  # within a task every test record's task trains: all read
    assert share_wt == 1.0 and hp_wt["lambdarank_weight"] == 0.25
    # the model train_model saves is the one trained on the whole frame, test records of other tasks included
    train_model(ds, "scale_hw", "gbdt", tmp_path / "m", seed=0, progress=False, n_estimators=40)
    ref, d = fit_on_frame(full, "gbdt", seed=0, n_estimators=40)
    test = part_arrays(full, "test")
    assert np.array_equal(load_model(tmp_path / "m").predict(test), ref.predict(test))
    train_model(ds, "scale_hw", "attention", tmp_path / "a", epochs=1, seed=0, progress=False, num_threads=1)
    ref, _ = fit_on_frame(full, "attention", seed=0, epochs=1, num_threads=1)
    assert np.array_equal(load_model(tmp_path / "a").predict(test), ref.predict(test))


def test_a_split_of_another_dataset_or_a_missing_model_is_a_clear_error(ds, tmp_path):
    """A split file whose record ids are not the dataset's (made from another dataset, or before the records were
    replaced) is refused by name before anything trains; evaluate names a model directory that is not one."""
    sp = read_split(ds, "scale_wt")
    flipped = sp.with_columns(pl.col("record_id").str.reverse())  # same shape, ids no record of the dataset has
    assert not flipped["record_id"].is_in(sp["record_id"].implode()).any()
    flipped.write_parquet(ds / "splits" / "scale_alien.parquet")
    try:
        with pytest.raises(ValueError, match="split scale_alien of .*another dataset"):
            labelled_split(ds, "scale_alien")
        r = CliRunner().invoke(app, ["train", str(ds), "--split", "scale_alien", "--model", "gbdt", "--out",
                                     str(tmp_path / "m")])
        assert r.exit_code == 2 and "another dataset" in r.output and "Traceback" not in r.output
        assert not (tmp_path / "m").exists()
    finally:
        (ds / "splits" / "scale_alien.parquet").unlink()
    r = CliRunner().invoke(app, ["evaluate", str(tmp_path / "nomodel"), str(ds), "--split", "scale_wt"])
    assert r.exit_code == 2 and "no config.json in" in r.output
    r = CliRunner().invoke(app, ["evaluate", str(tmp_path / "nomodel"), str(ds), "--split", "nosuch"])
    assert r.exit_code == 2


def test_prune_evaluate_reports_full_method_and_random_and_refuses_a_dataset_too_big_first(k80_three_logs_dataset,
                                                                                            tmp_path, monkeypatch):
    ds3 = k80_three_logs_dataset
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--out", str(tmp_path / "p"), "--evaluate",
                                 "--json"])
    assert r.exit_code == 0, r.output
    ev = ev1 = json.loads(r.stdout)["evaluation"]
    assert set(ev) == {"model", "seeds", "full", "hybrid", "random", "runs", "paired"} and ev["seeds"] == [0]
    assert ev["model"] == "proxy"
    assert all(0.5 < ev[k]["pca"] <= 1 and 0 < ev[k]["top1"] <= 1 for k in ("full", "hybrid", "random"))
    # the same proxy on the same test records: full data trains on every valid training record, both prunings on
    # the valid records of the 55% they keep (random's include failed ones it cannot train on: fewer or as many)
    assert ev["random"]["kept"] <= ev["hybrid"]["kept"]
    assert abs(ev["hybrid"]["kept"] / ev["full"]["kept"] - 0.55) < 0.03
    p = ev["paired"]
    assert p["pca_vs_full"] == pytest.approx(ev["hybrid"]["pca"] - ev["full"]["pca"], abs=1e-4)
    assert p["top1_vs_random"] == pytest.approx(ev["hybrid"]["top1"] - ev["random"]["top1"], abs=1e-4)
    assert p["pca_paired_sd"] is None  # one seed: no spread to give
    # the method asked is the one evaluated (it was always hybrid), with the pruning's min_keep, over two seeds:
    # seed 0's rows are the one-seed run's, seed 1 draws another test split, and the paired sd is the spread of the
    # per-seed differences
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--method", "cluster", "--out",
                                 str(tmp_path / "c"), "--evaluate", "--evaluate-seeds", "2", "--json"])
    assert r.exit_code == 0, r.output
    ev2 = json.loads(r.stdout)["evaluation"]
    assert ev2["seeds"] == [0, 1] and set(ev2) == {"model", "seeds", "full", "cluster", "random", "runs", "paired"}
    runs = {(x["method"], x["seed"]): x for x in ev2["runs"]}
    assert set(runs) == {(m, s) for m in ("full", "cluster", "random") for s in (0, 1)}
    assert {k: runs[("full", 0)][k] for k in ("pca", "top1", "kept")} == \
        {k: ev["full"][k] for k in ("pca", "top1", "kept")}
    assert runs[("random", 0)]["pca"] == ev["random"]["pca"]
    assert runs[("full", 1)]["kept"] != runs[("full", 0)]["kept"] or runs[("full", 1)]["pca"] != ev["full"]["pca"]
    d = [runs[("cluster", s)]["pca"] - runs[("random", s)]["pca"] for s in (0, 1)]
    assert ev2["paired"]["pca_vs_random"] == pytest.approx(sum(d) / 2, abs=1e-4)
    assert ev2["paired"]["pca_paired_sd"] == pytest.approx(abs(d[0] - d[1]) / 2 ** 0.5, abs=1e-4)
    # the pruned dataset keeps the evaluation: in prune.json, and as the last section of its report; a re-run
    # replaces that section (one, the same), it does not add a second
    out_c = tmp_path / "c"
    assert json.loads((out_c / "prune.json").read_text())["evaluation"] == ev2
    rep = (out_c / "prune_report.md").read_text()
    assert rep.count("## Proxy evaluation") == 1 and rep.index("## Kept per task") < rep.index("## Proxy evaluation")
    assert f"| cluster | {ev2['cluster']['pca']:.4f} |" in rep and "Seeds 0, 1 (each its own" in rep
    assert f"PCA {100 * ev2['paired']['pca_vs_random']:+.2f} (paired sd" in rep
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--method", "cluster", "--out",
                                 str(out_c), "--evaluate", "--evaluate-seeds", "2", "--json"])
    assert r.exit_code == 0, r.output
    rep2 = (out_c / "prune_report.md").read_text()  # the same but for the time taken, in the first lines
    assert rep2.count("## Proxy evaluation") == 1 and rep2[rep2.index("## Kept"):] == rep[rep.index("## Kept"):]
    assert "## Proxy evaluation" in (tmp_path / "p" / "prune_report.md").read_text()
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--out", str(tmp_path / "t"), "--evaluate"])
    assert r.exit_code == 0 and "hybrid against full data, in points: PCA" in r.output, r.output
    assert "(one seed: no sd)" in r.output
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--method", "random", "--out",
                                 str(tmp_path / "r"), "--evaluate", "--json"])
    ev = json.loads(r.stdout)["evaluation"]  # random is its own control: evaluated once, no difference to itself
    assert set(ev) == {"model", "seeds", "full", "random", "runs", "paired"} and set(ev["paired"]) == {"pca_vs_full",
                                                                                                "top1_vs_full"}
    assert len(ev["runs"]) == 2 and "Against random" not in (tmp_path / "r" / "prune_report.md").read_text()
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--out", str(tmp_path / "z"), "--evaluate",
                                 "--evaluate-seeds", "0"])
    assert r.exit_code == 2 and "--evaluate-seeds must be at least 1" in r.output
    # --evaluate-model: the model the product trains judges the same pruned records on the same test split
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--out", str(tmp_path / "a"), "--evaluate",
                                 "--evaluate-model", "attention", "--json"])
    assert r.exit_code == 0, r.output
    eva = json.loads(r.stdout)["evaluation"]
    assert eva["model"] == "attention" and eva["seeds"] == [0]
    runs_p = {x["method"]: x for x in ev1["runs"]}
    runs_a = {x["method"]: x for x in eva["runs"]}
    assert {m: runs_a[m]["kept"] for m in runs_a} == {m: runs_p[m]["kept"] for m in runs_p}  # the same selections
    assert [runs_a[m]["pca"] for m in ("full", "hybrid", "random")] != [runs_p[m]["pca"] for m in ("full", "hybrid",
                                                                                                    "random")]
    assert all(0.5 < eva[m]["pca"] <= 1 for m in ("full", "hybrid", "random"))
    rep = (tmp_path / "a" / "prune_report.md").read_text()
    assert "The product's attention model (trained as `curate train` trains it" in rep
    assert f"| hybrid | {eva['hybrid']['pca']:.4f} |" in rep
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--out", str(tmp_path / "x"), "--evaluate",
                                 "--evaluate-model", "xgb"])
    assert r.exit_code == 2 and "--evaluate-model must be one of proxy, attention, gbdt, mlp" in r.output
    assert not (tmp_path / "x").exists()  # refused before pruning
    # a machine too small for the evaluation: refused before the pruning runs, the way out named
    import tenset_curate.training as T
    monkeypatch.setattr(T, "available_memory", lambda: 100 * BYTES_PER_TRAINING_RECORD)
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--out", str(tmp_path / "q"), "--evaluate"])
    assert r.exit_code == 2 and "curate prune --evaluate on" in r.output and "without --evaluate" in r.output
    assert not (tmp_path / "q").exists()
    r = CliRunner().invoke(app, ["prune", str(ds3), "--ratio", "0.45", "--out", str(tmp_path / "q")])
    assert r.exit_code == 0, r.output  # pruning alone streams units: no check
