"""Run directories through ``flowgrpo train``: every way of pointing a run at the wrong
directory is refused with a one-line message and exit 2, before anything is written."""

import json
import shutil

import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.config import load_config, save_config
from flowgrpo.trainer.loop.rundir import RUN_MARKER

TINY = "configs/tiny.yaml"


def train(run_dir, *args):
    return CliRunner().invoke(
        main, ["train", "--config", TINY, "--output-dir", str(run_dir), *args]
    )


def steps_of(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


def fake_run(run_dir, steps=2, lora_r=4, marker=True):
    """A run directory as a finished run leaves it: config.yaml, metrics rows, a checkpoint and
    (``marker``) the run marker naming what the run owns."""
    run_dir.mkdir(parents=True)
    if marker:
        owned = ["config.yaml", "metrics.jsonl", "samples.jsonl", "tensorboard", "plots"]
        (run_dir / RUN_MARKER).write_text(json.dumps({"flowgrpo_run": 1, "owned": owned}))
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
    save_file({"x": torch.zeros(1)}, adapter / "adapter_model.safetensors")  # whole, not real
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


def test_resume_with_max_steps_below_the_step_reached_is_refused_and_writes_nothing(tmp_path):
    # once: "resumed at step 5", "done: 5 steps" and config.yaml rewritten with max_steps 3
    run_dir = fake_run(tmp_path / "run", steps=5)
    before = (run_dir / "config.yaml").read_bytes()
    result = train(run_dir, "--resume", "--max-steps", "3")
    assert result.exit_code == 2, result.output
    assert "has reached step 5 (checkpoint-5), past optim.max_steps 3" in result.output
    assert (run_dir / "config.yaml").read_bytes() == before, "config.yaml untouched"


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
    (run_dir / "checkpoint-notes.txt").write_text("mine too")  # named like, not a checkpoint
    (run_dir / "checkpoint-1-best-backup").mkdir()
    (run_dir / ".checkpoint-6.abc_1234").mkdir()  # a save killed before its rename (mkdtemp)
    result = train(run_dir, "--max-steps", "1", "--overwrite")
    assert result.exit_code == 0, result.output
    assert steps_of(run_dir) == [1]
    assert not (run_dir / "checkpoint-5").exists() and (run_dir / "checkpoint-1").is_dir()
    assert not (run_dir / "tensorboard").exists()
    assert not (run_dir / ".checkpoint-6.abc_1234").exists()
    assert (run_dir / "notes.txt").read_text() == "mine", "files a run does not write are kept"
    assert (run_dir / "checkpoint-notes.txt").is_file()
    assert (run_dir / "checkpoint-1-best-backup").is_dir()


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


def _tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_overwrite_never_deletes_a_cache_path_outside_the_run(tmp_path):
    parent = tmp_path / "P"
    run_dir = fake_run(parent / "r")
    (parent / "precious.txt").write_text("mine")
    before = _tree(parent)
    result = train(run_dir, "--max-steps", "1", "--overwrite", "--set", "rollout.cache_path=..")
    assert result.exit_code == 2, result.output
    assert "rollout.cache_path '..' is not a file inside the run directory" in result.output
    assert _tree(parent) == before and (parent / "precious.txt").read_text() == "mine"
    outside = train(run_dir, "--overwrite", "--set", "rollout.cache_path=../precious.txt")
    assert outside.exit_code == 2 and (parent / "precious.txt").read_text() == "mine"


def test_an_absolute_cache_path_is_used_and_never_deleted(tmp_path):
    cache = tmp_path / "shared-cache.jsonl"
    cache.write_text("")
    run_dir = tmp_path / "run"
    absolute = ("--set", f"rollout.cache_path={cache}")
    assert train(run_dir, "--max-steps", "1", *absolute).exit_code == 0
    result = train(run_dir, "--max-steps", "1", "--overwrite", *absolute)
    assert result.exit_code == 0, result.output
    assert cache.exists()


def test_overwrite_of_a_folder_without_a_run_marker_is_refused(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("plots", "wandb", "tensorboard"):
        (folder / name).mkdir()
        (folder / name / "keep.txt").write_text(name)
    (folder / "config.yaml").write_text("my: notes\n")
    before = _tree(folder)
    result = train(folder, "--max-steps", "1", "--overwrite")
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]  # after the status lines, one error line
    assert f"--overwrite: {folder} has no {RUN_MARKER}" in last
    assert "Traceback" not in result.output
    assert _tree(folder) == before and (folder / "config.yaml").read_text() == "my: notes\n"


def test_a_run_from_before_markers_is_not_deleted_by_overwrite(tmp_path):
    run_dir = fake_run(tmp_path / "run", marker=False)
    before = _tree(run_dir)
    result = train(run_dir, "--max-steps", "1", "--overwrite")
    assert result.exit_code == 2 and "has no flowgrpo-run.json" in result.output
    assert _tree(run_dir) == before


def test_a_plain_train_never_overwrites_a_config_yaml_it_did_not_write(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.yaml").write_text("my: notes\n")
    result = train(folder, "--max-steps", "1")
    assert result.exit_code == 2, result.output
    assert "holds config.yaml, which a run would overwrite, and no flowgrpo run" in result.output
    assert (folder / "config.yaml").read_text() == "my: notes\n"
    assert _tree(folder) == ["config.yaml"]


def test_a_run_into_a_folder_of_other_files_keeps_them_and_overwrite_keeps_them_too(tmp_path):
    folder = tmp_path / "mine"
    (folder / "plots").mkdir(parents=True)
    (folder / "plots" / "mine.png").write_bytes(b"png")
    (folder / "notes.txt").write_text("mine")
    assert train(folder, "--max-steps", "1").exit_code == 2  # plots/ is a run name: refused
    (folder / "plots" / "mine.png").unlink()
    (folder / "plots").rmdir()
    assert train(folder, "--max-steps", "1").exit_code == 0
    marker = json.loads((folder / RUN_MARKER).read_text())
    assert "notes.txt" not in marker["owned"] and "config.yaml" in marker["owned"]
    assert train(folder, "--max-steps", "1", "--overwrite").exit_code == 0
    assert (folder / "notes.txt").read_text() == "mine"


def test_a_resume_from_a_damaged_checkpoint_names_it_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    assert train(run_dir, "--max-steps", "1", "--set", "logging.save_every=1").exit_code == 0
    (run_dir / "checkpoint-1" / "adapter" / "adapter_model.safetensors").write_bytes(b"junk")
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    result = train(run_dir, "--max-steps", "2", "--resume", "--set", "optim.lr=0.5")
    assert result.exit_code == 2, result.output
    assert "adapter_model.safetensors does not load" in result.output
    assert "Traceback" not in result.output
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert after == before, "a failed resume writes nothing (config.yaml included)"


def test_a_resumed_run_meets_the_execution_cache_as_it_was_at_its_checkpoint(tmp_path):
    # killed after step 3 ran (its results cached) but before its checkpoint: the resume redoes
    # step 3, and once found its results cached (hit rate 1.0, no executor calls)
    every = ("--set", "logging.save_every=1", "--set", "rollout.cache_path=execution_cache.jsonl")
    base, cut = tmp_path / "base", tmp_path / "cut"
    for run_dir in (base, cut):
        assert train(run_dir, "--max-steps", "3", *every).exit_code == 0
    shutil.rmtree(cut / "checkpoint-3")
    resumed = train(cut, "--max-steps", "3", "--resume", *every)
    assert resumed.exit_code == 0, resumed.output

    def rows(run_dir):
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [
            (r["step"], r["cache_hit_rate"], r["executor_calls"]) for r in map(json.loads, lines)
        ]

    assert rows(cut) == rows(base)
    assert rows(base)[-1][2] > 0  # step 3 asks the executor: the case is not vacuous
