"""curate run: end to end on the embedded sample, skipping, path safety, values refused before running.
(Resuming after SIGKILL: tests/test_run_kill.py.)"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tenset_curate.pipeline import PipelineError, run

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample-cpu"

PIPE = """
[pipeline]
workdir = "runs/t"
steps = ["convert", "splits", "prune", "train", "evaluate", "report"]
[convert]
inputs = ["data/sample-cpu"]
[splits]
split = [{ name = "within_task", scheme = "within-task", seed = 0 }]
[prune]
ratio = 0.45
method = "cluster"
[train]
split = "within_task"
data = ["full", "pruned"]
models = ["gbdt"]
[train.gbdt]
n_estimators = 40
num_threads = 1
[evaluate]
split = "within_task"
[report]
out = "reports/t.md"
"""

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="data/sample-cpu missing")


@pytest.fixture()
def project(tmp_path):
    (tmp_path / "data").mkdir()
    shutil.copytree(SAMPLE, tmp_path / "data" / "sample-cpu")
    (tmp_path / "p.toml").write_text(PIPE)
    return tmp_path


def _strip_timing(obj):
    if isinstance(obj, dict):
        return {k: _strip_timing(v) for k, v in obj.items() if "seconds" not in k}
    if isinstance(obj, list):
        return [_strip_timing(v) for v in obj]
    return obj


def outputs(root: Path) -> dict:
    """Every output file's bytes, except wall-clock timings (JSON keys named *seconds*, the report's time line),
    which are expected to differ between runs. The catalog is rebuilt from the shards and the run summary holds
    timings only."""
    files = {}
    for p in sorted((root / "runs" / "t").rglob("*")):
        if not p.is_file() or p.name in ("summary.json", "summary.md", ".lock", "catalog.duckdb"):
            continue
        data = p.read_bytes()
        if p.suffix == ".json":
            data = json.dumps(_strip_timing(json.loads(data)), sort_keys=True).encode()
        elif p.suffix == ".md":
            data = b"\n".join(x for x in data.split(b"\n") if b" s\n" not in x + b"\n" and b"; seed" not in x)
        files[p.relative_to(root).as_posix()] = hashlib.sha256(data).hexdigest()
    return files


def test_runs_end_to_end_then_skips(project):
    s = run(project / "p.toml", cwd=project)
    assert [r["status"] for r in s["steps"]] == ["ran"] * 6
    report = (project / "reports" / "t.md").read_text()
    assert "gbdt-full" in report and "gbdt-pruned" in report and "random" in report
    s2 = run(project / "p.toml", cwd=project)
    assert [r["status"] for r in s2["steps"]] == ["skipped"] * 6
    s3 = run(project / "p.toml", cwd=project, overrides=["prune.ratio=0.3"])
    assert [r["status"] for r in s3["steps"]] == ["skipped", "skipped", "ran", "ran", "ran", "ran"]


def test_path_traversal_refused(project):
    bad = project / "bad.toml"
    bad.write_text(PIPE.replace('workdir = "runs/t"', 'workdir = "../escape"'))
    with pytest.raises(PipelineError, match="escapes"):
        run(bad, cwd=project)
    bad.write_text(PIPE.replace('workdir = "runs/t"', 'workdir = "/tmp/abs"'))
    with pytest.raises(PipelineError, match="absolute"):
        run(bad, cwd=project)
    bad.write_text(PIPE.replace('out = "reports/t.md"', 'out = "../../x.md"'))
    with pytest.raises(PipelineError):
        run(bad, cwd=project)


def test_unknown_tables_and_keys_are_refused_before_anything_runs(project):
    """A key no step reads (a misspelling, on the command line or in the file) is an error naming it and what the
    table takes; before, ``--set prune.mehtod='"random"'`` ran hybrid pruning and said nothing."""
    p = project / "p.toml"
    cases = [(["prune.mehtod=\"random\""], r"unknown key\(s\) \['mehtod'\] in \[prune\]; it takes .*'method'"),
             (["prune.min_kepe=500"], r"\['min_kepe'\] in \[prune\]"),
             (["convert.hardwre=\"x\""], r"\['hardwre'\] in \[convert\]"),
             (["evaluate.part=\"valid\""], r"\['part'\] in \[evaluate\]"),
             (["prun.ratio=0.3"], r"unknown table\(s\) \['prun'\]")]
    for overrides, msg in cases:
        with pytest.raises(PipelineError, match=msg):
            run(p, cwd=project, overrides=overrides)
    bad = project / "bad.toml"
    bad.write_text(PIPE.replace('seed = 0 }', 'seed = 0, hodlout = ["dense"] }'))
    with pytest.raises(PipelineError, match=r"unknown key\(s\) \['hodlout'\] in split 'within_task'"):
        run(bad, cwd=project)
    assert not (project / "runs").exists()  # refused before the work directory was made
    s = run(p, cwd=project, overrides=["prune.ratio=0.3", "train.device=\"cpu\""], dry_run=True)
    assert [r["status"] for r in s["steps"]] == ["would run"] * 6  # the keys steps read still pass


def test_ray_executor_says_how_to_install(project, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # hidden, installed or not (tests/test_ray.py runs it for real)
    with pytest.raises(PipelineError, match=r"pip install 'tenset-curate\[ray\]'"):
        run(project / "p.toml", cwd=project, executor="ray")


def test_ray_missing_error_via_cli(project):
    """Ray hidden from a fresh interpreter (installed or not): the CLI fails before any work and says how to
    install it."""
    code = ("import sys; sys.modules['ray'] = None; from tenset_curate.cli import app; "
            "sys.argv = ['curate', 'run', 'p.toml', '--executor', 'ray']; app()")
    r = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 2
    assert "pip install 'tenset-curate[ray]'" in r.stderr
    assert not (project / "runs").exists()


def test_unknown_executor_refused(project):
    with pytest.raises(PipelineError, match="unknown executor 'dask'"):
        run(project / "p.toml", cwd=project, executor="dask")


def test_verify_pipeline_dry_run_and_step_inputs(tmp_path):
    """pipelines/verify.toml parses and plans collect -> convert -> splits -> train -> verify without TVM; convert's
    '@collect' input is the collect step's folder; an unknown collect/verify parameter is an error."""
    from tenset_curate.pipeline import _allowed_kwargs, _resolve_inputs, load_pipeline

    s = run(REPO / "pipelines" / "verify.toml", cwd=tmp_path, dry_run=True)
    assert [(r["step"], r["status"]) for r in s["steps"]] == [
        ("collect", "would run"), ("convert", "would run"), ("splits", "would run"), ("train", "would run"),
        ("verify", "would run")]
    assert not (tmp_path / "runs" / "verify" / "collect").exists()
    cfg = load_pipeline(REPO / "pipelines" / "verify.toml", ["verify.trials=8", "collect.workloads=['x']"])
    assert cfg["verify"]["trials"] == 8 and cfg["collect"]["workloads"] == ["x"]
    # its models rank workloads they never saw: attention trains with the unseen-task LambdaRank weight, not the
    # 0.25 that training.lambdarank_weight_for would read from the within-task split it trains on
    assert cfg["train"]["split"] == "within_task" and cfg["train"]["attention"] == {"lambdarank_weight": 0.05}
    assert _resolve_inputs(["@collect"], tmp_path, tmp_path / "w") == [tmp_path / "w" / "collect"]
    with pytest.raises(ValueError, match="names a step"):
        _resolve_inputs(["@nope"], tmp_path, tmp_path / "w")
    from tenset_curate.collect import collect
    from tenset_curate.verifier import verify

    assert _allowed_kwargs(collect, {"seed": 1, "trials_per_iter": 8}, skip=()) == {"seed": 1, "trials_per_iter": 8}
    with pytest.raises(ValueError, match="unknown parameter"):
        _allowed_kwargs(verify, {"trails": 8}, skip=())


