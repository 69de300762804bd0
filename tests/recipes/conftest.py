"""The recipe tests reuse the trainer's test doubles (tests/trainer/trainer_fakes.py) and the
example extension package ``my_ext`` of examples/ (docs/EXTENDING.md's code): put both folders
on sys.path, as a user puts ``examples`` on PYTHONPATH."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT / "tests" / "trainer", ROOT / "examples"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
