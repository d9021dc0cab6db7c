"""`lerodoc flatten`: list columns to scalars and fixed-size lists, so that every reader casts them."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, ForceOpt, InPlaceOpt, JsonOpt, OptionalOutput,
                             WorkersOpt)



def flatten(
    dataset: DatasetArg,
    output: OptionalOutput = None,
    in_place: InPlaceOpt = False,
    columns: Annotated[list[str], typer.Option("--columns", "-c", help="Only these columns (repeatable); default: "
                                               "every variable-length list column.")] = [],
    workers: WorkersOpt = DEFAULT_WORKERS,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
    json: JsonOpt = False,
) -> None:
    """Turn list<T> of length 1 into T and lists of one constant length into fixed-size lists.

    info.json shapes and dtypes and the parquet `datasets` metadata are rewritten to match (readable by
    `datasets` before and after 4.0); stats of the flattened columns are recomputed. A ragged column is
    an error naming the column and the episode.

    Example: lerodoc flatten data/g1 -o data/g1_flat
    """
    from lerodoc.ops.flatten import flatten as flatten_dataset
    report = flatten_dataset(dataset, output, in_place=in_place, columns=columns or None, workers=workers,
                             force=force, dry_run=dry_run)
    if json:
        render.print_json(report.to_json())
        return
    render.out.print(render.table("flattened", ["column", "was", "now", "shape"],
                                  [[n, c["from"], c["to"], tuple(c["shape"])] for n, c in report.columns.items()]))
    if dry_run:
        render.print_plan(report.plan)
    else:
        render.out.print(f"written to {report.output} ({report.seconds:.2f} s)")
