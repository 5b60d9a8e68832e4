"""Experiment (not the product's default yet): attention variants on the transfer splits of benchmarks/model_splits.py.

    python benchmarks/attention_variants.py SPLIT VARIANT     # SPLIT: k80_mi50 | no_depthwise | k80_mi50_fs10

Needs the converted GPU dataset and splits that ``python benchmarks/model_splits.py`` leaves under
/tmp/tc-bench-model-splits/gpu. VARIANT ``default``, ``relonly``: the flat features only as standardised within the task (no raw
ones); ``tokrel``: the tokens plus the tokens centred within the task (per position and dimension, over the task's
real tokens). Measured (seed 0, 24 epochs, one thread; PCA / top-1 / top-5), against the default
(raw + within-task flat features): k80_mi50 0.743/0.792/0.911 -> relonly 0.742/0.768/0.901, tokrel 0.754/0.824/0.907;
no_depthwise 0.597/0.633/0.785 -> relonly 0.605/0.687/0.810, tokrel 0.645/0.751/0.833 (random top-1 0.653).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from tenset_curate.metrics import evaluate_predictions, task_slices
from tenset_curate.training import _part, arrays, balanced_rows, labelled_split, make_model


def task_centred_tokens(tok: np.ndarray, mask: np.ndarray, tid: np.ndarray) -> np.ndarray:
    order, _, starts, counts = task_slices(tid)
    rel = np.zeros_like(tok)
    for s0, c in zip(starts, counts):
        idx = order[s0:s0 + c]
        m = mask[idx][:, :, None].astype(np.float32)
        mu = (tok[idx] * m).sum(0) / np.maximum(m.sum(0), 1)
        rel[idx] = (tok[idx] - mu[None]) * m
    return rel


def main(split: str, variant: str) -> None:
    df = labelled_split(Path("/tmp/tc-bench-model-splits/gpu"), split)
    d = arrays(df)
    part = df["part"].to_numpy()
    hp = dict(num_threads=1)
    if variant == "relonly":
        d = dict(d, flat=d.pop("flat_rel"))
        hp["task_relative"] = False
    elif variant == "tokrel":
        d = dict(d, tokens=np.concatenate([d["tokens"], task_centred_tokens(d["tokens"], d["mask"], d["task_ids"])],
                                          axis=2))
    elif variant != "default":
        raise SystemExit(f"unknown variant {variant!r}")
    m = make_model("attention", 0, 24, "cpu", False, **hp)
    rows = balanced_rows(np.flatnonzero(part == "train"), d["groups"]["hardware"])
    t0 = time.time()
    m.fit(_part(d, rows), _part(d, part == "valid") if (part == "valid").any() else None)
    t = _part(d, part == "test")
    r = evaluate_predictions(t["task_ids"], t["labels"], m.predict(t))
    print(split, variant, {k: round(float(r[k]), 4) for k in ("pca", "top1", "top5")}, round(time.time() - t0),
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
