"""LeRobot v2.1: one parquet and one mp4 per episode, jsonl metadata, per-episode stats.

meta/info.json  meta/episodes.jsonl  meta/tasks.jsonl  meta/episodes_stats.jsonl  [meta/stats.json]
data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet
videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4
episode_chunk = episode_index // chunks_size
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from lerodoc import budget
from lerodoc.errors import LerodocError
from lerodoc.formats.info import Info
from lerodoc.formats.jsonl import (PARSED_PER_BYTE, PARSED_PER_LINE, line_runs, parse_lines, read_json, read_jsonl,
                                   stats_from_json, stats_to_json, write_json, write_jsonl)
from lerodoc.formats.model import NO_VIDEOS, Episode, StatsRow, VideoSpan, reading_stats, stats_columns
from lerodoc.formats.stats import StatsTable

VERSION = "v2.1"
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
EPISODES_PATH = "meta/episodes.jsonl"
TASKS_PATH = "meta/tasks.jsonl"
EPISODES_STATS_PATH = "meta/episodes_stats.jsonl"
STATS_PATH = "meta/stats.json"
EPISODES_META = EPISODES_PATH            # where episodes are listed
EPISODE_STATS_META = EPISODES_STATS_PATH  # and where their stats are
INFO_ORDER = ("codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks",
              "total_videos", "total_chunks", "chunks_size", "fps", "splits", "data_path", "video_path",
              "features")


def data_file(info: Info, episode_index: int) -> str:
    return (info.data_path or DATA_PATH).format(episode_chunk=episode_index // info.chunks_size,
                                                episode_index=episode_index)


def video_file(info: Info, key: str, episode_index: int) -> str:
    return (info.video_path or VIDEO_PATH).format(episode_chunk=episode_index // info.chunks_size,
                                                  video_key=key, episode_index=episode_index)


def read_tasks(root: Path) -> list[str]:
    rows = read_jsonl(root / TASKS_PATH, {"task_index": int, "task": str})
    by_index = {int(r["task_index"]): r["task"] for r in rows}
    if sorted(by_index) != list(range(len(by_index))):
        raise LerodocError(f"task_index values {sorted(by_index)} are not 0..{len(by_index) - 1}",
                           file=root / TASKS_PATH, field="task_index")
    return [by_index[i] for i in range(len(by_index))]


def read_episode_stats(root: Path) -> Mapping[int, dict]:
    """episodes_stats.jsonl as {episode_index: {feature: {stat: array}}}, read a run of lines at a time
    (jsonl.line_runs, each held to the JSON bounds before a parser sees it). The common case (`_regular_run`: every
    line holds `episode_index` and the same features and stats, each stat numbers of one shape) becomes one array per
    feature.stat and run, a row per episode, with no Python object per episode or value (`StatColumns`); anything
    else is read line by line (`stats_from_json`), which names what is wrong. What is held is charged to the memory
    budget as it grows, with the next run's parse: a file of 20,000 episodes (142 MB) holds ~45 MiB of arrays."""
    path = root / EPISODES_STATS_PATH
    if not path.is_file():
        return {}
    runs, held = [], 0
    for line0, run in line_runs(path):
        budget.check(held + len(run) * PARSED_PER_BYTE, f"reading its per-episode stats ({budget.human(held)} "
                     f"held, the next {len(run):,} bytes of JSON to parse)", file=path)
        columns = _regular_run(run)
        if columns is None or runs and columns[1].keys() != runs[0][1].keys():
            return _line_by_line(path)
        runs.append(columns)
        held += sum(values.nbytes for values in columns[1].values()) + columns[0].nbytes
    return StatColumns(runs) if runs else {}


def _line_by_line(path: Path) -> dict[int, dict]:
    out, held = {}, 0
    for line0, run in line_runs(path):
        budget.check(held + len(run) * PARSED_PER_BYTE, f"reading its per-episode stats line by line "
                     f"({budget.human(held)} held)", file=path)
        for r in parse_lines(run, path, line0, {"episode_index": int}):
            stats = stats_from_json(r["stats"], path, int(r["episode_index"]))
            out[int(r["episode_index"])] = stats
            held += PARSED_PER_LINE + sum(128 + a.nbytes for by_stat in stats.values() for a in by_stat.values())
    return out


