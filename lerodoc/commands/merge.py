"""`lerodoc merge`: datasets into one, with exclusions, renumbering and exact stats."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DryRunOpt, EngineName, EngineOpt, ForceOpt, JsonOpt, OutputOpt,
                             PushOpt, RayAddressOpt, Target, WorkersOpt, pushing, resolve_datasets)
from lerodoc.hub import find_dataset
from lerodoc.selection import format_ranges

SourcesArg = Annotated[list[str], typer.Argument(help="Datasets to merge, in order (called A, B, C, ...): "
                                                  "folders or repo ids.", callback=resolve_datasets)]


def merge(
    sources: SourcesArg,
    output: OutputOpt,
    exclude: Annotated[list[str], typer.Option(help="Leave out episodes: SOURCE:N, SOURCE:N-M, "
                                                    "SOURCE:N,M-K or SOURCE:[N, M] (SOURCE is A, B, ..., the source as "
                                                    "typed, or its folder name). Repeatable.")] = [],
    episodes: Annotated[list[str], typer.Option(help="Keep only these episodes of a source (same syntax); "
                                                     "other sources are kept whole. Repeatable.")] = [],
    to: Annotated[Target, typer.Option("--to", case_sensitive=False, help="Version to write.")] = Target.v30,
    workers: WorkersOpt = DEFAULT_WORKERS,
    engine: EngineOpt = EngineName.pool,
    ray_address: RayAddressOpt = None,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Merge SOURCES into one dataset: rows renumbered, tasks unioned, videos joined by stream copy.

    Inputs may be v2.0, v2.1 or v3.0, mixed. Differences of representation (names nested or flat,
    codec spelled libsvtav1 or av1, list storage, stats shapes) are unified and listed, and camera names are
    written [height, width, channels] as convert writes them; real conflicts (fps, features, shapes, dtypes,
    codecs) stop before anything is written. Dataset stats are recomputed from the merged rows (quantiles exact).
    A single source with --exclude deletes episodes; a source that loses episodes keeps only the tasks its kept
    episodes use.

    Example: lerodoc merge data/day1 data/day2 -o data/both --exclude data/day2:4
    """
    with pushing("merge", push_to_hub, sources, dry_run=dry_run):
        with render.progress(not json and not dry_run) as track:
            from lerodoc.ops.merge import source_selections   # numpy and pyarrow: never on --help
            report = api.merge(sources, output, exclude=source_selections(exclude, sources, "--exclude", find_dataset),
                               episodes=source_selections(episodes, sources, "--episodes", find_dataset),
                               to=to.value, workers=workers, force=force, progress=track, dry_run=dry_run,
                               engine=engine.value, ray_address=ray_address)
        show(report, json, dry_run)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc merge` prints of `report` (an `ops.merge.MergeReport`)."""
    if json:
        render.print_json(report.to_json())
        return
    render.out().print(render.table(
        "sources (in -> out)", ["source", "dataset", "version", "episodes", "frames", "excluded"],
        [[s.label, s.path, s.version, f"{s.episodes_in}->{s.episodes_out}", f"{s.frames_in}->{s.frames_out}",
          _ranges(s.excluded) or "-"] for s in report.sources]))
    for note in report.reconciled:
        render.out().print(f"reconciled: {note}")
    if dry_run:
        render.print_plan(report.plan)
        return
    for clip in report.reencoded_clips:
        render.out().print(f"re-encoded episode {clip['episode']} {clip['camera']}: its start is not a keyframe")
    render.out().print(f"merged {report.episodes} episodes, {report.frames} frames, {report.tasks} tasks into "
                       f"{report.to_version} at {report.output} ({render.human_bytes(report.bytes_copied)}, "
                       f"{report.seconds:.2f} s)")


def _ranges(numbers: list[int]) -> str:
    return format_ranges(numbers)
