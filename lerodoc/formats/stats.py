"""Stats as the formats store them: every stat shaped like its feature (`stat_shape`, the one rule)."""

from __future__ import annotations

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
    return None if shape is None else int(np.prod(shape))


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
