"""DuckDB catalog over a converted dataset, and a locked-down read-only SQL runner.

Layout of a dataset (the contract every step writes to)::

    DATASET/
      manifest.json
      records/hardware=<name>/part-<hash>.parquet   RECORD_SCHEMA, one folder per hardware (the name made safe
                                                    for a path; the view reads the shards' own hardware column)
      quarantine/part-<hash>.parquet                QUARANTINE_SCHEMA (may be absent)
      workloads/part-<hash>.parquet                 WORKLOAD_SCHEMA (may be absent)
      networks/part-<hash>.parquet (or networks.parquet)   netinfo.NETWORKS_SCHEMA rows (may be absent)
      tables/<name>.parquet  (or tables/<name>/*.parquet)    further tables -> view <name>
      splits/<name>.parquet  (or splits/<name>/*.parquet)    split assignments -> view split_<name>
      catalog.duckdb                                views over all of the above

``build_catalog`` (re)creates ``catalog.duckdb`` atomically.  Its views name parquet files by paths
RELATIVE to the dataset directory, so the directory can be moved or copied; open it with DuckDB's
``file_search_path`` set to the dataset directory (``connect`` does that) and they resolve.  Views
read parquet lazily: every query re-globs, so shards a converter adds later show up without a rebuild
(a part that was entirely missing at build time is an empty typed view until the next build).

``connect_readonly`` / ``run_sql`` are for queries that should not be trusted.  Two independent guards:

1. DuckDB's own configuration (the real boundary).  A private in-memory DuckDB instance ATTACHes
   ``catalog.duckdb`` READ_ONLY (a private instance because DuckDB's Python API shares one instance,
   and so one global configuration, per database file per process); then
   ``allowed_directories`` = [the dataset directory (realpath)], ``enable_external_access = false``
   (no file outside it, no URL, no INSTALL/LOAD, no ATTACH/COPY/EXPORT outside it, no secrets
   directory), ``autoinstall_known_extensions`` / ``autoload_known_extensions`` /
   ``allow_community_extensions`` = false, ``allow_extension_repositories = 'forbidden'``,
   ``python_enable_replacements = false``, ``disabled_filesystems`` = the HTTP/S3/... file systems,
   ``temp_directory = ''`` (no spill files); finally ``lock_configuration = true`` so no
   ``SET``/``RESET``/``PRAGMA x=y`` can loosen any of it.
   What it does NOT stop: writes INSIDE the allowed directory (``COPY ... TO 'DATASET/x.csv'`` or
   ``ATTACH 'DATASET/new.db'`` would create files there) -- guard 2 refuses those statements.
   Symlinks: DuckDB 2.0.1 checks ``allowed_directories`` against the RESOLVED path, so a symlink
   inside the dataset that points outside it is refused (Permission Error), not followed; a view
   whose glob matches such a link fails with that error (other views keep working).
   Relative paths: DuckDB checks a relative path against the process working directory, not
   ``file_search_path``, so inside this connection the catalog's relative views would be refused;
   ``connect_readonly`` therefore shadows every view with a TEMP view of the same name built from
   absolute paths (the temp catalog is searched first; the catalog's own ``tasks`` view binds to the
   temp ``records`` too).  Users of ``run_sql`` should likewise use views or absolute paths.
2. A statement check in ``check_sql`` that does not rely on regexes: DuckDB's own parser
   (``extract_statements``) must yield exactly one statement of an allowed type (SELECT, and
   DESCRIBE/SHOW/SUMMARIZE/VALUES/TABLE/FROM which parse as SELECT; EXPLAIN [ANALYZE] of an allowed
   SELECT; CALL of an allowed table function; a short list of read-only PRAGMAs).  Its syntax tree
   (``json_serialize_sql``) is then walked: table functions must be on an allow-list, file readers
   (read_parquet, read_csv, read_text, read_blob, glob, ...) must name constant paths inside the
   dataset (no URL, no ``~``, no ``..`` escape, no symlink escape), dynamic-SQL functions (``query``,
   ``query_table``, ``json_execute_serialized_sql``) and state-changing ones (``checkpoint``,
   ``write_log``, logging) are refused, and ``FROM 'some/file.csv'`` replacement scans get the same
   path check.

A DuckDB permission error raised while running an accepted statement is re-raised as ``SQLRefused``.
"""
from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import re
import uuid
import warnings
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable

import duckdb
import pyarrow as pa

from .schema import QUARANTINE_SCHEMA, RECORD_SCHEMA, SCHEMA_VERSION, WORKLOAD_SCHEMA
from .storage import DamagedShard, damaged_inside, names_damaged_shard, parquet_read_error, unreadable_shard

try:  # optional, faster and stricter JSON
    import orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    orjson = None

__all__ = [
    "CATALOG_NAME",
    "NETWORK_SCHEMA",
    "SQLRefused",
    "build_catalog",
    "check_sql",
    "connect",
    "connect_readonly",
    "format_table",
    "run_sql",
    "sanitize_name",
    "view_names",
]

CATALOG_NAME = "catalog.duckdb"

# Only used for the EMPTY networks view when no network shard exists (present shards are read as they are).
try:
    from .netinfo import NETWORKS_SCHEMA as NETWORK_SCHEMA
except ImportError:  # pragma: no cover - netinfo is part of the package
    NETWORK_SCHEMA = pa.schema(
        [("network", pa.string()), ("target_kind", pa.string()), ("workload_key", pa.string()),
         ("task_weight", pa.int64())]
    )
