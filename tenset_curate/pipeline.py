"""Declarative pipelines: ``curate run pipelines/NAME.toml``.

A pipeline file names a work directory and, in order, the steps it runs, each a TOML table of parameters::

    [pipeline]
    name = "quickstart"
    workdir = "runs/quickstart"          # relative to the current directory; no '..', no absolute paths
    steps = ["convert", "splits", "prune", "train", "evaluate", "report"]

    [convert]
    inputs = ["data/sample-cpu"]         # input paths may be anywhere (they are read, never written);
    ...                                  # "@collect" is the collect step's output folder

A table or key that no step reads (``TABLE_KEYS``; collect and verify take their function's keywords) is refused
before anything runs, in the file or in ``--set``: a misspelt key would otherwise leave its default in place.

Each step's output lives in ``workdir/<step>/`` and is keyed by the hash of its parameters, the keys of the steps
before it and the code version (a hash of the package's source). A step whose key matches ``workdir/state.json``
and whose outputs exist is skipped and says so; a killed run resumes at the first unfinished step, and ``convert``
resumes inside the step from its finished shards. Step outputs are written atomically and deterministically, so an
interrupted-then-resumed run ends byte-identical to an uninterrupted one. Every run writes ``summary.json`` and
``summary.md`` (time, rows in/out and peak memory per step).

Executors (``executor="local" | "ray"``, ``workers``, ``address``; see executors.py) decide where ``convert``'s
per-input work and ``prune``'s per-unit work (units of whole tasks, see ``prune.plan_units``) run; the executor is
not part of any step key because the outputs do not depend on it (a run on Ray after a local one skips every step):
convert names shards by content and prune draws a random stream per task and allocates its budget from per-task
counts taken in (hardware, task) order.

``collect`` (MetaSchedule tuning, ``tenset_curate.collect.collect``) and ``verify`` (``tenset_curate.verifier.verify``)
need TVM. Their keys use the code version of the modules they run (not the whole package), so editing, say, the
readers does not re-run hours of tuning. Both resume inside the step (collect tops up workloads, verify reuses
finished runs) while their key is unchanged; a changed key starts them afresh.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import numbers
import resource
import shutil
import sys
import time
import tomllib
from pathlib import Path

import orjson

from .executors import ExecutorError, WorkerLost, check_executor, resolve_executor
from .model import DEFAULT_EPOCHS
from .storage import (OutputError, atomic_write_bytes, atomic_write_json, atomic_write_text, check_int, dataset_lock,
                      file_in_the_way, remove_stale_tmp, safe_join)

STEPS = ["collect", "convert", "splits", "prune", "train", "evaluate", "verify", "report"]
# steps whose key uses the code version of these modules only (expensive TVM steps: see the module docstring)
STEP_CODE = {"collect": ["collect.py", "workloads.py"],
             "verify": ["verifier.py", "collect.py", "workloads.py", "model.py", "features.py", "readers.py",
                        "fast_steps.py", "schema.py"]}


class PipelineError(ValueError):
    pass


def code_version(files: list[str] | None = None) -> str:
    """A hash of the package's source (or of the named modules only)."""
    h = hashlib.sha256()
    pkg = Path(__file__).parent
    for p in sorted(pkg.glob("*.py")) if files is None else [pkg / f for f in sorted(files)]:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _coerce(v: str):
    try:
        return tomllib.loads(f"x = {v}")["x"]
    except tomllib.TOMLDecodeError:
        return v


# The keys each table may hold (collect's and verify's: their function's keywords, checked when they run). A key
# that is not here would be read by nothing: a misspelt ``--set prune.mehtod=...`` ran with the default method.
TABLE_KEYS = {
    "pipeline": {"name", "workdir", "steps"},
    "convert": {"inputs", "hardware", "workers"},
    "splits": {"split"},
    "prune": {"ratio", "method", "seed", "min_keep", "workers", "split"},
    "train": {"split", "seed", "max_per_task", "data", "memory_check", "models", "epochs", "device",
              "attention", "gbdt", "mlp"},  # the last three: a model's own hyperparameters
    "evaluate": {"split"},
    "report": {"title", "command", "out"},
}


# keys that hold lists: a string given for one (--set convert.inputs=logs) is a list of that one item; it was read
# one character at a time ("/" became the filesystem root, train.data=pruned trained models "gbdt-p", "gbdt-r", ...)
LIST_KEYS = {"pipeline": ("steps",), "convert": ("inputs",), "train": ("data", "models"), "verify": ("models",)}
SPLIT_LIST_KEYS = ("holdout", "train_hw", "test_hw")
TRAIN_DATA = ("full", "pruned")


def _as_lists(cfg: dict) -> None:
    for table, keys in LIST_KEYS.items():
        for k in keys:
            if isinstance(cfg.get(table, {}).get(k), str):
                cfg[table][k] = [cfg[table][k]]
    splits = cfg.get("splits", {}).get("split", [])
    for sp in splits if isinstance(splits, list) else []:  # another type: refused by _check_types
        for k in SPLIT_LIST_KEYS:
            if isinstance(sp, dict) and isinstance(sp.get(k), str):
                sp[k] = [sp[k]]


