"""Per-token log-probabilities and entropies of sampled completions under the policy.

Always at the sampling temperature: logits are divided by ``temperature`` before the softmax
(:func:`..tokens.token_logprobs_and_entropy`), so the loss, the stored old/ref log-probs, the
logged entropy and the top-entropy mask all belong to the distribution the completions were
sampled from (tested against ``generate``'s own scores at T in {0.7, 1.0, 1.3}).

Two equivalent ways to score one group (K completions of the same prompt):

* ``shared_prompt``: run the prompt once (batch 1, with gradients, ``use_cache=True``), repeat
  its KV cache K times and run only the completion tokens against it. The prompt is most of every
  sequence, so this does far less work than K full sequences; the gradient through the shared
  prompt is the sum over the K completions, exactly as in the full computation.
* ``full``: K full sequences (prompt + completion) in one batch. Used with gradient
  checkpointing (which disables the KV cache in training) and as the reference in tests.
"""

from __future__ import annotations

import torch

from flowgrpo.trainer.algorithms.tokens import token_logprobs_and_entropy


def _completion_logits_shared(model, prompt_P, completion_KT, mask_KT) -> torch.Tensor:
    k, p = completion_KT.shape[0], prompt_P.shape[0]
    out = model(input_ids=prompt_P[None], use_cache=True)
    cache = out.past_key_values
    cache.batch_repeat_interleave(k)  # [1, H, P, D] -> [K, H, P, D] per layer, differentiable
    first_logits_K1V = out.logits[:, -1:, :].expand(k, -1, -1)
    attn_K = torch.cat(
        [torch.ones(k, p, dtype=mask_KT.dtype, device=mask_KT.device), mask_KT], dim=1
    )
    rest = model(
        input_ids=completion_KT, attention_mask=attn_K, past_key_values=cache, use_cache=True
    )
    return torch.cat([first_logits_K1V, rest.logits[:, :-1, :]], dim=1)  # [K, T, V]


def _completion_logits_full(model, prompt_P, completion_KT, mask_KT) -> torch.Tensor:
    k, p = completion_KT.shape[0], prompt_P.shape[0]
    ids_KL = torch.cat([prompt_P[None].expand(k, -1), completion_KT], dim=1)
    attn_KL = torch.cat(
        [torch.ones(k, p, dtype=mask_KT.dtype, device=mask_KT.device), mask_KT], dim=1
    )
    logits = model(input_ids=ids_KL, attention_mask=attn_KL, use_cache=False).logits
    return logits[:, p - 1 : -1, :]  # position i predicts token i + 1


def group_logprobs(
    model,
    prompt_P: torch.Tensor,
    completion_KT: torch.Tensor,
    mask_KT: torch.Tensor,
    mode: str = "shared_prompt",
    temperature: float = 1.0,
    allowed_KTV=None,
):
    """(logp_KT, entropy_KT) of the K completions of one prompt at ``temperature`` (the
    sampling temperature; grad mode is the caller's). ``allowed_KTV``: the grammar mask the
    completions were sampled under (bool [K, T, V], None: unconstrained)."""
    if mode not in ("shared_prompt", "full"):
        raise ValueError(f"logprob mode must be 'shared_prompt' or 'full', got {mode!r}")
    device = next(model.parameters()).device
    prompt_P, completion_KT = prompt_P.to(device), completion_KT.to(device)
    mask_KT = mask_KT.to(device).long()
    fn = _completion_logits_shared if mode == "shared_prompt" else _completion_logits_full
    logits_KTV = fn(model, prompt_P, completion_KT, mask_KT)
    return token_logprobs_and_entropy(logits_KTV, completion_KT, temperature, allowed_KTV)
