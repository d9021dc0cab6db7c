"""Feature statistics: per-episode stats from data, and exact aggregation of per-episode stats."""

from __future__ import annotations

import numpy as np

from lerodoc.dataset import Stats

BASIC = ("min", "max", "mean", "std", "count")
QUANTILES = ("q01", "q10", "q50", "q90", "q99")


def column_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """min, max, mean, std (population) and count over axis 0 of an (N, ...) array."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    return {"min": values.min(axis=0), "max": values.max(axis=0), "mean": values.mean(axis=0),
            "std": values.std(axis=0), "count": np.array([len(values)], dtype=np.int64)}


def aggregate(per_episode: list[Stats]) -> Stats:
    """Dataset stats from per-episode stats: count-weighted mean, pooled variance, min of min, max of max.

    Exact for the BASIC stats. Quantiles cannot be aggregated exactly and are left out here;
    a feature is aggregated only when every episode has all its BASIC stats.
    """
    features = set.intersection(*(set(s) for s in per_episode)) if per_episode else set()
    out: Stats = {}
    for feature in sorted(features):
        parts = [s[feature] for s in per_episode]
        if not all(all(k in p for k in BASIC) for p in parts):
            continue
        counts = np.array([float(p["count"][0]) for p in parts])
        total = counts.sum()
        if total <= 0:
            continue
        shape = (-1,) + (1,) * np.asarray(parts[0]["mean"]).ndim
        weights = (counts / total).reshape(shape)
        means = np.stack([p["mean"] for p in parts])
        mean = (weights * means).sum(axis=0)
        variance = (weights * (np.stack([p["std"] for p in parts]) ** 2 + (means - mean) ** 2)).sum(axis=0)
        out[feature] = {"min": np.min(np.stack([p["min"] for p in parts]), axis=0),
                        "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
                        "mean": mean, "std": np.sqrt(np.maximum(variance, 0.0)),
                        "count": np.array([int(total)], dtype=np.int64)}
    return out


def merge_dataset_stats(aggregated: Stats, previous: Stats | None) -> Stats:
    """Aggregated stats, keeping from `previous` whatever the aggregation cannot derive (e.g. quantiles)."""
    merged = {f: dict(v) for f, v in (previous or {}).items()}
    for feature, by_stat in aggregated.items():
        merged.setdefault(feature, {}).update(by_stat)
    return merged


NEAR_CONSTANT = 1e-6      # q99 - q01 below this: quantile normalisation divides by (almost) nothing
EXTREME = 10.0            # |quantile-normalised min or max| above this: the loss sees huge inputs


def normalised(values: np.ndarray, q01: np.ndarray, q99: np.ndarray) -> np.ndarray:
    """lerobot's QUANTILES normalisation, 2 (x - q01) / (q99 - q01) - 1 (eps 1e-8 for a zero range)."""
    span = np.asarray(q99, dtype=np.float64) - np.asarray(q01, dtype=np.float64)
    return 2 * (np.asarray(values, dtype=np.float64) - q01) / np.where(span == 0, 1e-8, span) - 1


def channel_flags(stats: dict[str, np.ndarray]) -> list[list[str]]:
    """Per channel: 'near-constant' and/or 'extreme' (see NEAR_CONSTANT, EXTREME); needs q01/q99/min/max."""
    q01, q99 = np.ravel(stats["q01"]), np.ravel(stats["q99"])
    reach = np.maximum(np.abs(normalised(np.ravel(stats["min"]), q01, q99)),
                       np.abs(normalised(np.ravel(stats["max"]), q01, q99)))
    return [(["near-constant"] if span < NEAR_CONSTANT else []) + (["extreme"] if r > EXTREME else [])
            for span, r in zip(q99 - q01, reach)]
