"""``curate convert``: logs in, one Parquet dataset out.

Inputs are files or folders. A folder is walked: Ansor/TenSet logs (``*.json``, ``*.jsonl``, ``*.log``, each
optionally ``.gz``), MetaSchedule databases (a folder holding ``database_workload.json[.gz]`` and
``database_tuning_record.json[.gz]`` is one input) and TenSet ``network_info`` pickles (``*.pkl[.gz]``).

Every input becomes its own shards, named by a hash of its label and content, so a re-run on unchanged inputs does
nothing, new inputs add shards, a changed input replaces its own, and the result does not depend on the number of
workers. The manifest records every input (size, mtime, sha256, counts, hardware rule) and is rewritten atomically
after each finished input, so a killed run resumes where it stopped.

Layout::

    DATASET/manifest.json
    DATASET/records/hardware=<name>/part-<key>.parquet
    DATASET/quarantine/part-<key>.parquet
    DATASET/workloads/part-<key>.parquet      (MetaSchedule IRModules)
    DATASET/networks/part-<key>.parquet       (network_info)
    DATASET/catalog.duckdb                    (views over all of it; see catalog.py)
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from . import __version__
from .executors import map_unordered
from .readers import (
    FileStats,
    InputError,
    _Sink,
    detect_format,
    hardware_context,
    read_ansor,
    read_metaschedule,
)
from .schema import RECORD_SCHEMA, SCHEMA_VERSION, WORKLOAD_SCHEMA
from .storage import (
    AtomicParquetWriter,
    OutputError,
    atomic_write_json,
    dataset_lock,
    file_sha256,
    remove_stale_tmp,
    write_parquet_atomic,
)

LOG_SUFFIXES = (".json", ".jsonl", ".log", ".txt", ".tsv")
MANIFEST = "manifest.json"
CONVERTER_VERSION = f"{__version__}+schema{SCHEMA_VERSION}"


@dataclass
class Unit:
    """One input: a log file, a MetaSchedule database (two files) or a network_info pickle."""

    kind: str  # ansor | metaschedule | netinfo
    label: str  # stable name used in source_file and in the manifest
    paths: list  # [Path]; metaschedule: [workload file, record file]
    root: Path | None  # the folder given on the command line, if any

    def fingerprint(self) -> list[dict]:
        out = []
        for p in self.paths:
            st = p.stat()
            out.append({"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        return out


def _is_log(p: Path) -> bool:
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    return name.endswith(LOG_SUFFIXES) and not name.startswith("database_")


def discover(inputs: list[Path]) -> list[Unit]:
    """Find every input unit under the given files and folders, in a deterministic order."""
    units: dict[str, Unit] = {}
    for inp in inputs:
        inp = Path(inp)
        if not inp.exists():
            raise InputError(f"{inp}: no such file or folder")
        if inp.is_file():
            fmt = detect_format(inp)
            if fmt == "metaschedule":
                _add_ms_dir(units, inp.parent, inp.parent.name, inp.parent)
            else:
                units.setdefault(inp.name, Unit(fmt, inp.name, [inp], None))
            continue
        for dirpath, dirnames, filenames in os.walk(inp):
            dirnames.sort()
            d = Path(dirpath)
            rel = d.relative_to(inp)
            prefix = inp.resolve().name if str(rel) == "." else f"{inp.resolve().name}/{rel.as_posix()}"
            names = set(filenames)
            if any(n.startswith("database_tuning_record.json") for n in names):
                # a MetaSchedule database folder: its other files (hardware.json, workloads.json, logs/) are
                # side files of the collector, not tuning logs
                _add_ms_dir(units, d, prefix, inp)
                continue
            for n in sorted(filenames):
                p = d / n
                if n.startswith(("database_tuning_record.json", "database_workload.json")) or n.startswith("."):
                    continue
                fmt = detect_format(p)
                if fmt == "netinfo" or _is_log(p):
                    label = f"{prefix}/{n}"
                    units.setdefault(label, Unit(fmt, label, [p], inp))
    return [units[k] for k in sorted(units)]


def _add_ms_dir(units: dict, d: Path, label: str, root: Path | None) -> None:
    def pick(stem):
        for cand in (d / f"{stem}.json", d / f"{stem}.json.gz"):
            if cand.exists():
                return cand
        return None

    wl, rec = pick("database_workload"), pick("database_tuning_record")
    if rec is None:
        return
    if wl is None:
        raise InputError(f"{rec}: MetaSchedule tuning records without a database_workload.json beside them")
    units.setdefault(label, Unit("metaschedule", label, [wl, rec], root if root is not None and root.is_dir() else None))


def _safe_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def unit_key(unit: Unit, shas: list[str]) -> str:
    h = hashlib.blake2b(digest_size=10)
    h.update(unit.label.encode())
    for s in shas:
        h.update(s.encode())
    h.update(CONVERTER_VERSION.encode())
    return h.hexdigest()


def convert_unit(unit: Unit, key: str, out: Path, hardware: str | None) -> dict:
    """Convert one input into its shards (atomically). Runs in a worker process."""
    t0 = time.perf_counter()
    outputs: list[str] = []
    hw = hardware_context(unit.paths[-1], hardware, unit.root)
    if unit.kind == "netinfo":
        from .netinfo import networks_table

        tbl = networks_table([unit.paths[0]])
        rel = f"networks/part-{key}.parquet"
        write_parquet_atomic(out / rel, tbl)
        return {"kind": unit.kind, "outputs": [rel], "stats": {"lines": 0, "rows": 0, "network_rows": tbl.num_rows, "quarantined": 0,
                                                               "comments": 0, "failed": 0, "hardware": {},
                                                               "hardware_rules": {}, "stream_error": None},
                "seconds": time.perf_counter() - t0}
    sink = _Sink(unit.label)
    if unit.kind == "metaschedule":
        wl_label = f"{unit.label}/{unit.paths[0].name}"
        sink.source_file = f"{unit.label}/{unit.paths[1].name}"
        sink.stats.source_file = sink.source_file
        batches = read_metaschedule(unit.paths[0], unit.paths[1], sink.source_file, hw, sink, wl_label)
    else:
        batches = read_ansor(unit.paths[0], unit.label, hw, sink)
    writers: dict[str, AtomicParquetWriter] = {}
    try:
        for b in batches:
            hw_col = b.column("hardware")
            names = hw_col.unique().to_pylist()
            for name in names:
                part = b if len(names) == 1 else b.filter(pa_equal(hw_col, name))
                # keyed by folder: two names that map to one folder share its shard (the column keeps the name)
                rel = f"records/hardware={_safe_part(name)}/part-{key}.parquet"
                w = writers.get(rel)
                if w is None:
                    w = writers[rel] = AtomicParquetWriter(out / rel, RECORD_SCHEMA)
                    outputs.append(rel)
                w.write(part)
        for w in writers.values():
            w.commit()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    stats = sink.stats
    stats.check()
    extra = {}
    if unit.kind == "metaschedule":
        ws: FileStats = sink.workload_stats
        ws.check()
        extra["workload_file"] = ws.to_dict()
        rel = f"workloads/part-{key}.parquet"
        write_parquet_atomic(out / rel, sink.workloads.cast(WORKLOAD_SCHEMA))
        outputs.append(rel)
    if sink.quarantine:
        rel = f"quarantine/part-{key}.parquet"
        write_parquet_atomic(out / rel, sink.quarantine_table())
        outputs.append(rel)
    d = stats.to_dict()  # record-file counts; a MetaSchedule workload file's counts are in extra
    return {"kind": unit.kind, "outputs": sorted(outputs), "stats": d, **extra,
            "seconds": time.perf_counter() - t0}


def pa_equal(arr, value):
    import pyarrow.compute as pc

    return pc.equal(arr, value)


def _worker(args):
    unit, key, out, hardware = args
    try:
        return unit.label, convert_unit(unit, key, Path(out), hardware), None
    except (InputError, ValueError, OSError, OutputError, OverflowError, RecursionError,
            AssertionError) as e:  # one broken input does not stop the others; it is reported as failed
        return unit.label, None, f"{type(e).__name__}: {e}"


def load_manifest(out: Path) -> dict:
    p = out / MANIFEST
    if not p.exists():
        return {"schema_version": SCHEMA_VERSION, "converter": CONVERTER_VERSION, "inputs": {}}
    m = orjson.loads(p.read_bytes())
    if not isinstance(m, dict) or not isinstance(m.get("inputs"), dict):
        raise OutputError(f"{p}: not a tenset-curate manifest")
    return m


def convert(inputs: list, out: Path, hardware: str | None = None, workers: int = 1, progress: bool = False,
            log=None, wait: bool = False, executor: str = "local", address: str | None = None) -> dict:
    """Convert logs into the dataset at ``out``. Returns a summary dict (what ``--json`` prints).

    Unchanged inputs (same size, mtime and sha256 as in the manifest) are skipped; new or changed ones are
    converted; a killed run resumes. Input lines = rows + quarantined + comments is checked for every file.
    ``executor`` (``local`` | ``ray``, see executors.py) and ``workers`` decide where the per-input work runs;
    the output is the same either way.
    """
    out = Path(out)
    log = log or (lambda msg: None)
    t0 = time.perf_counter()
    units = discover([Path(p) for p in inputs])
    if not units:
        raise InputError(f"no logs found in {', '.join(map(str, inputs))}")
    with dataset_lock(out, wait=wait, what="curate convert"):
        remove_stale_tmp(out)
        manifest = load_manifest(out)
        if manifest.get("converter") != CONVERTER_VERSION:
            manifest = {"schema_version": SCHEMA_VERSION, "converter": CONVERTER_VERSION, "inputs": {}}
        todo = []
        skipped = 0
        for u in units:
            fp = u.fingerprint()
            old = manifest["inputs"].get(u.label)
            if old and [(f["path"], f["size"], f["mtime_ns"]) for f in old["files"]] == [
                    (f["path"], f["size"], f["mtime_ns"]) for f in fp] and _outputs_exist(out, old):
                skipped += 1
                continue
            shas = [file_sha256(p) for p in u.paths]
            if old and [f["sha256"] for f in old["files"]] == shas and _outputs_exist(out, old):
                for f, s in zip(fp, shas):  # touched but unchanged: refresh the fingerprint only
                    f["sha256"] = s
                old["files"] = fp
                skipped += 1
                continue
            for f, s in zip(fp, shas):
                f["sha256"] = s
            todo.append((u, unit_key(u, shas), fp))
        errors: dict[str, str] = {}
        done = 0
        if todo:
            log(f"converting {len(todo)} input(s), {skipped} unchanged, {workers} worker(s)")
            bar = _bar(len(todo), progress)
            last_save = time.monotonic()
            args = [(u, key, str(out), hardware) for u, key, _ in todo]
            meta = {u.label: (key, fp) for u, key, fp in todo}
            # one item per input; in parallel runs the biggest go first, which keeps every worker busy to the end
            results = map_unordered(_worker, args, executor=executor, workers=workers, address=address,
                                    cost=lambda a: sum(p.stat().st_size for p in a[0].paths))
            try:
                for label, res, err in results:
                    key, fp = meta[label]
                    if err:
                        errors[label] = err
                        log(f"error: {label}: {err}")
                    else:
                        old = manifest["inputs"].get(label)
                        manifest["inputs"][label] = {"files": fp, "key": key, "format": res["kind"], **res["stats"],
                                                     "outputs": res["outputs"],
                                                     **({"workload_file": res["workload_file"]}
                                                        if "workload_file" in res else {})}
                        if old and old.get("key") != key:
                            _remove_outputs(out, old, keep=set(res["outputs"]))
                        done += 1
                    bar.update(1)
                    if time.monotonic() - last_save > 2.0:
                        atomic_write_json(out / MANIFEST, manifest)
                        last_save = time.monotonic()
            finally:
                if hasattr(results, "close"):
                    results.close()
                bar.close()
        removed = _remove_orphans(out, manifest)
        atomic_write_json(out / MANIFEST, manifest)
        catalog_built = _build_catalog(out)
    summary = summarize(manifest)
    summary.update({
        "dataset": str(out),
        "inputs_seen": len(units),
        "inputs_converted": done,
        "inputs_unchanged": skipped,
        "inputs_failed": len(errors),
        "errors": errors,
        "orphans_removed": removed,
        "catalog": catalog_built,
        "seconds": round(time.perf_counter() - t0, 3),
        "nothing_to_do": not todo,
    })
    return summary


def _bar(total: int, progress: bool):
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, unit="file", desc="convert", file=sys.stderr)

    class _Null:
        def update(self, n):
            pass

        def close(self):
            pass

    return _Null()


def _outputs_exist(out: Path, entry: dict) -> bool:
    return all((out / rel).exists() for rel in entry.get("outputs", []))


def _remove_outputs(out: Path, entry: dict, keep: set) -> None:
    for rel in entry.get("outputs", []):
        if rel not in keep:
            try:
                (out / rel).unlink()
            except FileNotFoundError:
                pass


def _remove_orphans(out: Path, manifest: dict) -> int:
    """Shards no manifest entry names (a changed input's old shards, a killed run's finished-but-unrecorded ones
    are re-made under the same name, so they are not orphans)."""
    referenced = {rel for e in manifest["inputs"].values() for rel in e.get("outputs", [])}
    n = 0
    for sub in ("records", "quarantine", "workloads", "networks"):
        d = out / sub
        if not d.exists():
            continue
        for p in d.rglob("*.parquet"):
            rel = p.relative_to(out).as_posix()
            if rel not in referenced:
                p.unlink()
                n += 1
    return n


def _build_catalog(out: Path) -> bool:
    try:
        from .catalog import build_catalog
    except ImportError:
        return False
    build_catalog(out)
    return True


def summarize(manifest: dict) -> dict:
    """Totals over the manifest: lines, rows, quarantined, comments, failed, per hardware and rule."""
    tot = {"lines": 0, "rows": 0, "quarantined": 0, "comments": 0, "failed": 0}
    per_hw: dict[str, int] = {}
    rules: dict[str, int] = {}
    for e in manifest["inputs"].values():
        for k in tot:
            tot[k] += e.get(k, 0)
        wf = e.get("workload_file")
        if wf:
            tot["lines"] += wf["lines"]
            tot["quarantined"] += wf["quarantined"]
            tot["comments"] += wf["comments"]
            tot["workload_rows"] = tot.get("workload_rows", 0) + wf["rows"]
        for h, n in e.get("hardware", {}).items():
            per_hw[h] = per_hw.get(h, 0) + n
        for r, n in e.get("hardware_rules", {}).items():
            rules[r] = rules.get(r, 0) + n
        tot["network_rows"] = tot.get("network_rows", 0) + e.get("network_rows", 0)
    tot["balanced"] = tot["rows"] + tot["quarantined"] + tot["comments"] + tot.get("workload_rows", 0) == tot["lines"]
    return {"totals": tot, "rows_per_hardware": dict(sorted(per_hw.items())),
            "hardware_rules": dict(sorted(rules.items())), "inputs": len(manifest["inputs"])}
