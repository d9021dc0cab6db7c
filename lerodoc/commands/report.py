"""`lerodoc report`: a dataset you can look at, as one HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lerodoc import api, render
from lerodoc.conventions import TOLERANCE_S
from lerodoc.options import DEFAULT_WORKERS, DatasetArg, ForceOpt, JsonOpt, WorkersOpt, working_in
from lerodoc.selection import parse


def report(
    dataset: DatasetArg = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="The HTML file to write (outside the "
                                                   "dataset).", show_default="report.html here; beside the dataset "
                                                   "(NAME-report.html) when here is inside it",
                                                   rich_help_panel="Output")] = None,
    force: ForceOpt = False,
    videos: Annotated[bool, typer.Option("--videos", help="Check the video containers and decode the first, middle "
                                         "and last frame of each sampled episode per camera.")] = False,
    episodes: Annotated[list[str], typer.Option("--episodes", "-e", help="Episodes whose time series and frames "
                                                "to show: N, N-M, N,M-K or a JSON list [N, M] (repeatable).",
                                                show_default="--sample of them")] = [],
    sample: Annotated[int, typer.Option("--sample", "-n", min=1, help="Without --episodes: how many episodes to "
                                        "show, spread evenly (first and last included).")] = 3,
    tolerance_s: Annotated[float, typer.Option(help="Timestamp tolerance, as lerobot's tolerance_s: a frame "
                                               "caption turns red beyond it.")] = TOLERANCE_S,
    workers: WorkersOpt = DEFAULT_WORKERS,
    json: JsonOpt = False,
) -> None:
    """Write one self-contained HTML report (images embedded, no script, no network) of DATASET.

    Summary: version, fps, episodes, frames, duration, size, cameras (codec, size, GOP), tasks with
    their episode counts, and the verdict of `lerodoc validate` (with --videos, its video checks too)
    grouped by family, each finding with its code, location and fix.

    Channels: every state/action channel (names from info.json) with min, q01, q50, q99, max and std,
    exact over all frames, flagged near-constant, extreme or NaN; a histogram per channel (flagged ones
    in red) and a `lerodoc select` command that keeps the trainable channels.

    Episodes: the distribution of lengths; state and action against time for the --episodes chosen
    (or --sample episodes spread evenly); with --videos, their first, middle and last frame per camera,
    each captioned with the row's timestamp and the decoded frame's PTS (red when they disagree beyond
    --tolerance-s).

    Tasks: episodes per task and every per-frame task change inside an episode.

    Only the columns and frames shown are read. Exit 0 when the report is written (whatever it finds),
    3 when the dataset cannot be read.

    Example: lerodoc report ./my_dataset -o report.html --videos --episodes 0-2,7
    """
    chosen = parse(episodes, "--episodes") if episodes else None
    output = output or default_output(dataset)
    with render.progress(not json) as track:
        result = api.report(dataset, output, videos=videos, episodes=chosen, sample=sample, workers=workers,
                            tolerance_s=tolerance_s, progress=track, force=force)
    if json:
        render.print_json(result.to_json())
        return
    flagged = sum(bool(r["flags"]) for r in result.channels)
    late = sum(t["mismatch"] for t in result.thumbnails)
    render.out().print(f"{result.validate['errors']} errors, {result.validate['warnings']} warnings; "
                       f"{flagged} of {len(result.channels)} channels flagged"
                       + (f"; {late} of {len(result.thumbnails)} frames off their row's time"
                          if result.thumbnails else "")
                       + f" ({result.seconds:.2f} s)")
    render.out().print(f"report written to {result.output}")


def default_output(dataset: Path) -> Path:
    """report.html in the current folder, or NAME-report.html beside the dataset when the current folder is inside
    it (a report is never written into its dataset)."""
    root = Path(dataset).resolve()
    return root.parent / f"{root.name}-report.html" if working_in(root) else Path("report.html")
