"""Stats: the stats files exist and are well-formed (no NaN, no count=0 placeholders, shapes that
match the features), pi0.5's q01/q99 are there and ordered, no channel explodes under quantile
normalisation, and the stats agree with the data (min/max/mean/std/count recomputed from the parquet).

"Dataset stats" are what training normalises with: meta/stats.json (v2.0, v3.0); for v2.1, the
aggregate of episodes_stats.jsonl as lerobot 0.3 builds it, plus whatever stats.json adds (quantiles).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lerodoc.checks import ERROR, WARNING, Context, Finding
from lerodoc.checks.indices import Run, placement
from lerodoc.checks.layout import data_files, episode_meta_files, finding_factory, valid_spec
from lerodoc.dataset import Dataset, Stats
from lerodoc.errors import LerodocError
from lerodoc.formats import v21, v30
from lerodoc.formats.info import INDEX_FEATURES, flat_names
from lerodoc.parquet_io import column_matrix, read_parquet
from lerodoc.stats import BASIC, EXTREME, NEAR_CONSTANT, aggregate, channel_flags, merge_dataset_stats, normalised

CODES = {
    "STA001": (WARNING, "meta/stats.json is missing (training then has no normalisation stats)",
               "lerodoc quantiles (or repair) writes stats.json from the data", True),
    "STA002": (ERROR, "v2.1 episodes lack an entry in meta/episodes_stats.jsonl",
               "lerodoc quantiles (or repair) recomputes per-episode stats", True),
    "STA010": (ERROR, "a stats value is NaN or infinite", "lerodoc repair recomputes the stats", True),
    "STA011": (ERROR, "a feature's stats are a count=0 placeholder (aggregation divides by zero)",
               "lerodoc repair removes the placeholder", True),
    "STA012": (ERROR, "a count is not shaped (1,) (lerobot: Shape of 'count' must be (1))",
               "lerodoc repair aligns the shapes", True),
    "STA013": (ERROR, "a stat's shape disagrees with the feature's shape (e.g. (1, 1) for shape [1])",
               "lerodoc repair aligns the shapes", True),
    "STA014": (ERROR, "a feature's stats lack one of min, max, mean, std, count",
               "lerodoc repair recomputes the stats", True),
    "STA015": (ERROR, "a feature that training normalises has no stats",
               "lerodoc quantiles (or repair) computes them; cameras need an entry for use_imagenet_stats", True),
    "STA020": (ERROR, "observation.state/action stats lack q01/q99 (pi0.5's QUANTILES normalisation raises)",
               "lerodoc quantiles adds exact q01..q99", True),
    "STA021": (WARNING, "observation.state/action stats lack q01/q99 (needed by pi0.5 once converted to v3.0)",
               "lerodoc quantiles adds exact q01..q99", True),
    "STA022": (ERROR, "stats are out of order (q01 > q99, min > max, mean outside [min, max], std < 0)",
               "lerodoc repair recomputes the stats", True),
    "STA030": (WARNING, "a near-constant channel: q99 - q01 is tiny, so quantile normalisation divides by ~0",
               "drop the channel with lerodoc select", False),
    "STA031": (WARNING, "an extreme channel: its quantile-normalised min or max is far outside [-1, 1]",
               "drop or rescale the channel with lerodoc select (the loss-explosion cause)", False),
    "STA040": (ERROR, "stats disagree with the data", "lerodoc repair recomputes the stats", True),
    "STA041": (WARNING, "stats of a bookkeeping column (index, episode_index, ...) disagree with the data; "
                        "training does not use them (stale after a merge)",
               "lerodoc repair recomputes the stats", True),
    "STA050": (ERROR, "the data holds NaN or infinite values", "fix or drop the affected episodes", False),
    "STA051": (ERROR, "a vector column's rows do not hold shape[0] values",
               "rewrite the column with shape[0] values per row, or fix the feature's shape", False),
    "STA052": (ERROR, "a numeric column cannot be read", "restore the data file from a good copy", False),
}
_finding = finding_factory(CODES)

STATE_ACTION = ("observation.state", "action")
VISUAL = ("image", "video")
ORDER = ("min", "q01", "q10", "q50", "q90", "q99", "max")
RTOL = {np.dtype("float32"): 1e-4, np.dtype("float16"): 1e-2}   # of the channel's magnitude; else 1e-7


@dataclass
class Source:
    """One stats dict and where it lives: dataset stats (episode None) or one episode's."""
    file: str
    episode: int | None
    stats: Stats

    @property
    def label(self) -> str:
        return "dataset stats" if self.episode is None else f"episode {self.episode}"


