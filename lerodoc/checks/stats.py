"""Stats: the stats files exist and are well-formed (no NaN, no count=0 placeholders, shapes that
match the features), pi0.5's q01/q99 are there and ordered, no channel explodes under quantile
normalisation, and the stats agree with the data (min/max/mean/std/count recomputed from the parquet).

"Dataset stats" are what training normalises with: meta/stats.json (v2.0, v3.0); for v2.1, the
aggregate of episodes_stats.jsonl as lerobot 0.3 builds it, plus whatever stats.json adds (quantiles).
"""

from __future__ import annotations

import warnings
from itertools import groupby
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter

import numpy as np
import pyarrow as pa

from lerodoc.checks.common import (ERROR, WARNING, Context, Finding, data_files, episode_columns, episode_meta_files,
                                   finding_factory, numeric_features, relative, valid_spec)
from lerodoc.checks.indices import placement
from lerodoc.dataset import Dataset
from lerodoc.tables.stats import Stats
from lerodoc.budget import give_back
from lerodoc.errors import LerodocError
from lerodoc.formats import v21, v30
from lerodoc.formats.info import INDEX_FEATURES, flat_names
from lerodoc.formats.model import (Episode, episode_column, features_held, stats_held, stats_holders, stats_matrices,
                                   stats_row, stats_stack)
from lerodoc.formats.stats import is_placeholder, is_shaped, stat_shape
from lerodoc.run.parallel import pmap
from lerodoc.tables.parquet_io import column_matrix, read_parquet
from lerodoc.tables.stats import (BASIC, EXTREME, NEAR_CONSTANT, aggregate, channel_flags, dataset_stats, distinct,
                                   normalised, spans_order_statistics, spans_stats)