def _check_values(cfg: dict, path: Path) -> None:
    """Values the steps would only trip over later, after the steps before them ran (and which a dry run passed):
    a split's scheme, options and name; prune's method and ratio; train.data other than full / pruned (any other
    value trained on the full data under its name), pruned data without the prune step (it read another run's
    prune/); a model kind, device or epoch count the trainer refuses, and a model's hyperparameter table with names
    the model does not have. Each is checked by the function the step calls, so the two cannot disagree."""
    from . import model as M
    from .prune import check_prune_args
    from .splits import check_split_args, check_split_name
    from .training import check_device

    steps = cfg["pipeline"]["steps"]
    t = cfg.get("train", {})

    def refuse(where: str, fn, *a, **kw):
        try:
            fn(*a, **kw)
        except (ValueError, TypeError) as e:
            raise PipelineError(f"{path}: {where}: {e}") from None

    made = None  # the splits the splits step makes, where it runs
    if "splits" in steps:
        if cfg.get("splits", {}).get("split") == []:  # made no split, and prune failed on the default's absence
            raise PipelineError(f"{path}: [splits] split is empty; give at least one, or leave it out for the "
                                "default within_task split")
        names = []
        for sp in cfg.get("splits", {}).get("split", []):
            if isinstance(sp, dict) and "name" in sp and "scheme" in sp:
                if sp["name"] in names:  # the second replaced the first without a word
                    raise PipelineError(f"{path}: [splits] split {sp['name']!r} is given twice")
                refuse(f"[splits] split {sp['name']!r}", check_split_name, None, sp["name"], names)
                refuse(f"[splits] split {sp['name']!r}", check_split_args,
                       **{k: v for k, v in sp.items() if k != "name"})
                names.append(sp["name"])
        made = names if cfg.get("splits", {}).get("split") else ["within_task"]  # the splits step's default
    if "prune" in steps:
        pr = cfg.get("prune", {})
        refuse("[prune]", check_prune_args, pr.get("ratio", 0.45), pr.get("method", "hybrid"), pr.get("seed", 0),
               pr.get("min_keep", 8), pr.get("workers", 1))
        if "split" in pr and made is not None and pr["split"] not in made:
            raise PipelineError(f"{path}: [prune] split {pr['split']!r}: the splits step makes {made}")
        if ("split" in pr and "train" in steps and "pruned" in t.get("data", [])
                and t.get("split", "within_task") != pr["split"]):
            raise PipelineError(f"{path}: [prune] split {pr['split']!r} but [train] split "
                                f"{t.get('split', 'within_task')!r}: the pruned model would train on records the "
                                "prune did not choose among (give both the same split)")
    for step, default in (("train", "within_task"), ("evaluate", "within_task")):
        sp = cfg.get(step, {}).get("split", default)
        if step in steps and made is not None and sp not in made:  # a typo failed after the training
            raise PipelineError(f"{path}: [{step}] split {sp!r}: the splits step makes {made}")
    for step, key in (("train", "models"), ("train", "data"), ("verify", "models")):
        if step in steps and cfg.get(step, {}).get(key) == []:  # trained or tuned nothing and said "ran"
            raise PipelineError(f"{path}: [{step}] {key} is empty; leave it out for the default, or name some")
    for step, key, least in (("train", "seed", 0), ("train", "max_per_task", 2), ("train", "epochs", 1),
                             ("convert", "workers", 1)):  # as train_model and convert check them, after steps before
        v = cfg.get(step, {}).get(key)
        try:
            if step in steps and v is not None:
                check_int(key, v, least)
        except ValueError as e:  # "[train] seed -1: an integer, at least 0"
            raise PipelineError(f"{path}: [{step}] {e}") from None
    if "train" in steps:
        kinds = t.get("models", ["gbdt", "attention"])
        bad = [k for k in kinds if k not in M._KINDS]
        if bad:
            raise PipelineError(f"{path}: [train] models {bad}: each is one of {sorted(M._KINDS)}")
        for kind in kinds:
            refuse("[train]", check_device, kind, str(t.get("device", "cpu")))
        bad = [d for d in t.get("data", ["full"]) if d not in TRAIN_DATA]
        if bad:
            raise PipelineError(f"{path}: [train] data {bad}: each is full or pruned")
        if "pruned" in t.get("data", []) and "prune" not in steps:
            raise PipelineError(f"{path}: [train] data 'pruned' needs the prune step in [pipeline] steps")
        for kind, cls in M._KINDS.items():
            hp = t.get(kind, {})
            if not isinstance(hp, dict):
                raise PipelineError(f"{path}: [train.{kind}] must be a table of hyperparameters, got {hp!r}")
            bad = sorted(set(hp) - set(cls._defaults))
            if bad:
                raise PipelineError(f"{path}: unknown hyperparameter(s) {bad} in [train.{kind}]; {kind} takes "
                                    f"{sorted(cls._defaults)}")
            for k, v in hp.items():  # learning_rate = "fast" passed the dry run and failed in LightGBM mid-run
                d = cls._defaults[k]
                kind_of = (bool if isinstance(d, bool) else numbers.Real if isinstance(d, numbers.Real) else
                           str if isinstance(d, str) else None)
                if kind_of is not None and (not isinstance(v, kind_of) or (kind_of is numbers.Real and
                                                                          isinstance(v, bool))):
                    what = {bool: "true or false", numbers.Real: "a number", str: "a string"}[kind_of]
                    raise PipelineError(f"{path}: [train.{kind}] {k} must be {what} (default {d!r}), got {v!r}")
            refuse(f"[train.{kind}]", cls, progress=False, **hp)  # values under their least (HPARAM_MINIMUMS)


