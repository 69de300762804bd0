"""Experiment trackers (logging.report_to) on the tiny model, offline: TensorBoard event files,
W&B offline run files under the run dir, an MLflow file store. Each gets the same scalars as
metrics.jsonl at the same steps, and a resumed run continues the same tracker run."""

import json
import math
import time

import pytest
from trainer_fakes import FREE, mixed, text_rollout

from flowgrpo.operators.backends.scripted import ScriptedBackend
from flowgrpo.trainer.config import load_config
from flowgrpo.trainer.loop import step as step_mod
from flowgrpo.trainer.loop.trainer import Trainer
from flowgrpo.trainer.monitoring.trackers import flat_scalars


def run(tmp_path, *extra, resume=False):
    cfg = load_config(
        "configs/tiny.yaml",
        (
            f"logging.output_dir={tmp_path}",
            "logging.save_every=1",
            "logging.run_name=t",
            FREE,
            *extra,
        ),
    )
    Trainer(cfg, resume=resume, executor=ScriptedBackend(lambda request: "5")).train()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(autouse=True)
def fake_rollouts(monkeypatch):
    monkeypatch.setattr(step_mod, "generate_rollout", text_rollout(mixed()))


def test_flat_scalars_keep_numbers_only():
    flat = flat_scalars(
        {
            "step": 3,
            "reward": 0.5,
            "loss": 0.1,
            "loss/policy": 0.2,
            "kl": None,
            "entropy": math.nan,
            "rollback": True,
            "operators": {"Custom": 0.25},
            "alerts": [{"name": "entropy_low"}],
            "collapse": None,
            "note": "text",
            "pass@1": 1.0,
        }
    )
    assert flat == {
        "reward": 0.5,
        "loss/total": 0.1,
        "loss/policy": 0.2,
        "rollback": 1,
        "operators/Custom": 0.25,
        "alerts/count": 1,
        "pass_1": 1.0,
    }


def test_tensorboard_alias_and_report_to_are_one_setting(tmp_path):
    alias = load_config("configs/tiny.yaml", ("logging.tensorboard=true",))
    assert alias.logging.report_to == ("tensorboard",)
    both = load_config(
        "configs/tiny.yaml", ("logging.tensorboard=true", "logging.report_to=[tensorboard]")
    )
    assert both.logging.report_to == ("tensorboard",)
    assert load_config("configs/tiny.yaml", ("logging.tensorboard=false",)).logging.report_to == ()


def test_wandb_offline_writes_the_metrics_under_the_run_dir(tmp_path, monkeypatch):
    import wandb  # noqa: F401  (the dev extra installs it: a missing package fails, not skips)

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    lines = run(tmp_path, "optim.max_steps=2", "logging.report_to=[wandb]")
    run_id = json.loads((tmp_path / "trackers.json").read_text())["wandb"]
    files = glob_run(tmp_path, run_id)
    assert len(files) == 1
    history = settled_history(files[0], 2)
    assert [row["_step"] for row in history] == [1, 2]
    assert history[1]["validity_rate"] == pytest.approx(lines[1]["validity_rate"])
    assert history[0]["completions/mean_length"] == pytest.approx(
        lines[0]["completions/mean_length"]
    )

    run(tmp_path, "optim.max_steps=3", "logging.report_to=[wandb]", resume=True)
    ids = json.loads((tmp_path / "trackers.json").read_text())
    assert ids["wandb"] == run_id, "the resumed run logs to the same W&B run id"
    # The resumed run's folder is named by the second it started: one folder when both runs
    # started within the same second, two otherwise. Its newest file holds the step 3 row.
    files = glob_run(tmp_path, run_id)
    newest = max(files, key=lambda path: path.stat().st_mtime_ns)
    assert [row["_step"] for row in settled_history(newest, 3)][-1:] == [3]


def test_mlflow_file_store_gets_the_metrics_and_a_resume_continues_the_run(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient  # the dev extra installs mlflow-skinny

    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    run_dir = tmp_path / "run"
    lines = run(run_dir, "optim.max_steps=2", "logging.report_to=[mlflow]")
    run_id = json.loads((run_dir / "trackers.json").read_text())["mlflow"]
    client = MlflowClient(tracking_uri=store.as_uri())
    history = client.get_metric_history(run_id, "validity_rate")
    assert [m.step for m in history] == [1, 2]
    assert [m.value for m in history] == pytest.approx([x["validity_rate"] for x in lines])
    losses = client.get_metric_history(run_id, "loss/total")
    assert [m.value for m in losses] == pytest.approx([x["loss"] for x in lines])
    params = client.get_run(run_id).data.params
    assert params["lora.r"] == "4"
    # derived values as the run used them (config.yaml writes them null while they follow)
    assert params["rewards.options.cost_max_calls"] == params["executor.max_calls"] != "null"
    assert params["algorithm.loss.max_new_tokens"] == params["rollout.max_new_tokens"]

    run(run_dir, "optim.max_steps=3", "logging.report_to=[mlflow]", resume=True)
    steps = [m.step for m in client.get_metric_history(run_id, "validity_rate")]
    assert steps == [1, 2, 3]


def glob_run(run_dir, run_id):
    return sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))


def settled_history(path, last_step, wait_s=60.0):
    """The history rows once the row of ``last_step`` is on disk (or ``wait_s`` passed).
    ``finish()`` returns when W&B's service has the records; its writer may flush the file a
    moment later (seen as an empty history on a loaded CI machine): the test waits, then asserts."""
    deadline = time.monotonic() + wait_s
    history = wandb_history(path)
    while last_step not in [row.get("_step") for row in history] and time.monotonic() < deadline:
        time.sleep(0.5)
        history = wandb_history(path)
    return history


def wandb_history(path):
    """The history rows of an offline W&B run file (records in LevelDB-log blocks of 32 KiB)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf, rows = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if pos + 7 + length > len(data):  # the writer's tail, not on disk yet: read again later
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            try:
                record.ParseFromString(buf)
            except DecodeError:
                if pos < len(data):  # inside the file: a corrupt record, not a tail in flight
                    raise
                break
            if record.WhichOneof("record_type") == "history":
                items = record.history.item
                rows.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                )
    return rows
