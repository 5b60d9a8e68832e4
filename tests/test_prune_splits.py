"""Pruning invariants and split construction on real logs."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from tenset_curate.convert import convert
from tenset_curate.labels import with_labels
from tenset_curate.prune import METHODS, allocate, load_records, prune, select
from tenset_curate.schema import RECORD_SCHEMA
from tenset_curate.splits import make_split, read_split, write_split

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata"
pytestmark = pytest.mark.skipif(not REAL.exists(), reason="../shared/realdata not present")


@pytest.fixture(scope="module")
def pooling(tmp_path_factory):
    """13 real K80 pooling tasks (12,720 records) plus one file converted twice under another name."""
    root = tmp_path_factory.mktemp("pool")
    logs = root / "k80"
    shutil.copytree(REAL / "ansor" / "roller-k80" / "pooling", logs)
    first = sorted(logs.glob("*.gz"))[0]
    lines = gzip.open(first).read().split(b"\n")[:50]
    (logs / "again.json").write_bytes(b"\n".join(lines) + b"\n")  # 50 re-measurements of the same schedules
    ds = root / "ds"
    convert([logs], ds, workers=2, group_bytes=1)  # a shard per log (so prune's units have whole shards to pack)
    return ds


def test_allocate_sums_exactly_and_respects_minimums():
    sizes = np.array([1000, 500, 3, 10, 0])
    a = allocate(sizes, 700, 8)
    assert a.sum() == 700 and (a <= sizes).all() and (a >= np.minimum(sizes, 8)).all()


@pytest.mark.parametrize("power", [0.5, 0.75, 1.5])
def test_allocate_with_a_power_keeps_the_same_invariants(power):
    sizes = np.array([2000, 1000, 1000, 70, 12, 3, 0])
    for total in (5, 40, 700, 2500, 4085, 5000):
        a = allocate(sizes, total, 8, power)
        assert (a <= sizes).all() and (a >= np.minimum(sizes, 8)).all()
        assert a.sum() == max(min(total, sizes.sum()), np.minimum(sizes, 8).sum())
        uncapped = (a > np.minimum(sizes, 8)) & (a < sizes)
        share = a[uncapped] / sizes[uncapped].astype(float) ** power  # kept ~ size**power where not capped
        assert share.size < 2 or share.max() - share.min() <= 1.0 / sizes[uncapped].astype(float).min() ** power
    # below 1, a large task gives up a larger share than a small one; above 1, a smaller share
    a, b = allocate(sizes, 1500, 8, power), allocate(sizes, 1500, 8)
    assert (a[0] < b[0]) if power < 1 else (a[0] > b[0])


def test_allocation_power_moves_hybrids_budget_but_never_the_random_control(pooling, monkeypatch):
    import tenset_curate.prune as pr

    df = with_labels(load_records(pooling))
    before = {m: select(df, 0.45, m, seed=1, min_keep=8)[0] for m in ("hybrid", "random")}
    monkeypatch.setattr(pr, "HYBRID_ALLOCATION_POWER", 0.5)
    after = {m: select(df, 0.45, m, seed=1, min_keep=8)[0] for m in ("hybrid", "random")}
    assert (before["random"] == after["random"]).all()
    t = df["task_id"].to_numpy()
    per_task = lambda keep: np.unique(t[keep], return_counts=True)[1]  # noqa: E731
    assert not np.array_equal(per_task(before["hybrid"]), per_task(after["hybrid"]))
    assert after["hybrid"].sum() == before["hybrid"].sum()


@pytest.mark.parametrize("method", [m for m in METHODS])
def test_prune_invariants(pooling, method):
    df = with_labels(load_records(pooling))
    keep, info = select(df, 0.45, method, seed=3, min_keep=8)
    keep2, _ = select(df, 0.45, method, seed=3, min_keep=8)
    assert (keep == keep2).all(), "not deterministic for a seed"
    achieved = 1 - keep.sum() / len(keep)
    assert abs(achieved - 0.45) <= 0.01
    kept = df.filter(pl.Series(keep))
    # every task keeps its best valid record and at least min(8, size) records
    best = df.filter(pl.col("is_valid")).group_by("hardware", "task_id").agg(pl.col("label").max())
    kb = kept.filter(pl.col("is_valid")).group_by("hardware", "task_id").agg(pl.col("label").max())
    j = best.join(kb, on=["hardware", "task_id"], suffix="_kept")
    assert j.height == best.height and (j["label"] == j["label_kept"]).all()
    sizes = df.group_by("task_id").len().join(kept.group_by("task_id").len(), on="task_id", suffix="_k")
    assert (sizes["len_k"] >= sizes["len"].clip(upper_bound=8)).all()


def test_redundancy_merges_remeasurements(pooling):
    df = with_labels(load_records(pooling))
    keep, info = select(df, 0.0, "redundancy", seed=0)
    assert info["duplicates"] >= 50  # the 50 re-measured lines at least
    assert keep.sum() == df.height - info["duplicates"]


def test_prune_writes_same_schema_and_report(pooling, tmp_path):
    s = prune(pooling, tmp_path / "p", 0.5, "hybrid", seed=0)
    assert abs(s["ratio_achieved"] - 0.5) <= 0.01
    files = sorted((tmp_path / "p" / "records").glob("*/*.parquet"))
    assert files and all(pq.read_schema(f).equals(RECORD_SCHEMA) for f in files)
    rep = (tmp_path / "p" / "prune_report.md").read_text()
    assert "Kept per operator class" in rep and "Label distribution" in rep
    again = prune(pooling, tmp_path / "p2", 0.5, "hybrid", seed=0)
    assert again["records_after"] == s["records_after"]
    assert [f.read_bytes() for f in files] == [f.read_bytes() for f in sorted((tmp_path / "p2" / "records").glob("*/*.parquet"))]


def test_prune_refuses_to_write_over_or_inside_its_source(pooling):
    """--out at the source dataset replaced its records with the kept ones and said nothing; inside it, the pruned
    shards would sit in the source's folder. Both are refused before anything is written."""
    before = sorted((p.relative_to(pooling), p.stat().st_mtime_ns) for p in pooling.rglob("*") if p.is_file())
    for out in (pooling, pooling / ".", pooling / "pruned", pooling.parent):
        with pytest.raises(ValueError, match="apart from the source dataset"):
            prune(pooling, out, 0.45, "random", seed=0)
    assert sorted((p.relative_to(pooling), p.stat().st_mtime_ns) for p in pooling.rglob("*") if p.is_file()) == before
    assert not (pooling / "pruned").exists()



def test_prune_replaces_only_an_earlier_prune_output(pooling, tmp_path):
    """Found by the Python API audit (session 29): an --out holding another, converted dataset was replaced by the
    kept records (29,840 -> 1,650) without a word. Such a folder is refused; an earlier prune's output is
    replaced, as a re-run must."""
    other = tmp_path / "other"
    convert([REAL / "ansor" / "roller-k80" / "depthwise"], other)
    before = sorted((p.relative_to(other), p.read_bytes()) for p in other.rglob("*.parquet"))
    with pytest.raises(ValueError, match="holds a dataset that curate prune did not write"):
        prune(pooling, other, 0.45, "random", seed=0)
    assert sorted((p.relative_to(other), p.read_bytes()) for p in other.rglob("*.parquet")) == before
    first = prune(pooling, tmp_path / "p", 0.45, "random", seed=0)
    second = prune(pooling, tmp_path / "p", 0.6, "random", seed=0)  # an earlier prune's output: replaced
    assert load_records(tmp_path / "p").height == second["records_after"] < first["records_after"]


def test_a_prune_killed_while_putting_its_files_in_place_is_refused_not_mixed(pooling, tmp_path, monkeypatch):
    """Found by the kill audit (session 29): prune renamed its files into place one by one, so a kill in between left
    one hardware's shard of the new pruning beside the other's of the earlier one (14,207 records: neither 10,188
    nor 16,301) under the earlier prune.json. The manifest now says "incomplete" until every file is in place and
    the earlier ones are gone; readers refuse that state, and the same command again repairs it."""
    from tenset_curate import prune as P
    from tenset_curate.storage import IncompleteDataset

    out = tmp_path / "p"
    prune(pooling, out, 0.5, "random", seed=0)
    real = os.replace
    calls = []

    class Killed(BaseException):
        pass

    def replace_then_die(src, dst):  # killed after the first file of the commit went into place
        if ".stage.tmp-" in str(src) and ".stage.tmp-" not in str(dst):
            calls.append(dst)
            if len(calls) == 2:
                raise Killed
        real(src, dst)

    monkeypatch.setattr(P.os, "replace", replace_then_die)
    with pytest.raises(Killed):
        prune(pooling, out, 0.2, "random", seed=0)
    monkeypatch.undo()
    with pytest.raises(IncompleteDataset, match="a curate prune was interrupted while it put its files in place"):
        load_records(out, ["record_id"])
    s = prune(pooling, out, 0.2, "random", seed=0)
    assert load_records(out, ["record_id"]).height == s["records_after"]
    fresh = prune(pooling, tmp_path / "fresh", 0.2, "random", seed=0)
    assert sorted(load_records(out, ["record_id"])["record_id"]) == sorted(
        load_records(tmp_path / "fresh", ["record_id"])["record_id"]) and fresh["records_after"] == s["records_after"]


def test_a_splits_record_travels_in_its_parquet_file_and_leftovers_go(pooling, tmp_path):
    """Found by the kill audit (session 29): a kill between a split's two files left w.parquet of seed 1 beside
    w.json of seed 0 with other counts, and training reads the record to decide fine-tuning. The record now lives in
    the Parquet file's footer (the JSON is for people); and a killed splits make's temporary files, which only a
    convert removed, go at the next splits make."""
    from tenset_curate.splits import split_info

    ds = tmp_path / "ds"
    shutil.copytree(pooling, ds)
    write_split(ds, "w", "within-task", seed=0)
    old_json = (ds / "splits" / "w.json").read_bytes()
    (ds / "splits" / "w.parquet.tmp-99999").write_bytes(b"half a file")  # a killed run's leftovers
    (ds / "catalog.duckdb.tmp-99999-1").write_bytes(b"")
    info = write_split(ds, "w", "within-task", seed=1, test_fraction=0.2)
    assert not list(ds.rglob("*.tmp-*"))
    (ds / "splits" / "w.json").write_bytes(old_json)  # killed after the Parquet file, before the JSON
    got = split_info(ds, "w")
    assert (got["seed"], got["test_fraction"], got["counts"]) == (1, 0.2, info["counts"])
    assert got["counts"] != __import__("json").loads(old_json)["counts"]


