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
