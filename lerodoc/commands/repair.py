"""`lerodoc repair`: rebuild what validate finds wrong from what the files really hold."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import api, render
from lerodoc.errors import ExitCode
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, ForceOpt, InPlaceOpt, JsonOpt, OptionalOutput,
                             PushOpt, WorkersOpt, pushing)


def repair(
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    drop_broken: Annotated[bool, typer.Option(help="Drop the episodes whose rows or video files are lost, and exit 0. Without it, an episode without rows is "
                  "an error, and episodes whose video files are lost are left out of the output, listed, exit 1.")] = False,
    in_place: InPlaceOpt = False,
    dry_run: DryRunOpt = False,
    workers: WorkersOpt = DEFAULT_WORKERS,
    force: ForceOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Repair DATASET into -o OUTPUT (or --in-place): metadata rebuilt from the data and video files.

    Totals, data file pointers, episode ranges, video windows (from real packet timestamps), index,
    frame_index and timestamp (frame_index / fps), stats (exact, placeholders dropped, shapes aligned),
    names and codec spellings, list[1] columns and misplaced files are fixed; the result is validated
    and what still needs a human is listed. Exit 1 when errors remain.

    Example: lerodoc repair data/broken -o data/fixed
    """
    with pushing("repair", push_to_hub, [dataset], dry_run=dry_run):
        report = api.repair(dataset, output, in_place=in_place, drop_broken=drop_broken, workers=workers, force=force,
                            dry_run=dry_run)
        show(report, json, dry_run)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc repair` prints of `report` (an `ops.repair.RepairReport`); exit 1 when errors remain."""
    code = ExitCode.FINDINGS if any(f["severity"] == "error" for f in report.remaining) else ExitCode.OK
    if json:
        render.print_json(report.to_json(), exit_code=code)
    elif dry_run:
        render.print_plan(report.plan)
        return
    else:
        for change in report.changes:
            render.out().print(f"fixed: {change}")
        gone = {c: n for c, n in report.before.items() if c not in report.after}
        render.out().print(f"findings before: {sum(report.before.values())}, after: {sum(report.after.values())}"
                           + (f"; gone: {', '.join(sorted(gone))}" if gone else ""))
        for finding in report.remaining:
            render.out().print(f"needs a human: {finding['code']} {finding['message']}")
        for skipped in report.skipped:
            render.out().print(f"{skipped['of']} checked without: {skipped['checks']}, as {skipped['why']}"
                               + (f"; {skipped['run_with']} runs them" if skipped["run_with"] else ""))
        render.out().print(f"written to {report.output} ({report.seconds:.2f} s)")
    if code:
        raise typer.Exit(int(code))
