"""The in-memory records every format module reads into and writes from, the same for every version."""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import numpy as np

from lerodoc.budget import BudgetExceeded, give_back
from lerodoc.errors import LerodocError
from lerodoc.formats.stats import StatsTable
from lerodoc.tables.stats import BASIC, EpisodeStacks, Stats, aggregate, basic_columns, stack_partials, stack_stats


@dataclass(frozen=True)
class VideoSpan:
    """Where one episode of one camera lives: a file and its [from, to) window in seconds."""
    file: str
    from_timestamp: float
    to_timestamp: float


class _NoVideos(dict):
    """The videos of an episode without cameras: one empty mapping every such episode shares (an empty dict of its
    own was 64 bytes an episode). It refuses changes: an episode's videos are replaced, never changed in place."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("an episode's videos are replaced (ep.videos = {...}), never changed in place")

    __setitem__ = __delitem__ = __ior__ = update = setdefault = pop = popitem = clear = _refuse

    def __reduce__(self):   # a worker process's copy is its own NO_VIDEOS too
        return _no_videos, ()


NO_VIDEOS = _NoVideos()


def _no_videos() -> _NoVideos:
    return NO_VIDEOS


class StatsRow:
    """An episode's stats while nobody has read them: row `position` of a `StatsTable`, or of a holder's (an object
    whose `table` reads it on first use). Calling it gives the row's dict (a fresh one each time, so two episodes
    that share a row never share a dict)."""
    __slots__ = ("holder", "position")

    def __init__(self, holder, position: int):
        self.holder, self.position = holder, position

    @property
    def table(self) -> StatsTable:
        return self.holder if isinstance(self.holder, StatsTable) else self.holder.table

    def __call__(self) -> dict:
        return self.table.row(self.position)


@dataclass(slots=True, init=False, eq=False)
class Episode:
    """Where one episode's rows and video spans are, plus its tasks and per-episode stats.

    `stats` may be given as a function instead of a dict (an unread table row: `StatsRow`). It is called the first
    time the stats are read, and its dict kept: v3.0 reads the stats columns of the episodes metadata, most of its
    bytes, only when a command asks for an episode's stats (`formats.v30.read`). Slots, not a dict: a command holds a
    million episodes at once (a merge of two copies, two million), 113 bytes each instead of 161 (tracemalloc,
    `Dataset.open` of 20,000). `__init__` gives the defaults (no cameras: NO_VIDEOS; no stats: {})."""
    index: int
    length: int
    tasks: list[str]
    data_file: str              # relative to the dataset root
    data_row: int               # first row of the episode inside data_file
    from_index: int             # dataset_from_index: global row of the first frame
    videos: dict[str, VideoSpan]   # NO_VIDEOS: none, shared
    _stats: Stats | Callable[[], Stats] = field(init=False, repr=False)   # `stats`
    source: str | None          # the metadata file that lists the episode (relative), where its pointers are held

    def __init__(self, index: int, length: int, tasks: list[str], data_file: str, data_row: int, from_index: int,
                 videos: dict[str, VideoSpan] | None = None, stats=None, source: str | None = None):
        self.index, self.length, self.tasks, self.data_file = index, length, tasks, data_file
        self.data_row, self.from_index, self.source = data_row, from_index, source
        self.videos = NO_VIDEOS if videos is None else videos
        self.stats = stats

    @property
    def stats(self) -> Stats:
        """A dict (feature -> stat -> values), read from its function on first use."""
        value = self._stats
        if callable(value):
            value = self._stats = value()
        return value

    @stats.setter
    def stats(self, value) -> None:
        self._stats = {} if value is None else value

    def __eq__(self, other) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()   # as a dataclass compares: its fields in order, as read

    def _compared(self) -> tuple:
        return tuple(self.stats if f.name == "_stats" else getattr(self, f.name) for f in fields(self))

    def __getstate__(self) -> dict:   # to a worker process: the stats themselves, not the reader that gives them
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "_stats"}, "_stats": self.stats}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    @property
    def to_index(self) -> int:
        return self.from_index + self.length

    def relocated(self, data_file: str, data_row: int, length: int) -> "Episode":
        """A new Episode of these rows, the rest as this one's (stats: `shared_stats`). The constructor itself:
        `dataclasses.replace` of 200,000 episodes took 0.35 s, this 0.08 s."""
        return Episode(self.index, length, self.tasks, data_file, data_row, self.from_index, self.videos,
                       shared_stats(self), self.source)


def episode_column(episodes: list[Episode], name: str) -> np.ndarray:
    """One integer attribute of every episode (index, length, from_index, ...) as an int64 array: a million
    episodes' tuples or lists of Python ints were hundreds of MB."""
    return np.fromiter((getattr(ep, name) for ep in episodes), dtype=np.int64, count=len(episodes))


