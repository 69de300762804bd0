"""Rollouts: B problems per step, K sampled completions each, decoded as one batch.

Generation runs on merged LoRA weights (no per-token adapter matmuls), under ``no_grad`` and in
eval mode; completions are kept as token ids (no re-tokenisation of decoded text, so the
training forward scores exactly the sampled tokens).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, StaticCache

from flowgrpo.dsl.validate import DEFAULT_STATIC_LIMITS
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.algorithms.logprobs import (
    cache_keyword,
    output_cache,
    prompt_forward,
    prompt_prefix,
)
from flowgrpo.trainer.loop.constrain import (
    CONSTRAINED_MODES,
    GrammarMask,
    grammar_tokenizer,
    make_matchers,
    pad_bits,
)
from flowgrpo.trainer.loop.decode import decode
from flowgrpo.trainer.loop.endgame import EndGame
from flowgrpo.trainer.loop.policy import sampling_policy
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.sampler import InverseCdfSampler, sampling_processors
from flowgrpo.trainer.loop.sampling_cache import SamplingCache

logger = logging.getLogger(__name__)


@dataclass
class Rollout:
    """One step's samples. N = B * K; groups are consecutive blocks of K rows.

    Attributes:
        problems: the B problems, one per group.
        group_size: K.
        prompt_ids: B tensors [P_b] of prompt token ids (no padding).
        completion_ids_NT: [N, T] sampled tokens, right-padded with the pad id.
        mask_NT: [N, T] 1.0 for completion tokens up to and including the first EOS.
        truncated_N: [N] bool, True when no EOS was produced within max_new_tokens.
        texts: N decoded completions (special tokens removed).
        seconds: wall time of generation.
        allowed_bits_NTW: with ``rollout.constrained: grammar``, the packed grammar mask of
            every position ([N, T, W] int32, see ``constrain.GrammarMask``); None otherwise.
        removed_mass_NT: with ``grammar``, the probability mass the mask removed at each
            position (the ``constrained/*`` metrics); None otherwise.
        endgame_N: with ``grammar``, [N] bool: the end game narrowed or forced the row's mask
            to finish it inside the token and call budgets (``trainer/loop/endgame.py``).
        sampler_logp_NT: [N, T] the log-probability of each sampled token under the
            distribution the sampler drew it from (0 past a row's end); None for greedy
            decoding. The update compares it with its own (``sampler_logp_gap``).
    """

    problems: list[Problem]
    group_size: int
    prompt_ids: list[torch.Tensor]
    completion_ids_NT: torch.Tensor
    mask_NT: torch.Tensor
    truncated_N: torch.Tensor
    texts: list[str]
    seconds: float
    allowed_bits_NTW: torch.Tensor | None = None
    removed_mass_NT: torch.Tensor | None = None
    endgame_N: torch.Tensor | None = None
    sampler_logp_NT: torch.Tensor | None = None

    @property
    def lengths_N(self):
        return self.mask_NT.sum(dim=1)

    def select_groups(self, keep: Sequence[int]) -> Rollout:
        """The rollout restricted to the groups in ``keep`` (dynamic sampling)."""
        k = self.group_size
        rows = torch.tensor([g * k + j for g in keep for j in range(k)], dtype=torch.long)
        return Rollout(
            [self.problems[g] for g in keep],
            k,
            [self.prompt_ids[g] for g in keep],
            self.completion_ids_NT[rows],
            self.mask_NT[rows],
            self.truncated_N[rows],
            [self.texts[int(r)] for r in rows],
            self.seconds,
            None if self.allowed_bits_NTW is None else self.allowed_bits_NTW[rows],
            None if self.removed_mass_NT is None else self.removed_mass_NT[rows],
            None if self.endgame_N is None else self.endgame_N[rows],
            None if self.sampler_logp_NT is None else self.sampler_logp_NT[rows],
        )


def completion_mask(completion_ids_NT, eos_ids: Sequence[int]):
    """(mask_NT, truncated_N): tokens up to and including the first EOS; rows with no EOS."""
    is_eos_NT = torch.zeros_like(completion_ids_NT, dtype=torch.bool)
    for eos in eos_ids:
        is_eos_NT |= completion_ids_NT == eos
    seen_before_NT = (is_eos_NT.cumsum(dim=1) - is_eos_NT.long()) > 0  # an EOS strictly earlier
    mask_NT = (~seen_before_NT).float()
    truncated_N = ~is_eos_NT.any(dim=1)
    return mask_NT, truncated_N


def _eos_ids(model, tokenizer) -> list[int]:
    ids = getattr(model.generation_config, "eos_token_id", None) or tokenizer.eos_token_id
    ids = ids if isinstance(ids, list) else [ids]
    return [int(i) for i in ids if i is not None]


def prefill_prompts(
    model,
    prompt_ids: Sequence,
    group_size: int,
    max_new_tokens: int = 0,
    reuse: SamplingCache | None = None,
    setting: tuple = (),
):
    """KV cache of every prompt but its last token, computed once per prompt and repeated K times.

    Prompts of different lengths are left-padded in the cache, matching the left-padded
    ``input_ids``: the padded positions are masked, and the cached keys carry the RoPE
    positions of the unpadded prompt, which is what ``generate`` computes from the attention
    mask. The decoding loop (or ``generate``) then only runs the last prompt token before
    sampling, instead of prefilling every prompt K times. The tokens every prompt starts with
    (the instruction and the few-shot turns) run once for all of them (:func:`prompt_prefix`).

    With ``max_new_tokens`` the cache is a ``StaticCache`` with room for the last prompt token
    and every new token: a decoding step writes its keys and values in place instead of
    copying the whole cache to append them (0.80-0.90x the decoding time of a growing cache on
    this project's CPU; docs/BENCHMARKS.md). 0: a growing ``DynamicCache``.

    ``reuse``: take the shared prefix from the run's :class:`SamplingCache` (``setting``: what
    else of the call shapes the forward, part of its key).
    """

    device = next(model.parameters()).device
    heads = [ids[:-1].to(device) for ids in prompt_ids]
    width = max(len(ids) for ids in heads)
    prefix = prompt_prefix(model, heads) if reuse is None else reuse.prefix(model, heads, setting)
    data: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer: keys, values [N, H, W, D]
    for b, ids in enumerate(heads):
        out = prompt_forward(model, ids, prefix)
        for i, layer in enumerate(output_cache(out).layers):
            if i == len(data):
                data.append(_zero_rows(layer, len(heads) * group_size, width))
            rows, own = slice(b * group_size, (b + 1) * group_size), layer.keys.shape[-2]
            for whole, part in zip(data[i], (layer.keys, layer.values)):
                whole[rows, :, width - own :] = part  # its K rows at once, left-padded
    if max_new_tokens <= 0:
        return DynamicCache(ddp_cache_data=data)
    return _static_cache(model, data, width + 1 + max_new_tokens)


def _zero_rows(layer, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero keys and values of ``rows`` rows and ``width`` positions shaped like ``layer``'s."""
    keys, values = layer.keys, layer.values
    return tuple(t.new_zeros(rows, t.shape[1], width, t.shape[3]) for t in (keys, values))


def _static_cache(model, data, length: int) -> StaticCache:
    """A ``StaticCache`` of ``length`` positions holding ``data`` (per layer: keys, values of
    [N, H, W, D]) in its first W positions; ``get_seq_length`` is then W, as for the
    ``DynamicCache`` it replaces."""
    cache = StaticCache(config=model.config, max_cache_len=length)
    for i, (keys, values) in enumerate(data):
        # the positions: read by transformers before 5.x, which had no running length
        cache.update(keys, values, i, {"cache_position": torch.arange(keys.shape[-2])})
    return cache


def generate_rollout(
    model,
    tokenizer,
    problems: Sequence[Problem],
    group_size: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    merge: bool = True,
    prefill_once: bool = True,
    prompt: PolicyPrompt | None = None,
    constrained: str = "off",
    limits=None,
    dtype: torch.dtype | None = None,
    packed: bool = True,
    reuse: SamplingCache | None = None,
    drop_ended: bool = True,
) -> Rollout:
    """Sample ``group_size`` completions for each problem, decoded as one batch.

    ``temperature <= 0`` decodes greedily (evaluation with K = 1). With ``prefill_once`` each
    prompt is prefilled once and its KV cache repeated K times (:func:`prefill_prompts`).
    ``prompt``: the run's prompt and operator table (None: the built-in prompt).
    ``constrained``: ``grammar`` masks every token the workflow grammar of the problem's domain
    cannot continue with, and finishes every row inside ``max_new_tokens`` and the call budget
    of ``limits`` (the run's dsl StaticLimits; :mod:`.constrain`, :mod:`.endgame`); ``off``: free.
    ``dtype``: sample on copies of the (merged) weights in this dtype
    (:func:`.policy.parameters_as`; None: the model's own). ``packed``: on a CPU, decode on
    oneDNN-packed copies of the Linear weights (:mod:`flowgrpo.operators.packed_weights`: the
    same products up to float rounding, 0.5-0.7x a decoding step's time). All of it:
    :func:`.policy.sampling_policy`. ``reuse``: what the calls of a run share while the weights
    stay the same (:class:`SamplingCache`; None: nothing kept). ``drop_ended``: with
    ``prefill_once``, decode with :func:`.decode.decode`, which stops computing a row once it has
    ended (the same tokens as ``generate``); False: ``generate``.
    """
    start = time.perf_counter()
    prompt = prompt if prompt is not None else PolicyPrompt()
    texts = [prompt.render(p, tokenizer) for p in problems]
    prompt_ids = [torch.tensor(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    enc = _left_padded(tokenizer, texts)
    device = next(model.parameters()).device
    eos = _eos_ids(model, tokenizer)
    rows, packs = len(problems) * group_size, None if reuse is None else reuse.packs
    with sampling_policy(model, merge, dtype, rows, packed, packs) as n_packed:
        ids = enc["input_ids"].to(device).repeat_interleave(group_size, dim=0)
        mask = enc["attention_mask"].to(device).repeat_interleave(group_size, dim=0)
        grammar = _grammar_mask(constrained, model, tokenizer, problems, ids, prompt,
                                limits, max_new_tokens)  # fmt: skip
        sampling, extra = _sampling(grammar, top_p, temperature)
        cache = None
        if prefill_once:
            cache = prefill_prompts(
                model, prompt_ids, group_size, max_new_tokens, reuse, (merge, dtype, n_packed)
            )
        out = _decoded(model, ids, mask, cache, sampling, extra, max_new_tokens, eos,
                       tokenizer.pad_token_id, drop_ended)  # fmt: skip
    completions = out[:, ids.shape[1] :].cpu()
    seconds = time.perf_counter() - start
    rollout = _make_rollout(problems, group_size, prompt_ids, completions, eos, tokenizer, seconds)
    return _with_sampling_record(rollout, grammar, extra.get("logits_processor", ()))


def _decoded(model, ids, mask, cache, sampling, extra, max_new, eos, pad_id, drop_ended):
    """The prompts ``ids`` and their completions, [N, W + T]: :func:`.decode.decode` over the
    prefilled ``cache`` with ``drop_ended``, otherwise ``generate`` (with ``cache`` when given)."""
    if cache is not None and drop_ended:
        processors = extra.get("logits_processor", ())
        return decode(model, ids, mask, cache, processors, max_new, eos, pad_id)
    kv = {} if cache is None else {cache_keyword(model): cache}
    return model.generate(
        input_ids=ids, attention_mask=mask, **sampling, **extra, **kv, max_new_tokens=max_new,
        eos_token_id=eos, pad_token_id=pad_id,
    )  # fmt: skip


def _with_sampling_record(rollout: Rollout, grammar: GrammarMask | None, processors) -> Rollout:
    """The rollout with what its sampling recorded: the grammar mask of every sampled position
    (for the update) and the sampler's log-probs of the drawn tokens."""
    if grammar is not None:
        _keep_masks(rollout, grammar)
    _keep_sampler_logp(rollout, processors)
    return rollout


def _keep_sampler_logp(rollout: Rollout, processors) -> None:
    """The drawn tokens' log-probs as the sampler saw them, [N, T] (0 past each row's end)."""
    sampler = processors[-1] if processors else None
    if not isinstance(sampler, InverseCdfSampler) or not sampler.logp:
        return
    logp_NT = torch.stack(sampler.logp, dim=1)
    width = rollout.completion_ids_NT.shape[1]
    if logp_NT.shape[1] < width:  # nothing was generated (the rollout holds one end token)
        return
    rollout.sampler_logp_NT = logp_NT[:, :width] * rollout.mask_NT


def _keep_masks(rollout: Rollout, grammar: GrammarMask) -> None:
    width, n = rollout.completion_ids_NT.shape[1], len(rollout.texts)
    rollout.allowed_bits_NTW = grammar.allowed_bits(width)
    rollout.removed_mass_NT = grammar.removed_mass(width)
    rollout.endgame_N = torch.zeros(n, dtype=torch.bool)
    if grammar.endgame is not None:
        rollout.endgame_N[sorted(grammar.endgame.touched)] = True


def _sampling(grammar: GrammarMask | None, top_p: float, temperature: float):
    """(generate's arguments, its logits processors). Sampling runs as a greedy ``generate``
    whose last processor draws the token (:mod:`.sampler`: inverse CDF, not generate's slow
    ``torch.multinomial``); no top-k filter, so the update's log-probs use the full tempered
    distribution. The grammar mask runs first, then top-p, then the temperature, the order
    ``generate`` itself gave a custom processor; the mask measures the mass it removes at the
    sampling ``temperature`` (greedy: the raw logits)."""
    if grammar is not None:
        grammar.temperature = temperature if temperature > 0 else 1.0
    if temperature <= 0:
        return {"do_sample": False}, ({"logits_processor": [grammar]} if grammar else {})
    return {"do_sample": False}, {
        "logits_processor": sampling_processors(temperature, top_p, grammar)
    }


def _grammar_mask(constrained, model, tokenizer, problems, ids_NP, prompt, limits, max_new):
    """The mask processor of one ``generate`` call, one matcher per row of the left-padded
    prompts ``ids_NP`` (K consecutive rows per problem), with the end game that keeps each row
    finishable within ``max_new`` tokens and the call budget; None when ``constrained`` is off."""
    if constrained not in CONSTRAINED_MODES:
        raise ValueError(f"constrained must be one of {CONSTRAINED_MODES}, got {constrained!r}")
    if constrained == "off":
        return None
    eos = _eos_ids(model, tokenizer)
    vocab = model.config.vocab_size
    ll_tokenizer = grammar_tokenizer(tokenizer, vocab, eos)
    k = ids_NP.shape[0] // len(problems)
    domains = [p.domain for p in problems for _ in range(k)]
    matchers = make_matchers(ll_tokenizer, domains, prompt.operators, limits)
    limits = limits if limits is not None else DEFAULT_STATIC_LIMITS
    endgame = EndGame(tokenizer, max_new, domains, prompt.operators, limits, eos[0],
                      vocab_size=vocab)  # fmt: skip
    return GrammarMask(matchers, ids_NP.shape[1], vocab, endgame=endgame, end_ids=eos)


def _left_padded(tokenizer, texts: list[str]):
    """The prompts as one left-padded batch (the tokenizer's padding side is restored)."""
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = side


def _make_rollout(problems, group_size, prompt_ids, completion_ids_NT, eos, tokenizer, seconds):
    if completion_ids_NT.shape[1] == 0:  # nothing generated at all
        completion_ids_NT = torch.full((len(completion_ids_NT), 1), eos[0], dtype=torch.long)
    mask_NT, truncated_N = completion_mask(completion_ids_NT, eos)
    completion_ids_NT = completion_ids_NT.masked_fill(mask_NT == 0, tokenizer.pad_token_id)
    decoded = tokenizer.batch_decode(completion_ids_NT, skip_special_tokens=True)
    return Rollout(
        list(problems),
        group_size,
        prompt_ids,
        completion_ids_NT,
        mask_NT,
        truncated_N,
        decoded,
        seconds,
    )


class ProblemSampler:
    """Draws B problems per step from a pool: seeded shuffled epochs, no repeats within one."""

    def __init__(self, problems: Sequence[Problem], seed: int = 0):
        if not problems:
            raise ValueError("the training task has no problems; check rollout.task")
        self.problems = list(problems)
        self.rng = random.Random(seed)
        self.order: list[int] = []

    def draw(self, n: int) -> list[Problem]:
        out = []
        while len(out) < n:
            if not self.order:
                self.order = list(range(len(self.problems)))
                self.rng.shuffle(self.order)
            out.append(self.problems[self.order.pop()])
        return out

    def state_dict(self) -> dict:
        return {"rng": self.rng.getstate(), "order": list(self.order)}

    def load_state_dict(self, state: dict) -> None:
        rng_state = state["rng"]
        self.rng.setstate((rng_state[0], tuple(rng_state[1]), rng_state[2]))
        self.order = list(state["order"])


def concat_rollouts(parts: Sequence[Rollout]) -> Rollout:
    """One rollout from several (groups in order); completions re-padded to the longest."""
    if len(parts) == 1:
        return parts[0]
    width = max(p.completion_ids_NT.shape[1] for p in parts)

    def pad(x, value):
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    pad_id = 0  # any id: padded positions are masked in attention and in the loss
    return Rollout(
        [q for p in parts for q in p.problems],
        parts[0].group_size,
        [ids for p in parts for ids in p.prompt_ids],
        torch.cat([pad(p.completion_ids_NT, pad_id) for p in parts]),
        torch.cat([pad(p.mask_NT, 0.0) for p in parts]),
        torch.cat([p.truncated_N for p in parts]),
        [t for p in parts for t in p.texts],
        sum(p.seconds for p in parts),
        _concat_bits(parts, width),
        None
        if parts[0].removed_mass_NT is None
        else torch.cat([pad(p.removed_mass_NT, 0.0) for p in parts]),
        None if parts[0].endgame_N is None else torch.cat([p.endgame_N for p in parts]),
        None
        if any(p.sampler_logp_NT is None for p in parts)
        else torch.cat([pad(p.sampler_logp_NT, 0.0) for p in parts]),
    )


def _concat_bits(parts: Sequence[Rollout], width: int):
    if all(p.allowed_bits_NTW is None for p in parts):
        return None
    if any(p.allowed_bits_NTW is None for p in parts):
        raise ValueError("cannot concatenate constrained and unconstrained rollouts")
    return torch.cat([pad_bits(p.allowed_bits_NTW, width) for p in parts])
