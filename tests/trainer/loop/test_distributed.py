"""Two CPU processes under `accelerate launch`: after one step the LoRA weights are identical
and the logged metrics are the global ones (averaged over both ranks).

accelerate's ``--cpu`` launcher starts several processes only through MPI; without MPI the
torch.distributed launcher (``--multi_gpu``) with ``ACCELERATE_USE_CPU=true`` runs them on the
CPU with the gloo backend, which is what this test (and docs/PRODUCTION.md) use.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


@pytest.mark.slow
def test_two_cpu_processes_keep_identical_lora_weights_and_log_global_metrics(tmp_path):
    worker = Path(__file__).parents[1] / "ddp_worker.py"
    # This interpreter's accelerate (a hard dependency): the test cannot skip for want of PATH.
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
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
        cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[3], env=env
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
    # Rank 0 saw 2 valid of 8, rank 1 saw 6 of 8: the logged line holds the global numbers.
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 1
    assert lines[0]["validity_rate"] == pytest.approx(0.5)
    assert lines[0]["fallback_rate"] == pytest.approx(0.5)


def test_the_process_group_is_destroyed_once_training_is_done(tmp_path):
    # a process that exits with Gloo's threads alive can abort at shutdown (SIGABRT after a
    # finished run): `flowgrpo train` destroys the group; without one there is nothing to do
    from flowgrpo.trainer.loop.setup import end_process_group

    end_process_group()  # no process group: a no-op
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    assert torch.distributed.is_initialized()
    end_process_group()
    assert not torch.distributed.is_initialized()
