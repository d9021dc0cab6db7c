"""`lerodoc convert`: between LeRobot v2.0, v2.1 and v3.0."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, EngineName, EngineOpt, ForceOpt, JsonOpt,
                             OutputOpt, PushOpt, RayAddressOpt, Target, WorkersOpt, pushing)


def convert(
    output: OutputOpt,
    dataset: DatasetArg = None,
    to: Annotated[Target | None, typer.Option("--to", case_sensitive=False, help="Version to write [default: v3.0 "
                                              "for v2.x input, v2.1 for v3.0 input].")] = None,
    workers: WorkersOpt = DEFAULT_WORKERS,
    engine: EngineOpt = EngineName.pool,
    ray_address: RayAddressOpt = None,
    data_file_size_mb: Annotated[float, typer.Option(help="v3.0: start a new data file past this size.",
                                                   rich_help_panel="Output")] = 0,
    video_file_size_mb: Annotated[float, typer.Option(help="v3.0: start a new video file past this size.",
                                                    rich_help_panel="Output")] = 0,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Convert DATASET to another version: rows copied, videos joined or cut by stream copy.

    v2.x -> v3.0 joins episodes into files; v3.0 -> v2.1 splits them into one parquet and one mp4
    per episode (a clip that does not start on a keyframe is re-encoded, and the report says so).
    The output is written beside its final name and appears only after every episode verified.
    What repair would fix in names is fixed on the way (nested names made flat, camera names [height, width,
    channels], a channels-first camera's shape reordered to match), and v3.0 stats the source left without
    q01..q99 get exact ones; a line says each.
    A dataset that already is the --to version is left as it is (exit 0, "unchanged" in --json).

    Example: lerodoc convert data/pusht_v21 -o data/pusht_v30 --to v3.0
    """
    with pushing("convert", push_to_hub, [dataset], dry_run=dry_run):
        with render.progress(not json and not dry_run) as track:
            report = api.convert(dataset, output, to=to.value if to else None, workers=workers, force=force,
                                 data_file_size_mb=data_file_size_mb or None,
                                 video_file_size_mb=video_file_size_mb or None, progress=track,
                                 engine=engine.value, ray_address=ray_address, dry_run=dry_run)
        show(report, json, dry_run)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc convert` prints of `report` (an `ops.convert.ConvertReport`)."""
    if json:
        render.print_json(report.to_json())
        return
    if report.unchanged:
        render.out().print(f"{report.source} is already {report.to_version}: nothing to convert, nothing written")
        return
    if dry_run:
        render.print_plan(report.plan)
        return
    render.out().print(f"converted {report.from_version} -> {report.to_version}: {report.episodes} episodes, "
                       f"{report.frames} frames, {report.data_files} data files, {report.video_files} video files, "
                       f"{render.human_bytes(report.bytes_out)} in {report.seconds:.2f} s -> {report.output}")
    if report.renumbered_episodes:
        render.out().print(f"renumbered episodes to 0..N-1 ({len(report.renumbered_episodes)} moved)")
    for clip in report.reencoded_clips:
        render.out().print(f"re-encoded episode {clip['episode']} {clip['camera']}: its start is not a keyframe")
    for line in report.canonical:
        render.out().print(f"canonical on the way (what repair would fix): {line}", highlight=False)
    for warning in report.warnings:
        render.warning(warning)