def check(ctx: Context) -> list[Finding]:
    ds = ctx.dataset
    if ds is None:
        return []
    sources = _sources(ctx)
    out = _stats_files(ctx) + _coverage(ctx, sources)
    for source in sources:
        out += _well_formed(ds, source)
    training = _training_stats(ds)
    out += _quantiles_present(ds, training) + _channels(ds, training)
    return out + _agreement(ctx, sources)


def _sources(ctx: Context) -> list[Source]:
    ds = ctx.dataset
    sources = [Source(v30.STATS_PATH, None, ds.stats)] if ds.stats is not None else []
    if ds.version == "v2.0":
        return sources
    files = episode_meta_files(ctx) if ds.version == "v3.0" else [v21.EPISODES_STATS_PATH] * len(ds.episodes)
    return sources + [Source(file, ep.index, ep.stats) for file, ep in zip(files, ds.episodes) if ep.stats]


def _stats_files(ctx: Context) -> list[Finding]:
    ds = ctx.dataset
    if ds.version in ("v2.0", "v3.0") and ds.stats is None:
        return [_finding("STA001", f"{v30.STATS_PATH} does not exist", file=v30.STATS_PATH)]
    if ds.version == "v2.1":
        lacking = [ep.index for ep in ds.episodes if not ep.stats]
        if lacking:
            present = (ctx.root / v21.EPISODES_STATS_PATH).is_file()
            text = (f"{len(lacking)} of {len(ds.episodes)} episodes have no stats line (first: episode {lacking[0]})"
                    if present else f"{v21.EPISODES_STATS_PATH} does not exist")
            return [_finding("STA002", text, file=v21.EPISODES_STATS_PATH, episode=lacking[0] if present else None)]
    return []


def _numeric(ds: Dataset) -> list[str]:
    """Numeric features with a well-formed spec (layout reports the others)."""
    return [name for name in ds.info.numeric_keys if valid_spec(ds.info.features[name])]


def _normalised_features(ds: Dataset) -> list[str]:
    """Features training normalises (or, for cameras, looks up): numeric non-bookkeeping and visual."""
    return [name for name, spec in ds.info.features.items()
            if name not in INDEX_FEATURES and spec["dtype"] != "string"]


def _coverage(ctx: Context, sources: list[Source]) -> list[Finding]:
    """Every normalised feature has stats: in stats.json, or (v2.1) in every episode's stats."""
    ds, out = ctx.dataset, []
    checked = [s for s in sources if (s.episode is None) == (ds.version != "v2.1")]
    for feature in _normalised_features(ds):
        lacking = [s for s in checked if feature not in s.stats]
        if lacking:
            first = lacking[0]
            scope = first.file if first.episode is None else \
                f"{len(lacking)} of {len(checked)} episodes (first: episode {first.episode})"
            out.append(_finding("STA015", f"{feature} has no stats in {scope}", file=first.file,
                                episode=first.episode, feature=feature))
    return out


# ---------------------------------------------------------------- one stats dict

def _placeholder(by_stat: dict[str, np.ndarray]) -> bool:
    """count == 0: a feature whose stats were never computed (lerobot's aggregation divides by it)."""
    count = by_stat.get("count")
    return count is not None and count.size > 0 and not count.any()


def _expected_shapes(spec: dict) -> list[tuple[int, ...]]:
    return [(3, 1, 1), (1, 1, 1)] if spec["dtype"] in VISUAL else [tuple(spec["shape"])]


def _required(ds: Dataset) -> tuple[str, ...]:
    """v2.0 stats.json has no count."""
    return tuple(k for k in BASIC if k != "count") if ds.version == "v2.0" else BASIC


