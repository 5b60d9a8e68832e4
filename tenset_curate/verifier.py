"""Verify trained rankers inside MetaSchedule: tune held-out workloads with each model as the cost model.

Two parts.

``RankerCostModel`` (``ranker_cost_model(model_or_dir)``)
    A MetaSchedule ``PyCostModel`` (``@derived_object``) wrapping one of the project's rankers
    (``model.py``: attention, mlp, gbdt).

    * ``predict(context, candidates)``: each candidate's ``sch.trace`` is serialised to the exact
      JSON the MetaSchedule JSON database writes for it (``trace_json``: the C++ ``TraceAsJSON``,
      converted as the database's ``JSONDumps`` does; ``Trace.as_json()`` is NOT that: it leaves
      IntImm objects in (the readers reject them as malformed), keeps Python bools where the
      database writes 0/1 and writes index maps compactly where the database indents them). The
      JSON then goes through the SAME code as the dataset: ``readers._Columns().add_ms_trace`` ->
      ``_built_steps()`` -> a ``steps`` column of the record schema's type, ``n_steps``, and
      ``workload_args`` from the candidate's ``args_info`` by ``readers.ms_workload_args`` (what
      ``read_metaschedule`` stores from the record's) -> ``features.featurize``. There is no
      second featurizer;
      ``tests/test_verifier.py`` checks, for every record of a real tuning run, that the
      adapter's trace JSON equals the database line's and its tokens/mask/flat equal those of the
      record after ``convert``. The ranker's raw scores (higher = faster) are mapped to positive
      numbers with a fixed increasing map, ``sigmoid((s - c) / scale)`` (clipped to +-30), because
      EvolutionarySearch samples parents in proportion to the scores (``MakeMultinomialSampler``:
      negative weights are undefined behaviour) and keeps a heap of the best candidates across
      the predict calls of one search round (so the map must not change inside a round). ``c`` and
      ``scale`` are the median and standard deviation of the first predict call after
      construction or after a refit, i.e. the start of a search round.
    * ``update(context, candidates, results)``: stores the measured candidates' features and mean
      run seconds (failed ones too, flagged). With ``online=True`` (default), once
      ``min_samples`` valid measurements exist it refits after every update on ALL valid
      measurements so far, with TenSet's labels (best latency / latency, one task):
      GBDT: ``finetune_rounds`` more LightGBM lambdarank trees on top of the ORIGINAL booster
      (``init_model``; the pre-trained trees are kept, the new ones fit the residual ranking
      error on the measurements; every refit restarts from the original booster so trees do not
      pile up). Neural (attention, mlp): a copy of the ORIGINAL network is fine-tuned for
      ``finetune_steps`` Adam steps (lr ``finetune_lr``) with the model's own loss on the
      measurements as one ranking group. The model directory on disk is never changed.
    * ``save(path)``: writes the measurements (``.npz``) and the adapter's counters (``.json``);
      ``load(path)``: a no-op (the ranker comes from its model directory at construction).

``verify(model_dirs, workloads, trials, seeds, out)``
    For each workload, seed and arm (each model, then MetaSchedule's own ``"xgb"`` and
    ``"random"`` models) one ``ms.tune_tir`` run into its own JSON database with the same trial
    budget, search settings and seed (``num_tuning_cores=1``: determinism), the runner settings of
    ``collect.py`` and its ``f_build`` (which avoids the slow intrinsics import), built by a worker
    pool kept for the whole run with LocalBuilder's per-candidate timeout (``builder="pool"``, default;
    LocalBuilder itself restarts its pool, and so pays ``import tvm``, on every batch: ``"local"``;
    ``"inprocess"`` compiles in the tuning process, fastest, but without a timeout). Per run: the best
    latency after every trial (database records in order, failed trials = no improvement), the
    time each trial's batch finished, and a re-measurement of the run's best program
    (``compile_tir`` on the database, the collector's build function, ``time_evaluator``); the
    re-measurements of all runs of a workload are interleaved round by round (``remeasure_rounds``)
    so machine-load drift hits every arm alike, and their median is used. Reported per workload
    and overall: final latency ratio vs the best any run found (re-measured, and by the database
    latencies), trials and seconds to get within 5% of the best database latency any run found,
    and the spread over seeds. Writes ``<out>/verify.md`` (tables, PNG curves, the command that
    reproduces it), ``<out>/verify.json`` (everything, curves included) and the PNGs; run
    databases go to ``runs_dir`` (default ``<out>/verify-runs``). A finished run (its
    ``run.json`` with the same settings) is reused, so an interrupted verify resumes.

Run ``python -m tenset_curate.verifier --model DIR [--model DIR ...] --workloads heldout --trials 64
--seeds 3 --out reports`` (or ``curate verify``).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import math
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = [
    "trace_json",
    "steps_frame",
    "featurize_traces",
    "ranker_cost_model",
    "make_cost_model_class",
    "verify",
    "main",
]

log = logging.getLogger("tenset_curate.verifier")

BASELINES = ("xgb", "random")
WITHIN = 0.05  # "within 5% of the best latency any run found"
RUN_JSON = "run.json"
_FAILED = 1e9


# ============================================================================================
# trace -> canonical steps -> features (the dataset's own code path)
# ============================================================================================
def _index_map_json(obj) -> str:
    """An IndexMap as the database writes it: C++ ``SaveJSON`` (the JSON graph with the TVM version as
    metadata, indented by 2)."""
    import tvm
    import tvm_ffi

    compact = tvm.ir.save_json(obj)
    try:
        return str(tvm_ffi.get_global_func("ffi.json.Stringify")(
            tvm_ffi.get_global_func("ffi.json.Parse")(compact), 2))
    except Exception:  # pragma: no cover - older FFI without the JSON helpers
        return json.dumps(json.loads(compact), indent=2)


def _plain(v: Any) -> Any:
    """A raw ``TraceAsJSON`` value as the MetaSchedule JSON database writes it (the C++ ``JSONDumps``):
    Array -> list, Map -> dict, String -> str, a bare bool -> 0/1, IntImm -> int (a boolean IntImm ->
    true/false), FloatImm -> float, IndexMap -> its indented ``SaveJSON`` text."""
    if v is None:
        return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    tk = getattr(v, "__tvm_ffi_type_key__", None) or type(v).__name__
    if "IndexMap" in str(tk) or type(v).__name__ == "IndexMap":
        return _index_map_json(v)
    if hasattr(v, "items"):
        return {str(k): _plain(x) for k, x in v.items()}
    if hasattr(v, "value") and not hasattr(v, "__len__"):  # IntImm / FloatImm
        ty = str(getattr(v, "ty", getattr(v, "dtype", "")))
        if ty == "bool":  # JSONDumps writes a boolean IntImm as true/false (a bare FFI bool as 1/0)
            return bool(v.value)
        return float(v.value) if ty.startswith(("float", "bfloat")) else int(v.value)
    if isinstance(v, (list, tuple)) or (hasattr(v, "__len__") and hasattr(v, "__getitem__")):
        return [_plain(x) for x in v]
    raise TypeError(f"unexpected {type(v).__name__} in a trace's JSON")


def trace_json(trace) -> list:
    """``[instructions, decisions]`` of a MetaSchedule ``Trace``, exactly as a JSON database line holds it
    (``TraceAsJSON(trace, remove_postproc=False)``, what ``TuningRecord.AsJSON`` serialises, converted the
    way the database's C++ ``JSONDumps`` writes it). ``Trace.as_json()`` differs: it leaves IntImm objects
    in, keeps Python bools and writes index maps compactly."""
    from tvm.s_tir.schedule import _ffi_api

    return _plain(_ffi_api.TraceAsJSON(trace, False))


def steps_frame(traces: Sequence[list], args_infos: Sequence[list] | None = None):
    """A polars frame (steps, n_steps, workload_args) for trace JSONs and, for each, the ``args_info`` JSON its
    database record would hold (None: none), built with the readers' code: ``_Columns.add_ms_trace`` +
    ``_built_steps`` and ``ms_workload_args`` (what ``read_metaschedule`` stores for a record)."""
    import polars as pl
    import pyarrow as pa

    from .readers import _Columns, ms_workload_args
    from .schema import RECORD_SCHEMA

    cols = _Columns()
    n_steps = []
    for t in traces:
        if type(t) is not list or len(t) != 2:
            raise ValueError("a trace JSON is [instructions, decisions]")
        n_steps.append(cols.add_ms_trace(t[0], t[1]))
    table = pa.table({
        "steps": cols._built_steps().cast(RECORD_SCHEMA.field("steps").type),
        "n_steps": pa.array(n_steps, RECORD_SCHEMA.field("n_steps").type),
        "workload_args": pa.array([ms_workload_args(a) for a in (args_infos or [None] * len(n_steps))],
                                  RECORD_SCHEMA.field("workload_args").type),
    })
    return pl.from_arrow(table)


def featurize_traces(traces: Sequence[list], args_infos: Sequence[list] | None = None) -> dict:
    """``features.featurize`` of trace JSONs (and their ``args_info`` JSONs, see ``steps_frame``): tokens, mask,
    flat."""
    from .features import featurize

    return featurize(steps_frame(traces, args_infos))


def args_info_json(candidate) -> list:
    """A MeasureCandidate's ``args_info`` as the JSON database writes it for its record (``ArgInfo.as_json``)."""
    return [_plain(a.as_json()) for a in candidate.args_info]


def _model_inputs(feats: dict) -> dict:
    n = len(feats["tokens"])
    return dict(feats, task_ids=np.zeros(n, np.int64), labels=np.zeros(n, np.float32))


def _positive_scores(s: np.ndarray, center: float, scale: float) -> np.ndarray:
    z = np.clip((np.asarray(s, np.float64) - center) / scale, -30.0, 30.0)
    return 1.0 / (1.0 + np.exp(-z))


# ============================================================================================
# the cost model adapter
# ============================================================================================
class _RankerCostModelImpl:
    """Body of the adapter (the ``PyCostModel`` subclass is built lazily: TVM is imported on use)."""

    def __init__(self, model, *, online: bool = True, min_samples: int = 16, finetune_rounds: int = 30,
                 finetune_steps: int = 30, finetune_lr: float = 1e-4, threads: int | None = 1,
                 capture: bool = False, label: str = "") -> None:
        from .features import FEATURE_VERSION
        from .model import Ranker, load_model

        if not isinstance(model, Ranker):
            self.model_dir = str(model)
            model = load_model(model, expected_feature_version=FEATURE_VERSION)
        else:
            self.model_dir = None
            if model.feature_version not in (None, FEATURE_VERSION):
                from .model import ModelMismatchError

                raise ModelMismatchError(
                    f"model was trained on feature_version={model.feature_version!r}, the verifier "
                    f"featurizes with {FEATURE_VERSION!r}")
        if threads:  # torch / LightGBM threads: on a loaded 2-core machine 2 threads ran 10x slower than 1
            model = copy.copy(model)
            model.hparams = dict(model.hparams, num_threads=int(threads))
        self.base = model
        self.active = model
        self.kind = model.kind
        self.label = label or model.kind
        self.online = bool(online)
        self.min_samples = int(min_samples)
        self.finetune_rounds = int(finetune_rounds)
        self.finetune_steps = int(finetune_steps)
        self.finetune_lr = float(finetune_lr)
        self.capture = bool(capture)
        self.captured: dict[str, dict] = {}  # predict(): trace JSON text -> {"tokens", "mask", "flat", "raw"}
        self.captured_update: dict[str, dict] = {}  # update(): the same for the measured candidates
        # measurements (update)
        self.meas_tokens: list[np.ndarray] = []
        self.meas_mask: list[np.ndarray] = []
        self.meas_flat: list[np.ndarray] = []
        self.meas_secs: list[float] = []  # mean run seconds; inf for a failed candidate
        self.n_refits = 0
        self.refit_s = 0.0
        self.predict_s = 0.0
        self.update_s = 0.0
        self.n_predict_calls = 0
        self.n_predicted = 0
        self._calib: tuple[float, float] | None = None

    # ---- PyCostModel interface ------------------------------------------------------------
    def load(self, path: str) -> None:
        """No-op: the ranker is loaded from its model directory when the adapter is built."""

    def save(self, path: str) -> None:
        from .storage import atomic_write_text, atomic_write_with

        p = Path(path)
        arrays = self._measured_arrays(valid_only=False)

        def write_npz(tmp: Path) -> None:
            with open(tmp, "wb") as fh:  # a file object: given a name, numpy would append ".npz" to the temp name
                np.savez_compressed(fh, **arrays)

        atomic_write_with(p.with_suffix(".npz"), write_npz)
        atomic_write_text(p.with_suffix(".json"), json.dumps(self.stats(), indent=2))

    def predict(self, context, candidates) -> np.ndarray:
        t0 = time.perf_counter()
        n = len(candidates)
        if n == 0:
            return np.zeros(0, np.float64)
        traces = [trace_json(c.sch.trace) for c in candidates]
        feats = featurize_traces(traces, [args_info_json(c) for c in candidates])
        raw = np.asarray(self.active.predict(_model_inputs(feats)), np.float64)
        raw = np.nan_to_num(raw, nan=-1e30, posinf=1e30, neginf=-1e30)
        if self._calib is None:
            c = float(np.median(raw))
            sd = float(np.std(raw))
            self._calib = (c, sd if sd > 1e-12 else 1.0)
        out = _positive_scores(raw, *self._calib)
        if self.capture:
            for i, t in enumerate(traces):
                self.captured[json.dumps(t, separators=(",", ":"))] = {
                    "tokens": feats["tokens"][i].copy(), "mask": feats["mask"][i].copy(),
                    "flat": feats["flat"][i].copy(), "raw": float(raw[i])}
        self.n_predict_calls += 1
        self.n_predicted += n
        self.predict_s += time.perf_counter() - t0
        return out

    def update(self, context, candidates, results) -> None:
        t0 = time.perf_counter()
        if len(candidates):
            traces = [trace_json(c.sch.trace) for c in candidates]
            feats = featurize_traces(traces, [args_info_json(c) for c in candidates])
            if self.capture:
                for i, t in enumerate(traces):
                    self.captured_update[json.dumps(t, separators=(",", ":"))] = {
                        "tokens": feats["tokens"][i].copy(), "mask": feats["mask"][i].copy(),
                        "flat": feats["flat"][i].copy()}
            for i, r in enumerate(results):
                secs = _run_secs(r)
                self.meas_tokens.append(feats["tokens"][i])
                self.meas_mask.append(feats["mask"][i])
                self.meas_flat.append(feats["flat"][i])
                self.meas_secs.append(float(np.mean(secs)) if secs else math.inf)
        n_valid = int(np.isfinite(self.meas_secs).sum()) if self.meas_secs else 0
        if self.online and n_valid >= self.min_samples and len(candidates):
            t1 = time.perf_counter()
            try:
                self._refit()
                self.n_refits += 1
                self._calib = None  # recalibrate at the start of the next search round
            except Exception as e:  # a failed refit keeps the previous model; tuning goes on
                log.warning("%s: online refit failed (%s: %s); keeping the previous model",
                            self.label, type(e).__name__, e)
            self.refit_s += time.perf_counter() - t1
        self.update_s += time.perf_counter() - t0

    # ---- helpers --------------------------------------------------------------------------
    def stats(self) -> dict:
        secs = np.asarray(self.meas_secs, np.float64)
        return {"label": self.label, "kind": self.kind, "model_dir": self.model_dir, "online": self.online,
                "min_samples": self.min_samples, "n_measured": int(secs.size),
                "n_valid": int(np.isfinite(secs).sum()), "n_refits": self.n_refits,
                "refit_s": round(self.refit_s, 3), "predict_s": round(self.predict_s, 3),
                "update_s": round(self.update_s, 3), "n_predict_calls": self.n_predict_calls,
                "n_predicted": self.n_predicted}

    def _measured_arrays(self, valid_only: bool = True) -> dict:
        secs = np.asarray(self.meas_secs, np.float64)
        keep = np.isfinite(secs) if valid_only else np.ones(secs.size, bool)
        if not secs.size:
            from .features import SEQ_LEN, TOKEN_DIM

            return {"tokens": np.zeros((0, SEQ_LEN, TOKEN_DIM), np.float32), "mask": np.zeros((0, SEQ_LEN), bool),
                    "flat": np.zeros((0, 0), np.float32), "secs": secs, "labels": np.zeros(0, np.float32),
                    "task_ids": np.zeros(0, np.int64)}
        s = secs[keep]
        labels = (np.min(s) / s if s.size and np.isfinite(s).any() else np.zeros(s.size)).astype(np.float32)
        return {"tokens": np.stack(self.meas_tokens)[keep], "mask": np.stack(self.meas_mask)[keep],
                "flat": np.stack(self.meas_flat)[keep], "secs": s, "labels": labels,
                "task_ids": np.zeros(int(keep.sum()), np.int64)}

    def _refit(self) -> None:
        d = self._measured_arrays(valid_only=True)
        if self.kind == "gbdt":
            self.active = _refit_gbdt(self.base, d, self.finetune_rounds)
        elif self.kind in ("attention", "mlp"):
            self.active = _finetune_torch(self.base, d, self.finetune_steps, self.finetune_lr)
        else:  # pragma: no cover - unknown kinds keep the pre-trained model
            return


def _run_secs(result) -> list[float]:
    """Mean-able run seconds of a RunnerResult; [] for a failed one."""
    if getattr(result, "error_msg", None) is not None or result.run_secs is None:
        return []
    secs = [float(s.value) if hasattr(s, "value") else float(s) for s in result.run_secs]
    if not secs or any(not (0 < s < _FAILED) for s in secs):
        return []
    return secs


def _refit_gbdt(base, d: dict, rounds: int):
    """The base GBDT ranker plus ``rounds`` lambdarank trees fitted on the measurements."""
    import lightgbm as lgb

    from .model import relevance_grades

    hp = base.hparams
    n = len(d["labels"])
    grades = relevance_grades(d["task_ids"], d["labels"], hp["n_grades"], hp["grade_mode"])
    params = base._params()
    params.update(min_data_in_leaf=max(2, min(int(hp["min_data_in_leaf"]), n // 8)),
                  num_leaves=min(int(hp["num_leaves"]), 15), feature_fraction=1.0)
    init_iter = base.best_epoch or base.booster.current_iteration()
    base_booster = lgb.Booster(model_str=base.booster.model_to_string(num_iteration=init_iter))
    # the measurements in the base model's query layout (tasks, cut at max_group_size): one query of every
    # measurement failed LightGBM's 10,000-row limit on long runs
    rows, sizes = base.query_layout(np.asarray(d["task_ids"]), np.random.default_rng(base.seed))
    flat = base.flat_inputs(d, np.asarray(d["flat"], np.float32))
    ds = lgb.Dataset(flat[rows], grades[rows], group=sizes, params={"max_bin": hp["max_bin"]},
                     free_raw_data=True)
    booster = lgb.train(params, ds, num_boost_round=int(rounds), init_model=base_booster,
                        keep_training_booster=False)
    m = copy.copy(base)
    m.booster = booster
    m.best_epoch = booster.current_iteration()
    return m


def _finetune_torch(base, d: dict, steps: int, lr: float):
    """A copy of the base neural ranker fine-tuned on the measurements (one ranking group)."""
    import torch

    from .model import _pad_groups, _torch_env, lambdarank_loss, ranknet_loss

    m = copy.copy(base)
    m.net = copy.deepcopy(base.net)
    hp = base.hparams
    arrays = m._feature_arrays(d)
    labels = d["labels"].astype(np.float32)
    n = labels.size
    idx = np.arange(n)
    loss_fn = lambdarank_loss if hp["loss"] == "lambdarank" else ranknet_loss
    with _torch_env(hp["num_threads"], hp["deterministic"]):
        torch.manual_seed(base.seed)
        net = m.net
        net.train()
        opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=hp["weight_decay"])
        y = torch.from_numpy(labels).to(m.device)
        sizes = np.asarray([n])
        for _ in range(int(steps)):
            scores = net(*m._net_inputs(arrays, idx, m.device))
            S, Y, M = _pad_groups(scores, y, sizes)
            loss, n_pairs = loss_fn(S, Y, M, sigma=hp["sigma"])
            if not n_pairs:
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if hp["grad_clip"]:
                torch.nn.utils.clip_grad_norm_(net.parameters(), hp["grad_clip"])
            opt.step()
        net.eval()
    return m


_CLASS = None


def make_cost_model_class():
    """The ``@derived_object`` ``PyCostModel`` subclass (built once, on first use: imports TVM)."""
    global _CLASS
    if _CLASS is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.cost_model import PyCostModel

        # derived_object needs PyCostModel as the direct base: copy the implementation's methods in
        body = {k: v for k, v in vars(_RankerCostModelImpl).items() if k not in ("__dict__", "__weakref__")}

        def __init__(self, model, **kw):
            PyCostModel.__init__(self)
            _RankerCostModelImpl.__init__(self, model, **kw)

        body["__init__"] = __init__
        body["__doc__"] = "MetaSchedule cost model backed by a tenset_curate ranker (see tenset_curate.verifier)."
        body["__module__"] = __name__
        _CLASS = derived_object(type("RankerCostModel", (PyCostModel,), body))
    return _CLASS


def ranker_cost_model(model, **kw):
    """A MetaSchedule cost model wrapping ``model`` (a model directory or a loaded ``Ranker``).
    Keywords: ``online``, ``min_samples``, ``finetune_rounds``, ``finetune_steps``, ``finetune_lr``,
    ``threads`` (torch/LightGBM threads of the model, default 1), ``capture`` (keep every predicted
    candidate's features, keyed by its trace JSON), ``label``."""
    return make_cost_model_class()(model, **kw)


def __getattr__(name):  # RankerCostModel, lazily
    if name == "RankerCostModel":
        return make_cost_model_class()
    raise AttributeError(name)


# ============================================================================================
# one tuning run
# ============================================================================================
def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _read_run_records(run_dir: Path) -> list[float | None]:
    """Mean run seconds per database record, in order; None for a failed record."""
    from .collect import iter_record_secs, valid_mean_secs

    return [valid_mean_secs(secs) for _idx, secs in iter_record_secs(run_dir)]


def _best_so_far(lat: list[float | None]) -> list[float | None]:
    best, out = None, []
    for x in lat:
        if x is not None and (best is None or x < best):
            best = x
        out.append(best)
    return out


def _make_pool_builder(max_workers: int, timeout_sec: float):
    """A MetaSchedule builder over ONE pool of worker processes kept for the whole run, with a per-candidate
    timeout.

    LocalBuilder starts a fresh worker pool for every batch (against a slow memory leak of long-lived
    workers), and every new worker pays ``import tvm`` (10-20 s on a loaded 2-core machine): with
    16-candidate batches that start-up is most of a batch. A run here is a handful of batches, so the pool is
    kept; the work per candidate is LocalBuilder's own (``local_builder._worker_func``: the collector's
    ``f_build``, MetaSchedule's ``default_export``), and a candidate that takes longer than ``timeout_sec``
    to compile is killed and counted as a failed build, exactly as LocalBuilder does. Call ``close()``."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
    from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

    from .collect import _make_f_build

    f_build = _make_f_build()

    @derived_object
    class PoolBuilder(PyBuilder):
        def __init__(self):
            super().__init__()
            self.pool = None

        def build(self, build_inputs):
            if self.pool is None:
                self.pool = PopenPoolExecutor(max_workers=max_workers, timeout=timeout_sec)
            results = []
            args = [(f_build, None, b.mod, b.target, _serialize_params(b.params)) for b in build_inputs]
            for r in self.pool.map_with_error_catching(lambda x: _worker_func(*x), args):
                if r.status == StatusKind.COMPLETE:
                    results.append(BuilderResult(r.value, None))
                elif r.status == StatusKind.TIMEOUT:
                    results.append(BuilderResult(None, f"PoolBuilder: Timeout, killed after {timeout_sec} seconds"))
                else:
                    results.append(BuilderResult(None, "PoolBuilder: An exception occurred\n" + str(r.value)))
            return results

        def close(self):
            if self.pool is not None:
                with contextlib.suppress(Exception):
                    self.pool.shutdown()
                self.pool = None

    return PoolBuilder()


def _make_inprocess_builder():
    """A MetaSchedule builder that compiles in the tuning process, one candidate after another: the fastest
    for small workloads (tests), but with NO timeout (a candidate LLVM takes minutes to compile blocks the
    run). Runs the collector's ``f_build`` and MetaSchedule's ``default_export``."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import default_export

    from .collect import _make_f_build

    f_build = _make_f_build()

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):
            results = []
            for bi in build_inputs:
                try:
                    results.append(BuilderResult(default_export(f_build(bi.mod, bi.target, None)), None))
                except Exception as e:  # a candidate that does not compile is a failed trial
                    results.append(BuilderResult(None, f"InProcessBuilder: {type(e).__name__}: {e}"))
            return results

    return InProcessBuilder()


BUILDERS = ("pool", "inprocess", "local")


def _builder_runner(ms, settings: dict):
    from .collect import _make_f_build

    if settings["builder"] == "pool":
        builder = _make_pool_builder(settings["builder_workers"], settings["builder_timeout_s"])
    elif settings["builder"] == "inprocess":
        builder = _make_inprocess_builder()
    elif settings["builder"] == "local":
        builder = ms.builder.LocalBuilder(
            max_workers=settings["builder_workers"], timeout_sec=settings["builder_timeout_s"],
            f_build=_make_f_build())
    else:
        raise ValueError(f"builder must be one of {', '.join(BUILDERS)}")
    runner = ms.runner.LocalRunner(
        timeout_sec=settings["runner_timeout_s"],
        evaluator_config=ms.runner.EvaluatorConfig(
            number=settings["number"], repeat=settings["repeat"], min_repeat_ms=settings["min_repeat_ms"],
            enable_cpu_cache_flush=False))
    return builder, runner


def _make_baseline(ms, arm: str, seed: int, num_tuning_cores: int):
    if arm == "xgb":
        return "xgb"  # collect._tune_one builds MetaSchedule's default XGBModel
    if arm == "random":
        return ms.cost_model.RandomModel(seed=seed)
    m = re.fullmatch(r"xgb-w(\d+)", arm)
    if m:  # XGBModel trained from the first measurements instead of after 100
        return ms.cost_model.XGBModel(num_warmup_samples=int(m.group(1)), num_tuning_cores=num_tuning_cores)
    raise ValueError(f"unknown baseline {arm!r}; use xgb, random or xgb-wN")


def _tune_run(ms, tvm, w, mod, tvm_target, arm: dict, seed: int, run_dir: Path, settings: dict,
              key: dict, progress: bool, adapters: list | None = None) -> dict:
    """Tune ``w`` once with one arm; returns the run summary (also ``run_dir/run.json``).
    ``adapters``: when a list, the model arm's adapter is built with ``capture=True`` and appended."""
    from .collect import DB_RECORD, DB_WORKLOAD, _make_counter_class, _tune_one, _write_json_atomic

    rj = run_dir / RUN_JSON
    if rj.exists() and (run_dir / DB_RECORD).exists() and adapters is None:
        with contextlib.suppress(Exception):
            prev = json.loads(rj.read_text())
            if prev.get("key") == key:
                log.info("%s / %s / seed %d: reusing %s", w.name, arm["label"], seed, run_dir)
                return prev
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    np.random.seed(seed)  # MetaSchedule's XGB/random models draw from numpy's global RNG
    adapter = None
    if arm["type"] == "model":
        adapter = ranker_cost_model(arm["model"], online=settings["online"], min_samples=settings["min_samples"],
                                    label=arm["label"], capture=adapters is not None)
        if adapters is not None:
            adapters.append(adapter)
        cost_model = adapter
    else:
        cost_model = _make_baseline(ms, arm["label"], seed, settings["num_tuning_cores"])
    database = ms.database.JSONDatabase(
        path_workload=str(run_dir / DB_WORKLOAD), path_tuning_record=str(run_dir / DB_RECORD),
        allow_missing=True, module_equality="structural")
    counter = _make_counter_class()(f"{w.name}/{arm['label']}/s{seed}", w.flops, progress)
    callbacks = list(ms.measure_callback.MeasureCallback.create("default")) + [counter]
    builder, runner = _builder_runner(ms, settings)
    log.info("%s / %s / seed %d: tuning %d trials", w.name, arm["label"], seed, settings["trials"])
    t0 = counter.t0 = time.time()
    _tune_one(ms, tvm, mod, _safe(w.name), tvm_target, str(run_dir / "logs"), settings["trials"],
              settings["trials_per_iter"], builder, runner, database, cost_model,
              settings["num_tuning_cores"], callbacks, settings["population_size"], seed)
    wall = time.time() - t0
    with contextlib.suppress(Exception):
        runner.pool.shutdown()
    if hasattr(builder, "close"):
        builder.close()
    lat = _read_run_records(run_dir)
    # seconds since the start at which each record's batch had been measured
    t_rec: list[float] = []
    for b in counter.batches:
        t_rec.extend([round(b["t"] - t0, 3)] * b["n"])
    if len(t_rec) != len(lat):  # should not happen; keep the curve usable
        log.warning("%s: %d records but %d measured in batches", run_dir, len(lat), len(t_rec))
        t_rec = (t_rec + [round(wall, 3)] * len(lat))[: len(lat)]
    bsf = _best_so_far(lat)
    res = {
        "key": key, "workload": w.name, "arm": arm["label"], "seed": seed, "run_dir": str(run_dir),
        "n_trials": len(lat), "n_failed": sum(x is None for x in lat), "wall_s": round(wall, 3),
        "latencies_s": lat, "best_so_far_s": bsf, "t_s": t_rec,
        "final_db_latency_s": bsf[-1] if bsf else None,
        "cost_model": adapter.stats() if adapter is not None else {"kind": arm["label"]},
    }
    _write_json_atomic(rj, res)
    return res


# ============================================================================================
# re-measurement
# ============================================================================================
def _compile_best(ms, tvm, mod, tvm_target, run_dir: Path):
    """(runtime module, arg infos) of the best record of a run database; None when it has none."""
    from .collect import DB_RECORD, DB_WORKLOAD, _make_f_build

    db = ms.database.JSONDatabase(path_workload=str(run_dir / DB_WORKLOAD),
                                  path_tuning_record=str(run_dir / DB_RECORD), allow_missing=False,
                                  module_equality="structural")
    sch = ms.tir_integration.compile_tir(db, mod, tvm_target)
    if sch is None:
        return None
    # the arguments as the runner allocated them (layout-rewritten weights included)
    infos = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    return _make_f_build()(sch.mod, tvm_target, None), infos


def _time_fn(rt_mod, infos, dev, min_repeat_ms: int, seed: int = 0):
    import tvm

    rng = np.random.default_rng(seed)
    args = [tvm.runtime.tensor(rng.uniform(-1, 1, size=[int(x) for x in a.shape]).astype(str(a.dtype)), dev)
            for a in infos]
    target = rt_mod if hasattr(rt_mod, "time_evaluator") else rt_mod.mod
    name = getattr(target, "entry_name", None) or "main"
    f = target.time_evaluator(name, dev, number=1, repeat=1, min_repeat_ms=min_repeat_ms)
    return lambda: float(f(*args).mean)


def _remeasure(ms, tvm, mod, tvm_target, runs: list[dict], rounds: int, min_repeat_ms: int) -> None:
    """Fill ``run["remeasured_s"]`` (one time per round) and ``run["remeasured_latency_s"]`` (their median).
    Rounds are interleaved over the runs so that load drift affects every run alike."""
    dev = tvm.cpu(0)
    timers: list = []
    for r in runs:
        r["remeasured_s"] = []
        r["remeasured_latency_s"] = None
        try:
            built = _compile_best(ms, tvm, mod, tvm_target, Path(r["run_dir"])) if r["final_db_latency_s"] else None
            timers.append(_time_fn(built[0], built[1], dev, min_repeat_ms) if built is not None else None)
        except Exception as e:  # a run whose best program cannot be rebuilt is reported, not fatal
            log.warning("%s: cannot rebuild/time the best program: %s", r["run_dir"], e)
            r["remeasure_error"] = f"{type(e).__name__}: {e}"
            timers.append(None)
    for r, t in zip(runs, timers):  # warm-up; a program that fails to run is reported
        if t is None:
            continue
        try:
            t()
        except Exception as e:
            log.warning("%s: best program failed to run: %s", r["run_dir"], e)
            r["remeasure_error"] = f"{type(e).__name__}: {e}"
    timers = [None if "remeasure_error" in r else t for r, t in zip(runs, timers)]
    for _ in range(rounds):
        for r, t in zip(runs, timers):
            if t is not None:
                r["remeasured_s"].append(t())
    for r in runs:
        if r["remeasured_s"]:
            r["remeasured_latency_s"] = float(np.median(r["remeasured_s"]))


# ============================================================================================
# metrics
# ============================================================================================
def _trials_to(bsf: list, t_s: list, threshold: float) -> tuple[int | None, float | None]:
    for i, b in enumerate(bsf):
        if b is not None and b <= threshold:
            return i + 1, t_s[i] if i < len(t_s) else None
    return None, None


def _stats(xs: list) -> dict:
    v = np.asarray([x for x in xs if x is not None], np.float64)
    if not v.size:
        return {"mean": None, "std": None, "min": None, "max": None, "median": None, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0, "min": float(v.min()),
            "max": float(v.max()), "median": float(np.median(v)), "n": int(v.size)}


def _median_with_inf(xs: list) -> float | None:
    """Median where None (not reached) counts as +inf; None when the median itself is not reached."""
    if not xs:
        return None
    m = float(np.median(np.asarray([math.inf if x is None else float(x) for x in xs])))
    return None if not math.isfinite(m) else m


def _workload_metrics(runs: list[dict], arms: list[str]) -> dict:
    dbs = [r["final_db_latency_s"] for r in runs if r["final_db_latency_s"]]
    rms = [r["remeasured_latency_s"] for r in runs if r.get("remeasured_latency_s")]
    best_db = min(dbs) if dbs else None
    best_rm = min(rms) if rms else None
    for r in runs:
        r["ratio_db"] = r["final_db_latency_s"] / best_db if best_db and r["final_db_latency_s"] else None
        r["ratio"] = r["remeasured_latency_s"] / best_rm if best_rm and r.get("remeasured_latency_s") else None
        tr, ts = _trials_to(r["best_so_far_s"], r["t_s"], best_db * (1 + WITHIN)) if best_db else (None, None)
        r["trials_to_5pct"], r["seconds_to_5pct"] = tr, ts
    summary = {}
    for a in arms:
        rs = [r for r in runs if r["arm"] == a]
        summary[a] = {
            "ratio": _stats([r["ratio"] for r in rs]),
            "ratio_db": _stats([r["ratio_db"] for r in rs]),
            "latency_s": _stats([r.get("remeasured_latency_s") for r in rs]),
            "db_latency_s": _stats([r["final_db_latency_s"] for r in rs]),
            "reached_5pct": sum(r["trials_to_5pct"] is not None for r in rs),
            "n_runs": len(rs),
            "trials_to_5pct_median": _median_with_inf([r["trials_to_5pct"] for r in rs]),
            "seconds_to_5pct_median": _median_with_inf([r["seconds_to_5pct"] for r in rs]),
            "trials_to_5pct": [r["trials_to_5pct"] for r in rs],
            "seconds_to_5pct": [r["seconds_to_5pct"] for r in rs],
            "wall_s_mean": float(np.mean([r["wall_s"] for r in rs])) if rs else None,
            "cost_model_s_mean": float(np.mean([r["cost_model"].get("predict_s", 0) + r["cost_model"].get(
                "update_s", 0) for r in rs])) if rs else None,
        }
    return {"best_db_latency_s": best_db, "best_remeasured_latency_s": best_rm, "arms": summary}


def _geomean(xs: list) -> float | None:
    v = np.asarray([x for x in xs if x], np.float64)
    return float(np.exp(np.log(v).mean())) if v.size else None


def _overall(per_wl: list[dict], arms: list[str]) -> dict:
    out = {}
    for a in arms:
        ratios, ratios_db, worst, reached, n, trials, secs, wins = [], [], [], 0, 0, [], [], 0
        for wl in per_wl:
            s = wl["metrics"]["arms"][a]
            ratios.append(s["ratio"]["mean"])
            ratios_db.append(s["ratio_db"]["mean"])
            worst.append(s["ratio"]["max"])
            reached += s["reached_5pct"]
            n += s["n_runs"]
            trials += s["trials_to_5pct"]
            secs += s["seconds_to_5pct"]
            means = {b: wl["metrics"]["arms"][b]["ratio"]["mean"] for b in arms}
            valid = {b: m for b, m in means.items() if m is not None}
            if valid and means[a] is not None and means[a] <= min(valid.values()) + 1e-12:
                wins += 1
        out[a] = {
            "geomean_ratio": _geomean(ratios), "geomean_ratio_db": _geomean(ratios_db),
            "worst_ratio": max([x for x in worst if x is not None], default=None),
            "reached_5pct": reached, "n_runs": n,
            "trials_to_5pct_median": _median_with_inf(trials),
            "seconds_to_5pct_median": _median_with_inf(secs),
            "best_mean_ratio_on": wins,
        }
    return out



BASELINE_TRIAL_SHARE = 0.40  # issue #7: trained models reach the baselines' final latency in <= 40% of their trials
PRUNED_WITHIN = 0.05  # issue #7: the pruned-data model within 5% of the full-data model's final latency


def _model_pairs(model_labels: list[str]) -> list[tuple[str, str]]:
    """(full, pruned) arm pairs by label: ``<name>-full`` with ``<name>-pruned`` and with every
    ``<name>-pruned-<tag>`` (a pruned set remade later, e.g. ``attn-pruned-v3``), in the order given."""
    pairs = []
    for a in model_labels:
        if not a.endswith("-full"):
            continue
        stem = a[: -len("-full")] + "-pruned"
        pairs += [(a, b) for b in model_labels if b == stem or b.startswith(stem + "-")]
    return pairs


def _acceptance(per_wl: list[dict], model_labels: list[str], baselines: list[str], trials: int) -> dict:
    """The two checks of issue #7, from the run data.

    1. Speed-up over the baselines: for each workload, seed, model arm ``a`` and baseline ``b``, the first trial
       at which ``a``'s best database latency is at or below ``b``'s final best database latency (same workload,
       same seed), as a share of ``b``'s trials (``None`` = never reached within the budget; counts as > 1).
       Reported as the median share per (arm, baseline) and the number of runs at or under 40%.
    2. Pruned vs full data: for each ``<name>-full`` / ``<name>-pruned`` pair, the geometric mean over workloads
       of (mean re-measured final latency of the pruned arm) / (that of the full arm); passes at <= 1.05.
    """
    share: dict = {}
    for a in model_labels:
        for b in baselines:
            vals = []
            for wl in per_wl:
                runs = {(r["arm"], r["seed"]): r for r in wl["runs"]}
                for (arm, seed), rb in runs.items():
                    if arm != b or (a, seed) not in runs or not rb["final_db_latency_s"]:
                        continue
                    ra = runs[(a, seed)]
                    tr, _ = _trials_to(ra["best_so_far_s"], ra["t_s"], rb["final_db_latency_s"])
                    vals.append(None if tr is None else tr / max(rb["n_trials"], 1))
            finite = [v for v in vals if v is not None]
            share[f"{a} vs {b}"] = {
                "arm": a, "baseline": b, "n": len(vals), "shares": vals,
                "median_share": _median_with_inf(vals),
                "within_share": sum(v <= BASELINE_TRIAL_SHARE for v in finite),
                "reached": len(finite),
            }
    pairs = []
    for full, pruned in _model_pairs(model_labels):
        rats = []
        for wl in per_wl:
            lf = wl["metrics"]["arms"][full]["latency_s"]["mean"]
            lp = wl["metrics"]["arms"][pruned]["latency_s"]["mean"]
            if lf and lp:
                rats.append(lp / lf)
        g = _geomean(rats)
        pairs.append({"full": full, "pruned": pruned, "per_workload": rats, "geomean": g,
                      "passes": g is not None and g <= 1 + PRUNED_WITHIN})
    return {"trials": trials, "share_limit": BASELINE_TRIAL_SHARE, "baseline_share": share, "pruned_vs_full": pairs}


def _acceptance_md(acc: dict) -> list[str]:
    lim = acc["share_limit"]
    lines = ["## The issue's two checks", "",
             f"**Trials to the baselines' final latency.** For each workload and seed: the first trial at which the "
             f"model's best latency reaches the baseline's final best latency (same seed), as a share of the "
             f"baseline's {acc['trials']} trials. Goal: at most {lim:.0%}.", "",
             f"| model | baseline | median share of trials | runs at <= {lim:.0%} | runs that reached it at all |",
             "|---|---|---|---|---|"]
    for v in acc["baseline_share"].values():
        med = v["median_share"]
        lines.append(f"| `{v['arm']}` | `{v['baseline']}` | {'not reached' if med is None else f'{med:.0%}'} | "
                     f"{v['within_share']}/{v['n']} | {v['reached']}/{v['n']} |")
    lines += ["", f"**Pruned vs full training data.** Geometric mean over workloads of the pruned-data model's mean "
              f"re-measured final latency over the full-data model's. Goal: at most {1 + PRUNED_WITHIN:.2f}.", "",
              "| pair | geomean latency ratio | per workload | within 5% |", "|---|---|---|---|"]
    if not acc["pruned_vs_full"]:
        lines.append("| no pair: name the arms `<name>-full` and `<name>-pruned` (or `<name>-pruned-<tag>`) | | | |")
    for p in acc["pruned_vs_full"]:
        per = ", ".join(f"{x:.3f}" for x in p["per_workload"])
        g = "n/a" if p["geomean"] is None else f"{p['geomean']:.3f}"
        lines.append(f"| `{p['pruned']}` / `{p['full']}` | {g} | {per} | {'yes' if p['passes'] else 'no'} |")
    return lines + [""]

# ============================================================================================
# report
# ============================================================================================
def _fmt_us(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e6:.1f}"


def _fmt_ratio(st: dict) -> str:
    if st["mean"] is None:
        return "n/a"
    if st["n"] == 1:
        return f"{st['mean']:.3f}"
    return f"{st['mean']:.3f} ± {st['std']:.3f} [{st['min']:.3f}, {st['max']:.3f}]"


def _fmt_med(x, total: int | None = None, unit: str = "") -> str:
    if x is None:
        return f">{total}" if total is not None else "not reached"
    return f"{x:.0f}{unit}" if unit == "" else f"{x:.1f}{unit}"


def _plots(out: Path, per_wl: list[dict], arms: list[str]) -> list[str]:
    import matplotlib

    from .storage import atomic_savefig, new_figure

    files = []
    n = len(per_wl)
    cols = min(3, n)
    rows = -(-n // cols)
    colors = {a: matplotlib.colormaps["tab10"](i % 10) for i, a in enumerate(arms)}
    for xkey, fname, xlabel in (("trial", "verify_curves.png", "trials"),
                                ("time", "verify_curves_time.png", "seconds")):
        fig, axes = new_figure(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
        for ax, wl in zip(axes.ravel(), per_wl):
            best = wl["metrics"]["best_db_latency_s"]
            for a in arms:
                rs = [r for r in wl["runs"] if r["arm"] == a and r["best_so_far_s"]]
                if not rs or not best:
                    continue
                if xkey == "trial":
                    L = max(len(r["best_so_far_s"]) for r in rs)
                    ys = np.full((len(rs), L), np.nan)
                    for i, r in enumerate(rs):
                        v = np.asarray([np.nan if b is None else b / best for b in r["best_so_far_s"]])
                        ys[i, : v.size] = v
                        ys[i, v.size:] = v[-1] if v.size else np.nan
                    x = np.arange(1, L + 1)
                    with np.errstate(all="ignore"), contextlib.suppress(Exception):
                        import warnings

                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            ax.plot(x, np.nanmedian(ys, 0), color=colors[a], label=a)
                            ax.fill_between(x, np.nanmin(ys, 0), np.nanmax(ys, 0), color=colors[a], alpha=0.15)
                else:
                    for i, r in enumerate(rs):
                        v = [np.nan if b is None else b / best for b in r["best_so_far_s"]]
                        ax.step(r["t_s"], v, where="post", color=colors[a], alpha=0.8,
                                label=a if i == 0 else None)
            ax.axhline(1 + WITHIN, color="grey", ls=":", lw=1)
            ax.set_yscale("log")
            ax.set_title(wl["name"], fontsize=9)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("best latency / best of all runs")
            ax.legend(fontsize=7)
        for ax in axes.ravel()[n:]:
            ax.axis("off")
        fig.suptitle("best-so-far latency (database); " + ("median and min-max over seeds" if xkey == "trial"
                                                             else "one line per seed"), fontsize=10)
        fig.tight_layout()
        atomic_savefig(fig, out / fname, dpi=110)
        files.append(fname)
    return files


def _report_md(res: dict, figures: list[str]) -> str:
    s = res["settings"]
    arms = res["arms"]
    T = s["trials"]
    lines = [
        "# Cost-model verification inside MetaSchedule",
        "",
        "Each held-out workload is tuned with each cost model at the same trial budget, search settings and "
        "seeds. Ratios are relative to the best latency any run of that workload found (1.000 = the best; "
        "lower is better). `ratio` uses the re-measured latency of each run's best program (median of "
        f"{s['remeasure_rounds']} interleaved `time_evaluator` rounds); `ratio (db)` uses the latency "
        "MetaSchedule recorded while tuning. *Trials / seconds to 5%*: first trial at which a run's best "
        "database latency is within 5% of the best database latency any run found (median over seeds, "
        "a run that never got there counts as not reached).",
        "",
        "Reproduce:",
        "",
        "```",
        res["command"],
        "```",
        "",
    ]
    if res.get("notes"):
        lines += [res["notes"].rstrip(), ""]
    hw = res.get("hardware", {})
    lines += [
        f"Hardware: {hw.get('cpu_model')} ({hw.get('affinity_cores')} cores usable), target "
        f"`{json.dumps(res['target'])}`, TVM {hw.get('tvm_version')}. Started {res['started_at']}, "
        f"{res['wall_seconds'] / 60:.1f} min in this invocation (finished runs are reused when a verify resumes); "
        f"tuning time summed over all runs: "
        f"{sum(r['wall_s'] for wl in res['workloads'] for r in wl['runs']) / 60:.1f} min.",
        "",
        f"Settings: {T} trials per run, {s['trials_per_iter']} per search round, population "
        f"{s['population_size']}, seeds {res['seeds']}, num_tuning_cores={s['num_tuning_cores']}, runner "
        f"number={s['number']} repeat={s['repeat']} min_repeat_ms={s['min_repeat_ms']}; models "
        + ("fine-tuned online on each run's own measurements once " + str(s["min_samples"])
           + " valid ones exist" if s["online"] else "used as pre-trained (no online update)")
        + ".",
        "",
        "Arms:",
        "",
    ]
    for a in res["models"]:
        lines.append(f"- `{a['label']}`: {a['kind']} ranker from `{a['dir']}` (feature version "
                     f"`{a['feature_version']}`, training data hash `{a['data_manifest_hash']}`)")
    for b in res["baselines"]:
        desc = {"xgb": "MetaSchedule's default XGBModel (predicts random scores until 100 measurements exist, so "
                       "at budgets under ~100 trials it behaves like `random`)",
                "random": "MetaSchedule's RandomModel (seeded with the run's seed)"}.get(
            b, "MetaSchedule's XGBModel with num_warmup_samples=" + b.split("-w")[-1])
        lines.append(f"- `{b}`: {desc}")
    lines += ["", "## Overall", "",
              "| arm | geomean ratio | geomean ratio (db) | worst ratio | runs within 5% | median trials to 5% "
              "| median seconds to 5% | best mean ratio on |",
              "|---|---|---|---|---|---|---|---|"]
    for a in arms:
        o = res["overall"][a]
        lines.append(
            f"| `{a}` | {o['geomean_ratio'] or float('nan'):.3f} | {o['geomean_ratio_db'] or float('nan'):.3f} | "
            f"{o['worst_ratio'] or float('nan'):.3f} | {o['reached_5pct']}/{o['n_runs']} | "
            f"{_fmt_med(o['trials_to_5pct_median'], T)} | {_fmt_med(o['seconds_to_5pct_median'], None, ' s')} | "
            f"{o['best_mean_ratio_on']}/{len(res['workloads'])} workloads |")
    if res.get("acceptance"):
        lines += [""] + _acceptance_md(res["acceptance"])
    else:
        lines.append("")
    lines += ["## Per workload", ""]
    for wl in res["workloads"]:
        m = wl["metrics"]
        lines += [f"### {wl['name']}", "",
                  f"{wl['op_class']}, {wl['flops'] / 1e6:.1f} MFLOP; best latency any run found: "
                  f"{_fmt_us(m['best_db_latency_s'])} us (database), {_fmt_us(m['best_remeasured_latency_s'])} us "
                  "(re-measured).", "",
                  "| arm | ratio (mean ± sd [min, max]) | ratio (db) | re-measured us (median) | within 5% | "
                  "trials to 5% (per seed) | seconds to 5% (per seed) | tuning s | cost-model s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for a in arms:
            s_ = m["arms"][a]
            tr = ", ".join("–" if x is None else str(x) for x in s_["trials_to_5pct"])
            ts = ", ".join("–" if x is None else f"{x:.0f}" for x in s_["seconds_to_5pct"])
            lines.append(
                f"| `{a}` | {_fmt_ratio(s_['ratio'])} | {_fmt_ratio(s_['ratio_db'])} | "
                f"{_fmt_us(s_['latency_s']['median'])} | {s_['reached_5pct']}/{s_['n_runs']} | {tr} | {ts} | "
                f"{s_['wall_s_mean']:.0f} | {s_['cost_model_s_mean']:.1f} |")
        lines.append("")
    lines += ["## Curves", ""] + [f"![{f}]({f})" for f in figures] + [""]
    lines += [
        "## Caveats", "",
        "- Database latencies and re-measurements of the same program differ by 5-40% on this shared 2-core "
        "machine; look at the spread over seeds before reading a difference into a ratio.",
        "- `xgb` at budgets below its 100-sample warm-up is MetaSchedule's default behaviour, not a trained XGB.",
        "- The models were trained on other workloads (the `sample` set); these workloads are held out.",
        "",
        f"Raw data: `verify.json` (every run's per-trial latencies and times); run databases under "
        f"`{res['runs_dir']}`.",
        "",
    ]
    return "\n".join(lines)


# ============================================================================================
# verify
# ============================================================================================
def _resolve_workloads(workloads) -> list:
    from .workloads import Workload, get_workloads

    if isinstance(workloads, (str, os.PathLike)):
        return get_workloads(workloads)
    out = []
    for w in workloads:
        if isinstance(w, Workload):
            out.append(w)
        else:
            out.extend(get_workloads(w))
    return out


def _arm_labels(model_dirs: list[Path]) -> list[str]:
    labels = [Path(d).name for d in model_dirs]
    if len(set(labels)) < len(labels):
        labels = ["/".join(Path(d).parts[-2:]) for d in model_dirs]
    if len(set(labels)) < len(labels):
        labels = [f"{lab}#{i}" for i, lab in enumerate(labels)]
    return labels


def _default_command(model_dirs, workloads, trials, seeds, out, kw: dict) -> str:
    parts = ["python", "-m", "tenset_curate.verifier"]
    for d in model_dirs:
        parts += ["--model", str(d)]
    if isinstance(workloads, (str, os.PathLike)):
        wl = os.fspath(workloads)
    else:
        wl = ",".join(w if isinstance(w, str) else w.name for w in workloads)
    seeds_arg = str(len(seeds)) if list(seeds) == list(range(len(seeds))) else ",".join(map(str, seeds)) + (
        "," if len(seeds) == 1 else "")
    parts += ["--workloads", wl, "--trials", str(trials), "--seeds", seeds_arg, "--out", str(out)]
    for k, v in kw.items():
        if v is None:
            continue
        if isinstance(v, bool):
            if not v:
                parts.append(f"--no-{k.replace('_', '-')}")
        elif isinstance(v, (list, tuple)):
            parts += [f"--{k.replace('_', '-')}", ",".join(map(str, v))]
        else:
            parts += [f"--{k.replace('_', '-')}", str(v)]
    return shlex.join(parts)


def verify(
    model_dirs: str | os.PathLike | Iterable[str | os.PathLike] = (),
    workloads: str | os.PathLike | Iterable = "heldout",
    trials: int = 64,
    seeds: int | Iterable[int] = 3,
    out: str | os.PathLike = "reports",
    *,
    baselines: Sequence[str] = BASELINES,
    target: str | dict = "auto",
    trials_per_iter: int = 16,
    population_size: int = 128,
    num_tuning_cores: int = 1,
    online: bool = True,
    min_samples: int = 16,
    remeasure_rounds: int = 5,
    remeasure_min_repeat_ms: int = 50,
    builder: str = "pool",
    number: int = 3,
    repeat: int = 3,
    min_repeat_ms: int = 20,
    builder_workers: int | None = None,
    builder_timeout_s: float = 60.0,
    runner_timeout_s: float = 30.0,
    runs_dir: str | os.PathLike | None = None,
    command: str | None = None,
    notes: str | None = None,
    progress: bool = True,
) -> dict:
    """Tune ``workloads`` with each model in ``model_dirs`` and each of ``baselines`` as MetaSchedule's cost
    model (see the module docstring). ``workloads``: a set name (``heldout``), a workload name, a
    comma-separated list, a JSON file of names, or a list of names / ``Workload`` objects. ``seeds``: a count
    (seeds 0..n-1) or the seeds. Returns a compact summary; ``<out>/verify.json`` has everything."""
    from .features import FEATURE_VERSION
    from .model import load_model

    from .storage import check_int, file_in_the_way

    if isinstance(model_dirs, (str, os.PathLike)):
        model_dirs = [model_dirs]
    model_dirs = [Path(d) for d in model_dirs]
    twice = sorted({str(d) for d in model_dirs if [q.resolve() for q in model_dirs].count(d.resolve()) > 1})
    if twice:  # tuned twice, as #0 and #1, at twice the cost
        raise ValueError(f"--model {', '.join(twice)} given more than once")
    if isinstance(seeds, str):  # "abc" was read one seed per character
        raise ValueError(f"seeds {seeds!r}: a number of seeds, or a list of seeds")
    seed_list = list(range(int(seeds))) if isinstance(seeds, (int, np.integer)) else [int(s) for s in seeds]
    for name, v in (("trials", trials), ("trials_per_iter", trials_per_iter), ("population_size", population_size)):
        check_int(name, v, 1)  # past 64 bits it failed in TVM's FFI, after the models loaded
    if not seed_list:
        raise ValueError(f"seeds {seeds!r}: at least one seed")
    wls = _resolve_workloads(workloads)
    if not wls:
        raise ValueError(f"no workloads in {workloads!r}")
    out = Path(out)  # made once the models loaded and the target resolved: a refused run leaves no folder
    for d in (out, *([Path(runs_dir)] if runs_dir is not None else [])):
        if file_in_the_way(d):  # a FileExistsError traceback, before tuning
            raise ValueError(f"{d}: a file is in the way of the folder the report goes into")
    runs_root = Path(runs_dir) if runs_dir is not None else out / "verify-runs"
    t_start = time.time()
    from .collect import _now, _register_x86_intrinsics_only, detect_hardware, resolve_target

    started = _now()
    extra = dict(baselines=list(baselines), target=target if isinstance(target, str) else json.dumps(target),
                 trials_per_iter=trials_per_iter, population_size=population_size, online=online,
                 min_samples=min_samples, remeasure_rounds=remeasure_rounds, builder=builder,
                 runs_dir=str(runs_dir) if runs_dir is not None else None)
    defaults = dict(baselines=list(BASELINES), target="auto", trials_per_iter=16, population_size=128, online=True,
                    min_samples=16, remeasure_rounds=5, builder="pool", runs_dir=None)
    cmd = command or _default_command(model_dirs, workloads, trials, seed_list, out,
                                      {k: v for k, v in extra.items() if defaults.get(k) != v})

    # load the models first: a wrong feature version fails before any tuning
    models = []
    labels = _arm_labels(model_dirs)
    for d, lab in zip(model_dirs, labels):
        m = load_model(d, expected_feature_version=FEATURE_VERSION, progress=False)
        models.append({"label": lab, "dir": str(d), "kind": m.kind, "feature_version": m.feature_version,
                       "data_manifest_hash": m.data_manifest_hash, "model": m, "type": "model"})
    arms = [*models, *({"label": b, "type": "baseline"} for b in baselines)]
    arm_labels = [a["label"] for a in arms]
    if len(set(arm_labels)) != len(arm_labels):
        raise ValueError(f"arm names collide: {arm_labels}")

    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from .collect import build_prim_func_checked

    _register_x86_intrinsics_only()
    target_dict = resolve_target(target)
    tvm_target = tvm.target.Target(target_dict)
    hardware = detect_hardware(target_dict)
    hardware.pop("all_cpu_flags", None)
    settings = dict(trials=int(trials), trials_per_iter=int(min(trials_per_iter, trials)),
                    population_size=int(population_size), num_tuning_cores=int(num_tuning_cores),
                    online=bool(online), min_samples=int(min_samples), remeasure_rounds=int(remeasure_rounds),
                    remeasure_min_repeat_ms=int(remeasure_min_repeat_ms), builder=str(builder), number=int(number),
                    repeat=int(repeat), min_repeat_ms=int(min_repeat_ms), builder_workers=int(builder_workers or os.cpu_count() or 1),
                    builder_timeout_s=float(builder_timeout_s), runner_timeout_s=float(runner_timeout_s))
    tune_keys = ("trials", "trials_per_iter", "population_size", "num_tuning_cores", "online", "min_samples",
                 "builder", "number", "repeat", "min_repeat_ms")

    out.mkdir(parents=True, exist_ok=True)
    per_wl: list[dict] = []
    res: dict[str, Any] = {}
    for wi, w in enumerate(wls):
        mod = _normalize_mod(build_prim_func_checked(w))
        runs = []
        for seed in seed_list:  # seeds outer, arms inner: machine-load drift spreads over the arms
            for arm in arms:
                key = {**{k: settings[k] for k in tune_keys}, "target": target_dict, "seed": seed,
                       "arm": arm["label"], "workload": w.name,
                       "model": ({"dir": arm["dir"], "data_manifest_hash": arm["data_manifest_hash"],
                                  "mtime": _mtime(arm["dir"])} if arm["type"] == "model" else None)}
                run_dir = runs_root / _safe(w.name) / _safe(arm["label"]) / f"seed{seed}"
                runs.append(_tune_run(ms, tvm, w, mod, tvm_target, arm, seed, run_dir, settings, key, progress))
        log.info("%s: re-measuring %d best programs (%d rounds)", w.name, len(runs), settings["remeasure_rounds"])
        _remeasure(ms, tvm, mod, tvm_target, runs, settings["remeasure_rounds"], settings["remeasure_min_repeat_ms"])
        metrics = _workload_metrics(runs, arm_labels)
        per_wl.append({"name": w.name, "op_class": w.op_class, "op": w.op, "flops": w.flops, "args": w.args,
                       "metrics": metrics, "runs": runs})
        res = {
            "version": 1, "command": cmd, "notes": notes, "started_at": started,
            "wall_seconds": round(time.time() - t_start, 1), "complete": wi == len(wls) - 1,
            "settings": settings, "target": target_dict, "hardware": hardware, "seeds": seed_list,
            "arms": arm_labels, "baselines": list(baselines),
            "models": [{k: v for k, v in a.items() if k not in ("model", "type")} for a in models],
            "runs_dir": str(runs_root), "workloads": per_wl, "overall": _overall(per_wl, arm_labels),
            "acceptance": _acceptance(per_wl, [m["label"] for m in models], list(baselines), settings["trials"]),
        }
        # after every workload: the report so far (an interrupted verify leaves a partial report; rerun
        # the same command to resume: finished runs are reused)
        _write_report(out, res, per_wl, arm_labels, len(wls))
    res["wall_seconds"] = round(time.time() - t_start, 1)
    _write_report(out, res, per_wl, arm_labels, len(wls))
    figures = res["figures"]
    return {
        "report": str(out / "verify.md"), "json": str(out / "verify.json"),
        "figures": [str(out / f) for f in figures], "arms": arm_labels, "seeds": seed_list,
        "trials": settings["trials"], "wall_seconds": res["wall_seconds"], "overall": res["overall"],
        "workloads": {wl["name"]: {a: {"ratio_mean": s["ratio"]["mean"], "ratio_db_mean": s["ratio_db"]["mean"],
                                       "reached_5pct": f"{s['reached_5pct']}/{s['n_runs']}",
                                       "trials_to_5pct_median": s["trials_to_5pct_median"]}
                                   for a, s in wl["metrics"]["arms"].items()} for wl in per_wl},
    }


def _write_report(out: Path, res: dict, per_wl: list[dict], arm_labels: list[str], n_workloads: int) -> None:
    from .collect import _write_json_atomic
    from .storage import atomic_write_text

    res["figures"] = _plots(out, per_wl, arm_labels)
    _write_json_atomic(out / "verify.json", res)
    md = _report_md(res, res["figures"])
    if len(per_wl) < n_workloads:
        md = md.replace("\n", f"\n\n**Partial: {len(per_wl)} of {n_workloads} workloads done.**\n", 1)
    atomic_write_text(out / "verify.md", md)


def rerender(out: str | os.PathLike = "reports") -> str:
    """Rewrite ``<out>/verify.md`` and its plots from ``<out>/verify.json`` (no tuning): recomputes the metrics
    and the issue's checks from the stored runs. Returns the report path."""
    out = Path(out)
    res = json.loads((out / "verify.json").read_text(encoding="utf-8"))
    per_wl = res["workloads"]
    for wl in per_wl:
        wl["metrics"] = _workload_metrics(wl["runs"], res["arms"])
    res["overall"] = _overall(per_wl, res["arms"])
    res["acceptance"] = _acceptance(per_wl, [m["label"] for m in res["models"]], res["baselines"],
                                    res["settings"]["trials"])
    n = len(per_wl) if res.get("complete") else len(per_wl) + 1
    _write_report(out, res, per_wl, res["arms"], n)
    return str(out / "verify.md")


def _mtime(d: str) -> int | None:
    try:
        return max(int(p.stat().st_mtime) for p in Path(d).iterdir())
    except (OSError, ValueError):
        return None


# ============================================================================================
# command line
# ============================================================================================
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tenset_curate.verifier", description=__doc__.split("\n")[0])
    p.add_argument("--model", action="append", default=[], help="trained model directory (repeatable)")
    p.add_argument("--workloads", default="heldout", help="set name, workload name, comma list or JSON file")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--seeds", default="3", help="a count (seeds 0..n-1) or a comma list of seeds")
    p.add_argument("--out", default="reports")
    p.add_argument("--runs-dir", default=None)
    p.add_argument("--baselines", default=",".join(BASELINES), help="comma list of xgb, random, xgb-wN")
    p.add_argument("--target", default="auto")
    p.add_argument("--trials-per-iter", type=int, default=16)
    p.add_argument("--population-size", type=int, default=128)
    p.add_argument("--no-online", action="store_true", help="do not fine-tune the models on measurements")
    p.add_argument("--min-samples", type=int, default=16)
    p.add_argument("--remeasure-rounds", type=int, default=5)
    p.add_argument("--builder", default="pool", choices=list(BUILDERS),
                   help="pool: one worker pool per run with a timeout (default); inprocess: no workers, no "
                        "timeout (fast for tiny workloads); local: MetaSchedule's LocalBuilder")
    p.add_argument("--notes-file", default=None, help="markdown inserted into verify.md (e.g. how models were made)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--rerender", action="store_true",
                   help="only rewrite verify.md and the plots from <out>/verify.json (no tuning)")
    a = p.parse_args(argv)
    if a.rerender:
        print(rerender(a.out))
        return 0
    logging.basicConfig(level=logging.WARNING if a.quiet else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s")
    seeds: Any = int(a.seeds) if a.seeds.isdigit() else [int(s) for s in a.seeds.split(",") if s.strip()]
    notes = Path(a.notes_file).read_text(encoding="utf-8") if a.notes_file else None
    res = verify(a.model, a.workloads, trials=a.trials, seeds=seeds, out=a.out, runs_dir=a.runs_dir,
                 baselines=[b for b in a.baselines.split(",") if b], target=a.target,
                 trials_per_iter=a.trials_per_iter, population_size=a.population_size, online=not a.no_online,
                 min_samples=a.min_samples, remeasure_rounds=a.remeasure_rounds, builder=a.builder, notes=notes,
                 command=shlex.join(["python", "-m", "tenset_curate.verifier", *(argv if argv is not None
                                                                                 else sys.argv[1:])]),
                 progress=not a.quiet)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
