"""Shared pytest configuration.

Hypothesis profiles (select with ``HYPOTHESIS_PROFILE``; default ``ci``):

- ``ci``: the default for every run: derandomized (the same examples every run, so a red build reproduces), a
  per-example deadline generous enough for 2 shared cores, and the health checks that trip on big generated
  inputs switched off. The fuzz tests scale their example counts from ``settings.default.max_examples``.
- ``nightly``: 50x the examples, fresh randomness every run (failures are printed with a reproduction blob).
"""
from __future__ import annotations

import os
from datetime import timedelta

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    settings = None

if settings is not None:
    _SLOW_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
    settings.register_profile(
        "ci",
        max_examples=100,
        deadline=timedelta(seconds=20),
        derandomize=True,
        print_blob=True,
        suppress_health_check=_SLOW_CHECKS,
    )
    settings.register_profile(
        "nightly",
        max_examples=5000,
        deadline=timedelta(seconds=60),
        derandomize=False,
        print_blob=True,
        suppress_health_check=_SLOW_CHECKS,
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# --------------------------------------------------------------------------------------------------------------------
# shared real-data fixtures
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

_REAL = Path(os.environ.get("TENSET_CURATE_REALDATA", Path(__file__).resolve().parents[2] / "shared" / "realdata"))


@pytest.fixture(scope="session")
def k80_three_logs_dataset(tmp_path_factory) -> Path:
    """A dataset converted from the first three roller-k80 logs (the source the prune kill and full-disk tests
    prune). Tests must not write into it."""
    from tenset_curate.convert import convert

    k80 = _REAL / "ansor" / "roller-k80"
    if not k80.is_dir():
        pytest.skip(f"real logs not found under {_REAL}")
    base = tmp_path_factory.mktemp("k80-three")
    inp = base / "in" / "k80"
    inp.mkdir(parents=True)
    for f in sorted(k80.rglob("*.json.gz"))[:3]:
        shutil.copyfile(f, inp / f.name)
    convert([inp], base / "ds")
    return base / "ds"


@pytest.fixture(scope="session")
def k80_mi50_dataset(tmp_path_factory) -> Path:
    """The same 24 real tasks (every 5th log name present on both GPUs, all operator folders) measured on K80 and
    on MI50, converted into one dataset. Tests add their own splits (under distinct names) and write nothing else."""
    from tenset_curate.convert import convert

    ansor = _REAL / "ansor"
    if not (ansor / "roller-k80").is_dir() or not (ansor / "roller-mi50").is_dir():
        pytest.skip(f"roller-k80 / roller-mi50 logs not found under {ansor}")
    base = tmp_path_factory.mktemp("k80-mi50")
    k80 = sorted(p.relative_to(ansor / "roller-k80") for p in (ansor / "roller-k80").rglob("*.json.gz"))
    both = [r for r in k80 if (ansor / "roller-mi50" / r).is_file()][::5][:24]
    assert len(both) == 24
    for hw in ("roller-k80", "roller-mi50"):
        for r in both:
            (base / "in" / hw / r).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ansor / hw / r, base / "in" / hw / r)
    convert([base / "in" / "roller-k80", base / "in" / "roller-mi50"], base / "ds", workers=1)
    return base / "ds"


@pytest.fixture(scope="session")
def pooling_few_shot_dataset(tmp_path_factory) -> Path:
    """roller-k80's and roller-mi50's pooling logs converted into one dataset, with the few-shot hardware split
    ``fs`` (K80 trains, 10% of MI50 moved into training, the rest of MI50 tested). Tests add their own splits (under
    distinct names) and write nothing else."""
    from tenset_curate.convert import convert
    from tenset_curate.splits import write_split

    ansor = _REAL / "ansor"
    if not (ansor / "roller-k80" / "pooling").is_dir() or not (ansor / "roller-mi50" / "pooling").is_dir():
        pytest.skip(f"roller-k80 / roller-mi50 pooling logs not found under {ansor}")
    base = tmp_path_factory.mktemp("pooling-fs")
    for hw in ("roller-k80", "roller-mi50"):
        shutil.copytree(ansor / hw / "pooling", base / "logs" / hw)
    convert([base / "logs" / "roller-k80", base / "logs" / "roller-mi50"], base / "ds", workers=2)
    write_split(base / "ds", "fs", "hardware", train_hw=["roller-k80"], test_hw=["roller-mi50"], few_shot=0.1, seed=0)
    return base / "ds"