STATS_FIX = "lerodoc repair recomputes the stats"


class StatsUnreadable(LerodocError):
    """A table of per-episode stats (v3.0's `stats/...` columns of one episodes metadata file, v2.x's
    episodes_stats.jsonl) whose values cannot be read as the numbers they must be: named by its `file`, which is
    its holder's `path`. Every command that needs the values stops on it; validate names it (STA003) and checks
    the episodes as holding no stats (`forget_stats`), and repair recomputes what it held."""


@contextmanager
def reading_stats(file: object):
    """Around the read of a table of per-episode stats from `file`: what the reader refuses (a LerodocError)
    becomes a StatsUnreadable naming the file, with the fix; a read past the memory budget stays what it is (the
    file may be fine, and the budget can be raised)."""
    try:
        yield
    except (StatsUnreadable, BudgetExceeded):
        raise
    except LerodocError as exc:
        raise StatsUnreadable(exc.message, file=exc.file or file, episode=exc.episode, field=exc.field,
                              hint=STATS_FIX) from None


def forget_stats(episodes: list[Episode], file: str) -> int:
    """Give each episode whose stats are an unread row of the table read from `file` (`StatsUnreadable.file`: its
    holder's `path`) no stats instead: what cannot be read is not held. How many episodes that was."""
    empty, forgotten = None, 0
    for position, ep in enumerate(episodes):
        row = stats_row(ep)
        if row is not None and str(getattr(row.holder, "path", "")) == file:
            if empty is None:
                empty = StatsTable({}, len(episodes))
            ep.stats = StatsRow(empty, position)
            forgotten += 1
    return forgotten


def stats_row(ep: Episode) -> StatsRow | None:
    """The episode's stats as an unread table row, or None once they are a dict (read, set or changed)."""
    value = getattr(ep, "_stats", None)
    return value if isinstance(value, StatsRow) else None


def stats_holders(episodes) -> dict:
    """The holders (id -> holder) of the episodes' stats that are still unread table rows, in the order their rows
    first come."""
    return {id(row.holder): row.holder for row in map(stats_row, episodes) if row is not None}


def stats_named(episodes) -> set[str]:
    """The features the episodes' stats columns name, without reading a value: an unread row's holder's from its
    footer (`formats.v30.StatsColumns.features`) or its table's columns, a read row's dict keys. A superset of
    `stats_features`, which reads the tables to leave out columns that hold no value in the episodes' rows."""
    out: set[str] = set()
    for holder in stats_holders(episodes).values():
        out |= holder.features() if hasattr(holder, "features") else \
            {feature for feature, _ in (holder if isinstance(holder, StatsTable) else holder.table).columns}
    for ep in episodes:
        if stats_row(ep) is None:
            out.update(ep.stats)
    return out


def union_layout(holders) -> tuple[dict[tuple[str, str], tuple[tuple, np.dtype]], list[set]] | None:
    """The layout of every (feature, stat) any holder's table holds, in the order `stats_columns` gives them (the
    holders in the order given, each one's stats in its table's order), and the stats each holder's table lacks;
    when every holder has a layout (`formats.v30.StatsColumns.layout`: every row of its table holds every stat
    alike) and a stat has one shape and type in every table that holds it.
    Else None."""
    layouts = [holder.layout() if hasattr(holder, "layout") else None for holder in holders]
    if not layouts or any(layout is None for layout in layouts):
        return None
    union: dict[tuple[str, str], tuple[tuple, np.dtype]] = {}
    for layout in layouts:
        for key, kind in layout.items():
            if union.setdefault(key, kind) != kind:
                return None
    return union, [set(union) - set(layout) for layout in layouts]


def column_order(presence: Mapping[tuple[str, str], np.ndarray | None]) -> list[tuple[str, str]]:
    """The episodes table's stats columns in the order the writer places them: by the first row that holds a value
    (row 0 for a column every row holds: `present` None), ties in `presence`'s order; a column no row holds is left
    out."""
    first = {key: (0 if present is None else int(np.argmax(present)), rank)
             for rank, (key, present) in enumerate(presence.items()) if present is None or present.any()}
    return sorted(first, key=first.get)


def shared_stats(ep: Episode):
    """What a new Episode made from `ep` holds as its stats: the same unread row, else a copy of the dict."""
    return stats_row(ep) or dict(ep.stats)


def has_stats(ep: Episode) -> bool:
    """Whether the episode has any stats, without reading an unread row's dict."""
    row = stats_row(ep)
    return bool(ep.stats) if row is None else bool(_holding(row)[row.position])


