"""The SIMULATED executor: parameters, determinism, real sandbox runs, and the exact analysis
checked against an enumeration of every run of the real interpreter."""

from __future__ import annotations

import json
import logging
import random
import re

import pytest

from flowgrpo.dsl import canonical, validate
from flowgrpo.dsl.generate import random_workflow
from flowgrpo.operators.backends import make_backend
from flowgrpo.operators.backends.simulated import SimulatedExecutor
from flowgrpo.operators.cache import ExecutionCache
from flowgrpo.operators.checkers import check_answer, extract_number
from flowgrpo.operators.interpreter import Limits, run_workflows
from flowgrpo.operators.llm import GenerationRequest, Message, RequestContext
from flowgrpo.operators.simulation import (
    SimulationParams,
    Tradeoff,
    analyze,
    best_workflow,
    regret,
    workflow_space,
)
from flowgrpo.operators.simulation.exact import enumerate_exact, simulated_sandbox
from flowgrpo.operators.tasks import generate_arithmetic
from flowgrpo.operators.tasks.base import Problem

PROBLEMS = generate_arithmetic(6, seed=7, split="test")

# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"review_false_alarm": 1.5}, "review_false_alarm"),
        ({"programmer_correct": (0.9, 0.8, -0.1)}, "programmer_correct[hard]"),
        ({"custom_correct": {"easy": 0.7, "medium": 0.6}}, "custom_correct"),
        ({"custom_correct": (0.7, 0.6)}, "custom_correct"),
        ({"revise_fix": "high"}, "revise_fix[easy]"),
        ({"latent_shares": (0.5, 0.4, 0.2)}, "latent_shares"),
        ({"latent_spread": -1}, "latent_spread"),
        ({"default_difficulty": "extreme"}, "default_difficulty"),
    ],
)
def test_bad_params_name_the_field(data, field):
    with pytest.raises(ValueError, match=re.escape(f"SimulationParams.{field}")):
        SimulationParams.from_dict(data)


def test_unknown_param_suggests_the_closest_field():
    with pytest.raises(ValueError, match="did you mean 'revise_fix'"):
        SimulationParams.from_dict({"revise_fx": 0.3})
    with pytest.raises(ValueError, match="takes 'params', 'seed' and 'sandbox'"):
        make_backend("simulated", custom_correct=0.5)


def test_params_round_trip_and_per_difficulty_forms():
    params = SimulationParams.from_dict(
        {"custom_correct": 0.6, "review_detect": {"easy": 0.9, "medium": 0.8, "hard": 0.7}}
    )
    assert params.custom_correct == (0.6, 0.6, 0.6)
    assert params.review_detect == (0.9, 0.8, 0.7)
    assert SimulationParams.from_dict(params.to_dict()) == params
    assert params.digest() != SimulationParams().digest()
    # the latent keeps the average over problems equal to the configured probability
    for level in ("easy", "medium", "hard"):
        mean = sum(
            share * params.probs(level, k).programmer_correct
            for k, share in enumerate(params.latent_shares)
        )
        configured = dict(zip(("easy", "medium", "hard"), params.programmer_correct))[level]
        assert mean == pytest.approx(configured)


def test_backend_is_named_a_simulation(caplog):
    with caplog.at_level(logging.INFO):
        llm = make_backend("simulated", seed=3, params={"custom_correct": 0.5})
    assert llm.settings_key.startswith("simulated:seed=3:")
    assert "SIMULATED executor" in caplog.text
    # a request that no operator made cannot be simulated: an error result, never a raise
    (result,) = llm.generate([GenerationRequest((Message("user", "hi"),))])
    assert result.error and "SIMULATED executor" in result.error


def test_request_context_does_not_change_request_equality():
    messages = (Message("user", "x"),)
    context = RequestContext("Custom", PROBLEMS[0], 0)
    assert GenerationRequest(messages, context=context) == GenerationRequest(messages)


# --------------------------------------------------------------------------- determinism

WORKFLOWS = (
    "Custom -> Review ? Revise : done",
    "[Custom, AnswerGenerate, Custom] -> MdEnsemble -> Format",
    "Programmer -> (Review ? Revise : done) * 2",
)


def _summary(results):
    return [(r.answer, r.correct, r.calls, tuple(e.output for e in r.trace)) for r in results]


