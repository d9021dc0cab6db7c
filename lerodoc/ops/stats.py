"""Dataset stats over a dataset's files, the orchestration above the stats engine (`lerodoc.tables.stats`, which
computes every number: per-episode stats of whole matrices, the aggregation, quantiles): `exact_stats` (dataset and
per-episode stats of a Dataset, in memory or per file in worker processes or on a cluster) and `dataset_quantiles`
(exact quantiles over data files: in memory, channel blocks, radix selection, or tally passes on a cluster).
merge, derive, convert, repair, select and quantiles call these; tables/ imports neither dataset.py nor the run
engine.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from lerodoc.budget import give_back
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.formats.model import shared_keys, stats_columns
from lerodoc.tables.stats import EpisodeStacks, Stats
from lerodoc.run.engine import TASKS_PER_CPU
from lerodoc.run.parallel import pmap
from lerodoc.tables.parquet_io import iter_batches, open_parquet
from lerodoc.tables.quantiles import Tally, selected_quantiles
from lerodoc.tables.quantiles import quantiles as exact_quantiles
from lerodoc.tables.stats import (LEVELS, QUANTILES, aggregate, basic_columns, check_sizes, dataset_stats,
                                  episode_stats, groups_of, in_memory_stats, load, stack_partials, tally_files)


def exact_stats(ds: Dataset, features: list[str], *, workers: int = 1, budget: int = 64 << 20, engine=None
                ) -> tuple[Stats, Mapping[int, Stats], int]:
    """(dataset stats, per-episode stats, passes over the data) for `features` of `ds`; `budget` in 8-byte
    units.

    When every value fits the budget the data is read once into memory and episodes are sliced out of
    it (threads); otherwise episodes are done per file in worker processes and the dataset quantiles by
    channel blocks or radix selection over the files. With an `engine` (`lerodoc.run.engine`) the rows never
    leave the workers: episodes per file and the dataset quantiles by tally passes on the cluster.
    """
    by_file = ds.row_spans(absolute=True)
    groups = groups_of(features, ds.info.features)
    check_sizes(by_file, groups)
    if engine is None and _fits(ds, groups, budget):
        dataset, per_episode = in_memory_stats(by_file, groups, workers)
        passes = 1
    else:
        parts = pmap(episode_stats, [(f, eps, groups) for f, eps in by_file.items()], workers=workers, engine=engine)
        per_episode = EpisodeStacks.joined([(part.order, part.stacks) for part in parts], consume=True)
        dataset, passes = dataset_quantiles([Path(f) for f in by_file], features, ds.info.features,
                                            ds.total_frames, workers=workers, budget=budget, engine=engine)
    order = [ep.index for ep in ds.episodes]
    stacked = per_episode.aligned(order)
    return dataset_stats(stacked, dataset, features=features), per_episode, passes


def _fits(ds: Dataset, groups: list, budget: int) -> bool:
    """Whether every value of the groups' features fits `budget` (8-byte units): `exact_stats` then holds them all."""
    return ds.total_frames * sum(g.width * np.dtype(g.dtype).itemsize for g in groups) <= budget * 8


