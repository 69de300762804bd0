"""The recipes of docs/ARCHITECTURE.md ("Where to add ..."), each followed once, end to end.

Each extension lives OUTSIDE flowgrpo, in :mod:`my_ext.plugins` (a user's own package; pytest
puts tests/recipes on sys.path). Each is registered from Python and, where the config takes a
name, by dotted path in the config (``algorithm.advantage=my_ext.plugins:median_baseline``),
then a Trainer runs 2 steps on the tiny random model (configs/tiny.yaml) with a scripted
executor and fixed completions (4 valid workflows and 4 prose answers per group, as in
tests/trainer/loop/test_loop.py). Each test checks that the extension demonstrably acted: the
custom advantages in samples.jsonl, the custom loss called on the trained rows, the custom
reward's column in metrics.jsonl, the custom task's problem ids, the custom check's alert.

Every registration a test makes (including those a dotted path makes on first use) is removed
afterwards, so the tests stay independent.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from my_ext import plugins
from trainer_fakes import PROSE, VALID, mixed, text_rollout

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.tasks import TASKS, register_task
from flowgrpo.rewards import REWARD_COMPONENTS, register_component
from flowgrpo.trainer.algorithms.advantages import ESTIMATORS, register_estimator
from flowgrpo.trainer.algorithms.losses import POLICY_LOSSES, register_policy_loss
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.trainer import Trainer
from flowgrpo.trainer.monitoring.health import EXIT_CODE_ALERT_STOP, HEALTH_CHECKS, register_check

REGISTRIES = (ESTIMATORS, POLICY_LOSSES, REWARD_COMPONENTS, TASKS, HEALTH_CHECKS)
K = 8
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"
RECIPES = (
    plugins.median_baseline,
    plugins.cispo_loss,
    plugins.brevity,
    plugins.load_doubling,
    plugins.one_workflow,
)


@pytest.mark.parametrize("fn", RECIPES, ids=lambda fn: fn.__name__)
def test_the_architecture_doc_shows_the_code_that_is_tested(fn):
    """Each recipe's function appears verbatim in docs/ARCHITECTURE.md."""
    assert inspect.getsource(fn) in ARCHITECTURE.read_text(encoding="utf-8"), (
        f"docs/ARCHITECTURE.md no longer shows my_ext.plugins.{fn.__name__} as tested; copy "
        "the function from tests/recipes/my_ext/plugins.py into the recipe"
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
        register_estimator("median", plugins.median_baseline)
        name = "median"
    else:
        name = "my_ext.plugins:median_baseline"  # registered by the config on first use
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
    seen, cispo_loss = [], plugins.cispo_loss

    def spy(logp_NT, old_logp_NT, adv_N, mask_NT, config, select_NT=None):
        """cispo_loss, recording the advantages it was called with."""
        seen.append(adv_N.detach().cpu().tolist())
        return cispo_loss(logp_NT, old_logp_NT, adv_N, mask_NT, config, select_NT)

    if how == "python":
        register_policy_loss("cispo", spy)
        name = "cispo"
    else:  # the config imports my_ext.plugins and finds the spy under cispo_loss
        monkeypatch.setattr(plugins, "cispo_loss", spy)
        name = "my_ext.plugins:cispo_loss"
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
        register_component("brevity", plugins.brevity)
        name = "brevity"
    else:
        name = "my_ext.plugins:brevity"
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
        register_task("doubling", plugins.load_doubling)
        spec = "doubling:20"
    else:
        spec = "my_ext.plugins:load_doubling:20"
    result, _, rows = train(tmp_path, f"rollout.task={spec}")
    assert result.steps == 2
    ids = {r["problem_id"] for r in rows}
    assert ids and all(i.startswith("doubling/train/") for i in ids), ids
    problems = plugins.load_doubling("20", 64, 0, "train")  # what the run drew from
    assert ids <= {p.id for p in problems}
    assert max(int(p.question.split()[-1].rstrip("?")) for p in problems) <= 20


# --------------------------------------------------------------------------- health check


@pytest.mark.slow
def test_recipe_health_check(tmp_path):
    register_check(
        "one_workflow",
        plugins.one_workflow,
        keys=("distinct_workflows", "validity_rate"),
        summary="one distinct valid workflow for 2 steps",
    )
    # Named in stop_on (checked against the registry when the config loads): the run stops.
    result, lines, _ = train(tmp_path, "health.stop_on=[one_workflow]", steps=4)
    names = [[a["name"] for a in line["alerts"]] for line in lines]
    assert "one_workflow" not in names[0] and "one_workflow" in names[1]
    assert result.steps == 2 and result.exit_code == EXIT_CODE_ALERT_STOP
    assert "one_workflow" in result.stop_reason