def _tvm_step_keys() -> dict:
    """The keys of [collect] and [verify]: their function's keywords (neither module imports TVM until it tunes),
    less the ones the step sets itself (a table's ``out_dir`` or ``model_dirs`` failed as a TypeError traceback),
    plus verify's ``models`` (names under train/). A misspelt key was found only when the step ran, after the
    steps before it."""
    import inspect

    from .collect import collect
    from .verifier import verify

    return {"collect": set(inspect.signature(collect).parameters) - {"out_dir", "f_build"},
            "verify": set(inspect.signature(verify).parameters) - {"model_dirs"} | {"models"}}


def check_tables(cfg: dict, path: Path) -> None:
    """Refuse tables and keys no step reads, naming them and what is allowed, before anything runs."""
    import inspect

    from .splits import make_split

    unknown = sorted(set(cfg) - set(TABLE_KEYS) - set(STEPS))
    if unknown:
        raise PipelineError(f"{path}: unknown table(s) {unknown}; tables are {['pipeline', *STEPS]}")
    keys = {**TABLE_KEYS, **(_tvm_step_keys() if "collect" in cfg or "verify" in cfg else {})}
    for table, allowed in keys.items():
        t = cfg.get(table, {})
        if not isinstance(t, dict):
            raise PipelineError(f"{path}: [{table}] must be a table, got {t!r}")
        bad = sorted(set(t) - allowed)
        if bad:
            raise PipelineError(f"{path}: unknown key(s) {bad} in [{table}]; it takes {sorted(allowed)}")
    split_keys = set(inspect.signature(make_split).parameters) - {"records", "scheme", "networks", "op_classes"}
    for sp in cfg.get("splits", {}).get("split", []):
        if not isinstance(sp, dict) or "name" not in sp or "scheme" not in sp:
            raise PipelineError(f"{path}: each [splits] split needs a name and a scheme, got {sp!r}")
        bad = sorted(set(sp) - split_keys - {"name", "scheme"})
        if bad:
            raise PipelineError(f"{path}: unknown key(s) {bad} in split {sp['name']!r}; a split takes name, scheme "
                                f"and {sorted(split_keys)}")
    _check_values(cfg, path)


# the type each key must have where the steps read it as that type (a CLI fuzz: an int for steps or split, a list for
# workdir or report.out, a string for a table ended in TypeError / AttributeError tracebacks, and memory_check =
# 'no' read as true). "strs": a list of strings; "tables": a list of tables. An input "@name" must name a step.
KEY_TYPES = {
    ("pipeline", "name"): str, ("pipeline", "workdir"): str, ("pipeline", "steps"): "strs",
    ("convert", "inputs"): "strs", ("convert", "hardware"): str, ("splits", "split"): "tables",
    ("prune", "split"): str, ("prune", "method"): str, ("train", "split"): str, ("train", "data"): "strs",
    ("train", "models"): "strs", ("train", "device"): str, ("train", "memory_check"): bool,
    ("evaluate", "split"): str, ("report", "title"): str, ("report", "command"): str, ("report", "out"): str,
}


def _check_tables_are_tables(cfg: dict, path: Path) -> None:
    for table, t in cfg.items():
        if not isinstance(t, dict):
            raise PipelineError(f"{path}: [{table}] must be a table, got {t!r}")


def _check_types(cfg: dict, path: Path) -> None:
    """The keys of ``KEY_TYPES`` have their type, before anything reads them (the tables are tables:
    ``load_pipeline`` checks that first, and ``--set`` only adds tables)."""
    for (table, key), want in KEY_TYPES.items():
        if key not in cfg.get(table, {}):
            continue
        v = cfg[table][key]
        ok = (isinstance(v, list) and all(isinstance(x, str) for x in v) if want == "strs" else
              isinstance(v, list) and all(isinstance(x, dict) for x in v) if want == "tables" else
              isinstance(v, want))
        if not ok:
            what = {"strs": "a list of strings", "tables": "a list of tables ({ name = ..., scheme = ... })"}.get(
                want, {str: "a string", bool: "true or false"}.get(want))
            raise PipelineError(f"{path}: [{table}] {key} must be {what}, got {v!r}")
    bad = [p for p in cfg.get("convert", {}).get("inputs", []) if p.startswith("@") and p[1:] not in STEPS]
    if bad:  # it was a ValueError traceback, raised where the inputs resolve
        raise PipelineError(f"{path}: [convert] input {bad[0]!r}: '@' names a step's output ({', '.join(STEPS)})")


