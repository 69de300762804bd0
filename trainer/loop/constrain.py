"""Grammar-constrained sampling (``rollout.constrained: grammar``, docs/CONSTRAINED.md).

One llguidance matcher per sampled row follows the completion token by token and, before each
token, gives the set of tokens the workflow grammar (:func:`flowgrpo.dsl.constrained.
workflow_grammar`, for the row's domain and the run's operators) can continue with, as a packed
bitmask of W = ceil(V / 32) int32 words. :class:`GrammarMask` applies it in the decoding loop and
keeps it: the rollout stores the masks ([N, T, W], 6 KiB per token for a 49k vocabulary), and
the update unpacks one group's at a time (:func:`unpack_allowed`) to score the constrained
distribution. Storing was chosen over replaying the matchers: the masks are computed during
sampling anyway, and replaying costs the same again per μ-step.
"""

from __future__ import annotations

import functools
import logging
import weakref

import torch
from transformers import LogitsProcessor

from flowgrpo.dsl import OperatorTable, StaticLimits
from flowgrpo.dsl.constrained import workflow_grammar

CONSTRAINED_MODES = ("off", "grammar")
ALL_ALLOWED = -1  # an int32 word with every bit set

_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# workflows every policy tokenizer must read back through llguidance as it decodes them itself
READ_BACK_PROBES = (
    "[Custom, Programmer] -> ScEnsemble -> (Review ? Revise : done) * 2",
    'AnswerGenerate("step by step") -> Programmer * 3 -> MdEnsemble',
)
logger = logging.getLogger(__name__)


def _llg():
    # optional: llguidance is needed only for rollout.constrained=grammar
    import llguidance
    import llguidance.hf
    import llguidance.torch

    return llguidance


def tokenizer_cache(tokenizer) -> dict:
    """What is built once per policy tokenizer (llguidance's view of it, the end game's token
    classes), kept while the tokenizer lives."""
    return _TOKENIZERS.setdefault(tokenizer, {})


def grammar_tokenizer(tokenizer, vocab_size: int, eos_ids: list[int]):
    """llguidance's view of ``tokenizer`` (built once per tokenizer: about 0.6 s for 49k).

    llguidance reads the tokenizer's decoder from its JSON; where it cannot (a ValueError) or
    reads it wrongly (transformers 5.17 converts the SmolLM2 GGUF file to a ByteFallback + Fuse
    + ByteLevel decoder, which llguidance took for a byte-fallback one: every "Ġ" stayed two
    literal bytes, so the mask allowed tokens the grammar forbids), each token's own decoded
    bytes are used instead (:class:`_DecodedVocab`). Raises ``ValueError`` when neither view
    reads :data:`READ_BACK_PROBES` back as ``tokenizer`` decodes them.
    """
    key = (vocab_size, tuple(eos_ids))
    cached = tokenizer_cache(tokenizer)
    if key not in cached:
        llg = _llg()
        try:
            ll = llg.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=eos_ids[0])
        except ValueError:  # a decoder llguidance does not read (the tiny tokenizer's Fuse)
            ll = None
        if ll is None or not reads_back(ll, tokenizer):
            if ll is not None:
                logger.warning(
                    "llguidance misreads this tokenizer's decoder; the grammar mask uses each "
                    "token's decoded bytes instead (docs/CONSTRAINED.md)"
                )
            ll = llg.LLTokenizer(
                llg.TokenizerWrapper(_DecodedVocab(tokenizer, vocab_size, eos_ids))
            )
            if not reads_back(ll, tokenizer):
                raise ValueError(
                    "rollout.constrained=grammar: the policy tokenizer's tokens do not decode "
                    "independently and llguidance does not read its decoder, so the grammar "
                    "mask would be wrong; use rollout.constrained=off with this tokenizer"
                )
        cached[key] = ll
    return cached[key]


def reads_back(ll_tokenizer, tokenizer) -> bool:
    """True when llguidance decodes ``tokenizer``'s own tokens of every probe workflow to the
    bytes ``tokenizer`` decodes them to: the mask then allows exactly what the policy writes."""
    for text in READ_BACK_PROBES:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if ll_tokenizer.decode_bytes(ids) != tokenizer.decode(ids).encode():
            return False
    return True


class _DecodedVocab:
    """A tokenizer as llguidance's generic wrapper reads it: each token's decoded bytes. Exact
    for tokenizers whose tokens decode independently (character-level, as the tiny one)."""

    def __init__(self, tokenizer, vocab_size: int, eos_ids: list[int]):
        self._tokenizer = tokenizer
        self.eos_token_id, self.bos_token_id = eos_ids[0], tokenizer.bos_token_id
        self.special_token_ids = [i for i in tokenizer.all_special_ids if i < vocab_size]
        self.tokens = [
            tokenizer.decode([i]).encode() if i < len(tokenizer) else b"" for i in range(vocab_size)
        ]

    def __call__(self, text: str) -> list[int]:
        return self._tokenizer(text, add_special_tokens=False)["input_ids"]


def sampling_limits(executor_limits) -> StaticLimits | None:
    """The dsl :class:`StaticLimits` a constrained sampler keeps for a run whose interpreter
    enforces ``executor_limits`` (``operators.interpreter.Limits``; None: the DSL's defaults):
    the run's own static bounds (``Limits.static_limits``), the ones its reward validates with,
    so that no sample is a workflow the executor stops for its number of operator calls alone."""
    return None if executor_limits is None else executor_limits.static_limits()


