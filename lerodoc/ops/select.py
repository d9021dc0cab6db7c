"""Build `observation.state` and `action` from chosen channels of existing features.

A SPEC is `feature` (every channel), or `feature[...]` with comma-separated items inside the
brackets: an index (`3`), a slice (`28:42`, `0:10:2`), or a channel name or glob from the feature's
`names` (`kLeftShoulderPitch`, `kLeft*`). Several specs are concatenated in order, so separate
features (AgiBot's `observation.states.joint.position`, ...) can be joined into one vector.
"""

from __future__ import annotations

import fnmatch
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from lerodoc.dataset import Dataset
from lerodoc.errors import UsageError
from lerodoc.formats.info import INDEX_FEATURES, flat_names
from lerodoc.ops import derive
from lerodoc.promote.staging import output_target
from lerodoc.tables.parquet_io import arrow_array, column_matrix
from lerodoc.ops.stats import exact_stats
from lerodoc.tables.stats import channel_flags
from lerodoc.conventions import INFO_PATH

TARGETS = {"state": "observation.state", "action": "action"}
PI05_MAX_DIM = 32
_SPEC = re.compile(r"(?P<feature>[^\[\]]+?)(\[(?P<items>[^\[\]]*)\])?")


@dataclass(frozen=True)
class Part:
    source: str
    indices: tuple[int, ...]


@dataclass(frozen=True)
class Select:
    """The transform: each target column is the concatenation of its parts; `drop` columns go away."""
    targets: tuple[tuple[str, tuple[Part, ...], str], ...]     # (name, parts, dtype)
    drop: tuple[str, ...]

    @property
    def changed(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.targets)

    def apply(self, table: pa.Table, path: str) -> pa.Table:
        built = {}
        for name, parts, dtype in self.targets:
            values = np.hstack([column_matrix(table.column(p.source), table.num_rows)[:, list(p.indices)]
                                for p in parts]).astype(dtype)
            flat = values.ravel()   # numpy's buffer in its own type (pa.array would import pandas)
            built[name] = pa.FixedSizeListArray.from_arrays(arrow_array(flat, pa.from_numpy_dtype(flat.dtype)),
                                                            values.shape[1])
        present = set(table.column_names)   # a new list at each `column_names`: asked once
        table = table.drop_columns([c for c in self.drop if c in present and c not in built])
        for name, column in built.items():
            table = (table.set_column(table.column_names.index(name), name, column) if name in table.column_names
                     else table.append_column(name, column))
        return table


@dataclass
class SelectReport:
    dataset: str
    output: str | None
    channels: list[dict] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    plan: dict | None = None      # --dry-run: what a run would write (`derive.Plan.to_json`)

    def to_json(self) -> dict:
        return asdict(self)


def resolve(ds: Dataset, spec: str) -> Part:
    """One SPEC -> the source feature and its channel indices."""
    match = _SPEC.fullmatch(spec.strip())
    info_file = ds.root / INFO_PATH   # the features a SPEC names are info.json's
    feature = match.group("feature").strip() if match else spec
    if not match or feature not in ds.info.features:
        raise UsageError(f"{spec!r}: no feature {feature!r} (features: {', '.join(ds.info.numeric_keys)})",
                         field=feature, file=info_file,
                         hint="write SPEC as feature, feature[28:42], feature[3,5] or feature[name*]")
    shape = ds.info.features[feature]["shape"]
    if ds.info.features[feature]["dtype"] in ("video", "image", "string") or len(shape) != 1:
        raise UsageError(f"{spec!r}: {feature} is not a numeric vector", field=feature, file=info_file)
    width, names = int(shape[0]), flat_names(ds.info.features[feature].get("names")) or []
    if match.group("items") is None:
        return Part(feature, tuple(range(width)))
    indices: list[int] = []
    for item in (i.strip() for i in match.group("items").split(",") if i.strip()):
        if re.fullmatch(r"-?\d*(:-?\d*){1,2}", item):
            bounds = [int(x) if x else None for x in item.split(":")]
            if any(b is not None and not -width <= b <= width for b in bounds[:2]) or bounds[2:3] == [0]:
                raise UsageError(f"{spec!r}: the slice {item} is out of range: {feature} has {width} channels "
                                 f"(0:{width}, or channels 0-{width - 1})", field=feature, file=info_file)
            chosen = range(width)[slice(*bounds)]
            if not chosen:
                raise UsageError(f"{spec!r}: the slice {item} selects no channel of {feature} ({width} channels, "
                                 f"0:{width})", field=feature, file=info_file)
            indices += chosen
        elif re.fullmatch(r"-?\d+", item):
            if not -width <= int(item) < width:
                raise UsageError(f"{spec!r}: channel {item} is out of range: {feature} has {width} channels "
                                 f"(0-{width - 1})", field=feature, file=info_file)
            indices.append(int(item) % width)
        else:
            hits = [i for i, n in enumerate(names) if fnmatch.fnmatchcase(n, item)]
            if not hits:
                raise UsageError(f"{spec!r}: no channel of {feature} is named {item!r}", field=feature,
                                 file=info_file,
                                 hint=f"names: {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}"
                                 if names else "this feature has no channel names; use indices")
            indices += hits
    if not indices:
        raise UsageError(f"{spec!r} selects no channel", field=feature, file=info_file)
    if len(set(indices)) != len(indices):
        raise UsageError(f"{spec!r} selects a channel twice", field=feature, file=info_file)
    return Part(feature, tuple(indices))


