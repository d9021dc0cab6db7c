"""Drop or rename features and cameras. info.json, stats (dataset and per-episode), the parquet columns and
`datasets` metadata, the video folders and the episodes metadata follow; every kept value is unchanged.
The data files go through `ops.derive` (untouched columns checksummed on both sides); a camera's video
files are renamed or left out, never re-encoded.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath

import pyarrow as pa

from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.info import INDEX_FEATURES
from lerodoc.formats.paths import component
from lerodoc.ops.derive import derive
from lerodoc.promote.staging import output_target
from lerodoc.conventions import INFO_PATH


@dataclass(frozen=True)
class FeatureEdit:
    """The transform: `drop` columns go, `rename` (old, new) columns get their new name; no value changes."""
    drop: tuple[str, ...]
    rename: tuple[tuple[str, str], ...]
    changed: tuple[str, ...] = ()

    def apply(self, table: pa.Table, path: str) -> pa.Table:
        present = set(table.column_names)   # a new list at each `column_names`: asked once
        table = table.drop_columns([c for c in self.drop if c in present])
        names = dict(self.rename)
        return table.rename_columns([names.get(c, c) for c in table.column_names])


@dataclass
class FeaturesReport:
    dataset: str
    output: str | None
    dropped: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    cameras_dropped: list[str] = field(default_factory=list)
    cameras_renamed: dict[str, str] = field(default_factory=dict)
    files_moved: int = 0       # video files under a new camera name (hard links)
    files_left_out: int = 0    # video files of dropped cameras
    features: list[str] = field(default_factory=list)   # the output's features
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def parse_rename(value: str) -> tuple[str, str]:
    old, sep, new = value.partition("=")
    old, new = old.strip(), new.strip()
    if not sep or not old or not new:
        raise UsageError(f"--rename {value!r}: expected OLD=NEW")
    return old, component(new, field="--rename", what="new name")   # a camera's name is its videos' folder


def renamed_path(path: str, old: str, new: str) -> str:
    """A camera's file path with the camera's folder renamed (`videos/<key>/...` in v3.0,
    `videos/chunk-000/<key>/...` in v2.x)."""
    parts = PurePosixPath(path).parts
    if old not in parts:
        raise LerodocError(f"video file path does not name its camera {old!r}", file=path, field=old)
    return str(PurePosixPath(*[new if p == old else p for p in parts]))


def plan(ds: Dataset, drop: list[str], rename: list[str]) -> tuple[FeatureEdit, dict, dict, FeaturesReport]:
    """The transform, the new features, the video files to move or leave out, and the report."""
    info_file = ds.root / INFO_PATH
    features = dict(ds.info.features)
    report = FeaturesReport(dataset=str(ds.root), output=None)
    pairs = [parse_rename(v) for v in rename]
    for name in list(drop) + [old for old, _ in pairs]:
        if name not in features:
            raise UsageError(f"no feature {name!r} (features: {', '.join(features)})", field=name, file=info_file)
        if name in INDEX_FEATURES:
            raise UsageError(f"{name} is an index column every LeRobot dataset needs; it cannot be dropped or "
                             "renamed", field=name, file=info_file)
    touched = list(drop) + [old for old, _ in pairs]
    if len(set(touched)) != len(touched):
        raise UsageError("a feature is named twice in --drop/--rename", field=touched[0])
    targets = [new for _, new in pairs]
    clash = [n for n in targets if (n in features and n not in touched) or targets.count(n) > 1]
    if clash:
        raise UsageError(f"--rename: {clash[0]!r} is already a feature", field=clash[0], file=info_file)
    if not touched:
        raise UsageError("nothing to edit: give --drop F and/or --rename OLD=NEW")
    moved: dict[str, str | None] = {}
    for name in drop:
        spec = features.pop(name)
        if spec["dtype"] == "video":
            report.cameras_dropped.append(name)
            moved.update({f: None for f in ds.video_files(name)})
        else:
            report.dropped.append(name)
    renames = dict(pairs)
    features = {renames.get(n, n): spec for n, spec in features.items()}
    for old, new in pairs:
        if ds.info.features[old]["dtype"] == "video":
            report.cameras_renamed[old] = new
            moved.update({f: renamed_path(f, old, new) for f in ds.video_files(old)})
        else:
            report.renamed[old] = new
    if not any(spec["dtype"] not in INDEX_FEATURES and n not in INDEX_FEATURES for n, spec in features.items()):
        raise UsageError("every feature would be gone", file=info_file)
    report.files_moved = sum(1 for v in moved.values() if v is not None)
    report.files_left_out = sum(1 for v in moved.values() if v is None)
    report.features = list(features)
    transform = FeatureEdit(tuple(n for n in drop if ds.info.features[n]["dtype"] != "video"),
                            tuple((o, n) for o, n in pairs if ds.info.features[o]["dtype"] != "video"))
    return transform, features, moved, report


def edit_features(src: Path, out: Path | None = None, *, drop: list[str] = (), rename: list[str] = (),
                  in_place: bool = False, dry_run: bool = False, workers: int = 1,
                  force: bool = False) -> FeaturesReport:
    """Write `src` without the `drop` features and with the `rename` (OLD=NEW) ones renamed."""
    started = time.perf_counter()
    ds = Dataset.open(src)
    ds.require_complete(dropping=frozenset(drop))   # before the episodes are pointed at renamed camera files
    transform, features, moved, report = plan(ds, list(drop), list(rename))
    if not dry_run:
        output_target(ds.root, out, in_place)   # the one -o / --in-place rule
        cameras = report.cameras_renamed
        for ep in ds.episodes:
            ep.videos = {cameras.get(k, k): replace(span, file=moved[span.file]) if k in cameras else span
                         for k, span in ep.videos.items() if k not in report.cameras_dropped}
        report.output = str(derive(ds, out, transform, features, in_place=in_place, force=force, workers=workers,
                                   moved=moved, renamed={**report.renamed, **cameras}, dropped=set(drop)))
    report.seconds = round(time.perf_counter() - started, 3)
    return report
