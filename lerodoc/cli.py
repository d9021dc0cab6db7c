"""The `lerodoc` command line: one Typer app, one module per command, errors rendered once.

Built on Typer's and click's public API only (tests/test_layout.py holds that): `typer.Typer`, `typer.main.get_command`
and click's `Command.format_options` / `Group.format_commands` for help. Command modules import their operation
inside the command, so `lerodoc --help` and failures found before any work (a missing tokenizer, say) answer without
loading numpy, pyarrow, PyAV, huggingface_hub, torch or rich (tests/test_startup.py holds that): help is click's plain
text (`PlainCommand`, `PlainGroup`), render's consoles are made on first use."""

from __future__ import annotations

import gc
import inspect
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from lerodoc import __version__, render
from lerodoc.commands import (convert, delete, download, encode, features, flatten, info, merge, push, quantiles,
                              repair, select, split, tasks, train, validate)
from lerodoc.commands import eval as evaluate
from lerodoc.commands import export
from lerodoc.commands import report
from lerodoc.errors import ExitCode, LerodocError, no_room


GLUE = "\x1f"   # stands for a hyphen inside a word while help is wrapped


class PlainFormatter(typer.Context.formatter_class):
    """click's help formatter, wrapping lines at spaces only: a hyphen inside a word (`fixed-size`,
    `--no-keep-source`) never ends a line, where click's wrapper (textwrap's break_on_hyphens) would cut there."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, _glued(args), prefix)

    def write_text(self, text: str) -> None:
        super().write_text(_glued(text))

    def write_dl(self, rows, *args, **kwargs) -> None:
        super().write_dl([tuple(_glued(cell) for cell in row) for row in rows], *args, **kwargs)

    def getvalue(self) -> str:
        return super().getvalue().replace(GLUE, "-")


def _glued(text: str) -> str:
    return re.sub(r"(?<=\w)-(?=\w)", GLUE, text)


class PlainContext(typer.Context):
    formatter_class = PlainFormatter


class PlainCommand(TyperCommand):
    """A command whose --help is click's plain text, as sqlite-utils' is: its texts printed as written (no markup
    is read, so `feature[name,glob*]` survives), paragraphs filled to the terminal, options under the headings
    their rich_help_panel names (Output, Performance)."""
    context_class = PlainContext

    def format_options(self, ctx, formatter) -> None:
        _format_params(self, ctx, formatter)


class PlainGroup(TyperGroup):
    """A command group whose --help is plain text too: its options, then its commands under their panels' headings
    (Format, Edit, ...), each with its help's first paragraph whole."""
    context_class = PlainContext

    def format_options(self, ctx, formatter) -> None:
        _format_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx, formatter) -> None:
        panels: dict[str, list] = {"Commands": []}
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                panel = getattr(command, "rich_help_panel", None) or "Commands"
                panels.setdefault(panel, []).append((name, _first_paragraph(command.short_help or command.help)))
        width = max((len(name) for rows in panels.values() for name, _ in rows), default=0)
        for panel, rows in panels.items():
            if rows:
                with formatter.section(panel):
                    formatter.write_dl([(name.ljust(width), text) for name, text in rows])


def _format_params(command, ctx, formatter) -> None:
    """`command`'s arguments, then its options, each under its panel's heading, the default panels (Arguments,
    Options) first, as Typer's rich help orders them."""
    arguments, options = {"Arguments": []}, {"Options": []}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)   # None for a hidden one
        if record is not None:
            panels = arguments if param.param_type_name == "argument" else options
            panels.setdefault(getattr(param, "rich_help_panel", None) or next(iter(panels)), []).append(record)
    for panel, records in (*arguments.items(), *options.items()):
        if records:
            with formatter.section(panel):
                formatter.write_dl(records)


def _first_paragraph(text: str | None) -> str:
    """A command's line in its group's listing: the first paragraph of its help, on one line."""
    first = inspect.cleandoc(text or "").split("\n\n")[0]
    return first.replace("\b\n", "") if first.startswith("\b") else " ".join(first.split())


# the commands, in the order `lerodoc --help` lists them within their panels: (panel, a command's function or a
# group's Typer app, the group's name)
COMMANDS = (("Format", info.info, None), ("Format", convert.convert, None), ("Edit", merge.merge, None),
            ("Edit", delete.delete, None), ("Edit", split.split, None), ("Edit", tasks.tasks, None),
            ("Edit", features.features, None), ("Edit", encode.encode, None), ("Edit", flatten.flatten, None),
            ("Edit", select.select, None), ("Stats", quantiles.quantiles, None), ("Check", validate.validate, None),
            ("Check", repair.repair, None), ("Check", report.report, None), ("Train", train.app, "train"),
            ("Train", evaluate.app, "eval"), ("Train", export.app, "export"), ("Hub", download.app, "download"),
            ("Hub", push.push, None))
