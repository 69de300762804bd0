"""Bad input through every command: one ``error:`` line naming the file or key, exit 2, no
traceback, nothing written (issue 44's table; each case is one row)."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from flowgrpo.trainer.cli.app import main

TINY = "configs/tiny.yaml"
BOMB = "".join(
    f"{a}: &{a} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['x'] * 9)}]\n"
    for p, a in zip(["", "a", "b", "c", "d", "e", "f", "g", "h"], "abcdefghi")
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Bad files, and a finished tiny run whose checkpoint is damaged in the cases."""
    root = tmp_path_factory.mktemp("bad")
    (root / "list.yaml").write_text("- model\n- rollout\n")
    (root / "scalar.yaml").write_text("42\n")
    (root / "bomb.yaml").write_text(BOMB + "rollout:\n  task: *i\n")
    (root / "cycle.yaml").write_text("rollout: &r\n  x: *r\n")
    (root / "latin1.yaml").write_bytes("model:\n  name_or_path: caf\xe9\n".encode("latin-1"))
    (root / "bad.yaml").write_text("model: [unclosed\n")
    (root / "twice.yaml").write_text(
        "model:\n  name_or_path: tiny-random\nmodel:\n  dtype: float16\n"
    )
    (root / "deep.yaml").write_text("model: " + "[" * 10_000 + "]" * 10_000 + "\n")
    (root / "latin1.jsonl").write_bytes(b'{"question": "caf\xe9", "answer": "1"}\n')
    (root / "surrogate.jsonl").write_text('{"question": "a\\ud800b", "answer": "1"}\n')
    (root / "huge.jsonl").write_text('{"question": "' + "x" * 2_000_000 + '", "answer": "1"}\n')
    (root / "health-bomb").mkdir()
    (root / "health-bomb" / "config.yaml").write_text(BOMB + "health: *i\n")
    (root / "health-bomb" / "metrics.jsonl").write_text('{"step": 1}\n')
    run = root / "run"
    args = ["train", "--config", TINY, "--output-dir", str(run), "--max-steps", "1", "-q"]
    assert CliRunner().invoke(main, [*args, "--set", "logging.save_every=1"]).exit_code == 0
    return root


def _damage(run, part):
    shutil.rmtree(run.parent / "damaged", ignore_errors=True)
    damaged = shutil.copytree(run, run.parent / "damaged")
    target = {
        "weights": damaged / "checkpoint-1" / "adapter" / "adapter_model.safetensors",
        "adapter config": damaged / "checkpoint-1" / "adapter" / "adapter_config.json",
        "state": damaged / "checkpoint-1" / "trainer_state.pt",
        "no weights": damaged / "checkpoint-1" / "adapter" / "adapter_model.safetensors",
        "foreign config": damaged / "checkpoint-1" / "adapter" / "adapter_config.json",
        "run config list": damaged / "config.yaml",
        "run config yaml": damaged / "config.yaml",
    }[part]
    if part == "no weights":
        target.unlink()
    elif part == "foreign config":
        target.write_text('{"r": 4}')  # JSON, but no PEFT adapter's
    elif part == "run config list":
        target.write_text("- a\n- b\n")
    elif part == "run config yaml":
        target.write_text("model: [\n")
    else:
        target.write_bytes(b"{junk")
    return damaged


