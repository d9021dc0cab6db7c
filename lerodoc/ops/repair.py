"""Repair a dataset: rebuild its metadata from what the files really hold, then write it anew.

Ground truth is the data itself: which rows each parquet file holds (its `episode_index` column) and
which frames each mp4 holds (its sample tables). From those, episode lengths, data file pointers,
`dataset_from/to_index`, video windows (from real packet timestamps), `index`, `frame_index` and
`timestamp` (frame_index / fps), totals and stats (exact, from the rows) are recomputed, names and
codecs written in canonical form, count=0 placeholder stats dropped, stats reshaped to their feature,
list[1] columns flattened, and every file written where the version's templates say. The output is
validated again; what is still wrong is reported as needing a human.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from lerodoc import access, formats
from lerodoc.conventions import WRITES
from lerodoc.budget import give_back
from lerodoc.media import frames
from lerodoc.checks.common import ERROR, Finding
from lerodoc.checks.common import relative as in_dataset
from lerodoc.checks.stats import UNREADABLE
from lerodoc.dataset import Dataset
from lerodoc.formats.model import (Episode, StatsRow, StatsUnreadable, VideoSpan, forget_stats, number_tasks,
                                   stats_clean, stats_named, stats_row, stats_stack, update_stats)
from lerodoc.formats.stats import StatsTable
from lerodoc.errors import LerodocError
from lerodoc.formats.hf import schema_for
from lerodoc.formats.info import CAMERA_NAMES, camera_shape, video_frame
from lerodoc.formats.jsonl import stats_from_json, stats_to_json
from lerodoc.formats.stats import normalise_stats, stat_size
from lerodoc.promote.kept import undeclared_cameras
from lerodoc.ops import rewrite
from lerodoc.ops.validate import validate
from lerodoc.tables.parquet_io import column_matrix, read_parquet
from lerodoc.promote.staging import output_target, staged_output
from lerodoc.ops.stats import StatsStream, dataset_quantiles, exact_stats
from lerodoc.tables.stats import dataset_stats


@dataclass
class RepairReport:
    dataset: str
    output: str | None
    before: dict = field(default_factory=dict)      # code -> count
    after: dict = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)
    remaining: list[dict] = field(default_factory=list)   # findings still present (need a human)
    left_out: list[int] = field(default_factory=list)     # input episodes not in the output (lost files, dropped)
    skipped: list[dict] = field(default_factory=list)     # checks the validation of the input or the output ("of")
                                                          # left out, and why
    seconds: float = 0.0
    plan: dict | None = None      # --dry-run: what a run would write and change

    def to_json(self) -> dict:
        return asdict(self)


def _counts(findings) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in findings:
        out[f.code] = out.get(f.code, 0) + 1
    return out


def locate_rows(ds: Dataset) -> dict[int, tuple[str, int, int]]:
    """episode_index -> (data file, first row, rows), read from the data files themselves."""
    found: dict[int, tuple[str, int, int]] = {}
    for rel in access.files(ds.root, "data", ".parquet"):   # regular files, no link
        path = ds.root / rel
        table = read_parquet(path, ["episode_index"])
        values = column_matrix(table.column(0), table.num_rows)[:, 0]
        if not len(values):
            continue
        starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
        lengths = np.diff(np.r_[starts, len(values)])
        for episode, start, length in zip(values[starts].tolist(), starts.tolist(), lengths.tolist()):
            if episode in found:
                raise LerodocError(f"rows of episode {episode} appear in two places ({found[episode][0]} and "
                                   f"{rel}); which one is right needs a human", file=path, episode=episode)
            found[episode] = (rel, start, length)
    return found


def _find_video(ds: Dataset, relative: str, key: str, loose: list[str]) -> str | None:
    """The file the metadata names, or the one file that is it stored under another folder."""
    if ds.path(relative).is_file():
        return relative
    return formats.find_misplaced(relative, loose, key)


def _windows(ds: Dataset, file: str, lengths: list[int]) -> list[tuple[float, float]] | None:
    """Consecutive windows of `lengths` frames in presentation order, from the file's sample tables (a file they
    do not describe keeps the windows it has)."""
    try:
        index = frames.index(ds.path(file))
    except frames.Unreadable:
        return None
    if not index.from_tables or len(index.pts) != sum(lengths):
        return None
    pts, end = index.ticks, index.ends[index.order]
    tb, bounds = index.time_base, np.cumsum([0] + lengths)
    return [(float(pts[a] * tb), float(end[b - 1] * tb)) for a, b in zip(bounds[:-1], bounds[1:])]


def reconstruct(ds: Dataset, drop_broken: bool = False) -> tuple[list[Episode], list[str], list[Finding]]:
    """Episodes re-derived from the files; what changed, in words; and the episodes left out because a video file
    they read is lost (findings, `_salvage`). An episode without rows is an error unless `drop_broken`, which
    drops it."""
    rows, changes = locate_rows(ds), []
    episodes = []
    for ep in ds.episodes:
        if ep.index not in rows:
            if not drop_broken:
                raise LerodocError("has no rows in any data file (missing or unreadable)", file=ds.path(ep.data_file),
                                   episode=ep.index, hint="restore the file, or pass --drop-broken to drop the episode")
            changes.append(f"episode {ep.index} has no rows in any data file: dropped")
            continue
        file, first, length = rows[ep.index]
        if (file, first, length) != (ep.data_file, ep.data_row, ep.length):
            changes.append(f"episode {ep.index}: rows are in {file} at row {first} ({length} rows); the metadata "
                           f"said {ep.data_file} at row {ep.data_row} ({ep.length} rows)")
        episodes.append(ep.relocated(file, first, length))
    loose = formats.loose_files(ds.root, ".mp4") if ds.info.video_keys else []
    lost: list[tuple[str, str, str, list[int]]] = []      # camera, file, why, episodes: what cannot be fixed
    for key in ds.info.video_keys:
        by_file: dict[str, list[Episode]] = {}
        for ep in episodes:
            by_file.setdefault(ep.videos[key].file, []).append(ep)
        for relative, group in by_file.items():
            found = _find_video(ds, relative, key, loose)
            why = "missing" if found is None else _unreadable(ds.path(found))
            if why:
                lost.append((key, relative, why, [e.index for e in group]))
                continue
            if found != relative:
                changes.append(f"{key}: {found} is read as {relative} (stored under the wrong folder)")
            windows = _windows(ds, found, [e.length for e in group]) if ds.version == "v3.0" else None
            for ep, window in zip(group, windows or [None] * len(group)):
                span = ep.videos[key]
                new = VideoSpan(found, *window) if window else VideoSpan(found, span.from_timestamp, span.to_timestamp)
                if window and not np.allclose(window, (span.from_timestamp, span.to_timestamp), atol=1e-9):
                    changes.append(f"episode {ep.index} {key}: window [{span.from_timestamp:.4f}, "
                                   f"{span.to_timestamp:.4f}) -> [{window[0]:.4f}, {window[1]:.4f}) from the packets")
                ep.videos = {**ep.videos, key: new}   # replaced, never changed in place (the source shares it)
    left_out: list[Finding] = []
    if lost:
        episodes, dropped, left_out = _salvage(ds, episodes, lost, drop_broken)
        changes += dropped
    return episodes, changes, left_out


def _unreadable(path) -> str | None:
    """Why a video file cannot be read (its container does not open or holds no video stream), or None."""
    try:
        frames.probe(path)
    except LerodocError as exc:         # frames.probe names the file and the reason
        return f"unreadable ({exc.message})"
    return None


def _salvage(ds: Dataset, episodes: list[Episode], lost: list[tuple[str, str, str, list[int]]],
             drop_broken: bool) -> tuple[list[Episode], list[str], list[Finding]]:
    """Video files that are missing or unreadable: the episodes reading them are left out of the output, so that it
    loads, and each file is named with its camera and episodes. Without `drop_broken` each lost file is a finding
    that needs a human (exit 1); with it, the episodes are dropped as asked (a change). A camera whose every file is
    gone would leave nothing: --drop-broken drops the camera itself (its feature, as `features --drop` does), and
    without it the error names the one command that salvages the dataset (`_salvage_hint`)."""
    files_of: dict[str, int] = {}
    for key, *_ in lost:
        files_of[key] = files_of.get(key, 0) + 1
    all_files = {key: len({ep.videos[key].file for ep in episodes}) for key in files_of}
    gone = [key for key, n in files_of.items() if n == all_files[key]]
    listed = "; ".join(f"{key}: {file} {why} (episode{'s' if len(eps) > 1 else ''} {', '.join(map(str, eps))})"
                       for key, file, why, eps in lost)
    partial = [entry for entry in lost if entry[0] not in gone]
    broken = {e for *_, eps in (partial if drop_broken else lost) for e in eps}
    kept = [ep for ep in episodes if ep.index not in broken]
    if not kept or gone and not drop_broken:
        first = lost[0]
        raise LerodocError(f"{len(lost)} video file(s) cannot be read, so their episodes cannot be repaired: {listed}",
                           file=ds.path(first[1]), episode=first[3][0], field=first[0],
                           hint=_salvage_hint(ds, gone, partial))
    if drop_broken:
        for ep in kept:
            ep.videos = {key: span for key, span in ep.videos.items() if key not in gone}
        changes = [f"camera {key} dropped (--drop-broken): every one of its {all_files[key]} video files is missing or "
                   "unreadable" for key in gone]
        if broken:
            listed = "; ".join(f"{key}: {file} {why} (episode{'s' if len(eps) > 1 else ''} {', '.join(map(str, eps))})"
                               for key, file, why, eps in partial)
            changes.append(f"episode(s) {', '.join(map(str, sorted(broken)))} dropped (--drop-broken): {listed}")
        return kept, changes, []
    left_out = [Finding("LAY040" if why == "missing" else "VID001", ERROR,
                        f"{file} is {why}: episode{'s' if len(eps) > 1 else ''} {', '.join(map(str, eps))} of the "
                        f"input read {key} from it and were left out of the output",
                        file=file, episode=eps[0], feature=key,
                        hint="restore the file and repair again (a partial download: download again), or pass "
                             "--drop-broken to accept the output without those episodes")
                for key, file, why, eps in lost]
    return kept, [], left_out


def _salvage_hint(ds: Dataset, gone: list[str], partial: list) -> str:
    """The one command that ends a partial download in a dataset: `features --drop` of every camera whose files
    are all gone when nothing else is lost, else repair --drop-broken (which drops those cameras too)."""
    repair_cmd = f"lerodoc repair {ds.root} -o OUT --drop-broken"
    if not gone:
        return "restore the files (a partial download: download again), or " + repair_cmd + " to drop their episodes"
    cameras = ", ".join(gone)
    if partial:
        return (f"{repair_cmd} drops camera(s) {cameras}, whose every file is gone, and the episodes whose other "
                "video files are lost; or restore the files (a partial download: download again)")
    drops = " ".join(f"--drop {key}" for key in gone)
    return (f"lerodoc features {ds.root} -o OUT {drops} removes camera(s) {cameras}, whose every file is gone "
            f"(or {repair_cmd}); or restore the files (a partial download: download again)")


def restore_cameras(ds: Dataset) -> list[str]:
    """Declare in `ds.info` each camera whose videos and episode metadata are there but whose info.json feature is
    gone (LAY044), from its first video file (codec, size, pixel format; fps is the dataset's); the episodes
    then read the camera's windows again. What changed, in words."""
    changes = []
    for key, files in sorted(undeclared_cameras(ds).items()):
        probe = frames.probe(ds.path(files[0]))
        ds.info.features[key] = {
            "dtype": "video", "shape": [probe.height, probe.width, 3], "names": CAMERA_NAMES,
            "info": {"video.height": probe.height, "video.width": probe.width, "video.codec": probe.codec,
                     "video.pix_fmt": probe.pix_fmt, "video.is_depth_map": False, "video.fps": ds.info.fps,
                     "video.channels": 3, "has_audio": False}}
        changes.append(f"{key}: info.json lacked the camera; its feature is restored from {files[0]} "
                       f"({probe.codec}, {probe.width}x{probe.height}, {probe.pix_fmt})")
    if changes:
        ds.episodes = formats.module(ds.version).read(ds.root, ds.info)[0]
    return changes


def _canonical_features(ds: Dataset, episodes: list[Episode]) -> dict:
    """The features as convert writes them (`rewrite.canonical_features`: flat names, canonical codec names, camera
    names [height, width, channels] with the shape put channels last), the camera names it leaves (['h', 'w', 'c'])
    taken as channels last too; and each camera's codec, pixel format and size as its first video file says."""
    out, _ = rewrite.canonical_features(ds.info.features)
    for name, spec in out.items():
        if spec["dtype"] in ("video", "image") and spec.get("names") != CAMERA_NAMES:   # LAY018 names convert leaves
            spec["shape"] = camera_shape(spec.get("names"), spec["shape"], video_frame(spec))
            spec["names"] = list(CAMERA_NAMES)
        if spec["dtype"] == "video" and episodes and name in episodes[0].videos \
                and ds.path(episodes[0].videos[name].file).is_file():
            probe = frames.probe(ds.path(episodes[0].videos[name].file))
            spec["shape"] = [probe.height, probe.width, spec["shape"][2] if len(spec["shape"]) == 3 else 3]
            spec["info"] = {**(spec.get("info") or {}), "video.codec": probe.codec, "video.pix_fmt": probe.pix_fmt,
                            "video.height": probe.height, "video.width": probe.width}
    return out


def _clean_stats(stats: dict, features: dict, sizes: dict | None = None) -> dict:
    """Stats without NaN or values of another size than their feature (a damaged file), reshaped to their feature
    and without count=0 placeholders (normalise_stats); repair recomputes what is dropped. `sizes` keeps each
    (feature, stat)'s `stat_size` from one episode to the next."""
    sizes = {} if sizes is None else sizes

    def fits(name: str, stat: str, value) -> bool:
        want = sizes.get((name, stat), -1)
        if want == -1:
            want = sizes[(name, stat)] = stat_size(features[name], stat)
        return np.size(value) == want if want is not None else np.size(value) > 0
    kept = {name: by_stat for name, by_stat in stats.items()
            if name in features and all(fits(name, stat, v) for stat, v in by_stat.items())
            and np.isfinite(np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in by_stat.values()]
                                           or [np.zeros(0)])).all()}
    return normalise_stats(kept, features)[0]


