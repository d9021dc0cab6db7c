"""Dataset stats over a dataset's files, the orchestration above the stats engine (`lerodoc.tables.stats`, which
computes every number: per-episode stats of whole matrices, the aggregation, quantiles): `exact_stats` (dataset and
per-episode stats of a Dataset, in memory or per file in worker processes or on a cluster) and `dataset_quantiles`
(exact quantiles over data files: in memory, channel blocks, radix selection, or tally passes on a cluster).
merge, derive, convert, repair, select and quantiles call these; tables/ imports neither dataset.py nor the run
engine.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from lerodoc.dataset import Dataset
from lerodoc.tables.stats import EpisodeStacks, Stats
from lerodoc.run.engine import TASKS_PER_CPU
from lerodoc.run.parallel import pmap
from lerodoc.tables.parquet_io import iter_batches, open_parquet
from lerodoc.tables.quantiles import Tally, selected_quantiles
from lerodoc.tables.quantiles import quantiles as exact_quantiles
from lerodoc.tables.stats import (LEVELS, QUANTILES, check_sizes, dataset_stats, episode_stats, groups_of,
                                  in_memory_stats, load, tally_files)


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
    held = ds.total_frames * sum(g.width * np.dtype(g.dtype).itemsize for g in groups)
    if engine is None and held <= budget * 8:
        dataset, per_episode = in_memory_stats(by_file, groups, workers)
        passes = 1
    else:
        parts = pmap(episode_stats, [(f, eps, groups) for f, eps in by_file.items()], workers=workers, engine=engine)
        per_episode = EpisodeStacks.joined([(part.indices, part.stacks) for part in parts], consume=True)
        dataset, passes = dataset_quantiles([Path(f) for f in by_file], features, ds.info.features,
                                            ds.total_frames, workers=workers, budget=budget, engine=engine)
    order = [ep.index for ep in ds.episodes]
    stacked = per_episode.aligned(order)
    return dataset_stats(stacked, dataset, features=features), per_episode, passes


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
