"""``curate convert``: logs in, one Parquet dataset out.

Inputs are files or folders. A folder is walked: Ansor/TenSet logs (``*.json``, ``*.jsonl``, ``*.log``, each
optionally ``.gz``), MetaSchedule databases (a folder holding ``database_workload.json[.gz]`` and
``database_tuning_record.json[.gz]`` is one input) and TenSet ``network_info`` pickles (``*.pkl[.gz]``).

Inputs are converted in groups: Ansor logs, in label order, are packed into groups of about ``GROUP_BYTES`` of
JSON, the plan's last few smaller (``plan_groups``; TenSet's files hold one task each, ~1 MB: a shard per file
would spend ~9 bytes a record on Parquet footers and page headers, a fifth of the output); a MetaSchedule database
or a pickle is a group of its own. A group
becomes one shard per hardware, named by a hash of its members' labels and contents, so a re-run on unchanged
inputs does nothing, new inputs add shards, and the result does not depend on the number of workers. A changed
input leaves its group: the group's shards are rewritten without its rows (the other members' rows are kept as
they are, not re-converted) and it is converted again with the other new or changed inputs. The manifest records
every input (size, mtime, sha256, counts, hardware rule, group, shards) and is rewritten atomically as groups
finish, so a killed run resumes where it stopped.

Layout::

    DATASET/manifest.json
    DATASET/records/hardware=<name>/part-<group>.parquet
    DATASET/quarantine/part-<group>.parquet
    DATASET/workloads/part-<group>.parquet    (MetaSchedule IRModules)
    DATASET/networks/part-<group>.parquet     (network_info)
    DATASET/catalog.duckdb                    (views over all of it; see catalog.py)
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa

from . import __version__
from .executors import map_unordered, process_pool, resolve_executor
from .readers import (
    READER_VERSION,
    FileStats,
    InputError,
    _Sink,
    detect_format,
    devices_by_hardware,
    hardware_context,
    quarantine_table,
    read_ansor,
    read_metaschedule,
    scan_enabled,
)
from .schema import RECORD_SCHEMA, SCHEMA_VERSION, WORKLOAD_SCHEMA
from .storage import (
    AtomicParquetWriter,
    OutputError,
    atomic_write_json,
    check_int,
    check_out_kind,
    damaged_shard,
    dataset_lock,
    file_sha256,
    remove_stale_tmp,
    write_parquet_atomic,
)

LOG_SUFFIXES = (".json", ".jsonl", ".log", ".txt", ".tsv")
GROUP_BYTES = 16 << 20  # uncompressed JSON per group of Ansor logs (~14k records: one ~0.5 MB shard)
MANIFEST = "manifest.json"
TAIL_GROUPS, TAIL_SPLIT = 2, 4  # the plan's last 2 groups' worth of logs goes in groups of a quarter (plan_groups)
CONVERTER_VERSION = f"{__version__}+schema{SCHEMA_VERSION}+reader{READER_VERSION}"


@dataclass
class Unit:
    """One input: a log file, a MetaSchedule database (two files) or a network_info pickle."""

    kind: str  # ansor | metaschedule | netinfo
    label: str  # stable name used in source_file and in the manifest
    paths: list  # [Path]; metaschedule: [workload file, record file(, the collector's workloads.json)]
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


def _is_dataset(d: Path) -> bool:
    """A dataset this toolkit wrote (``manifest.json`` beside ``records/``): ``curate convert . --out ds`` puts one
    inside its input, and its manifest and reports are not logs."""
    return (d / "manifest.json").is_file() and (d / "records").is_dir()


def discover(inputs: list[Path]) -> list[Unit]:
    """Find every input unit under the given files and folders, in a deterministic order. Datasets inside the
    folders (``_is_dataset``) are not looked into."""
    units = _Units()
    for inp in inputs:
        inp = Path(inp)
        if not inp.exists():
            raise InputError(f"{inp}: no such file or folder")
        if inp.is_dir() and _is_dataset(inp):
            raise InputError(f"{inp}: a dataset written by curate (manifest.json, records/), not a folder of logs")
        if inp.is_file():
            fmt = detect_format(inp)
            if fmt == "metaschedule":
                _add_ms_dir(units, inp.parent, inp.parent.name, inp.parent)
            else:
                _add_unit(units, Unit(fmt, inp.name, [inp], None))
            continue
        root = Path(os.path.abspath(inp)).name  # the name as given: a linked folder keeps the link's name
        # links to folders are followed (a TenSet layout may link measure_records/<hardware> to logs elsewhere);
        # a link back to a folder above it is not (a cycle)
        for dirpath, dirnames, filenames in os.walk(inp, followlinks=True):
            dirnames.sort()
            d = Path(dirpath)
            up = {os.path.realpath(a) for a in [d, *d.parents]}
            dirnames[:] = [n for n in dirnames if os.path.realpath(d / n) not in up and not _is_dataset(d / n)]
            rel = d.relative_to(inp)
            prefix = root if str(rel) == "." else f"{root}/{rel.as_posix()}"
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
                    _add_unit(units, Unit(fmt, label, [p], inp))
    return [units[k] for k in sorted(units)]


class _Units(dict):
    """label -> Unit, and the files of every unit added (``_add_unit``)."""

    def __init__(self):
        super().__init__()
        self.files: set[tuple] = set()


def _add_unit(units: _Units, unit: Unit) -> None:
    """Add an input under its label. The same files reached twice (a folder twice, a folder and a file in it) count
    once, under the label they were first reached by, and so does a byte-identical copy under the same label. Two
    different inputs of one label are refused: the second was dropped without a word (roller-k80/reduction and
    roller-mi50/reduction both give 'reduction/...')."""
    files = tuple(os.path.abspath(p) for p in unit.paths)  # as reached, links not followed: a layout of links
    if files in units.files:  # already an input, under this label or another (a folder given with a file in it)
        return
    old = units.get(unit.label)
    if old is None:
        units[unit.label] = unit
        units.files.add(files)
    elif [file_sha256(p) for p in old.paths] == [file_sha256(p) for p in unit.paths]:
        return  # a copy of the same bytes: the same records, once
    else:
        raise InputError(f"two inputs are both called {unit.label}: {old.paths[-1]} and {unit.paths[-1]}. An input is "
                         "named by the folder given on the command line (its records' source_file, and their "
                         "hardware where neither -model= nor measure_records/ names it): give the folders above "
                         "them, or convert each into a dataset of its own")


def _add_ms_dir(units: _Units, d: Path, label: str, root: Path | None) -> None:
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
    from .netinfo import COLLECTOR_WORKLOADS_FILE  # here, not at import: convert's start-up stays as it was

    paths = [wl, rec]
    side = d / COLLECTOR_WORKLOADS_FILE  # `curate collect`'s: which network each workload comes from
    if side.is_file():
        paths.append(side)
    _add_unit(units, Unit("metaschedule", label, paths, root if root is not None and root.is_dir() else None))


def _safe_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def unit_key(unit: Unit, shas: list[str], hardware: str | None = None) -> str:
    """An input's key: its label, its files' hashes, the converter version and the ``--hardware`` name it was
    converted under (None: named by its own rules), so the same bytes under another name make other shards."""
    h = hashlib.blake2b(digest_size=10)
    h.update(unit.label.encode())
    for s in shas:
        h.update(s.encode())
    h.update(CONVERTER_VERSION.encode())
    if hardware is not None:
        h.update(b"\0hardware=" + hardware.encode())
    return h.hexdigest()


def input_bytes(unit: Unit) -> int:
    """The uncompressed size of a unit's files (a gzip file's trailer gives it, modulo 4 GiB)."""
    n = 0
    for p in unit.paths:
        size = p.stat().st_size
        try:
            with open(p, "rb") as fh:
                if fh.read(2) == b"\x1f\x8b" and size >= 18:
                    fh.seek(-4, os.SEEK_END)
                    size = max(size, int.from_bytes(fh.read(4), "little"))
        except OSError:
            pass
        n += size
    return n


def plan_groups(todo: list, group_bytes: int = GROUP_BYTES, size=input_bytes) -> list[list]:
    """Pack the ``(unit, shas, fingerprint)`` items to convert into groups, deterministically (label order; not by
    worker count): consecutive Ansor logs up to ``group_bytes`` of JSON each (``size(unit)``), the last
    ``TAIL_GROUPS * group_bytes`` of them in groups a ``TAIL_SPLIT``-th that size when the logs fill more than
    ``TAIL_GROUPS + 2`` groups (a smaller plan keeps its few shards); any other unit alone.

    The small tail groups are what parallel workers take last (executors: biggest first), so they finish together
    instead of one worker converting a last full-size group alone (2 workers, 245 MB of real logs: 18 groups instead
    of 15, the two sides finish within 10 ms instead of ~0.1-0.2 s apart)."""
    groups: list[list] = []
    cur: list = []
    total = 0
    items = sorted(todo, key=lambda it: it[0].label)
    left = sum(size(it[0]) for it in items if it[0].kind == "ansor")
    tail = TAIL_GROUPS * group_bytes if left > (TAIL_GROUPS + 2) * group_bytes else 0  # small plans stay compact
    limit = group_bytes
    for item in items:
        if item[0].kind != "ansor":
            groups.append([item])
            continue
        if not cur and 0 < left <= tail:
            limit = max(1, group_bytes // TAIL_SPLIT)
        cur.append(item)
        n = size(item[0])
        total += n
        left -= n
        if total >= limit:
            groups.append(cur)
            cur, total = [], 0
    if cur:
        groups.append(cur)
    return groups


def group_key(keys: list[str]) -> str:
    if len(keys) == 1:
        return keys[0]
    h = hashlib.blake2b(digest_size=10)
    for k in sorted(keys):
        h.update(k.encode())
    return h.hexdigest()


class _UnitFailed(Exception):
    def __init__(self, label: str, reason: str):
        super().__init__(reason)
        self.label, self.reason = label, reason


# what a broken input raises while it is read; it fails alone, the rest of its group is converted
_READ_ERRORS = (InputError, ValueError, OSError, OverflowError, RecursionError, AssertionError, MemoryError)


def convert_group(members: list, out: Path, hardware: str | None) -> dict:
    """Convert a group of inputs (``[(unit, shas), ...]``) into one shard per hardware, plus one quarantine, workload
    and network shard as needed, all written atomically. Runs in a worker process.

    ``shas`` are the unit's files' sha256, or None for a new input, which is hashed here: a fresh convert hashes its
    inputs in its workers, in parallel, rather than one by one before any work starts. The group's name (``gkey``)
    comes from its members' keys, which include the hashes. An input that fails (unreadable, or broken while read)
    is left out (the group is redone without it) and reported under ``failed``. The result also carries ``gkey``
    and each converted input's ``key`` and ``shas``."""
    failed: dict[str, str] = {}
    keyed = []
    for unit, shas in members:
        try:
            shas = shas or [file_sha256(p) for p in unit.paths]
        except OSError as e:
            failed[unit.label] = f"{type(e).__name__}: {e}"
            continue
        keyed.append((unit, shas, unit_key(unit, shas, hardware)))
    gkey = group_key([k for _, _, k in keyed])
    while True:
        try:
            res = _convert_members([(u, k) for u, _, k in keyed if u.label not in failed], gkey, Path(out), hardware)
        except _UnitFailed as e:
            failed[e.label] = e.reason
            continue
        res.update(failed=failed, gkey=gkey, keys={u.label: k for u, _, k in keyed},
                   shas={u.label: s for u, s, _ in keyed})
        return res