def _unread_rows(episodes: list[Episode]) -> tuple[list[int], list[tuple[StatsRow, list[int], list[int]]]]:
    """The positions in `episodes` of those whose stats are a dict (read, set or changed), and those whose stats
    are unread rows, grouped by holder: (one of its rows, their positions in `episodes`, their rows in its table)."""
    read: list[int] = []
    by_holder: dict[int, tuple[StatsRow, list[int], list[int]]] = {}
    for i, ep in enumerate(episodes):
        row = stats_row(ep)
        if row is None:
            read.append(i)
        else:
            _, where, positions = by_holder.setdefault(id(row.holder), (row, [], []))
            where.append(i)
            positions.append(row.position)
    return read, list(by_holder.values())


def _holder_keys(episodes: list[Episode]) -> list[list[tuple[str, str]]] | None:
    """Each table's (feature, stat) keys that every row of it holds, the tables in the order their rows first come,
    when every episode's stats are an unread row of one that can tell (from its file's footers: `full_keys`); else
    None (v2.x's jsonl holders cannot tell)."""
    rows = [stats_row(ep) for ep in episodes]
    if not rows or any(r is None for r in rows):
        return None
    keys = [holder.full_keys() if hasattr(holder, "full_keys") else None
            for holder in {id(r.holder): r.holder for r in rows}.values()]
    return None if any(own is None for own in keys) else keys


def _replaced_keys(episodes: list[Episode], features: set[str]) -> list[tuple[str, str]] | None:
    """The (feature, stat) keys `stats_columns` would give the episodes, when every episode's stats are an unread row
    of a table whose every row holds every stat, and every feature is among `features` (an update that replaces
    them all then reads no old value): known without reading a value where a holder can tell from its file
    (`_holder_keys`). None otherwise."""
    tables = _holder_keys(episodes)
    if tables is None or any(feature not in features for own in tables for feature, _ in own):
        return None
    return list(dict.fromkeys(key for own in tables for key in own))


def shared_keys(episodes: list[Episode]) -> list[tuple[str, str]] | None:
    """The (feature, stat) keys of every episode's stats, when each is an unread row of a table whose every row holds
    the same stats, in the same order, in every table (`_holder_keys`); else None."""
    tables = _holder_keys(episodes)
    return tables[0] if tables is not None and all(own == tables[0] for own in tables) else None


def stats_held(episodes: list[Episode]) -> np.ndarray:
    """`has_stats` of each episode, as one boolean array: an unread row asks its table once per table
    (`StatsTable.with_stats`), not once per episode."""
    out = np.empty(len(episodes), dtype=bool)
    read, unread = _unread_rows(episodes)
    for i in read:
        out[i] = bool(episodes[i].stats)
    for row, where, positions in unread:
        out[where] = _holding(row)[positions]
    return out


def features_held(episodes: list[Episode], features: list[str]) -> dict[str, np.ndarray]:
    """feature -> whether each episode's stats hold it (any stat of it), as one boolean array each: an unread row
    asks its table's columns once per table (`StatsTable.holding`), no dict made for an episode."""
    out = {feature: np.empty(len(episodes), dtype=bool) for feature in features}
    read, unread = _unread_rows(episodes)
    for i in read:
        stats = episodes[i].stats
        for feature in features:
            out[feature][i] = feature in stats
    for row, where, positions in unread:
        table, keys = row.table, {}
        for key in table.columns:
            keys.setdefault(key[0], []).append(key)
        for feature in features:
            held = np.zeros(table.rows, dtype=bool)
            for key in keys.get(feature, ()):
                held |= table.holding(key)
            out[feature][where] = held[positions]
    return out


def _holding(row: StatsRow) -> np.ndarray:
    """Which rows of a row's table hold stats: from its holder where the holder keeps that across letting its table
    go (`formats.v30.StatsColumns.with_stats`), else from the table."""
    return row.holder.with_stats if hasattr(row.holder, "with_stats") else row.table.with_stats


def number_tasks(texts: Sequence[str], numbering: dict[str, int], used: Container[int] | None = None
                 ) -> tuple[int, ...]:
    """Each text's task_index in the task list `numbering` holds (text -> task_index; the list is `list(numbering)`),
    a text it lacks added at its end: equal texts share the first one's number. -1 at a position not in `used`
    (when given), whose text is not added. One look-up a text: `list.index` scanned the list for each, and two
    sources of 20,000 tasks (an instruction an episode) took 14 s to merge their lists."""
    return tuple(numbering.setdefault(text, len(numbering)) if used is None or position in used else -1
                 for position, text in enumerate(texts))


def require_task_rows(values: np.ndarray, tasks: int, **where) -> None:
    """Every task_index in `values` a row of a task list of `tasks` texts (0 <= value < tasks); else a LerodocError
    naming the first that is not (`where`: its file, episode). A negative one would read a list from its end."""
    wrong = (values < 0) | (values >= tasks)
    if wrong.any():
        raise LerodocError(f"task_index {int(values[wrong][0])} has no task (the task list holds {tasks})",
                           field="task_index", hint="lerodoc validate names the rows (TSK001)", **where)


