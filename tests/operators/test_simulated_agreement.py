"""The exact analysis of the SIMULATED executor against the empirical rate of the REAL
interpreter (run_workflows) over many generated arithmetic problems and two executor seeds.

Agreement criterion: the empirical accuracy (and mean LLM calls) is within 4 standard errors
of the analytic expectation. For a binomial proportion the standard error is
``sqrt(p (1 - p) / n)`` with ``p`` the analytic mean over the problems; 4 standard errors are
exceeded by chance with probability about 6e-5 per comparison. Problems have mixed
difficulties: the expectation is the mean of the analytic accuracy of each problem's difficulty.

Runtime: workflows without Programmer need no sandbox (2,000 runs each, standard error about
0.01). The Programmer workflows run on the in-process stand-in :func:`simulated_sandbox` (2,000
runs each); that the stand-in answers exactly as the real process sandbox (a subprocess per
program, 50-200 ms each) is checked run by run on 40 problems, paired: equality of every
result is a stronger check than a rate within 4 standard errors, at a sixth of the programs.
"""

from __future__ import annotations

import functools
import math

import pytest

from flowgrpo.operators.backends.simulated import SimulatedExecutor
from flowgrpo.operators.interpreter import Limits, run_workflows
from flowgrpo.operators.simulation import analyze
from flowgrpo.operators.simulation.exact import simulated_sandbox
from flowgrpo.operators.tasks import generate_arithmetic

Z_MAX = 4.0
SEEDS = (0, 1)

PAIRED = "Programmer -> Review ? Revise : done"  # run on the real sandbox too, result by result
CASES = [
    # (workflow, problems per seed, sandbox, call budget)
    ("Custom", 1000, None, None),  # single
    ("AnswerGenerate -> Format", 1000, None, None),  # chain
    ("Custom -> Review ? Revise : done", 1000, None, None),  # conditional
    ("AnswerGenerate -> (Review ? Revise : done) * 3", 1000, None, None),  # loop
    ("[Custom, AnswerGenerate, Custom] -> MdEnsemble", 1000, None, None),  # parallel + Md
    (  # parallel + Sc, a conditional inside a branch, stops by a tight call budget
        "[Custom, Custom -> Review ? Revise : done, AnswerGenerate] -> ScEnsemble -> Format",
        1000,
        None,
        6,
    ),
    ("[Programmer, Custom] -> ScEnsemble -> (Review -> Revise) * 2", 1000, "inline", None),
    (PAIRED, 1000, "inline", None),
]


@functools.cache
def _problems(n: int):
    return generate_arithmetic(n, seed=21, split="test")  # the same 1,000 for seven workflows


def _run(workflow: str, n: int, sandbox: str | None, budget: int | None):
    problems = _problems(n)
    limits = Limits(max_llm_calls=budget) if budget else Limits()
    results, expected, calls = [], [], []
    for seed in SEEDS:
        llm = SimulatedExecutor(seed=seed)
        pairs = [(workflow, p) for p in problems]
        box = simulated_sandbox if sandbox == "inline" else None
        results += run_workflows(pairs, llm, limits, sandbox=box)
        by_difficulty = {}  # the analysis depends on the problem through its difficulty only
        for p in problems:
            d = p.meta["difficulty"]
            stats = by_difficulty.get(d) or analyze(workflow, difficulty=d, limits=limits)
            by_difficulty[d] = stats
            expected.append(stats.accuracy)
            calls.append(stats)
    return results, expected, calls


@pytest.fixture(scope="module")
def runs():
    return {case[0]: _run(*case) for case in CASES}