def _convert_members(members: list, gkey: str, out: Path, hardware: str | None) -> dict:
    t0 = time.perf_counter()
    writers: dict[str, AtomicParquetWriter] = {}
    quarantine: list[tuple] = []
    workloads: list = []
    networks: list = []
    units: dict[str, dict] = {}
    try:
        for unit, _key in members:
            units[unit.label] = _read_unit_into(unit, gkey, out, hardware, writers, quarantine, workloads, networks)
        outputs = sorted(writers)
        for w in writers.values():
            w.commit()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    extra = [("quarantine", quarantine_table(quarantine) if quarantine else None),
             ("workloads", pa.concat_tables([t.cast(WORKLOAD_SCHEMA) for t in workloads]) if workloads else None),
             ("networks", pa.concat_tables(networks) if networks else None)]
    for sub, tbl in extra:
        if tbl is not None:
            rel = f"{sub}/part-{gkey}.parquet"
            write_parquet_atomic(out / rel, tbl)
            outputs.append(rel)
    return {"outputs": sorted(outputs), "units": units, "seconds": time.perf_counter() - t0}


def _read_unit_into(unit: Unit, gkey: str, out: Path, hardware: str | None, writers: dict, quarantine: list,
                    workloads: list, networks: list) -> dict:
    """Stream one input's rows into the group's writers; returns its manifest counts. Raises ``_UnitFailed``."""
    try:
        hw = hardware_context(unit.paths[1] if unit.kind == "metaschedule" else unit.paths[0], hardware, unit.root)
        if unit.kind == "netinfo":
            from .netinfo import networks_table

            tbl = networks_table([unit.paths[0]])
            networks.append(tbl)
            return {"kind": unit.kind, "stats": {"lines": 0, "rows": 0, "network_rows": tbl.num_rows,
                                                 "quarantined": 0, "comments": 0, "failed": 0, "hardware": {},
                                                 "hardware_rules": {}, "stream_error": None}}
        sink = _Sink(unit.label)
        if unit.kind == "metaschedule":
            wl_label = f"{unit.label}/{unit.paths[0].name}"
            sink.source_file = f"{unit.label}/{unit.paths[1].name}"
            sink.stats.source_file = sink.source_file
            batches = read_metaschedule(unit.paths[0], unit.paths[1], sink.source_file, hw, sink, wl_label)
        else:
            batches = read_ansor(unit.paths[0], unit.label, hw, sink)
        task_targets: set = set()  # (workload_key, target, target_kind) of the records: the collector's network rows
        kinds: dict[str, set] = {}  # hardware name -> the devices of its records (readers.device_of)
        for b in batches:
            if len(unit.paths) > 2:
                task_targets.update(zip(*(b.column(c).to_pylist() for c in ("workload_key", "target", "target_kind"))))
            for name, devs in devices_by_hardware(b).items():
                kinds.setdefault(name, set()).update(devs)
            hw_col = b.column("hardware")
            names = hw_col.unique().to_pylist()
            for name in names:
                part = b if len(names) == 1 else b.filter(pa_equal(hw_col, name))
                # keyed by folder: two names that map to one folder share its shard (the column keeps the name)
                rel = f"records/hardware={_safe_part(name)}/part-{gkey}.parquet"
                w = writers.get(rel)
                if w is None:
                    w = writers[rel] = AtomicParquetWriter(out / rel, RECORD_SCHEMA)
                w.write(part)
        sink.stats.check()
        extra = {"targets": {h: sorted(k) for h, k in sorted(kinds.items())}}
        if unit.kind == "metaschedule":
            ws: FileStats = sink.workload_stats
            ws.check()
            extra["workload_file"] = ws.to_dict()
            workloads.append(sink.workloads)
            if len(unit.paths) > 2:
                tbl, extra["network_file"] = _collector_networks(unit, task_targets, quarantine)
                if tbl is not None:
                    networks.append(tbl)
    except _READ_ERRORS as e:
        raise _UnitFailed(unit.label, f"{type(e).__name__}: {e}") from None
    quarantine.extend(sink.quarantine)
    return {"kind": unit.kind, "stats": sink.stats.to_dict(), **extra}


