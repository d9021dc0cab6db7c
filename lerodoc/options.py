"""Annotated parameter types shared by many commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lerodoc.parallel import default_workers

DatasetArg = Annotated[Path, typer.Argument(help="Dataset root (the folder holding meta/).",
                                            exists=True, file_okay=False, dir_okay=True)]
OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Where to write the new dataset (must not exist).",
                                         rich_help_panel="Output")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace the output if it exists.",
                                        rich_help_panel="Output")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON report on stdout instead of tables.",
                                       rich_help_panel="Output")]
InPlaceOpt = Annotated[bool, typer.Option("--in-place", help="Rewrite the dataset itself (a new tree is built "
                                          "beside it and swapped in).", rich_help_panel="Output")]
WorkersOpt = Annotated[int, typer.Option("--workers", "-j", min=1, help="Processes to use.",
                                         rich_help_panel="Performance")]
DEFAULT_WORKERS = default_workers()
