"""``flowgrpo search --by KEY``: one search per label value, against the simulation's exact
best workflow of each difficulty (adaptive-checks: one Programmer call on easy problems, a
critique loop on hard ones); the pairs give each problem its own label's workflows."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_search import world_config

from flowgrpo.operators.executor import ExecutorConfig, executor_limits
from flowgrpo.operators.simulation import Tradeoff, analyze, expected_reward
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.loop.environment import build_environment
from flowgrpo.trainer.search.by_label import search_by, sft_pairs_by, split_by
from flowgrpo.trainer.search.run import prepare

CANDIDATES = ["Programmer", "AnswerGenerate -> (Review ? Revise : done) * 3"]


def exact_by_kind(world, workflow: str, kind: str) -> float:
    limits = executor_limits(ExecutorConfig(max_calls=12))
    cost = float(world.reward_weights.get("cost", 0.0))
    return expected_reward(analyze(workflow, world.params, kind, limits), Tradeoff(1.0, cost, 12))


def test_each_difficulty_gets_its_own_exact_best_workflow():
    world, cfg = world_config("adaptive-checks", "rollout.train_size=300")
    environment = prepare(cfg, None, 0).environment
    results = search_by(cfg, 24_000, ["difficulty"], environment, candidates=CANDIDATES)
    assert list(results) == ["easy", "hard", "medium"]
    for level, result in results.items():
        best = max(CANDIDATES, key=lambda w: exact_by_kind(world, w, level))
        assert result.best.workflow == best, (level, [(a.workflow, a.mean) for a in result.arms])
        assert result.budget == 8_000  # each label an equal share of the budget
    assert results["easy"].best.workflow != results["hard"].best.workflow  # the table differs


def test_a_problem_without_the_label_is_named():
    _, cfg = world_config("cheap", "rollout.train_size=5")
    environment = build_environment(cfg, with_executor=False)
    with pytest.raises(ValueError, match=r"--by level: problem arithmetic/train/0 has no meta key"):
        split_by(environment, ["template", "level"])


def test_several_keys_label_a_problem_by_their_values_joined():
    _, cfg = world_config("cheap", "rollout.train_size=40")
    environment = build_environment(cfg, with_executor=False)
    parts = split_by(environment, ["template", "difficulty"])
    assert len(parts) > 5 and sum(len(e.problems) for e in parts.values()) == 40
    for label, part in parts.items():
        for problem in part.problems:
            assert label == f"{problem.meta['template']}/{problem.meta['difficulty']}"


def test_the_pairs_give_each_problem_its_own_labels_workflows_and_show_the_labels(tmp_path):
    _, cfg = world_config("cheap", "rollout.train_size=30", "prompt.meta_keys=[difficulty]")
    environment = build_environment(cfg, with_executor=False)
    chosen = {"easy": ["Programmer"], "medium": ["Custom", "AnswerGenerate"], "hard": ["Custom"]}
    path = tmp_path / "pairs.jsonl"
    assert sft_pairs_by(path, chosen, environment, ["difficulty"], 30) == 30
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for problem, row in zip(environment.problems, rows, strict=True):
        level = problem.meta["difficulty"]
        assert row["workflow"] in chosen[level] and row["meta"] == {"difficulty": level}
    medium = [r["workflow"] for r in rows if r["meta"]["difficulty"] == "medium"]
    assert medium[:2] == ["Custom", "AnswerGenerate"]  # in turn within the label


def test_the_command_prints_a_table_per_label_and_writes_json_and_pairs(tmp_path):
    out, pairs = tmp_path / "by.json", tmp_path / "pairs.jsonl"
    candidates = tmp_path / "candidates.txt"
    candidates.write_text("\n".join(CANDIDATES) + "\n")
    result = CliRunner().invoke(main, [
        "search", "--config", "configs/known-optimum.yaml", "--set", "rollout.train_size=60",
        "--budget", "3000", "--candidates", str(candidates), "--by", "difficulty",
        "--out", str(out), "--sft-pairs", str(pairs), "-q",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    for level in ("easy", "medium", "hard"):
        assert f"difficulty: {level}" in result.output
    data = json.loads(out.read_text())
    assert data["by"] == ["difficulty"] and sorted(data["labels"]) == ["easy", "hard", "medium"]
    assert len(pairs.read_text().splitlines()) == 60
    assert "the prompt does not show difficulty" in result.output
    bad = CliRunner().invoke(main, [
        "search", "--config", "configs/known-optimum.yaml", "--set", "rollout.train_size=5",
        "--budget", "100", "--candidates", str(candidates), "--by", "level", "-q",
    ])  # fmt: skip
    assert bad.exit_code != 0 and "has no meta key 'level'" in bad.output
    assert "Traceback" not in bad.output
