"""`quantiles`: exact stats for every numeric feature, from the parquet alone (no video is opened),
reported per channel and written where asked.

Per episode: min, max, mean, std, count and q01, q10, q50, q90, q99, exact. For the dataset: the
same, with the basic stats aggregated exactly from the episodes and the quantiles computed over all
rows. The computation is `lerodoc.stats.exact_stats`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lerodoc import formats
from lerodoc.dataset import Dataset, Stats
from lerodoc.errors import LerodocError
from lerodoc.formats.info import INDEX_FEATURES, flat_names
from lerodoc.staging import staged_edit
from lerodoc.stats import channel_flags, exact_stats, merge_dataset_stats

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
              force: bool = False, engine=None) -> QuantilesReport:
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
    dataset, per_episode, passes = exact_stats(ds, features, workers=workers, budget=budget, engine=engine)
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