def test_train_step_caps_programs_per_task_and_checks_memory(project, monkeypatch):
    from tenset_curate import training as T

    run(project / "p.toml", cwd=project)
    full = json.loads((project / "runs/t/evaluate/metrics.json").read_text())
    conv = project / "runs/t/convert"
    cfg = json.loads((project / "runs/t/train/gbdt-full/config.json").read_text())
    assert cfg["data_manifest_hash"] == T.data_hash(conv, "within_task")
    s = run(project / "p.toml", cwd=project, overrides=["train.max_per_task=20"])
    assert [r["status"] for r in s["steps"]][3:5] == ["ran", "ran"]
    cfg = json.loads((project / "runs/t/train/gbdt-full/config.json").read_text())
    assert cfg["data_manifest_hash"] == T.data_hash(conv, "within_task", 20, 0)
    capped = json.loads((project / "runs/t/evaluate/metrics.json").read_text())
    for name in ("gbdt-full", "gbdt-pruned"):  # the same test records, scored by models trained on fewer
        assert capped[name]["n_records"] == full[name]["n_records"] > 100
        assert capped[name]["pca"] != full[name]["pca"]
    # a machine too small for the split: the step stops before reading the records, naming the way out
    monkeypatch.setattr(T, "available_memory", lambda: 10 * T.BYTES_PER_TRAINING_RECORD)
    with pytest.raises(PipelineError, match="step train failed: .*--max-per-task"):
        run(project / "p.toml", cwd=project, overrides=["train.seed=1"])


