"""`lerodoc tasks`: edit task strings; frames keep their task_index or follow a merge of two texts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, ForceOpt, InPlaceOpt, JsonOpt, OptionalOutput,
                             PushOpt, WorkersOpt, pushing)


def tasks(
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    changes: Annotated[list[str], typer.Option("--set", help="'OLD TEXT=NEW TEXT' (repeatable).")] = [],
    from_file: Annotated[Optional[Path], typer.Option("--from", exists=True, dir_okay=False,
                                                      help='A JSON file: {"old text": "new text", ...} or a list '
                                                           "of texts by task_index.")] = None,
    in_place: InPlaceOpt = False,
    dry_run: DryRunOpt = False,
    workers: WorkersOpt = DEFAULT_WORKERS,
    force: ForceOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Edit task strings: the tasks file, every episode's tasks and the frames' task_index follow.

    Frames keep their
    task_index unless two texts become one; then the later one's frames are re-pointed to the first.

    Example: lerodoc tasks DATASET -o OUT --set 'pick up the cube=pick the red cube'
    """
    with pushing("tasks", push_to_hub, [dataset], dry_run=dry_run):
        report = api.tasks(dataset, output, changes=changes, from_file=from_file, in_place=in_place, workers=workers,
                           force=force, dry_run=dry_run)
        show(report, json, dry_run)


SHOWN = 40   # tasks listed whole up to this many; past it, only the edited ones (an instruction an episode: 10^5)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc tasks` prints of `report` (an `ops.tasks.TasksReport`): the task list, or past SHOWN tasks the
    edited ones and how many others are left as they were."""
    if json:
        render.print_json({**report.to_json(), "dry_run": dry_run})
        return
    was: dict[str, list[str]] = {}   # new text -> the old texts renamed to it, each looked up once
    for old, new in report.renamed.items():
        was.setdefault(new, []).append(old)
    rows = [[i, t, " | ".join(was[t]) if t in was else "-"] for i, t in enumerate(report.tasks)
            if len(report.tasks) <= SHOWN or t in was]
    render.out().print(render.table("tasks", ["task_index", "task", "was"], rows))
    if len(rows) < len(report.tasks):
        render.out().print(f"{len(report.tasks) - len(rows)} other tasks as they were (--json lists every task)")
    for new, olds in report.merged.items():
        render.out().print(f"merged into {new!r}: {', '.join(repr(o) for o in olds)}")
    render.out().print(f"{len(report.episodes_changed)} episodes name an edited task; "
                       + (f"written to {report.output} ({report.seconds:.2f} s)" if report.output
                          else "dry run: nothing written"))
