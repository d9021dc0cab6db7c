"""Exact per-channel quantiles with bounded memory.

Values are read in chunks of rows (one (N, D) matrix per chunk, D channels). When all values fit in
`budget` (8-byte units), they are gathered and sorted per channel, and numpy's linear method is applied
to the order statistics. When one channel fits but not all, blocks of channels are gathered and sorted
in turn, one pass over the data each (a `fill` callback can read only their columns).
Otherwise each needed order statistic is found by radix selection on
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
KEY_MAX = np.uint64(np.iinfo(np.uint64).max)
Chunks = Callable[[], Iterable[np.ndarray]]   # each call re-reads the data from the start


def float_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys ordered like the float64 values (negative floats flipped, positive ones offset)."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    negative = (bits >> np.uint64(63)).astype(bool)
    return np.where(negative, ~bits, bits | np.uint64(1 << 63))


def key_floats(keys: np.ndarray) -> np.ndarray:
    positive = (keys >> np.uint64(63)).astype(bool)
    return np.where(positive, keys & ~np.uint64(1 << 63), ~keys).view(np.float64)


def interpolate(low: np.ndarray, high: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """numpy's linear interpolation between neighbouring order statistics (same formula, same rounding), in float64
    whatever the values' dtype: each value is cast on the way (exactly, as numpy's quantile of a float64 copy
    casts it), and two float64 arrays the size of the result are made, not a copy of both inputs and a temporary a
    step (a million segments' quantiles are hundreds of MB of fresh pages)."""
    diff = np.subtract(high, low, dtype=np.float64)
    out = np.multiply(diff, fraction)
    np.add(out, low, out=out)                       # low + diff * fraction
    np.multiply(diff, 1 - fraction, out=diff)
    np.subtract(high, diff, out=diff)               # high - diff * (1 - fraction)
    np.copyto(out, diff, where=np.broadcast_to(fraction >= 0.5, out.shape))
    return out


def _ranks(count: int, levels: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower and upper order-statistic ranks and the fraction between them, computed as numpy's
    'linear' method computes its virtual index."""
    virtual = (count - 1) * np.asarray(levels, dtype=np.float64)
    low = np.clip(np.floor(virtual), 0, count - 1).astype(np.int64)
    high = np.minimum(low + 1, count - 1)
    return low, high, virtual - low


def _distinct(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The ranks `_ranks` gives, each once, ascending: a handful, sorted in Python (np.unique imports numpy.ma,
    7-10 ms, on its first call in a process)."""
    return np.array(sorted({*low.tolist(), *high.tolist()}), dtype=np.int64)


def _order_statistics(rows: np.ndarray, ranks: np.ndarray, threads: int, in_place: bool = False) -> np.ndarray:
    """(len(ranks), D) order statistics of each row of a (D, N) array, partitioned in threads.

    numpy's multi-kth partition at the ranks, not a full sort: on this project's 2-core machines 1.6-3.5x faster
    on independent draws and 5-27x on random walks and repeated runs (a robot's state, the index columns), 400,000
    to 4M values a row (bench.order_statistics). `in_place` partitions `rows` itself, which saves a copy.
    """
    bounds = np.linspace(0, rows.shape[0], max(1, min(threads, rows.shape[0])) + 1).astype(int)

    def block(lo: int, hi: int) -> np.ndarray:
        part = rows[lo:hi]
        if in_place:
            part.partition(ranks, axis=1)
        else:
            part = np.partition(part, ranks, axis=1)
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
    ranks = _distinct(low, high)
    found = _order_statistics(rows, ranks, threads, in_place)   # in the rows' dtype: `interpolate` casts
    at = {r: i for i, r in enumerate(ranks)}
    return interpolate(found[[at[r] for r in low]], found[[at[r] for r in high]], fraction[:, None])


def sorted_quantiles(ordered: np.ndarray, levels: list[float]) -> np.ndarray:
    """(len(levels), D) quantiles of each row of a (D, N) array whose rows are sorted (numpy's linear method)."""
    low, high, fraction = _ranks(ordered.shape[1], levels)
    return interpolate(ordered[:, low].T, ordered[:, high].T, fraction[:, None])


TRANSPOSE_BYTES = 256 << 10   # transpose_into's block of rows: about a core's L2 cache


def transpose_into(rows: np.ndarray, matrix: np.ndarray, block: int | None = None) -> None:
    """rows[:] = matrix.T for (D, n) `rows` and an (n, D) `matrix`, TRANSPOSE_BYTES of rows at a time: the whole
    transpose at once misses the cache on nearly every element (15 ms against 4 ms for 400,000 rows of 16
    float32), and blocks of a few hundred rows made a Python step, which takes the GIL, for every few KB (a
    thread filling quantiles waited on it behind the main thread)."""
    block = block or max(256, TRANSPOSE_BYTES // max(matrix.shape[1] * matrix.itemsize, 1))
    for start in range(0, len(matrix), block):
        rows[:, start:start + block] = matrix[start:start + block].T


def quantiles(chunks: Chunks, levels: list[float], *, count: int, width: int, dtype=np.float64,
              budget: int = 64 << 20, collect: int = 1 << 16, threads: int = 2,
              fill: Callable[[np.ndarray, int, int], None] | None = None) -> tuple[np.ndarray, int]:
    """(len(levels), D) quantiles of the `count` rows of width D that `chunks()` yields, and the passes taken.

    Values keep `dtype` in memory (float32 data stays float32, so its order statistics are exact) and the
    interpolation runs in float64. All channels at once when they fit `budget` (8-byte units), else blocks
    of channels, one pass each; beyond one channel's worth, radix selection. `fill(rows, lo, hi)`, when
    given, writes channels lo:hi of every row into the (hi - lo, count) array `rows` in place of gathering
    `chunks()` (it can read only those channels' columns).
    """
    if not count:
        raise ValueError("no rows")
    per_pass = budget * 8 // (count * np.dtype(dtype).itemsize)
    if per_pass < 1:
        return selected_quantiles(lambda selection: selection.tally_of(key_slices(chunks())), levels,
                                  count=count, width=width, collect=collect)
    if fill is None:
        def fill(rows: np.ndarray, lo: int, hi: int) -> None:
            start = 0
            for chunk in chunks():
                transpose_into(rows[:, start:start + len(chunk)], chunk[:, lo:hi])
                start += len(chunk)
    out = np.empty((len(levels), width))
    for lo in range(0, width, per_pass):
        hi = min(width, lo + per_pass)
        rows = np.empty((hi - lo, count), dtype=dtype)
        fill(rows, lo, hi)
        out[:, lo:hi] = row_quantiles(rows, levels, threads, in_place=True)
        del rows
    return out, -(-width // per_pass)


def selected_quantiles(one_pass: Callable[["Selection"], "Tally"], levels: list[float], *, count: int, width: int,
                       collect: int = 1 << 16) -> tuple[np.ndarray, int]:
    """(len(levels), D) quantiles of `count` rows of width D by radix selection, and the passes taken.

    `one_pass(selection)` returns the tally of one pass over all the data: `selection.tally_of` over every
    row, or the sum (`Tally.add`) of tallies made where the data lives, one per part.
    """
    low, high, fraction = _ranks(count, levels)
    ranks = _distinct(low, high)
    selection = Selection(ranks, width, collect)
    while not selection.finished:
        selection.narrow(one_pass(selection))
    at = {r: i for i, r in enumerate(ranks)}
    found = selection.result
    return interpolate(found[[at[r] for r in low]], found[[at[r] for r in high]], fraction[:, None]), selection.passes


def key_slices(matrices: Iterable[np.ndarray], rows: int = 1 << 17) -> Iterable[np.ndarray]:
    """Order-preserving keys of (rows, D) matrices, a bounded number of rows at a time (temporaries stay small)."""
    for chunk in matrices:
        for start in range(0, len(chunk), rows):
            yield float_keys(chunk[start:start + rows])


class Tally:
    """What one pass saw of some of the rows: bucket counts per (target, channel, digit), the keys of the
    ranges small enough to gather, and the smallest and largest key counted (on the first pass, and where
    the last digit left a range whole, as repeated values do): a range whose two are equal holds one value,
    found whatever its size. Tallies of disjoint parts of the data add up to the tally of the whole."""

    def __init__(self, targets: int, width: int):
        self.counts = np.zeros((targets, width, BUCKETS), dtype=np.int64)
        self.low = np.full((targets, width), KEY_MAX, dtype=np.uint64)
        self.high = np.zeros((targets, width), dtype=np.uint64)
        self.gathered: dict[tuple[int, int], list[np.ndarray]] = {}

    def add(self, other: "Tally") -> "Tally":
        self.counts += other.counts
        np.minimum(self.low, other.low, out=self.low)
        np.maximum(self.high, other.high, out=self.high)
        for at, parts in other.gathered.items():
            self.gathered.setdefault(at, []).extend(parts)
        return self


class Selection:
    """Radix selection of the values of given ranks (0-based, ascending) in each of `width` channels.

    Each pass fixes the next 8 key bits of every (target, channel) from the pass's `Tally`: the target's
    rank picks one bucket, which becomes the new prefix; a range of at most `collect` values is gathered
    and its rank read off. The selection state is small (targets x channels), so it can be sent to the
    workers that tally their part of the data (`tally_of`); the driver sums the tallies and `narrow`s.
    """

    def __init__(self, ranks: np.ndarray, width: int, collect: int):
        targets = len(ranks)
        self.ranks, self.width, self.collect = np.asarray(ranks), width, collect
        self.prefix = np.zeros((targets, width), dtype=np.uint64)     # key bits fixed so far
        self.below = np.zeros((targets, width), dtype=np.int64)       # values whose key is below the prefix range
        self.size = np.full((targets, width), -1, dtype=np.int64)     # values inside the prefix range (-1: all)
        self.result = np.full((targets, width), np.nan)
        self.done = np.zeros((targets, width), dtype=bool)
        self.stuck = np.zeros((targets, width), dtype=bool)          # the last digit did not split the range
        self.fixed = 0
        self.passes = 0

    @property
    def finished(self) -> bool:
        return bool(self.done.all())

    @property
    def gathering(self) -> np.ndarray:
        """(target, channel) ranges this pass gathers instead of counting."""
        return ~self.done & (self.size >= 0) & (self.size <= self.collect)

    def tally_of(self, key_slices: Iterable[np.ndarray]) -> Tally:
        """This pass's tally of the rows whose keys `key_slices` yields."""
        targets, width = self.prefix.shape
        tally, gather, fixed = Tally(targets, width), self.gathering, self.fixed
        shift = np.uint64(64 - fixed - DIGIT_BITS) if fixed < 64 else np.uint64(0)
        channel = np.arange(width)
        for keys in key_slices:
            bucket = channel * BUCKETS + ((keys >> shift) & np.uint64(BUCKETS - 1)).astype(np.int64)
            if fixed == 0:       # nothing fixed yet: every target counts the same first digit (copied in narrow)
                tally.counts[0] += np.bincount(bucket.ravel(), minlength=width * BUCKETS).reshape(width, BUCKETS)
                if len(keys):
                    np.minimum(tally.low[0], keys.min(axis=0), out=tally.low[0])
                    np.maximum(tally.high[0], keys.max(axis=0), out=tally.high[0])
                continue
            high = keys >> np.uint64(64 - fixed)
            for t in range(targets):
                if self.done[t].all():
                    continue
                inside = high == (self.prefix[t] >> np.uint64(64 - fixed))
                for c in np.nonzero(gather[t])[0]:
                    tally.gathered.setdefault((t, int(c)), []).append(keys[inside[:, c], c])
                counting = inside & ~gather[t] & ~self.done[t]
                if counting.any() and fixed < 64:
                    tally.counts[t] += np.bincount(bucket[counting], minlength=width * BUCKETS).reshape(width, BUCKETS)
                    cols = np.nonzero(counting.any(axis=0) & self.stuck[t])[0]   # only where ties are likely
                    part, mask = keys[:, cols], counting[:, cols]
                    tally.low[t, cols] = np.minimum(tally.low[t, cols], np.where(mask, part, KEY_MAX).min(axis=0))
                    tally.high[t, cols] = np.maximum(tally.high[t, cols], np.where(mask, part, 0).max(axis=0))
        return tally

    def narrow(self, tally: Tally) -> None:
        """Read off the gathered ranges and fix the next digit of the others, from one pass's whole tally."""
        counts, gather = tally.counts, self.gathering
        if self.fixed == 0:
            counts[1:] = counts[0]
            tally.low[1:], tally.high[1:] = tally.low[0], tally.high[0]
        self.passes += 1
        single = ~self.done & ~gather & (tally.low == tally.high)   # the range holds one repeated value
        self.result[single] = key_floats(tally.low[single])
        self.done |= single
        for t, c in zip(*np.nonzero(gather)):
            keys = np.sort(np.concatenate(tally.gathered.get((int(t), int(c)), [])))
            rank = self.ranks[t] - self.below[t, c]
            self.result[t, c] = key_floats(keys[rank:rank + 1])[0]
            self.done[t, c] = True
        if self.fixed >= 64:      # every key bit matched: the range holds one repeated value
            rest = ~self.done
            self.result[rest] = key_floats(self.prefix[rest])
            self.done[rest] = True
            return
        shift = np.uint64(64 - self.fixed - DIGIT_BITS)
        for t in range(len(self.ranks)):
            for c in np.nonzero(~self.done[t] & ~gather[t])[0]:
                cumulative = np.cumsum(counts[t, c])
                bucket = int(np.searchsorted(cumulative, self.ranks[t] - self.below[t, c], side="right"))
                self.below[t, c] += cumulative[bucket - 1] if bucket else 0
                self.size[t, c] = counts[t, c, bucket]
                self.stuck[t, c] = self.size[t, c] == cumulative[-1]
                self.prefix[t, c] |= np.uint64(bucket) << shift
        self.fixed += DIGIT_BITS