def stats_clean(row: StatsRow, features: dict) -> bool:
    """`StatsTable.normal` against `features` and `StatsTable.finite` of a row's table (nothing for repair to
    clean), asked of its holder where the holder keeps the answers across letting its table go
    (`formats.v30.StatsColumns.clean`, one read for both)."""
    if hasattr(row.holder, "clean"):
        return row.holder.clean(features)
    return row.table.normal(features) and row.table.finite


def stats_normal(row: StatsRow, features: dict) -> bool:
    """`StatsTable.normal` of a row's table, asked of its holder where the holder keeps the answer across letting
    its table go (`formats.v30.StatsColumns.normal`)."""
    return row.holder.normal(features) if hasattr(row.holder, "normal") else row.table.normal(features)


def normal_rows(episodes: list[Episode], features: dict) -> np.ndarray:
    """Which episodes' stats are an unread row of a table `stats_normal` against `features` (nothing to reshape or
    drop), as one boolean array: asked once per table, not once per episode."""
    out = np.zeros(len(episodes), dtype=bool)
    for row, where, _ in _unread_rows(episodes)[1]:
        out[where] = stats_normal(row, features)
    return out


def stats_features(episodes: list[Episode]) -> set[str]:
    """The features any of the episodes' stats name, without reading an unread row's dict: an unread row's table
    says, once per table, which of its columns the episodes' rows hold (`StatsTable.held_by`)."""
    read, unread = _unread_rows(episodes)
    out = {feature for i in read for feature in episodes[i].stats}
    for row, _, positions in unread:
        out.update(feature for feature, _ in row.table.held_by(np.array(positions, dtype=np.int64)))
    return out


def stats_columns(episodes: list[Episode], *, release: bool = False, only: set[str] | None = None
                  ) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None]] | None:
    """(feature, stat) -> (the episodes' values stacked (len(episodes), *shape), which rows hold one, or None when
    all do), taken from their tables' columns without a dict per episode, when every episode's stats are an unread
    row of a table of arrays and a stat has one shape and type in every table that holds it; else None. The stats
    come in the order the tables first name them, the tables in the order their rows first come. Where the episodes
    are one table's rows in order, the arrays are that table's own (read them, do not write them); where they are
    several tables' rows in order, each table's columns become views of the stacks (the same values, held once: a
    dataset's episodes metadata files). With `release`, a table's holder lets it go once its rows are copied
    (`_gathered`: a rewrite whose episodes are about to hold the stacks instead). `only`: those stats alone (the
    others are neither gathered nor compared)."""
    rows = [stats_row(ep) for ep in episodes]
    if not rows or any(r is None for r in rows):
        return None
    order: dict[int, int] = {}
    which = np.array([order.setdefault(id(r.holder), len(order)) for r in rows], dtype=np.int64)
    tables = [r.table for r in {id(r.holder): r for r in rows}.values()]   # in the order `order` numbers them
    if not all(t.arrays for t in tables):
        return None
    layout: dict[tuple[str, str], tuple] = {}
    for table in tables:
        for key, column in table.columns.items():
            if only is not None and key[1] not in only:
                continue
            if layout.setdefault(key, (column.shape[1:], column.dtype)) != (column.shape[1:], column.dtype):
                return None
    positions = np.fromiter((r.position for r in rows), dtype=np.int64, count=len(rows))
    if len(tables) == 1 and tables[0].rows == len(rows) and np.array_equal(positions, np.arange(len(rows))):
        table = tables[0]   # the episodes are the table's rows in order (what update_stats leaves): its own columns
        return {key: (column, table.present.get(key)) for key, column in table.columns.items() if key in layout}
    starts = np.flatnonzero(np.r_[True, which[1:] != which[:-1]])
    runs = [(tables[which[a]], _span(positions[a:b])) for a, b in zip(starts, np.r_[starts[1:], len(rows)])]
    whole = len(runs) == len(tables) and all(isinstance(p, slice) and p.start == 0 and t.rows == p.stop
                                             for t, p in runs)   # every table's rows in order, one after the other
    if release and not whole:
        holders = [rows[a].holder for a in starts]
        tables = table = column = None   # the runs hold the tables from here: each is let go after its last run
        return _gathered(runs, holders, layout)
    ends = np.cumsum([_length(p) for _, p in runs])
    out = {}
    for key, (shape, dtype) in layout.items():
        values = np.concatenate([t.columns[key][p] if key in t.columns else np.zeros((_length(p), *shape), dtype=dtype)
                                 for t, p in runs])
        if whole:   # each table's column becomes its rows of the stack (the same values): held once, not twice
            for (t, _), end in zip(runs, ends):
                if key in t.columns:
                    t.columns[key] = values[end - t.rows:end]
        masked = any(key in t.present or key not in t.columns for t, _ in runs)
        out[key] = values, np.concatenate([t.present[key][p] if key in t.present else
                                           np.full(_length(p), key in t.columns, dtype=bool) for t, p in runs]) \
            if masked else None
    return out


