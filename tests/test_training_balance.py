"""Square-root hardware balancing of the training rows (training.hardware_repeats / balanced_rows) on a real
few-shot hardware split: roller-k80 pooling logs in training, 10% of roller-mi50's moved in."""
from __future__ import annotations

import numpy as np
import pytest

from tenset_curate.training import arrays, balanced_rows, hardware_repeats, labelled_split


@pytest.fixture(scope="module")
def few_shot(pooling_few_shot_dataset):
    return labelled_split(pooling_few_shot_dataset, "fs")


def test_few_shot_hardware_is_repeated_by_the_square_root_of_the_size_ratio(few_shot):
    d = arrays(few_shot)
    hw = d["groups"]["hardware"]
    rows = np.flatnonzero(few_shot["part"].to_numpy() == "train")
    n_k80 = int((hw[rows] == "roller-k80").sum())
    n_mi50 = int((hw[rows] == "roller-mi50").sum())
    assert n_k80 > 5 * n_mi50 > 0  # the few-shot share really is small
    expect = round((n_k80 / n_mi50) ** 0.5)
    assert hardware_repeats(hw[rows]) == {"roller-k80": 1, "roller-mi50": expect} and expect >= 2
    out = balanced_rows(rows, hw)
    assert (out[:len(rows)] == rows).all()  # originals first, in order
    assert len(out) == n_k80 + expect * n_mi50
    counts = np.bincount(out, minlength=len(hw))
    assert (counts[rows[hw[rows] == "roller-mi50"]] == expect).all()
    assert (counts[rows[hw[rows] == "roller-k80"]] == 1).all()
    assert not np.isin(out, np.flatnonzero(few_shot["part"].to_numpy() == "test")).any()  # test never trained on


def test_one_hardware_or_equal_sizes_are_left_alone(few_shot):
    d = arrays(few_shot)
    hw = d["groups"]["hardware"]
    k80 = np.flatnonzero(hw == "roller-k80")
    assert (balanced_rows(k80, hw) == k80).all()
    both = np.flatnonzero(np.isin(hw, ["roller-k80", "roller-mi50"]))  # every record: similar sizes
    assert hardware_repeats(hw[both]) == {"roller-k80": 1, "roller-mi50": 1}
