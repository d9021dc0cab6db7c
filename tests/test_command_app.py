"""A command line that names its command runs on an app holding that command alone (`cli.command_app`): the same
parameters, help and usage errors as the whole app gives it, and the whole app where no command is named."""

from __future__ import annotations

import click
import pytest
import typer.main
from typer.testing import CliRunner

from lerodoc.cli import NAMES, app, command_app
WHOLE = typer.main.get_command(app)


def _tree(command: click.Command) -> dict:
    """A command's parameters (name, opts, type, default, required, help), and its subcommands' the same way."""
    out = {"params": [(p.name, tuple(p.opts), type(p.type).__name__, p.type.name, getattr(p.type, "choices", None),
                       repr(p.default), p.required, getattr(p, "help", None)) for p in command.params],
           "help": command.help}
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        out[name] = _tree(sub)
    return out


def test_the_whole_app_lists_every_command():
    assert sorted(WHOLE.commands) == sorted(NAMES)
    assert len(NAMES) == len(set(NAMES))


@pytest.mark.parametrize("name", NAMES)
def test_a_named_command_runs_on_an_app_of_it_alone(name):
    one = typer.main.get_command(command_app(["-q", name, "DATASET", "--json"]))
    assert list(one.commands) == [name]
    assert _tree(one.commands[name]) == _tree(WHOLE.commands[name])
    assert [p.opts for p in one.params] == [p.opts for p in WHOLE.params]   # the root's --version, -q, -v


@pytest.mark.parametrize("args", [[], ["--help"], ["nosuch", "x"], ["-q"], ["--show-completion"]])
def test_no_command_named_runs_on_the_whole_app(args):
    assert sorted(typer.main.get_command(command_app(args)).commands) == sorted(NAMES)


@pytest.mark.parametrize("args", [["info", "--help"], ["train", "--help"], ["train", "pi05", "--help"],
                                  ["download", "--help"], ["info", "--bogus"], ["merge"]])
def test_help_and_usage_errors_read_as_the_whole_app_gives_them(args):
    runner = CliRunner()
    whole = runner.invoke(app, args, prog_name="lerodoc", terminal_width=100)
    one = runner.invoke(command_app(args), args, prog_name="lerodoc", terminal_width=100)
    assert (one.exit_code, one.output) == (whole.exit_code, whole.output)
    assert whole.output.strip()
