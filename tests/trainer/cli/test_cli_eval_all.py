"""``flowgrpo eval RUN_DIR --all``: every checkpoint of a run evaluated with the model loaded once
(adapters swapped, base weights untouched), a table, a JSON and a plot; each checkpoint's
numbers are those of its own ``flowgrpo eval --adapter``."""

import json
import shutil

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

import flowgrpo
from flowgrpo.operators import models
from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.loop import rollout
from flowgrpo.trainer.reports.eval_run import BASE_START

EVAL = ("--task", "arithmetic:easy", "--n", "2", "--k", "2", "--max-new-tokens", "6")


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def distinct_adapters(run_dir):
    """Three training steps of a tiny random model give no gradient (every output is a
    fallback, every group's rewards are equal), so the three checkpoints hold the same zero
    LoRA update. Give each checkpoint a different random lora_B (seeded by its step) so that
    evaluating the wrong adapter, or the base model, shows in the generated text."""
    for step in (1, 2, 3):
        path = run_dir / f"checkpoint-{step}" / "adapter" / "adapter_model.safetensors"
        weights = load_file(str(path))
        generator = torch.Generator().manual_seed(step)
        for name, value in weights.items():
            if "lora_B" in name:
                weights[name] = torch.randn(value.shape, generator=generator) * 2.0
        save_file(weights, str(path))


def base_weights(model):
    """The base model's weights by their name in the plain model (LoRA factors left out)."""
    out = {}
    for name, value in model.named_parameters():
        if "lora_" not in name:
            plain = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
            out[plain] = value.detach().clone()
    return out


