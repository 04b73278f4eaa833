#!/usr/bin/env bash
# README's test command: install what the tests need, then run them all.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-test-deps.sh
# the style floor: lint and formatting (pyproject [tool.ruff]) before the tests
"${PYTHON:-python3}" -m ruff check .
"${PYTHON:-python3}" -m ruff format --check .
"${PYTHON:-python3}" -m pytest -q -p no:cacheprovider tests
