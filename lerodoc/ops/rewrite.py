"""Write a new dataset from episodes picked out of one or more source datasets.

The shared engine of `convert` and `merge`: rows are copied (re-typed to one schema; `episode_index`,
`index` and `task_index` rewritten only where the numbering changed), videos are joined or cut by
stream copy with windows read back from the written files, and every episode's column checksums are
compared between source and re-read output.
"""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lerodoc import access
from lerodoc.dataset import Dataset, read_rows
from lerodoc.errors import LerodocError, VerificationError
from lerodoc.files import new_file
from lerodoc.formats import v21, v30
from lerodoc.formats.hf import storage_schema
from lerodoc.formats.info import Info
from lerodoc.formats.model import (Episode, GatherStream, VideoSpan, episode_column, let_go_stats, require_task_rows,
                                   shared_stats, stats_held, stats_holders, update_stats)
from lerodoc.formats.paths import inside
from lerodoc.run.parallel import pmap
from lerodoc.tables.parquet_io import (RowGroups, column_digests, column_matrix, conform, from_numpy, is_list_type,
                                       iter_batches, numpy_dtype, open_parquet, read_parquet, read_schema)
from lerodoc.formats.info import (CAMERA_NAMES, camera_shape, canonical_feature, channels_last, unreadable_names,
                                  video_frame)
from lerodoc.promote.links import link_or_copy
from lerodoc.promote import kept, staging
from lerodoc.tables.stats import EpisodeStacks, table_stacks

if TYPE_CHECKING:   # lerodoc.media.video (PyAV) is imported where clips are handled: no rewrite without videos loads it
    from lerodoc.media import video

TARGETS = ("v2.1", "v3.0")
MB = 1 << 20
PER_JOB = 16   # -> v2.1: episode clips cut per worker task
# -> v2.1: the episodes x columns from which the episodes of fewer source files than workers are split over the
# workers (each output file costs about a millisecond for 10 columns, 29 ms for 307, against half a second to start
# a pool on two cores)
SPLIT_CELLS = 20_000
Progress = Callable[[str, int], Callable[[int], None]]


@dataclass(frozen=True, slots=True)   # one an episode: no per-object attribute space (48 bytes each)
class Pick:
    """One source episode going into the output; `task_map[old task_index]` is its new task_index."""
    dataset: Dataset
    episode: Episode
    task_map: tuple[int, ...] | None = None


class RowPiece(NamedTuple):
    """One episode's rows: where they are read, where they go, and their new numbering. A tuple: made one an
    episode and pickled to the workers: a job of 77,385 pieces (a million episodes' 13th) was pickled in 0.55 s
    and unpickled in 0.87 s as a slotted dataclass, in 0.30-0.37 s and 0.05 s as a tuple."""
    src_file: str
    src_row: int
    length: int
    out_file: str
    episode: int
    from_index: int
    source_episode: int
    task_map: tuple[int, ...] | None
    all_stats: bool          # the source has no per-episode stats: compute them all
    retime_fps: int | None = None   # also rewrite frame_index as 0..n-1 and timestamp as frame_index / fps
    link: bool = False              # the whole source file is reused as it is (hard link)


class RowJob(Sequence):
    """One row job's pieces (a v3.0 output file's, or a v2.1 source file's), each made when it is asked for (read
    in order, or the whole job pickled for a worker process, which receives a tuple of `RowPiece`s) from the pick
    and new episode it copies: three references an episode where a `RowPiece` held is 128 bytes (a million pieces
    beside the plan's picks and new episodes were a quarter of a gigabyte)."""

    def __init__(self, picks: tuple[Pick, ...], new: tuple[Episode, ...], sources: tuple, all_stats: np.ndarray,
                 link: np.ndarray, retime_fps: int | None, nbytes: int | None = None):
        self.picks, self.new, self.sources = picks, new, sources
        self.all_stats, self.link, self.retime_fps = all_stats, link, retime_fps
        self.nbytes = nbytes   # the on-disk bytes of the source rows it copies (None: not known)

    def __len__(self) -> int:
        return len(self.new)

    def _piece(self, src, pick: Pick, new: Episode, all_stats: bool, link: bool) -> RowPiece:
        ep = pick.episode
        return RowPiece(src, ep.data_row, ep.length, new.data_file, new.index, new.from_index, ep.index,
                        pick.task_map, all_stats, self.retime_fps, link)

    def __getitem__(self, i: int) -> RowPiece:
        return self._piece(self.sources[i], self.picks[i], self.new[i], bool(self.all_stats[i]), bool(self.link[i]))

    def __iter__(self) -> Iterator[RowPiece]:   # the flags as Python bools at once, not a numpy scalar a piece
        return map(self._piece, self.sources, self.picks, self.new, self.all_stats.tolist(), self.link.tolist())

    @property
    def out_files(self) -> list[str]:
        """The job's output files, in the order its pieces reach them."""
        return list(dict.fromkeys(new.data_file for new in self.new))

    def __reduce__(self):
        """Pickled as columns, which `_pieces` makes into the tuple of `RowPiece`s a worker receives: a million
        episodes' 13 jobs pickled as tuples held the parent's GIL for 2.7-2.8 s (0.7 s as columns) while the workers
        waited for them. Sources, task maps and output names are one object a file (or source), pickled once each,
        shared again after."""
        eps = [pick.episode for pick in self.picks]
        shared, codes = [], []
        for values in (self.sources, [pick.task_map for pick in self.picks], [new.data_file for new in self.new]):
            at: dict[int, int] = {}
            codes.append(np.array([at.setdefault(id(v), len(at)) for v in values], dtype=np.int32))
            shared.append(list({id(v): v for v in values}.values()))   # in first-seen order, as `at` numbers them

        def ints(values) -> np.ndarray:
            return np.fromiter(values, dtype=np.int64, count=len(eps))
        numbers = (ints(e.data_row for e in eps), ints(e.length for e in eps), ints(new.index for new in self.new),
                   ints(new.from_index for new in self.new), ints(e.index for e in eps))
        return _pieces, (tuple(shared), tuple(codes), numbers, self.all_stats, self.link, self.retime_fps)


