"""The ``curate`` command line: a thin Typer layer; every command calls a public function of the package.

Core commands (convert, sql, info, prune, splits) import neither torch nor tvm.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import List, Optional

import orjson
import typer

WRITERS = {"convert", "prune", "splits make", "train", "report pca", "collect", "verify", "run"}


class _Curate(typer.Typer):
    """The app, saying so when Ctrl-C stops a command (Typer exits 130 without a word)."""

    def __call__(self, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as e:
            if e.code == 130:
                _log(_interrupted(list(kwargs.get("args") or sys.argv[1:])))
            raise


def _path(value) -> Path:
    """Every path argument and option: ``''`` is refused, where Typer read it as ``.`` (``curate convert "" --out x``
    converted every log under the current folder, a CLI fuzz)."""
    if isinstance(value, Path):  # a default
        return value
    if str(value) == "":
        raise typer.BadParameter("an empty path: name a file or folder ('.' for the current folder)")
    return Path(value)


def _interrupted(argv: list[str]) -> str:
    words = [a for a in argv if not a.startswith("-")][:2]
    cmd = " ".join(words[:2]) if words[:1] in (["splits"], ["report"]) else " ".join(words[:1])
    if cmd in WRITERS:
        return (f"interrupted: curate {cmd} stopped before it finished; what it was writing may be incomplete: "
                f"run the same command again to finish it")
    return f"interrupted: curate {cmd} stopped".rstrip()


app = _Curate(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help=__doc__.splitlines()[0])
splits_app = typer.Typer(no_args_is_help=True, help="Make and analyse train/valid/test splits.")
report_app = typer.Typer(no_args_is_help=True, help="Generate reports.")
app.add_typer(splits_app, name="splits")
app.add_typer(report_app, name="report")


def _print_json(obj) -> None:
    opts = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY  # arrays as lists, not str()
    sys.stdout.write(orjson.dumps(obj, option=opts, default=_jsonable).decode() + "\n")


def _jsonable(o):
    return o.tolist() if hasattr(o, "tolist") else str(o)  # numpy arrays orjson does not take (strings), scalars


def _fail(msg: str, code: int = 2):
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _log(msg: str) -> None:
    typer.echo(msg, err=True)


@app.callback()
def _commands(ctx: typer.Context) -> None:
    # for the command's run: the package's own warnings (storage.DatasetBeingWritten, a dataset read while a writer
    # holds it) print as "warning: ..." like the CLI's others, every time, not as Python's "file:line: Category:
    # ..." once per place; the warnings state is put back after
    ctx.with_resource(_own_warnings_as_messages())


@contextlib.contextmanager
def _own_warnings_as_messages():
    import warnings

    from .storage import DatasetBeingWritten

    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, *a, **kw):
            if issubclass(category, DatasetBeingWritten):
                typer.echo(f"warning: {message}", err=True)
            else:
                shown(message, category, *a, **kw)

        warnings.showwarning = show
        warnings.simplefilter("always", DatasetBeingWritten)
        yield


@app.command()
def convert(
    inputs: List[Path] = typer.Argument(..., help="log files or folders (TenSet measure_records/, MetaSchedule dbs)",
                                        parser=_path),
    out: Path = typer.Option(..., "--out", "-o", help="dataset folder", parser=_path),
    hardware: Optional[str] = typer.Option(None, help="hardware name when neither -model= nor measure_records/ says"),
    workers: int = typer.Option(1, min=1, help="worker processes"),
    wait: bool = typer.Option(False, help="wait for another writer of --out instead of failing"),
    group_mb: int = typer.Option(16, min=1, help="MB of (uncompressed) JSON logs packed into one shard"),
    json_out: bool = typer.Option(False, "--json", help="print the summary as JSON"),
):
    """Convert Ansor/TenSet logs (v0.2-v0.6, plain or gz), MetaSchedule databases and network_info pickles."""
    from .convert import convert as run
    from .executors import WorkerLost
    from .readers import InputError
    from .storage import OutputError

    try:
        s = run(inputs, out, hardware=hardware, workers=workers, progress=not json_out, log=_log, wait=wait,
                group_bytes=group_mb << 20)
    except (InputError, OutputError, ValueError, WorkerLost) as e:
        _fail(str(e))
    if json_out:
        _print_json(s)
    else:
        t = s["totals"]
        if s["nothing_to_do"]:
            typer.echo(f"nothing to do: {s['inputs_unchanged']} input(s) unchanged since the last run")
        typer.echo(f"{s['dataset']}: {s['inputs']} inputs ({s['inputs_converted']} converted, "
                   f"{s['inputs_unchanged']} unchanged, {s['inputs_failed']} failed"
                   + (f", {s['inputs_not_seen']} from earlier runs not among these inputs: their rows stay"
                      if s.get("inputs_not_seen") else "") + f") in {s['seconds']} s")
        typer.echo(f"lines {t['lines']} = rows {t['rows']} + quarantined {t['quarantined']} + comments "
                   f"{t['comments']}" + (f" + workload rows {t['workload_rows']}" if t.get("workload_rows") else "")
                   + (f" + workloads.json entries {t['network_entries']}" if t.get("network_entries") else "")
                   + f"  [{'balanced' if t['balanced'] else 'UNBALANCED'}]; failed measurements {t['failed']}")
        for hw, n in s["rows_per_hardware"].items():
            typer.echo(f"  {hw}: {n} rows")
        if s["hardware_rules"]:
            typer.echo("hardware named by: " + ", ".join(f"{k} ({v})" for k, v in s["hardware_rules"].items()))
        _echo_quarantine_reasons(s.get("quarantine_reasons"), t["quarantined"], out)
        _warn_several_targets(s.get("hardware_of_several_targets", {}))
        if s.get("splits_outdated"):
            typer.echo(f"warning: split(s) {', '.join(s['splits_outdated'])} were made before this convert: the "
                       "records it added or changed are in no part of them; make them again", err=True)
        for label, err in s["errors"].items():
            typer.echo(f"error: {label}: {err}", err=True)
    if s["inputs_failed"] or not s["totals"]["balanced"]:
        raise typer.Exit(1)


@app.command()
def sql(
    args: List[str] = typer.Argument(..., metavar="[DATASET] QUERY", show_default=False,
                                     help="a read-only SELECT over the catalog views, after the dataset folder if "
                                          "it is given here rather than with -d"),
    dataset: Optional[Path] = typer.Option(None, "--dataset", "-d", help="dataset folder [default: .]", parser=_path),
    fmt: str = typer.Option("table", "--format", "-f", help="table | csv | json"),
):
    """Run a read-only SQL query over a dataset's catalog (records, quarantine, tasks, split_<name>, ...):
    curate sql DATASET QUERY, like the other commands, or curate sql QUERY -d DATASET."""
    from .catalog import SQLRefused, run_sql
    from .storage import IncompleteDataset

    if fmt not in ("table", "csv", "json"):  # run_sql's "arrow" is a Python object, not text to print
        _fail(f"--format must be table, csv or json, not {fmt!r}")
    if len(args) > 2:
        _fail(f"curate sql takes [DATASET] QUERY, not {len(args)} arguments (quote the query)")
    query = args[-1]
    if len(args) == 2:  # curate sql DATASET QUERY
        if dataset is not None:
            _fail(f"the dataset is given twice ({args[0]!r} and -d {str(dataset)!r}): give it once")
        if args[0] == "":  # read as the current folder, as every other path argument refuses
            _fail("an empty path as the dataset: name a folder ('.' for the current folder)")
        dataset = Path(args[0])
    dataset = Path(".") if dataset is None else dataset
    try:
        typer.echo(run_sql(dataset, query, fmt=fmt), nl=False)
    except (SQLRefused, IncompleteDataset) as e:
        _fail(str(e))
    except Exception as e:  # duckdb errors: syntax, missing column, ...
        _fail(f"{type(e).__name__}: {e}")


@app.command()
def info(dataset: Path = typer.Argument(..., parser=_path), json_out: bool = typer.Option(False, "--json")):
    """Records, tasks and failure rate per hardware and operator class."""
    from .dataset_info import dataset_info

    try:
        s = dataset_info(dataset)
    except (FileNotFoundError, ValueError) as e:  # ValueError: storage.IncompleteDataset
        _fail(str(e))
    if json_out:
        _print_json(s)
        return
    typer.echo(f"{dataset}: {s['records']} records, {s['tasks']} tasks, {s['quarantined']} quarantined lines")
    _echo_quarantine_reasons(s.get("quarantine_reasons"), s["quarantined"], dataset)
    typer.echo(f"{'hardware':<24}{'operator':<14}{'records':>9}{'tasks':>7}{'failed':>9}")
    for r in s["by_hardware_operator"]:
        typer.echo(f"{r['hardware']:<24}{r['op_class']:<14}{r['records']:>9}{r['tasks']:>7}{r['failure_rate']:>9.2%}")
    pr = s.get("pruned_from")
    if pr:
        part = f" of split {pr['split']['name']}'s training part" if isinstance(pr.get("split"), dict) else ""
        achieved = pr.get("ratio_achieved")
        typer.echo(f"pruned from {pr['from']}: {pr.get('method')}, ratio {pr.get('ratio_requested')}{part}" +
                   (f" (removed {achieved:.2%})" if isinstance(achieved, (int, float)) else "") +
                   f", seed {pr.get('seed')}")
    for sp in s["splits"]:
        counts = ", ".join(f"{k} {v}" for k, v in sp["counts"].items())
        src = (f"; the split of {sp['pruned']['from']} restricted to these records"
               if sp.get("pruned") else "")
        typer.echo(f"split {sp['name']} ({sp['scheme']}): {counts}{src}")
    _warn_several_targets(s["targets"])


def _echo_quarantine_reasons(reasons: list | None, total: int, dataset: Path) -> None:
    """``dataset_info.quarantine_reasons``, one line each, and the query that lists every quarantined line."""
    if not reasons:
        return
    shown = sum(r["lines"] for r in reasons)
    typer.echo(f"the dataset's quarantined lines, by reason{' (the commonest)' if shown < total else ''}; "
               f"every one: curate sql \"SELECT source_file, line, reason FROM quarantine\" -d {dataset}")
    for r in reasons:
        typer.echo(f"  {r['lines']} x {r['reason']} (first: {r['first']})")


def _message(e: Exception) -> str:
    """An exception's text; a KeyError's without the quotes str() puts around it."""
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)


def _warn_several_targets(targets: dict) -> None:
    """A warning per hardware name whose records have several devices (``targets``: name -> readers.device_of)."""
    for hw, ts in targets.items():
        if len(ts) > 1:
            typer.echo(f"warning: hardware {hw} holds records of {len(ts)} targets ({', '.join(ts)}): one name for "
                       "several machines, which labels (one best cost per task) and hardware-wise splits take as one. "
                       "Name them apart: --hardware per folder, -model= in the target, or a "
                       "measure_records/<hardware>/ layout", err=True)


@app.command()
def prune(
    dataset: Path = typer.Argument(..., parser=_path),
    ratio: float = typer.Option(..., help="fraction of records to REMOVE (0.45 keeps 55%)"),
    method: str = typer.Option("hybrid", help="redundancy | cluster | importance | hybrid | density | random"),
    out: Path = typer.Option(..., "--out", "-o", parser=_path),
    seed: int = typer.Option(0),
    min_keep: int = typer.Option(8, help="records every task keeps at least"),
    split: Optional[str] = typer.Option(None, help="prune only this split's training part (the ratio is of that "
                                        "part); its validation and test records stay, and the pruned dataset gets "
                                        "the split, so models on both are scored on the same test records"),
    evaluate: bool = typer.Option(False, help="also train a proxy ranker on full vs pruned vs random data"),
    evaluate_seeds: int = typer.Option(1, help="--evaluate over this many seeds (seed, seed+1, ...; each its own "
                                       "test split): means and the paired differences with their sd"),
    evaluate_model: str = typer.Option("proxy", help="--evaluate with: proxy (a fixed LightGBM ranker) or a model "
                                       "the product trains, trained as curate train trains it: attention | gbdt | mlp "
                                       "(attention: minutes per seed for 100k records on 2 cores)"),
    workers: int = typer.Option(1, min=1, help="units of whole tasks prepared and selected in parallel"),
    executor: str = typer.Option("local", help="local | ray"),
    address: str = typer.Option(None, help="Ray cluster to connect to, e.g. auto (implies --executor ray)"),
    json_out: bool = typer.Option(False, "--json"),
):
    """Prune a dataset down to a ratio; writes a dataset with the same schema and a pruning report."""
    from .executors import WorkerLost
    from .prune import prune as run
    from .storage import OutputError

    if evaluate_seeds < 1:
        _fail("--evaluate-seeds must be at least 1")
    from .evaluate_prune import EVAL_MODELS

    if evaluate_model not in EVAL_MODELS:
        _fail(f"--evaluate-model must be one of {', '.join(EVAL_MODELS)}, not {evaluate_model!r}")
    if evaluate and split is not None:
        _fail("--evaluate prunes the whole dataset again on within-task splits of its own, not split "
              f"{split!r}: with --split, train and evaluate on the pruned dataset's split instead (curate train "
              f"OUT --split {split}; curate evaluate MODEL OUT --split {split})")
    try:
        if evaluate:  # refused before pruning starts, not after it has run
            from .evaluate_prune import check_evaluation_memory

            check_evaluation_memory(dataset)
        s = run(dataset, out, ratio, method, seed, min_keep, executor=executor, workers=workers, address=address,
                split=split)
    except (ValueError, FileNotFoundError, OutputError, MemoryError, WorkerLost) as e:
        _fail(str(e))
    if evaluate:
        from .evaluate_prune import evaluate_pruning, paired_sentence, record_evaluation

        try:
            s["evaluation"] = evaluate_pruning(dataset, ratio, method, seed, min_keep, evaluate_seeds,
                                               evaluate_model)
            record_evaluation(out, s["evaluation"])
        except (ValueError, OutputError, MemoryError) as e:
            _fail(f"pruned into {out}, but {e}" if isinstance(e, ValueError) else str(e))
    if json_out:
        _print_json(s)
    else:
        sp = s.get("split")
        what = (f"split {sp['name']}'s training part {sp['train_before']} -> {sp['train_after']} records, its other "
                f"{sp['kept_whole']} kept" if sp else f"{s['records_before']} -> {s['records_after']} records")
        typer.echo(f"{s['method']}: {what} (removed {s['ratio_achieved']:.2%}, asked {_percent(ratio)}) in "
                   f"{s['seconds']} s; report: {Path(out) / 'prune_report.md'}")
        for k in ("split_warning", "warning"):
            if k in s:
                typer.echo("warning: " + s[k], err=True)
        if evaluate:
            ev = s["evaluation"]
            who = "proxy ranker" if ev["model"] == "proxy" else f"{ev['model']} model"
            typer.echo(f"{who}, within-task test split, seeds {', '.join(map(str, ev['seeds']))} (means):")
            for k in dict.fromkeys(["full", method, "random"]):
                if k in ev:
                    typer.echo(f"  {k}: {ev[k]}")
            typer.echo("  " + paired_sentence(ev, method).replace("`", ""))


def _n(n: int, noun: str) -> str:
    """``n noun`` with the noun in the plural unless n is 1 (it said "10 records of 1 tasks")."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _percent(x: float) -> str:
    """``x`` as a percentage with the digits it has (0.45 -> 45%, 0.999 -> 99.9%): ``:.0%`` said a request of
    0.999 was one of 100%."""
    return f"{round(x * 100, 6):g}%"