class Recorder:
    """Wraps THE model loader (counting its calls) and the rollout (recording each call's
    texts and the base weights of the model it generated with)."""

    def __init__(self, monkeypatch):
        self.loads, self.texts, self.bases = 0, [], []
        load, generate = models.load_model, rollout.generate_rollout

        def counting_load(*args, **kwargs):
            self.loads += 1
            return load(*args, **kwargs)

        def recording_generate(model, *args, **kwargs):
            self.bases.append(base_weights(model))
            result = generate(model, *args, **kwargs)
            self.texts.append(list(result.texts))
            return result

        monkeypatch.setattr(models, "load_model", counting_load)
        monkeypatch.setattr(rollout, "generate_rollout", recording_generate)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A 3-checkpoint run of configs/tiny.yaml (logging.save_every=1), distinct adapters."""
    run_dir = tmp_path_factory.mktemp("eval-all") / "run"
    result = flowgrpo.train(
        "configs/tiny.yaml",
        optim__max_steps=3,
        logging__save_every=1,
        logging__keep_checkpoints=3,
        logging__output_dir=str(run_dir),
        rollout__max_new_tokens=4,
        rollout__problems_per_step=1,
        rollout__constrained="off",  # free: each adapter's own texts differ
    )
    assert result.steps == 3
    distinct_adapters(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def all_eval(run_dir):
    """``flowgrpo eval RUN_DIR --all``, recorded: (CLI result, recorder, JSON path)."""
    out = run_dir.parent / "all.json"
    with pytest.MonkeyPatch.context() as monkeypatch:
        recorder = Recorder(monkeypatch)
        result = invoke("eval", run_dir, "--all", *EVAL, "--json", out)
    return result, recorder, out


def test_eval_all_loads_the_model_once_and_writes_table_json_and_plot(run_dir, all_eval):
    result, recorder, out = all_eval
    assert result.exit_code == 0, result.output
    assert recorder.loads == 1, "the base model is loaded once for the start and 3 checkpoints"
    report = json.loads(out.read_text())
    rows = report["checkpoints"]
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert [row["checkpoint"] for row in rows] == [
        BASE_START,
        *(str(run_dir / f"checkpoint-{step}") for step in (1, 2, 3)),
    ]
    assert rows[0]["model"] == "tiny-random (base)"
    assert rows[1]["model"] == f"tiny-random + {run_dir / 'checkpoint-1' / 'adapter'}"
    assert all(row["problems"] == 2 and row["k"] == 2 for row in rows)
    table = [line.split() for line in result.stdout.splitlines() if line.strip()]
    header = next(line for line in table if line[0] == "step")
    assert "validity_rate" in header and "pass@1" in header and "pass@2" in header
    assert [line[0] for line in table if line[0].isdigit()] == ["0", "1", "2", "3"]
    plot = out.with_suffix(".png")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_adapters_are_swapped_and_the_base_weights_never_change(all_eval):
    _, recorder, _ = all_eval
    assert len(recorder.texts) == 4, "one rollout for the start and per checkpoint"
    assert len({json.dumps(texts) for texts in recorder.texts}) == 4, "each its own adapter"
    fresh = base_weights(models.load_model("tiny-random", seed=0)[0])
    for base in recorder.bases:
        assert base.keys() == fresh.keys()
        assert all(torch.equal(base[name], fresh[name]) for name in fresh)


def test_each_checkpoint_equals_its_own_eval(run_dir, all_eval, tmp_path):
    _, everything, out = all_eval
    rows = json.loads(out.read_text())["checkpoints"]
    for step in (1, 2, 3):
        single, checkpoint = tmp_path / f"single-{step}.json", run_dir / f"checkpoint-{step}"
        with pytest.MonkeyPatch.context() as monkeypatch:  # a model of its own, loaded afresh
            recorder = Recorder(monkeypatch)
            result = invoke("eval", "--adapter", checkpoint, *EVAL, "--json", single)
        assert result.exit_code == 0, result.output
        assert recorder.loads == 1
        assert recorder.texts == [everything.texts[step]], f"checkpoint-{step}: same workflows"
        alone = json.loads(single.read_text())
        row = {k: v for k, v in rows[step].items() if k not in ("step", "checkpoint")}
        alone.pop("seconds"), row.pop("seconds")
        assert row == alone, f"checkpoint-{step}"


def test_a_run_dir_without_checkpoints_is_a_one_line_error(tmp_path):
    empty = tmp_path / "run"
    empty.mkdir()
    (empty / "config.yaml").write_text("model: {name_or_path: tiny-random}\n")
    result = invoke("eval", empty, "--all", "--n", "1")
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert result.output.startswith(f"error: {empty}: no checkpoints here")
    missing = invoke("eval", tmp_path / "nowhere", "--all")
    assert missing.exit_code == 2 and "no such run directory" in missing.output
    both = invoke("eval", empty, "--all", "--adapter", empty)
    assert both.exit_code == 2 and "without --adapter, --base or --search" in both.output


def test_the_start_row_is_the_untrained_policy(run_dir, all_eval, tmp_path):
    """Step 0 equals ``flowgrpo eval`` of an adapter with B = 0 (a fresh one), run as trained."""
    _, everything, _ = all_eval
    fresh = tmp_path / "fresh" / "checkpoint-0"
    shutil.copytree(run_dir / "checkpoint-1", fresh)
    shutil.copy(run_dir / "config.yaml", fresh.parent / "config.yaml")
    path = fresh / "adapter" / "adapter_model.safetensors"
    weights = load_file(str(path))
    save_file({k: v * 0 if "lora_B" in k else v for k, v in weights.items()}, str(path))
    with pytest.MonkeyPatch.context() as monkeypatch:
        recorder = Recorder(monkeypatch)
        result = invoke("eval", "--adapter", fresh, *EVAL)
    assert result.exit_code == 0, result.output
    assert recorder.texts == [everything.texts[0]]


@pytest.mark.parametrize("name", ["eval_all.json", "eval_all.png"])
def test_a_users_file_under_a_default_report_name_is_refused_not_overwritten(
    run_dir, tmp_path, name
):
    copy = shutil.copytree(run_dir, tmp_path / "run")
    (copy / name).write_text('{"my": "notes"}')
    for json_out in ([], ["--json", "-"]):
        result = invoke("eval", copy, "--all", *EVAL, *json_out)
        if name == "eval_all.json" and json_out:  # with --json - only the plot is written
            continue
        assert result.exit_code == 2, result.output
        assert "is not replaced" in result.output and name in result.output
    assert (copy / name).read_text() == '{"my": "notes"}'


def test_a_users_plot_beside_an_eval_all_report_is_refused_not_overwritten(
    run_dir, tmp_path, write_png
):
    copy = shutil.copytree(run_dir, tmp_path / "run")
    (copy / "eval_all.json").write_text(json.dumps({"run_dir": str(copy), "checkpoints": []}))
    mine = write_png(copy / "eval_all.png", b"Software\0my own plot")
    before = mine.read_bytes()
    result = invoke("eval", copy, "--all", *EVAL)
    assert result.exit_code == 2, result.output
    assert "eval_all.png exists and carries no 'flowgrpo' PNG mark" in result.output
    assert mine.read_bytes() == before


def test_a_users_png_beside_a_named_report_is_refused_before_evaluating(
    run_dir, tmp_path, write_png, monkeypatch
):
    from flowgrpo.trainer.cli import evaluate as cli

    monkeypatch.setattr(cli, "evaluate_run", lambda *a, **k: pytest.fail("evaluated"))
    mine = write_png(tmp_path / "all.png")
    result = invoke("eval", run_dir, "--all", *EVAL, "--json", tmp_path / "all.json")
    assert result.exit_code == 2, result.output
    assert "all.png exists and carries no 'flowgrpo' PNG mark" in result.output
    assert b"tEXt" not in mine.read_bytes() and not (tmp_path / "all.json").exists()
