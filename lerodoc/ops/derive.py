"""Rewrite a dataset's data columns (and the features and stats that describe them), leaving every
other file as it is (hard links in the staged tree). The engine of `flatten` and `select`.

A transform is a picklable object with `apply(table) -> table` (same rows, same order) and `changed`,
the output columns whose values it changes or creates; every other output column must keep its
values exactly, which the workers check by checksum on both sides. A transform whose `identity` is true
(apply returns every table as it is) leaves the data files as they are: only the metadata is written.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lerodoc import formats
from lerodoc.budget import give_back
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, VerificationError
from lerodoc.formats.hf import schema_for
from lerodoc.formats.model import GatherStream, episode_column, keep_stats, stats_holders, stats_stack, update_stats
from lerodoc.files import new_file
from lerodoc.formats.paths import inside
from lerodoc.run.parallel import pmap
from lerodoc.tables.parquet_io import column_digests, conform, read_parquet, read_schema, write_groups
from lerodoc.promote.staging import output_target, scratch_beside, staged_edit
from lerodoc.promote.links import link_or_copy
from lerodoc.ops.convert import convert
from lerodoc.ops.stats import dataset_quantiles
from lerodoc.tables.stats import EpisodeStacks, SpilledStack, dataset_stats, table_stacks
from lerodoc.conventions import INFO_PATH, WRITES


class Transform(Protocol):
    changed: tuple[str, ...]

    def apply(self, table: pa.Table, path: str) -> pa.Table: ...


@dataclass(frozen=True)
class FileJob:
    src: str
    out: str
    episodes: tuple[tuple[int, int, int], ...]     # (episode index, first row in the file, length)
    spill: str | None = None   # where the file's new per-episode stats go (PATH-feature-stat.npy), else returned


def rewrite_file(args: tuple[FileJob, Transform, pa.Schema]) -> tuple[list[int], dict[str, dict[str, np.ndarray]]]:
    """Worker: transform one data file, write it (row groups by bytes: `write_groups`), re-read and verify it.
    Returns its episodes and their stats of the changed columns, stacked (feature -> stat -> (episodes, ...)): a
    few arrays per file to send back, not a dict per episode; with `job.spill`, each array saved there instead and
    (its path, a row's shape, its dtype) sent back."""
    job, transform, schema = args
    source = read_parquet(job.src)
    try:   # stored as lerobot 0.6.1 loads it: a list<1> column of a shape-(1,) feature becomes its scalar
        table = conform(transform.apply(source, job.src).select(schema.names), schema)
    except LerodocError as exc:
        raise LerodocError(exc.message, file=job.src, field=exc.field) from None
    if table.num_rows != source.num_rows:
        raise VerificationError(f"transform changed the row count ({source.num_rows} -> {table.num_rows})",
                                file=job.src)
    present = set(source.column_names)   # a new list at each `column_names`: asked once, not once a column
    kept = [c for c in schema.names if c not in transform.changed and c in present]
    expected = column_digests(table)
    kept_schema = pa.schema([schema.field(c) for c in kept])
    if {c: expected[c] for c in kept} != column_digests(conform(source.select(kept), kept_schema)):
        raise VerificationError("values of untouched columns changed", file=job.src)
    with new_file(job.out) as tmp, pq.ParquetWriter(tmp, schema, use_dictionary=False) as writer:
        write_groups(writer, table)
    if column_digests(read_parquet(job.out)) != expected:
        raise VerificationError("written file differs from what was planned", file=job.out)
    stacks = table_stacks(table, transform.changed, np.array([start for _, start, _ in job.episodes], dtype=np.int64),
                          np.array([length for _, _, length in job.episodes], dtype=np.int64))
    if job.spill is not None:
        stacks = {feature: {stat: _spill(f"{job.spill}-{i}-{j}.npy", values) for j, (stat, values) in
                            enumerate(by_stat.items())} for i, (feature, by_stat) in enumerate(stacks.items())}
    return [index for index, _, _ in job.episodes], stacks


def _spill(path: str, values: np.ndarray) -> tuple[str, tuple, str]:
    """Save a stack (a new file, `files.new_file`) and say where it is and what a row is."""
    with new_file(path) as tmp, open(tmp, "wb") as out:
        np.save(out, values)
    return path, values.shape[1:], values.dtype.str


def _updates(parts: list, episodes: list, spilled: bool) -> EpisodeStacks | None:
    """The changed columns' per-episode stats of every file (`rewrite_file`'s parts), stacked. Where the workers
    `spilled` them, read from their files a slice at a time (`SpilledStack`) if they are every episode's in the
    episodes' order (what a stream reads), else loaded."""
    if not parts or not parts[0][1]:
        return None
    if not spilled:
        return EpisodeStacks.joined(parts, consume=True)
    first = parts[0][1]
    lengths = [len(indices) for indices, _ in parts]
    updates = EpisodeStacks([index for indices, _ in parts for index in indices],
                            {feature: {stat: SpilledStack([part[feature][stat][0] for _, part in parts], lengths,
                                                          *kind[1:]) for stat, kind in by_stat.items()}
                             for feature, by_stat in first.items()})
    return updates if np.array_equal(updates.order, episode_column(episodes, "index")) else _loaded(updates)


def _loaded(updates: EpisodeStacks | None) -> EpisodeStacks | None:
    """Spilled stacks read into memory whole (what `update_stats` takes)."""
    if updates is None:
        return None
    return EpisodeStacks(updates.order, {feature: {stat: values[:] if isinstance(values, SpilledStack) else values
                                                     for stat, values in by_stat.items()}
                                           for feature, by_stat in updates.stacks.items()})


@dataclass(frozen=True)
class Plan:
    """What `derive` writes: each data file transformed (`jobs`, output paths relative to the output root)
    into `schema` (none for an identity transform), other files moved (or left out: None), the metadata files
    rewritten; every other file is kept as it is (a hard link)."""
    jobs: tuple[FileJob, ...]
    schema: pa.Schema
    moved: tuple[tuple[str, str | None], ...]
    rewritten: tuple[str, ...]          # every path of the input not linked as it is
    changed: tuple[str, ...]            # columns whose values the transform changes or creates

    def to_json(self) -> dict:
        data = {job.out for job in self.jobs}
        moved = dict(self.moved)
        files = [{"file": job.out, "action": "transform", "episodes": [e for e, _, _ in job.episodes]}
                 for job in self.jobs]
        files += [{"file": old, "action": f"move to {new}" if new else "leave out"} for old, new in self.moved]
        files += [{"file": path, "action": "rewrite"} for path in self.rewritten
                  if path not in data | set(moved) and not path.startswith("meta/")]
        files.append({"file": "meta/", "action": "rewrite (info, episodes, tasks, stats)"})
        return {"files": files, "changes": [f"column {name}: values written anew" for name in self.changed]}


def plan(ds: Dataset, transform: Transform, features: dict, moved: dict[str, str | None] | None = None) -> Plan:
    """Plan `derive`: which files are transformed, moved or rewritten. Nothing is written. (With `moved`, the
    episodes already point at the files' new paths: the caller checked the files before.)"""
    ds.require_complete(files=not moved)
    if ds.version == "v2.0":
        raise LerodocError("v2.0 datasets are read-only here", file=ds.root / INFO_PATH,
                           hint="convert it first: lerodoc convert DATASET -o OUT")
    module = formats.module(ds.version)
    by_file = ds.row_spans()
    base = read_schema(ds.path(ds.episodes[0].data_file), ds.episodes[0].index)
    identity = getattr(transform, "identity", False)
    if identity:   # the data files are kept as they are: their footers must at least read
        for data_file, eps in by_file.items():
            read_schema(ds.path(data_file), eps[0][0])
        by_file = {}
    columns = [name for name, spec in features.items() if spec["dtype"] != "video"]
    moved = moved or {}
    rewritten = set(by_file) | module.stats_files(ds.root) | {INFO_PATH} | set(moved)
    return Plan(tuple(FileJob(str(ds.path(f)), f, tuple(eps)) for f, eps in by_file.items()),
                schema_for(features, columns, base), tuple(moved.items()), tuple(sorted(rewritten)),
                tuple(transform.changed))


def derive(ds: Dataset, out: Path | None, transform: Transform, features: dict, *, in_place: bool = False,
           force: bool = False, workers: int = 1, moved: dict[str, str | None] | None = None,
           renamed: dict[str, str] | None = None, dropped: set[str] = frozenset()) -> Path:
    """Write `ds` with its data files transformed and `features` as its new info.json features.

    `moved` maps other files (relative paths, a renamed camera's videos say) to their new path, or to None
    to leave them out (a dropped camera's); every other file is kept as it is. `renamed` maps old feature
    names to new ones, so that their stats (dataset and per-episode) follow; `dropped` names the features (and
    cameras) the user asked to leave out: any other one missing from the output is refused (staging). `plan` is
    what this writes. A v2.x dataset's edit is written as v3.0 (`as_written`)."""
    return as_written(ds, out, in_place=in_place, force=force, workers=workers, edit=lambda target, **place:
                      _derive(ds, target, transform, features, workers=workers, moved=moved, renamed=renamed,
                              dropped=dropped, **place))


def as_written(ds: Dataset, out: Path | None, *, in_place: bool, force: bool, workers: int, edit) -> Path:
    """Run `edit(target, in_place=, force=)`, an edit that keeps `ds`'s file layout, so that what it leaves is
    v3.0 (`conventions.WRITES`, the version LeRobotDataset 0.6.1 loads): a v3.0 dataset's edit is written as asked; a
    v2.x one's is written to a scratch folder beside the output, then converted (`ops.convert`: rows checksummed,
    videos by stream copy) into `out`, or, with `in_place`, swapped in for `ds` while its meta/ is still the one
    read. Returns the output's path."""
    if ds.version == WRITES:
        return edit(out, in_place=in_place, force=force)
    target = output_target(ds.root, out, in_place)
    seen = ds.meta_seen if in_place else None
    with scratch_beside(target) as scratch:
        staged = edit(scratch / "edited", in_place=False, force=False)
        convert(staged, target, to=WRITES, workers=workers, force=force, replacing=seen)
    return Path(target).absolute()


def _derive(ds: Dataset, out: Path | None, transform: Transform, features: dict, *, in_place: bool = False,
            force: bool = False, workers: int = 1, moved: dict[str, str | None] | None = None,
            renamed: dict[str, str] | None = None, dropped: set[str] = frozenset()) -> Path:
    planned = plan(ds, transform, features, moved)
    module = formats.module(ds.version)
    renamed = renamed or {}
    # past the stats budget (transient tables: a stream's) the new stats wait on disk, not in memory
    holders = stats_holders(ds.episodes).values()
    spill = ds.version == "v3.0" and bool(holders) and all(getattr(h, "transient", False) for h in holders)
    with staged_edit(ds.root, out, in_place=in_place, force=force, rewrite=set(planned.rewritten), dropped=dropped,
                     renamed=renamed, seen=ds.meta_seen) as tmp, \
            (scratch_beside(tmp) if spill else nullcontext()) as scratch:
        for old, new in planned.moved:
            if new is not None:
                link_or_copy(ds.path(old), inside(tmp, new, field="video_path"))
        jobs = [(replace(job, out=str(inside(tmp, job.out, field="data_path")),
                         spill=str(scratch / str(n)) if scratch else None), transform, planned.schema)
                for n, job in enumerate(planned.jobs)]
        parts = pmap(rewrite_file, jobs, workers=workers, nbytes=ds.data_bytes())
        updates = _updates(parts, ds.episodes, spill)   # the changed columns' stats, every file's stacked together
        parts = None
        # past the stats budget (transient tables) the episodes files are written a file's stats at a time
        stream = GatherStream.of(ds.episodes, updates, features=features, renamed=renamed) \
            if ds.version == "v3.0" else None
        if stream is None:
            updates = _loaded(updates)
            keep_stats(ds.episodes, features, renamed)
            if updates is not None:
                update_stats(ds.episodes, updates)
        updates = None
        stats = {renamed.get(k, k): v for k, v in (ds.stats or {}).items() if renamed.get(k, k) in features}
        changed = list(planned.changed)
        quantiles = dataset_quantiles([tmp / job.out for job in planned.jobs], changed, features, ds.total_frames,
                                      workers=workers)[0] if changed else None

        def dataset() -> dict | None:   # each changed feature's stats replaced whole
            if changed:
                basic = stream.basic() if stream is not None else stats_stack(ds.episodes, changed)
                stats.update(dataset_stats({f: basic[f] for f in changed if f in basic}, quantiles,
                                           features=changed))
            return stats if (ds.stats or changed) else None
        ds.info.features = features
        if stream is not None:
            module.write_meta(tmp, ds.info, ds.episodes, ds.tasks, dataset, stream=stream)
            stream = None   # its new stats (a gigabyte at a million episodes) let go before the output is opened
            give_back()
        else:
            module.write_meta(tmp, ds.info, ds.episodes, ds.tasks, dataset())
    return Path(ds.root if in_place else out).absolute()
