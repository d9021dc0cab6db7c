"""Exact per-channel quantiles with bounded memory.

Values are read in chunks of rows (one (N, D) matrix per chunk, D channels). When all values fit in
`budget` (a count of values), they are gathered and sorted per channel, and numpy's linear method is
applied to the order statistics. Otherwise each needed order statistic is found by radix selection on
an order-preserving 64-bit key of the float64 value: every pass over the data counts, per channel and
per target, the next 8 bits of the keys that share the prefix fixed so far; the target's rank picks one
bucket, which becomes the new prefix. Once a bucket holds few enough values they are gathered and the
rank is read off exactly; a bucket that keeps all 64 bits holds one repeated value. Memory stays at
about D x targets x 256 counters plus the chunk being read, and the result equals `numpy.quantile` on
the full data."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import numpy as np

DIGIT_BITS = 8
BUCKETS = 1 << DIGIT_BITS
Chunks = Callable[[], Iterable[np.ndarray]]   # each call re-reads the data from the start


def float_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys ordered like the float64 values (negative floats flipped, positive ones offset)."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    negative = (bits >> np.uint64(63)).astype(bool)
    return np.where(negative, ~bits, bits | np.uint64(1 << 63))


def key_floats(keys: np.ndarray) -> np.ndarray:
    positive = (keys >> np.uint64(63)).astype(bool)
    return np.where(positive, keys & ~np.uint64(1 << 63), ~keys).view(np.float64)


def _interpolate(low: np.ndarray, high: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """numpy's linear interpolation between neighbouring order statistics (same formula, same rounding)."""
    diff = high - low
    return np.where(fraction >= 0.5, high - diff * (1 - fraction), low + diff * fraction)