def test_values_a_notebook_passes_are_refused_before_any_folder_is_made(pooling, tmp_path):
    """Found by the Python API audit (session 29): the CLI refused these, the functions ran with them (min_keep -5
    stored as given, workers 0, seeds=0 evaluated one seed) or failed deep inside (ratio "0.45", seed None) after
    making the output folder; convert(executor="foo") left a folder holding only its lock."""
    from tenset_curate.evaluate_prune import evaluate_pruning

    out = tmp_path / "o"
    for kw, match in (({"ratio": "0.45"}, r"ratio '0.45': the fraction removed"),
                      ({"seed": None}, r"seed None: an integer"), ({"min_keep": -5}, r"min_keep -5: an integer, at "
                                                                                     r"least 0"),
                      ({"workers": 0}, r"workers 0: an integer, at least 1"),
                      ({"executor": "foo"}, r"unknown executor 'foo'")):
        with pytest.raises(ValueError, match=match):
            prune(pooling, out, **{"ratio": 0.45, **kw})
        assert not out.exists()
    with pytest.raises(ValueError, match=r"seeds 0: how many seeds"):
        evaluate_pruning(pooling, 0.45, seeds=0)
    for kw, match in (({"workers": 0}, r"workers 0"), ({"hardware": ""}, r"hardware '': a name"),
                      ({"executor": "foo"}, r"unknown executor 'foo'")):
        with pytest.raises(ValueError, match=match):
            convert([REAL / "ansor" / "roller-k80" / "pooling"], out, **kw)
        assert not out.exists()
    one = sorted((REAL / "ansor" / "roller-k80" / "pooling").glob("*.gz"))[0]
    assert convert(str(one), out)["inputs_converted"] == 1  # one input as a string: it was read char by char


@pytest.mark.parametrize("method", ["hybrid", "random"])
def test_streaming_units_keep_what_in_memory_select_keeps(pooling, tmp_path, method):
    """prune() cuts the dataset into units of whole tasks; with units of ~2,000 records (7 units here) it keeps
    exactly the records select() keeps on the whole frame, and 2 worker processes write the same bytes as 1."""
    from tenset_curate.prune import plan_units

    units = plan_units(pooling, 2000)
    assert len(units) >= 5
    shards = [s for u in units for s in u["shards"]]
    assert sorted(shards) == sorted(set(shards))  # every shard in exactly one unit
    df = with_labels(load_records(pooling))
    keep, info = select(df, 0.6, method, seed=5)
    s1 = prune(pooling, tmp_path / "u1", 0.6, method, seed=5, unit_records=2000)
    assert s1["units"] == len(units)
    got = load_records(tmp_path / "u1")
    assert sorted(got["record_id"].to_list()) == sorted(df.filter(pl.Series(keep))["record_id"].to_list())
    assert s1.get("duplicates", 0) == info.get("duplicates", 0)
    if method == "hybrid":  # kept representatives absorbed their duplicates' costs, across unit boundaries too
        j = got.select("record_id", pl.col("costs").list.len().alias("n_out")).join(
            df.select("record_id", pl.col("costs").list.len().alias("n_in")), on="record_id")
        assert info["duplicates"] >= 50 and (j["n_out"] > j["n_in"]).sum() >= 1
    s2 = prune(pooling, tmp_path / "u2", 0.6, method, seed=5, unit_records=2000, workers=2)
    f1 = sorted((tmp_path / "u1" / "records").glob("*/*.parquet"))
    f2 = sorted((tmp_path / "u2" / "records").glob("*/*.parquet"))
    assert [f.name for f in f1] == [f.name for f in f2] and len(f1) == len(units)
    assert [f.read_bytes() for f in f1] == [f.read_bytes() for f in f2]
    assert (tmp_path / "u1" / "prune_report.md").read_text().split("s; ")[1:] == \
        (tmp_path / "u2" / "prune_report.md").read_text().split("s; ")[1:]
    assert s2["records_after"] == s1["records_after"]


def test_task_selection_does_not_depend_on_other_tasks(pooling):
    """Each task draws from its own stream: dropping half of the tasks leaves the others' random picks unchanged
    when their allocation is unchanged (no pruning budget to share: ratio 0 of a pool cut to min_keep)."""
    df = with_labels(load_records(pooling))
    tasks = sorted(df["task_id"].unique().to_list())
    half = df.filter(pl.col("task_id").is_in(tasks[::2]))
    # keep exactly min_keep per task in both: the allocation of each task is the same, so its picks must be
    keep_all, _ = select(df, 0.99, "random", seed=1, min_keep=20)
    keep_half, _ = select(half, 0.99, "random", seed=1, min_keep=20)
    a = set(df.filter(pl.Series(keep_all) & pl.col("task_id").is_in(tasks[::2]))["record_id"].to_list())
    b = set(half.filter(pl.Series(keep_half))["record_id"].to_list())
    assert a == b and len(a) >= 20 * len(tasks[::2]) - 5


def test_within_task_split_deterministic_and_per_task(pooling):
    recs = load_records(pooling, ["record_id", "hardware", "task_id", "workload_key"])
    a, _ = make_split(recs, "within-task", seed=1)
    b, _ = make_split(recs.sample(fraction=1.0, shuffle=True, seed=9), "within-task", seed=1)
    assert a.equals(b)  # independent of row order
    per = a.group_by("task_id").agg((pl.col("part") == "test").mean().alias("f"), pl.len())
    assert per.filter(pl.col("len") > 50)["f"].is_between(0.07, 0.13).all()


@pytest.fixture(scope="module")
def netdata(tmp_path_factory):
    ds = tmp_path_factory.mktemp("net") / "ds"
    convert([REAL / "ansor" / "tvm-ci-logs", REAL / "network_info"], ds)
    return ds


def test_network_split_never_puts_a_shared_task_in_both(netdata):
    nets = pl.read_parquet(str(netdata / "networks/*.parquet"))
    # make a second "network" that shares tasks with resnet_50, to exercise the shared-task rule
    other = nets.head(10).with_columns(pl.lit("other_net").alias("network"))
    allnets = pl.concat([nets, other])
    recs = load_records(netdata, ["record_id", "hardware", "task_id", "workload_key"])
    assert recs["workload_key"].is_in(nets["workload_key"].to_list()).sum() > 0  # logs name network tasks
    table, info = make_split(recs, "network", holdout=["resnet_50"], networks=allnets)
    assert info["shared_tasks_removed_from_train"] > 0
    tr = set(table.filter(pl.col("part") != "test")["task_id"])
    te = set(table.filter(pl.col("part") == "test")["task_id"])
    assert te and not (tr & te)
    test_keys = set(nets["workload_key"])
    joined = table.join(recs, on="record_id")
    assert joined.filter(pl.col("part") == "test")["workload_key"].is_in(list(test_keys)).all()


def test_operator_and_hardware_splits(tmp_path):
    ds = tmp_path / "ds"
    convert([REAL / "ansor" / "roller-k80" / "depthwise", REAL / "ansor" / "roller-k80" / "pooling"], ds,
            hardware=None)
    info = write_split(ds, "no_dw", "operator", holdout=["depthwise"])
    sp = read_split(ds, "no_dw").join(load_records(ds, ["record_id", "workload_name"]), on="record_id")
    assert sp.filter(pl.col("part") == "test")["workload_name"].str.contains("depthwise").all()
    assert not sp.filter(pl.col("part") != "test")["workload_name"].str.contains("depthwise").any()
    assert info["counts"]["test"] > 0
    from tenset_curate.catalog import run_sql

    out = run_sql(ds, "SELECT part, count(*) AS n FROM split_no_dw GROUP BY part ORDER BY part", fmt="json")
    assert '"test"' in out
    # hardware-wise: the two logs' folders name two hardware; one trains, the other is tested, every record once
    info = write_split(ds, "hw", "hardware", train_hw=["depthwise"], test_hw=["pooling"])
    sp = read_split(ds, "hw").join(load_records(ds, ["record_id", "hardware"]), on="record_id")
    assert set(sp.filter(pl.col("part") == "test")["hardware"]) == {"pooling"}
    assert set(sp.filter(pl.col("part") != "test")["hardware"]) == {"depthwise"}
    assert sum(info["counts"].values()) == sp.height == load_records(ds, ["record_id"]).height
    assert info["counts"]["test"] == sp.filter(pl.col("hardware") == "pooling").height > 0