def _well_formed(ds: Dataset, source: Source) -> list[Finding]:
    out = []
    for feature, by_stat in source.stats.items():
        spec = ds.info.features.get(feature)
        if spec is None or not valid_spec(spec) or spec["dtype"] == "string":
            continue
        where = dict(file=source.file, episode=source.episode, feature=feature)
        count = by_stat.get("count")
        if _placeholder(by_stat):
            out.append(_finding("STA011", f"{source.label}: {feature} has count {count.tolist()} (a placeholder)",
                                **where))
            continue
        if count is not None and count.shape != (1,):
            out.append(_finding("STA012", f"{source.label}: {feature} count {count.tolist()} has shape "
                                          f"{count.shape}, expected (1,)", **where))
        missing = [k for k in _required(ds) if k not in by_stat]
        if missing:
            out.append(_finding("STA014", f"{source.label}: {feature} lacks {', '.join(missing)}", **where))
        expected = _expected_shapes(spec)
        misshapen = {k: v.shape for k, v in by_stat.items() if k != "count" and v.shape not in expected}
        if misshapen:
            shown = ", ".join(f"{k} {s}" for k, s in misshapen.items())
            out.append(_finding("STA013", f"{source.label}: {feature} stats have shapes {shown}, the feature "
                                          f"needs {expected[0]}", **where))
            continue
        out += _values(source, feature, by_stat)
    return out


def _first(mask: np.ndarray) -> int | None:
    """The first True position of a boolean array, or None (the fast path: one `any`)."""
    return int(np.argmax(mask)) if mask.any() else None


def _order_pairs(flat: dict) -> list[tuple[str, str]]:
    """(lower, higher) stat pairs to check, q01 <= q99 first (what pi0.5 divides by)."""
    chain = [k for k in ORDER if k in flat]
    pairs = [("q01", "q99")] if "q01" in flat and "q99" in flat else []
    return pairs + list(zip(chain, chain[1:])) + [p for p in (("min", "mean"), ("mean", "max"))
                                                 if p[0] in flat and p[1] in flat]


def _values(source: Source, feature: str, by_stat: dict[str, np.ndarray]) -> list[Finding]:
    """No NaN/inf; min <= q01 <= ... <= q99 <= max, mean within [min, max], std >= 0 (per channel)."""
    where = dict(file=source.file, episode=source.episode, feature=feature)
    flat = {k: np.ravel(v).astype(np.float64) for k, v in by_stat.items()}
    for name, value in flat.items():
        c = _first(~np.isfinite(value))
        if c is not None:
            return [_finding("STA010", f"{source.label}: {feature} {name}[{c}] is {value[c]} "
                                       f"({_plural(int((~np.isfinite(value)).sum()), 'non-finite value')})",
                             channel=c, **where)]
    flat.pop("count", None)
    scale = np.maximum(np.abs(flat["min"]), np.abs(flat["max"])) if "min" in flat and "max" in flat else 0.0
    tolerance = 1e-6 * np.maximum(1.0, scale)
    for lo, hi in _order_pairs(flat):
        c = _first(flat[lo] > flat[hi] + tolerance)
        if c is not None:
            return [_finding("STA022", f"{source.label}: {feature} {lo}[{c}] = {flat[lo][c]:.6g} > "
                                       f"{hi}[{c}] = {flat[hi][c]:.6g}", channel=c, **where)]
    c = _first(flat["std"] < 0) if "std" in flat else None
    if c is not None:
        return [_finding("STA022", f"{source.label}: {feature} std[{c}] = {flat['std'][c]:.6g} < 0",
                         channel=c, **where)]
    return []


# ---------------------------------------------------------------- what training normalises with

