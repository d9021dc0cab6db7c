"""Stats as the formats store them: every stat shaped like its feature (`stat_shape`, the one rule)."""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np


VISUAL = ("video", "image")


def stat_shape(spec: dict, stat: str) -> tuple[int, ...] | None:
    """The shape lerobot 0.6.1 gives a stat of a feature: (1,) for count; (channels, 1, 1) for a camera, the
    channels from its names or its shape's small axis (None when neither tells); else the feature's shape."""
    if stat == "count":
        return (1,)
    shape, names = list(spec.get("shape") or []), spec.get("names")
    if spec.get("dtype") not in VISUAL:
        return tuple(int(n) for n in shape)
    if isinstance(names, list) and "channels" in names and len(names) == len(shape):
        return (int(shape[names.index("channels")]), 1, 1)
    small = [n for n in (shape[-1:] + shape[:1]) if 0 < n <= 4] if len(shape) == 3 else []
    return (int(small[0]), 1, 1) if small else None


def stat_size(spec: dict, stat: str) -> int | None:
    """How many values a stat of a feature holds (`stat_shape`; None for a camera whose channels nothing tells)."""
    shape = stat_shape(spec, stat)
    return None if shape is None else math.prod(shape)   # ints: math's, not numpy's (a few us a stat)


def is_shaped(spec: dict, stat: str, value: np.ndarray) -> bool:
    """`value` has the shape `stat_shape` gives (any (n, 1, 1) for a camera whose channels nothing tells)."""
    shape = stat_shape(spec, stat)
    return value.shape == shape if shape is not None else value.ndim == 3 and value.shape[1:] == (1, 1)


def is_placeholder(by_stat: dict) -> bool:
    """count == 0: a feature whose stats were never computed (lerobot's aggregation divides by it)."""
    count = by_stat.get("count")
    return count is not None and np.size(count) > 0 and not np.any(count)


def normalise_stats(stats: dict, features: dict) -> tuple[dict, bool]:
    """Stats reshaped to their feature (`stat_shape`: (1,1) -> (1,) and the like; count -> (1,); a camera's to
    (C,1,1)), stats of features not in `features` and count=0 placeholders left out (never carried into an
    output); True if any changed shape or was left out as a placeholder. The caller has checked the sizes
    (`stat_size`)."""
    out, changed = {}, False
    for name, by_stat in stats.items():
        spec = features.get(name)
        if spec is None:
            continue
        if is_placeholder(by_stat):
            changed = True
            continue
        out[name] = {}
        for stat, value in by_stat.items():
            value = np.asarray(value)
            fixed = value.reshape(stat_shape(spec, stat) or (-1, 1, 1))
            changed |= fixed.shape != value.shape
            out[name][stat] = fixed
    return out, changed


class StatsTable:
    """Per-episode stats as columns, one row per episode: (feature, stat) -> a (rows, *shape) array (the common
    case; `present` marks the rows that hold a value where some do not) or a list of arrays and None (a ragged
    column), in the order an episode's dict gives them (feature by feature). `row(i)` is the dict an episode's
    stats read as; the columns themselves serve the commands that move many episodes' stats at once
    (`formats.model.stats_columns`)."""

    def __init__(self, columns: dict[tuple[str, str], np.ndarray | list], rows: int,
                 present: dict[tuple[str, str], np.ndarray] | None = None):
        self.columns, self.rows = columns, rows
        self.present = {key: held for key, held in (present or {}).items() if not held.all()}
        self.arrays = all(isinstance(c, np.ndarray) for c in columns.values())
        self.regular = self.arrays and not self.present   # every row holds every stat, of one shape
        self._normal: tuple[dict, bool] | None = None

    def full_keys(self) -> list[tuple[str, str]] | None:
        """The (feature, stat) columns, when every row holds every one of them; else None."""
        return list(self.columns) if self.regular else None

    def held(self, key: tuple[str, str], i: int) -> bool:
        column, present = self.columns[key], self.present.get(key)
        return column[i] is not None if present is None else bool(present[i])

    def row(self, i: int) -> dict:
        out: dict = {}
        for (feature, stat), column in self.columns.items():
            if self.held((feature, stat), i):
                out.setdefault(feature, {})[stat] = column[i]
        return out

    @cached_property
    def finite(self) -> bool:
        """Every value of every row is finite (no NaN or infinity)."""
        return self.arrays and all(np.isfinite(c if key not in self.present else c[self.present[key]]).all()
                                   for key, c in self.columns.items())

    def held_by(self, rows: np.ndarray) -> list[tuple[str, str]]:
        """The (feature, stat) columns that hold a value in any of `rows`."""
        return [key for key in self.columns if self.holding(key)[rows].any()]

    def has_stats(self, i: int) -> bool:
        return any(self.held(key, i) for key in self.columns)

    @cached_property
    def with_stats(self) -> np.ndarray:
        """`has_stats` of every row, as one boolean array."""
        out = np.zeros(self.rows, dtype=bool)
        for key in self.columns:
            out |= self.holding(key)
        return out

    def holding(self, key: tuple[str, str]) -> np.ndarray:
        """Which rows hold a value of the column `key`, as one boolean array."""
        column, present = self.columns[key], self.present.get(key)
        if present is not None:
            return present
        if isinstance(column, np.ndarray):
            return np.ones(self.rows, dtype=bool)
        return np.fromiter((value is not None for value in column), dtype=bool, count=self.rows)

    def normal(self, features: dict) -> bool:
        """Whether `normalise_stats` leaves every row as it is against `features`: regular columns of features it
        declares, each row already shaped as `stat_shape` gives, and no count=0 placeholder."""
        if self._normal is not None and self._normal[0] is features:
            return self._normal[1]
        ok = self.regular
        for (feature, stat), column in self.columns.items() if ok else ():
            spec = features.get(feature)
            shape = None if spec is None else stat_shape(spec, stat)
            if spec is None or (column.shape[1:] != shape if shape is not None
                                else column.ndim != 4 or column.shape[2:] != (1, 1)) \
                    or stat == "count" and column.shape[1:] and not column.reshape(len(column), -1).any(axis=1).all():
                ok = False
                break
        self._normal = (features, ok)
        return ok