@splits_app.command("make")
def splits_make(
    dataset: Path = typer.Argument(..., parser=_path),
    scheme: str = typer.Option(..., help="within-task | network | operator | hardware | task"),
    name: Optional[str] = typer.Option(None, help="split name (default: the scheme)"),
    seed: int = typer.Option(0),
    test_fraction: float = typer.Option(0.1, help="within-task: share of each task's records in test; task: share "
                                        "of the tasks held out"),
    valid_fraction: float = typer.Option(0.1),
    holdout: Optional[str] = typer.Option(None, help="comma list: networks or operator classes to hold out"),
    train_hw: Optional[str] = typer.Option(None, help="comma list of training hardware"),
    test_hw: Optional[str] = typer.Option(None, help="comma list of test hardware"),
    few_shot: float = typer.Option(0.0, help="fraction of the test hardware's records moved into training"),
    json_out: bool = typer.Option(False, "--json"),
):
    """Assign every record to train/valid/test; stored as splits/<name>.parquet and view split_<name>."""
    from .splits import write_split
    from .storage import OutputError

    sp = lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None  # noqa: E731
    if name is None and not scheme:  # the default name is the scheme's: it said "split name ''"
        from .splits import SCHEMES

        _fail(f"--scheme '': choose from {', '.join(SCHEMES)}")
    try:
        s = write_split(dataset, name or scheme.replace("-", "_"), scheme, seed=seed, test_fraction=test_fraction,
                        valid_fraction=valid_fraction, holdout=sp(holdout), train_hw=sp(train_hw),
                        test_hw=sp(test_hw), few_shot=few_shot)
    except (ValueError, FileNotFoundError, OutputError) as e:
        _fail(str(e))
    if json_out:
        _print_json(s)
    else:
        typer.echo(f"split {s['name']} ({scheme}): " + ", ".join(f"{k} {v}" for k, v in s["counts"].items()))
    if s.get("unknown_class_records"):
        typer.echo(f"warning: no known operator class (features.operator_classes) for "
                   f"{_n(s['unknown_class_records'], 'record')} of {_n(s['unknown_class_tasks'], 'task')}: they stay "
                   "in training, so a held-out class among them is not held out", err=True)
    if s.get("no_network_records"):
        typer.echo(f"warning: in no network of the networks table: {_n(s['no_network_records'], 'record')} of "
                   f"{_n(s['no_network_tasks'], 'task')}; they stay in training", err=True)
    from .dataset_info import pruned_from

    src = (pruned_from(dataset) or {}).get("from")
    if src is not None:
        typer.echo(f"warning: {dataset} is a pruned copy of {src}: this split draws its test records from the kept "
                   "ones, so a model trained here is not scored on the records a model of the source is. To compare "
                   f"the two, make the split on {src} and prune with --split {s['name']}", err=True)
    for part in ("train", "test"):
        if not s["counts"].get(part):
            typer.echo(f"warning: split {s['name']} has no {part} records"
                       + ((" (--test-fraction 0)" if not test_fraction else
                           " (every task is too small to hold some out)") if scheme == "within-task" else "")
                       + f": curate {'train' if part == 'train' else 'evaluate'} will have nothing to "
                       + ("learn from" if part == "train" else "score"), err=True)


