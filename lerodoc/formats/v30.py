"""LeRobot v3.0: many episodes per file, parquet metadata.

meta/info.json  meta/stats.json  meta/tasks.parquet  meta/episodes/chunk-{c:03d}/file-{f:03d}.parquet
data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet
videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4

Readers rely on position: row i of the concatenated episodes files is episode i, the `index` column is
the row position in the concatenated data files (sorted path order), and row k of tasks.parquet is
task_index k. Files roll over by size (data_files_size_in_mb, video_files_size_in_mb): file_index
counts up to chunks_size files per chunk, then chunk_index moves on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lerodoc.conventions import INFO_PATH
from lerodoc.errors import LerodocError
from lerodoc.formats.info import Info
from lerodoc.formats.jsonl import parse, read_json, replace_file, stats_from_json, stats_to_json, write_json
from lerodoc.formats.model import (NO_VIDEOS, STATS_FIX, Episode, StatsRow, StatsUnreadable, VideoSpan, column_order,
                                   reading_stats, stats_columns)
from lerodoc.formats.stats import StatsTable
from lerodoc.tables.parquet_io import (arrow_array, exact_cast, footer_schema, is_list_type, list_values, null_free,
                                      open_parquet, read_parquet, read_schema, regular_rows, to_numpy)

VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_META = "meta/episodes"   # where episodes are listed, with their stats (a folder of parquet files)
EPISODE_STATS_META = EPISODES_META
EPISODES_PATH = EPISODES_META + "/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_GLOB = EPISODES_META + "/*/*.parquet"
TASKS_PATH = "meta/tasks.parquet"
STATS_PATH = "meta/stats.json"
INFO_ORDER = ("codebase_version", "fps", "features", "total_episodes", "total_frames", "total_tasks",
              "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb", "data_path", "video_path",
              "robot_type", "splits")
_CHUNK_FILE = re.compile(r"chunk-(\d+)/file-(\d+)\.\w+$")


def data_file(chunk_index: int, file_index: int) -> str:
    return DATA_PATH.format(chunk_index=chunk_index, file_index=file_index)


def video_file(key: str, chunk_index: int, file_index: int) -> str:
    return VIDEO_PATH.format(video_key=key, chunk_index=chunk_index, file_index=file_index)


def next_file(chunk_index: int, file_index: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk, file) after this one: the one rollover rule every v3.0 writer uses."""
    return (chunk_index + 1, 0) if file_index + 1 >= chunks_size else (chunk_index, file_index + 1)


def chunk_file_of(path: str) -> tuple[int, int]:
    match = _CHUNK_FILE.search(path)
    if not match:
        raise LerodocError("path does not follow the chunk-XXX/file-YYY template", file=path)
    return int(match.group(1)), int(match.group(2))


def read_tasks(root: Path) -> list[str]:
    """Task strings by task_index. The text may be a column `task` (lerobot 0.6.1) or the pandas index
    (lerobot 0.4.x: `__index_level_0__`, unnamed in the pandas metadata); both are what lerobot reads. Only those
    two columns are read: the file is untrusted, and a column nobody reads is never decoded (a 1 KB file can hold
    10^8 dictionary-encoded values in one)."""
    path = root / TASKS_PATH
    if not path.is_file():
        raise LerodocError("file is missing", file=path)
    schema = read_schema(path)
    columns = _logical_columns(schema)
    text = columns.get("task")
    if text is None:
        unnamed = [c for name, c in columns.items() if name.startswith("__index_level_")
                   and (pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type))]
        text = unnamed[0] if len(unnamed) == 1 else None
    if "task_index" not in columns or text is None:
        raise LerodocError(f"needs the columns task_index and task (or the task strings as the pandas index); "
                           f"it has {', '.join(schema.names) or 'no columns'}", file=path)
    table = read_parquet(path, columns=[columns["task_index"], text])
    indices, texts = table[columns["task_index"]].to_pylist(), table[text].to_pylist()
    if any(not isinstance(i, int) for i in indices) or any(not isinstance(t, str) for t in texts):
        raise LerodocError("task_index must hold integers and task strings, with no nulls", file=path,
                           field="task_index")
    pairs = sorted(zip(indices, texts))
    if [i for i, _ in pairs] != list(range(len(pairs))):
        raise LerodocError(f"task_index values are not 0..{len(pairs) - 1}", file=path, field="task_index")
    return [t for _, t in pairs]


