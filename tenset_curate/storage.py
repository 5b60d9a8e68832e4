"""Atomic writes, the dataset lock and path safety: how every command touches an output directory.

A file is written under a temporary name in its final directory (``<name>.tmp-<pid>``, which no reader's glob
matches) and renamed over the final name with ``os.replace`` after an fsync, so a killed run never leaves a half
file under a final name. One writer at a time holds ``DATASET/.lock`` (``fcntl.flock``); a second writer fails
with a message naming the holder, or waits when asked to. Readers never take the lock; they warn
(``DatasetBeingWritten``) when they read while a writer holds it.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import numbers
import os
import re
import shutil
import socket
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

# Floats are split into byte streams (zstd then finds the shared exponents), statistics only where a reader filters.
# Dictionary encoding everywhere except on high-entropy columns (a per-record hash, measured floats, timestamps):
# there a dictionary page only adds bytes. `line` counts up within a file, so delta encoding stores it in ~0 bytes.
# The Arrow schema is not embedded (4 kB a shard); every type of RECORD_SCHEMA
# round-trips through the Parquet schema alone (tests/test_convert.py checks it).
# Measured on 30 roller-k80 logs (25.1 MB of JSON): 1.50 MB before these three changes, 1.16 MB after.
PARQUET_OPTS = dict(compression="zstd", compression_level=3, store_schema=False)  # 12 costs 2.5x the write time for 4% less
FLOAT_COLUMNS = ["costs", "mean_cost", "all_cost", "timestamp"]
NO_DICTIONARY = {"record_id", "line", "costs.list.element", "mean_cost", "all_cost", "timestamp"}
DELTA_COLUMNS = {"line"}
STEPS_LEVEL, OTHER_LEVEL = 6, 1
STAT_COLUMNS = ["line", "hardware", "task_id", "workload_key", "mean_cost", "error_no", "is_valid", "log_version",
                "n_steps", "format", "target_kind"]


@functools.lru_cache(maxsize=32)
def _leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """Parquet leaf column paths (``steps.list.element.kind``, ...) of an Arrow schema."""
    buf = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), buf)
    md = pq.ParquetFile(pa.BufferReader(buf.getvalue())).metadata
    return tuple(md.schema.column(i).path for i in range(md.num_columns))


def parquet_options(schema: pa.Schema) -> dict:
    names = set(schema.names)
    opts = dict(PARQUET_OPTS)
    fl = [c for c in FLOAT_COLUMNS if c in names]
    if fl:
        opts["use_byte_stream_split"] = fl
    leaves = _leaf_paths(schema)
    opts["use_dictionary"] = [p for p in leaves if p not in NO_DICTIONARY]
    delta = {c: "DELTA_BINARY_PACKED" for c in DELTA_COLUMNS if c in leaves}
    if delta:
        opts["column_encoding"] = delta
    if "steps" in names:  # records: keep footers small
        opts["write_statistics"] = [c for c in STAT_COLUMNS if c in names]
        # zstd 6 on the schedule (its leaves repeat across a task's records: -17% bytes, the level computation
        # dominates its write time anyway), 1 elsewhere (measured floats and hashes do not compress further)
        opts["compression_level"] = {p: STEPS_LEVEL if p.startswith("steps.") else OTHER_LEVEL for p in leaves}
    return opts


class OutputError(RuntimeError):
    """An output directory cannot be written (read-only, full, locked, unsafe path). Names the path."""


def tmp_name(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _explain(e: OSError, path: Path) -> OutputError:
    why = {errno.EACCES: "permission denied (read-only?)", errno.EROFS: "read-only file system",
           errno.ENOSPC: "no space left on device (ENOSPC)", errno.EDQUOT: "disk quota exceeded (EDQUOT)",
           errno.EFBIG: "file too large (EFBIG: a file-size limit such as RLIMIT_FSIZE)"}.get(e.errno, str(e))
    return OutputError(f"cannot write {path}: {why}; earlier outputs are left as they were")


def atomic_write_with(path: Path, write) -> None:
    """Atomic write for a library that can only write to a path (LightGBM's ``save_model``, ``torch.save``):
    ``write(tmp)`` fills a temporary name beside ``path``, which is fsynced and renamed into place, so a kill
    never leaves a partial file under the final name."""
    path = Path(path)
    tmp = tmp_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError):
            raise _explain(e, path) from e
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write_with(path, lambda tmp: tmp.write_bytes(data))


def new_figure(rows: int = 1, cols: int = 1, **kw):
    """``(figure, axes)`` like ``pyplot.subplots``, without pyplot: no backend is chosen or switched (a notebook's
    inline backend was set to Agg for the whole process by the first report drawn), and nothing stays registered
    to close. ``kw``: ``figsize``, ``squeeze``."""
    from matplotlib.figure import Figure

    squeeze = kw.pop("squeeze", True)
    fig = Figure(**kw)
    return fig, fig.subplots(rows, cols, squeeze=squeeze)


def atomic_savefig(fig, path: Path, **kw) -> None:
    """``fig.savefig`` through a temporary name (the format comes from ``path``'s suffix)."""
    path = Path(path)
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", **kw))


def atomic_write_json(path: Path, obj) -> None:
    opts = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY  # a NumPy number is a number
    atomic_write_bytes(path, orjson.dumps(obj, option=opts) + b"\n")


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


ROW_GROUP_ROWS = 64 * 1024


class AtomicParquetWriter:
    """Stream record batches into ``path`` under a temporary name; ``commit`` renames it into place.

    Batches are buffered up to ``ROW_GROUP_ROWS`` rows and written as one row group (every ``write_table`` call
    starts a row group, and each costs a footer entry and page headers for every column: a convert group of many
    small logs would otherwise pay that per log)."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.path = Path(path)
        self.tmp = tmp_name(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(self.tmp, schema, **parquet_options(schema))
        except OSError as e:
            raise _explain(e, self.path) from e
        self.rows = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def write(self, batch) -> None:
        t = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        self._pending.append(t)
        self._pending_rows += t.num_rows
        self.rows += t.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        t = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_rows = [], 0
        try:
            self.writer.write_table(t, row_group_size=ROW_GROUP_ROWS)
        except OSError as e:
            self.abort()
            raise _explain(e, self.path) from e

    def commit(self, metadata: dict[str, str] | None = None) -> None:
        """Close, fsync and rename into place; ``metadata``: key-value pairs for the file's footer."""
        self._flush()
        try:
            if metadata:
                self.writer.add_key_value_metadata(metadata)
            self.writer.close()
            with open(self.tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(self.tmp, self.path)
        except OSError as e:
            self.abort()
            raise _explain(e, self.path) from e
        _fsync_dir(self.path.parent)

    def abort(self) -> None:
        self._pending = []
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - best effort on an already failing path
            pass
        try:
            self.tmp.unlink()
        except OSError:
            pass


def write_parquet_atomic(path: Path, table: pa.Table, metadata: dict[str, str] | None = None) -> None:
    w = AtomicParquetWriter(path, table.schema)
    w.write(table)
    w.commit(metadata)


def remove_stale_tmp(root: Path) -> int:
    """Remove temporary files a killed run left (only call while holding the lock)."""
    n = 0
    if not root.exists():
        return 0
    for p in sorted(root.rglob("*.tmp-*")):
        try:
            if p.is_dir() and not p.is_symlink():  # a staging folder (prune)
                shutil.rmtree(p)
            else:
                p.unlink()
            n += 1
        except OSError:
            pass
    return n


class LockedError(OutputError):
    pass


@contextmanager
def dataset_lock(root: Path, wait: bool = False, timeout: float | None = None, what: str = ""):
    """Hold ``root/.lock`` exclusively for the duration of a write. Fails naming the holder unless ``wait``."""
    from .executors import refuse_while_importing_main

    refuse_while_importing_main(what or "a write of a dataset")
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise _explain(e, root) from e
    acquired = False
    try:
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                acquired = True
                break
            except BlockingIOError:
                if not wait or (timeout is not None and time.monotonic() - t0 > timeout):
                    raise LockedError(f"{root} is being written by another process ({_holder(fd)}); "
                                      f"wait for it to finish (curate convert --wait queues)") from None
                time.sleep(0.2)
        info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime(
            "%Y-%m-%dT%H:%M:%S"), "command": what or " ".join(sys.argv[:3])})
        try:  # a full disk refuses even these few bytes: say so, naming the directory
            os.ftruncate(fd, 0)
            os.pwrite(fd, info.encode(), 0)
        except OSError as e:
            raise _explain(e, root) from e
        yield
    finally:
        if acquired:  # a refused writer must not erase the holder's identity
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
        os.close(fd)


MODEL_CONFIG = "config.json"  # a model folder's config (model.CONFIG_NAME) beside its weights: torch's, LightGBM's
MODEL_WEIGHTS = ("model.pt", "model.txt")


def folder_kind(d: Path) -> str | None:
    """What the folder ``d`` holds: ``"dataset"`` (a manifest.json or a records/ folder: what convert and prune
    write), ``"model"`` (a config.json beside model weights: what train writes), or None (neither, or no folder)."""
    d = Path(d)
    if (d / "manifest.json").is_file() or (d / "records").is_dir():
        return "dataset"
    if (d / MODEL_CONFIG).is_file() and any((d / w).is_file() for w in MODEL_WEIGHTS):
        return "model"
    return None


def check_out_kind(out: Path, kind: str) -> None:
    """Refuse to write a ``kind`` ("dataset", "model" or "report") into ``out`` when it holds another kind: a model
    written into a dataset folder, or records into a model's, left the two mixed in one folder (a CLI fuzz)."""
    have = folder_kind(out)
    if have is not None and have != kind:
        raise ValueError(f"--out {out}: it holds a {have}, and a {kind} does not go there: give a new folder, or "
                         f"one that holds a {kind}")


class DatasetBeingWritten(UserWarning):
    """Records read while a writer holds the dataset: a state between two runs, perhaps."""


class IncompleteDataset(ValueError):
    """A dataset whose record shards are not the ones its own record names (a write was interrupted), or one of
    whose shards is damaged (``DamagedShard``)."""


class DamagedShard(IncompleteDataset):
    """A record shard that cannot be read whole although its magic bytes are (``damaged_shard`` finds those): the
    footer or a page is damaged inside. The message names the file, which the Parquet readers' own errors do not."""


def damaged_inside(path: Path, why: str) -> DamagedShard:
    """The error for the record shard ``path`` that a reader could not read (``why``: the reader's message)."""
    return DamagedShard(f"{path}: cannot be read ({why}): the shard is damaged inside; remove it and run the command "
                        "that made the dataset again (curate convert converts again the inputs whose shard is gone; "
                        "a pruned dataset: curate prune again)")


def _reader_error(e: BaseException) -> bool:
    """Whether ``e`` is what a Parquet reader raises on a damaged file: PyArrow's OSError (a thrift error) or
    ArrowInvalid, Polars' ComputeError, DuckDB's IOException or bare Error (a damaged page header), and its
    InvalidInputException when the message is about a Parquet file. Not a missing file, nor a query's own error
    (binder, parser, a bad string to strptime): those are the caller's, and the check after it reads every shard."""
    mod, name = type(e).__module__, type(e).__name__
    if type(e) is OSError or mod.startswith("pyarrow"):
        return True
    if mod.startswith("polars"):
        return name == "ComputeError"
    if not mod.startswith(("duckdb", "_duckdb")):
        return False
    # InvalidInputException is also a query's own (strptime of a bad string, error()): only one about the file
    return name in ("Error", "IOException") or (name == "InvalidInputException" and parquet_read_error(str(e)))


def parquet_read_error(message: str) -> bool:
    """Whether a reader's message speaks of a Parquet file it could not read (thrift, footer, magic bytes)."""
    return re.search(r"parquet|thrift|TProtocol|magic bytes|footer", message, re.IGNORECASE) is not None


def names_damaged_shard(param: str = "dataset"):
    """Decorate a public function that reads the records of the dataset passed as ``param``: when a Parquet reader
    fails inside it (``_reader_error``) and a record shard of that dataset cannot be read whole
    (``unreadable_shard``), raise ``DamagedShard`` naming the file instead of the reader's error, which names none.
    Any other error passes unchanged; a healthy dataset costs nothing (the check runs on the error path only)."""
    def decorate(fn):
        import inspect

        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def reading(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if isinstance(e, DamagedShard) or not _reader_error(e):
                    raise
                root = sig.bind_partial(*args, **kwargs).arguments.get(param)
                bad = unreadable_shard(Path(root)) if root is not None and (Path(root) / "records").is_dir() else None
                if bad is None:
                    raise
                raise damaged_inside(*bad) from e
        return reading
    return decorate


def unreadable_shard(root: Path) -> tuple[Path, str] | None:
    """The first record shard of the dataset ``root`` that cannot be read whole (footer, schema and every page), and
    the reader's message; None when all can. Reads every shard: for an error path, not for every read."""
    import pyarrow.parquet as pq

    for f in sorted((Path(root) / "records").glob("*/*.parquet")):
        try:
            pq.ParquetFile(f).read()
        except Exception as e:  # noqa: BLE001 - whatever the reader raises is the answer
            return f, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


PARQUET_MAGIC = b"PAR1"


def damaged_shard(path: Path) -> str | None:
    """Why the Parquet file at ``path`` is not whole, or None: a file cut short (a copy, a full disk) or emptied
    lacks Parquet's magic bytes at its start or end. Two reads of 4 bytes: it does not read the file, so damage
    inside the data pages is found only when they are read."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(4)
            fh.seek(max(size - 4, 0))
            tail = fh.read(4)
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    if size < 12 or head != PARQUET_MAGIC or tail != PARQUET_MAGIC:
        return f"not a whole Parquet file ({size} bytes, " + (
            "too short" if size < 12 else f"starts {head!r}, ends {tail!r}; a Parquet file starts and ends b'PAR1'"
        ) + ")"
    return None


def named_shards(root: Path) -> set[str] | None:
    """The record shards (``records/...`` paths) a dataset's own record names: its manifest's inputs' outputs (a
    converted dataset) or prune.json's outputs (a pruned one); None where it has no manifest.json (a folder of
    Parquet made by hand). IncompleteDataset for a prune that was interrupted while it put its files in place."""
    root = Path(root)
    try:
        man = orjson.loads((root / "manifest.json").read_bytes())
    except FileNotFoundError:
        return None
    except (orjson.JSONDecodeError, OSError) as e:
        raise IncompleteDataset(f"{root}: unreadable manifest.json ({e})") from None
    if not isinstance(man, dict):
        return None
    if "pruned_from" in man:
        if man.get("incomplete"):
            raise IncompleteDataset(f"{root}: a curate prune was interrupted while it put its files in place; run it "
                                    "again")
        try:
            outs = orjson.loads((root / "prune.json").read_bytes()).get("outputs")
        except (FileNotFoundError, orjson.JSONDecodeError):
            raise IncompleteDataset(f"{root}: a pruned dataset without a readable prune.json; run the prune again")
    else:
        entries = [e for e in (man.get("inputs") or {}).values() if isinstance(e, dict)]
        outs = None if any("outputs" not in e for e in entries) else [o for e in entries for o in e["outputs"]]
    if outs is None:  # written before the record named its shards: nothing to compare with
        return None
    return {o for o in outs if isinstance(o, str) and o.startswith("records/")}


def check_readable(root: Path, present: list[Path] | None = None) -> None:
    """What every reader of records asks first (``prune.record_files``: load_records, training, info, a prune's
    source; ``catalog.run_sql``). Readers take no lock, so:

    - while a writer holds ``root``, warn (``DatasetBeingWritten``): what is read may be a state between two runs
      (a query counted 25,440 of 45,529 rows while bennu was being renamed; a training read such a state without
      a word);
    - otherwise refuse (``IncompleteDataset``) a dataset whose record shards (``present``, else globbed) are not
      those its record names (``named_shards``): a convert killed between writing a changed input's new shards and
      removing its old ones left both, and every reader counted those rows twice (192,828 rows, 180,716 distinct),
      a prune of it included. Running the interrupted command again repairs it."""
    root = Path(root)
    holder = writer_of(root)
    if holder:
        warnings.warn(f"{root} is being written ({holder}): what is read now may be a state between two runs; "
                      "read again when it is done", DatasetBeingWritten, stacklevel=_caller_outside_package())
        return
    names = named_shards(root)
    if names is None:
        return
    files = present if present is not None else list((root / "records").glob("*/*.parquet"))
    have = {p.relative_to(root).as_posix() for p in files}
    extra, missing = sorted(have - names), sorted(names - have)
    if extra or missing:
        raise IncompleteDataset(
            f"{root}: its records/ " + " and ".join(
                ([f"holds {len(extra)} shard(s) its manifest does not name (the first: {extra[0]})"] if extra else [])
                + ([f"lacks {len(missing)} it names (the first: {missing[0]})"] if missing else []))
            + ": a convert or prune of it was interrupted; run that command again")
    for f in sorted(files):  # a shard cut short or emptied: every reader ended in a Parquet library's traceback
        why = damaged_shard(f)
        if why:
            raise IncompleteDataset(
                f"{f}: {why}: the shard is damaged (a copy cut short, a full disk); run the command that made the "
                "dataset again (curate convert rewrites the damaged group's shards from its inputs; a pruned "
                "dataset: curate prune again)")


def _caller_outside_package() -> int:
    """The ``stacklevel`` that points a warning raised by the caller at the first frame outside this package: the
    user's call, however many of the package's functions and decorators (``names_damaged_shard``) lie between."""
    f, level = sys._getframe(2), 1  # the caller's caller is level 2 from the warning's point of view
    here = os.path.dirname(os.path.abspath(__file__))
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == here:
        f, level = f.f_back, level + 1
    return level + 1


def writer_of(root: Path) -> str | None:
    """Who holds ``root/.lock`` for a write right now (``dataset_lock``'s record of it), or None. Readers do not
    take the lock; they ask (``check_readable``), because a read during a write sees the shards half replaced."""
    try:
        fd = os.open(Path(root) / ".lock", os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except BlockingIOError:
        return _holder(fd)
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    """What ``dataset_lock`` wrote into the lock file of the process that holds it."""
    return os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown process"


def check_int(name: str, value, least: int | None = None) -> None:
    """Refuse an argument that is not an integer (a NumPy integer is one, a bool is not) or is under ``least``,
    naming it: what the commands' functions ask of a seed, a worker count or an epoch count from Python, where the
    CLI's options already had their types and bounds."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or (least is not None and value < least):
        raise ValueError(f"{name} {value!r}: an integer" + (f", at least {least}" if least is not None else ""))
    if not -(1 << 63) <= value < 1 << 63:  # stored in JSON and hashed as 64 bits: it failed after the work was done
        raise ValueError(f"{name} {value!r}: an integer of at most 64 bits (under 2**63 in magnitude)")


def file_in_the_way(folder: Path) -> bool:
    """Whether ``folder``, or a folder above it, is a file: making it would fail (FileExistsError,
    NotADirectoryError) after whatever ran before."""
    folder = Path(folder)
    return any(q.exists() and not q.is_dir() for q in (folder, *folder.parents))


def check_bool(name: str, value) -> None:
    """Refuse a flag that is not a bool (NumPy's included), naming it: "yes" as ``include_failed`` was read as a
    column name deep in a Polars query, 1 as an integer Polars would not "or" with a boolean."""
    numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")  # NumPy 1 and 2
    if not (isinstance(value, bool) or numpy_bool):
        raise ValueError(f"{name} {value!r}: True or False")


def file_sha256(path: Path, bufsize: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            b = fh.read(bufsize)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def safe_join(root: Path, rel: str) -> Path:
    """Join a path from a pipeline file or manifest under ``root``; refuse ``..`` escapes and absolute paths."""
    p = Path(rel)
    if p.is_absolute():
        raise OutputError(f"refusing absolute path {rel!r}: give paths relative to {root} (they must stay inside it)")
    full = (Path(root) / p).resolve()
    if not full.is_relative_to(Path(root).resolve()):
        raise OutputError(f"refusing path {rel!r}: it escapes {root}")
    return full