def _pieces(shared: tuple, codes: tuple, numbers: tuple, all_stats: np.ndarray, link: np.ndarray,
            retime_fps: int | None) -> tuple[RowPiece, ...]:
    """The `RowPiece`s of a `RowJob` pickled as columns (`RowJob.__reduce__`)."""
    sources, task_maps, outs = ([values[c] for c in code.tolist()] for values, code in zip(shared, codes))
    src_row, length, episode, from_index, source_episode = (column.tolist() for column in numbers)
    return tuple(map(RowPiece._make, zip(sources, src_row, length, outs, episode, from_index, source_episode,
                                         task_maps, np.asarray(all_stats, dtype=bool).tolist(),
                                         [retime_fps] * len(length), np.asarray(link, dtype=bool).tolist())))


@dataclass(frozen=True)
class VideoJob:
    """Episode clips of one camera, to be written as v3.0 files under `out_root` by one worker, which plans
    them as `video_files` does (for clips that exist only once the job runs, such as `encode`'s)."""
    key: str
    episodes: tuple[int, ...]
    clips: tuple[video.Clip, ...]
    sizes: tuple[int, ...] = ()
    out_root: str = ""
    cap_bytes: float = 0
    chunks_size: int = 1000
    whole_files: tuple[tuple[int, int], ...] = ()   # [start, stop) clip runs that are one whole source file


@dataclass(frozen=True)
class BlockStats:
    """A block's per-piece stats, stacked (feature -> stat -> (pieces, ...)): every numeric column where `every`
    (the piece's source has no per-episode stats), else only the `changed` columns."""
    stacks: dict[str, dict[str, np.ndarray]]
    every: np.ndarray
    changed: tuple[str, ...]

    def updates(self) -> list[tuple[np.ndarray, dict[str, dict[str, np.ndarray]]]]:
        """(rows of the block, their stacks) per kind of piece: the pieces that take every column, then the others
        (their changed columns), each left out when it has no row or no column."""
        out = []
        for rows, names in ((np.flatnonzero(self.every), list(self.stacks)),
                            (np.flatnonzero(~self.every), list(self.changed))):
            if rows.size and names:
                whole = rows.size == self.every.size
                out.append((rows, {f: (self.stacks[f] if whole else {k: v[rows] for k, v in self.stacks[f].items()})
                                   for f in names}))
        return out


@dataclass(frozen=True)
class BlockResult:
    """What `write_rows` sends back for a block: its new episode numbers, the columns its renumbering changed and
    its pieces' stats (None for a reused whole file: its episodes keep theirs)."""
    episodes: np.ndarray
    changed: tuple[str, ...]
    stats: BlockStats | None


@dataclass
class Result:
    episodes: list[Episode]
    renumbered: list[int] = field(default_factory=list)        # episodes whose rows got new ids
    retimed: list[dict] = field(default_factory=list)          # {"episode", "camera"} moved onto the k/fps grid
    computed_stats: list[int] = field(default_factory=list)    # episodes whose stats were computed from rows
    stream: GatherStream | None = None   # `execute(stream=True)`: the stats for the v3.0 writer, not yet gathered


def _blocks(pieces: list[RowPiece]) -> list[list[RowPiece]]:
    """Runs of pieces that read consecutive rows of one source file into consecutive rows of one output."""
    blocks: list[list[RowPiece]] = []
    for piece in pieces:
        last = blocks[-1][-1] if blocks else None
        if last and (last.src_file, last.out_file, last.task_map, last.retime_fps, last.link) == \
                (piece.src_file, piece.out_file, piece.task_map, piece.retime_fps, piece.link) \
                and last.src_row + last.length == piece.src_row and last.from_index + last.length == piece.from_index:
            blocks[-1].append(piece)
        else:
            blocks.append([piece])
    return blocks


def renumber(rows: pa.Table, block: list[RowPiece]) -> tuple[pa.Table, set[str]]:
    """Set the block's new `episode_index`, `index`, mapped `task_index` (and, when retiming, `frame_index`
    and `timestamp`); return the columns whose values changed."""
    n, first = rows.num_rows, block[0]
    episodes = np.full(n, first.episode, dtype=np.int64) if len(block) == 1 else \
        np.repeat([p.episode for p in block], [p.length for p in block]).astype(np.int64)
    wanted = {"episode_index": episodes, "index": np.arange(first.from_index, first.from_index + n, dtype=np.int64)}
    if first.retime_fps:
        frames = np.concatenate([np.arange(p.length) for p in block]).astype(np.int64)
        wanted["frame_index"] = frames
        if "timestamp" in rows.column_names:
            kind = numpy_dtype(rows.schema.field("timestamp").type)
            wanted["timestamp"] = (frames / first.retime_fps).astype(kind)
    if first.task_map is not None and "task_index" in rows.column_names:
        old = column_matrix(rows.column("task_index"), n)[:, 0]
        require_task_rows(old, len(first.task_map), file=first.src_file, episode=first.source_episode)
        if first.task_map != tuple(range(len(first.task_map))):   # the identity map changes nothing
            wanted["task_index"] = np.asarray(first.task_map, dtype=np.int64)[old]
    changed = set()
    for name, values in wanted.items():
        if name in rows.column_names and not _holds(rows.column(name), values, n):
            field_ = rows.schema.field(name)
            rows = rows.set_column(rows.column_names.index(name), field_, from_numpy(values, field_.type))
            changed.add(name)
    return rows, changed


def _holds(column: pa.ChunkedArray, values: np.ndarray, n: int) -> bool:
    """Whether a column holds `values`, one per row: compared in Arrow for a column of numbers without nulls (most
    of them), else row by row as a matrix."""
    if numpy_dtype(column.type) is not None and not column.null_count:
        return column.equals(pa.chunked_array([from_numpy(values, column.type)]))
    return np.array_equal(column_matrix(column, n)[:, 0], values)


CHECK_BYTES = 16 << 20   # planned rows digested together: per-episode overhead vanishes, memory stays small


