"""Exact stats for every numeric feature, from the parquet alone (no video is opened).

Per episode: min, max, mean, std, count and q01, q10, q50, q90, q99, exact. For the dataset: the
same, with the basic stats aggregated exactly from the episodes and the quantiles computed over all
rows by `lerodoc.quantiles` (in memory when they fit the budget, by radix selection otherwise).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from lerodoc import formats
from lerodoc.dataset import Dataset, Stats
from lerodoc.errors import LerodocError
from lerodoc.formats.info import INDEX_FEATURES, flat_names
from lerodoc.parallel import pmap
from lerodoc.parquet_io import column_matrix, read_parquet
from lerodoc.quantiles import gather, row_quantiles
from lerodoc.quantiles import quantiles as exact_quantiles
from lerodoc.staging import staged_edit
from lerodoc.stats import QUANTILES, aggregate, channel_flags, merge_dataset_stats

LEVELS = [int(q[1:]) / 100 for q in QUANTILES]
OPENPI_KEYS = {"state": "observation.state", "actions": "action"}


@dataclass
class QuantilesReport:
    dataset: str
    output: str | None
    features: list[str]
    frames: int
    passes: int = 0
    seconds: float = 0.0
    channels: list[dict] = field(default_factory=list)
    openpi_norm_stats: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Group:
    """Features held together as one (channels, rows) matrix: float32 ones stay float32, others float64."""
    dtype: type
    names: tuple[str, ...]
    widths: tuple[int, ...]

    def matrix(self, table: pa.Table, start: int = 0, length: int | None = None, source=None) -> np.ndarray:
        """(rows, channels) of the group's columns; a row range when `length` is given. A column whose rows hold
        another number of values than its feature's shape is a LerodocError naming `source` and the feature."""
        length = table.num_rows - start if length is None else length
        parts = []
        for name, width in zip(self.names, self.widths):
            try:
                part = column_matrix(table.column(name).slice(start, length), length)
                held = str(part.shape[1])
            except ValueError:   # ragged lists: rows of different lengths
                part, held = None, "rows of different lengths"
            if part is None or part.shape[1] != width:
                raise LerodocError(f"holds {held} value(s) per row where info.json's shape gives {width}",
                                   file=source, field=name, hint="lerodoc validate compares columns and info.json")
            parts.append(part)
        return np.hstack(parts)

    def split(self, stats: dict[str, np.ndarray]) -> Stats:
        """Per-channel stats of the whole group -> per-feature stats."""
        bounds = np.cumsum((0,) + self.widths)
        return {name: {k: (v if k == "count" else v[..., lo:hi]) for k, v in stats.items()}
                for name, lo, hi in zip(self.names, bounds[:-1], bounds[1:])}


def groups_of(features: list[str], specs: dict) -> list[Group]:
    by_dtype: dict[type, list[str]] = {}
    for name in features:
        by_dtype.setdefault(np.float32 if specs[name]["dtype"] == "float32" else np.float64, []).append(name)
    return [Group(dtype, tuple(names), tuple(int(np.prod(specs[n]["shape"])) for n in names))
            for dtype, names in by_dtype.items()]


def block_stats(block: np.ndarray) -> dict[str, np.ndarray]:
    """Exact min, max, mean, std, count and q01..q99 of each row of a (channels, frames) block."""
    values = block.astype(np.float64)
    stats = {"min": values.min(axis=1), "max": values.max(axis=1), "mean": values.mean(axis=1),
             "std": values.std(axis=1), "count": np.array([values.shape[1]], dtype=np.int64)}
    stats.update(zip(QUANTILES, row_quantiles(block, LEVELS)))
    return stats


def _check_finite(block: np.ndarray, group: Group, file: str, episode: int) -> None:
    """A (channels, frames) block of one episode holds no NaN/inf, or a clear error names the first."""
    bad = ~np.isfinite(block)
    if bad.any():
        channel, frame = map(int, np.argwhere(bad)[0])
        bounds = np.cumsum((0,) + group.widths)
        at = int(np.searchsorted(bounds, channel, side="right")) - 1
        raise LerodocError(f"holds {int(bad.sum())} NaN/inf values (first at frame {frame}, channel "
                           f"{channel - bounds[at]})", file=file, episode=episode, field=group.names[at],
                           hint="lerodoc validate names every one")


def episode_stats(args: tuple[str, list[tuple[int, int, int]], list[Group]]) -> dict[int, Stats]:
    """Worker: exact stats of each (episode, first row, length) of one data file."""
    path, episodes, groups = args
    table = read_parquet(path, [n for g in groups for n in g.names])
    out: dict[int, Stats] = {index: {} for index, _, _ in episodes}
    for group in groups:
        for index, start, length in episodes:
            block = group.matrix(table, start, length, source=path).T
            _check_finite(block, group, path, index)
            out[index].update(group.split(block_stats(block)))
    return out


