"""The in-memory model of a LeRobot dataset, the same for every on-disk version.

Opening reads metadata only: no frame is decoded and no data parquet is read beyond its footer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from pathlib import Path

import numpy as np
import pyarrow as pa

from lerodoc import access, confined, formats
from lerodoc.budget import memory_budget
from lerodoc.conventions import INFO_PATH
from lerodoc.errors import LerodocError
from lerodoc.formats import paths, v30
from lerodoc.formats.hf import ARROW, column_problem
from lerodoc.formats.info import Info
from lerodoc.formats.model import Episode, stats_holders, stats_row, union_layout
from lerodoc.formats.stats import stat_size
from lerodoc.tables.parquet_io import open_parquet, read_row_groups, read_schema
from lerodoc.tables.stats import Stats


def stats_budget() -> int:
    """The bytes of per-episode stats tables a command holds at once: past them, a dataset's tables are read a file
    at a time and let go again (`Dataset._require_stats_shapes`); one reader's memory budget."""
    return memory_budget()


class Thrift:
    """Datasets whose stats tables are past `stats_budget` together (a merge of many parts, each within it) let them
    go, and read them a file at a time from here on, as one dataset past it does (`Dataset._require_stats_shapes`,
    which each has passed: what a rewrite asks of a table later is kept). `add` each dataset once it has passed that
    check: the tables are let go as soon as the datasets added so far are past the budget, so that no more than the
    budget and one dataset's tables are held at once (a hundred parts of ten thousand episodes each held theirs
    until the last was checked: their merge peaked at 3098 MiB, and at 1315 MiB once they went as they passed it).
    Only where every table lays its stats out regularly, each stat in one shape and type wherever it is held, as a
    rewrite's stream needs (`formats.model.GatherStream`): other tables are gathered whole, and letting them go
    first only reads them again."""

    def __init__(self):
        self.bytes = 0
        self.holders: list = []
        self.released = 0   # holders[:released] are transient and let go

    def add(self, ds: Dataset) -> None:
        self.bytes += ds.stats_bytes
        self.holders.extend(stats_holders(ds.episodes).values())
        if self.bytes <= stats_budget() or union_layout(self.holders) is None:
            return
        for holder in self.holders[self.released:]:
            holder.transient = True
            holder.release()
        self.released = len(self.holders)


