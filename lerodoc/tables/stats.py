"""Feature statistics, the one place lerodoc computes them: the per-episode engine (`segment_stats`: min,
max, mean, std, count and quantiles of every episode of a matrix at once, by reduceat and one sort per length
class; `column_stats` for rows, `block_stats` for one (channels, frames) block), the exact aggregation of
per-episode stats and the one assembly of dataset stats (`dataset_stats`: the aggregate plus the quantiles over
all rows), which merge, derive, repair, quantiles and validate use. The shape a stored stat has is
`lerodoc.formats.stats.stat_shape`. What runs these over a dataset's files (workers, the run engine) is
`lerodoc.ops.stats`: this module imports neither the Dataset nor the engine.

Numeric features are held as groups (`Group`), one (channels, rows) matrix per dtype. When every value
fits the memory budget, each data file is read once (all needed columns), its columns are transposed
into the groups' matrices, the episodes' stats come from whole matrices at once (`in_memory_stats`), and the
dataset quantiles come from sorting the matrices in place (threads over channel blocks). Otherwise the
episodes are done per data file (`episode_stats`, a worker) and the dataset quantiles by
`lerodoc.tables.quantiles` (channel blocks, or radix selection). Every path gives the same bits as numpy's min,
max, mean, std and quantile (linear method) on the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from lerodoc.budget import give_back
from lerodoc.errors import LerodocError
from lerodoc.tables.parquet_io import column_matrix, iter_batches, leaf_values, open_parquet, read_parquet
from lerodoc.tables.quantiles import Selection, Tally, interpolate, key_slices, row_quantiles, transpose_into

Stats = dict[str, dict[str, np.ndarray]]   # feature -> stat name -> array: one episode's or the dataset's stats

BASIC = ("min", "max", "mean", "std", "count")
QUANTILES = ("q01", "q10", "q50", "q90", "q99")
LEVELS = [int(q[1:]) / 100 for q in QUANTILES]


def segment_stats(matrix: np.ndarray, lengths, *, quantiles: bool = True, chunk: int = 1 << 19
                  ) -> dict[str, np.ndarray]:
    """Per-segment stats of a (channels, frames) matrix whose frames are consecutive segments (episodes) of
    `lengths` frames: min, max, mean, std (population) as (segments, channels) float64 arrays, count as
    (segments,) int64 and, with `quantiles`, q01..q99 as (segments, channels). Whole columns at a time (reduceat,
    one sort per length class), `chunk` values of float64 temporaries at most; each segment gets the bits of
    numpy's min, max, mean, std and quantile (linear) of its rows as a C-contiguous float64 array (and its
    quantiles from a sort in the matrix's dtype), the bits `block_stats` gives one block. An empty segment's
    stats are NaN, its count 0."""
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    channels, segments = matrix.shape[0], len(lengths)
    if int(lengths.sum()) != matrix.shape[1]:
        raise ValueError(f"segments of {int(lengths.sum())} frames over a matrix of {matrix.shape[1]}")
    out = {k: np.full((segments, channels), np.nan) for k in ("min", "max", "mean", "std")}
    out["count"] = lengths.copy()   # lerobot's order: count before the quantiles
    out.update({k: np.full((segments, channels), np.nan) for k in (QUANTILES if quantiles else ())})
    ends = np.cumsum(lengths)
    starts = ends - lengths
    per = max(1, chunk // max(channels, 1))
    first = 0
    while first < segments:   # runs of whole segments of about `per` frames (at least one segment)
        last = max(first + 1, int(np.searchsorted(ends, starts[first] + per, side="right")))
        run = slice(first, last)
        sizes = lengths[run]
        keep = sizes > 0
        if keep.any():
            part = matrix[:, starts[first]:ends[last - 1]]
            picked = np.flatnonzero(keep) + first
            for key, values in _run_moments(part, sizes[keep]).items():
                out[key][picked] = values.T
            if quantiles:
                for key, values in zip(QUANTILES, _run_quantiles(part, sizes[keep])):
                    out[key][picked] = values.T
        first = last
    return out


def _run_moments(part: np.ndarray, sizes: np.ndarray) -> dict[str, np.ndarray]:
    """(channels, segments) min, max, mean, std of the non-empty segments tiling `part`. reduceat adds a
    segment as its first value plus numpy's pairwise sum of the rest; each segment is led by a -0.0 (the
    exact additive identity), so what it adds is the pairwise sum of all the segment's values: np.add.reduce's
    bits."""
    channels, frames = part.shape
    segments = len(sizes)
    if segments == 1:   # one segment (a block's whole rows): np.add.reduce itself, without the lead's scatter and
        # repeat: a million episodes' frames make one 80 MB float64 temporary a channel, not five
        values = part.astype(np.float64, order="C")
        mean = np.add.reduce(values, axis=1, keepdims=True) / sizes
        values -= mean
        np.square(values, out=values)
        return {"min": part.min(axis=1, keepdims=True).astype(np.float64),
                "max": part.max(axis=1, keepdims=True).astype(np.float64), "mean": mean,
                "std": np.sqrt(np.add.reduce(values, axis=1, keepdims=True) / sizes)}
    led = np.cumsum(sizes + 1) - (sizes + 1)                   # where each led segment starts
    at = np.arange(frames) + np.repeat(np.arange(1, segments + 1), sizes)   # each value's column in `held`
    held = np.full((channels, frames + segments), -0.0)
    held[:, at] = part
    mean = np.add.reduceat(held, led, axis=1)
    mean /= sizes
    spread = held - np.repeat(mean, sizes + 1, axis=1)
    np.square(spread, out=spread)
    spread[:, led] = -0.0
    variance = np.add.reduceat(spread, led, axis=1)
    variance /= sizes
    starts = led - np.arange(segments)    # min and max commute with the exact, monotonic cast to float64
    return {"min": np.minimum.reduceat(part, starts, axis=1).astype(np.float64),
            "max": np.maximum.reduceat(part, starts, axis=1).astype(np.float64), "mean": mean, "std": np.sqrt(variance)}


def distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values) of a 1-d array, by a sort: its runs of one value cut to one first (a column of rows in
    episode order, an episode's task or its file, holds few runs, and sorting them is what np.unique costs: 10
    million rows' in 0.8 s), then sorted and each value kept once, NaN once as np.unique keeps it. numpy 2.4's
    np.unique of the values alone hashes them instead: a million distinct int64 in 0.9 s, against 0.05 s sorted."""
    if len(values) > 1:
        values = values[np.r_[True, values[1:] != values[:-1]]]
    values = np.sort(values)
    if len(values) > 1:
        values = values[np.r_[True, values[1:] != values[:-1]]]
        if values.dtype.kind in "fc" and np.isnan(values[-1]):   # NaN != NaN: every NaN was kept, sorted last
            values = values[:int(np.argmax(np.isnan(values))) + 1]
    return values


