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
from lerodoc.formats.model import StatsUnreadable, forget_stats

FAMILIES = ("layout", "indices", "timestamps", "videos", "stats", "tasks")
Family = Callable[[Context], list[Finding]]
# The data files' bookkeeping columns (`common.data_files`) and the context caches made from them that each family
# reads; `run_checks` lets go of each once no later family reads it (a column is 40-80 MB at a million episodes).
READS = {"layout": (), "indices": ("placement", "frame_index", "index"),
         "timestamps": ("timestamp", "frame_index", "episode_index", "timestamps.rows"),
         "videos": ("timestamps.rows",), "stats": ("placement",), "tasks": ("placement", "task_index")}
MADE_FROM = {"placement": ("episode_index",), "timestamps.rows": ("timestamp", "frame_index", "episode_index")}


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
    """Every family's findings, in family order. A table of per-episode stats that cannot be read
    (`StatsUnreadable`, met by whichever family reads it first) is a finding of its own (STA003, after the rest),
    and the families run again with its episodes holding no stats (`forget_stats`: the dataset's own episodes)."""
    lost: list[Finding] = []
    while True:
        try:
            return _run(ctx, families) + lost
        except StatsUnreadable as exc:
            if ctx.dataset is None or not forget_stats(ctx.dataset.episodes, exc.file):
                raise
            lost.append(importlib.import_module("lerodoc.checks.stats").unreadable(ctx, exc))


def _run(ctx: Context, families: tuple[str, ...]) -> list[Finding]:
    findings: list[Finding] = []
    # the videos family opens files only with ctx.videos (else: windows from metadata)
    for k, name in enumerate(families):
        findings.extend(family(name)(ctx))
        _let_go(ctx, {read for later in families[k + 1:] for read in READS.get(later, ())})
    return findings


def _let_go(ctx: Context, needed: set[str]) -> None:
    """Drop the bookkeeping columns and caches that no family still to run reads (`READS`); a cache still to be
    made keeps the columns it is made from (`MADE_FROM`)."""
    for cache, columns in MADE_FROM.items():
        if cache not in needed:
            ctx.cache.pop(cache, None)
        elif cache not in ctx.cache:
            needed = needed | set(columns)
    for data in ctx.cache.get("data_files", {}).values():
        data.keep(needed)
