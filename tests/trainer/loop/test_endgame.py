"""The end game of constrained sampling: packed-mask edits, and that it acts where a row would
otherwise run past its token budget (the samples themselves: test_constrained.py)."""

import random

import torch
from llguidance.torch import allocate_token_bitmask, fill_next_token_bitmask

from flowgrpo.dsl import StaticLimits
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.loop import endgame
from flowgrpo.trainer.loop.constrain import grammar_tokenizer, make_matchers, unpack_allowed
from flowgrpo.trainer.loop.rollout import generate_rollout

MATH = Problem("a", "math", "What is 2 + 2?", "4")


def test_only_allows_exactly_the_listed_tokens_including_the_sign_bit():
    bits_W = torch.full((4,), -1, dtype=torch.int32)
    endgame.only(bits_W, [0, 31, 63, 100])
    assert unpack_allowed(bits_W, 128).nonzero().flatten().tolist() == [0, 31, 63, 100]
    assert endgame.unpack_row(bits_W) == [0, 31, 63, 100]


def test_forbid_clears_exactly_the_listed_bits_including_the_sign_bit():
    bits_W = torch.full((4,), -1, dtype=torch.int32)
    endgame.forbid(bits_W, [0, 31, 63, 100])
    left = set(unpack_allowed(bits_W, 128).nonzero().flatten().tolist())
    assert left == set(range(128)) - {0, 31, 63, 100}