def _logical_columns(schema: pa.Schema) -> dict[str, str]:
    """Logical name -> parquet column. pandas stores a named index under its name and an unnamed one as
    `__index_level_N__`; its schema metadata maps one to the other."""
    columns = set(schema.names)   # a new list at each `schema.names`: asked once, not once an entry
    names = {c: c for c in schema.names}
    try:
        meta = parse((schema.metadata or {}).get(b"pandas", b"{}"), "its pandas metadata")   # bounded: crafted
        for entry in meta.get("columns") or []:
            field_name, name = entry.get("field_name"), entry.get("name")
            if field_name in columns and isinstance(name, str) and name not in names:
                names[name] = field_name
    except (LerodocError, AttributeError, TypeError):
        pass   # unreadable pandas metadata: the column names are all there is
    return names


# the episodes metadata columns `read` uses, besides each camera's VIDEO_COLUMNS and the `stats/...` columns
EPISODE_COLUMNS = ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index")
VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")


def _read_table(path: Path, info: Info, stats: bool = True) -> pa.Table:
    """An episodes metadata file: the columns `read` uses (those of the cameras `info` declares), and its
    `stats/...` columns when `stats` (`StatsColumns` reads them when asked). Any other column is never decoded:
    the file is untrusted."""
    if not path.is_file():
        raise LerodocError("file is missing", file=path)
    used = set(EPISODE_COLUMNS) | {f"videos/{key}/{name}" for key in info.video_keys for name in VIDEO_COLUMNS}
    return read_parquet(path, columns=lambda c: c in used or stats and c.startswith("stats/"))


