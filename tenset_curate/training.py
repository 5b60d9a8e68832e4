"""Glue between a dataset + split and the rankers of ``model.py``: arrays in, model directories out.

``train_model`` reads the split's train/valid parts, labels them (TenSet's definition, ``labels.py``), featurizes
them (``features.py``, the one featurizer shared with the TVM verifier) and trains; ``evaluate_model`` scores a
part with ``metrics.py``. A model directory records the feature version and a hash of the training data's
manifest and split; loading refuses another feature version.
"""
from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import numpy as np
import polars as pl

from .features import (FEATURE_VERSION, RowView, TaskCentredTokens, dataset_operator_classes, featurize,
                       operator_classes, task_relative)
from .labels import with_labels
from .model import _KINDS, DEFAULT_EPOCHS, _task_groups
from .prune import load_records, record_files
from .storage import names_damaged_shard

MODEL_KINDS = ["attention", "mlp", "gbdt"]
PARTS = ("train", "valid", "test")  # the parts of a split a model is scored on
SEEN_TASK_LAMBDARANK_WEIGHT = 0.25  # attention's LambdaRank weight when the test tasks are trained on (see below)


def data_hash(dataset: Path, split: str | None, max_per_task: int | None = None, seed: int = 0,
              include_failed: bool = False) -> str:
    """The training data's identity: the dataset's manifest, the split and, when the programs per task were capped,
    the cap and the seed of its draw; and whether failed records trained."""
    h = hashlib.sha256()
    for p in [Path(dataset) / "manifest.json"] + ([Path(dataset) / "splits" / f"{split}.parquet"] if split else []):
        if p.exists():
            h.update(p.read_bytes())
    if max_per_task is not None:
        h.update(f"max_per_task={max_per_task} seed={seed}".encode())
    if include_failed:
        h.update(b"include_failed")
    return h.hexdigest()[:16]


LABEL_INPUTS = ["record_id", "hardware", "task_id", "is_valid", "mean_cost", "costs"]  # all with_labels reads
OPERATOR_INPUTS = ["workload_name", "workload_key", "source_file"]  # and features.operator_classes


def split_index(dataset: Path, split: str, max_per_task: int | None = None, seed: int = 0,
                tasks_of: str | tuple[str, ...] | None = None, include_failed: bool = False) -> pl.DataFrame:
    """The valid records of a split, light: record_id, hardware, task_id, best_cost, label, part, op_class, in the
    split's order. Reads only the label and operator inputs of the dataset's records (a task's label scale is its
    best valid record, whatever else is kept); ``read_rows`` then reads the whole rows of the ones used.
    ``include_failed``: the failed records too (label 0; TenSet trains and tests on them, labels.py), as asked.

    ``max_per_task`` keeps at most that many records of each (hardware, task) on the training side (train and valid
    parts together), drawn by ``splits._u01(record_id, seed)``, so the draw does not depend on shards or order; the
    test part is never cut. TenSet holds about 2,300 tasks of up to 4,000 programs per GPU, more than a 24 GiB
    machine trains on at once (``check_training_memory``), and on tasks, operators or GPUs a model has not seen, its
    PCA with 90 programs a task matched that with all of them, where fewer tasks lost (reports/model_splits.md,
    "Programs per task at scale"). ``tasks_of``: only the (hardware, task) pairs with a record in that part (or any
    of those parts), every record of theirs: what scoring a part, or training, needs, since the within-task
    statistics of ``arrays`` see a task's records whatever their part."""
    from .splits import _u01, read_split

    sp = read_split(dataset, split).select("record_id", "part").unique("record_id", keep="first", maintain_order=True)
    files = record_files(dataset)
    labels = (with_labels(pl.scan_parquet(files, hive_partitioning=False).select(LABEL_INPUTS))
              .filter(pl.col("is_valid") | include_failed)
              .select("record_id", "hardware", "task_id", "best_cost", "label")
              .collect().unique("record_id", keep="first", maintain_order=True))  # the costs lists never held
    light = sp.join(labels, on="record_id", how="inner", maintain_order="left")  # the split's order: the rows' order
    if light.is_empty() and sp.height:
        known = sp.join(pl.scan_parquet(files, hive_partitioning=False).select("record_id").collect(),
                        on="record_id", how="semi").height
        raise ValueError(f"split {split} of {dataset}: none of its {sp.height:,} records is a valid record of the "
                         + ("dataset (they all failed when measured)" if known else
                            "dataset: the split was made from another dataset, or before the records were replaced; "
                            "make it again with curate splits make"))
    light = light.select("record_id", "hardware", "task_id", "best_cost", "label", "part")
    ops = task_operator_classes(files, dataset)
    if tasks_of is not None:
        light = tasks_with(light, [tasks_of] if isinstance(tasks_of, str) else list(tasks_of))
    if max_per_task is not None:
        if max_per_task < 2:
            raise ValueError("max_per_task must be at least 2 (a ranking needs two records of a task)")
        side = pl.col("part").is_in(["train", "valid"])
        light = (light.with_columns(pl.Series("u", _u01(light["record_id"], seed, "max-per-task")))
                 .filter(~side | (pl.col("u").rank("ordinal").over("hardware", "task_id", side) <= max_per_task))
                 .drop("u"))
    return light.join(ops, on="task_id", how="left", maintain_order="left")


