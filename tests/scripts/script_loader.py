"""Load a script under scripts/ as a module (scripts are not a package)."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_script(name: str):
    """``scripts/NAME.py`` imported fresh as the module ``NAME``."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
