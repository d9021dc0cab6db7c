"""Indices: episode numbering in the metadata, and where each episode's rows really are.

The data is the truth: the episode_index column of every referenced data file (in sorted path
order, lerobot's row order) says which rows belong to which episode. The metadata's pointers,
lengths, dataset_from/to_index and the info.json totals are checked against that, and each
episode's frame_index and global index columns against the rows' positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from lerodoc.checks.common import (ERROR, WARNING, Context, Finding, data_files, episode_columns, episode_meta_files,
                                   finding_factory, flat_column)
from lerodoc.errors import LerodocError
from lerodoc.formats import v21, v30
from lerodoc.tables.parquet_io import read_parquet, to_numpy
from lerodoc.conventions import INFO_PATH
from lerodoc.formats.jsonl import read_json

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


class Placement:
    """Where the data puts each episode's rows: its runs as columns (global row order), over the data files whose
    episode_index column was usable, laid end to end (`rows` of them; a run's global_start is its row there).
    `runs` and `by_file` give them as Run records for callers that want one per run."""

    def __init__(self, files: list[str] | None = None, file_rows: np.ndarray | None = None,
                 episodes: np.ndarray | None = None, bad_files: dict[str, str] | None = None, complete: bool = True):
        self.files = files or []                                  # the usable files, in row order
        self.file_rows = np.zeros(0, np.int64) if file_rows is None else file_rows
        self.file_start = np.r_[0, np.cumsum(self.file_rows)][:-1].astype(np.int64)
        self.bad_files = bad_files or {}       # file -> why its episode_index is unusable
        self.complete = complete               # every referenced file was read and placed: global positions hold
        rows = np.zeros(0, np.int64) if episodes is None else episodes
        self.rows = len(rows)
        change = np.zeros(self.rows, bool)
        change[self.file_start[self.file_rows > 0]] = True
        if self.rows:
            change[1:] |= rows[1:] != rows[:-1]
        self.global_start = np.flatnonzero(change)                      # per run
        self.global_stop = np.r_[self.global_start[1:], self.rows].astype(np.int64)
        self.episode = rows[self.global_start]
        self.file = np.searchsorted(self.file_start, self.global_start, side="right") - 1
        self.start = self.global_start - self.file_start[self.file]     # first row inside its file
        self.length = self.global_stop - self.global_start

    @cached_property
    def runs(self) -> list[Run]:
        return [Run(int(e), self.files[f], int(a), int(a + n), int(g)) for e, f, a, n, g in
                zip(self.episode, self.file, self.start, self.length, self.global_start)]

    @cached_property
    def _sorted(self) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(self.episode, kind="stable")
        return order, self.episode[order]

    def runs_of(self, episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of `episodes`: where its runs sit in `run_order` ([lo, hi), in run order) — how many runs carry it
        is hi - lo."""
        _, values = self._sorted
        return np.searchsorted(values, episodes, "left"), np.searchsorted(values, episodes, "right")

    @property
    def run_order(self) -> np.ndarray:
        """Run ids sorted by episode (stable: each episode's runs in row order)."""
        return self._sorted[0]

    def by_file(self) -> dict[str, list[Run]]:
        out: dict[str, list[Run]] = {}
        for run in self.runs:
            out.setdefault(run.file, []).append(run)
        return out


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
    files, columns, bad, complete = [], [], {}, True
    for path, data in data_files(ctx).items():
        episodes = _episode_column(data.columns) if data.ok else None
        if isinstance(episodes, str):
            bad[path], episodes = episodes, None
        if episodes is None:
            complete = False
            continue
        files.append(path)
        columns.append(episodes)
    result = Placement(files, np.array([len(c) for c in columns], np.int64),
                       np.concatenate(columns).astype(np.int64) if columns else None, bad, complete)
    ctx.cache["placement"] = result
    return result


def placed_column(ctx: Context, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The `name` column of the placed files laid end to end as Placement's rows, and per row whether its file has
    it (a number column, one value per row); zeros where it has not. Made on each call, not kept: each family asks
    for its column once, and a million episodes' column is 80 MB that the later families need not carry."""
    where, files = placement(ctx), data_files(ctx)
    parts, has = [], []
    for path, rows in zip(where.files, where.file_rows):
        values = flat_column(files[path].columns, name)
        has.append(values is not None and len(values) == rows)
        parts.append(values if has[-1] else np.zeros(rows, np.int64))
    values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return values, np.repeat(np.array(has, bool), where.file_rows)


def check(ctx: Context) -> list[Finding]:
    ds = ctx.dataset
    if ds is None:
        return []
    where = placement(ctx)
    return [*_metadata_order(ctx), *_ranges(ctx), *_bad_episode_columns(where), *_episode_rows(ctx, where),
            *_row_columns(ctx, where), *_totals(ctx, where)]


def _metadata_order(ctx: Context) -> list[Finding]:
    """Row i of the episodes metadata must be episode i: report the first position where it is not."""
    indices = episode_columns(ctx).index
    wrong = np.flatnonzero(indices != np.arange(len(indices)))
    if not len(wrong):
        return []
    position, index = int(wrong[0]), int(indices[wrong[0]])
    values, counts = np.unique(indices, return_counts=True)
    gaps = np.setdiff1d(np.arange(len(indices)), values)[:5].tolist()
    duplicates = values[counts > 1][:5].tolist()
    detail = "; ".join(filter(None, [f"missing {gaps}" if gaps else "",
                                     f"duplicated {duplicates}" if duplicates else ""]))
    return [_finding("IDX001", f"episode at metadata position {position} has episode_index {index}, "
                               f"expected {position} ({detail or 'out of order'})",
                     file=episode_meta_files(ctx)[position], episode=index)]


RANGE_COLUMNS = ["episode_index", "length", "dataset_from_index", "dataset_to_index"]


def _ranges(ctx: Context) -> list[Finding]:
    """v3.0: to - from == length for each episode, and the ranges follow each other from 0 (whole columns; a row is
    looked at one by one only when it is wrong)."""
    if ctx.dataset.version != "v3.0":
        return []
    out, expected_from = [], 0
    for path in sorted(ctx.root.glob(v30.EPISODES_GLOB)):
        file = path.relative_to(ctx.root).as_posix()
        try:
            table = read_parquet(path, RANGE_COLUMNS)
            length, start, stop = (_int_column(table, c) for c in RANGE_COLUMNS[1:])
        except LerodocError as exc:
            out.append(_finding("IDX002", f"{file}: cannot read the ranges ({exc.message})", file=file))
            continue
        except (pa.ArrowException, TypeError, ValueError):   # a column not of integers: the rows say how
            out += _ranges_rows(table, file, np.arange(table.num_rows), expected_from)
            continue
        (length, no_length), (start, no_start), (stop, no_stop) = length, start, stop
        ends = np.where(no_start, 0, start) + np.where(no_length, 0, length)
        expected = np.r_[expected_from, ends[:-1]]
        bad = no_stop | no_start | no_length | (stop - start != length) | (start != expected)
        out += _ranges_rows(table, file, np.flatnonzero(bad), None, expected)
        if len(ends):
            expected_from = int(ends[-1])
    return out


def _int_column(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as (int64 values, null mask); without nulls, through `to_numpy`'s view (pyarrow's own
    conversion imports pandas, a third of a second)."""
    column = table.column(name)
    if not pa.types.is_integer(column.type):
        raise TypeError(name)
    if not column.null_count:
        return to_numpy(column.combine_chunks()).astype(np.int64), np.zeros(len(column), dtype=bool)
    import pyarrow.compute as pc   # only for a column with nulls: importing it costs every validate 26-50 ms
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    return pc.fill_null(column, 0).to_numpy().astype(np.int64), np.asarray(nulls, bool)


def _ranges_rows(table: pa.Table, file: str, rows: np.ndarray, expected_from: int | None,
                 expected: np.ndarray | None = None) -> list[Finding]:
    """IDX002/IDX003 of the given rows, told from their values; `expected` gives each row's expected start (else
    chained from `expected_from` over the rows, which are then all of the file's)."""
    out = []
    if not len(rows):
        return out   # (pyarrow's conversion of even an empty numpy array imports pandas)
    for position, row in zip(rows.tolist(), table.take(pa.array(rows, pa.int64())).to_pylist()):
        episode, length = row.get("episode_index"), row.get("length")
        start, stop = row.get("dataset_from_index"), row.get("dataset_to_index")
        where = dict(file=file, episode=episode)
        want = int(expected[position]) if expected is not None else expected_from
        if stop is None or start is None or stop - start != length:
            out.append(_finding("IDX002", f"episode {episode}: dataset_from_index {start}, dataset_to_index "
                                          f"{stop}, but length {length}", **where))
        if start != want:
            out.append(_finding("IDX003", f"episode {episode}: dataset_from_index {start}, but the previous "
                                          f"episode ends at {want}", **where))
        if expected is None:
            expected_from = (start or 0) + (length or 0)
    return out


def _bad_episode_columns(where: Placement) -> list[Finding]:
    return [_finding("IDX014", f"{path}: {why}", file=path) for path, why in where.bad_files.items()]


def _episode_rows(ctx: Context, where: Placement) -> list[Finding]:
    """Each metadata episode against its runs in the data; runs of unknown episodes. Whole columns: the episodes
    that a finding names are then told one by one, in metadata order."""
    ds, meta = ctx.dataset, episode_columns(ctx)
    files, meta_files = data_files(ctx), episode_meta_files(ctx)
    usable = np.array([f in files and files[f].ok and f not in where.bad_files for f in meta.files], bool)
    lo, hi = where.runs_of(meta.index)
    count = hi - lo
    first = where.run_order[np.minimum(lo, max(len(where.run_order) - 1, 0))] if len(where.run_order) \
        else np.zeros(len(lo), np.int64)
    placed = {f: i for i, f in enumerate(where.files)}
    meta_placed = np.array([placed.get(f, -1) for f in meta.files], np.int64)[meta.file]
    own = usable[meta.file]
    one = own & (count == 1)
    run_file, run_length = where.file[first] if len(first) else first, where.length[first] if len(first) else first
    other_file = one & (run_file != meta_placed)
    other_length = one & (run_length != meta.length)
    other_start = one & (ds.version == "v3.0") & where.complete & (where.global_start[first] != meta.from_index) \
        if len(where.global_start) else np.zeros(len(one), bool)
    flagged = (own & (count == 0) & where.complete) | (own & (count > 1)) | other_file | other_length | other_start
    out = []
    for position in np.flatnonzero(flagged).tolist():
        ep, loc = ds.episodes[position], dict(file=meta_files[position], episode=int(meta.index[position]))
        if count[position] == 0:
            out.append(_finding("IDX010", f"episode {ep.index}: no row of any data file has episode_index "
                                          f"{ep.index} (metadata points at {ep.data_file})", **loc))
            continue
        if count[position] > 1:
            found = [where.runs[r] for r in where.run_order[lo[position]:hi[position]]]
            parts = ", ".join(f"{r.file} rows {r.start}..{r.stop - 1}" for r in found[:4])
            out.append(_finding("IDX012", f"episode {ep.index}: rows are split into {len(found)} runs ({parts})",
                                file=found[0].file, episode=ep.index))
            continue
        run = where.runs[first[position]]
        if other_file[position]:
            out.append(_finding("IDX011", f"episode {ep.index}: the metadata points at {ep.data_file}, but its "
                                          f"{run.length} rows are in {run.file} (rows {run.start}..{run.stop - 1})",
                                **loc))
        if other_length[position]:
            out.append(_finding("IDX005", f"episode {ep.index}: length {ep.length} in the metadata, "
                                          f"{run.length} rows in {run.file}", **loc))
        if other_start[position]:
            out.append(_finding("IDX004", f"episode {ep.index}: dataset_from_index {ep.from_index}, but its rows "
                                          f"start at global row {run.global_start}", **loc))
    unknown = ~np.isin(where.episode, meta.index)
    if unknown.any():     # each unknown episode once, at its first run, in run order
        _, first_run = np.unique(where.episode[unknown], return_index=True)
        for r in np.sort(np.flatnonzero(unknown)[first_run]).tolist():
            run = where.runs[r]
            out.append(_finding("IDX013", f"{run.file} rows {run.start}..{run.stop - 1} have episode_index "
                                          f"{run.episode}, which the metadata does not list",
                                file=run.file, episode=run.episode))
    return out


ROW_CHUNK = 1 << 20   # rows `_first_wrong` compares at once: its temporaries stay 8 MB, not 80 MB a million episodes


def run_of_rows(where: Placement, start: int, stop: int) -> np.ndarray:
    """The run of each of the placed rows [start, stop): the runs that overlap them, each repeated for its rows
    there (no search per row)."""
    first = int(np.searchsorted(where.global_start, start, side="right")) - 1
    last = int(np.searchsorted(where.global_start, stop, side="left"))
    lengths = np.minimum(where.global_stop[first:last], stop) - np.maximum(where.global_start[first:last], start)
    return np.repeat(np.arange(first, last, dtype=np.int64), lengths)


def _first_wrong(values: np.ndarray, has: np.ndarray, where: Placement, within_run: bool
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per run, its first row whose value (where its file `has` the column) is not the row's place in its run
    (`within_run`: frame_index) or in the dataset (index), -1 when none, and how many rows are not; ROW_CHUNK rows at
    a time."""
    runs = len(where.episode)
    first, count = np.full(runs, -1, np.int64), np.zeros(runs, np.int64)
    for start in range(0, where.rows, ROW_CHUNK):
        stop = min(start + ROW_CHUNK, where.rows)
        position = np.arange(start, stop)
        run = np.searchsorted(where.global_start, position, side="right") - 1
        want = position - where.global_start[run] if within_run else position
        rows = np.flatnonzero(has[start:stop] & (values[start:stop] != want))
        if not len(rows):
            continue
        owners, at = np.unique(run[rows], return_index=True)   # rows ascend: each run's first
        fresh = first[owners] < 0
        first[owners[fresh]] = position[rows[at[fresh]]]
        count += np.bincount(run[rows], minlength=runs)
    return first, count


def _row_columns(ctx: Context, where: Placement) -> list[Finding]:
    """frame_index 0..n-1 within each episode; index equal to the global row position. Whole columns, a chunk of
    rows at a time: per row the value expected from its run, and per run its first wrong row; the episodes of a single
    run only."""
    runs = len(where.episode)
    if not runs:
        return []
    lo, hi = where.runs_of(where.episode)
    single = (hi - lo) == 1
    frames, has_frames = placed_column(ctx, "frame_index")
    frame_first, _ = _first_wrong(frames, has_frames, where, within_run=True)
    frame_found = {r: frames[frame_first[r]] for r in np.flatnonzero(single & (frame_first >= 0)).tolist()}
    del frames, has_frames
    index_first, index_wrong = np.full(runs, -1), np.zeros(runs, np.int64)
    index_found = {}
    if where.complete:
        index, has_index = placed_column(ctx, "index")
        index_first, index_wrong = _first_wrong(index, has_index, where, within_run=False)
        index_found = {r: index[index_first[r]] for r in np.flatnonzero(single & (index_first >= 0)).tolist()}
    out = []
    for r in np.flatnonzero(single & ((frame_first >= 0) | (index_first >= 0))).tolist():
        run = where.runs[r]
        loc = dict(file=run.file, episode=run.episode)
        if frame_first[r] >= 0:
            k = int(frame_first[r]) - run.global_start
            out.append(_finding("IDX020", f"episode {run.episode}: row {k} of the episode has frame_index "
                                          f"{frame_found[r]:g}, expected {k}", **loc))
        if index_first[r] >= 0:
            k = int(index_first[r]) - run.global_start
            out.append(_finding("IDX021", f"episode {run.episode}: global row {run.global_start + k} has index "
                                          f"{index_found[r]:g} ({int(index_wrong[r])} of {run.length} rows "
                                          "wrong)", **loc))
    return out


def _totals(ctx: Context, where: Placement) -> list[Finding]:
    """info.json totals against the real counts (totals that are absent are layout's LAY011)."""
    ds, out = ctx.dataset, []
    try:
        raw = read_json(ctx.root / INFO_PATH)
    except LerodocError:
        return []
    n = len(ds.episodes)
    frames = where.rows if where.complete else ds.total_frames
    real = {"total_episodes": n, "total_frames": frames, "total_tasks": len(ds.tasks)}
    if ds.version != "v3.0":
        real.update(v21.derived_totals(ds.info, ds.episodes))
    for key, value in real.items():
        stated = raw.get(key)
        if isinstance(stated, int) and stated != value:
            out.append(_finding("IDX030", f"info.json {key} is {stated}, the dataset has {value}",
                                file=INFO_PATH))
    splits = raw.get("splits")
    if isinstance(splits, dict) and list(splits) == ["train"] and splits["train"] != f"0:{n}":
        out.append(_finding("IDX031", f"info.json splits train is {splits['train']!r}, expected '0:{n}'",
                            file=INFO_PATH))
    return out
