"""The `lerodoc` command line: one Typer app, one module per command, errors rendered once.

Command modules import their core operation inside the command, so `lerodoc --help` and failures found
before any work (a missing tokenizer, say) answer without loading pyarrow, PyAV or torch."""

from __future__ import annotations

import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from lerodoc import __version__, render
from lerodoc.commands import (convert, delete, download, encode, features, flatten, info, merge, push, quantiles,
                              repair, select, split, tasks, train, validate)
from lerodoc.commands import export
from lerodoc.commands import report
from lerodoc.errors import ExitCode, LerodocError, no_room


class LiteralCommand(TyperCommand):
    """A command whose --help shows its texts literally (rich markup escaped) with paragraphs wrapped to the
    terminal: `render.help_text` applied while the help is formatted; the texts themselves stay as written
    (scripts/gen_cli_docs.py reads them)."""

    def format_help(self, ctx, formatter) -> None:
        with _literal_help(self):
            super().format_help(ctx, formatter)


class LiteralGroup(TyperGroup):
    """A command group whose --help (its own texts and its commands' one-liners) shows literally."""

    def format_help(self, ctx, formatter) -> None:
        with _literal_help(self, *self.commands.values()):
            super().format_help(ctx, formatter)


@contextmanager
def _literal_help(*commands):
    saved = []
    for command in commands:
        for obj, attrs in ((command, ("help", "short_help", "epilog")), *((p, ("help",)) for p in command.params)):
            for attr in attrs:
                value = getattr(obj, attr, None)
                if isinstance(value, str):
                    saved.append((obj, attr, value))
                    setattr(obj, attr, render.help_text(value))
    try:
        yield
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)


app = typer.Typer(name="lerodoc", no_args_is_help=True, add_completion=True, cls=LiteralGroup,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Prepare, convert, repair and train on LeRobot datasets (v2.0, v2.1, v3.0).",
                  epilog="Exit codes: 0 ok, 1 findings, 2 usage, 3 bad input, 4 verification failed, "
                         "5 hub unreachable or refused, 70 a bug in lerodoc, 130 interrupted.")
app.command(rich_help_panel="Format")(info.info)
app.command(rich_help_panel="Format")(convert.convert)
app.command(rich_help_panel="Edit")(merge.merge)
app.command(rich_help_panel="Edit")(delete.delete)
app.command(rich_help_panel="Edit")(split.split)
app.command(rich_help_panel="Edit")(tasks.tasks)
app.command(rich_help_panel="Edit")(features.features)
app.command(rich_help_panel="Edit")(encode.encode)
app.command(rich_help_panel="Edit")(flatten.flatten)
app.command(rich_help_panel="Edit")(select.select)
app.command(rich_help_panel="Stats")(quantiles.quantiles)
app.command(rich_help_panel="Check")(validate.validate)
app.command(rich_help_panel="Check")(repair.repair)
app.command(rich_help_panel="Check")(report.report)
app.add_typer(train.app, rich_help_panel="Train", cls=LiteralGroup)
app.add_typer(export.app, rich_help_panel="Train", cls=LiteralGroup)
app.add_typer(download.app, name="download", rich_help_panel="Hub", cls=LiteralGroup)
app.command(rich_help_panel="Hub")(push.push)
for _app in (app, train.app, export.app, download.app):
    for _info in _app.registered_commands:
        if _info.cls in (None, TyperCommand):
            _info.cls = LiteralCommand


def _version(value: bool) -> None:
    if value:
        render.out.print(f"lerodoc {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_version,
                                               help="Print the version and exit.")] = False,
         quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only errors and results: no progress "
                                             "bars, warnings or notes.")] = False,
         verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More detail on stderr: the libraries' "
                                               "log, what caused an error, the time taken, train's metrics at "
                                               "each flush. (LERODOC_DEBUG=1 shows tracebacks.)")] = False) -> None:
    """lerodoc: LeRobot datasets that train."""
    if quiet and verbose:
        raise typer.BadParameter("give -q or -v, not both", param_hint="-q/-v")
    render.set_level(quiet, verbose)


BUG_PREFIX = "internal error (a bug in lerodoc, not in your data):"
PACKAGE = Path(__file__).resolve().parent


def command_of(cli, args: list[str]) -> str | None:
    """The command a command line runs ("info", "train pi05"): its leading words that name (sub)commands."""
    path = []
    for arg in args:
        if arg.startswith("-"):
            continue
        sub = (getattr(cli, "commands", None) or {}).get(arg)
        if sub is None:
            break
        path.append(arg)
        cli = sub
    return " ".join(path) or None


