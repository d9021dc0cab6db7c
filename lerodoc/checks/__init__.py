"""Validation checks, one module per family; each family is a function `check(ctx) -> list[Finding]`.

A family reads what it needs through the `Context` (the opened dataset, or why it could not be
opened; options such as --videos); it never raises for a data problem, it returns findings.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError

FAMILIES = ("layout", "indices", "timestamps", "videos", "stats", "tasks")
ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class Finding:
    """One defect: a stable `code` (e.g. "IDX003"), where it is, what is wrong and how to fix it."""
    code: str
    severity: str                 # "error" or "warning"
    message: str
    file: str | None = None       # relative to the dataset root
    episode: int | None = None
    feature: str | None = None
    channel: int | None = None
    hint: str | None = None
    fixable: bool = False         # `lerodoc repair` fixes it

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Context:
    """What the checks work on. `dataset` is None when the metadata could not be read at all."""
    root: Path
    dataset: Dataset | None
    open_error: LerodocError | None = None
    videos: bool = False          # --videos: container-level video checks
    deep: bool = False            # --deep: decode the first and last frame of each episode span
    tolerance_s: float = 1e-4
    cache: dict = field(default_factory=dict)   # families share parsed files here


Family = Callable[[Context], list[Finding]]


def family(name: str) -> Family:
    return importlib.import_module(f"lerodoc.checks.{name}").check


def open_context(root: Path, **options) -> Context:
    """Open the dataset for checking; a dataset that cannot be opened still gets a context."""
    try:
        return Context(Path(root), Dataset.open(root), **options)
    except LerodocError as exc:
        return Context(Path(root), None, open_error=exc, **options)


def run_checks(ctx: Context, families: tuple[str, ...] = FAMILIES) -> list[Finding]:
    """Every family's findings, in family order."""
    findings: list[Finding] = []
    for name in families:
        if name == "videos" and not ctx.videos:
            continue
        findings.extend(family(name)(ctx))
    return findings
