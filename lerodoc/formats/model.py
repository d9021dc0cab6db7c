"""The in-memory records every format module reads into and writes from, the same for every version."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Stats = dict[str, dict[str, np.ndarray]]   # feature -> stat name -> array


@dataclass(frozen=True)
class VideoSpan:
    """Where one episode of one camera lives: a file and its [from, to) window in seconds."""
    file: str
    from_timestamp: float
    to_timestamp: float


@dataclass
class Episode:
    """Where one episode's rows and video spans are, plus its tasks and per-episode stats."""
    index: int
    length: int
    tasks: list[str]
    data_file: str              # relative to the dataset root
    data_row: int               # first row of the episode inside data_file
    from_index: int             # dataset_from_index: global row of the first frame
    videos: dict[str, VideoSpan] = field(default_factory=dict)
    stats: Stats = field(default_factory=dict)
    source: str | None = None   # the metadata file that lists the episode (relative), where its pointers are held

    @property
    def to_index(self) -> int:
        return self.from_index + self.length
