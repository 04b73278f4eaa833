"""Every generated file of every example, as a syrupy single-file snapshot reviewers read as a plain diff.

Update after an intended change: `python -m pytest tests/test_examples_snapshots.py --snapshot-update`.
"""

from pathlib import Path

import pytest

from compiler.pipeline import compile_plan
from tests.conftest import EXAMPLES


def _generated_files():
    for example in EXAMPLES:
        try:
            files = compile_plan(example).files
        except Exception as exc:  # reported by the test below, not as a collection error
            yield pytest.param(example.stem, "COMPILE-ERROR", repr(exc), id=f"{example.stem}-compile-error")
            continue
        for f in files:
            yield pytest.param(example.stem, f.path, f.text, id=f"{example.stem}/{f.path}")


@pytest.mark.parametrize("example, path, text", list(_generated_files()))
def test_generated_file_matches_snapshot(example, path, text, snapshot_text):
    assert path != "COMPILE-ERROR", text
    suffix = Path(path).suffix.lstrip(".") or "txt"
    assert snapshot_text(text, suffix)
