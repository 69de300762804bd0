"""Training on your own problems with your own reward, operators, backend and prompt (issue 14):
two steps of the tiny model each, configured the way a user configures it."""

import json
import sys
import textwrap

import pytest
from trainer_fakes import FREE, PROSE, text_rollout

from flowgrpo.configuration import ConfigError
from flowgrpo.operators.backends import BACKENDS
from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.operators.custom import remove_operator
from flowgrpo.operators.interpreter import run_workflow
from flowgrpo.operators.ops import OPERATOR_IMPLS
from flowgrpo.operators.tasks import load_task
from flowgrpo.rewards.components import REWARD_COMPONENTS
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.environment import build_environment
from flowgrpo.trainer.loop.trainer import Trainer

QA = [
    ("What is the capital of France?", "Paris"),
    ("Who wrote Hamlet?", "William Shakespeare"),
    ("What colour is the sky on a clear day?", "blue"),
    ("Which planet is the largest?", "Jupiter"),
]
REWARD_MODULE = """
import numpy as np

def length_bonus(group, options, history=None):
    # 1 for the shortest completion of the group, less for longer ones (never NaN)
    lengths = np.array([len(s.completion) for s in group], dtype=float)
    return lengths.min() / np.maximum(lengths, 1.0)
"""


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A user's folder: a JSONL problem set and a package ``<name>`` on sys.path."""
    name = f"my_pkg_{tmp_path.name.replace('-', '_')}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rewards.py").write_text(REWARD_MODULE)
    rows = [{"question": q, "answer": a, "domain": "qa"} for q, a in QA]
    (tmp_path / "trivia.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, name
    for key in [k for k in REWARD_COMPONENTS.names() if k.startswith(name)]:
        REWARD_COMPONENTS.unregister(key)
    for key in [k for k in BACKENDS.names() if k.startswith(name)]:
        BACKENDS.unregister(key)
    for module in [m for m in sys.modules if m.startswith(name) or m == "plugin_" + name]:
        del sys.modules[module]


def answer_by_question(request):
    """The executor: the right answer for every question it sees (so qa accuracy is 1)."""
    text = request.messages[-1].content
    return next((a for q, a in QA if q in text), "PASS")


def metrics_of(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_jsonl_qa_set_trains_with_a_reward_named_by_dotted_path(user_dir, monkeypatch):
    tmp_path, name = user_dir
    reward = f"{name}.rewards:length_bonus"
    cfg = load_config(
        "configs/tiny.yaml",
        (
            f"logging.output_dir={tmp_path / 'run'}",
            "optim.max_steps=2",
            FREE,
            f"rollout.task=jsonl:{tmp_path / 'trivia.jsonl'}",
            f'rewards.weights={{"{reward}": 0.1}}',
        ),
    )
    workflows = ["AnswerGenerate -> Format"] * 4 + ["Custom"] * 2 + [PROSE] * 2
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: workflows))
    result = Trainer(cfg, executor=ScriptedBackend(answer_by_question)).train()
    assert result.steps == 2 and result.exit_code == 0
    lines = metrics_of(tmp_path / "run")
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert 0 < m[f"rewards/{reward}/mean"] < 1  # the user's reward is a column
        assert m["accuracy"] > 0  # string answers checked by SQuAD exact match
    samples = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().split("\n")
               if x]  # fmt: skip
    assert {s["problem_id"].split("/")[0] for s in samples} == {"trivia"}


def plugin_file(tmp_path, name):
    """A plugin FILE: registers a reward by decorator and an executor backend kind."""
    path = tmp_path / f"plugin_{name}.py"
    path.write_text(
        textwrap.dedent(f"""
        import numpy as np
        from flowgrpo.operators.backends import register_backend
        from flowgrpo.operators.backends.scripted import ScriptedBackend
        from flowgrpo.rewards.components import register_component

        CALLS = []

        @register_component("{name}_critiqued")
        def critiqued(group, options, history=None):
            return np.array([float("Critique" in s.completion) for s in group])

        def make(max_new_tokens, **kw):
            def answer(request):
                CALLS.append(request.messages[-1].content)
                text = request.messages[-1].content
                return "PASS" if text.startswith("Judge") else "Paris"
            return ScriptedBackend(answer)

        register_backend("{name}", make)
        """)
    )
    return path


