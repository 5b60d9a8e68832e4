"""``curate splits``: assign every record to train / valid / test, and report what a split does to the data.

Schemes (all deterministic for a seed; a record's draw is a hash of (seed, record_id), so the assignment does not
depend on row order or on how the data was sharded):

- ``within-task``: TenSet's ``within_task`` scheme: per task, 90% of the records train and 10% test
  (``--test-fraction``); ``valid`` takes ``--valid-fraction`` of the training part.
- ``network``: hold out named networks (TenSet's five test networks by default when a ``networks`` table exists):
  every task of a held-out network is test; tasks a held-out network shares with training networks are removed
  from training (never in both), and the report says how many. The networks table comes from TenSet's
  network_info pickles or, for a MetaSchedule database made by ``curate collect``, from the ``workloads.json``
  beside it (``netinfo.collector_network_rows``).
- ``operator``: hold out operator classes (``--holdout depthwise``).
- ``task``: hold out a seeded random share ``--test-fraction`` of the tasks (workload keys), every record of a
  held-out task on every hardware. A task is its workload key as the log spells it, TenSet's identity of a task:
  logs that spell one layer two ways (roller-k80 writes conv padding as "SAME", roller-mi50 as numbers) give two
  tasks, and holding out one leaves the other in training (the splits audit found 18 of 36 held-out layers so).
  The network split's question (programs of operators and shapes the model never saw) for data without
  network_info: a network split holds out its networks' tasks.
- ``hardware``: train on ``--train-hw``, test on ``--test-hw``; ``--few-shot F`` puts a fraction F of the test
  hardware's records into training (each record drawn on its own, so a task's share varies around F, and a small
  task can get none), the rest stay test.

A split is a Parquet table ``splits/<name>.parquet`` (record_id, hardware, task_id, part) and a DuckDB view
``split_<name>`` in the catalog. Leak-free by construction: a task (network, operator, task splits) or a
record (within-task, hardware splits) is never in both train and test.
"""
from __future__ import annotations

import hashlib
import json
import numbers
import re
from pathlib import Path

import numpy as np
import polars as pl

from .storage import names_damaged_shard

SCHEMES = ["within-task", "network", "operator", "hardware", "task"]
# TenSet's held-out networks (scripts/common.py, make_dataset.py's test set)
TENSET_TEST_NETWORKS = ["resnet_50", "mobilenet_v2", "resnet3d_18", "bert_base", "bert_tiny"]


def _u01(record_ids: pl.Series, seed: int, salt: str = "") -> np.ndarray:
    """A uniform [0, 1) draw per record from blake2b(seed, salt, record_id): order- and shard-independent."""
    pre = f"{seed}:{salt}:".encode()
    out = np.empty(len(record_ids))
    for i, r in enumerate(record_ids.to_list()):
        out[i] = int.from_bytes(hashlib.blake2b(pre + r.encode(), digest_size=8).digest(), "little") / 2**64
    return out


def _within(df: pl.DataFrame, u: np.ndarray, test_fraction: float) -> np.ndarray:
    """Per task: the test_fraction of records with the smallest draws are test (at least one when the task has
    two or more records and the fraction is above 0). Drawn over the task's distinct records: identical log lines
    share a record_id, and ranked one by one, one copy fell in test and the other in train (the splits audit)."""
    keys = ["hardware", "task_id", "record_id"]
    t = df.select(keys).with_columns(pl.Series("u", u))
    d = t.unique(keys, keep="first", maintain_order=True).with_columns(
        pl.col("u").rank("ordinal").over(["hardware", "task_id"]).alias("r"),
        pl.len().over(["hardware", "task_id"]).alias("n"))
    n = d["n"].to_numpy()
    n_test = (n * test_fraction).round()
    if test_fraction > 0:
        n_test = n_test.clip(min=1)
    n_test = np.where(n < 2, 0, n_test)
    d = d.select(*keys, pl.Series("test", d["r"].to_numpy() <= n_test))
    return t.join(d, on=keys, how="left", maintain_order="left")["test"].to_numpy()


