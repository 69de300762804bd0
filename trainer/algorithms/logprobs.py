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

Across groups, ``shared_prompt`` also shares what every prompt of a batch starts with (the
instruction and the few-shot turns: 168 of about 220 tokens of the built-in prompt): a
:class:`PromptPrefix` runs those tokens once per batch, each group runs only the rest of its
prompt against that cache, and :meth:`PromptPrefix.backward` sends the gradient the groups
collected on the prefix's keys and values through the prefix forward once, after the last group.
By the chain rule the gradient is that of every group's own full prompt (tested against it).
Only the last prompt position's logits are computed (``logits_to_keep=1``): the others are never
scored, so the vocabulary projection (28M of SmolLM2-135M's weights) runs at one position.

Under a grammar mask (``allowed_KTV``) only the tokens the mask allows at the group's scored
positions get a logit (:func:`allowed_columns`, :func:`head_columns`): a disallowed token has
probability 0 in the distribution that was sampled, so it adds nothing to the log-probs, the
entropy or their gradients, and the vocabulary projection, the softmax and their backward run
over those columns instead of the whole vocabulary. The same numbers up to the order of float
sums (tested against the full vocabulary).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from flowgrpo.trainer.algorithms.tokens import token_logprobs_and_entropy


@dataclass
class PromptPrefix:
    """The keys and values of the first L tokens shared by every prompt of a batch.

    Attributes:
        ids_L: the shared tokens.
        kv: per layer, the (keys, values) the prefix forward returned ([1, H, L, D] each; part of
            its autograd graph when it ran with gradients).
        leaves: what the groups attend to: ``kv`` itself without gradients, else detached copies
            that collect the groups' gradients until :meth:`backward`.
    """

    ids_L: torch.Tensor
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    leaves: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def length(self) -> int:
        return int(self.ids_L.shape[0])

    def rest(self, prompt_P: torch.Tensor) -> torch.Tensor:
        """The tokens of ``prompt_P`` after the prefix (a ValueError if it does not start so)."""
        ids = self.ids_L.to(prompt_P.device)
        if prompt_P.shape[0] <= self.length or not torch.equal(prompt_P[: self.length], ids):
            raise ValueError("this prompt does not start with the batch's shared prefix")
        return prompt_P[self.length :]

    def cache(self) -> DynamicCache:
        """A fresh cache holding the prefix (running more tokens against it leaves this intact)."""
        return DynamicCache(ddp_cache_data=[(k, v) for k, v in self.leaves])

    def backward(self) -> None:
        """Backpropagate the gradient collected on :attr:`leaves` through the prefix forward."""
        pairs = [
            (out, leaf.grad)
            for layer, leaves in zip(self.kv, self.leaves)
            for out, leaf in zip(layer, leaves)
            if leaf.grad is not None
        ]
        if pairs:
            torch.autograd.backward([p[0] for p in pairs], [p[1] for p in pairs])


def common_prefix_length(prompts) -> int:
    """The number of leading tokens every prompt shares, leaving each at least one of its own."""
    limit = min((int(p.shape[0]) for p in prompts), default=0) - 1
    if limit <= 0:
        return 0
    heads_BL = torch.stack([p[:limit].cpu() for p in prompts])
    return int((heads_BL == heads_BL[0]).all(0).long().cumprod(0).sum())


def prompt_prefix(model, prompts) -> PromptPrefix | None:
    """The :class:`PromptPrefix` of ``prompts`` (2 or more 1-D token tensors), under the caller's
    grad mode; None when they share no token or there is only one (nothing to share)."""
    if len(prompts) < 2:
        return None
    length = common_prefix_length(prompts)
    if length == 0:
        return None
    device = next(model.parameters()).device
    ids_L = prompts[0][:length].to(device)
    out = model(input_ids=ids_L[None], use_cache=True, logits_to_keep=1)
    kv = [(layer.keys, layer.values) for layer in output_cache(out).layers]
    if not torch.is_grad_enabled():
        return PromptPrefix(ids_L, kv, kv)
    leaves = [tuple(t.detach().requires_grad_(t.requires_grad) for t in pair) for pair in kv]
    return PromptPrefix(ids_L, kv, leaves)


def cache_keyword(model) -> str:
    """The keyword a causal LM takes its KV cache by, in ``forward`` and ``generate``:
    ``cache`` since transformers 5.x (where ``past_key_values`` is deprecated and warns on every
    call), ``past_key_values`` before (the project supports transformers >= 4.56)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return (
        "cache"
        if "cache" in inspect.signature(type(base).forward).parameters
        else ("past_key_values")
    )


def output_cache(out):
    """The KV cache of a model output: its ``cache`` field in transformers 5.x (reading
    ``past_key_values`` there warns), ``past_key_values`` before."""
    return out["cache"] if "cache" in out else out["past_key_values"]


def prompt_forward(model, prompt_P, prefix: PromptPrefix | None = None):
    """The model's output on one prompt (cache of every position, logits of the last), run
    against ``prefix``'s cache when given: only the tokens after it are computed."""
    own_R = prompt_P if prefix is None else prefix.rest(prompt_P)
    start = None if prefix is None else prefix.cache()
    kv = {cache_keyword(model): start}
    return model(input_ids=own_R[None], **kv, use_cache=True, logits_to_keep=1)


def _completion_logits_shared(model, prompt_P, completion_KT, mask_KT, prefix=None):
    k, p = completion_KT.shape[0], prompt_P.shape[0]
    out = prompt_forward(model, prompt_P, prefix)
    cache = output_cache(out)
    cache.batch_repeat_interleave(k)  # [1, H, P, D] -> [K, H, P, D] per layer, differentiable
    first_logits_K1V = out.logits[:, -1:, :].expand(k, -1, -1)
    attn_K = torch.cat(
        [torch.ones(k, p, dtype=mask_KT.dtype, device=mask_KT.device), mask_KT], dim=1
    )
    kv = {cache_keyword(model): cache}
    rest = model(input_ids=completion_KT, attention_mask=attn_K, **kv, use_cache=True)
    return torch.cat([first_logits_K1V, rest.logits[:, :-1, :]], dim=1)  # [K, T, V]


def _completion_logits_full(model, prompt_P, completion_KT, mask_KT) -> torch.Tensor:
    k, p = completion_KT.shape[0], prompt_P.shape[0]
    ids_KL = torch.cat([prompt_P[None].expand(k, -1), completion_KT], dim=1)
    attn_KL = torch.cat(
        [torch.ones(k, p, dtype=mask_KT.dtype, device=mask_KT.device), mask_KT], dim=1
    )
    logits = model(input_ids=ids_KL, attention_mask=attn_KL, use_cache=False).logits
    return logits[:, p - 1 : -1, :]  # position i predicts token i + 1


#: Above this share of the vocabulary allowed in a group, its logits are computed for all of it.
MAX_COLUMN_SHARE = 0.25


def allowed_columns(allowed_KTV, completion_KT, mask_KT) -> torch.Tensor | None:
    """The sorted token ids the grammar mask allows at any scored position of the group, with
    every scored target; None without a mask or when they are more than
    :data:`MAX_COLUMN_SHARE` of the vocabulary (then nothing is gained). Unscored positions
    (past a row's end, where the mask allows everything) do not count."""
    if allowed_KTV is None:
        return None
    scored_KT = mask_KT.bool().to(allowed_KTV.device)
    used_V = allowed_KTV[scored_KT].any(dim=0)
    used_V[completion_KT.to(used_V.device)[scored_KT]] = True
    cols = used_V.nonzero().squeeze(1)
    return cols if cols.numel() <= MAX_COLUMN_SHARE * used_V.numel() else None


@contextlib.contextmanager
def head_columns(model, cols: torch.Tensor | None) -> Iterator[bool]:
    """Within the block the model's output layer computes the logits of ``cols`` only (the last
    dimension of ``logits`` is then ``len(cols)``, in their order); yields whether it does. A
    no-op (False) for None, or for a model without ``get_output_embeddings`` or whose output
    layer is not a plain ``nn.Linear`` (a LoRA-adapted head)."""
    output_layer = getattr(model, "get_output_embeddings", None)
    head = output_layer() if cols is not None and output_layer is not None else None
    if type(head) is not torch.nn.Linear:
        yield False
        return
    weight = head.weight.index_select(0, cols.to(head.weight.device))
    bias = None if head.bias is None else head.bias.index_select(0, cols.to(head.bias.device))
    head.forward = lambda hidden: torch.nn.functional.linear(hidden, weight, bias)
    try:
        yield True
    finally:
        head.__dict__.pop("forward", None)  # the class's own forward again


def _column_targets(cols: torch.Tensor, completion_KT: torch.Tensor) -> torch.Tensor:
    """Each token's index in ``cols`` (0 for a token not in it: an unscored position)."""
    cols = cols.to(completion_KT.device)
    index_KT = torch.searchsorted(cols, completion_KT).clamp_max(cols.numel() - 1)
    return torch.where(cols[index_KT] == completion_KT, index_KT, 0)


def group_logprobs(
    model,
    prompt_P: torch.Tensor,
    completion_KT: torch.Tensor,
    mask_KT: torch.Tensor,
    mode: str = "shared_prompt",
    temperature: float = 1.0,
    allowed_KTV=None,
    prefix: PromptPrefix | None = None,
):
    """(logp_KT, entropy_KT) of the K completions of one prompt at ``temperature`` (the
    sampling temperature; grad mode is the caller's). ``allowed_KTV``: the grammar mask the
    completions were sampled under (bool [K, T, V], None: unconstrained). ``prefix``: the
    batch's :class:`PromptPrefix` (``shared_prompt`` only), which ``prompt_P`` starts with."""
    if mode not in ("shared_prompt", "full"):
        raise ValueError(f"logprob mode must be 'shared_prompt' or 'full', got {mode!r}")
    if prefix is not None and mode != "shared_prompt":
        raise ValueError("a shared prompt prefix needs logprob mode 'shared_prompt'")
    device = next(model.parameters()).device
    width_T = completion_KT.shape[1]
    # Columns after every row's last scored token change no scored logit (causal attention,
    # right padding): run only the group's own width, then pad back with zeros (masked out).
    used = used_width(mask_KT)
    prompt_P, completion_KT = prompt_P.to(device), completion_KT[:, :used].to(device)
    mask_KT = mask_KT[:, :used].to(device).long()
    allowed_KTV = None if allowed_KTV is None else allowed_KTV[:, :used]
    cols = allowed_columns(allowed_KTV, completion_KT, mask_KT)
    with head_columns(model, cols) as narrowed:
        if mode == "shared_prompt":
            logits_KTV = _completion_logits_shared(model, prompt_P, completion_KT, mask_KT, prefix)
        else:
            logits_KTV = _completion_logits_full(model, prompt_P, completion_KT, mask_KT)
    targets_KT = completion_KT
    if narrowed:  # V is now the columns
        targets_KT = _column_targets(cols, completion_KT)
        unscored_KT1 = ~mask_KT.bool().to(allowed_KTV.device).unsqueeze(-1)
        # an unscored position keeps every column: no row without a token, so no NaN to mask
        allowed_KTV = allowed_KTV[..., cols.to(allowed_KTV.device)] | unscored_KT1
    logp_KT, entropy_KT = token_logprobs_and_entropy(
        logits_KTV, targets_KT, temperature, allowed_KTV
    )
    pad = (0, width_T - used)
    return torch.nn.functional.pad(logp_KT, pad), torch.nn.functional.pad(entropy_KT, pad)


def used_width(mask_KT: torch.Tensor) -> int:
    """Columns up to the last position any row scores (at least 1): a group sampled in a batch
    with longer rows carries their padding, which no row of its own needs."""
    scored_T = mask_KT.bool().any(dim=0)
    if not bool(scored_T.any()):
        return 1
    return int(torch.nonzero(scored_T).max()) + 1
