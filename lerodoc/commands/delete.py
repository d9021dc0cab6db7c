"""`lerodoc delete`: leave episodes out (the engine of `merge --exclude`)."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import render
from lerodoc.options import DatasetArg, OptionalOutput, SameVersionOpt, Writes, pushes, writes


@pushes
@writes
def delete(
    episodes: Annotated[list[str], typer.Option("--episodes", "-e", help="Episodes to delete: N, N-M, N,M-K or "
                                                "a JSON list [N, M] (repeatable).")],
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    to: SameVersionOpt = None,
    w: Writes = Writes(),
) -> None:
    """Delete episodes: the rest are renumbered 0..N-1, videos reused or cut by stream copy, stats recomputed.

    The output keeps the dataset's version (v2.0 becomes v2.1). Episodes whose video does not start on
    a keyframe are re-encoded and listed.

    Example: lerodoc delete DATASET -o OUT --episodes 3,7-9
    """
    from lerodoc.ops.delete import delete as delete_episodes
    from lerodoc.selection import format_ranges, parse
    selection = parse(episodes, "--episodes")
    with render.progress(not w.json and not w.dry_run) as track:
        report = delete_episodes(dataset, output, selection, to=to.value if to else None, progress=track,
                                 **w.to_op())
    if w.json:
        render.print_json({"dataset": report.sources[0].path, **report.to_json(), "dry_run": w.dry_run})
        return
    source = report.sources[0]
    for clip in report.reencoded_clips:
        render.out.print(f"re-encoded episode {clip['episode']} {clip['camera']}: its start is not a keyframe")
    verb = "would delete" if w.dry_run else "deleted"
    render.out.print(f"{verb} episodes {format_ranges(source.excluded)} of {source.path}: {report.episodes} episodes, "
                     f"{report.frames} frames, {report.tasks} tasks remain ({report.to_version})"
                     + ("; dry run, nothing written" if w.dry_run else
                        f" at {report.output} ({render.human_bytes(report.bytes_copied)}, {report.seconds:.2f} s)"))
