"""The one compiled part: tenset_curate/_scan.c, the Ansor log reader's fast path and the MetaSchedule trace walk
(readers.py). Optional: where it cannot be built (no C compiler), the install goes on and the pure-Python reader
runs; the metadata is pyproject's."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("tenset_curate._scan", ["tenset_curate/_scan.c"], extra_compile_args=["-O3"], optional=True),
    ]
)
