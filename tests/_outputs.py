"""Shared by the crash-safety and full-disk tests: output comparison without timing fields."""

TIMING_KEYS = {"seconds", "built_at", "since", "started", "finished", "elapsed"}


def strip_timing(obj):
    """``obj`` (parsed JSON) without the keys that record when or how long, at any depth."""
    if isinstance(obj, dict):
        return {k: strip_timing(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [strip_timing(v) for v in obj]
    return obj


# Parts of a manifest entry that depend on which run converted an input (grouping follows the history of runs).
LAYOUT_KEYS = {"group", "outputs"}


def dataset_content(out) -> dict:
    """What a converted dataset holds, whatever its shard layout: every table's rows in a canonical order and the
    manifest's per-input entries without timing and layout fields. An incremental convert (inputs added over
    several runs) groups inputs into shards differently from one run over all of them; its content must be equal."""
    from pathlib import Path

    import orjson
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    res = {}
    for sub in ("records", "quarantine", "workloads", "networks"):
        shards = sorted((out / sub).rglob("*.parquet")) if (out / sub).exists() else []
        tables = [pq.ParquetFile(p).read() for p in shards]  # no hive partition column
        if not tables:
            res[sub] = None
            continue
        t = pa.concat_tables(tables)
        keys = [k for k in ("source_file", "line", "workload_key", "network") if k in t.column_names]
        res[sub] = t.sort_by([(k, "ascending") for k in keys]) if keys else t
    man = orjson.loads((out / "manifest.json").read_bytes())
    res["manifest"] = {label: {k: v for k, v in strip_timing(e).items() if k not in LAYOUT_KEYS}
                       for label, e in man["inputs"].items()}
    return res


def assert_same_content(out, ref, what: str = "") -> None:
    a, b = dataset_content(out), dataset_content(ref)
    assert a["manifest"] == b["manifest"], f"{what}: manifest entries differ"
    for sub in ("records", "quarantine", "workloads", "networks"):
        if b[sub] is None:
            assert a[sub] is None, f"{what}: {sub} has rows that the reference run does not"
        else:
            assert a[sub] is not None and a[sub].equals(b[sub]), f"{what}: {sub} rows differ"
