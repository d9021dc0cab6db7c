"""Convert a dataset between LeRobot versions: v2.0/v2.1 -> v3.0, v3.0 -> v2.1, v2.0 -> v2.1.

Rows are copied (re-typed to one schema, `episode_index`/`index` rewritten only when episodes were
not numbered 0..N-1); videos are joined or cut by stream copy, with windows read back from the
written files. Every episode's rows and video packets are checksummed on both sides.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from lerodoc import formats, video
from lerodoc.dataset import Dataset, Episode, VideoSpan
from lerodoc.errors import LerodocError, VerificationError
from lerodoc.formats import v21, v30
from lerodoc.parallel import pmap
from lerodoc.parquet_io import column_digests, read_parquet, set_episode_columns
from lerodoc.staging import staged_output
from lerodoc.stats import aggregate, column_stats, merge_dataset_stats

TARGETS = ("v2.1", "v3.0")
MB = 1 << 20
PER_JOB = 16   # v3.0 -> v2.1: episode clips cut per worker task


@dataclass(frozen=True)
class RowPiece:
    """One episode's rows: where they are read and where they go."""
    src_file: str
    src_row: int
    length: int
    out_file: str
    episode: int
    from_index: int
    source_episode: int


@dataclass(frozen=True)
class VideoJob:
    """Episode clips of one camera, to be written as v3.0 files (joined up to a size cap) or one per episode.

    For v3.0, `out_files` is empty: the worker names files chunk/file in order, starting a new file past
    `cap_bytes` or where a clip's stream parameters differ from the file's, since those cannot be joined.
    """
    key: str
    episodes: tuple[int, ...]
    clips: tuple[video.Clip, ...]
    sizes: tuple[int, ...] = ()
    out_files: tuple[str, ...] = ()
    out_root: str = ""
    cap_bytes: float = 0
    chunks_size: int = 1000


@dataclass
class ConvertReport:
    source: str
    output: str
    from_version: str
    to_version: str
    episodes: int
    frames: int
    data_files: int
    video_files: int
    bytes_in: int
    bytes_out: int
    seconds: float = 0.0
    renumbered_episodes: list[int] = field(default_factory=list)
    reencoded_clips: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _target_schema(ds: Dataset) -> pa.Schema:
    """The schema every output file gets: the first data file's, with its `datasets` metadata."""
    path = ds.path(ds.episodes[0].data_file)
    try:
        return pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise LerodocError(f"cannot read parquet ({exc})", file=path, episode=ds.episodes[0].index) from None


def write_rows(args: tuple[list[RowPiece], pa.Schema, bool]) -> list[dict]:
    """Worker: copy pieces into their output files (one row group per episode), then read them back."""
    pieces, schema, want_stats = args
    results, cache, writers = [], {}, {}
    try:
        for piece in pieces:
            if piece.src_file not in cache:
                cache.clear()
                cache[piece.src_file] = read_parquet(piece.src_file, episode=piece.source_episode)
            table = cache[piece.src_file]
            if piece.src_row + piece.length > table.num_rows:
                raise LerodocError(f"holds {table.num_rows} rows, but episode needs rows "
                                   f"{piece.src_row}..{piece.src_row + piece.length - 1}",
                                   file=piece.src_file, episode=piece.source_episode)
            rows = _cast(table.slice(piece.src_row, piece.length), schema, piece)
            moved = (piece.episode, piece.from_index) != _first_ids(rows)
            out = set_episode_columns(rows, piece.episode, piece.from_index) if moved else rows
            if piece.out_file not in writers:
                Path(piece.out_file).parent.mkdir(parents=True, exist_ok=True)
                writers[piece.out_file] = pq.ParquetWriter(piece.out_file, schema)
            writers[piece.out_file].write_table(out, row_group_size=max(piece.length, 1))
            results.append({"episode": piece.episode, "moved": moved, "digests": column_digests(rows),
                            "stats": _numeric_stats(rows, schema) if want_stats else None})
    finally:
        for writer in writers.values():
            writer.close()
    _check_written(pieces, results)
    return results