@dataclass
class Dataset:
    root: Path
    version: str
    info: Info
    episodes: list[Episode]
    tasks: list[str]                     # position == task_index
    stats: Stats | None = None
    meta_seen: tuple = ()                # confined.meta_state of a local root as it was read: an in-place swap
                                         # refuses to replace a meta/ that changed since (promote.staging)
    stats_fit: bool = field(default=False, repr=False, compare=False)   # _require_stats_shapes passed: split's
                                         # parts ask again, and the stats tables would be read again to answer
    stats_bytes: int = field(default=0, repr=False, compare=False)   # what its stats tables hold, estimated from
                                         # the first one read (_require_stats_shapes)

    @classmethod
    def open(cls, root: Path | str) -> Dataset:
        root = access.path(root)
        if not root.is_dir():
            raise LerodocError("no such dataset folder", file=root)
        local = not access.is_remote(root)
        if local:   # untrusted: no file under it is read through a link leading out of it (lerodoc.confined)
            confined.confine(root)
        seen = confined.meta_state(root) if local else ()
        try:
            # untrusted: nothing read outside the root
            paths.check_links(root, paths.tree(root / formats.META_DIR, root))
            version = formats.detect_version(root)
            info = Info.load(root / INFO_PATH)
            episodes, tasks, stats = formats.module(version).read(root, info)
        except (KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
            raise LerodocError(f"metadata is malformed ({type(exc).__name__}: {exc})",
                               file=root / formats.META_DIR, hint="lerodoc validate lists what is wrong") from None
        if not episodes:
            raise LerodocError("lists no episodes", file=root / _episodes_meta(version))
        paths.check_links(root, dict.fromkeys(ep.data_file for ep in episodes), field="data_path")
        paths.check_links(root, dict.fromkeys(span.file for ep in episodes for span in ep.videos.values()),
                          field="video_path")
        return cls(root=root, version=version, info=info, episodes=episodes, tasks=tasks, stats=stats,
                   meta_seen=seen)

    @property
    def total_frames(self) -> int:
        return sum(map(attrgetter("length"), self.episodes))   # no Python frame an episode

    def require_complete(self, *, files: bool = True, dropping: frozenset[str] = frozenset()) -> None:
        """Refuse to rewrite a dataset whose info.json counts more episodes, frames or tasks than its metadata
        lists: a lost metadata line (a truncated episodes or tasks file) would otherwise be left out of the
        output without a word; or whose stats do not fit their feature's shape (a damaged stats file), which
        would be carried into the output. Repair is the command that decides what such a dataset holds.
        Also refused: a feature of a dtype no writer knows, or one the data files do not hold. The video files of
        the cameras a command is `dropping` need not be there (a partial download's lost camera)."""
        self._require_stats_shapes()
        self.require_columns(files=files, dropping=dropping)
        self.require_listed()

    def require_listed(self) -> None:
        """Refuse a dataset whose info.json counts more episodes, frames or tasks than its metadata lists (a lost
        metadata line), naming the file that lists them."""
        listed = {"total_episodes": len(self.episodes), "total_frames": self.total_frames,
                  "total_tasks": len(self.tasks)}
        for name, count in listed.items():
            stated = getattr(self.info, name)
            if stated and stated > count:
                where = formats.module(self.version).TASKS_PATH if name == "total_tasks" \
                    else _episodes_meta(self.version)
                noun = name[6:] if count != 1 else name[6:-1]
                raise LerodocError(f"lists {count} {noun} but meta/info.json's {name} is {stated}; nothing is "
                                   "written that might leave some out", file=self.root / where,
                                   hint="lerodoc validate names the difference; lerodoc repair rewrites the metadata")

    def require_columns(self, *, files: bool = True, dropping: frozenset[str] = frozenset()) -> None:
        """Every feature info.json stores in the parquet has a dtype lerodoc writes and a column of a type that holds
        it in the first data file (its footer only is read); with `files`, every file the episodes point at is
        there and holds their rows (`require_files`). A dataset that breaks this stops here, naming the feature
        and both files (info.json declares what the data file must hold; either may be the wrong one)."""
        info_file = self.root / INFO_PATH
        for name, spec in self.info.features.items():
            if spec["dtype"] not in (*ARROW, "video", "image"):
                raise LerodocError(f"dtype {spec['dtype']!r} is none lerodoc writes ({', '.join(ARROW)}, image, "
                                   "video)", file=info_file, field=f"features.{name}.dtype")
            if spec["dtype"] in ("video", "image") and len(spec["shape"]) != 3:
                raise LerodocError(f"a camera's shape is [height, width, channels], not {spec['shape']!r}",
                                   file=info_file, field=f"features.{name}.shape")
        if files:
            self.require_files(dropping)
        first = next((ep for ep in self.episodes if self.path(ep.data_file).is_file()), None)
        if first is None:
            raise self.missing(self.episodes[0])
        schema = read_schema(self.path(first.data_file), first.index)
        names = set(schema.names)   # a new list at each `schema.names`: asked once, not once a feature
        for name in self.info.data_keys:
            if name not in names:
                raise LerodocError(f"declares the feature {name!r}, which {first.data_file} does not hold",
                                   file=info_file, field=f"features.{name}",
                                   hint="lerodoc validate lists the columns; drop the feature from info.json or "
                                        "restore the column")
            problem = column_problem(self.info.features[name], schema.field(name).type)
            if problem and problem[0] in UNREADABLE_COLUMN:
                raise LerodocError(f"declares {name!r} as {self.info.features[name]['dtype']}, but {first.data_file}'s "
                                   f"column {problem[1]} ({problem[0]})", file=info_file, field=f"features.{name}",
                                   hint="correct the feature's dtype in info.json, or restore the column")

    def pointer(self, ep: Episode, key: str | None = None) -> tuple[str, str, str]:
        """(metadata file, fields, template) that lead to an episode's data file (`key` None) or its `key` camera's
        video file: v3.0's episodes row (chunk and file index) or v2.x's episode_index, filled into info.json's
        data_path or video_path."""
        template = "data_path" if key is None else "video_path"
        if self.version == "v3.0":
            prefix = "data" if key is None else f"videos/{key}"
            return ep.source or _episodes_meta(self.version), f"{prefix}/chunk_index, {prefix}/file_index", template
        return ep.source or _episodes_meta(self.version), "episode_index", template

    def missing(self, ep: Episode, key: str | None = None) -> LerodocError:
        """The error for an episode whose data file (or `key` camera's video file) is not there, named at the
        metadata that points at it, with the path it leads to."""
        file, fields, template = self.pointer(ep, key)
        target = ep.data_file if key is None else ep.videos[key].file
        return LerodocError(f"{target} does not exist (the path these make with {INFO_PATH}'s {template})",
                            file=self.path(file), episode=ep.index, field=fields,
                            hint="lerodoc validate lists what is missing; restore the file, or lerodoc repair when "
                                 "the file is stored elsewhere")

    def require_files(self, dropping: frozenset[str] = frozenset()) -> None:
        """Every data and video file the episodes point at is a file (bar the cameras a command is `dropping`), and
        each data file holds the rows its episodes claim (footers only). A pointer or a length that leads nowhere is
        named where it is held (the episodes metadata, with info.json's template), with the file it leads to."""
        seen: dict[str, bool] = {}   # each file looked at once, however many episodes it holds
        for ep in self.episodes:
            for key in (None, *(k for k in ep.videos if k not in dropping)):
                relative = ep.data_file if key is None else ep.videos[key].file
                if relative not in seen:
                    seen[relative] = self.path(relative).is_file()
                if not seen[relative]:
                    raise self.missing(ep, key)
        for relative, eps in self.episodes_by_data_file().items():
            rows = open_parquet(self.path(relative), eps[0].index).metadata.num_rows
            for ep in eps:
                if ep.data_row + ep.length > rows:
                    raise LerodocError(f"claims {ep.length} rows from row {ep.data_row} of {relative}, which holds "
                                       f"{rows}", file=self.path(ep.source or _episodes_meta(self.version)),
                                       episode=ep.index, field="length",
                                       hint="lerodoc validate names the difference; lerodoc repair rewrites the "
                                            "metadata from the data files")

    def _require_stats_shapes(self) -> None:
        """Every stat of the dataset's and its episodes' stats holds the values its feature's shape gives (a
        LerodocError naming the first that does not). Past `stats_budget`, the episodes metadata files' stats tables
        are read one at a time and let go (`v30.StatsColumns.transient`)."""
        if self.stats_fit:
            return
        module = formats.module(self.version)
        stats_file, episodes_file = module.STATS_PATH, module.EPISODE_STATS_META
        sizes: dict[tuple[str, str], int | None] = {}    # per feature and stat, not per episode
        # episodes whose stats are unread rows of regular tables whose columns all have the right size are
        # checked column by column, once per table; the others (and a wrong size, to name its episode) one by one
        rows = [(ep, stats_row(ep)) for ep in self.episodes]
        holders = {id(r.holder): r for _, r in rows if r is not None}   # a table per holder, asked once each
        peeking = [r.holder for r in holders.values() if hasattr(r.holder, "peek")]

        def fits(table) -> bool:
            if not self.stats_bytes and peeking:   # the first table read tells what all of them would hold
                self._weigh(table, peeking)
            return table.regular and all(self._stat_fits(name, stat, math.prod(column.shape[1:]), sizes)
                                         for (name, stat), column in table.columns.items())
        checked = {key for key, r in holders.items()
                   if (r.holder.peek(fits, self.info.features) if hasattr(r.holder, "peek") else fits(r.table))}
        for episode, stats, where in [(None, self.stats or {}, stats_file)] + \
                [(ep.index, ep.stats, episodes_file) for ep, r in rows
                 if r is None or id(r.holder) not in checked]:
            for name, by_stat in stats.items():
                spec = self.info.features.get(name)
                if spec is None:
                    continue
                for stat, value in by_stat.items():
                    if not self._stat_fits(name, stat, np.size(value), sizes):
                        raise LerodocError(f"holds {np.size(value)} value(s) where the feature's shape "
                                           f"{list(spec['shape'])} needs {sizes[name, stat]}", file=self.root / where,
                                           episode=episode, field=f"{name}.{stat}",
                                           hint="lerodoc repair recomputes the stats")
        self.stats_fit = True

    def _weigh(self, table, holders: list) -> None:
        """`stats_bytes` from one stats table's bytes a row, and the `holders` transient past `stats_budget`."""
        row_bytes = sum(c.nbytes for c in table.columns.values() if isinstance(c, np.ndarray)) / max(table.rows, 1)
        self.stats_bytes = int(row_bytes * len(self.episodes))
        for holder in holders:
            holder.transient = self.stats_bytes > stats_budget()

    def weigh_stats(self) -> None:
        """What `_require_stats_shapes` decides on the way, for a command that does not ask for it (repair, whose
        input's stats may be damaged): past `stats_budget`, the episodes metadata files' stats tables are transient
        (read a file at a time and let go). The first table is read for it; one that cannot be read decides
        nothing (the command meets it where it reads it)."""
        holders = [holder for holder in stats_holders(self.episodes).values() if hasattr(holder, "peek")]
        if holders and not self.stats_bytes:
            try:
                holders[0].peek(lambda table: self._weigh(table, holders))
            except LerodocError:
                pass

    def _stat_fits(self, name: str, stat: str, size: int, sizes: dict) -> bool:
        """Whether `size` values are what info.json's shape gives the stat (`stat_size`, kept per feature and stat in
        `sizes`); a feature info.json does not declare, or a camera whose channels nothing tells, fits any size."""
        spec = self.info.features.get(name)
        if spec is None:
            return True
        if (name, stat) not in sizes:
            sizes[name, stat] = stat_size(spec, stat)
        return sizes[name, stat] is None or size == sizes[name, stat]

    def stats_held(self) -> dict[str, set[str]]:
        """Per feature, the stat names every episode's stats hold. For v3.0 from the episodes metadata footers where
        they tell (`formats.v30.stats_held`), without reading the stats themselves."""
        held = v30.stats_held(self.root) if self.version == "v3.0" else None
        if held is None:
            for ep in self.episodes:
                have = {feature: set(by_stat) for feature, by_stat in ep.stats.items()}
                held = have if held is None else {f: s & have.get(f, set()) for f, s in held.items()}
        return held or {}

    def data_files(self) -> list[str]:
        """Data parquet files in row order (the episodes' names taken in C: no Python call per episode)."""
        return list(dict.fromkeys(map(attrgetter("data_file"), self.episodes)))

    def data_bytes(self) -> int:
        """The size of the data files, local or on the hub: what a pass over every row reads (`parallel.worth`)."""
        return sum(access.size(self.path(f)) for f in self.data_files())

    def keep_stats(self, keep: bool) -> None:
        """Whether the episodes' stats tables stay held where a rewrite would let them go once their rows are
        copied (`formats.v30.StatsColumns.keep`; tables past the stats budget go all the same): a source rewritten
        again (split's parts) reads them once, not once a part."""
        for holder in stats_holders(self.episodes).values():
            if hasattr(holder, "keep"):
                holder.keep = keep

    def episodes_by_data_file(self) -> dict[str, list[Episode]]:
        """Each data file (relative path, in row order) -> its episodes, in row order."""
        by_file: dict[str, list[Episode]] = {}
        for ep in self.episodes:
            by_file.setdefault(ep.data_file, []).append(ep)
        return by_file

    def row_spans(self, absolute: bool = False) -> dict[str, list[tuple[int, int, int]]]:
        """Each data file (in row order: its relative path, or with `absolute` its full path as a string) -> the
        (episode index, first row, length) of its episodes, in row order: what a worker per data file takes."""
        return {(str(self.path(f)) if absolute else f): [(ep.index, ep.data_row, ep.length) for ep in eps]
                for f, eps in self.episodes_by_data_file().items()}

    def video_files(self, key: str) -> list[str]:
        return list(dict.fromkeys(ep.videos[key].file for ep in self.episodes if key in ep.videos))

    @cached_property
    def _rows_per_file(self) -> dict[tuple[str, str | None], int]:
        totals: dict[tuple[str, str | None], int] = {}
        for ep in self.episodes:
            for key, path in [(None, ep.data_file)] + [(k, span.file) for k, span in ep.videos.items()]:
                totals[(path, key)] = totals.get((path, key), 0) + ep.length
        return totals

    def rows_in_file(self, relative: str, key: str | None = None) -> int:
        """Frames of all episodes stored in a data file (or, with `key`, in that camera's video file)."""
        return self._rows_per_file.get((relative, key), 0)

    def path(self, relative: str) -> Path:
        return self.root / relative


# column problems (formats.hf.column_problem) no rewrite can carry: the column's values are not of the feature's kind
UNREADABLE_COLUMN = ("LAY036", "LAY037")


def _episodes_meta(version: str) -> str:
    """Where a version lists its episodes (a folder of parquet files for v3.0)."""
    return formats.module(version).EPISODES_META


def read_rows(path: Path | str, start: int, length: int, columns: list[str] | None = None,
              episode: int | None = None) -> pa.Table:
    """Rows [start, start+length) of a parquet file, reading only the row groups that hold them (an episode's
    own group where the file has one per episode, as lerodoc and lerobot write them), with a clear error for
    a bad file."""
    file = open_parquet(path, episode, streaming=True)
    groups, first, offset = [], 0, 0
    for group in range(file.metadata.num_row_groups):
        rows = file.metadata.row_group(group).num_rows
        if offset + rows > start and offset < start + length:
            first = offset if not groups else first
            groups.append(group)
        offset += rows
    if start + length > offset:
        raise LerodocError(f"holds {offset} rows but the metadata puts rows "
                           f"{start}..{start + length - 1} there", file=path, episode=episode)
    return read_row_groups(file, path, groups, columns, episode).slice(start - first, length)
