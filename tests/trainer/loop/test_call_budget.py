"""One call budget, ``executor.max_calls``: the constrained sampler (training and evaluation),
the reward's validation, the interpreter's validation and budget, and the cost score's
normaliser all derive from it, and the static count weighs each operator with the calls its
settings let it make (votes, retries), so a workflow valid for the reward is never one the
executor stops."""

import json

import pytest

from flowgrpo.configuration import ConfigError
from flowgrpo.dsl.space import workflow_space
from flowgrpo.dsl.validate import DEFAULT_MAX_CALLS, StaticLimits, validate
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.backends.simulated import SimulatedExecutor
from flowgrpo.operators.executor import executor_limits
from flowgrpo.operators.interpreter import Limits
from flowgrpo.operators.models import build_tiny_model
from flowgrpo.operators.ops import OpSettings
from flowgrpo.operators.simulation import SimulationParams
from flowgrpo.operators.simulation.exact import simulated_sandbox
from flowgrpo.operators.simulation.oracle import writable_space
from flowgrpo.operators.tasks import generate_arithmetic
from flowgrpo.operators.tasks.base import Problem
from flowgrpo.rewards import prepare_samples
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import rollout as rollout_mod
from flowgrpo.trainer.loop.constrain import sampling_limits
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.sft import jsonl_pairs, prepare_sft
from flowgrpo.trainer.loop.trainer import Trainer
from flowgrpo.trainer.reports.evaluate import EvalSettings, evaluate

BUDGET = 2  # far below the default (12): a random policy writes longer workflows


def test_training_samples_keep_the_executors_call_budget(tmp_path):
    cfg = load_config(
        "configs/tiny.yaml",
        (f"logging.output_dir={tmp_path}", "rollout.constrained=grammar",
         f"executor.max_calls={BUDGET}", "optim.max_steps=1",
         "rollout.dynamic_sampling=false"),
    )  # fmt: skip
    Trainer(cfg, executor=ScriptedBackend(lambda request: "5")).train()
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 16
    limits = executor_limits(cfg.executor).static_limits()
    for row in rows:  # checked here by validate's own call count under the run's budget
        report = validate(row["completion"], domain="math", limits=limits)
        assert report.ok, row["completion"]
        assert report.calls <= BUDGET, row["completion"]


def test_evaluation_samples_keep_the_executors_call_budget(monkeypatch):
    texts, real = [], rollout_mod.generate_rollout

    def spy(*args, **kwargs):
        rollout = real(*args, **kwargs)
        texts.extend(rollout.texts)
        return rollout

    monkeypatch.setattr(rollout_mod, "generate_rollout", spy)
    model, tok = build_tiny_model(seed=1)
    settings = EvalSettings(n=4, k=16, temperature=1.0, max_new_tokens=48, execute=False,
                            constrained="grammar")  # fmt: skip
    limits = Limits(max_llm_calls=BUDGET)  # the interpreter's limits, as `flowgrpo eval` has
    result = evaluate(model, tok, settings, executor=None, limits=limits)
    assert result["validity_rate"] == 1.0 and len(texts) == 64
    for text in texts:
        report = validate(text, domain="math", limits=limits.static_limits())
        assert report.ok and report.calls <= BUDGET, text


def test_sampling_limits_are_the_runs_static_limits():
    heavy = {"Programmer": 2, "MdEnsemble": 3}  # the default settings: 1 retry, 3 votes
    assert sampling_limits(None) is None
    assert sampling_limits(Limits(max_llm_calls=12)) == StaticLimits(max_calls=12, op_calls=heavy)
    assert sampling_limits(Limits(max_llm_calls=30)) == StaticLimits(max_calls=30, op_calls=heavy)
    ops = OpSettings(programmer_retries=0, md_votes=5, test_fix_rounds=2)
    assert sampling_limits(Limits(ops=ops)).op_calls == (("MdEnsemble", 5), ("Test", 2))


def test_every_budget_of_a_config_is_executor_max_calls():
    for calls in (DEFAULT_MAX_CALLS, 5):
        cfg = load_config("configs/tiny.yaml", (f"executor.max_calls={calls}",))
        limits = executor_limits(cfg.executor)
        assert cfg.executor.max_calls == calls == limits.max_llm_calls
        assert limits.static_limits().max_calls == calls
        assert cfg.rewards.options.cost_max_calls == calls  # derived: the cost normaliser
    assert Limits().max_llm_calls == StaticLimits().max_calls == DEFAULT_MAX_CALLS == 12
    scaled = load_config("configs/tiny.yaml", ("rewards.options.cost_max_calls=20",))
    assert scaled.rewards.options.cost_max_calls == 20  # another scale, set on purpose


#: six operators that make one call each: valid under a budget of 6, not under 5
SIX = "Custom -> Custom -> Custom -> Custom -> Custom -> Format"


def _samples(budget: int):
    problem = Problem("m/1", "math", "What is 2 + 3?", "5")
    calls = []

    def answer(request):
        calls.append(request)
        return "5"

    samples = prepare_samples(
        [problem], [SIX], 1, llm=ScriptedBackend(answer), limits=Limits(max_llm_calls=budget)
    )
    return samples[0], calls


def test_a_workflow_valid_for_the_reward_runs_to_its_end():
    sample, calls = _samples(6)
    assert sample.valid and sample.execution is not None
    assert sample.execution.error is None and len(calls) == 6  # every operator ran
    assert sample.execution.correct


