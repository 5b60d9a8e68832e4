"""catalog.py: views over a dataset directory, relative paths, formats.

The dataset is built here from a few hundred REAL TenSet/Ansor lines (roller-k80) written as
RECORD_SCHEMA parquet shards by a small stand-in for the converter (``write_real_dataset``).
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tenset_curate.catalog import (
    CATALOG_NAME,
    build_catalog,
    connect,
    connect_readonly,
    run_sql,
    sanitize_name,
    view_names,
)
from tenset_curate.schema import (
    ERROR_NAMES,
    FAILED_COST_THRESHOLD,
    HW_PARAM_NAMES,
    QUARANTINE_SCHEMA,
    RECORD_SCHEMA,
    WORKLOAD_SCHEMA,
)

REAL_ROOT = Path(os.environ.get("TENSET_CURATE_REALDATA",
                                Path(__file__).resolve().parents[2] / "shared" / "realdata")) / "ansor" / "roller-k80"
HARDWARE = "roller-k80"
# (file, number of leading lines): picked so that failed measurements (error_no 4 and 6) are included.
REAL_FILES = [
    ("conv/ansor_conv2d_128_1008_42_42_336_1_1_1_0.json.gz", 60),  # error_no 4 at line 41
    ("conv/ansor_conv2d_128_1024_14_14_256_1_1_1_0.json.gz", 60),  # error_no 6 at line 46
    ("matmul/ansor_matmul_128_4032_1000.json.gz", 60),
    ("pooling/ansor_avg_pooling_128_1008_42_42_1_1_2_VALID.json.gz", 60),
    ("depthwise/ansor_depthwise_128_168_42_42_3_3_1_SAME.json.gz", 60),
    ("elementwise/ansor_relu_128_1008_42_42.json.gz", 25),
]

pytestmark = pytest.mark.skipif(not REAL_ROOT.is_dir(), reason="real TenSet data not available")


# ------------------------------------------------------------------------------------------------
# stand-in converter (the real one replaces this later)
# ------------------------------------------------------------------------------------------------


def _step(raw: list) -> dict:
    ints, lists, strs, floats = [], [], [], []
    for a in raw[1:]:
        if isinstance(a, bool):
            ints.append(int(a))
        elif isinstance(a, int):
            ints.append(a)
        elif isinstance(a, float):
            floats.append(a)
        elif isinstance(a, str):
            strs.append(a)
        elif isinstance(a, list):
            lists.append([int(x) for x in a if isinstance(x, (int, float))])
    return {"kind": raw[0], "ints": ints, "lists": lists, "strs": strs, "floats": floats}


def _record(line: bytes, source: str, lineno: int) -> dict:
    d = json.loads(line)
    inp, res = d["i"], d["r"]
    wkey, target = inp[0][0], inp[0][1]
    hw = inp[0][2] if len(inp[0]) > 2 and isinstance(inp[0][2], list) else [None] * 8
    kind = target.split()[0]
    wl = json.loads(wkey)
    costs = [float(c) for c in res[0]]
    err = int(res[1])
    valid = err == 0 and all(math.isfinite(c) and 0 < c < FAILED_COST_THRESHOLD for c in costs)
    steps = [_step(s) for s in inp[1][1]]
    return {
        "record_id": hashlib.blake2b(line.rstrip(b"\n"), digest_size=16).hexdigest(),
        "source_file": source,
        "line": lineno,
        "format": "ansor",
        "log_version": d.get("v"),
        "hardware": HARDWARE,
        "hardware_rule": "parent-folder",
        "target": target,
        "target_kind": kind,
        "workload_key": wkey,
        "workload_name": wl[0],
        "workload_hash": hashlib.md5(wkey.encode()).hexdigest(),
        "workload_args": [float(a) for a in wl[1:] if isinstance(a, (int, float))],
        "workload_str_args": [a for a in wl[1:] if isinstance(a, str)],
        "task_id": hashlib.blake2b(f"{wkey}\x00{kind}".encode(), digest_size=16).hexdigest(),
        "steps": steps,
        "n_steps": len(steps),
        "costs": costs,
        "mean_cost": sum(costs) / len(costs) if valid else None,
        "error_no": err,
        "error_name": ERROR_NAMES[err],
        "is_valid": valid,
        "all_cost": float(res[2]),
        "timestamp": float(res[3]),
        **{f"hw_{n}": v for n, v in zip(HW_PARAM_NAMES, hw)},
    }


def real_records() -> list[dict]:
    rows = []
    for rel, n in REAL_FILES:
        with gzip.open(REAL_ROOT / rel, "rb") as fh:
            for lineno, line in enumerate(fh, 1):
                if lineno > n:
                    break
                rows.append(_record(line, rel, lineno))
    return rows


def records_table(rows: list[dict]) -> pa.Table:
    cols = {name: [r.get(name) for r in rows] for name in RECORD_SCHEMA.names}
    return pa.Table.from_pydict(cols, schema=RECORD_SCHEMA)


def write_real_dataset(root: Path, n_shards: int = 3) -> pa.Table:
    """Write a small dataset from real lines; returns the records table written."""
    table = records_table(real_records())
    part = root / "records" / f"hardware={HARDWARE}"
    part.mkdir(parents=True)
    step = math.ceil(table.num_rows / n_shards)
    shards = []
    for i in range(n_shards):
        shard = table.slice(i * step, step)
        digest = hashlib.blake2b(str(i).encode(), digest_size=8).hexdigest()
        pq.write_table(shard, part / f"part-{digest}.parquet")
        shards.append(f"records/hardware={HARDWARE}/part-{digest}.parquet")
    # the shape convert.py writes: {"inputs": {label: {format, key, lines, rows, ..., outputs}}}
    inputs = {}
    for rel, n in REAL_FILES:
        rows = [r for r in table.to_pylist() if r["source_file"] == rel]
        inputs[rel] = {"format": "ansor", "key": hashlib.md5(rel.encode()).hexdigest()[:16], "lines": n,
                       "rows": len(rows), "quarantined": 0, "comments": 0,
                       "failed": sum(not r["is_valid"] for r in rows), "outputs": shards}  # one group's shards
    (root / "manifest.json").write_text(json.dumps({"schema_version": "1", "converter": "test", "inputs": inputs}))
    return table


def name_in_manifest(root: Path, shards: list[Path], label: str = "added.json") -> None:
    """Record shards written by hand as one more converted input's outputs, as convert does: readers refuse record
    shards the manifest does not name (storage.check_readable: an interrupted write)."""
    man = json.loads((root / "manifest.json").read_text())
    man["inputs"][label] = {"format": "ansor", "outputs": [p.relative_to(root).as_posix() for p in shards]}
    (root / "manifest.json").write_text(json.dumps(man))


@pytest.fixture(scope="session")
def real_dataset(tmp_path_factory) -> tuple[Path, pa.Table]:
    root = tmp_path_factory.mktemp("ds") / "dataset"
    root.mkdir()
    table = write_real_dataset(root)
    splits = root / "splits"
    splits.mkdir()
    ids = table.column("record_id").to_pylist()
    parts = ["train" if i % 10 < 8 else ("valid" if i % 10 == 8 else "test") for i in range(len(ids))]
    pq.write_table(pa.table({"record_id": ids, "part": parts}), splits / "x.parquet")
    build_catalog(root)
    return root, table


@pytest.fixture
def dataset_copy(real_dataset, tmp_path) -> tuple[Path, pa.Table]:
    root, table = real_dataset
    dst = tmp_path / "copy"
    shutil.copytree(root, dst, symlinks=True)
    return dst, table


def q1(root: Path, sql: str):
    return run_sql(root, sql, fmt="arrow").to_pylist()


# ------------------------------------------------------------------------------------------------
# views
# ------------------------------------------------------------------------------------------------


def test_fixture_is_real_and_conformant(real_dataset):
    root, table = real_dataset
    assert 300 <= table.num_rows <= 400
    assert table.schema.equals(RECORD_SCHEMA)
    assert set(table.column("error_no").to_pylist()) >= {0, 4, 6}
    assert not all(table.column("is_valid").to_pylist())


def test_views_exist(real_dataset):
    root, _ = real_dataset
    names = set(view_names(root))
    assert {"records", "quarantine", "workloads", "networks", "tasks", "manifest_inputs", "split_x"} <= names
    assert (root / CATALOG_NAME).is_file()
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp") or p.name.endswith(".wal")]


def test_record_counts_match_rows_written(real_dataset):
    root, table = real_dataset
    [row] = q1(root, "SELECT count(*) AS n, count(*) FILTER (WHERE is_valid) AS v, count(DISTINCT record_id) AS u FROM records")
    assert row["n"] == table.num_rows
    assert row["v"] == sum(table.column("is_valid").to_pylist())
    assert row["u"] == len(set(table.column("record_id").to_pylist()))
    # the trusted connection (relative paths via file_search_path) agrees
    con = connect(root)
    try:
        assert con.execute("SELECT count(*) FROM records").fetchone()[0] == table.num_rows
    finally:
        con.close()


def test_records_columns_are_the_record_schema(real_dataset):
    root, _ = real_dataset
    cols = [r["column_name"] for r in q1(root, "DESCRIBE records")]
    assert sorted(cols) == sorted(RECORD_SCHEMA.names)


def test_hardware_column_comes_from_the_shards_not_their_folder(real_dataset, dataset_copy):
    """The records view reads each shard's own hardware column. Its folder name is that name made safe for a path
    (convert's _safe_part), so 'gpu/a' and 'gpu=a' share the folder hardware=gpu_a; the view read the folder as
    the column (hive partitioning) and showed both as 'gpu_a', merged. A name that looks like a number stays text."""
    root, table = real_dataset
    rows = q1(root, "SELECT hardware, typeof(hardware) AS t, count(*) AS n FROM records GROUP BY ALL")
    assert rows == [{"hardware": HARDWARE, "t": "VARCHAR", "n": table.num_rows}]
    root2, _ = dataset_copy
    folder = root2 / "records" / "hardware=gpu_a"
    folder.mkdir()
    for i, name in enumerate(["gpu/a", "gpu=a", "2080"]):
        part = table.slice(7 * i, 7)
        part = part.set_column(part.schema.get_field_index("hardware"), "hardware", pa.array([name] * 7, pa.string()))
        pq.write_table(part, folder / f"part-{i}.parquet")
    name_in_manifest(root2, sorted(folder.glob("*.parquet")))
    build_catalog(root2)
    rows = q1(root2, "SELECT hardware, typeof(hardware) AS t, count(*) AS n FROM records GROUP BY ALL ORDER BY 1")
    assert rows == [{"hardware": h, "t": "VARCHAR", "n": n}
                    for h, n in sorted([("2080", 7), ("gpu/a", 7), ("gpu=a", 7), (HARDWARE, table.num_rows)])]
    [r] = q1(root2, "SELECT count(*) AS n FROM records WHERE hardware = 'gpu/a'")
    assert r["n"] == 7


def test_empty_parts_are_typed_empty_views(real_dataset):
    root, _ = real_dataset
    assert not (root / "quarantine").exists()
    for view, schema in (("quarantine", QUARANTINE_SCHEMA), ("workloads", WORKLOAD_SCHEMA)):
        assert q1(root, f"SELECT count(*) AS n FROM {view}") == [{"n": 0}]
        assert [r["column_name"] for r in q1(root, f"DESCRIBE {view}")] == schema.names
    assert q1(root, "SELECT count(*) AS n FROM networks") == [{"n": 0}]
    assert run_sql(root, "SELECT * FROM quarantine", fmt="json") == "[]"


def test_quarantine_and_workloads_when_present(dataset_copy):
    root, _ = dataset_copy
    (root / "quarantine").mkdir()
    pq.write_table(
        pa.table({"source_file": ["a.json"], "line": [3], "reason": ["bad json"], "raw": ["{"]}, schema=QUARANTINE_SCHEMA),
        root / "quarantine" / "part-0.parquet",
    )
    build_catalog(root)
    assert q1(root, "SELECT reason, line FROM quarantine") == [{"reason": "bad json", "line": 3}]


def test_split_view(real_dataset):
    root, table = real_dataset
    rows = q1(root, "SELECT part, count(*) AS n FROM split_x GROUP BY part ORDER BY part")
    assert sum(r["n"] for r in rows) == table.num_rows
    assert [r["part"] for r in rows] == ["test", "train", "valid"]
    [j] = q1(root, "SELECT count(*) AS n FROM split_x s JOIN records r USING (record_id)")
    assert j["n"] == table.num_rows


def test_tables_and_split_names_are_sanitised(dataset_copy):
    root, _ = dataset_copy
    (root / "tables").mkdir()
    pq.write_table(pa.table({"record_id": ["a"], "label": [1.5]}), root / "tables" / "Labels-V2.parquet")
    pq.write_table(pa.table({"k": [1]}), root / "tables" / "records.parquet")  # collides with a fixed view
    (root / "tables" / "feats").mkdir()
    pq.write_table(pa.table({"k": [1, 2]}), root / "tables" / "feats" / "part-0.parquet")
    pq.write_table(pa.table({"record_id": ["a"], "part": ["test"]}), root / "splits" / "My Split 1.parquet")
    build_catalog(root)
    names = set(view_names(root))
    assert {"labels_v2", "records_table", "feats", "split_my_split_1", "split_x"} <= names
    assert q1(root, "SELECT label FROM labels_v2") == [{"label": 1.5}]
    assert q1(root, "SELECT count(*) AS n FROM feats") == [{"n": 2}]
    assert q1(root, "SELECT part FROM split_my_split_1") == [{"part": "test"}]
    assert sanitize_name("2024 Labels!") == "t_2024_labels"


def test_tasks_view(real_dataset):
    root, table = real_dataset
    rows = q1(root, "SELECT * FROM tasks ORDER BY task_id")
    by_task: dict[str, list[dict]] = {}
    for r in table.to_pylist():
        by_task.setdefault(r["task_id"], []).append(r)
    assert len(rows) == len(by_task) == len({r["task_id"] for r in rows})
    for r in rows:
        recs = by_task[r["task_id"]]
        assert r["hardware"] == HARDWARE
        assert r["workload_key"] == recs[0]["workload_key"]
        assert r["workload_name"] == recs[0]["workload_name"]
        assert r["target_kind"] == "cuda"
        assert r["records"] == len(recs)
        assert r["valid_records"] == sum(x["is_valid"] for x in recs)
        assert r["best_mean_cost"] == min(x["mean_cost"] for x in recs if x["is_valid"])


def test_manifest_inputs_view(real_dataset):
    root, table = real_dataset
    rows = q1(root, "SELECT label, format, lines, rows, failed FROM manifest_inputs ORDER BY label")
    assert [(r["label"], r["lines"], r["format"]) for r in rows] == sorted((p, n, "ansor") for p, n in REAL_FILES)
    assert sum(r["rows"] for r in rows) == table.num_rows
    assert sum(r["failed"] for r in rows) == table.num_rows - sum(table.column("is_valid").to_pylist())


def test_manifest_inputs_absent_is_empty(tmp_path):
    (tmp_path / "records").mkdir()
    build_catalog(tmp_path)
    assert q1(tmp_path, "SELECT count(*) AS n FROM manifest_inputs") == [{"n": 0}]
    assert "label" in [r["column_name"] for r in q1(tmp_path, "DESCRIBE manifest_inputs")]


def test_networks_view(dataset_copy):
    from tenset_curate.netinfo import NETWORKS_SCHEMA

    root, _ = dataset_copy
    assert [r["column_name"] for r in q1(root, "DESCRIBE networks")] == NETWORKS_SCHEMA.names
    (root / "networks").mkdir()
    row = {"network": "resnet_50", "input_shape": "[[1,3,224,224]]", "batch_size": 1, "target": "cuda",
           "target_kind": "cuda", "workload_key": '["conv2d_layer", 1]', "task_weight": 2, "task_index": 0,
           "task_desc": None, "source_file": "x.task.pkl"}
    pq.write_table(pa.Table.from_pylist([row], schema=NETWORKS_SCHEMA), root / "networks" / "part-abc.parquet")
    build_catalog(root)
    assert q1(root, "SELECT network, task_weight FROM networks") == [{"network": "resnet_50", "task_weight": 2}]


def test_views_use_relative_paths_and_survive_a_move(real_dataset, tmp_path):
    root, table = real_dataset
    con = connect(root)
    try:
        sqls = [r[0] for r in con.execute("SELECT sql FROM duckdb_views() WHERE NOT internal").fetchall()]
    finally:
        con.close()
    assert sqls and not any(str(root) in s for s in sqls)
    moved = tmp_path / "elsewhere" / "moved_dataset"
    moved.parent.mkdir()
    shutil.copytree(root, tmp_path / "tmpcopy")
    shutil.move(str(tmp_path / "tmpcopy"), moved)
    # no rebuild: the catalog built at the old place works at the new one
    assert q1(moved, "SELECT count(*) AS n FROM records") == [{"n": table.num_rows}]
    assert q1(moved, "SELECT count(*) AS n FROM split_x") == [{"n": table.num_rows}]
    con = connect(moved)
    try:
        assert con.execute("SELECT count(*) FROM tasks").fetchone()[0] > 0
    finally:
        con.close()


def test_new_shards_are_seen_without_rebuild(dataset_copy):
    root, table = dataset_copy
    con = connect_readonly(root)
    try:
        assert run_sql(root, "SELECT count(*) AS n FROM records", fmt="arrow", con=con).to_pylist() == [{"n": table.num_rows}]
        # another process writes a new shard (atomically: temp name that does not end in .parquet, then rename)
        part = root / "records" / f"hardware={HARDWARE}"
        tmp = part / "part-new.parquet.inprogress"
        pq.write_table(table.slice(0, 5), tmp)
        assert run_sql(root, "SELECT count(*) AS n FROM records", fmt="arrow", con=con).to_pylist() == [{"n": table.num_rows}]
        os.replace(tmp, part / "part-new.parquet")
        name_in_manifest(root, [part / "part-new.parquet"])  # the writer's last step
        assert run_sql(root, "SELECT count(*) AS n FROM records", fmt="arrow", con=con).to_pylist() == [{"n": table.num_rows + 5}]
    finally:
        con.close()


WRITER = """
import json, sys, time
from pathlib import Path
import pyarrow.parquet as pq
from tenset_curate.storage import dataset_lock, write_parquet_atomic
src, part, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
table = pq.read_table(src)
root = part.parent.parent
with dataset_lock(root, what="test writer"):  # as convert: the writer holds the dataset, names its shards last
    for i in range(n):
        write_parquet_atomic(part / f"part-w{i:03d}.parquet", table)  # <name>.tmp-<pid>, fsync, os.replace
        time.sleep(0.01)
    man = json.loads((root / "manifest.json").read_text())
    man["inputs"]["writer"] = {"outputs": [f"records/{part.name}/part-w{i:03d}.parquet" for i in range(n)]}
    (root / "manifest.json").write_text(json.dumps(man))
"""


def test_queries_keep_working_while_another_process_writes_shards(dataset_copy):
    import subprocess
    import sys

    root, table = dataset_copy
    part = root / "records" / f"hardware={HARDWARE}"
    src = root.parent / "one_shard.parquet"
    pq.write_table(table.slice(0, 10), src)
    n_new = 25
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(src), str(part), str(n_new)],
                            cwd=Path(__file__).resolve().parents[1])
    seen = []
    try:
        con = connect_readonly(root)
        try:
            while proc.poll() is None:
                out = run_sql(root, "SELECT count(*) AS n, sum(line) AS s FROM records", fmt="arrow", con=con)
                seen.append(out.to_pylist()[0]["n"])
        finally:
            con.close()
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == 0
    assert seen == sorted(seen)  # monotonic: never a half-written shard, never an error
    assert all((n - table.num_rows) % 10 == 0 for n in seen)
    final = q1(root, "SELECT count(*) AS n FROM records")[0]["n"]
    assert final == table.num_rows + 10 * n_new


def test_rebuild_is_atomic_and_open_readers_survive(dataset_copy):
    root, table = dataset_copy
    con = connect_readonly(root)
    try:
        build_catalog(root)
        build_catalog(root)
        assert con.execute("SELECT count(*) FROM records").fetchone()[0] == table.num_rows
    finally:
        con.close()
    leftovers = [p.name for p in root.iterdir() if p.name != CATALOG_NAME and "catalog" in p.name]
    assert leftovers == []


def test_missing_catalog_is_a_clear_error(tmp_path):
    (tmp_path / "records").mkdir()
    with pytest.raises(FileNotFoundError, match="build_catalog"):
        connect_readonly(tmp_path)
    build_catalog(tmp_path)  # an empty dataset still gets a working catalog
    assert q1(tmp_path, "SELECT count(*) AS n FROM records") == [{"n": 0}]
    assert q1(tmp_path, "SELECT count(*) AS n FROM tasks") == [{"n": 0}]


# ------------------------------------------------------------------------------------------------
# run_sql formats
# ------------------------------------------------------------------------------------------------

FORMAT_SQL = (
    "SELECT workload_name, count(*) AS n, count(*) FILTER (WHERE is_valid) AS valid, "
    "min(mean_cost) AS best, sum(line) AS line_sum FROM records GROUP BY workload_name ORDER BY workload_name"
)


def _expected(table: pa.Table) -> list[dict]:
    groups: dict[str, list[dict]] = {}
    for r in table.to_pylist():
        groups.setdefault(r["workload_name"], []).append(r)
    return [
        {
            "workload_name": k,
            "n": len(v),
            "valid": sum(x["is_valid"] for x in v),
            "best": min(x["mean_cost"] for x in v if x["mean_cost"] is not None),
            "line_sum": sum(x["line"] for x in v),
        }
        for k, v in sorted(groups.items())
    ]


def _num(s: str):
    try:
        return int(s)
    except ValueError:
        return float(s)


def test_format_arrow(real_dataset):
    root, table = real_dataset
    out = run_sql(root, FORMAT_SQL, fmt="arrow")
    assert isinstance(out, pa.Table)
    assert out.to_pylist() == _expected(table)


def test_format_json(real_dataset):
    root, table = real_dataset
    out = run_sql(root, FORMAT_SQL, fmt="json")
    assert json.loads(out) == _expected(table)


def test_format_csv(real_dataset):
    root, table = real_dataset
    out = run_sql(root, FORMAT_SQL, fmt="csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    parsed = [{k: (v if k == "workload_name" else _num(v)) for k, v in r.items()} for r in rows]
    assert parsed == _expected(table)


def test_format_table(real_dataset):
    root, table = real_dataset
    out = run_sql(root, FORMAT_SQL, fmt="table")
    lines = out.rstrip("\n").split("\n")
    header = [h.strip() for h in lines[0].split("|")]
    assert header == ["workload_name", "n", "valid", "best", "line_sum"]
    assert set(lines[1]) <= {"-", "+"}
    assert lines[-1] == f"({len(_expected(table))} rows)"
    body = lines[2:-1]
    # aligned: every separator at the same column
    assert len({tuple(i for i, ch in enumerate(line) if ch == "|") for line in body + lines[:1]}) == 1
    parsed = []
    for line in body:
        cells = [c.strip() for c in line.split("|")]
        parsed.append(dict(zip(header, [cells[0]] + [_num(c) for c in cells[1:]])))
    assert parsed == _expected(table)


def test_formats_handle_nulls_and_nested_values(real_dataset):
    root, _ = real_dataset
    sql = "SELECT record_id, mean_cost, costs, steps[1] AS first_step FROM records WHERE NOT is_valid ORDER BY record_id"
    arrow = run_sql(root, sql, fmt="arrow").to_pylist()
    assert arrow and all(r["mean_cost"] is None for r in arrow)
    assert json.loads(run_sql(root, sql, fmt="json")) == arrow
    rows = list(csv.DictReader(io.StringIO(run_sql(root, sql, fmt="csv"))))
    assert [r["mean_cost"] for r in rows] == [""] * len(arrow)
    assert [json.loads(r["costs"]) for r in rows] == [r["costs"] for r in arrow]
    assert [json.loads(r["first_step"]) for r in rows] == [r["first_step"] for r in arrow]
    assert "NULL" in run_sql(root, sql, fmt="table")


def test_limit(real_dataset):
    root, _ = real_dataset
    assert run_sql(root, "SELECT * FROM records", fmt="arrow", limit=7).num_rows == 7
    assert len(json.loads(run_sql(root, "SELECT record_id FROM records ORDER BY record_id", fmt="json", limit=3))) == 3
    assert run_sql(root, "SELECT 1 AS a", fmt="arrow", limit=0).num_rows == 0
    with pytest.raises(ValueError):
        run_sql(root, "SELECT 1", fmt="xml")


def test_read_only_helpers_work(real_dataset):
    root, table = real_dataset
    assert "records" in run_sql(root, "SHOW TABLES", fmt="csv")
    assert run_sql(root, "SUMMARIZE SELECT line FROM records", fmt="arrow").num_rows == 1
    assert "read_parquet" in run_sql(root, "EXPLAIN SELECT count(*) FROM records", fmt="csv").lower()
    out = run_sql(root, "PRAGMA table_info('records')", fmt="arrow")
    assert sorted(out.column("name").to_pylist()) == sorted(RECORD_SCHEMA.names)
    n = run_sql(root, f"SELECT count(*) AS n FROM read_parquet('{root}/records/*/*.parquet')", fmt="arrow")
    assert n.to_pylist() == [{"n": table.num_rows}]


def test_count_over_300k_rows_is_fast(dataset_copy):
    root, table = dataset_copy
    part = root / "records" / f"hardware={HARDWARE}"
    reps = 300_000 // table.num_rows + 1
    big = pa.concat_tables([table] * reps)
    pq.write_table(big, part / "part-big.parquet", row_group_size=64_000)
    name_in_manifest(root, [part / "part-big.parquet"])
    build_catalog(root)
    con = connect_readonly(root)
    try:
        run_sql(root, "SELECT count(*) FROM records", con=con)  # warm-up
        t0 = time.perf_counter()
        out = run_sql(root, "SELECT count(*) AS n, count(*) FILTER (WHERE is_valid) AS v FROM records", fmt="arrow", con=con)
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        out2 = run_sql(root, "SELECT count(*) AS n FROM records", fmt="arrow")  # opens + closes its own connection
        cold = time.perf_counter() - t0
    finally:
        con.close()
    assert out.to_pylist()[0]["n"] == table.num_rows * (reps + 1) >= 300_000
    assert out2.to_pylist()[0]["n"] == table.num_rows * (reps + 1)
    assert warm < 1.0, warm
    assert cold < 1.0, cold


def test_ctrl_c_during_a_query_is_an_interrupt_not_a_query_error(real_dataset, capsys, monkeypatch):
    """DuckDB takes Ctrl-C itself and raised "Query interrupted" as a RuntimeError through the Arrow fetch, which
    `curate sql` printed as `error: RuntimeError: Query interrupted` (exit 2). run_sql now raises KeyboardInterrupt,
    and the command line says it was interrupted (exit 130, as for every command; Typer said nothing)."""
    import threading

    from tenset_curate.cli import app

    real_dataset = real_dataset[0]
    con = connect_readonly(real_dataset)
    timer = threading.Timer(1.0, con.interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            run_sql(real_dataset, "SELECT count(*) FROM range(100000000000) t(x) WHERE (x * x) % 7 = 3", con=con)
        assert "Interrupted" in str(e.value.__cause__)  # con.interrupt(); a real SIGINT says "Query interrupted"
    finally:
        timer.cancel()
        con.close()

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr("tenset_curate.catalog.run_sql", interrupted)
    monkeypatch.setattr("tenset_curate.splits.write_split", interrupted)
    for argv, said in [(["sql", "SELECT 1", "-d", str(real_dataset)], "interrupted: curate sql stopped\n"),
                       (["splits", "make", str(real_dataset), "--scheme", "within-task", "--name", "x"],
                        "interrupted: curate splits make stopped before it finished; what it was writing may be "
                        "incomplete: run the same command again to finish it\n")]:
        with pytest.raises(SystemExit) as e:
            app(args=argv, prog_name="curate")
        assert e.value.code == 130 and capsys.readouterr().err == said