def test_values_the_steps_would_misread_are_refused_or_read_as_meant(project):
    """Found running pipelines on other data (session 28): a string for a list key was read one character at a time
    (train.data=pruned trained models 'gbdt-p', 'gbdt-r', ...; convert.inputs=data/x walked '/'); train.data
    'prunned' trained on the full data; a typo in [train.gbdt] failed with a TypeError after three steps ran;
    pruned data without the prune step read another run's prune/."""
    p = project / "p.toml"
    for sets, match in ((['train.data=["prunned"]'], r"\[train\] data \['prunned'\]: each is full or pruned"),
                        (["train.gbdt={n_estimatorz=5}"], r"unknown hyperparameter\(s\) \['n_estimatorz'\] in "
                                                          r"\[train.gbdt\]"),
                        (['pipeline.steps=["convert","splits","train"]', 'train.data=["pruned"]'],
                         "needs the prune step")):
        with pytest.raises(PipelineError, match=match):
            run(p, cwd=project, overrides=sets)
        assert not (project / "runs").exists()  # refused before anything ran
    s = run(p, cwd=project, overrides=["convert.inputs=data/sample-cpu", "train.data=pruned",
                                       "train.gbdt.n_estimators=30"])  # one key of [train.gbdt], the rest kept
    assert [r["status"] for r in s["steps"]] == ["ran"] * 6
    assert sorted(d.name for d in (project / "runs" / "t" / "train").iterdir()) == ["gbdt-pruned"]
    hp = json.loads((project / "runs" / "t" / "train" / "gbdt-pruned" / "config.json").read_text())["hparams"]
    assert (hp["n_estimators"], hp["num_threads"]) == (30, 1)
    with pytest.raises(PipelineError, match=r"\['n_estimatorz'\] in \[train.gbdt\]"):
        run(p, cwd=project, overrides=["train.gbdt.n_estimatorz=30"])


