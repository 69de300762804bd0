"""What a run's sampling calls reuse from each other while the weights stay the same.

Each sampling call of a step samples with the weights of that step (the update comes after
all of them), and every prompt starts with the same instruction and examples; the frozen layers
never change at all. :class:`SamplingCache` keeps what that makes reusable, checked so that what
it returns is what computing it again would return (docs/BENCHMARKS.md, "A study seed: what
sampling calls share").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from flowgrpo.operators.packed_weights import PackCache
from flowgrpo.trainer.algorithms.logprobs import PromptPrefix, common_prefix_length, prompt_prefix
from flowgrpo.trainer.loop.policy import trainable_values


class SamplingCache:
    """What one run's sampling calls reuse from each other while the weights stay the same.

    * ``packs``: the oneDNN-packed copies of the frozen Linear weights
      (:class:`~flowgrpo.operators.packed_weights.PackCache`).
    * the last batch's shared prompt prefix (:func:`prompt_prefix`): a step's replacement rounds
      sample with the weights of its first rollout, and their prompts start with the same
      instruction and examples. It is reused only for the same tokens, the same ``setting``
      of the call (dtype, packing) and the same weights: the trainable parameters equal to
      their values then (compared, so an optimizer step or a restored checkpoint is seen), the
      others the same tensors at the same in-place version; so what it returns is what
      computing the prefix again would return.

    Owned by the trainer (one per run) or an evaluation, never global; ``None`` where a
    function takes one: nothing is kept.
    """

    def __init__(self) -> None:
        self.packs = PackCache()
        self._prefix: tuple[tuple, dict, PromptPrefix] | None = None

    def prefix(self, model, prompts: Sequence, setting: tuple) -> PromptPrefix | None:
        """:func:`prompt_prefix` of ``prompts`` (no gradients), the last one again when its
        tokens, the weights and ``setting`` (what else shapes the forward) are the same."""
        length = common_prefix_length(prompts) if len(prompts) > 1 else 0
        if length == 0:
            return None
        ids = tuple(int(t) for t in prompts[0][:length])
        params = list(model.named_parameters())
        frozen = tuple((p.data_ptr(), p._version) for _, p in params if not p.requires_grad)
        key = (ids, frozen, setting)
        trained = {n: p for n, p in params if p.requires_grad}
        held = self._prefix
        if held is None or held[0] != key or not _equal(trained, held[1]):
            held = self._prefix = (key, trainable_values(model), prompt_prefix(model, prompts))
        return held[2]


def _equal(values: dict, saved: dict) -> bool:
    """The same names holding the same values."""
    return values.keys() == saved.keys() and all(torch.equal(values[n], saved[n]) for n in values)
