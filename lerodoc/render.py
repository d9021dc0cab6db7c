"""All terminal output: rich tables and progress on stderr, JSON on stdout."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

err = Console(stderr=True)
out = Console()


def print_json(payload) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")


def table(title: str, columns: list[str], rows: list[list]) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    for name in columns:
        t.add_column(name, overflow="fold")
    for row in rows:
        t.add_row(*["" if v is None else str(v) for v in row])
    return t


@contextmanager
def progress(enabled: bool = True):
    """Yield `track(label, total) -> tick(n)`; a live bar on stderr while the block runs."""
    if not enabled:
        yield None
        return
    bar = Progress(TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=err, transient=True)

    def track(label: str, total: int) -> Callable[[int], None]:
        task = bar.add_task(label, total=total)
        return lambda n=1: bar.advance(task, n)

    with bar:
        yield track


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def print_plan(plan: dict) -> None:
    """A writing command's --dry-run: the files its plan writes (`plan["files"]`: file, action, episodes) and
    what it changes, on stdout; nothing is written."""
    rows = []
    for f in plan.get("files", []):
        eps = f.get("episodes") or []
        shown = "" if not eps else str(eps[0]) if len(eps) == 1 else f"{len(eps)} ({eps[0]}..{eps[-1]})"
        rows.append([f["file"], f["action"], shown, ", ".join(map(str, f.get("reencode") or []))])
    out.print(table("plan: files", ["file", "action", "episodes", "re-encoded"], rows))
    for line in plan.get("changes", []):
        out.print(f"plan: {line}")
    out.print("dry run: nothing written")
