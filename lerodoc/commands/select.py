"""`lerodoc select`: observation.state and action from the channels that matter."""

from __future__ import annotations

from typing import Annotated

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, ForceOpt, InPlaceOpt, JsonOpt, OptionalOutput,
                             PushOpt, WorkersOpt, pushing)

SpecOpt = "SPEC: feature, feature[28:42], feature[3,5], feature[name,glob*]; repeat to concatenate."


def select(
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    state: Annotated[list[str], typer.Option("--state", help=f"Channels of observation.state. {SpecOpt}")] = [],
    action: Annotated[list[str], typer.Option("--action", help=f"Channels of action. {SpecOpt}")] = [],
    keep_source: Annotated[bool, typer.Option(help="Keep the features the channels came from.")] = False,
    in_place: InPlaceOpt = False,
    dry_run: DryRunOpt = False,
    workers: WorkersOpt = DEFAULT_WORKERS,
    force: ForceOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Build observation.state and action by concatenating slices of existing features.

    Names, shapes and stats (per episode and dataset, with exact quantiles) follow the selected
    channels; source features are dropped unless --keep-source. Per-frame values equal the source slices.

    Example: lerodoc select DATASET -o OUT --state 'observation.state[28:42]' --state 'observation.state[100:102]'
    """
    with pushing("select", push_to_hub, [dataset], dry_run=dry_run):
        report = api.select(dataset, output, state=state, action=action, keep_source=keep_source, in_place=in_place,
                            workers=workers, force=force, dry_run=dry_run)
        show(report, json, dry_run)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc select` prints of `report` (an `ops.select.SelectReport`)."""
    if json:
        render.print_json(report.to_json())
        return
    render.out().print(render.table(
        "selected channels", ["target", "ch", "name", "from", "q01", "q99", "flags"],
        [[c["target"], c["channel"], c["name"], f"{c['source']}[{c['source_channel']}]", f"{c['q01']:.6g}",
          f"{c['q99']:.6g}", ", ".join(c["flags"])] for c in report.channels]))
    for warning in report.warnings:
        render.warning(warning)
    if report.dropped:
        render.out().print(f"dropped source features: {', '.join(report.dropped)}")
    if dry_run:
        render.print_plan(report.plan)
    else:
        render.out().print(f"written to {report.output} ({report.seconds:.2f} s)")