MANIFEST_INPUTS_SCHEMA = pa.schema(
    [("label", pa.string()), ("format", pa.string()), ("key", pa.string())]
    + [(c, pa.int64()) for c in ("lines", "rows", "quarantined", "comments", "failed")]
    + [("outputs", pa.string()), ("entry", pa.string())]
)
SPLIT_EMPTY_SCHEMA = pa.schema([("record_id", pa.string()), ("part", pa.string())])

# Views build_catalog always creates; a tables/<name>.parquet whose sanitised name collides with
# one of these gets a ``_table`` suffix.
FIXED_VIEWS = ("records", "quarantine", "workloads", "networks", "tasks", "manifest_inputs", "catalog_info")

FORMATS = ("table", "csv", "json", "arrow")


class SQLRefused(ValueError):
    """A statement ``run_sql`` will not run: it writes, changes state, or reaches outside the dataset."""


# --------------------------------------------------------------------------------------------------
# view definitions
# --------------------------------------------------------------------------------------------------


def sanitize_name(name: str) -> str:
    """Lower-case ``name`` and map it to ``[a-z0-9_]`` (a valid, unquoted SQL identifier)."""
    s = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    s = re.sub(r"_+", "_", s)
    if not s:
        s = "unnamed"
    if s[0].isdigit():
        s = "t_" + s
    return s


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


_TYPE_CACHE: dict[str, list[tuple[str, str]]] = {}


def _duck_columns(schema: pa.Schema) -> list[tuple[str, str]]:
    """(name, DuckDB type string) for a pyarrow schema, as DuckDB itself maps it. The first call also maps the
    fixed schemas of the catalog's empty views, in the same connection (a connection costs ~15 ms; a first
    catalog build of a dataset without quarantine, workloads and networks needed three)."""
    key = schema.to_string()
    if key not in _TYPE_CACHE:
        todo = {s.to_string(): s for s in (schema, QUARANTINE_SCHEMA, WORKLOAD_SCHEMA, NETWORK_SCHEMA)}
        con = duckdb.connect()
        try:
            for i, (k, s) in enumerate(todo.items()):
                if k not in _TYPE_CACHE:
                    con.register(f"_empty{i}", pa.Table.from_batches([], schema=s))
                    _TYPE_CACHE[k] = [(r[0], r[1]) for r in con.execute(f"DESCRIBE SELECT * FROM _empty{i}").fetchall()]
        finally:
            con.close()
    return _TYPE_CACHE[key]


def _empty_select(schema: pa.Schema) -> str:
    cols = ", ".join(f"CAST(NULL AS {t}) AS {_ident(n)}" for n, t in _duck_columns(schema))
    return f"SELECT {cols} WHERE false"


def _has_parquet(directory: Path, pattern: str) -> bool:
    if not directory.is_dir():
        return False
    return any(p.is_file() for p in directory.glob(pattern))


@dataclass(frozen=True)
class _View:
    name: str
    sql: str  # the SELECT body; ``{path:rel}`` becomes a literal of ``rel`` (catalog) or ``DATASET/rel`` (locked)
    source: str  # what it reads, for catalog_info / messages


def _parquet_view(name: str, rel_glob: str, root: Path, exists: bool, empty: pa.Schema, union: bool = True,
                  **opts: str) -> _View:
    """``union=False`` for tables every shard of which has one fixed schema (records, quarantine, workloads,
    networks): DuckDB then reads one footer to bind the view instead of every shard's (union_by_name made the
    catalog build's memory grow with the number of shards)."""
    if not exists:
        return _View(name, _empty_select(empty), f"(missing) {rel_glob}")
    extra = "".join(f", {k} = {v}" for k, v in opts.items())
    return _View(name, f"SELECT * FROM read_parquet({{path:{rel_glob}}}, union_by_name = {str(union).lower()}{extra})",
                 rel_glob)


_UNSAFE_NAME = re.compile(r"[{}\[\]*?'\"\\]")


def _table_sources(root: Path, sub: str) -> list[tuple[str, str]]:
    """(stem, relative glob) for ``sub/<name>.parquet`` files and ``sub/<name>/`` directories of parquet."""
    base = root / sub
    out: list[tuple[str, str]] = []
    if not base.is_dir():
        return out
    for p in sorted(base.iterdir()):
        if p.name.startswith(".") or ".tmp-" in p.name:
            continue
        if _UNSAFE_NAME.search(p.name):
            warnings.warn(f"catalog: skipping {p} (glob or quote characters in its name)", stacklevel=3)
            continue
        if p.is_file() and p.suffix == ".parquet":
            out.append((p.stem, f"{sub}/{p.name}"))
        elif p.is_dir() and _has_parquet(p, "**/*.parquet"):
            out.append((p.name, f"{sub}/{p.name}/**/*.parquet"))
    return out


_MANIFEST_COUNTS = ("lines", "rows", "quarantined", "comments", "failed")


def _manifest_inputs_sql(root: Path) -> str:
    """One row per manifest input: convert's ``{"inputs": {label: entry}}`` (or a list of entries)."""
    if not (root / "manifest.json").is_file():
        return _empty_select(MANIFEST_INPUTS_SCHEMA)
    counts = "".join(f", TRY_CAST(je.value->>'{c}' AS BIGINT) AS {c}" for c in _MANIFEST_COUNTS)
    return (
        "SELECT CAST(coalesce(je.value->>'label', je.value->>'path', je.key) AS VARCHAR) AS label, "
        "CAST(je.value->>'format' AS VARCHAR) AS format, CAST(je.value->>'key' AS VARCHAR) AS key"
        f"{counts}, CAST(je.value->'outputs' AS VARCHAR) AS outputs, CAST(je.value AS VARCHAR) AS entry "
        "FROM read_text({path:manifest.json}) AS m, json_each(m.content, '$.inputs') AS je"
    )


