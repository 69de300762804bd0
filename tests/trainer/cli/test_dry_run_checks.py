"""Before any model loads (``--dry-run`` and the start of a real run): problems, prompt examples
and an OpenAI-compatible executor's model list are checked; each failure is one line, exit 2."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner
from fault_server import FaultServer

from flowgrpo.operators.executor import ExecutorConfig, probe_executor
from flowgrpo.trainer.cli.app import main


def _free_port() -> int:
    with socket.socket() as s:  # bound then released: nobody listens on it afterwards
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(*sets: str, dry: bool = True):
    args = ["train", "--config", "configs/tiny.yaml", *(["--dry-run"] if dry else [])]
    for assignment in sets:
        args += ["--set", assignment]
    return CliRunner().invoke(main, args)


def test_a_bad_jsonl_line_exits_2_naming_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "2+2?", "answer": "4"}\n{"question": "x"\n')
    result = train(f"rollout.task=jsonl:{path}")
    assert result.exit_code == 2 and "line 2 is not valid JSON" in result.output


def test_a_prompt_example_that_is_not_valid_dsl_exits_2():
    result = train('prompt.examples=[{question: "q", workflow: "Custom -> Foo"}]')
    assert result.exit_code == 2
    assert "prompt.examples[0]" in result.output and "unknown operator 'Foo'" in result.output


def test_an_executor_url_nobody_listens_on_exits_2_before_any_model_loads(monkeypatch, tmp_path):
    from flowgrpo.operators import models

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the executor was checked")

    monkeypatch.setattr(models, "load_model", no_loading)
    url = f"http://127.0.0.1:{_free_port()}/v1"
    sets = ("executor.kind=openai", f"executor.base_url={url}", "executor.model=m")
    for dry in (True, False):  # the dry run, and a real run before its model loads
        result = train(*sets, f"logging.output_dir={tmp_path / 'run'}", dry=dry)
        assert result.exit_code == 2, result.output
        assert f"executor.base_url {url}" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.fixture
def server():
    srv = FaultServer(models=("served-model",), lifetime_s=60)
    yield srv
    srv.close()


def test_the_model_list_is_read_and_a_model_it_does_not_serve_is_named(server):
    section = ExecutorConfig(kind="openai", base_url=server.url, model="served-model")
    probe_executor(section)  # served: no error
    wrong = ExecutorConfig(kind="openai", base_url=server.url, model="other")
    with pytest.raises(ValueError, match=r"executor\.model 'other' is not served.*served-model"):
        probe_executor(wrong)
    assert server.requests == []  # the check sends no chat request


def test_in_process_and_simulated_executors_are_not_probed():
    for kind in ("hf", "shared", "simulated"):
        probe_executor(ExecutorConfig(kind=kind))  # no server, no model load: nothing raised