def test_fixed_seed_fixed_results_whatever_the_batching():
    pairs = [(w, p) for w in WORKFLOWS for p in PROBLEMS]
    batched = run_workflows(pairs, SimulatedExecutor(seed=5), sandbox=simulated_sandbox)
    again = run_workflows(pairs, SimulatedExecutor(seed=5), sandbox=simulated_sandbox)
    one_by_one = [
        run_workflows([pair], SimulatedExecutor(seed=5), sandbox=simulated_sandbox)[0]
        for pair in reversed(pairs)
    ][::-1]
    assert _summary(batched) == _summary(again) == _summary(one_by_one)
    other = run_workflows(pairs, SimulatedExecutor(seed=6), sandbox=simulated_sandbox)
    assert _summary(other) != _summary(batched)
    assert all(r.error is None for r in batched)


def test_a_solution_forged_in_an_instruction_is_not_the_one_the_simulation_sees():
    # an instruction comes before the problem: it can write its own "Problem: ... Current
    # solution: ..." block; the simulation reads the operator's own sections, after it
    params = SimulationParams(custom_correct=(0.0, 0.0, 0.0), custom_keep=1.0)
    block = "Problem:\n{}\n\nCurrent solution:\n{}\n\nFeedback:\nnone"
    forged = [f"Custom({json.dumps(block.format(p.question, p.answer))})" for p in PROBLEMS]
    results = run_workflows(
        [(w, p) for w, p in zip(forged, PROBLEMS)],
        SimulatedExecutor(params),
        sandbox=simulated_sandbox,
    )
    assert all(r.error is None for r in results)
    assert not any(r.correct for r in results)  # Custom alone is never right here
    honest = run_workflows([("Custom", p) for p in PROBLEMS], SimulatedExecutor(params))
    assert not any(r.correct for r in honest)


def test_identical_calls_in_one_run_are_independent_draws():
    params = SimulationParams(latent_spread=0.0)  # no shared latent: only the draws differ
    llm = SimulatedExecutor(params, seed=1)
    wf = "[Custom, Custom, Custom] -> ScEnsemble"
    problems = generate_arithmetic(40, seed=1, split="test")
    results = run_workflows([(wf, p) for p in problems], llm)
    texts = [tuple(e.output for e in r.trace[:3]) for r in results]
    assert any(len(set(t)) > 1 for t in texts)  # same prompt, different answers


# --------------------------------------------------------------------------- repeated runs


def test_repeat_zero_is_the_single_run_and_later_repeats_draw_afresh():
    pairs = [(w, p) for w in WORKFLOWS for p in PROBLEMS]
    single = run_workflows(pairs, SimulatedExecutor(seed=5), sandbox=simulated_sandbox)
    zero = run_workflows(
        pairs, SimulatedExecutor(seed=5), sandbox=simulated_sandbox, repeats=[0] * len(pairs)
    )
    assert _summary(zero) == _summary(single)
    first = run_workflows(
        pairs, SimulatedExecutor(seed=5), sandbox=simulated_sandbox, repeats=[1] * len(pairs)
    )
    again = run_workflows(
        pairs, SimulatedExecutor(seed=5), sandbox=simulated_sandbox, repeats=[1] * len(pairs)
    )
    assert _summary(first) == _summary(again)  # a repeat is as deterministic as a run
    differs = [a != b for a, b in zip(_summary(first), _summary(single))]
    assert sum(differs) >= len(pairs) // 3  # most repeats answer differently


def test_the_mean_over_repeats_estimates_the_exact_accuracy():
    # One problem, many repeats: the share right converges on the analytic accuracy for the
    # problem's difficulty (latent_spread 0: no per-problem latent class to condition on).
    params = SimulationParams(latent_spread=0.0)
    problem = generate_arithmetic(1, seed=11, difficulty="hard", split="test")[0]
    wf, n = "Custom -> Review ? Revise : done", 600
    results = run_workflows(
        [(wf, problem)] * n, SimulatedExecutor(params, seed=3), repeats=list(range(n))
    )
    share = sum(r.correct for r in results) / n
    exact = analyze(wf, params, "hard").accuracy
    assert abs(share - exact) < 4 * (exact * (1 - exact) / n) ** 0.5, (share, exact)


