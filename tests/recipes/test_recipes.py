"""The recipes of docs/EXTENDING.md, each followed once, end to end.

Each extension lives OUTSIDE flowgrpo, in :mod:`my_ext.recipes` (a user's own package under
examples/; tests/recipes/conftest.py puts examples/ on sys.path). Each is registered from Python
and, where the config takes a name, by dotted path in the config
(``algorithm.advantage=my_ext.recipes:median_baseline``), then a Trainer runs 2 steps on the
tiny random model (configs/tiny.yaml) with a scripted executor and fixed completions (4 valid
workflows and 4 prose answers per group, as in tests/trainer/loop/test_loop.py). Each test
checks that the extension demonstrably acted: the custom advantages in samples.jsonl, the custom
loss called on the trained rows, the custom reward's column in metrics.jsonl, the custom task's
problem ids, the custom check's alert. The operator, backend and plugin recipes build the run
environment and run one workflow with it (no training step): the user's operator runs on the
user's backend.

Every registration a test makes (including those a dotted path makes on first use) is removed
afterwards, so the tests stay independent.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest
from my_ext import recipes
from trainer_fakes import FREE, PROSE, VALID, mixed, text_rollout

from flowgrpo.operators.backends import BACKENDS, register_backend
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.custom import remove_operator
from flowgrpo.operators.interpreter import run_workflow
from flowgrpo.operators.ops import OPERATOR_IMPLS, register_operator
from flowgrpo.operators.tasks import TASKS, Problem, register_task
from flowgrpo.rewards import REWARD_COMPONENTS, register_component
from flowgrpo.trainer.algorithms.advantages import ESTIMATORS, register_estimator
from flowgrpo.trainer.algorithms.losses import POLICY_LOSSES, register_policy_loss
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.environment import build_environment
from flowgrpo.trainer.loop.trainer import Trainer
from flowgrpo.trainer.monitoring.health import EXIT_CODE_ALERT_STOP, HEALTH_CHECKS, register_check

REGISTRIES = (ESTIMATORS, POLICY_LOSSES, REWARD_COMPONENTS, TASKS, HEALTH_CHECKS, BACKENDS)
K = 8
EXTENDING = Path(__file__).resolve().parents[2] / "docs" / "EXTENDING.md"
RECIPES = (
    recipes.median_baseline,
    recipes.cispo_loss,
    recipes.brevity,
    recipes.load_doubling,
    recipes.one_workflow,
    recipes.shout,
    recipes.ConstantBackend,
)
#: The plugin recipe: a module that registers on import (read, not imported, here).
PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "my_ext" / "registered.py"


@pytest.mark.parametrize("fn", [*RECIPES, PLUGIN], ids=lambda fn: getattr(fn, "__name__", "plugin"))
def test_the_extending_doc_shows_the_code_that_is_tested(fn):
    """Each recipe's code appears verbatim in docs/EXTENDING.md."""
    code = fn.read_text(encoding="utf-8") if isinstance(fn, Path) else inspect.getsource(fn)
    assert code in EXTENDING.read_text(encoding="utf-8"), (
        f"docs/EXTENDING.md no longer shows {getattr(fn, '__name__', fn)} as tested; copy it "
        "from examples/my_ext/ into the recipe"
    )


@pytest.fixture(autouse=True)
def clean_registries(monkeypatch):
    """Unregister whatever a test registered; fixed completions instead of sampling."""
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed(K, valid=4)))
    before = [set(registry.names()) for registry in REGISTRIES]
    yield
    for registry, names in zip(REGISTRIES, before):
        for name in set(registry.names()) - names:
            registry.unregister(name)
    assert [set(registry.names()) for registry in REGISTRIES] == before


def train(tmp_path, *overrides: str, steps: int = 2):
    """Run the Trainer on configs/tiny.yaml; (result, metrics lines, sample rows)."""
    config = load_config(
        "configs/tiny.yaml",
        (
            f"logging.output_dir={tmp_path}",
            f"optim.max_steps={steps}",
            "rollout.problems_per_step=1",
            FREE,
            *overrides,
        ),
    )
    result = Trainer(config, executor=ScriptedBackend(lambda request: "5")).train()
    return result, jsonl(tmp_path / "metrics.jsonl"), jsonl(tmp_path / "samples.jsonl")


def jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def groups(rows: list[dict]) -> list[list[dict]]:
    """samples.jsonl rows cut into groups of K (consecutive rows of one problem)."""
    cut = [rows[i : i + K] for i in range(0, len(rows), K)]
    assert all(len({r["problem_id"] for r in g}) == 1 for g in cut)
    return cut


# --------------------------------------------------------------------------- advantage estimator


@pytest.mark.slow  # trains the tiny model for 2 steps
@pytest.mark.parametrize("how", ["python", "dotted"])
def test_recipe_advantage_estimator(tmp_path, how):
    if how == "python":
        register_estimator("median", recipes.median_baseline)
        name = "median"
    else:
        name = "my_ext.recipes:median_baseline"  # registered by the config on first use
    result, lines, rows = train(tmp_path, f"algorithm.advantage={name}")
    assert result.steps == 2 and name in ESTIMATORS
    assert all(line["grad_norm"] > 0 for line in lines)
    for group in groups(rows):
        rewards = sorted(r["reward"] for r in group)
        lower_median = rewards[(K - 1) // 2]
        for row in group:
            assert row["advantage"] == pytest.approx(row["reward"] - lower_median, abs=1e-6)
        # The signature of this estimator: the lower half (the prose) gets exactly 0, the valid
        # workflows everything (dr_grpo, the default, would give both halves +-d/2).
        assert all(r["advantage"] == 0 for r in group if r["completion"] == PROSE)
        assert all(r["advantage"] > 0 for r in group if r["completion"] == VALID)


# --------------------------------------------------------------------------- policy loss


@pytest.mark.slow  # trains the tiny model for 2 steps
@pytest.mark.parametrize("how", ["python", "dotted"])
def test_recipe_policy_loss(tmp_path, how, monkeypatch):
    seen, cispo_loss = [], recipes.cispo_loss

    def spy(logp_NT, old_logp_NT, adv_N, mask_NT, config, select_NT=None):
        """cispo_loss, recording the advantages it was called with."""
        seen.append(adv_N.detach().cpu().tolist())
        return cispo_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config, select_NT)

    if how == "python":
        register_policy_loss("cispo", spy)
        name = "cispo"
    else:  # the config imports my_ext.recipes and finds the spy under cispo_loss
        monkeypatch.setattr(recipes, "cispo_loss", spy)
        name = "my_ext.recipes:cispo_loss"
    result, lines, rows = train(tmp_path, f"algorithm.loss.policy_loss={name}")
    assert result.steps == 2 and name in POLICY_LOSSES
    # The update called it once per group and step, with the advantages each row trained with.
    trained = [[r["advantage"] for r in g] for g in groups(rows) if g[0]["advantage"] is not None]
    assert len(seen) == len(trained) == 2
    for got, want in zip(seen, trained):
        assert got == pytest.approx(want, abs=1e-6)
    for line in lines:
        assert line["grad_norm"] > 0 and line["ratio_mean"] == pytest.approx(1.0)
        assert line["clip_ratio/low"] is None  # logged by the built-in losses, not by this one


# --------------------------------------------------------------------------- reward component


@pytest.mark.slow  # trains the tiny model for 2 steps
@pytest.mark.parametrize("how", ["python", "dotted"])
def test_recipe_reward_component(tmp_path, how):
    if how == "python":
        register_component("brevity", recipes.brevity)
        name = "brevity"
    else:
        name = "my_ext.recipes:brevity"
    # A mapping is merged into the default weights: validity, accuracy, ... stay.
    result, lines, rows = train(tmp_path, f'rewards.weights={{"{name}": 0.1}}')
    assert result.steps == 2 and name in REWARD_COMPONENTS
    # VALID has 3 operators (Custom, Review, Revise): 1/3; prose: 0. Half the group is valid.
    for line in lines:
        assert line[f"rewards/{name}/mean"] == pytest.approx(0.5 / 3)
        assert line["rewards/validity/mean"] is not None
    for row in rows:
        assert row["rewards"][name] == pytest.approx(1 / 3 if row["completion"] == VALID else 0)