def _span(positions: np.ndarray) -> np.ndarray | slice:
    """A run's rows of its table: a slice where they are consecutive (its columns' rows are then read as views and
    copied once, into the stack), else the positions."""
    first = int(positions[0])
    if int(positions[-1]) - first + 1 == len(positions) and bool((np.diff(positions) == 1).all()):
        return slice(first, first + len(positions))
    return positions


def _length(rows: np.ndarray | slice) -> int:
    return rows.stop - rows.start if isinstance(rows, slice) else len(rows)


def _gathered(runs: list, holders: list, layout: dict) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None]]:
    """`stats_columns`' stacks filled run by run, each (table, positions) run's holder letting its table go (`release`:
    read again if asked) after the table's last run: at a million episodes the tables and the stacks are gigabytes
    each, and were held together."""
    n = sum(_length(p) for _, p in runs)
    masked = {key for key in layout if any(key in t.present or key not in t.columns for t, _ in runs)}
    values = {key: np.empty((n, *shape), dtype=dtype) for key, (shape, dtype) in layout.items()}
    present = {key: np.empty(n, dtype=bool) for key in masked}
    last = {id(holder): k for k, holder in enumerate(holders)}
    start = 0
    for k in range(len(runs)):
        table, positions = runs[k]
        runs[k] = None
        stop = start + _length(positions)
        for key in layout:
            if key in table.columns:
                values[key][start:stop] = table.columns[key][positions]
            else:
                values[key][start:stop] = 0
            if key in masked:
                present[key][start:stop] = table.present[key][positions] if key in table.present else \
                    key in table.columns
        del table
        if last[id(holders[k])] == k and hasattr(holders[k], "release"):
            holders[k].release()
            give_back()   # its blocks, before the stacks' next rows are touched
        start = stop
    return {key: (values[key], present.get(key)) for key in layout}


