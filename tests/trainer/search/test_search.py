"""``flowgrpo search`` (trainer/search/run.py, cli/search.py) with the SIMULATED executor, whose
exact expected rewards say which workflow is best."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from flowgrpo.operators.executor import ExecutorConfig, executor_limits
from flowgrpo.operators.simulation import Tradeoff, analyze, expected_reward
from flowgrpo.operators.simulation.oracle import arithmetic_mix, oracle
from flowgrpo.operators.simulation.worlds import load_world
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop.prompt import PolicyPrompt
from flowgrpo.trainer.loop.sft import jsonl_pairs
from flowgrpo.trainer.search.run import prepare, result_json, search, sft_pairs

CONFIG = "configs/known-optimum.yaml"
THREE = ["Custom", "Programmer", "[Programmer, Programmer, Programmer] -> ScEnsemble"]


def world_config(name: str, *extra: str):
    world = load_world(f"configs/worlds/{name}.yaml")
    sets = [f"rewards.weights.{k}={v}" for k, v in world.reward_weights.items()]
    params = json.dumps(dict(world.simulation))
    return world, load_config(CONFIG, (f"executor.options.params={params}", *sets, *extra))


def exact(world, workflow: str) -> float:
    limits = executor_limits(ExecutorConfig(max_calls=12))
    cost = float(world.reward_weights.get("cost", 0.0))
    mix = arithmetic_mix(world.params)
    return expected_reward(analyze(workflow, world.params, mix, limits), Tradeoff(1.0, cost, 12))


def test_the_reward_is_the_runs_accuracy_and_cost_weights():
    _, cfg = world_config("cheap")
    assert dict(cfg.rewards.for_one_workflow().weights) == {"accuracy": 1.0, "cost": 1.0}
    only_validity = load_config(CONFIG, ("rewards.weights={validity: 1.0}",))
    assert dict(only_validity.rewards.for_one_workflow().weights) == {"accuracy": 1.0, "cost": 0.0}


def test_three_candidates_the_exact_best_wins_and_the_calls_are_counted():
    world, cfg = world_config("cheap")
    result = search(cfg, 6000, candidates=THREE)
    by_exact = max(THREE, key=lambda w: exact(world, w))
    assert result.best.workflow == by_exact == "Programmer"
    assert result.calls == sum(a.calls for a in result.arms) == sum(r.calls for r in result.rounds)
    assert abs(result.best.mean - exact(world, "Programmer")) < 3 * result.best.ci95


@pytest.mark.slow
def test_the_whole_space_finds_a_workflow_within_0_02_of_the_exact_best():
    """The default candidates (1,773 writable workflows), 150,000 calls, in a world where one
    workflow is clearly best (adaptive-checks: 3 within 0.02): the pick's exact reward is within
    0.02 of the best single workflow's (docs/RESULTS.md has every world at 1,000,000 calls)."""
    world, cfg = world_config("adaptive-checks")
    result = search(cfg, 150_000)
    limits = executor_limits(ExecutorConfig(max_calls=12))
    cost = float(world.reward_weights.get("cost", 0.0))
    best = oracle(world.params, arithmetic_mix(world.params), None, limits,
                  Tradeoff(1.0, cost, 12)).single  # fmt: skip
    assert best.reward - exact(world, result.best.workflow) <= 0.02
    assert len(result.arms) == 1773 and result.calls <= 1.1 * 150_000


def test_an_invalid_candidate_is_named():
    _, cfg = world_config("default")
    with pytest.raises(ValueError, match=r"candidate 'Review' is not a valid workflow"):
        search(cfg, 100, candidates=["Custom", "Review"])


def test_a_task_that_is_not_math_needs_its_own_candidates(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"question": "Capital of France?", "answer": "Paris", "domain": "qa"}\n')
    cfg = load_config(CONFIG, (f"rollout.task=jsonl:{path}",))
    with pytest.raises(ValueError, match="the built-in workflow space is for math"):
        search(cfg, 100)


def test_more_pulls_than_problems_draw_fresh_repeats():
    """One training problem, many pulls: each pull after the first is a further repeat, a fresh
    draw of the simulated executor, so the same workflow is right on some and wrong on others
    (with repeats of index 0 it would score the one answer every time)."""
    _, cfg = world_config("default", "rollout.train_size=1")
    result = search(cfg, 400, candidates=["Custom", "AnswerGenerate"])
    for arm in result.arms:
        assert arm.n == arm.pulls > 20 and set(arm.rewards) == {0.0, 1.0}, arm


def test_the_json_and_the_sft_pairs_of_the_winner(tmp_path):
    _, cfg = world_config("cheap")
    setup = prepare(cfg, None, 0)
    result = search(cfg, 3000, candidates=THREE, environment=setup.environment)
    data = result_json(result, CONFIG, top=2)
    assert data["budget_calls"] == 3000 and data["candidates"] == 3 and len(data["top"]) == 2
    assert data["top"][0]["workflow"] == "Programmer" and data["top"][0]["n"] >= 2
    path = tmp_path / "pairs.jsonl"
    assert sft_pairs(path, [result.best.workflow], setup.environment, 5) == 5
    problems, workflows = jsonl_pairs(str(path), PolicyPrompt())  # the SFT loader reads it
    assert workflows == ["Programmer"] * 5 and len(problems) == 5
    assert sft_pairs(path, ["Programmer", "Custom"], setup.environment, 5) == 5
    problems, workflows = jsonl_pairs(str(path), PolicyPrompt())
    assert workflows == ["Programmer", "Custom", "Programmer", "Custom", "Programmer"]
    assert len({p.question for p in problems}) == 5  # each problem once
    with pytest.raises(ValueError, match="at least one workflow"):
        sft_pairs(path, [], setup.environment, 5)