def compute(ds: Dataset, features: list[str], *, workers: int = 1, budget: int = 64 << 20
            ) -> tuple[Stats, dict[int, Stats], int]:
    """(dataset stats, per-episode stats, passes over the data) for `features`.

    When every value fits the budget the data is read once into memory and episodes are sliced out of
    it (threads); otherwise episodes are done per file in worker processes and the dataset quantiles by
    radix selection over the files.
    """
    by_file: dict[str, list[tuple[int, int, int]]] = {}
    for ep in ds.episodes:
        by_file.setdefault(str(ds.path(ep.data_file)), []).append((ep.index, ep.data_row, ep.length))
    groups = groups_of(features, ds.info.features)
    per_episode: dict[int, Stats] = {ep.index: {} for ep in ds.episodes}
    if ds.total_frames * sum(sum(g.widths) for g in groups) <= budget:
        dataset: Stats = {}
        for group in groups:
            rows = gather(lambda: (group.matrix(read_parquet(f, list(group.names)), source=f) for f in by_file),
                          ds.total_frames, sum(group.widths), group.dtype)

            def one(ep, group=group, rows=rows):
                block = rows[:, ep.from_index - ds.episodes[0].from_index:][:, :ep.length]
                _check_finite(block, group, ep.data_file, ep.index)
                return ep.index, group.split(block_stats(block))
            with ThreadPoolExecutor(workers) as pool:
                for index, stats in pool.map(one, ds.episodes):
                    per_episode[index].update(stats)
            dataset.update(group.split(dict(zip(QUANTILES, row_quantiles(rows, LEVELS, workers, in_place=True)))))
        passes = 1
    else:
        for part in pmap(episode_stats, [(f, eps, groups) for f, eps in by_file.items()], workers=workers):
            for index, stats in part.items():
                per_episode[index].update(stats)
        dataset, passes = dataset_quantiles([Path(f) for f in by_file], features, ds.info.features,
                                            ds.total_frames, workers=workers, budget=budget)
    basic = aggregate([per_episode[ep.index] for ep in ds.episodes])
    return {name: {**basic[name], **dataset[name]} for name in features}, per_episode, passes


def dataset_quantiles(files: list[Path], features: list[str], specs: dict, count: int, *, workers: int = 1,
                      budget: int = 64 << 20) -> tuple[Stats, int]:
    """Exact q01..q99 per channel of `features` over all rows of the data `files`; and the passes taken."""
    out: Stats = {}
    passes = 0
    for group in groups_of(features, specs):
        def chunks(group=group):
            for path in files:
                yield group.matrix(read_parquet(path, list(group.names)), source=path)
        values, used = exact_quantiles(chunks, LEVELS, count=count, width=sum(group.widths), dtype=group.dtype,
                                       budget=budget, threads=workers)
        passes = max(passes, used)
        out.update(group.split(dict(zip(QUANTILES, values))))
    return out, passes


def channel_table(ds: Dataset, stats: Stats, features: list[str]) -> list[dict]:
    """One row per channel: its name, range, quantiles and flags."""
    rows = []
    for name in features:   # index columns are bookkeeping, never normalised: no flags for them
        s = stats[name]
        names = flat_names(ds.info.features[name].get("names")) or []
        flagged = channel_flags(s) if name not in INDEX_FEATURES else [[] for _ in np.ravel(s["min"])]
        for c, flags in enumerate(flagged):
            rows.append({"feature": name, "channel": c, "name": names[c] if c < len(names) else None,
                         **{k: float(np.ravel(s[k])[c]) for k in ("min", "q01", "q50", "q99", "max", "mean", "std")},
                         "flags": flags})
    return rows


def openpi_norm_stats(stats: Stats) -> dict:
    """openpi's norm_stats.json: state and actions mean, std, q01, q99 (per frame)."""
    missing = [f for f in OPENPI_KEYS.values() if f not in stats]
    if missing:
        raise LerodocError(f"openpi norm stats need {missing}: not computed (see --features) or not in the dataset",
                           hint="select them with --features, or build them with lerodoc select")
    return {"norm_stats": {key: {k: np.ravel(stats[f][k]).tolist() for k in ("mean", "std", "q01", "q99")}
                           for key, f in OPENPI_KEYS.items()}}


def quantiles(src: Path, out: Path | None = None, *, in_place: bool = False, features: list[str] | None = None,
              workers: int = 1, budget: int = 64 << 20, openpi_path: Path | None = None,
              force: bool = False) -> QuantilesReport:
    """Compute exact stats; write them into a copy at `out`, into `src` itself (`in_place`), or nowhere."""
    started = time.perf_counter()
    ds = Dataset.open(src)
    ds.require_columns()
    numeric = ds.info.numeric_keys
    features = list(features or numeric)
    unknown = [f for f in features if f not in numeric]
    if unknown:
        raise LerodocError(f"{unknown[0]!r} is not a numeric feature of this dataset (numeric: {', '.join(numeric)})",
                           file=ds.root / formats.INFO_PATH, field=unknown[0])
    dataset, per_episode, passes = compute(ds, features, workers=workers, budget=budget)
    report = QuantilesReport(dataset=str(ds.root), output=None, features=features, frames=ds.total_frames,
                             passes=passes, channels=channel_table(ds, dataset, features))
    if openpi_path is not None:
        Path(openpi_path).parent.mkdir(parents=True, exist_ok=True)
        Path(openpi_path).write_text(json.dumps(openpi_norm_stats(dataset), indent=2) + "\n")
        report.openpi_norm_stats = str(openpi_path)
    if out is not None or in_place:
        module = formats.module(ds.version)
        for ep in ds.episodes:
            ep.stats.update(per_episode[ep.index])
        with staged_edit(ds.root, out, in_place=in_place, force=force, rewrite=module.stats_files(ds.root)) as tmp:
            module.write_stats(tmp, ds.info, ds.episodes, merge_dataset_stats(dataset, ds.stats))
        report.output = str(ds.root if in_place else Path(out).absolute())
    report.seconds = round(time.perf_counter() - started, 3)
    return report