def _stats_table(path: Path) -> StatsTable:
    """`_episode_stats` of one episodes metadata file's `stats/...` columns. Columns that cannot be read as numbers
    (or a file whose stats pages cannot be decoded) are a StatsUnreadable naming the file; a read past the memory
    budget stays what it is."""
    with reading_stats(path):
        table = read_parquet(path, columns=lambda c: c.startswith("stats/"))
    try:
        return _episode_stats(table)
    except (KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise StatsUnreadable(f"stats columns are malformed ({type(exc).__name__}: {exc})", file=path,
                              hint=STATS_FIX) from None


class StatsColumns:
    """The per-episode stats of one episodes metadata file, read on first use: the `stats/...` columns are most of
    the file's bytes (a hub dataset's range reads) and most of the time of opening a dataset of many episodes; a
    command that needs no episode's stats (info, train's index, validate --no-stats) never reads them. Each
    episode's `stats` is a `StatsRow` of this holder until something reads or changes it."""

    def __init__(self, path: Path):
        self.path, self._table = path, None
        # past the stats budget (`Dataset._require_stats_shapes`): the table is let go after each `peek`, and what
        # the checks ask of it (which rows hold stats, whether it is normal, its layout) is kept instead
        self.transient = False
        # a source rewritten again (split's parts): its table, when within the budget (not transient), stays held
        # where a rewrite would let it go once its rows are copied (`Dataset.keep_stats`)
        self.keep = False
        self._with_stats: np.ndarray | None = None
        self._normal: list[tuple[dict, bool]] = []
        self._layout: dict | None = None
        self._finite: bool | None = None

    @property
    def table(self) -> StatsTable:
        if self._table is None:
            self._table = _stats_table(self.path)
        return self._table

    def release(self) -> None:
        """Let go of the table read (it is read again if asked for): a rewrite whose episodes no longer use it. A
        table kept (`keep`) within the budget stays."""
        if self.keep and not self.transient:
            return
        self._table = None

    def peek(self, ask: Callable[[StatsTable], object], features: dict | None = None):
        """`ask(table)`; a transient holder lets the table go again when it did not hold it before, having kept
        which rows hold stats, the columns' layout and whether the table is `normal` against `features` (what a
        rewrite asks of it later)."""
        held = self._table is not None
        table = self.table
        try:
            return ask(table)
        finally:
            if self._with_stats is None:
                self._with_stats = table.with_stats
                self._layout = {key: (c.shape[1:], c.dtype) for key, c in table.columns.items()} \
                    if table.regular else None
            if features is not None and not any(known is features or known == features for known, _ in self._normal):
                self._normal.append((features, table.normal(features)))
            if self.transient and not held:
                self.release()

    @property
    def with_stats(self) -> np.ndarray:
        """`StatsTable.with_stats`, kept across a release."""
        if self._with_stats is None:
            self.peek(lambda table: None)
        return self._with_stats

    def layout(self) -> dict[tuple[str, str], tuple[tuple, np.dtype]] | None:
        """(feature, stat) -> (a row's shape, dtype) when every row holds every stat alike (`StatsTable.regular`);
        else None. Kept across a release."""
        if self._with_stats is None:
            self.peek(lambda table: None)
        return self._layout

    def clean(self, features: dict) -> bool:
        """`StatsTable.normal` against `features` and `StatsTable.finite`, both kept across a release, and asked
        of one read of the table when neither is known: a transient table (a million episodes' stats, gigabytes)
        was read once for each."""
        normal = next((answer for known, answer in self._normal if known is features or known == features), None)
        if normal is None or self._finite is None:
            def ask(table) -> bool:
                if self._finite is None:
                    self._finite = bool(table.finite)
                return table.normal(features)
            normal = self.peek(ask, features)
        return normal and self._finite

    def normal(self, features: dict) -> bool:
        """`StatsTable.normal`, kept per `features` (equal ones: a merge reconciles its own) across a release."""
        for known, answer in self._normal:
            if known is features or known == features:
                return answer
        answer = self.peek(lambda table: table.normal(features))
        self._normal.append((features, answer))
        return answer

    def features(self) -> set[str]:
        """The features its `stats/<feature>/<stat>` columns name: the table's when held, else the footer's alone (no
        value read)."""
        if self._table is not None:
            return {feature for feature, _ in self._table.columns}
        names = footer_schema(open_parquet(self.path).metadata).to_arrow_schema().names
        return {n[len("stats/"):].rsplit("/", 1)[0] for n in names if n.startswith("stats/")}

    def full_keys(self) -> list[tuple[str, str]] | None:
        """The (feature, stat) columns every row holds a value of, in the table's order, from the footer alone (no
        value read), when the footer says no column holds a null; else None (the table then tells)."""
        if self._table is not None:
            return self._table.full_keys()
        try:
            meta = open_parquet(self.path).metadata
            names = [n for n in footer_schema(meta).to_arrow_schema().names if n.startswith("stats/")]
            free = null_free(meta)
        except (LerodocError, OSError, pa.ArrowException, ValueError):
            return None
        if any(n not in free for n in names):
            return None
        keys = [tuple(n[len("stats/"):].rsplit("/", 1)) for n in names]
        order = list(dict.fromkeys(feature for feature, _ in keys))   # feature by feature, as `_episode_stats`
        return sorted(keys, key=lambda key: order.index(key[0]))


def _episode_stats(table: pa.Table) -> StatsTable:
    """Per-row stats from the `stats/<feature>/<stat>` columns, each column converted in one go: a regular column
    (every row one shape, no null) stays one array; any other becomes a list of arrays, None where a row has no
    value. A count is (1,) per row, and so is a scalar stat."""
    columns: dict[tuple[str, str], np.ndarray | list] = {}
    for column in table.column_names:
        if not column.startswith("stats/"):
            continue
        feature, name = column[len("stats/"):].rsplit("/", 1)
        dtype = np.int64 if name == "count" else np.float64
        if name == "count":
            _whole_counts(table.column(column), column)
        regular = regular_rows(table.column(column), dtype)   # the common case, without Python lists
        if regular is not None:
            columns[feature, name] = regular.reshape(len(regular), -1) if name == "count" or regular.ndim == 1 \
                else regular
            continue
        values = table.column(column).to_pylist()
        try:
            rows = list(np.array(values, dtype=dtype).reshape(len(values), -1) if name == "count"
                        else np.array(values, dtype=dtype))
        except (ValueError, TypeError):   # ragged or missing values: convert one by one
            rows = [None if v is None else _numbers(v, dtype, column, row) for row, v in enumerate(values)]
        columns[feature, name] = [None if v is None else np.atleast_1d(v) for v in rows]
    by_feature: dict[str, list] = {}   # feature by feature, as an episode's dict lists them
    for (feature, name), values in columns.items():
        by_feature.setdefault(feature, []).append(((feature, name), values))
    return StatsTable({key: values for pairs in by_feature.values() for key, values in pairs}, table.num_rows)


def _numbers(value, dtype, column: str, row: int) -> np.ndarray:
    """One row's stat as numbers; a ValueError naming the column and row where it holds none (text, say)."""
    try:
        return np.asarray(value, dtype=dtype)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{column} row {row}: {exc}") from None


def _whole_counts(column: pa.ChunkedArray, name: str) -> None:
    """A count stored as floats must hold whole numbers (a ValueError naming the first value that does not): NaN
    or 2.5 frames cast to an integer would become a number nobody wrote (`exact_cast`)."""
    values = column.combine_chunks()
    while is_list_type(values.type):
        values = list_values(values)
    if not pa.types.is_floating(values.type):
        return
    numbers = np.array([v for v in values.to_pylist() if v is not None], dtype=np.float64) if values.null_count \
        else to_numpy(values).astype(np.float64)   # a null is a missing count, which the checks name apart
    wrong = ~exact_cast(numbers, np.int64)
    if wrong.any():
        raise ValueError(f"{name} holds {numbers[wrong][0].item()!r}, where a count is a whole number of frames")


def stats_held(root: Path) -> dict[str, set[str]] | None:
    """Per feature, the stats every episode's row holds, from the episodes metadata footers alone: a
    `stats/<feature>/<stat>` column in every file, without a null in any row group (`StatsColumns` gives a row a
    stat exactly when its value is not null). None when the footers cannot tell (a null, or no statistics)."""
    held: dict[str, set[str]] | None = None
    for path in sorted(root.glob(EPISODES_GLOB)):
        meta = open_parquet(path).metadata
        names = [n for n in footer_schema(meta).to_arrow_schema().names if n.startswith("stats/")]
        free = null_free(meta)
        if any(n not in free for n in names):
            return None
        here: dict[str, set[str]] = {}
        for name in names:
            feature, stat = name[len("stats/"):].rsplit("/", 1)
            here.setdefault(feature, set()).add(stat)
        held = here if held is None else {f: held.get(f, set()) & s for f, s in here.items()}
    return held


def _task_lists(table: pa.Table) -> list[list]:
    """Each row's `tasks` as a list of its own (empty where null or absent), every distinct text one str shared by the
    rows that list it: a million episodes' texts as one object each made 1M strings of about 100 bytes. (From the
    list's offsets and values: `flatten` and `dictionary_encode` import pyarrow.compute, which costs every command.)"""
    if "tasks" not in table.column_names:
        return [[] for _ in range(table.num_rows)]
    column = table.column("tasks").combine_chunks()
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)) \
            or not pa.types.is_string(column.type.value_type) or column.null_count:
        return [list(v or []) for v in column.to_pylist()]   # a null row may hide values: row by row
    offsets = to_numpy(column.offsets)
    values = column.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))   # the rows' own values
    if values.null_count:
        return [list(v or []) for v in column.to_pylist()]
    shared: dict[str, str] = {}
    texts = [shared.setdefault(text, text) for text in values.to_pylist()]
    if len(texts) == table.num_rows and (np.diff(offsets) == 1).all():   # a task a row, as lerobot records them:
        # one list a distinct text, without a slice and a tuple a row
        alone = {text: [text] for text in shared}
        return [alone[text] for text in texts]
    ends = (offsets[1:] - offsets[0]).tolist()
    # rows that list the same tasks share one list (nothing changes an episode's list in place): a list per row is
    # 64 bytes an episode, most of them alike
    lists: dict[tuple[str, ...], list[str]] = {}
    return [lists.setdefault(tuple(texts[a:b]), texts[a:b]) for a, b in zip([0] + ends[:-1], ends)]