class StatsStream:
    """Per-episode stats of `features` computed one data file at a time and handed out in the episodes' order, a slice
    at a time (`rows`), to a writer that holds them no longer than its slice (`formats.v30.write_stats`): at a million
    episodes every episode's stats are gigabytes (ten stats of each channel), a data file's megabytes. The stats of
    the other features (the cameras') are the episodes' own, gathered a slice at a time too. What the dataset
    aggregate reads is kept as the files go, a file's episodes aggregated (`basic`). `StatsStream.of` says when a
    dataset's episodes can be streamed."""

    def __init__(self, files: list[tuple[str, list[tuple[int, int, int]]]], groups: list, episodes: list,
                 keys: list[tuple[str, str]], workers: int, root: Path):
        self.files, self.groups, self.workers, self.root = files, groups, max(1, workers), root
        self.episodes = episodes                 # whose own stats the features not computed keep
        self.old = keys                          # the keys every episode's stats hold, in order
        self.computed_features = {g for group in groups for g in group.names}
        self.next_file = 0
        self.parts: list[tuple[int, dict]] = []   # (rows, stacks) of computed files not yet handed out in full
        self.first = 0        # the episode position parts[0] starts at
        self.computed = 0     # episodes computed so far
        self.handed = 0       # episodes handed out so far
        self._layout: dict | None = None
        self.partials: list[Stats] = []   # each computed file's episodes aggregated (BASIC)
        self.own_partials: list[Stats] = []   # each slice's kept (not computed) features aggregated (BASIC)

    @classmethod
    def of(cls, ds: Dataset, features: list[str], *, workers: int = 1, budget: int = 64 << 20, engine=None
           ) -> StatsStream | None:
        """A stream of `ds`'s episode stats where `exact_stats` would read the data files one by one (their values
        past the budget) on this machine, the episodes metadata lists the episodes file after file in row order, and
        every episode's old stats are an unread row holding the same stats (`shared_keys`: the update is then the
        same column by column for every row); else None."""
        by_file = ds.row_spans(absolute=True)
        groups = groups_of(features, ds.info.features)
        if engine is not None or _fits(ds, groups, budget) or not ds.episodes:
            return None
        if [index for eps in by_file.values() for index, _, _ in eps] != [ep.index for ep in ds.episodes]:
            return None
        keys = shared_keys(ds.episodes)
        if keys is None:
            return None
        check_sizes(by_file, groups)
        return cls(list(by_file.items()), groups, ds.episodes, keys, workers, ds.root)

    def _compute(self) -> None:
        """The next file's stats, its episodes in `workers` threads (one file's values and stats held at a time,
        none pickled back from a process), and their `aggregate` kept."""
        path, eps = self.files[self.next_file]
        self.next_file += 1
        part = episode_stats((path, eps, self.groups), self.workers)
        if self._layout is None:   # update_stats' order: the old features in place, the new ones last
            kept = [key for key in self.old if key[0] not in part.stacks]
            own = self._own(0, 1, {key: None for key in kept})
            self._layout = {}
            for feature in dict.fromkeys([*(f for f, _ in self.old), *part.stacks]):
                if feature in part.stacks:
                    self._layout.update({(feature, stat): (values.shape[1:], values.dtype)
                                         for stat, values in part.stacks[feature].items()})
                else:
                    self._layout.update({key: (own[key].shape[1:], own[key].dtype)
                                         for key in self.old if key[0] == feature})
        self.partials.append(aggregate(part.stacks))
        self.parts.append((len(part), part.stacks))
        self.computed += len(part)

    def layout(self) -> dict[tuple[str, str], tuple[tuple, np.dtype]]:
        """(feature, stat) -> (a row's shape, dtype), in the order `rows` gives them."""
        if self._layout is None:
            self._compute()
        return self._layout

    def nbytes(self, column_bytes: Callable[..., int]) -> int:
        """The Arrow bytes of every stats column, as `column_bytes(values, present)` counts a column: one row's
        times the episodes (every row holds every stat alike, and a column's bytes grow with its rows alone)."""
        return len(self.episodes) * sum(column_bytes(np.zeros((1, *shape), dtype=dtype), None)
                                        for shape, dtype in self.layout().values())

    def rows(self, lo: int, hi: int) -> dict[tuple[str, str], np.ndarray]:
        """The stats of the episodes at positions lo:hi, (hi - lo, *shape) per key, where lo is where the last call
        ended (0 at first). The files wholly handed out, and the old stats tables read, are let go."""
        if lo != self.handed:
            raise ValueError(f"StatsStream.rows({lo}, {hi}): the next rows start at {self.handed}")
        self.handed = hi
        while self.computed < hi and self.next_file < len(self.files):
            self._compute()
        layout = self.layout()
        out: dict[tuple[str, str], list] = {key: [] for key in layout}
        start = self.first
        for rows, stacks in self.parts:
            a, b = max(lo, start) - start, min(hi, start + rows) - start
            if a < b:
                for feature, by_stat in stacks.items():
                    for stat, values in by_stat.items():
                        out[feature, stat].append(values[a:b])
            start += rows
        while self.parts and self.first + self.parts[0][0] <= hi:
            self.first += self.parts.pop(0)[0]
        kept = {key: shape for key, shape in layout.items() if key[0] not in self.computed_features}
        for key, values in self._own(lo, hi, kept).items():
            out[key].append(values)
        joined = {key: np.concatenate(chunks) for key, chunks in out.items()}
        kept_features = {feature for feature, _ in kept}
        self.own_partials.append(aggregate(basic_columns(joined, kept_features)))
        give_back()   # the files' blocks let go, before the next slice's
        return joined

    def _own(self, lo: int, hi: int, kept: dict) -> dict[tuple[str, str], np.ndarray]:
        """The episodes lo:hi's own values of the `kept` keys (-> their (shape, dtype) in the layout, or None while
        it is being made), from their tables (let go once copied). The footers told that every row holds them; a
        table that holds them otherwise (a null, another shape) is a LerodocError naming its file."""
        if not kept:
            return {}
        own = stats_columns(self.episodes[lo:hi], release=True)
        bad = _unlike(own, kept)
        if bad is not None:   # which file: the first whose own rows are unlike the layout
            sources = [ep.source for ep in self.episodes[lo:hi]]
            for source in dict.fromkeys(sources):
                run = [ep for ep, s in zip(self.episodes[lo:hi], sources) if s == source]
                bad = _unlike(stats_columns(run), kept)
                if bad is not None:
                    raise LerodocError(f"the {bad[0]} {bad[1]} stats of episodes {run[0].index}-{run[-1].index} are "
                                       "missing in some rows or differ in shape from those of the episodes before "
                                       "them, where the file footers say every row holds them alike",
                                       file=self.root / (source or "meta/episodes"), episode=run[0].index,
                                       field=f"{bad[0]}.{bad[1]}", hint="lerodoc repair rewrites the episodes metadata")
            raise LerodocError(f"the {bad[0]} {bad[1]} stats differ in shape between episodes metadata files, where "
                               "the file footers say every row holds them alike", file=self.root / "meta/episodes",
                               field=f"{bad[0]}.{bad[1]}", hint="lerodoc repair rewrites the episodes metadata")
        return {key: own[key][0] for key in kept}

    def basic(self) -> dict[str, dict[str, np.ndarray]]:
        """What `aggregate` reads, once per data file instead of once per episode: each file's episodes aggregated,
        stacked per feature. The aggregate of those is the dataset's (count-weighted mean, pooled variance: the law
        of total variance, a file taken as one episode), up to rounding. Files nobody took rows of are computed for
        it, and let go. Once every row is handed out, the kept features' too (each slice's aggregated)."""
        while self.next_file < len(self.files):
            self._compute()
            while self.parts:
                self.first += self.parts.pop(0)[0]
        own = stack_partials(self.own_partials) if self.handed == len(self.episodes) else {}
        return {**stack_partials(self.partials), **own}