@splits_app.command("analyze")
def splits_analyze(dataset: Path = typer.Argument(..., parser=_path), name: str = typer.Option(...),
                   out: Path = typer.Option(Path("reports/splits"), "--out", "-o", parser=_path)):
    """Report a split: sizes, leakage, label distribution, feature drift, cross-hardware rank correlation."""
    from .splits import analyze

    try:
        p = analyze(dataset, name, out)
    except (FileNotFoundError, FileExistsError, ValueError) as e:  # ValueError: storage.IncompleteDataset
        _fail(str(e))
    typer.echo(f"wrote {p}")


@app.command()
def train(
    dataset: Path = typer.Argument(..., parser=_path),
    split: str = typer.Option(..., help="split name (see curate splits make)"),
    model: str = typer.Option("attention", help="attention | mlp | gbdt"),
    out: Path = typer.Option(..., "--out", "-o", help="model directory", parser=_path),
    epochs: Optional[int] = typer.Option(None, min=1, help="epochs (neural models); default 24 (model.DEFAULT_EPOCHS), "
                                         "what the attention defaults were tuned at"),
    device: str = typer.Option("cpu", help="cpu | cuda (attention and mlp; gbdt trains on the CPU)"),
    seed: int = typer.Option(0),
    balance_hardware: bool = typer.Option(True, help="repeat the records of a hardware with far fewer training "
                                          "records (few-shot), by the square root of the size ratio"),
    task_relative: Optional[bool] = typer.Option(
        None, "--task-relative/--raw-features",
        help="also give the model each flat feature standardised within its task, and (attention) each schedule "
             "token centred within its task (default: on for attention and gbdt, off for TenSet's mlp)"),
    raw_tokens: bool = typer.Option(False, "--raw-tokens",
                                    help="attention: the schedule tokens as they are only (the within-task flat "
                                         "features stay as --task-relative/--raw-features says)"),
    lambdarank_weight: str = typer.Option(
        "auto", help="attention: the weight of LambdaRank beside RankNet in the loss; auto: 0.25 when most test "
                     "records are of tasks the model trains on (within-task, few-shot), else 0.05 (unseen tasks, "
                     "operators, hardware); give 0.05 for a model that will rank tasks it has not seen"),
    diverse_top_k: str = typer.Option(
        "auto", help="attention: order each task's first k programs as diverse picks among its best-scored 4% "
                     "(AutoTVM's submodular pick over schedule steps); auto: 5 when most test records are of tasks "
                     "the model does not train on (or there is no test part), else 0 (the plain order)"),
    positions: str = typer.Option(
        "auto", help="attention: absolute (each slot of a patch of steps has its own weights) or kind (each step "
                     "numbered by its primitive and how many of that primitive came before it); auto: kind when most "
                     "test records are of operator classes the model does not train on, else absolute"),
    fine_tune: str = typer.Option("auto", help="after training, go on training on these hardware's training "
                                  "records alone (comma-separated names); auto: the test hardware of a few-shot "
                                  "split (it also trains, beside other hardware); none: never"),
    max_per_task: Optional[int] = typer.Option(
        None, min=2, help="at most this many records of each task on the training side (train + valid), drawn by "
                          "the seed; the test part is never cut. For TenSet-sized splits: tasks teach more than "
                          "programs per task"),
    memory_check: bool = typer.Option(True, help="refuse a split whose records would not fit in this machine's "
                                      "memory, before reading them"),
    include_failed: bool = typer.Option(False, "--include-failed", help="train on the failed measurements too, "
                                        "with label 0, as TenSet does (left out by default)"),
    json_out: bool = typer.Option(False, "--json"),
):
    """Train a cost model on a split's train part (early stopping on valid PCA); fine-tune on the target
    hardware of a few-shot split."""
    from .training import train_model

    if raw_tokens and model != "attention":
        raise typer.BadParameter("--raw-tokens applies to --model attention only")
    if epochs is not None and model == "gbdt":  # it was taken and ignored without a word; a loop over the models
        from .model import GBDTRanker  # with one set of flags still runs

        typer.echo(f"warning: --epochs applies to the neural models (attention, mlp); gbdt boosts up to "
                   f"{GBDTRanker._defaults['n_estimators']} trees and stops early on the validation PCA", err=True)
    hp = {} if task_relative is None else {"task_relative": task_relative}
    if model == "attention" and (task_relative is False or raw_tokens):
        hp["token_relative"] = False
    for name, value, kind in (("lambdarank_weight", lambdarank_weight, float), ("diverse_top_k", diverse_top_k, int)):
        if value != "auto":
            hp[name] = _attention_number(name, value, kind, model)
    if positions != "auto":
        if model != "attention":
            raise typer.BadParameter("--positions applies to --model attention only")
        from .model import POSITIONS

        if positions not in POSITIONS:
            raise typer.BadParameter(f"--positions must be auto, {' or '.join(POSITIONS)}, not {positions!r}")
        hp["positions"] = positions
    try:
        s = train_model(dataset, split, model, out, **({} if epochs is None else {"epochs": epochs}), device=device,
                        seed=seed, progress=not json_out, balance_hardware=balance_hardware, fine_tune=fine_tune,
                        max_per_task=max_per_task, memory_check=memory_check, include_failed=include_failed, **hp)
    except (ValueError, FileNotFoundError, FileExistsError, MemoryError) as e:
        _fail(str(e))
    if json_out:
        _print_json(s)
        return
    ft = s.get("fine_tuned")
    lw = "" if "lambdarank_weight" not in s else f"; LambdaRank weight {s['lambdarank_weight']:g}" + (
        "" if s["test_records_of_trained_tasks"] is None or lambdarank_weight != "auto" else
        f" ({s['test_records_of_trained_tasks']:.0%} of the test records are of tasks it trains on)") + (
        f"; diverse top-{s['diverse_top_k']} picks" if s.get("diverse_top_k") else "") + (
        "; positions by primitive" if s.get("positions") == "kind" else "")
    typer.echo(f"model {model} -> {out}: valid {s.get('valid')}{lw}" + (
        f"; fine-tuned on {', '.join(ft['hardware'])} ({ft['records']} records, "
        + ("kept the weights before it" if ft["best_epoch"] is None else f"best at fine-tuning step {ft['best_epoch']}")
        + ")" if ft else ""))