def test_values_a_step_refuses_fail_the_dry_run_and_name_the_file(project):
    """Found by the pipeline audit (session 28): a step table's values that the step's own function refuses
    (scheme "hw", models ["xgb"], method "kmeans") passed --dry-run and failed when the step ran, after the steps
    before it. Each is now checked by that function before anything runs, and the message names the pipeline file
    (a dotted --set had overwritten the name with the key's middle part)."""
    p = project / "p.toml"
    cases = [(['splits.split=[{name="w", scheme="hw"}]'], r"\[splits\] split 'w': unknown scheme 'hw'"),
             (['splits.split=[{name="w", scheme="within-task", holdout=["dense"]}]'],
              r"--holdout do\(es\) not apply to a within-task split"),
             (['splits.split=[{name="w", scheme="within-task", test_fraction=1.5}]'], r"--test-fraction 1.5"),
             (['splits.split=[{name="../w", scheme="within-task"}]'], r"split name '../w'"),
             (['splits.split=[{name="x-y", scheme="within-task"}, {name="x_y", scheme="within-task"}]'],
              r"the split 'x-y' already has its SQL view split_x_y"),
             (['prune.method="kmeans"'], r"\[prune\]: unknown method 'kmeans'"),
             (["prune.ratio=1.2"], r"\[prune\]: ratio 1.2: the fraction removed"),
             (['prune.split="nope"'], r"\[prune\] split 'nope': the splits step makes \['within_task'\]"),
             (['splits.split=[{name="w", scheme="within-task"}, {name="v", scheme="within-task", seed=1}]',
               'prune.split="w"', 'train.split="v"'], r"\[prune\] split 'w' but \[train\] split 'v'"),
             (['train.models=["xgb"]'], r"\[train\] models \['xgb'\]"),
             (['train.device="cuda"'], r"gbdt \(LightGBM\) trains on the CPU"),
             (["train.epochs=0"], r"\[train\] epochs 0"),
             (["train.gbdt.n_estimators=0"], r"\[train.gbdt\]: .*n_estimators must be at least 1"),
             # the Python API audit (session 35): these passed the dry run and failed after the steps before them
             (['evaluate.split="nosuch"'], r"\[evaluate\] split 'nosuch': the splits step makes \['within_task'\]"),
             (['train.split="nosuch"'], r"\[train\] split 'nosuch': the splits step makes \['within_task'\]"),
             (["train.seed=-1"], r"\[train\] seed -1: an integer, at least 0"),
             (["train.seed=true"], r"\[train\] seed True: an integer"),
             (["train.max_per_task=1"], r"\[train\] max_per_task 1: an integer, at least 2")]
    for sets, match in cases:
        for dry in (True, False):
            with pytest.raises(PipelineError, match=match) as e:
                run(p, cwd=project, overrides=sets, dry_run=dry)
            assert str(e.value).startswith(str(p)), e.value
            assert not (project / "runs").exists()  # refused before anything ran
    s = run(p, cwd=project, dry_run=True, overrides=['splits.split=[{name="w", scheme="operator", '
                                                     'holdout=["dense"]}]', 'prune.method="random"',
                                                     'train.split="w"', 'evaluate.split="w"'])
    assert [r["status"] for r in s["steps"]] == ["would run"] * 6  # values the steps take still pass
    with pytest.raises(PipelineError, match="workers 0: an integer, at least 1"):  # failed at the first fork
        run(p, cwd=project, workers=0, dry_run=True)
    with pytest.raises(PipelineError, match=r"\[prune\]: ratio 1.5"):  # one override as a str: it was read as 'p', ...
        run(p, cwd=project, dry_run=True, overrides="prune.ratio=1.5")