def _ranks(count: int, levels: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower and upper order-statistic ranks and the fraction between them, computed as numpy's
    'linear' method computes its virtual index."""
    virtual = (count - 1) * np.asarray(levels, dtype=np.float64)
    low = np.clip(np.floor(virtual), 0, count - 1).astype(np.int64)
    high = np.minimum(low + 1, count - 1)
    return low, high, virtual - low


def _order_statistics(rows: np.ndarray, ranks: np.ndarray, threads: int, in_place: bool = False) -> np.ndarray:
    """(len(ranks), D) order statistics of each row of a (D, N) array, sorted in threads.

    A full sort beats numpy's multi-kth partition several times over (SIMD sorts). `in_place` sorts
    `rows` itself, which saves a copy of the data.
    """
    bounds = np.linspace(0, rows.shape[0], max(1, min(threads, rows.shape[0])) + 1).astype(int)

    def block(lo: int, hi: int) -> np.ndarray:
        part = rows[lo:hi]
        if in_place:
            part.sort(axis=1)
        else:
            part = np.sort(part, axis=1)
        return part[:, ranks]
    if len(bounds) == 2:
        return block(0, rows.shape[0]).T
    with ThreadPoolExecutor(len(bounds) - 1) as pool:
        parts = list(pool.map(block, bounds[:-1], bounds[1:]))
    return np.concatenate(parts, axis=0).T


def row_quantiles(rows: np.ndarray, levels: list[float], threads: int = 1, in_place: bool = False) -> np.ndarray:
    """(len(levels), D) quantiles of each row of a (D, N) array held in memory (numpy's linear method);
    `in_place` lets the sort reorder `rows` instead of copying it."""
    low, high, fraction = _ranks(rows.shape[1], levels)
    ranks = np.unique(np.concatenate([low, high]))
    found = _order_statistics(rows, ranks, threads, in_place).astype(np.float64)
    at = {r: i for i, r in enumerate(ranks)}
    return _interpolate(found[[at[r] for r in low]], found[[at[r] for r in high]], fraction[:, None])


def gather(chunks: Chunks, count: int, width: int, dtype) -> np.ndarray:
    """All rows `chunks` yields as one (width, count) array (the gathered copy may be sorted in place)."""
    rows, start = np.empty((width, count), dtype=dtype), 0
    for chunk in chunks():
        rows[:, start:start + len(chunk)] = chunk.T
        start += len(chunk)
    return rows


def quantiles(chunks: Chunks, levels: list[float], *, count: int, width: int, dtype=np.float64,
              budget: int = 64 << 20, collect: int = 1 << 16, threads: int = 2) -> tuple[np.ndarray, int]:
    """(len(levels), D) quantiles of the `count` rows of width D that `chunks` yields, and the passes taken.

    In memory (count * D <= budget) values keep `dtype` (float32 data stays float32, so its order
    statistics are exact) and the interpolation runs in float64; beyond the budget, radix selection.
    """
    if not count:
        raise ValueError("no rows")
    if count * width <= budget:
        return row_quantiles(gather(chunks, count, width, dtype), levels, threads, in_place=True), 1
    low, high, fraction = _ranks(count, levels)
    ranks = np.unique(np.concatenate([low, high]))
    found, passes = _select(chunks, ranks, width, collect)
    at = {r: i for i, r in enumerate(ranks)}
    return _interpolate(found[[at[r] for r in low]], found[[at[r] for r in high]], fraction[:, None]), passes


def _key_slices(chunks: Chunks, rows: int = 1 << 17) -> Iterable[np.ndarray]:
    """Order-preserving keys of the data, a bounded number of rows at a time (temporaries stay small)."""
    for chunk in chunks():
        for start in range(0, len(chunk), rows):
            yield float_keys(chunk[start:start + rows])


def _select(chunks: Chunks, ranks: np.ndarray, width: int, collect: int) -> tuple[np.ndarray, int]:
    """The values of the given ranks (0-based, ascending order) in each of `width` channels."""
    targets = len(ranks)
    prefix = np.zeros((targets, width), dtype=np.uint64)       # key bits fixed so far
    below = np.zeros((targets, width), dtype=np.int64)         # values whose key is below the prefix range
    size = np.full((targets, width), -1, dtype=np.int64)       # values inside the prefix range (-1: all)
    result = np.full((targets, width), np.nan)
    done = np.zeros((targets, width), dtype=bool)
    channel = np.arange(width)
    passes, fixed = 0, 0
    while not done.all():
        gather = ~done & (size >= 0) & (size <= collect)
        shift = np.uint64(64 - fixed - DIGIT_BITS) if fixed < 64 else np.uint64(0)
        counts = np.zeros((targets, width, BUCKETS), dtype=np.int64)
        gathered: dict[tuple[int, int], list[np.ndarray]] = {}
        for keys in _key_slices(chunks):
            bucket = channel * BUCKETS + ((keys >> shift) & np.uint64(BUCKETS - 1)).astype(np.int64)
            if fixed == 0:       # nothing fixed yet: every target counts the same first digit
                counts[0] += np.bincount(bucket.ravel(), minlength=width * BUCKETS).reshape(width, BUCKETS)
                continue
            high = keys >> np.uint64(64 - fixed)
            for t in range(targets):
                if done[t].all():
                    continue
                inside = high == (prefix[t] >> np.uint64(64 - fixed))
                for c in np.nonzero(gather[t])[0]:
                    gathered.setdefault((t, c), []).append(keys[inside[:, c], c])
                counting = inside & ~gather[t] & ~done[t]
                if counting.any() and fixed < 64:
                    counts[t] += np.bincount(bucket[counting], minlength=width * BUCKETS).reshape(width, BUCKETS)
        if fixed == 0:
            counts[1:] = counts[0]
        passes += 1
        for (t, c), parts in gathered.items():
            keys = np.sort(np.concatenate(parts))
            result[t, c] = key_floats(keys[ranks[t] - below[t, c]: ranks[t] - below[t, c] + 1])[0]
            done[t, c] = True
        if fixed >= 64:      # every key bit matched: the range holds one repeated value
            rest = ~done
            result[rest] = key_floats(prefix[rest])
            done[rest] = True
            break
        for t in range(targets):
            for c in np.nonzero(~done[t] & ~gather[t])[0]:
                cumulative = np.cumsum(counts[t, c])
                bucket = int(np.searchsorted(cumulative, ranks[t] - below[t, c], side="right"))
                below[t, c] += cumulative[bucket - 1] if bucket else 0
                size[t, c] = counts[t, c, bucket]
                prefix[t, c] |= np.uint64(bucket) << shift
        fixed += DIGIT_BITS
    return result, passes