@pytest.mark.parametrize("workflow", [case[0] for case in CASES])
def test_analytic_accuracy_matches_the_interpreter(runs, workflow):
    results, expected, stats = runs[workflow]
    assert all(r.error is None or r.error.startswith("call budget") for r in results)
    n = len(results)
    p = sum(expected) / n
    empirical = sum(r.correct for r in results) / n
    se = math.sqrt(p * (1 - p) / n)
    assert abs(empirical - p) <= Z_MAX * se, (workflow, empirical, p, se)
    # calls: mean against the exact mean, with the exact variance of the calls
    mean_calls = sum(s.expected_calls for s in stats) / n
    var = sum(sum(k * k * q for k, q in s.calls.items()) - s.expected_calls**2 for s in stats) / n
    var = max(var, 0.0)  # constant calls: rounding can make it -1e-16
    observed = sum(r.calls for r in results) / n
    assert abs(observed - mean_calls) <= Z_MAX * math.sqrt(var / n) + 1e-9, (observed, mean_calls)


def test_the_budget_case_really_stops_runs(runs):
    workflow = CASES[5][0]
    results, _, stats = runs[workflow]
    stopped = sum(bool(r.error) for r in results) / len(results)
    predicted = sum(s.budget_stop for s in stats) / len(stats)
    assert predicted > 0.2 and abs(stopped - predicted) < 0.05


def test_better_by_construction_scores_higher_empirically(runs):
    good_results, good_expected, _ = runs[PAIRED]
    n = len(good_results) // len(SEEDS)
    custom_results, custom_expected, _ = runs["Custom"]
    # Custom on the same problems and seeds (the first n problems of each seed)
    same = [r for i, r in enumerate(custom_results) if i % 1000 < n]
    same_expected = [e for i, e in enumerate(custom_expected) if i % 1000 < n]
    gap = sum(r.correct for r in good_results) / len(good_results)
    gap -= sum(r.correct for r in same) / len(same)
    assert sum(good_expected) / len(good_expected) > sum(same_expected) / len(same) + 0.1
    assert gap > 0.05  # analytic gap about 0.16; standard error of the difference about 0.04


def test_the_real_process_sandbox_gives_the_stand_ins_results_run_by_run():
    problems = _problems(40)
    pairs = [(PAIRED, p) for p in problems]
    real = run_workflows(pairs, SimulatedExecutor(seed=0), Limits())  # the process sandbox
    programs = []

    def stand_in_box(codes, timeouts):  # the stand-in, keeping what its programs gave
        results = simulated_sandbox(codes, timeouts)
        programs.extend(results)
        return results

    stand_in = run_workflows(pairs, SimulatedExecutor(seed=0), Limits(), sandbox=stand_in_box)
    fields = ("answer", "correct", "score", "calls", "code_runs", "error")
    assert [[getattr(r, f) for f in fields] for r in real] == [
        [getattr(r, f) for f in fields] for r in stand_in
    ]
    # both outcomes of each are compared, not one of them 40 times: a program that crashed and
    # one that returned, a run right and a run wrong
    assert {r.ok for r in programs} == {True, False}
    assert 0 < sum(r.correct for r in real) < len(real)


def test_branches_without_a_vote_earn_the_accuracy_of_one_branch():
    """A hostile workflow: twelve parallel AnswerGenerate branches and no ensemble. The answer
    is the first branch's, so its accuracy must be one AnswerGenerate's, not "any branch right"
    (which a policy could farm by widening the block). A policy in the answer-ensembles world
    drifted to this workflow in one seed (research/RECORD.md): the reward did not pay it."""
    problems = _problems(1000)
    wide = "[" + ", ".join(["AnswerGenerate"] * 12) + "] * 1"
    results = run_workflows([(wide, p) for p in problems], SimulatedExecutor(seed=0), Limits())
    one = [analyze("AnswerGenerate", difficulty=p.meta["difficulty"]).accuracy for p in problems]
    p = sum(one) / len(one)
    empirical = sum(r.correct for r in results) / len(results)
    assert abs(empirical - p) <= Z_MAX * math.sqrt(p * (1 - p) / len(results)), (empirical, p)
    vote = "[AnswerGenerate, AnswerGenerate, AnswerGenerate] -> MdEnsemble"
    assert analyze(vote, difficulty="hard").accuracy > analyze(wide, difficulty="hard").accuracy
