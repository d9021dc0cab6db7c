"""Indices: episode numbering in the metadata, and where each episode's rows really are.

The data is the truth: the episode_index column of every referenced data file (in sorted path
order, lerobot's row order) says which rows belong to which episode. The metadata's pointers,
lengths, dataset_from/to_index and the info.json totals are checked against that, and each
episode's frame_index and global index columns against the rows' positions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from lerodoc import formats
from lerodoc.checks.common import (ERROR, WARNING, Context, Finding, data_files, episode_meta_files, finding_factory,
                                   flat_column)
from lerodoc.errors import LerodocError
from lerodoc.formats import v21, v30
from lerodoc.tables.parquet_io import read_parquet

CODES = {
    "IDX001": (ERROR, "metadata episode_index values are not 0..N-1 in order (gap, duplicate or unsorted)",
               "renumber the episodes (lerodoc merge DATASET -o OUT writes contiguous indices)", False),
    "IDX002": (ERROR, "dataset_to_index - dataset_from_index differs from the episode's length",
               "lerodoc repair rewrites the ranges from the data", True),
    "IDX003": (ERROR, "an episode's dataset_from_index does not continue where the previous one ended",
               "lerodoc repair rewrites the ranges from the data", True),
    "IDX004": (ERROR, "dataset_from_index differs from the global row where the episode's rows start",
               "lerodoc repair rewrites the ranges from the data", True),
    "IDX005": (ERROR, "an episode's length differs from the rows it has in the data",
               "lerodoc repair takes lengths from the data", True),
    "IDX010": (ERROR, "no data row carries the episode's episode_index",
               "restore the episode's rows or drop the episode from the metadata", False),
    "IDX011": (ERROR, "the episode's data file pointer names a file that does not hold its rows",
               "lerodoc repair points data/chunk_index, data/file_index at the file holding the rows", True),
    "IDX012": (ERROR, "an episode's rows are not contiguous (split into several runs)",
               "rewrite the data with each episode's rows together", False),
    "IDX013": (ERROR, "data rows carry an episode_index that no episode in the metadata has",
               "drop the rows, or add the episode to the metadata", False),
    "IDX014": (ERROR, "the episode_index column has nulls or non-integer values",
               "restore the column", False),
    "IDX020": (ERROR, "frame_index is not 0..length-1 within the episode",
               "lerodoc repair rewrites frame_index from the row order", True),
    "IDX021": (ERROR, "the global index column differs from the row position across the sorted data files",
               "lerodoc repair rewrites index as the row position", True),
    "IDX030": (ERROR, "an info.json total differs from the real count",
               "lerodoc repair writes the totals from the data", True),
    "IDX031": (WARNING, "info.json splits does not cover 0:total_episodes",
               "lerodoc repair writes splits {\"train\": \"0:N\"}", True),
}
_finding = finding_factory(CODES)


@dataclass(frozen=True)
class Run:
    """Consecutive rows of one episode in one data file."""
    episode: int
    file: str
    start: int            # first row inside the file
    stop: int
    global_start: int     # position of the first row across the sorted data files

    @property
    def length(self) -> int:
        return self.stop - self.start


@dataclass
class Placement:
    """Where the data puts each episode's rows."""
    runs: list[Run] = field(default_factory=list)          # in global row order
    complete: bool = True          # every referenced file was read and placed: global positions hold
    bad_files: dict[str, str] = field(default_factory=dict)   # file -> why its episode_index is unusable

    def by_episode(self) -> dict[int, list[Run]]:
        out: dict[int, list[Run]] = {}
        for run in self.runs:
            out.setdefault(run.episode, []).append(run)
        return out

    def by_file(self) -> dict[str, list[Run]]:
        out: dict[str, list[Run]] = {}
        for run in self.runs:
            out.setdefault(run.file, []).append(run)
        return out


def _file_runs(path: str, episodes: np.ndarray, offset: int) -> list[Run]:
    if not len(episodes):
        return []
    bounds = np.flatnonzero(episodes[1:] != episodes[:-1]) + 1
    starts, stops = np.r_[0, bounds], np.r_[bounds, len(episodes)]
    return [Run(int(episodes[a]), path, int(a), int(b), offset + int(a)) for a, b in zip(starts, stops)]