CODES = {
    "STA001": (WARNING, "meta/stats.json is missing (training then has no normalisation stats)",
               "lerodoc quantiles (or repair) writes stats.json from the data", True),
    "STA002": (ERROR, "v2.1 episodes lack an entry in meta/episodes_stats.jsonl",
               "lerodoc quantiles (or repair) recomputes per-episode stats", True),
    "STA003": (ERROR, "a file of per-episode stats cannot be read as numbers (a stats column of text, a count that "
                      "is no whole number, undecodable pages, a malformed episodes_stats.jsonl line); its episodes are "
                      "checked as holding no stats", "lerodoc repair recomputes the stats", True),
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
               "lerodoc quantiles (or repair) computes them", True),
    "STA016": (WARNING, "a camera has no stats (lerobot's convert_image_to_video writes none): LeRobotDataset loads "
                        "it and pi0.5 does not normalise cameras, but lerobot-train's use_imagenet_stats (on by "
                        "default) raises KeyError on it",
               "train lerobot with --dataset.use_imagenet_stats=false, or write the camera's stats "
               "(lerobot's recompute_stats with skip_image_video=False)", False),
    "STA020": (WARNING, "observation.state/action stats lack q01/q99 (pi0.5's QUANTILES normalisation needs them; "
                        "lerobot's converter and older recorders write none, and train pi05 refuses the dataset)",
               "lerodoc quantiles adds exact q01..q99", True),
    "STA021": (WARNING, "observation.state/action stats lack q01/q99 (needed by pi0.5 once converted to v3.0)",
               "lerodoc quantiles adds exact q01..q99", True),
    "STA022": (ERROR, "stats are out of order beyond what rounding explains (q01 > q99, min > max, mean or a "
                      "quantile outside [min, max], std < 0)",
               "lerodoc repair recomputes the stats", True),
    "STA023": (WARNING, "stats are out of order by a little more than rounding of the feature's dtype explains "
                        "(at most 0.1% of the channel's range beyond it; harmless for training)",
               "lerodoc repair recomputes the stats", True),
    "STA030": (WARNING, "a near-constant channel: q99 - q01 is tiny, so quantile normalisation divides by ~0",
               "drop the channel with lerodoc select", False),
    "STA031": (WARNING, "an extreme channel: its quantile-normalised min or max is far outside [-1, 1]",
               "drop or rescale the channel with lerodoc select (the loss-explosion cause)", False),
    "STA040": (ERROR, "stats disagree with the data beyond rounding (min/max beyond the dtype's rounding, mean "
                      "beyond float32 summation error, std beyond E[x^2]-E[x]^2 cancellation, count != rows, a "
                      "per-episode quantile off by more than a quarter of the channel's range)",
               "lerodoc repair recomputes the stats", True),
    "STA041": (WARNING, "stats of a bookkeeping column (index, episode_index, ...) disagree with the data; "
                        "training does not use them (stale after a merge)",
               "lerodoc repair recomputes the stats", True),
    "STA042": (WARNING, "a std carries the cancellation error of E[x^2] - E[x]^2 (lerobot >= 0.4's formula, "
                        "in float32 for float32 data: e.g. std 0.008 on a channel that is constantly 9.81); within "
                        "that formula's error bound, so lerobot's normal output",
               "lerodoc repair recomputes the stats", True),
    "STA043": (WARNING, "a per-episode quantile is further from the data's than lerobot's histogram quantiles "
                        "(5000 bins, interpolated) explain, by up to a quarter of the channel's range",
               "lerodoc repair recomputes the stats", True),
    "STA044": (WARNING, "v2.1 meta/stats.json min/max/mean/std/count disagree with the data; lerobot reads "
                        "episodes_stats.jsonl instead, so training does not use them (stale from an older version)",
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


@dataclass
class Source:
    """One stats dict and where it lives: dataset stats (episode None) or one episode's. An episode's is `held` as the
    Episode and read from it only when asked (`stats`): while its stats are an unread row of a table, the common path
    takes them as columns (`_columns`) and no dict is made."""
    file: str
    episode: int | None
    held: Stats | Episode

    @cached_property
    def stats(self) -> Stats:
        """The stats; an episode's unread row is read for the check and kept here, not on the episode (validate
        leaves the dataset as it found it: at a million episodes every episode's dict is gigabytes, and a rewrite
        after it, repair's, takes unread rows a file at a time)."""
        if not isinstance(self.held, Episode):
            return self.held
        row = stats_row(self.held)
        return self.held.stats if row is None else row()

    @property
    def label(self) -> str:
        return "dataset stats" if self.episode is None else f"episode {self.episode}"


BLOCK = 1 << 16   # at most this many episodes (metadata order) whose stated and recomputed stats the family holds at
                  # once (issue 37): whole episodes metadata files where they fit, each file's stats let go after
                  # its last block


UNREADABLE = "per-episode stats cannot be read: "   # STA003's message, before the reader's words (repair quotes them)


def unreadable(ctx: Context, error: LerodocError) -> Finding:
    """STA003 for a table of per-episode stats that could not be read (`formats.model.StatsUnreadable`)."""
    where = f"{error.field}: " if error.field else ""
    return _finding("STA003", f"{UNREADABLE}{where}{error.message}", file=relative(ctx.root, error.file),
                    episode=error.episode)


def check(ctx: Context) -> list[Finding]:
    ds = ctx.dataset
    if ds is None:
        return []
    head = _head(ds)
    out = _stats_files(ctx) + _coverage(ctx, _sources(ctx) if ds.version == "v2.1" else head)
    formed = [f for source in head for f in _well_formed(ds, source)]
    compared: list[Finding] = []
    tally = Tally()
    bounds = _blocks(ctx).bounds if ctx.stats else [(0, len(ds.episodes))]   # without: no episode's stats are read
    holders = stats_holders(ds.episodes[slice(*bounds[0])]) if len(bounds) > 1 else {}
    for k, (lo, hi) in enumerate(bounds):
        block = _episodic(ctx, lo, hi)
        groups = _columns(block)
        suspect = _suspects(ds, groups)
        for source in _among(block, groups, suspect):
            formed += _well_formed(ds, source, suspect.get(source.episode))
        if ctx.stats:
            compared += _agree_block(ctx, block, groups, tally, k)
        del block, groups
        if k + 1 < len(bounds):
            following = stats_holders(ds.episodes[slice(*bounds[k + 1])])
            _let_go(holders, following)
            holders = following
    training = _training_stats(ds)
    _let_go(holders, {})   # the last block's tables too: what follows validate (report, repair) reads its own
    out += formed + _quantiles_present(ds, training) + _channels(ds, training)
    if not ctx.stats:
        return out
    complete = [f for f in numeric_features(ds) if f not in tally.incomplete]
    recomputed = tally.recomputed(complete) if placement(ctx).complete else {}
    found = [finding for _, finding in sorted(tally.found.items(), key=itemgetter(0))]
    return out + found + [f for source in head for f in _compare(ds, source, recomputed, tally.dtypes)] + compared


def _head(ds: Dataset) -> list[Source]:
    """The dataset stats as a source, when there are any."""
    return [Source(v30.STATS_PATH, None, ds.stats)] if ds.stats is not None else []


def _sources(ctx: Context) -> list[Source]:
    """The dataset stats, then every episode's (`_episodic`)."""
    return _head(ctx.dataset) + _episodic(ctx, 0, len(ctx.dataset.episodes))


def _episodic(ctx: Context, lo: int, hi: int) -> list[Source]:
    """The stats of the episodes at metadata positions [lo, hi) that have any (none for v2.0, or without
    ctx.stats)."""
    ds = ctx.dataset
    if ds.version == "v2.0" or not ctx.stats:
        return []
    episodes = ds.episodes[lo:hi]
    files = episode_meta_files(ctx)[lo:hi] if ds.version == "v3.0" else [v21.EPISODES_STATS_PATH] * len(episodes)
    held = stats_held(episodes).tolist()
    return [Source(file, ep.index, ep) for file, ep, has in zip(files, episodes, held) if has]


@dataclass
class Blocks:
    """The family's blocks: metadata position ranges, and per block the runs (`placement`'s) whose stats it
    recomputes, those of its episodes (a run of an episode the metadata does not list goes to the last block)."""
    bounds: list[tuple[int, int]]
    runs: list[np.ndarray]
    whole: np.ndarray      # per run: its episode's only run
    last: dict[int, int]   # placed file -> the last block that reads it


def _blocks(ctx: Context) -> Blocks:
    """BLOCK episodes at a time; one block with an engine (its workers read the files themselves)."""
    if "stats.blocks" in ctx.cache:
        return ctx.cache["stats.blocks"]
    where, n = placement(ctx), len(ctx.dataset.episodes)
    bounds = [(0, n)] if ctx.engine is not None else _bounds(ctx)
    known, counts = np.unique(where.episode, return_counts=True)
    whole = counts[np.searchsorted(known, where.episode)] == 1
    if len(bounds) == 1:
        runs = [np.arange(len(where.episode), dtype=np.int64)]
    else:
        indices = episode_columns(ctx).index
        order = np.argsort(indices, kind="stable")
        ordered = indices[order]
        first, stop = np.searchsorted(ordered, where.episode), np.searchsorted(ordered, where.episode, side="right")
        block = np.full(len(where.episode), len(bounds) - 1, dtype=np.int64)
        listed = stop > first
        starts = np.array([lo for lo, _ in bounds], dtype=np.int64)
        block[listed] = np.searchsorted(starts, order[first[listed]], side="right") - 1
        extra: dict[int, list[int]] = {}
        for r in np.flatnonzero(stop - first > 1).tolist():   # an episode index the metadata lists more than once
            held = np.searchsorted(starts, order[first[r]:stop[r]], side="right") - 1
            for k in set(held.tolist()) - {int(block[r])}:
                extra.setdefault(k, []).append(r)
        runs = [np.sort(np.concatenate([np.flatnonzero(block == k), np.array(extra.get(k, []), dtype=np.int64)]))
                for k in range(len(bounds))]
    last = {f: k for k, mine in enumerate(runs) for f in np.unique(where.file[mine]).tolist()}
    ctx.cache["stats.blocks"] = Blocks(bounds, runs, whole, last)
    return ctx.cache["stats.blocks"]


def _bounds(ctx: Context) -> list[tuple[int, int]]:
    """The blocks' metadata position ranges: consecutive episodes metadata files (v3.0) while they hold at most
    BLOCK episodes together, a larger one cut every BLOCK episodes (v2.1: one file)."""
    ds = ctx.dataset
    n = len(ds.episodes)
    files = [(0, n)]
    if ds.version == "v3.0":
        ends = np.cumsum([len(list(rows)) for _, rows in groupby(episode_meta_files(ctx))]).tolist()
        files = list(zip([0] + ends[:-1], ends))
    bounds, start = [], 0
    for lo, hi in files:
        if hi - start > BLOCK and lo > start:
            bounds.append((start, lo))
            start = lo
        while hi - start > BLOCK:
            bounds.append((start, start + BLOCK))
            start += BLOCK
    return bounds + [(start, n)] if n > start or not bounds else bounds


def _let_go(done: dict, following: dict) -> None:
    """Let go of the stats tables (episodes metadata files: read again if asked for) that a block's episodes read
    (`done`, `stats_holders`) and the next block's (`following`) do not."""
    gone = [holder for key, holder in done.items() if key not in following and hasattr(holder, "release")]
    for holder in gone:
        holder.release()
    if gone:
        give_back()   # their blocks, before the next block reads its own


def _stats_files(ctx: Context) -> list[Finding]:
    ds = ctx.dataset
    if ds.version in ("v2.0", "v3.0") and ds.stats is None:
        return [_finding("STA001", f"{v30.STATS_PATH} does not exist", file=v30.STATS_PATH)]
    if ds.version == "v2.1":
        held = stats_held(ds.episodes)   # asked of each table, not of a dict made for every episode
        lacking = episode_column(ds.episodes, "index")[~held].tolist()
        if lacking:
            present = (ctx.root / v21.EPISODES_STATS_PATH).is_file()
            text = (f"{len(lacking)} of {len(ds.episodes)} episodes have no stats line (first: episode {lacking[0]})"
                    if present else f"{v21.EPISODES_STATS_PATH} does not exist")
            return [_finding("STA002", text, file=v21.EPISODES_STATS_PATH, episode=lacking[0] if present else None)]
    return []


def _normalised_features(ds: Dataset) -> list[str]:
    """Features training normalises (or, for cameras, looks up): numeric non-bookkeeping and visual."""
    return [name for name, spec in ds.info.features.items()
            if name not in INDEX_FEATURES and spec["dtype"] != "string"]


def _coverage(ctx: Context, sources: list[Source]) -> list[Finding]:
    """Every normalised feature has stats: in stats.json, or (v2.1) in every episode's stats."""
    ds, out = ctx.dataset, []
    checked = [s for s in sources if (s.episode is None) == (ds.version != "v2.1")]
    features = _normalised_features(ds)
    held = [s.held for s in checked]
    if all(isinstance(h, Episode) for h in held):   # the episodes' tables asked, no dict made for an episode
        having = features_held(held, features)
    else:
        having = {feature: np.array([feature in s.stats for s in checked], dtype=bool) for feature in features}
    for feature in features:
        lacking = [checked[i] for i in np.flatnonzero(~having[feature]).tolist()]
        if lacking:
            first = lacking[0]
            scope = first.file if first.episode is None else \
                f"{len(lacking)} of {len(checked)} episodes (first: episode {first.episode})"
            code = "STA016" if ds.info.features[feature]["dtype"] in VISUAL else "STA015"
            out.append(_finding(code, f"{feature} has no stats in {scope}", file=first.file,
                                episode=first.episode, feature=feature))
    return out


# ---------------------------------------------------------------- one stats dict



def _required(ds: Dataset) -> tuple[str, ...]:
    """v2.0 stats.json has no count."""
    return tuple(k for k in BASIC if k != "count") if ds.version == "v2.0" else BASIC


@dataclass
class Group:
    """The stats of one feature over the episodes whose stats dicts hold the same stats in the same shapes: per stat,
    the (episodes, channels) float64 matrix, stacked once (None when a value is no number)."""
    feature: str
    episodes: np.ndarray          # episode index of each row, int64
    shapes: dict[str, tuple]
    matrices: dict[str, np.ndarray] | None
    positions: np.ndarray         # where each row's stats dict is in the sources (`_columns`' argument), int64

    def rows(self, start: int, stop: int) -> "Group":
        """Its rows [start, stop) as a group of their own (views of its arrays)."""
        matrices = None if self.matrices is None else {k: v[start:stop] for k, v in self.matrices.items()}
        return Group(self.feature, self.episodes[start:stop], self.shapes, matrices, self.positions[start:stop])


def _stack(values: list, n: int, uniform: bool = False) -> np.ndarray:
    """(n, channels) float64 from n values of one shape (`uniform`: known to be; else checked, ValueError if not)."""
    if not uniform and len(_shapes(values)) != 1:
        raise ValueError("values of several shapes")
    if n and np.ndim(values[0]) > 0:
        return np.asarray(np.concatenate(values), dtype=np.float64).reshape(n, -1)   # C-level, one copy
    return np.asarray(np.stack(values), dtype=np.float64).reshape(n, -1)


def _shapes(values: list) -> set[tuple]:
    try:
        return {v.shape for v in values}
    except AttributeError:
        return {np.shape(v) for v in values}


def _columns(sources: list[Source]) -> list[Group]:
    """The episodes' stats, one `Group` per feature (more only where episodes differ in which stats or shapes they
    hold): straight from their tables' columns when every episode's stats are an unread row holding every stat
    (`stats_matrices`), else from their dicts, a value's shape read once per stat of a feature when all agree
    (issue 37)."""
    first = 1 if sources and sources[0].episode is None else 0   # the dataset stats come first (`_sources`)
    episodic = sources[first:]
    if episodic and all(isinstance(s.held, Episode) for s in episodic):
        columns = stats_matrices([s.held for s in episodic])
        if columns:
            return _table_groups(columns, np.array([s.episode for s in episodic], dtype=np.int64),
                                 np.arange(first, len(sources), dtype=np.int64))
    by_feature: dict[str, tuple[list[int], list[dict], list[int]]] = {}
    for position, source in enumerate(sources):
        if source.episode is None:
            continue
        for feature, by_stat in source.stats.items():
            episodes, dicts, positions = by_feature.setdefault(feature, ([], [], []))
            episodes.append(source.episode)
            dicts.append(by_stat)
            positions.append(position)
    groups = []
    for feature, (episodes, dicts, positions) in by_feature.items():
        keys = set(map(tuple, dicts))
        shapes = {}
        if len(keys) == 1:
            for name in next(iter(keys)):
                found = _shapes([d[name] for d in dicts])
                if len(found) != 1:
                    break
                shapes[name] = found.pop()
            else:
                groups.append(_group(feature, episodes, dicts, shapes, positions))
                continue
        split: dict[tuple, tuple[list[int], list[dict], list[int]]] = {}   # the rare case: by names and shapes
        for episode, by_stat, position in zip(episodes, dicts, positions):
            signature = tuple((k, np.shape(v)) for k, v in by_stat.items())
            mine = split.setdefault(signature, ([], [], []))
            mine[0].append(episode)
            mine[1].append(by_stat)
            mine[2].append(position)
        groups += [_group(feature, e, d, dict(signature), p) for signature, (e, d, p) in split.items()]
    return groups


def _group(feature: str, episodes: list[int], dicts: list[dict], shapes: dict[str, tuple], positions: list[int]
           ) -> Group:
    try:
        matrices = {k: _stack([d[k] for d in dicts], len(dicts), uniform=True) for k in shapes}
    except (TypeError, ValueError):
        matrices = None
    return Group(feature, np.array(episodes, dtype=np.int64), shapes, matrices, np.array(positions, dtype=np.int64))


def _table_groups(columns: dict[tuple[str, str], np.ndarray], episodes: np.ndarray, positions: np.ndarray
                  ) -> list[Group]:
    """One `Group` per feature from `stats_matrices`' (episodes, *shape) columns, in the order an episode's dict
    names the features and stats: the matrices `_stack` would make of the rows' values."""
    by_feature: dict[str, dict[str, np.ndarray]] = {}
    for (feature, stat), values in columns.items():
        by_feature.setdefault(feature, {})[stat] = values
    return [Group(feature, episodes, {k: v.shape[1:] for k, v in held.items()},
                  {k: np.asarray(v, dtype=np.float64).reshape(len(v), -1) for k, v in held.items()}, positions)
            for feature, held in by_feature.items()]


def _among(sources: list[Source], groups: list[Group], episodes) -> list[Source]:
    """The dataset stats (first in `sources`, when there) and the stats dicts of `episodes` (indices), in the order of
    `sources`: picked through the groups' rows, not by a look at every source."""
    wanted = np.fromiter(episodes, dtype=np.int64, count=len(episodes))
    picked = [g.positions[np.isin(g.episodes, wanted)] for g in groups] if len(wanted) else []
    at = distinct(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)
    head = sources[:1] if sources and sources[0].episode is None else []
    return head + [sources[i] for i in at.tolist()]


def _in_order(flat: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Per episode (row), whether `_values` would find nothing: every value finite, std >= 0, and each pair `_values`
    orders in order exactly. Its tolerances only ever forgive more, so an episode in order here has no finding
    there."""
    ok = np.ones(n, dtype=bool)
    for values in flat.values():
        ok &= np.isfinite(values).all(axis=1)
    if "std" in flat:
        ok &= (flat["std"] >= 0).all(axis=1)
    for lo, hi in _order_pairs({k: None for k in flat if k != "count"}):
        ok &= (flat[lo] <= flat[hi]).all(axis=1)
    return ok


def _suspects(ds: Dataset, groups: list[Group]) -> dict[int, set[str]]:
    """episode -> the features whose stats `_well_formed` is to look at one by one: those with a placeholder, a
    missing stat, a misshapen one or a value out of order (whole matrices at once); none where nothing is wrong."""
    suspect: dict[int, set[str]] = {}
    required = _required(ds)
    for group in groups:
        spec = ds.info.features.get(group.feature)
        if spec is None or not valid_spec(spec) or spec["dtype"] == "string":
            continue
        n, flat = len(group.episodes), group.matrices
        shaped = group.shapes.get("count", (1,)) == (1,) and all(k in group.shapes for k in required) and all(
            is_shaped(spec, k, np.empty(shape)) for k, shape in group.shapes.items() if k != "count")
        if flat is None or not shaped:
            bad = np.ones(n, dtype=bool)
        else:
            bad = ~_in_order(flat, n)
            if "count" in flat and flat["count"].shape[1]:
                bad |= ~flat["count"].any(axis=1)   # a count=0 placeholder
        for e in group.episodes[bad].tolist():
            suspect.setdefault(e, set()).add(group.feature)
    return suspect


def _well_formed(ds: Dataset, source: Source, only: set[str] | None = None) -> list[Finding]:
    """Findings in one stats dict (`only`: in those features alone, the others known to hold none)."""
    out = []
    for feature, by_stat in source.stats.items():
        if only is not None and feature not in only:
            continue
        spec = ds.info.features.get(feature)
        if spec is None or not valid_spec(spec) or spec["dtype"] == "string":
            continue
        where = dict(file=source.file, episode=source.episode, feature=feature)
        count = by_stat.get("count")
        if is_placeholder(by_stat):
            out.append(_finding("STA011", f"{source.label}: {feature} has count {count.tolist()} (a placeholder)",
                                **where))
            continue
        if count is not None and count.shape != (1,):
            out.append(_finding("STA012", f"{source.label}: {feature} count {count.tolist()} has shape "
                                          f"{count.shape}, expected (1,)", **where))
        missing = [k for k in _required(ds) if k not in by_stat]
        if missing:
            out.append(_finding("STA014", f"{source.label}: {feature} lacks {', '.join(missing)}", **where))
        misshapen = {k: v.shape for k, v in by_stat.items() if k != "count" and not is_shaped(spec, k, v)}
        if misshapen:
            shown = ", ".join(f"{k} {s}" for k, s in misshapen.items())
            needs = stat_shape(spec, "min") or "(channels, 1, 1)"
            out.append(_finding("STA013", f"{source.label}: {feature} stats have shapes {shown}, the feature "
                                          f"(meta/info.json: shape {spec.get('shape')}) needs {needs}", **where))
            continue
        out += _values(ds, source, feature, by_stat, spec)
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


def _values(ds: Dataset, source: Source, feature: str, by_stat: dict[str, np.ndarray], spec: dict) -> list[Finding]:
    """No NaN/inf; min <= q01 <= ... <= q99 <= max, mean within [min, max], std >= 0 (per channel), each
    within the rounding that the feature's dtype and the writer's float32 sums allow (see `Tolerance`)."""
    where = dict(file=source.file, episode=source.episode, feature=feature)
    flat = {k: np.ravel(v).astype(np.float64) for k, v in by_stat.items()}
    for name, value in flat.items():
        c = _first(~np.isfinite(value))
        if c is not None:
            return [_finding("STA010", f"{source.label}: {feature} {name}[{c}] is {value[c]} "
                                       f"({_plural(int((~np.isfinite(value)).sum()), 'non-finite value')})",
                             channel=c, **where)]
    count = flat.pop("count", None)
    c = _first(flat["std"] < 0) if "std" in flat else None
    if c is not None:
        return [_finding("STA022", f"{source.label}: {feature} std[{c}] = {flat['std'][c]:.6g} < 0",
                         channel=c, **where)]
    if not _order_pairs(flat):
        return []
    stacked = [flat[k] for k in ("min", "max", "mean") if k in flat]
    magnitude = np.max(np.abs(np.stack(stacked)), axis=0) if stacked else 0.0
    spread = np.maximum(flat["max"] - flat["min"], 0.0) if "min" in flat and "max" in flat else 0.0
    tol = Tolerance.of(spec["dtype"], None, _rows(ds, source, count), magnitude, spread)
    warned = None
    for lo, hi in _order_pairs(flat):
        allowed = tol.mean if "mean" in (lo, hi) else tol.quantile if {lo, hi} - {"min", "max"} else tol.min_max
        excess = flat[lo] - flat[hi] - allowed
        c = _first(excess > tol.slack(allowed))
        if c is not None:
            return [_finding("STA022", f"{source.label}: {feature} {lo}[{c}] = {flat[lo][c]:.7g} > "
                                       f"{hi}[{c}] = {flat[hi][c]:.7g} (by {flat[lo][c] - flat[hi][c]:.3g}; "
                                       f"rounding explains {_at(allowed, c):.3g})", channel=c, **where)]
        c = _first(excess > 0)
        if c is not None and warned is None:
            warned = _finding("STA023", f"{source.label}: {feature} {lo}[{c}] = {flat[lo][c]:.7g} > "
                                        f"{hi}[{c}] = {flat[hi][c]:.7g} (by {flat[lo][c] - flat[hi][c]:.3g}; "
                                        f"rounding explains {_at(allowed, c):.3g})", channel=c, **where)
    return [warned] if warned else []


def _at(value, c: int) -> float:
    flat = np.ravel(value)
    return float(flat[c] if flat.size > 1 else flat[0])


def _rows(ds: Dataset, source: Source, count: np.ndarray | None, shortest: bool = False) -> int:
    """How many rows one writer's sum ran over: the episode's count; for dataset stats, which lerobot
    aggregates from per-episode stats in float64, the longest episode (v2.0: all rows, summed at once).
    `shortest`: the shortest episode instead (whose sample std differs most from the population std)."""
    if source.episode is not None:
        return int(count[0]) if count is not None and count.size else \
            max((ep.length for ep in ds.episodes if ep.index == source.episode), default=1)
    lengths = [ep.length for ep in ds.episodes] or [int(count[0]) if count is not None and count.size else 1]
    return sum(lengths) if ds.version == "v2.0" else min(lengths) if shortest else max(lengths)


# ---------------------------------------------------------------- tolerances

EPS32 = float(np.finfo(np.float32).eps)
QUANTILE_BINS = 5000      # lerobot >= 0.4: histogram quantiles, 5000 bins over [min - 1e-10, max + 1e-10]
QUANTILE_SHARE = 0.02     # a per-episode quantile within 2% of the range (plus bins) of the data's: nothing
QUANTILE_WILD = 0.25      # beyond a quarter of the range: not this data's quantile (STA040)
VISUAL_PIXELS = 300 * 300   # lerobot sums every pixel of a sampled frame (downsampled above 300 px)
ORDER_SLACK = 1e-3        # out of order by at most rounding + 0.1% of the range: a warning (STA023)


def _np_dtype(name) -> np.dtype | None:
    try:
        return np.dtype(name)
    except TypeError:
        return None


@dataclass
class Tolerance:
    """How far a stat written by lerobot (or numpy) may sit from the exact float64 value, per channel.

    value_eps: rounding of one stored value (the float dtype's eps; 0 for integers: their min/max are exact).
    sum_eps: rounding of one step of the writer's sums: float64 for float64 data, else float32 (lerobot
      and numpy sum float16/float32 data, bool and small integers in float32).
    With M = max(|min|, |max|) of the channel, R = max - min and n rows summed:
      min, max:   value_eps * M                                    (the value itself, rounded to the dtype)
      mean:       (value_eps + (n/2 + 2) * sum_eps) * M            (recursive summation: |error| <= (n-1) u sum|x|,
                                                                    u = eps/2; numpy sums axis 0 row after row)
      std:        |std - exact| <= mean + (n + 2) * sum_eps * std  (two-pass np.std: the mean's error; up to
                                                                    sqrt(n/(n-1)) larger: a sample std, ddof=1)
                  |std^2 - exact^2| <= (1.5 n + 4) * sum_eps * M^2 (E[x^2] - E[x]^2: both terms carry n*u*M^2;
                                                                    a warning, STA042: lerobot's normal output)
      quantiles:  ordering: value_eps * M + 1e-9 * (1 + R)          (lerobot pads its histogram by 1e-10)
                  data: within the order statistics around q*n, widened by 2 bins + 2% of R (STA043 beyond,
                  STA040 beyond 25% of R): lerobot interpolates a 5000-bin histogram, lerodoc is exact.
    """
    value_eps: float
    sum_eps: float
    rows: int
    magnitude: np.ndarray | float
    spread: np.ndarray | float

    @classmethod
    def of(cls, dtype, column_dtype, rows: int, magnitude, spread) -> "Tolerance":
        dtypes = [d for d in (_np_dtype(dtype), column_dtype) if d is not None]
        floats = [d for d in dtypes if d.kind == "f"]
        value_eps = max((float(np.finfo(d).eps) for d in floats), default=0.0)
        if dtype in VISUAL:   # per-channel stats of sampled frames (each up to ~300 x 300 pixels) / 255
            value_eps, rows = EPS32, rows * VISUAL_PIXELS
        # float16 is summed in float32 too (numpy's float16 mean, lerobot 0.6.1's promotion); its result is
        # then rounded to float16, which value_eps covers
        sum_eps = float(np.finfo(np.float64).eps) if dtypes and all(d == np.float64 for d in dtypes) else EPS32
        return cls(value_eps, sum_eps, max(int(rows), 1), np.asarray(magnitude, dtype=np.float64),
                   np.asarray(spread, dtype=np.float64))

    @property
    def min_max(self):
        return self.value_eps * self.magnitude

    @property
    def mean(self):
        return (self.value_eps + (self.rows / 2 + 2) * self.sum_eps) * self.magnitude

    def std(self, exact):
        return self.mean + ((self.rows + 2) * self.sum_eps + self.value_eps) * exact

    @property
    def variance(self):
        return (1.5 * self.rows + 4) * self.sum_eps * self.magnitude ** 2

    @property
    def quantile(self):
        return self.value_eps * self.magnitude + 1e-9 * (1 + self.spread)

    def slack(self, allowed):
        """Beyond rounding by this much more is an error (STA022); less, a warning (STA023)."""
        return allowed + ORDER_SLACK * self.spread


# ---------------------------------------------------------------- what training normalises with

def _training_stats(ds: Dataset) -> Stats:
    if ds.version != "v2.1":
        return ds.stats or {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            held = [ep for ep, has in zip(ds.episodes, stats_held(ds.episodes)) if has]
            # stacked from the table's columns (`stats_stack`), not from a dict made for every episode
            return dataset_stats(stats_stack(held) if held else [], previous=ds.stats)
    except (ValueError, TypeError, IndexError, KeyError):
        return dataset_stats([], previous=ds.stats)   # malformed episode stats: reported per episode


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
    for feature in numeric_features(ds):
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
                lo, hi = normalised(np.array([view["min"][c], view["max"][c]], np.float64), np.float64(q01), q99)
                out.append(_finding("STA031", f"{label}: min {view['min'][c]:.6g} and max {view['max'][c]:.6g} "
                                              f"normalise to {lo:.4g} .. {hi:.4g} with q01 {q01:.6g}, q99 "
                                              f"{q99:.6g} (beyond +-{EXTREME:g})", **where))
    return out


# ---------------------------------------------------------------- stats against the data

def _quantile_keys(by_stat: dict) -> dict[str, float]:
    """{"q01": 0.01, ...}: the quantiles a stats dict holds."""
    return {k: int(k[1:]) / 100 for k in by_stat if k[:1] == "q" and k[1:].isdigit() and 0 < int(k[1:]) < 100}


def _quantile_brackets(values: np.ndarray, firsts: np.ndarray, lengths: np.ndarray, keys: dict[str, float]
                       ) -> np.ndarray:
    """Per span [first, first + length) of the (channels, rows) `values` and per quantile key, the (low, high)
    order statistics that any interpolating estimator lands between: numpy's linear q*(n-1) and lerobot's
    histogram ceil(q*n)-th value, one rank wider on each side. (spans, 2 * keys, channels): each key's lows, then
    its highs."""
    n = lengths[:, None]
    q = np.array(list(keys.values()), dtype=np.float64)
    linear, histogram = q * (n - 1), np.ceil(q * n).astype(np.int64) - 1
    low = np.maximum(0, np.minimum(np.floor(linear).astype(np.int64), histogram) - 1)
    high = np.minimum(n - 1, np.maximum(np.ceil(linear).astype(np.int64), histogram) + 1)
    found = spans_order_statistics(values, firsts, lengths, np.concatenate([low, high], axis=1))
    return np.ascontiguousarray(found.transpose(1, 2, 0))


def _lookup(known: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The position of each of `wanted` in the sorted `known`, -1 where it is not there."""
    at = np.searchsorted(known, wanted)
    found = at < len(known)
    found[found] = known[at[found]] == wanted[found]
    return np.where(found, at, -1)


@dataclass
class Exact:
    """One feature's stats recomputed from the data, a row per episode (`episodes`, sorted and unique; in one file's
    `file_stats`, a row per run in row order): min, max, mean, std as (rows, channels) float64, count (rows, 1)
    int64."""
    episodes: np.ndarray
    stats: dict[str, np.ndarray]

    def of(self, row: int) -> dict[str, np.ndarray]:
        """One row as one episode's stats dict: (channels,) values and a (1,) count."""
        return {k: v[row] for k, v in self.stats.items()}


@dataclass
class Brackets:
    """`_quantile_brackets` of one-run episodes of one feature that state the same quantile `keys` (names): per
    episode, (2 * keys, channels) bounds, each key's lows then its highs (float32 for float32 data: the order
    statistics are its values)."""
    episodes: np.ndarray
    keys: tuple[str, ...]
    bounds: np.ndarray

    def of(self, row: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """One episode's brackets: quantile name -> (low, high), (channels,) float64 each."""
        k = len(self.keys)
        bounds = self.bounds[row].astype(np.float64)
        return dict(zip(self.keys, zip(bounds[:k], bounds[k:])))


@dataclass
class DataStats:
    """Stats recomputed from the data, per feature, and what could not be recomputed."""
    exact: dict[str, Exact]       # feature -> its episodes' stats (one file's `file_stats`: its runs')
    incomplete: set[str]          # features some rows of which were unreadable, non-finite or misshapen
    dirty: set[tuple[int, str]]   # (episode, feature) with non-finite values
    dtypes: dict[str, np.dtype]
    findings: list[Finding]       # what reading the data revealed (NaN, misshapen or unreadable columns)
    brackets: dict[str, list[Brackets]]   # feature -> the quantile brackets of its one-run episodes
    found: dict[tuple[int, int, int], Finding] = field(default_factory=dict)   # `findings` by (placed file, feature
    # in it (-1: the file), placement's run (-1: none)): the order they keep, whichever block found them
    _index: dict = field(default_factory=dict, repr=False)   # feature -> brackets by episode, made on first use

    def episode(self, episode: int) -> Stats:
        """One episode's recomputed stats, {feature: stats dict}, empty where the data holds none of its rows."""
        out = {}
        for feature, exact in self.exact.items():
            row = int(_lookup(exact.episodes, np.array([episode], dtype=np.int64))[0])
            if row >= 0:
                out[feature] = exact.of(row)
        return out

    def bracket_rows(self, feature: str, episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of `episodes`: which of the feature's `Brackets` holds it and at which row (-1, -1: none)."""
        if feature not in self._index:
            blocks = self.brackets.get(feature, [])
            held = np.concatenate([b.episodes for b in blocks]) if blocks else np.zeros(0, dtype=np.int64)
            block = np.repeat(np.arange(len(blocks)), [len(b.episodes) for b in blocks]).astype(np.int64)
            row = np.concatenate([np.arange(len(b.episodes)) for b in blocks]) if blocks else held
            order = np.argsort(held, kind="stable")
            self._index[feature] = held[order], block[order], row[order]
        known, block, row = self._index[feature]
        at = _lookup(known, episodes)
        if not len(known):
            return at, at
        return np.where(at >= 0, block[at], -1), np.where(at >= 0, row[at], -1)

    def bracket(self, episode: int, feature: str) -> dict | None:
        """One episode's quantile brackets of `feature` (`Brackets.of`), None where it has none."""
        block, row = (int(a[0]) for a in self.bracket_rows(feature, np.array([episode], dtype=np.int64)))
        return self.brackets[feature][block].of(row) if block >= 0 else None


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


Stated = tuple[np.ndarray, np.ndarray, list[tuple]]   # episodes (sorted), each one's keys (position), the keys


def _stated_quantiles(groups: list[Group]) -> dict[str, Stated]:
    """feature -> which quantiles each episode's stats of it state, as (name, level) items (`_quantile_keys`): those
    of the last stats dict of the episode index that states any, from the groups' rows at once."""
    held: dict[str, list[tuple[Group, tuple]]] = {}
    for group in groups:
        keys = tuple(_quantile_keys(group.shapes).items())
        if keys:
            held.setdefault(group.feature, []).append((group, keys))
    out = {}
    for feature, parts in held.items():
        names = list(dict.fromkeys(keys for _, keys in parts))
        episodes = np.concatenate([g.episodes for g, _ in parts])
        positions = np.concatenate([g.positions for g, _ in parts])
        which = np.concatenate([np.full(len(g.episodes), names.index(keys)) for g, keys in parts])
        last = np.argsort(positions, kind="stable")[::-1]   # the last dict of an episode index first
        known, first = np.unique(episodes[last], return_index=True)
        out[feature] = (known, which[last][first], names)
    return out


BATCH_ROWS = 1 << 16   # data files of fewer rows go to a worker together, up to this many rows: a v2.1 dataset's
                       # one-episode files then cost their numpy calls once a batch, not once a file


def _data_stats(ctx: Context, groups: list[Group] | None = None, block: int | None = None) -> DataStats:
    """Exact per-episode stats of every numeric column, one projected read per data file (a unit of
    `file_stats`, run through ctx.engine when there is one); the order statistics around each per-episode
    quantile the episode stats state (`groups`: `_columns` of the sources, made here when not given). `block`: the
    runs of that block of `_blocks` alone (default: every run); a file a later block reads too is read once and
    kept until then."""
    ds, where, plan = ctx.dataset, placement(ctx), _blocks(ctx)
    chosen = np.arange(len(where.episode), dtype=np.int64) if block is None else plan.runs[block]
    numeric = numeric_features(ds)
    result = DataStats({}, set() if where.complete else set(numeric), set(), {}, [], {})
    episodes, whole, files = where.episode[chosen], plan.whole[chosen], where.file[chosen]
    keys = {}   # feature -> per chosen run, which of the feature's stated quantile sets to bracket (-1: none)
    for feature, (known, which, names) in _stated_quantiles(_columns(_sources(ctx)) if groups is None
                                                            else groups).items():
        at = _lookup(known, episodes)
        keys[feature] = np.where(whole & (at >= 0), which[at], -1), names
    widths = {f: int(np.prod(ds.info.features[f]["shape"])) for f in numeric}
    placed = {path: i for i, path in enumerate(where.files)}
    kept = ctx.cache.setdefault("stats.tables", {})   # path -> columns read for a later block too
    units, batch, rows = [], [], 0
    for path, data in data_files(ctx).items():
        at = placed.get(path, -1)
        lo, hi = np.searchsorted(files, [at, at + 1]).tolist()
        if not data.ok or lo == hi:   # unread, or no rows placed (its episode_index column is unusable)
            continue
        names = set(data.schema.names)   # a new list at each `schema.names`: asked once a file
        columns = [f for f in numeric if f in names]
        result.incomplete |= set(numeric) - set(columns)
        runs = chosen[lo:hi]
        table = kept.pop(path, None)
        table = data.kept(columns) if table is None else table
        data.release()   # held by the batch (or `kept`) alone from here: gone once no block needs it
        if block is not None and plan.last.get(at, block) > block:
            if table is None:
                try:
                    table = read_parquet(ctx.root / path, columns)
                except LerodocError:
                    table = None   # `file_stats` reads it and says why it cannot
            if table is not None:
                kept[path] = table
        size = int(where.length[runs].sum())
        if batch and rows + size > BATCH_ROWS:
            units.append(batch)
            batch, rows = [], 0
        batch.append((ctx.root / path, path, at, {f: widths[f] for f in columns},
                      (where.episode[runs], where.start[runs], where.length[runs], runs),
                      {f: (keys[f][0][lo:hi], keys[f][1]) for f in columns if f in keys}, table))
        rows += size
    units += [batch] if batch else []
    parts: dict[str, list[Exact]] = {}
    brackets: dict[str, dict[tuple, list[Brackets]]] = {}
    for part in pmap(file_stats, units, engine=ctx.engine):
        result.incomplete |= part.incomplete
        result.dirty |= part.dirty
        result.found.update(part.found)
        for feature, blocks in part.brackets.items():
            for unit in blocks:
                brackets.setdefault(feature, {}).setdefault(unit.keys, []).append(unit)
        for feature, dtype in part.dtypes.items():
            result.dtypes.setdefault(feature, dtype)
        for feature, exact in part.exact.items():
            parts.setdefault(feature, []).append(exact)
    result.findings = [finding for _, finding in sorted(result.found.items(), key=itemgetter(0))]
    result.exact = {feature: _by_episode(feature, parts.pop(feature)) for feature in list(parts)}
    result.brackets = {feature: [b for blocks in by_keys.values() for b in _joined(blocks)]
                       for feature, by_keys in brackets.items()}
    return result


JOIN_BLOCKS = 64   # more bracket blocks of one set of keys than this (many small files) are joined into one


def _joined(blocks: list[Brackets]) -> list[Brackets]:
    """Brackets of the same keys (of several files): as they are while few (no copy of large files' blocks), else as
    one, so that the checks that loop over blocks (`_agreeing`) do not loop over thousands of small files."""
    if len(blocks) <= JOIN_BLOCKS:
        return blocks
    return [Brackets(np.concatenate([b.episodes for b in blocks]), blocks[0].keys,
                     np.concatenate([b.bounds for b in blocks]))]


def _by_episode(feature: str, parts: list[Exact]) -> Exact:
    """The runs of every file (in row order) as one row per episode; an episode of several runs gets their exact
    `aggregate`, run by run (the rare path: a split episode, or one across two files). The parts are emptied."""
    episodes = parts[0].episodes if len(parts) == 1 else np.concatenate([p.episodes for p in parts])
    stats = parts[0].stats if len(parts) == 1 else {k: np.concatenate([p.stats.pop(k) for p in parts])
                                                    for k in list(parts[0].stats)}   # each part let go once joined
    if len(episodes) < 2 or (np.diff(episodes) > 0).all():   # one run an episode, in order (the common case): as is
        return Exact(episodes, stats)
    known, first, runs = np.unique(episodes, return_index=True, return_counts=True)
    out = {k: v[first] for k, v in stats.items()}
    split = np.flatnonzero(runs > 1)
    if len(split):
        order = np.argsort(episodes, kind="stable")
        starts = np.cumsum(runs) - runs
        for e in split.tolist():
            pooled = aggregate([{feature: {k: v[r] for k, v in stats.items()}}
                                for r in order[starts[e]:starts[e] + runs[e]].tolist()])[feature]
            for k, v in out.items():
                v[e] = pooled[k]
    return Exact(known, out)


@dataclass
class _Column:
    """One feature's column of one data file of a batch: the file's number among the placed files and the feature's
    place in the file (the order its findings keep), its (rows, width) values, its runs (episodes, first rows, lengths, `placement`'s
    run numbers) and their stated quantile sets (or None)."""
    file: int
    rank: int
    path: str
    values: np.ndarray
    runs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    stated: tuple[np.ndarray, list[tuple]] | None


def file_stats(batch: list[tuple[str, str, int, dict[str, int], tuple[np.ndarray, ...],
                                 dict[str, tuple[np.ndarray, list[tuple]]], pa.Table | None]]) -> DataStats:
    """Worker: the stats of the runs of some consecutive data files (each (full path, path, its number among the
    placed files, widths, (episodes, first rows, lengths, run numbers) of its runs in row order, stated, the
    columns already read or None)); `exact` holds a row per run, in file and row order. Each file is read on its
    own (unless its columns came read) and its findings are keyed (file, feature in it, run) in `found`, the order
    file by file gives them; each feature's columns of the files are then worked on at once. The quantile brackets
    are those of the runs that `stated` gives quantiles to bracket: feature -> (per run, which of the key sets, -1
    for none; the key sets, (name, level) items)."""
    result = DataStats({}, set(), set(), {}, [], {})
    tables = []
    for full, path, at, widths, _, _, kept in batch:
        if kept is not None:
            tables.append(kept)
            continue
        try:
            tables.append(read_parquet(full, list(widths)))
        except LerodocError as exc:
            tables.append(None)
            result.found[at, -1, -1] = _finding("STA052", f"{path}: {exc.message}", file=path)
            result.incomplete |= set(widths)
    for feature in dict.fromkeys(f for unit in batch for f in unit[3]):
        columns = []
        for table, (_, path, at, widths, runs, stated, _) in zip(tables, batch):
            if table is None or feature not in widths:
                continue
            rank = list(widths).index(feature)
            values = _numeric_matrix(table, feature, widths[feature])
            if isinstance(values, str):
                result.found[at, rank, -1] = _finding(
                    "STA051", f"{path}: {feature} {values} (meta/info.json's shape: {widths[feature]} values a row)",
                    file=path, feature=feature)
                result.incomplete.add(feature)
                continue
            result.dtypes.setdefault(feature, values.dtype)
            columns.append(_Column(at, rank, path, values, runs, stated.get(feature)))
        if columns:
            _feature_stats(feature, columns, result)
    return result


def _feature_stats(feature: str, columns: list[_Column], result: DataStats) -> None:
    """One feature's stats and quantile brackets over its columns of a batch, all runs at once."""
    # float data stays in its dtype when every column has the same (`spans_stats` casts a few MB of it at a time, to
    # the same float64 bits, and float32's order statistics are its own values); any other in float64
    kind = columns[0].values.dtype
    if kind not in (np.float32, np.float64) or any(c.values.dtype != kind for c in columns):
        kind = np.dtype(np.float64)
    values = columns[0].values.astype(kind, copy=False) if len(columns) == 1 else \
        np.concatenate([c.values.astype(kind, copy=False) for c in columns])   # (rows, channels)
    sizes = np.array([len(c.values) for c in columns], dtype=np.int64)
    episodes, firsts, lengths, numbers = (np.concatenate([c.runs[k] for c in columns]) for k in range(4))
    column = np.repeat(np.arange(len(columns)), [len(c.runs[0]) for c in columns])   # each run's
    firsts = firsts + (np.cumsum(sizes) - sizes)[column]
    dirty = _non_finite(values, columns, column, (episodes, firsts, lengths, numbers), feature, result)
    values = values.T   # (channels, rows)
    stats = spans_stats(values, firsts, lengths, quantiles=False)
    stats["count"] = stats["count"].reshape(-1, 1).astype(np.int64)
    result.exact[feature] = Exact(episodes, stats)
    if columns[0].stated is None:
        return
    names = columns[0].stated[1]
    keys = np.where(dirty | (lengths == 0), -1, np.concatenate([c.stated[0] for c in columns]))
    # float32 data's order statistics are float32 values: found in the data's own dtype (`values` kept it) they are the
    # same numbers (the cast to float64 is exact and keeps the order), held in half the bytes
    for k, items in enumerate(names):
        chosen = np.flatnonzero(keys == k)
        if len(chosen):
            bounds = _quantile_brackets(values, firsts[chosen], lengths[chosen], dict(items))
            result.brackets.setdefault(feature, []).append(
                Brackets(episodes[chosen], tuple(name for name, _ in items), bounds))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _non_finite(values: np.ndarray, columns: list[_Column], column: np.ndarray, runs: tuple[np.ndarray, ...],
                feature: str, result: DataStats) -> np.ndarray:
    """One STA050 per run (episode) of the (rows, channels) `values` with NaN/inf in `feature` (run r of
    columns[column[r]]; `runs`: episodes, first rows, lengths, run numbers); those episodes' stats are not compared.
    Per run, whether it has any."""
    episodes, firsts, lengths, numbers = runs
    dirty = np.zeros(len(firsts), dtype=bool)
    if np.isfinite(values).all():   # the common case, in one pass: 2 ms for 10 million float32, against 19 ms for
        return dirty                # the rows that hold one
    bad = ~np.isfinite(values)
    rows = np.flatnonzero(bad.any(axis=1))
    if not len(rows):
        return dirty
    run = np.searchsorted(firsts, rows, side="right") - 1
    inside = run >= 0
    inside[inside] = rows[inside] < firsts[run[inside]] + lengths[run[inside]]
    dirty[run[inside]] = True
    for r in np.flatnonzero(dirty).tolist():   # the rare path: the runs that hold one
        start, episode, where = int(firsts[r]), int(episodes[r]), columns[column[r]]
        at, channels = np.nonzero(bad[start:start + int(lengths[r])])
        row, c = int(at[0]), int(channels[0])
        result.found[where.file, where.rank, int(numbers[r])] = _finding(
            "STA050", f"episode {episode}: {feature}[{c}] is {values[start + row, c]} at frame {row} "
                      f"({_plural(len(at), 'non-finite value')} in the episode)",
            file=where.path, episode=episode, feature=feature, channel=c)
        result.dirty.add((episode, feature))
    result.incomplete.add(feature)
    return dirty


@dataclass
class Off:
    """One stat of one feature that disagrees with the data: the first channel and how many."""
    stat: str
    channel: int
    stated: float
    actual: float
    channels: int
    level: str          # "error", "cancellation" (STA042) or "quantile" (STA043)
    allowed: float      # what rounding (or the estimator) explains at that channel


def _disagreement(stated: dict, actual: dict, tol: Tolerance, brackets: dict | None, ddof: float = 1.0) -> list[Off]:
    """Each stat beyond its tolerance (see `Tolerance`), with how bad it is; `ddof`: how much larger a
    sample std (ddof=1) may be than the population std."""
    off = []

    def note(name, bad, level, have, want, allowed):
        c = _first(bad)
        if c is not None:
            off.append(Off(name, c, float(have[c]), float(want[c]), int(bad.sum()), level, _at(allowed, c)))

    for name in ("min", "max", "mean", "std", "count"):
        if name not in stated:
            continue
        have, want = np.ravel(stated[name]).astype(np.float64), np.ravel(actual[name]).astype(np.float64)
        if have.shape != want.shape:
            continue   # reported as a shape problem
        gap = np.abs(have - want)
        if name == "count":
            note(name, gap > 0, "error", have, want, 0.0)
        elif name in ("min", "max"):
            note(name, gap > tol.min_max, "error", have, want, tol.min_max)
        elif name == "mean":
            note(name, gap > tol.mean, "error", have, want, tol.mean)
        else:   # the population std, or the sample std (ddof=1, torch's default) of the shortest episode
            rounding = (have < want - tol.std(want)) | (have > want * ddof + tol.std(want))
            cancelled = np.abs(have ** 2 - want ** 2) <= tol.variance + tol.std(want) * (2 * want + tol.std(want))
            note(name, rounding & ~cancelled, "error", have, want, tol.std(want))
            note(name, rounding & cancelled, "cancellation", have, want, np.sqrt(want ** 2 + tol.variance))
    for name, (low, high) in (brackets or {}).items():
        if name not in stated:
            continue
        have = np.ravel(stated[name]).astype(np.float64)
        if have.shape != low.shape:
            continue
        spread = tol.spread
        near = 2 * spread / QUANTILE_BINS + QUANTILE_SHARE * spread + tol.quantile
        gap = np.maximum(low - have, have - high)
        want = np.where(have < low, low, high)
        wild = gap > near + QUANTILE_WILD * np.maximum(spread, 1e-3 * tol.magnitude)
        note(name, wild, "error", have, want, near)
        note(name, (gap > near) & ~wild, "quantile", have, want, near)
    return off


def _agree_block(ctx: Context, block: list[Source], groups: list[Group], tally: "Tally", k: int) -> list[Finding]:
    """The block's stated episode stats against the data's (block k of `_blocks`); what the dataset stats are held
    to goes to `tally`."""
    ds = ctx.dataset
    data = _data_stats(ctx, groups, k)
    lo, hi = _blocks(ctx).bounds[k]
    tally.add(data, episode_columns(ctx).index[lo:hi])
    data.dtypes = tally.dtypes   # each feature's first dtype in the data, as the dataset stats are held to
    unsure = _unsure(ds, groups, data)
    return [f for source in _among(block, groups, unsure)
            for f in _compare(ds, source, data.episode(source.episode), tally.dtypes, unsure[source.episode], data)]


def _compare(ds: Dataset, source: Source, actual: Stats, dtypes: dict, only: set[str] | None = None,
             data: DataStats | None = None) -> list[Finding]:
    """One stats dict against the data's `actual` stats (of `only` features, when given); `data`: an episode's
    recomputed stats, with its non-finite runs and quantile brackets."""
    out = []
    for feature, stated in source.stats.items():
        if only is not None and feature not in only:
            continue
        dirty = data is not None and (source.episode, feature) in data.dirty
        if feature not in actual or dirty or is_placeholder(stated):
            continue
        exact = actual[feature]
        magnitude = np.maximum(np.abs(exact["min"]), np.abs(exact["max"]))
        tol = Tolerance.of(ds.info.features[feature]["dtype"], dtypes.get(feature),
                           _rows(ds, source, exact["count"]), magnitude, exact["max"] - exact["min"])
        brackets = data.bracket(source.episode, feature) if data is not None else None
        short = _rows(ds, source, exact["count"], shortest=True)
        ddof = float(np.sqrt(short / (short - 1))) if short > 1 else 1.0
        out += _mismatch(ds, source, feature, _disagreement(stated, exact, tol, brackets, ddof))
    return out


@dataclass
class Tally:
    """What the blocks' recomputed stats leave for the dataset stats: the data findings, incomplete features, each
    feature's first dtype, and per block the `aggregate` of its episodes' recomputed stats (None: an episode of it
    has none), pooled at the end."""
    found: dict = field(default_factory=dict)
    incomplete: set = field(default_factory=set)
    dtypes: dict = field(default_factory=dict)
    parts: list = field(default_factory=list)

    def add(self, data: DataStats, indices: np.ndarray) -> None:
        self.found.update(data.found)
        self.incomplete |= data.incomplete
        for feature, dtype in data.dtypes.items():
            self.dtypes.setdefault(feature, dtype)
        self.parts.append(_aggregated(data, indices))

    def recomputed(self, complete: list[str]) -> Stats:
        """Dataset stats of the `complete` features every block's episodes hold (none unless every episode has
        some): one block's `aggregate`, or the pooled `aggregate` of the blocks'."""
        if not self.parts or any(part is None for part in self.parts):
            return {}
        features = [f for f in self.parts[0] if f in complete and all(f in part for part in self.parts)]
        if len(self.parts) == 1:
            return {f: self.parts[0][f] for f in features}   # aggregate's order, sorted
        return aggregate([{f: part[f] for f in features} for part in self.parts])


def _aggregated(data: DataStats, indices: np.ndarray) -> Stats | None:
    """`aggregate` of the recomputed stats of the episodes `indices` (metadata order), of each feature they all
    have in the data, complete there; None unless each has some."""
    rows = {f: _lookup(exact.episodes, indices) for f, exact in data.exact.items()}
    held = np.zeros(len(indices), dtype=bool)
    for found in rows.values():
        held |= found >= 0
    if not held.all():
        return None
    ordered = {f: len(at) == len(data.exact[f].episodes) and np.array_equal(at, np.arange(len(at)))
               for f, at in rows.items()}   # the rows already in metadata order: no gather (a copy)
    return aggregate({f: {k: v if ordered[f] else v[rows[f]] for k, v in data.exact[f].stats.items()}
                      for f in rows if f not in data.incomplete and (rows[f] >= 0).all()})


def _recomputed(ctx: Context, data: DataStats, complete: list[str]) -> Stats:
    """Dataset stats from the recomputed per-episode ones (every run's `data`), of the `complete` features every
    metadata episode has in the data (none unless each has some)."""
    tally = Tally()
    tally.add(data, episode_columns(ctx).index)
    return tally.recomputed(complete)


AGREE_MARGIN = 0.5   # the prefilter's share of each tolerance: it passes only what `_disagreement` surely does
AGREE_ROWS = 1 << 13   # `_agreeing` takes a group's rows this many at a time: each row is decided on its own, and its
                       # dozens of (rows, channels) temporaries stay a few MB, reused, not fresh memory per stat


def _unsure(ds: Dataset, groups: list[Group], data: DataStats) -> dict[int, set[str]]:
    """episode -> the features whose stated stats are to be compared one by one: all but those `_disagreement` surely
    finds nothing in, decided for a feature's episodes at once on (episodes, channels) matrices with the same
    tolerances (`Tolerance`, the quantiles' brackets) held to AGREE_MARGIN of their size, so that rounding in the two
    ways of computing them cannot let one through that the exact check would flag."""
    moments = ("min", "max", "mean", "std", "count")
    unsure: dict[int, set[str]] = {}
    for group in groups:
        feature, n = group.feature, len(group.episodes)
        ok = np.zeros(n, dtype=bool)
        if group.matrices is not None:
            for start in range(0, n, AGREE_ROWS):
                ok[start:start + AGREE_ROWS] = _agreeing(ds, group.rows(start, start + AGREE_ROWS), data, moments)
        for e in group.episodes[~ok].tolist():
            unsure.setdefault(e, set()).add(feature)
    return unsure


def _agreeing(ds: Dataset, group: Group, data: DataStats, moments: tuple[str, ...]) -> np.ndarray:
    """Per episode of `group`, whether its stated stats surely agree with the data (see `_unsure`)."""
    feature, stated, episodes = group.feature, group.matrices, group.episodes
    n = len(episodes)
    exact = data.exact.get(feature)
    at = _lookup(exact.episodes, episodes) if exact is not None else np.full(n, -1)
    usable = at >= 0
    dirty = [e for e, f in data.dirty if f == feature]
    if dirty:
        usable &= ~np.isin(episodes, dirty)
    if "count" in stated and stated["count"].shape[1]:
        usable &= stated["count"].any(axis=1)   # a placeholder is not compared
    ok = np.zeros(n, dtype=bool)
    rows = np.flatnonzero(usable)
    if not len(rows):
        return ok
    actual = {k: exact.stats[k][at[rows]].astype(np.float64) for k in moments}
    names = [k for k in moments if k in stated]
    if any(stated[k].shape[1] != actual[k].shape[1] for k in names):
        return ok   # a shape problem: reported one by one
    dtype = ds.info.features[feature]["dtype"]
    tol = Tolerance.of(dtype, data.dtypes.get(feature), 1, 0.0, 0.0)
    count = np.maximum(actual["count"][:, :1] * (VISUAL_PIXELS if dtype in VISUAL else 1), 1)
    magnitude = np.maximum(np.abs(actual["min"]), np.abs(actual["max"]))
    spread = actual["max"] - actual["min"]
    min_max = tol.value_eps * magnitude
    mean = (tol.value_eps + (count / 2 + 2) * tol.sum_eps) * magnitude
    good = np.ones(len(rows), dtype=bool)
    for name in names:
        have, want = stated[name][rows], actual[name]
        allowed = {"count": 0.0, "min": min_max, "max": min_max, "mean": mean}.get(name)
        if allowed is None:   # std: the mean's error plus the sums'
            allowed = mean + ((count + 2) * tol.sum_eps + tol.value_eps) * want
        good &= (np.abs(have - want) <= AGREE_MARGIN * allowed).all(axis=1)
    quantiles = [k for k in _quantile_keys(group.shapes) if k in stated]
    if quantiles:
        blocks = data.brackets.get(feature, [])
        block, row = data.bracket_rows(feature, episodes[rows])
        whole = np.array([all(q in b.keys for q in quantiles) for b in blocks] + [False])   # [-1]: none
        held = whole[block]
        good &= ~((block >= 0) & ~held)   # brackets for some quantiles only: one by one
        chosen = np.flatnonzero(held)
        near = 2 * spread / QUANTILE_BINS + QUANTILE_SHARE * spread + tol.value_eps * magnitude + 1e-9 * (1 + spread)
        taken = block[chosen]
        shares = []   # each bracket block's share of the chosen episodes, once a feature: (block, which, their rows)
        for b in distinct(taken).tolist():
            mine = taken == b
            shares.append((b, mine, row[chosen][mine]))
        for name in quantiles if len(chosen) else ():
            have = stated[name][rows[chosen]]
            if have.shape[1] != blocks[taken[0]].bounds.shape[2]:
                good[chosen] = False
                continue
            found = []   # each share's (which, low brackets, high brackets) of this quantile
            for b, mine, at in shares:
                k, j = len(blocks[b].keys), blocks[b].keys.index(name)
                found.append((mine, blocks[b].bounds[at, j], blocks[b].bounds[at, k + j]))
            if len(found) == 1:   # one block holds them all (a file's episodes): as gathered, not placed
                _, low, high = found[0]
            else:
                low, high = np.empty_like(have), np.empty_like(have)
                for mine, lo, hi in found:
                    low[mine], high[mine] = lo, hi
            gap = np.maximum(low - have, have - high)
            good[chosen] &= (gap <= AGREE_MARGIN * near[chosen]).all(axis=1)
    ok[rows] = good
    return ok


def _describe(source: Source, feature: str, offs: list[Off], why: str = "") -> str:
    first = offs[0]
    also = f" (also {', '.join(o.stat for o in offs[1:])})" if len(offs) > 1 else ""
    return (f"{source.label}: {feature} {first.stat}[{first.channel}] is {first.stated:.7g}, the data gives "
            f"{first.actual:.7g} ({_plural(first.channels, 'channel')} off; {why or 'rounding explains'} "
            f"{first.allowed:.3g}){also}")


def _mismatch(ds: Dataset, source: Source, feature: str, off: list[Off]) -> list[Finding]:
    """The worst kind of disagreement of one feature in one stats dict, as one finding."""
    where = dict(file=source.file, episode=source.episode, feature=feature)
    errors = [o for o in off if o.level == "error"]
    if errors:
        code = ("STA041" if feature in INDEX_FEATURES else
                "STA044" if ds.version == "v2.1" and source.episode is None else "STA040")
        return [_finding(code, _describe(source, feature, errors), channel=errors[0].channel, **where)]
    out = []
    for level, code, why in (("cancellation", "STA042", "the rounding of E[x^2] - E[x]^2 gives up to"),
                             ("quantile", "STA043", "lerobot's histogram quantiles explain")):
        offs = [o for o in off if o.level == level]
        if offs and feature not in INDEX_FEATURES:
            out.append(_finding(code, _describe(source, feature, offs, why), channel=offs[0].channel, **where))
    return out
