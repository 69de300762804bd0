"""Loading a config is reading data: ``flowgrpo.trainer.config`` imports neither torch (nor
anything that imports it: accelerate, transformers, peft) nor the simulation, and loading and
building the shipped configs imports none of them either (issue 41: config as a schema)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "accelerate", "transformers", "peft", "flowgrpo.operators.simulation")


def _imported_after(code: str) -> list[str]:
    """The heavy modules imported by running ``code`` in a fresh interpreter."""
    probe = (
        f"{code}\nimport sys\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or "
        "m.startswith('flowgrpo.operators.simulation')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return eval(out.stdout.strip().splitlines()[-1])  # a list literal printed above


def test_importing_the_config_imports_no_torch_and_no_simulation():
    assert _imported_after("import flowgrpo.trainer.config") == []


def test_loading_the_shipped_simulated_config_imports_neither():
    code = (
        "from flowgrpo.trainer.config import load_config\n"
        "cfg = load_config('configs/known-optimum.yaml', ('optim.max_steps=2',))\n"
        "assert cfg.executor.kind == 'simulated' and cfg.optim.max_steps == 2\n"
    )
    assert _imported_after(code) == []


def test_the_probe_sees_a_heavy_import():
    # the check itself can fail: importing the losses module pulls torch in
    assert "torch" in _imported_after("import flowgrpo.trainer.algorithms.losses")