def _episode_column(table) -> np.ndarray | str | None:
    """The episode_index column as int64, why it is unusable, or None when absent (layout reports that)."""
    episodes = flat_column(table, "episode_index")
    if episodes is None or episodes.dtype.kind != "f":
        return episodes
    if not np.isfinite(episodes).all() or (episodes != np.round(episodes)).any():
        return "episode_index holds nulls or non-integer values"
    return episodes.astype(np.int64)


def placement(ctx: Context) -> Placement:
    """The runs of every episode in the data, read once per context (shared by tasks and stats)."""
    if "placement" in ctx.cache:
        return ctx.cache["placement"]
    result, offset = Placement(), 0
    for path, data in data_files(ctx).items():
        episodes = _episode_column(data.columns) if data.ok else None
        if isinstance(episodes, str):
            result.bad_files[path], episodes = episodes, None
        if episodes is None:
            result.complete = False
            continue
        result.runs += _file_runs(path, episodes, offset)
        offset += len(episodes)
    ctx.cache["placement"] = result
    return result


def check(ctx: Context) -> list[Finding]:
    ds = ctx.dataset
    if ds is None:
        return []
    where = placement(ctx)
    return [*_metadata_order(ctx), *_ranges(ctx), *_bad_episode_columns(where), *_episode_rows(ctx, where),
            *_row_columns(ctx, where), *_totals(ctx, where)]


def _metadata_order(ctx: Context) -> list[Finding]:
    """Row i of the episodes metadata must be episode i: report the first position where it is not."""
    indices = [ep.index for ep in ctx.dataset.episodes]
    for position, index in enumerate(indices):
        if index != position:
            seen = Counter(indices)
            gaps = [i for i in range(len(indices)) if i not in seen]
            duplicates = sorted(i for i, n in seen.items() if n > 1)
            detail = "; ".join(filter(None, [f"missing {gaps[:5]}" if gaps else "",
                                             f"duplicated {duplicates[:5]}" if duplicates else ""]))
            return [_finding("IDX001", f"episode at metadata position {position} has episode_index {index}, "
                                       f"expected {position} ({detail or 'out of order'})",
                             file=episode_meta_files(ctx)[position], episode=index)]
    return []


def _ranges(ctx: Context) -> list[Finding]:
    """v3.0: to - from == length for each episode, and the ranges follow each other from 0."""
    if ctx.dataset.version != "v3.0":
        return []
    out, expected_from = [], 0
    for path in sorted(ctx.root.glob(v30.EPISODES_GLOB)):
        file = path.relative_to(ctx.root).as_posix()
        try:
            table = read_parquet(path, ["episode_index", "length", "dataset_from_index", "dataset_to_index"])
        except LerodocError as exc:
            out.append(_finding("IDX002", f"{file}: cannot read the ranges ({exc.message})", file=file))
            continue
        for row in table.to_pylist():
            episode, length = row.get("episode_index"), row.get("length")
            start, stop = row.get("dataset_from_index"), row.get("dataset_to_index")
            where = dict(file=file, episode=episode)
            if stop is None or start is None or stop - start != length:
                out.append(_finding("IDX002", f"episode {episode}: dataset_from_index {start}, dataset_to_index "
                                              f"{stop}, but length {length}", **where))
            if start != expected_from:
                out.append(_finding("IDX003", f"episode {episode}: dataset_from_index {start}, but the previous "
                                              f"episode ends at {expected_from}", **where))
            expected_from = (start or 0) + (length or 0)
    return out


def _bad_episode_columns(where: Placement) -> list[Finding]:
    return [_finding("IDX014", f"{path}: {why}", file=path) for path, why in where.bad_files.items()]