def _left_out(ds: Dataset, findings: list) -> list[dict]:
    """Data files no episode's metadata names, when info.json counts more episodes than the metadata lists: their
    rows are most likely episodes whose metadata line was lost, and repair (which writes only the episodes the
    metadata lists) left them out. That needs a human: an error in what remains, never a silent drop."""
    if ds.info.total_episodes <= len(ds.episodes):
        return []
    return [{**f.to_json(), "severity": "error", "fixable": False,
             "message": f"{f.file} was left out: info.json counts {ds.info.total_episodes} episodes, the metadata "
                        f"lists {len(ds.episodes)}, and no listed episode's rows are in this file",
             "hint": "restore the lost metadata line(s) and run repair again"}
            for f in findings if f.code in ("LAY042", "LAY043") and (f.file or "").startswith("data/")]


def _retimed_files(retimed: list[dict]) -> list[str]:
    """One line per camera whose clips are re-timed: 'camera (episodes 0, 1, ...)'."""
    by_camera: dict[str, list[int]] = {}
    for clip in retimed:
        by_camera.setdefault(clip["camera"], []).append(clip["episode"])
    return [f"{camera} (episodes {', '.join(map(str, eps))})" for camera, eps in by_camera.items()]


def _retime_changes(retimed: list[dict]) -> list[str]:
    return [f"{files}: packets stream-copied onto the 1/fps frame grid (time base could not place frames within "
            "tolerance_s)" for files in _retimed_files(retimed)]


