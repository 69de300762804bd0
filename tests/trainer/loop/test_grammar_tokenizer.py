"""llguidance's view of the policy tokenizer (trainer/loop/constrain.grammar_tokenizer): the
mask is only right when llguidance decodes every token to the bytes the tokenizer does."""

import logging

import llguidance
import llguidance.hf
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from flowgrpo.trainer.loop.constrain import (
    READ_BACK_PROBES,
    GrammarMask,
    grammar_tokenizer,
    make_matchers,
    reads_back,
    unpack_allowed,
)

BYTES = sorted(pre_tokenizers.ByteLevel.alphabet())  # the 256 byte-level characters ("Ġ": space)


def _byte_level(decoder, byte_fallback: bool) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (one token per byte, as GPT-2's and SmolLM2's alphabet) whose
    decoder is ``decoder``; token 0 is the end token."""
    vocab = {"<|endoftext|>": 0, **{ch: i + 1 for i, ch in enumerate(BYTES)}}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=byte_fallback))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoder
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>")


def _gguf_517_style() -> PreTrainedTokenizerFast:
    # the decoder transformers 5.17 builds for the SmolLM2 GGUF file (5.24 builds ByteLevel)
    steps = [decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("▁", " "),
             decoders.ByteLevel()]  # fmt: skip
    return _byte_level(decoders.Sequence(steps), byte_fallback=True)


def _allowed_after(ll, tok, prefix: str) -> set[str]:
    """The decoded tokens the workflow grammar allows after ``prefix``."""
    matcher = make_matchers(ll, ["math"], None)[0]
    for token in tok(prefix, add_special_tokens=False)["input_ids"]:
        assert matcher.consume_token(token), prefix
    bits = llguidance.torch.allocate_token_bitmask(1, len(tok))
    llguidance.torch.fill_next_token_bitmask(matcher, bits, 0)
    ids = unpack_allowed(bits, len(tok))[0].nonzero().flatten().tolist()
    return {tok.decode([i]) for i in ids}


def test_a_decoder_llguidance_misreads_is_replaced_by_the_decoded_bytes(caplog):
    tok = _gguf_517_style()
    direct = llguidance.hf.from_tokenizer(tok, n_vocab=len(tok), eos_token=0)
    # the premise: llguidance keeps "Ġ" as its two UTF-8 bytes (if a release fixes this, the
    # fallback below is no longer reached and this test should be rewritten around a new case)
    assert not reads_back(direct, tok)
    with caplog.at_level(logging.WARNING, logger="flowgrpo.trainer.loop.constrain"):
        ll = grammar_tokenizer(tok, len(tok), [0])
    assert "misreads" in caplog.text
    assert reads_back(ll, tok)
    # after "[Custom," the grammar allows only a space: the mask must say so in the
    # tokenizer's own terms (before the fix it allowed "," and generate crashed)
    assert _allowed_after(ll, tok, "[Custom,") == {" "}


def test_a_decoder_llguidance_reads_is_kept_without_a_warning(caplog):
    tok = _byte_level(decoders.ByteLevel(), byte_fallback=False)
    with caplog.at_level(logging.WARNING, logger="flowgrpo.trainer.loop.constrain"):
        ll = grammar_tokenizer(tok, len(tok), [0])
    assert caplog.text == ""
    assert reads_back(ll, tok)
    assert _allowed_after(ll, tok, "[Custom,") == {" "}


def test_tokens_that_do_not_decode_alone_and_a_misread_decoder_raise():
    # Metaspace words ("▁Programmer"): one token decoded alone loses its leading space, so
    # neither llguidance nor the per-token bytes can give the mask; a clear error, not a
    # silently wrong mask
    words = {w for p in READ_BACK_PROBES for w in p.replace(" ", " ▁").split(" ")}
    vocab = {"<eos>": 0, **{w: i + 1 for i, w in enumerate(sorted(words))}}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<eos>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>")
    assert tok.decode(tok(READ_BACK_PROBES[0])["input_ids"]) == READ_BACK_PROBES[0]
    with pytest.raises(ValueError, match=r"rollout\.constrained=off"):
        grammar_tokenizer(tok, len(tok), [0])


class _NeverStops:
    """A matcher that accepts the workflow's tokens and the end token but never reports itself
    stopped (as one llguidance matcher in error did) and rejects anything after the end."""

    def __init__(self, end: int):
        self.end, self.fed = end, []

    def is_stopped(self) -> bool:
        return False

    def consume_token(self, tok: int) -> bool:
        ok = not self.fed or self.fed[-1] != self.end
        self.fed.append(tok)
        return ok

    def get_error(self) -> str:
        return f"token after the end: {self.fed}"


def test_a_finished_row_gets_no_more_tokens_and_no_mask():
    end, pad, vocab = 2, 1, 40
    matcher = _NeverStops(end)
    matcher.consume_token(7)  # the row wrote 7 (its mask came from a real matcher)
    mask = GrammarMask([matcher], prompt_len=1, vocab_size=vocab, end_ids=[end])
    scores = torch.zeros(1, vocab)
    # then the end token, then generate padded the row with the tokenizer's pad token
    for ids in ([5, 7, end], [5, 7, end, pad], [5, 7, end, pad, pad]):
        out = mask(torch.tensor([ids]), scores)
        assert torch.isfinite(out).all()  # finished: nothing masked
    assert matcher.fed == [7, end]  # the pads never reached the matcher
