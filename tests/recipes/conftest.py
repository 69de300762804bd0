"""The recipe tests reuse the trainer's test doubles (tests/trainer/trainer_fakes.py): put that
folder on sys.path, as tests/trainer/conftest.py does for the tests below it. tests/recipes
itself is on sys.path already (pytest's default import mode), so ``import my_ext`` works."""

import sys
from pathlib import Path

TRAINER_TESTS = str(Path(__file__).resolve().parents[1] / "trainer")
if TRAINER_TESTS not in sys.path:
    sys.path.insert(0, TRAINER_TESTS)
