"""`lerodoc repair`: rebuild what validate finds wrong from what the files really hold."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import render
from lerodoc.errors import ExitCode
from lerodoc.options import DatasetArg, OptionalOutput, Writes, pushes, writes


@pushes
@writes
def repair(
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    drop_broken: Annotated[bool, typer.Option(help="Drop the episodes whose rows or video files are lost, and exit 0. Without it, an episode without rows is "
                  "an error, and episodes whose video files are lost are left out of the output, listed, exit 1.")] = False,
    w: Writes = Writes(),
) -> None:
    """Repair DATASET into -o OUTPUT (or --in-place): metadata rebuilt from the data and video files.

    Totals, data file pointers, episode ranges, video windows (from real packet timestamps), index,
    frame_index and timestamp (frame_index / fps), stats (exact, placeholders dropped, shapes aligned),
    names and codec spellings, list[1] columns and misplaced files are fixed; the result is validated
    and what still needs a human is listed. Exit 1 when errors remain.

    Example: lerodoc repair data/broken -o data/fixed
    """
    from lerodoc.ops.repair import repair as repair_dataset
    report = repair_dataset(dataset, output, drop_broken=drop_broken, **w.to_op())
    code = ExitCode.FINDINGS if any(f["severity"] == "error" for f in report.remaining) else ExitCode.OK
    if w.json:
        render.print_json(report.to_json(), exit_code=code)
    elif w.dry_run:
        render.print_plan(report.plan)
        return
    else:
        for change in report.changes:
            render.out.print(f"fixed: {change}")
        gone = {c: n for c, n in report.before.items() if c not in report.after}
        render.out.print(f"findings before: {sum(report.before.values())}, after: {sum(report.after.values())}"
                         + (f"; gone: {', '.join(sorted(gone))}" if gone else ""))
        for finding in report.remaining:
            render.out.print(f"needs a human: {finding['code']} {finding['message']}")
        render.out.print(f"written to {report.output} ({report.seconds:.2f} s)")
    if code:
        raise typer.Exit(int(code))
