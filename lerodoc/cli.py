"""The `lerodoc` command line: one Typer app, one module per command, errors rendered once.

Command modules import their core operation inside the command, so `lerodoc --help` and failures found
before any work (a missing tokenizer, say) answer without loading pyarrow, PyAV or torch."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from lerodoc import __version__, render
from lerodoc.commands import (convert, delete, download, encode, features, flatten, info, merge, push, quantiles,
                              repair, select, split, tasks, train, validate)
from lerodoc.commands import export
from lerodoc.commands import report
from lerodoc.errors import ExitCode, LerodocError

app = typer.Typer(name="lerodoc", no_args_is_help=True, add_completion=False,
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
app.add_typer(train.app, rich_help_panel="Train")
app.add_typer(export.app, rich_help_panel="Train")
app.add_typer(download.app, name="download", rich_help_panel="Hub")
app.command(rich_help_panel="Hub")(push.push)


def _version(value: bool) -> None:
    if value:
        render.out.print(f"lerodoc {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_version,
                                               help="Print the version and exit.")] = False) -> None:
    """lerodoc: LeRobot datasets that train."""


BUG_PREFIX = "internal error (a bug in lerodoc, not in your data):"
PACKAGE = Path(__file__).resolve().parent


def main() -> None:
    """Run the app; render a LerodocError once, as one paragraph, with its exit code."""
    try:
        app()
    except LerodocError as exc:
        if os.environ.get("LERODOC_DEBUG"):
            raise
        if "--json" in sys.argv:
            render.print_json(exc.to_json())
        render.err.print(f"[bold red]error:[/] {exc.render()}", highlight=False, soft_wrap=True)
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        render.err.print("interrupted")
        sys.exit(int(ExitCode.INTERRUPTED))
    except Exception as exc:  # not bad input (that is a LerodocError): a bug, said as one, where it happened
        if os.environ.get("LERODOC_DEBUG"):
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in frames if Path(f.filename).is_relative_to(PACKAGE)]
        where = (ours or frames)[-1]   # the last line of lerodoc's own code that ran, not pyarrow's or PyAV's
        text = (f"{type(exc).__name__}: {' '.join(str(exc).split())} at {where.filename}:{where.lineno} "
                f"({where.name}); outputs were not promoted")
        if "--json" in sys.argv:
            render.print_json({"error": text, "bug": True, "exit_code": int(ExitCode.BUG)})
        render.err.print(f"[bold red]{BUG_PREFIX}[/] {escape(text)}. LERODOC_DEBUG=1 shows the traceback; please report it "
                         "with the command line.", highlight=False, soft_wrap=True, markup=True)
        sys.exit(int(ExitCode.BUG))
