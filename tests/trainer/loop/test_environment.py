"""Config is data; the run environment is built once and is the run's own (issue 21 item 2).

Loading a config with ``plugins:`` imports and registers nothing; building the environment does.
Two trainers in one process each render their own prompt and validate with their own operator
table. A bad registry name is the same one-line error as before, now when the run is built.
"""

import json
import sys

import pytest
from click.testing import CliRunner
from trainer_fakes import FREE, text_rollout

from flowgrpo.configuration import ConfigError
from flowgrpo.dsl import OPERATORS, default_table
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.custom import remove_operator
from flowgrpo.operators.ops import OPERATOR_IMPLS
from flowgrpo.registry import Registry
from flowgrpo.rewards.components import REWARD_COMPONENTS
from flowgrpo.trainer.algorithms.advantages import ESTIMATORS
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.environment import build_environment
from flowgrpo.trainer.loop.trainer import Trainer

PLUGIN = """
import numpy as np
from flowgrpo.operators.ops import register_operator
from flowgrpo.rewards.components import register_component


@register_component("{name}_short")
def short(group, options, history=None):
    return np.array([1.0 / (1 + len(s.completion)) for s in group])


def loud(state, instruction, settings):
    yield from ()
    state.solution = "LOUD"


register_operator("{op}", loud, role="generator")
"""


def registries() -> dict[str, tuple[str, ...]]:
    """Every Registry instance of every loaded flowgrpo module, by module and name, with the
    names it holds; and the process-wide operator table."""
    found = {}
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("flowgrpo"):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, Registry):
                found[f"{module_name}.{attr}"] = value.names()
    found["dsl.default_table"] = tuple(default_table())
    found["dsl.OPERATORS"] = tuple(OPERATORS)
    return found


@pytest.fixture
def plugin(tmp_path):
    """A plugin file registering a reward component and an operator, and a config naming both
    (plus an ``operators:`` record and a dotted-path estimator)."""
    name = f"env_plugin_{tmp_path.name.replace('-', '_')}"
    op = "Loud" + "".join(c for c in tmp_path.name.title() if c.isalnum())
    path = tmp_path / f"{name}.py"
    path.write_text(PLUGIN.format(name=name, op=op))
    config = {
        "plugins": [str(path)],
        "operators": [{"name": "Whisper", "role": "refiner", "prompt": "Whisper {solution}"}],
        "algorithm": {"advantage": "flowgrpo.trainer.algorithms.advantages:rloo_advantages"},
        "rewards": {"weights": {"validity": 1.0, f"{name}_short": 0.1}},
        "prompt": {"examples": [{"question": "q", "workflow": f"{op} -> Whisper", "domain": "qa"}]},
    }
    (tmp_path / "with_plugin.yaml").write_text(json.dumps(config))
    yield tmp_path / "with_plugin.yaml", name, op
    for key in (f"{name}_short",):
        if key in REWARD_COMPONENTS:
            REWARD_COMPONENTS.unregister(key)
    if config["algorithm"]["advantage"] in ESTIMATORS:  # a dotted path registers on first use
        ESTIMATORS.unregister(config["algorithm"]["advantage"])
    for key in (op, "Whisper"):
        if key in OPERATOR_IMPLS or key in OPERATORS:
            remove_operator(key)
    sys.modules.pop(name, None)


def test_loading_a_config_with_plugins_imports_and_registers_nothing(plugin):
    path, name, op = plugin
    modules, before = set(sys.modules), registries()
    cfg = load_config(path, ("model.name_or_path=tiny-random",))
    assert cfg.plugins == (str(path.parent / f"{name}.py"),)
    assert cfg.operators[0]["name"] == "Whisper"
    assert set(sys.modules) == modules  # no plugin, no dotted path imported
    assert registries() == before  # no component, operator, estimator or declaration added

    environment = build_environment(cfg, with_executor=False)
    assert name in sys.modules
    assert f"{name}_short" in REWARD_COMPONENTS  # the plugin's registrations ran
    assert op in OPERATOR_IMPLS and op in default_table()  # a plugin declares from Python
    assert (
        "flowgrpo.trainer.algorithms.advantages:rloo_advantages"
        in environment.registries["advantage estimator"]
    )
    assert {op, "Whisper"} <= set(environment.operators)  # the run's table has both
    assert "Whisper" in OPERATOR_IMPLS  # its implementation is code: process-wide
    assert "Whisper" not in default_table() and "Whisper" not in OPERATORS  # not declared


def recording(texts_for_group, seen: list):
    """``text_rollout`` that also keeps the prompt each rollout was rendered with."""
    fake = text_rollout(texts_for_group)

    def generate(*args, prompt=None, **kwargs):
        seen.append(prompt)
        return fake(*args, prompt=prompt, **kwargs)

    return generate