for _group in (train.app, evaluate.app, export.app, download.app):
    for _info in _group.registered_commands:
        if _info.cls in (None, TyperCommand):
            _info.cls = PlainCommand


# each entry's command name: a group's own, else the one Typer gives the function
NAMES = tuple(group or typer.main.get_command_name(command.__name__) for _, command, group in COMMANDS)


def make_app(only: str | None = None) -> typer.Typer:
    """The lerodoc app: every command, or with `only` (a command's name) that command alone under the same root.
    A command line that names its command runs on that one alone: Typer builds click's parameters of every command
    it holds from their signatures, 55 ms of each run's start-up for all of them, about 1 ms for one."""
    cli = typer.Typer(name="lerodoc", no_args_is_help=True, add_completion=True, cls=PlainGroup,
                      rich_markup_mode=None,
                      context_settings={"help_option_names": ["-h", "--help"], "max_content_width": render.PLAIN_WIDTH},
                      help="Prepare, convert, repair and train on LeRobot datasets (v2.0, v2.1, v3.0).",
                      epilog="Exit codes: 0 ok, 1 findings, 2 usage, 3 bad input, 4 verification failed, "
                             "5 hub unreachable or refused, 70 a bug in lerodoc, 130 interrupted.")
    for (panel, command, group), name in zip(COMMANDS, NAMES):
        if only is not None and only != name:
            continue
        if group is None:
            cli.command(rich_help_panel=panel, cls=PlainCommand)(command)
        else:
            cli.add_typer(command, name=group, rich_help_panel=panel, cls=PlainGroup)
    cli.callback()(root)
    return cli


def command_app(args: list[str]) -> typer.Typer:
    """The app a command line runs on: its command's alone where its first word names one (`make_app`), else the
    whole app (`lerodoc --help`, a mistyped command, shell completion)."""
    first = next((arg for arg in args if not arg.startswith("-")), None)
    return make_app(first if first in NAMES else None)


def _version(value: bool) -> None:
    if value:
        render.out().print(f"lerodoc {__version__}")
        raise typer.Exit()


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


app = make_app()


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


GLOBAL_FLAGS = ("-q", "--quiet", "-v", "--verbose")   # the root's own options, taken after the command too


def global_first(args: list[str]) -> list[str]:
    """`args` with the root's flags (-q, -v) moved before the command wherever they were typed (`info DS -q`), as
    no command has options of those names; what follows a `--` is left as it is."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in GLOBAL_FLAGS]
    return flags + [a for a in args[:end] if a not in GLOBAL_FLAGS] + args[end:]


def _closed_pipe() -> None:
    """stdout's reader went away (`lerodoc info DS | head -1`): end quietly, as a program the SIGPIPE ended does
    (exit 141), with stdout pointed at /dev/null so that Python's last flush does not fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    os._exit(128 + 13)


GC_FIRST_THRESHOLD = 100_000   # allocations between young collections (CPython's default: 700)


def main() -> None:
    """Run the app; render an error once, as one paragraph, with its exit code; with --json, every outcome is
    one JSON envelope on stdout (render.envelope), usage errors and bugs included. A closed stdout ends it quietly
    (`_closed_pipe`)."""
    try:
        _main()
        sys.stdout.flush()
    except BrokenPipeError:
        _closed_pipe()


def _main() -> None:
    args = global_first(sys.argv[1:])
    as_json = "--json" in args
    started = time.perf_counter()
    sys.unraisablehook = _quiet_no_room(sys.unraisablehook)   # before any pool forks: its workers inherit it
    # A command holds one record per episode; at CPython's default first threshold (700) the collector walks
    # them over and over, up to a sixth of a 20,000-episode delete. The process is the CLI's own; pool workers are
    # given it (`run.parallel._worker_init`: the fork server's children start with CPython's own).
    gc.set_threshold(GC_FIRST_THRESHOLD, 50, 100)
    cli = typer.main.get_command(command_app(args))
    render.command = command_of(cli, args)
    try:
        code = cli.main(args=args, standalone_mode=False)
    except LerodocError as exc:
        if os.environ.get("LERODOC_DEBUG"):
            raise
        _fail(as_json, exc.exit_code, exc.to_json(), exc.render(), cause=exc)
    except KeyboardInterrupt:
        _fail(as_json, ExitCode.INTERRUPTED, _error("interrupted"), "interrupted")
    except BrokenPipeError:
        raise   # stdout's reader went away: main ends quietly
    except typer.Abort:
        _fail(as_json, ExitCode.INTERRUPTED, _error("aborted"), "aborted")
    except Exception as exc:
        if _is_click_error(exc):   # a usage error (exit 2): Typer's own rendering, and the envelope
            if as_json and type(exc).__name__ != "NoArgsIsHelpError":
                render.write_json(render.envelope(exit_code=exc.exit_code, error=_error(exc.format_message())))
            if type(exc).__name__ != "NoArgsIsHelpError":
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
