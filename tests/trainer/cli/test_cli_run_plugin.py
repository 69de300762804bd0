"""`flowgrpo run --plugin`: a plugin's operator and executor backend are usable in the command."""

import json

from click.testing import CliRunner

from flowgrpo.dsl import undeclare_operator
from flowgrpo.dsl.operators import default_table
from flowgrpo.operators.backends import BACKENDS
from flowgrpo.operators.ops import OPERATOR_IMPLS
from flowgrpo.trainer.cli.app import main

PLUGIN = """
from flowgrpo.operators.backends import register_backend
from flowgrpo.operators.custom import call_llm
from flowgrpo.operators.llm import GenerationResult
from flowgrpo.operators.ops import register_operator


class Constant:
    def __init__(self, max_new_tokens=256, model="7"):
        self.reply, self.settings_key = model, f"constant-test:{model}"

    def generate(self, requests):
        return [GenerationResult(self.reply, completion_tokens=1) for _ in requests]


def echo_twice(state, instruction, settings):
    reply = yield from call_llm(state, "EchoTwice", f"Again: {state.solution}", settings)
    state.solution = reply


register_backend("constant-test", Constant)
register_operator("EchoTwice", echo_twice, role="refiner")
"""


def test_a_plugin_file_gives_run_its_backend_and_operator(tmp_path):
    path = tmp_path / "my_plugin.py"
    path.write_text(PLUGIN)
    try:
        args = ["run", "Custom -> EchoTwice", "--n", "2", "--executor", "constant-test"]
        without = CliRunner().invoke(main, args)
        assert without.exit_code == 1 and "EchoTwice" in without.output
        done = CliRunner().invoke(main, [*args, "--plugin", str(path), "--no-trace"])
        assert done.exit_code == 0, done.output
        assert "Custom -> EchoTwice: 0/2 correct, 0 unscorable" in done.output
    finally:
        for registry, name in ((BACKENDS, "constant-test"), (OPERATOR_IMPLS, "EchoTwice")):
            if name in registry.names():
                registry.unregister(name)
        if "EchoTwice" in default_table():  # register_operator declared it process-wide
            undeclare_operator("EchoTwice")


def test_a_missing_plugin_is_one_line():
    done = CliRunner().invoke(main, ["run", "Custom", "--plugin", "no_such_module_xyz"])
    assert done.exit_code == 2 and "--plugin" in done.output and "no_such_module_xyz" in done.output
    assert "Traceback" not in done.output


def test_a_plugin_file_whose_import_fails_is_one_line(tmp_path):
    path = tmp_path / "broken_plugin.py"
    path.write_text("import no_such_module_xyz\n")
    done = CliRunner().invoke(main, ["run", "Custom", "--plugin", str(path)])
    assert done.exit_code == 2 and "no_such_module_xyz" in done.output
    assert "Traceback" not in done.output


def test_a_plugin_file_with_a_syntax_error_is_one_line_naming_the_line(tmp_path):
    path = tmp_path / "typo_plugin.py"
    path.write_text("x = 1\ndef f(:\n    pass\n")
    done = CliRunner().invoke(main, ["run", "Custom", "--plugin", str(path)])
    assert done.exit_code == 2 and "typo_plugin.py" in done.output and "line 2" in done.output
    assert "Traceback" not in done.output


def test_run_with_a_checkpoint_uses_the_runs_own_operators(tmp_path):
    """A run whose config has ``operators:``: ``flowgrpo run --checkpoint`` builds the run's
    environment as training does, so the run's own operator validates and runs; without the
    checkpoint it is an unknown operator."""
    plugin = tmp_path / "constant_plugin.py"
    plugin.write_text(PLUGIN)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoint-1").mkdir(parents=True)
    config = {
        "plugins": [str(plugin)],
        "operators": [{"name": "Whisper", "role": "refiner", "prompt": "Whisper {solution}"}],
        "executor": {"kind": "constant-test"},
    }
    (run_dir / "config.yaml").write_text(json.dumps(config))
    args = ["run", "Custom -> Whisper", "--n", "2", "--no-trace"]
    try:
        done = CliRunner().invoke(main, [*args, "--checkpoint", str(run_dir / "checkpoint-1")])
        assert done.exit_code == 0, done.output
        assert "Custom -> Whisper: 0/2 correct, 0 unscorable" in done.output
        alone = CliRunner().invoke(main, [*args, "--executor", "constant-test"])
        assert alone.exit_code == 1 and "Whisper" in alone.output  # not a process-wide operator
    finally:
        for registry, name in ((BACKENDS, "constant-test"), (OPERATOR_IMPLS, "EchoTwice")):
            if name in registry.names():
                registry.unregister(name)
        if "EchoTwice" in default_table():
            undeclare_operator("EchoTwice")