def check_split_args(scheme: str, test_fraction: float = 0.1, valid_fraction: float = 0.1,
                     holdout: list[str] | None = None, train_hw: list[str] | None = None,
                     test_hw: list[str] | None = None, few_shot: float = 0.0, seed: int = 0) -> None:
    """Refuse a split's arguments before any record is read (``make_split`` and ``curate run``'s dry run call it):
    an unknown scheme, an option the scheme does not apply, a share outside [0, 1), a hardware both trained and
    tested on (the test part took all its records, and the split had no train part)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose from {', '.join(SCHEMES)}")
    from .storage import check_int

    check_int("seed", seed)
    holdout, train_hw, test_hw = (_names(x, opt) for x, opt in ((holdout, "--holdout"), (train_hw, "--train-hw"),
                                                                  (test_hw, "--test-hw")))
    options = (("--holdout", holdout, ("network", "operator")), ("--train-hw", train_hw, ("hardware",)),
               ("--test-hw", test_hw, ("hardware",)), ("--few-shot", few_shot, ("hardware",)))
    unused = [opt for opt, given, schemes in options if given and scheme not in schemes]
    if unused:  # said and not applied would be a split other than the one asked for
        raise ValueError(f"{', '.join(unused)} do(es) not apply to a {scheme} split")
    for opt, v in (("--test-fraction", test_fraction), ("--valid-fraction", valid_fraction),
                   ("--few-shot", few_shot)):  # 1.5 left no test part, -0.5 was stored as given
        if not isinstance(v, numbers.Real) or isinstance(v, bool) or not 0 <= v < 1:
            raise ValueError(f"{opt} {v!r}: a share of the records, at least 0 and under 1")
    both = sorted(set(train_hw or []) & set(test_hw or []))
    if both:
        raise ValueError(f"hardware {both} is in both --train-hw and --test-hw; a hardware split tests on hardware it "
                         "does not train on (--few-shot trains on a share of the test hardware)")


def _names(x, opt: str) -> list[str] | None:
    """A list of names from a list, a tuple or one name (a string was read one character at a time: holdout=
    "depthwise" asked for classes ['d', 'e', 'h', ...])."""
    if x is None:
        return None
    x = [x] if isinstance(x, str) else list(x)
    bad = [v for v in x if not isinstance(v, str)]
    if bad:
        raise ValueError(f"{opt}: names, got {bad!r}")
    return x


def make_split(records: pl.DataFrame, scheme: str, seed: int = 0, test_fraction: float = 0.1,
               valid_fraction: float = 0.1, holdout: list[str] | None = None, train_hw: list[str] | None = None,
               test_hw: list[str] | None = None, few_shot: float = 0.0, networks: pl.DataFrame | None = None,
               op_classes: pl.DataFrame | None = None) -> tuple[pl.DataFrame, dict]:
    """Return (assignment table, info). ``records`` needs record_id, hardware, task_id, workload_key."""
    check_split_args(scheme, test_fraction, valid_fraction, holdout, train_hw, test_hw, few_shot, seed)
    holdout, train_hw, test_hw = _names(holdout, "--holdout"), _names(train_hw, "--train-hw"), _names(test_hw,
                                                                                                    "--test-hw")
    # NumPy or Fraction numbers pass the checks; as Python's they go into the split's JSON record (np.float64 failed
    # there, after the split's Parquet file was written)
    seed, few_shot = int(seed), float(few_shot)
    test_fraction, valid_fraction = float(test_fraction), float(valid_fraction)
    df = records.select("record_id", "hardware", "task_id", "workload_key")
    u = _u01(df["record_id"], seed, "test")
    info: dict = {"scheme": scheme, "seed": seed}
    part = np.full(df.height, "train", dtype=object)
    if scheme == "within-task":
        part[_within(df, u, test_fraction)] = "test"
        info["test_fraction"] = test_fraction
    elif scheme == "operator":
        if op_classes is None:
            raise ValueError("operator split needs operator classes")
        oc = df.join(op_classes.select("task_id", "op_class"), on="task_id", how="left")["op_class"].to_numpy()
        present = sorted(set(oc[oc != None].tolist()))  # noqa: E711 (an object array's None)
        if not holdout:
            raise ValueError(f"operator split needs --holdout CLASS[,CLASS]; the data has {present}")
        missing = sorted(set(holdout) - set(present))
        if missing:
            raise ValueError(f"no task of class {missing} in the data; it has {present}")
        test = np.isin(oc, holdout)
        part[test] = "test"
        info["holdout"] = holdout
        unknown = (oc == "unknown") & ("unknown" not in holdout)
        # tasks of no known class train: one of them may be of a held-out class (a conv layer whose key names none)
        info["unknown_class_tasks"] = int(df.filter(pl.Series(unknown))["task_id"].n_unique())
        info["unknown_class_records"] = int(unknown.sum())
    elif scheme == "network":
        if networks is None or networks.height == 0:
            raise ValueError("network split needs a networks table: convert TenSet's network_info/*.task.pkl, or "
                             "a MetaSchedule database with the workloads.json `curate collect` writes beside it")
        known = set(networks["network"].drop_nulls())
        missing = sorted(set(holdout or []) - known)
        if missing:
            raise ValueError(f"network(s) {missing} not in the networks table; it has {sorted(known)}")
        nets = holdout or [n for n in TENSET_TEST_NETWORKS if n in known]
        if not nets:
            raise ValueError(f"none of TenSet's test networks ({', '.join(TENSET_TEST_NETWORKS)}) is in the networks "
                             f"table; name the networks to hold out with --holdout (it has {sorted(known)})")
        test_keys = set(networks.filter(pl.col("network").is_in(nets))["workload_key"])
        train_keys = set(networks.filter(~pl.col("network").is_in(nets))["workload_key"])
        shared = test_keys & train_keys
        in_test = df["workload_key"].is_in(list(test_keys)).to_numpy()
        if not in_test.any():
            raise ValueError(f"no record of the held-out network(s) {nets} is in the dataset: the networks table "
                             f"names {len(test_keys)} of their tasks, and no record has one of those workload keys")
        part[in_test] = "test"
        in_none = ~df["workload_key"].is_in(list(test_keys | train_keys)).to_numpy()
        info.update({"holdout": nets, "test_tasks": int(df.filter(pl.Series(in_test))["workload_key"].n_unique()),
                     "test_tasks_in_table": len(test_keys), "shared_tasks_removed_from_train": len(shared),
                     "shared_task_records": int(df["workload_key"].is_in(list(shared)).sum()),
                     # tasks of no network in the table train: the networks table may not list every task of a log
                     "no_network_tasks": int(df.filter(pl.Series(in_none))["workload_key"].n_unique()),
                     "no_network_records": int(in_none.sum())})
    elif scheme == "task":
        if not 0.0 < test_fraction < 1.0:
            raise ValueError("task split needs 0 < --test-fraction < 1 (the share of tasks held out)")
        keys = df["workload_key"].unique().sort()
        held = keys.filter(pl.Series(_u01(keys, seed, "task") < test_fraction))
        if held.len() == 0:
            raise ValueError(f"no task drawn for the test part ({keys.len()} tasks, --test-fraction {test_fraction})")
        part[df["workload_key"].is_in(held.implode()).to_numpy()] = "test"
        info.update({"test_fraction": test_fraction, "test_tasks": held.len(), "tasks": keys.len()})
    elif scheme == "hardware":
        known = set(df["hardware"].unique())
        if not train_hw or not test_hw:
            raise ValueError(f"hardware split needs --train-hw and --test-hw; the data has {sorted(known)}")
        missing = sorted(set(train_hw + test_hw) - known)
        if missing:
            raise ValueError(f"hardware {missing} not in the dataset; it has {sorted(known)}")
        hw = df["hardware"].to_numpy()
        part[:] = "drop"
        part[np.isin(hw, train_hw)] = "train"
        t = np.isin(hw, test_hw)
        part[t] = "test"
        if few_shot > 0:
            fs = _u01(df["record_id"], seed, "few-shot") < few_shot
            part[t & fs] = "train"
        info.update({"train_hw": train_hw, "test_hw": test_hw, "few_shot": few_shot})
    tr = part == "train"
    v = _u01(df["record_id"], seed, "valid") < valid_fraction
    part[tr & v] = "valid"
    info["valid_fraction"] = valid_fraction  # the record says every option the split was made with
    out = df.select("record_id", "hardware", "task_id").with_columns(pl.Series("part", part.astype(str)))
    out = out.filter(pl.col("part") != "drop")
    if scheme in ("network", "operator", "task"):  # leak-freedom by construction: a task is in one side only
        test_tasks = set(out.filter(pl.col("part") == "test")["task_id"])
        out = out.with_columns(pl.when(pl.col("task_id").is_in(list(test_tasks)) & (pl.col("part") != "test"))
                               .then(pl.lit("removed")).otherwise(pl.col("part")).alias("part"))
        info["records_removed_from_train"] = int((out["part"] == "removed").sum())
        out = out.filter(pl.col("part") != "removed")
    info["counts"] = dict(sorted(out.group_by("part").len().iter_rows()))  # records
    # identical log lines share a record_id (a hash of the line) and so a part: one split row for them, or every join
    # of the split to the records on record_id counted them twice over (README query 4 on bennu's MetaSchedule db)
    out = out.unique(subset=["record_id", "part"], keep="first", maintain_order=True)
    return out.sort("record_id"), info


def load_dataset_tables(dataset: Path) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    from .prune import load_records

    recs = load_records(dataset, ["record_id", "hardware", "task_id", "workload_key", "workload_name",
                                  "source_file"])
    nets = None
    nfiles = sorted((Path(dataset) / "networks").glob("*.parquet"))
    if nfiles:
        nets = pl.concat([pl.read_parquet(f) for f in nfiles])
    return recs, nets


def check_split_name(dataset: Path | None, name: str, others: list[str] | None = None) -> None:
    """A split's name names a file under splits/ and the SQL view ``split_<name>`` (lower-cased, other characters
    as _): refuse a name that leaves the folder ('../x' wrote outside the dataset) or whose view another split
    already has ('x-y' beside 'x_y' repointed split_x_y to the new split without a word): one of ``dataset``'s
    splits (None: no dataset yet) or of ``others``."""
    from .catalog import sanitize_name

    if not isinstance(name, str) or not re.fullmatch(SPLIT_NAME, name):
        raise ValueError(f"split name {name!r}: use letters, digits and _ . @ - (it names a file and a SQL view)")
    have = [p.stem for p in sorted((Path(dataset) / "splits").glob("*.parquet"))] if dataset is not None else []
    for other in have + list(others or []):
        if other != name and sanitize_name(other) == sanitize_name(name):
            raise ValueError(f"split name {name!r}: the split {other!r} already has its SQL view "
                             f"split_{sanitize_name(name)}; choose another name")


@names_damaged_shard()
def write_split(dataset: Path, name: str, scheme: str, **kw) -> dict:
    """Make a split of ``dataset`` and store it as ``splits/<name>.parquet`` (+ catalog view ``split_<name>``)."""
    from .features import dataset_operator_classes
    from .storage import dataset_lock, remove_stale_tmp

    dataset = Path(dataset)
    check_split_name(dataset, name)
    check_split_args(scheme, **kw)
    recs, nets = load_dataset_tables(dataset)
    ops = dataset_operator_classes(recs, dataset) if scheme == "operator" else None
    table, info = make_split(recs, scheme, networks=nets, op_classes=ops, **kw)
    with dataset_lock(dataset, what="curate splits make"):
        remove_stale_tmp(dataset)  # an interrupted splits make's temporary files (only a convert removed them)
        # the split's record travels inside its Parquet file (split_info reads it there), so a kill between the two
        # files cannot leave a split whose record says another seed and other counts; the JSON is for people
        store_split(dataset, name, table, info)
        try:
            from .catalog import build_catalog

            build_catalog(dataset)
        except ImportError:
            pass
    info["name"] = name
    return info


SPLIT_INFO_KEY = "tenset_curate.split_info"  # the split's record in its Parquet file's footer


def store_split(root: Path, name: str, table: pl.DataFrame, info: dict) -> list[str]:
    """Write a split as ``root/splits/<name>.parquet`` with its record in the footer (``split_info`` reads it there,
    so a kill between two files cannot leave a split whose record says other counts) and ``<name>.json`` for
    people; returns the two paths relative to ``root``."""
    from .storage import atomic_write_json, write_parquet_atomic

    write_parquet_atomic(Path(root) / "splits" / f"{name}.parquet", table.to_arrow(),
                         metadata={SPLIT_INFO_KEY: json.dumps(info, sort_keys=True)})
    atomic_write_json(Path(root) / "splits" / f"{name}.json", info)
    return [f"splits/{name}.parquet", f"splits/{name}.json"]


def split_info(dataset: Path, name: str) -> dict:
    """What ``write_split`` recorded of a split (scheme, seed, options, counts): from the split's Parquet file (the
    JSON beside it for splits made before the file carried it); {} when it left no record."""
    import pyarrow.parquet as pq

    p = Path(dataset) / "splits" / f"{name}.parquet"
    if p.exists():
        meta = pq.ParquetFile(p).metadata.metadata or {}
        if SPLIT_INFO_KEY.encode() in meta:
            return json.loads(meta[SPLIT_INFO_KEY.encode()])
    j = p.with_suffix(".json")
    return json.loads(j.read_bytes()) if j.exists() else {}


def read_split(dataset: Path, name: str) -> pl.DataFrame:
    """The split's rows (record_id, hardware, task_id, part). FileNotFoundError names the dataset when it is not
    one, else the split."""
    return pl.read_parquet(split_file(dataset, name))


def split_file(dataset: Path, name: str) -> Path:
    """The split's file, checked (``check_split_file``). FileNotFoundError names the dataset when it is not one,
    else the split."""
    if not isinstance(name, str) or not re.fullmatch(SPLIT_NAME, name):  # '../splits/wt' read (and analyze wrote)
        raise ValueError(f"split name {name!r}: no split is named so (a split's name has letters, digits and "
                         "_ . @ -)")  # outside the folders of the dataset and --out
    p = Path(dataset) / "splits" / f"{name}.parquet"
    if not p.exists() and not (Path(dataset) / "records").is_dir():
        raise FileNotFoundError(f"{dataset}: not a dataset (no records/; make one with curate convert)")
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such split (make it with `curate splits make`)")
    check_split_file(p)
    return p


SPLIT_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.@-]*"  # a split's name: it names a file and a SQL view
SPLIT_KEYS = ["record_id", "hardware", "task_id"]  # a split row names its record by all three, as a record's row
SPLIT_COLUMNS = (*SPLIT_KEYS, "part")


def check_split_file(p: Path) -> None:
    """Refuse a split file that is not a readable Parquet file with the split's columns, naming it (a truncated file
    or one without ``part`` ended in a Polars traceback that named neither)."""
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(p).names
    except Exception as e:  # noqa: BLE001 (pyarrow raises several kinds for a damaged file)
        raise ValueError(f"{p}: not a readable split file ({type(e).__name__}: {e}); make it again with "
                         "`curate splits make`") from None
    missing = [c for c in SPLIT_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"{p}: not a split file: it has no column {', '.join(missing)}; make it again with "
                         "`curate splits make`")


@names_damaged_shard()
def analyze(dataset: Path, name: str, out_dir: Path) -> Path:
    """Write ``<out_dir>/<name>.md`` (+ PNGs): sizes, leakage, label distribution, feature drift and, for
    hardware splits, per-task Spearman correlation of the same programs measured on both machines."""
    from .features import FLAT_NAMES, featurize
    from .labels import with_labels
    from .prune import load_records
    from .storage import atomic_savefig, atomic_write_text, new_figure

    dataset, out_dir = Path(dataset), Path(out_dir)
    split = read_split(dataset, name)
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir}: a file; the report goes into a folder")
    from .storage import check_out_kind

    check_out_kind(out_dir, "report")  # its Markdown and PNGs went into a dataset's or a model's folder
    out_dir.mkdir(parents=True, exist_ok=True)
    info = split_info(dataset, name)
    recs = with_labels(load_records(dataset)).join(split.select("record_id", "part"), on="record_id", how="inner")
    from .prune import schedule_keys

    # a schedule as pruning's redundancy knows it (every field of every step, bookkeeping left out), whatever its task
    # and hardware (the Spearman section matches one program across two machines)
    recs = recs.with_columns(pl.Series("prog", schedule_keys(recs["steps"], np.zeros(recs.height, np.int64))))
    lines = [f"# Split `{name}` ({info.get('scheme', '?')})", "", "```", str({k: v for k, v in info.items()
                                                                             if k != "counts"}), "```", ""]
    lines += ["## Records and tasks per part", "", "| part | records | tasks | valid records |", "|---|---:|---:|---:|"]
    for r in recs.group_by("part").agg(pl.len(), pl.col("task_id").n_unique(), pl.col("is_valid").sum()).sort(
            "part").iter_rows():
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")
    # what the model sees while it trains (train and valid: valid picks the epoch) against the test part; schedules
    # counted once each (a join of rows counted a schedule measured twice as two)
    tr, te = recs.filter(pl.col("part").is_in(["train", "valid"])), recs.filter(pl.col("part") == "test")
    shared_tasks = set(tr["task_id"]) & set(te["task_id"])
    shared_progs = (tr.select("task_id", "prog").unique().join(te.select("task_id", "prog").unique(),
                                                               on=["task_id", "prog"]).height)
    lines += ["", "## Leakage", "", f"- tasks in both train/valid and test: {len(shared_tasks)}"
              + (" (expected for within-task and few-shot splits: records, not tasks, are split)"
                 if info.get("scheme") in ("within-task", "hardware") else ""),
              f"- identical schedules (same task, same steps) in both train/valid and test: {shared_progs}", ""]
    lines += ["## Label distribution (valid records)", "", "| part | mean | p10 | p50 | p90 |", "|---|---:|---:|---:|---:|"]
    fig, ax = new_figure(figsize=(6, 3.5))
    for p, g in recs.filter(pl.col("is_valid")).group_by("part", maintain_order=True):
        lab = g["label"]
        lines.append(f"| {p[0]} | {lab.mean():.4f} | {lab.quantile(0.1):.4f} | {lab.quantile(0.5):.4f} | "
                     f"{lab.quantile(0.9):.4f} |")
        ax.hist(lab.to_numpy(), bins=40, alpha=0.5, density=True, label=p[0])
    ax.set_xlabel("label (normalised throughput)")
    ax.legend()
    fig.tight_layout()
    atomic_savefig(fig, out_dir / f"{name}_labels.png", dpi=90)
    lines += ["", f"![labels]({name}_labels.png)", ""]
    # feature drift: standardised mean difference of the flat features
    ftr = featurize(tr.sample(min(tr.height, 20000), seed=0))["flat"] if tr.height else None
    fte = featurize(te.sample(min(te.height, 20000), seed=0))["flat"] if te.height else None
    if ftr is not None and fte is not None:
        sd = np.sqrt((ftr.var(0) + fte.var(0)) / 2)
        smd = np.abs(ftr.mean(0) - fte.mean(0)) / np.where(sd > 0, sd, 1)
        order = np.argsort(-smd)[:10]
        lines += ["## Feature drift (standardised mean difference, train vs test, top 10)", "",
                  "| feature | SMD |", "|---|---:|"]
        lines += [f"| {FLAT_NAMES[i]} | {smd[i]:.3f} |" for i in order]
        lines += ["", f"- mean SMD over {len(smd)} features: {smd.mean():.3f}", ""]
    if info.get("scheme") == "hardware":
        lines += hardware_transfer_section(recs, info, out_dir, name)
    p = out_dir / f"{name}.md"
    atomic_write_text(p, "\n".join(lines) + "\n")
    return p


def hardware_transfer_section(recs: pl.DataFrame, info: dict, out_dir: Path, name: str) -> list[str]:
    """Per task, Spearman correlation between the costs of the same programs on the train and test hardware.

    Programs are matched by (workload_key, steps); when two runs share few programs, the report says so."""
    from .storage import atomic_savefig, new_figure

    a = recs.filter(pl.col("hardware").is_in(info["train_hw"]) & pl.col("is_valid"))
    b = recs.filter(pl.col("hardware").is_in(info["test_hw"]) & pl.col("is_valid"))
    j = a.select("workload_key", "prog", pl.col("mean_cost").alias("ca")).group_by(["workload_key", "prog"]).agg(
        pl.col("ca").mean()).join(
        b.select("workload_key", "prog", pl.col("mean_cost").alias("cb")).group_by(["workload_key", "prog"]).agg(
            pl.col("cb").mean()), on=["workload_key", "prog"])
    per = j.group_by("workload_key").agg(
        pl.len().alias("n"),
        pl.corr(pl.col("ca").rank(), pl.col("cb").rank()).alias("spearman")).filter(pl.col("n") >= 5).sort(
        "workload_key")
    lines = ["## Ranking transfer between hardware (same programs on both machines)", "",
             f"- tasks: {a['workload_key'].n_unique()} on the training hardware, {b['workload_key'].n_unique()} on "
             f"the test hardware, {a.join(b, on='workload_key', how='semi')['workload_key'].n_unique()} on both; "
             f"programs measured on both: {j.height}; tasks with >= 5 shared programs: {per.height}"]
    if per.height:
        s = per["spearman"].drop_nans().drop_nulls()
        lines += [f"- per-task Spearman: mean {s.mean():.3f}, median {s.median():.3f}, min {s.min():.3f}, "
                  f"max {s.max():.3f}", "", "| workload | shared programs | Spearman |", "|---|---:|---:|"]
        lines += [f"| `{w[:70]}` | {n} | {r:.3f} |" for w, n, r in per.iter_rows()]
        fig, ax = new_figure(figsize=(6, 3.5))
        ax.hist(s.to_numpy(), bins=20)
        ax.set_xlabel("per-task Spearman correlation")
        fig.tight_layout()
        atomic_savefig(fig, out_dir / f"{name}_spearman.png", dpi=90)
        lines += ["", f"![spearman]({name}_spearman.png)"]
    else:
        lines.append("- no task has 5 or more programs measured on both machines: rankings cannot be compared "
                     "program by program (the logs come from independent tuning runs)")
    return lines + [""]