def write_rows(args: tuple[list[RowPiece], pa.Schema, dict[str, str]]) -> list[BlockResult]:
    """Worker: copy pieces into their output files (row groups by bytes: `parquet_io.RowGroups`), then read them
    back. Returns one `BlockResult` per block: what comes back to the parent is a few arrays per block, whatever its
    episode count (pickling a dict of small arrays per episode cost more than the copy itself).

    Consecutive pieces are handled as one block: one cast, one renumbering, one stats pass. Blocks are digested in
    runs of about CHECK_BYTES (one digest per column per run, whatever the episode count) for the read-back check.
    A job's pieces reach each output file in one run, so one output file is open at a time. `outputs` gives each
    piece's `out_file` (its name in the plan) the path it is written at.
    """
    pieces, schema, outputs = args
    results, runs, cache = [], {}, {}
    pending: list[tuple[list[RowPiece], pa.Table]] = []     # planned blocks of one file, not yet digested
    held = 0
    written: set[str] = set()
    current: tuple[str, ExitStack, RowGroups] | None = None

    def digest_pending() -> None:
        if pending:
            runs.setdefault(outputs[pending[0][0][0].out_file], []).append(
                ([block for block, _ in pending], sum(out.num_rows for _, out in pending),
                 column_digests(pa.concat_tables([out for _, out in pending]))))
            pending.clear()

    def finish() -> None:   # the open output's last rows written, the file closed and renamed into place
        if current is not None:
            current[2].close()
            current[1].close()
    with ExitStack() as files:   # each output a new file, renamed into place when written (`files.new_file`)
        for block in _blocks(pieces):
            first = block[0]
            if first.link:     # an unchanged whole file: the same bytes, so nothing to check either
                _reuse(first.src_file, Path(outputs[first.out_file]))
                results.append(BlockResult(np.array([p.episode for p in block], dtype=np.int64), (), None))
                continue
            out, changed = _planned(block, schema, cache)
            if pending and (pending[0][0][0].out_file != first.out_file or held >= CHECK_BYTES):
                digest_pending()
                held = 0
            pending.append((block, out))
            held += out.nbytes
            if current is None or current[0] != first.out_file:
                finish()
                if first.out_file in written:
                    raise LerodocError("an output file's rows come in two runs (a bug in the plan)",
                                       file=outputs[first.out_file], episode=first.episode)
                written.add(first.out_file)
                stack = files.enter_context(ExitStack())
                tmp = stack.enter_context(new_file(outputs[first.out_file]))
                current = (first.out_file, stack,
                           RowGroups(stack.enter_context(pq.ParquetWriter(tmp, schema, use_dictionary=False))))
            current[2].write(out)
            results.append(BlockResult(np.array([p.episode for p in block], dtype=np.int64), tuple(sorted(changed)),
                                       _block_stats(out, block, changed, schema)))
        finish()
        digest_pending()
    _check_written(runs, schema)
    return results


def _planned(block: list[RowPiece], schema: pa.Schema, cache: dict) -> tuple[pa.Table, set[str]]:
    """A block's rows as they are written (cast to `schema`, renumbered) and the columns the renumbering
    changed; `cache` holds the last source file read."""
    first, n = block[0], sum(p.length for p in block)
    if access.is_remote(first.src_file):   # a hub file: only the row groups that hold the block's rows are fetched
        return renumber(_cast(read_rows(first.src_file, first.src_row, n, episode=first.source_episode), schema,
                              first), block)
    if first.src_file not in cache:
        cache.clear()
        cache[first.src_file] = read_parquet(first.src_file, episode=first.source_episode)
    table = cache[first.src_file]
    if first.src_row + n > table.num_rows:
        raise LerodocError(f"holds {table.num_rows} rows, but the episodes need rows "
                           f"{first.src_row}..{first.src_row + n - 1}",
                           file=first.src_file, episode=block[-1].source_episode)
    return renumber(_cast(table.slice(first.src_row, n), schema, first), block)


def _source(path) -> str | access.HubPath:
    """A source file as a row piece names it: a local path as text, a hub file's path as it is (it carries its
    store)."""
    return path if access.is_remote(path) else str(path)


def _reuse(src, out: Path) -> None:
    """A whole source file as an output file: by hard link (a copy across file systems), or, for a hub file, fetched
    whole (`access.copy_file`)."""
    if access.is_remote(src):
        access.copy_file(src, out)
    else:
        link_or_copy(Path(src), out)


def _cast(rows: pa.Table, schema: pa.Schema, piece: RowPiece) -> pa.Table:
    """The rows in the target schema (`parquet_io.conform`), errors naming the piece's file and episode."""
    try:
        return conform(rows, schema)
    except LerodocError as exc:
        raise LerodocError(exc.message, file=piece.src_file, episode=piece.source_episode, field=exc.field) from None


def _block_stats(rows: pa.Table, block: list[RowPiece], changed: set[str], schema: pa.Schema) -> BlockStats:
    """The stats of a block's pieces, stacked: those of every numeric column for the pieces whose source has no
    per-episode stats, else of the columns the renumbering `changed`; every piece of the block at once
    (`tables.stats.table_stacks`)."""
    lengths = np.array([p.length for p in block], dtype=np.int64)
    every = np.array([p.all_stats for p in block], dtype=bool)
    wanted = rows.column_names if every.any() else sorted(changed)
    numeric = []
    for name in wanted:
        kind = schema.field(name).type
        kind = kind.value_type if is_list_type(kind) else kind
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
            numeric.append(name)
    stacks = table_stacks(rows, numeric, np.cumsum(lengths) - lengths, lengths, quantiles=False)
    return BlockStats(stacks, every, tuple(name for name in numeric if name in changed))


def _check_written(runs: dict[str, list[tuple[list[list[RowPiece]], int, dict]]], schema: pa.Schema) -> None:
    """Re-read every written file, a run of blocks at a time: each run holds its planned rows (the source's
    values, renumbered where planned), by one digest per column. Where a run differs, its blocks are planned
    again from their sources to name the first episode whose rows differ."""
    for out_file, file_runs in runs.items():
        tables = _row_runs(out_file, [rows for _, rows, _ in file_runs])
        for (blocks, rows, digests), written in zip(file_runs, tables):
            if written.num_rows != rows:
                raise VerificationError(f"holds fewer rows than the {rows} planned at episode "
                                        f"{blocks[0][0].episode}", file=out_file, episode=blocks[0][0].episode)
            if column_digests(written) == digests:
                continue
            offset, cache = 0, {}
            for block in blocks:
                out, _ = _planned(block, schema, cache)
                got, wanted = column_digests(written.slice(offset, out.num_rows)), column_digests(out)
                offset += out.num_rows
                bad = [c for c in wanted if got.get(c) != wanted[c]]
                if bad:
                    raise VerificationError(f"written values differ from the source in {bad}", file=out_file,
                                            episode=block[0].episode)
            raise VerificationError("written values differ from the source", file=out_file,
                                    episode=blocks[0][0].episode)
        extra = next(tables).num_rows
        if extra:
            raise VerificationError(f"holds {extra} rows more than planned", file=out_file)


