"""Console logging of a command: flowgrpo's log lines go to the command's stderr above the
progress bar (tqdm's public logging_redirect_tqdm), at the --log-level/--quiet level, and the
handler goes away when the command ends."""

import logging

import click
from click.testing import CliRunner

from flowgrpo.trainer.cli.common import output_options, progress


@click.command()
@output_options
def noisy():
    log = logging.getLogger("flowgrpo.test_cli_logging")
    with progress(total=2, desc="work") as bar:
        log.info("info line")
        bar.update(1)
        log.warning("warning line")
        bar.update(1)
    click.echo("result")


def test_log_lines_reach_the_commands_stderr_and_the_handler_is_removed_after():
    before = list(logging.getLogger().handlers)
    result = CliRunner().invoke(noisy, [], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout == "result\n"
    lines = result.stderr.splitlines()
    assert "info line" in lines and "warning line" in lines  # the message alone, one a line
    assert "work" not in result.stderr and "\r" not in result.stderr  # not a terminal: no bar
    assert logging.getLogger().handlers == before


def test_tqdm_disable_turns_the_bar_off(monkeypatch):
    from flowgrpo.trainer.cli import common

    seen = []
    monkeypatch.setattr(common, "tqdm", lambda **kwargs: seen.append(kwargs["disable"]))
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    common.progress(total=1)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    common.progress(total=1)
    monkeypatch.setenv("TQDM_DISABLE", "0")
    common.progress(total=1)
    assert seen == [None, True, None]  # None: tqdm draws the bar on a terminal only


def test_quiet_keeps_warnings_and_drops_info_and_the_bar():
    result = CliRunner().invoke(noisy, ["--quiet"], catch_exceptions=False)
    assert result.stderr.splitlines() == ["warning line"]


def test_log_level_error_hides_info_and_warnings():
    result = CliRunner().invoke(noisy, ["--log-level", "ERROR"], catch_exceptions=False)
    assert "info line" not in result.stderr and "warning line" not in result.stderr


def test_a_quiet_command_leaves_the_callers_level_and_quietness_as_it_found_them():
    # a command run in the caller's process (main([...]) from Python) must not silence the
    # caller's flowgrpo log lines or status lines after it returns
    from flowgrpo.trainer.cli import common

    flowgrpo_log = logging.getLogger("flowgrpo")
    found = flowgrpo_log.level
    flowgrpo_log.setLevel(logging.DEBUG)
    try:
        result = CliRunner().invoke(noisy, ["--quiet"], catch_exceptions=False)
        assert result.stderr.splitlines() == ["warning line"]  # quiet while it ran
        assert flowgrpo_log.level == logging.DEBUG and not common.is_quiet()
    finally:
        flowgrpo_log.setLevel(found)