def _collector_networks(unit: Unit, task_targets: set, quarantine: list) -> tuple[pa.Table | None, dict]:
    """The network rows of a collector's workloads.json beside a MetaSchedule database (``collector_network_rows``),
    one per workload and target its records were measured on; entries it cannot use go to the quarantine."""
    from .netinfo import NETWORKS_SCHEMA, collector_network_rows

    src = f"{unit.label}/{unit.paths[2].name}"
    rows, bad, entries = collector_network_rows(unit.paths[2], src)
    quarantine.extend(bad)
    targets: dict[str, list] = {}
    for key, target, kind in sorted(task_targets, key=lambda t: tuple(x or "" for x in t)):
        if target and kind:
            targets.setdefault(key, []).append((target, kind))
    unit_targets = sorted({t for ts in targets.values() for t in ts})
    out = [dict(r, target=t, target_kind=k) for r in rows for t, k in targets.get(r["workload_key"], unit_targets)]
    stats = {"entries": entries, "rows": len(out), "workloads": len(rows), "quarantined": len(bad)}
    return (pa.Table.from_pylist(out, schema=NETWORKS_SCHEMA) if out else None), stats


def pa_equal(arr, value):
    import pyarrow.compute as pc

    return pc.equal(arr, value)


def _ready() -> None:
    """A pool worker's first task: importing this module (to unpickle the call) is the start-up it waits for."""