def _row_runs(path: str, counts: list[int]) -> Iterator[pa.Table]:
    """The rows of a parquet file as consecutive tables of the given row counts, then one of the rows left
    over; read a batch at a time, so the memory of one run is reused for the next."""
    batches, left = iter_batches(open_parquet(path, streaming=True), path), None
    for n in counts + [None]:
        parts, have = [], 0
        while n is None or have < n:
            if left is None:
                left = next(batches, None)
                if left is None:
                    break
            take = left.num_rows if n is None else min(n - have, left.num_rows)
            parts.append(left.slice(0, take))
            have += take
            left = left.slice(take) if take < left.num_rows else None
        yield pa.Table.from_batches(parts) if parts else pa.table({})


@dataclass(frozen=True)
class VideoFile:
    """One output video file and how it is made: a whole source file reused (`link`), or its clips joined
    (or cut) by stream copy, those at the `reencode` positions re-encoded first (they start off a keyframe)."""
    key: str
    path: str                          # relative to the output root
    episodes: tuple[int, ...]          # new episode numbers, in file order
    clips: tuple[video.Clip, ...]
    link: bool = False
    reencode: tuple[int, ...] = ()
    retime: tuple[int, ...] = ()       # positions of clips whose packets go onto the k/fps grid (VID005)
    linked: tuple = ()                 # with `link`: where each clip lies in the reused file (`video.linkable`)

    def to_json(self) -> dict:
        action = "link" if self.link else "re-encode" if len(self.reencode) == len(self.clips) else "stream copy"
        return {"file": self.path, "action": action, "episodes": list(self.episodes),
                "reencode": [self.episodes[i] for i in self.reencode]}


def clip_facts(args: tuple[tuple[video.Clip, ...], tuple[int, ...], int, bool]
               ) -> list[tuple[bool, tuple | None, bool]]:
    """Worker: per clip, whether it starts on a keyframe (else it is re-encoded); with `signatures`, what must
    be equal for it to be joined to its neighbour (`video.signature`); and whether its time base places frames
    on the k/fps grid (else its packets are re-timed onto it: `video.concat`)."""
    from lerodoc.media import frames, video  # PyAV: a rewrite without videos loads none
    clips, episodes, fps, signatures = args
    return [(video.starts_on_keyframe(c, fps, e), video.signature(c.path, e) if signatures else None,
             video.fits_grid(frames.time_base(c.path, e), fps)) for c, e in zip(clips, episodes)]


def video_files(key: str, episodes: tuple[int, ...], clips: tuple[video.Clip, ...],
                facts: list[tuple[bool, tuple, bool]], sizes: tuple[int, ...], cap_bytes: float, chunks_size: int,
                fps: int, whole: tuple[tuple[int, int], ...] = ()) -> list[VideoFile]:
    """A camera's v3.0 files, named chunk/file in order: each `whole` run that needs no re-encode and no
    re-timing and whose file can be reused as it is (`video.linkable`) is that source file; other clips are
    joined up to `cap_bytes`, a new file starting where two neighbours' signatures differ or either is
    re-encoded (its parameters are the encoder's)."""
    # start-up: lerodoc.media.video loads av
    from lerodoc.media import video
    reencoded = {i for i, (keyframe, _, _) in enumerate(facts) if not keyframe}
    retimed = {i for i, (_, _, on_grid) in enumerate(facts) if not on_grid} - reencoded
    linked = {}
    for a, b in whole:
        if not (reencoded | retimed) & set(range(a, b)):
            written = video.linkable(list(clips[a:b]), fps, list(episodes[a:b]))
            if written is not None:
                linked[a] = tuple(written)
    whole = tuple((a, b) for a, b in whole if a in linked)
    groups = file_groups(list(sizes), cap_bytes, whole, joinable=lambda a, b: not {a, b} & reencoded
                         and facts[a][1] == facts[b][1])
    out, chunk, file = [], 0, 0
    for kind, group in groups:
        out.append(VideoFile(key, v30.video_file(key, chunk, file), tuple(episodes[i] for i in group),
                             tuple(clips[i] for i in group), link=kind == "link",
                             reencode=tuple(k for k, i in enumerate(group) if i in reencoded),
                             retime=tuple(k for k, i in enumerate(group) if i in retimed),
                             linked=linked[group[0]] if kind == "link" else ()))
        chunk, file = v30.next_file(chunk, file, chunks_size)
    return out


def write_video_file(vf: VideoFile, root: Path, fps: int) -> list[video.Written]:
    """Write one planned file under `root`; returns where each clip landed."""
    # start-up: lerodoc.media.video loads av
    from lerodoc.media import video
    out = inside(root, vf.path, field=f"video_path of {vf.key}")
    out.parent.mkdir(parents=True, exist_ok=True)
    if vf.reencode == (0,) and len(vf.clips) == 1:
        return [video.reencode(vf.clips[0], out, fps, vf.episodes[0])]
    clips = list(vf.clips)
    scratch = root / f".reencoded-{vf.path.replace('/', '_')}"
    for i in vf.reencode:      # re-encoded on its own first (a scratch folder of the staging tree), then joined
        scratch.mkdir(parents=True, exist_ok=True)
        video.reencode(clips[i], scratch / f"{vf.episodes[i]}.mp4", fps, vf.episodes[i])
        clips[i] = video.Clip(scratch / f"{vf.episodes[i]}.mp4")
    if vf.link:     # a whole source file that holds exactly these clips: the same bytes, by hard link
        _reuse(clips[0].path, out)
        written = list(vf.linked)
    else:
        written = video.concat(clips, out, fps, list(vf.episodes))
    shutil.rmtree(scratch, ignore_errors=True)
    return written


def write_video_files(args: tuple[tuple[VideoFile, ...], str, int]) -> list[list[video.Written]]:
    """Worker: write planned video files under the output root."""
    files, root, fps = args
    return [write_video_file(vf, Path(root), fps) for vf in files]


