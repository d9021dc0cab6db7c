"""`lerodoc delete`: leave episodes out (the engine of `merge --exclude`)."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, ForceOpt, InPlaceOpt, JsonOpt, OptionalOutput,
                             PushOpt, WorkersOpt, pushing, EditVersionOpt)
from lerodoc.selection import format_ranges, parse


def delete(
    episodes: Annotated[list[str], typer.Option("--episodes", "-e", help="Episodes to delete: N, N-M, N,M-K or "
                                                "a JSON list [N, M] (repeatable).")],
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    to: EditVersionOpt = None,
    in_place: InPlaceOpt = False,
    dry_run: DryRunOpt = False,
    workers: WorkersOpt = DEFAULT_WORKERS,
    force: ForceOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Delete episodes: the rest are renumbered 0..N-1, videos reused or cut by stream copy, stats recomputed.

    The output is v3.0 (a v2.x dataset is converted on the way) unless --to says v2.1. Episodes whose video
    does not start on a keyframe are re-encoded and listed.

    Example: lerodoc delete DATASET -o OUT --episodes 3,7-9
    """
    with pushing("delete", push_to_hub, [dataset], dry_run=dry_run):
        selection = parse(episodes, "--episodes")
        with render.progress(not json and not dry_run) as track:
            report = api.delete(dataset, selection, output, to=to.value if to else None, in_place=in_place,
                                workers=workers, force=force, dry_run=dry_run, progress=track)
        show(report, json, dry_run)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc delete` prints of `report` (an `ops.merge.MergeReport` of one source)."""
    if json:
        render.print_json({"dataset": report.sources[0].path, **report.to_json(), "dry_run": dry_run})
        return
    source = report.sources[0]
    for clip in report.reencoded_clips:
        render.out().print(f"re-encoded episode {clip['episode']} {clip['camera']}: its start is not a keyframe")
    verb = "would delete" if dry_run else "deleted"
    render.out().print(f"{verb} episodes {format_ranges(source.excluded)} of {source.path}: {report.episodes} episodes, "
                       f"{report.frames} frames, {report.tasks} tasks remain ({report.to_version})"
                       + ("; dry run, nothing written" if dry_run else
                          f" at {report.output} ({render.human_bytes(report.bytes_copied)}, {report.seconds:.2f} s)"))
