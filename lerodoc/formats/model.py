"""The in-memory records every format module reads into and writes from, the same for every version."""

from __future__ import annotations

from dataclasses import dataclass, field

from lerodoc.tables.stats import Stats


@dataclass(frozen=True)
class VideoSpan:
    """Where one episode of one camera lives: a file and its [from, to) window in seconds."""
    file: str
    from_timestamp: float
    to_timestamp: float


class LazyStats:
    """`Episode.stats`, which a reader may give as a function instead of a dict: it is called the first time the
    stats are read, and its dict kept (v3.0 reads the stats columns of the episodes metadata, most of its bytes,
    only when a command asks for an episode's stats: `formats.v30.read`)."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, ep, owner=None):
        if ep is None:
            return None        # the field's default: no stats (an empty dict, by __set__)
        value = ep.__dict__[self.slot]
        if callable(value):
            value = ep.__dict__[self.slot] = value()
        return value

    def __set__(self, ep, value) -> None:
        ep.__dict__[self.slot] = {} if value is None else value


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
    stats: Stats = LazyStats()  # a dict, or a function giving it on first read (LazyStats)
    source: str | None = None   # the metadata file that lists the episode (relative), where its pointers are held

    def __getstate__(self) -> dict:   # to a worker process: the stats themselves, not the reader that gives them
        return {**self.__dict__, "_stats": self.stats}

    @property
    def to_index(self) -> int:
        return self.from_index + self.length