def _attention_number(name: str, value: str, kind: type, model: str):
    """An attention-only option that is ``auto`` or a number (``kind``: float or int), as a number."""
    flag = "--" + name.replace("_", "-")
    if model != "attention":
        raise typer.BadParameter(f"{flag} applies to --model attention only")
    try:
        return kind(value)
    except ValueError:
        raise typer.BadParameter(f"{flag} must be auto or a {'number' if kind is float else 'whole number'}, "
                                 f"not {value!r}")


@app.command()
def evaluate(
    model_dir: Path = typer.Argument(..., parser=_path),
    dataset: Path = typer.Argument(..., parser=_path),
    split: str = typer.Option(...),
    part: str = typer.Option("test"),
    include_failed: bool = typer.Option(False, "--include-failed", help="score the failed measurements too, with "
                                        "label 0 (TenSet keeps them in its test sets; left out by default)"),
    json_out: bool = typer.Option(False, "--json"),
):
    """TenSet metrics (PCA, top-1, top-5) of a model on a split part, overall, per operator and hardware."""
    from .model import ModelLoadError
    from .training import evaluate_model

    try:
        s = evaluate_model(model_dir, dataset, split, part, include_failed=include_failed)
    except (ValueError, FileNotFoundError, ModelLoadError) as e:
        _fail(str(e))
    if json_out:
        _print_json(s)
    else:
        typer.echo(f"PCA {s['pca']:.4f}  top-1 {s['top1']:.4f}  top-5 {s['top5']:.4f}  "
                   f"({s['n_tasks']} tasks, {s['n_records']} records)")
        one = sum(1 for n in s["per_task"]["n_records"] if n < 2)
        if one:  # TenSet's definitions: such a task has no pair to rank, and its best pick is its only record
            typer.echo(f"warning: {one} of {s['n_tasks']} tasks have one scored record, which counts PCA 0.5 and "
                       "top-k 1 by TenSet's definition (metrics.py)", err=True)
        seen = s.get("trained_records_scored")
        if seen:  # scored on another split than its own: the scores are not of records it has not seen
            typer.echo(f"warning: {seen['records']} of the {part} part's {seen['of']} records "
                       f"({seen['records'] / seen['of']:.0%}) are in the training or validation part of split "
                       f"{seen['split']!r} of {seen['dataset']}, which the model trained on", err=True)
        for name in ("op_class", "hardware"):  # the breakdowns the docstring promises (--json has them too)
            for g, r in s.get(f"by_{name}", {}).items():
                typer.echo(f"  {name} {g}: PCA {r['pca']:.4f}  top-1 {r['top1']:.4f}  top-5 {r['top5']:.4f}  "
                           f"({r['n_tasks']} tasks, {r['n_records']} records)")


