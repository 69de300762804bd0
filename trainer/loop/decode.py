"""The decoding loop of a rollout: ``generate``'s greedy loop over a prefilled KV cache, where
a row that has ended stops costing compute.

``generate`` runs every row of the batch through the model until the last row ends, and pads
the ended ones afterwards. In a study a completion is ~16 tokens of a 26-48 token budget, so
nearly half of a training call's row-steps came after a row's end (46% measured); on a CPU each
row of a decoding step costs about as much as its share of the step's products and attention
(docs/BENCHMARKS.md, "The decoding loop"). :func:`decode` feeds the model only the rows still
going and removes ended rows from the KV cache once enough of them have ended to pay for the
copy.

Everything a row sees is what ``generate`` gives it: the same input token, attention mask,
position and cache slot, the logits cast to float32, the logits processors run over all N rows
(so the sampler draws as many random numbers per step as before), an ended row padded. No
product of the model mixes rows, so a row's tokens do not depend on which other rows are in the
batch, up to the float rounding of kernels whose blocking follows the batch size (tested against
``generate`` itself, tests/trainer/loop/test_decode.py; on SmolLM2 a study's tokens were the same,
docs/BENCHMARKS.md).
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList

from flowgrpo.trainer.algorithms.logprobs import cache_keyword

#: Ended rows are removed from the cache once they are this share of the rows still in it: the
#: copy of the remaining rows' cache is then paid back by the steps they no longer cost.
DROP_SHARE = 0.25


def decode(model, ids_NW, mask_NW, cache, processors, max_new_tokens: int, eos, pad_id: int):
    """``ids_NW`` followed by up to ``max_new_tokens`` greedy tokens of the processed scores,
    [N, W + T] as ``generate(do_sample=False, eos_token_id=eos, pad_token_id=pad_id)`` returns
    it: T the steps until every row has ended, an ended row continued with ``pad_id``.

    ``cache`` (a ``StaticCache`` or ``DynamicCache``) holds every prompt position but the last
    (:func:`~flowgrpo.trainer.loop.rollout.prefill_prompts`); it is shrunk to the live rows in
    place. ``processors``: the logits processors, each called with all N rows (a row removed from
    the cache gets scores of zeros; an ended row's token is discarded). Without ``pad_id`` an
    ended row is continued with the first end token, as ``generate`` does; without ``eos`` no row
    ends before the budget."""
    n, width = ids_NW.shape
    device = ids_NW.device
    forward = model.get_base_model() if hasattr(model, "get_base_model") else model
    keyword = cache_keyword(model)
    processors = LogitsProcessorList(processors)
    eos_E = torch.tensor(list(eos), dtype=torch.long, device=device)
    pad_id = int(eos_E[0]) if pad_id is None and len(eos_E) else pad_id
    live_N = torch.ones(n, dtype=torch.bool, device=device)
    rows_R = torch.arange(n, device=device)  # the cache's rows, as rows of the batch
    position_N = mask_NW.long().sum(1) - 1  # the last prompt token's position (generate's)
    token_N, ids, mask = ids_NW[:, -1], ids_NW, mask_NW
    for step in range(max_new_tokens):
        out = forward(
            input_ids=token_N[rows_R, None], attention_mask=mask[rows_R],
            position_ids=position_N[rows_R, None], use_cache=True, logits_to_keep=1,
            cache_position=torch.tensor([width - 1 + step], device=device), **{keyword: cache},
        )  # fmt: skip
        logits_RV = out.logits[:, -1].float()
        scores_NV = logits_RV  # every row still in the cache: no copy to N rows needed
        if rows_R.shape[0] < n:
            scores_NV = logits_RV.new_zeros(n, logits_RV.shape[-1])
            scores_NV.index_copy_(0, rows_R, logits_RV)
        token_N = processors(ids, scores_NV).argmax(-1).masked_fill(~live_N, pad_id)
        ids = torch.cat([ids, token_N[:, None]], dim=1)
        mask = torch.cat([mask, mask.new_ones(n, 1)], dim=1)
        live_N &= ~torch.isin(token_N, eos_E)
        if not bool(live_N.any()):
            break
        position_N = position_N + 1
        rows_R = _drop_ended(cache, rows_R, live_N)
    return ids


def _drop_ended(cache, rows_R: torch.Tensor, live_N: torch.Tensor) -> torch.Tensor:
    """The cache's rows after removing the ended ones from it, when they are at least
    :data:`DROP_SHARE` of its rows; otherwise ``rows_R`` as it is (the cache untouched)."""
    keep_R = live_N[rows_R]
    ended = int(rows_R.shape[0] - keep_R.sum())
    if ended == 0 or ended < DROP_SHARE * rows_R.shape[0]:
        return rows_R
    index_K = keep_R.nonzero().squeeze(1)
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, index_K)
        layer.values = layer.values.index_select(0, index_K)
    return rows_R[index_K]