def own_config(tmp_path, tag: str, record: dict):
    return load_config(
        "configs/tiny.yaml",
        (
            f"logging.output_dir={tmp_path / tag}",
            "optim.max_steps=1",
            "logging.save_every=0",
            FREE,
            f"prompt.system='{tag} writes workflows. Operators: {{operators}}.'",
            f"operators=[{json.dumps(record)}]",
        ),
    )


def test_two_trainers_in_one_process_each_use_their_own_prompt_and_operators(tmp_path, monkeypatch):
    critique = {"name": "Critique", "role": "checker", "prompt": "Check {solution}: PASS/FAIL"}
    shout = {"name": "Shout", "role": "generator", "prompt": "Shout the answer to {question}"}
    executor = ScriptedBackend(lambda request: "PASS")
    try:
        alpha = Trainer(own_config(tmp_path, "ALPHA", critique), executor=executor)
        beta = Trainer(own_config(tmp_path, "BETA", shout), executor=executor)
        assert "Critique" not in OPERATORS and "Shout" not in OPERATORS  # nothing process-wide
        texts = ["Custom -> Critique ? Revise : done"] * 4 + ["Shout -> Format"] * 4
        cases = ((alpha, "ALPHA", "Critique", "Shout"), (beta, "BETA", "Shout", "Critique"))
        for trainer, tag, own, other in cases:  # both built before either trains
            seen = []
            monkeypatch.setattr(step_mod, "generate_rollout", recording(lambda g: texts, seen))
            assert trainer.train().steps == 1
            problem = trainer.sampler.problems[0]
            system = seen[0].messages(problem)[0]["content"]
            assert system.startswith(f"{tag} writes workflows.")
            assert own in system and other not in system
            rows = [json.loads(x) for x in (trainer.run_dir / "samples.jsonl").open()]
            assert {r["valid"] for r in rows if own in r["completion"]} == {True}
            assert {r["valid"] for r in rows if other in r["completion"]} == {False}
    finally:
        for name in ("Critique", "Shout"):
            if name in OPERATOR_IMPLS:
                remove_operator(name)


def test_a_bad_estimator_is_the_same_error_when_the_run_is_built(tmp_path):
    message = "algorithm.advantage: unknown advantage estimator 'ppo'"
    cfg = load_config("configs/tiny.yaml", ("algorithm.advantage=ppo",))  # data: no lookup
    with pytest.raises(ConfigError, match=message):
        build_environment(cfg, with_executor=False)
    with pytest.raises(ConfigError, match=message):
        Trainer(cfg, run_dir=tmp_path / "run")
    result = CliRunner().invoke(
        main, ["train", "--config", "configs/tiny.yaml", "--set", "algorithm.advantage=ppo",
               "--dry-run"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert f"bad config: {message}" in result.output
    assert "Traceback" not in result.output


def test_prompt_labels_are_checked_against_every_training_problem_when_the_run_is_built():
    shown = load_config("configs/tiny.yaml", ("prompt.meta_keys=[template, difficulty]",))
    environment = build_environment(shown, with_executor=False)
    problem = environment.problems[0]
    last = environment.prompt.messages(problem)[-1]["content"]
    assert last.endswith(f"\ntemplate: {problem.meta['template']}\ndifficulty: easy")
    cfg = load_config("configs/tiny.yaml", ("prompt.meta_keys=[level]",))
    with pytest.raises(ConfigError, match=r"prompt.meta_keys: problem arithmetic/train/0 has no"):
        build_environment(cfg, with_executor=False)
    result = CliRunner().invoke(
        main, ["train", "--config", "configs/tiny.yaml", "--set", "prompt.meta_keys=[level]",
               "--dry-run"],
    )  # fmt: skip
    assert result.exit_code == 2 and "meta key(s) ['level']" in result.output
    assert "Traceback" not in result.output


def test_a_run_built_in_a_fresh_process_knows_the_built_in_health_checks():
    """A ``stop_on`` of a built-in check, in a process that imported only the config and the
    run environment (not the trainer, which registered them before)."""
    import subprocess

    code = (
        "from flowgrpo.trainer.config import load_config\n"
        "from flowgrpo.trainer.loop.environment import build_environment\n"
        "cfg = load_config('configs/tiny.yaml', ('health.stop_on=[deadlock, zero_grad]',))\n"
        "env = build_environment(cfg, with_executor=False, with_problems=False)\n"
        "print(env.registries['health check'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-400:]
    assert done.stdout.strip() == "('deadlock', 'zero_grad')"