def task_operator_classes(files: list[Path], dataset: Path | None = None) -> pl.DataFrame:
    """task_id -> op_class, from one record per task (its smallest record_id, the first in a split's order):
    the operator inputs (workload name and key, source file) are read for those records only, not for every record
    (they were two thirds of the light read's memory on 3.4M records)."""
    lf = pl.scan_parquet(files, hive_partitioning=False)
    first = lf.group_by("task_id").agg(pl.col("record_id").min()).collect()["record_id"]
    rows = (lf.filter(pl.col("record_id").is_in(first.implode())).select("record_id", "task_id", *OPERATOR_INPUTS)
            .collect().sort("record_id"))
    return dataset_operator_classes(rows, dataset).select("task_id", "op_class")


def tasks_with(index: pl.DataFrame, parts: list[str]) -> pl.DataFrame:
    """The rows of ``index`` whose (hardware, task) has a record in one of ``parts``, every part of theirs, in order."""
    keys = index.filter(pl.col("part").is_in(parts)).select("hardware", "task_id").unique()
    return index.join(keys, on=["hardware", "task_id"], how="semi", maintain_order="left")


def read_rows(dataset: Path, index: pl.DataFrame) -> pl.DataFrame:
    """The whole records of a ``split_index`` frame, in its order, with its best_cost, label, part and op_class:
    read with a row filter, so records not in ``index`` are never held whole."""
    recs = load_records(dataset, where=pl.col("record_id").is_in(index["record_id"].implode()), sort=False)
    return recs.join(index.select("record_id", "best_cost", "label", "part", "op_class"), on="record_id",
                     how="inner", maintain_order="right")


def labelled_split(dataset: Path, split: str, max_per_task: int | None = None, seed: int = 0,
                   tasks_of: str | tuple[str, ...] | None = None) -> pl.DataFrame:
    """Records joined to their split part, labelled; invalid records dropped (TenSet trains on valid ones). Read in
    two passes (``split_index``, then ``read_rows``) so that only the rows used are ever held whole."""
    return read_rows(dataset, split_index(dataset, split, max_per_task, seed, tasks_of))


BYTES_PER_TRAINING_RECORD = 20_000  # peak RSS per record read by curate train: 17-22 KB (reports/train_memory.md)