def test_a_workflow_over_the_budget_is_invalid_for_the_reward_not_cut_short():
    sample, calls = _samples(5)
    assert not sample.valid and sample.execution is None and calls == []
    assert [e.code for e in sample.report.errors] == ["too_many_calls"]


#: three majority votes of three calls each (md_votes 3) and a Format: 16 calls at most, where
#: one call per operator counts 10 (within the default budget of 12, stopped at 12 before)
VOTES = (
    "[Custom, Custom] -> MdEnsemble -> [Custom, Custom] -> MdEnsemble -> [Custom, Custom]"
    " -> MdEnsemble -> Format"
)
#: three Programmers of two tries each (programmer_retries 1) and a Format: 7 calls at most
TRIES = "Programmer -> Programmer -> Programmer -> Format"
CRASH = "```python\ndef solve():\n    raise ValueError('no')\n```"


def _run(workflow: str, budget: int):
    """``workflow`` prepared for the reward under ``budget``, every Programmer's code crashing,
    every vote for candidate A: (the sample, the requests the executor answered)."""
    calls = []

    def answer(request):
        calls.append(request)
        return {"Programmer": CRASH, "MdEnsemble": "A"}.get(request.context.op, "5")

    problem = Problem("m/1", "math", "What is 2 + 3?", "5")
    backend, limits = ScriptedBackend(answer), Limits(max_llm_calls=budget)
    return prepare_samples([problem], [workflow], 1, llm=backend, limits=limits)[0], calls


def test_an_operator_counts_the_calls_its_settings_let_it_make():
    static = Limits().static_limits()
    assert validate(VOTES, domain="math").calls == 10  # one call each
    assert validate(VOTES, domain="math", limits=static).calls == 16
    assert validate(TRIES, domain="math", limits=static).calls == 7
    errors = validate(VOTES, domain="math", limits=static).errors
    assert [e.code for e in errors] == ["too_many_calls"] and "MdEnsemble makes 3" in errors[
        0
    ].message


def test_a_workflow_of_votes_valid_for_the_reward_runs_every_vote():
    sample, calls = _run(VOTES, 16)
    assert sample.valid and sample.execution.error is None, sample.execution
    assert [c.context.op for c in calls].count("MdEnsemble") == 9 and len(calls) == 16
    assert sample.execution.correct  # the Format after the last vote ran


def test_a_workflow_of_votes_over_the_budget_is_invalid_not_cut_short():
    sample, calls = _run(VOTES, 12)
    assert not sample.valid and sample.execution is None and calls == []
    assert [e.code for e in sample.report.errors] == ["too_many_calls"]


def test_a_crashing_programmer_valid_for_the_reward_makes_every_retry():
    sample, calls = _run(TRIES, 7)
    assert sample.valid and sample.execution.error is None, sample.execution
    assert [c.context.op for c in calls] == ["Programmer"] * 6 + ["Format"]
    sample, calls = _run(TRIES, 6)
    assert not sample.valid and calls == []


def test_each_steps_executor_calls_are_the_requests_the_executor_received(tmp_path):
    """``executor_calls`` (what `flowgrpo search --budget` compares with): summed over the run,
    exactly the requests the backend answered; resampled groups and repeats included."""
    backend = ScriptedBackend(lambda request: "5")
    cfg = load_config(
        "configs/tiny.yaml",
        (f"logging.output_dir={tmp_path}", "rollout.constrained=grammar", "optim.max_steps=2",
         "rollout.executions=2", "rollout.dynamic_sampling=true"),
    )  # fmt: skip
    Trainer(cfg, executor=backend).train()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sum(line["executor_calls"] for line in lines) == len(backend.calls) > 0


def test_an_sft_pair_the_runs_reward_would_refuse_is_no_target(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"question": "What is 2 + 3?", "workflow": VOTES}) + "\n")
    cfg = load_config("configs/tiny.yaml", (f"sft.data=jsonl:{path}", "executor.max_calls=12"))
    with pytest.raises(ConfigError, match=r"line 1: .*up to 16 executor calls \(limit 12"):
        prepare_sft(cfg)  # refused before the model loads
    _, workflows = jsonl_pairs(str(path), PolicyPrompt(), Limits(max_llm_calls=16).static_limits())
    assert workflows == [validate(VOTES).canonical]  # within a 16-call run's budget


def test_every_workflow_of_the_space_valid_for_the_reward_runs_to_its_end_at_its_worst():
    # the SIMULATED executor at its worst: every Programmer attempt crashes, every Review says
    # FAIL (each loop runs every pass, each conditional its failing branch), so each run makes
    # the most calls it can; through the reward's own path, with the default 12-call budget
    params = SimulationParams.from_dict(
        {"programmer_crash": 1.0, "review_detect": 1.0, "review_false_alarm": 1.0}
    )
    limits = Limits()
    space = workflow_space()  # 2,275, one call each; the reward refuses those over its count
    problem = generate_arithmetic(1, seed=0)[0]
    samples = prepare_samples([problem], list(space), len(space),
                              llm=SimulatedExecutor(seed=0, params=params), limits=limits,
                              sandbox=simulated_sandbox)  # fmt: skip
    valid = [s for s in samples if s.valid]
    assert len(valid) == len(writable_space(limits)) == 1773
    for sample in valid:
        run = sample.execution
        assert run.error is None, (sample.report.canonical, run.error)  # never cut short
        assert run.calls == sample.report.calls <= 12, sample.report.canonical  # the count is tight
    refused = [s for s in samples if not s.valid]
    assert {e.code for s in refused for e in s.report.errors} == {"too_many_calls"}
