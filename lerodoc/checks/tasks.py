"""Tasks: every task_index in the data names a task, task texts are unique and non-empty, and the
tasks the episodes metadata lists exist (lerobot looks a row's task up by position: tasks[task_index])."""

from __future__ import annotations

from collections import Counter
from itertools import chain

import numpy as np

from lerodoc.checks.common import ERROR, WARNING, Context, Finding, episode_meta_files, finding_factory
from lerodoc.checks.indices import ROW_CHUNK, placed_column, placement, run_of_rows
from lerodoc.formats import v21, v30
from lerodoc.tables.stats import distinct

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
    known = set(ctx.dataset.tasks)
    if set(chain.from_iterable(ep.tasks for ep in ctx.dataset.episodes)) <= known:
        return []
    out, files = [], episode_meta_files(ctx)
    for position, ep in enumerate(ctx.dataset.episodes):   # only when some episode lists an unknown task
        for text in ep.tasks:
            if text not in known:
                out.append(_finding("TSK003", f"episode {ep.index} lists task {text!r}, which "
                                              f"{_tasks_file(ctx)} does not have", file=files[position],
                                    episode=ep.index))
    return out


def _resolves(values: np.ndarray, ntasks: int) -> np.ndarray:
    """Per value: whether it is the task_index of one of `ntasks` tasks (finite, whole, in range)."""
    inside = (values >= 0) & (values < ntasks)
    return inside & np.isfinite(values) & (values == np.round(values)) if values.dtype.kind == "f" else inside


def _data_tasks(ctx: Context) -> list[Finding]:
    """Per episode run: task_index values resolve, and name tasks the episode lists. Whole columns, ROW_CHUNK rows at
    a time (a million episodes' rows at once made 230 MB of temporaries): per row whether its value resolves, per run
    how many do not, per (run, task_index) pair whether the episode lists the task; the runs a finding names are then
    told one by one."""
    ds, where = ctx.dataset, placement(ctx)
    runs, ntasks = len(where.episode), len(ds.tasks)
    if not runs:
        return []
    values, has = placed_column(ctx, "task_index")
    width = max(ntasks, 1)
    unresolved, used = np.zeros(runs, np.int64), [np.zeros(0, np.int64)]
    for start in range(0, where.rows, ROW_CHUNK):
        stop = min(start + ROW_CHUNK, where.rows)
        own, held, run = values[start:stop], has[start:stop], run_of_rows(where, start, stop)
        resolves = _resolves(own, ntasks)
        unresolved += np.bincount(run[held & ~resolves], minlength=runs)
        good = held & resolves
        used.append(distinct(run[good] * width + own[good].astype(np.int64)))
    # (run, task_index) pairs in use, and whether the run's episode lists the task's text
    pairs = distinct(np.concatenate(used))
    pair_run, pair_task = pairs // width, pairs % width
    listed = {ep.index: ep.tasks for ep in ds.episodes}
    listing = np.array(sorted(e for e, texts in listed.items() if texts), np.int64)
    by_text: dict[str, list[int]] = {}
    for index, text in enumerate(ds.tasks):
        by_text.setdefault(text, []).append(index)
    allowed = np.array([at * width + i for at, e in enumerate(listing.tolist()) for text in set(listed[e])
                        for i in by_text.get(text, [])], np.int64)
    episode = where.episode[pair_run]
    at = np.clip(np.searchsorted(listing, episode), 0, max(len(listing) - 1, 0))
    lists = (listing[at] == episode) if len(listing) else np.zeros(len(pairs), bool)
    unlisted = lists & ~np.isin(at * width + pair_task, allowed)
    out = []
    named = np.zeros(runs, bool)
    named[pair_run[unlisted]] = True
    for r in np.flatnonzero((unresolved > 0) | named).tolist():
        run = where.runs[r]
        loc = dict(file=run.file, episode=run.episode)
        if unresolved[r]:
            own = values[where.global_start[r]:where.global_stop[r]]
            own_finite = np.isfinite(own) if own.dtype.kind == "f" else np.ones(len(own), bool)
            bad = [v for v in np.unique(own[own_finite]) if not (0 <= v < ntasks) or v != int(v)]
            shown = ", ".join(f"{v:g}" for v in bad[:5]) + (", null" if not own_finite.all() else "")
            out.append(_finding("TSK001", f"episode {run.episode}: {int(unresolved[r])} rows have task_index {shown}, "
                                          f"but {_tasks_file(ctx)} holds task_index 0..{ntasks - 1}", **loc))
        for value in pair_task[(pair_run == r) & unlisted].tolist() if named[r] else []:
            text = ds.tasks[value]
            out.append(_finding("TSK005", f"episode {run.episode}: rows use task_index {value} "
                                          f"({text!r}), not among its listed tasks "
                                          f"{sorted(listed[run.episode])}", **loc))
    return out