def _whole_columns(tables: list[pa.Table], names: list[str], video_keys: list[str], data_path: str, video_path: str,
                   row_stats: list, sources: list[str]) -> list[Episode] | None:
    """`read`'s episodes made column by column, where every pointer and count is an integer column and every
    window a number column, with no null: each file's path made once, no dict per row. None otherwise (`read`
    then reads row by row, and names the first row it cannot read)."""
    def numbers(t: pa.Table, name: str) -> bool:
        kind = t.schema.field(name).type
        return pa.types.is_integer(kind) or name.endswith("timestamp") and pa.types.is_floating(kind)
    if not all(name in t.column_names and not t.column(name).null_count and numbers(t, name)
               for t in tables for name in names):
        return None
    column = {name: np.concatenate([to_numpy(t.column(name).combine_chunks()) for t in tables]) for name in names}
    tasks = [v for t in tables for v in _task_lists(t)]

    def files(template: str, chunks: np.ndarray, numbers: np.ndarray, **key) -> tuple[list[str], np.ndarray]:
        """Each row's file path, one string per distinct path, and each row's path as a number (int64). The rows
        of a file come in runs: a path is made once a run where there are few (np.unique of a million rows' pairs
        took 0.67 s)."""
        if not len(chunks):
            return [], np.empty(0, dtype=np.int64)
        runs = np.flatnonzero((chunks[1:] != chunks[:-1]) | (numbers[1:] != numbers[:-1])) + 1
        if len(runs) < RUNS_NAMED:
            starts = np.r_[0, runs]
            pairs = zip(chunks[starts].tolist(), numbers[starts].tolist())
            repeats = np.diff(np.r_[starts, len(chunks)])
        else:
            unique, inverse = np.unique(np.stack([chunks, numbers], axis=1), axis=0, return_inverse=True)
            pairs, repeats = unique.tolist(), None
        named: dict[str, int] = {}   # two pairs a template formats alike are one file
        codes = np.array([named.setdefault(template.format(chunk_index=c, file_index=f, **key), len(named))
                          for c, f in pairs], dtype=np.int64)
        which = np.repeat(codes, repeats) if repeats is not None else codes[inverse.reshape(-1)]
        paths = list(named)
        return [paths[k] for k in which.tolist()], which
    data, data_which = files(data_path, column["data/chunk_index"], column["data/file_index"])
    # an episode's first row inside its data file: its dataset_from_index past that of the file's first listed
    starts = column["dataset_from_index"]
    if starts.dtype.kind == "u":   # as signed, so that a file's episodes listed out of row order get the negative
        # first rows the row reading gives them (Python ints); past int64, left to it
        if len(starts) and int(starts.max()) > np.iinfo(np.int64).max:
            return None
        starts = starts.astype(np.int64)
    first = np.unique(data_which, return_index=True)[1]   # every path's number occurs: first[k] is path k's
    rows = starts - starts[first][data_which]
    spans = [list(map(VideoSpan, files(video_path, column[f"videos/{key}/chunk_index"],
                                       column[f"videos/{key}/file_index"], video_key=key)[0],
                      column[f"videos/{key}/from_timestamp"].astype(float).tolist(),
                      column[f"videos/{key}/to_timestamp"].astype(float).tolist())) for key in video_keys]
    videos = [dict(zip(video_keys, row)) for row in zip(*spans)] if spans else [NO_VIDEOS] * len(sources)
    return list(map(Episode, column["episode_index"].tolist(), column["length"].tolist(), tasks, data,
                    rows.tolist(), starts.tolist(), videos, row_stats, sources))


