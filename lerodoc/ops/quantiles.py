"""`quantiles`: exact stats for every numeric feature, from the parquet alone (no video is opened),
reported per channel and written where asked.

Per episode: min, max, mean, std, count and q01, q10, q50, q90, q99, exact. For the dataset: the
same, with the basic stats aggregated exactly from the episodes and the quantiles computed over all
rows. The computation is `lerodoc.ops.stats.exact_stats`, or past its budget `StatsStream` (a data file's episodes
at a time, into the episodes files as they are written).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lerodoc import formats
from lerodoc.dataset import Dataset
from lerodoc.tables.stats import Stats
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.info import ACTION_FEATURES, INDEX_FEATURES, STATE_FEATURES, flat_names
from lerodoc.formats.jsonl import write_text
from lerodoc.formats.model import update_stats
from lerodoc.promote.staging import check_output, in_place_root, staged_edit, staged_meta
from lerodoc.ops.derive import as_written
from lerodoc.ops.stats import StatsStream, dataset_quantiles, exact_stats
from lerodoc.tables.stats import channel_flags, dataset_stats, merge_dataset_stats
from lerodoc.conventions import INFO_PATH

# openpi's norm_stats.json keys, and the dataset features each is found in when not named
OPENPI_FEATURES = {"state": STATE_FEATURES, "actions": ACTION_FEATURES}


@dataclass
class QuantilesReport:
    dataset: str
    output: str | None
    features: list[str]
    frames: int
    passes: int = 0
    seconds: float = 0.0
    channels: list[dict] = field(default_factory=list)
    changes: list[dict] = field(default_factory=list)   # q01/q99 per channel that are new or moved
    stored: bool = False                                 # the stats were written (not --dry-run)
    openpi_norm_stats: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


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


def openpi_keys(ds: Dataset, named: dict[str, str | None]) -> dict[str, str]:
    """openpi's key (`state`, `actions`) -> the dataset feature it is computed from: the one named, else the first
    of OPENPI_FEATURES that the dataset has."""
    keys = {}
    for key, candidates in OPENPI_FEATURES.items():
        feature = named.get(key) or next((f for f in candidates if f in ds.info.features), None)
        if feature is None or feature not in ds.info.features:
            shown = repr(feature) if feature else " or ".join(map(repr, candidates))
            raise LerodocError(f"openpi norm stats need a {key} feature: {shown} is not in the dataset",
                               file=ds.root / INFO_PATH, field=feature or key,
                               hint=f"name it with --openpi-{key.rstrip('s')}-key FEATURE "
                                    f"(numeric features: {', '.join(ds.info.numeric_keys)})")
        keys[key] = feature
    return keys


def openpi_norm_stats(stats: Stats, keys: dict[str, str]) -> dict:
    """openpi's norm_stats.json (openpi.shared.normalize.NormStats per key): mean, std, q01, q99 as flat lists of
    the feature's own (unpadded) dims."""
    out = {}
    for key, feature in keys.items():
        if feature not in stats:
            raise LerodocError(f"openpi norm stats need {feature!r}: not computed", field=feature,
                               hint=f"add it with --features {feature}, or leave --features out")
        values = {k: np.ravel(np.asarray(stats[feature][k], dtype=np.float64)) for k in ("mean", "std", "q01", "q99")}
        bad = [k for k, v in values.items() if not np.isfinite(v).all()]
        if bad:
            raise LerodocError(f"has non-finite {', '.join(bad)}: openpi cannot read NaN or infinity", field=feature)
        out[key] = {k: v.tolist() for k, v in values.items()}
    return {"norm_stats": out}


def stat_changes(before: Stats | None, after: Stats, features: list[str], ds: Dataset) -> list[dict]:
    """The q01/q99 per channel that the new stats add or move: feature, channel, name, stat, old (None: new), new."""
    rows = []
    for feature in features:
        names = flat_names(ds.info.features[feature].get("names")) or []
        old = (before or {}).get(feature, {})
        for stat in ("q01", "q99"):
            new_values = np.ravel(np.asarray(after[feature][stat], dtype=np.float64))
            old_values = np.ravel(np.asarray(old[stat], dtype=np.float64)) if stat in old else None
            same_shape = old_values is not None and old_values.shape == new_values.shape
            for c, value in enumerate(new_values):
                previous = float(old_values[c]) if same_shape else None
                if previous is not None and (previous == value or (np.isnan(previous) and np.isnan(value))):
                    continue
                rows.append({"feature": feature, "channel": c, "name": names[c] if c < len(names) else None,
                             "stat": stat, "old": previous, "new": float(value)})
    return rows


