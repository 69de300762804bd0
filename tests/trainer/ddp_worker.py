"""Worker for test_distributed.py, run under ``accelerate launch --cpu --num_processes 2``.

Each rank trains one step of the tiny model on different completions (so the local gradients
differ) and saves its LoRA weights; the test checks the ranks end identical.
"""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from trainer_fakes import FREE, PROSE, VALID, text_rollout

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.setup import end_process_group
from flowgrpo.trainer.loop.trainer import Trainer

out = Path(sys.argv[1])
rank = int(os.environ.get("RANK", "0"))
valid = 2 + 4 * rank  # rank 0: 2 valid of 8, rank 1: 6 valid of 8
step_mod.generate_rollout = text_rollout(lambda g: [VALID] * valid + [PROSE] * (8 - valid))
repo = Path(__file__).parents[2]
cfg = load_config(
    repo / "configs" / "tiny.yaml",
    (f"logging.output_dir={out / 'run'}", "optim.max_steps=1", FREE),
)
trainer = Trainer(cfg, executor=ScriptedBackend(lambda request: "5"))
before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
trainer.train()
after = {n: p.detach().cpu() for n, p in trainer.model.named_parameters() if p.requires_grad}
torch.save({"before": before, "after": after, "world": trainer.world}, out / f"rank{rank}.pt")
end_process_group()  # as `flowgrpo train` ends: without it Gloo could abort the exit (SIGABRT)