def _forgetting(root: Path, episodes: list[Episode], work: Callable[[], object]) -> tuple[object, list[str]]:
    """`work()`, where it meets a table of the episodes' stats that cannot be read (`StatsUnreadable`), again with
    that table forgotten (`forget_stats`): its episodes' numeric stats are recomputed from the rows like every
    other's, and what else it held (cameras' stats) is left out. Its result, and a change line per such table."""
    lost = []
    while True:
        try:
            return work(), lost
        except StatsUnreadable as exc:
            if not forget_stats(episodes, exc.file):
                raise
            lost.append(_unreadable_change(in_dataset(root, exc.file), exc.message))


def _clean_episode_stats(episodes: list[Episode], features: dict) -> None:
    """Clean the episodes' stats (`_clean_stats`) where they need it."""
    sizes: dict = {}
    for ep in episodes:
        row = stats_row(ep)
        if row is None or not stats_clean(row, features):   # else nothing to clean
            ep.stats = _clean_stats(ep.stats, features, sizes)


def _unreadable_change(file: str | None, why: str) -> str:
    """The change line of a table of per-episode stats that could not be read (STA003), which repair forgets."""
    return (f"{file}: per-episode stats could not be read ({why}); its episodes' numeric stats are recomputed from "
            "the rows, and their other stats (cameras') are left out (stats.json keeps the dataset's, where it "
            "has them)")


