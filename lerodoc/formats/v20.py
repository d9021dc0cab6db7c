"""LeRobot v2.0: the v2.1 layout without per-episode stats (dataset stats live in meta/stats.json).

Reading only; lerodoc writes v2.1 and v3.0.
"""

from __future__ import annotations

from pathlib import Path

from lerodoc.formats import v21
from lerodoc.formats.info import Info

VERSION = "v2.0"


def read(root: Path, info: Info):
    return v21.read(root, info, episode_stats=False)