class GatherStream:
    """A rewrite's new episodes' stats handed to the episodes metadata writer a slice at a time (`rows`, what
    `formats.v30.write_stats` takes as its stream), for episodes whose stats are still rows of their sources' tables
    (transient holders: `formats.v30.StatsColumns`). Each table is read when its first row is asked for and let go
    after its last, so one or two are held at a time, never every episode's stats (gigabytes at a million episodes,
    twice over where `update_stats` gathered them into a new table). `updates` (`EpisodeStacks`, or None) is laid
    over as `update_stats` lays it: over every episode, the old features keep their place, a feature's new stats
    replace all of its old ones and new features come last; over some, the updated rows take the new stats (in the
    old columns' types) and hold none of the feature's others (those columns are masked, and the writer places a
    column by the first row that holds it). What the dataset aggregate reads is kept slice by slice (`basic`).
    `GatherStream.of` says when the episodes can be streamed."""

    def __init__(self, episodes: list[Episode], rows: list[StatsRow], layout: dict, updates: EpisodeStacks | None,
                 updated: np.ndarray, names: dict[str, str] | None = None,
                 held_by: dict[tuple[str, str], np.ndarray] | None = None):
        self.episodes, self.rows_of, self.updated = episodes, rows, updated   # updated: which episodes `updates` holds
        self.names = names   # old feature -> its name in the output, those kept only (None: every one as it is)
        self.held_by = held_by or {}   # a stat some tables lack: which episodes' tables hold it
        self.everyone = bool(self.updated.all())
        self.new = updates.aligned(episode_column(episodes, "index")[self.updated]) \
            if self.updated.any() else {}
        self.slots = np.cumsum(self.updated) - 1   # an updated episode's row in `new`
        self.last = {id(row.holder): i for i, row in enumerate(rows)}   # each table's last row
        if self.updated.any():   # update_stats' order: the old features' stats feature by feature, new ones last
            ranked: dict[tuple[str, str], tuple[tuple, np.dtype]] = {}
            for feature in dict.fromkeys([*(f for f, _ in layout), *self.new]):
                if self.everyone and feature in self.new:
                    ranked.update({(feature, stat): (values.shape[1:], values.dtype)
                                   for stat, values in self.new[feature].items()})
                else:
                    ranked.update({key: kind for key, kind in layout.items() if key[0] == feature})
        else:
            ranked = dict(layout)
        n = len(episodes)
        presence = {key: self._present(key, 0, n) for key in ranked}
        self.masked = {key for key, present in presence.items() if present is not None}
        self._layout = {key: ranked[key] for key in column_order(presence)}   # as the writer places them
        self.handed = 0
        self.partials: list[Stats] = []

    def _present(self, key: tuple[str, str], lo: int, hi: int) -> np.ndarray | None:
        """Which episodes at lo:hi hold a value of `key` in the output, or None when all of them do: their tables'
        (`held_by`), and over the updated episodes, whether the update gives that stat (it replaces all of the
        feature's others)."""
        feature, stat = key
        if self.everyone and feature in self.new:
            return None
        present = self.held_by[key][lo:hi].copy() if key in self.held_by else None
        updated = self.updated[lo:hi]
        if feature in self.new and updated.any():
            if present is None:
                present = np.ones(hi - lo, dtype=bool)
            present[updated] = stat in self.new[feature]
        return None if present is None or (key not in self.held_by and present.all()) else present

    @classmethod
    def of(cls, episodes: list[Episode], updates: EpisodeStacks | None, *, features: Mapping | None = None,
           renamed: Mapping[str, str] | None = None) -> GatherStream | None:
        """A stream when every episode's stats are an unread row of a transient holder and every holder's rows hold
        the same stats alike (`layout`), and `updates` updates every episode or leads each feature it updates with
        stats of the same shapes (what `update_stats` lays over some rows column by column); else None
        (`update_stats` then gathers them). `features` and `renamed` (old name -> new): the old stats kept as
        `keep_stats` keeps them, renamed and of those features only (no two old features may take one name)."""
        rows = [stats_row(ep) for ep in episodes]
        if not rows or any(r is None or not getattr(r.holder, "transient", False) for r in rows):
            return None
        holders = list(stats_holders(episodes).values())
        union = union_layout(holders)
        if union is None:
            return None
        layout, lacking = union
        names = None
        if features is not None or renamed:
            old = dict.fromkeys(f for f, _ in layout)
            names = {f: (renamed or {}).get(f, f) for f in old}
            names = {f: name for f, name in names.items() if features is None or name in features}
            if len(set(names.values())) != len(names):
                return None
            layout = {(names[f], stat): kind for (f, stat), kind in layout.items() if f in names}
            lacking = [{(names[f], stat) for f, stat in lack if f in names} for lack in lacking]
        held_by = {}
        if any(lacking):   # which episodes' tables hold each stat some tables lack
            order = {id(holder): k for k, holder in enumerate(holders)}
            which = np.fromiter((order[id(r.holder)] for r in rows), dtype=np.int64, count=len(rows))
            held_by = {key: np.array([key not in lack for lack in lacking])[which] for key in set().union(*lacking)}
        updated = np.zeros(len(episodes), dtype=bool) if updates is None else \
            np.isin(episode_column(episodes, "index"), updates.order)
        if not updated.all():
            for feature, by_stat in (updates.stacks if updates is not None else {}).items():
                held = [stat for f, stat in layout if f == feature]
                if held[:len(by_stat)] != list(by_stat) or any(
                        values.shape[1:] != layout[feature, stat][0] for stat, values in by_stat.items()):
                    return None
                masks = [held_by[feature, stat] for stat in held if (feature, stat) in held_by]
                if held and len(masks) == len(held) and not np.logical_or.reduce(masks)[updated].all():
                    return None   # an updated row whose table holds none of the feature's stats (`_in_place`)
        return cls(episodes, rows, layout, updates, updated, names, held_by)

    def layout(self) -> dict[tuple[str, str], tuple[tuple, np.dtype]]:
        """(feature, stat) -> (a row's shape, dtype), in the order `rows` gives them."""
        return self._layout

    def nbytes(self, column_bytes: Callable[..., int]) -> int:
        """The Arrow bytes of every stats column, as `column_bytes(values, present)` counts a column: a full one
        from one row's (its bytes grow with its rows alone), a masked one as a whole column of zeros (one at a time),
        its rows without a value left out as the writer leaves them."""
        n, total = len(self.episodes), 0
        for key, (shape, dtype) in self._layout.items():
            if key in self.masked:
                total += column_bytes(np.zeros((n, *shape), dtype=dtype), self._present(key, 0, n))
            else:
                total += n * column_bytes(np.zeros((1, *shape), dtype=dtype), None)
        return total

    def rows(self, lo: int, hi: int) -> dict[tuple[str, str], np.ndarray | tuple[np.ndarray, np.ndarray]]:
        """The stats of the episodes at positions lo:hi, (hi - lo, *shape) per key (with which rows hold a value,
        where some do not), where lo is where the last call ended (0 at first). A table whose last row is handed
        out is let go."""
        if lo != self.handed:
            raise ValueError(f"GatherStream.rows({lo}, {hi}): the next rows start at {self.handed}")
        self.handed = hi
        out: dict = {}
        old = [key for key in self._layout if not (self.everyone and key[0] in self.new)]
        own = stats_columns(self.episodes[lo:hi]) if old else {}
        if own and self.names is not None:
            own = {(self.names[f], stat): column for (f, stat), column in own.items() if f in self.names}
        updated, slots = self.updated[lo:hi], self.slots[lo:hi][self.updated[lo:hi]]
        for key in old:
            values, present = (None, None) if own is None or key not in own else own[key]
            held = self.held_by[key][lo:hi] if key in self.held_by else None
            if values is None and held is not None and not held.any():   # no table of the slice holds it
                shape, dtype = self._layout[key]
                values, present = np.zeros((hi - lo, *shape), dtype=dtype), held
            if values is None or (values.shape[1:], values.dtype) != self._layout[key] or not np.array_equal(
                    np.ones(hi - lo, dtype=bool) if present is None else present,
                    np.ones(hi - lo, dtype=bool) if held is None else held):
                row = self.rows_of[lo]
                raise LerodocError(f"the {key[0]} {key[1]} stats of episodes {self.episodes[lo].index}-"
                                   f"{self.episodes[hi - 1].index} changed since they were checked (a row without "
                                   "them, or another shape)", file=getattr(row.holder, "path", None),
                                   field=f"{key[0]}.{key[1]}", hint="run the command again on a dataset nobody writes")
            if key[0] in self.new and key[1] in self.new[key[0]] and updated.any():
                values = values.copy()
                values[updated] = self.new[key[0]][key[1]][slots]
            present = self._present(key, lo, hi)
            out[key] = (values, present) if present is not None and not present.all() else values
        if self.everyone:
            for feature, by_stat in self.new.items():
                out.update({(feature, stat): values[lo:hi] for stat, values in by_stat.items()})
        ordered = {key: out[key] for key in self._layout}
        own = out = None
        for holder in {id(r.holder): r.holder for r in self.rows_of[lo:hi]}.values():
            if self.last[id(holder)] < hi:
                holder.release()
        self.partials.append(aggregate(basic_columns({k: v for k, v in ordered.items()
                                                      if k not in self.masked and not isinstance(v, tuple)})))
        give_back()
        return ordered

    def basic(self) -> dict[str, dict[str, np.ndarray]]:
        """What `aggregate` reads, once per slice instead of once per episode: each slice's episodes aggregated,
        stacked per feature (their aggregate is the episodes', up to rounding: `ops.stats.StatsStream.basic`)."""
        if self.handed != len(self.episodes):
            raise ValueError(f"GatherStream.basic: {self.handed} of {len(self.episodes)} episodes handed out")
        return stack_partials(self.partials)


