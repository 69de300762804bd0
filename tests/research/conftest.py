"""Shared by the research tests: research/ goes on sys.path, as ``python research/X.py`` puts it
there for its scripts (``studylib`` and the scripts beside it import by name), and pytest puts
this folder there, so every test here can ``from study_loader import load_study``."""

import sys
from pathlib import Path

RESEARCH = str(Path(__file__).resolve().parents[2] / "research")
if RESEARCH not in sys.path:
    sys.path.insert(0, RESEARCH)
