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

from lerodoc.media.clips import read_errors, reason
from lerodoc.dataset import Dataset, read_rows
from lerodoc.formats.model import Episode
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.info import INDEX_FEATURES
from lerodoc.ops.quantiles import channel_table
from lerodoc.tables.parquet_io import column_matrix
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
    """Per channel feature the (frames, channels) values of every listed row, in episode order; per sampled
    episode its timestamps; per episode its task_index column (None where the data has none)."""
    values: dict[str, np.ndarray]
    timestamps: dict[int, np.ndarray]
    task_index: dict[int, np.ndarray | None]


def read_columns(ds: Dataset, features: list[str], sampled: list[Episode], workers: int = 1,
                 tick: Callable[[int], None] | None = None) -> Columns:
    """Read `features` and task_index from every data file (threads, one file each) and timestamp from the
    files that hold sampled episodes."""
    by_file = ds.episodes_by_data_file()
    want_time = {ep.data_file for ep in sampled}
    sampled_ids = {ep.index for ep in sampled}
    groups = groups_of(features, ds.info.features)
    has_task = "task_index" in ds.info.features

    def one(item: tuple[str, list[Episode]]):
        relative, episodes = item
        path = ds.path(relative)
        columns = list(features) + (["task_index"] if has_task else []) + (["timestamp"] if relative in want_time else [])
        first, last = min(ep.data_row for ep in episodes), max(episodes, key=lambda ep: ep.data_row + ep.length)
        table = read_rows(path, first, last.data_row + last.length - first, columns, episodes[0].index)
        try:
            out = _whole_file(table, episodes, first, groups, has_task, sampled_ids, path)
        except LerodocError:   # episode by episode, so the error is the one that episode's rows give
            out = [_one_episode(table, ep, ep.data_row - first, groups, has_task, sampled_ids, path) for ep in episodes]
        if tick:
            tick(1)
        return out

    with ThreadPoolExecutor(max(1, workers)) as pool:
        results = [r for part in pool.map(one, by_file.items()) for r in part]
    order = {ep.index: i for i, ep in enumerate(ds.episodes)}
    results.sort(key=lambda r: order[r[0]])
    values = {name: np.concatenate([r[1][name] for r in results]) for name in features}
    return Columns(values=values, timestamps={r[0]: r[3] for r in results if r[3] is not None},
                   task_index={r[0]: r[2] for r in results})


def _features(table, row: int, length: int, groups, path) -> dict[str, np.ndarray]:
    """{feature: (frames, channels)} of rows row:row + length, each group's columns converted at once."""
    return {name: part for g in groups for name, part in
            zip(g.names, np.split(g.matrix(table, row, length, source=path), np.cumsum(g.widths)[:-1], axis=1))}


def _one_episode(table, ep: Episode, row: int, groups, has_task: bool, sampled_ids: set[int], path):
    """(index, {feature: (frames, channels)}, task_index or None, timestamps or None) of one episode's rows."""
    parts = _features(table, row, ep.length, groups, path)
    tasks = column_matrix(table.column("task_index").slice(row, ep.length), ep.length)[:, 0] if has_task else None
    times = (column_matrix(table.column("timestamp").slice(row, ep.length), ep.length)[:, 0].astype(np.float64)
             if ep.index in sampled_ids else None)
    return ep.index, parts, tasks, times


def _whole_file(table, episodes: list[Episode], first: int, groups, has_task: bool, sampled_ids: set[int], path):
    """`_one_episode` of every episode of one file's rows, each column converted once for the whole file."""
    lengths = np.array([ep.length for ep in episodes], dtype=np.int64)
    starts = np.array([ep.data_row - first for ep in episodes], dtype=np.int64)
    ends = np.cumsum(lengths)
    rows = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]) if len(ends) else 0)
    whole = {name: part[rows] for name, part in _features(table, 0, table.num_rows, groups, path).items()}
    cut = ends[:-1]
    by_feature = {name: np.split(matrix, cut) for name, matrix in whole.items()}
    tasks = (np.split(column_matrix(table.column("task_index"), table.num_rows)[:, 0][rows], cut) if has_task
             else [None] * len(episodes))
    times = {}
    if sampled_ids & {ep.index for ep in episodes}:
        stamps = column_matrix(table.column("timestamp"), table.num_rows)[:, 0].astype(np.float64)[rows]
        times = {ep.index: part for ep, part in zip(episodes, np.split(stamps, cut)) if ep.index in sampled_ids}
    return [(ep.index, {name: by_feature[name][k] for name in whole}, tasks[k], times.get(ep.index))
            for k, ep in enumerate(episodes)]


def channel_rows(ds: Dataset, values: dict[str, np.ndarray]) -> list[dict]:
    """One row per channel: name, min, q01, q50, q99, max, mean, std and flags (near-constant, extreme as
    `lerodoc quantiles` flags them, and NaN with the count of non-finite values, whose stats are taken over
    the finite ones)."""
    stats, bad = {}, {}
    for name, matrix in values.items():
        block = matrix.T                                       # (channels, frames)
        finite = np.isfinite(block)
        bad[name] = (~finite).sum(axis=1)
        if finite.all():
            stats[name] = block_stats(block)
            continue
        per_channel = [block_stats(row[ok][None, :]) if ok.any() else None for row, ok in zip(block, finite)]
        stats[name] = {k: np.array([np.nan if s is None else float(np.ravel(s[k])[0]) for s in per_channel])
                       for k in ("min", "max", "mean", "std", "q01", "q10", "q50", "q90", "q99")}
    rows = channel_table(ds, stats, list(values))
    for row in rows:
        count = int(bad[row["feature"]][row["channel"]])
        row["nan"] = count
        if count:
            row["flags"] = ["NaN"] + [f for f in row["flags"] if np.isfinite(row["q01"])]
    return rows


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


def task_changes(ds: Dataset, task_index: dict[int, np.ndarray | None]) -> list[dict]:
    """Every frame where task_index changes inside an episode: episode, frame, from task, to task."""
    out = []
    for ep in ds.episodes:
        tasks = task_index.get(ep.index)
        if tasks is None or len(tasks) < 2:
            continue
        for frame in np.flatnonzero(tasks[1:] != tasks[:-1]) + 1:
            out.append({"episode": ep.index, "frame": int(frame), "from": int(tasks[frame - 1]), "to": int(tasks[frame])})
    return out


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
