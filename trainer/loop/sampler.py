"""Drawing each next token by inverse CDF inside the decoding loop (or ``generate``).

``generate``'s sampling step draws with ``torch.multinomial``, which on a CPU costs about 10 ms
for 8 rows of SmolLM2's 49,152-token vocabulary (one thread), some 9% of all sampling time in
``scripts/bench_step.py``; the cumulative sum and a binary search over the same probabilities
take about 0.3 ms. :class:`InverseCdfSampler` is the last logits processor of a ``generate``
call run with ``do_sample=False``: it draws the token from the processed scores it receives (the
tempered, masked, top-p-truncated logits, exactly what ``generate`` would have sampled from) and
returns scores that leave only that token, so ``generate``'s greedy step takes it. The same
distribution as ``torch.multinomial`` (Devroye, *Non-Uniform Random Variate Generation*, 1986,
ch. III.2: the inversion method), drawn from torch's global generator, so a seeded run repeats;
the stream of draws differs from multinomial's.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, TemperatureLogitsWarper, TopPLogitsWarper


class InverseCdfSampler(LogitsProcessor):
    """Draw one token per row from ``softmax(scores)``; return scores that are 0 at the drawn
    token and ``-inf`` elsewhere (for a greedy ``generate`` step). A token of probability 0
    (score ``-inf``) is never drawn. A row without any finite score is an error, as in
    ``torch.multinomial``.

    ``logp``: per call, [N] the log-probability of each drawn token under the distribution it
    was drawn from (the sampler's own view of the policy: the update compares it with its own
    log-probs, ``sampler_logp_gap``, the rollout-training mismatch of Yao et al. 2025)."""

    def __init__(self) -> None:
        self.logp: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs_NV = torch.softmax(scores.float(), dim=-1)
        cdf_NV = probs_NV.cumsum(dim=-1)
        total_N1 = cdf_NV[:, -1:]
        if not bool(torch.isfinite(total_N1).all()) or bool((total_N1 <= 0).any()):
            raise ValueError("a row of the next-token scores has no token left to sample")
        # u < total strictly (rounding of rand * total could reach it): the first index whose
        # cumulative mass exceeds u is then a token of positive probability.
        u_N1 = torch.rand(total_N1.shape, device=scores.device, dtype=cdf_NV.dtype) * total_N1
        u_N1 = torch.minimum(u_N1, torch.nextafter(total_N1, torch.zeros_like(total_N1)))
        token_N1 = torch.searchsorted(cdf_NV, u_N1, right=True)
        # the drawn token's own probability, not a second pass over the vocabulary
        p_N1 = probs_NV.gather(1, token_N1).clamp_min(torch.finfo(probs_NV.dtype).tiny)
        self.logp.append(p_N1.log().squeeze(1).cpu())
        return torch.full_like(scores, float("-inf")).scatter_(1, token_N1, 0.0)


def sampling_processors(temperature: float, top_p: float, mask=None) -> list:
    """The logits processors of a sampling ``generate`` call (run with ``do_sample=False``):
    the same processing ``generate``'s own sampling applies, in its order, then the draw.
    Without ``mask``: temperature, then top-p (as ``generate``'s warpers). With ``mask`` (a
    custom processor, which ``generate`` runs before its warpers): the mask, top-p, then
    temperature."""
    warp = [TemperatureLogitsWarper(temperature)] if temperature != 1.0 else []
    top = [TopPLogitsWarper(top_p)] if top_p < 1.0 else []
    chain = warp + top if mask is None else [mask, *top, *warp]
    return [*chain, InverseCdfSampler()]