TASKS_SQL = """
SELECT
    task_id,
    hardware,
    any_value(workload_key) AS workload_key,
    any_value(workload_name) AS workload_name,
    any_value(target_kind) AS target_kind,
    count(*) AS records,
    count(*) FILTER (WHERE is_valid) AS valid_records,
    min(mean_cost) FILTER (WHERE is_valid) AS best_mean_cost
FROM records
GROUP BY task_id, hardware
""".strip()


def _view_definitions(root: Path, built_at: str | None = None) -> list[_View]:
    views: list[_View] = [
        _parquet_view(
            "records",
            "records/*/*.parquet",
            root,
            _has_parquet(root / "records", "*/*.parquet"),
            RECORD_SCHEMA,
            union=False,
            # the file's own hardware column: the folder name is that name made safe for a path ('gpu/a' and
            # 'gpu=a' both live in hardware=gpu_a), and reading it as the column merged such names
            hive_partitioning="false",
        ),
        _parquet_view(
            "quarantine", "quarantine/*.parquet", root, _has_parquet(root / "quarantine", "*.parquet"), QUARANTINE_SCHEMA,
            union=False,
        ),
        _parquet_view(
            "workloads", "workloads/*.parquet", root, _has_parquet(root / "workloads", "*.parquet"), WORKLOAD_SCHEMA,
            union=False,
        ),
    ]
    if _has_parquet(root / "networks", "*.parquet"):  # convert writes networks/part-<key>.parquet
        views.append(_parquet_view("networks", "networks/*.parquet", root, True, NETWORK_SCHEMA, union=False))
    else:
        views.append(_parquet_view("networks", "networks.parquet", root, (root / "networks.parquet").is_file(), NETWORK_SCHEMA))
    views.append(_View("tasks", TASKS_SQL, "records"))
    views.append(_View("manifest_inputs", _manifest_inputs_sql(root), "manifest.json"))

    taken = set(FIXED_VIEWS)
    for stem, rel in _table_sources(root, "splits"):
        name = _unique("split_" + sanitize_name(stem), taken)
        views.append(_parquet_view(name, rel, root, True, SPLIT_EMPTY_SCHEMA))
    for stem, rel in _table_sources(root, "tables"):
        base = sanitize_name(stem)
        if base in taken:
            base += "_table"
        name = _unique(base, taken)
        views.append(_parquet_view(name, rel, root, True, pa.schema([])))

    info = [(v.name, v.source) for v in views]
    info_rows = ", ".join(f"({_sql_str(n)}, {_sql_str(s)})" for n, s in info)
    built = _sql_str(built_at) if built_at else "NULL"
    views.append(
        _View(
            "catalog_info",
            f"SELECT v.view_name, v.source, {_sql_str(SCHEMA_VERSION)} AS schema_version, "
            f"CAST({built} AS VARCHAR) AS built_at FROM (VALUES {info_rows}) AS v(view_name, source)",
            "",
        )
    )
    return views


def _unique(name: str, taken: set[str]) -> str:
    out, i = name, 2
    while out in taken:
        out = f"{name}_{i}"
        i += 1
    taken.add(out)
    return out


def _render(sql: str, prefix: str) -> str:
    """Replace ``{path:rel}`` placeholders with SQL string literals of ``prefix + rel``."""
    return re.sub(r"\{path:([^}]*)\}", lambda m: _sql_str(prefix + m.group(1)), sql)


def _root(dataset_dir: str | os.PathLike) -> Path:
    root = Path(os.path.realpath(os.fspath(dataset_dir)))
    if not root.is_dir():
        raise FileNotFoundError(f"dataset directory not found: {dataset_dir}")
    return root


# --------------------------------------------------------------------------------------------------
# build / trusted connect
# --------------------------------------------------------------------------------------------------