def load_pipeline(path: Path, overrides: list[str] | None = None) -> dict:
    path = Path(path)
    try:
        cfg = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PipelineError(f"{path}: no such pipeline file") from None
    except IsADirectoryError:
        raise PipelineError(f"{path}: a folder, not a pipeline file") from None
    except UnicodeDecodeError as e:
        raise PipelineError(f"{path}: not a TOML pipeline file (not UTF-8 text: {e.reason} at byte {e.start})") \
            from None
    except OSError as e:
        raise PipelineError(f"{path}: cannot be read ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise PipelineError(f"{path}: invalid TOML: {e}") from None
    _check_tables_are_tables(cfg, path)
    for o in overrides or []:
        key, sep, val = o.partition("=")
        if not sep or "." not in key or "" in key.split("."):  # '.x=1' was "unknown table(s) ['']" of the file
            raise PipelineError(f"--set {o!r}: expected step.param=value")
        step, *inner, param = key.split(".")  # train.gbdt.n_estimators=5: a key of the table train.gbdt
        table = cfg.setdefault(step, {})
        if not isinstance(table, dict):
            raise PipelineError(f"--set {o!r}: {step} is not a table")
        for k in inner:
            table = table.setdefault(k, {})
            if not isinstance(table, dict):
                raise PipelineError(f"--set {o!r}: {k} is not a table")
        table[param] = _coerce(val)
    _as_lists(cfg)
    _check_types(cfg, path)
    p = cfg.get("pipeline", {})
    if "workdir" not in p:
        raise PipelineError(f"{path}: [pipeline] needs workdir")
    if "steps" not in p:  # every step ran, collect's and verify's hours of tuning included
        raise PipelineError(f"{path}: [pipeline] needs steps, the steps to run (of {STEPS}, in that order)")
    steps = p["steps"]
    if not steps:  # ran nothing and wrote a summary of it
        raise PipelineError(f"{path}: [pipeline] steps is empty: nothing to run")
    bad = [s for s in steps if s not in STEPS]
    if bad:
        raise PipelineError(f"{path}: unknown step(s) {bad}; steps are {STEPS}")
    twice = sorted({s for s in steps if steps.count(s) > 1})
    if twice:  # the second overwrote the first's state: both ran on every run
        raise PipelineError(f"{path}: step(s) {twice} listed more than once; each step runs once")
    order = [s for s in STEPS if s in steps]
    if steps != order:  # train before prune trained the "pruned" model on another run's prune/, without a word
        raise PipelineError(f"{path}: steps {steps}: list them in the pipeline's order ({STEPS}), where each runs "
                            f"after the ones it may read: {order}")
    cfg["pipeline"]["steps"] = steps
    check_tables(cfg, path)
    return cfg


def _peak_rss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(r, c) / 1024, 1)