def test_logs_of_one_record_per_task_split_with_a_warning_and_do_not_evaluate(tmp_path):
    """The TVM CI logs hold one or two records per task: a within-task split of them has no test part. It was made
    without a word, and only curate evaluate said so."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    ds = tmp_path / "ci"
    convert([REAL / "ansor" / "tvm-ci-logs"], ds)
    r = CliRunner().invoke(app, ["splits", "make", str(ds), "--scheme", "within-task", "--name", "w", "--json"])
    assert r.exit_code == 0, r.output
    assert "warning: split w has no test records (every task is too small to hold some out)" in r.output
    assert read_split(ds, "w").filter(pl.col("part") == "test").height == 0
    r = CliRunner().invoke(app, ["splits", "make", str(ds), "--scheme", "task", "--name", "t"])
    assert r.exit_code == 0 and "warning" not in r.output, r.output  # whole tasks held out: both parts exist
    # pruning them works; evaluating the pruning has nothing to test on, and says so (it printed PCA nan, and
    # once GBDT refused pairless training data, a traceback)
    r = CliRunner().invoke(app, ["prune", str(ds), "--ratio", "0.45", "--out", str(tmp_path / "p"), "--evaluate"])
    assert r.exit_code == 2 and "cannot evaluate pruning on" in r.output, r.output
    assert isinstance(r.exception, SystemExit) and (tmp_path / "p" / "prune.json").is_file()


def test_identical_lines_join_their_split_once(tmp_path):
    """bennu's MetaSchedule database repeats some records line for line; their record_ids (hashes of the line) are
    equal, and the split held one row per record, so every join of the split to the records on record_id counted
    them twice over (README query 4: 24 rows too many)."""
    from tenset_curate.catalog import run_sql

    ds = tmp_path / "ds"
    convert([REAL / "metaschedule" / "bennu-a100-resnet34"], ds)
    recs = load_records(ds, ["record_id"])
    assert recs.height > recs["record_id"].n_unique()  # the real log has repeated lines
    info = write_split(ds, "w", "within-task", seed=0)
    assert sum(info["counts"].values()) == recs.height  # counts are records
    [row] = run_sql(ds, "SELECT count(*) AS n FROM split_w s JOIN records r USING (record_id)", "arrow").to_pylist()
    assert row["n"] == recs.height
    sp = read_split(ds, "w")
    assert sp.height == sp["record_id"].n_unique()


def test_split_names_that_leave_the_folder_or_share_a_view_are_refused(tmp_path):
    """'../evil' wrote the split outside the dataset; 'x-y' beside 'x_y' (or 'Foo' beside 'foo') took over the SQL view
    split_x_y without a word."""
    from tenset_curate.catalog import run_sql

    ds = tmp_path / "ds"
    convert([REAL / "ansor" / "roller-k80" / "pooling"], ds)
    write_split(ds, "x_y", "within-task", seed=0)
    for bad, why in (("../evil", "use letters"), ("a/b", "use letters"), ("", "use letters"),
                     ("x-y", "already has its SQL view split_x_y"), ("X_Y", "already has its SQL view")):
        with pytest.raises(ValueError, match=why):
            write_split(ds, bad, "task", seed=0)
    assert not (tmp_path / "evil.parquet").exists() and sorted(p.name for p in (ds / "splits").iterdir()) == [
        "x_y.json", "x_y.parquet"]
    for opt, v in (("test_fraction", 1.0), ("valid_fraction", -0.1), ("few_shot", 1.5)):  # shares of the records
        with pytest.raises(ValueError, match="a share of the records"):
            write_split(ds, "f", "hardware" if opt == "few_shot" else "within-task", **{opt: v},
                        **({"train_hw": ["pooling"], "test_hw": ["pooling"]} if opt == "few_shot" else {}))
    write_split(ds, "tasks@1", "within-task", seed=1)  # the benchmarks' NAME@SEED names still work
    [row] = run_sql(ds, "SELECT count(*) AS n FROM split_tasks_1", "arrow").to_pylist()
    assert row["n"] > 0


def test_split_names_that_match_nothing_and_options_of_another_scheme_are_refused(netdata, tmp_path):
    """A held-out network, hardware or operator class the data does not have, or an option the scheme does not
    use, is an error naming it and what the data has; before, a misspelt network gave a split with no test part
    and exit code 0, and a misspelt class next to a real one held out the real one only."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    nets = sorted(set(pl.read_parquet(str(netdata / "networks/*.parquet"))["network"].drop_nulls()))
    hw = sorted(set(load_records(netdata, ["hardware"])["hardware"]))
    with pytest.raises(ValueError, match=r"network\(s\) \['resnet_5O'\] not in the networks table; it has "
                                         + re.escape(str(nets))):
        write_split(netdata, "typo", "network", holdout=["resnet_5O"])
    with pytest.raises(ValueError, match=r"hardware \['k8O'\] not in the dataset; it has " + re.escape(str(hw))):
        write_split(netdata, "typo", "hardware", train_hw=[hw[0]], test_hw=["k8O"])
    for kw, opt in [({"holdout": ["dense"]}, "--holdout"), ({"few_shot": 0.1}, "--few-shot"),
                    ({"train_hw": [hw[0]]}, "--train-hw")]:
        with pytest.raises(ValueError, match=f"{opt} do\\(es\\) not apply to a within-task split"):
            write_split(netdata, "typo", "within-task", **kw)
    assert not (netdata / "splits" / "typo.parquet").exists()
    r = CliRunner().invoke(app, ["splits", "make", str(netdata), "--scheme", "network", "--holdout", "bert_bsae",
                                 "--name", "typo"])
    assert r.exit_code != 0 and "['bert_bsae'] not in the networks table" in r.output
    ok = write_split(netdata, "one_net", "network", holdout=[nets[0]])  # a real name still works
    assert ok["counts"]["test"] > 0

    ds = tmp_path / "ds"
    convert([REAL / "ansor" / "roller-k80" / "pooling"], ds)
    with pytest.raises(ValueError, match=r"no task of class \['dpethwise'\] in the data; it has \['pooling'\]"):
        write_split(ds, "typo", "operator", holdout=["pooling", "dpethwise"])
    # found by the Python API audit (session 29): one name as a string was read a character at a time (classes
    # ['d', 'e', ...]); a hardware both trained and tested on gave a split without a train part, silently
    with pytest.raises(ValueError, match=r"no task of class \['dpethwise'\] in the data"):
        write_split(ds, "typo", "operator", holdout="dpethwise")
    assert write_split(ds, "one_class", "operator", holdout="pooling")["counts"]["test"] > 0
    with pytest.raises(ValueError, match=re.escape(f"hardware {[hw[0]]} is in both --train-hw and --test-hw")):
        write_split(netdata, "typo", "hardware", train_hw=hw, test_hw=[hw[0]])
    with pytest.raises(ValueError, match=r"--test-fraction '0.2': a share"):
        write_split(ds, "typo", "within-task", test_fraction="0.2")


@pytest.mark.parametrize("block", [None, 300])
def test_cluster_representatives_cover_the_label_range(pooling, monkeypatch, block):
    """The label is a k-means coordinate: at 10% kept, the representatives' labels follow each task's label
    distribution more closely than those of a k-means on the schedule features alone (Kolmogorov-Smirnov
    distance, mean over the real pooling tasks). Also when a task is clustered in blocks (block=300: every
    pooling task is bigger than that)."""
    from tenset_curate import prune as pr
    from tenset_curate.features import featurize

    if block is not None:
        monkeypatch.setattr(pr, "CLUSTER_BLOCK", block)

    df = with_labels(load_records(pooling)).filter(pl.col("is_valid"))
    flat = featurize(df)["flat"]
    labels = df["label"].to_numpy()
    groups = df["task_id"].to_numpy()

    def ks(weight):
        monkeypatch.setattr(pr, "CLUSTER_LABEL_WEIGHT", weight)
        out = []
        for t in np.unique(groups):
            idx = np.flatnonzero(groups == t)
            if len(idx) < 200:
                continue
            sel = pr._cluster_select(idx, len(idx) // 10, flat, labels, np.random.default_rng(0))
            assert len(sel) == len(idx) // 10 and len(np.unique(sel)) == len(sel) and np.isin(sel, idx).all()
            grid = np.sort(labels[idx])
            cdf_all = np.arange(1, len(grid) + 1) / len(grid)
            cdf_sel = np.searchsorted(np.sort(labels[sel]), grid, side="right") / len(sel)
            out.append(np.abs(cdf_all - cdf_sel).max())
        assert len(out) >= 5
        return float(np.mean(out))

    with_label, features_only = ks(3.0), ks(0.0)
    # measured on these 13 tasks: 0.19 with the label (weight 3), 0.25 without it
    assert with_label < 0.85 * features_only, (with_label, features_only)


def test_representatives_are_farthest_first_when_most_of_a_task_stays(pooling):
    """Where at least ``KCENTER_FROM`` of a pool stays, ``_cluster_select`` picks farthest-first (k-center): each pick
    is the record farthest from the picks before it (checked against a plain loop), so the dropped records lie
    closer to a kept one than k-means representatives leave them (covering radius, real pooling tasks). Below the
    share it keeps the k-means representatives."""
    from tenset_curate import prune as pr
    from tenset_curate.features import featurize

    df = with_labels(load_records(pooling)).filter(pl.col("is_valid"))
    flat = featurize(df)["flat"]
    labels = df["label"].to_numpy()
    groups = df["task_id"].to_numpy()
    radius = {"kcenter": [], "kmeans": []}
    for t in np.unique(groups):
        idx = np.flatnonzero(groups == t)[:pr.CLUSTER_BLOCK]  # one block: the picks of one _kcenter_pick call
        if len(idx) < 200:
            continue
        x = pr._on_grid(pr.cluster_coordinates(idx, flat, labels)) / pr.KMEANS_GRID
        k = int(np.ceil(pr.KCENTER_FROM * len(idx))) + 3
        sel = pr._cluster_select(idx, k, flat, labels, np.random.default_rng(0))
        assert np.array_equal(sel, pr._cluster_select(idx, k, flat, labels, np.random.default_rng(0)))
        first = int(np.random.default_rng(0).integers(len(idx)))
        ref, d = [first], ((x - x[first]) ** 2).sum(1)
        for _ in range(k - 1):
            ref.append(int(np.argmax(d)))
            d = np.minimum(d, ((x - x[ref[-1]]) ** 2).sum(1))
        assert np.array_equal(sel, idx[np.sort(ref)])
        km = idx[pr._kmeans_pick(pr.cluster_coordinates(idx, flat, labels), k, np.random.default_rng(0))]
        for name, kept in (("kcenter", sel), ("kmeans", km)):
            pos = np.searchsorted(idx, kept)
            dist = ((x[:, None, :] - x[None, pos, :]) ** 2).sum(2).min(1)
            radius[name].append(float(np.sqrt(dist.max())))
        # under the share: the k-means representatives, as before
        small = len(idx) // 4
        assert np.array_equal(pr._cluster_select(idx, small, flat, labels, np.random.default_rng(1)), idx[
            pr._kmeans_pick(pr.cluster_coordinates(idx, flat, labels), small, np.random.default_rng(1))])
    assert len(radius["kcenter"]) >= 5
    assert all(a < b for a, b in zip(radius["kcenter"], radius["kmeans"])), radius


def test_importance_scores_a_task_bigger_than_a_lightgbm_query(pooling):
    """A task with more than 2 x 10,000 records (one fold over LightGBM's query limit) is scored, not a crash:
    the real pooling records, repeated into one task of 21,000."""
    from tenset_curate import prune as pr
    from tenset_curate.features import featurize

    df = with_labels(load_records(pooling)).filter(pl.col("is_valid")).head(3000)
    flat = featurize(df)["flat"]
    reps = -(-21_000 // df.height)
    big = np.tile(flat, (reps, 1))[:21_000]
    labels = np.tile(df["label"].to_numpy(), reps)[:21_000]
    score = pr.importance_scores({"flat": big}, labels, np.zeros(21_000, np.int64), np.ones(21_000, bool), seed=0)
    assert score.shape == (21_000,) and np.isfinite(score).all() and score.max() > 0


def test_analyze_a_hardware_split_on_real_logs(k80_mi50_dataset, tmp_path):
    """``curate splits analyze`` of a K80 -> MI50 split: the report, its label and Spearman plots (the Spearman
    section once called an unimported helper and failed with NameError), and a Spearman table built from the
    programs measured on both GPUs."""
    from tenset_curate.splits import analyze

    import matplotlib

    write_split(k80_mi50_dataset, "analyze_hw", "hardware", train_hw="roller-k80", test_hw=("roller-mi50",),
                seed=np.int64(0))  # one name as a string, a tuple, a NumPy seed: as a notebook passes them
    backend = matplotlib.get_backend()
    matplotlib.use("svg")  # a notebook's own backend (its inline one) stays: analyze set Agg for the process
    try:
        p = analyze(k80_mi50_dataset, "analyze_hw", tmp_path / "rep")
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(backend)
    md = p.read_text()
    assert sorted(f.name for f in p.parent.iterdir()) == ["analyze_hw.md", "analyze_hw_labels.png",
                                                          "analyze_hw_spearman.png"]
    assert not [f for f in p.parent.iterdir() if ".tmp" in f.name]
    sec = md.split("## Ranking transfer between hardware")[1]
    shared = int(sec.split("programs measured on both: ")[1].split(";")[0])
    rows = [ln for ln in sec.splitlines() if ln.startswith("| `")]
    assert shared > 100 and rows
    rho = [float(ln.rsplit("|", 2)[1]) for ln in rows]
    assert all(-1 <= r <= 1 for r in rho) and np.median(rho) > 0.5  # the same programs rank alike on both GPUs
    # the task counts: each side's and the overlap (the line said "tasks on both: A / B", the two sides' counts)
    recs = load_records(k80_mi50_dataset, ["hardware", "workload_key", "is_valid"]).filter(pl.col("is_valid"))
    keys = {h: set(recs.filter(pl.col("hardware") == h)["workload_key"]) for h in ("roller-k80", "roller-mi50")}
    want = (f"- tasks: {len(keys['roller-k80'])} on the training hardware, {len(keys['roller-mi50'])} on the test "
            f"hardware, {len(keys['roller-k80'] & keys['roller-mi50'])} on both;")
    assert want in sec and 0 < len(keys["roller-k80"] & keys["roller-mi50"]) < len(keys["roller-mi50"])


def test_hybrid_keeps_each_tasks_fastest_programs(pooling, monkeypatch):
    """hybrid gives HYBRID_TOP_SHARE of a task's kept budget to its fastest valid programs before clustering: at
    ratio 0.7 on the real pooling tasks (share raised to 0.1 so each task's top is several records), every task
    keeps its top round(k * share) labels (k its budget beyond the best record). With the share set to 0 the clustering alone misses some of them, so the test sees the rule."""
    from tenset_curate import prune as pr

    df = with_labels(load_records(pooling))
    df = df.filter(~pl.col("source_file").str.ends_with("again.json"))  # no re-measurements: one record each
    tids, labels, valid = df["task_id"].to_numpy(), df["label"].to_numpy(), df["is_valid"].to_numpy()

    def missed_top(share):
        monkeypatch.setattr(pr, "HYBRID_TOP_SHARE", share)
        keep, _ = select(df, 0.7, "hybrid", 0, 8)
        missed = checked = 0
        for t in np.unique(tids):
            idx = np.flatnonzero((tids == t) & valid)
            kept = int(keep[tids == t].sum())
            top = int(round((kept - 1) * 0.1))
            if top < 2:
                continue
            checked += 1
            best = idx[np.argsort(-labels[idx], kind="stable")[:top]]
            missed += int((~keep[best]).sum())
        assert checked >= 5
        return missed

    assert missed_top(0.1) == 0
    assert missed_top(0.0) > 0


def test_density_keeps_the_pools_label_distribution_where_hybrid_covers_its_range(pooling, monkeypatch):
    """``density`` = hybrid's first steps (duplicates merged, failures out, each task's fastest programs), then the
    rest at random instead of cluster representatives: beyond the top share its kept labels follow the task's valid
    pool (what the attention model needs, reports/prune_models.md), where hybrid's representatives spread over the
    label range. On the real pooling tasks at 0.7: density's Kolmogorov-Smirnov distance to each task's pool (mean
    over tasks, the top share left out of both) is well under hybrid's; it keeps every task's top programs (share
    raised to 0.1 as above)."""
    from tenset_curate import prune as pr

    monkeypatch.setattr(pr, "HYBRID_TOP_SHARE", 0.1)
    df = with_labels(load_records(pooling))
    df = df.filter(~pl.col("source_file").str.ends_with("again.json"))
    tids, labels, valid = df["task_id"].to_numpy(), df["label"].to_numpy(), df["is_valid"].to_numpy()

    def ks_and_top(method):
        keep, _ = select(df, 0.7, method, 0, 8)
        dist, missed = [], 0
        for t in np.unique(tids):
            idx = np.flatnonzero((tids == t) & valid)
            kept = idx[keep[idx]]
            top = int(round((int(keep[tids == t].sum()) - 1) * 0.1))
            order = idx[np.argsort(-labels[idx], kind="stable")]
            missed += int((~keep[order[:top]]).sum())
            rest_pool = np.sort(labels[order[top + 1:]])
            rest_kept = np.sort(labels[np.setdiff1d(kept, order[:top + 1])])
            if len(rest_kept) < 20:
                continue
            grid = rest_pool
            cdf_pool = np.arange(1, len(grid) + 1) / len(grid)
            cdf_kept = np.searchsorted(rest_kept, grid, side="right") / len(rest_kept)
            dist.append(np.abs(cdf_pool - cdf_kept).max())
        assert len(dist) >= 5
        return float(np.mean(dist)), missed

    d_density, missed = ks_and_top("density")
    d_hybrid, _ = ks_and_top("hybrid")
    d_random, _ = ks_and_top("random")
    assert missed == 0
    assert d_density < 0.6 * d_hybrid, (d_density, d_hybrid)
    assert d_density < 2 * d_random + 0.02, (d_density, d_random)  # as close to the pool as a random draw


def test_task_split_holds_out_whole_tasks_on_every_hardware(k80_mi50_dataset):
    """``task``: a seeded share of the workloads is test on both GPUs, every record of it; nothing of it trains."""
    recs = load_records(k80_mi50_dataset, ["record_id", "hardware", "task_id", "workload_key"])
    a, info = make_split(recs, "task", seed=0, test_fraction=0.25)
    b, _ = make_split(recs, "task", seed=0, test_fraction=0.25)
    c, _ = make_split(recs, "task", seed=1, test_fraction=0.25)
    assert a.equals(b)  # deterministic for a seed
    parts = a.join(recs.select("record_id", "workload_key"), on="record_id")
    test_keys = set(parts.filter(pl.col("part") == "test")["workload_key"])
    assert test_keys and set(parts.filter(pl.col("part") != "test")["workload_key"]).isdisjoint(test_keys)
    n_tasks = recs["workload_key"].n_unique()
    assert len(test_keys) == info["test_tasks"] and info["tasks"] == n_tasks > 20
    assert 0.1 * n_tasks <= len(test_keys) <= 0.5 * n_tasks  # about a quarter of the tasks
    held = recs.filter(pl.col("workload_key").is_in(list(test_keys)))
    assert set(held["hardware"]) == {"roller-k80", "roller-mi50"}  # a held-out task is held out on every GPU
    assert held.height == info["counts"]["test"] and a.height == recs.height  # every record has a part
    assert not a.filter(pl.col("part") == "test")["record_id"].equals(
        c.filter(pl.col("part") == "test")["record_id"])  # another seed draws other tasks
    with pytest.raises(ValueError, match="test-fraction"):
        make_split(recs, "task", test_fraction=1.0)


def test_a_record_repeated_line_for_line_is_in_one_part_only(tmp_path):
    """Found by the splits audit: identical log lines share a record_id, and the within-task draw ranked them one
    by one, so at the test cut one copy fell in test and the other in train (seeds 97, 132, 175 of a database with
    repeated lines): a record trained on and tested. The draw is now over a task's distinct records."""
    import gzip

    src = REAL / "metaschedule" / "bennu-a100-resnet34"
    db = tmp_path / "db"
    db.mkdir()
    (db / "database_workload.json").write_bytes(gzip.decompress((src / "database_workload.json.gz").read_bytes()))
    lines = gzip.decompress((src / "database_tuning_record.json.gz").read_bytes()).splitlines()[:400]
    (db / "database_tuning_record.json").write_bytes(b"\n".join(lines + lines[:200]) + b"\n")  # 200 repeated
    ds = tmp_path / "ds"
    convert([db], ds)
    recs = load_records(ds, ["record_id", "hardware", "task_id", "workload_key"])
    assert recs.height == 600 and recs["record_id"].n_unique() <= 400
    for seed in range(40):
        table, info = make_split(recs, "within-task", seed=seed)
        assert table.height == table["record_id"].n_unique(), f"seed {seed}: a record in two parts"
        assert sum(info["counts"].values()) == recs.height


def test_no_test_fraction_means_no_test_part(pooling):
    """--test-fraction 0 still tested one record of every task while the split's record said 0.0."""
    recs = load_records(pooling, ["record_id", "hardware", "task_id", "workload_key"])
    table, info = make_split(recs, "within-task", seed=0, test_fraction=0.0)
    assert "test" not in info["counts"] and info["test_fraction"] == 0.0
    assert make_split(recs, "within-task", seed=0, test_fraction=0.01)[1]["counts"]["test"] >= recs[
        "task_id"].n_unique()  # above 0: at least one a task


def test_a_network_split_counts_what_the_data_holds_and_says_what_trains_unplaced(netdata, tmp_path):
    """The network split's test_tasks counted the networks table's keys (31) where the data held 9; a held-out
    network with no record made a split with no test part and exit 0; the log's tasks of no network in the table
    trained without a word (17 of tvm-ci-logs' 26 resnet-50 tasks)."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    nets = pl.read_parquet(str(netdata / "networks/*.parquet"))
    recs = load_records(netdata, ["record_id", "hardware", "task_id", "workload_key"])
    table, info = make_split(recs, "network", holdout=["resnet_50"], networks=nets)
    test = table.filter(pl.col("part") == "test").join(recs, on="record_id")
    assert info["test_tasks"] == test["workload_key"].n_unique() < info["test_tasks_in_table"]
    in_table = recs["workload_key"].is_in(nets["workload_key"].implode())
    assert info["no_network_records"] == int((~in_table).sum()) > 0
    assert info["no_network_tasks"] == recs.filter(~in_table)["workload_key"].n_unique()
    ghost = nets.with_columns(pl.lit("ghost_net").alias("network"), pl.col("workload_key") + "x")
    with pytest.raises(ValueError, match=r"no record of the held-out network\(s\) \['ghost_net'\]"):
        make_split(recs, "network", holdout=["ghost_net"], networks=pl.concat([nets, ghost]))
    r = CliRunner().invoke(app, ["splits", "make", str(netdata), "--scheme", "network", "--holdout", "resnet_50",
                                 "--name", "net_r50"])
    assert r.exit_code == 0, r.output
    r_, t_ = info["no_network_records"], info["no_network_tasks"]
    assert (f"warning: in no network of the networks table: {r_} record{'s' * (r_ != 1)} of {t_} "
            f"task{'s' * (t_ != 1)}; they stay in training") in " ".join(r.output.split())


def test_an_operator_split_says_how_many_records_of_no_known_class_train(tmp_path):
    """Tasks classed `unknown` stay in training whatever is held out (a conv layer whose key names no operator);
    the split now counts them and `curate splits make` warns."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app
    from tenset_curate.features import operator_classes

    ds = tmp_path / "ds"
    convert([REAL / "ansor" / "tvm-ci-logs", REAL / "ansor" / "roller-k80" / "pooling"], ds)
    recs = load_records(ds, ["record_id", "hardware", "task_id", "workload_key", "workload_name", "source_file"])
    ops = operator_classes(recs)
    unknown = recs.join(ops, on="task_id").filter(pl.col("op_class") == "unknown")
    assert unknown.height > 0
    r = CliRunner().invoke(app, ["splits", "make", str(ds), "--scheme", "operator", "--holdout", "pooling",
                                 "--name", "no_pool", "--json"])
    assert r.exit_code == 0, r.output
    t_ = unknown["task_id"].n_unique()  # one task here: it said "records of 1 tasks"
    assert (f"warning: no known operator class (features.operator_classes) for {unknown.height} "
            f"record{'s' * (unknown.height != 1)} of {t_} task{'s' * (t_ != 1)}: they stay in training") \
        in " ".join(r.output.split())
    # without the option, the error names what there is to hold out (it named only the option)
    r = CliRunner().invoke(app, ["splits", "make", str(ds), "--scheme", "operator"])
    assert r.exit_code == 2 and (f"operator split needs --holdout CLASS[,CLASS]; the data has "
                                 f"{sorted(ops['op_class'].unique().to_list())}") in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["splits", "make", str(ds), "--scheme", "hardware"])
    assert r.exit_code == 2 and (f"hardware split needs --train-hw and --test-hw; the data has "
                                 f"{sorted(recs['hardware'].unique().to_list())}") in " ".join(r.output.split())


def test_evaluating_on_a_split_made_again_since_training_is_refused(pooling, tmp_path):
    """Found by the splits audit: a split re-made under its name with another seed put records the model had
    trained on into its test part, and `curate evaluate` scored them (PCA 0.757 -> 0.862) without a word."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app
    from tenset_curate.training import train_model

    ds = tmp_path / "ds"
    shutil.copytree(pooling, ds)
    write_split(ds, "re", "within-task", seed=5)
    train_model(ds, "re", "gbdt", tmp_path / "m", progress=False, n_estimators=20)
    write_split(ds, "other", "within-task", seed=6)
    for split in ("re", "other"):  # its own split as it was, and another split: scored
        r = CliRunner().invoke(app, ["evaluate", str(tmp_path / "m"), str(ds), "--split", split, "--json"])
        assert r.exit_code == 0, r.output
        seen = json.loads(r.stdout).get("trained_records_scored")
        if split == "re":
            assert seen is None
    # scored on another split, the model has seen most of its test part, and says so (it said nothing)
    keys = ["record_id", "hardware", "task_id"]
    other = pl.read_parquet(ds / "splits" / "other.parquet").filter(pl.col("part") == "test")
    trained = pl.read_parquet(ds / "splits" / "re.parquet").filter(pl.col("part") != "test")
    hit = other.join(trained, on=keys, how="semi").height
    assert 0 < hit < other.height
    assert seen == {"records": hit, "of": other.height, "split": "re", "dataset": str(ds.resolve())}
    r = CliRunner().invoke(app, ["evaluate", str(tmp_path / "m"), str(ds), "--split", "other"])
    assert r.exit_code == 0 and (f"warning: {hit} of the test part's {other.height} records "
                                 f"({hit / other.height:.0%}) are in the training or validation part of split 're' "
                                 f"of {ds.resolve()}, which the model trained on") in r.output, r.output
    write_split(ds, "re", "within-task", seed=6)
    r = CliRunner().invoke(app, ["evaluate", str(tmp_path / "m"), str(ds), "--split", "re"])
    assert r.exit_code == 2 and "which has been made again since" in r.output


# ------------------------------------------------------------------------------------------ session-30 prune audit

def test_two_programs_that_differ_in_a_step_the_tokens_drop_are_not_merged(tmp_path):
    """bennu's x86 resnet-18 log: lines 101 and 105 differ only in a CA step's target loop ([1, 3, 11] and [1, 3,
    10]); they are two programs (4.00 and 3.56 ms). The duplicate keys hashed the feature tokens, which drop the
    target loop, so redundancy merged them: line 101 went and 105 came out with the costs of both."""
    ds = tmp_path / "ds"
    src = tmp_path / "logs"
    src.mkdir()
    lines = gzip.open(REAL / "ansor" / "bennu" / "x86_resnet18.json.gz").read().split(b"\n")
    (src / "r18.json").write_bytes(b"\n".join(lines[:300]) + b"\n")
    convert([src], ds)
    a, b = (json.loads(lines[i - 1]) for i in (101, 105))
    assert a["i"][0] == b["i"][0] and a["i"][1] != b["i"][1]  # one task, two schedules
    p = prune(ds, tmp_path / "p", 0.0, "redundancy", min_keep=0)
    kept = load_records(tmp_path / "p", ["line", "costs"])
    got = {ln: c for ln, c in kept.iter_rows() if ln in (101, 105)}
    assert set(got) == {101, 105} and got[101] == a["r"][0] and got[105] == b["r"][0]


def test_farthest_first_never_picks_a_point_twice():
    """On a pool of repeated coordinates (25 distinct points), farthest-first took the first index again once every
    point left lay on a pick: 25 distinct records where 87-172 were asked, and cluster kept fewer than allocated."""
    from tenset_curate.prune import _kcenter_pick

    x = np.repeat(np.random.default_rng(0).normal(size=(25, 4)), 8, axis=0)
    for k in (10, 25, 87, 172, 199):
        got = _kcenter_pick(x, k, np.random.default_rng(1))
        assert len(got) == k == len(set(got.tolist()))


def test_a_reprune_into_its_folder_keeps_splits_only_of_the_same_records(pooling, tmp_path):
    """Re-pruning into the same --out at another ratio kept the earlier prune's splits (and linked them into the new
    catalog): 229 of a split's 861 rows matched the new records, and training joined the rest away without a word."""
    out = tmp_path / "p"
    prune(pooling, out, 0.5, "random", seed=0)
    write_split(out, "w", "within-task")
    prune(pooling, out, 0.5, "random", seed=0)  # the same records: the split stays
    assert (out / "splits" / "w.parquet").is_file()
    assert read_split(out, "w")["record_id"].is_in(load_records(out, ["record_id"])["record_id"].implode()).all()
    from tenset_curate.catalog import run_sql

    assert run_sql(out, "SELECT count(*) AS n FROM split_w", "arrow").to_pylist()[0]["n"] > 0
    prune(pooling, out, 0.9, "random", seed=0)  # other records: the split goes, from the catalog too
    assert not (out / "splits").exists()
    with pytest.raises(FileNotFoundError, match="no such split"):
        read_split(out, "w")
    n = run_sql(out, "SELECT count(*) AS n FROM records", "arrow").to_pylist()[0]["n"]
    assert n == load_records(out, ["record_id"]).height
    with pytest.raises(Exception, match="split_w"):
        run_sql(out, "SELECT count(*) FROM split_w")
    fresh = tmp_path / "fresh"  # a prune into a new folder has its catalog (the first version of this fix lost it)
    prune(pooling, fresh, 0.5, "random", seed=0)
    assert run_sql(fresh, "SELECT count(*) AS n FROM records", "arrow").to_pylist()[0]["n"] > 0


def test_a_ratio_it_cannot_meet_is_said_in_the_record_and_the_report_with_its_cause(pooling, tmp_path):
    """The warning went to stderr only (prune.json and the report were written before it), always blamed min_keep,
    and at ratio 0 was not made at all, though merging duplicates removed records."""
    logs = tmp_path / "logs"
    logs.mkdir()
    first = sorted((REAL / "ansor" / "roller-k80" / "pooling").glob("*.gz"))[0]
    lines = gzip.open(first).read().split(b"\n")[:400]
    (logs / "a.json").write_bytes(b"\n".join(lines) + b"\n")
    (logs / "b.json").write_bytes(b"\n".join(lines[:100]) + b"\n")  # 100 of them measured again
    convert([logs], tmp_path / "ds")
    s = prune(tmp_path / "ds", tmp_path / "p0", 0.0, "redundancy", min_keep=0)
    assert s["ratio_achieved"] == pytest.approx(100 / 500, abs=0.01) and "identical schedules" in s["warning"]
    rec = json.loads((tmp_path / "p0" / "prune.json").read_text())
    assert rec["warning"] == s["warning"] and s["warning"] in (tmp_path / "p0" / "prune_report.md").read_text()
    s = prune(pooling, tmp_path / "p1", 0.5, "random", min_keep=10_000)
    assert s["ratio_achieved"] < 0.49 and "min_keep=10000" in s["warning"]
    assert "warning" not in prune(pooling, tmp_path / "p2", 0.5, "random")


def test_merged_remeasurements_that_move_a_best_cost_are_reported(pooling, tmp_path):
    """Merging an identical schedule's measurements into the kept record pools their costs, so a task's best mean
    cost (its label scale) can move; the report now says in how many tasks and by how much."""
    s = prune(pooling, tmp_path / "p", 0.45, "hybrid")
    before = with_labels(load_records(pooling)).filter(pl.col("is_valid")).group_by("hardware", "task_id").agg(
        pl.col("best_cost").first())
    after = with_labels(load_records(tmp_path / "p")).filter(pl.col("is_valid")).group_by(
        "hardware", "task_id").agg(pl.col("best_cost").first())
    j = before.join(after, on=["hardware", "task_id"], suffix="_a")
    rel = ((j["best_cost_a"] - j["best_cost"]).abs() / j["best_cost"]).to_numpy()
    assert s["best_cost_moved_tasks"] == int((rel > 1e-9).sum())
    assert s["best_cost_moved_max"] == pytest.approx(float(rel.max()), abs=1e-6)


def test_the_label_minimum_quantile_is_the_minimums_bin():
    from tenset_curate.prune import LABEL_BINS, _hist_quantile

    h = np.zeros(LABEL_BINS, np.int64)
    h[[4, 9000]] = [3, 5]  # the smallest labels lie in bin 4
    assert _hist_quantile(h, 0.0) == pytest.approx(4.5 / LABEL_BINS)
    assert _hist_quantile(h, 1.0) == pytest.approx(9000.5 / LABEL_BINS)


def test_tasks_of_a_network_get_their_class_from_the_compute_dag(netdata):
    """TenSet's pickles carry no SearchTask.desc and its workload keys name no operator (an md5 and shapes), so the
    task-desc rule never fired and tvm-ci-logs' resnet-50 conv layers were `unknown` (the features audit: 9 tasks);
    the networks table's description now comes from the compute DAG's operations."""
    from tenset_curate.features import operator_classes
    from tenset_curate.netinfo import dataset_task_descriptions

    recs = load_records(netdata, ["record_id", "hardware", "task_id", "workload_key", "workload_name", "source_file"])
    desc = dataset_task_descriptions(netdata)
    before, after = operator_classes(recs), operator_classes(recs, desc)
    moved = before.join(after, on="task_id", suffix="_n").filter(pl.col("op_class") != pl.col("op_class_n"))
    assert moved.height >= 9 and (moved["op_class"] == "unknown").all()
    assert set(moved["op_rule_n"]) == {"task-desc"} and "conv2d" in set(moved["op_class_n"])
    info = write_split(netdata, "no_conv", "operator", holdout=["conv2d"])
    assert info["unknown_class_tasks"] == int((after["op_class"] == "unknown").sum())


def test_analyze_counts_leakage_against_train_and_valid_and_each_schedule_once(tmp_path):
    """The leakage section compared train only (valid, which picks the epoch, was left out) and counted the rows of
    a join, so a schedule measured twice counted twice (126 against 123 distinct on a real database)."""
    from tenset_curate.splits import analyze

    logs = tmp_path / "logs"
    logs.mkdir()
    first = sorted((REAL / "ansor" / "roller-k80" / "pooling").glob("*.gz"))[0]
    lines = gzip.open(first).read().split(b"\n")[:300]
    (logs / "a.json").write_bytes(b"\n".join(lines) + b"\n")
    again = []
    for k in (1, 2):  # the same schedules measured again, twice: other costs, so other lines and record ids
        for ln in lines[:150]:
            rec = json.loads(ln)
            rec["r"][0] = [c * (1 + 0.01 * k) for c in rec["r"][0]]
            again.append(json.dumps(rec).encode())
    (logs / "b.json").write_bytes(b"\n".join(again) + b"\n")
    ds = tmp_path / "ds"
    convert([logs], ds)
    write_split(ds, "w", "within-task", seed=0)
    md = analyze(ds, "w", tmp_path / "rep").read_text()
    from tenset_curate.prune import schedule_keys

    recs = load_records(ds, ["record_id", "task_id", "steps"]).join(read_split(ds, "w"), on=["record_id", "task_id"])
    recs = recs.with_columns(pl.Series("prog", schedule_keys(recs["steps"], np.zeros(recs.height, np.int64))))
    seen = set(recs.filter(pl.col("part") != "test").select("task_id", "prog").iter_rows())
    test = set(recs.filter(pl.col("part") == "test").select("task_id", "prog").iter_rows())
    want = len(seen & test)
    assert want > 0 and f"identical schedules (same task, same steps) in both train/valid and test: {want}\n" in md


def test_evaluate_warns_when_tasks_have_one_scored_record(pooling, tmp_path):
    """A task with one test record scores PCA 0.5 and top-k 1 by TenSet's definition; `curate evaluate` printed
    such means without a word (the training audit: 'PCA 0.5000 top-1 1.0000 (5 tasks, 5 records)')."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app
    from tenset_curate.training import train_model

    ds = tmp_path / "ds"
    shutil.copytree(pooling, ds)
    write_split(ds, "w", "within-task", seed=0)
    train_model(ds, "w", "gbdt", tmp_path / "m", progress=False, n_estimators=10)
    sp = read_split(ds, "w")
    one = pl.concat([sp.filter(pl.col("part") != "test"),
                     sp.filter(pl.col("part") == "test").group_by("hardware", "task_id", maintain_order=True).head(1)
                     .select(sp.columns)])
    one.write_parquet(ds / "splits" / "one.parquet")
    r = CliRunner().invoke(app, ["evaluate", str(tmp_path / "m"), str(ds), "--split", "one"])
    n = sp["task_id"].n_unique()
    assert r.exit_code == 0 and f"warning: {n} of {n} tasks have one scored record" in r.output, r.output
    r = CliRunner().invoke(app, ["evaluate", str(tmp_path / "m"), str(ds), "--split", "w"])
    assert r.exit_code == 0 and "one scored record" not in r.output


def test_a_prune_of_a_splits_training_part_keeps_its_other_records_and_the_split(pooling, tmp_path):
    """`curate prune --split NAME`: only the split's training records are pruned (the ratio is of them); its
    validation and test records stay exactly as they were (duplicates merge within the training part only, so no
    kept test record takes another record's costs), and the pruned dataset holds the split restricted to its records.
    A model trained there is scored on the same test records as on the source. A split made on a pruned dataset
    drew its test part from the kept records (the splits audit)."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app
    from tenset_curate.training import evaluate_model, train_model

    ds = tmp_path / "ds"
    shutil.copytree(pooling, ds)
    write_split(ds, "wt", "within-task", seed=3)
    src = read_split(ds, "wt").select("record_id", "part")
    rows = load_records(ds, ["record_id", "costs"]).join(src, on="record_id", how="left")
    n_train = int((rows["part"] == "train").sum())
    out = tmp_path / "p"
    s = prune(ds, out, 0.7, "hybrid", seed=0, split="wt")
    assert s["split"] == {"name": "wt", "train_before": n_train, "train_after": s["split"]["train_after"],
                          "kept_whole": rows.height - n_train}
    assert s["duplicates"] > 0  # the re-measured file: merging happened, in the training part
    assert abs(s["ratio_achieved"] - 0.7) <= 0.01
    assert abs(s["split"]["train_after"] / n_train - 0.3) <= 0.01
    kept = load_records(out, ["record_id", "costs"]).join(src, on="record_id", how="left")
    assert kept.height == s["records_after"] == s["split"]["train_after"] + s["split"]["kept_whole"]
    other = lambda d: d.filter(pl.col("part") != "train").sort("record_id", "costs")  # noqa: E731
    assert other(kept).equals(other(rows))  # every validation / test record, costs untouched
    got = read_split(out, "wt")
    assert got.filter(pl.col("part") != "train").equals(read_split(ds, "wt").filter(pl.col("part") != "train"))
    assert set(got.filter(pl.col("part") == "train")["record_id"]) == set(
        kept.filter(pl.col("part") == "train")["record_id"])
    units = prune(ds, tmp_path / "units", 0.7, "hybrid", seed=0, split="wt", unit_records=2000)  # a unit a shard
    assert units["units"] > 5 and read_split(tmp_path / "units", "wt").equals(got)
    info = json.loads((out / "splits" / "wt.json").read_text())
    assert info["pruned"]["method"] == "hybrid" and info["counts"]["test"] == int((src["part"] == "test").sum())
    assert "split wt: its training part pruned" in (out / "prune_report.md").read_text()
    r = CliRunner().invoke(app, ["info", str(out)])  # where the dataset and its split come from
    assert r.exit_code == 0 and f"pruned from {ds}: hybrid, ratio 0.7 of split wt's training part (removed " in r.output
    assert f"the split of {ds.resolve()} restricted to these records" in r.output
    assert f"split wt (within-task): test {int((src['part'] == 'test').sum())}, train {s['split']['train_after']}" \
        in r.output

    train_model(out, "wt", "gbdt", tmp_path / "m", progress=False, n_estimators=20)
    on_pruned, on_source = evaluate_model(tmp_path / "m", out, "wt"), evaluate_model(tmp_path / "m", ds, "wt")
    assert on_pruned["n_records"] == on_source["n_records"] > 0
    assert on_pruned["n_tasks"] == on_source["n_tasks"]

    # a re-prune keeps a user's other split only where the records are the same; its own split is made again
    write_split(out, "mine", "within-task", seed=1)
    prune(ds, out, 0.7, "hybrid", seed=0, split="wt")
    assert (out / "splits" / "mine.parquet").is_file() and read_split(out, "wt").equals(got)
    s2 = prune(ds, out, 0.45, "hybrid", seed=0, split="wt")
    assert not (out / "splits" / "mine.parquet").exists()
    assert int((read_split(out, "wt")["part"] == "train").sum()) == s2["split"]["train_after"] > s["split"][
        "train_after"]

    import tenset_curate.prune as P

    stage = P._stage_split_by_unit

    def remade_meanwhile(dataset, split, units, stage_dir):  # `curate splits make` of the same name mid-prune
        n = stage(dataset, split, units, stage_dir)
        write_split(dataset, split, "within-task", seed=9)
        return n

    P._stage_split_by_unit = remade_meanwhile
    try:
        with pytest.raises(ValueError, match="was made again while the prune ran"):
            prune(ds, tmp_path / "race", 0.5, split="wt")
    finally:
        P._stage_split_by_unit = stage
    write_split(ds, "wt", "within-task", seed=3)
    with pytest.raises(FileNotFoundError, match="no such split"):
        prune(ds, tmp_path / "q", 0.5, split="nope")
    r = CliRunner().invoke(app, ["prune", str(ds), "--ratio", "0.5", "--split", "nope", "--out", str(tmp_path / "q")])
    assert r.exit_code == 2 and "no such split" in r.output and not (tmp_path / "q").exists()
    r = CliRunner().invoke(app, ["prune", str(ds), "--ratio", "0.5", "--split", "wt", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0 and f"split wt's training part {n_train} -> " in r.output, r.output
    assert ", asked 50%) in " in r.output, r.output
    from tenset_curate.cli import _percent

    assert [_percent(x) for x in (0.45, 0.7, 0.999, 0)] == ["45%", "70%", "99.9%", "0%"]  # 0.999 said "asked 100%"
    # a split made on the pruned copy itself is told what it does
    r = CliRunner().invoke(app, ["splits", "make", str(tmp_path / "c"), "--scheme", "within-task", "--name", "own"])
    assert r.exit_code == 0 and f"is a pruned copy of {ds}: this split draws its test records from the kept" in r.output
    r = CliRunner().invoke(app, ["splits", "make", str(ds), "--scheme", "within-task", "--name", "own"])
    assert r.exit_code == 0 and "pruned copy" not in r.output


def test_a_split_prune_keeps_held_out_labels_and_refuses_what_it_cannot_prune(tmp_path):
    """The split audit (session 31) of `curate prune --split`, on the project's own CPU sample and real K80 logs:
    held-out labels moved (pooled re-measurements of a task's best training record moved its test labels by up to
    7%); a split of another dataset pruned nothing and exited 0; a record id under two hardware lost test records and
    depended on the units; `--evaluate` ignored the split; a model trained on the pruned copy was scored on the
    source after its split was made again; a damaged split file ended in a traceback; a carried split kept the SQL
    view of the new one."""
    from typer.testing import CliRunner

    from tenset_curate.catalog import run_sql
    from tenset_curate.cli import app
    from tenset_curate.training import SplitChanged, evaluate_model, train_model

    repo = Path(__file__).resolve().parents[1]
    ds = tmp_path / "cpu"
    convert([repo / "data" / "sample-cpu"], ds)
    write_split(ds, "wts6", "within-task", seed=6)
    src = read_split(ds, "wts6").select("record_id", "part")
    s = prune(ds, tmp_path / "p", 0.5, "hybrid", seed=0, split="wts6")
    assert s["duplicates"] > 0 and s["best_cost_moved_tasks"] == 0
    held = lambda d: (with_labels(load_records(d)).join(src, on="record_id").filter(  # noqa: E731
        pl.col("part") != "train").select("record_id", "label").unique().sort("record_id"))
    before, after = held(ds), held(tmp_path / "p")
    assert before.height == after.height > 0
    np.testing.assert_array_equal(after["label"].to_numpy(), before["label"].to_numpy())

    # a model trained on the pruned copy, scored on the source, is refused once the source's split is made again
    train_model(tmp_path / "p", "wts6", "gbdt", tmp_path / "m", progress=False, n_estimators=10)
    evaluate_model(tmp_path / "m", ds, "wts6")
    write_split(ds, "wts6", "within-task", seed=1)
    with pytest.raises(SplitChanged, match="made again since"):
        evaluate_model(tmp_path / "m", ds, "wts6")

    r = CliRunner().invoke(app, ["prune", str(ds), "--ratio", "0.5", "--split", "wts6", "--evaluate", "--out",
                                 str(tmp_path / "e")])
    assert r.exit_code == 2 and "--evaluate prunes the whole dataset again" in r.output

    # a split of another dataset: refused, naming the split file
    other = tmp_path / "k80"
    logs = tmp_path / "logs" / "measure_records"
    for hw in ("A", "B"):  # the same real log under two hardware: the same record ids twice
        (logs / hw).mkdir(parents=True)
        shutil.copy(sorted((REAL / "ansor" / "roller-k80" / "pooling").glob("*.gz"))[0], logs / hw)
    convert([logs], other)
    (other / "splits").mkdir(exist_ok=True)
    shutil.copy(ds / "splits" / "wts6.parquet", other / "splits" / "foreign.parquet")
    with pytest.raises(ValueError, match=r"foreign.parquet: no record of the split's training part .* another dataset"):
        prune(other, tmp_path / "f", 0.5, split="foreign")

    # a record id under two hardware: B's test records all stay, whatever the units
    write_split(other, "ab", "hardware", train_hw=["A"], test_hw=["B"])
    rows = load_records(other, ["record_id", "hardware", "task_id"])
    n_b = rows.filter(pl.col("hardware") == "B").height
    n_train = rows.join(read_split(other, "ab"), on=["record_id", "hardware", "task_id"]).filter(
        pl.col("part") == "train").height
    assert 0 < n_train < n_b
    for u in (100_000, 400):
        s = prune(other, tmp_path / f"ab{u}", 0.5, "hybrid", seed=0, split="ab", unit_records=u)
        kept = load_records(tmp_path / f"ab{u}", ["hardware"])
        assert kept.filter(pl.col("hardware") == "B").height == n_b
        assert s["split"]["train_before"] == n_train  # A's training records, counted once
    assert read_split(tmp_path / "ab400", "ab").equals(read_split(tmp_path / "ab100000", "ab"))
    carried = read_split(tmp_path / "ab400", "ab")  # every row names a kept record, by id, hardware and task
    kept = load_records(tmp_path / "ab400", ["record_id", "hardware", "task_id"]).unique()
    assert carried.join(kept, on=["record_id", "hardware", "task_id"], how="anti").height == 0
    assert int((carried["part"] == "train").sum()) == s["split"]["train_after"]

    # a model trained on the source and scored on a pruned copy made before the source's split was made again
    train_model(other, "ab", "gbdt", tmp_path / "m2", progress=False, n_estimators=5)
    evaluate_model(tmp_path / "m2", tmp_path / "ab400", "ab")
    write_split(other, "ab", "hardware", train_hw=["A"], test_hw=["B"], seed=4)
    train_model(other, "ab", "gbdt", tmp_path / "m3", progress=False, n_estimators=5)
    with pytest.raises(SplitChanged, match="made again since"):
        evaluate_model(tmp_path / "m3", tmp_path / "ab400", "ab")

    # a stale split: training rows that name no record are counted and said
    (other / "splits" / "stale.parquet").write_bytes((other / "splits" / "ab.parquet").read_bytes())
    sp = read_split(other, "stale")
    sp.with_columns(pl.when(pl.col("part") == "train").then(pl.col("record_id") + "x").otherwise(
        pl.col("record_id")).alias("record_id")).head(sp.height - 3).vstack(sp.tail(3)).write_parquet(
        other / "splits" / "stale.parquet")
    s = prune(other, tmp_path / "st", 0.5, split="stale")
    assert s["split"]["unmatched_train_rows"] > 0 and "name no record of this dataset" in s["split_warning"]
    assert "name no record of this dataset" in (tmp_path / "st" / "prune_report.md").read_text()

    # a damaged split file: an error naming it
    (other / "splits" / "bad.parquet").write_bytes(b"PAR1 not a parquet file")
    for call in (lambda: read_split(other, "bad"), lambda: prune(other, tmp_path / "g", 0.5, split="bad")):
        with pytest.raises(ValueError, match=r"bad.parquet: not a readable split file"):
            call()
    (other / "splits" / "bad.parquet").unlink()

    # a re-prune with a split whose SQL view a carried split has: the carried one goes; dotted names are names
    out = tmp_path / "clash"
    write_split(other, "x-y", "within-task")
    write_split(other, "w.v2", "within-task")
    prune(other, out, 0.0, "random", split="ab")
    write_split(out, "x_y", "within-task", seed=2)
    write_split(out, "ab.old", "within-task", seed=3)
    prune(other, out, 0.0, "random", split="x-y")
    assert sorted(p.name for p in (out / "splits").glob("*.parquet")) == ["ab.old.parquet", "ab.parquet",
                                                                           "x-y.parquet"]
    n = run_sql(out, "SELECT count(*) AS n FROM split_x_y", "arrow").to_pylist()[0]["n"]
    assert n == read_split(out, "x-y").height
    assert run_sql(out, "SELECT count(*) AS n FROM split_ab_old", "arrow").to_pylist()[0]["n"] > 0
    write_split(out, "w_v2", "within-task", seed=5)
    prune(other, out, 0.0, "random", split="w.v2")  # the carried w_v2 has w.v2's view: it goes
    assert sorted(p.name for p in (out / "splits").glob("*.parquet")) == ["ab.old.parquet", "ab.parquet",
                                                                           "w.v2.parquet", "x-y.parquet"]


# ------------------------------------------------------------------------------------------ session-34 CLI audit

def test_integers_past_64_bits_and_split_names_that_leave_the_folder_are_refused_before_any_work(pooling, tmp_path):
    """Found by a CLI fuzz (session 34): a seed of 2**70 pruned and split the whole dataset, then failed writing
    its JSON ("Integer exceeds 64-bit range"), leaving a pruned folder without records and a split file without its
    record; --min-keep 10**23 ended in an OverflowError; a negative training seed in numpy's "expected non-negative
    integer", naming no option; `--name ../splits/wt` was read by train, evaluate and analyze (and analyze wrote
    its report outside --out); an --out that is a file ended train and analyze in a FileExistsError traceback."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    ds = tmp_path / "ds"
    shutil.copytree(pooling, ds)
    write_split(ds, "wt", "within-task", seed=0)
    big = str(2 ** 70)
    for argv, said in (
            (["prune", str(ds), "--ratio", "0.5", "--seed", big, "--out", str(tmp_path / "p")],
             f"seed {big}: an integer of at most 64 bits"),
            (["prune", str(ds), "--ratio", "0.5", "--min-keep", str(10 ** 23), "--out", str(tmp_path / "p")],
             f"min_keep {10 ** 23}: an integer of at most 64 bits"),
            (["splits", "make", str(ds), "--scheme", "within-task", "--name", "s", "--seed", big],
             f"seed {big}: an integer of at most 64 bits"),
            (["train", str(ds), "--split", "wt", "--model", "gbdt", "--seed", "-1", "--out", str(tmp_path / "m")],
             "seed -1: an integer, at least 0"),
            (["train", str(ds), "--split", "../splits/wt", "--model", "gbdt", "--out", str(tmp_path / "m")],
             "split name '../splits/wt': no split is named so"),
            (["splits", "analyze", str(ds), "--name", "../splits/wt", "--out", str(tmp_path / "a" / "b")],
             "split name '../splits/wt': no split is named so")):
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (argv, r.output)
        assert said in " ".join(r.output.split()), (argv, r.output)
    assert not (tmp_path / "p").exists() and not (ds / "splits" / "s.parquet").exists()
    assert not (tmp_path / "m").exists() and not (tmp_path / "a").exists()
    (tmp_path / "afile").write_text("x")
    for argv, said in ((["train", str(ds), "--split", "wt", "--model", "gbdt", "--out", str(tmp_path / "afile")],
                        "afile: a file; the model is a directory"),
                       (["splits", "analyze", str(ds), "--name", "wt", "--out", str(tmp_path / "afile")],
                        "afile: a file; the report goes into a folder")):
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit) and said in r.output, (argv, r.output)
    assert (tmp_path / "afile").read_text() == "x"
    # an empty scheme was reported as a bad split name; --test-fraction 0 blamed the tasks' sizes; a damaged
    # manifest gave the JSON decoder's message alone
    r = CliRunner().invoke(app, ["splits", "make", str(ds), "--scheme", ""])
    assert r.exit_code == 2 and "--scheme '': choose from within-task" in r.output, r.output
    r = CliRunner().invoke(app, ["splits", "make", str(ds), "--scheme", "within-task", "--name", "t0",
                                 "--test-fraction", "0"])
    assert r.exit_code == 0 and "warning: split t0 has no test records (--test-fraction 0)" in r.output, r.output
    (ds / "manifest.json").write_text('{"inputs": {"a\tb": 1}')
    r = CliRunner().invoke(app, ["convert", str(REAL / "ansor" / "roller-k80" / "pooling"), "--out", str(ds)])
    assert r.exit_code == 2 and f"{ds / 'manifest.json'}: not a tenset-curate manifest (invalid JSON" in \
        " ".join(r.output.split()), r.output


def test_an_empty_path_argument_is_refused_not_read_as_the_current_folder(tmp_path, monkeypatch):
    """Typer read '' as '.': `curate convert "" --out x` converted every log under the current folder, and
    `curate info ""` described whatever dataset the current folder was (a CLI fuzz, session 34)."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    work = tmp_path / "work"
    shutil.copytree(REAL / "ansor" / "roller-k80" / "pooling", work / "logs")
    monkeypatch.chdir(work)
    for argv in (["convert", "", "--out", "ds"], ["convert", "logs", "--out", ""], ["info", ""],
                 ["splits", "make", "", "--scheme", "within-task"], ["train", "", "--split", "wt", "--out", "m"],
                 ["evaluate", "m", "", "--split", "wt"], ["prune", "logs", "--ratio", "0.5", "--out", ""],
                 ["report", "pca", "--dataset", "", "--out", "r.md"], ["run", ""]):
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2 and "an empty path: name a file or folder ('.' for the current folder)" in \
            " ".join(r.output.replace("│", " ").split()), (argv, r.output)
    r = CliRunner().invoke(app, ["sql", "", "SELECT 1"])  # the dataset-first form too (the review)
    assert r.exit_code == 2 and "an empty path as the dataset" in r.output, r.output
    assert sorted(p.name for p in work.iterdir()) == ["logs"]  # nothing converted, nothing written
    r = CliRunner().invoke(app, ["convert", ".", "--out", "ds", "--json"])  # '.' says so, and still works
    assert r.exit_code == 0 and json.loads(r.stdout)["totals"]["rows"] == 12720, r.output


def test_a_damaged_record_shard_is_named_and_a_convert_run_again_repairs_it(tmp_path):
    """Found by a CLI fuzz (session 34): a record shard cut short, emptied or damaged inside ended info, splits,
    train, evaluate and prune in a Parquet library's traceback that named no file; and a convert run again skipped
    the damaged group's inputs as unchanged, then failed building its catalog, so nothing could repair it."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    logs = REAL / "ansor" / "roller-k80" / "pooling"
    good = tmp_path / "good"
    convert([logs], good)
    write_split(good, "wt", "within-task", seed=0)
    r = CliRunner().invoke(app, ["train", str(good), "--split", "wt", "--model", "gbdt", "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output

    def damaged(name, how):
        ds = tmp_path / name
        shutil.copytree(good, ds)
        (shard,) = sorted((ds / "records").glob("*/*.parquet"))[:1]
        data = shard.read_bytes()
        shard.write_bytes(how(data))
        return ds, shard

    cases = {"cut": lambda b: b[: len(b) // 2], "empty": lambda b: b""}
    for name, how in cases.items():  # found before reading: the magic bytes (storage.check_readable)
        ds, shard = damaged(name, how)
        for argv in (["info", str(ds)], ["splits", "make", str(ds), "--scheme", "within-task", "--name", "w2"],
                     ["train", str(ds), "--split", "wt", "--model", "gbdt", "--out", str(tmp_path / f"m-{name}")],
                     ["evaluate", str(tmp_path / "m"), str(ds), "--split", "wt"],
                     ["prune", str(ds), "--ratio", "0.5", "--out", str(tmp_path / f"p-{name}")]):
            r = CliRunner().invoke(app, argv)
            said = " ".join(r.output.split())
            assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (name, argv, r.output[-2000:])
            assert f"{shard}: " in said and "the shard is damaged" in said, (name, argv, said)
    # damaged inside, its magic bytes whole (the footer's thrift; page headers): the library names the shard when a
    # reader fails (storage.names_damaged_shard), for the Python API as for the command line; a query naming the
    # records view said "column mean_cost not found" (the unavailable view's stand-in) and named no file
    from tenset_curate.catalog import run_sql
    from tenset_curate.dataset_info import dataset_info
    from tenset_curate.prune import load_records
    from tenset_curate.storage import DamagedShard

    def pages(b):
        return b[:4] + bytes((x * 7 + 13) & 0xFF for x in b[4:len(b) // 2]) + b[len(b) // 2:]

    for name, how in {"inside": lambda b: b[:-200] + b"\xff" * 192 + b[-8:], "pages": pages}.items():
        ds, shard = damaged(name, how)
        for call in (lambda: dataset_info(ds), lambda: load_records(ds, ["task_id", "steps"]),
                     lambda: run_sql(ds, "SELECT * FROM records", fmt="arrow")):
            with pytest.raises(DamagedShard, match=f"{shard.name}: cannot be read .*the shard is damaged inside"):
                call()
        q = "SELECT count(*) AS n FROM split_wt"  # the other views still serve
        assert run_sql(ds, q, fmt="arrow").to_pylist() == run_sql(good, q, fmt="arrow").to_pylist() == [{"n": 12720}]
        for argv in (["train", str(ds), "--split", "wt", "--model", "gbdt", "--out", str(tmp_path / f"m-{name}")],
                     ["evaluate", str(tmp_path / "m"), str(ds), "--split", "wt"],
                     ["splits", "analyze", str(ds), "--name", "wt", "--out", str(tmp_path / f"an-{name}")]):
            r = CliRunner().invoke(app, argv)
            said = " ".join(r.output.split())
            assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (name, argv, r.output[-2000:])
            assert f"{shard}: " in said and "the shard is damaged inside; remove it" in said, (name, argv, said)
    with pytest.raises(DamagedShard, match=f"{shard.name}: cannot be read"):  # the footer could be read
        run_sql(ds, "SELECT avg(mean_cost), max(task_id) FROM records")
    from tenset_curate.report import pca_report  # it named its temporary copy, in a RuntimeError (the review)

    with pytest.raises(DamagedShard, match=re.escape(f"{shard}: cannot be read")):
        pca_report(ds, tmp_path / "r.md", epochs=1, workers=1)
    for argv in (["info", str(ds)], ["sql", str(ds), "SELECT avg(mean_cost), max(task_id) FROM records"]):  # as a user runs them
        r = subprocess.run([sys.executable, "-m", "tenset_curate.cli", *argv], capture_output=True, text=True,
                           timeout=300)
        said = " ".join(r.stderr.split())
        assert r.returncode == 2 and "Traceback" not in r.stderr, (argv, r.stderr[-2000:])
        assert f"{shard}: " in said and "the shard is damaged inside; remove it" in said, (argv, said)
    # a convert of the same inputs rewrites a shard cut short (it was skipped as unchanged)
    ds, shard = damaged("repair", cases["cut"])
    r = CliRunner().invoke(app, ["convert", str(logs), "--out", str(ds), "--json"])
    assert r.exit_code == 0, r.output
    assert shard.read_bytes() == (good / shard.relative_to(ds)).read_bytes()
    r = CliRunner().invoke(app, ["info", str(ds), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["records"] == 12720, r.output


def test_the_python_api_takes_numpy_numbers_and_refuses_what_failed_later(tmp_path):
    """Found by the Python API audit (session 35): two hardware names of one folder (gpu/k80 and gpu_k80) made every
    prune of the dataset fail; NumPy numbers passed the checks and failed writing JSON after the work (write_split
    left a split without its record); a split without a training part was blamed on another dataset; JSON results
    lost one of two columns of one name and failed on integers past 64 bits; None or [] as convert's inputs, and a
    hardware name too long for a folder, converted nothing without an error."""
    from fractions import Fraction

    from tenset_curate.catalog import run_sql
    from tenset_curate.readers import InputError
    from tenset_curate.splits import split_info

    ds = tmp_path / "ds"
    convert([REAL / "ansor" / "roller-k80" / "pooling"], ds, hardware="gpu_k80")
    convert([Path(__file__).resolve().parents[1] / "data" / "sample-cpu"], ds, hardware="gpu/k80")
    assert sorted(p.name for p in (ds / "records").iterdir()) == ["hardware=gpu_k80"]  # one folder, two names
    r = prune(ds, tmp_path / "p", np.float64(0.5), method="random", seed=np.int64(1), min_keep=np.int64(3))
    names = load_records(tmp_path / "p", ["hardware"])["hardware"].value_counts().sort("hardware").rows()
    assert [n for n, _ in names] == ["gpu/k80", "gpu_k80"] and sum(c for _, c in names) == r["records_after"]
    assert json.loads((tmp_path / "p" / "prune.json").read_text())["ratio_requested"] == 0.5
    info = write_split(ds, "tf", "within-task", test_fraction=np.float32(0.25), valid_fraction=Fraction(1, 10),
                       seed=np.int64(2))
    got = split_info(ds, "tf")
    assert (got["seed"], got["test_fraction"], got["valid_fraction"]) == (2, float(np.float32(0.25)), 0.1)
    assert json.loads((ds / "splits" / "tf.json").read_text())["counts"] == info["counts"]
    from tenset_curate.dataset_info import dataset_info

    classes = sorted({r["op_class"] for r in dataset_info(ds)["by_hardware_operator"]})
    write_split(ds, "all_test", "operator", holdout=classes)  # every class held out: nothing trains
    assert set(split_info(ds, "all_test")["counts"]) == {"test"}
    with pytest.raises(ValueError, match=r"split all_test of .*ds has no training part to prune \(its parts: test "):
        prune(ds, tmp_path / "p2", 0.5, split="all_test")
    with pytest.raises(ValueError, match="the result has 'hardware', 'task_id' more than once: name them apart"):
        run_sql(ds, "SELECT r.hardware, s.hardware, r.task_id, s.task_id FROM records r JOIN records s "
                    "USING (record_id) LIMIT 1", fmt="json")
    big = run_sql(ds, "SELECT sum(hash(record_id)) AS s FROM records", fmt="arrow").column("s")[0].as_py()
    assert big >= 1 << 64 and json.loads(run_sql(ds, "SELECT sum(hash(record_id)) AS s FROM records",
                                                 fmt="json")) == [{"s": big}]
    for bad in (None, [], [3], 5):
        with pytest.raises(InputError, match="a log file or folder, or an iterable of them"):
            convert(bad, tmp_path / "x")
    pooling = REAL / "ansor" / "roller-k80" / "pooling"  # any iterable of paths, a generator too (the review)
    assert convert(pooling.glob("*.json.gz"), tmp_path / "gen")["totals"]["rows"] == 12720
    # a query's own InvalidInputException (a bad string to strptime) is not a damaged shard: no full read of the
    # shards, and DuckDB's message as it is; a missing function is not a missing view
    import tenset_curate.storage as storage

    reads = []
    real_unreadable = storage.unreadable_shard
    storage.unreadable_shard = lambda root: reads.append(root) or real_unreadable(root)
    try:
        with pytest.raises(Exception, match="Could not parse string"):
            run_sql(ds, "SELECT strptime('x', '%Y') FROM records LIMIT 1")
    finally:
        storage.unreadable_shard = real_unreadable
    assert reads == []
    with pytest.raises(Exception, match=r"nosuchfn does not exist!") as e:
        run_sql(ds, "SELECT nosuchfn(1)")
    assert "the dataset's views" not in str(e.value)
    with pytest.raises(ValueError, match="group_bytes 0: an integer, at least 1"):
        convert([REAL / "ansor" / "roller-k80" / "pooling"], tmp_path / "x", group_bytes=0)
    with pytest.raises(ValueError, match="a name of at most 246 bytes"):
        convert([REAL / "ansor" / "roller-k80" / "pooling"], tmp_path / "x", hardware="h" * 250)
    assert not (tmp_path / "x").exists()