def write_videos(args: tuple[VideoJob, int]) -> list[tuple[str, video.Written]]:
    """Worker: write a job's clips (planning its files here, as `plan` does before a rewrite); returns (file
    written, where the clip landed) per episode."""
    job, fps = args
    facts = clip_facts((job.clips, job.episodes, fps, True))
    files = video_files(job.key, job.episodes, job.clips, facts, job.sizes, job.cap_bytes, job.chunks_size, fps,
                        job.whole_files)
    root = Path(job.out_root)
    return [(str(root / vf.path), w) for vf in files for w in write_video_file(vf, root, fps)]


def file_groups(sizes: list[int], cap: float, whole: tuple[tuple[int, int], ...] = (),
                joinable: Callable[[int, int], bool] = lambda a, b: True) -> list[tuple[str, list[int]]]:
    """How consecutive items become v3.0 files: each `whole` [start, stop) run is one file reused as it is
    ("link"); the items between runs are joined ("concat") into files of at most `cap` bytes, and a new
    file starts where two neighbours are not `joinable`."""
    groups: list[tuple[str, list[int]]] = []
    runs = dict(whole)
    pending: list[int] = []

    def flush() -> None:
        for group in _group_by_size([sizes[i] for i in pending], cap):
            current = [pending[group[0]]]
            for i in (pending[g] for g in group[1:]):
                if not joinable(current[-1], i):
                    groups.append(("concat", current))
                    current = []
                current.append(i)
            groups.append(("concat", current))
        pending.clear()
    i = 0
    while i < len(sizes):
        if i in runs:
            flush()
            groups.append(("link", list(range(i, runs[i]))))
            i = runs[i]
        else:
            pending.append(i)
            i += 1
    flush()
    return groups


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
    # start-up: lerodoc.media.video loads av
    from lerodoc.media import video
    span = ep.videos[key]
    path = ds.path(span.file)
    if ds.version == "v3.0":
        return video.Clip(path, span.from_timestamp, span.to_timestamp)
    return video.Clip(path)


def _clip_bytes(ds: Dataset, ep: Episode, key: str) -> int:
    """On-disk bytes of the episode's clip (its share of a v3.0 file)."""
    path = ds.path(ep.videos[key].file)
    size = path.stat().st_size if path.exists() else 0
    if ds.version != "v3.0":
        return size
    return size * ep.length // max(ds.rows_in_file(ep.videos[key].file, key), 1)


def _data_bytes(ds: Dataset, ep: Episode, sizes: dict | None = None) -> int:
    """On-disk bytes of the episode's rows (its share of the data file); `sizes` keeps each file's (bytes, rows)
    from one episode to the next."""
    sizes = {} if sizes is None else sizes
    key = (id(ds), ep.data_file)
    if key not in sizes:
        sizes[key] = (ds.path(ep.data_file).stat().st_size, max(ds.rows_in_file(ep.data_file), 1))
    size, rows = sizes[key]
    return size * ep.length // rows


@dataclass(frozen=True)
class Plan:
    """Everything a rewrite writes, decided before a byte is: the new episodes (numbered 0..N-1 in pick order,
    with their data files and rows), the row jobs (output paths relative to the output root) and the video
    files, with the clips that are re-encoded because they start off a keyframe. `execute` writes it;
    `to_json` is what --dry-run prints."""
    to: str
    info: Info
    tasks: tuple[str, ...]
    schema: pa.Schema
    picks: tuple[Pick, ...]
    episodes: tuple[Episode, ...]
    row_jobs: tuple[RowJob, ...]
    video_files: tuple[VideoFile, ...]

    @property
    def reencoded(self) -> list[dict]:
        """{"episode", "camera"} of each clip cut by re-encoding: `execute` re-encodes exactly these."""
        return sorted(({"episode": vf.episodes[i], "camera": vf.key} for vf in self.video_files for i in vf.reencode),
                      key=lambda r: (r["episode"], r["camera"]))

    @property
    def retimed(self) -> list[dict]:
        return sorted(({"episode": vf.episodes[i], "camera": vf.key} for vf in self.video_files for i in vf.retime),
                      key=lambda r: (r["episode"], r["camera"]))

    def to_json(self) -> dict:
        data: dict[str, dict] = {}
        for job in self.row_jobs:
            for piece in job:
                entry = data.setdefault(piece.out_file, {"file": piece.out_file, "episodes": [],
                                                         "action": "link" if piece.link else "write"})
                entry["episodes"].append(piece.episode)
        return {"to": self.to, "episodes": [{"episode": new.index, "source": str(p.dataset.root),
                                             "source_episode": p.episode.index, "length": new.length,
                                             "data_file": new.data_file}
                                            for p, new in zip(self.picks, self.episodes)],
                "frames": sum(ep.length for ep in self.episodes), "tasks": len(self.tasks),
                "files": sorted(data.values(), key=lambda d: d["file"]) + [vf.to_json() for vf in self.video_files],
                "reencode": self.reencoded, "retime": self.retimed}