def test_plugins_operators_backend_and_prompt_from_one_config(user_dir, monkeypatch):
    tmp_path, name = user_dir
    config = {
        "plugins": [str(plugin_file(tmp_path, name))],
        "operators": [
            {
                "name": "Critique",
                "role": "checker",
                "domains": ["qa"],
                "prompt": "Judge this answer to {question}: {solution}. Say PASS or FAIL.",
            },
        ],
        "prompt": {
            "system": "Write a workflow for a trivia question. Operators: {operators}.",
            "examples": [
                {
                    "question": "Capital of Peru?",
                    "workflow": "Custom -> Critique ? Revise : done",
                    "domain": "qa",
                },
            ],
        },
        "rollout": {"task": f"jsonl:{tmp_path / 'trivia.jsonl'}"},
        "executor": {"kind": name},
        "rewards": {"weights": {"validity": 0.3, "accuracy": 1.0, f"{name}_critiqued": 0.1}},
    }
    (tmp_path / "mine.yaml").write_text(json.dumps(config))
    try:
        cfg = load_config(
            tmp_path / "mine.yaml",
            (f"logging.output_dir={tmp_path / 'run'}", "optim.max_steps=2", "model.name_or_path"
             "=tiny-random", "lora.r=4", "lora.alpha=8", "rollout.max_new_tokens=40",
             "rollout.cache_path=null", "rollout.train_size=8", "executor.max_calls=4"),
        )  # fmt: skip
        workflows = ["Custom -> Critique ? Revise : done"] * 4 + ["AnswerGenerate"] * 4
        monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(lambda g: workflows))
        trainer = Trainer(cfg)  # the executor comes from the config (the plugin's kind)
        assert trainer.environment.operators["Critique"].domains == ("qa",)  # the run's table
        messages = trainer.environment.prompt.messages(trainer.sampler.problems[0])
        assert trainer.environment.prompt.spec == cfg.prompt
        assert messages[0]["content"].startswith("Write a workflow for a trivia question.")
        assert "Critique" in messages[0]["content"]
        assert messages[2] == {"role": "assistant", "content": "Custom -> Critique ? Revise : done"}
        trainer.train()
        calls = sys.modules[f"plugin_{name}"].CALLS
        assert any(c.startswith("Judge this answer to") for c in calls)  # Critique ran
        for m in metrics_of(tmp_path / "run"):
            assert m[f"rewards/{name}_critiqued/mean"] == 0.5
            assert m["validity_rate"] == 1.0
        saved = (tmp_path / "run" / "config.yaml").read_text()
        assert "Critique" in saved and "plugin_" in saved  # a resume re-registers them
    finally:
        if "Critique" in OPERATOR_IMPLS:
            remove_operator("Critique")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("plugins=[no_such_plugin_pkg.rewards]", r"plugins\[0\]: plugin 'no_such_plugin_pkg"),
        ("plugins=[missing/plugin.py]", r"plugins\[0\]: plugin file 'missing/plugin.py' does not"),
        ("plugins=[configs/tiny.yaml]", r"plugins\[0\]: plugin file 'configs/tiny.yaml' is not a"),
        (
            "operators=[{name: Critique, role: judge, prompt: x}]",
            r"operators\[0\]: operator Critique: role 'judge' is not one of",
        ),
        (
            "prompt.examples=[{question: q, workflow: Custom -> Format}, {question: q2, "
            "workflow: Revise -> Custom, domain: math}]",
            r"prompt.examples\[0\]: workflow 'Custom -> Format' is not valid for domain code",
        ),
        (
            "prompt.examples=[{question: q, workflow: Revise -> Custom, domain: math}]",
            r"prompt.examples\[0\]: .* Revise runs before any generator",
        ),
        (  # the run's budget (executor.max_calls: 4) and MdEnsemble's 3 votes
            "prompt.examples=[{question: q, workflow: '[Custom, Custom, Custom] -> MdEnsemble'}]",
            r"prompt.examples\[0\]: .* makes up to 6 executor calls \(limit 4; MdEnsemble",
        ),
        ("prompt.system=Use {ops}", r"prompt.system: bad placeholder"),
        ("prompt.file=missing.yaml", r"prompt.file: missing.yaml does not exist"),
        ("executor.kind=no_such_pkg.mod:make", r"executor.kind: cannot import module"),
        ("executor.kind=sharde", r"executor.kind: unknown executor backend 'sharde'"),
        ("rewards.weights={no_such_pkg.mod:fn: 1.0}", r"cannot import module 'no_such_pkg.mod'"),
    ],
)
def test_bad_extensions_fail_at_load_naming_the_field(override, message):
    with pytest.raises(ConfigError, match=message):  # at load, or when the run is built
        build_environment(load_config("configs/tiny.yaml", (override,)), with_executor=False)