CASES = [  # (name, args with {root} and {out}, what the error line names)
    (
        "config is a list",
        "train --config {root}/list.yaml --output-dir {out}",
        "list.yaml: a config is a mapping",
    ),
    ("config is a scalar", "train --config {root}/scalar.yaml --dry-run", "holds a YAML int"),
    (
        "alias bomb",
        "train --config {root}/bomb.yaml --output-dir {out}",
        "expands to more than 100,000",
    ),
    ("alias cycle", "train --config {root}/cycle.yaml --dry-run", "a cycle"),
    ("not UTF-8", "train --config {root}/latin1.yaml --dry-run", "cannot be read as UTF-8"),
    # Python's decoding error names a byte, not the file: each names the file
    (
        "operator table not UTF-8",
        "validate --operators {root}/latin1.yaml Custom",
        "latin1.yaml: not UTF-8 text",
    ),
    (
        "prompt file not UTF-8",
        f"train --config {TINY} --set prompt.file={{root}}/latin1.yaml --dry-run",
        "latin1.yaml: not UTF-8 text",
    ),
    (
        "sft pairs not UTF-8",
        f"sft --config {TINY} --set sft.data=jsonl:{{root}}/latin1.jsonl --out {{out}}",
        "latin1.jsonl: not UTF-8 text",
    ),
    ("not YAML", "train --config {root}/bad.yaml --dry-run", "bad.yaml: not valid YAML"),
    ("no such config", "train --config {root}/none.yaml --dry-run", "does not exist"),
    (
        "the run directory is a file",  # once found only after the model loaded, as Errno 17
        f"train --config {TINY} --output-dir {{root}}/list.yaml",
        "list.yaml is a file, not a run directory",
    ),
    (
        "a negative checkpoint interval",  # once read as "every step"
        f"train --config {TINY} --set logging.save_every=-1 --dry-run",
        "logging.save_every: got -1",
    ),
    (
        "a section written twice",  # YAML keeps the last: the run would lose tiny-random
        "train --config {root}/twice.yaml --dry-run",
        "key 'model' is written twice in one mapping (lines 1 and 3)",
    ),
    ("nested 10,000 deep", "train --config {root}/deep.yaml --dry-run", "nested too deeply"),
    (
        "problems file missing (train)",
        f"train --config {TINY} --set rollout.task=gsm8k:{{root}}/no.jsonl --output-dir {{out}}",
        "no.jsonl",
    ),
    (
        "problems file missing (dry run)",
        f"train --config {TINY} --set rollout.task=gsm8k:{{root}}/no.jsonl --dry-run",
        "no.jsonl",
    ),
    (
        "model folder missing",
        f"train --config {TINY} --set model.name_or_path={{root}}/nomodel --output-dir {{out}}",
        "model.name_or_path: ",
    ),
    (
        "model folder missing (eval)",
        "eval --base --model {root}/nomodel --n 1",
        "nomodel' is not a folder on this machine",
    ),
    (
        "model folder missing (sft)",
        f"sft --config {TINY} --set model.name_or_path={{root}}/nomodel --out {{out}}",
        "nomodel' is not a folder on this machine",
    ),
    (
        "start adapter missing (fails once the model loaded)",
        f"train --config {TINY} --set model.init_adapter={{root}}/noadapter --output-dir {{out}}",
        "model.init_adapter: ",
    ),
    (
        "cache path escapes the run",
        f"train --config {TINY} --set rollout.cache_path=.. --output-dir {{out}}",
        "rollout.cache_path '..'",
    ),
    (
        "problems file not UTF-8",
        f"train --config {TINY} --set rollout.task=gsm8k:{{root}}/latin1.jsonl --dry-run",
        "latin1.jsonl: line 1 is not UTF-8",
    ),
    (
        "a lone surrogate in a question",
        f"train --config {TINY} --set rollout.task=gsm8k:{{root}}/surrogate.jsonl "
        "--output-dir {out}",
        "surrogate.jsonl: line 1 holds a lone surrogate",
    ),
    (
        "a 2 MB question",
        f"train --config {TINY} --set rollout.task=gsm8k:{{root}}/huge.jsonl --output-dir {{out}}",
        "huge.jsonl: line 1 is 2,000,032 bytes",
    ),
    (
        "a 2 MB question (eval)",
        "eval --base --model tiny-random --task gsm8k:{root}/huge.jsonl --n 1",
        "huge.jsonl: line 1 is 2,000,032 bytes",
    ),
    (
        "problems file not UTF-8 (eval)",
        "eval --base --model tiny-random --task gsm8k:{root}/latin1.jsonl --n 1",
        "not UTF-8",
    ),
    (
        "alias bomb in a run's config (diagnose)",
        "diagnose {root}/health-bomb",
        "expands to more than 100,000",
    ),
    (
        "a --set value that is not YAML",
        f"train --config {TINY} --set model.dtype=[x --dry-run",
        "not valid YAML",
    ),
    (
        "a 2 MB question (run)",
        "run Custom --executor simulated --task gsm8k:{root}/huge.jsonl --n 1",
        "huge.jsonl: line 1 is 2,000,032 bytes",
    ),
    ("sft config is a list", "sft --config {root}/list.yaml --out {out}", "a config is a mapping"),
    (
        "damaged weights: resume",
        "train --config {damaged}/config.yaml --output-dir {damaged} --resume --max-steps 2",
        "adapter_model.safetensors does not load",
    ),
    (
        "damaged weights: eval",
        "eval --adapter {damaged}/checkpoint-1 --n 1",
        "adapter_model.safetensors does not load",
    ),
    (
        "damaged weights: export",
        "export {damaged}/checkpoint-1 --merge {out}",
        "adapter_model.safetensors does not load",
    ),
    (
        "damaged adapter config: eval",
        "eval --adapter {damaged}/checkpoint-1 --n 1",
        "adapter_config.json does not load",
    ),
    (
        "damaged adapter config: eval of the checkpoint",  # once a traceback
        "eval {damaged}/checkpoint-1 --n 1",
        "adapter_config.json does not load",
    ),
    (
        "foreign adapter config: eval",  # once peft's KeyError: 'peft_type'
        "eval {damaged}/checkpoint-1 --n 1",
        "adapter_config.json is no PEFT adapter config",
    ),
    (
        "foreign adapter config: export",
        "export {damaged}/checkpoint-1 --merge {out}",
        "adapter_config.json is no PEFT adapter config",
    ),
    (
        "missing weights: eval",  # once a Hugging Face hub error about a repo id
        "eval --adapter {damaged}/checkpoint-1 --n 1",
        "has no adapter weights (adapter_model.safetensors)",
    ),
    (
        "missing weights: export",
        "export {damaged}/checkpoint-1 --merge {out}",
        "has no adapter weights",
    ),
    (
        "missing weights: a start adapter",  # once "does not fit model (trained on None?)"
        f"train --config {TINY} --set model.init_adapter={{damaged}}/checkpoint-1 "
        "--output-dir {out}",
        "has no adapter weights",
    ),
    (
        "run's config.yaml a list: resume",  # once AttributeError: 'list' object has no 'items'
        f"train --config {TINY} --output-dir {{damaged}} --resume --max-steps 2",
        "config.yaml holds a list",
    ),
    (
        "run's config.yaml not YAML: resume",  # once a yaml ParserError traceback
        f"train --config {TINY} --output-dir {{damaged}} --resume --max-steps 2",
        "config.yaml does not load",
    ),
    (
        "damaged state: resume",
        "train --config {damaged}/config.yaml --output-dir {damaged} --resume --max-steps 2",
        "trainer_state.pt does not load",
    ),
]
DAMAGE = {
    "missing weights": "no weights",
    "damaged weights": "weights",
    "damaged adapter config": "adapter config",
    "foreign adapter config": "foreign config",
    "run's config.yaml a list": "run config list",
    "run's config.yaml not YAML": "run config yaml",
    "damaged state": "state",
}


