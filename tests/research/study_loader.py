"""Load a script under research/ as a module (research/ is not a package)."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_study(name: str):
    """``research/NAME.py`` imported fresh as the module ``NAME``."""
    spec = importlib.util.spec_from_file_location(name, REPO / "research" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
