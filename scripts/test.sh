#!/usr/bin/env bash
# README's test command: install what the tests need, then run them all.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-test-deps.sh
# the style floor: lint and formatting (pyproject [tool.ruff]) before the tests
"${PYTHON:-python3}" -m ruff check .
"${PYTHON:-python3}" -m ruff format --check .
# two workers (pytest-xdist): most tests wait on a subprocess, a server or a job; what shares a machine-wide resource
# (the Slurm cluster, the engines' servers) stays on one worker (tests/conftest.py). MLINFRA_TEST_WORKERS=0: in-process
"${PYTHON:-python3}" -m pytest -q -p no:cacheprovider -n "${MLINFRA_TEST_WORKERS:-2}" --dist loadgroup -rfEs tests