def test_the_prompt_file_holds_system_and_examples(tmp_path):
    path = tmp_path / "prompt.yaml"
    path.write_text(
        "system: 'Workflow please. Operators: {operators}.'\n"
        "examples:\n  - {question: '2+2?', workflow: 'Programmer -> Format', domain: math}\n"
    )
    cfg = load_config("configs/tiny.yaml", (f"prompt.file={path}",))
    assert cfg.prompt.file is None and cfg.prompt.system.startswith("Workflow please.")
    assert [e.workflow for e in cfg.prompt.examples] == ["Programmer -> Format"]
    cfg = load_config("configs/tiny.yaml", (f"prompt.file={path}", "prompt.examples=[]"))
    assert cfg.prompt.examples == ()  # set in the config: overrides the file (zero-shot)
    path.write_text("examples:\n  - {question: '2+2?', workflow: 'Test', domain: math}\n")
    with pytest.raises(ConfigError, match=r"prompt.examples\[0\]: .*Test is not allowed"):
        build_environment(
            load_config("configs/tiny.yaml", (f"prompt.file={path}",)), with_executor=False
        )


def test_dotted_paths_for_an_executor_backend_and_an_operator_function(user_dir):
    tmp_path, name = user_dir
    (tmp_path / name / "ext.py").write_text(
        textwrap.dedent("""
        from flowgrpo.operators.backends.scripted import ScriptedBackend
        from flowgrpo.operators.custom import call_llm

        def make(max_new_tokens, **kw):
            return ScriptedBackend(lambda request: "Paris", name=f"ext-{max_new_tokens}")

        def shout(state, instruction, settings):
            reply = yield from call_llm(state, "Shout", f"Shout {state.solution}", settings)
            state.solution = reply.upper()
        """)
    )
    record = {"name": "Shout", "role": "refiner", "function": f"{name}.ext:shout"}
    cfg = load_config(
        "configs/tiny.yaml",
        (f"executor.kind={name}.ext:make", f"operators=[{json.dumps(record)}]"),
    )
    try:
        environment = build_environment(cfg)
        llm = environment.executor
        assert llm.settings_key == "scripted:ext-8"  # made by the user's factory
        problem = load_task(f"jsonl:{tmp_path / 'trivia.jsonl'}", n=1)[0]
        result = run_workflow("Custom -> Shout", problem, llm, operators=environment.operators)
        assert [t.op for t in result.trace] == ["Custom", "Shout"]
        assert result.answer == "PARIS" and result.correct  # qa: case-insensitive match
    finally:
        remove_operator("Shout")
