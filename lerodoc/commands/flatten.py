"""`lerodoc flatten`: list columns to scalars and fixed-size lists, so that every reader casts them."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import render
from lerodoc.options import DatasetArg, OptionalOutput, Writes, pushes, writes



@pushes
@writes
def flatten(
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    columns: Annotated[list[str], typer.Option("--columns", "-c", help="Only these columns (repeatable); default: "
                                               "every variable-length list column.")] = [],
    w: Writes = Writes(),
) -> None:
    """Turn list<T> of length 1 into T and lists of one constant length into fixed-size lists.

    info.json shapes and dtypes and the parquet `datasets` metadata are rewritten to match (readable by
    `datasets` before and after 4.0); stats of the flattened columns are recomputed. A ragged column is
    an error naming the column and the episode.

    Example: lerodoc flatten data/g1 -o data/g1_flat
    """
    from lerodoc.ops.flatten import flatten as flatten_dataset
    report = flatten_dataset(dataset, output, columns=columns or None, **w.to_op())
    if w.json:
        render.print_json(report.to_json())
        return
    if report.unchanged:
        render.out.print(f"nothing to flatten: {report.dataset} has no list column; nothing written")
        return
    render.out.print(render.table("flattened", ["column", "was", "now", "shape"],
                                  [[n, c["from"], c["to"], tuple(c["shape"])] for n, c in report.columns.items()]))
    if w.dry_run:
        render.print_plan(report.plan)
    else:
        render.out.print(f"written to {report.output} ({report.seconds:.2f} s)")