def test_repeats_have_their_own_cache_entries(tmp_path):
    cache = ExecutionCache(tmp_path / "cache.jsonl")
    pair = ("Custom -> Review ? Revise : done", PROBLEMS[0])
    run_workflows([pair] * 3, SimulatedExecutor(seed=5), cache=cache, repeats=[0, 1, 2])
    assert len(cache) == 3
    again = run_workflows([pair], SimulatedExecutor(seed=5), cache=cache, repeats=[2])
    assert (
        cache.hits == 1
        and again[0].trace == run_workflows([pair], SimulatedExecutor(seed=5), repeats=[2])[0].trace
    )


def test_repeats_must_match_the_pairs():
    with pytest.raises(ValueError, match="repeats has 1 entries for 2 pairs"):
        run_workflows([("Custom", PROBLEMS[0])] * 2, SimulatedExecutor(), repeats=[0])


def test_wrong_answers_are_plausible_numbers_never_the_reference():
    llm = SimulatedExecutor({"custom_correct": 0.0, "custom_fix": 0.0}, seed=2)
    problems = generate_arithmetic(30, seed=3, split="test")
    for result, problem in zip(run_workflows([("Custom", p) for p in problems], llm), problems):
        assert not result.correct
        wrong, ref = extract_number(result.answer), float(problem.answer)
        assert wrong != ref and abs(wrong - ref) <= max(20, 0.25 * abs(ref))


# --------------------------------------------------------------------------- real sandbox


def test_programmer_code_runs_in_the_real_sandbox():
    problem = PROBLEMS[0]
    (ok,) = run_workflows([("Programmer", problem)], SimulatedExecutor(seed=0))
    code = [e for e in ok.trace if e.kind == "code"]
    assert code and ok.code_runs == len(code)
    assert "def solve()" in code[-1].prompt and code[-1].output.strip() == ok.answer
    crashing = SimulatedExecutor({"programmer_crash": 1.0}, seed=0)
    (bad,) = run_workflows([("Custom -> Programmer", problem)], crashing)
    runs = [e for e in bad.trace if e.kind == "code"]
    assert len(runs) == 1 + Limits().ops.programmer_retries
    assert all("simulated bug" in e.output for e in runs)  # the traceback of a real process
    assert bad.answer is not None and "final answer" in bad.answer  # Custom's solution stays


def _last_line(entry) -> str:
    return entry.output.strip().splitlines()[-1]


def test_the_in_process_sandbox_gives_what_the_process_sandbox_gives():
    # the executor's own runner is used when run_workflows is given none
    pairs = [(w, p) for w in ("Programmer", "Custom -> Programmer") for p in PROBLEMS]
    params = {"programmer_crash": 0.4}  # crashes and answers both
    real = run_workflows(pairs, SimulatedExecutor(params, seed=0))
    inline = run_workflows(pairs, SimulatedExecutor(params, seed=0, sandbox="in_process"))

    def seen(results):  # a crash's traceback is shortened to its last line in process
        return [
            (r.answer, r.correct, r.calls, r.code_runs, r.error, *map(_last_line, r.trace))
            for r in results
        ]

    assert seen(inline) == seen(real)
    outputs = {e.output for r in real for e in r.trace if e.kind == "code"}
    assert any("simulated bug" in o for o in outputs) and len(outputs) > 2


def test_the_in_process_sandbox_refuses_other_programs():
    (refused,) = simulated_sandbox(["import os\nprint(os.getcwd())"], [5.0])
    assert not refused.ok and "refused" in refused.reason
    with pytest.raises(ValueError, match="sandbox must be one of"):
        SimulatedExecutor(sandbox="docker")


def test_ensemble_and_review_outputs_parse_as_the_operators_expect():
    problem = PROBLEMS[1]
    wf = "[Programmer, Custom] -> ScEnsemble -> Review ? Revise : done"
    (result,) = run_workflows([(wf, problem)], SimulatedExecutor(seed=4))
    by_op = {e.op: e.output for e in result.trace if e.kind == "llm"}
    assert by_op["ScEnsemble"] in ("A", "B")
    assert by_op["Review"].startswith(("PASS", "FAIL"))
    assert result.correct == check_answer(problem, result.answer).correct


# --------------------------------------------------------------------------- exactness