def test_values_of_the_wrong_type_and_unreadable_files_are_refused_naming_the_file(project):
    """Found by a CLI fuzz (session 34): a value of the wrong type (an int for steps or split, a list for workdir or
    report.out, a string for a table), a mistyped '@step' input, a non-UTF-8 file or a folder ended in TypeError,
    AttributeError, ValueError, UnicodeDecodeError or IsADirectoryError tracebacks; memory_check = 'no' was read as
    true; a hyperparameter of the wrong type (learning_rate = "fast") passed the dry run and failed in LightGBM
    after the steps before it; and --from "" ran no step without a word."""
    from typer.testing import CliRunner

    from tenset_curate.cli import app

    p = project / "p.toml"
    cases = [(["pipeline.steps=5"], r"\[pipeline\] steps must be a list of strings, got 5"),
             (["splits.split=5"], r"\[splits\] split must be a list of tables"),
             (["pipeline.workdir=[1]"], r"\[pipeline\] workdir must be a string, got \[1\]"),
             (["report.out=5"], r"\[report\] out must be a string, got 5"),
             (["convert.inputs=[1]"], r"\[convert\] inputs must be a list of strings, got \[1\]"),
             (["train.memory_check='no'"], r"\[train\] memory_check must be true or false, got 'no'"),
             (["convert.inputs=['@bogus']"], r"\[convert\] input '@bogus': '@' names a step's output"),
             (['train.gbdt.learning_rate="fast"'], r"\[train.gbdt\] learning_rate must be a number \(default 0.05\)"),
             (["train.gbdt.n_estimators=true"], r"\[train.gbdt\] n_estimators must be a number")]
    for sets, match in cases:
        with pytest.raises(PipelineError, match=match) as e:
            run(p, cwd=project, overrides=sets, dry_run=True)
        assert str(e.value).startswith(str(p)), e.value
    for text, match in (('pipeline = "w"\n', r"\[pipeline\] must be a table, got 'w'"),
                        ('[[splits]]\nx = 1\n[pipeline]\nworkdir = "w"\n', r"\[splits\] must be a table")):
        (project / "bad.toml").write_text(text)
        with pytest.raises(PipelineError, match=match):
            run(project / "bad.toml", cwd=project, dry_run=True)
    (project / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(PipelineError, match=r"bin.toml: not a TOML pipeline file \(not UTF-8 text"):
        run(project / "bin.toml", cwd=project, dry_run=True)
    with pytest.raises(PipelineError, match=r"a folder, not a pipeline file"):
        run(project, cwd=project, dry_run=True)
    with pytest.raises(PipelineError, match=r"--from '': not a step of this pipeline"):
        run(p, cwd=project, from_step="", dry_run=True)
    r = CliRunner().invoke(app, ["run", str(p), "--set", "splits.split=5", "--dry-run"])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit) and "must be a list of tables" in r.output
    assert not (project / "runs").exists()  # refused before anything ran


def test_dry_run_and_skips_see_what_a_run_would_redo(project):
    """A dry run said 'splits would run; prune skipped' where the run redid every step after splits; a deleted
    report ``out`` was never written again (the step was skipped as done)."""
    p = project / "p.toml"
    run(p, cwd=project)
    shutil.rmtree(project / "runs" / "t" / "splits")
    dry = run(p, cwd=project, dry_run=True)
    assert [r["status"] for r in dry["steps"]] == ["skipped"] + ["would run"] * 5
    again = run(p, cwd=project)
    assert [r["status"] for r in again["steps"]] == ["skipped"] + ["ran"] * 5
    (project / "reports" / "t.md").unlink()
    s = run(p, cwd=project)
    assert [r["status"] for r in s["steps"]] == ["skipped"] * 5 + ["ran"]
    assert (project / "reports" / "t.md").is_file()
    # a touched input (a copy, a checkout) with the same bytes re-ran every step: the key reads its sha256 now
    for f in (project / "data" / "sample-cpu").rglob("*"):
        if f.is_file():
            os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    assert [r["status"] for r in run(p, cwd=project)["steps"]] == ["skipped"] * 6
    db = next((project / "data" / "sample-cpu").glob("database_tuning_record.json*"))
    with open(db, "ab") as fh:  # changed bytes: convert and everything after it
        fh.write(gzip.compress(b"") if db.suffix == ".gz" else b"\n")
    assert [r["status"] for r in run(p, cwd=project)["steps"]] == ["ran"] * 6


