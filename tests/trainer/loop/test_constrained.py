"""Grammar-constrained sampling: every sample is a valid workflow (the end game finishes it
inside the token and call budgets), the update scores exactly the constrained distribution
the sampler drew from, user operators are reachable."""

import llguidance
import pytest
import torch

from flowgrpo.dsl import (
    AFLOW_OPERATORS,
    DEFAULT_MAX_CALLS,
    OperatorSpec,
    OperatorTable,
    StaticLimits,
    validate,
)
from flowgrpo.dsl.constrained import workflow_grammar
from flowgrpo.dsl.shape import count_calls
from flowgrpo.operators.models import build_tiny_model, load_model
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.trainer.algorithms.logprobs import group_logprobs
from flowgrpo.trainer.loop.constrain import grammar_tokenizer, unpack_allowed
from flowgrpo.trainer.loop.endgame import PARTIAL, _risky, token_classes
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.rollout import generate_rollout
from flowgrpo.trainer.loop.sampler import InverseCdfSampler

MATH = Problem("a", "math", "What is 2 + 2?", "4")
CODE = Problem("b", "code", "Write add(a, b).", "")


def _check_every_sample(r, k: int, limits=None) -> None:
    """Every sample ended inside the token budget and validates, the call budget included."""
    assert not r.truncated_N.any(), [t for t, c in zip(r.texts, r.truncated_N) if c]
    for i, text in enumerate(r.texts):
        report = validate(text, domain=r.problems[i // k].domain, limits=limits or StaticLimits())
        assert report.ok, (text, [e.code for e in report.errors])


@pytest.mark.slow
@pytest.mark.parametrize("max_new_tokens", [24, 48])
def test_every_constrained_sample_parses_and_validates(max_new_tokens):
    # 500 samples of the tiny random model, math and code; at 24 new tokens most rows must be
    # finished early by the end game (the tiny tokenizer spells names letter by letter)
    model, tok = build_tiny_model(seed=1)
    torch.manual_seed(0)
    r = generate_rollout(
        model, tok, [MATH, CODE], 250, 1.0, 1.0, max_new_tokens, constrained="grammar"
    )
    _check_every_sample(r, 250)


def test_every_constrained_sample_keeps_a_tight_call_budget():
    limits = StaticLimits(max_calls=3)
    model, tok = build_tiny_model(seed=4)
    torch.manual_seed(0)
    r = generate_rollout(
        model, tok, [MATH, CODE], 100, 1.0, 1.0, 64, constrained="grammar", limits=limits
    )
    _check_every_sample(r, 100, limits)
    calls = [count_calls(validate(t).workflow.root) for t in r.texts]
    assert max(calls) == 3  # the budget is reached, not avoided


@pytest.fixture(scope="module")
def smollm2():
    return load_model("default")


@pytest.mark.slow
def test_every_smollm2_sample_parses_and_validates(smollm2):
    # The CPU default policy (SmolLM2-135M, no adapter: the base model, which writes prose when
    # free) under the constraint: 100 samples, math and code, one batch, with the known-optimum
    # config's budget of 48 new tokens; every one must parse and validate.
    model, tok = smollm2
    torch.manual_seed(0)
    r = generate_rollout(model, tok, [MATH, CODE], 50, 0.8, 1.0, 48, constrained="grammar")
    _check_every_sample(r, 50)


def test_the_end_games_token_classes_over_smollm2s_vocabulary(smollm2):
    # byte-level pieces: those ending inside a character decode to U+FFFD (PARTIAL); the
    # classes, from one batched decode, must match the risk test of each token's own decode
    model, tok = smollm2
    quote_V, structure_V = token_classes(tok, model.config.vocab_size)
    partial = 0
    for t in range(len(tok)):
        piece = tok.decode([t])
        partial += PARTIAL in piece
        assert bool(quote_V[t]) == _risky(piece, False), (t, piece)
        assert bool(quote_V[t] | structure_V[t]) == _risky(piece, True), (t, piece)
    assert partial > 100 and not quote_V[len(tok) :].any()


@pytest.mark.slow
def test_every_sample_through_smollm2s_tokenizer_from_random_logits_validates(smollm2):
    # A random model over SmolLM2's own vocabulary: its near-uniform logits walk far more of the
    # grammar through the tokenizer's multi-character tokens than the trained model does (on
    # this CPU: 248 distinct workflows in 250 samples, instructions, nesting and loops, against
    # 39 in 50 for SmolLM2), at a fraction of its cost per token.
    _, tok = smollm2
    model = _random_model_of(smollm2[0])
    torch.manual_seed(0)
    r = generate_rollout(model, tok, [MATH, CODE], 125, 1.0, 1.0, 48, constrained="grammar")
    _check_every_sample(r, 125)
    assert len(set(r.texts)) > 200


def _random_model_of(model):
    """A two-layer random Llama with ``model``'s vocabulary and special tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=model.config.vocab_size, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
        bos_token_id=model.config.bos_token_id, eos_token_id=model.config.eos_token_id,
        tie_word_embeddings=True,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        tiny = LlamaForCausalLM(config).eval()
    tiny.generation_config.eos_token_id = model.generation_config.eos_token_id
    tiny.generation_config.pad_token_id = model.generation_config.pad_token_id
    return tiny


def _sampled_scores(monkeypatch):
    """Keep the processed scores each token was drawn from (temperature and mask applied: what
    the sampler, the decoding loop's last processor, received), one [N, V] tensor per step."""
    steps, draw = [], InverseCdfSampler.__call__

    def spy(self, input_ids, scores):
        steps.append(scores.clone())
        return draw(self, input_ids, scores)

    monkeypatch.setattr(InverseCdfSampler, "__call__", spy)
    return steps


@pytest.mark.parametrize(("temperature", "max_new"), [(0.7, 24), (1.3, 24), (1.0, 14)])
def test_constrained_logprobs_equal_the_sampled_scores(monkeypatch, temperature, max_new):
    # at 14 new tokens the end game restricts and forces tokens: the stored mask is the one
    # the sampler drew under
    model, tok = build_tiny_model(seed=2)
    steps = _sampled_scores(monkeypatch)
    torch.manual_seed(1)
    r = generate_rollout(
        model, tok, [MATH], 6, temperature, 1.0, max_new, merge=False, constrained="grammar"
    )
    scores_KTV = torch.stack(steps, dim=1)[:, : r.completion_ids_NT.shape[1]]
    expected_KT = torch.log_softmax(scores_KTV, -1).gather(-1, r.completion_ids_NT[..., None])[
        ..., 0
    ]
    allowed = unpack_allowed(r.allowed_bits_NTW, model.config.vocab_size)
    with torch.no_grad():
        logp_KT, ent_KT = group_logprobs(
            model, r.prompt_ids[0], r.completion_ids_NT, r.mask_NT, "shared_prompt",
            temperature, allowed,
        )  # fmt: skip
    m = r.mask_NT.bool()
    assert m.sum() > 20
    assert torch.allclose(logp_KT[m], expected_KT[m], atol=1e-4)
    unconstrained, _ = group_logprobs(
        model, r.prompt_ids[0], r.completion_ids_NT, r.mask_NT, "shared_prompt", temperature
    )
    assert (unconstrained[m] < logp_KT[m] - 1e-3).any(), "the mask renormalised something"
    probs = torch.softmax(scores_KTV, -1)
    expected_ent = -(probs * torch.log_softmax(scores_KTV, -1).nan_to_num(neginf=0)).sum(-1)
    assert torch.allclose(ent_KT[m], expected_ent[m], atol=1e-4)


def test_a_user_operator_from_config_is_sampled_and_valid():
    table = OperatorTable.from_data([{"name": "Sketch", "role": "generator", "domains": ["math"]}])
    model, tok = build_tiny_model(seed=3)
    torch.manual_seed(0)
    r = generate_rollout(
        model, tok, [MATH], 40, 1.0, 1.0, 32, constrained="grammar",
        prompt=PolicyPrompt(operators=table),
    )  # fmt: skip
    with_sketch = [t for t, tr in zip(r.texts, r.truncated_N) if "Sketch" in t and not tr]
    assert with_sketch, r.texts
    for text in with_sketch:
        assert validate(text, domain="math", operators=table).ok, text


def test_off_keeps_no_mask_and_samples_the_same_tokens():
    model, tok = build_tiny_model(seed=1)
    torch.manual_seed(5)
    default = generate_rollout(model, tok, [MATH], 4, 1.0, 1.0, 10)
    torch.manual_seed(5)
    off = generate_rollout(model, tok, [MATH], 4, 1.0, 1.0, 10, constrained="off")
    assert off.allowed_bits_NTW is None
    assert torch.equal(off.completion_ids_NT, default.completion_ids_NT)
    with pytest.raises(ValueError, match="constrained must be one of"):
        generate_rollout(model, tok, [MATH], 2, 1.0, 1.0, 4, constrained="regex")


def test_the_removed_mass_is_what_renormalising_over_the_allowed_tokens_divides_by():
    # log p_constrained(t) = log p_free(t) - log(kept mass), so the mass the mask removed at a
    # position is 1 - exp(log p_free - log p_constrained), from the update's own forward pass
    model, tok = build_tiny_model(seed=2)
    torch.manual_seed(3)
    r = generate_rollout(model, tok, [MATH], 6, 0.7, 1.0, 24, merge=False, constrained="grammar")
    allowed = unpack_allowed(r.allowed_bits_NTW, model.config.vocab_size)
    with torch.no_grad():
        args = (model, r.prompt_ids[0], r.completion_ids_NT, r.mask_NT, "shared_prompt", 0.7)
        free_KT, _ = group_logprobs(*args)
        constrained_KT, _ = group_logprobs(*args, allowed)
    m = r.mask_NT.bool()
    expected = 1 - torch.exp(free_KT - constrained_KT)
    assert torch.allclose(r.removed_mass_NT[m], expected[m], atol=1e-4)
    assert (r.removed_mass_NT[m] > 0.01).any()  # the tiny model puts mass outside the grammar


def test_constraint_metrics_are_reported_and_null_without_the_constraint():
    from flowgrpo.rewards import prepare_samples
    from flowgrpo.trainer.monitoring.metrics import CONSTRAINT_KEYS, constraint_metrics

    model, tok = build_tiny_model(seed=1)
    torch.manual_seed(0)
    r = generate_rollout(model, tok, [MATH], 12, 1.0, 1.0, 32, constrained="grammar")
    samples = prepare_samples(r.problems, r.texts, 12, execute=False)
    details = [{"valid": s.valid} for s in samples]
    out = constraint_metrics(r, details)
    m = r.mask_NT.bool()
    assert out["constrained/removed_mass"] == pytest.approx(float(r.removed_mass_NT[m].mean()))
    assert 0 < out["constrained/masked_token_frac"] <= 1
    assert out["constrained/fallback_by_construction"] is True
    finished = [d for d, t in zip(details, r.truncated_N) if not t]
    assert out["constrained/invalid_finished_rate"] == pytest.approx(
        sum(not d["valid"] for d in finished) / len(finished)
    )
    assert out["constrained/endgame_rate"] == pytest.approx(float(r.endgame_N.float().mean()))
    tight = generate_rollout(model, tok, [MATH], 12, 1.0, 1.0, 14, constrained="grammar")
    assert constraint_metrics(tight, details)["constrained/endgame_rate"] > 0
    assert tight.select_groups([0]).endgame_N.equal(tight.endgame_N)
    free = generate_rollout(model, tok, [MATH], 2, 1.0, 1.0, 8)
    assert constraint_metrics(free, details[:2]) == dict.fromkeys(CONSTRAINT_KEYS)


BUDGET_CASES = [  # (workflow, worst-case calls); the default limit is 20
    ("(Custom -> Review ? Revise : done) * 5 -> Format", 16),
    (
        "(Custom -> Review ? Revise : done) * 5 -> Format -> Format -> Format -> Format -> Format",
        20,
    ),
    (
        "(Custom -> Review ? Revise : done) * 5 -> Format -> Format -> Format -> Format -> Format"
        " -> Format",
        21,
    ),
    (
        "[Programmer, Programmer, Programmer] -> ScEnsemble -> (Review ? Revise : done) * 5"
        " -> (Review ? Revise : done) * 4",
        22,
    ),
    ("((Custom -> Custom) * 2 -> Custom) * 4", 20),
    ("((Custom -> Custom) * 2 -> Custom) * 5", 25),
    ("Custom -> Review ? ((Revise -> Revise) * 5) : done", 12),  # the default budget
    ("Custom -> Review ? ((Revise -> Revise) * 5) : done -> Custom", 13),
    ("Custom -> Review ? ((Revise -> Revise) * 5) : ((Revise -> Revise) * 4) -> Custom * 5", 17),
    ("Custom -> Review ? ((Revise -> Revise) * 5) : done -> (Custom -> Custom) * 4", 20),
    ("Custom -> Review ? ((Revise -> Revise) * 5) : done -> (Custom -> Custom) * 5", 22),
    ("[Custom, [AnswerGenerate, Custom] -> ScEnsemble] -> MdEnsemble", 5),
]


def _grammar_accepts(text: str, budget: bool, limits: StaticLimits | None = None,
                     operators: OperatorTable | None = None) -> bool:  # fmt: skip
    """Whether the constraint grammar (with the call budget or without) takes ``text``."""
    model, tok = build_tiny_model(seed=0)
    ll = grammar_tokenizer(tok, model.config.vocab_size, [tok.eos_token_id])
    grammar = workflow_grammar("math", operators, limits=limits, budget=budget)
    matcher = llguidance.LLMatcher(ll, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)
    tokens = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return all(matcher.consume_token(t) for t in tokens)


@pytest.mark.parametrize(("workflow", "calls"), BUDGET_CASES)
def test_the_budget_grammar_accepts_exactly_the_workflows_within_the_call_budget(workflow, calls):
    # the plain grammar accepts every case; with budget=True exactly those validate accepts
    report = validate(workflow, domain="math")
    assert report.syntax_ok and report.calls == calls, (report.errors, report.calls)
    assert _grammar_accepts(report.canonical, budget=False)
    accepted = _grammar_accepts(report.canonical, budget=True)
    assert accepted is (calls <= DEFAULT_MAX_CALLS) is report.ok


#: Programmer, MdEnsemble and Review counting several calls (a run's retries and votes)
WEIGHED = StaticLimits(max_calls=12, op_calls={"Programmer": 2, "MdEnsemble": 3, "Review": 2})
WEIGHED_CASES = [  # (workflow, worst-case calls under WEIGHED)
    ("[Programmer, Programmer] -> MdEnsemble -> Review ? Revise : done", 10),
    ("[Programmer, Programmer] -> MdEnsemble -> Review ? Revise : done -> Custom -> Custom", 12),
    ("[Programmer, Programmer] -> MdEnsemble -> Review ? Revise : done -> Custom * 3", 13),
    ("(Programmer -> Review ? Revise : done) * 2", 10),
    ("(Programmer -> Review ? Revise : done) * 3", 15),
    ("[Custom, Custom] -> MdEnsemble -> [Custom, Custom] -> MdEnsemble -> Format -> Format", 12),
    ("[Custom, Custom] -> MdEnsemble -> [Custom, Custom] -> MdEnsemble -> Format * 3", 13),
    ("Custom -> Review ? ((Programmer -> Revise) * 3) : done", 12),
    ("Custom -> Review ? ((Programmer -> Revise) * 3) : Custom -> Custom", 13),
    ("Programmer * 5 -> Programmer", 12),
]


@pytest.mark.parametrize(("workflow", "calls"), WEIGHED_CASES)
def test_the_budget_grammar_counts_each_operator_as_the_limits_weigh_it(workflow, calls):
    report = validate(workflow, domain="math", limits=WEIGHED)
    assert report.syntax_ok and report.calls == calls, (report.errors, report.calls)
    accepted = _grammar_accepts(report.canonical, budget=True, limits=WEIGHED)
    assert accepted is (calls <= 12) is report.ok


def test_the_budget_grammar_counts_what_the_table_declares():
    table = AFLOW_OPERATORS.extend(OperatorSpec("Debate", "refiner", calls=3))
    five = StaticLimits(max_calls=5)
    for workflow, calls in (("Custom -> Debate", 4), ("Custom -> Debate -> Format", 5),
                            ("Custom -> Debate -> Debate", 7)):  # fmt: skip
        report = validate(workflow, domain="math", operators=table, limits=five)
        assert report.calls == calls
        accepted = _grammar_accepts(workflow, budget=True, limits=five, operators=table)
        assert accepted is (calls <= 5) is report.ok, workflow
