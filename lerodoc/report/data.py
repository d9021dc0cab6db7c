"""What a report shows, gathered from the dataset: only the columns and frames it shows are read.

Channels: every numeric, non-index feature, all rows (exact stats and histograms need them). Episodes: the
timestamps and channels of the sampled episodes, and the task_index of every row (task changes). Frames:
the first, middle and last row of each sampled episode per camera, decoded only when asked.
"""

from __future__ import annotations

import io
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from lerodoc.media.clips import read_errors, reason
from lerodoc.dataset import Dataset, read_rows
from lerodoc.formats.model import Episode
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.info import INDEX_FEATURES
from lerodoc.ops.quantiles import channel_table
from lerodoc.tables.parquet_io import column_matrix
from lerodoc.run.parallel import in_order
from lerodoc.selection import Selection
from lerodoc.tables.stats import block_stats, groups_of
from lerodoc.media.frames import Cursor, keyframe_gap, open_video, probe

THUMB_WIDTH = 240   # pixels; thumbnails keep their aspect ratio


def channel_features(ds: Dataset) -> list[str]:
    """The features whose channels the report plots: numeric, stored in the parquet, not bookkeeping."""
    return [k for k in ds.info.numeric_keys if k not in INDEX_FEATURES and ds.info.features[k]["dtype"] != "image"]


def sample_episodes(ds: Dataset, count: int, chosen: Selection | None = None, option: str = "--episodes"
                    ) -> list[Episode]:
    """The episodes `chosen` names (checked against the dataset: one it lacks is a usage error naming `option` and
    the episodes it holds), else `count` spread evenly over the dataset, first and last included."""
    if chosen is not None:
        if not chosen.spans:
            raise UsageError(f"{option}: no episode given", hint="name at least one episode")
        wanted = set(chosen.resolve((ep.index for ep in ds.episodes), option))
        return [ep for ep in ds.episodes if ep.index in wanted]
    picks = np.unique(np.linspace(0, len(ds.episodes) - 1, max(1, min(count, len(ds.episodes)))).round().astype(int))
    return [ds.episodes[i] for i in picks]


@dataclass
class Columns:
    """Every listed episode's rows, in the dataset's episode order (`ds.episodes`): per channel feature the (frames,
    channels) values; per episode its first row there (`starts`, one entry an episode and the total at the end); the
    task_index of every row (None where the data has none); per sampled episode its timestamps."""
    values: dict[str, np.ndarray]
    starts: np.ndarray
    task_index: np.ndarray | None
    timestamps: dict[int, np.ndarray]

    def rows(self, position: int) -> slice:
        """The rows of the episode at `position` in `ds.episodes`."""
        return slice(int(self.starts[position]), int(self.starts[position + 1]))


@dataclass
class _Part:
    """One data file's share of `Columns`: the rows of its episodes (in `episodes`' order), whole columns."""
    values: dict[str, np.ndarray]
    task_index: np.ndarray | None
    timestamps: dict[int, np.ndarray]