def build_catalog(dataset_dir: str | os.PathLike) -> Path:
    """(Re)create ``DATASET/catalog.duckdb`` atomically; returns its path.

    Views: records, quarantine, workloads, networks, tasks, manifest_inputs, catalog_info, one per
    ``tables/<name>.parquet`` (named ``<name>``) and one per ``splits/<name>.parquet`` (``split_<name>``).
    """
    root = _root(dataset_dir)
    final = root / CATALOG_NAME
    # "<name>.tmp-<pid>..." is the package's temp-file convention (storage.remove_stale_tmp cleans them up)
    tmp = root / f"{CATALOG_NAME}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    built_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        con = duckdb.connect(str(tmp), config={"file_search_path": str(root), "autoinstall_known_extensions": False})
        try:
            for v in _view_definitions(root, built_at):
                con.execute(f"CREATE OR REPLACE VIEW {_ident(v.name)} AS {_render(v.sql, '')}")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(tmp, final)
    except duckdb.Error as e:  # e.g. the disk filled while DuckDB wrote the file: the old catalog stays
        from .storage import OutputError

        raise OutputError(f"cannot write {final}: {e}; earlier outputs are left as they were") from e
    finally:
        for p in (tmp, Path(str(tmp) + ".wal")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
    return final


def _catalog_path(root: Path) -> Path:
    path = root / CATALOG_NAME
    if not path.is_file() and (root / "manifest.json").is_file():  # a convert or prune that never got to its end
        raise FileNotFoundError(f"{path} not found: the convert or prune that writes {root} was interrupted before "
                                f"it made its catalog; run it again (from Python, build_catalog({str(root)!r}) "
                                "rebuilds a dataset's catalog)")
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {root} is not a dataset (curate convert or curate prune write "
                                f"one; from Python, build_catalog({str(root)!r}) rebuilds a dataset's catalog)")
    return path


def connect(dataset_dir: str | os.PathLike, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """A TRUSTED connection to the catalog (file_search_path set, no restrictions) for pipeline code.

    DuckDB's Python API shares one database instance per file per process while any connection to it
    is open, so close connections before ``build_catalog`` replaces the file if you want to see new views.
    """
    root = _root(dataset_dir)
    return duckdb.connect(
        str(_catalog_path(root)), read_only=read_only, config={"file_search_path": str(root)}
    )


def view_names(dataset_dir: str | os.PathLike) -> list[str]:
    """Names of the views in the dataset's catalog."""
    con = connect(dataset_dir)
    try:
        return [r[0] for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal AND database_name = current_database() "
            "ORDER BY view_name"
        ).fetchall()]
    finally:
        con.close()


# --------------------------------------------------------------------------------------------------
# locked-down connection
# --------------------------------------------------------------------------------------------------

_DISABLED_FILESYSTEMS = "HTTPFileSystem,S3FileSystem,HuggingFaceFileSystem,GCSFileSystem,AzureBlobStorageFileSystem"


def connect_readonly(dataset_dir: str | os.PathLike) -> duckdb.DuckDBPyConnection:
    """Open the catalog read-only with file access confined to the dataset directory, config locked.

    The connection is a private in-memory DuckDB instance that ATTACHes ``catalog.duckdb`` READ_ONLY
    (as ``catalog``, made the default).  A private instance is needed because DuckDB's Python API caches
    one instance per database file per process, and ``allowed_directories``/``enable_external_access``/
    ``lock_configuration`` are instance-global: opening the file directly would share (and lock) the
    configuration of any other connection to the same catalog in this process.
    """
    root = _root(dataset_dir)
    path = _catalog_path(root)
    con = duckdb.connect(
        ":memory:",
        config={
            "file_search_path": str(root),
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_community_extensions": False,
            "python_enable_replacements": False,
        },
    )
    try:
        con.execute(f"ATTACH {_sql_str(str(path))} AS catalog (READ_ONLY)")
        con.execute("USE catalog")
        # No spilling: an in-memory instance would otherwise spill to ./.tmp and allow-list it.
        con.execute("SET temp_directory = ''")
        # allowed_directories can only be set once the database runs, and before external access is off.
        con.execute("SET allowed_directories = $1", [[str(root) + os.sep]])
        con.execute("SET allowed_paths = $1", [[]])
        for setting in (
            f"SET disabled_filesystems = {_sql_str(_DISABLED_FILESYSTEMS)}",
            "SET allow_extension_repositories = 'forbidden'",
        ):
            try:
                con.execute(setting)
            except duckdb.Error:  # pragma: no cover - a DuckDB without the option/value
                pass
        con.execute("SET enable_external_access = false")
        # Shadow the catalog's relative-path views with absolute-path TEMP views (see module doc).
        prefix = str(root) + "/"
        failed: dict[str, str] = {}
        damaged: set[str] = set()  # views that failed on a record shard damaged inside
        for v in _view_definitions(root):
            if v.name == "catalog_info":  # reads no file: the catalog's own view (with its build time) serves
                continue
            try:
                con.execute(f"CREATE OR REPLACE TEMP VIEW {_ident(v.name)} AS {_render(v.sql, prefix)}")
            except duckdb.Error as exc:
                # e.g. a shard that is a symlink leaving the dataset (DuckDB refuses it): keep the
                # connection usable, and make this one view fail with the reason when it is queried.
                deps = [f for f in failed if re.search(rf"\bFROM\s+{f}\b", v.sql)]
                why = f"it reads view {deps[0]}: {failed[deps[0]]}" if deps else str(exc).splitlines()[0]
                bad = (unreadable_shard(root) if "records/" in v.sql and not deps and parquet_read_error(str(exc))
                       else None)  # a full read: only where DuckDB's message is about a Parquet file
                if bad:  # a record shard damaged inside: name it (DuckDB's message names no file)
                    why = str(damaged_inside(*bad))
                    damaged.add(v.name)
                failed[v.name] = why
                msg = f"view {v.name} is unavailable: {why}"
                con.execute(
                    f"CREATE OR REPLACE TEMP VIEW {_ident(v.name)} AS "
                    f"SELECT * FROM range(1) WHERE error({_sql_str(msg)}) IS NULL"
                )
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    if failed:
        _UNAVAILABLE[con] = (failed, damaged)
    return con


# connection -> ({view: why}, the views of a damaged shard) for the views connect_readonly could not create: a
# query naming one fails with a binder error about the stand-in's columns, and run_sql says why instead
_UNAVAILABLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _unavailable_view_error(con: duckdb.DuckDBPyConnection, query: str, exc: duckdb.Error) -> Exception | None:
    """The error to raise instead of DuckDB's ``exc`` when ``query`` names a view the connection could not create:
    a ``storage.DamagedShard`` naming the shard when that was the reason; DuckDB's InvalidInputException saying
    which view and why when ``exc`` does not say it (a binder error about the stand-in's columns); else None."""
    failed, damaged = _UNAVAILABLE.get(con, ({}, set()))
    for name, why in failed.items():
        if re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", query, re.IGNORECASE):
            if name in damaged:
                return DamagedShard(why)
            if "is unavailable: " not in str(exc):
                return duckdb.InvalidInputException(f"view {name} is unavailable: {why}")
    return None


# --------------------------------------------------------------------------------------------------
# statement check
# --------------------------------------------------------------------------------------------------

# Table functions allowed anywhere in a query.
SAFE_TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "generate_series",
        "unnest",
        "json_each",
        "json_tree",
        "repeat",
        "repeat_row",
        "test_all_types",
        "duckdb_tables",
        "duckdb_views",
        "duckdb_columns",
        "duckdb_schemas",
        "duckdb_databases",
        "duckdb_functions",
        "duckdb_types",
        "duckdb_keywords",
        "duckdb_constraints",
        "duckdb_indexes",
        "duckdb_settings",
        "duckdb_extensions",
        "duckdb_dependencies",
        "duckdb_sequences",
        "duckdb_optimizers",
        "duckdb_memory",
        "pragma_table_info",
        "pragma_show",
        "pragma_version",
        "pragma_platform",
        "pragma_database_size",
        "pragma_database_list",
        "pragma_storage_info",
        "pragma_metadata_info",
        "pragma_show_tables",
        "pragma_show_tables_expanded",
        "pragma_collations",
    }
)

