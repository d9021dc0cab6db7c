"""Validation checks, one module per family; each family is a function `check(ctx) -> list[Finding]`.

A family reads what it needs through the `Context` (the opened dataset, or why it could not be
opened; options such as --videos); it never raises for a data problem, it returns findings.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable

from lerodoc import access
from lerodoc.checks.common import Context, Finding
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError

FAMILIES = ("layout", "indices", "timestamps", "videos", "stats", "tasks")
Family = Callable[[Context], list[Finding]]


def family(name: str) -> Family:
    return importlib.import_module(f"lerodoc.checks.{name}").check


def open_context(root: Path, dataset: Dataset | None = None, **options) -> Context:
    """Open the dataset for checking (or use `dataset`, `root` already opened); a dataset that cannot be opened
    still gets a context."""
    if dataset is not None:
        return Context(access.path(root), dataset, **options)
    try:
        return Context(access.path(root), Dataset.open(root), **options)
    except LerodocError as exc:
        return Context(access.path(root), None, open_error=exc, **options)


def run_checks(ctx: Context, families: tuple[str, ...] = FAMILIES) -> list[Finding]:
    """Every family's findings, in family order."""
    findings: list[Finding] = []
    for name in families:   # the videos family opens files only with ctx.videos (else: windows from metadata)
        findings.extend(family(name)(ctx))
    return findings