def read_columns(ds: Dataset, features: list[str], sampled: list[Episode], workers: int = 1,
                 tick: Callable[[int], None] | None = None, tasks: bool = True) -> Columns:
    """Read `features` and (with `tasks`) task_index from every data file (threads, one file each) and timestamp
    from the files that hold sampled episodes. Each file's columns are converted once and its episodes' rows
    gathered by index; the files' parts are joined, and put in the dataset's episode order by one gather where the
    files do not already give it."""
    by_file = ds.episodes_by_data_file()
    want_time = {ep.data_file for ep in sampled}
    sampled_ids = {ep.index for ep in sampled}
    groups = groups_of(features, ds.info.features)
    has_task = tasks and "task_index" in ds.info.features

    def one(item: tuple[str, list[Episode]]) -> _Part:
        relative, episodes = item
        path = ds.path(relative)
        columns = (list(features) + (["task_index"] if has_task else [])
                   + (["timestamp"] if relative in want_time else []))
        firsts = np.array([ep.data_row for ep in episodes], dtype=np.int64)
        lengths = np.array([ep.length for ep in episodes], dtype=np.int64)
        first, end = int(firsts.min()), int((firsts + lengths).max())
        table = read_rows(path, first, end - first, columns, episodes[0].index)
        try:
            out = _whole_file(table, episodes, firsts - first, lengths, groups, has_task, sampled_ids, path)
        except LerodocError:   # episode by episode, so the error is the one that episode's rows give
            out = _joined([_one_episode(table, ep, ep.data_row - first, groups, has_task, sampled_ids, path)
                           for ep in episodes], features)
        if tick:
            tick(1)
        return out

    lengths = np.array([ep.length for ep in ds.episodes], dtype=np.int64)
    total = int(lengths.sum())
    values: dict[str, np.ndarray] = {}
    parts, at = [], 0
    # each file's values copied into place as it comes (in order) and let go, with few files read ahead: a million
    # episodes' values are a gigabyte or more, and the files' parts were held beside their concatenation
    for part in in_order(one, by_file.items(), threads=workers):
        rows = 0
        for name, matrix in part.values.items():
            values[name] = _room(values.get(name), matrix, total)
            values[name][at:at + len(matrix)] = matrix
            rows = len(matrix)
        part.values = {}
        parts.append(part)
        at += rows
        # the file's table is gone: pyarrow's pool (mimalloc) would keep its pages for the next read, while this
        # feature's values grow to a gigabyte beside them
        pa.default_memory_pool().release_unused()
    # the dataset position of each episode as the parts hold them: file by file, each file's in the dataset's order
    # (a stable sort of each episode's file rank; a dict by episode is a hundred MB at a million episodes)
    rank = {file: k for k, file in enumerate(by_file)}
    order = np.argsort(np.array([rank[ep.data_file] for ep in ds.episodes], dtype=np.int64), kind="stable")
    starts = np.concatenate([[0], np.cumsum(lengths)])
    widths = {name: (g.dtype, w) for g in groups for name, w in zip(g.names, g.widths)}
    values = {name: values[name] if name in values else np.empty((0, widths[name][1]), dtype=widths[name][0])
              for name in features}   # no data file: no rows
    task_index = _concatenated([p.task_index for p in parts]) if has_task else None
    if len(order) > 1 and not (order[1:] > order[:-1]).all():   # the files interleave the dataset's order
        held = lengths[order]
        at = np.empty_like(order)
        at[order] = np.cumsum(held) - held                      # each episode's first row in the parts
        rows = span_rows(at, lengths)
        values = {name: matrix[rows] for name, matrix in values.items()}
        task_index = None if task_index is None else task_index[rows]
    return Columns(values=values, starts=starts, task_index=task_index,
                   timestamps={k: v for p in parts for k, v in p.timestamps.items()})