# Table functions that read files: allowed only with constant paths inside the dataset.
FILE_READER_FUNCTIONS = frozenset(
    {
        "read_parquet",
        "parquet_scan",
        "read_csv",
        "read_csv_auto",
        "read_json",
        "read_json_auto",
        "read_ndjson",
        "read_ndjson_auto",
        "read_json_objects",
        "read_json_objects_auto",
        "read_ndjson_objects",
        "read_text",
        "read_blob",
        "glob",
        "sniff_csv",
        "parquet_metadata",
        "parquet_schema",
        "parquet_file_metadata",
        "parquet_kv_metadata",
        "parquet_full_metadata",
        "parquet_page_index",
        "parquet_bloom_probe",
    }
)

# Why some well-known table functions are refused (others get a generic message).
_REFUSED_TABLE_FUNCTIONS = {
    "query": "runs a SQL string that cannot be checked",
    "query_table": "runs a SQL string that cannot be checked",
    "json_execute_serialized_sql": "runs serialized SQL that cannot be checked",
    "checkpoint": "changes database state (checkpoint)",
    "force_checkpoint": "changes database state (checkpoint)",
    "enable_logging": "changes logging state",
    "disable_logging": "changes logging state",
    "truncate_duckdb_logs": "changes logging state",
    "read_duckdb": "opens another database file",
    "arrow_scan": "scans raw memory pointers",
    "arrow_scan_dumb": "scans raw memory pointers",
    "python_arrow_scan": "scans Python objects",
    "pandas_scan": "scans Python objects",
    "duckdb_secrets": "touches secrets",
    "which_secret": "touches secrets",
}

# Scalar functions refused anywhere.
_REFUSED_SCALAR_FUNCTIONS = {
    "write_log": "writes to the log",
    "getenv": "reads the process environment",
    "json_execute_serialized_sql": "runs serialized SQL that cannot be checked",
}

# PRAGMAs that only read.
SAFE_PRAGMAS = frozenset(
    {
        "table_info",
        "show",
        "show_tables",
        "show_tables_expanded",
        "show_databases",
        "database_list",
        "database_size",
        "storage_info",
        "metadata_info",
        "version",
        "platform",
        "collations",
        "functions",
    }
)

_TYPE_REASONS = {
    "CREATE": "it creates objects (run_sql is read-only)",
    "INSERT": "it writes rows (run_sql is read-only)",
    "UPDATE": "it writes rows (run_sql is read-only)",
    "DELETE": "it deletes rows (run_sql is read-only)",
    "DROP": "it drops objects (run_sql is read-only)",
    "ALTER": "it alters objects (run_sql is read-only)",
    "MERGE_INTO": "it writes rows (run_sql is read-only)",
    "COPY": "COPY reads or writes files (use the dataset's views; run_sql is read-only)",
    "COPY_DATABASE": "it copies a database (run_sql is read-only)",
    "EXPORT": "EXPORT writes files (run_sql is read-only)",
    "ATTACH": "ATTACH opens other databases/files outside the dataset's views",
    "DETACH": "DETACH changes the attached databases",
    "LOAD": "INSTALL/LOAD of extensions is not allowed (code loading, network access)",
    "EXTENSION": "extension management is not allowed",
    "SET": "SET/RESET/USE change the session configuration",
    "VARIABLE_SET": "SET VARIABLE changes session state",
    "VACUUM": "VACUUM/ANALYZE change the database",
    "TRANSACTION": "transaction control is not allowed",
    "PREPARE": "prepared statements are not allowed",
    "EXECUTE": "prepared statements are not allowed",
    "CREATE_FUNC": "it creates functions (run_sql is read-only)",
    "MULTI": "it expands to several statements (e.g. PIVOT; wrap it as SELECT * FROM (PIVOT ...))",
    "RELATION": "relation statements are not allowed",
    "LOGICAL_PLAN": "logical plan statements are not allowed",
    "ANALYZE": "ANALYZE changes the database",
    "INVALID": "its statement type is not one run_sql knows to be read-only",
}

_URL_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*:")
_GLOB_CHARS = re.compile(r"[*?\[{]")


