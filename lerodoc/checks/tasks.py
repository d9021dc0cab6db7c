"""Tasks: every task_index in the data names a task, task texts are unique and non-empty, and the
tasks the episodes metadata lists exist (lerobot looks a row's task up by position: tasks[task_index])."""

from __future__ import annotations

from collections import Counter

import numpy as np

from lerodoc.checks.common import (ERROR, WARNING, Context, Finding, data_files, episode_meta_files, finding_factory,
                                   flat_column)
from lerodoc.checks.indices import placement
from lerodoc.formats import v21, v30

CODES = {
    "TSK001": (ERROR, "a task_index in the data does not resolve to a task",
               "add the task to the tasks file, or fix the rows' task_index", False),
    "TSK002": (ERROR, "the same task text appears under several task_index values",
               "keep one task_index per text and renumber the rows", False),
    "TSK003": (ERROR, "the episodes metadata lists a task that is not in the tasks file",
               "add the task to the tasks file, or fix the episode's tasks", False),
    "TSK004": (WARNING, "a task text is empty", "give the task a description (pi0.5 prompts with it)", False),
    "TSK005": (WARNING, "an episode's rows use a task its metadata does not list",
               "list the task in the episode's tasks", False),
}
_finding = finding_factory(CODES)


def check(ctx: Context) -> list[Finding]:
    ds = ctx.dataset
    if ds is None:
        return []
    return [*_task_table(ctx), *_metadata_tasks(ctx), *_data_tasks(ctx)]


def _tasks_file(ctx: Context) -> str:
    return v30.TASKS_PATH if ctx.dataset.version == "v3.0" else v21.TASKS_PATH


def _task_table(ctx: Context) -> list[Finding]:
    tasks, out, file = ctx.dataset.tasks, [], _tasks_file(ctx)
    for text, count in Counter(tasks).items():
        if count > 1:
            indices = [i for i, t in enumerate(tasks) if t == text]
            out.append(_finding("TSK002", f"task {text!r} appears {count} times, as task_index {indices}",
                                file=file))
    for index, text in enumerate(tasks):
        if not str(text).strip():
            out.append(_finding("TSK004", f"task_index {index} has the empty text {text!r}", file=file))
    return out


def _metadata_tasks(ctx: Context) -> list[Finding]:
    known, out = set(ctx.dataset.tasks), []
    files = episode_meta_files(ctx)
    for position, ep in enumerate(ctx.dataset.episodes):
        for text in ep.tasks:
            if text not in known:
                out.append(_finding("TSK003", f"episode {ep.index} lists task {text!r}, which "
                                              f"{_tasks_file(ctx)} does not have", file=files[position],
                                    episode=ep.index))
    return out


def _data_tasks(ctx: Context) -> list[Finding]:
    """Per episode run: task_index values resolve, and name tasks the episode lists."""
    ds, files, out = ctx.dataset, data_files(ctx), []
    listed = {ep.index: set(ep.tasks) for ep in ds.episodes}
    for run in placement(ctx).runs:
        values = flat_column(files[run.file].columns, "task_index")
        if values is None:
            continue   # layout reports a missing or mistyped column
        values = values[run.start:run.stop]
        loc = dict(file=run.file, episode=run.episode)
        finite = np.isfinite(values) if values.dtype.kind == "f" else np.ones(len(values), bool)
        used = np.unique(values[finite])
        bad = [v for v in used if not (0 <= v < len(ds.tasks)) or v != int(v)]
        if bad or not finite.all():
            shown = ", ".join(f"{v:g}" for v in bad[:5]) + (", null" if not finite.all() else "")
            rows = int(np.count_nonzero(~finite) + np.isin(values[finite], bad).sum())
            out.append(_finding("TSK001", f"episode {run.episode}: {rows} rows have task_index {shown}, but "
                                          f"{_tasks_file(ctx)} holds task_index 0..{len(ds.tasks) - 1}", **loc))
        for value in used:
            if value in bad or run.episode not in listed or not listed[run.episode]:
                continue
            text = ds.tasks[int(value)]
            if text not in listed[run.episode]:
                out.append(_finding("TSK005", f"episode {run.episode}: rows use task_index {int(value)} "
                                              f"({text!r}), not among its listed tasks "
                                              f"{sorted(listed[run.episode])}", **loc))
    return out