def _first_ids(rows: pa.Table) -> tuple[int | None, int | None]:
    def first(name):
        return rows.column(name)[0].as_py() if name in rows.column_names and rows.num_rows else None
    return first("episode_index"), first("index")


def _cast(rows: pa.Table, schema: pa.Schema, piece: RowPiece) -> pa.Table:
    if rows.schema.equals(schema, check_metadata=False):
        return rows.replace_schema_metadata(schema.metadata)
    if set(rows.column_names) != set(schema.names):
        missing = set(schema.names) ^ set(rows.column_names)
        raise LerodocError(f"columns differ from the first data file: {sorted(missing)}",
                           file=piece.src_file, episode=piece.source_episode, field=sorted(missing)[0])
    try:
        return rows.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise LerodocError(f"cannot be cast to the first data file's schema ({exc})",
                           file=piece.src_file, episode=piece.source_episode) from None


def _numeric_stats(rows: pa.Table, schema: pa.Schema) -> dict:
    stats = {}
    for name in rows.column_names:
        kind = schema.field(name).type
        if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind):
            kind = kind.value_type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
            column = rows.column(name).combine_chunks()
            values = (column.flatten().to_numpy(zero_copy_only=False).reshape(rows.num_rows, -1)
                      if column.type != kind else column.to_numpy(zero_copy_only=False))
            stats[name] = column_stats(values.astype("float64"))
    return stats


def _check_written(pieces: list[RowPiece], results: list[dict]) -> None:
    """Re-read every written file and compare each episode's column digests with the source's."""
    by_file: dict[str, list[tuple[RowPiece, dict]]] = {}
    for piece, result in zip(pieces, results):
        by_file.setdefault(piece.out_file, []).append((piece, result))
    for out_file, entries in by_file.items():
        table = read_parquet(out_file)
        offset = 0
        for piece, result in entries:
            written = column_digests(table.slice(offset, piece.length))
            offset += piece.length
            changed = {"episode_index", "index"} if result["moved"] else set()
            bad = [c for c, d in result["digests"].items() if c not in changed and written.get(c) != d]
            if bad:
                raise VerificationError(f"written values differ from the source in {bad}",
                                        file=out_file, episode=piece.episode)
        if offset != table.num_rows:
            raise VerificationError(f"holds {table.num_rows} rows, expected {offset}", file=out_file)


def write_videos(args: tuple[VideoJob, int]) -> list[tuple[str, video.Written]]:
    """Worker: write a job's clips; returns (file written, where the clip landed) per episode."""
    job, fps = args
    if job.out_files:
        placed = []
        for out_file, clip, episode in zip(job.out_files, job.clips, job.episodes):
            Path(out_file).parent.mkdir(parents=True, exist_ok=True)
            placed.append((out_file, video.cut(clip, Path(out_file), fps, episode)))
        return placed
    signatures = [video.signature(c.path, e) for c, e in zip(job.clips, job.episodes)]
    groups, chunk, file, placed = [], 0, 0, []
    for group in _group_by_size(list(job.sizes), job.cap_bytes):
        current = [group[0]]
        for i in group[1:]:     # split further where the stream parameters change
            if signatures[i] != signatures[current[-1]]:
                groups.append(current)
                current = []
            current.append(i)
        groups.append(current)
    for group in groups:
        out_file = str(Path(job.out_root) / v30.video_file(job.key, chunk, file))
        Path(out_file).parent.mkdir(parents=True, exist_ok=True)
        written = video.concat([job.clips[i] for i in group], Path(out_file), fps,
                               [job.episodes[i] for i in group])
        placed += [(out_file, w) for w in written]
        chunk, file = v30.next_file(chunk, file, job.chunks_size)
    return placed


def _group_by_size(sizes: list[int], cap: int) -> list[list[int]]:
    """Consecutive groups of item positions whose sizes sum to at most `cap` (one item may exceed it)."""
    groups, current, total = [], [], 0
    for i, size in enumerate(sizes):
        if current and total + size > cap:
            groups.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        groups.append(current)
    return groups


def _clip_of(ds: Dataset, ep: Episode, key: str) -> video.Clip:
    span = ep.videos[key]
    path = ds.path(span.file)
    if ds.version == "v3.0":
        return video.Clip(path, span.from_timestamp, span.to_timestamp)
    return video.Clip(path)


