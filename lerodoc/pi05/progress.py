"""The training progress line on stderr: a bar, the step, the newest logging window's loss, samples/s and data
wait, and the time left."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from lerodoc import render


@contextmanager
def progress_line(enabled: bool, start: int, total: int) -> Iterator[Callable[[int, dict], None]]:
    """Yields tick(step, latest): the bar at `step` of `total`, captioned from `latest` (Metrics.latest, empty
    before the first flush); a tick that does nothing when not `enabled`."""
    if not enabled:
        yield lambda step, latest: None
        return
    with Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeRemainingColumn(), console=render.err()) as bar:
        task = bar.add_task("", total=total, completed=start)

        def tick(step: int, latest: dict) -> None:
            text = (f"loss {latest['loss']:.4f}  {latest['samples_per_s']:.1f} samples/s  data wait "
                    f"{100 * latest['data_wait']:.0f}%" if latest else "")
            bar.update(task, completed=step, description=text)
        yield tick
