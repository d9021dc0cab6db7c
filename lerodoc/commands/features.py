"""`lerodoc features`: drop or rename features and cameras."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import render
from lerodoc.options import DatasetArg, OptionalOutput, Writes, pushes, writes


@pushes
@writes
def features(
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    drop: Annotated[list[str], typer.Option("--drop", help="A feature or camera to remove (repeatable).")] = [],
    rename: Annotated[list[str], typer.Option("--rename", help="OLD=NEW: a feature or camera to rename "
                                              "(repeatable).")] = [],
    w: Writes = Writes(),
) -> None:
    """Drop or rename features and cameras; info.json, stats, video folders and episodes metadata follow.

    No value changes: columns are checksummed on both sides and video files are kept byte for byte.

    Example: lerodoc features DATASET -o OUT --drop observation.images.wrist --rename action=action.joints
    """
    from lerodoc.ops.features import edit_features
    report = edit_features(dataset, output, drop=drop, rename=rename, **w.to_op())
    if w.json:
        render.print_json({**report.to_json(), "dry_run": w.dry_run})
        return
    rows = ([[n, "dropped", "-"] for n in report.dropped] + [[n, "camera dropped", "-"] for n in report.cameras_dropped]
            + [[o, "renamed", n] for o, n in report.renamed.items()]
            + [[o, "camera renamed", n] for o, n in report.cameras_renamed.items()])
    render.out.print(render.table("features", ["feature", "change", "new name"], rows))
    render.out.print(f"video files renamed: {report.files_moved}, left out: {report.files_left_out}; "
                     + (f"written to {report.output} ({report.seconds:.2f} s)" if report.output
                        else "dry run: nothing written"))