def repair(src: Path, out: Path | None = None, *, in_place: bool = False, workers: int = 1,
           force: bool = False, drop_broken: bool = False, dry_run: bool = False) -> RepairReport:
    """Write a repaired copy of `src` to `out` (or swap it in place), and say what changed and what is left;
    `dry_run` returns the report with the plan (what would change, `rewrite.Plan.to_json`), writing nothing."""
    started = time.perf_counter()
    target = output_target(src, out, in_place, dry_run=dry_run)
    try:   # one open for the validation and the repair (a dataset that does not open: validate says why, then this)
        opened = Dataset.open(src)
    except LerodocError:
        opened = None
    # Without the per-episode stats' agreement with the rows: repair replaces every episode's stats with the exact
    # stats of the rows it writes, and recomputing the input's only to count how they disagree was a third of its
    # time (at 20,000 episodes 0.8 of 2.2 s). stats.json's own checks (NaN, shapes, quantiles) still run; the
    # episodes' placeholders and shapes are what repair cleans (`_clean_stats`).
    before = validate(src, videos=True, dataset=opened, stats=False)
    ds = opened if opened is not None else Dataset.open(src)
    ds.require_columns(files=False)   # missing or misplaced files are what repair looks for
    # Where the input's per-episode stats are all of numeric features (or of features info.json does not declare,
    # which cleaning drops), the output's are all recomputed from its rows: the input's are never read (at a million
    # episodes, reading them to clean them took 4.6 of 70 s)
    named, unread = _forgetting(ds.root, ds.episodes, lambda: stats_named(ds.episodes))
    replaced = not {f for f in named if f in ds.info.features} - set(ds.info.numeric_keys)
    if not replaced:
        ds.weigh_stats()   # past the stats budget, the stats tables are read a file at a time from here on
    report = RepairReport(dataset=str(ds.root), output=None, before=_counts(before.findings))
    report.skipped = [{**s, "of": "input", "why": "repair replaces them with the exact stats of the rows it writes",
                       # an input replaced in place is gone: nothing can run them on it afterwards
                       "run_with": None if in_place else f"lerodoc validate {shlex.quote(str(src))}"}
                      for s in before.skipped]
    restored = restore_cameras(ds)
    episodes, report.changes, lost = reconstruct(ds, drop_broken)
    # tables of per-episode stats validate could not read, and forgot (`checks.run_checks`)
    report.changes[:0] = restored + [_unreadable_change(f.file, f.message.removeprefix(UNREADABLE))
                                     for f in before.findings if f.code == "STA003"] + unread
    kept = {ep.index for ep in episodes}
    report.left_out = [ep.index for ep in ds.episodes if ep.index not in kept]
    if lost and in_place:
        first = lost[0]
        raise LerodocError(f"{len(lost)} video file(s) cannot be read ({'; '.join(f.message for f in lost)}); "
                           "--in-place would replace the input without their episodes", file=ds.path(first.file),
                           episode=first.episode, field=first.feature,
                           hint="restore the files, write the repair to -o OUT, or pass --drop-broken to drop them")
    if not episodes:
        raise LerodocError("no episode has rows in the data files; nothing to repair", file=ds.root)
    numbering: dict[str, int] = {}
    task_map = number_tasks(ds.tasks, numbering)
    tasks = list(numbering)
    if len(tasks) != len(ds.tasks):
        report.changes.append(f"{len(ds.tasks) - len(tasks)} duplicate task texts merged")
    dropped = {key for key in ds.info.video_keys if key not in episodes[0].videos}   # --drop-broken, every file gone
    info = replace(ds.info, features={k: v for k, v in _canonical_features(ds, episodes).items() if k not in dropped},
                   extra=dict(ds.info.extra))
    if replaced:   # every episode a row of a table of no stats (the columns' path, not a dict an episode)
        empty = StatsTable({}, len(episodes))
        for i, ep in enumerate(episodes):
            ep.stats = StatsRow(empty, i)
    else:
        report.changes += _forgetting(ds.root, episodes, lambda: _clean_episode_stats(episodes, info.features))[1]
    picks = [rewrite.Pick(ds, ep, task_map) for ep in episodes]
    schema = schema_for(info.features, info.data_keys, rewrite.target_schema(ds)[0])
    caps = info.whole_file_caps()
    to = WRITES
    plan = rewrite.plan(picks, info, tasks, to, schema, caps_mb=caps, retime=True, workers=workers,
                        stats=not replaced)
    if dry_run:
        report.remaining = [f.to_json() for f in lost]
        report.changes += _retime_changes(plan.retimed)
        report.plan = {**plan.to_json(), "changes": list(report.changes)}
        report.seconds = round(time.perf_counter() - started, 3)
        return report
    left_out = _left_out(ds, before.findings)
    stated = stats_from_json(stats_to_json(_clean_stats(ds.stats or {}, info.features)))   # as stats.json holds
    # the input's own episodes (0.6 GB a million) let go before the rewrite: the plan reads their repaired copies,
    # and of the input itself only its files and info (`rewrite.execute`, the output's kept check)
    ds.episodes = ds.episodes[:1]
    # the output's kept check reads of a v3.0 input its info, first data file and episodes files' columns: this open,
    # trimmed as `kept.trim_to_held` trims (a million episodes opened again took 2.7 s); a v2.x one's per-episode
    # stats name its cameras, so that one is opened again whole
    kept = ds if ds.version == "v3.0" else src
    with staged_output(target, force=force or in_place, inputs=() if in_place else (src,), keep=(kept,), own=in_place,
                       dropped=dropped,
                       seen=ds.meta_seen if in_place else None) as tmp:
        # past the stats budget the blocks' updates are left to the numeric features' exact stats below (they
        # replace them), and the episodes keep their sources' rows for the others (cameras)
        result = rewrite.execute(plan, tmp, workers=workers, stream=to == "v3.0")
        report.changes += _retime_changes(result.retimed)
        # the repaired copies and the plan (a million each: gigabytes) let go once executed
        ds = opened = episodes = picks = plan = None
        give_back()
        # the written rows' exact stats, before any metadata is written: the episodes metadata is written once
        staged = Dataset(root=tmp, version=to, info=info, episodes=result.episodes, tasks=tasks)
        # streamed where the rewrite streamed (its sources past the stats budget), and where every stat is replaced
        # (the sources' tables unread, so unweighed): StatsStream.of streams values past its own budget
        stream = StatsStream.of(staged, info.numeric_keys, workers=workers) \
            if result.stream is not None or replaced else None
        if stream is None:
            numeric, per_episode, _ = exact_stats(staged, info.numeric_keys, workers=workers)
            update_stats(result.episodes, per_episode)
            del per_episode   # the episodes' new table holds what is kept of it (let go once written: rewrite.verify)
            carried = {**dataset_stats(stats_stack(result.episodes)), **stated}   # stated ones win
            formats.module(to).write_meta(tmp, info, result.episodes, tasks, {**carried, **numeric})
        else:   # each data file's episodes' exact stats, into the episodes files as they come
            quantiles, _ = dataset_quantiles([Path(f) for f, _ in stream.files], info.numeric_keys, info.features,
                                             staged.total_frames, workers=workers)

            def finish() -> dict:
                every = dataset_stats(stream.basic(), quantiles)
                numeric = {key: every[key] for key in info.numeric_keys if key in every}
                return {**{**every, **stated}, **numeric}
            formats.module(to).write_meta(tmp, info, result.episodes, tasks, finish, stream=stream)
        expected = rewrite.planned(result.episodes)
        result = staged = stream = None   # the new episodes let go before verify's open and the output's validate
        give_back()
        rewrite.verify(tmp, to, expected)
    expected = None
    give_back()
    # The output's per-episode stats were just computed from its written rows, which that refuses when they hold
    # NaN or inf: recomputing them again would hold them to themselves (at a million episodes, validate took 45.96 s
    # with them, 7.83 s without).
    after = validate(target, videos=True, stats=False)
    report.output = str(target.absolute())
    report.after = _counts(after.findings)
    report.skipped += [{**s, "of": "output", "why": "repair computed them from the rows it wrote",
                        "run_with": f"lerodoc validate {shlex.quote(str(target))}"} for s in after.skipped]
    report.remaining = [f.to_json() for f in lost + after.findings] + left_out
    report.seconds = round(time.perf_counter() - started, 3)
    return report
