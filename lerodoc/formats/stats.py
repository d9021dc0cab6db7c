"""Stats as the formats store them: every stat shaped like its feature."""

from __future__ import annotations

import numpy as np


def is_placeholder(by_stat: dict) -> bool:
    """count == 0: a feature whose stats were never computed (lerobot's aggregation divides by it)."""
    count = by_stat.get("count")
    return count is not None and np.size(count) > 0 and not np.any(count)


def normalise_stats(stats: dict, features: dict) -> tuple[dict, bool]:
    """Stats reshaped to their feature ((1,1) -> (1,) and the like; count -> (1,); a camera's to (C,1,1)),
    stats of features not in `features` and count=0 placeholders left out (never carried into an output); True
    if any changed shape or was left out as a placeholder."""
    out, changed = {}, False
    for name, by_stat in stats.items():
        spec = features.get(name)
        if spec is None:
            continue
        if is_placeholder(by_stat):
            changed = True
            continue
        visual = spec["dtype"] in ("video", "image")
        out[name] = {}
        for stat, value in by_stat.items():
            value = np.asarray(value)
            if stat == "count":
                fixed = value.reshape(1)
            elif visual:
                fixed = value.reshape(-1, 1, 1)
            else:
                fixed = value.reshape(int(np.prod(spec["shape"])))
            changed |= fixed.shape != value.shape
            out[name][stat] = fixed
    return out, changed
