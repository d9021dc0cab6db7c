"""Exact stats for every numeric feature, from the parquet alone (no video is opened).

Per episode: min, max, mean, std, count and q01, q10, q50, q90, q99, exact. For the dataset: the
same, with the basic stats aggregated exactly from the episodes and the quantiles computed over all
rows by `lerodoc.quantiles` (in memory when they fit the budget, by radix selection otherwise).
"""

from __future__ import annotations

import json
import time
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
from lerodoc.quantiles import quantiles as exact_quantiles
from lerodoc.staging import staged_edit
from lerodoc.stats import QUANTILES, aggregate, channel_flags, column_stats, merge_dataset_stats

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


def _matrix(table: pa.Table, name: str, start: int = 0, length: int | None = None) -> np.ndarray:
    column = table.column(name)
    if length is not None:
        column = column.slice(start, length)
    return column_matrix(column, len(column))


def episode_stats(args: tuple[str, list[tuple[int, int, int]], list[str]]) -> dict[int, Stats]:
    """Worker: exact stats of each (episode, first row, length) of one data file, for `features`."""
    path, episodes, features = args
    table = read_parquet(path, features)
    out = {}
    for index, start, length in episodes:
        out[index] = {}
        for name in features:
            values = _matrix(table, name, start, length).astype(np.float64)
            bad = ~np.isfinite(values)
            if bad.any():
                row, channel = map(int, np.argwhere(bad)[0])
                raise LerodocError(f"holds {int(bad.sum())} NaN/inf values (first at frame {row}, channel "
                                   f"{channel})", file=path, episode=index, field=name,
                                   hint="lerodoc validate names every one")
            stats = column_stats(values)
            stats.update(zip(QUANTILES, np.quantile(values, LEVELS, axis=0)))
            out[index][name] = stats
    return out


def compute(ds: Dataset, features: list[str], *, workers: int = 1, budget: int = 64 << 20
            ) -> tuple[Stats, dict[int, Stats], int]:
    """(dataset stats, per-episode stats, passes over the data) for `features`."""
    by_file: dict[str, list[tuple[int, int, int]]] = {}
    for ep in ds.episodes:
        by_file.setdefault(str(ds.path(ep.data_file)), []).append((ep.index, ep.data_row, ep.length))
    per_episode: dict[int, Stats] = {}
    for part in pmap(episode_stats, [(f, eps, features) for f, eps in by_file.items()], workers=workers):
        per_episode.update(part)
    dataset = aggregate([per_episode[ep.index] for ep in ds.episodes])
    values, passes = dataset_quantiles([Path(f) for f in by_file], features, ds.info.features, ds.total_frames,
                                       workers=workers, budget=budget)
    for name, by_level in values.items():
        dataset[name].update(by_level)
    return dataset, per_episode, passes


def dataset_quantiles(files: list[Path], features: list[str], specs: dict, count: int, *, workers: int = 1,
                      budget: int = 64 << 20) -> tuple[Stats, int]:
    """Exact q01..q99 per channel of `features` over all rows of the data `files`; and the passes taken.

    float32 features are held as float32, others as float64; each group is one selection problem.
    """
    out: Stats = {}
    passes = 0
    groups: dict[type, list[str]] = {}
    for name in features:
        groups.setdefault(np.float32 if specs[name]["dtype"] == "float32" else np.float64, []).append(name)
    for dtype, names in groups.items():
        widths = [int(np.prod(specs[n]["shape"])) for n in names]

        def chunks():
            for path in files:
                table = read_parquet(path, names)
                yield np.hstack([_matrix(table, n) for n in names])
        values, used = exact_quantiles(chunks, LEVELS, count=count, width=sum(widths), dtype=dtype,
                                       budget=budget, threads=workers)
        passes = max(passes, used)
        for name, lo, hi in zip(names, np.cumsum([0] + widths[:-1]), np.cumsum(widths)):
            out[name] = dict(zip(QUANTILES, values[:, lo:hi]))
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