def _is_click_error(exc: BaseException) -> bool:
    """Typer's (click's) own usage errors: bad options or arguments, BadParameter from a callback."""
    return isinstance(getattr(exc, "exit_code", None), int) and callable(getattr(exc, "format_message", None)) \
        and callable(getattr(exc, "show", None))


def _error(message: str, **extra) -> dict:
    """The envelope's `error` for a failure that is not a LerodocError (whose to_json gives the same keys)."""
    return {"message": message, "file": None, "episode": None, "field": None, "hint": None, **extra}


def _fail(as_json: bool, exit_code: int, error: dict, text: str, prefix: str = "error:",
          cause: BaseException | None = None) -> None:
    if as_json:
        render.write_json(render.envelope(exit_code=exit_code, error=error))
    render.error(text, prefix=prefix)
    if cause is not None:
        _causes(cause)
    sys.exit(int(exit_code))


def _quiet_no_room(hook):
    """`sys.unraisablehook` that drops a full disk said again by a finaliser (pyarrow's ParquetWriter.__del__
    retries a close that failed for want of room, after the error was reported once) and passes anything else
    to `hook`."""
    def quiet(unraisable) -> None:
        if no_room(unraisable.exc_value) is None:
            hook(unraisable)
    return quiet


def _causes(exc: BaseException) -> None:
    """-v: the exceptions behind an error, one line each (a bug's own exception is in its message already)."""
    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        render.detail(f"caused by {type(seen).__name__}: {' '.join(str(seen).split())}")
        seen = seen.__cause__ or seen.__context__


def main() -> None:
    """Run the app; render an error once, as one paragraph, with its exit code; with --json, every outcome is
    one JSON envelope on stdout (render.envelope), usage errors and bugs included."""
    args = sys.argv[1:]
    as_json = "--json" in args
    started = time.perf_counter()
    sys.unraisablehook = _quiet_no_room(sys.unraisablehook)   # before any pool forks: its workers inherit it
    cli = typer.main.get_command(app)
    render.command = command_of(cli, args)
    try:
        code = cli.main(args=args, standalone_mode=False)
    except LerodocError as exc:
        if os.environ.get("LERODOC_DEBUG"):
            raise
        _fail(as_json, exc.exit_code, exc.to_json(), exc.render(), cause=exc)
    except KeyboardInterrupt:
        _fail(as_json, ExitCode.INTERRUPTED, _error("interrupted"), "interrupted")
    except typer.Abort:
        _fail(as_json, ExitCode.INTERRUPTED, _error("aborted"), "aborted")
    except Exception as exc:
        if _is_click_error(exc):   # a usage error (exit 2): Typer's own rendering, and the envelope
            if as_json and type(exc).__name__ != "NoArgsIsHelpError":
                render.write_json(render.envelope(exit_code=exc.exit_code, error=_error(exc.format_message())))
            if getattr(app, "rich_markup_mode", None) is not None and type(exc).__name__ != "NoArgsIsHelpError":
                from typer import rich_utils
                rich_utils.rich_format_error(exc)
            elif type(exc).__name__ != "NoArgsIsHelpError":
                exc.show()
            sys.exit(exc.exit_code)
        if os.environ.get("LERODOC_DEBUG"):
            raise
        full = no_room(exc)   # a write outside a staging folder (which names its file itself) found the disk full
        if full is not None:
            _fail(as_json, full.exit_code, full.to_json(), full.render())
        # not bad input (that is a LerodocError): a bug, said as one, where it happened
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in frames if Path(f.filename).is_relative_to(PACKAGE)]
        where = (ours or frames)[-1]   # the last line of lerodoc's own code that ran, not pyarrow's or PyAV's
        text = (f"{type(exc).__name__}: {' '.join(str(exc).split())} at {where.filename}:{where.lineno} "
                f"({where.name}); outputs were not promoted")
        _fail(as_json, ExitCode.BUG, _error(text, bug=True),
              f"{text}. LERODOC_DEBUG=1 shows the traceback; please report it with the command line.",
              prefix=BUG_PREFIX, cause=exc)
    if code == ExitCode.INTERRUPTED:   # Typer turns Ctrl-C into exit 130
        _fail(as_json, ExitCode.INTERRUPTED, _error("interrupted"), "interrupted")
    render.detail(f"lerodoc {render.command or ''}: exit {code or 0} in {time.perf_counter() - started:.2f} s")
    sys.exit(code if isinstance(code, int) else 0)