def available_memory() -> int | None:
    """Bytes this machine can still give (Linux ``MemAvailable``); None where that is not known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


TRAIN_WAY_OUT = ("Cap the programs per task (curate train --max-per-task N), prune first (curate prune --ratio R), "
                 "train per hardware, or pass --no-memory-check to try anyway.")


def check_training_memory(records: int, what: str, available: int | None = None,
                          way_out: str = TRAIN_WAY_OUT) -> None:
    """Raise MemoryError, naming the way out, when ``records`` would take more than the memory available to train on
    (``BYTES_PER_TRAINING_RECORD`` each: the frame, the token tensor and the model's arrays)."""
    available = available_memory() if available is None else available
    need = records * BYTES_PER_TRAINING_RECORD
    if available is None or need <= available:
        return
    fits = max(available // BYTES_PER_TRAINING_RECORD, 1)
    raise MemoryError(
        f"{what}: {records:,} records would need about {need / 2**30:.1f} GiB to train on (about "
        f"{BYTES_PER_TRAINING_RECORD // 1000} KB each), and {available / 2**30:.1f} GiB is available, enough for about "
        f"{fits:,}. {way_out}")


def arrays(df: pl.DataFrame) -> dict:
    """The model inputs for a frame of labelled records (one task id per (hardware, task))."""
    d = featurize(df)
    gid = df.select(pl.concat_str(["hardware", "task_id"], separator="/").alias("g"))["g"]
    d["task_ids"] = gid.rank("dense").to_numpy().astype(np.int64)
    # within-task statistics over every record of the task in the frame, whatever its part (features only): the
    # models with task_relative read them (model.task_relative_inputs); steadier than a test part's few records
    d["flat_rel"] = task_relative(d["flat"], d["task_ids"])
    d["tok_rel"] = TaskCentredTokens.of(d["tokens"], d["mask"], d["task_ids"])  # per-task means, not dense
    d["labels"] = df["label"].to_numpy().astype(np.float32)
    d["groups"] = {"op_class": df["op_class"].to_numpy().astype(str), "hardware": df["hardware"].to_numpy().astype(str)}
    return d


def part_arrays(df: pl.DataFrame, part: str) -> dict:
    """``arrays`` of the records in one part, featurised with the whole frame so that the within-task statistics
    (``flat_rel``, ``tok_rel``) see every record of a task, not only this part's few."""
    return _part(arrays(df), (df["part"] == part).to_numpy())


def check_device(kind: str, device: str) -> None:
    """Refuse a device the model cannot train on, before any record is read: LightGBM (``gbdt``) trains on the CPU
    only (it ignored ``--device cuda``), and a PyTorch build without CUDA stopped ``--device cuda`` with an
    AssertionError deep in training."""
    if device != "cpu" and not re.fullmatch(r"cuda(:\d+)?", device):
        raise ValueError(f"--device {device}: use cpu or cuda (cuda:N for one GPU of several)")
    if device == "cpu":
        return
    if kind == "gbdt":
        raise ValueError(f"--device {device}: gbdt (LightGBM) trains on the CPU; --device applies to attention and "
                         "mlp")
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this PyTorch ({torch.__version__}) sees no CUDA GPU; install a CUDA "
                         "build of PyTorch (README, GPU installs) on a machine with one, or train with --device cpu")


def make_model(kind: str, seed: int = 0, epochs: int = 10, device: str = "cpu", progress: bool = False,
               feature_version: str = FEATURE_VERSION, data_manifest_hash: str | None = None, **hp):
    from . import model as M

    if kind in MODEL_KINDS:
        check_device(kind, device)
    if kind == "attention":
        return M.AttentionRanker(seed=seed, epochs=epochs, device=device, progress=progress,
                                 feature_version=feature_version, data_manifest_hash=data_manifest_hash, **hp)
    if kind == "mlp":
        return M.MLPRanker(seed=seed, epochs=epochs, device=device, progress=progress,
                           feature_version=feature_version, data_manifest_hash=data_manifest_hash, **hp)
    if kind == "gbdt":
        return M.GBDTRanker(seed=seed, progress=progress, feature_version=feature_version,
                            data_manifest_hash=data_manifest_hash, **hp)
    raise ValueError(f"unknown model {kind!r}; choose from {', '.join(MODEL_KINDS)}")


def _part(d: dict, mask: np.ndarray) -> dict:
    """The records ``mask`` selects (a boolean mask or row indices, repeats allowed) of ``arrays``' dict. The token
    tensor is not copied: the part holds a ``features.RowView`` of it, which the attention ranker reads batch by
    batch; the other arrays are copied (a few hundred bytes a record)."""
    out = {k: (RowView(v, mask) if k == "tokens" else v[mask])
           for k, v in d.items() if isinstance(v, (np.ndarray, RowView, TaskCentredTokens))}
    out["groups"] = {k: v[mask] for k, v in d["groups"].items()}
    return out


def hardware_repeats(hardware: np.ndarray) -> dict[str, int]:
    """How many times each hardware's training records are used per epoch: round(sqrt(n_max / n_h)), so a
    hardware with few records (the few-shot share of a new GPU) weighs like the square root of its size rather than
    its size (square-root balancing). One hardware, or hardware of similar size: 1 each.

    Measured (``benchmarks/model_splits.py``, K80 + 10% of MI50 in training, MI50 tested; attention, seed 0): with
    MI50's records repeated 3x (this rule) PCA rose from 0.794 to 0.821, top-1 0.696 -> 0.777, top-5 0.935 -> 0.952
    (4x, tried once: 0.831); GBDT 0.754 -> 0.768. Without any hardware feature the model still cannot tell the two
    GPUs apart: the repeats only move its compromise towards the hardware being learnt."""
    names, counts = np.unique(hardware, return_counts=True)
    if len(names) < 2:
        return {str(n): 1 for n in names}
    top = counts.max()
    return {str(n): max(1, int(round(float(np.sqrt(top / c))))) for n, c in zip(names, counts)}


def balanced_rows(rows: np.ndarray, hardware: np.ndarray) -> np.ndarray:
    """``rows`` with each hardware's rows repeated ``hardware_repeats`` times (the originals first, in order)."""
    rep = hardware_repeats(hardware[rows])
    extra = [rows[hardware[rows] == h] for h, r in rep.items() for _ in range(r - 1)]
    return np.concatenate([rows, *extra]) if extra else rows


def fine_tune_hardware(df: pl.DataFrame, fine_tune: str | list[str] | None = "auto",
                       info: dict | None = None) -> list[str]:
    """The hardware whose training records a model is fine-tuned on after training on the whole train part.

    ``"auto"``: the hardware of the split's test part, when each of them has training records, fewer than it has
    test records, and some other hardware trains too: the few-shot case, where a handful of the target's records
    sit among many of another hardware's (TenSet's transfer setting). Within one hardware, zero-shot and operator- or
    network-wise splits (the test hardware are all the training hardware, or none of them) give ``[]``, and so does
    a within-task split of several hardware where one has no test records (its tasks too small to test): there
    every tested hardware trains on most of its records, and fine-tuning on them would only retrain on part of
    the data. With the split's recorded ``info`` (``splits.split_info``), only a hardware split with a few-shot
    share is one (the record counts above can mislead when the training side is capped per task). ``None`` /
    ``"none"``: no fine-tuning. A list (or a comma-separated string) names the hardware; each must have training
    records."""
    if fine_tune is None or fine_tune == "none":
        return []
    train_hw = set(df.filter(pl.col("part") == "train")["hardware"].unique().to_list())
    if fine_tune == "auto":
        if info and not (info.get("scheme") == "hardware" and info.get("few_shot")):
            return []
        count = {p: dict(df.filter(pl.col("part") == p)["hardware"].value_counts().iter_rows())
                 for p in ("train", "test")}
        test_hw = set(count["test"])
        few = all(count["train"].get(h, 0) < count["test"][h] for h in test_hw)
        return sorted(test_hw) if test_hw and test_hw < train_hw and few else []
    names = [h.strip() for h in (fine_tune.split(",") if isinstance(fine_tune, str) else fine_tune) if h.strip()]
    missing = sorted(set(names) - train_hw)
    if missing:
        raise ValueError(f"cannot fine-tune on {', '.join(missing)}: no training records of that hardware "
                         f"(training hardware: {', '.join(sorted(train_hw))})")
    return sorted(set(names))


def _trained_share(df: pl.DataFrame, *keys: pl.Expr) -> float | None:
    """The share of the test part's records whose ``keys`` also occur in the train part; None without a test part."""
    test = df.filter(pl.col("part") == "test").select(*keys)
    if test.is_empty():
        return None
    trained = df.filter(pl.col("part") == "train").select(*keys).unique()
    return test.join(trained, on=test.columns, how="semi").height / test.height


def seen_task_share(df: pl.DataFrame) -> float | None:
    """The share of the test part's records whose (hardware, task) also has training records: 1 for a within-task
    split and for a few-shot split's target hardware, 0 when whole tasks, operators, networks or hardware are held
    out. None when the frame has no test part."""
    return _trained_share(df, pl.col("hardware"), pl.col("task_id"))


def lambdarank_weight_for(df: pl.DataFrame) -> float:
    """The attention model's LambdaRank weight for a split (``lambdarank_weight="auto"``, the default of
    ``fit_on_frame`` and ``curate train``): ``SEEN_TASK_LAMBDARANK_WEIGHT`` (0.25) when most test records are of
    (hardware, task) pairs the model trains on, ``model.LAMBDARANK_WEIGHT`` (0.05) otherwise and without a test part.

    The weight trades the top of the training tasks' lists against the all-pairs order that transfers. Measured
    with three seeds each (``benchmarks/attention_loss.py --weights 0.05 0.25`` on the splits of
    ``benchmarks/model_splits.py``, and the same comparison on six more splits; reports/model_splits.md, "The
    LambdaRank weight by split"), mean top-1 0.05 -> 0.25: on the six splits whose test tasks are trained on it
    rises in every one (+0.2 to +2.0 points: within-task roller-k80 0.969 -> 0.972, roller-mi50, an A100's
    matmuls, a MetaSchedule ResNet-34 on an A100; few-shot K80 -> MI50 0.915 -> 0.925 and MI50 -> K80), with PCA
    from -1.0 to +0.3 points; where the test tasks are not trained on it falls (unseen tasks over six held-out
    sets 0.912 -> 0.900, depthwise held out 0.779 -> 0.761, zero-shot K80 -> MI50 0.854 -> 0.840 and MI50 -> K80
    0.888 -> 0.880; the exception, held-out roller-mi50 tasks, where over six seeds 0.25 gains 0.6 top-1 points and
    loses 0.5 PCA points). The embedded CPU sample (14 tasks) shows no difference either way. A model trained
    on one split and used on tasks it has not seen (the TVM verifier's) should be trained with 0.05."""
    from .model import LAMBDARANK_WEIGHT

    share = seen_task_share(df)
    return SEEN_TASK_LAMBDARANK_WEIGHT if share is not None and share > 0.5 else LAMBDARANK_WEIGHT


def diverse_top_k_for(df: pl.DataFrame) -> int:
    """The attention model's ``diverse_top_k`` for a split (``diverse_top_k="auto"``, the default of
    ``fit_on_frame`` and ``curate train``): 5 when most test records are of (hardware, task) pairs the model does
    not train on, or without a test part (a model for tasks it has not seen, the verifier's); 0 (the plain order)
    when most are trained on. The same rule as ``lambdarank_weight_for``: on trained tasks the model's own top five
    are the better picks (within-task roller-k80, three seeds, picks among a task's best 40: top-5 0.990 -> 0.984),
    elsewhere diverse picks hedge a habit of the training data (picks among a task's best 4%, the default, three
    seeds: zero-shot K80 -> MI50 0.917 -> 0.925, MI50 -> K80 0.938 -> 0.943, unseen roller-k80 tasks 0.950 ->
    0.959, depthwise held out 0.854 -> 0.879; top-1 is the model's; reports/model_splits.md, "Diverse top-5
    picks"). On the small CPU sample (150 test programs a task) picks among a task's best 10 cost the held-out
    operator 4 top-5 points over five seeds; the 4% rule picks among 6 there."""
    share = seen_task_share(df)
    return 5 if share is None or share <= 0.5 else 0


def unseen_operator_share(df: pl.DataFrame) -> float | None:
    """The share of the test part's records whose operator class (``op_class``; no class counts as ``unknown``)
    has no training records: 1 when operator classes are held out (``--scheme operator``), 0 within a task, across
    hardware for the same operators, and for held-out tasks of operators that train. None without a test part."""
    share = _trained_share(df, pl.col("op_class").fill_null("unknown"))
    return None if share is None else 1.0 - share


def positions_for(df: pl.DataFrame) -> str:
    """The attention model's ``positions`` for a split (``positions="auto"``, the default of ``fit_on_frame`` and
    ``curate train``): ``"kind"`` when most test records are of operator classes the model does not train on,
    ``"absolute"`` otherwise and without a test part.

    Absolute positions give each slot of a 4-token patch its own weights: a good fit to the layouts of the step
    sequences it trains on, and a wrong one for an operator whose sequence is laid out otherwise (a depthwise
    conv2d has one reduction split fewer than a conv2d, which moves every later step one slot; a pooling's
    sequence is unlike any other). ``"kind"`` numbers each step by its primitive and occurrence
    (``model.kind_positions``), and the tokens of a patch are summed. Measured with three seeds each
    (``benchmarks/attention_loss.py --splits no_depthwise no_pooling no_dense --seeds 0 1 2``, with ``--hp
    'positions="absolute"'`` and ``--hp 'positions="kind"'``; PCA / top-1 / top-5, absolute -> kind; reports/
    model_splits.md, "Positions by primitive"): depthwise held out 0.656 / 0.779 / 0.879 -> 0.690 / 0.768 / 0.896,
    pooling held out 0.578 / 0.410 / 0.664 -> 0.897 / 0.950 / 0.971 (absolute's PCA 0.40 to 0.70 by seed, below a
    random pick's top-1 in two seeds), dense held out 0.651 / 0.869 / 0.943 -> 0.633 / 0.828 / 0.936 (12 tasks; the
    one operator where kind lost). The current code's kind model, five seeds: 0.686 / 0.761 / 0.880, 0.887 / 0.976 /
    0.986, and 0.623 / 0.736 / 0.918 on dense, under a random pick's top-1 (0.790) and behind GBDT's 0.649 / 0.893 /
    0.925 (reports/model_splits.md, "The operator rows on the current code"); on the embedded CPU sample's operator
    split (MetaSchedule traces; reports/pca.md) 0.477 / 0.330 / 0.409 -> 0.647 / 0.422 / 0.457. Where the test operators
    train, ``"kind"`` lost in every split tried (seed 0): within-task roller-k80 PCA / top-1 0.868 / 0.972 -> 0.852 /
    0.966, zero-shot K80 -> MI50 0.757 / 0.874 -> 0.744 / 0.842, K80 + 10% MI50 PCA 0.844 -> 0.816, unseen roller-k80
    tasks 0.748 -> 0.739. A model
    trained without a test part (the verifier's) keeps ``"absolute"``."""
    share = unseen_operator_share(df)
    return "kind" if share is not None and share > 0.5 else "absolute"


SPLIT_HPARAMS = {"lambdarank_weight": lambdarank_weight_for, "diverse_top_k": diverse_top_k_for,
                 "positions": positions_for}  # attention's


def split_hparams(df: pl.DataFrame, kind: str, hp: dict) -> dict:
    """``hp`` with each of the attention model's ``SPLIT_HPARAMS`` that is missing or ``"auto"`` decided from the
    split ``df`` (a labelled frame or a ``split_index``, test part included); other models' ``hp`` as given."""
    hp = dict(hp)
    if kind == "attention":
        for name, rule in SPLIT_HPARAMS.items():
            if hp.get(name, "auto") == "auto":
                hp[name] = rule(df)
    return hp


def fit_on_frame(df: pl.DataFrame, kind: str, seed: int = 0, epochs: int = DEFAULT_EPOCHS, device: str = "cpu",
                 progress: bool = False, data_manifest_hash: str | None = None, balance_hardware: bool = True,
                 fine_tune: str | list[str] | None = "auto", **hp):
    """Train a ranker on the train part of a labelled frame (valid part for early stopping). With
    ``balance_hardware`` (the default), a hardware with far fewer training records than another has its records
    repeated (``hardware_repeats``). Then, for the hardware ``fine_tune_hardware`` names (by default: few-shot
    splits' target hardware), the model goes on training on those hardware's training records alone
    (``Ranker.fine_tune``, early stopping on their validation records) and ``model.fine_tuned`` records it; the
    neural models fine-tune for their ``finetune_epochs``, at most ``epochs`` unless ``hp`` sets it.

    Measured on K80 + 10% of MI50, MI50 tested (``benchmarks/model_splits.py --splits k80_mi50_fs10``, seed 0;
    PCA / top-1 / top-5, without -> with fine-tuning): attention 0.831 / 0.909 / 0.956 -> 0.841 / 0.916 / 0.967,
    GBDT 0.794 / 0.919 / 0.965 -> 0.800 / 0.923 / 0.966, TenSet's MLP 0.653 / 0.532 / 0.792 -> 0.663 / 0.605 / 0.805;
    over seeds 0-2 attention 0.839 / 0.915 / 0.960 (0.843 / 0.916 / 0.967 while it read the workload arguments) and
    GBDT 0.798 / 0.918 / 0.965 (reports/model_splits.md).
    Fine-tuning costs about 2 s (7,177 MI50 training records) against about 90 s for the first fit.

    The attention model's ``lambdarank_weight``, ``diverse_top_k`` and ``positions`` default to ``"auto"``:
    ``lambdarank_weight_for``, ``diverse_top_k_for`` and ``positions_for`` the split."""
    hp = split_hparams(df, kind, hp)
    default_ft = _KINDS[kind]._defaults.get("finetune_epochs") if kind in _KINDS else None
    if default_ft is not None and "finetune_epochs" not in hp:  # a run of --epochs 1 fine-tuned for 8
        hp["finetune_epochs"] = min(default_ft, int(epochs))
    d = arrays(df)
    part = df["part"].to_numpy()
    m = make_model(kind, seed, epochs, device, progress, data_manifest_hash=data_manifest_hash, **hp)
    valid = _part(d, part == "valid") if (part == "valid").any() else None
    rows = np.flatnonzero(part == "train")
    if rows.size == 0:
        raise ValueError("the split has no valid records in its train part: nothing to train on")
    if balance_hardware:
        rows = balanced_rows(rows, d["groups"]["hardware"])
    m.fit(_part(d, rows), valid)
    target = fine_tune_hardware(df, fine_tune)
    if target:
        on = np.isin(d["groups"]["hardware"], target)
        tr = (part == "train") & on
        if _task_groups(d["task_ids"][tr], 2):  # a ranking loss needs a task with two records
            va = (part == "valid") & on
            m.fine_tune(_part(d, tr), _part(d, va) if va.any() else None)
            m.fine_tuned["hardware"] = target
    return m, d


def training_frame(dataset: Path, split: str, kind: str, max_per_task: int | None = None, seed: int = 0,
                   memory_check: bool = True, keep_ids: pl.Series | None = None, include_failed: bool = False,
                   **hp) -> tuple[pl.DataFrame, dict, float | None]:
    """What ``train_model`` reads: the records of the tasks that train (their test records too: the within-task
    statistics see them), and ``hp`` with the split's LambdaRank weight and fine-tuning hardware decided on the
    light ``split_index``, which still has every test record (and its diverse top-k picks). The test records of tasks that do not train (all of
    them on a network-, operator-, task- or zero-shot hardware-wise split) are never read whole. ``keep_ids``: the
    training side keeps only these record ids (a pruned dataset's; the test part stays whole). Returns the frame,
    the hyperparameters and the share of test records whose task trains (``seen_task_share``)."""
    index = split_index(dataset, split, max_per_task, seed, include_failed=include_failed)
    if keep_ids is not None:
        index = index.filter((pl.col("part") == "test") | pl.col("record_id").is_in(keep_ids.implode()))
    hp = split_hparams(index, kind, hp)
    from .splits import split_info

    hp["fine_tune"] = fine_tune_hardware(index, hp.get("fine_tune", "auto"), split_info(dataset, split))
    share = seen_task_share(index)
    index = tasks_with(index, ["train", "valid"])
    if memory_check:
        check_training_memory(index.height, f"split {split} of {dataset}")
    return read_rows(dataset, index), hp, share


@names_damaged_shard()
def train_model(dataset: Path, split: str, kind: str, out: Path, epochs: int = DEFAULT_EPOCHS, device: str = "cpu",
                seed: int = 0, progress: bool = True, max_per_task: int | None = None, memory_check: bool = True,
                include_failed: bool = False, **hp) -> dict:
    """Train a ``kind`` model (``attention``, ``mlp`` or ``gbdt``) on the train part of ``split`` (its valid part,
    if any, picks the epoch) and save the model directory ``out``; what ``curate train`` runs, with the same
    defaults. ``epochs``: neural models only. ``max_per_task``: at most that many records of each task on the
    training side (``split_index``; ``seed`` draws them too); ``memory_check``: refuse a split too big for this
    machine's memory before reading its rows whole (``check_training_memory``). Reads ``training_frame``, which
    decides by the split what ``hp`` leaves unset: ``fine_tune`` (a few-shot hardware split), ``lambdarank_weight``,
    ``positions`` and ``diverse_top_k`` (attention); ``hp`` are the model's hyperparameters otherwise, plus
    ``balance_hardware``. ``include_failed``: failed records train too, with label 0 (labels.py; TenSet trains on
    them). Returns {model, out, train_records, seconds, valid: {pca, top1, top5}, ...}: what it decided, the hardware
    repeats and fine-tuning among them."""
    t0 = time.perf_counter()
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown model {kind!r}; choose from {', '.join(MODEL_KINDS)}")
    if not isinstance(device, str):
        raise ValueError(f"device {device!r}: cpu or cuda (cuda:N for one GPU of several)")
    check_device(kind, device)
    from .storage import check_bool, check_int

    check_int("seed", seed, 0)  # it seeds numpy and torch, which take no negative seed
    check_int("epochs", epochs, 1)  # nan and None failed in int() naming no argument; 1.5 and "1" trained 1 epoch
    if max_per_task is not None:
        check_int("max_per_task", max_per_task, 2)  # 2.5 was used as 2; "20" failed in a comparison
        max_per_task = int(max_per_task)
    seed, epochs = int(seed), int(epochs)  # NumPy integers as Python's, in the result and the model's record
    for flag, v in (("memory_check", memory_check), ("include_failed", include_failed)):
        check_bool(flag, v)
    if Path(out).exists() and not Path(out).is_dir():  # refused before the training, not after it
        raise FileExistsError(f"{out}: a file; the model is a directory")
    from .storage import check_out_kind

    check_out_kind(out, "model")
    df, hp, share = training_frame(dataset, split, kind, max_per_task, seed, memory_check,
                                   include_failed=include_failed, **hp)
    m, d = fit_on_frame(df, kind, seed, epochs, device, progress,
                        data_hash(dataset, split, max_per_task, seed, include_failed), **hp)
    m.trained_on = split_identity(dataset, split)
    m.save(out)
    part = df["part"].to_numpy()
    res = {"model": kind, "out": str(out), "train_records": int((part == "train").sum()),
           "seconds": round(time.perf_counter() - t0, 2)}
    if max_per_task is not None:
        res["max_per_task"] = max_per_task
    if include_failed:
        res["failed_records_trained"] = int(((part == "train") & (df["label"].to_numpy() <= 0)).sum())
    if m.fine_tuned:
        res["fine_tuned"] = m.fine_tuned
    if kind == "attention":
        res["lambdarank_weight"] = m.hparams["lambdarank_weight"]
        res["diverse_top_k"] = m.hparams["diverse_top_k"]
        res["positions"] = m.hparams["positions"]
        res["test_records_of_trained_tasks"] = None if share is None else round(share, 4)
    if hp.get("balance_hardware", True):
        res["hardware_repeats"] = hardware_repeats(d["groups"]["hardware"][part == "train"])
    if (part == "valid").any():
        v = _part(d, part == "valid")
        res["valid"] = _headline(m.evaluate(v))
    return res


def _headline(r: dict) -> dict:
    return {k: round(float(r[k]), 4) for k in ("pca", "top1", "top5") if k in r}


EVAL_CHUNK_RECORDS = 100_000  # records of whole tasks read, featurised and scored at a time when scoring a part


def score_part(models: dict, dataset: Path, split: str, part: str = "test",
               chunk_records: int = EVAL_CHUNK_RECORDS, include_failed: bool = False) -> tuple[dict, dict]:
    """Predictions of each of ``models`` (name -> loaded model) on one part of a split, read in chunks of whole tasks
    of about ``chunk_records`` records: each chunk is read, featurised and scored, and only its predictions are
    kept, so memory does not grow with the part (a TenSet-sized test part of a million records needs about 19 GB at
    once, reports/train_scale.md). Reads only the tasks with a record in the part (``split_index``'s ``tasks_of``);
    a task's records are featurised together, as its within-task statistics need, so the predictions equal those
    of the whole part at once (tests/test_training_scale.py). Returns (``{"task_ids"`` ("hardware/task_id"),
    ``"labels"``, ``"groups"}``, ``{name: predictions}``), the part's records in the split's order."""
    if part not in PARTS:  # refused before the split is read
        raise ValueError(f"part {part!r}: one of {', '.join(PARTS)}")
    index = split_index(dataset, split, tasks_of=part, include_failed=include_failed)
    if not (index["part"] == part).any():
        raise ValueError(f"split {split} has no valid records in part {part!r}")
    tasks = index.group_by("hardware", "task_id", maintain_order=True).len()
    chunk = (tasks["len"].cum_sum() - tasks["len"]) // max(int(chunk_records), 1)  # whole tasks, in index order
    index = index.join(tasks.select("hardware", "task_id", pl.Series("chunk", chunk)), on=["hardware", "task_id"],
                       how="left", maintain_order="left")
    names, labels, groups, preds = [], [], {}, {k: [] for k in models}
    for c in chunk.unique(maintain_order=True).to_list():
        df = read_rows(dataset, index.filter(pl.col("chunk") == c).drop("chunk"))
        d = part_arrays(df, part)
        for k, m in models.items():
            preds[k].append(m.predict(d))
        labels.append(d["labels"])
        names.append(df.filter(pl.col("part") == part).select(
            pl.concat_str(["hardware", "task_id"], separator="/"))[:, 0].to_numpy().astype(str))
        for k, v in d["groups"].items():
            groups.setdefault(k, []).append(v)
    data = {"task_ids": np.concatenate(names), "labels": np.concatenate(labels),
            "groups": {k: np.concatenate(v) for k, v in groups.items()}}
    return data, {k: np.concatenate(v) for k, v in preds.items()}


def split_identity(dataset: Path, split: str) -> dict:
    """What names a split's assignment: the dataset's folder, the split's name and the sha256 of its file; for a
    split that ``curate prune --split`` carried into a pruned dataset, also the source's folder and the sha256 its
    split had then (``pruned_from``): a model trained there is scored on the source's test records."""
    from .storage import file_sha256

    out = {"dataset": str(Path(dataset).resolve()), "split": split,
           "split_sha256": file_sha256(Path(dataset) / "splits" / f"{split}.parquet")}
    src = _pruned_source(dataset, split)
    if src:
        out["pruned_from"] = src
    return out


def _pruned_source(dataset: Path, split: str) -> dict | None:
    """For a split ``curate prune --split`` carried: the source dataset's folder and its split's sha256 then (the
    split's record, read from its file's footer: no hashing)."""
    from .splits import split_info

    pruned = split_info(dataset, split).get("pruned")
    if isinstance(pruned, dict) and pruned.get("from") and pruned.get("split_sha256"):
        return {"dataset": str(Path(pruned["from"]).resolve()), "split_sha256": pruned["split_sha256"]}
    return None


class SplitChanged(ValueError):
    """The split a model is evaluated on was made again after the model trained on it."""


def check_same_split(model, dataset: Path, split: str, model_dir) -> None:
    """Refuse to score a model on a split of its own training data's name that has been made again since it
    trained: a split re-made with another seed (or on other records) puts in its test part records the model
    trained on, and the scores rose without a word (the splits audit: PCA 0.757 -> 0.862). The same between a
    dataset and a pruned copy of its split (``curate prune --split``), either way round: a model trained on the copy
    scored on the source, or trained on the source scored on the copy, when the source's split has been made again
    since the copy. A model trained on another dataset or split is scored as asked."""
    t = getattr(model, "trained_on", None)
    if not t or t.get("split") != split or not (Path(dataset) / "splits" / f"{split}.parquet").is_file():
        return  # (no such split: reading it says so)
    from .storage import file_sha256

    here = str(Path(dataset).resolve())
    src = t.get("pruned_from") or {}  # trained on a pruned copy of this dataset's split (curate prune --split)
    if t.get("dataset") == here or src.get("dataset") == here:
        trained = t.get("split_sha256") if t.get("dataset") == here else src.get("split_sha256")
        now = file_sha256(Path(dataset) / "splits" / f"{split}.parquet")
    else:
        scored = _pruned_source(dataset, split) or {}  # scored on a pruned copy of the split it trained on
        if scored.get("dataset") != t.get("dataset"):
            return  # another dataset: scored as asked, without hashing its split
        trained, now = t.get("split_sha256"), scored["split_sha256"]
    if trained != now:
        raise SplitChanged(f"{model_dir} trained on split {split!r} of {dataset}, which has been made again since "
                           "(its file changed): its test part can hold records the model trained on. Train the model "
                           "again on this split, or make the split under another name")


def trained_records_scored(model, dataset: Path, split: str, part: str = "test") -> dict | None:
    """How many records of ``part`` of ``split`` the model trained or validated on, when it is scored on another
    split (or another dataset) than the one it trained on: a model trained on a within-task split and scored on an
    operator split's test part has seen most of that test part, and its scores there (roller-k80, dense held out:
    PCA 0.846 for a within-task GBDT) say nothing of held-out operators. ``{"records", "of", "split",
    "dataset"}`` when any scored record is in the training or validation part of the split the model names in
    ``trained_on`` (records matched by ``SPLIT_KEYS``; for a split carried into a pruned copy, the copy's split, whose
    rows are the source's records), else None: also when the model names no split, is scored on the split it trained
    on (``check_same_split`` covers that), or its split's file is gone or has changed since (nothing to compare)."""
    from .splits import SPLIT_KEYS
    from .storage import file_sha256

    t = getattr(model, "trained_on", None)
    if not t or not t.get("dataset") or not t.get("split"):
        return None
    if t["dataset"] == str(Path(dataset).resolve()) and t["split"] == split:
        return None
    trained = Path(t["dataset"]) / "splits" / f"{t['split']}.parquet"
    scored = Path(dataset) / "splits" / f"{split}.parquet"
    if not trained.is_file() or not scored.is_file() or file_sha256(trained) != t.get("split_sha256"):
        return None
    seen = pl.scan_parquet(trained).filter(pl.col("part") != "test").select(SPLIT_KEYS)
    part_keys = pl.scan_parquet(scored).filter(pl.col("part") == part).select(SPLIT_KEYS)
    n, hit = pl.collect_all([part_keys.select(pl.len()), part_keys.join(seen, on=SPLIT_KEYS, how="semi")
                             .select(pl.len())])
    if not hit.item():
        return None
    return {"records": int(hit.item()), "of": int(n.item()), "split": t["split"], "dataset": t["dataset"]}


@names_damaged_shard()
def evaluate_model(model_dir: Path, dataset: Path, split: str, part: str = "test",
                   chunk_records: int = EVAL_CHUNK_RECORDS, include_failed: bool = False) -> dict:
    """TenSet metrics of a saved model on one part of a split: overall, per operator class, per hardware, and per
    task (``per_task``, its ``task_id`` the "hardware/task_id" the records name). Scored by ``score_part``, in chunks
    of whole tasks. ``include_failed``: the part's failed records are scored too (label 0; metrics.py, "Failed
    records")."""
    from .metrics import evaluate_predictions
    from .model import load_model
    from .storage import check_bool, check_int

    check_int("chunk_records", chunk_records, 1)  # 0 and -1 were taken, nan failed in int() naming nothing
    check_bool("include_failed", include_failed)
    m = load_model(model_dir, expected_feature_version=FEATURE_VERSION)
    check_same_split(m, dataset, split, model_dir)
    seen = trained_records_scored(m, dataset, split, part)
    d, preds = score_part({"m": m}, dataset, split, part, chunk_records, include_failed)
    out = evaluate_predictions(d["task_ids"], d["labels"], preds["m"], groups=d["groups"],
                               include_failed=include_failed)
    if seen:
        out["trained_records_scored"] = seen
    return out
