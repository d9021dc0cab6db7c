"""LeRobot v2.0: the v2.1 layout without per-episode stats (dataset stats live in meta/stats.json).

Reading only; lerodoc writes v2.1 and v3.0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lerodoc.formats import v21
from lerodoc.formats.info import Info
from lerodoc.formats.jsonl import stats_to_json, write_json
from lerodoc.formats.model import episode_column

VERSION = "v2.0"
EPISODES_PATH = v21.EPISODES_PATH
TASKS_PATH = v21.TASKS_PATH
STATS_PATH = v21.STATS_PATH
EPISODES_META = v21.EPISODES_META
EPISODE_STATS_META = v21.EPISODE_STATS_META   # named where per-episode stats fail; v2.0 itself writes none


def read(root: Path, info: Info):
    """v2.1's read without per-episode stats. v2.0's stats.json holds no count (v2.1 added it, and v3.0's checks and
    lerobot's stats aggregation need it): each feature's stats lacking one are given the count of frames they
    summarise, the dataset's (its episodes' lengths summed), so that what is written from them carries it."""
    episodes, tasks, stats = v21.read(root, info, episode_stats=False)
    if stats:
        frames = np.array([episode_column(episodes, "length").sum()], dtype=np.int64)
        stats = {feature: by_stat if "count" in by_stat else {**by_stat, "count": frames}
                 for feature, by_stat in stats.items()}
    return episodes, tasks, stats


def stats_files(root: Path) -> set[str]:
    return v21.stats_files(root)


def write_stats(root: Path, info: Info, episodes, stats: dict | None) -> None:
    """v2.0 keeps dataset stats only; per-episode stats need v2.1 (`lerodoc convert --to v2.1`)."""
    write_json(root / v21.STATS_PATH, stats_to_json(stats or {}))