def _strip_leading_comments(sql: str) -> str:
    """Drop leading whitespace, ``-- line`` and (nested) ``/* block */`` comments."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace():
            i += 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif sql.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        else:
            break
    return sql[i:]


def _leading_words(sql: str, k: int = 2) -> list[str]:
    words: list[str] = []
    rest = sql
    for _ in range(k):
        rest = _strip_leading_comments(rest)
        m = re.match(r"[A-Za-z_]+", rest)
        if not m:
            break
        words.append(m.group(0).upper())
        rest = rest[m.end():]
    return words


def _keyword(sql: str) -> str:
    """The statement's leading keyword(s), for messages (``CREATE``, ``FORCE INSTALL``, ``EXPORT DATABASE``)."""
    words = _leading_words(sql, 2)
    if not words:
        return "?"
    if words[0] in ("FORCE", "EXPORT", "IMPORT") and len(words) > 1:
        return " ".join(words)
    return words[0]


_PARSER: duckdb.DuckDBPyConnection | None = None


def _parser() -> duckdb.DuckDBPyConnection:
    """A cursor on a private in-memory instance used only to parse (it never reads data or files)."""
    global _PARSER
    if _PARSER is None:
        _PARSER = duckdb.connect(
            ":memory:",
            config={
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
                "enable_external_access": False,
                "lock_configuration": True,
            },
        )
    return _PARSER.cursor()


def _extract(sql: str) -> list[Any]:
    try:
        with _parser() as cur:
            return list(cur.extract_statements(sql))
    except duckdb.Error as exc:
        raise SQLRefused(f"refused: the SQL could not be parsed ({str(exc).splitlines()[0]})") from exc
    except ValueError as exc:  # a statement type the Python enum does not know (e.g. UPDATE EXTENSIONS)
        raise SQLRefused(
            f"refused: {_keyword(sql)} statement has a type run_sql does not know ({exc}); only SELECT is allowed"
        ) from exc


def _stype(stmt: Any) -> str:
    """The statement type's name; ``INVALID`` for a type this duckdb's Python enum does not know."""
    try:
        return stmt.type.name
    except ValueError:  # e.g. UPDATE EXTENSIONS in duckdb 2.0.1 (type 29)
        return "INVALID"


def check_sql(query: str, dataset_dir: str | os.PathLike) -> str:
    """Raise ``SQLRefused`` unless ``query`` is ONE read-only statement confined to the dataset.

    Returns the statement's kind (``SELECT``, ``EXPLAIN``, ``PRAGMA``, ``CALL``).
    """
    if not isinstance(query, str) or not query.strip():
        raise SQLRefused("refused: empty query")
    root = _root(dataset_dir)
    stmts = _extract(query)
    if len(stmts) != 1:
        kinds = ", ".join(f"{_keyword(s.query)} ({_stype(s)})" for s in stmts) or "none"
        raise SQLRefused(
            f"refused: multiple statements ({len(stmts)} found: {kinds}); run_sql runs exactly one statement"
        )
    return _check_statement(stmts[0], root, depth=0)


def _check_statement(stmt: Any, root: Path, depth: int) -> str:
    text = stmt.query
    kind = _stype(stmt)
    kw = _keyword(text)
    if depth > 3:
        raise SQLRefused("refused: nested EXPLAIN")
    if kind == "SELECT":
        _check_select_tree(text, root, what="SELECT")
        return "SELECT"
    if kind == "EXPLAIN":
        words = _leading_words(text, 1)
        rest = _strip_leading_comments(text)
        if words != ["EXPLAIN"]:
            raise SQLRefused(f"refused: {kw} statement (EXPLAIN) in an unexpected form")
        rest = rest[len("EXPLAIN"):]
        w = _leading_words(rest, 1)
        if w and w[0] in ("ANALYZE", "ANALYSE"):
            rest = _strip_leading_comments(rest)[len(w[0]):]
        inner = _extract(rest)
        if len(inner) != 1:
            raise SQLRefused("refused: EXPLAIN of several statements")
        inner_kind = _check_statement(inner[0], root, depth + 1)
        if inner_kind != "SELECT":
            raise SQLRefused(f"refused: EXPLAIN of a {inner_kind} statement; only EXPLAIN SELECT is allowed")
        return "EXPLAIN"
    if kind == "PRAGMA":
        body = _strip_leading_comments(text)
        m = re.match(r"(?is)pragma\s+([a-z_][a-z0-9_]*)\s*(\((.*)\))?\s*;?\s*$", body)
        if not m:
            raise SQLRefused(
                f"refused: {kw} statement (DuckDB runs it as a PRAGMA that may change state: "
                "IMPORT DATABASE, COPY FROM DATABASE, or PRAGMA name=value); run_sql is read-only"
            )
        name = m.group(1).lower()
        if name not in SAFE_PRAGMAS:
            raise SQLRefused(
                f"refused: PRAGMA {name} is not on the read-only PRAGMA list ({', '.join(sorted(SAFE_PRAGMAS))})"
            )
        if m.group(3) is not None:
            # PRAGMA f(args) runs table function pragma_f(args): check its arguments like a SELECT would.
            _check_select_tree(f"SELECT * FROM pragma_{name}({m.group(3)})", root, what=f"PRAGMA {name}")
        return "PRAGMA"
    if kind == "CALL":
        body = _strip_leading_comments(text)
        if _leading_words(body, 1) != ["CALL"]:
            raise SQLRefused(f"refused: {kw} statement (CALL): it changes database state; run_sql is read-only")
        inner = body[len("CALL"):].strip().rstrip(";")
        # CALL f(...) is SELECT * FROM f(...): the same function and path checks apply.
        _check_select_tree(f"SELECT * FROM {inner}", root, what="CALL")
        return "CALL"
    reason = _TYPE_REASONS.get(kind, "only read-only statements are allowed")
    raise SQLRefused(f"refused: {kw} statement ({kind}): {reason}")


