"""Two CPU processes under `accelerate launch`: after one step the LoRA weights are identical.

accelerate's ``--cpu`` launcher starts several processes only through MPI; without MPI the
torch.distributed launcher (``--multi_gpu``) with ``ACCELERATE_USE_CPU=true`` runs them on the
CPU with the gloo backend, which is what this test (and docs/PRODUCTION.md) use.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch


@pytest.mark.slow
def test_two_cpu_processes_keep_identical_lora_weights(tmp_path):
    launcher = shutil.which("accelerate")
    if launcher is None:
        pytest.skip("the accelerate command is not on PATH (pip install accelerate)")
    worker = Path(__file__).with_name("ddp_worker.py")
    cmd = [
        launcher,
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "29517",
        str(worker),
        str(tmp_path),
    ]
    env = {**os.environ, "ACCELERATE_USE_CPU": "true"}
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[2], env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    names = ranks[0]["after"].keys()
    assert all(torch.equal(ranks[0]["before"][n], ranks[1]["before"][n]) for n in names)
    assert any(not torch.equal(ranks[0]["before"][n], ranks[0]["after"][n]) for n in names)
    assert all(torch.equal(ranks[0]["after"][n], ranks[1]["after"][n]) for n in names), (
        "LoRA weights differ across ranks after a step"
    )
    assert sys.executable  # the worker ran with this interpreter's packages
