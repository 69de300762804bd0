"""``flowgrpo eval`` / ``flowgrpo run`` with a checkpoint: budgets, sampling, model and executor
default to the run's config.yaml (a checkpoint is evaluated as trained); options override;
--device and --dtype; --quiet and --log-level on every command."""

import json

import pytest
import torch
from click.testing import CliRunner

from flowgrpo.operators.models import build_tiny_model
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import load_config, save_config
from flowgrpo.trainer.loop.policy import wrap_lora

RUN_SETTINGS = (
    "rollout.max_new_tokens=12",
    "rollout.temperature=0.6",
    "rollout.top_p=0.9",
    "executor.max_new_tokens=5",
    "executor.max_calls=3",
    "optim.seed=3",
)


def fake_run(run_dir):
    cfg = load_config("configs/tiny.yaml", (f"logging.output_dir={run_dir}", *RUN_SETTINGS))
    peft = wrap_lora(build_tiny_model(seed=3)[0], cfg.lora)
    checkpoint = run_dir / "checkpoint-1"
    peft.save_pretrained(checkpoint / "adapter")
    (checkpoint / "trainer_state.pt").write_bytes(b"")
    save_config(cfg, run_dir / "config.yaml")
    return checkpoint


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def eval_settings(tmp_path, checkpoint, *args):
    out = tmp_path / "eval.json"
    result = invoke(
        "eval", "--adapter", checkpoint, "--task", "arithmetic:easy", "--n", "1", "--json", out,
        *args,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["settings"]


def test_eval_of_a_checkpoint_takes_the_runs_settings_and_options_override(tmp_path):
    checkpoint = fake_run(tmp_path / "run")
    run = eval_settings(tmp_path, checkpoint, "--quiet")
    assert (run["max_new_tokens"], run["temperature"], run["top_p"]) == (12, 0.6, 0.9)
    assert "max_new_tokens=5" in run["executor"] and run["executor"].startswith("hf:shared:")
    assert run["executor_limits"]["max_llm_calls"] == 3
    assert (run["device"], run["dtype"]) == ("cpu", "float32")

    given = eval_settings(
        tmp_path, checkpoint, "--max-new-tokens", "6", "--temperature", "1.1",
        "--executor-max-new-tokens", "4", "--dtype", "bfloat16", "--device", "auto",
    )  # fmt: skip
    assert (given["max_new_tokens"], given["temperature"]) == (6, 1.1)
    assert "max_new_tokens=4" in given["executor"] and given["dtype"] == "bfloat16"


def test_eval_batch_reaches_the_settings_and_zero_is_refused(tmp_path):
    checkpoint = fake_run(tmp_path / "run")
    assert eval_settings(tmp_path, checkpoint)["batch"] == 16
    assert eval_settings(tmp_path, checkpoint, "--batch", "3")["batch"] == 3
    refused = invoke("eval", "--adapter", checkpoint, "--n", "1", "--batch", "0")
    assert refused.exit_code == 2 and "--batch" in refused.output


def test_base_eval_keeps_the_builtin_defaults(tmp_path):
    out = tmp_path / "base.json"
    result = invoke(
        "eval", "--base", "--model", "tiny-random", "--n", "1", "--no-execute", "--json", out
    )
    assert result.exit_code == 0, result.output
    settings = json.loads(out.read_text())["settings"]
    assert settings["max_new_tokens"] == 40 and settings["executor"] is None


def test_run_with_a_checkpoint_uses_the_runs_executor_budget(tmp_path):
    checkpoint = fake_run(tmp_path / "run")
    args = ("run", "Custom -> Format", "--task", "arithmetic:easy", "--n", "1", "--json")
    rows = [json.loads(x) for x in invoke(*args, "--checkpoint", checkpoint).stdout.splitlines()]
    outputs = [t["output"] for t in rows[0]["trace"]]
    assert outputs and all(len(o) <= 5 for o in outputs), "executor.max_new_tokens=5"
    given = invoke(*args, "--checkpoint", checkpoint.parent, "--executor-max-new-tokens", "2")
    outputs = [t["output"] for t in json.loads(given.stdout.splitlines()[0])["trace"]]
    assert all(len(o) <= 2 for o in outputs)


def test_bad_devices_are_usage_errors(tmp_path):
    bogus = invoke("eval", "--base", "--model", "tiny-random", "--device", "tpu")
    assert bogus.exit_code == 2 and "--device 'tpu': use cpu, cuda, cuda:N or auto" in bogus.output
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    cuda = invoke("run", "Custom", "--model", "tiny-random", "--device", "cuda:1")
    assert cuda.exit_code == 2 and "no CUDA device is visible" in cuda.output


def test_every_command_takes_quiet_and_log_level():
    for name in main.commands:
        help_text = invoke(name, "--help").output
        assert "--quiet" in help_text and "--log-level" in help_text, name
    bad = invoke("validate", "Custom", "--log-level", "LOUD")
    assert bad.exit_code == 2 and "--log-level" in bad.output
    assert invoke("validate", "Custom", "-q", "--log-level", "debug").exit_code == 0


def test_train_quiet_prints_no_progress_or_step_lines(tmp_path):
    result = invoke(
        "train", "--config", "configs/tiny.yaml", "--max-steps", "1",
        "--output-dir", tmp_path / "run", "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "done: 1 steps" in result.output
    for chatty in ("step    1", "loading model", "train:", "saved "):
        assert chatty not in result.output, chatty


def test_eval_of_a_checkpoint_uses_the_prompt_it_was_trained_with(tmp_path, monkeypatch):
    """A run trained with a custom `prompt:` is evaluated with that prompt, not the built-in."""
    import flowgrpo.trainer.reports.eval_run as eval_run  # the CLI evaluates through it

    run_dir = tmp_path / "run"
    cfg = load_config(
        "configs/tiny.yaml",
        (f"logging.output_dir={run_dir}", "prompt.system=You write WORKFLOWS for the task."),
    )
    peft = wrap_lora(build_tiny_model(seed=0)[0], cfg.lora)
    peft.save_pretrained(run_dir / "checkpoint-1" / "adapter")
    save_config(cfg, run_dir / "config.yaml")
    seen = []

    def fake_evaluate(*args, **kwargs):
        seen.append(kwargs["prompt"].spec.system)
        raise ValueError("stop here")

    monkeypatch.setattr(eval_run, "evaluate", fake_evaluate)
    result = invoke("eval", "--adapter", run_dir / "checkpoint-1", "--n", "1", "--quiet")
    assert result.exit_code == 2 and "stop here" in result.output
    assert seen == ["You write WORKFLOWS for the task."]


def test_eval_of_a_checkpoint_uses_the_runs_task_unless_given_and_says_which(tmp_path):
    checkpoint = fake_run(tmp_path / "run")  # trained on configs/tiny.yaml's arithmetic:easy
    out = tmp_path / "own.json"
    result = invoke("eval", "--adapter", checkpoint, "--n", "1", "--json", out)
    assert result.exit_code == 0, result.output
    assert "task: arithmetic:easy (the run's rollout.task)" in result.output
    assert json.loads(out.read_text())["settings"]["task"] == "arithmetic:easy"
    given = invoke("eval", "--adapter", checkpoint, "--n", "1", "--task", "arithmetic:hard")
    assert "task: arithmetic:hard (--task)" in given.output
    base = invoke("eval", "--base", "--model", "tiny-random", "--n", "1", "--no-execute")
    assert base.exit_code == 0 and "task: arithmetic (the default)" in base.output