RUNS_NAMED = 4096   # runs of one file's rows up to which `_whole_columns` names each run's file, not each distinct pair


def read(root: Path, info: Info):
    """Episodes, tasks and dataset stats of a v3.0 dataset."""
    files = sorted(root.glob(EPISODES_GLOB))
    if not files:
        raise LerodocError("no episodes metadata files", file=root / EPISODES_META)
    tables = [_read_table(f, info, stats=False) for f in files]
    sources = [name for f, t in zip(files, tables) for name in [f.relative_to(root).as_posix()] * t.num_rows]
    row_stats = [StatsRow(holder, i) for f, t in zip(files, tables) for holder in [StatsColumns(f)]
                 for i in range(t.num_rows)]
    video_keys, data_files, video_files = info.video_keys, {}, {}   # a file's path made once per file
    data_path, video_path = info.data_path or DATA_PATH, info.video_path or VIDEO_PATH

    def episode(position: int, value: Callable[[str], object], tasks) -> Episode:
        """Row `position`, whose column `name` holds value(name), as an Episode (KeyError, TypeError or ValueError
        where a value is missing or of the wrong kind, in the order the row is read)."""
        index = int(value("episode_index"))
        where = (int(value("data/chunk_index")), int(value("data/file_index")))
        videos = {} if video_keys else NO_VIDEOS
        for key in video_keys:
            at = (key, int(value(f"videos/{key}/chunk_index")), int(value(f"videos/{key}/file_index")))
            if at not in video_files:
                video_files[at] = video_path.format(video_key=key, chunk_index=at[1], file_index=at[2])
            videos[key] = VideoSpan(video_files[at], float(value(f"videos/{key}/from_timestamp")),
                                    float(value(f"videos/{key}/to_timestamp")))
        if where not in data_files:
            data_files[where] = data_path.format(chunk_index=where[0], file_index=where[1])
        return Episode(index=index, length=int(value("length")), tasks=list(tasks or []), data_file=data_files[where],
                       data_row=0, from_index=int(value("dataset_from_index")), videos=videos,
                       stats=row_stats[position], source=sources[position])

    names = ["episode_index", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
             *(f"videos/{key}/{name}" for key in video_keys for name in VIDEO_COLUMNS)]
    try:
        episodes = _whole_columns(tables, names, video_keys, data_path, video_path, row_stats, sources)
    except (KeyError, IndexError, TypeError, ValueError):   # e.g. a path template asking for more: named below
        episodes = None
    if episodes is None:   # row by row, each episode's first row inside its data file set after
        episodes = []
        for position, row in enumerate(row for t in tables for row in t.to_pylist()):
            try:
                episodes.append(episode(position, row.__getitem__, row.get("tasks")))
            except (KeyError, TypeError, ValueError) as exc:
                camera = next((k for k in info.video_keys if isinstance(exc, KeyError) and str(exc.args[0])
                               .startswith(f"videos/{k}/")), None)   # a camera the episodes metadata does not know
                because = f" (meta/info.json declares {camera!r} a video feature)" if camera else ""
                raise LerodocError(f"episodes metadata row {position} lacks or mistypes {exc}{because}",
                                   file=root / sources[position], episode=row.get("episode_index")) from None
        first_row: dict[str, int] = {}
        for ep in episodes:
            first_row.setdefault(ep.data_file, ep.from_index)
            ep.data_row = ep.from_index - first_row[ep.data_file]
    stats_path = root / STATS_PATH
    stats = stats_from_json(read_json(stats_path), stats_path) if stats_path.is_file() else None
    return episodes, read_tasks(root), stats


