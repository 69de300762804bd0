"""Seeded sampling for a batch of executor requests: each row draws from its own generator.

``model.generate(do_sample=True)`` draws every row from torch's global generator, so a row's
answer depends on which requests share its batch, and the executor's draws move the policy's
random stream. The Gumbel-max trick (Gumbel 1954; Maddison, Tarlow and Minka, "A* Sampling",
NeurIPS 2014) samples the same distribution with noise the caller controls: the argmax of
``logits / T + G``, G standard Gumbel, is distributed as ``softmax(logits / T)``. Run under
greedy decoding, a processor that leaves only that argmax turns ``generate`` into exact
per-row sampling, each row with a generator seeded from its request (:func:`request_seed`):
the same request draws the same answer whatever it is batched with.

Imports torch and transformers: import this module only where sampling happens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList

__all__ = ["GumbelSampler", "seeded_sampling"]


class GumbelSampler(LogitsProcessor):
    """Replace each row's scores by a one-hot of its Gumbel-max draw at ``temperature``.

    Args:
        seeds: one seed per row of the batch, in the batch's order.
        temperature: > 0; the scores are divided by it before the noise is added.
    """

    def __init__(self, seeds: Sequence[int], temperature: float) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 to sample, got {temperature}")
        self.seeds = [int(s) for s in seeds]
        self.temperature = float(temperature)
        self._generators: list[torch.Generator] | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores_BV = scores
        rows, vocab = scores_BV.shape
        if rows != len(self.seeds):
            raise ValueError(f"{rows} rows in the batch, {len(self.seeds)} seeds")
        if self._generators is None:  # on the scores' device, created at the first step
            device = scores_BV.device
            self._generators = [torch.Generator(device=device).manual_seed(s) for s in self.seeds]
        uniform_BV = torch.stack(
            [
                torch.rand(vocab, generator=g, device=scores_BV.device, dtype=torch.float32)
                for g in self._generators
            ]
        )
        # u in [0, 1): u = 0 gives -inf noise (never drawn), so no clamp changes the law
        gumbel_BV = -torch.log(-torch.log(uniform_BV))
        choice_B = (scores_BV.float() / self.temperature + gumbel_BV).argmax(dim=-1)
        out_BV = torch.full_like(scores_BV, float("-inf"))
        return out_BV.scatter_(1, choice_B[:, None], 0.0)


def seeded_sampling(seeds: Sequence[int], temperature: float) -> LogitsProcessorList:
    """The ``logits_processor`` of a greedy ``generate`` call that samples each row at
    ``temperature`` from a generator seeded with its entry of ``seeds``."""
    return LogitsProcessorList([GumbelSampler(seeds, temperature)])