@report_app.command("pca")
def report_pca(
    dataset_arg: Optional[Path] = typer.Argument(None, metavar="[DATASET]", show_default=False,
                                                 help="a dataset or logs, as --dataset", parser=_path),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="a dataset or logs [default: data/sample-cpu]",
                                           parser=_path),
    out: Path = typer.Option(Path("reports/pca.md"), "--out", "-o", parser=_path),
    epochs: int = typer.Option(24, min=1),
    workers: int = typer.Option(2, min=1,
                                help="processes training the report's models (the report is the same for any)"),
):
    """Train and evaluate the baselines and the attention model on the dataset's splits; one Markdown table.
    curate report pca DATASET, like the other commands, or --dataset DATASET (the embedded sample by default)."""
    from .executors import WorkerLost
    from .readers import InputError
    from .report import pca_report
    from .storage import OutputError

    if dataset_arg is not None and dataset is not None:
        _fail(f"the dataset is given twice ({str(dataset_arg)!r} and --dataset {str(dataset)!r}): give it once")
    dataset = dataset_arg or dataset or Path("data/sample-cpu")
    try:
        typer.echo(f"wrote {pca_report(dataset, out, epochs=epochs, workers=workers)}")
    except (ValueError, FileNotFoundError, InputError, OutputError, MemoryError, WorkerLost) as e:
        _fail(str(e))