@pytest.mark.parametrize(("name", "command", "names"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(files, tmp_path, name, command, names):
    part = next((v for k, v in DAMAGE.items() if name.startswith(k)), "weights")
    damaged = _damage(files / "run", part)
    before = {p: p.read_bytes() for p in damaged.rglob("*") if p.is_file()}
    out = tmp_path / "out"
    args = command.format(root=files, out=out, damaged=damaged).split()
    result = CliRunner().invoke(main, args)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert len(errors) == 1 and names in errors[0], result.output
    assert not out.exists(), "nothing written"
    after = {p: p.read_bytes() for p in damaged.rglob("*") if p.is_file()}
    assert after == before, "nothing in the run folder changed"


def test_validate_reports_a_1_mb_input_without_echoing_it(tmp_path):
    # 1 MB shows it as well as 10 MB did (an echo would be a megabyte of output) in a tenth of
    # the time: parsing a million steps took 25-31 s of the suite
    path = tmp_path / "huge.txt"
    path.write_text("Custom -> " * 100_000 + "\n")
    result = CliRunner().invoke(main, ["validate", "--file", str(path)])
    assert result.exit_code == 1  # invalid, not a usage error
    assert "(1,000,000 characters)" in result.output
    assert len(result.output) < 2_000, len(result.output)


@pytest.mark.parametrize("name", ["list.yaml", "bomb.yaml", "cycle.yaml"])
def test_the_python_api_raises_one_config_error(files, tmp_path, name):
    import flowgrpo
    from flowgrpo.configuration import ConfigError

    with pytest.raises(ConfigError) as info:
        flowgrpo.train(str(files / name), logging__output_dir=str(tmp_path / "out"))
    assert name in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


API_TASKS = {  # rollout.task through the Python API -> what the one-line error names
    "surrogate.jsonl": "surrogate.jsonl: line 1 holds a lone surrogate",
    "huge.jsonl": "huge.jsonl: line 1 is 2,000,032 bytes",
    "no.jsonl": "no.jsonl",
}


@pytest.mark.parametrize("name", list(API_TASKS))
def test_the_python_api_names_a_bad_problems_file(files, tmp_path, name):
    import flowgrpo
    from flowgrpo.configuration import ConfigError

    out = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        flowgrpo.train(TINY, rollout__task=f"gsm8k:{files / name}", logging__output_dir=str(out))
    assert API_TASKS[name] in str(info.value) and "\n" not in str(info.value)
    assert not out.exists()


def test_the_python_api_names_a_plugin_loader_that_builds_bad_problems(tmp_path):
    """A loader registered in Python (no file to read line by line) gets the same checks."""
    import flowgrpo
    from flowgrpo.configuration import ConfigError
    from flowgrpo.operators.tasks import TASKS, Problem

    TASKS.register("surrogates_for_test", lambda *a: [Problem("s/0", "math", "a\ud800", "1")])
    out = tmp_path / "out"
    try:
        with pytest.raises(ConfigError, match=r"'s/0'\) holds a lone surrogate") as info:
            flowgrpo.train(TINY, rollout__task="surrogates_for_test", logging__output_dir=str(out))
    finally:
        TASKS.unregister("surrogates_for_test")
    assert "\n" not in str(info.value) and not out.exists()


def test_an_output_file_in_no_folder_is_refused_before_any_work(tmp_path):
    # eval, sft and search once did the work, then ended in a FileNotFoundError traceback
    nowhere = tmp_path / "nodir" / "x.json"
    for args in (
        ["eval", "--base", "--model", "tiny-random", "--n", "1", "--json", str(nowhere)],
        ["sft", "--config", TINY, "--out", str(tmp_path / "adapter"), "--json", str(nowhere)],
        ["search", "--config", TINY, "--out", str(nowhere)],
        ["search", "--config", TINY, "--sft-pairs", str(nowhere)],
    ):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert f"no folder {nowhere.parent} to write" in result.output, result.output
        assert "Traceback" not in result.output
    assert not any(tmp_path.iterdir()), "nothing written"


@pytest.mark.parametrize(
    ("content", "names"),
    [
        (b"{not json", "cannot be read as JSON"),
        ("caf\xe9".encode("latin-1"), "cannot be read as JSON (UnicodeDecodeError"),
        (b"[1, 2]", "not an evaluation result"),
        (b'{"a": 1}', "not an evaluation result"),
        (b'{"validity_rate": "x"}', "validity_rate is 'x', not a number"),  # once an empty table
    ],
)
def test_compare_names_a_file_that_is_no_evaluation_result(tmp_path, content, names):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    result = CliRunner().invoke(main, ["eval", "--compare", str(bad), str(bad)])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and names in errors[0], result.output


def test_validate_names_a_file_that_is_not_utf8(tmp_path):
    bad = tmp_path / "workflows.txt"
    bad.write_bytes("Custom -> Format\ncaf\xe9\n".encode("latin-1"))
    result = CliRunner().invoke(main, ["validate", "--file", str(bad)])
    assert result.exit_code == 2 and "not UTF-8 text" in result.output, result.output
    assert "Traceback" not in result.output