def plan(picks: list[Pick], info: Info, tasks: list[str], to: str, schema: pa.Schema, *,
         caps_mb: tuple[float, float], retime: bool = False, workers: int = 1, stats: bool = True) -> Plan:
    """Plan writing the picked episodes as a `to` layout: checks every file they need exists, places rows and
    clips, and reads the sources' video headers (keyframes, stream parameters) to decide which clips are
    joined, reused whole or re-encoded. Nothing is written.

    `caps_mb` are the v3.0 data and video file size caps in MB; a data file is reused whole only when its
    columns already have `schema`'s types. `retime` rewrites frame_index and timestamp from the frame order.
    `stats=False`: the caller replaces every numeric feature's stats with those of the written rows (repair), so
    the rows of an episode without stats are not measured on the way (only the columns renumbering changes are).
    """
    if to not in TARGETS:
        raise LerodocError(f"cannot write {to}; lerodoc writes {', '.join(TARGETS)}")
    check_files(picks)
    layout = replace(info, data_path=None, video_path=None)   # -> v2.1: the version's own path templates
    new_eps, cursor = [], 0
    for number, pick in enumerate(picks):
        # the source's own task list, shared (lists are replaced, never changed in place: 64 bytes an episode)
        new_eps.append(Episode(index=number, length=pick.episode.length, tasks=pick.episode.tasks,
                               data_file="", data_row=0, from_index=cursor, stats=shared_stats(pick.episode)))
        cursor += pick.episode.length
    linked: set[int] = set()
    weights = None
    if to == "v3.0":
        chunk, file = 0, 0
        whole = () if retime else _unchanged_data_files(picks, new_eps, schema)
        sizes: dict = {}
        weights = np.array([_data_bytes(p.dataset, p.episode, sizes) for p in picks], dtype=np.int64)
        for kind, group in file_groups(weights.tolist(), caps_mb[0] * MB, whole):
            name = v30.data_file(chunk, file)   # one string a file, its episodes share it
            for i in group:
                new_eps[i].data_file = name
            if kind == "link":
                linked.update(group)
            chunk, file = v30.next_file(chunk, file, info.chunks_size)
    else:
        for ep in new_eps:
            ep.data_file = v21.data_file(layout, ep.index)
    first_row: dict[str, int] = {}
    for ep in new_eps:
        ep.data_row = ep.from_index - first_row.setdefault(ep.data_file, ep.from_index)
    sources: dict[tuple[int, str], str | access.HubPath] = {}

    def source_of(pick: Pick) -> str | access.HubPath:   # one path per source file, not per episode
        key = (id(pick.dataset), pick.episode.data_file)
        if key not in sources:
            sources[key] = _source(pick.dataset.path(pick.episode.data_file))
        return sources[key]
    all_stats = ~stats_held([p.episode for p in picks]) if stats else np.zeros(len(picks), dtype=bool)
    link = np.zeros(len(picks), dtype=bool)
    link[list(linked)] = True
    srcs = [source_of(p) for p in picks]
    # -> v3.0: one job per output file; -> v2.1: one job per source file (read once).
    keys = [ep.data_file for ep in new_eps] if to == "v3.0" else srcs
    members: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    if to != "v3.0" and len(members) < workers and len(picks) * len(schema) >= SPLIT_CELLS:
        # -> v2.1 the work is per output file (its writer, footer, read-back and digests: 400 files of 302 features
        # took 23 s from one source file, one job): each source file's episodes are split over the workers, each
        # part reading the file for itself
        parts = -(-workers // len(members))
        members = {(key, k): part for key, at in members.items()
                   for k, part in enumerate(np.array_split(np.asarray(at), min(parts, len(at))))}
    row_jobs = [RowJob(tuple(picks[i] for i in at), tuple(new_eps[i] for i in at), tuple(srcs[i] for i in at),
                       all_stats[at], link[at], info.fps if retime else None,
                       None if weights is None else int(weights[at].sum()))
                for at in members.values()]
    srcs = keys = members = None

    files: list[VideoFile] = []
    numbers = tuple(ep.index for ep in new_eps)
    clips_of = {key: tuple(_clip_of(p.dataset, p.episode, key) for p in picks) for key in info.video_keys}
    # The clips' headers, read by `workers` processes: a contiguous batch each, so clips of one file stay together.
    every = [(c, n) for key in info.video_keys for c, n in zip(clips_of[key], numbers)]
    size = max(16, -(-len(every) // max(workers, 1)))
    batches = [(tuple(c for c, _ in every[i:i + size]), tuple(n for _, n in every[i:i + size]), info.fps,
                to == "v3.0") for i in range(0, len(every), size)]
    all_facts = [f for part in pmap(clip_facts, batches, workers=workers) for f in part]
    for k, key in enumerate(info.video_keys):
        clips, facts = clips_of[key], all_facts[k * len(numbers):(k + 1) * len(numbers)]
        if to == "v3.0":
            files += video_files(key, numbers, clips, facts, tuple(_clip_bytes(p.dataset, p.episode, key)
                                                                   for p in picks),
                                 caps_mb[1] * MB, info.chunks_size, info.fps, _whole_files(picks, key))
        else:
            files += [VideoFile(key, v21.video_file(layout, key, n), (n,), (clip,), reencode=() if keyframe else (0,),
                                retime=() if on_grid or not keyframe else (0,))
                      for n, clip, (keyframe, _, on_grid) in zip(numbers, clips, facts)]
    return Plan(to, info, tuple(tasks), schema, tuple(picks), tuple(new_eps),
                tuple(row_jobs), tuple(files))


def _run(job: tuple[Callable, tuple]):
    """Worker entry: call a job's function on its arguments."""
    fn, args = job
    return fn(args)


def _whole_runs(picks: list[Pick], file_of: Callable[[Episode], str]) -> list[tuple[int, int]]:
    """Runs [start, stop) of consecutive picks that hold every episode of one v3.0 file, in its order."""
    runs, i, in_files = [], 0, {}
    while i < len(picks):
        ds, name = picks[i].dataset, file_of(picks[i].episode)
        j = i
        while j < len(picks) and picks[j].dataset is ds and file_of(picks[j].episode) == name:
            j += 1
        if ds.version == "v3.0":
            if id(ds) not in in_files:      # each file's episodes, listed once per dataset
                in_files[id(ds)] = {}
                for e in ds.episodes:
                    in_files[id(ds)].setdefault(file_of(e), []).append(e.index)
            if [p.episode.index for p in picks[i:j]] == in_files[id(ds)].get(name):
                runs.append((i, j))
        i = j
    return runs


def _whole_files(picks: list[Pick], key: str) -> tuple[tuple[int, int], ...]:
    """Video files that can be reused as they are: they hold exactly a run of picks."""
    return tuple(_whole_runs(picks, lambda e: e.videos[key].file))


def _unchanged_data_files(picks: list[Pick], new_eps: list[Episode], schema: pa.Schema | None
                          ) -> tuple[tuple[int, int], ...]:
    """Data files that can be reused as they are: a whole-file run whose rows keep their episode_index,
    index and task_index, whose episodes have stats, whose file holds just those rows, and whose columns
    already have the target `schema`'s types."""
    runs = []
    for i, j in _whole_runs(picks, lambda e: e.data_file):
        pick = picks[i]
        same_ids = all((p.episode.index, p.episode.from_index) == (n.index, n.from_index)
                       for p, n in zip(picks[i:j], new_eps[i:j]))
        same_tasks = pick.task_map is None or list(pick.task_map) == list(range(len(pick.task_map)))
        parquet = open_parquet(pick.dataset.path(pick.episode.data_file), pick.episode.index)
        rows, own = parquet.metadata.num_rows, parquet.schema_arrow
        same_schema = schema is None or own.equals(schema, check_metadata=False)
        if same_ids and same_tasks and same_schema and stats_held([p.episode for p in picks[i:j]]).all() \
                and rows == sum(p.episode.length for p in picks[i:j]):
            runs.append((i, j))
    return tuple(runs)


def check_files(picks: list[Pick]) -> None:
    """Every data and video file the picks need exists (before anything is written)."""
    seen: set[tuple[int, str]] = set()   # each file once, however many episodes it holds
    for pick in picks:
        ep = pick.episode
        if (id(pick.dataset), ep.data_file) not in seen:
            _check_file(pick, None, ep.data_file, seen)
        for key, span in ep.videos.items():
            if (id(pick.dataset), span.file) not in seen:
                _check_file(pick, key, span.file, seen)


def _check_file(pick: Pick, key: str | None, rel: str, seen: set[tuple[int, str]]) -> None:
    """`check_files` of one file: a pick's data file (`key` None) or its `key` camera's video."""
    if not pick.dataset.path(rel).is_file():
        raise pick.dataset.missing(pick.episode, key)   # named at the metadata that points there
    seen.add((id(pick.dataset), rel))


def execute(plan_: Plan, tmp: Path, *, workers: int = 1, progress: Progress | None = None, engine=None,
            stream: bool = False) -> Result:
    """Write a plan's rows and videos into the staging folder `tmp`.

    Returns the new episodes (files, windows, per-episode stats): the plan's own, their windows and stats filled in
    (a plan is executed once); the caller writes the metadata with
    `formats.module(to).write_meta` and then calls `verify`. `engine` (`lerodoc.run.engine`) runs the jobs on a
    cluster instead of `workers` processes. `stream` (a v3.0 output): where `_new_stats` can, the episodes keep their
    sources' rows and `Result.stream` hands the written stats to the writer a file at a time.
    """
    info, picks = plan_.info, plan_.picks
    new_eps = list(plan_.episodes)   # filled in place, not copied: a million Episodes are half a gigabyte
    result = Result(new_eps)
    outputs = [{name: str(inside(tmp, name, field="data_path")) for name in job.out_files} for job in plan_.row_jobs]
    # -> v3.0: a file per job; -> v2.1: PER_JOB episode files per job.
    step = 1 if plan_.to == "v3.0" else PER_JOB
    video_jobs = [plan_.video_files[i:i + step] for i in range(0, len(plan_.video_files), step)]
    # The schema as a worker process receives it: pyarrow serialises a schema read from a file and its pickled copy
    # to different (equal) footer bytes, which would make the files depend on --workers.
    schema = pickle.loads(pickle.dumps(plan_.schema))
    # One pool for both kinds of job, video first (the longest), so rows and videos overlap.
    jobs = [(write_video_files, (job, str(tmp), info.fps)) for job in video_jobs] + \
        [(write_rows, (job, schema, names)) for job, names in zip(plan_.row_jobs, outputs)]
    tick = progress("files", len(jobs)) if progress else None
    # rows alone: a pool only for as many workers as their bytes keep busy (`parallel.worth`); videos: always
    sized = not video_jobs and all(job.nbytes is not None for job in plan_.row_jobs)
    done_jobs = pmap(_run, jobs, workers=workers, progress=tick, engine=engine,
                     nbytes=sum(job.nbytes for job in plan_.row_jobs) if sized else None)
    written_by_job, row_results = done_jobs[:len(video_jobs)], done_jobs[len(video_jobs):]
    blocks = [block for job in row_results for block in job]
    result.stream = _new_stats(new_eps, blocks, picks, stream)
    renumbered = [b.episodes for b in blocks if {"episode_index", "index"} & set(b.changed)]
    result.renumbered = sorted(np.concatenate(renumbered).tolist()) if renumbered else []
    computed = [b.episodes[b.stats.every] for b in blocks if b.stats is not None]
    result.computed_stats = sorted(np.concatenate(computed).tolist()) if computed else []
    for job, written in zip(video_jobs, written_by_job):
        for vf, clips in zip(job, written):
            for number, clip in zip(vf.episodes, clips):
                ep = new_eps[number]
                ep.videos = {**ep.videos, vf.key: VideoSpan(vf.path, clip.from_timestamp, clip.to_timestamp)}
                if clip.frames != ep.length:
                    source = picks[number]
                    span = source.episode.videos[vf.key]
                    raise LerodocError(f"the window [{span.from_timestamp:.4f}, {span.to_timestamp:.4f}) s holds "
                                       f"{clip.frames} frames for {ep.length} rows (window and length as "
                                       f"{source.episode.source or 'the episodes metadata'} gives them), so frames "
                                       "and rows would be misaligned",
                                       file=source.dataset.path(source.episode.videos[vf.key].file),
                                       episode=source.episode.index, field=vf.key,
                                       hint="lerodoc validate --videos names the cause")
                if clip.retimed:
                    result.retimed.append({"episode": number, "camera": vf.key})
    for ep in new_eps if info.video_keys else ():   # in the features' order
        ep.videos = {key: ep.videos[key] for key in info.video_keys}
    result.retimed.sort(key=lambda r: (r["episode"], r["camera"]))
    return result


def _release_sources(picks: list[Pick], episodes: list[Episode]) -> None:
    """The sources' per-episode stats tables that none of the new `episodes` holds rows of any more (their stats
    were gathered into a new table, `_new_stats`) let go: at a million episodes each copy is gigabytes. A source
    episode whose stats are asked for again has them read again. Holders without `release` keep theirs: v2.x's
    episodes_stats.jsonl, whose features promotion's kept check asks for (`promote.kept.undeclared_cameras`)."""
    used = stats_holders(episodes)
    for key, holder in stats_holders(p.episode for p in picks).items():
        if key not in used and hasattr(holder, "release"):
            holder.release()


def _update_kinds(blocks: list[BlockResult]) -> list[list[tuple[np.ndarray, dict]]]:
    """What the blocks computed, one list of (new episode numbers, stacks) parts per kind of piece and set of
    features."""
    kinds: dict[tuple, list[tuple[np.ndarray, dict]]] = {}
    for block in blocks:
        if block.stats is not None:
            for rows, stacks in block.stats.updates():
                key = tuple((f, tuple(by_stat)) for f, by_stat in stacks.items())
                kinds.setdefault(key, []).append((block.episodes[rows], stacks))
    return list(kinds.values())


def _new_stats(episodes: list[Episode], blocks: list[BlockResult], picks: list[Pick], stream: bool
               ) -> GatherStream | None:
    """The new episodes' stats from what the blocks computed. With `stream` (a v3.0 output), where their sources'
    tables are transient (past the stats budget: `Dataset._require_stats_shapes`) and the blocks updated one set of
    features (of every episode, or of some as `GatherStream.of` allows), a `GatherStream` for the writer. Else each
    new episode's stats are updated (`formats.model.update_stats`, column by column: one update per kind of piece
    and set of features, the blocks of a kind stacked together), the sources' tables none of them holds rows of
    let go (`_release_sources`), and None. The blocks' stacks are let go stat by stat as they are joined (`consume`):
    the join holds one stat twice, not every stat (hundreds of MB at a million episodes)."""
    kinds = _update_kinds(blocks)
    if stream and len(kinds) <= 1 and not any(b.stats is not None and b.stats.every.any() for b in blocks):
        updates = EpisodeStacks.joined(kinds[0], consume=True) if kinds else None
        kinds = None
        gathered = GatherStream.of(episodes, updates)
        if gathered is not None:
            return gathered
        if updates is not None:
            update_stats(episodes, updates, release=True)
    else:
        for parts in kinds:
            update_stats(episodes, EpisodeStacks.joined(parts, consume=True), release=True)
    _release_sources(picks, episodes)
    return None


@dataclass(frozen=True)
class Planned:
    """What `verify` holds a written tree to, as columns: the planned episodes' numbers, lengths, first global
    rows and data files (`planned` makes it; 40 bytes an episode, where the episodes are about 400)."""
    index: np.ndarray
    length: np.ndarray
    from_index: np.ndarray
    data_files: list[str]

    @property
    def frames(self) -> int:
        return int(self.length.sum())

    def __len__(self) -> int:
        return len(self.index)


def planned(episodes: list[Episode]) -> Planned:
    """The written episodes as `verify` compares them. Their stats are let go (`let_go_stats`): they are written,
    and at a million episodes their table is gigabytes that would sit beside verify's open of the output (and, in
    repair, beside its validate). A caller that lets go of the episodes too verifies at the cost of one open."""
    let_go_stats(episodes)
    return Planned(*(episode_column(episodes, name) for name in ("index", "length", "from_index")),
                   [e.data_file for e in episodes])


def verify(root: Path, to: str, expected: Planned) -> None:
    """The written tree opens as `to` and holds exactly the planned episodes and frames (`planned`). The caller
    writes nothing after it: this open is what promotion's kept check reads (`staging.written`), and of its episodes
    only what that check reads is kept (`kept.trim_to_held`)."""
    opened = Dataset.open(root)
    same = opened.version == to and len(opened.episodes) == len(expected) and all(
        np.array_equal(episode_column(opened.episodes, name), getattr(expected, name))
        for name in ("index", "length", "from_index")) and \
        [e.data_file for e in opened.episodes] == expected.data_files
    if not same:
        raise VerificationError("written metadata does not describe the planned episodes", file=root)
    kept.trim_to_held(opened)
    staging.written(root, opened)


def canonical_features(features: dict) -> tuple[dict, list[str]]:
    """`features` as validate wants them, in names and spellings only (what convert, merge, delete and split write
    on the way; repair's rule too): numeric names flat (LAY016), codec names canonical, a camera's names [height,
    width, channels] where lerobot cannot read them (null, a dict, fewer than 3: LAY019), where they already say
    height, width, then its channel axis ('channel', LAY018), or where they name each axis once in another order
    (channels first, LAY018); its shape reordered to match (`camera_shape`). Other names of 3 or more (['h', 'w',
    'c']) stay for repair, which takes them as channels last. Returns the features and one line per change."""
    out, changes = {}, []
    for name, spec in features.items():
        fixed = canonical_feature(spec)
        if spec.get("names") != fixed.get("names"):
            changes.append(f"{name}: nested names flattened to a list of {len(fixed['names'])} (LAY016)")
        if (spec.get("info") or {}).get("video.codec") != (fixed.get("info") or {}).get("video.codec"):
            changes.append(f"{name}: codec {spec['info'].get('video.codec')!r} written as "
                           f"{fixed['info']['video.codec']!r}")
        names, shape = fixed.get("names"), list(fixed.get("shape") or [])
        if fixed["dtype"] in ("video", "image") and len(shape) == 3 and names != CAMERA_NAMES:
            frame = video_frame(fixed)
            named = channels_last(names, shape, frame) is not None
            if named or unreadable_names(names) or names[:2] == CAMERA_NAMES[:2]:
                code = "LAY019" if unreadable_names(names) else "LAY018"
                fixed["names"], fixed["shape"] = list(CAMERA_NAMES), camera_shape(names, shape, frame)
                moved = f" and shape {shape}" if fixed["shape"] != shape else ""
                written = f" and {fixed['shape']}" if moved else ""
                changes.append(f"{name}: camera names {names!r}{moved} written as {CAMERA_NAMES!r}{written} ({code})")
        out[name] = fixed
    return out, changes


def target_schema(dataset: Dataset, features: dict | None = None) -> tuple[pa.Schema, dict[str, dict[str, str]]]:
    """The schema every output file gets: the first data file's columns in the representation lerobot 0.6.1
    loads (`hf.storage_schema` of `features`, the dataset's own by default), and the columns it changes. (The first
    file that is there: repair's input may point at a missing one.)"""
    first = next((e for e in dataset.episodes if dataset.path(e.data_file).is_file()), dataset.episodes[0])
    return storage_schema(features or dataset.info.features, read_schema(dataset.path(first.data_file), first.index))


def tree_size(root: Path) -> int:
    return sum(p.stat().st_size for p in access.path(root).rglob("*") if p.is_file())
