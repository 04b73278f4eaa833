"""Regenerate schemas/*.json and docs/'s generated pages (plan and command references, sizing model, targets,
accuracy). tests/test_docs.py fails when a committed page differs from what this writes."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.accuracy_page import accuracy_page  # noqa: E402
from compiler.docs import write_generated  # noqa: E402

if __name__ == "__main__":
    for path in write_generated(REPO, {"accuracy.md": accuracy_page()}):
        print(path.relative_to(REPO))