def quantiles(src: Path, out: Path | None = None, *, in_place: bool = False, features: list[str] | None = None,
              workers: int = 1, budget: int = 64 << 20, openpi_path: Path | None = None,
              openpi_features: dict[str, str | None] | None = None, force: bool = False,
              engine=None) -> QuantilesReport:
    """Compute exact stats and store them into a copy at `out`, or into `src`'s own metadata (`in_place`:
    stats.json and the per-episode stats are replaced by one atomic swap of meta/; the dataset folder, its data
    and video files keep their inodes and bytes), or nowhere (neither: a dry run, `openpi_path` is not written
    either)."""
    started = time.perf_counter()
    ds = Dataset.open(src)
    ds.require_columns()
    ds.require_listed()   # a lost episodes or tasks line is not carried into the output (the stats are recomputed)
    numeric = ds.info.numeric_keys
    features = list(features or numeric)
    unknown = [f for f in features if f not in numeric]
    if unknown:
        raise UsageError(f"{unknown[0]!r} is not a numeric feature of this dataset (numeric: {', '.join(numeric)})",
                           file=ds.root / INFO_PATH, field=unknown[0])
    keys = openpi_keys(ds, openpi_features or {}) if openpi_path is not None else None
    if openpi_path is not None and (out is not None or in_place):   # never into the dataset, an existing file with
        check_output(Path(openpi_path), (ds.root,), force=force, folder=False)   # --force only
    # v3.0's episodes files take a stream's rows file by file (formats.v30.write_stats); v2.1's jsonl lines do not
    stream = StatsStream.of(ds, features, workers=workers, budget=budget, engine=engine) \
        if ds.version == "v3.0" else None
    if stream is None:
        dataset, per_episode, passes = exact_stats(ds, features, workers=workers, budget=budget, engine=engine)
    else:   # per-episode stats one data file at a time, into the episodes files as they come (if written)
        quantiles_, passes = dataset_quantiles([Path(f) for f, _ in stream.files], features, ds.info.features,
                                               ds.total_frames, workers=workers, budget=budget)
        dataset = None
    norm_stats = None

    def finish() -> dict:
        """The dataset stats, the report's channels and the openpi norm stats (an error before anything is kept)."""
        nonlocal dataset, norm_stats
        if dataset is None:
            dataset = dataset_stats(stream.basic(), quantiles_, features=features)
        report.channels = channel_table(ds, dataset, features)
        report.changes = stat_changes(ds.stats, dataset, features, ds)
        norm_stats = openpi_norm_stats(dataset, keys) if keys else None
        return merge_dataset_stats(dataset, ds.stats)

    report = QuantilesReport(dataset=str(ds.root), output=None, features=features, frames=ds.total_frames,
                             passes=passes)
    if out is None and not in_place:
        finish()
        report.seconds = round(time.perf_counter() - started, 3)
        return report
    module = formats.module(ds.version)
    if stream is None:
        update_stats(ds.episodes, per_episode)
        stats = finish()
    rewrite = module.stats_files(ds.root)

    def write(staged) -> None:
        with staged as tmp:
            if stream is None:
                module.write_stats(tmp, ds.info, ds.episodes, stats)
            else:
                module.write_stats(tmp, ds.info, ds.episodes, finish, stream=stream)

    def copy(target: Path, in_place: bool, force: bool) -> Path:   # -o: a copy, v3.0 whatever the input's version
        write(staged_edit(ds.root, target, force=force, rewrite=rewrite, opened=ds))
        return Path(target).absolute()
    if in_place:   # the stats files of the dataset itself, in its own version
        write(staged_meta(ds.root, rewrite, seen=ds.meta_seen))
    else:
        as_written(ds, out, in_place=False, force=force, workers=workers, edit=copy)
    if norm_stats is not None:
        write_text(Path(openpi_path), json.dumps(norm_stats, indent=2) + "\n")
        report.openpi_norm_stats = str(openpi_path)
    report.output = str(in_place_root(ds.root) if in_place else Path(out).absolute())
    report.stored = True
    report.seconds = round(time.perf_counter() - started, 3)
    return report