def _worker(args):
    members, index, out, hardware = args
    try:
        return index, convert_group(members, Path(out), hardware), None
    except (OutputError, OSError) as e:  # the group's output cannot be written: all its inputs are reported failed
        return index, None, f"{type(e).__name__}: {e}"


class OtherInputsError(InputError):
    """``convert(only=True)``: the dataset holds inputs of earlier runs that are not among these."""


def load_manifest(out: Path) -> dict:
    p = out / MANIFEST
    if not p.exists():
        return {"schema_version": SCHEMA_VERSION, "converter": CONVERTER_VERSION, "inputs": {}}
    try:
        m = orjson.loads(p.read_bytes())
    except orjson.JSONDecodeError as e:  # the decoder's message alone named no file
        raise OutputError(f"{p}: not a tenset-curate manifest (invalid JSON: {e})") from None
    if not isinstance(m, dict) or not isinstance(m.get("inputs"), dict):
        raise OutputError(f"{p}: not a tenset-curate manifest")
    return m


def convert(inputs: list, out: Path, hardware: str | None = None, workers: int = 1, progress: bool = False,
            log=None, wait: bool = False, executor: str = "local", address: str | None = None,
            group_bytes: int = GROUP_BYTES, only: bool = False) -> dict:
    """Convert logs into the dataset at ``out``. Returns a summary dict (what ``--json`` prints). An input that
    cannot be converted is not raised: the others convert, and it is listed under ``errors`` and counted in
    ``inputs_failed`` (curate convert exits non-zero then), so check that count.

    Unchanged inputs (same size, mtime and sha256 as in the manifest, converted under the same ``hardware``) are
    skipped; new or changed ones are converted, and so is an input converted before under another ``hardware``
    name (its records are renamed, not kept twice); a killed run resumes. Input lines = rows + quarantined +
    comments is checked for every file.
    ``executor`` (``local`` | ``ray``, see executors.py) and ``workers`` decide where the per-input work runs;
    the output is the same either way. ``group_bytes``: uncompressed JSON per group of Ansor logs (one shard per
    group and hardware; see the module docstring). ``only``: refuse, before converting anything, a dataset that
    holds inputs of earlier runs not among these (by default their rows stay): for a caller whose dataset must be
    exactly these logs (the benchmarks' cached work folders, which mixed two sets when reused).
    """
    out = Path(out)
    log = log or (lambda msg: None)
    if isinstance(inputs, (str, os.PathLike)):  # one input (a string was read one character at a time)
        inputs = [inputs]
    try:  # any iterable of paths (a Path.glob too)
        inputs = list(inputs) if not isinstance(inputs, (bytes, dict)) else None
    except TypeError:
        inputs = None
    if not inputs or not all(isinstance(p, (str, os.PathLike)) for p in inputs):  # None and [] said nothing
        raise InputError(f"inputs {inputs!r}: a log file or folder, or an iterable of them")
    check_int("workers", workers, 1)
    check_int("group_bytes", group_bytes, 1)  # 0, nan or inf were taken; "abc" failed in a comparison
    if hardware is not None and not (isinstance(hardware, str) and hardware.strip()):
        raise ValueError(f"hardware {hardware!r}: a name, or None to name the hardware by the inputs' rules")
    if hardware is not None and len(f"hardware={_safe_part(hardware)}".encode()) > 255:  # every input failed on it
        raise ValueError(f"hardware {hardware[:40]!r}...: a name of at most 246 bytes (it names a folder)")
    check_out_kind(out, "dataset")
    executor = resolve_executor(executor, address)
    t0 = time.perf_counter()
    units = discover([Path(p) for p in inputs])
    if not units:
        raise InputError(f"no logs found in {', '.join(map(str, inputs))}")
    pool = None
    with dataset_lock(out, wait=wait, what="curate convert"), ExitStack() as stack:
        remove_stale_tmp(out)
        manifest = load_manifest(out)
        shards_before = _record_shards(manifest)
        if "pruned_from" in manifest:  # its records are another dataset's kept ones: every shard would go
            raise OutputError(f"{out}: a pruned dataset (curate prune of {manifest['pruned_from']}); convert into "
                              "the dataset it was pruned from, or into a new folder")
        if manifest.get("converter") != CONVERTER_VERSION:
            # another converter's rows are converted again from the inputs; those not given would lose them all
            lost = sorted(set(manifest["inputs"]) - {u.label for u in units})
            if lost:
                raise OutputError(
                    f"{out}: written by converter {manifest.get('converter')!r}, not {CONVERTER_VERSION!r}: every "
                    f"input is converted again, and {len(lost)} of its inputs are not among these (the first: "
                    f"{lost[0]}); give them all again, or convert into a new folder")
            manifest = {"schema_version": SCHEMA_VERSION, "converter": CONVERTER_VERSION, "inputs": {}}
        others = sorted(set(manifest["inputs"]) - {u.label for u in units})
        if only and others:
            raise OtherInputsError(f"{out} holds {len(others)} input(s) of earlier runs that are not among these (the "
                             f"first: {others[0]}): convert into another folder, or remove it first")
        todo = []
        skipped = 0
        changed = []  # (unit, fingerprint, manifest entry): new, or size / mtime not as recorded
        for u in units:
            fp = u.fingerprint()
            old = manifest["inputs"].get(u.label)
            if old and old.get("hardware_override") != hardware:
                old = None  # converted under another hardware name: converted again, as a new input is
            if old and [(f["path"], f["size"], f["mtime_ns"]) for f in old["files"]] == [
                    (f["path"], f["size"], f["mtime_ns"]) for f in fp] and _outputs_exist(out, old):
                skipped += 1
                continue
            changed.append((u, fp, old))
        if changed:  # a parallel run starts its pool now: its processes import while this one plans the work
            pool = stack.enter_context(process_pool(executor, workers))
            if pool is not None:
                pool.submit(_ready)
                _import_catalog()  # needed at the end; imported while the pool processes start, not after the work
        errors: dict[str, str] = {}
        for u, fp, old in changed:
            if old is None:  # new: its worker hashes it (convert_group)
                todo.append((u, None, fp))
                continue
            try:  # recorded before: a touched but unchanged input is not converted again
                shas = [file_sha256(p) for p in u.paths]
            except OSError as e:  # fails alone, as in a worker
                errors[u.label] = f"{type(e).__name__}: {e}"
                log(f"error: {u.label}: {errors[u.label]}")
                continue
            if [f["sha256"] for f in old["files"]] == shas and _outputs_exist(out, old):
                for f, s in zip(fp, shas):  # touched but unchanged: refresh the fingerprint only
                    f["sha256"] = s
                old["files"] = fp
                skipped += 1
                continue
            todo.append((u, shas, fp))
        done = 0
        removed = 0
        # inputs converted again leave their old groups first (whose other members keep their rows)
        dropped: list[str] = []
        again = {u.label for u, _, _ in todo if u.label in manifest["inputs"]}
        if again:
            dropped = _leave_groups(out, manifest, again)
            atomic_write_json(out / MANIFEST, manifest)
            removed += _remove_orphans(out, manifest)
            for label in dropped:
                log(f"warning: {label}: its group lost a shard and it was not given this time: pass it again")
        if todo:
            sizes = {u.label: input_bytes(u) for u, _, _ in todo}  # read once: planning and scheduling
            groups = plan_groups(todo, group_bytes, lambda u: sizes[u.label])
            log(f"converting {len(todo)} input(s) in {len(groups)} group(s), {skipped} unchanged, "
                f"{workers} worker(s)")
            bar = _bar(len(todo), progress)
            last_save = time.monotonic()
            args = [([(u, shas) for u, shas, _ in g], i, str(out), hardware) for i, g in enumerate(groups)]
            fps = {u.label: fp for u, _, fp in todo}
            members = [[u.label for u, _ in a[0]] for a in args]
            # one item per group; in parallel runs the biggest go first, which keeps every worker busy to the end
            results = map_unordered(_worker, args, executor=executor, workers=workers, address=address,
                                    cost=lambda a: sum(sizes[u.label] for u, _ in a[0]), pool=pool)
            try:
                for index, res, gerr in results:
                    for label in members[index]:
                        fp = fps[label]
                        err = gerr or res["failed"].get(label)
                        if err:
                            errors[label] = err
                            log(f"error: {label}: {err}")
                        else:
                            r = res["units"][label]
                            for f, sha in zip(fp, res["shas"][label]):
                                f["sha256"] = sha
                            manifest["inputs"][label] = {"files": fp, "key": res["keys"][label], "group": res["gkey"],
                                                         "format": r["kind"], "hardware_override": hardware,
                                                         **r["stats"], "outputs": res["outputs"],
                                                         **{k: r[k] for k in ("workload_file", "network_file",
                                                                              "targets") if k in r}}
                            done += 1
                        bar.update(1)
                    if time.monotonic() - last_save > 2.0:
                        atomic_write_json(out / MANIFEST, manifest)
                        last_save = time.monotonic()
            finally:
                if hasattr(results, "close"):
                    results.close()
                bar.close()
        removed += _remove_orphans(out, manifest)
        atomic_write_json(out / MANIFEST, manifest)
        catalog_built = _build_catalog(out)
    from .dataset_info import quarantine_reasons  # (polars: not imported by the workers)

    summary = summarize(manifest)
    summary.update({
        "dataset": str(out),
        "inputs_seen": len(units),
        # in the dataset from earlier runs and not among this run's inputs (not named, or gone): their rows stay
        "inputs_not_seen": len(others),
        # splits made before this run: the records it added or changed are in no part of them (or a stale one)
        # (only when the record shards changed: a network_info pickle alone adds none, and it warned)
        "splits_outdated": sorted(p.stem for p in (out / "splits").glob("*.parquet"))
        if _record_shards(manifest) != shards_before else [],
        "inputs_converted": done,
        "inputs_unchanged": skipped,
        "inputs_failed": len(errors),
        "errors": errors,
        "inputs_dropped": dropped,
        "orphans_removed": removed,
        "catalog": catalog_built,
        "seconds": round(time.perf_counter() - t0, 3),
        "nothing_to_do": not todo,
        "ansor_reader": "compiled" if scan_enabled() else "python",  # readers.py: _scan.c or the pure-Python path
        "quarantine_reasons": quarantine_reasons(out) if summary["totals"]["quarantined"] else [],
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


def _record_shards(manifest: dict) -> set[str]:
    """The record shards a manifest's inputs name (``records/...``; a network_info pickle names networks/ ones)."""
    return {rel for e in manifest["inputs"].values() for rel in e.get("outputs", []) if rel.startswith("records/")}


def _outputs_exist(out: Path, entry: dict) -> bool:
    """Every shard the entry's group wrote is there and whole (``storage.damaged_shard``): a shard cut short or
    emptied since makes its group's inputs convert again, which rewrites it (a re-run skipped them, and the
    catalog could not be built over it)."""
    return all((out / rel).exists() and damaged_shard(out / rel) is None for rel in entry.get("outputs", []))


def _leave_groups(out: Path, manifest: dict, labels: set) -> list[str]:
    """Take the inputs ``labels`` (about to be converted again) out of the manifest and out of their groups' shards.

    Each old group's shards are rewritten without those inputs' rows (filtered on ``source_file``, which is the
    label of an Ansor log, the only kind that shares a group) under a new group name; its other members keep their
    rows untouched and point at the new shards; the old shards become orphans. A group with a shard missing cannot
    be filtered: its members not in ``labels`` are dropped from the manifest and returned (pass them again to
    convert them)."""
    inputs = manifest["inputs"]
    by_group: dict[str, tuple[list, set]] = {}
    for label in sorted(labels):
        e = inputs.pop(label)
        by_group.setdefault(e["group"], (e["outputs"], set()))[1].add(label)
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from .schema import QUARANTINE_SCHEMA

    dropped: list[str] = []
    for g, (outputs, gone) in sorted(by_group.items()):
        stay = sorted(label for label, e in inputs.items() if e["group"] == g)
        if not stay:
            continue
        if not _outputs_exist(out, {"outputs": outputs}):
            for label in stay:
                del inputs[label]
            dropped += stay
            continue
        h = hashlib.blake2b(digest_size=10)
        for x in [g, *sorted(gone)]:
            h.update(x.encode() + b"\0")
        new_g = h.hexdigest()
        new_outputs = []
        for rel in outputs:
            t = pq.read_table(out / rel)
            t = t.filter(pc.invert(pc.is_in(t.column("source_file"), pa.array(sorted(gone)))))
            if t.num_rows == 0:
                continue
            schema = RECORD_SCHEMA if rel.startswith("records/") else QUARANTINE_SCHEMA
            new_rel = rel.replace(f"part-{g}.parquet", f"part-{new_g}.parquet")
            write_parquet_atomic(out / new_rel, t.select(schema.names).cast(schema))
            new_outputs.append(new_rel)
        for label in stay:
            inputs[label]["group"] = new_g
            inputs[label]["outputs"] = sorted(new_outputs)
    return dropped


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
        for p in sorted(d.rglob("*"), reverse=True):  # a partition left empty (a hardware renamed away) goes too
            if p.is_dir() and not any(p.iterdir()):
                p.rmdir()
    return n


def _import_catalog():
    """catalog.py's ``build_catalog``; None where DuckDB is not installed."""
    try:
        from .catalog import build_catalog
    except ImportError:
        return None
    return build_catalog


def _build_catalog(out: Path) -> bool:
    build = _import_catalog()
    if build is None:
        return False
    build(out)
    return True


def summarize(manifest: dict) -> dict:
    """Totals over the manifest: lines, rows, quarantined, comments, failed, per hardware and rule; the hardware
    names that cover records of several devices (``readers.device_of``)."""
    tot = {"lines": 0, "rows": 0, "quarantined": 0, "comments": 0, "failed": 0}
    per_hw: dict[str, int] = {}
    rules: dict[str, int] = {}
    kinds: dict[str, set] = {}  # hardware -> devices (inputs converted before the field existed: target kinds or none)
    side_rows = 0  # workload entries of collectors' workloads.json files that became network rows
    for e in manifest["inputs"].values():
        for k in tot:
            tot[k] += e.get(k, 0)
        wf = e.get("workload_file")
        if wf:
            tot["lines"] += wf["lines"]
            tot["quarantined"] += wf["quarantined"]
            tot["comments"] += wf["comments"]
            tot["workload_rows"] = tot.get("workload_rows", 0) + wf["rows"]
        nf = e.get("network_file")
        if nf:  # a collector's workloads.json: its entries count as lines, each a network row or quarantined
            tot["lines"] += nf["entries"]
            tot["quarantined"] += nf["quarantined"]
            tot["network_rows"] = tot.get("network_rows", 0) + nf["rows"]
            side_rows += nf["workloads"]
        for h, n in e.get("hardware", {}).items():
            per_hw[h] = per_hw.get(h, 0) + n
        for r, n in e.get("hardware_rules", {}).items():
            rules[r] = rules.get(r, 0) + n
        for h, ks in e.get("targets", e.get("target_kinds", {})).items():
            kinds.setdefault(h, set()).update(ks)
        tot["network_rows"] = tot.get("network_rows", 0) + e.get("network_rows", 0)
    if side_rows:
        tot["network_entries"] = side_rows
    tot["balanced"] = (tot["rows"] + tot["quarantined"] + tot["comments"] + tot.get("workload_rows", 0) + side_rows
                       == tot["lines"])
    # one name over records of several devices (a folder of CPU and GPU logs, or of two GPUs, named by the folder):
    # one "hardware" that is several machines, whose labels then take one best cost over both (TenSet's are per
    # (workload key, target)) and which hardware-wise splits treat as one
    mixed = {h: sorted(ks) for h, ks in sorted(kinds.items()) if len(ks) > 1}
    return {"totals": tot, "rows_per_hardware": dict(sorted(per_hw.items())),
            "hardware_rules": dict(sorted(rules.items())), "inputs": len(manifest["inputs"]),
            "hardware_of_several_targets": mixed}