def test_the_convert_step_owns_its_dataset(project):
    """[convert] inputs that drop an input: its rows stayed in the dataset and were trained on. Now the step stops
    and names the fix; --from convert rebuilds the dataset from the inputs named."""
    pool = sorted((REPO.parent / "shared" / "realdata" / "ansor" / "roller-k80" / "pooling").glob("*.gz"))
    if not pool:
        pytest.skip("../shared/realdata not present")
    shutil.copy(pool[0], project / "data" / pool[0].name)
    p = project / "p.toml"
    both = [f'convert.inputs=["data/sample-cpu", "data/{pool[0].name}"]', 'pipeline.steps=["convert"]']
    first = run(p, cwd=project, overrides=both)
    with pytest.raises(PipelineError, match="no longer names: run with --from convert"):
        run(p, cwd=project, overrides=['pipeline.steps=["convert"]'])
    s = run(p, cwd=project, overrides=['pipeline.steps=["convert"]'], from_step="convert")
    assert s["steps"][0]["status"] == "ran" and first["steps"][0]["summary"] != s["steps"][0]["summary"]
    from tenset_curate.prune import load_records

    assert set(load_records(project / "runs" / "t" / "convert", ["format"])["format"]) == {"metaschedule"}


def test_the_prune_step_can_prune_a_splits_training_part_alone(project):
    """``[prune] split = NAME`` (``curate prune --split``): the prune step removes the ratio from the split's training
    records only; the validation and test records all stay, and the pruned dataset carries the split."""
    import polars as pl

    from tenset_curate.prune import load_records
    from tenset_curate.splits import read_split

    run(project / "p.toml", cwd=project, overrides=['prune.split="within_task"'])
    w = project / "runs" / "t"
    src, got = read_split(w / "convert", "within_task"), read_split(w / "prune", "within_task")
    assert got.filter(pl.col("part") != "train").equals(src.filter(pl.col("part") != "train"))
    pj = json.loads((w / "prune" / "prune.json").read_text())
    n_train = int((src["part"] == "train").sum())
    assert pj["split"]["train_before"] == n_train and abs(pj["ratio_achieved"] - 0.45) <= 0.01
    assert load_records(w / "prune", ["record_id"]).height == pj["records_after"] < pj["records_before"]
    m = json.loads((w / "evaluate" / "metrics.json").read_text())
    assert m["gbdt-pruned"]["n_records"] == m["gbdt-full"]["n_records"] > 0