class StatColumns(Mapping):
    """Per-episode stats held as columns: for each run of lines, (episode indices, {(feature, stat): (rows, *shape)
    array}). An episode's stats are row views of those arrays, made when asked (the last line of an episode that
    appears twice wins, as a dict built line by line keeps it)."""

    def __init__(self, runs: list[tuple[np.ndarray, dict]]):
        self.runs = runs
        episodes = np.concatenate([index for index, _ in runs])
        self.starts = np.cumsum([0] + [len(index) for index, _ in runs])
        last = len(episodes) - 1 - np.unique(episodes[::-1], return_index=True)[1]   # each episode's last row
        self.episodes, self.rows = episodes[last], last                              # sorted by episode
        self.order = np.sort(np.unique(episodes, return_index=True)[1])              # first appearances, in order
        self.first = episodes[self.order]

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self):
        return iter(self.first.tolist())

    def __getitem__(self, episode: int) -> dict:
        at = int(np.searchsorted(self.episodes, episode))
        if at == len(self.episodes) or self.episodes[at] != episode:
            raise KeyError(episode)
        row = int(self.rows[at])
        run = int(np.searchsorted(self.starts, row, side="right")) - 1
        out: dict[str, dict] = {}
        for (feature, stat), values in self.runs[run][1].items():
            out.setdefault(feature, {})[stat] = values[row - self.starts[run]]
        return out


def _regular_run(run: bytes) -> tuple[np.ndarray, dict] | None:
    """(episode indices, {(feature, stat): array}) of a run of episodes_stats.jsonl lines read in one pass by
    pyarrow's JSON reader, when every line holds `episode_index` and the same features and stats, each stat
    numbers of one shape (the arrays `stats_from_json` gives, a row per line); else None."""
    # pyarrow's JSON reader and the parquet helpers: only a v2.1 dataset's stats need them, not --help or info
    import pyarrow as pa
    import pyarrow.json as pj
    from lerodoc.tables.parquet_io import regular_rows, to_numpy
    try:
        table = pj.read_json(pa.BufferReader(run), read_options=pj.ReadOptions(use_threads=False,
                                                                               block_size=len(run) + 1))
    except (pa.ArrowException, OSError, ValueError):
        return None
    if "episode_index" not in table.column_names or "stats" not in table.column_names or not table.num_rows:
        return None
    index, stats = table.column("episode_index").combine_chunks(), table.column("stats").combine_chunks()
    if index.null_count or not pa.types.is_integer(index.type) or stats.null_count \
            or not pa.types.is_struct(stats.type):
        return None
    columns = {}
    for feature in stats.type:
        by_stat = stats.field(feature.name)
        if by_stat.null_count or not pa.types.is_struct(feature.type):
            return None
        for stat in feature.type:
            values = regular_rows(by_stat.field(stat.name), np.int64 if stat.name == "count" else np.float64)
            if values is None:
                return None
            columns[feature.name, stat.name] = values.reshape(len(values), 1) if values.ndim == 1 else values
    return to_numpy(index).astype(np.int64), columns


class EpisodeStats:
    """episodes_stats.jsonl, read on first use (`read_episode_stats`): reading it is most of the time of opening a
    dataset of many episodes, and a command that needs no episode's stats (info, train's index, validate --no-stats)
    never reads it. It is then held as a `StatsTable` a row per listed episode (`indices`, in the dataset's order),
    and each episode's `stats` is its `StatsRow`, so the commands that move many episodes' stats take them as
    columns, as they take v3.0's (`formats.model.stats_columns`)."""

    def __init__(self, root: Path, indices: np.ndarray):
        self.root, self.indices, self._table = root, indices, None
        self.path = root / EPISODES_STATS_PATH

    @property
    def table(self) -> StatsTable:
        """The stats; a file whose lines cannot be read as stats is a StatsUnreadable naming it (a read past the
        memory budget stays what it is)."""
        if self._table is None:
            with reading_stats(self.path):
                self._table = _aligned(read_episode_stats(self.root), self.indices)
        return self._table


def _aligned(by_episode: Mapping[int, dict], indices: np.ndarray) -> StatsTable:
    """The per-episode stats of episodes `indices`, a row each in that order; an episode the file does not list
    holds no stats. Columns read as `StatColumns` stay arrays (gathered once per feature and stat); stats read line
    by line become lists of arrays and None."""
    if isinstance(by_episode, StatColumns) and _uniform(by_episode):
        at = np.searchsorted(by_episode.episodes, indices).clip(0, len(by_episode.episodes) - 1)
        found, rows = by_episode.episodes[at] == indices, by_episode.rows[at]
        columns = {key: np.concatenate([run[key] for _, run in by_episode.runs])[rows]
                   for key in by_episode.runs[0][1]}
        return StatsTable(columns, len(indices), {key: found for key in columns})
    keys: dict[tuple[str, str], None] = {}
    dicts = [by_episode.get(int(i), {}) for i in indices]
    for stats in dicts:
        keys.update(dict.fromkeys((feature, stat) for feature, by_stat in stats.items() for stat in by_stat))
    return StatsTable({(feature, stat): [stats.get(feature, {}).get(stat) for stats in dicts]
                       for feature, stat in keys}, len(indices))


