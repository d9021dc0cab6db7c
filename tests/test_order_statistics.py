"""tables.stats.order_statistics: the k-th values of each segment, whether segments are sorted by exact length
(few distinct lengths), as rows when all have one length, or by power-of-two length class with padding (many),
equal numpy's sort of each segment, whether every segment asks for the same ranks or each its own."""

from __future__ import annotations

import numpy as np
import pytest

from lerodoc.tables import stats


@pytest.mark.parametrize("partition", [0, 1 << 16])   # 0: every segment whose ranks are shared is partitioned
@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int16, np.bool_])
def test_order_statistics_equal_sorting_each_segment(monkeypatch, exact, dtype, partition):
    monkeypatch.setattr(stats, "EXACT_LENGTHS", 64 if exact else 0)
    monkeypatch.setattr(stats, "PARTITION_WIDTH", partition)
    rng = np.random.default_rng(0)
    for trial in range(30):
        n = int(rng.integers(1, 30))
        sizes = np.full(n, rng.integers(1, 25)) if trial % 3 == 0 else rng.integers(1, rng.integers(2, 70), n)
        part = (rng.normal(size=(3, int(sizes.sum()))) * 10).astype(dtype)
        if dtype in (np.float32, np.float64) and trial % 4 == 1:
            part[0, ::7] = np.nan   # NaN sorts last, as the padding does: a segment's own values come first
        ranks = np.stack([rng.integers(0, s, 5) for s in sizes])
        if trial % 2 == 0:   # every segment the same ranks (what quantiles ask of one length): one take
            ranks[:] = rng.integers(0, sizes.min(), 5)
        got = stats.order_statistics(part, sizes, ranks)
        starts = np.cumsum(sizes) - sizes
        want = np.stack([np.stack([np.sort(part[c, a:a + s])[r] for a, s, r in zip(starts, sizes, ranks)])
                         for c in range(part.shape[0])])
        assert got.dtype == part.dtype
        np.testing.assert_array_equal(got, want)


def test_distinct_equals_numpy_unique():
    """tables.stats.distinct (runs cut to one value, then sorted and each value kept once) gives np.unique's values,
    runs or none, NaN once."""
    rng = np.random.default_rng(1)
    floats = rng.standard_normal(300).round(1)
    floats[::3] = np.nan
    for values in (np.repeat(rng.integers(0, 50, 200), rng.integers(1, 9, 200)), rng.integers(-5, 5, 300),
                   np.zeros(0, np.int64), np.array([7]), np.sort(rng.integers(0, 9, 40)), floats,
                   np.array([np.nan, np.nan]), np.array([np.inf, np.nan, -np.inf, 1.0, np.nan], np.float32),
                   rng.integers(0, 3, 50).astype(np.int16)):
        got, want = stats.distinct(values), np.unique(values)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)   # NaN equal to NaN


def test_distinct_of_a_million_distinct_values_sorts_them():
    """numpy 2.4's np.unique of values alone hashes them (a million distinct int64 in about 0.9 s on a 2-core
    machine); distinct sorts them (about 0.05 s). Held as time against a sort of the same values, with room for a
    loaded machine."""
    import time
    values = np.random.default_rng(2).integers(0, 1 << 40, 1_000_000)
    started = time.perf_counter()
    np.sort(values)
    sort = time.perf_counter() - started
    started = time.perf_counter()
    got = stats.distinct(values)
    took = time.perf_counter() - started
    assert len(got) == len(np.unique(values, return_counts=True)[0])
    assert took < 6 * sort + 0.05, (took, sort)
