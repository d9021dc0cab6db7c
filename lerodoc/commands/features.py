"""`lerodoc features`: drop or rename features and cameras."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, ForceOpt, InPlaceOpt, JsonOpt, OptionalOutput,
                             PushOpt, WorkersOpt, pushing)


def features(
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    drop: Annotated[list[str], typer.Option("--drop", help="A feature or camera to remove (repeatable).")] = [],
    rename: Annotated[list[str], typer.Option("--rename", help="OLD=NEW: a feature or camera to rename "
                                              "(repeatable).")] = [],
    in_place: InPlaceOpt = False,
    dry_run: DryRunOpt = False,
    workers: WorkersOpt = DEFAULT_WORKERS,
    force: ForceOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Drop or rename features and cameras; info.json, stats, video folders and episodes metadata follow.

    No value changes: columns are checksummed on both sides and video files are kept byte for byte.

    Example: lerodoc features DATASET -o OUT --drop observation.images.wrist --rename action=action.joints
    """
    with pushing("features", push_to_hub, [dataset], dry_run=dry_run):
        report = api.features(dataset, output, drop=drop, rename=rename, in_place=in_place, workers=workers,
                              force=force, dry_run=dry_run)
        show(report, json, dry_run)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc features` prints of `report` (an `ops.features.FeaturesReport`)."""
    if json:
        render.print_json({**report.to_json(), "dry_run": dry_run})
        return
    rows = ([[n, "dropped", "-"] for n in report.dropped] + [[n, "camera dropped", "-"] for n in report.cameras_dropped]
            + [[o, "renamed", n] for o, n in report.renamed.items()]
            + [[o, "camera renamed", n] for o, n in report.cameras_renamed.items()])
    render.out().print(render.table("features", ["feature", "change", "new name"], rows))
    render.out().print(f"video files renamed: {report.files_moved}, left out: {report.files_left_out}; "
                       + (f"written to {report.output} ({report.seconds:.2f} s)" if report.output
                          else "dry run: nothing written"))
