"""`lerodoc flatten`: list columns to scalars and fixed-size lists, so that every reader casts them."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, ForceOpt, InPlaceOpt, JsonOpt, OptionalOutput,
                             PushOpt, WorkersOpt, pushing)


def flatten(
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    columns: Annotated[list[str], typer.Option("--columns", "-c", help="Only these columns (repeatable); default: "
                                               "every variable-length list column.")] = [],
    in_place: InPlaceOpt = False,
    dry_run: DryRunOpt = False,
    workers: WorkersOpt = DEFAULT_WORKERS,
    force: ForceOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Turn list<T> of length 1 into T and lists of one constant length into fixed-size lists.

    info.json shapes and dtypes and the parquet `datasets` metadata are rewritten to match (readable by
    `datasets` before and after 4.0); stats of the flattened columns are recomputed. A ragged column is
    an error naming the column and the episode.

    Example: lerodoc flatten data/g1 -o data/g1_flat
    """
    with pushing("flatten", push_to_hub, [dataset], dry_run=dry_run):
        report = api.flatten(dataset, output, columns=columns or None, in_place=in_place, workers=workers,
                             force=force, dry_run=dry_run)
        show(report, json, dry_run)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc flatten` prints of `report` (an `ops.flatten.FlattenReport`)."""
    if json:
        render.print_json(report.to_json())
        return
    if report.unchanged:
        render.out().print(f"nothing to flatten: {report.dataset} has no list column; nothing written")
        return
    render.out().print(render.table("flattened", ["column", "was", "now", "shape"],
                                  [[n, c["from"], c["to"], tuple(c["shape"])] for n, c in report.columns.items()]))
    if dry_run:
        render.print_plan(report.plan)
    else:
        render.out().print(f"written to {report.output} ({report.seconds:.2f} s)")