def plan(ds: Dataset, state: list[str], action: list[str], keep_source: bool) -> tuple[Select, dict, SelectReport]:
    """The transform, the new features and a report listing every output channel."""
    report = SelectReport(dataset=str(ds.root), output=None)
    targets, features = [], dict(ds.info.features)
    used: list[str] = []
    for kind, specs in (("state", state), ("action", action)):
        if not specs:
            continue
        name, parts = TARGETS[kind], tuple(resolve(ds, s) for s in specs)
        dtypes = {ds.info.features[p.source]["dtype"] for p in parts}
        dtype = "float32" if dtypes == {"float32"} else "float64"
        mixed = len({p.source for p in parts}) > 1    # channels from several features get qualified names
        names = [_channel_name(ds, p.source, i, mixed) for p in parts for i in p.indices]
        features[name] = {"dtype": dtype, "shape": [len(names)], "names": names}
        targets.append((name, parts, dtype))
        used += [p.source for p in parts]
        report.channels += [{"target": name, "channel": c, "name": n, "source": p.source, "source_channel": i}
                            for c, (n, (p, i)) in enumerate(zip(names, ((p, i) for p in parts for i in p.indices)))]
        if len(names) > PI05_MAX_DIM:
            report.warnings.append(f"{name} has {len(names)} channels; pi0.5 pads to at most {PI05_MAX_DIM} "
                                   "(max_state_dim/max_action_dim)")
    if not targets:
        raise UsageError("nothing to select: give --state and/or --action")
    drop = () if keep_source else tuple(sorted({u for u in used if u not in TARGETS.values()
                                                and u not in INDEX_FEATURES}))
    for name in drop:
        features.pop(name)
    report.dropped = list(drop)
    return Select(tuple(targets), drop), features, report


def _channel_name(ds: Dataset, feature: str, index: int, qualify: bool) -> str:
    names = flat_names(ds.info.features[feature].get("names")) or []
    base = names[index] if index < len(names) else f"{feature}[{index}]"
    return f"{feature}.{base}" if qualify and index < len(names) else base


def add_channel_stats(ds: Dataset, report: SelectReport, workers: int) -> None:
    """q01/q99 (and flags) for every selected channel, from stats.json or computed from the parquet."""
    sources = sorted({c["source"] for c in report.channels})
    have = ds.stats or {}
    # stats a damaged or foreign stats file holds in another size than the feature count as missing
    width = {s: int(np.prod(ds.info.features[s]["shape"])) for s in sources}
    missing = [s for s in sources if not all(np.size(have.get(s, {}).get(k, ())) == width[s]
                                             for k in ("q01", "q99", "min", "max"))]
    stats = {**have, **(exact_stats(ds, missing, workers=workers)[0] if missing else {})}
    for row in report.channels:
        s = stats[row["source"]]
        i = row["source_channel"]
        picked = {k: np.ravel(s[k])[i:i + 1] for k in ("min", "max", "q01", "q99")}
        row.update({k: float(v[0]) for k, v in picked.items()}, flags=channel_flags(picked)[0])


def select(src: Path, out: Path | None = None, *, state: list[str] = (), action: list[str] = (),
           keep_source: bool = False, dry_run: bool = False, in_place: bool = False, workers: int = 1,
           force: bool = False) -> SelectReport:
    """Build observation.state / action from `state` / `action` specs; `dry_run` reports the channels and the
    plan, writing nothing."""
    started = time.perf_counter()
    ds = Dataset.open(src)
    transform, features, report = plan(ds, list(state), list(action), keep_source)
    add_channel_stats(ds, report, workers)
    if dry_run:
        report.plan = derive.plan(ds, transform, features).to_json()
    else:
        output_target(ds.root, out, in_place)   # the one -o / --in-place rule
        report.output = str(derive.derive(ds, out, transform, features, in_place=in_place, force=force,
                                          workers=workers, dropped=set(report.dropped)))
    report.seconds = round(time.perf_counter() - started, 3)
    return report