@app.command()
def collect(
    workloads: str = typer.Option("sample", help="a built-in workload set, names separated by commas, or a JSON "
                                  "file of workload names"),
    trials: int = typer.Option(64, min=1, help="measured trials per workload"),
    out: Path = typer.Option(..., "--out", "-o", parser=_path),
    target: str = typer.Option("auto"),
    seed: int = typer.Option(0),
    trials_per_iter: int = typer.Option(64, min=1),
    population: int = typer.Option(128, min=1, help="evolutionary search population"),
    gzip_db: bool = typer.Option(False, "--gzip", help="gzip the database files at the end"),
    no_logs: bool = typer.Option(False, "--no-logs", help="do not keep MetaSchedule's log folder"),
):
    """Tune workloads on this CPU with MetaSchedule and keep every measured candidate (needs the tvm extra)."""
    from .collect import collect_command

    try:
        s = collect_command(workloads, trials, out, target, seed, trials_per_iter, population, gzip_db, not no_logs)
    except (KeyError, ValueError, FileNotFoundError) as e:  # an unknown workload name or set, a bad target
        _fail(_message(e))
    _print_json(s)


@app.command()
def verify(
    model: List[Path] = typer.Option(..., "--model", help="trained model directories", parser=_path),
    workloads: str = typer.Option("heldout"),
    trials: int = typer.Option(64, min=1),
    seeds: int = typer.Option(3, min=1),
    out: Path = typer.Option(Path("reports/verify"), "--out", "-o", parser=_path),
):
    """Tune held-out workloads with each model as MetaSchedule's cost model vs XGB and random (needs tvm)."""
    import contextlib

    from .model import ModelLoadError
    from .verifier import verify as run

    try:
        with contextlib.redirect_stdout(sys.stderr):  # MetaSchedule's task tables: stdout is the one JSON summary
            s = run(model, workloads, trials=trials, seeds=seeds, out=out)
    except (ModelLoadError, KeyError, ValueError, FileNotFoundError) as e:  # a bad --model or --workloads
        _fail(_message(e))
    _print_json(s)


