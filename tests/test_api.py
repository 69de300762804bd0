"""The Python API: ``flowgrpo.train`` and ``flowgrpo.evaluate`` on the tiny model, keyword
overrides, one-line ``ConfigError`` for bad input, and an ``import flowgrpo`` that stays light."""

import ast
import json
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import flowgrpo
from flowgrpo.configuration import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
FAST = {"rollout__max_new_tokens": 4, "rollout__problems_per_step": 1}


def test_import_flowgrpo_imports_no_trainer_and_no_torch():
    code = (
        "import sys, flowgrpo\n"
        "assert callable(flowgrpo.train) and callable(flowgrpo.evaluate)\n"
        "heavy = ('torch', 'transformers', 'peft', 'yaml', 'flowgrpo.trainer', 'flowgrpo.dsl')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # the trainer is imported inside the functions only (tests/test_layering.py's FRONT_ENDS)
    tree = ast.parse((ROOT / "flowgrpo" / "api.py").read_text(encoding="utf-8"))
    top = [n.module for n in tree.body if isinstance(n, ast.ImportFrom)]
    assert not [m for m in top if m and m.startswith("flowgrpo.") and m != "flowgrpo.configuration"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("api") / "run"
    seen = []
    result = flowgrpo.train(
        TINY,
        optim__max_steps=2,
        on_step=seen.append,
        **{"logging.output_dir": str(run_dir), "logging.save_every": 1},  # the --set spelling
        **FAST,
    )
    return run_dir, result, seen


def test_train_runs_the_tiny_config_with_keyword_overrides(trained):
    run_dir, result, seen = trained
    assert isinstance(result, flowgrpo.RunResult)
    assert result.run_dir == run_dir and result.steps == 2
    assert result.checkpoint == run_dir / "checkpoint-2"
    assert result.stop_reason is None
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and result.metrics == json.loads(lines[-1])
    assert result.metrics["step"] == 2 and [m["step"] for m in seen] == [1, 2]
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["optim"]["max_steps"] == 2 and saved["rollout"]["max_new_tokens"] == 4
    assert saved["lora"]["r"] == 4, "the rest from configs/tiny.yaml"


@pytest.mark.parametrize("progress", [True, False])
def test_train_prints_the_clis_step_lines_unless_progress_is_off(tmp_path, capsys, progress):
    seen = []
    flowgrpo.train(
        TINY, optim__max_steps=2, logging__output_dir=str(tmp_path / "run"),
        logging__save_every=0, on_step=seen.append, progress=progress, **FAST,
    )  # fmt: skip
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert [m["step"] for m in seen] == [1, 2]  # the caller's own callback either way
    if progress:
        assert [line.split("|")[0].split() for line in steps] == [["step", "1"], ["step", "2"]]
        assert "| reward " in steps[0] and "| valid " in steps[0]
    else:
        assert steps == []


def test_evaluate_returns_what_flowgrpo_eval_writes(trained, tmp_path):
    run_dir, result, _ = trained
    got = flowgrpo.evaluate(result.checkpoint, task="arithmetic:easy", n=2, max_new_tokens=5)
    assert got["problems"] == 2 and got["settings"]["max_new_tokens"] == 5
    assert got["model"].endswith(str(run_dir / "checkpoint-2" / "adapter"))
    from flowgrpo.trainer.cli.app import main

    out = tmp_path / "cli.json"
    args = ["eval", "--adapter", str(result.checkpoint), "--task", "arithmetic:easy", "--n", "2"]
    cli = CliRunner().invoke(main, [*args, "--max-new-tokens", "5", "--json", str(out)])
    assert cli.exit_code == 0, cli.output
    expected = json.loads(out.read_text())
    got.pop("seconds"), expected.pop("seconds")
    assert json.loads(json.dumps(got)) == expected  # as JSON: the limits' tuples are lists
    every = flowgrpo.evaluate(run_dir, all_checkpoints=True, n=1, json_file=tmp_path / "a.json")
    assert [row["step"] for row in every["checkpoints"]] == [
        0,
        1,
        2,
    ]  # the start, then each checkpoint
    assert json.loads((tmp_path / "a.json").read_text()) == json.loads(json.dumps(every))
    assert (tmp_path / "a.png").is_file()


def test_a_train_config_object_takes_overrides_as_set_does(monkeypatch, tmp_path):
    """``section__key`` and a section mapping (merged) change a TrainConfig; the rest stays."""
    import flowgrpo.trainer.loop.trainer as loop
    from flowgrpo.trainer.config import load_config

    built = []

    class FakeTrainer:
        step = 0  # where a run starts (the progress bar's first value)

        def __init__(self, config, environment=None, **kwargs):
            built.append(config)

        def train(self):
            return loop.TrainResult(0, tmp_path, None)

    monkeypatch.setattr(loop, "Trainer", FakeTrainer)
    config = load_config(TINY, ("optim.lr=0.002",))
    result = flowgrpo.train(config, optim__max_steps=7, rollout={"num_generations": 16})
    cfg = built[0]
    assert (cfg.optim.max_steps, cfg.optim.lr) == (7, 0.002)
    assert (cfg.rollout.num_generations, cfg.rollout.max_new_tokens) == (16, 40)
    assert result.metrics == {} and result.steps == 0


def one_line_config_error(call, *args, **kwargs) -> str:
    """The message of the ConfigError ``call`` raises, checked to be one line raised by
    flowgrpo/api.py itself (no traceback through the trainer)."""
    with pytest.raises(ConfigError) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert frames[-1].filename.endswith(str(Path("flowgrpo", "api.py"))), frames[-1]
    assert not [f for f in frames if "/trainer/" in f.filename], "raised deep in the trainer"
    return message


def test_bad_input_is_a_one_line_config_error_before_any_model_loads(monkeypatch, tmp_path):
    from flowgrpo.operators import models

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded for bad input")

    monkeypatch.setattr(models, "load_model", no_model)
    unknown = one_line_config_error(flowgrpo.train, TINY, optim__max_step=2)
    assert "optim.max_step" in unknown and "did you mean 'max_steps'" in unknown
    missing = one_line_config_error(flowgrpo.train, tmp_path / "nope.yaml")
    assert "nope.yaml does not exist" in missing
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "1+1?", "answer": "2"}\nnot json\n')
    task = one_line_config_error(flowgrpo.train, TINY, rollout__task=f"jsonl:{bad}")
    assert "bad.jsonl" in task
    wrong = one_line_config_error(flowgrpo.evaluate, tmp_path / "no-run", n=1)
    assert "no-run" in wrong
    option = one_line_config_error(flowgrpo.evaluate, base=True, max_new_token=3)
    assert "'max_new_token'" in option and "did you mean 'max_new_tokens'" in option
    runs = one_line_config_error(flowgrpo.evaluate, tmp_path, all_checkpoints=True)
    assert "no checkpoints here" in runs


def test_the_api_asks_the_executor_server_before_any_model_loads(monkeypatch, tmp_path):
    """The checks of ``flowgrpo train`` (loop.environment.check_run), the probe of a server
    executor included, run on the Python path too."""
    import socket

    from flowgrpo.operators import models

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the executor was asked")

    monkeypatch.setattr(models, "load_model", no_model)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    message = one_line_config_error(
        flowgrpo.train, TINY, executor__kind="openai", executor__base_url=url,
        executor__model="m", logging__output_dir=str(tmp_path / "run"),
    )  # fmt: skip
    assert message.startswith("executor:") and url in message
    assert not (tmp_path / "run").exists()  # nothing written


def test_a_run_directory_error_names_this_apis_arguments_not_the_clis(trained, tmp_path):
    run_dir = trained[0]
    message = one_line_config_error(flowgrpo.train, TINY, logging__output_dir=str(run_dir))
    assert "already holds a run" in message
    assert "resume=True" in message and "overwrite=True" in message
    assert "--resume" not in message and "--overwrite" not in message


def test_a_report_path_that_cannot_be_written_is_refused_before_evaluating(
    trained, tmp_path, monkeypatch, write_png
):
    """A folder where the JSON goes, or a user's PNG where the plot goes, is named before
    anything is evaluated (the evaluation's result was lost at the end, or the PNG replaced)."""
    from flowgrpo.trainer.reports import eval_run

    run_dir, result, _ = trained
    called = []
    monkeypatch.setattr(eval_run, "evaluate_run", lambda *a: called.append(a))
    monkeypatch.setattr(eval_run, "evaluate_one", lambda *a: called.append(a))
    (tmp_path / "folder").mkdir()
    message = one_line_config_error(
        flowgrpo.evaluate, result.checkpoint, n=1, json_file=tmp_path / "folder"
    )
    assert "folder is a folder: give a file name" in message
    (tmp_path / "file").write_text("mine")
    message = one_line_config_error(
        flowgrpo.evaluate, result.checkpoint, n=1, json_file=tmp_path / "file" / "r.json"
    )
    assert "file is a file, so" in message
    mine = write_png(tmp_path / "res.png", b"Comment\0mine")
    before = mine.read_bytes()
    message = one_line_config_error(
        flowgrpo.evaluate, run_dir, all_checkpoints=True, n=1, json_file=tmp_path / "res.json"
    )
    assert "res.png exists and carries no 'flowgrpo' PNG mark" in message
    assert mine.read_bytes() == before and not (tmp_path / "res.json").exists()
    assert called == []
