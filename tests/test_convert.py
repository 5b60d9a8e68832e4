"""curate convert on the real logs of ../shared/realdata: counts, fidelity, failures, incremental re-runs."""
from __future__ import annotations

import csv
import gzip
import json
import os
import random
import shutil
import zlib
from pathlib import Path

import orjson
import polars as pl
import pytest

from tenset_curate.convert import convert
from tenset_curate.readers import parse_target, parse_workload_key

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata"
pytestmark = pytest.mark.skipif(not REAL.exists(), reason="../shared/realdata not present")


def manifest_rows():
    with open(REAL / "MANIFEST.tsv") as fh:
        return {r["file"]: r for r in csv.DictReader(fh, delimiter="\t")}


@pytest.fixture(scope="module")
def real_ds(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "ds"
    inputs = [REAL / "ansor" / d for d in sorted(os.listdir(REAL / "ansor"))]
    inputs += [REAL / "metaschedule" / d for d in sorted(os.listdir(REAL / "metaschedule"))]
    inputs += [REAL / "network_info"]
    summary = convert(inputs, out, workers=2)
    return out, summary


def test_every_real_file_converts_and_balances(real_ds):
    out, s = real_ds
    assert s["inputs_failed"] == 0, s["errors"]
    assert s["totals"]["balanced"]
    m = orjson.loads((out / "manifest.json").read_bytes())
    man = manifest_rows()
    seen = 0
    for label, e in m["inputs"].items():
        if e["format"] == "netinfo":
            assert e["network_rows"] > 0
            continue
        assert e["rows"] + e["quarantined"] + e["comments"] == e["lines"], label
        path = Path(e["files"][-1]["path"])  # MetaSchedule: [workload file, record file]
        key = path.relative_to(REAL.resolve()).as_posix()
        assert key in man, key
        assert e["files"][-1]["sha256"] == man[key]["sha256_uncompressed"] or path.suffix == ".gz"
        expected = int(man[key]["records_or_lines"])
        assert e["rows"] == expected, (label, e, expected)  # MANIFEST.tsv counts records
        seen += 1
    assert seen == len([k for k in man if k.startswith("ansor/")]) + 2  # + two MetaSchedule databases
    n_ansor = sum(int(r["records_or_lines"]) for k, r in man.items() if k.startswith("ansor/"))
    rows = pl.scan_parquet(str(out / "records/*/*.parquet")).filter(pl.col("format") == "ansor").select(
        pl.len()).collect().item()
    assert rows == n_ansor


def test_ansor_records_take_30x_less_space_than_their_json(real_ds):
    """Issue 3's size bar, on every real Ansor log: the record shards of the groups of Ansor logs against the
    uncompressed JSON (MANIFEST.tsv's byte counts). A size, not a time: deterministic for a given pyarrow."""
    out, _ = real_ds
    m = orjson.loads((out / "manifest.json").read_bytes())["inputs"]
    man = manifest_rows()
    json_bytes = 0
    shards: set[str] = set()
    for e in m.values():
        if e["format"] != "ansor":
            continue
        key = Path(e["files"][0]["path"]).relative_to(REAL.resolve()).as_posix()
        json_bytes += int(man[key]["bytes_uncompressed"])
        shards |= {o for o in e["outputs"] if o.startswith("records/")}
    assert not [o for o in shards if any(x["format"] != "ansor" and o in x["outputs"] for x in m.values())]
    parquet_bytes = sum((out / o).stat().st_size for o in shards)
    ratio = json_bytes / parquet_bytes
    print(f"\nAnsor JSON {json_bytes / 1e6:.1f} MB -> records {parquet_bytes / 1e6:.2f} MB: {ratio:.1f}x")
    assert ratio >= 30, ratio


def test_spot_check_rows_against_raw_json(real_ds):
    out, _ = real_ds
    recs = pl.read_parquet(str(out / "records/*/*.parquet")).filter(pl.col("format") == "ansor")
    sample = recs.sample(200, seed=1).to_dicts()
    by_file: dict = {}
    for r in sample:
        by_file.setdefault(r["source_file"], []).append(r)
    for src, rows in by_file.items():
        candidates = list(REAL.glob("ansor/" + src.replace("[", "?").replace("]", "?")))
        assert len(candidates) == 1, src
        lines = gzip.open(candidates[0]).read().split(b"\n")
        for r in rows:
            raw = orjson.loads(lines[r["line"] - 1])
            assert r["costs"] == [float(c) for c in raw["r"][0]]
            assert r["error_no"] == raw["r"][1]
            assert r["workload_key"] == raw["i"][0][0]
            assert r["target"] == raw["i"][0][1]
            steps = raw["i"][1][1]
            assert r["n_steps"] == len(steps)
            for typed, st in zip(r["steps"], steps):
                assert typed["kind"] == st[0]
                assert typed["ints"] == [a for a in st[1:] if type(a) is int]
                assert typed["lists"] == [a for a in st[1:] if type(a) is list]
                assert typed["strs"] == [a for a in st[1:] if type(a) is str]


def test_failed_measurements_never_get_a_finite_cost(real_ds):
    out, _ = real_ds
    recs = pl.read_parquet(str(out / "records/*/*.parquet"), columns=["error_no", "mean_cost", "is_valid", "costs",
                                                                      "format", "error_name"])
    failed = recs.filter(~pl.col("is_valid"))
    assert failed.height > 1000  # the logs hold thousands (error_no 2, 4, 6; MetaSchedule 1e10)
    assert failed["mean_cost"].null_count() == failed.height
    assert set(failed.filter(pl.col("format") == "ansor")["error_no"].unique()) >= {2, 4, 6}
    ok = recs.filter(pl.col("is_valid"))
    assert (ok["error_no"] == 0).all()
    assert ok["mean_cost"].is_finite().all() and (ok["mean_cost"] > 0).all() and (ok["mean_cost"] < 1e9).all()
    ms = recs.filter(pl.col("format") == "metaschedule")
    assert (~ms["is_valid"]).sum() == 4639  # README: bennu-a100-resnet34 has 4,639 failed trials


def test_versions_workload_styles_and_targets(real_ds):
    out, _ = real_ds
    recs = pl.read_parquet(str(out / "records/*/*.parquet"), columns=["log_version", "workload_key", "workload_name",
                                                                      "workload_hash", "workload_args",
                                                                      "target_kind", "target_arch", "hw_num_cores"])
    assert {"v0.2", "v0.3", "v0.5", "v0.6", "ms"} <= set(recs["log_version"].unique())  # the logs hold no v0.4
    flat = recs.filter(pl.col("workload_key").str.contains(r'^\["[0-9a-f]{32}", \d'))
    nested = recs.filter(pl.col("workload_key").str.contains(r'^\["[0-9a-f]{32}", \['))
    named = recs.filter(pl.col("workload_key").str.contains(r'^\["[a-z_]+'))
    assert flat.height and nested.height and named.height
    assert (flat["workload_name"] == flat["workload_hash"]).all()
    assert {"cuda", "rocm", "llvm", "metal"} <= set(recs["target_kind"].unique())
    assert "sm_80" in set(recs["target_arch"].drop_nulls())
    assert recs.filter(pl.col("log_version") == "v0.2")["hw_num_cores"].null_count() > 0  # v0.2: no hw params


def test_parse_target_and_key_styles():
    t = parse_target("llvm -keys=cpu -mcpu=core-avx2 -model=platinum-8272 -num-cores=4")
    assert t[0] == "llvm" and t[1] == ["cpu"] and t[2] == "core-avx2" and t[4] == "platinum-8272" and t[6] == 4
    assert json.loads(t[9])["model"] == "platinum-8272"
    d = parse_target('{"kind": "cuda", "arch": "sm_80", "keys": ["cuda", "gpu"], "thread_warp_size": 32}')
    assert d[0] == "cuda" and d[3] == "sm_80" and d[8] == 32
    assert parse_workload_key('["conv2d_layer", 1, 7, [1, 1], "SAME"]')[2:] == ([1.0, 7.0, 1.0, 1.0], ["SAME"])
    with pytest.raises(ValueError):
        parse_workload_key('{"not": "a list"}')


def test_network_info_table(real_ds):
    out, _ = real_ds
    nets = pl.read_parquet(str(out / "networks/*.parquet"))
    assert set(nets["network"]) == {"resnet_50"}
    assert set(nets["target_kind"]) == {"llvm", "cuda"}
    assert nets.group_by("target_kind").agg(pl.col("task_weight").sum())["task_weight"].to_list() == [56, 56]


def test_metaschedule_keeps_ir_module(real_ds):
    out, _ = real_ds
    wl = pl.read_parquet(str(out / "workloads/*.parquet"))
    files = sorted((REAL / "metaschedule").glob("*/database_workload.json*"))
    lines = sum(1 for f in files for x in gzip.open(f).read().split(b"\n") if x.strip())
    assert len(files) >= 2 and wl.height == lines  # one row per workload line of every database
    for text in wl["ir_module_json"]:
        assert orjson.loads(text)["nodes"][1]["type_key"] == "IRModule"
    names = set(wl["workload_name"])
    assert any("conv2d" in n for n in names)


def _copy_tree(src: Path, dst: Path, n: int) -> list[Path]:
    dst.mkdir(parents=True)
    files = sorted(src.rglob("*.json.gz"))[:n]
    out = []
    for f in files:
        t = dst / f.name
        shutil.copy(f, t)
        out.append(t)
    return out


def test_rerun_is_idempotent_additions_and_changes_are_incremental(tmp_path):
    logs = tmp_path / "measure_records" / "k80"
    files = _copy_tree(REAL / "ansor" / "roller-k80" / "pooling", logs, 4)
    out = tmp_path / "ds"
    s1 = convert([tmp_path / "measure_records"], out)
    assert s1["inputs_converted"] == 4 and s1["rows_per_hardware"].keys() == {"k80"}
    assert s1["hardware_rules"] == {"measure_records": s1["totals"]["rows"]}
    shards = {p: p.read_bytes() for p in out.rglob("*.parquet")}
    s2 = convert([tmp_path / "measure_records"], out)
    assert s2["nothing_to_do"] and s2["inputs_converted"] == 0
    assert {p: p.read_bytes() for p in out.rglob("*.parquet")} == shards
    # add a file: only it converts
    shutil.copy(sorted((REAL / "ansor" / "roller-k80" / "pooling").glob("*.gz"))[5], logs / "new.json.gz")
    s3 = convert([tmp_path / "measure_records"], out)
    assert s3["inputs_converted"] == 1 and s3["inputs_unchanged"] == 4
    for p, b in shards.items():
        assert p.read_bytes() == b
    # change a file: its shard is replaced, the old one removed, the rest untouched
    data = gzip.open(files[0]).read().split(b"\n")
    with gzip.open(files[0], "wb") as fh:
        fh.write(b"\n".join(data[:10]) + b"\n")
    s4 = convert([tmp_path / "measure_records"], out)
    assert s4["inputs_converted"] == 1
    n = pl.scan_parquet(str(out / "records/*/*.parquet")).filter(
        pl.col("source_file").str.ends_with(files[0].name)).select(pl.len()).collect().item()
    assert n == 10
    assert not list(out.rglob("*.tmp-*"))


def _manifest(out: Path) -> dict:
    return orjson.loads((out / "manifest.json").read_bytes())["inputs"]


def _referenced_and_present(out: Path) -> tuple[set, set]:
    ref = {o for e in _manifest(out).values() for o in e["outputs"]}
    present = {p.relative_to(out).as_posix() for p in out.rglob("*.parquet")}
    return ref, present


def test_an_input_gone_since_the_last_run_is_counted(tmp_path):
    """Rows of inputs converted before and not among this run's inputs stay (by design); the summary counted them
    in its inputs without saying where they came from ('3 inputs (0 converted, 2 unchanged, 0 failed)')."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    logs = tmp_path / "logs"
    files = _copy_tree(REAL / "ansor" / "roller-k80" / "pooling", logs, 3)
    first = convert([logs], tmp_path / "ds")
    assert first["inputs_not_seen"] == 0
    files[0].unlink()
    r = CliRunner().invoke(app, ["convert", str(logs), "--out", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    assert "3 inputs (0 converted, 2 unchanged, 0 failed, 1 from earlier runs not among these inputs" in r.output
    again = convert([logs], tmp_path / "ds")
    assert again["inputs_not_seen"] == 1 and again["totals"] == first["totals"]
    # a caller whose dataset must be exactly its inputs (the benchmarks' work folders) is refused instead
    from tenset_curate.readers import InputError

    with pytest.raises(InputError, match="holds 1 input"):
        convert([logs], tmp_path / "ds", only=True)
    assert convert([logs], tmp_path / "fresh", only=True)["inputs_not_seen"] == 0


def test_convert_keeps_the_records_of_a_pruned_or_older_dataset(tmp_path):
    """Found by the Python API audit (session 29): converting into a pruned dataset, or one an older converter
    wrote, reset its manifest and then deleted every shard the new manifest did not name (26,840 -> 3,000 records,
    "orphans_removed: 3"). A pruned dataset is refused; an older converter's dataset is converted again only when
    every input it holds is given, and otherwise refused with nothing removed."""
    from tenset_curate.prune import prune
    from tenset_curate.storage import OutputError

    logs = tmp_path / "logs"
    _copy_tree(REAL / "ansor" / "roller-k80" / "pooling", logs, 3)
    more = tmp_path / "more"
    _copy_tree(REAL / "ansor" / "roller-k80" / "depthwise", more, 1)
    ds = tmp_path / "ds"
    first = convert([logs], ds)
    prune(ds, tmp_path / "pr", 0.45, "random")

    def files(d):
        return sorted((p.relative_to(d).as_posix(), p.read_bytes()) for p in d.rglob("*.parquet"))

    before = files(tmp_path / "pr")
    with pytest.raises(OutputError, match=r"a pruned dataset \(curate prune of .*ds\)"):
        convert([more], tmp_path / "pr")
    assert files(tmp_path / "pr") == before
    m = orjson.loads((ds / "manifest.json").read_bytes())
    m["converter"] = "0.0.9+schema2"
    (ds / "manifest.json").write_bytes(orjson.dumps(m))
    before = files(ds)
    with pytest.raises(OutputError, match=r"converter '0.0.9\+schema2'.* 3 of its inputs are not among these"):
        convert([more], ds)
    assert files(ds) == before
    again = convert([logs], ds)  # every input given: converted again under this converter, the same rows
    assert again["inputs_converted"] == 3 and again["totals"] == first["totals"]


def test_convert_says_which_splits_it_outdated_and_sql_warns_during_a_write(tmp_path):
    """After an incremental convert the splits made before it leave the new records in no part, and said nothing;
    a query while a writer holds the dataset counted a state between two runs, and said nothing either (now every
    reader of records warns: curate sql, info, train, prune, through prune.record_files and run_sql)."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app
    from tenset_curate.splits import write_split
    from tenset_curate.storage import dataset_lock, writer_of

    logs = tmp_path / "logs"
    files = _copy_tree(REAL / "ansor" / "roller-k80" / "pooling", logs, 3)
    extra = files.pop()
    shutil.move(extra, tmp_path / extra.name)
    ds = tmp_path / "ds"
    assert convert([logs], ds)["splits_outdated"] == []
    write_split(ds, "w", "within-task", seed=0)
    shutil.move(tmp_path / extra.name, extra)
    r = CliRunner().invoke(app, ["convert", str(logs), "--out", str(ds)])
    assert r.exit_code == 0 and "warning: split(s) w were made before this convert" in r.output, r.output
    assert convert([logs], ds)["splits_outdated"] == []  # nothing converted: nothing outdated by this run
    # network_info pickles add a networks table and no record (a CLI fuzz: it warned the split missed new records)
    r = CliRunner().invoke(app, ["convert", str(REAL / "network_info"), "--out", str(ds), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["splits_outdated"] == [], r.output
    assert json.loads(r.stdout)["inputs_converted"] > 0
    assert writer_of(ds) is None
    with dataset_lock(ds, what="curate convert (test)"):
        assert "curate convert (test)" in writer_of(ds)
        for _ in range(2):  # every time, not once per place as Python shows a warning
            r = CliRunner().invoke(app, ["sql", "SELECT count(*) AS n FROM records", "-d", str(ds), "-f", "csv"])
            assert r.exit_code == 0 and "warning: " in r.output and "is being written" in r.output, r.output
        # every reader of records, not only curate sql (a training read a state between two runs without a word)
        r = CliRunner().invoke(app, ["info", str(ds)])
        assert r.exit_code == 0 and f"warning: {ds} is being written" in r.output, r.output
        from tenset_curate.prune import load_records
        from tenset_curate.storage import DatasetBeingWritten

        with pytest.warns(DatasetBeingWritten, match="curate convert \\(test\\)"):
            load_records(ds, ["record_id"])
    r = CliRunner().invoke(app, ["sql", "SELECT count(*) AS n FROM records", "-d", str(ds), "-f", "csv"])
    assert r.exit_code == 0 and "warning" not in r.output
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DatasetBeingWritten)
        load_records(ds, ["record_id"])  # no writer: no warning


def test_readers_refuse_the_state_an_interrupted_convert_leaves_and_a_rerun_repairs_it(tmp_path):
    """Found by the kill audit (session 29): a convert killed after writing a changed input's new group shard and
    before removing the old one left both; info and sql counted 192,828 rows of 180,716, and a prune of that state
    kept duplicates for good. Readers now compare the shards with the ones the manifest names (when no writer holds
    the dataset) and refuse, naming the fix; running the convert again repairs it."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app
    from tenset_curate.prune import load_records, prune
    from tenset_curate.storage import IncompleteDataset

    logs = tmp_path / "logs"
    _copy_tree(REAL / "ansor" / "roller-k80" / "pooling", logs, 3)
    ds = tmp_path / "ds"
    first = convert([logs], ds, group_bytes=1)  # a shard per log
    rows = load_records(ds, ["record_id"]).height
    shard = sorted((ds / "records").glob("*/*.parquet"))[0]
    stale = shard.with_name("part-0123456789abcdef0123.parquet")  # the old group's shard, not yet removed
    shutil.copyfile(shard, stale)
    for read in (lambda: load_records(ds, ["record_id"]), lambda: prune(ds, tmp_path / "p", 0.5, "random")):
        with pytest.raises(IncompleteDataset, match=r"holds 1 shard\(s\) its manifest does not name .*part-0123"
                                                    r"456789abcdef0123.parquet.*interrupted; run that command again"):
            read()
    assert not (tmp_path / "p" / "records").exists()
    for cmd in (["info", str(ds)], ["sql", "SELECT count(*) FROM records", "-d", str(ds)]):
        r = CliRunner().invoke(app, cmd)
        assert r.exit_code == 2 and "error: " in r.output and "was interrupted" in r.output, r.output
    again = convert([logs], ds, group_bytes=1)  # the re-run removes what no manifest entry names
    assert again["orphans_removed"] == 1 and load_records(ds, ["record_id"]).height == rows
    shard.unlink()  # a named shard gone: refused too, and the re-run converts its input again
    with pytest.raises(IncompleteDataset, match=r"lacks 1 it names"):
        load_records(ds, ["record_id"])
    assert convert([logs], ds, group_bytes=1)["totals"] == first["totals"]
    assert load_records(ds, ["record_id"]).height == rows
    (ds / "catalog.duckdb").unlink()  # a first convert interrupted before its catalog: sql said "not a dataset"
    r = CliRunner().invoke(app, ["sql", "SELECT count(*) FROM records", "-d", str(ds)])
    assert r.exit_code == 2 and "was interrupted before it made its catalog; run it again" in r.output, r.output


def test_groups_pack_logs_and_a_changed_log_leaves_its_group(tmp_path):
    """Logs are packed into groups (one shard per group and hardware, one row group each); a changed log leaves
    its group: the other members' rows stay as they were, the old shards go, and the content equals a clean run."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from _outputs import assert_same_content, dataset_content

    root = tmp_path / "measure_records"
    files = _copy_tree(REAL / "ansor" / "roller-k80" / "conv", root / "k80", 7)
    out = tmp_path / "ds"
    gb = 3 << 20  # the logs are ~1.3 MB of JSON each: 3 per group
    s1 = convert([root], out, group_bytes=gb)
    assert s1["inputs_converted"] == 7 and not s1["errors"]
    man = _manifest(out)
    groups: dict[str, list] = {}
    for label, e in man.items():
        groups.setdefault(e["group"], []).append(label)
    assert sorted(len(m) for m in groups.values()) == [1, 3, 3]  # 9 MB: too few groups for plan_groups' tail
    for g, members in groups.items():
        pf = pq.ParquetFile(out / f"records/hardware=k80/part-{g}.parquet")
        assert pf.metadata.num_row_groups == 1
        assert sorted(set(pf.read(columns=["source_file"]).column(0).to_pylist())) == sorted(members)
        assert pf.metadata.num_rows == sum(man[m]["rows"] for m in members)
        assert all(man[m]["outputs"] == [f"records/hardware=k80/part-{g}.parquet"] for m in members)
    before = dataset_content(out)

    victim = files[1]  # in the first group, with two others
    label = f"measure_records/k80/{victim.name}"
    old_group = man[label]["group"]
    assert len(groups[old_group]) == 3
    data = gzip.open(victim).read().split(b"\n")
    with gzip.open(victim, "wb") as fh:
        fh.write(b"\n".join(data[:10]) + b"\n")
    s2 = convert([root], out, group_bytes=gb)
    assert (s2["inputs_converted"], s2["inputs_unchanged"], s2["errors"]) == (1, 6, {})
    after = dataset_content(out)
    others = lambda t: t.filter(pc.not_equal(t.column("source_file"), label))  # noqa: E731
    assert others(after["records"]).equals(others(before["records"]))
    assert after["records"].filter(pc.equal(after["records"].column("source_file"), label)).num_rows == 10
    man2 = _manifest(out)
    assert man2[label]["group"] != old_group and man2[label]["rows"] == 10
    stayed = [m for m in groups[old_group] if m != label]
    assert len({man2[m]["group"] for m in stayed}) == 1 and man2[stayed[0]]["group"] != old_group
    ref, present = _referenced_and_present(out)
    assert ref == present and f"records/hardware=k80/part-{old_group}.parquet" not in present
    clean = tmp_path / "clean"
    convert([root], clean, group_bytes=gb)
    assert_same_content(out, clean, "after a change")

    # a shard deleted by hand: its members, given again, are converted again
    (out / man2[stayed[0]]["outputs"][0]).unlink()
    s3 = convert([root], out, group_bytes=gb)
    assert s3["inputs_converted"] == 2 and not s3["errors"] and not s3["inputs_dropped"]
    assert_same_content(out, clean, "after a lost shard")
    ref, present = _referenced_and_present(out)
    assert ref == present


def test_plan_groups_packs_in_label_order_with_a_tail_of_small_groups():
    """Groups of consecutive logs up to group_bytes, the plan's last TAIL_GROUPS x group_bytes in groups a
    TAIL_SPLIT-th that size (parallel workers take them last and finish together); other units alone; the plan
    depends on the inputs only."""
    from types import SimpleNamespace

    from tenset_curate.convert import TAIL_GROUPS, TAIL_SPLIT, plan_groups

    mb = 1 << 20
    sizes = {f"log{i:02d}": mb for i in range(40)} | {"db": 50 * mb}
    todo = [(SimpleNamespace(label=k, kind="metaschedule" if k == "db" else "ansor"), None, None) for k in sizes]
    random.Random(0).shuffle(todo)
    groups = plan_groups(todo, 8 * mb, lambda u: sizes[u.label])
    labels = [[u.label for u, _, _ in g] for g in groups]
    assert ["db"] in labels
    logs = [g for g in labels if g != ["db"]]
    assert sum(logs, []) == sorted(k for k in sizes if k != "db")  # label order, each once
    per = 8 // TAIL_SPLIT
    tail = TAIL_GROUPS * 8  # MB of logs, in groups of `per`
    assert [len(g) for g in logs] == [8] * ((40 - tail) // 8) + [per] * (tail // per)
    assert plan_groups(list(reversed(todo)), 8 * mb, lambda u: sizes[u.label]) == groups
    # logs that fill no more than TAIL_GROUPS + 2 groups keep full-size groups
    small = [it for it in todo if it[0].label < f"log{(TAIL_GROUPS + 2) * 8:02d}"]
    assert [len(g) for g in plan_groups(small, 8 * mb, lambda u: sizes[u.label]) if g[0][0].label != "db"] == \
        [8] * (TAIL_GROUPS + 2)


def test_a_failing_log_fails_alone_in_its_group(tmp_path, monkeypatch):
    """An input that fails while it is read is reported; the rest of its group is converted (the group is redone
    without it, so no half-written rows of it remain); given again once readable, it converts."""
    import tenset_curate.convert as conv

    root = tmp_path / "in" / "k80"
    files = _copy_tree(REAL / "ansor" / "roller-k80" / "pooling", root, 4)
    real = conv.read_ansor

    def flaky(path, *a, **k):
        if path.name == files[2].name:
            yield from real(path, *a, **k)  # rows of it reach the group's writer first
            raise OSError(f"{path}: device went away")
        yield from real(path, *a, **k)

    monkeypatch.setattr(conv, "read_ansor", flaky)
    out = tmp_path / "ds"
    s = convert([root], out)
    assert s["inputs_converted"] == 3 and list(s["errors"]) == [f"k80/{files[2].name}"]
    assert "device went away" in s["errors"][f"k80/{files[2].name}"]
    n = pl.read_parquet(str(out / "records/*/*.parquet"))
    assert files[2].name not in "".join(n["source_file"].unique().to_list())
    assert n.height == sum(e["rows"] for e in _manifest(out).values())
    monkeypatch.setattr(conv, "read_ansor", real)
    s2 = convert([root], out)
    assert s2["inputs_converted"] == 1 and s2["inputs_unchanged"] == 3 and not s2["errors"]
    from _outputs import assert_same_content

    clean = tmp_path / "clean"
    convert([root], clean)
    assert_same_content(out, clean, "after the retry")


def test_a_new_input_that_cannot_be_hashed_fails_alone(tmp_path, monkeypatch):
    """New inputs are hashed by the worker that converts them (in parallel, not one by one before the work): one
    whose file cannot be read there is reported, the others convert with their sha256 in the manifest, and a
    re-run converts only that one."""
    import hashlib

    import tenset_curate.convert as conv

    root = tmp_path / "in" / "k80"
    files = _copy_tree(REAL / "ansor" / "roller-k80" / "pooling", root, 3)
    real = conv.file_sha256

    def unreadable(path, *a, **k):
        if Path(path).name == files[1].name:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(conv, "file_sha256", unreadable)
    out = tmp_path / "ds"
    s = convert([root], out)
    bad = f"k80/{files[1].name}"
    assert s["inputs_converted"] == 2 and list(s["errors"]) == [bad] and "Permission denied" in s["errors"][bad]
    m = _manifest(out)
    assert bad not in m and len(m) == 2
    for e in m.values():
        f = e["files"][0]
        assert f["sha256"] == hashlib.sha256(Path(f["path"]).read_bytes()).hexdigest()
    monkeypatch.setattr(conv, "file_sha256", real)
    s2 = convert([root], out)
    assert s2["inputs_converted"] == 1 and s2["inputs_unchanged"] == 2 and not s2["errors"]
    # a touched input is hashed before the work (unchanged content is not converted again): unreadable there, it
    # fails alone too, and its rows and manifest entry from the last run stay
    before = _manifest(out)
    os.utime(files[1], ns=(files[1].stat().st_atime_ns, files[1].stat().st_mtime_ns + 10**9))
    monkeypatch.setattr(conv, "file_sha256", unreadable)
    s3 = convert([root], out)
    assert list(s3["errors"]) == [bad] and s3["inputs_unchanged"] == 2 and s3["inputs_converted"] == 0
    assert _manifest(out) == before


def test_info_counts_match_the_shards(real_ds):
    """``curate info``'s numbers (dataset_info) against the shards and the manifest: records, tasks per hardware,
    the failure rate of every (hardware, operator class) and the quarantine count."""
    from tenset_curate.dataset_info import dataset_info
    from tenset_curate.features import operator_classes
    from tenset_curate.netinfo import dataset_task_descriptions

    out, s = real_ds
    info = dataset_info(out)
    recs = pl.read_parquet(str(out / "records/*/*.parquet"),
                           columns=["hardware", "task_id", "workload_name", "workload_key", "source_file", "is_valid"])
    assert info["records"] == recs.height == s["totals"]["rows"]
    assert info["tasks"] == recs.select("hardware", "task_id").n_unique()
    assert info["quarantined"] == s["totals"]["quarantined"]
    # the classes with the networks table's task descriptions (the compute DAG's operations), as info gives them
    desc = dataset_task_descriptions(out)
    assert desc  # real_ds holds TenSet's network_info
    j = recs.join(operator_classes(recs, desc), on="task_id", how="left")
    rows = {(r["hardware"], r["op_class"]): r for r in info["by_hardware_operator"]}
    assert sum(r["records"] for r in rows.values()) == recs.height
    for (hw, oc), g in j.group_by("hardware", "op_class"):
        r = rows[(hw, oc)]
        assert (r["records"], r["tasks"]) == (g.height, g["task_id"].n_unique())
        assert r["failure_rate"] == pytest.approx(1 - g["is_valid"].mean())
    assert len({r["failure_rate"] for r in rows.values()}) > 1  # real logs: classes fail at different rates
    assert sum(info["op_rules"].values()) == j["task_id"].n_unique()


def test_hardware_rules_model_cli_parent(tmp_path):
    src = sorted((REAL / "ansor" / "roller-k80" / "pooling").glob("*.gz"))[0]
    lines = gzip.open(src).read().split(b"\n")[:6]
    recs = [orjson.loads(x) for x in lines if x]
    recs[0]["i"][0][1] += " -model=titan-x"
    d = tmp_path / "somefolder"
    d.mkdir()
    (d / "log.json").write_bytes(b"\n".join(orjson.dumps(r) for r in recs) + b"\n")
    s = convert([d / "log.json"], tmp_path / "a")
    assert s["hardware_rules"] == {"target-model": 1, "parent-folder": 5}
    assert set(s["rows_per_hardware"]) == {"titan-x", "somefolder"}
    s = convert([d / "log.json"], tmp_path / "b", hardware="k80")
    assert s["hardware_rules"] == {"target-model": 1, "cli": 5}


def test_a_tenset_layout_of_links_is_named_by_the_layout(tmp_path):
    """measure_records/<hardware>/ whose files, or whose whole folder, are links to logs kept elsewhere: the records
    take the layout's hardware names (the reader followed the links to ../shared and named them after the folder
    there), a linked folder is read (it was skipped: no logs found), and a link back up the tree is not a loop."""
    pool = sorted((REAL / "ansor" / "roller-k80" / "pooling").glob("*.gz"))
    mr = tmp_path / "tenset" / "dataset" / "measure_records"
    (mr / "e5-2673").mkdir(parents=True)
    for f in pool[:2]:
        (mr / "e5-2673" / f.name).symlink_to(f)
    (mr / "t4").symlink_to(REAL / "ansor" / "roller-k80" / "depthwise", target_is_directory=True)
    (mr / "back").symlink_to(tmp_path / "tenset", target_is_directory=True)  # a cycle
    s = convert([tmp_path / "tenset" / "dataset"], tmp_path / "ds")
    n_t4 = len(list((REAL / "ansor" / "roller-k80" / "depthwise").glob("*.gz")))
    assert s["inputs_converted"] == 2 + n_t4
    assert set(s["rows_per_hardware"]) == {"e5-2673", "t4"}
    assert set(s["hardware_rules"]) == {"measure_records"}
    lines = sum(1 for f in pool[:2] for x in gzip.open(f).read().split(b"\n") if x.strip())
    assert s["rows_per_hardware"]["e5-2673"] == lines


def test_a_dataset_inside_the_input_folder_is_not_read_as_logs(tmp_path, monkeypatch):
    """``curate convert . --out ds``: the second run read ds/manifest.json as a log (35 quarantined lines), and a
    dataset given as the input was converted as logs. Datasets inside an input are passed over; one given as the
    input is refused."""
    from tenset_curate.readers import InputError

    logs = tmp_path / "logs"
    shutil.copytree(REAL / "ansor" / "roller-k80" / "pooling", logs)
    monkeypatch.chdir(logs)
    first = convert([Path(".")], Path("ds"))
    assert first["totals"]["quarantined"] == 0
    again = convert([Path(".")], Path("ds"))
    assert again["nothing_to_do"] and again["totals"] == first["totals"]
    other = convert([Path(".")], Path("ds2"))  # ds beside it is a dataset too, not logs
    assert other["inputs_converted"] == first["inputs_converted"] and other["totals"] == first["totals"]
    with pytest.raises(InputError, match="a dataset written by curate"):
        convert([Path("ds")], tmp_path / "ds3")
    assert not (tmp_path / "ds3").exists()


def test_two_inputs_of_one_name_are_refused_and_one_input_given_twice_counts_once(tmp_path):
    """roller-k80/reduction and roller-mi50/reduction both give 'reduction/<file>': the second folder's records
    were dropped without a word (and the two GPUs would have shared one hardware name)."""
    from tenset_curate.readers import InputError

    k80, mi50 = REAL / "ansor" / "roller-k80" / "reduction", REAL / "ansor" / "roller-mi50" / "reduction"
    with pytest.raises(InputError, match="two inputs are both called reduction/"):
        convert([k80, mi50], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
    one = sorted(k80.glob("*.gz"))[0]
    copy = tmp_path / "copy" / "reduction"  # a byte-identical copy under the same label: the same records, once
    shutil.copytree(k80, copy)
    s = convert([k80, k80, one, copy], tmp_path / "ok")  # the same files reached again (a file in a folder given)
    assert s["inputs_converted"] == len(list(k80.glob("*.gz")))
    assert s["totals"]["rows"] == sum(1 for f in k80.glob("*.gz") for x in gzip.open(f).read().split(b"\n")
                                      if x.strip())


def test_one_hardware_name_over_several_devices_is_reported(tmp_path):
    """ansor/bennu holds CPU (llvm) and GPU (cuda) logs; named by the folder, they became one hardware 'bennu' without
    a word. The summary names such hardware, and the CLI warns. Found by the reader audit (session 29): two GPUs of
    one kind (tvm-ci-logs: cuda and cuda -arch=sm_86) under one name were not reported, and their labels share one
    best cost per task (TenSet's task is (workload key, target))."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app
    from tenset_curate.prune import load_records

    s = convert([REAL / "ansor" / "bennu"], tmp_path / "ds")
    kinds = load_records(tmp_path / "ds", ["hardware", "target_kind"]).group_by("hardware").agg(
        pl.col("target_kind").unique().sort())
    assert {r[0]: r[1] for r in kinds.iter_rows()} == {"bennu": ["cuda", "llvm"]}
    assert s["hardware_of_several_targets"] == {"bennu": ["cuda -arch=sm_80", "llvm"]}
    want = "warning: hardware bennu holds records of 2 targets (cuda -arch=sm_80, llvm): one name for several machines"
    r = CliRunner().invoke(app, ["convert", str(REAL / "ansor" / "bennu"), "--out", str(tmp_path / "ds")])
    assert r.exit_code == 0 and want in r.output
    r = CliRunner().invoke(app, ["info", str(tmp_path / "ds")])  # from the records: datasets of before too
    assert r.exit_code == 0 and want in r.output
    # one kind, two devices: the targets' own strings, not only their kinds, tell the machines apart
    ci = convert([REAL / "ansor" / "tvm-ci-logs"], tmp_path / "ci")
    targets = set(load_records(tmp_path / "ci", ["target"])["target"])
    assert any("-arch=sm_86" in t for t in targets) and any(t.startswith("cuda") and "-arch" not in t for t in targets)
    assert ci["hardware_of_several_targets"]["tvm-ci-logs"] == ["cuda", "cuda -arch=sm_86", "llvm",
                                                                "llvm -mcpu=core-avx2"]
    from tenset_curate.dataset_info import dataset_info

    assert dataset_info(tmp_path / "ci")["targets"] == ci["hardware_of_several_targets"]
    one = convert([REAL / "ansor" / "roller-k80" / "pooling"], tmp_path / "k80")
    assert one["hardware_of_several_targets"] == {}


def test_converting_again_under_another_hardware_name_renames_the_records(tmp_path):
    """``--hardware`` on inputs converted before: the records take the new name (they were skipped as unchanged and
    kept the old one), nothing is kept twice, no empty partition is left, and the same command again does nothing."""
    from tenset_curate.catalog import run_sql

    src = REAL / "ansor" / "roller-k80" / "pooling"
    out = tmp_path / "ds"
    first = convert([src], out)
    assert list(first["rows_per_hardware"]) == ["pooling"]  # named by its folder
    n = first["totals"]["rows"]
    s = convert([src], out, hardware="k80")
    assert s["inputs_converted"] == first["inputs_converted"] and s["rows_per_hardware"] == {"k80": n}
    assert sorted(p.name for p in (out / "records").iterdir()) == ["hardware=k80"]
    assert run_sql(out, "SELECT hardware, count(*) AS n FROM records GROUP BY 1", "arrow").to_pylist() == [
        {"hardware": "k80", "n": n}]
    again = convert([src], out, hardware="k80")
    assert again["nothing_to_do"] and again["inputs_unchanged"] == first["inputs_converted"]
    back = convert([src], out)  # without --hardware: the folder's name again
    assert back["rows_per_hardware"] == {"pooling": n}
    assert sorted(p.name for p in (out / "records").iterdir()) == ["hardware=pooling"]


def test_malformed_lines_are_quarantined_with_file_and_line(tmp_path):
    src = sorted((REAL / "ansor" / "roller-k80" / "pooling").glob("*.gz"))[0]
    good = [x for x in gzip.open(src).read().split(b"\n") if x][:5]
    future = orjson.dumps({**orjson.loads(good[1]), "v": "v9.9"})  # no Ansor wrote it: its fields may mean else
    bad = good[:2] + [b"# a comment", b"{not json", b'{"i": 1, "r": 2}', b""] + good[2:] + [future, good[0][:40]]
    p = tmp_path / "x.json"
    p.write_bytes(b"\n".join(bad))
    out = tmp_path / "ds"
    s = convert([p], out)
    t = s["totals"]
    assert (t["lines"], t["rows"], t["quarantined"], t["comments"]) == (11, 5, 4, 2)
    q = pl.read_parquet(str(out / "quarantine/*.parquet")).sort("line")
    assert q["line"].to_list() == [4, 5, 10, 11]
    assert q["source_file"].to_list() == ["x.json"] * 4
    assert "invalid JSON" in q["reason"][0] and q["raw"][0] == "{not json"
    assert "unknown log version 'v9.9'" in q["reason"][2]


def test_steps_tvm_would_not_read_are_quarantined(tmp_path, monkeypatch):
    """A step laid out otherwise than TVM's reader takes its kind (readers.ANSOR_STEP_ARGS: an SP step is stage,
    iterator, extent, lengths, inner-to-outer) is a malformed line, on the compiled path and the Python one alike:
    quarantined with file, line and reason, not typed into features with its values shifted."""
    from tenset_curate.readers import ANSOR_STEP_SIGNATURES

    src = sorted((REAL / "ansor" / "roller-k80" / "conv").glob("*.gz"))[0]
    good = [x for x in gzip.open(src).read().split(b"\n") if x][:6]
    rec = orjson.loads(good[1])
    steps = rec["i"][1][1]
    sp = next(i for i, st in enumerate(steps) if st[0] == "SP")
    assert ANSOR_STEP_SIGNATURES["SP"] == "iiiLi" and [type(a) for a in steps[sp][1:]] == [int, int, int, list, int]

    def with_step(step):
        return orjson.dumps({**rec, "i": [rec["i"][0], [rec["i"][1][0], steps[:sp] + [step] + steps[sp + 1:]]]})

    s0 = steps[sp]
    swapped = with_step([s0[0], s0[1], s0[2], s0[4], s0[3], s0[5]])  # lengths moved before the extent
    short = with_step(s0[:5])  # inner_to_outer missing
    fu = with_step(["FU", s0[1], 3])  # an int where TVM reads the fused iterators' list
    lines = [good[0], swapped, good[2], short, fu, good[3], with_step(list(s0))]
    for pure in ("0", "1"):
        d = tmp_path / f"pure{pure}"
        d.mkdir()
        (d / "x.json").write_bytes(b"\n".join(lines))
        monkeypatch.setenv("TENSET_CURATE_PURE_PYTHON", pure)
        t = convert([d / "x.json"], d / "ds")["totals"]
        assert (t["lines"], t["rows"], t["quarantined"]) == (7, 4, 3), pure
        q = pl.read_parquet(str(d / "ds/quarantine/*.parquet")).sort("line")
        assert q["line"].to_list() == [2, 4, 5] and q["source_file"].to_list() == ["x.json"] * 3
        assert all("step SP takes [stage_id, iter_id, extent, lengths (a list), inner_to_outer]" in r
                   for r in q["reason"][:2]), q["reason"].to_list()
        assert "step FU takes [stage_id, fused_ids (a list)]" in q["reason"][2]
    # curate convert names the reasons and their first lines without a query
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    d = tmp_path / "cli"
    d.mkdir()
    (d / "x.json").write_bytes(b"\n".join(lines + [b"{not json", b'{"i": 1}']))
    r = CliRunner().invoke(app, ["convert", str(d / "x.json"), "--out", str(d / "ds")])
    assert r.exit_code == 0, r.output
    shown = [x.strip() for x in r.output.splitlines() if " x " in x]
    assert shown == [
        "2 x step SP takes [stage_id, iter_id, extent, lengths (a list), inner_to_outer] as TVM reads it "
        "(first: x.json line 2)",
        "1 x step FU takes [stage_id, fused_ids (a list)] as TVM reads it (first: x.json line 5)",
        "1 x invalid JSON (first: x.json line 8)",
        "1 x record has no key 'r' (an Ansor record holds 'i', 'r' and 'v') (first: x.json line 9)"], r.output
    assert f'curate sql "SELECT source_file, line, reason FROM quarantine" -d {d / "ds"}' in r.output
    r2 = CliRunner().invoke(app, ["info", str(d / "ds")])  # and curate info, later
    assert r2.exit_code == 0 and [x.strip() for x in r2.output.splitlines() if " x " in x] == shown, r2.output


def test_a_truncated_gzip_log_keeps_every_line_before_the_cut(tmp_path):
    """A gzip log cut short (a copy or a tuning run interrupted) keeps every whole line it holds; the line the cut
    goes through is the one quarantined, with the file and line. (The reader lost the whole read block the cut fell
    in: with this file, all of it.)"""
    src = REAL / "ansor" / "bennu" / "x86_resnet18.json.gz"
    data = src.read_bytes()
    cut = data[: len(data) // 2]
    d = tmp_path / "logs"
    d.mkdir()
    (d / "t.json.gz").write_bytes(cut)
    held = zlib.decompressobj(31).decompress(cut)  # what the cut bytes hold, read independently
    whole = held[: held.rfind(b"\n") + 1].split(b"\n")[:-1]
    assert len(whole) > 100 and not held.endswith(b"\n")
    s = convert([d], tmp_path / "ds")
    t = s["totals"]
    assert (t["lines"], t["rows"] + t["comments"], t["quarantined"]) == (len(whole) + 1, len(whole), 1)
    q = pl.read_parquet(str(tmp_path / "ds" / "quarantine/*.parquet"))
    assert q["source_file"].to_list() == ["logs/t.json.gz"] and q["line"].to_list() == [len(whole) + 1]
    assert "truncated" in q["reason"][0] and f"after line {len(whole)}" in q["reason"][0]
    rows = pl.read_parquet(str(tmp_path / "ds" / "records/**/*.parquet")).sort("line")
    assert rows["line"].to_list() == [i + 1 for i, x in enumerate(whole) if not x.startswith(b"#")]


def test_cli_convert_info_sql(tmp_path):
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    r = CliRunner().invoke(app, ["convert", str(REAL / "ansor" / "tvm-ci-logs"), "--out", str(tmp_path / "ds"),
                                 "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["totals"]["rows"] == 53 and s["totals"]["balanced"]
    r = CliRunner().invoke(app, ["sql", "SELECT count(*) AS n FROM records", "-d", str(tmp_path / "ds"), "-f", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["n"] == s["totals"]["rows"]
    r = CliRunner().invoke(app, ["sql", "DROP VIEW records", "-d", str(tmp_path / "ds")])
    assert r.exit_code != 0
    # the dataset first, as every other command takes it (it was "Got unexpected extra argument(s)")
    r = CliRunner().invoke(app, ["sql", str(tmp_path / "ds"), "SELECT count(*) AS n FROM records", "-f", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["n"] == s["totals"]["rows"], r.output
    r = CliRunner().invoke(app, ["sql", str(tmp_path / "ds"), "SELECT 1", "-d", str(tmp_path / "ds")])
    assert r.exit_code == 2 and "the dataset is given twice" in r.output
    r = CliRunner().invoke(app, ["sql", str(tmp_path / "ds"), "SELECT", "1"])
    assert r.exit_code == 2 and "takes [DATASET] QUERY, not 3 arguments (quote the query)" in r.output
    r = CliRunner().invoke(app, ["convert", str(tmp_path / "nope"), "--out", str(tmp_path / "ds2")])
    assert r.exit_code == 2 and "nope" in r.output
    r = CliRunner().invoke(app, ["info", str(tmp_path / "nope")])  # a clear error, not a FileNotFoundError traceback
    assert r.exit_code == 2 and "nope: no such dataset folder" in r.output and isinstance(r.exception, SystemExit)
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(app, ["info", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "no record shards" in r.output and "run curate convert first" in r.output
    # converted, but from network_info alone: it said "run curate convert first" to a dataset just converted
    r = CliRunner().invoke(app, ["convert", str(REAL / "network_info"), "--out", str(tmp_path / "nets")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["info", str(tmp_path / "nets")])
    assert r.exit_code == 2 and "run curate convert first" not in r.output, r.output
    n_pickles = len(list((REAL / "network_info").glob("*.task.pkl*")))
    assert (f"its {n_pickles} converted input(s), of format netinfo, gave no measurement records: convert the logs "
            f"into it too, curate convert LOGS --out {tmp_path / 'nets'}") in " ".join(r.output.split()), r.output
    r = CliRunner().invoke(app, ["train", str(tmp_path / "nope"), "--split", "s", "--model", "gbdt", "--out",
                                 str(tmp_path / "m")])  # it said "nope/splits/s.parquet: no such split"
    assert r.exit_code == 2 and "nope: not a dataset" in r.output, r.output
    r = CliRunner().invoke(app, ["sql", "SELECT 1", "-d", str(tmp_path / "ds"), "-f", "arrow"])  # not a text format
    assert r.exit_code == 2 and "--format must be table, csv or json" in r.output
    # --group-mb: the default packs the small logs into one shard, a 1 MB group holds one or two of them
    logs = REAL / "ansor" / "roller-k80" / "pooling"
    for mb, out in (("16", "g16"), ("1", "g1")):
        r = CliRunner().invoke(app, ["convert", str(logs), "--out", str(tmp_path / out), "--group-mb", mb, "--json"])
        assert r.exit_code == 0, r.output
    n16 = len(list((tmp_path / "g16" / "records").rglob("*.parquet")))
    n1 = len(list((tmp_path / "g1" / "records").rglob("*.parquet")))
    assert n16 == 1 and n1 >= 4, (n16, n1)


def test_own_sample_metaschedule_names_and_classes(tmp_path):
    """TVM 0.27 writes IRModule JSON as {"type", "data"} nodes: workloads are still named by their blocks."""
    from tenset_curate.features import operator_classes

    repo = Path(__file__).resolve().parents[1]
    s = convert([repo / "data" / "sample-cpu"], tmp_path / "ds")
    assert s["totals"]["balanced"] and s["totals"]["rows"] >= 2000
    recs = pl.read_parquet(str(tmp_path / "ds" / "records/*/*.parquet"), columns=["task_id", "workload_name",
                                                                                  "workload_key", "source_file"])
    assert "unknown" not in set(recs["workload_name"])
    ops = operator_classes(recs)
    assert {"conv2d", "dense", "depthwise", "batch_matmul", "pooling", "softmax"} <= set(ops["op_class"])


def test_shards_round_trip_the_canonical_schema_and_encodings(real_ds):
    """Shards carry no embedded Arrow schema (4 kB a file), so the Parquet schema alone must give back every type of
    RECORD_SCHEMA; high-entropy columns are stored without a dictionary and `line` with delta encoding."""
    import pyarrow.parquet as pq

    from tenset_curate.schema import RECORD_SCHEMA

    out, _ = real_ds
    shards = sorted((out / "records").rglob("*.parquet"))
    assert shards
    for f in shards[:5] + shards[-3:]:
        pf = pq.ParquetFile(f)
        assert b"ARROW:schema" not in (pf.metadata.metadata or {})
        assert pf.schema_arrow == RECORD_SCHEMA, f
        cols = {pf.metadata.row_group(0).column(i).path_in_schema: pf.metadata.row_group(0).column(i)
                for i in range(pf.metadata.num_columns)}
        assert "DELTA_BINARY_PACKED" in cols["line"].encodings
        for c in ("record_id", "mean_cost", "costs.list.element"):
            assert "RLE_DICTIONARY" not in cols[c].encodings and "PLAIN_DICTIONARY" not in cols[c].encodings, c
        assert any("DICTIONARY" in e for e in cols["task_id"].encodings)
        assert pq.read_table(f).schema == RECORD_SCHEMA


def test_the_compiled_reader_is_built_where_a_compiler_exists():
    """The install builds tenset_curate/_scan.c where a C compiler exists (CI has one): a failed build must not leave
    the suite passing on the Python reader alone (tests/test_scan.py skips when the extension is missing)."""
    import shutil

    from tenset_curate import readers

    if shutil.which("cc") or shutil.which("gcc"):
        assert readers._scan is not None, "tenset_curate._scan was not built: see the pip install output"