@app.command("run")
def run_pipeline(
    pipeline: Path = typer.Argument(..., help="a pipelines/*.toml file", parser=_path),
    set_: List[str] = typer.Option([], "--set", help="override: step.param=value"),
    executor: str = typer.Option("local", help="local (processes) | ray (a local Ray instance, or --address)"),
    address: Optional[str] = typer.Option(None, help="Ray cluster to connect to, e.g. auto (implies --executor ray)"),
    workers: int = typer.Option(1, min=1, help="worker processes (local), or CPUs of the local Ray instance"),
    from_step: Optional[str] = typer.Option(None, "--from", help="redo this step and the ones after it"),
    dry_run: bool = typer.Option(False, "--dry-run"),
    json_out: bool = typer.Option(False, "--json"),
):
    """Run a declarative pipeline; unchanged steps are skipped, a killed run resumes."""
    from .pipeline import PipelineError, run
    from .storage import OutputError

    try:
        s = run(pipeline, overrides=set_, executor=executor, workers=workers, from_step=from_step,
                dry_run=dry_run, log=_log, address=address)
    except (PipelineError, OutputError) as e:  # OutputError: the work folder cannot be made (a file in its path)
        _fail(str(e))
    if json_out:
        _print_json(s)
    else:
        for st in s["steps"]:
            typer.echo(f"{st['step']:<10} {st['status']:<8} {st.get('seconds', 0):>8.2f} s  {st.get('summary', '')}")
        if s.get("summary_path"):  # a dry run writes none
            typer.echo(f"run summary: {s['summary_path']}")


if __name__ == "__main__":
    app()