@functools.lru_cache(maxsize=64)
def _grammar(domain: str, operators: OperatorTable | None, limits: StaticLimits | None) -> str:
    return _llg().LLMatcher.grammar_from_lark(workflow_grammar(domain, operators, limits))


def make_matchers(ll_tokenizer, domains: list[str], operators, limits=None) -> list:
    """One fresh matcher per row, for the row's domain, the run's operator table and limits."""
    if limits is not None and not isinstance(limits, StaticLimits):
        raise TypeError(f"limits must be a dsl StaticLimits, got {type(limits).__name__}")
    llg = _llg()
    out = []
    for domain in domains:
        m = llg.LLMatcher(ll_tokenizer, _grammar(domain, operators, limits), log_level=1)
        if m.is_error():
            raise ValueError(f"constraint grammar for {domain}: {m.get_error()}")
        out.append(m)
    return out


class GrammarMask(LogitsProcessor):
    """Sets to -inf the score of every token the row's grammar cannot continue with.

    ``prompt_len``: width of the (left-padded) prompt in ``input_ids``; each call first feeds
    every matcher the token sampled at the previous call. A row is finished once it sampled
    one of ``end_ids`` or its matcher stopped (``finished``), even where the matcher does not
    report itself stopped (seen with a matcher in error): it is left unmasked and fed nothing
    more, since the decoding loop pads it (with the tokenizer's pad, which need not be the end
    token) and the loss ignores it.
    ``bits``: the packed mask of every call, [N, W] int32 each (see :meth:`allowed_bits`).
    ``endgame``: keeps every row finishable inside the token and call budgets (it edits the
    row's bits before they are applied and stored; :mod:`.endgame`).
    ``removed``: per call, [N] the probability mass the mask took away from the sampling
    distribution (``temperature`` applied here: ``generate`` hands a custom processor the raw
    logits and tempers after it; renormalising over the allowed tokens moved that mass onto
    them), 0 for stopped rows.
    """

    def __init__(self, matchers: list, prompt_len: int, vocab_size: int, temperature=1.0,
                 endgame=None, end_ids=()):  # fmt: skip
        self.matchers, self.prompt_len, self.vocab_size = matchers, prompt_len, vocab_size
        self.end_ids, self.finished = frozenset(end_ids), [False] * len(matchers)
        self.endgame = endgame  # an endgame.EndGame, or None: the grammar alone
        self.temperature = temperature if temperature > 0 else 1.0  # greedy: the raw logits
        self.bits: list[torch.Tensor] = []
        self.removed: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        llt = _llg().torch
        if input_ids.shape[1] > self.prompt_len:
            for i, (m, tok) in enumerate(zip(self.matchers, input_ids[:, -1].tolist())):
                if self.finished[i]:
                    continue
                if not m.consume_token(tok):
                    raise RuntimeError(f"grammar matcher rejected token {tok}: {m.get_error()}")
                self.finished[i] = tok in self.end_ids or m.is_stopped()
        bits = llt.allocate_token_bitmask(len(self.matchers), self.vocab_size)
        for i, m in enumerate(self.matchers):
            if self.finished[i]:
                bits[i] = ALL_ALLOWED
            else:
                llt.fill_next_token_bitmask(m, bits, i)
                if self.endgame is not None:
                    self.endgame.restrict(i, input_ids[i, self.prompt_len :].tolist(), m, bits[i])
        self.bits.append(bits)
        allowed = unpack_allowed(bits, scores.shape[-1]).to(scores.device)
        kept_N = (torch.softmax(scores.float() / self.temperature, dim=-1) * allowed).sum(-1)
        self.removed.append((1.0 - kept_N).clamp(min=0.0).cpu())
        return scores.masked_fill(~allowed, -float("inf"))

    def removed_mass(self, length: int) -> torch.Tensor:
        """[N, length] mass removed at each completion position (0 past the calls made)."""
        out = torch.zeros(len(self.matchers), length)
        if self.removed:
            got = torch.stack(self.removed[:length], dim=1)
            out[:, : got.shape[1]] = got
        return out

    def allowed_bits(self, length: int) -> torch.Tensor:
        """[N, length, W] packed masks of the completion's positions (all-allowed past the
        calls made: the decoding loop stops calling once every row has ended)."""
        n, w = len(self.matchers), self.bits[0].shape[1] if self.bits else 1
        out = torch.full((n, length, w), ALL_ALLOWED, dtype=torch.int32)
        if self.bits:
            got = torch.stack(self.bits[:length], dim=1)
            out[:, : got.shape[1]] = got
        return out


_SHIFTS = torch.arange(32, dtype=torch.int32)


def unpack_allowed(bits_xW: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Bool [..., vocab_size] from packed int32 words [..., W] (bit j of word w: token 32w+j)."""
    unpacked = (bits_xW.unsqueeze(-1) >> _SHIFTS.to(bits_xW.device)) & 1
    return unpacked.bool().flatten(-2)[..., :vocab_size]


def pad_bits(bits_NTW: torch.Tensor, width: int) -> torch.Tensor:
    """The packed masks right-padded to ``width`` positions with all-allowed words."""
    return torch.nn.functional.pad(bits_NTW, (0, 0, 0, width - bits_NTW.shape[1]), value=-1)