def _serialize(sql: str) -> dict:
    try:
        with _parser() as cur:
            raw = cur.execute("SELECT json_serialize_sql($1::VARCHAR)", [sql]).fetchone()[0]
    except duckdb.Error as exc:
        raise SQLRefused(f"refused: the statement could not be analysed ({str(exc).splitlines()[0]})") from exc
    tree = json.loads(raw)
    if tree.get("error"):
        raise SQLRefused(f"refused: the statement could not be analysed ({tree.get('error_message')})")
    return tree


def _walk(node: Any) -> Iterable[dict]:
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            yield cur
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)


def _check_select_tree(sql: str, root: Path, what: str) -> None:
    tree = _serialize(sql)
    if len(tree.get("statements", [])) != 1:
        raise SQLRefused(f"refused: {what} did not analyse to exactly one statement")
    table_fn_nodes: set[int] = set()
    for node in _walk(tree["statements"][0]):
        ntype = node.get("type")
        if ntype == "TABLE_FUNCTION":
            fn = node.get("function") or {}
            table_fn_nodes.add(id(fn))
            name = str(fn.get("function_name", "")).lower()
            args = fn.get("arguments") or []
            if what.startswith("PRAGMA") and not all(
                (a.get("expression") or {}).get("class") == "CONSTANT" for a in args
            ):
                raise SQLRefused(f"refused: {what} arguments must be plain constants")
            _check_table_function(name, args, root)
        elif node.get("class") == "FUNCTION" and id(node) not in table_fn_nodes:
            name = str(node.get("function_name", "")).lower()
            if name in _REFUSED_SCALAR_FUNCTIONS:
                raise SQLRefused(f"refused: function {name}() {_REFUSED_SCALAR_FUNCTIONS[name]}")
            if name in FILE_READER_FUNCTIONS or name in _REFUSED_TABLE_FUNCTIONS:
                raise SQLRefused(f"refused: table function {name}() used outside a FROM clause")
        elif ntype == "BASE_TABLE":
            tname = str(node.get("table_name", ""))
            if re.search(r"[./\\:~]", tname):
                # FROM 'file.csv' is a replacement scan that reads the file.
                _check_path(tname, root, f"FROM {tname!r}")


def _check_table_function(name: str, args: list, root: Path) -> None:
    if name in SAFE_TABLE_FUNCTIONS:
        return
    if name in FILE_READER_FUNCTIONS:
        positional = [a.get("expression") for a in args if not a.get("name")]
        if not positional:
            raise SQLRefused(f"refused: {name}() without a path")
        for path in _constant_strings(positional[0], name):
            _check_path(path, root, f"{name}({path!r})")
        return
    reason = _REFUSED_TABLE_FUNCTIONS.get(name, "is not on the list of allowed table functions")
    raise SQLRefused(f"refused: table function {name}() {reason}")


def _constant_strings(expr: Any, fname: str) -> list[str]:
    if isinstance(expr, dict):
        if expr.get("class") == "CONSTANT":
            lit = expr.get("literal") or {}
            if lit.get("kind") == "STRING":
                return [lit.get("text", "")]
        if expr.get("class") == "FUNCTION" and expr.get("function_name") == "list_value":
            out: list[str] = []
            for a in expr.get("arguments") or []:
                out.extend(_constant_strings(a.get("expression"), fname))
            return out
    raise SQLRefused(
        f"refused: {fname}() path must be a constant string (or list of strings) so it can be checked "
        "to lie inside the dataset"
    )


def _check_path(path: str, root: Path, what: str) -> None:
    if _URL_RE.match(path) and not re.match(r"^[A-Za-z]:[\\/]", path):
        raise SQLRefused(f"refused: {what} names a URL/remote file system; only files inside the dataset may be read")
    if path.startswith("~"):
        raise SQLRefused(f"refused: {what} reads from the home directory, outside the dataset {root}")
    full = path if os.path.isabs(path) else os.path.join(str(root), path)
    norm = os.path.normpath(full)
    if not _inside(norm, root):
        raise SQLRefused(f"refused: {what} reads outside the dataset directory {root}")
    # Resolve symlinks in the part before any glob character (DuckDB also refuses them; this says why).
    m = _GLOB_CHARS.search(norm)
    fixed = norm if not m else os.path.dirname(norm[: m.start()])
    real = os.path.realpath(fixed)
    if not _inside(real, root):
        raise SQLRefused(f"refused: {what} resolves (through a symlink) to {real}, outside the dataset {root}")


def _inside(path: str, root: Path) -> bool:
    r = str(root)
    return path == r or path.startswith(r.rstrip(os.sep) + os.sep)


# --------------------------------------------------------------------------------------------------
# run + format
# --------------------------------------------------------------------------------------------------


