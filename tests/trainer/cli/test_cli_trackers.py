"""A tracker that cannot work is refused by ``flowgrpo train`` before anything is written: one
line naming the fix, exit 2, no traceback."""

from click.testing import CliRunner

from flowgrpo.trainer.cli.app import main
from flowgrpo.trainer.monitoring import trackers


def train(run_dir, *args):
    return CliRunner().invoke(
        main, ["train", "--config", "configs/tiny.yaml", "--output-dir", str(run_dir), *args]
    )


def error_lines(output):
    return [line for line in output.splitlines() if line.startswith("error:")]


def test_a_tracker_that_is_not_installed_names_its_extra(tmp_path, monkeypatch):
    monkeypatch.setattr(trackers, "is_installed", lambda module: module != "wandb")
    run_dir = tmp_path / "run"
    result = train(run_dir, "--set", "logging.report_to=[tensorboard, wandb]")
    assert result.exit_code == 2, result.output
    assert error_lines(result.output) == [
        "error: logging.report_to: wandb is not installed; pip install 'flowgrpo[wandb]'"
    ]
    assert "Traceback" not in result.output
    assert not run_dir.exists(), "refused before anything is written"


def test_mlflow_without_a_tracking_uri_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(trackers, "is_installed", lambda module: True)
    result = train(tmp_path / "run", "--set", "logging.report_to=mlflow")
    assert result.exit_code == 2, result.output
    assert "mlflow needs MLFLOW_TRACKING_URI" in result.output
    assert not (tmp_path / "run").exists()


def test_an_unknown_tracker_is_a_config_error():
    result = CliRunner().invoke(main, ["train", "--set", "logging.report_to=[neptune]"])
    assert result.exit_code == 2
    assert "logging.report_to: unknown tracker 'neptune'" in result.output