def _stream_column(values: np.ndarray | tuple[np.ndarray, np.ndarray]) -> pa.Array:
    """A stream's stats column for a slice: its rows, or (rows, which of them hold a value) where some hold none."""
    return arrow_array(values[0], present=values[1]) if isinstance(values, tuple) else arrow_array(values)


def _stats_columns(episodes: list[Episode]) -> dict[str, pa.Array]:
    """The episodes table's `stats/<feature>/<stat>` columns, in the order the episodes' dicts first name them (a
    stat no episode holds has none): from the stats' own tables where every episode's stats are still an unread
    row (`stats_columns`, whose old tables are let go once copied: read again if asked), else gathered from each
    episode's dict."""
    columns = stats_columns(episodes, release=True)
    if columns is not None:
        return {f"stats/{feature}/{stat}": arrow_array(columns[feature, stat][0], present=columns[feature, stat][1])
                for feature, stat in column_order({key: present for key, (_, present) in columns.items()})}
    names = list(dict.fromkeys(f"stats/{feat}/{stat}" for ep in episodes
                               for feat, by_stat in ep.stats.items() for stat in by_stat))
    out = {}
    for name in names:
        feature, stat = name[len("stats/"):].rsplit("/", 1)
        out[name] = arrow_array([np.asarray(ep.stats[feature][stat])
                                 if stat in ep.stats.get(feature, {}) else None for ep in episodes])
    return out


