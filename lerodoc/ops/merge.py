"""Merge datasets (any versions, mixed) into one, at file level: rows copied and renumbered, tasks
unioned by text, videos joined by stream copy, stats recomputed from the merged data.

A single source with --exclude deletes episodes; with --episodes it keeps a subset (a split).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from lerodoc import formats
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.formats.info import Info, canonical_feature, codec_name, flat_names
from lerodoc.formats.stats import normalise_stats
from lerodoc.ops import rewrite
from lerodoc.staging import staged_output
from lerodoc.stats import aggregate, dataset_quantiles

STREAM_KEYS = ("video.height", "video.width", "video.pix_fmt", "video.channels")


@dataclass
class SourceSummary:
    label: str
    path: str
    version: str
    episodes_in: int
    frames_in: int
    episodes_out: int = 0
    frames_out: int = 0
    excluded: list[int] = field(default_factory=list)


@dataclass
class MergeReport:
    output: str
    to_version: str
    sources: list[SourceSummary]
    episodes: int = 0
    frames: int = 0
    tasks: int = 0
    reconciled: list[str] = field(default_factory=list)
    normalised_columns: dict[str, dict] = field(default_factory=dict)   # column -> {"from", "to"} Arrow types
    reencoded_clips: list[dict] = field(default_factory=list)
    retimed_clips: list[dict] = field(default_factory=list)   # stream-copied onto the k/fps grid (VID005)
    bytes_copied: int = 0
    seconds: float = 0.0
    plan: dict | None = None      # --dry-run: `rewrite.Plan.to_json`, what a run would write

    def to_json(self) -> dict:
        """--json: each source's root is its `dataset`, as in every command's report (docs/json.md)."""
        body = asdict(self)
        body["sources"] = [{("dataset" if k == "path" else k): v for k, v in s.items()} for s in body["sources"]]
        return body


def labels_for(paths: list[Path]) -> list[str]:
    return [chr(ord("A") + i) if i < 26 else f"S{i}" for i in range(len(paths))]


def parse_selection(values: list[str], labels: list[str], names: list[str], option: str) -> dict[int, set[int]]:
    """`A:355`, `B:0-9`, `part_b:1,4-6` -> {source position: episode numbers}."""
    chosen: dict[int, set[int]] = {}
    for value in values:
        label, _, spec = value.rpartition(":")
        if label in labels:
            source = labels.index(label)
        elif label in names:
            source = names.index(label)
        else:
            raise LerodocError(f"{option} {value!r}: no source called {label!r} (use {', '.join(labels)} or a "
                               "folder name)")
        if not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", spec):
            raise LerodocError(f"{option} {value!r}: expected SOURCE:N, SOURCE:N-M or SOURCE:N,M-K")
        numbers = chosen.setdefault(source, set())
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            numbers.update(range(int(lo), int(hi or lo) + 1))
    return chosen


def format_ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the inverse of the selection syntax)."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


def reconcile(datasets: list[Dataset], labels: list[str]) -> tuple[Info, list[str]]:
    """One output `Info` for all sources; representational differences are unified and listed, real
    conflicts raise naming the field and both values."""
    base = datasets[0]
    notes: list[str] = []

    def conflict(field_: str, other: int, a, b) -> LerodocError:
        return LerodocError(f"sources disagree: {labels[0]} ({base.root}) has {a!r}, "
                            f"{labels[other]} ({datasets[other].root}) has {b!r}", field=field_,
                            hint="these datasets cannot be merged as they are")

    for i, ds in enumerate(datasets[1:], 1):
        if ds.info.fps != base.info.fps:
            raise conflict("fps", i, base.info.fps, ds.info.fps)
        if set(ds.info.features) != set(base.info.features):
            raise conflict("features", i, sorted(base.info.features), sorted(ds.info.features))
        if ds.info.robot_type != base.info.robot_type:
            notes.append(f"robot_type: {labels[i]} has {ds.info.robot_type!r}, kept {base.info.robot_type!r}")
        for name, a in base.info.features.items():
            b = ds.info.features[name]
            for key in ("dtype", "shape"):
                if list(np.atleast_1d(a[key])) != list(np.atleast_1d(b[key])):
                    raise conflict(f"features.{name}.{key}", i, a[key], b[key])
            if a["dtype"] in ("video", "image"):
                if a["dtype"] == "video" and _codec_of(a) != _codec_of(b):
                    raise conflict(f"features.{name}.info.video.codec", i, _codec_of(a), _codec_of(b))
                for key in STREAM_KEYS:
                    va, vb = (a.get("info") or {}).get(key), (b.get("info") or {}).get(key)
                    if None not in (va, vb) and va != vb:
                        raise conflict(f"features.{name}.info.{key}", i, va, vb)
            elif flat_names(a.get("names")) != flat_names(b.get("names")) and None not in (a.get("names"),
                                                                                              b.get("names")):
                raise conflict(f"features.{name}.names", i, flat_names(a.get("names")), flat_names(b.get("names")))
            if a != b:
                notes.append(f"features.{name}: {labels[i]} differs only in representation "
                             f"({', '.join(sorted(_differing_keys(a, b)))}); unified")
    info = replace(base.info, features={n: canonical_feature(spec) for n, spec in base.info.features.items()},
                   extra=dict(base.info.extra))
    if info.features != base.info.features:
        notes.append("features written in canonical form: flat names, canonical codec names")
    return info, notes


def _codec_of(spec: dict) -> str | None:
    return codec_name((spec.get("info") or {}).get("video.codec"))


def _differing_keys(a: dict, b: dict) -> set[str]:
    keys = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    if "info" in keys:
        keys.discard("info")
        ia, ib = a.get("info") or {}, b.get("info") or {}
        keys |= {f"info.{k}" for k in set(ia) | set(ib) if ia.get(k) != ib.get(k)}
    return keys


def merge(sources: list[Path], out: Path, *, exclude: list[str] = (), episodes: list[str] = (),
          to: str = "v3.0", workers: int = 1, force: bool = False, dry_run: bool = False,
          progress: rewrite.Progress | None = None, engine=None) -> MergeReport:
    """Merge `sources` (in order) into a new dataset at `out`; `dry_run` returns the plan's report, writing
    nothing. The plan is made here; `engine` (`lerodoc.engine`) runs the copies and the quantile passes on a
    cluster."""
    started = time.perf_counter()
    datasets = [Dataset.open(p) for p in sources]
    labels, names = labels_for(sources), [Path(p).name for p in sources]
    excluded = parse_selection(list(exclude), labels, names, "--exclude")
    kept_only = parse_selection(list(episodes), labels, names, "--episodes")
    info, notes = reconcile(datasets, labels)
    for ds in datasets:   # after reconcile: a conflict between the sources is the better message
        ds.require_complete()
    summaries = [SourceSummary(label, str(ds.root), ds.version, len(ds.episodes), ds.total_frames)
                 for label, ds in zip(labels, datasets)]

    tasks: list[str] = []
    picks: list[rewrite.Pick] = []
    reshaped = False
    for i, ds in enumerate(datasets):
        numbers = {ep.index for ep in ds.episodes}
        for option, chosen in (("--exclude", excluded), ("--episodes", kept_only)):
            unknown = sorted(chosen.get(i, set()) - numbers)
            if unknown:
                raise LerodocError(f"{option}: source {labels[i]} has no episode {unknown[0]} "
                                   f"(it holds {min(numbers)}..{max(numbers)})", file=ds.root, episode=unknown[0])
        task_map = []
        for task in ds.tasks:
            if task not in tasks:
                tasks.append(task)
            task_map.append(tasks.index(task))
        for ep in ds.episodes:
            if ep.index in excluded.get(i, set()) or (i in kept_only and ep.index not in kept_only[i]):
                summaries[i].excluded.append(ep.index)
                continue
            ep.stats, changed = normalise_stats(ep.stats, info.features)
            reshaped |= changed
            picks.append(rewrite.Pick(ds, ep, tuple(task_map)))
            summaries[i].episodes_out += 1
            summaries[i].frames_out += ep.length
    if reshaped:
        notes.append("per-episode stats reshaped to their feature's shape (e.g. (1,1) -> (1,)); count=0 placeholder "
                     "stats dropped")
    if not picks:
        raise LerodocError("nothing to write: every episode is excluded")
    targets = [rewrite.target_schema(ds, info.features) for ds in datasets]
    schema = targets[0][0]
    normalised = {name: change for _, changes in targets for name, change in changes.items()}
    if any(not s.equals(schema, check_metadata=False) for s, _ in targets[1:]):
        differing = sorted({n for s, _ in targets[1:] for n in s.names
                            if n in schema.names and s.field(n).type != schema.field(n).type})
        notes.append(f"parquet column types differ between sources; all rows written with {labels[0]}'s types "
                     f"({', '.join(differing)})")
    info.data_files_size_in_mb = max(1, math.ceil(info.data_files_size_in_mb))
    caps = (info.data_files_size_in_mb, info.video_files_size_in_mb)
    plan = rewrite.plan(picks, info, tasks, to, schema, caps_mb=caps, workers=workers)

    report = MergeReport(output=str(Path(out).absolute()), to_version=to, sources=summaries, reconciled=notes,
                         normalised_columns=normalised, reencoded_clips=plan.reencoded)
    if dry_run:
        report.episodes, report.frames, report.tasks = len(picks), sum(p.episode.length for p in picks), len(tasks)
        report.plan = plan.to_json()
        report.seconds = round(time.perf_counter() - started, 3)
        return report
    with staged_output(Path(out), force=force, keep=[ds.root for ds in datasets]) as tmp:
        result = rewrite.execute(plan, tmp, workers=workers, progress=progress, engine=engine)
        new_eps = result.episodes
        stats = aggregate([ep.stats for ep in new_eps])
        data_files = [tmp / f for f in dict.fromkeys(ep.data_file for ep in new_eps)]
        quantiles, _ = dataset_quantiles(data_files, info.numeric_keys, info.features, sum(e.length for e in new_eps),
                                         workers=workers, engine=engine)
        for feature, by_level in quantiles.items():
            stats.setdefault(feature, {}).update(by_level)
        formats.module(to).write_meta(tmp, info, new_eps, tasks, stats if to == "v3.0" else None)
        rewrite.verify(tmp, to, new_eps)
        report.episodes, report.frames, report.tasks = len(new_eps), sum(e.length for e in new_eps), len(tasks)
        report.retimed_clips = result.retimed
        report.bytes_copied = rewrite.tree_size(tmp)
    report.seconds = round(time.perf_counter() - started, 3)
    return report