EXACT_LENGTHS = 64   # order_statistics: up to this many distinct lengths, segments are sorted by exact length


def order_statistics(part: np.ndarray, sizes: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """(channels, segments, k) values of the given (segments, k) 0-based ranks within each non-empty segment of
    the `sizes` tiling a (channels, frames) `part`, in its dtype. Segments of a length class (lengths in
    (2^(k-1), 2^k]) are sorted together, padded past their end with the dtype's greatest value (NaN for floats,
    which numpy sorts last), so a segment's first n sorted values are its own. Where few lengths occur (at most
    EXACT_LENGTHS), segments of each length are sorted together instead, with no padding."""
    sizes, ranks = np.asarray(sizes, dtype=np.int64), np.asarray(ranks, dtype=np.int64)
    channels = part.shape[0]
    starts = np.cumsum(sizes) - sizes
    out = np.empty((channels,) + ranks.shape, dtype=part.dtype)
    lengths, exact = np.unique(sizes, return_inverse=True)
    if len(lengths) <= EXACT_LENGTHS:
        classes, widths = exact.reshape(-1), lengths
    else:
        classes = np.ceil(np.log2(sizes)).astype(np.int64)
        widths = 1 << np.arange(int(classes.max()) + 1)
    kind = part.dtype
    pad = np.nan if kind.kind == "f" else True if kind.kind == "b" else np.iinfo(kind).max
    if len(lengths) == 1 and lengths[0] * len(sizes) == part.shape[1]:   # one length: the segments are rows, no
        # gather (20,000 segments of 10 in 16 channels: 0.022 s against 0.036 s)
        block = part.reshape(channels, len(sizes), int(lengths[0])).copy()
        _order(block, ranks)
        return _pick(block, ranks)
    for k in np.unique(classes):
        chosen = np.flatnonzero(classes == k)
        width = int(widths[k])
        columns = starts[chosen, None] + np.arange(width)
        padded = np.arange(width) >= sizes[chosen, None]
        if padded.any():
            block = part[:, np.where(padded, 0, columns)]         # (channels, chosen, width)
            block[:, padded] = pad
        else:
            block = part[:, columns]
        _order(block, ranks[chosen])
        out[:, chosen] = _pick(block, ranks[chosen])
    return out


PARTITION_WIDTH = 1 << 16   # `_order`: segments longer than this that share their ranks are partitioned, not sorted


def _order(block: np.ndarray, ranks: np.ndarray) -> None:
    """Put each (channels, segments, width) `block` row's values at its (segments, k) `ranks` where a sort puts
    them. Rows longer than PARTITION_WIDTH that all ask for the same ranks are partitioned at them (numpy's
    multi-kth introselect, NaN last as in a sort: 3 million float32 in 0.08 s against a sort's 0.20 s); others are
    sorted. A row at a time, the partition costs more than the sort up to about 30,000 values a row (16 channels of
    segments of 300 frames: 0.78 s against 0.35 s), and less from about 100,000 (0.39 against 0.48 s)."""
    if block.shape[-1] > PARTITION_WIDTH and len(ranks) and (ranks == ranks[:1]).all():
        block.partition(np.unique(ranks[0]), axis=-1)
    else:
        block.sort(axis=-1)


def _pick(block: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """(channels, segments, k): each segment's values at its (segments, k) `ranks` in a (channels, segments, width)
    `block`. Where every segment asks for the same ranks (they follow from its length alone, as `_run_quantiles`'
    do), one take along the last axis: 0.049 s against take_along_axis' 0.120 s for 16 channels of 200,000
    segments of 10 (its index arrays are as large as the result, one for each axis)."""
    if len(ranks) and (ranks == ranks[:1]).all():
        return np.take(block, ranks[0], axis=-1)
    return np.take_along_axis(block, np.broadcast_to(ranks, block.shape[:1] + ranks.shape), axis=-1)


def _run_quantiles(part: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    """(channels, segments) q01..q99 of the non-empty segments tiling `part` (`order_statistics`, then numpy's
    linear method as `tables.quantiles` computes it: `interpolate`)."""
    last = (sizes - 1)[:, None]
    virtual = last * np.asarray(LEVELS, dtype=np.float64)          # (segments, levels), as `_ranks`
    low = np.clip(np.floor(virtual), 0, last).astype(np.int64)
    high = np.minimum(low + 1, last)
    picked = order_statistics(part, sizes, np.concatenate([low, high], axis=1))   # in the data's dtype: `interpolate`
    values = interpolate(picked[..., :len(LEVELS)], picked[..., len(LEVELS):], virtual - low)
    return [values[..., i] for i in range(len(LEVELS))]


def _one(stats: dict[str, np.ndarray], at: int = 0) -> dict[str, np.ndarray]:
    """The stats of segment `at` of `segment_stats`' result, shaped as one episode's: (channels,) arrays and
    count as a 1-element array."""
    return {k: (np.array([v[at]], dtype=np.int64) if k == "count" else v[at]) for k, v in stats.items()}


def column_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """min, max, mean, std (population) and count over axis 0 of an (N,) or (N, D) array (`segment_stats` of one
    segment: the bits of numpy's stats of each column as a contiguous float64 array)."""
    values = np.asarray(values)
    return _one(segment_stats((values[None, :] if values.ndim == 1 else values.T), [len(values)], quantiles=False))


def block_stats(block: np.ndarray, chunk: int = 1 << 24) -> dict[str, np.ndarray]:
    """Exact min, max, mean, std, count and q01..q99 of each row of a (channels, frames) block: the bits of
    numpy's min, max, mean, std and quantile on the rows as a C-contiguous float64 array (`segment_stats` of
    one segment). Rows are taken a few at a time, about `chunk` values (each row's stats are its own: the same
    bits), so that the float64 temporaries of a long block (a million episodes' frames) stay bounded."""
    rows = max(1, chunk // max(block.shape[1], 1))
    if block.shape[0] <= rows:
        return _one(segment_stats(block, [block.shape[1]]))
    parts = [_one(segment_stats(block[i:i + rows], [block.shape[1]])) for i in range(0, block.shape[0], rows)]
    return {k: parts[0][k] if k == "count" else np.concatenate([part[k] for part in parts]) for k in parts[0]}


def stack_stats(per_episode: list[Stats]) -> dict[str, dict[str, np.ndarray]]:
    """The BASIC stats of the features every episode holds all of, stacked over the episodes: feature -> stat ->
    (episodes, *shape), what `aggregate` reads."""
    features = set.intersection(*(set(s) for s in per_episode)) if per_episode else set()
    out: dict[str, dict[str, np.ndarray]] = {}
    for feature in sorted(features):
        parts = [s[feature] for s in per_episode]
        if all(all(k in p for k in BASIC) for p in parts):
            out[feature] = {k: np.stack([p[k] for p in parts]) for k in BASIC}
    return out


def aggregate(per_episode: list[Stats] | dict[str, dict[str, np.ndarray]]) -> Stats:
    """Dataset stats from per-episode stats (a list of dicts, or `stack_stats`' stacks): count-weighted mean,
    pooled variance, min of min, max of max.

    Exact for the BASIC stats. Quantiles cannot be aggregated exactly and are left out here;
    a feature is aggregated only when every episode has all its BASIC stats.
    """
    stacks = stack_stats(per_episode) if isinstance(per_episode, list) else per_episode
    out: Stats = {}
    for feature in sorted(stacks):
        stack = stacks[feature]
        if not all(k in stack for k in BASIC) or not len(stack["count"]):
            continue
        counts = stack["count"].reshape(len(stack["count"]), -1)[:, 0].astype(np.float64)
        total = counts.sum()
        if total <= 0:
            continue
        means = stack["mean"]
        weights = (counts / total).reshape((-1,) + (1,) * (means.ndim - 1))
        mean = (weights * means).sum(axis=0)
        variance = (weights * (stack["std"] ** 2 + (means - mean) ** 2)).sum(axis=0)
        out[feature] = {"min": np.min(stack["min"], axis=0), "max": np.max(stack["max"], axis=0),
                        "mean": mean, "std": np.sqrt(np.maximum(variance, 0.0)),
                        "count": np.array([int(total)], dtype=np.int64)}
    return out


def basic_columns(columns: dict[tuple[str, str], np.ndarray], features=None) -> dict[str, dict[str, np.ndarray]]:
    """The BASIC stats among (feature, stat) -> stacked values, per feature (what `aggregate` reads), of `features`
    only when given."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for (feature, stat), values in columns.items():
        if stat in BASIC and (features is None or feature in features):
            out.setdefault(feature, {})[stat] = values
    return out


def stack_partials(partials: list[Stats]) -> dict[str, dict[str, np.ndarray]]:
    """Aggregates of parts of a dataset (`aggregate` of each), stacked per feature as `aggregate` reads them: their
    aggregate is the whole's (count-weighted mean, pooled variance: the law of total variance, a part taken as one
    episode), up to rounding."""
    features = dict.fromkeys(feature for partial in partials for feature in partial)
    return {feature: {stat: np.stack([p[feature][stat] for p in partials if feature in p]) for stat in BASIC}
            for feature in features}


def merge_dataset_stats(fresh: Stats, previous: Stats | None) -> Stats:
    """`previous` overlaid by `fresh`, stat by stat: what `fresh` does not hold (e.g. quantiles the aggregation
    cannot derive) is kept from `previous`."""
    merged = {f: dict(v) for f, v in (previous or {}).items()}
    for feature, by_stat in fresh.items():
        merged.setdefault(feature, {}).update(by_stat)
    return merged


def dataset_stats(per_episode: list[Stats] | dict[str, dict[str, np.ndarray]], quantiles: Stats | None = None, *,
                  features: list[str] | None = None, previous: Stats | None = None) -> Stats:
    """Dataset stats, the one assembly: per feature the exact `aggregate` of the per-episode stats (BASIC),
    then its `quantiles` over all rows (`dataset_quantiles`); for `features` in that order (default: every
    feature either gives, aggregated ones first, sorted), over `previous` (`merge_dataset_stats`: the stats
    of other features, and those neither gives, are kept from it). A listed feature that neither gives (no rows,
    no per-episode stats) gets no entry of its own: an empty one would reach stats.json as a feature without
    stats."""
    basic, quantiles = aggregate(per_episode), quantiles or {}
    names = list(dict.fromkeys([*basic, *quantiles])) if features is None else features
    return merge_dataset_stats({name: {**basic.get(name, {}), **quantiles.get(name, {})} for name in names
                                if name in basic or name in quantiles}, previous)


NEAR_CONSTANT = 1e-6      # q99 - q01 below this: quantile normalisation divides by (almost) nothing
EXTREME = 10.0            # |quantile-normalised min or max| above this: the loss sees huge inputs


def normalised(values: np.ndarray, q01: np.ndarray, q99: np.ndarray) -> np.ndarray:
    """lerobot's QUANTILES normalisation, 2 (x - q01) / (q99 - q01) - 1 (eps 1e-8 for a zero range), the one rule
    for the channel flags, the checks and training (which casts it to float32). `x - q01` keeps numpy's types (a
    float32 state minus float32 quantiles stays float32, as at inference); the scale is float64."""
    span = np.asarray(q99, dtype=np.float64) - np.asarray(q01, dtype=np.float64)
    return (np.asarray(values) - q01) * (2.0 / np.where(span == 0, 1e-8, span)) - 1.0


def channel_flags(stats: dict[str, np.ndarray]) -> list[list[str]]:
    """Per channel: 'near-constant' and/or 'extreme' (see NEAR_CONSTANT, EXTREME); needs q01/q99/min/max."""
    q01, q99, low, high = (np.ravel(stats[s]).astype(np.float64) for s in ("q01", "q99", "min", "max"))
    reach = np.maximum(np.abs(normalised(low, q01, q99)), np.abs(normalised(high, q01, q99)))
    return [(["near-constant"] if span < NEAR_CONSTANT else []) + (["extreme"] if r > EXTREME else [])
            for span, r in zip(q99 - q01, reach)]


@dataclass(frozen=True)
class Group:
    """Features held together as one (channels, rows) matrix: float32 ones stay float32, others float64."""
    dtype: type
    names: tuple[str, ...]
    widths: tuple[int, ...]

    @property
    def width(self) -> int:
        return sum(self.widths)

    def names_in(self, lo: int = 0, hi: int | None = None) -> list[str]:
        """The features that hold some of the channels lo:hi."""
        hi = self.width if hi is None else hi
        bounds = np.cumsum((0,) + self.widths)
        return [n for n, a, b in zip(self.names, bounds[:-1], bounds[1:]) if a < hi and b > lo]

    def parts(self, table, start: int = 0, length: int | None = None, source=None, lo: int = 0,
              hi: int | None = None) -> list[np.ndarray]:
        """(rows, w) matrices side by side of the group's channels lo:hi (all by default); a row range when
        `length` is given. A column whose rows hold another number of values than its feature's shape is a
        LerodocError naming `source` and the feature."""
        length = table.num_rows - start if length is None else length
        hi = self.width if hi is None else hi
        parts, first = [], 0
        for name, width in zip(self.names, self.widths):
            if first < hi and first + width > lo:
                try:
                    part = column_matrix(table.column(name).slice(start, length), length)
                    held = str(part.shape[1])
                except ValueError:   # ragged lists: rows of different lengths
                    part, held = None, "rows of different lengths"
                if part is None or part.shape[1] != width:
                    raise LerodocError(f"holds {held} value(s) per row where info.json's shape gives {width}",
                                       file=source, field=name,
                                       hint="lerodoc validate compares columns and info.json")
                parts.append(part[:, max(lo - first, 0):min(hi - first, width)])
            first += width
        return parts

    def matrix(self, table, start: int = 0, length: int | None = None, source=None) -> np.ndarray:
        """(rows, channels) of the group's columns; a row range when `length` is given."""
        return np.hstack(self.parts(table, start, length, source))

    def split(self, stats: dict[str, np.ndarray]) -> Stats:
        """Per-channel stats of the whole group -> per-feature stats."""
        bounds = np.cumsum((0,) + self.widths)
        return {name: {k: (v if k == "count" else v[..., lo:hi]) for k, v in stats.items()}
                for name, lo, hi in zip(self.names, bounds[:-1], bounds[1:])}


def groups_of(features: list[str], specs: dict) -> list[Group]:
    by_dtype: dict[type, list[str]] = {}
    for name in features:
        by_dtype.setdefault(np.float32 if specs[name]["dtype"] == "float32" else np.float64, []).append(name)
    return [Group(dtype, tuple(names), tuple(int(np.prod(specs[n]["shape"])) for n in names))
            for dtype, names in by_dtype.items()]


def check_finite(block: np.ndarray, group: Group, file: str, episode: int) -> None:
    """A (channels, frames) block of one episode holds no NaN/inf, or a clear error names the first."""
    bad = ~np.isfinite(block)
    if bad.any():
        channel, frame = map(int, np.argwhere(bad)[0])
        bounds = np.cumsum((0,) + group.widths)
        at = int(np.searchsorted(bounds, channel, side="right")) - 1
        raise LerodocError(f"holds {int(bad.sum())} NaN/inf values (first at frame {frame}, channel "
                           f"{channel - bounds[at]})", file=file, episode=episode, field=group.names[at],
                           hint="lerodoc validate names every one")


def _tiled(matrix: np.ndarray, firsts, lengths) -> tuple[np.ndarray, np.ndarray]:
    """(the frame spans [first, first + length) of a (channels, frames) matrix side by side, their lengths):
    a view of the matrix's columns when they follow one another (a thread's run of a file's episodes), else the
    spans gathered."""
    firsts, lengths = np.asarray(firsts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    ends = firsts + lengths
    if len(firsts) and np.array_equal(firsts[1:], ends[:-1]):
        return matrix[:, int(firsts[0]):int(ends[-1])], lengths
    offsets = np.cumsum(lengths) - lengths
    return matrix[:, np.arange(int(lengths.sum())) + np.repeat(firsts - offsets, lengths)], lengths


def spans_stats(matrix: np.ndarray, firsts, lengths, *, quantiles: bool = True) -> dict[str, np.ndarray]:
    """`segment_stats` of the frame spans [first, first + length) of a (channels, frames) matrix, in any order."""
    return segment_stats(*_tiled(matrix, firsts, lengths), quantiles=quantiles)


def spans_order_statistics(matrix: np.ndarray, firsts, lengths, ranks) -> np.ndarray:
    """`order_statistics` of the non-empty frame spans [first, first + length) of a (channels, frames) matrix, in
    any order: (channels, spans, k) for (spans, k) ranks."""
    return order_statistics(*_tiled(matrix, firsts, lengths), ranks)


def split_features(stats: dict[str, np.ndarray], names: tuple[str, ...], widths: tuple[int, ...]
                   ) -> dict[str, dict[str, np.ndarray]]:
    """`segment_stats`' result (channels side by side) cut per feature: feature -> stat -> (segments, ...), the count
    (segments, 1)."""
    bounds = np.cumsum((0,) + tuple(widths))
    counts = stats["count"].reshape(-1, 1).astype(np.int64)
    return {name: {k: (counts if k == "count" else v[:, lo:hi]) for k, v in stats.items()}
            for name, lo, hi in zip(names, bounds[:-1], bounds[1:])}


def table_stacks(table, columns, firsts, lengths, *, quantiles: bool = True) -> dict[str, dict[str, np.ndarray]]:
    """Per row span [first, first + length) of an Arrow table, the stats of each of its `columns` (numeric, scalar
    or list), stacked: feature -> stat -> (spans, ...); one `spans_stats` per column over all the spans at once."""
    stacks: dict[str, dict[str, np.ndarray]] = {}
    for name in columns:
        matrix = column_matrix(table.column(name), table.num_rows).T
        stacks.update(split_features(spans_stats(matrix, firsts, lengths, quantiles=quantiles), (name,),
                                     (matrix.shape[0],)))
    return stacks


def _episodes_of(matrix: np.ndarray, group: Group, episodes: list[tuple[int, int, int, str]]
                 ) -> dict[str, dict[str, np.ndarray]]:
    """Stats of each (first column, length, index, file) episode of a group's matrix, stacked per feature and stat
    (episodes, ...); NaN/inf (seen in an episode's min or max) is a clear error naming the first such episode."""
    firsts, lengths = (np.array([e[i] for e in episodes], dtype=np.int64) for i in (0, 1))
    stats = spans_stats(matrix, firsts, lengths)
    bad = ~(np.isfinite(stats["min"]).all(axis=1) & np.isfinite(stats["max"]).all(axis=1)) & (lengths > 0)
    for e in np.flatnonzero(bad)[:1]:
        first, length, index, path = episodes[e]
        check_finite(matrix[:, first:first + length], group, path, index)
    return split_features(stats, group.names, group.widths)


class SpilledStack:
    """One stat's stack over episodes, kept in .npy files of consecutive rows (one a part, in order) and read a slice
    at a time: a rewrite's new per-episode stats of a million episodes are gigabytes, a slice's are megabytes. Reads
    as an array read by `values[lo:hi]` (and `shape`, `dtype`); `values[:]` is the whole stack in memory."""

    def __init__(self, paths: list[str], lengths: list[int], shape: tuple, dtype):
        self.paths = list(paths)
        self.ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
        self.starts = self.ends - np.asarray(lengths, dtype=np.int64)
        self.shape = (int(self.ends[-1]) if len(self.ends) else 0, *shape)
        self.dtype = np.dtype(dtype)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError(f"SpilledStack reads slices of consecutive rows, not {key!r}")
        lo, hi, _ = key.indices(self.shape[0])
        out = np.empty((max(hi - lo, 0), *self.shape[1:]), dtype=self.dtype)
        for k in range(int(np.searchsorted(self.ends, lo, side="right")), len(self.paths)):
            first, last = int(self.starts[k]), int(self.ends[k])
            if first >= hi:
                break
            part = np.load(self.paths[k], mmap_mode="r")   # its pages mapped while copied, unmapped after
            a, b = max(lo, first), min(hi, last)
            out[a - lo:b - lo] = part[a - first:b - first]
            del part
        return out


class EpisodeStacks(Mapping):
    """Per-episode stats stacked: feature -> stat -> (episodes, ...), row i being episode `order[i]`. As a
    Mapping, episode index -> that episode's {feature: {stat: value}} (rows of the stacks)."""

    def __init__(self, indices, stacks: dict[str, dict[str, np.ndarray]]):
        # the episode indices as one int64 array (`order`): a list of a million Python ints is 40 MB
        self.order, self.stacks = np.asarray(indices, dtype=np.int64).reshape(-1), stacks

    @cached_property
    def _row(self) -> dict[int, int]:
        """Episode index -> its row, made on the first lookup (100 bytes an episode: a rewrite that lays the stacks
        over its episodes in their own order never makes it)."""
        return {index: i for i, index in enumerate(self.order.tolist())}

    def __getitem__(self, index: int) -> Stats:
        i = self._row[index]
        return {feature: {stat: values[i] for stat, values in by_stat.items()}
                for feature, by_stat in self.stacks.items()}

    @classmethod
    def joined(cls, parts: list[tuple[list[int] | np.ndarray, dict[str, dict[str, np.ndarray]]]], *,
               consume: bool = False) -> EpisodeStacks:
        """One EpisodeStacks of (episode indices, stacks) parts that hold the same features' same stats: their rows
        one part after the other. With `consume`, each stat's part arrays are let go as soon as they are joined (the
        parts' dicts are emptied), so the join holds one stat twice, not every stat."""
        first = parts[0][1]
        indices = np.concatenate([np.asarray(part, dtype=np.int64).reshape(-1) for part, _ in parts])
        if len(parts) == 1:
            return cls(indices, first)
        stacks: dict[str, dict[str, np.ndarray]] = {}
        for feature, by_stat in first.items():
            for stat in list(by_stat):
                stacks.setdefault(feature, {})[stat] = np.concatenate([part[feature][stat] for _, part in parts])
                if consume:
                    for _, part in parts:
                        del part[feature][stat]
                    give_back()   # the parts' blocks (a data file's rows each), before the next stat's stack
        return cls(indices, stacks)

    def __contains__(self, index) -> bool:
        return index in self._row

    def __iter__(self):
        return iter(self.order.tolist())

    def __len__(self) -> int:
        return len(self.order)

    def aligned(self, indices) -> dict[str, dict[str, np.ndarray]]:
        """The stacks with their rows in the order of `indices` (episode indices this holds)."""
        if np.array_equal(np.asarray(indices, dtype=np.int64).reshape(-1), self.order):
            return self.stacks
        rows = np.array([self._row[i] for i in np.asarray(indices).tolist()], dtype=np.int64)
        return {feature: {stat: values[rows] for stat, values in by_stat.items()}
                for feature, by_stat in self.stacks.items()}


def _all_episodes(matrices: list[np.ndarray], groups: list[Group], episodes: list[tuple[int, int, int, str]],
                  workers: int = 1, pool: ThreadPoolExecutor | None = None) -> EpisodeStacks:
    """The stats of each (first column, length, index, file) episode of the groups' matrices, stacked in the order
    of `episodes`: whole matrices at a time, in `workers` runs of consecutive episodes (threads of `pool`)."""
    size = -(-len(episodes) // max(1, workers)) or 1
    runs = [(m, g, episodes[i:i + size]) for g, m in zip(groups, matrices) for i in range(0, len(episodes), size)]
    stacks: dict[str, dict[str, list[np.ndarray]]] = {}
    for part in (pool.map if pool else map)(lambda r: _episodes_of(*r), runs):   # in order: a group's runs in turn
        for feature, by_stat in part.items():
            for stat, values in by_stat.items():
                stacks.setdefault(feature, {}).setdefault(stat, []).append(values)
    # joined stat by stat, each stat's parts let go once joined: a stat's parts are views of one array per run
    # (`split_features` of its features side by side), freed once every feature's rows of it are copied out
    joined = {feature: dict.fromkeys(by_stat) for feature, by_stat in stacks.items()}
    for stat in dict.fromkeys(stat for by_stat in stacks.values() for stat in by_stat):
        for feature, by_stat in stacks.items():
            if stat in by_stat:
                joined[feature][stat] = np.concatenate(by_stat.pop(stat))
    return EpisodeStacks(np.fromiter((index for _, _, index, _ in episodes), dtype=np.int64, count=len(episodes)),
                         joined)


Target = tuple[Group, np.ndarray, int, int]   # a group, its (hi - lo, N) matrix, and the channels lo:hi it holds


def load(path: str, targets: list[Target], at: int, rows: int) -> None:
    """Stream a data file of `rows` rows into columns at:at + rows of each target's matrix (its channels)."""
    file = open_parquet(path, streaming=True)
    if file.metadata.num_rows != rows:
        raise LerodocError(f"holds {file.metadata.num_rows} rows where its episodes in the metadata hold {rows}",
                           file=path, hint="lerodoc validate compares the files with the metadata")
    columns = dict.fromkeys(n for group, _, lo, hi in targets for n in group.names_in(lo, hi))
    for batch in iter_batches(file, path, list(columns)):
        for group, matrix, lo, hi in targets:
            channel = 0
            for part in group.parts(batch, source=path, lo=lo, hi=hi):
                transpose_into(matrix[channel:channel + part.shape[1], at:at + len(part)], part)
                channel += part.shape[1]
        at += batch.num_rows


def episode_stats(args: tuple[str, list[tuple[int, int, int]], list[Group]], workers: int = 1) -> EpisodeStacks:
    """Worker: exact stats of each (episode, first row, length) of one data file (in `workers` threads)."""
    path, episodes, groups = args
    rows = sum(length for _, _, length in episodes)
    matrices = [np.empty((g.width, rows), dtype=g.dtype) for g in groups]
    load(path, [(g, m, 0, g.width) for g, m in zip(groups, matrices)], 0, rows)
    spans = [(start, length, index, path) for index, start, length in episodes]
    if workers <= 1:
        return _all_episodes(matrices, groups, spans)
    with ThreadPoolExecutor(workers) as pool:
        return _all_episodes(matrices, groups, spans, workers, pool)


def in_memory_stats(by_file: dict[str, list[tuple[int, int, int]]], groups: list[Group], workers: int
                    ) -> tuple[Stats, EpisodeStacks]:
    """Dataset and per-episode stats with every value of the groups held in memory, each file read once
    (threads over files, then over episodes, then over channels)."""
    starts, at = {}, 0
    for path, eps in by_file.items():
        starts[path] = at
        at += sum(length for _, _, length in eps)
    matrices = [np.empty((g.width, at), dtype=g.dtype) for g in groups]
    targets = [(g, m, 0, g.width) for g, m in zip(groups, matrices)]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(lambda path: load(path, targets, starts[path], sum(e[2] for e in by_file[path])), by_file))
        episodes = [(starts[path] + row, length, index, path) for path, eps in by_file.items()
                    for index, row, length in eps]
        episode_stats = _all_episodes(matrices, groups, episodes, workers, pool)
    dataset: Stats = {}
    for group, matrix in zip(groups, matrices):
        dataset.update(group.split(dict(zip(QUANTILES, row_quantiles(matrix, LEVELS, workers, in_place=True)))))
    return dataset, episode_stats


def check_sizes(by_file: dict[str, list[tuple[int, int, int]]], groups: list[Group]) -> None:
    """Before any matrix is sized from the metadata: each data file's footer holds the rows its (episode, first
    row, length) episodes claim, and each feature's column the values its info.json shape gives for them. A
    damaged or crafted claim (an episode of 1e12 frames, a shape of 1e8 values) is a LerodocError naming the
    file, never an allocation."""
    for path, eps in by_file.items():
        rows = sum(length for _, _, length in eps)
        meta = open_parquet(path, eps[0][0] if eps else None).metadata
        if meta.num_rows != rows:
            raise LerodocError(f"holds {meta.num_rows} rows where its episodes in the metadata hold {rows}",
                               file=path, hint="lerodoc validate compares the files with the metadata")
        held = leaf_values(meta)
        for group in groups:
            for name, width in zip(group.names, group.widths):
                if name in held and held[name] < width * rows:
                    raise LerodocError(f"holds {held[name]} values in {rows} rows where info.json's shape gives "
                                       f"{width} per row", file=path, field=name,
                                       hint="lerodoc validate compares columns and info.json")


def tally_files(args: tuple[list[str], Group, Selection]) -> Tally:
    """Worker: one radix-selection pass over the group's columns of some data files."""
    files, group, selection = args
    return selection.tally_of(key_slices(group.matrix(read_parquet(f, list(group.names)), source=f) for f in files))
