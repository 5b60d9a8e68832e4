"""Network membership from the collector's workloads.json: the network-wise split on MetaSchedule data the project
collected (the committed sample), and what a broken or edited workloads.json does to a convert."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from tenset_curate.convert import convert
from tenset_curate.splits import load_dataset_tables, make_split

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample-cpu"


def _copy_sample(tmp_path: Path) -> Path:
    src = tmp_path / "sample-cpu"
    src.mkdir()
    for n in ("database_workload.json.gz", "database_tuning_record.json.gz", "hardware.json", "workloads.json"):
        shutil.copy(SAMPLE / n, src / n)
    return src


def _records(ds: Path) -> pl.DataFrame:
    return pl.read_parquet(str(ds / "records/*/*.parquet"), columns=["record_id", "task_id", "workload_key", "target",
                                                                      "target_kind"])


def test_sample_converts_with_the_network_of_every_workload(tmp_path):
    ds = tmp_path / "ds"
    s = convert([SAMPLE], ds)
    t = s["totals"]
    assert t["balanced"] and t["quarantined"] == 0
    assert t["network_rows"] == t["network_entries"] == 14
    want = {(w["network"], w["structural_hash"]) for w in json.loads((SAMPLE / "workloads.json").read_text())["workloads"]}
    nets = pl.read_parquet(str(ds / "networks/*.parquet"))
    assert set(zip(nets["network"], nets["workload_key"])) == want
    assert set(nets["network"]) == {"resnet18", "mobilenet_v2", "bert_base"}
    assert nets["source_file"].unique().to_list() == ["sample-cpu/workloads.json"]
    assert nets["task_weight"].null_count() == nets.height  # the collector does not count a layer's repeats
    recs = _records(ds)
    # every network row names a task of the database, on the target its records were measured on
    joined = nets.join(recs.unique(["workload_key", "target", "target_kind"]),
                       on=["workload_key", "target", "target_kind"], how="inner")
    assert joined.height == nets.height
    assert set(recs["workload_key"]) == set(nets["workload_key"])
    m = json.loads((ds / "manifest.json").read_text())["inputs"]["sample-cpu"]
    assert m["network_file"] == {"entries": 14, "rows": 14, "workloads": 14, "quarantined": 0}
    assert len(m["files"]) == 3 and m["files"][2]["path"].endswith("workloads.json")


def test_network_split_on_the_sample_holds_out_whole_networks(tmp_path):
    ds = tmp_path / "ds"
    convert([SAMPLE], ds)
    recs, nets = load_dataset_tables(ds)
    net_of = dict(zip(nets["workload_key"], nets["network"]))
    for holdout in (None, ["bert_base"], ["resnet18", "bert_base"]):
        table, info = make_split(recs, "network", holdout=holdout, networks=nets, valid_fraction=0.1)
        held = set(info["holdout"])
        if holdout is None:  # TenSet's test networks that the table has
            assert held == {"mobilenet_v2", "bert_base"}
        parts = table.join(recs.select("record_id", "workload_key"), on="record_id")
        parts = parts.with_columns(pl.col("workload_key").replace_strict(net_of).alias("network"))
        test_nets = set(parts.filter(pl.col("part") == "test")["network"])
        train_nets = set(parts.filter(pl.col("part") != "test")["network"])
        assert test_nets == held and not (train_nets & held), (holdout, test_nets, train_nets)
        assert table.height == recs.height  # no task is shared between the sample's networks: nothing removed
        assert info["test_tasks"] == sum(1 for n in net_of.values() if n in held)


def test_a_broken_workloads_json_is_quarantined_and_the_records_still_convert(tmp_path):
    src = _copy_sample(tmp_path)
    text = (src / "workloads.json").read_text()
    (src / "workloads.json").write_text(text[: len(text) // 2])  # cut mid-document, as a killed writer would
    ds = tmp_path / "ds"
    s = convert([src], ds)
    t = s["totals"]
    assert t["balanced"] and t["rows"] == 2070 and t["quarantined"] == 1 and s["inputs_failed"] == 0
    assert not list((ds / "networks").glob("*.parquet"))
    q = pl.read_parquet(str(ds / "quarantine/*.parquet"))
    assert q.height == 1
    row = q.row(0, named=True)
    assert row["source_file"] == "sample-cpu/workloads.json"
    assert row["reason"].startswith("not valid JSON") and row["line"] is not None and row["line"] > 1
    with pytest.raises(ValueError, match="needs a networks table"):  # no network table: the network split says why
        recs, nets = load_dataset_tables(ds)
        make_split(recs, "network", networks=nets)


def test_an_entry_without_a_network_is_quarantined_alone(tmp_path):
    src = _copy_sample(tmp_path)
    doc = json.loads((src / "workloads.json").read_text())
    dropped = doc["workloads"][3]
    del doc["workloads"][3]["network"]
    (src / "workloads.json").write_text(json.dumps(doc, indent=2))
    ds = tmp_path / "ds"
    s = convert([src], ds)
    assert s["totals"]["balanced"] and s["totals"]["quarantined"] == 1 and s["totals"]["network_rows"] == 13
    q = pl.read_parquet(str(ds / "quarantine/*.parquet")).row(0, named=True)
    assert q["reason"] == "workloads[3] has no network" and dropped["structural_hash"] in q["raw"]
    nets = pl.read_parquet(str(ds / "networks/*.parquet"))
    assert dropped["structural_hash"] not in set(nets["workload_key"]) and nets.height == 13


def test_editing_workloads_json_reconverts_and_an_unchanged_rerun_does_nothing(tmp_path):
    src = _copy_sample(tmp_path)
    ds = tmp_path / "ds"
    convert([src], ds)
    again = convert([src], ds)
    assert again["inputs_converted"] == 0 and again["inputs_unchanged"] == 1
    before = sorted(p.name for p in (ds / "networks").glob("*.parquet"))
    doc = json.loads((src / "workloads.json").read_text())
    for w in doc["workloads"]:
        if w["network"] == "bert_base":
            w["network"] = "bert_large"
    (src / "workloads.json").write_text(json.dumps(doc, indent=2))
    s = convert([src], ds)
    assert s["inputs_converted"] == 1
    after = sorted(p.name for p in (ds / "networks").glob("*.parquet"))
    assert len(after) == 1 and after != before  # the old shard is gone, not left beside the new one
    nets = pl.read_parquet(str(ds / "networks/*.parquet"))
    assert set(nets["network"]) == {"resnet18", "mobilenet_v2", "bert_large"}
    assert _records(ds).height == 2070


def test_a_pruned_dataset_keeps_the_networks_and_answers_a_network_split(tmp_path):
    from tenset_curate.prune import prune

    ds, pruned = tmp_path / "ds", tmp_path / "pruned"
    convert([SAMPLE], ds)
    s = prune(ds, pruned, 0.45, "hybrid", seed=0, report=False)
    assert 0.44 <= s["ratio_achieved"] <= 0.46
    for sub in ("networks", "workloads"):
        src = pl.read_parquet(str(ds / sub / "*.parquet"))
        assert pl.read_parquet(str(pruned / sub / "*.parquet")).equals(src), sub
    recs, nets = load_dataset_tables(pruned)
    assert recs.height == s["records_after"] < 2070
    table, info = make_split(recs, "network", holdout=["bert_base"], networks=nets)
    bert = set(nets.filter(pl.col("network") == "bert_base")["workload_key"])
    test_keys = set(table.filter(pl.col("part") == "test").join(recs, on="record_id")["workload_key"])
    assert test_keys == bert and info["test_tasks"] == 3
    # the SQL catalog of the pruned dataset has the networks view too
    from tenset_curate.catalog import connect

    con = connect(pruned)
    assert con.execute("SELECT count(DISTINCT network) FROM networks").fetchone()[0] == 3


# --- fuzzing: mutated copies of the sample's real workloads.json ---------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

REAL_DOC = (SAMPLE / "workloads.json").read_bytes()
ODD_VALUES = [None, 0, -1, 2 ** 64, 1e400, "", [], {}, True, "x" * 5000, [[[[]]]], {"network": "n"}]


@st.composite
def mutated_workloads_json(draw) -> bytes:
    kind = draw(st.sampled_from(["truncate", "flip", "field", "entry", "top", "bytes", "nest"]))
    if kind == "truncate":
        return REAL_DOC[: draw(st.integers(0, len(REAL_DOC)))]
    if kind == "flip":
        b = bytearray(REAL_DOC)
        for _ in range(draw(st.integers(1, 8))):
            b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
        return bytes(b)
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "nest":
        depth = draw(st.integers(10, 100_000))
        return b'{"version": 1, "workloads": ' + b"[" * depth + b"]" * depth + b"}"
    doc = json.loads(REAL_DOC)
    if kind == "top":
        doc = draw(st.sampled_from([doc["workloads"], {"version": 2, "workloads": doc["workloads"]},
                                    {"workloads": doc["workloads"]}, {"version": 1, "workloads": {}}, 1, "s", None]))
    else:
        for _ in range(draw(st.integers(1, 5))):
            i = draw(st.integers(0, len(doc["workloads"]) - 1))
            if kind == "entry":
                doc["workloads"][i] = draw(st.sampled_from(ODD_VALUES))
            elif isinstance(doc["workloads"][i], dict):
                field = draw(st.sampled_from(["network", "structural_hash", "name"]))
                doc["workloads"][i][field] = draw(st.sampled_from(ODD_VALUES))
    return json.dumps(doc, indent=draw(st.sampled_from([None, 2]))).encode()


def _check_rows(rows, bad, entries, text: bytes):
    from tenset_curate.netinfo import NETWORKS_SCHEMA

    assert entries == len(rows) + len(bad) and entries >= 1 or (entries == 0 and not rows and not bad)
    for src, line, reason, raw in bad:
        assert src == "s/workloads.json" and reason and isinstance(raw, str)
        assert line is None or 1 <= line <= text.count(b"\n") + 1
    for r in rows:
        assert isinstance(r["network"], str) and r["network"] and isinstance(r["workload_key"], str) and r["workload_key"]
    if rows:
        pa_rows = [dict(r, target="llvm", target_kind="llvm") for r in rows]
        import pyarrow as pa

        pa.Table.from_pylist(pa_rows, schema=NETWORKS_SCHEMA)  # every row fits the table's schema


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutated_workloads_json())
def test_fuzz_collector_workloads_json_never_raises(tmp_path_factory, text):
    from tenset_curate.netinfo import collector_network_rows

    p = tmp_path_factory.mktemp("wj") / "workloads.json"
    p.write_bytes(text)
    rows, bad, entries = collector_network_rows(p, "s/workloads.json")
    _check_rows(rows, bad, entries, text)


@settings(max_examples=12, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          deadline=None)
@given(mutated_workloads_json())
def test_fuzz_convert_with_a_mutated_workloads_json(tmp_path_factory, text):
    tmp = tmp_path_factory.mktemp("conv")
    src = _copy_sample(tmp)
    (src / "workloads.json").write_bytes(text)
    s = convert([src], tmp / "ds")
    t = s["totals"]
    assert s["inputs_failed"] == 0 and t["balanced"] and t["rows"] == 2070  # the records never depend on it
    nf = json.loads((tmp / "ds" / "manifest.json").read_text())["inputs"]["sample-cpu"]["network_file"]
    assert nf["entries"] == nf["workloads"] + nf["quarantined"]
    q = pl.read_parquet(str(tmp / "ds" / "quarantine/*.parquet")) if nf["quarantined"] else None
    assert (q.height if q is not None else 0) == nf["quarantined"] == t["quarantined"]