def write_meta(root: Path, info: Info, episodes: list[Episode], tasks: list[str],
               stats: dict | Callable[[], dict] | None, *, stream=None) -> None:
    """Write info.json, tasks.parquet, the episodes parquet and stats.json for files already on disk (`write_stats`:
    `stats` may be a function called once the episodes files are written, the stats columns a `stream`'s)."""
    info.describe(VERSION, DATA_PATH, VIDEO_PATH, episodes, len(tasks), foreign=("total_videos", "total_chunks"))
    info.write(root / INFO_PATH, INFO_ORDER)

    tasks_table = pa.table({"task_index": arrow_array(range(len(tasks)), pa.int64()),
                            "task": arrow_array(tasks, pa.string())})
    pandas_meta = {"index_columns": ["task"], "column_indexes": [], "columns": [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
         "metadata": None},
        {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
         "metadata": None}], "creator": {"library": "lerodoc"}, "pandas_version": "2.2.0"}
    tasks_table = tasks_table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    (root / "meta").mkdir(parents=True, exist_ok=True)
    replace_file(root / TASKS_PATH, lambda tmp: pq.write_table(tasks_table, tmp))

    write_stats(root, info, episodes, stats, stream=stream)


def stats_files(root: Path) -> set[str]:
    """The files `write_stats` replaces."""
    return {p.relative_to(root).as_posix() for p in root.glob(EPISODES_GLOB)} | {STATS_PATH}


EPISODES_FILE_MB = 100   # the most an episodes metadata file holds, in MiB of Arrow columns (lerobot's data default)