def test_the_sft_pairs_carry_the_labels_the_prompt_shows_and_no_others(tmp_path):
    _, cfg = world_config("cheap", "prompt.meta_keys=[difficulty]")
    setup = prepare(cfg, None, 0)
    path = tmp_path / "pairs.jsonl"
    assert sft_pairs(path, ["Programmer"], setup.environment, 4) == 4
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    truth = [p.meta["difficulty"] for p in setup.environment.problems[:4]]
    assert [row["meta"] for row in rows] == [{"difficulty": d} for d in truth]
    problems, _ = jsonl_pairs(str(path), setup.environment.prompt)
    assert problems[0].meta == {"difficulty": truth[0]}


def test_the_command_prints_the_top_workflows_and_writes_json(tmp_path):
    candidates = tmp_path / "candidates.txt"
    candidates.write_text("# three workflows\n" + "\n".join(THREE) + "\n")
    out, pairs = tmp_path / "search.json", tmp_path / "pairs.jsonl"
    result = CliRunner().invoke(main, [
        "search", "--config", CONFIG, "--set", "rewards.weights.cost=1.0", "--budget", "3000",
        "--candidates", str(candidates), "--out", str(out), "--sft-pairs", str(pairs), "-q",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("3 candidates, 2 rounds"))
    assert "rank" in lines[first + 1] and lines[first + 2].split()[-1] == "Programmer"
    assert json.loads(out.read_text())["top"][0]["workflow"] == "Programmer"
    assert len(pairs.read_text().splitlines()) == 1000  # sft.examples of the config
    assert {json.loads(x)["workflow"] for x in pairs.read_text().splitlines()} == {"Programmer"}


def test_sft_top_spreads_the_pairs_over_the_best_workflows(tmp_path):
    candidates, pairs = tmp_path / "candidates.txt", tmp_path / "pairs.jsonl"
    candidates.write_text("\n".join(THREE) + "\n")
    result = CliRunner().invoke(main, [
        "search", "--config", CONFIG, "--budget", "3000", "--candidates", str(candidates),
        "--sft-pairs", str(pairs), "--sft-top", "2", "--out", str(tmp_path / "s.json"), "-q",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    top = [arm["workflow"] for arm in json.loads((tmp_path / "s.json").read_text())["top"][:2]]
    written = [json.loads(x)["workflow"] for x in pairs.read_text().splitlines()]
    assert written[:4] == [top[0], top[1], top[0], top[1]] and set(written) == set(top)
    assert "of 2 workflow(s)" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--candidates", "{tmp}/none.txt"], "none.txt"),
        (["--candidates", "{tmp}/empty.txt"], "no workflow in it"),
        (["--candidates", "{tmp}/bad.txt"], "is not a valid workflow"),
    ],
)
def test_bad_candidates_are_one_line(tmp_path, args, message):
    (tmp_path / "empty.txt").write_text("# nothing\n")
    (tmp_path / "bad.txt").write_text("Custom ->\n")
    argv = [
        "search",
        "--config",
        CONFIG,
        "--budget",
        "100",
        *(a.format(tmp=tmp_path) for a in args),
    ]
    result = CliRunner().invoke(main, argv)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and message in errors[0], result.output


def test_the_search_runs_against_an_openai_compatible_server(tmp_path):
    """The same command with executor.kind openai: every pull is a chat request to the server
    (a local scripted one answering 5), counted as calls."""
    from fault_server import FaultServer

    server = FaultServer(answer=lambda body: "The answer is 5.", models=("served",), lifetime_s=120)
    candidates = tmp_path / "two.txt"
    candidates.write_text("Custom\nAnswerGenerate -> Custom\n")
    try:
        result = CliRunner().invoke(main, [
            "search", "--config", "configs/tiny.yaml", "--set", "executor.kind=openai",
            "--set", f"executor.base_url={server.url}", "--set", "executor.model=served",
            "--budget", "30", "--candidates", str(candidates), "-q",
        ])  # fmt: skip
        chat = len(server.requests)
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("2 candidates"))
    calls = int(line.split(", ")[2].split()[0].replace(",", ""))
    assert calls == chat > 0  # one executor call, one chat request


def test_the_search_runs_on_the_shared_executor_of_a_tiny_run(tmp_path):
    """configs/tiny.yaml's executor (shared: the run's base model, here tiny-random) is built
    as the Trainer builds it; two candidates, a small budget."""
    cfg = load_config("configs/tiny.yaml", ("executor.kind=shared",))
    result = search(cfg, 40, candidates=["Custom", "AnswerGenerate"])
    assert {a.workflow for a in result.arms} == {"Custom", "AnswerGenerate"}
    assert result.calls > 0 and all(a.pulls >= 1 for a in result.arms)
