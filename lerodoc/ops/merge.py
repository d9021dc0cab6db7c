"""Merge datasets (any versions, mixed) into one, at file level: rows copied and renumbered, tasks
unioned by text, videos joined by stream copy, stats recomputed from the merged data.

A single source with --exclude deletes episodes; with --episodes it keeps a subset (a split).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from lerodoc import access, formats
from lerodoc.budget import give_back
from lerodoc.formats import v30
from lerodoc.dataset import Dataset, Thrift, read_rows
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.info import Info, codec_name, flat_names
from lerodoc.formats.model import episode_column, normal_rows, number_tasks, stats_stack
from lerodoc.formats.stats import normalise_stats
from lerodoc.ops import rewrite
from lerodoc.ops.stats import dataset_quantiles
from lerodoc.promote.kept import trim_to_held
from lerodoc.promote.staging import check_output, staged_output
from lerodoc.selection import Selection, parse
from lerodoc.tables.parquet_io import column_matrix, read_parquet
from lerodoc.tables.stats import dataset_stats

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


def source_selections(values: list[str], sources: list[Path], option: str,
                      find: Callable[[str], Path] | None = None) -> dict[int, Selection]:
    """`A:355`, `B:0-9`, `data/day2:[1, 4]`, `day2:4` (repeatable) -> {source position: its selection}. SOURCE is
    a label (A, B, ...), the source as it was typed (a path; a repo id, which `find` resolves as DATASET does:
    the command passes `hub.find_dataset`), or its folder name when only one source has it; syntax errors and a
    SOURCE that names no source, or several, are usage errors naming `option`."""
    labels = labels_for(sources)
    specs: dict[int, list[str]] = {}
    for value in values:
        label, sep, spec = value.rpartition(":")
        if not sep:
            raise UsageError(f"{option} {value!r}: expected SOURCE:EPISODES (SOURCE is {', '.join(labels)}, a "
                             "source's path or its folder name)", hint=f"e.g. {option} {labels[0]}:{value}")
        specs.setdefault(_source_named(label, sources, labels, option, value, find), []).append(spec)
    return {i: replace(parse(given, option), text=f"{labels[i]}:{','.join(s.strip() for s in given)}")
            for i, given in specs.items()}


def _source_named(label: str, sources: list[Path], labels: list[str], option: str, value: str,
                  find: Callable[[str], Path] | None) -> int:
    """The position of the source `label` names: a label first, then the source itself (the same path as typed
    or written another way, `./data/day2/` or an absolute one; the same repo id or hub URL), then a folder name
    that only one source has. What the user sees in `--help` (`--exclude data/day2:4`) is what works."""
    if label in labels:
        return labels.index(label)
    same = [i for i, source in enumerate(sources) if _same_source(label, source, find)]
    if len(same) == 1:
        return same[0]
    named = [i for i, source in enumerate(sources) if access.path(source).name == label]
    if len(named) == 1:
        return named[0]
    if len(same) > 1 or len(named) > 1:
        which = same if len(same) > 1 else named
        raise UsageError(f"{option} {value!r}: {label!r} names sources {', '.join(labels[i] for i in which)}",
                         hint=f"use the label, e.g. {option} {labels[which[0]]}:{value.rpartition(':')[2]}")
    raise UsageError(f"{option} {value!r}: no source called {label!r} (use {', '.join(labels)}, a source's path "
                     "or its folder name)")


def _same_source(label: str, source: Path, find: Callable[[str], Path] | None) -> bool:
    """Whether `label` names `source`: the same text, the same normalised path, the same folder on disk, or a
    repo id that resolves (as DATASET does, never by network) to that folder."""
    if not label or str(source).rstrip("/") == label.rstrip("/"):
        return bool(label)
    if access.is_remote(source):
        return False
    given = Path(label).expanduser()
    if os.path.abspath(given) == os.path.abspath(source):
        return True
    if given.exists():
        try:
            return source.exists() and os.path.samefile(given, source)
        except OSError:
            return False
    if find is not None and label.count("/") == 1 and not label.startswith((".", "/")) and ".." not in label:
        try:   # owner/name
            return source.exists() and os.path.samefile(find(label), source)
        except (LerodocError, OSError, ValueError):
            return False
    return False


def used_tasks(ds: Dataset, episodes: list) -> set[int]:
    """The task_index values the frames of `episodes` hold (the task_index column of their data files only)."""
    used: set[int] = set()
    by_file: dict[str, list] = {}
    for ep in episodes:
        by_file.setdefault(ep.data_file, []).append(ep)
    for data_file, eps in by_file.items():
        if access.is_remote(ds.root):   # a hub file: the column chunks of the kept episodes' row groups only
            for ep in eps:
                rows = read_rows(ds.path(data_file), ep.data_row, ep.length, columns=["task_index"], episode=ep.index)
                used.update(int(v) for v in np.unique(column_matrix(rows.column("task_index"), rows.num_rows)[:, 0]))
            continue
        table = read_parquet(ds.path(data_file), columns=["task_index"], episode=eps[0].index)
        values = column_matrix(table.column("task_index"), table.num_rows)[:, 0]
        kept = np.zeros(len(values) + 1, dtype=np.int64)   # +1 at each kept episode's first row, -1 after its last
        np.add.at(kept, np.array([min(ep.data_row, len(values)) for ep in eps], dtype=np.int64), 1)
        np.add.at(kept, np.array([min(ep.data_row + ep.length, len(values)) for ep in eps], dtype=np.int64), -1)
        used.update(np.unique(values[np.cumsum(kept[:-1]) > 0]).tolist())
    return used


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
    # written as convert writes them (`rewrite.canonical_features`): flat names, canonical codec names, and a camera's
    # names [height, width, channels] where lerobot 0.6.1 reads names[2] (LAY018, LAY019: delete and split too)
    features, changes = rewrite.canonical_features(base.info.features)
    info = replace(base.info, features=features, extra=dict(base.info.extra))
    notes += [f"written in canonical form: {line}" for line in changes]
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


def merge(sources: list[Path | Dataset], out: Path, *, exclude: Mapping[int, Selection] | None = None,
          episodes: Mapping[int, Selection] | None = None, to: str = "v3.0", workers: int = 1, force: bool = False,
          dry_run: bool = False, progress: rewrite.Progress | None = None, engine=None,
          in_place: bool = False, consume: bool = False) -> MergeReport:
    """Merge `sources` (in order; folders, or datasets already open) into a new dataset at `out`; `exclude` and
    `episodes` map a source's position to the episodes it leaves out or keeps only (`source_selections` reads
    them from the command line). A source that loses episodes keeps only the tasks its kept frames use, as
    lerobot's delete and split do. `dry_run` returns the plan's report, writing nothing; `in_place` (one source,
    `out` its root) lets `out` be that source. The plan is made here; `engine` (`lerodoc.run.engine`) runs the
    copies and the quantile passes on a cluster. The sources merge opens from folders are its own to let go of once
    the plan is executed; `consume` makes the open datasets given merge's own too (delete's, which it reads no
    more)."""
    started = time.perf_counter()
    exclude, episodes = dict(exclude or {}), dict(episodes or {})
    datasets = [p if isinstance(p, Dataset) else Dataset.open(p) for p in sources]
    owned = [consume or not isinstance(p, Dataset) for p in sources]
    roots = [ds.root for ds in datasets]
    if not dry_run:   # before any work: an -o on an input, or taken, stops here
        check_output(out, () if in_place else roots, force=force or in_place, own=in_place)
    labels = labels_for(roots)
    info, notes = reconcile(datasets, labels)
    thrift = Thrift()   # many parts, each within the stats budget, past it together: let go as they pass it
    for ds in datasets:   # after reconcile: a conflict between the sources is the better message
        # A hub dataset's files are checked for the episodes written, where they are read (rewrite.check_files,
        # dataset.read_rows), not by every data footer of the repository (download --episodes reads only its own).
        ds.require_complete(files=not access.is_remote(ds.root))
        thrift.add(ds)
    summaries = [SourceSummary(label, str(ds.root), ds.version, len(ds.episodes), ds.total_frames)
                 for label, ds in zip(labels, datasets)]

    picks: list[rewrite.Pick] = []
    reshaped = False
    task_at: dict[str, int] = {}   # the merged list's task_index of each text
    for i, ds in enumerate(datasets):
        numbers = [ep.index for ep in ds.episodes]
        holder = f"source {labels[i]} ({ds.root})"
        dropped = set(exclude[i].resolve(numbers, "--exclude", holder)) if i in exclude else set()
        only = set(episodes[i].resolve(numbers, "--episodes", holder)) if i in episodes else None
        kept = ds.episodes if not dropped and only is None else \
            [ep for ep in ds.episodes if ep.index not in dropped and (only is None or ep.index in only)]
        if len(kept) < len(ds.episodes):
            kept_numbers = {ep.index for ep in kept}
            summaries[i].excluded = [n for n in numbers if n not in kept_numbers]
        used = (used_tasks(ds, kept) if len(kept) < len(ds.episodes) and "task_index" in ds.info.features
                else range(len(ds.tasks)))
        # -1: no kept frame points here (read from the frames themselves). One a source, shared by its picks and row
        # pieces (not a tuple an episode).
        task_map = number_tasks(ds.tasks, task_at, used)
        for position in np.flatnonzero(~normal_rows(kept, info.features)):   # the others: nothing to reshape or drop
            ep = kept[position]
            ep.stats, changed = normalise_stats(ep.stats, info.features)
            reshaped |= changed
        picks += [rewrite.Pick(ds, ep, task_map) for ep in kept]
        summaries[i].episodes_out += len(kept)
        summaries[i].frames_out += int(episode_column(kept, "length").sum())
    tasks = list(task_at)
    if reshaped:
        notes.append("per-episode stats reshaped to their feature's shape (e.g. (1,1) -> (1,)); count=0 placeholder "
                     "stats dropped")
    if not picks:
        raise UsageError("nothing to write: every episode is excluded", hint="keep at least one episode")
    targets = [rewrite.target_schema(ds, info.features) for ds in datasets]
    schema = targets[0][0]
    normalised = {name: change for _, changes in targets for name, change in changes.items()}
    if any(not s.equals(schema, check_metadata=False) for s, _ in targets[1:]):
        first = set(schema.names)   # a new list at each `schema.names`: asked once
        differing = sorted({n for s, _ in targets[1:] for n in s.names
                            if n in first and s.field(n).type != schema.field(n).type})
        notes.append(f"parquet column types differ between sources; all rows written with {labels[0]}'s types "
                     f"({', '.join(differing)})")
    caps = info.whole_file_caps()
    plan = rewrite.plan(picks, info, tasks, to, schema, caps_mb=caps, workers=workers)

    report = MergeReport(output=str(Path(out).absolute()), to_version=to, sources=summaries, reconciled=notes,
                         normalised_columns=normalised, reencoded_clips=plan.reencoded)
    if dry_run:
        report.episodes, report.frames, report.tasks = len(picks), sum(p.episode.length for p in picks), len(tasks)
        report.plan = plan.to_json()
        report.seconds = round(time.perf_counter() - started, 3)
        return report
    with staged_output(Path(out), force=force or in_place, inputs=() if in_place else roots, keep=datasets,
                       own=in_place, seen=datasets[0].meta_seen if in_place else None) as tmp:
        result = rewrite.execute(plan, tmp, workers=workers, progress=progress, engine=engine, stream=to == "v3.0")
        new_eps, stream, retimed = result.episodes, result.stream, result.retimed
        plan = picks = result = None   # a million picks and row pieces let go: the new episodes are what is written
        for ds, own in zip(datasets, owned):   # and a source's episodes (0.7 GB a million) beyond what is left to
            if own:                            # ask of it: the kept check's (promote.kept.held)
                trim_to_held(ds)
        give_back()
        data_files = [tmp / f for f in dict.fromkeys(ep.data_file for ep in new_eps)]
        quantiles, _ = dataset_quantiles(data_files, info.numeric_keys, info.features, sum(e.length for e in new_eps),
                                         workers=workers, engine=engine)
        if stream is not None:   # the episodes files written a file's stats at a time, the aggregate after them
            v30.write_meta(tmp, info, new_eps, tasks, lambda: dataset_stats(stream.basic(), quantiles), stream=stream)
        else:
            stats = dataset_stats(stats_stack(new_eps), quantiles)
            formats.module(to).write_meta(tmp, info, new_eps, tasks, stats if to == "v3.0" else None)
        stream = None
        expected = rewrite.planned(new_eps)
        new_eps = None   # the new episodes let go before verify opens the output (its own million)
        give_back()
        rewrite.verify(tmp, to, expected)
        report.episodes, report.frames, report.tasks = len(expected), expected.frames, len(tasks)
        report.retimed_clips = retimed
        report.bytes_copied = rewrite.tree_size(tmp)
    report.seconds = round(time.perf_counter() - started, 3)
    return report
