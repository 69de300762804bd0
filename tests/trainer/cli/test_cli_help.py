"""What a newcomer sees first: ``flowgrpo --help`` says where to start and lists the commands in
the order they are used; ``train --help`` names the seconds-long smoke config (issue 43)."""

from click.testing import CliRunner

from flowgrpo.trainer.cli.app import COMMAND_ORDER, main


def help_of(*args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_top_help_starts_with_the_tiny_run_and_lists_commands_in_use_order():
    text = help_of()
    start = text.index("Start here:")
    assert "flowgrpo train --config configs/tiny.yaml" in text[start:].splitlines()[1]
    lines = text[text.index("Commands:") :].splitlines()[1:]
    commands = [line.split()[0] for line in lines if line.startswith("  ") and line.strip()]
    assert commands == list(COMMAND_ORDER)
    assert sorted(commands) == sorted(main.commands), "every command is listed once"


def test_train_help_names_the_smoke_config():
    assert "configs/tiny.yaml" in " ".join(help_of("train").split())