def test_the_run_audit_of_session_35(project):
    """Found by a CLI fuzz of curate run (session 35): workdir '.' had the current folder's *.tmp-* files removed,
    by a dry run too (which also made the work folder and its lock); steps out of order trained the 'pruned' model
    on another run's prune/ and said 'ran'; a step listed twice, or no steps key (every step, collect's and verify's
    tuning included), ran; a step that failed stayed 'done' under its old key, so a rerun skipped it over what the
    failed run left; [verify] runs_dir wrote outside; a misspelt [verify] key, a missing or enclosing convert input,
    a duplicate split name and an empty split list were found only when their step ran."""
    p = project / "p.toml"
    (project / "notes.tmp-2024").write_text("precious")
    cases = [(['pipeline.workdir="."'], r"workdir '\.': the current folder"),
             (['pipeline.workdir=""'], r"workdir '': the current folder"),
             (['pipeline.steps=["convert", "splits", "train", "prune"]'],
              r"steps \['convert', 'splits', 'train', 'prune'\]: list them in the pipeline's order .*, where each "
              r"runs after the ones it may read: \['convert', 'splits', 'prune', 'train'\]"),
             (['pipeline.steps=["convert", "convert"]'], r"step\(s\) \['convert'\] listed more than once"),
             (['splits.split=[{name="w", scheme="within-task"}, {name="w", scheme="task", test_fraction=0.3}]'],
              r"\[splits\] split 'w' is given twice"),
             (["splits.split=[]"], r"\[splits\] split is empty"),
             (['convert.inputs=["nosuch"]'], r"\[convert\] input 'nosuch': no such file or folder"),
             (['convert.inputs=["."]'], r"\[convert\] input '\.' holds the work folder"),
             (['pipeline.steps=["convert", "splits", "train", "verify"]', "verify.trails=8"],
              r"unknown key\(s\) \['trails'\] in \[verify\]"),
             (['pipeline.steps=["convert", "splits", "train", "verify"]', 'verify.model_dirs=["x"]'],
              r"unknown key\(s\) \['model_dirs'\] in \[verify\]"),
             (['report.out="data"'], r"data: in the way of the file the run writes there"),
             (['pipeline.steps=["convert", "splits", "train", "verify"]', 'train.data=["full"]',
               'verify.runs_dir="/tmp/elsewhere"'],
              r"\[verify\] runs_dir: refusing absolute path"),
             (["pipeline.steps=[]"], r"\[pipeline\] steps is empty: nothing to run"),
             (["train.models=[]"], r"\[train\] models is empty"), (["train.data=[]"], r"\[train\] data is empty"),
             ([".x=1"], r"--set '\.x=1': expected step.param=value"),
             (["convert.workers=0"], r"\[convert\] workers 0: an integer, at least 1"),
             (['train.models=["gbdt", "mlp"]', 'train.mlp.lr_schedule="bogus"'],
              r"\[train.mlp\]: MLPRanker: lr_schedule must be one of cosine, step, constant, not 'bogus'")]
    for sets, match in cases:
        for dry in (True, False):
            with pytest.raises(PipelineError, match=match):
                run(p, cwd=project, overrides=sets, dry_run=dry)
    assert (project / "notes.tmp-2024").read_text() == "precious" and not (project / "runs").exists()
    nosteps = project / "nosteps.toml"
    nosteps.write_text(PIPE.replace('steps = ["convert", "splits", "prune", "train", "evaluate", "report"]\n', ""))
    with pytest.raises(PipelineError, match=r"\[pipeline\] needs steps"):
        run(nosteps, cwd=project, dry_run=True)
    s = run(p, cwd=project, dry_run=True)
    assert [r["status"] for r in s["steps"]] == ["would run"] * 6 and not (project / "runs").exists()
    s = run(p, cwd=project, dry_run=True, overrides=['convert.inputs=["runs/t/collect"]'])  # a step's output, to be
    assert s["steps"][0]["status"] == "would run"  # made by the run: not refused as missing
    # a failed step is not done under its old key; workers is not part of a step's key
    run(p, cwd=project, overrides=['pipeline.steps=["convert", "splits", "prune"]'])
    every_class = 'holdout=["batch_matmul", "conv2d", "dense", "depthwise", "pooling", "softmax"]'
    with pytest.raises(PipelineError, match="step prune failed: split within_task .* has no training part"):
        run(p, cwd=project, overrides=['pipeline.steps=["convert", "splits", "prune"]', 'prune.split="within_task"',
                                       f'splits.split=[{{name="within_task", scheme="operator", {every_class}}}]'])
    state = json.loads((project / "runs" / "t" / "state.json").read_text())
    assert "prune" not in state and {"convert", "splits"} <= set(state)
    s = run(p, cwd=project, overrides=['pipeline.steps=["convert", "splits", "prune"]', "prune.workers=2"])
    assert [r["status"] for r in s["steps"]] == ["skipped", "ran", "ran"]  # the split changed back; prune reran
    s = run(p, cwd=project, overrides=['pipeline.steps=["convert", "splits", "prune"]', "prune.workers=1"])
    assert [r["status"] for r in s["steps"]] == ["skipped"] * 3
    (project / "runs" / "t" / "prune" / "prune.json").unlink()  # a step whose files were deleted runs again
    s = run(p, cwd=project, overrides=['pipeline.steps=["convert", "splits", "prune"]'])
    assert [r["status"] for r in s["steps"]] == ["skipped", "skipped", "ran"]
    assert (project / "runs" / "t" / "prune" / "prune.json").is_file()
