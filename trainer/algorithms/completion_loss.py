"""Format SFT's loss: the mean cross-entropy of completions given their prompts, prompt tokens
masked (TRL's SFTTrainer with ``completion_only_loss``), computed with as little work as the
loss needs.

* The prompt tokens every pair of a batch starts with (the instruction and few-shot turns: 168
  of about 220 tokens of the built-in prompt) run once, with gradients, and every row attends to
  their keys and values (:func:`.logprobs.prompt_prefix`, repeated per row as the RL update
  repeats a group's prompt). The gradient through the shared tokens is the sum over the rows,
  as in the full computation.
* Rows are aligned on the end of their prompt (left padding of each row's own prompt tokens,
  masked, with the positions the full sequence would give them), so every completion starts in
  the same column and the vocabulary projection runs only at the positions that predict a
  completion token (``logits_to_keep``). HF's ``labels=`` path projects every position: for a
  batch of 8 SmolLM2 pairs, 2,000+ rows of 49,152 logits and their softmax, most of the step's
  memory.

Equal to ``model(input_ids, labels=...).loss`` of the padded full sequences, value and
gradient (tests/trainer/algorithms/test_completion_loss.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from flowgrpo.trainer.algorithms.logprobs import cache_keyword, prompt_prefix

Pair = tuple[list[int], list[int]]  # (prompt ids, completion ids)


def completion_loss(
    model, batch: Sequence[Pair], pad_id: int, share_prefix: bool = True
) -> torch.Tensor:
    """Mean cross-entropy over the completion tokens of ``batch`` (grad mode is the caller's).

    ``share_prefix=False`` runs each row's whole prompt: what a model training with gradient
    checkpointing needs (it turns the KV cache off); the value is the same.
    """
    prefix = _prefix(model, batch) if share_prefix else None
    kv = None if prefix is None else prefix.kv  # the graph's own tensors: one backward
    start = 0 if prefix is None else prefix.length
    return _summed(model, batch, pad_id, start, kv) / _tokens(batch)


def completion_backward(
    model, batch: Sequence[Pair], pad_id: int, micro_batch: int | None = None,
    share_prefix: bool = True, bf16: bool = False,
) -> float:  # fmt: skip
    """Backpropagate :func:`completion_loss` of ``batch`` in micro-batches of ``micro_batch``
    pairs (None: all at once) and return its value. The gradient is the whole batch's: each
    micro-batch adds its summed cross-entropy over the batch's completion-token count, and the
    shared prefix runs once, collects every micro-batch's gradient on its keys and values and
    sends it through the prefix forward once at the end (:meth:`.PromptPrefix.backward`).
    Smaller micro-batches hold fewer activations at a time (peak memory); they are cut from the
    batch ordered by length (:func:`micro_batches`), so each pads to rows like its own.

    ``bf16``: the forward passes run under bfloat16 autocast (mixed precision, Micikevicius et
    al. 2018, arXiv 1710.03740; TRL's ``bf16=True``): matrix products in bf16, the weights, the
    LoRA parameters, their gradients and the loss's softmax in float32; the backward passes run
    outside the autocast region, as PyTorch's AMP recipe has it."""
    cast = bf16_autocast(model, bf16)
    with cast:
        prefix = _prefix(model, batch) if share_prefix else None
    start, total, value = 0 if prefix is None else prefix.length, _tokens(batch), 0.0
    for rows in micro_batches(batch, micro_batch or len(batch), start):
        kv = None if prefix is None else prefix.leaves
        with cast:
            loss = _summed(model, rows, pad_id, start, kv) / total
        loss.backward()
        value += float(loss.detach())
    if prefix is not None:
        prefix.backward()
    return value


def micro_batches(batch: Sequence[Pair], size: int, start: int = 0) -> list[list[Pair]]:
    """``batch`` cut into micro-batches of ``size`` pairs after ordering it by the tokens each
    row runs (its prompt after the shared ``start`` tokens, plus its completion). A micro-batch
    pads every row to its longest prompt part and longest completion, so rows of like length
    together run fewer pad positions; the gradient is a sum over rows, so the order changes
    nothing else (the length-grouped sampling of TRL's ``group_by_length``, applied inside one
    batch so the update's pairs stay the same)."""
    ordered = sorted(batch, key=lambda pair: (len(pair[0]) - start, len(pair[1])))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def bf16_autocast(model, bf16: bool) -> torch.autocast:
    """bfloat16 autocast on ``model``'s device for forward passes (a no-op context when
    ``bf16`` is off); the backward runs outside it, as PyTorch's AMP recipe has it."""
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16)


def _prefix(model, batch: Sequence[Pair]):
    return prompt_prefix(model, [torch.tensor(p, dtype=torch.long) for p, _ in batch])


def _tokens(batch: Sequence[Pair]) -> int:
    return sum(len(c) for _, c in batch)


def _summed(model, batch: Sequence[Pair], pad_id: int, start: int, kv) -> torch.Tensor:
    """Summed cross-entropy of ``batch``'s completions, each row attending to the shared
    ``start`` tokens' keys and values ``kv`` (per layer; None: no shared prefix)."""
    device = next(model.parameters()).device
    own = max(len(p) for p, _ in batch) - start  # the longest prompt part after the prefix
    width = max(len(c) for _, c in batch)
    ids_BW, mask_BW, labels_BC = _aligned(batch, start, own, width, pad_id)
    cache = {}
    if kv is not None:
        prefix_cache = DynamicCache(ddp_cache_data=list(kv))
        prefix_cache.batch_repeat_interleave(len(batch))
        cache = {cache_keyword(model): prefix_cache}
    mask = torch.cat([torch.ones(len(batch), start, dtype=torch.long), mask_BW], dim=1)
    positions_BW = (start + mask_BW.cumsum(1) - 1).clamp_min(0)  # pads: any position, masked
    out = model(
        input_ids=ids_BW.to(device),
        attention_mask=mask.to(device),
        position_ids=positions_BW.to(device),
        use_cache=kv is not None,
        logits_to_keep=width + 1,  # column own-1 predicts the first completion token
        **cache,
    )
    logits_BCV = out.logits[:, :-1, :]  # the last column predicts nothing
    return F.cross_entropy(
        logits_BCV.float().reshape(-1, logits_BCV.shape[-1]),
        labels_BC.to(device).reshape(-1),
        ignore_index=-100,
        reduction="sum",
    )


def _aligned(batch: Sequence[Pair], start: int, own: int, width: int, pad_id: int):
    """Token ids [B, own + width] (each row: pads, its prompt after the shared ``start`` tokens,
    its completion, pads), their attention mask, and the completion labels [B, width] (-100 on
    padding)."""
    n = len(batch)
    ids_BW = torch.full((n, own + width), pad_id, dtype=torch.long)
    mask_BW = torch.zeros((n, own + width), dtype=torch.long)
    labels_BC = torch.full((n, width), -100, dtype=torch.long)
    for i, (prompt, completion) in enumerate(batch):
        rest = prompt[start:]
        ids_BW[i, own - len(rest) : own] = torch.tensor(rest, dtype=torch.long)
        ids_BW[i, own : own + len(completion)] = torch.tensor(completion, dtype=torch.long)
        mask_BW[i, own - len(rest) : own + len(completion)] = 1
        labels_BC[i, : len(completion)] = torch.tensor(completion, dtype=torch.long)
    return ids_BW, mask_BW, labels_BC