def run(pipeline: Path, overrides: list[str] | None = None, executor: str = "local", workers: int = 1,
        from_step: str | None = None, dry_run: bool = False, log=None, cwd: Path | None = None,
        address: str | None = None) -> dict:
    """Run (or resume) a pipeline. Returns the run summary.

    ``executor``: ``local`` (processes) or ``ray``; ``workers``: processes, or Ray CPUs for a local Ray instance;
    ``address``: a Ray cluster to connect to (``"auto"``), implies ``executor="ray"``."""
    log = log or (lambda m: None)
    try:
        executor = resolve_executor(executor, address)
        check_executor(executor)
        check_int("workers", workers, 1)  # 0 passed the dry run and failed at the first step that forks
    except (ExecutorError, ValueError) as e:
        raise PipelineError(str(e)) from None
    if isinstance(overrides, str):  # one override: it was read one character at a time ("--set 'p'")
        overrides = [overrides]
    cfg = load_pipeline(pipeline, overrides)
    base = Path(cwd or Path.cwd())
    try:
        workdir = safe_join(base, cfg["pipeline"]["workdir"])
    except OutputError as e:
        raise PipelineError(str(e)) from None
    steps = cfg["pipeline"]["steps"]
    if from_step is not None and from_step not in steps:  # "" ran no step and said nothing
        raise PipelineError(f"--from {from_step!r}: not a step of this pipeline ({steps})")
    _check_paths(cfg, steps, base, workdir)
    cv = code_version()
    results = []
    # a dry run takes no lock and removes nothing: it made the work folder and its lock, and removed temporaries
    with contextlib.nullcontext() if dry_run else dataset_lock(workdir, what=f"curate run {pipeline}"):
        if not dry_run:
            remove_stale_tmp(workdir)  # temporaries a killed run left, also inside steps that are now skipped
            for dest in _extra_outputs(cfg, steps, base):  # and beside the files it writes outside the workdir
                for t in dest.parent.glob(f"{dest.name}.tmp-*"):
                    t.unlink(missing_ok=True)
        state_p = workdir / "state.json"
        state = orjson.loads(state_p.read_bytes()) if state_p.exists() else {}
        prev_key = ""
        redo = False
        for step in steps:
            params = copy.deepcopy(cfg.get(step, {}))
            if step == "convert":  # the inputs' state is part of the key (convert itself is incremental)
                params["_inputs"] = _fingerprint(_resolve_inputs(params.get("inputs", []), base, workdir),
                                                 _converted_files(workdir / "convert"))
            scv = code_version(STEP_CODE[step]) if step in STEP_CODE else cv
            keyed = {k: v for k, v in params.items() if k != "workers"}  # as --workers: the outputs do not depend on it
            key = hashlib.sha256(orjson.dumps([step, keyed, prev_key, scv], option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
            prev_key = key
            out = workdir / step
            redo = redo or (from_step == step)
            done = (state.get(step, {}).get("key") == key and out.exists() and not redo
                    and all(f.exists() for f in _extra_outputs(cfg, [step], base))  # a deleted report is rewritten
                    # and a step whose files were deleted runs again (evaluate was skipped without its metrics.json,
                    # and report failed on it)
                    and all((out / f).exists() for f in state[step].get("files", [])))
            if done:
                log(f"{step}: unchanged (key {key}), skipped")
                results.append({"step": step, "status": "skipped", "key": key, "seconds": 0.0,
                                "summary": state[step].get("summary", "")})
                continue
            redo = True  # everything after a re-run step runs again too (a dry run says so)
            if dry_run:
                results.append({"step": step, "status": "would run", "key": key})
                continue
            log(f"{step}: running (key {key})")
            if state.pop(step, None) is not None:  # a step that fails must not be "done" under its old key: a rerun of
                atomic_write_json(state_p, state)  # the old settings skipped it, over what the failed run left
            t0 = time.perf_counter()
            try:
                info = STEP_FUNCS[step](params, workdir, base, workers, log,
                                        {"executor": executor, "address": address, "key": key,
                                         "fresh": from_step == step, "steps": steps, "pipeline": str(pipeline)})
            except (ValueError, FileNotFoundError, KeyError, OutputError, MemoryError, WorkerLost) as e:
                raise PipelineError(f"step {step} failed: {e}") from e
            secs = round(time.perf_counter() - t0, 2)
            state[step] = {"key": key, "summary": info.get("summary", ""), "files": _step_files(out)}
            atomic_write_json(state_p, state)
            results.append({"step": step, "status": "ran", "key": key, "seconds": secs, "peak_rss_mb": _peak_rss_mb(),
                            **{k: v for k, v in info.items() if k in ("rows_in", "rows_out", "summary")}})
        summary = {"pipeline": str(pipeline), "workdir": str(workdir), "code_version": cv, "executor": executor,
                   "workers": workers, "steps": results}
        if not dry_run:
            atomic_write_json(workdir / "summary.json", summary)
            md = ["| step | status | seconds | rows in | rows out | peak RSS MB | summary |",
                  "|---|---|---:|---:|---:|---:|---|"]
            md += [f"| {r['step']} | {r['status']} | {r.get('seconds', 0)} | {r.get('rows_in', '')} | "
                   f"{r.get('rows_out', '')} | {r.get('peak_rss_mb', '')} | {r.get('summary', '')} |" for r in results]
            atomic_write_text(workdir / "summary.md", f"# Run of {pipeline}\n\n" + "\n".join(md) + "\n")
            summary["summary_path"] = str(workdir / "summary.md")
    return summary


def _step_files(out: Path) -> list[str]:
    """The files a step left in its folder (relative paths; not temporaries or the lock): the next run skips the
    step only while they are all there."""
    if not out.is_dir():
        return []
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                  if p.is_file() and ".tmp-" not in p.name and p.name != ".lock")


def _check_paths(cfg: dict, steps: list[str], base: Path, workdir: Path) -> None:
    """Before anything runs (a dry run too): the work folder is a folder of its own (the current folder itself, '.'
    or '', had its *.tmp-* files removed as a killed run's temporaries), not a file; convert's inputs exist and do
    not hold the work folder (they read its own state and models as logs); the report's ``out`` is no folder and
    verify's no file (found when they were written, after the steps before)."""
    if workdir.resolve() == base.resolve():
        raise PipelineError(f"[pipeline] workdir {cfg['pipeline']['workdir']!r}: the current folder; give the run a "
                            "folder of its own (runs/NAME)")
    if workdir.exists() and not workdir.is_dir():
        raise PipelineError(f"[pipeline] workdir {workdir}: a file; the work folder is a folder")
    if "convert" in steps:
        for given, p in zip(cfg.get("convert", {}).get("inputs", []),
                            _resolve_inputs(cfg.get("convert", {}).get("inputs", []), base, workdir)):
            if given.startswith("@") or workdir.resolve() in p.resolve().parents:  # a step's output: made by the run
                continue
            if not p.exists():
                raise PipelineError(f"[convert] input {given!r}: no such file or folder ({p})")
            if p.resolve() == workdir.resolve() or p.resolve() in workdir.resolve().parents:
                raise PipelineError(f"[convert] input {given!r} holds the work folder {workdir}: name the logs' "
                                    "folder itself")
    if "verify" in steps and "runs_dir" in cfg.get("verify", {}):  # as out: it wrote anywhere
        try:
            safe_join(base, cfg["verify"]["runs_dir"])
        except OutputError as e:
            raise PipelineError(f"[verify] runs_dir: {e}") from None
    for dest in _extra_outputs(cfg, steps, base):
        if dest.is_dir() or file_in_the_way(dest.parent):
            raise PipelineError(f"{dest}: in the way of the file the run writes there (a folder, or a file where a "
                                "folder goes)")


def _extra_outputs(cfg: dict, steps: list[str], base: Path) -> list[Path]:
    """Files a pipeline writes outside its work directory (the report's ``out``; verify's copies)."""
    try:
        outs = []
        if "report" in steps and cfg.get("report", {}).get("out"):
            outs.append(safe_join(base, cfg["report"]["out"]))
        if "verify" in steps and cfg.get("verify", {}).get("out"):
            d = safe_join(base, cfg["verify"]["out"])
            outs += [d / n for n in ("verify.md", "verify.json", "verify_curves.png", "verify_curves_time.png")]
    except OutputError as e:
        raise PipelineError(str(e)) from None
    return outs


def _converted_files(dataset: Path) -> dict:
    """(size, mtime_ns, sha256) of each file the dataset's manifest records, by resolved path; {} without one."""
    from .convert import load_manifest

    try:
        m = load_manifest(dataset)
    except (OSError, ValueError, OutputError):  # unreadable or not a manifest: every file is hashed
        return {}
    return {f["path"]: (f["size"], f["mtime_ns"], f["sha256"]) for e in m["inputs"].values()
            for f in e.get("files", []) if "sha256" in f}


def _fingerprint(paths: list[Path], known: dict | None = None) -> str:
    """The convert step's inputs as a hash of each file's path, size and sha256. ``known`` (resolved path -> size,
    mtime_ns, sha256: what convert recorded) spares hashing a file whose size and mtime are as recorded; a touched or
    copied file is hashed and, with the same bytes, keeps the key (keyed on mtime, it re-ran every step)."""
    from .storage import file_sha256

    known = known or {}
    h = hashlib.sha256()
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            st = f.stat()
            was = known.get(str(f.resolve()))
            sha = was[2] if was and was[0] == st.st_size and was[1] == st.st_mtime_ns else file_sha256(f)
            h.update(f"{f}\0{st.st_size}\0{sha}\n".encode())
    return h.hexdigest()[:16]


def _resolve_inputs(paths: list[str], base: Path, workdir: Path | None = None) -> list[Path]:
    """Input paths: absolute, relative to ``base``, or ``@step`` for an earlier step's output folder."""
    out = []
    for p in paths:
        if isinstance(p, str) and p.startswith("@"):
            if workdir is None or p[1:] not in STEPS:
                raise ValueError(f"input {p!r}: '@' names a step's output ({', '.join(STEPS)})")
            out.append(workdir / p[1:])
            continue
        q = Path(p)
        out.append(q if q.is_absolute() else base / q)
    return out


def _fresh(d: Path) -> Path:
    if d.exists():
        shutil.rmtree(d)
    return d


def _resumable(d: Path, key: str, fresh: bool = False) -> Path:
    """The step folder, kept when a run with the same key left it (the step resumes inside), else emptied (and
    always emptied when ``fresh``: ``--from`` this step)."""
    marker = d / ".step-key"
    if fresh or not (marker.exists() and marker.read_text().strip() == key):
        _fresh(d)
        d.mkdir(parents=True)
        atomic_write_text(marker, key + "\n")
    return d


def _allowed_kwargs(fn, p: dict, skip: tuple) -> dict:
    """The parameters of a step table that ``fn`` accepts as keywords (an unknown one is an error)."""
    import inspect

    names = set(inspect.signature(fn).parameters)
    bad = sorted(k for k in p if k not in names and k not in skip)
    if bad:
        raise ValueError(f"unknown parameter(s) {bad} for {fn.__module__}.{fn.__name__}")
    return {k: v for k, v in p.items() if k in names and k not in skip}


def step_collect(p: dict, workdir: Path, base: Path, workers: int, log, exe: dict) -> dict:
    """MetaSchedule tuning on this machine into ``workdir/collect`` (a MetaSchedule JSON database)."""
    from .collect import collect

    p = dict(p)
    workloads = p.pop("workloads", "sample")
    trials = int(p.pop("trials", 32))
    kw = _allowed_kwargs(collect, p, skip=())
    kw.setdefault("keep_logs", False)  # MetaSchedule's task logs: not data, and large
    kw.setdefault("progress", sys.stderr.isatty())
    out = _resumable(workdir / "collect", exe["key"], exe.get("fresh", False))
    s = collect(workloads, trials, out, **kw)
    return {"rows_out": s.get("n_records"),
            "summary": f"{s.get('n_workloads')} workloads, {s.get('n_records')} records "
                       f"({s.get('n_failed')} failed), tuned {s.get('tune_seconds')} s"}


def step_verify(p: dict, workdir: Path, base: Path, workers: int, log, exe: dict) -> dict:
    """Tune ``workloads`` with the trained models (``train/<name>``; ``models`` picks some) and MetaSchedule's
    baselines as cost models; the report goes to ``workdir/verify`` (and is copied to ``out`` if given)."""
    from .verifier import verify

    p = dict(p)
    names = p.pop("models", None)
    trained = sorted(d.name for d in (workdir / "train").iterdir() if d.is_dir()) if (workdir / "train").exists() else []
    names = trained if names is None else list(names)
    missing = [n for n in names if n not in trained]
    if missing:
        raise ValueError(f"[verify] models {missing} were not trained (train/ holds {trained})")
    workloads = p.pop("workloads", "heldout")
    trials = int(p.pop("trials", 16))
    seeds = p.pop("seeds", 1)
    copy_to = p.pop("out", None)
    kw = _allowed_kwargs(verify, p, skip=())
    kw.setdefault("progress", sys.stderr.isatty())
    out = _resumable(workdir / "verify", exe["key"], exe.get("fresh", False))
    if "runs_dir" in kw:  # as out: no absolute path, no '..' (it wrote anywhere)
        kw["runs_dir"] = safe_join(base, kw["runs_dir"])
    kw.setdefault("runs_dir", out / "runs")
    s = verify([workdir / "train" / n for n in names], workloads, trials, seeds, out, **kw)
    if copy_to:
        dest = safe_join(base, copy_to)
        for f in [out / "verify.md", out / "verify.json", *map(Path, s["figures"])]:
            atomic_write_bytes(dest / f.name, f.read_bytes())
    ratios = "; ".join(f"{a} {v['geomean_ratio']:.3f}" if v.get("geomean_ratio") else f"{a} -"
                       for a, v in s["overall"].items())
    return {"summary": f"{len(s['workloads'])} workloads x {len(s['arms'])} arms x {len(s['seeds'])} seeds, "
                       f"{s['trials']} trials; geomean latency ratio to the best run: {ratios}"}


def step_convert(p: dict, workdir: Path, base: Path, workers: int, log, exe: dict) -> dict:
    from .convert import OtherInputsError, convert

    p = {k: v for k, v in p.items() if k != "_inputs"}
    if not p.get("inputs"):
        raise ValueError("[convert] needs inputs")
    ds = _fresh(workdir / "convert") if exe.get("fresh") else workdir / "convert"  # --from convert: rebuilt
    try:  # the dataset is the declared inputs: rows of inputs dropped from the list stayed in it, and trained
        s = convert(_resolve_inputs(p["inputs"], base, workdir), ds, hardware=p.get("hardware"),
                    workers=int(p.get("workers", workers)), log=log, executor=exe["executor"],
                    address=exe["address"], only=True)
    except OtherInputsError as e:
        raise ValueError(f"{e}. These are inputs [convert] no longer names: run with --from convert to rebuild "
                         "the dataset from the inputs it names") from None
    t = s["totals"]
    if not t["balanced"] or s["inputs_failed"]:
        raise ValueError(f"convert: unbalanced counts or failed inputs: {s['errors']}")
    return {"rows_in": t["lines"], "rows_out": t["rows"],
            "summary": f"{t['rows']} rows, {t['quarantined']} quarantined, {s['inputs']} inputs"}


def step_splits(p: dict, workdir: Path, base: Path, workers: int, log, exe: dict) -> dict:
    from .splits import write_split

    ds = workdir / "convert"
    made = []
    for sp in p.get("split", [{"name": "within_task", "scheme": "within-task"}]):
        sp = dict(sp)
        name, scheme = sp.pop("name"), sp.pop("scheme")
        info = write_split(ds, name, scheme, **sp)
        made.append(f"{name}: " + "/".join(f"{k} {v}" for k, v in info["counts"].items()))
    (workdir / "splits").mkdir(parents=True, exist_ok=True)
    atomic_write_text(workdir / "splits" / "done.txt", "\n".join(made) + "\n")
    return {"summary": "; ".join(made)}


def step_prune(p: dict, workdir: Path, base: Path, workers: int, log, exe: dict) -> dict:
    from .prune import prune

    s = prune(workdir / "convert", _fresh(workdir / "prune"), float(p.get("ratio", 0.45)), p.get("method", "hybrid"),
              int(p.get("seed", 0)), int(p.get("min_keep", 8)), executor=exe["executor"],
              workers=int(p.get("workers", workers)), address=exe["address"], split=p.get("split"))
    return {"rows_in": s["records_before"], "rows_out": s["records_after"],
            "summary": f"{s['method']} removed {s['ratio_achieved']:.2%}"
                       + (f" of split {s['split']['name']}'s training part" if s.get("split") else "")}


def step_train(p: dict, workdir: Path, base: Path, workers: int, log, exe: dict) -> dict:
    """Train each model on the split of the full dataset and, for data "pruned", with the train/valid parts cut to
    the records the prune step kept (the test part is the same either way). Reads what ``curate train`` reads
    (``training.training_frame``): ``max_per_task`` caps each task's training programs, and the memory check
    (``memory_check = false`` turns it off) stops the step before the records are read when they would not fit."""
    from .training import SPLIT_HPARAMS, data_hash, fit_on_frame, split_identity, training_frame

    out = _fresh(workdir / "train")
    split = p.get("split", "within_task")
    seed = int(p.get("seed", 0))
    cap = p.get("max_per_task")
    cap = None if cap is None else int(cap)
    trained = []
    for data in p.get("data", ["full"]):
        keep = None
        if data == "pruned":
            from .prune import load_records

            keep = load_records(workdir / "prune", ["record_id"])["record_id"]
        # the split's hyperparameters (attention's SPLIT_HPARAMS, the fine-tuning hardware), decided on the whole
        # split: the frame read holds only the tasks that train, where every split looks within-task
        df, auto, _ = training_frame(workdir / "convert", split, "attention", cap, seed,
                                     bool(p.get("memory_check", True)), keep_ids=keep)
        for kind in p.get("models", ["gbdt", "attention"]):
            hp = {"fine_tune": auto["fine_tune"], **({k: auto[k] for k in SPLIT_HPARAMS} if kind == "attention"
                                                      else {}), **p.get(kind, {})}
            m, _ = fit_on_frame(df, kind, seed=seed, epochs=int(p.get("epochs", DEFAULT_EPOCHS)),
                                device=p.get("device", "cpu"),
                                data_manifest_hash=data_hash(workdir / "convert", split, cap, seed), **hp)
            m.trained_on = split_identity(workdir / "convert", split)
            m.save(out / f"{kind}-{data}")
            trained.append(f"{kind}-{data}")
    return {"summary": ", ".join(trained)}


def step_evaluate(p: dict, workdir: Path, base: Path, workers: int, log, exe: dict) -> dict:
    from .features import FEATURE_VERSION
    from .metrics import evaluate_predictions, random_topk_expectation
    from .model import load_model
    from .training import check_same_split, score_part

    split = p.get("split", "within_task")
    models = {mdir.name: load_model(mdir, expected_feature_version=FEATURE_VERSION)
              for mdir in sorted((workdir / "train").iterdir())}
    for mdir in sorted((workdir / "train").iterdir()):
        check_same_split(models[mdir.name], workdir / "convert", split, mdir)
    d, preds = score_part(models, workdir / "convert", split, "test")  # in chunks of whole tasks
    res = {}
    for name, pr in preds.items():
        r = evaluate_predictions(d["task_ids"], d["labels"], pr, groups=d["groups"])
        res[name] = {k: r[k] for k in ("pca", "top1", "top5", "n_tasks", "n_records")}
    res["random"] = {"pca": 0.5, "top1": random_topk_expectation(d["task_ids"], d["labels"], 1),
                     "top5": random_topk_expectation(d["task_ids"], d["labels"], 5)}
    (workdir / "evaluate").mkdir(parents=True, exist_ok=True)
    atomic_write_json(workdir / "evaluate" / "metrics.json", res)
    return {"summary": "; ".join(f"{k} PCA {v['pca']:.3f}" for k, v in res.items())}


def step_report(p: dict, workdir: Path, base: Path, workers: int, log, exe: dict) -> dict:
    res = orjson.loads((workdir / "evaluate" / "metrics.json").read_bytes())
    pruned = "prune" in exe.get("steps", STEPS) and (workdir / "prune" / "prune.json").exists()  # not another run's
    prune_info = orjson.loads((workdir / "prune" / "prune.json").read_bytes()) if pruned else {}
    lines = [f"# {p.get('title', 'Pipeline report')}", "",
             f"Reproduce: `{p.get('command', 'curate run ' + exe.get('pipeline', str(workdir)))}`", "",
             "| model | PCA | top-1 | top-5 |", "|---|---:|---:|---:|"]
    for k, v in res.items():
        lines.append(f"| {k} | {v['pca']:.4f} | {v['top1']:.4f} | {v['top5']:.4f} |")
    if prune_info:
        lines += ["", f"Pruning: {prune_info['method']}, {prune_info['records_before']} -> "
                      f"{prune_info['records_after']} records (removed {prune_info['ratio_achieved']:.2%}"
                      + (f" of split {prune_info['split']['name']}'s training part, "
                         f"{prune_info['split']['train_before']} -> {prune_info['split']['train_after']}"
                         if prune_info.get("split") else "") + ")."]
    text = "\n".join(lines) + "\n"
    atomic_write_text(workdir / "report" / "report.md", text) if (workdir / "report").mkdir(
        parents=True, exist_ok=True) is None else None
    if p.get("out"):
        dest = safe_join(base, p["out"])
        for t in dest.parent.glob(dest.name + ".tmp-*"):  # outside the locked workdir: a killed run's temporary
            t.unlink(missing_ok=True)
        atomic_write_text(dest, text)
    return {"summary": f"wrote {p.get('out') or workdir / 'report' / 'report.md'}"}


STEP_FUNCS = {"collect": step_collect, "convert": step_convert, "splits": step_splits, "prune": step_prune,
              "train": step_train, "evaluate": step_evaluate, "verify": step_verify, "report": step_report}