def span_rows(firsts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The row numbers of the spans [first, first + length), one after another (no Python loop over the spans)."""
    firsts, lengths = np.asarray(firsts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(firsts - (ends - lengths), lengths) + np.arange(int(ends[-1]) if len(ends) else 0)


def _room(held: np.ndarray | None, part: np.ndarray, rows: int) -> np.ndarray:
    """The (rows, channels) array a feature's parts are copied into, of the type np.concatenate would give them:
    made for the first part, widened where a later part's type needs it (a column stored wider than another
    file's)."""
    if held is None:
        return np.empty((rows, part.shape[1]), dtype=part.dtype)
    kind = np.result_type(held.dtype, part.dtype)
    return held if kind == held.dtype else held.astype(kind)


def _concatenated(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _features(table, row: int, length: int, groups, path) -> dict[str, np.ndarray]:
    """{feature: (frames, channels)} of rows row:row + length, each group's columns converted at once."""
    return {name: part for g in groups for name, part in
            zip(g.names, np.split(g.matrix(table, row, length, source=path), np.cumsum(g.widths)[:-1], axis=1))}


def _one_episode(table, ep: Episode, row: int, groups, has_task: bool, sampled_ids: set[int], path) -> _Part:
    """The `_Part` of one episode's rows."""
    parts = _features(table, row, ep.length, groups, path)
    tasks = column_matrix(table.column("task_index").slice(row, ep.length), ep.length)[:, 0] if has_task else None
    times = ({ep.index: column_matrix(table.column("timestamp").slice(row, ep.length), ep.length)[:, 0]
              .astype(np.float64)} if ep.index in sampled_ids else {})
    return _Part(parts, tasks, times)


def _joined(parts: list[_Part], features: list[str]) -> _Part:
    """Episodes' parts as one (the fallback path: a file whose columns do not convert whole)."""
    return _Part({name: np.concatenate([p.values[name] for p in parts]) for name in features},
                 None if parts[0].task_index is None else np.concatenate([p.task_index for p in parts]),
                 {k: v for p in parts for k, v in p.timestamps.items()})


def _whole_file(table, episodes: list[Episode], starts: np.ndarray, lengths: np.ndarray, groups, has_task: bool,
                sampled_ids: set[int], path) -> _Part:
    """The `_Part` of `episodes` (their first rows in `table` and lengths), each column converted once for the whole
    file; the rows are gathered only where the episodes do not tile the table, in order."""
    ends = np.cumsum(lengths)
    tiled = len(ends) > 0 and int(ends[-1]) == table.num_rows and np.array_equal(starts, ends - lengths)
    rows = None if tiled else span_rows(starts, lengths)

    def gathered(matrix: np.ndarray) -> np.ndarray:
        return matrix if rows is None else matrix[rows]
    whole = {name: gathered(part) for name, part in _features(table, 0, table.num_rows, groups, path).items()}
    tasks = gathered(column_matrix(table.column("task_index"), table.num_rows)[:, 0]) if has_task else None
    times = {}
    mine = [k for k, ep in enumerate(episodes) if ep.index in sampled_ids]
    if mine:
        stamps = gathered(column_matrix(table.column("timestamp"), table.num_rows)[:, 0].astype(np.float64))
        times = {episodes[k].index: stamps[ends[k] - lengths[k]:ends[k]] for k in mine}
    return _Part(whole, tasks, times)


def channel_rows(ds: Dataset, values: dict[str, np.ndarray]) -> list[dict]:
    """One row per channel: name, min, q01, q50, q99, max, mean, std and flags (near-constant, extreme as
    `lerodoc quantiles` flags them, and NaN with the count of non-finite values, whose stats are taken over
    the finite ones)."""
    stats, bad = {}, {}
    for name, matrix in values.items():
        block = matrix.T                                       # (channels, frames)
        bad[name] = _non_finite(matrix)
        if not bad[name].any():
            stats[name] = block_stats(block)
            continue
        per_channel = [block_stats(row[ok][None, :]) if ok.any() else None
                       for row in block for ok in [np.isfinite(row)]]
        stats[name] = {k: np.array([np.nan if s is None else float(np.ravel(s[k])[0]) for s in per_channel])
                       for k in ("min", "max", "mean", "std", "q01", "q10", "q50", "q90", "q99")}
    rows = channel_table(ds, stats, list(values))
    for row in rows:
        count = int(bad[row["feature"]][row["channel"]])
        row["nan"] = count
        if count:
            row["flags"] = ["NaN"] + [f for f in row["flags"] if np.isfinite(row["q01"])]
    return rows


def _non_finite(matrix: np.ndarray, rows: int = 1 << 16) -> np.ndarray:
    """Each channel's count of non-finite values in a (frames, channels) matrix, a block of rows' mask at a time: a
    whole matrix's takes a byte a value (160 MB of a million episodes' state), and a channel's column at a time
    reads it strided (0.69 s against 0.24 s for ten million frames of 16 float32 channels)."""
    bad = np.zeros(matrix.shape[1], dtype=np.int64)
    for first in range(0, len(matrix), rows):
        part = matrix[first:first + rows]
        bad += len(part) - np.count_nonzero(np.isfinite(part), axis=0)
    return bad


def channel_histograms(values: np.ndarray, bins: int = 40) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per channel of the (frames, channels) `values`, `histogram` of its finite values (None where it has none)."""
    hists = []
    for c in range(values.shape[1]):
        column = values[:, c].astype(np.float64)   # one contiguous copy, which `histogram` counts in
        finite = np.isfinite(column)
        column = column if finite.all() else column[finite]
        hists.append(histogram(column, bins) if len(column) else None)
    return hists


def histogram(column: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """np.histogram of finite values of any dtype and magnitude: counted in float64 on values scaled to [-1, 1], the
    range widened to a millionth of the magnitude (and to +-0.5 around a constant small channel), so near-constant
    channels at large magnitude (1e5 +- 1e-3 in float32) and huge ones (1e308) get finite, distinct edges."""
    column = np.asarray(column, dtype=np.float64)
    scale = float(np.max(np.abs(column))) or 1.0
    scaled = column / scale
    lo, hi = float(scaled.min()), float(scaled.max())
    least = 1.0 / scale if scale > 1.0 else 1.0      # a constant channel spans +-0.5 in its own units where it can
    least = max(least, 1e-6)
    if hi - lo < least:
        middle = (lo + hi) / 2
        lo, hi = middle - least / 2, middle + least / 2
    counts, edges = np.histogram(scaled, bins=bins, range=(lo, hi))
    return counts, edges * scale


def select_command(ds: Dataset, rows: list[dict]) -> str | None:
    """A `lerodoc select` command that keeps the unflagged channels of observation.state* and action* features,
    or None when no channel of them is flagged."""
    targets = {"state": [], "action": []}
    dropped = False
    for name in dict.fromkeys(r["feature"] for r in rows):
        target = "state" if name.startswith("observation.state") else "action" if name.startswith("action") else None
        if target is None:
            continue
        mine = [r for r in rows if r["feature"] == name]
        keep = [r["channel"] for r in mine if not r["flags"]]
        dropped |= len(keep) < len(mine)
        if keep:
            targets[target].append(f"{name}[{_ranges(keep)}]" if len(keep) < len(mine) else name)
    if not dropped:
        return None
    words = ["lerodoc", "select", str(ds.root), "-o", f"{ds.root}_selected"]
    for target, specs in targets.items():
        words += [w for spec in specs for w in (f"--{target}", spec)]
    return shlex.join(words)


def _ranges(channels: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0:3,5,7:9' (select's slice syntax)."""
    parts, start = [], channels[0]
    for prev, cur in zip(channels, channels[1:] + [None]):
        if cur != prev + 1:
            parts.append(str(start) if prev == start else f"{start}:{prev + 1}")
            start = cur
    return ",".join(parts)


def task_changes(ds: Dataset, columns: Columns) -> list[dict]:
    """Every frame where task_index changes inside an episode: episode, frame, from task, to task. Found over the
    whole column at once: a change between two rows counts where both are rows of one episode."""
    tasks = columns.task_index
    if tasks is None or len(tasks) < 2:
        return []
    at = np.flatnonzero(tasks[1:] != tasks[:-1]) + 1                      # rows whose task differs from the last
    owner = np.searchsorted(columns.starts, at, side="right") - 1          # the episode position of each such row
    inside = at > columns.starts[owner]                                    # not an episode's first row
    at, owner = at[inside], owner[inside]
    frames = at - columns.starts[owner]
    return [{"episode": ds.episodes[o].index, "frame": f, "from": a, "to": b} for o, f, a, b in
            zip(owner.tolist(), frames.tolist(), tasks[at - 1].tolist(), tasks[at].tolist())]


def cameras(ds: Dataset) -> list[dict]:
    """Per camera, from its first video file's headers: codec, size, pixel format, fps and GOP (the longest
    run of frames between keyframes, from the file's index: `lerodoc.media.frames`); no frame is decoded."""
    out = []
    for key in ds.info.video_keys:
        files = ds.video_files(key)
        row = {"camera": key, "files": len(files), "codec": None, "width": None, "height": None, "pix_fmt": None,
               "fps": None, "gop": None, "error": None}
        if files:
            path = ds.path(files[0])
            try:
                p = probe(path)
                row.update(codec=p.codec, width=p.width, height=p.height, pix_fmt=p.pix_fmt, fps=round(p.fps, 3))
            except LerodocError as exc:
                row["error"] = exc.message
            try:
                row["gop"] = keyframe_gap(path)
            except LerodocError:
                pass
        out.append(row)
    return out


@dataclass
class Thumb:
    camera: str
    episode: int
    row: int
    row_timestamp: float            # the parquet timestamp of the row
    pts: float | None = None        # the decoded frame's presentation time, relative to the episode's window start
    query: float | None = None      # where in the file the row's frame is: from_timestamp + row_timestamp
    jpeg: bytes | None = field(default=None, repr=False)
    error: str | None = None

    def delta(self) -> float | None:
        return None if self.pts is None else self.pts - self.row_timestamp

    def mismatch(self, tolerance_s: float) -> bool:
        return self.error is not None or abs(self.delta()) > tolerance_s

    def to_json(self, tolerance_s: float) -> dict:
        return {"camera": self.camera, "episode": self.episode, "row": self.row, "row_timestamp": self.row_timestamp,
                "pts": self.pts, "delta_s": self.delta(), "mismatch": self.mismatch(tolerance_s), "error": self.error}


def thumbnail_plan(ds: Dataset, sampled: list[Episode], timestamps: dict[int, np.ndarray]) -> list[Thumb]:
    """First, middle and last row of each sampled episode, per camera."""
    thumbs = []
    for key in ds.info.video_keys:
        for ep in sampled:
            if key not in ep.videos:
                continue
            for row in dict.fromkeys((0, ep.length // 2, ep.length - 1)):
                ts = float(timestamps[ep.index][row])
                thumbs.append(Thumb(key, ep.index, row, ts, query=ep.videos[key].from_timestamp + ts))
    return thumbs


def decode_thumbnails(ds: Dataset, thumbs: list[Thumb], tolerance_s: float, workers: int = 1,
                      tick: Callable[[int], None] | None = None) -> None:
    """Fill each thumb's frame (JPEG) and PTS: the frame shown at its query time, i.e. the last one starting at or
    before it (within `tolerance_s`), or the first frame when none does. One file per thread, opened once and
    decoded forward through its thumbs (`frames_at`); PyAV decodes without the GIL."""
    by_file: dict[str, list[Thumb]] = {}
    spans = {(ep.index, key): span for ep in ds.episodes for key, span in ep.videos.items()}
    for t in sorted(thumbs, key=lambda t: t.query):
        by_file.setdefault(spans[(t.episode, t.camera)].file, []).append(t)

    def one(item: tuple[str, list[Thumb]]) -> None:
        relative, mine = item
        path = ds.path(relative)
        try:
            gap_s = keyframe_gap(path) / ds.info.fps
        except LerodocError:
            gap_s = 0.0      # unknown: seek to every thumb
        try:
            with open_video(path) as container:
                stream = container.streams.video[0]
                stream.thread_type = "AUTO"
                for t, frame in zip(mine, frames_at(container, stream, [t.query for t in mine], gap_s,
                                                    tolerance_s)):
                    if frame is None:
                        t.error = "no frame decoded"
                    else:
                        t.pts = float(frame.time) - spans[(t.episode, t.camera)].from_timestamp
                        t.jpeg = _jpeg(frame)
        except (read_errors() + (IndexError,)) as exc:
            for t in mine:
                if t.jpeg is None:
                    t.error = f"cannot decode {relative} ({reason(exc)})"
        if tick:
            tick(len(mine))

    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(one, by_file.items()))


def frames_at(container, stream, targets: list[float], gap_s: float, tolerance_s: float) -> Iterator:
    """The frame shown at each of `targets` (seconds in the file, ascending), or the first decoded when none is
    (a target before the file's first frame); None where nothing decodes. One decode runs forward through the open
    `container` (`frames.Cursor`): it seeks (to the keyframe before a target) only where the target lies more than
    `gap_s`, the longest keyframe interval, past the last frame decoded, so no seek goes back. Frames are yielded
    as found, so a decode error later in the file leaves the earlier ones to the caller."""
    cursor = Cursor(container, stream, tolerance_s)
    for target in targets:
        last = cursor.ahead if cursor.ahead is not None else cursor.shown
        if cursor.frames is None or last is None or target - last.time > gap_s:
            cursor.seek(target)
        shown = cursor.at(target)
        yield shown if shown is not None else cursor.ahead


def _jpeg(frame) -> bytes:
    image = frame.to_image()
    if image.width > THUMB_WIDTH:
        image = image.resize((THUMB_WIDTH, max(1, round(image.height * THUMB_WIDTH / image.width))))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=80)
    return buffer.getvalue()