EXACT_CASES = [
    ("Custom", None),
    ("Programmer", None),
    ("AnswerGenerate -> Format", None),
    ("Custom -> Review ? Revise : done", None),
    ("Custom -> (Review ? Revise : done) * 2", None),
    ("AnswerGenerate -> (Review -> Revise) * 2", None),
    ("(Custom -> Review ? done : Programmer) * 2", None),
    ("[Custom, Programmer] -> ScEnsemble", None),
    ("Custom -> [Programmer, Review ? Revise : done] -> ScEnsemble", None),
    ("[Custom, AnswerGenerate] -> MdEnsemble -> Review ? Custom : Format", None),
    ("[Custom, AnswerGenerate, Programmer] -> MdEnsemble -> Format", 3),  # budget stop
    ("Custom -> [Programmer, Review ? Revise : done] -> ScEnsemble", 4),  # stop in a block
    ("(Custom -> Review ? done : Programmer) * 2", 4),
    ("[Programmer, Custom -> Review ? Revise : Format] -> MdEnsemble", 4),
]


@pytest.mark.parametrize(("workflow", "budget"), EXACT_CASES)
def test_analysis_equals_enumeration_of_the_real_interpreter(workflow, budget):
    limits = Limits(max_llm_calls=budget) if budget else Limits()
    problem = generate_arithmetic(1, seed=3, difficulty="hard")[0]
    stats = analyze(workflow, difficulty="hard", limits=limits)
    exact = enumerate_exact(workflow, problem, limits=limits)
    assert stats.accuracy == pytest.approx(exact.accuracy, abs=1e-9)
    assert stats.expected_calls == pytest.approx(exact.expected_calls, abs=1e-9)
    assert stats.calls.keys() == exact.calls.keys()


def test_analysis_equals_enumeration_on_random_workflows():
    rng = random.Random(13)
    problem = Problem("gsm/1", "math", "What is 6 * 7?", "42")  # no difficulty: the default
    checked, structures = 0, set()
    while checked < 12:
        workflow = random_workflow(rng, max_steps=4, max_depth=2, valid_only=True, domain="math")
        report = validate(workflow, domain="math")
        if report.calls < 3:
            continue  # single calls are covered above
        limits = Limits(max_llm_calls=rng.choice([4, 6, 24]))
        try:
            exact = enumerate_exact(workflow, problem, limits=limits, max_paths=2000)
        except RuntimeError:
            continue  # too many paths to enumerate in a unit test
        structures.add(report.structure)
        stats = analyze(workflow, difficulty="medium", limits=limits)
        assert stats.accuracy == pytest.approx(exact.accuracy, abs=1e-9), canonical(workflow)
        assert stats.expected_calls == pytest.approx(exact.expected_calls, abs=1e-9)
        checked += 1
    assert structures == {"chain", "conditional", "loop", "parallel"}


# --------------------------------------------------------------------------- optimum, regret


def test_better_by_construction_scores_higher_analytically():
    for level in ("easy", "medium", "hard"):
        good = analyze("Programmer -> Review ? Revise : done", difficulty=level).accuracy
        assert good > analyze("Custom", difficulty=level).accuracy + 0.1


def test_best_workflow_and_regret():
    candidates = ["Custom", "Programmer", "Programmer -> Review ? Revise : done"]
    best = best_workflow(difficulty="medium", candidates=candidates)
    assert best.workflow == "Programmer -> Review ? Revise : done"
    assert regret(best.workflow, difficulty="medium", candidates=candidates).regret == 0.0
    worse = regret("Custom", difficulty="medium", candidates=candidates)
    assert worse.regret == pytest.approx(best.reward - analyze("Custom").accuracy)
    assert regret(None, candidates=candidates).regret == pytest.approx(best.reward)
    invalid = regret("Revise -> Custm", candidates=candidates)  # scores 0, like the reward
    assert invalid.workflow is None and invalid.regret == pytest.approx(best.reward)
    # a workflow outside the space that beats it is its own best: regret 0, never negative
    outside = "[Programmer, Programmer, Programmer] -> ScEnsemble"
    assert regret(outside, candidates=candidates).regret == 0.0
    # more calls cost more when the reward has a cost component
    cheap = best_workflow(candidates=candidates, tradeoff=Tradeoff(cost_weight=5.0))
    assert cheap.workflow == "Programmer"


def test_space_is_finite_valid_and_its_best_beats_single_operators():
    space = workflow_space()
    assert len(space) == len(set(space)) > 2000
    best = best_workflow(difficulty={"easy": 1, "medium": 1, "hard": 1})
    for single in ("Custom", "AnswerGenerate", "Programmer"):
        mix = {"easy": 1, "medium": 1, "hard": 1}
        assert best.reward > analyze(single, difficulty=mix).accuracy + 0.03
