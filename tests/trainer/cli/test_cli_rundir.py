"""Run directories through ``flowgrpo train``: every way of pointing a run at the wrong
directory is refused with a one-line message and exit 2, before anything is written."""

import json

from click.testing import CliRunner

from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import load_config, save_config

TINY = "configs/tiny.yaml"


def train(run_dir, *args):
    return CliRunner().invoke(
        main, ["train", "--config", TINY, "--output-dir", str(run_dir), *args]
    )


def steps_of(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


def fake_run(run_dir, steps=2, lora_r=4):
    """A run directory as a finished run leaves it: config.yaml, metrics rows, a checkpoint."""
    run_dir.mkdir(parents=True)
    cfg = load_config(TINY, (f"logging.output_dir={run_dir}", f"lora.r={lora_r}"))
    save_config(cfg, run_dir / "config.yaml")
    rows = "".join(json.dumps({"step": s}) + "\n" for s in range(1, steps + 1))
    (run_dir / "metrics.jsonl").write_text(rows)
    adapter = run_dir / f"checkpoint-{steps}" / "adapter"
    adapter.mkdir(parents=True)
    peft = {
        "r": lora_r,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
    }
    (adapter / "adapter_config.json").write_text(json.dumps(peft))
    (adapter.parent / "trainer_state.pt").write_bytes(b"")
    return run_dir


def test_resume_without_a_checkpoint_names_the_directory_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "new-run"
    result = train(run_dir, "--resume")
    assert result.exit_code == 2, result.output
    assert f"--resume: no checkpoint in {run_dir}" in result.output
    assert "without --resume" in result.output and "Traceback" not in result.output
    assert not run_dir.exists(), "nothing written"


def test_resume_with_another_model_or_lora_shape_names_the_keys(tmp_path):
    run_dir = fake_run(tmp_path / "run")
    before = (run_dir / "config.yaml").read_bytes()
    result = train(run_dir, "--resume", "--set", "lora.r=8", "--set", "model.name_or_path=default")
    assert result.exit_code == 2, result.output
    assert "lora.r: 4 -> 8" in result.output
    assert "model.name_or_path: 'tiny-random' -> 'default'" in result.output
    assert (run_dir / "config.yaml").read_bytes() == before, "config.yaml untouched"
    assert steps_of(run_dir) == [1, 2]

    modules = train(run_dir, "--resume", "--set", "lora.target_modules=[q_proj]")
    assert modules.exit_code == 2 and "lora.target_modules" in modules.output


def test_a_directory_holding_a_run_is_refused_without_resume_or_overwrite(tmp_path):
    run_dir = fake_run(tmp_path / "run")
    (run_dir / "config.yaml").unlink()
    result = train(run_dir, "--max-steps", "1")
    assert result.exit_code == 2, result.output
    assert f"{run_dir} already holds a run (metrics.jsonl with 2 steps, checkpoint-2)" in (
        result.output
    )
    assert "--resume" in result.output and "--overwrite" in result.output
    assert not (run_dir / "config.yaml").exists(), "config.yaml is written only after the checks"
    assert steps_of(run_dir) == [1, 2]


def test_resume_and_overwrite_together_are_refused(tmp_path):
    result = train(fake_run(tmp_path / "run"), "--resume", "--overwrite")
    assert result.exit_code == 2 and "exclude each other" in result.output


def test_overwrite_deletes_the_old_run_files_only(tmp_path):
    run_dir = fake_run(tmp_path / "run", steps=5)
    (run_dir / "tensorboard").mkdir()
    (run_dir / "notes.txt").write_text("mine")
    result = train(run_dir, "--max-steps", "1", "--overwrite")
    assert result.exit_code == 0, result.output
    assert steps_of(run_dir) == [1]
    assert not (run_dir / "checkpoint-5").exists() and (run_dir / "checkpoint-1").is_dir()
    assert not (run_dir / "tensorboard").exists()
    assert (run_dir / "notes.txt").read_text() == "mine", "files a run does not write are kept"


def test_resuming_twice_never_logs_a_step_twice(tmp_path):
    run_dir = tmp_path / "run"
    every = ("--set", "logging.save_every=1")
    assert train(run_dir, "--max-steps", "1", *every).exit_code == 0
    assert train(run_dir, "--max-steps", "2", "--resume", *every).exit_code == 0
    # a run killed after logging step 3 but before checkpointing it
    with (run_dir / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps({"step": 3}) + "\n")
    result = train(run_dir, "--max-steps", "3", "--resume", *every)
    assert result.exit_code == 0, result.output
    assert steps_of(run_dir) == [1, 2, 3]
