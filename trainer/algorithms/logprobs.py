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
The vocabulary projection runs only where it is needed. Where the model's logits are its output
layer applied to its decoder's hidden states (:func:`plain_head`, checked once per model; Llama,
Qwen and SmolLM are), the decoder runs and the projection is applied here: never at the prompt's
positions, whose logits are never scored, and under a grammar mask only for the tokens some
scored position allows (:func:`scored_vocabulary`; the workflow grammar allows a few hundred of
49k): the others are masked at every scored position and add nothing to the softmax. A model
with anything after its output layer (soft-capping, scaling) gets its own full logits instead.
"""

from __future__ import annotations

import weakref
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
    if not prompts:
        return 0
    limit = min(int(p.shape[0]) for p in prompts) - 1
    first = prompts[0][: max(limit, 0)]
    same = torch.ones(first.shape[0], dtype=torch.bool)
    for other in prompts[1:]:
        same &= other[: first.shape[0]].cpu() == first.cpu()
    return int(same.long().cumprod(0).sum()) if first.shape[0] else 0


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
    kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
    if not torch.is_grad_enabled():
        return PromptPrefix(ids_L, kv, kv)
    leaves = [tuple(t.detach().requires_grad_(t.requires_grad) for t in pair) for pair in kv]
    return PromptPrefix(ids_L, kv, leaves)


def _states(out) -> torch.Tensor:
    """The decoder's last hidden states, or the model's logits (whichever ``out`` carries)."""
    logits = getattr(out, "logits", None)
    return logits if logits is not None else out.last_hidden_state


def _completion_states_shared(net, prompt_P, completion_KT, mask_KT, prefix=None, logits=False):
    """[K, T, X] states at the positions predicting each completion token: hidden states
    (``net`` the decoder) or, with ``logits``, logits (``net`` the whole model)."""
    k, p = completion_KT.shape[0], prompt_P.shape[0]
    own_R = prompt_P if prefix is None else prefix.rest(prompt_P)
    start = None if prefix is None else prefix.cache()
    last = {"logits_to_keep": 1} if logits else {}  # the prompt's other positions go unscored
    out = net(input_ids=own_R[None], past_key_values=start, use_cache=True, **last)
    cache = out.past_key_values
    cache.batch_repeat_interleave(k)  # [1, H, P, D] -> [K, H, P, D] per layer, differentiable
    first_K1X = _states(out)[:, -1:, :].expand(k, -1, -1)
    attn_K = torch.cat(
        [torch.ones(k, p, dtype=mask_KT.dtype, device=mask_KT.device), mask_KT], dim=1
    )
    rest = net(
        input_ids=completion_KT, attention_mask=attn_K, past_key_values=cache, use_cache=True
    )
    return torch.cat([first_K1X, _states(rest)[:, :-1, :]], dim=1)


def _completion_states_full(net, prompt_P, completion_KT, mask_KT):
    k, p = completion_KT.shape[0], prompt_P.shape[0]
    ids_KL = torch.cat([prompt_P[None].expand(k, -1), completion_KT], dim=1)
    attn_KL = torch.cat(
        [torch.ones(k, p, dtype=mask_KT.dtype, device=mask_KT.device), mask_KT], dim=1
    )
    states = _states(net(input_ids=ids_KL, attention_mask=attn_KL, use_cache=False))
    return states[:, p - 1 : -1, :]  # position i predicts token i + 1


_PLAIN_HEAD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def plain_head(model) -> bool:
    """Whether the model's logits are its output layer (a Linear) applied to its decoder's last
    hidden states and nothing more (no soft-capping or scaling after it): checked once per model
    on a few tokens, in eval mode. Only then are logits computed from hidden states here."""
    if model not in _PLAIN_HEAD:
        head = model.get_output_embeddings()
        ok = isinstance(head, torch.nn.Linear)
        if ok:
            device = next(model.parameters()).device
            ids = torch.arange(min(5, head.out_features), device=device)[None]
            was_training = model.training
            model.eval()
            with torch.no_grad():
                want = model(input_ids=ids, use_cache=False).logits
                got = head(model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state)
            model.train(was_training)
            ok = torch.allclose(got, want, atol=1e-4, rtol=1e-4)
        _PLAIN_HEAD[model] = ok
    return _PLAIN_HEAD[model]


def scored_vocabulary(allowed_KTV, completion_KT, mask_KT) -> torch.Tensor:
    """The sorted token ids a constrained group's log-probs need: every token allowed at a
    scored position (``mask_KT`` 1) and every token in ``completion_KT`` (padding included).
    Any other token is masked at every scored position, so it adds nothing to the softmax."""
    keep_V = allowed_KTV[mask_KT.bool()].any(0)
    keep_V[completion_KT.flatten().to(keep_V.device)] = True
    return keep_V.nonzero().squeeze(-1)


def _head_logprobs(head, hidden_KTH, completion_KT, mask_KT, temperature, allowed_KTV):
    """Log-probs and entropies from hidden states; under a grammar mask only the columns of
    :func:`scored_vocabulary` are projected (a few hundred of 49k for the workflow grammar)."""
    if allowed_KTV is None:
        return token_logprobs_and_entropy(head(hidden_KTH), completion_KT, temperature)
    vocab_U = scored_vocabulary(allowed_KTV, completion_KT, mask_KT).to(hidden_KTH.device)
    bias = None if head.bias is None else head.bias[vocab_U]
    logits_KTU = torch.nn.functional.linear(hidden_KTH, head.weight[vocab_U], bias)
    targets_KT = torch.searchsorted(vocab_U, completion_KT.to(vocab_U.device))
    allowed_KTU = allowed_KTV.to(vocab_U.device)[..., vocab_U]
    return token_logprobs_and_entropy(logits_KTU, targets_KT, temperature, allowed_KTU)


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
    prompt_P, completion_KT = prompt_P.to(device), completion_KT.to(device)
    mask_KT = mask_KT.to(device).long()
    plain = plain_head(model)
    net = model.get_decoder() if plain else model
    if mode == "shared_prompt":
        states_KTX = _completion_states_shared(
            net, prompt_P, completion_KT, mask_KT, prefix, logits=not plain
        )
    else:
        states_KTX = _completion_states_full(net, prompt_P, completion_KT, mask_KT)
    if not plain:  # the model's own logits
        return token_logprobs_and_entropy(states_KTX, completion_KT, temperature, allowed_KTV)
    head = model.get_output_embeddings()
    return _head_logprobs(head, states_KTX, completion_KT, mask_KT, temperature, allowed_KTV)