# --------------------------------------------------------------------------- task


@pytest.mark.slow  # trains the tiny model for 2 steps
@pytest.mark.parametrize("how", ["python", "dotted"])
def test_recipe_task(tmp_path, how):
    if how == "python":
        register_task("doubling", recipes.load_doubling)
        spec = "doubling:20"
    else:
        spec = "my_ext.recipes:load_doubling:20"
    result, _, rows = train(tmp_path, f"rollout.task={spec}")
    assert result.steps == 2
    ids = {r["problem_id"] for r in rows}
    assert ids and all(i.startswith("doubling/train/") for i in ids), ids
    problems = recipes.load_doubling("20", 64, 0, "train")  # what the run drew from
    assert ids <= {p.id for p in problems}
    assert max(int(p.question.split()[-1].rstrip("?")) for p in problems) <= 20


# --------------------------------------------------------------------------- health check


@pytest.mark.slow
def test_recipe_health_check(tmp_path):
    register_check(
        "one_workflow",
        recipes.one_workflow,
        keys=("distinct_workflows", "validity_rate"),
        summary="one distinct valid workflow for 2 steps",
    )
    # Named in stop_on (checked against the registry when the config loads): the run stops.
    result, lines, _ = train(tmp_path, "health.stop_on=[one_workflow]", steps=4)
    names = [[a["name"] for a in line["alerts"]] for line in lines]
    assert "one_workflow" not in names[0] and "one_workflow" in names[1]
    assert result.steps == 2 and result.exit_code == EXIT_CODE_ALERT_STOP
    assert "one_workflow" in result.stop_reason


# ------------------------------------------------------------------- operator, backend, plugin

FRANCE = Problem("trivia/1", "qa", "What is the capital of France?", "Paris")


@pytest.fixture
def no_shout():
    """Remove the Shout operator and the plugin module afterwards (a plugin imports once)."""
    yield
    if "Shout" in OPERATOR_IMPLS:
        remove_operator("Shout")
    sys.modules.pop("my_ext.registered", None)


def environment(*overrides: str):
    config = load_config("configs/tiny.yaml", overrides)
    return build_environment(config, with_problems=False)


@pytest.mark.parametrize("how", ["python", "dotted"])
def test_recipe_operator_and_backend(how, no_shout):
    if how == "python":
        register_operator("Shout", recipes.shout, role="refiner")
        register_backend("constant", recipes.ConstantBackend)
        run = environment("executor.kind=constant", "executor.model=Paris")
    else:  # the operator as a config record, the backend by dotted path
        record = {"name": "Shout", "role": "refiner", "function": "my_ext.recipes:shout"}
        run = environment(
            f"operators=[{json.dumps(record)}]",
            "executor.kind=my_ext.recipes:ConstantBackend",
            "executor.model=Paris",
        )
    assert isinstance(run.executor, recipes.ConstantBackend)
    assert run.operators["Shout"].role == "refiner"
    result = run_workflow("Custom -> Shout", FRANCE, run.executor, operators=run.operators)
    assert [t.op for t in result.trace] == ["Custom", "Shout"]
    assert result.answer == "PARIS" and result.correct  # Shout upper-cased the backend's reply


def test_recipe_plugin(no_shout):
    run = environment(
        "plugins=[my_ext.registered]",
        "executor.kind=constant",
        "executor.model=Paris",
        'rewards.weights={"brevity": 0.1}',
    )
    assert run.plugins == ("my_ext.registered",)
    assert "brevity" in run.registries["reward component"]
    assert isinstance(run.executor, recipes.ConstantBackend)
    result = run_workflow("Custom -> Shout", FRANCE, run.executor, operators=run.operators)
    assert result.answer == "PARIS" and result.correct