@names_damaged_shard("dataset_dir")
def run_sql(
    dataset_dir: str | os.PathLike,
    query: str,
    fmt: str = "table",
    limit: int | None = None,
    *,
    con: duckdb.DuckDBPyConnection | None = None,
) -> str | pa.Table:
    """Run ONE read-only statement against the dataset's views.

    ``fmt``: ``table`` (aligned plain text, str), ``csv`` (str), ``json`` (a JSON list of objects, str),
    ``arrow`` (``pyarrow.Table``).  ``limit`` caps the rows fetched.  ``con`` may be a connection from
    ``connect_readonly`` to reuse; otherwise one is opened and closed. A connection sees the views of the catalog
    as it was when it was opened: after ``curate splits make`` (or a convert), open a new one to see the new
    split's view.
    Raises ``SQLRefused`` for anything that writes, changes state or reads outside the dataset, and
    ``storage.IncompleteDataset`` for a dataset an interrupted write left; warns (``storage.DatasetBeingWritten``)
    while a writer holds the dataset.
    """
    if not isinstance(query, str):  # bytes were "refused: empty query"
        raise TypeError(f"query {query!r}: one SQL statement as a str")
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if limit is not None and (not isinstance(limit, numbers.Integral) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be a non-negative int, got {limit!r}")
    limit = None if limit is None else int(limit)
    kind = check_sql(query, dataset_dir)
    from .storage import check_readable

    check_readable(dataset_dir)  # the views re-read the shards, which a writer replaces one group at a time
    own = con is None
    if own:
        con = connect_readonly(dataset_dir)
    try:
        table = _execute(con, query, kind, limit)
    except (duckdb.InterruptException, RuntimeError) as exc:
        # DuckDB takes Ctrl-C itself and raises "Query interrupted" (a RuntimeError when it comes through the
        # Arrow fetch): it is the caller's KeyboardInterrupt, not an error of the query
        if isinstance(exc, duckdb.InterruptException) or str(exc).startswith("Query interrupted"):
            raise KeyboardInterrupt from exc
        raise
    except duckdb.Error as exc:
        unavailable = _unavailable_view_error(con, query, exc)
        if isinstance(unavailable, DamagedShard):
            raise unavailable from exc
        first = str(unavailable or exc).splitlines()[0]
        if isinstance(exc, duckdb.PermissionException) or "Permission Error" in first:
            raise SQLRefused(
                f"refused by DuckDB's file-access restriction: {first} (only files inside {_root(dataset_dir)} can be "
                "read; DuckDB checks a relative path against the working directory, so use the catalog's "
                "views or absolute paths inside the dataset)"
            ) from exc
        if unavailable is not None:
            raise unavailable from exc
        if isinstance(exc, duckdb.CatalogException) and "Table with name" in first:  # DuckDB suggested sqlite_schema
            views = sorted({r[0] for r in con.execute(
                "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'").fetchall()})
            raise duckdb.CatalogException(f"{first}; the dataset's views: {', '.join(views)}") from exc
        raise
    finally:
        if own:
            con.close()
    if fmt == "arrow":
        return table
    if fmt == "csv":
        return format_csv(table)
    if fmt == "json":
        return format_json(table)
    return format_table(table)


def _execute(con: duckdb.DuckDBPyConnection, query: str, kind: str, limit: int | None) -> pa.Table:
    # SELECT: a lazy relation, so the LIMIT is pushed into the plan and nothing is materialised first.
    # EXPLAIN / PRAGMA / CALL run at once and return small results.
    rel = con.sql(query)
    if rel is None:
        return pa.table({})
    if limit is not None:
        if kind == "SELECT":
            rel = rel.limit(limit)
        else:
            return rel.to_arrow_table().slice(0, limit)
    return rel.to_arrow_table()


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    if isinstance(v, Decimal):  # HUGEINT sums and DECIMAL columns arrive as Decimal
        return int(v) if v == v.to_integral_value() else float(v)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def _dumps(obj: Any) -> str:
    obj = _jsonable(obj)
    if orjson is not None:
        try:
            return orjson.dumps(obj).decode()
        except TypeError:  # an integer past 64 bits (a HUGEINT sum): the standard library writes it exactly
            pass
    return json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def format_json(table: pa.Table) -> str:
    """A JSON array of row objects (NaN/inf as null, bytes as hex, temporals as ISO strings). Refuses a result with
    two columns of one name (a join's ``*``): an object keeps one of them, and the other's values were lost."""
    names = table.column_names
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        said = ", ".join(map(repr, twice[:5])) + (f" and {len(twice) - 5} more" if len(twice) > 5 else "")
        raise ValueError(f"JSON rows need distinct column names; the result has {said} more than once: name them "
                         "apart (AS), or use the table, csv or arrow format")
    return _dumps(table.to_pylist())


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple, dict)):
        return _dumps(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def format_csv(table: pa.Table) -> str:
    """CSV with a header row; NULL is empty, nested values are JSON, floats round-trip (repr)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.column_names)
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    for row in zip(*cols):
        w.writerow([_cell(v) for v in row])
    return buf.getvalue()


def format_table(table: pa.Table, max_width: int | None = None) -> str:
    """An aligned plain-text table (numbers right-aligned, NULL shown as ``NULL``) plus a row count."""
    names = table.column_names
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    numeric = [
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) for t in table.schema.types
    ]
    cells = [["NULL" if v is None else _cell(v) for v in col] for col in cols]
    if max_width:
        cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in col] for col in cells]
    widths = [max([len(n)] + [len(c) for c in col]) for n, col in zip(names, cells)]
    lines = [" | ".join(n.ljust(w) for n, w in zip(names, widths)).rstrip()]
    lines.append("-+-".join("-" * w for w in widths))
    for r in range(table.num_rows):
        parts = [
            (cells[i][r].rjust(widths[i]) if numeric[i] else cells[i][r].ljust(widths[i])) for i in range(len(names))
        ]
        lines.append(" | ".join(parts).rstrip())
    n = table.num_rows
    lines.append(f"({n} row{'s' if n != 1 else ''})")
    return "\n".join(lines) + "\n"