def _training_stats(ds: Dataset) -> Stats:
    if ds.version != "v2.1":
        return ds.stats or {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            derived = aggregate([ep.stats for ep in ds.episodes if ep.stats])
    except (ValueError, TypeError, IndexError, KeyError):
        derived = {}   # malformed episode stats: reported per episode
    return merge_dataset_stats(derived, ds.stats)


def _stats_file(ds: Dataset) -> str:
    return v21.EPISODES_STATS_PATH if ds.version == "v2.1" else v30.STATS_PATH


def _quantiles_present(ds: Dataset, training: Stats) -> list[Finding]:
    out = []
    for feature in STATE_ACTION:
        if feature not in ds.info.features or feature not in training:
            continue
        missing = [k for k in ("q01", "q99") if k not in training[feature]]
        if missing:
            code = "STA020" if ds.version == "v3.0" else "STA021"
            out.append(_finding(code, f"dataset stats of {feature} lack {' and '.join(missing)}",
                                file=_stats_file(ds), feature=feature))
    return out


def _usable(by_stat: dict, width: int) -> bool:
    return all(k in by_stat and np.ravel(by_stat[k]).shape == (width,) and np.isfinite(by_stat[k]).all()
               for k in ("min", "max"))


def _channel_names(spec: dict) -> list[str]:
    try:
        return flat_names(spec.get("names")) or []
    except TypeError:   # names that are not a list or dict: layout's LAY017
        return []


def _channels(ds: Dataset, training: Stats) -> list[Finding]:
    """Near-constant and extreme channels of non-bookkeeping numeric features, from the stats values."""
    out = []
    for feature in _numeric(ds):
        by_stat, spec = training.get(feature), ds.info.features[feature]
        width = int(np.prod(spec["shape"]))
        if feature in INDEX_FEATURES or not by_stat or not _usable(by_stat, width):
            continue
        quantiles = all(k in by_stat and np.ravel(by_stat[k]).shape == (width,) for k in ("q01", "q99"))
        low, high = ("q01", "q99") if quantiles else ("min", "max")   # without quantiles: constant channels only
        view = {"min": np.ravel(by_stat["min"]), "max": np.ravel(by_stat["max"]),
                "q01": np.ravel(by_stat[low]), "q99": np.ravel(by_stat[high])}
        names = _channel_names(spec)
        for c, flags in enumerate(channel_flags(view)):
            if view["q01"][c] > view["q99"][c]:
                continue   # out of order: STA022
            label = f"{feature}[{c}]" + (f" ({names[c]})" if c < len(names) else "")
            where = dict(file=_stats_file(ds), feature=feature, channel=c)
            q01, q99 = view["q01"][c], view["q99"][c]
            if "near-constant" in flags:
                basis = "q99 - q01" if quantiles else "max - min (no quantiles)"
                out.append(_finding("STA030", f"{label}: {basis} = {q99 - q01:.3g} < {NEAR_CONSTANT:g} "
                                              f"(values {q01:.6g} .. {q99:.6g})", **where))
            elif "extreme" in flags:
                lo, hi = normalised(np.array([view["min"][c], view["max"][c]]), q01, q99)
                out.append(_finding("STA031", f"{label}: min {view['min'][c]:.6g} and max {view['max'][c]:.6g} "
                                              f"normalise to {lo:.4g} .. {hi:.4g} with q01 {q01:.6g}, q99 "
                                              f"{q99:.6g} (beyond +-{EXTREME:g})", **where))
    return out


# ---------------------------------------------------------------- stats against the data

def _run_stats(values: np.ndarray, runs: list[Run]) -> list[dict[str, np.ndarray]]:
    """min/max/mean/std/count of each run's rows (runs tile the file's rows in order)."""
    starts = np.array([r.start for r in runs])
    counts = np.array([r.length for r in runs])
    mins, maxs = np.minimum.reduceat(values, starts), np.maximum.reduceat(values, starts)
    means = np.add.reduceat(values, starts) / counts[:, None]
    deviation = values - np.repeat(means, counts, axis=0)
    stds = np.sqrt(np.add.reduceat(deviation * deviation, starts) / counts[:, None])
    return [{"min": mins[i], "max": maxs[i], "mean": means[i], "std": stds[i],
             "count": np.array([counts[i]], dtype=np.int64)} for i in range(len(runs))]


@dataclass
class DataStats:
    """Stats recomputed from the data, per episode and feature, and what could not be recomputed."""
    per_episode: dict[int, Stats]
    incomplete: set[str]          # features some rows of which were unreadable, non-finite or misshapen
    dirty: set[tuple[int, str]]   # (episode, feature) with non-finite values
    dtypes: dict[str, np.dtype]
    findings: list[Finding]       # what reading the data revealed (NaN, misshapen or unreadable columns)


def _numeric_matrix(table: pa.Table, feature: str, width: int) -> np.ndarray | str:
    """The column as a (rows, width) array, or why it is not one."""
    nulls = table.column(feature).null_count
    if nulls:
        return f"has {nulls} null rows"
    try:
        values = column_matrix(table.column(feature), table.num_rows)
    except (ValueError, pa.ArrowException) as exc:
        return f"rows hold varying numbers of values ({str(exc).splitlines()[0][:80]})"
    if values.shape[1] != width:
        return f"rows hold {values.shape[1]} values, the feature's shape needs {width}"
    return values


def _data_stats(ctx: Context) -> DataStats:
    """Exact per-episode stats of every numeric column, one projected read per data file."""
    ds, where = ctx.dataset, placement(ctx)
    numeric = _numeric(ds)
    result = DataStats({}, set() if where.complete else set(numeric), set(), {}, [])
    out = result.findings
    runs_by_file = where.by_file()
    for path, data in data_files(ctx).items():
        runs = runs_by_file.get(path)
        if not data.ok or not runs:
            continue
        columns = [f for f in numeric if f in data.schema.names]
        result.incomplete |= set(numeric) - set(columns)
        try:
            table = read_parquet(ctx.root / path, columns)
        except LerodocError as exc:
            out.append(_finding("STA052", f"{path}: {exc.message}", file=path))
            result.incomplete |= set(columns)
            continue
        for feature in columns:
            width = int(np.prod(ds.info.features[feature]["shape"]))
            values = _numeric_matrix(table, feature, width)
            if isinstance(values, str):
                out.append(_finding("STA051", f"{path}: {feature} {values}", file=path, feature=feature))
                result.incomplete.add(feature)
                continue
            result.dtypes.setdefault(feature, values.dtype)
            values = values.astype(np.float64)
            _non_finite(values, runs, feature, result)
            for run, stats in zip(runs, _run_stats(values, runs)):
                result.per_episode.setdefault(run.episode, {}).setdefault(feature, []).append(stats)
    for episode, by_feature in result.per_episode.items():
        for feature, parts in by_feature.items():
            by_feature[feature] = parts[0] if len(parts) == 1 else aggregate([{feature: p} for p in parts])[feature]
    return result


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _non_finite(values: np.ndarray, runs: list[Run], feature: str, result: DataStats) -> None:
    """One STA050 per episode with NaN/inf in `feature`; those episodes' stats are not compared."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    for run in runs:
        rows, channels = np.nonzero(bad[run.start:run.stop])
        if len(rows):
            row, c = int(rows[0]), int(channels[0])
            result.findings.append(_finding(
                "STA050", f"episode {run.episode}: {feature}[{c}] is {values[run.start + row, c]} at frame {row} "
                          f"({_plural(len(rows), 'non-finite value')} in the episode)",
                file=run.file, episode=run.episode, feature=feature, channel=c))
            result.dirty.add((run.episode, feature))
    result.incomplete.add(feature)


def _disagreement(stated: dict, actual: dict, rtol: float) -> list[tuple[str, int, float, float, int]]:
    """(stat, first channel, stated, actual, channels off) for each stat beyond tolerance."""
    scale = np.maximum(np.abs(actual["min"]), np.abs(actual["max"]))
    tolerance = rtol * scale + 1e-9
    off = []
    for name in ("min", "max", "mean", "std", "count"):
        if name not in stated:
            continue
        have, want = np.ravel(stated[name]).astype(np.float64), np.ravel(actual[name]).astype(np.float64)
        if have.shape != want.shape:
            continue   # reported as a shape problem
        bad = np.abs(have - want) > (0 if name == "count" else tolerance)
        c = _first(bad)
        if c is not None:
            off.append((name, c, float(have[c]), float(want[c]), int(bad.sum())))
    return off


def _agreement(ctx: Context, sources: list[Source]) -> list[Finding]:
    ds = ctx.dataset
    data = _data_stats(ctx)
    out = list(data.findings)
    recomputed = {}
    complete = [f for f in _numeric(ds) if f not in data.incomplete]
    if placement(ctx).complete and all(ep.index in data.per_episode for ep in ds.episodes):
        recomputed = aggregate([{f: data.per_episode[ep.index][f] for f in complete
                                 if f in data.per_episode[ep.index]} for ep in ds.episodes])
    for source in sources:
        actual = recomputed if source.episode is None else data.per_episode.get(source.episode, {})
        for feature, stated in source.stats.items():
            if feature not in actual or (source.episode, feature) in data.dirty or _placeholder(stated):
                continue
            rtol = RTOL.get(data.dtypes.get(feature), 1e-7)
            off = _disagreement(stated, actual[feature], rtol)
            if off:
                out.append(_mismatch(source, feature, off))
    return out


def _mismatch(source: Source, feature: str, off: list) -> Finding:
    name, c, have, want, channels = off[0]
    also = f" (also {', '.join(o[0] for o in off[1:])})" if len(off) > 1 else ""
    code = "STA041" if feature in INDEX_FEATURES else "STA040"
    return _finding(code, f"{source.label}: {feature} {name}[{c}] is {have:.6g}, the data gives {want:.6g} "
                          f"({_plural(channels, 'channel')} off){also}",
                    file=source.file, episode=source.episode, feature=feature, channel=c)