def _clip_bytes(ds: Dataset, ep: Episode, key: str) -> int:
    path = ds.path(ep.videos[key].file)
    size = path.stat().st_size if path.exists() else 0
    if ds.version != "v3.0":
        return size
    span = ep.videos[key]
    total = sum(e.length for e in ds.episodes if e.videos[key].file == span.file)
    return size * ep.length // max(total, 1)


def plan(ds: Dataset, to: str, out: Path, caps_mb: tuple[float, float]
         ) -> tuple[list[Episode], list[list[RowPiece]], list[VideoJob]]:
    """New episodes (numbered 0..N-1), row jobs and video jobs for writing `ds` as `to` under `out`.

    `caps_mb` are the v3.0 data and video file size caps in MB.
    """
    info = ds.info
    new_eps, cursor = [], 0
    for number, ep in enumerate(ds.episodes):
        new_eps.append(Episode(index=number, length=ep.length, tasks=list(ep.tasks), data_file="",
                               data_row=0, from_index=cursor, stats=ep.stats))
        cursor += ep.length
    if to == "v3.0":
        data_sizes = [ds.path(ep.data_file).stat().st_size * ep.length //
                      max(sum(e.length for e in ds.episodes if e.data_file == ep.data_file), 1)
                      for ep in ds.episodes]
        groups = _group_by_size(data_sizes, caps_mb[0] * MB)
        chunk, file = 0, 0
        for group in groups:
            for i in group:
                new_eps[i].data_file = v30.data_file(chunk, file)
            chunk, file = v30.next_file(chunk, file, info.chunks_size)
    else:
        for ep in new_eps:
            ep.data_file = v21.DATA_PATH.format(episode_chunk=ep.index // info.chunks_size, episode_index=ep.index)
    for old, new in zip(ds.episodes, new_eps):
        new.data_row = new.from_index - min(e.from_index for e in new_eps if e.data_file == new.data_file)
    pieces = [RowPiece(str(ds.path(old.data_file)), old.data_row, old.length, str(out / new.data_file),
                       new.index, new.from_index, old.index) for old, new in zip(ds.episodes, new_eps)]
    # v2.1 -> v3.0: one job per output file; v3.0 -> v2.1: one job per source file (read once).
    key_of = (lambda p: p.out_file) if to == "v3.0" else (lambda p: p.src_file)
    row_jobs: dict[str, list[RowPiece]] = {}
    for piece in pieces:
        row_jobs.setdefault(key_of(piece), []).append(piece)

    video_jobs = []
    for key in info.video_keys:
        clips = tuple(_clip_of(ds, ep, key) for ep in ds.episodes)
        numbers = tuple(ep.index for ep in new_eps)
        if to == "v3.0":
            video_jobs.append(VideoJob(key, numbers, clips, tuple(_clip_bytes(ds, ep, key) for ep in ds.episodes),
                                       out_root=str(out), cap_bytes=caps_mb[1] * MB, chunks_size=info.chunks_size))
        else:
            files = tuple(str(out / v21.VIDEO_PATH.format(episode_chunk=n // info.chunks_size, video_key=key,
                                                           episode_index=n)) for n in numbers)
            video_jobs.extend(VideoJob(key, numbers[i:i + PER_JOB], clips[i:i + PER_JOB],
                                       out_files=files[i:i + PER_JOB]) for i in range(0, len(numbers), PER_JOB))
    return new_eps, list(row_jobs.values()), video_jobs


def _preflight(ds: Dataset, to: str) -> None:
    if to not in TARGETS:
        raise LerodocError(f"cannot write {to}; lerodoc writes {', '.join(TARGETS)}")
    if ds.version == to:
        raise LerodocError(f"dataset is already {to}; nothing to convert", file=ds.root / formats.INFO_PATH)
    if not ds.episodes:
        raise LerodocError("dataset has no episodes", file=ds.root / formats.INFO_PATH)
    for ep in ds.episodes:
        for rel in [ep.data_file] + [span.file for span in ep.videos.values()]:
            if not ds.path(rel).is_file():
                raise LerodocError("file is missing", file=ds.path(rel), episode=ep.index)


def convert(src: Path, out: Path, *, to: str | None = None, workers: int = 1, force: bool = False,
            data_file_size_mb: int | None = None, video_file_size_mb: int | None = None,
            progress: Callable[[str, int], Callable[[int], None]] | None = None) -> ConvertReport:
    """Convert the dataset at `src` to version `to` (v3.0, or v2.1 for a v3.0 input) into `out`."""
    started = time.perf_counter()
    ds = Dataset.open(src)
    to = to or ("v2.1" if ds.version == "v3.0" else "v3.0")
    _preflight(ds, to)
    caps = (data_file_size_mb or ds.info.data_files_size_in_mb, video_file_size_mb or ds.info.video_files_size_in_mb)
    ds.info.data_files_size_in_mb, ds.info.video_files_size_in_mb = (max(1, math.ceil(c)) for c in caps)
    out = Path(out).absolute()
    report = ConvertReport(source=str(src), output=str(out), from_version=ds.version, to_version=to,
                           episodes=len(ds.episodes), frames=ds.total_frames, data_files=0, video_files=0,
                           bytes_in=_tree_size(ds.root), bytes_out=0)
    with staged_output(out, force=force) as tmp:
        new_eps, row_jobs, video_jobs = plan(ds, to, tmp, caps)
        schema = _target_schema(ds)
        want_stats = not any(ep.stats for ep in ds.episodes)
        tick = progress("rows", len(row_jobs)) if progress else None
        row_results = [r for job in pmap(write_rows, [(job, schema, want_stats) for job in row_jobs],
                                         workers=workers, progress=tick) for r in job]
        by_episode = {r["episode"]: r for r in row_results}
        for ep in new_eps:
            if by_episode[ep.index]["moved"]:
                report.renumbered_episodes.append(ep.index)
            if want_stats:
                ep.stats = by_episode[ep.index]["stats"]
        if want_stats:
            report.warnings.append("source had no per-episode stats: computed them from the parquet "
                                   "for numeric features (camera stats need decoding and were not computed)")
        tick = progress("videos", len(video_jobs)) if progress else None
        written = pmap(write_videos, [(job, ds.info.fps) for job in video_jobs], workers=workers, progress=tick)
        for job, placed in zip(video_jobs, written):
            for number, (out_file, result) in zip(job.episodes, placed):
                ep = new_eps[number]
                ep.videos[job.key] = VideoSpan(str(Path(out_file).relative_to(tmp)),
                                               result.from_timestamp, result.to_timestamp)
                if result.frames != ep.length:
                    raise LerodocError(f"video holds {result.frames} frames for {ep.length} rows, so frames "
                                       "and rows would be misaligned", file=ds.path(ds.episodes[number].videos[
                                           job.key].file), episode=number, field=job.key,
                                       hint="lerodoc validate --videos names the cause")
                if result.reencoded:
                    report.reencoded_clips.append({"episode": number, "camera": job.key})
        for ep in new_eps:
            ep.videos = {key: ep.videos[key] for key in ds.info.video_keys}
        stats = merge_dataset_stats(aggregate([ep.stats for ep in new_eps]), ds.stats) if to == "v3.0" else None
        formats.module(to).write_meta(tmp, ds.info, new_eps, ds.tasks, stats)
        _verify(tmp, to, new_eps)
        report.data_files = len({ep.data_file for ep in new_eps})
        report.video_files = len({span.file for ep in new_eps for span in ep.videos.values()})
        report.bytes_out = _tree_size(tmp)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _verify(root: Path, to: str, expected: list[Episode]) -> None:
    """The written tree opens as `to` and holds exactly the planned episodes and frames."""
    written = Dataset.open(root)
    got = [(e.index, e.length, e.data_file, e.from_index) for e in written.episodes]
    want = [(e.index, e.length, e.data_file, e.from_index) for e in expected]
    if written.version != to or got != want:
        raise VerificationError("written metadata does not describe the planned episodes", file=root)


def _tree_size(root: Path) -> int:
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())