def test_the_token_classes_are_the_risk_test_of_each_decoded_token():
    """The classes built once from a batched decode against :func:`endgame._risky` applied to
    every token's own ``decode`` (the per-position test they replace)."""
    model, tok = build_tiny_model(seed=1)
    vocab = model.config.vocab_size
    quote_V, structure_V = endgame.token_classes(tok, vocab)
    assert quote_V.shape == (32 * -(-vocab // 32),)
    for t in range(vocab):
        piece = tok.decode([t])
        assert bool(quote_V[t]) == endgame._risky(piece, False), (t, piece)
        assert bool(quote_V[t] | structure_V[t]) == endgame._risky(piece, True), (t, piece)
    assert quote_V.any() and structure_V.any()
    assert endgame.token_classes(tok, vocab) is endgame.token_classes(tok, vocab)  # built once


def _kept_endgames(monkeypatch) -> list:
    kept, plain = [], endgame.EndGame.__init__

    def init(self, *args, **kwargs):
        plain(self, *args, **kwargs)
        kept.append(self)

    monkeypatch.setattr(endgame.EndGame, "__init__", init)
    return kept


def test_a_tight_token_budget_is_met_by_filtering(monkeypatch):
    kept = _kept_endgames(monkeypatch)
    model, tok = build_tiny_model(seed=1)
    torch.manual_seed(0)
    r = generate_rollout(model, tok, [MATH], 64, 1.0, 1.0, 16, constrained="grammar")
    assert not r.truncated_N.any()
    assert kept[-1].filtered > 0 and not kept[-1].unclosable


def _after(text: str, max_new: int, limits=None):
    """A game, a matcher fed ``text`` and the grammar's mask for the next token."""
    model, tok = build_tiny_model(seed=1)
    ll = grammar_tokenizer(tok, model.config.vocab_size, [tok.eos_token_id])
    (matcher,) = make_matchers(ll, ["math"], None)
    game = endgame.EndGame(tok, max_new, ["math"], None, limits or StaticLimits(), tok.eos_token_id)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert matcher.consume_tokens(ids)
    bits_W = allocate_token_bitmask(1, model.config.vocab_size)[0]
    fill_next_token_bitmask(matcher, bits_W.unsqueeze(0), 0)
    return game, tok, ids, matcher, bits_W


def test_inside_an_instruction_the_finish_is_forced_when_no_room_is_left(monkeypatch):
    monkeypatch.setattr(endgame, "MAX_CHECKED", 0)  # as a large vocabulary: not token by token
    game, tok, ids, matcher, bits_W = _after('Custom("abc', 0, None)
    game.max_new_tokens = len(ids) + 3  # '"', ')' and the end token: exactly the finish
    game.restrict(0, ids, matcher, bits_W)
    quote, close = tok('")', add_special_tokens=False)["input_ids"]
    assert endgame.unpack_row(bits_W) == [quote]
    assert game.queue[0] == [close, tok.eos_token_id] and game.forced_rows == {0}


def test_far_from_both_budgets_the_mask_is_left_alone():
    game, tok, ids, matcher, bits_W = _after("[Custom, Custom", 200)
    before = bits_W.clone()
    game.restrict(0, ids, matcher, bits_W)
    assert torch.equal(bits_W, before) and game.filtered == 0
    tight = endgame.EndGame(tok, len(ids) + 3, ["math"], None, StaticLimits(), tok.eos_token_id)
    tight.restrict(0, ids, matcher, bits_W)  # 3 left: ", " cannot finish in time any more
    assert tight.filtered == 1
    assert {tok.decode([t]) for t in endgame.unpack_row(bits_W)} == {"]"}


def test_near_the_call_budget_a_large_allowed_set_cannot_add_a_call(monkeypatch):
    """Outside an instruction, near the call budget, a large allowed set (SmolLM2's vocabulary,
    simulated by MAX_CHECKED=0) is still checked for the tokens that add structure: after three
    finished calls under a budget of 3, the arrow that would force a fourth is dropped (the
    sampler once let `... -> ScEnsemble -> Custom`, 13 calls, through a 12-call budget)."""
    monkeypatch.setattr(endgame, "MAX_CHECKED", 0)
    game, tok, ids, matcher, bits_W = _after(
        "Custom -> Custom -> Custom ", 200, StaticLimits(max_calls=3)
    )
    allowed = {tok.decode([t]) for t in endgame.unpack_row(bits_W)}
    assert "-" in allowed  # the grammar alone allows the arrow
    game.restrict(0, ids, matcher, bits_W)
    kept = {tok.decode([t]) for t in endgame.unpack_row(bits_W)}
    assert "-" not in kept and game.filtered == 1
    for piece in kept - {tok.decode([tok.eos_token_id])}:  # whatever is left still finishes
        closing = game._closing(0, "Custom -> Custom -> Custom " + piece)
        assert closing is None or closing.calls <= 3, piece


def test_a_token_whose_finish_the_grammar_refuses_is_dropped():
    """The shortest closing is the DSL's; the constrained grammar is stricter (no loop count
    after an ensemble). At the call budget, a space after `ScEnsemble` closes as `* 1` by the
    DSL's count but the grammar then takes only `->`, a fourth call: the space is dropped, so the
    row cannot be left unclosable and run past the budget (as a SmolLM2 sample once did)."""
    prefix = "[Custom, Custom] -> ScEnsemble"
    game, tok, ids, matcher, bits_W = _after(prefix, 200, StaticLimits(max_calls=3))
    assert " " in {tok.decode([t]) for t in endgame.unpack_row(bits_W)}  # the grammar allows it
    assert game._closing(0, prefix + " ").calls == 3  # and the DSL's count says it fits
    game.restrict(0, ids, matcher, bits_W)
    kept = {tok.decode([t]) for t in endgame.unpack_row(bits_W)}
    assert " " not in kept and not game.unclosable


def test_the_text_decoder_is_the_tokenizers_decode_without_special_tokens():
    # the end game decodes every candidate's row through the fast tokenizer's own decoder:
    # it must give transformers' decode(skip_special_tokens=True) on any ids, specials among them
    _, tok = build_tiny_model(seed=1)
    decode, rng = endgame.text_decoder(tok), random.Random(0)
    specials = list(tok.all_special_ids)
    assert specials
    for _ in range(300):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randrange(0, 30))]
        for _ in range(rng.randrange(3)):
            ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
        assert decode(ids) == tok.decode(ids, skip_special_tokens=True), ids


def test_a_tokenizer_that_cleans_up_spaces_decodes_through_transformers():
    _, tok = build_tiny_model(seed=1)
    tok.clean_up_tokenization_spaces = True
    calls = []
    plain = tok.decode
    tok.decode = lambda ids, **kw: calls.append(kw) or plain(ids, **kw)
    assert endgame.text_decoder(tok)([5, 6]) == plain([5, 6], skip_special_tokens=True)
    assert calls == [{"skip_special_tokens": True}]