def _episode_rows(ctx: Context, where: Placement) -> list[Finding]:
    """Each metadata episode against its runs in the data; runs of unknown episodes."""
    ds, out = ctx.dataset, []
    files, runs, meta_files = data_files(ctx), where.by_episode(), episode_meta_files(ctx)
    for position, ep in enumerate(ds.episodes):
        own = files.get(ep.data_file)
        if own is None or not own.ok or ep.data_file in where.bad_files:
            continue   # layout reports the file
        found = runs.get(ep.index, [])
        loc = dict(file=meta_files[position], episode=ep.index)
        if not found:
            if where.complete:
                out.append(_finding("IDX010", f"episode {ep.index}: no row of any data file has episode_index "
                                              f"{ep.index} (metadata points at {ep.data_file})", **loc))
            continue
        if len(found) > 1:
            parts = ", ".join(f"{r.file} rows {r.start}..{r.stop - 1}" for r in found[:4])
            out.append(_finding("IDX012", f"episode {ep.index}: rows are split into {len(found)} runs ({parts})",
                                file=found[0].file, episode=ep.index))
            continue
        run = found[0]
        if run.file != ep.data_file:
            out.append(_finding("IDX011", f"episode {ep.index}: the metadata points at {ep.data_file}, but its "
                                          f"{run.length} rows are in {run.file} (rows {run.start}..{run.stop - 1})",
                                **loc))
        if run.length != ep.length:
            out.append(_finding("IDX005", f"episode {ep.index}: length {ep.length} in the metadata, "
                                          f"{run.length} rows in {run.file}", **loc))
        if ds.version == "v3.0" and where.complete and run.global_start != ep.from_index:
            out.append(_finding("IDX004", f"episode {ep.index}: dataset_from_index {ep.from_index}, but its rows "
                                          f"start at global row {run.global_start}", **loc))
    known = {ep.index for ep in ds.episodes}
    for episode, found in runs.items():
        if episode not in known:
            run = found[0]
            out.append(_finding("IDX013", f"{run.file} rows {run.start}..{run.stop - 1} have episode_index "
                                          f"{episode}, which the metadata does not list",
                                file=run.file, episode=episode))
    return out


def _first_mismatch(values: np.ndarray | None, expected: np.ndarray) -> int | None:
    if values is None:
        return None
    bad = np.flatnonzero(values != expected)
    return int(bad[0]) if len(bad) else None


def _row_columns(ctx: Context, where: Placement) -> list[Finding]:
    """frame_index 0..n-1 within each episode; index equal to the global row position."""
    files, out = data_files(ctx), []
    for episode, found in where.by_episode().items():
        if len(found) != 1:
            continue
        run = found[0]
        table = files[run.file].columns
        loc = dict(file=run.file, episode=episode)
        frames = flat_column(table, "frame_index")
        frames = None if frames is None else frames[run.start:run.stop]
        k = _first_mismatch(frames, np.arange(run.length))
        if k is not None:
            out.append(_finding("IDX020", f"episode {episode}: row {k} of the episode has frame_index "
                                          f"{frames[k]:g}, expected {k}", **loc))
        if not where.complete:
            continue
        index = flat_column(table, "index")
        index = None if index is None else index[run.start:run.stop]
        k = _first_mismatch(index, np.arange(run.global_start, run.global_start + run.length))
        if k is not None:
            wrong = int(np.count_nonzero(index != np.arange(run.global_start, run.global_start + run.length)))
            out.append(_finding("IDX021", f"episode {episode}: global row {run.global_start + k} has index "
                                          f"{index[k]:g} ({wrong} of {run.length} rows wrong)", **loc))
    return out


def _totals(ctx: Context, where: Placement) -> list[Finding]:
    """info.json totals against the real counts (totals that are absent are layout's LAY011)."""
    ds, out = ctx.dataset, []
    try:
        raw = formats.read_json(ctx.root / formats.INFO_PATH)
    except LerodocError:
        return []
    n = len(ds.episodes)
    frames = sum(r.length for r in where.runs) if where.complete else ds.total_frames
    real = {"total_episodes": n, "total_frames": frames, "total_tasks": len(ds.tasks)}
    if ds.version != "v3.0":
        real.update(v21.derived_totals(ds.info, ds.episodes))
    for key, value in real.items():
        stated = raw.get(key)
        if isinstance(stated, int) and stated != value:
            out.append(_finding("IDX030", f"info.json {key} is {stated}, the dataset has {value}",
                                file=formats.INFO_PATH))
    splits = raw.get("splits")
    if isinstance(splits, dict) and list(splits) == ["train"] and splits["train"] != f"0:{n}":
        out.append(_finding("IDX031", f"info.json splits train is {splits['train']!r}, expected '0:{n}'",
                            file=formats.INFO_PATH))
    return out