def _uniform(columns: StatColumns) -> bool:
    """Whether every run holds each feature's stat in one shape, so that the runs' arrays join."""
    first = {key: values.shape[1:] for key, values in columns.runs[0][1].items()}
    return all(values.shape[1:] == first[key] for _, run in columns.runs[1:] for key, values in run.items())


def read_dataset_stats(root: Path) -> dict | None:
    path = root / STATS_PATH
    if not path.is_file():
        return None
    return stats_from_json(read_json(path), path)


def read(root: Path, info: Info, *, episode_stats: bool = True):
    """Episodes (in episode_index order), tasks and dataset stats of a v2.x dataset."""
    rows = sorted(read_jsonl(root / EPISODES_PATH, {"episode_index": int, "length": int}),
                  key=lambda r: r["episode_index"])
    per_episode = EpisodeStats(root, np.array([r["episode_index"] for r in rows], dtype=np.int64)) \
        if episode_stats else None
    episodes, cursor = [], 0
    for position, row in enumerate(rows):
        index, length = int(row["episode_index"]), int(row["length"])
        tasks = row.get("tasks") or []
        episodes.append(Episode(
            index=index, length=length, tasks=[tasks] if isinstance(tasks, str) else list(tasks),
            data_file=data_file(info, index), data_row=0, from_index=cursor,
            videos={key: VideoSpan(video_file(info, key, index), 0.0, length / info.fps)
                    for key in info.video_keys} if info.video_keys else NO_VIDEOS,
            stats=StatsRow(per_episode, position) if per_episode else {}, source=EPISODES_PATH))
        cursor += length
    return episodes, read_tasks(root), read_dataset_stats(root)


def derived_totals(info: Info, episodes: list[Episode]) -> dict[str, int]:
    """The info.json totals v2.x derives from the episodes: total_videos and total_chunks."""
    return {"total_videos": len(episodes) * len(info.video_keys),
            "total_chunks": max((e.index for e in episodes), default=-1) // info.chunks_size + 1}


def write_meta(root: Path, info: Info, episodes: list[Episode], tasks: list[str], stats: dict | None) -> None:
    """Write info.json and the jsonl files for episodes that are already on disk."""
    info.describe(VERSION, DATA_PATH, VIDEO_PATH, episodes, len(tasks),
                  foreign=("data_files_size_in_mb", "video_files_size_in_mb"))
    info.write(root / "meta/info.json", INFO_ORDER, derived_totals(info, episodes))
    write_jsonl(root / EPISODES_PATH, [{"episode_index": e.index, "tasks": e.tasks, "length": e.length}
                                       for e in episodes])
    write_jsonl(root / TASKS_PATH, [{"task_index": i, "task": t} for i, t in enumerate(tasks)])
    write_stats(root, info, episodes, stats)


JSON_ROWS = 4096   # episodes whose stats lines `_json_rows` makes at a time


def _json_rows(columns: dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None]], n: int) -> Iterator[dict]:
    """The episodes' stats as `stats_to_json` gives each one's dict, from `stats_columns`: a column's rows listed
    at once, JSON_ROWS episodes at a time, no dict of arrays made for an episode and listed again (400 episodes of 302
    features: 3.9 s)."""
    for start in range(0, n, JSON_ROWS):
        stop = min(n, start + JSON_ROWS)
        rows: list[dict] = [{} for _ in range(stop - start)]
        for (feature, stat), (values, present) in columns.items():
            listed = values[start:stop].tolist()
            for i in range(stop - start) if present is None else np.flatnonzero(present[start:stop]).tolist():
                rows[i].setdefault(feature, {})[stat] = listed[i]
        yield from rows


def stats_files(root: Path) -> set[str]:
    """The files `write_stats` replaces."""
    return {EPISODES_STATS_PATH, STATS_PATH}


def write_stats(root: Path, info: Info, episodes: list[Episode], stats: dict | None) -> None:
    """Write episodes_stats.jsonl and, when given, dataset stats.json (v2.1 readers aggregate the former)."""
    columns = stats_columns(episodes)
    rows = map(stats_to_json, (e.stats for e in episodes)) if columns is None else _json_rows(columns, len(episodes))
    write_jsonl(root / EPISODES_STATS_PATH,
                ({"episode_index": e.index, "stats": row} for e, row in zip(episodes, rows)))
    if stats is not None:
        write_json(root / STATS_PATH, stats_to_json(stats))