def _unlike(columns: dict | None, kept: dict) -> tuple[str, str] | None:
    """The first of the `kept` keys (-> (shape, dtype) expected, or None) that `stats_columns`' `columns` do not hold
    in every row as expected; None when all are held so."""
    for key, expected in kept.items():
        values, present = (None, None) if columns is None or key not in columns else columns[key]
        if values is None or present is not None or \
                expected is not None and (values.shape[1:], values.dtype) != expected:
            return key
    return None


def dataset_quantiles(files: list[Path], features: list[str], specs: dict, count: int, *, workers: int = 1,
                      budget: int = 64 << 20, engine=None) -> tuple[Stats, int]:
    """Exact q01..q99 per channel of `features` over all rows of the data `files`; and the passes taken.

    With an `engine` each pass of the radix selection runs as units of a few files each on the cluster,
    which send back their tallies (bucket counts, and the few values of nearly-found ranks), never rows."""
    out: Stats = {}
    passes = 0
    if engine is None:   # rows per file, from the footers (the same for every group)
        sizes = [open_parquet(f).metadata.num_rows for f in files]
        starts = np.cumsum([0] + sizes)
    for group in groups_of(features, specs):
        if engine is not None:
            runs = _file_runs([str(f) for f in files], TASKS_PER_CPU * engine.cpus)

            def one_pass(selection, group=group, runs=runs):
                tallies = pmap(tally_files, [(run, group, selection) for run in runs], engine=engine)
                return functools.reduce(Tally.add, tallies)
            values, used = selected_quantiles(one_pass, LEVELS, count=count, width=group.width)
            passes = max(passes, used)
            out.update(group.split(dict(zip(QUANTILES, values))))
            continue

        def fill(matrix: np.ndarray, lo: int, hi: int, group=group) -> None:
            with ThreadPoolExecutor(max(1, workers)) as pool:
                list(pool.map(lambda i: load(str(files[i]), [(group, matrix, lo, hi)], int(starts[i]), sizes[i]),
                              range(len(files))))

        def chunks(group=group):
            for path in files:
                for batch in iter_batches(open_parquet(path, streaming=True), path, list(group.names)):
                    yield group.matrix(batch, source=path)
        values, used = exact_quantiles(chunks, LEVELS, count=count, width=group.width, dtype=group.dtype,
                                       budget=budget, threads=workers, fill=fill)
        passes = max(passes, used)
        out.update(group.split(dict(zip(QUANTILES, values))))
    return out, passes


def _file_runs(files: list[str], units: int) -> list[list[str]]:
    """`files` in at most `units` consecutive runs of near-equal length."""
    size = -(-len(files) // max(1, units))
    return [files[i:i + size] for i in range(0, len(files), size)]