def _episodes_files(nbytes: int, rows: int, info: Info) -> list[tuple[int, int, int]]:
    """(rows, chunk, file) of each episodes metadata file for a table of `rows` rows and `nbytes` Arrow bytes: rows in
    order, at most `info.data_files_size_in_mb` (and EPISODES_FILE_MB) MiB a file, so that no file decodes past a
    reader's budget, in files of about as many rows each (`write_stats` writes two at once); chunk and file numbered
    as the data files roll over (`next_file`). At least one file."""
    cap = min(max(1, info.data_files_size_in_mb), EPISODES_FILE_MB) * (1 << 20)
    per_file = max(1, int(cap * rows // max(nbytes, 1)))
    if rows:   # as many files as the cap needs, their rows evened out
        count = -(-rows // per_file)
        per_file = -(-rows // count)
    out, chunk, file = [], 0, 0
    for first in range(0, max(rows, 1), per_file):
        out.append((min(per_file, rows - first), chunk, file))
        chunk, file = next_file(chunk, file, info.chunks_size)
    return out


def _write_episodes_file(path: Path, part: pa.Table) -> None:
    """Dictionary encoding only where values repeat (tasks): tried on every stats column, whose values do not, it
    doubled the write's time and grew the file. The float stats are BYTE_STREAM_SPLIT, as Parquet offers floats of
    little repetition: at 20,000 episodes 0.15 s against 0.21 s to write, 35 MB against 40 MB, and 20% less time to
    read. Only the floats: readers before pyarrow 17 cannot decode split integers. Both options take leaf paths
    (`tasks.list.element`): pyarrow ignores a list column's own name without a word."""
    split = {f"{name}.list.element": "BYTE_STREAM_SPLIT" for name, kind in zip(part.column_names, part.schema.types)
             if pa.types.is_list(kind) and pa.types.is_floating(kind.value_type)}
    replace_file(path, lambda tmp: pq.write_table(part, tmp, use_dictionary=["tasks.list.element"],
                                                  column_encoding=split))


def write_stats(root: Path, info: Info, episodes: list[Episode], stats: dict | Callable[[], dict] | None, *,
                stream=None) -> None:
    """Write the episodes table (per-episode stats live there), in files of at most EPISODES_FILE_MB MiB
    (`_episodes_files`), and stats.json (`stats`, or what a function gives once the episodes files are written).
    With a `stream` (`ops.stats.StatsStream`) the stats columns are its rows, not the episodes' own, taken file by
    file: only one file's stats are held at a time."""
    n = len(episodes)
    where = {path: chunk_file_of(path) for path in dict.fromkeys(
        [e.data_file for e in episodes] + [s.file for e in episodes for s in e.videos.values()])}   # once a file
    # each column's Python list made and let go in turn (a million episodes' lists are 100 MB or more apiece)
    arrays: dict[str, pa.Array] = {
        "episode_index": arrow_array([e.index for e in episodes]),
        "tasks": arrow_array([e.tasks for e in episodes], pa.list_(pa.string())),
        "length": arrow_array([e.length for e in episodes]),
        "data/chunk_index": arrow_array([where[e.data_file][0] for e in episodes]),
        "data/file_index": arrow_array([where[e.data_file][1] for e in episodes]),
        "dataset_from_index": arrow_array([e.from_index for e in episodes]),
        "dataset_to_index": arrow_array([e.to_index for e in episodes]),
    }
    for key in info.video_keys:
        spans = [e.videos[key] for e in episodes]
        arrays[f"videos/{key}/chunk_index"] = arrow_array([where[s.file][0] for s in spans])
        arrays[f"videos/{key}/file_index"] = arrow_array([where[s.file][1] for s in spans])
        arrays[f"videos/{key}/from_timestamp"] = arrow_array([s.from_timestamp for s in spans], pa.float64())
        arrays[f"videos/{key}/to_timestamp"] = arrow_array([s.to_timestamp for s in spans], pa.float64())
        spans = None
    if stream is None:
        arrays.update(_stats_columns(episodes))
        nbytes = sum(a.nbytes for a in arrays.values())
    else:   # the stream counts its columns' Arrow bytes without making them
        nbytes = sum(a.nbytes for a in arrays.values()) + stream.nbytes(
            lambda values, present: arrow_array(values, present=present).nbytes)
    files = _episodes_files(nbytes + 16 * n, n, info)   # and the two int64 below
    counts, chunks, numbers = zip(*files)
    tail = {"meta/episodes/chunk_index": arrow_array(np.repeat(chunks, counts)),
            "meta/episodes/file_index": arrow_array(np.repeat(numbers, counts))}
    table, first = pa.table({**arrays, **tail}) if stream is None else None, 0
    # files are written in threads: pyarrow's writer lets go of the GIL, and a million episodes' metadata is about
    # 2 GB of parquet. A whole table's files (slices of it), two at a time; a stream's, one while the next one's rows
    # are computed, so that only two files' rows are held
    threads = 1 if stream is not None else min(2, len(files))
    with ThreadPoolExecutor(threads) as writer:
        pending: list = []
        for rows, chunk, file in files:
            path = root / EPISODES_PATH.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            if stream is None:
                part = table.slice(first, rows)
            else:
                part = pa.table({**{name: a.slice(first, rows) for name, a in arrays.items()},
                                 **{f"stats/{feature}/{stat}": _stream_column(values)
                                    for (feature, stat), values in stream.rows(first, first + rows).items()},
                                 **{name: a.slice(first, rows) for name, a in tail.items()}})
            while len(pending) >= threads:
                pending.pop(0).result()   # at most `threads` files in flight, their errors raised here, in order
            pending.append(writer.submit(_write_episodes_file, path, part))
            first += rows
            part = None
        for done in pending:
            done.result()
    stats = stats() if callable(stats) else stats   # a function may give None too: no stats.json
    if stats is not None:
        write_json(root / STATS_PATH, stats_to_json(stats))