def let_go_stats(episodes: list[Episode]) -> None:
    """The episodes' stats let go once they are written, and their blocks given back: at a million episodes their
    table is gigabytes, held until the last row that points into it goes."""
    for ep in episodes:
        ep.stats = None
    give_back()


def stats_matrices(episodes: list[Episode]) -> dict[tuple[str, str], np.ndarray] | None:
    """`stats_columns` where every episode holds every stat: (feature, stat) -> (len(episodes), *shape); else None
    (`stats_stack` then stacks the dicts)."""
    columns = stats_columns(episodes)
    if columns is None or any(present is not None for _, present in columns.values()):
        return None
    return {key: values for key, (values, _) in columns.items()}


def stats_stack(episodes: list[Episode], features: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """The episodes' BASIC stats stacked per feature (`tables.stats.stack_stats`, what `aggregate` reads), of
    `features` only when given (every episode must hold them): from their tables' columns when `stats_columns`
    can (those stats alone: a rewrite's episodes' other stats are gigabytes at a million), else from their dicts."""
    columns = stats_columns(episodes, only=set(BASIC))
    if columns is None:
        return stack_stats([ep.stats if features is None else {k: ep.stats[k] for k in features} for ep in episodes])
    out: dict[str, dict[str, np.ndarray]] = {}
    for (feature, stat), (values, present) in columns.items():
        if stat in BASIC and present is None and (features is None or feature in features):
            out.setdefault(feature, {})[stat] = values
    return {feature: by_stat for feature, by_stat in out.items() if all(k in by_stat for k in BASIC)}


def keep_stats(episodes: list[Episode], features: dict, renamed: dict[str, str]) -> None:
    """Each episode's stats with its features renamed (`renamed`: old name -> new) and only those `features`
    declares kept: column by column, into one new table, when `stats_columns` can and no two features take one name;
    else episode by episode."""
    columns = stats_columns(episodes)
    names = [renamed.get(f, f) for f in dict.fromkeys(f for f, _ in columns)] if columns is not None else []
    if columns is None or len(set(names)) != len(names):
        for ep in episodes:
            ep.stats = {renamed.get(k, k): v for k, v in ep.stats.items() if renamed.get(k, k) in features}
        return
    kept = {(renamed.get(f, f), stat): column for (f, stat), column in columns.items() if renamed.get(f, f) in features}
    table = StatsTable({key: values for key, (values, _) in kept.items()}, len(episodes),
                       {key: present for key, (_, present) in kept.items() if present is not None})
    for i, ep in enumerate(episodes):
        ep.stats = StatsRow(table, i)


def update_stats(episodes: list[Episode], updates: list[dict] | Mapping[int, Stats], *, release: bool = False) -> None:
    """`ep.stats.update(u)` for each episode and its update (a list in the episodes' order, a Mapping from episode
    index, or `EpisodeStacks`, already stacked, for the episodes it holds); a feature's new stats replace all of its
    old ones. Done column by column, into one new table whose rows the episodes become, when their stats are unread
    rows of tables of arrays (`stats_columns`) and the updates are alike: the same features' same stats in every
    episode updated, each of those features already held (in some rows) with the new stats leading its stats in the
    same order (so every row's dict lists them as the episode-by-episode update would), or every episode updated.
    Otherwise episode by episode. `release`: the old tables' holders let them go once copied (`stats_columns`)."""
    if isinstance(updates, EpisodeStacks):   # the episodes it holds updated, their new stats already stacked
        numbers = episode_column(episodes, "index")
        updated = np.isin(numbers, updates.order)   # no index -> row dict: `aligned` makes one only out of order
        if not updated.any():
            return
        keys = [(feature, tuple(by_stat)) for feature, by_stat in updates.stacks.items()]
        new = updates.aligned(numbers[updated])
        numbers = None
        replaced = _replaced_keys(episodes, set(updates.stacks)) if updated.all() else None
        if replaced is not None:   # every episode's every feature replaced: the old values are never read
            _set_columns(episodes, {key: (None, None) for key in replaced}, new, updated)
            return
        base = stats_columns(episodes, release=release)
        rows = None   # made only if the column path is not taken
    else:
        if isinstance(updates, Mapping):
            updates = [updates[ep.index] for ep in episodes]
        updated = np.array([bool(u) for u in updates], dtype=bool)
        if not updated.any():
            return
        first = updates[int(np.argmax(updated))]
        keys = [(feature, tuple(by_stat)) for feature, by_stat in first.items()]
        base = stats_columns(episodes, release=release) if all(
            [(feature, tuple(by_stat)) for feature, by_stat in u.items()] == keys for u in updates if u) else None
        new = {feature: {stat: np.stack([u[feature][stat] for u in updates if u]) for stat in stats}
               for feature, stats in keys} if base is not None else None
        rows = updates
    if base is not None and not updated.all():
        held = {feature: [stat for f, stat in base if f == feature] for feature, _ in keys}
        if any(tuple(held[feature][:len(stats)]) != stats for feature, stats in keys):
            base = None
    if base is None or not _in_place(base, new, updated):
        if rows is None:
            rows = [updates[ep.index] if u else {} for ep, u in zip(episodes, updated)]
        for ep, update in zip(episodes, rows):
            if update:
                ep.stats.update(update)
        return
    _set_columns(episodes, base, new, updated)


def _in_place(base: dict, new: dict, updated: np.ndarray) -> bool:
    """Whether each updated feature is either new to every row or held by every updated row, so that its place in
    each row's dict is where the episode-by-episode update puts it (a feature new to a row goes last)."""
    for feature in new:
        masks = [present for (f, _), (_, present) in base.items() if f == feature]
        if masks and all(mask is not None for mask in masks) and not np.logical_or.reduce(masks)[updated].all():
            return False
    return True


def _set_columns(episodes: list[Episode], base: dict, new: dict[str, dict[str, np.ndarray]], updated: np.ndarray
                 ) -> None:
    """`update_stats`' column path: `new` stacks over the `updated` rows (all of them, or rows whose features'
    stats lead their stats in `base`, as update_stats checked), over the `base` columns; the episodes become rows
    of the one new table."""
    everyone = bool(updated.all())
    columns: dict[tuple[str, str], np.ndarray] = {}
    present: dict[tuple[str, str], np.ndarray] = {}
    for feature in dict.fromkeys([*(f for f, _ in base), *new]):   # an updated feature keeps its place; new last
        if everyone and feature in new:
            columns.update({(feature, stat): values for stat, values in new[feature].items()})
            continue
        for (f, stat), (values, held) in base.items():
            if f != feature:
                continue
            columns[f, stat] = values
            if held is not None:
                present[f, stat] = held
            if feature in new:   # the updated rows: the new stats, and none of the feature's others
                if stat in new[feature]:
                    columns[f, stat] = values.copy()
                    columns[f, stat][updated] = new[feature][stat]
                if held is not None or stat not in new[feature]:
                    present[f, stat] = (np.ones(len(episodes), dtype=bool) if held is None else held.copy())
                    present[f, stat][updated] = stat in new[feature]
    table = StatsTable(columns, len(episodes), present)
    for i, ep in enumerate(episodes):
        ep.stats = StatsRow(table, i)
