#!/usr/bin/env bash
# The README's test command: installs the project with its test extras (CPU torch pinned) and runs the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -c tests/constraints.txt -e '.[dev,tvm]'
set +e
python3 -m pytest -q -m "not slow" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
