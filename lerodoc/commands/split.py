"""`lerodoc split`: parts of a dataset (train/val, ...), each a complete dataset with stats of its own."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, ForceOpt, JsonOpt, OutputOpt, PushOpt,
                             EditVersionOpt, WorkersOpt, pushing)
from lerodoc.selection import format_ranges


def split(
    output: OutputOpt,
    dataset: DatasetArg = None,
    into: Annotated[Optional[str], typer.Option("--into", help="Parts by fraction of the episodes: "
                                                "train=0.9,val=0.1 (in episode order, or shuffled with "
                                                "--seed).")] = None,
    episodes: Annotated[list[str], typer.Option("--episodes", "-e", help="Parts by episode: "
                                                "train:0-99,val:100-119 or train:[0, 2, 5] (repeatable).")] = [],
    seed: Annotated[Optional[int], typer.Option("--seed", help="Shuffle the episodes with this seed before "
                                                "cutting --into fractions.")] = None,
    to: EditVersionOpt = None,
    dry_run: DryRunOpt = False,
    workers: WorkersOpt = DEFAULT_WORKERS,
    force: ForceOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Split DATASET into parts, each a complete dataset at OUTPUT/<part>.

    Rows are renumbered per part, videos cut by stream copy at episode boundaries (a clip that does not
    start on a keyframe is re-encoded and listed), and each part gets exact stats of its own. A part lists
    only the tasks its episodes use, as lerobot's split does.

    Example: lerodoc split DATASET -o OUT --into train=0.9,val=0.1 --seed 0
    """
    from lerodoc.ops.split import parse_fractions, parse_parts   # numpy and pyarrow: never on --help
    with pushing("split", push_to_hub, [dataset], dry_run=dry_run):
        with render.progress(not json and not dry_run) as track:
            report = api.split(dataset, output, fractions=parse_fractions(into) if into is not None else None,
                               episodes=parse_parts(list(episodes)) if episodes else None, seed=seed,
                               to=to.value if to else None, workers=workers, force=force, dry_run=dry_run,
                               progress=track)
        show(report, json, dry_run)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc split` prints of `report` (an `ops.split.SplitReport`)."""
    if json:
        render.print_json({**report.to_json(), "dry_run": dry_run})
        return
    rows = [[name, f"{part['episodes']} ({format_ranges(eps)})", part["frames"], part["tasks"],
             len(part["reencoded_clips"])] for (name, eps), part in zip(report.parts.items(), report.reports.values())]
    render.out().print(render.table(f"parts (each at {report.output}/PART)",
                                  ["part", "episodes (of the source)", "frames", "tasks", "re-encoded"], rows))
    for name, part in report.reports.items():
        for clip in part["reencoded_clips"]:
            render.out().print(f"{name}: re-encoded episode {clip['episode']} {clip['camera']}: its start is not a "
                               "keyframe")
    if report.left_out:
        render.out().print(f"in no part: episodes {format_ranges(report.left_out)}")
    render.out().print("dry run: nothing written" if dry_run else f"written to {report.output} ({report.seconds:.2f} s)")
