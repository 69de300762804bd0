"""Test doubles for the trainer: a rollout from fixed texts (real token ids, real log-probs)."""

from __future__ import annotations

import itertools

import torch

from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.rollout import Rollout, completion_mask

# configs/tiny.yaml samples under the grammar; a run driven by these fixed texts samples free
FREE = "rollout.constrained=off"
VALID = "Custom -> Review ? Revise : done"
PROSE = "### Step 1: Analyze the problem"


def text_rollout(texts_for_group):
    """A ``generate_rollout`` replacement: group g gets ``texts_for_group(g_index)`` (K texts)."""
    counter = itertools.count()

    def fake(
        model, tokenizer, problems, group_size, temperature, top_p, max_new_tokens, merge=True,
        prompt=None, constrained="off", limits=None, dtype=None, packed=True, reuse=None,
    ):  # fmt: skip
        assert constrained == "off", "the fake samples fixed texts; it cannot constrain"
        texts = []
        for _ in problems:
            group = list(texts_for_group(next(counter)))
            assert len(group) == group_size
            texts += group
        eos = tokenizer.eos_token_id
        ids = [
            [*tokenizer(t, add_special_tokens=False)["input_ids"][: max_new_tokens - 1], eos]
            for t in texts
        ]
        width = max(map(len, ids))
        comp = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in ids])
        mask, truncated = completion_mask(comp, [eos])
        prompts = [
            torch.tensor(
                tokenizer(
                    (prompt or PolicyPrompt()).render(p, tokenizer), add_special_tokens=False
                )["input_ids"]
            )
            for p in problems
        ]
        decoded = tokenizer.batch_decode(comp, skip_special_tokens=True)
        return Rollout(list(problems), group_size, prompts, comp, mask, truncated, decoded, 0.01)

    return fake


def mixed(k: int = 8, valid: int = 4):
    """Every group: ``valid`` valid workflows, the rest prose."""
    return lambda g: [VALID] * valid + [PROSE] * (k - valid)
