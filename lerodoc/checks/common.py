"""What every check family shares: findings, the context they read, and the data files read once per context.

`data_files` reads each referenced data parquet's footer and bookkeeping columns once per context;
`finding_factory` makes a family's findings from its code table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lerodoc import access, budget
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.formats import v21, v30
from lerodoc.formats.info import DTYPES, INDEX_FEATURES
from lerodoc.conventions import TOLERANCE_S
from lerodoc.run.parallel import default_workers, in_order, pmap
from lerodoc.tables.parquet_io import Unreadable, column_matrix, open_parquet, read_row_groups

ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class Finding:
    """One defect: a stable `code` (e.g. "IDX003"), where it is, what is wrong and how to fix it."""
    code: str
    severity: str                 # "error" or "warning"
    message: str
    file: str | None = None       # relative to the dataset root
    episode: int | None = None
    feature: str | None = None
    channel: int | None = None
    hint: str | None = None
    fixable: bool = False         # `lerodoc repair` fixes it

    def to_json(self) -> dict:
        """The finding as --json prints it: the column it is about is `field`, as in an error (docs/json.md)."""
        return {("field" if k == "feature" else k): v for k, v in asdict(self).items()}


@dataclass
class Context:
    """What the checks work on. `dataset` is None when the metadata could not be read at all."""
    root: Path
    dataset: Dataset | None
    open_error: LerodocError | None = None
    videos: bool = False          # --videos: container-level video checks
    deep: bool = False            # --deep: decode the first and last frame of each episode span
    tolerance_s: float = TOLERANCE_S
    stats: bool = True            # the stats family reads the per-episode stats and recomputes them from every
                                  # numeric column (else: stats.json alone; ops.validate says it was skipped)
    cache: dict = field(default_factory=dict)   # families share parsed files here
    engine: object = None         # lerodoc.run.engine: the per-file reads run on a cluster (None: here)


def finding_factory(codes: dict) -> Callable[..., Finding]:
    """A function making Findings of `codes`: severity, hint and fixable come from the table."""
    def make(code: str, message: str, **where) -> Finding:
        severity, _meaning, hint, fixable = codes[code]
        return Finding(code, severity, message, hint=hint, fixable=fixable, **where)
    return make


def relative(root: Path, path: object) -> str | None:
    """`path` relative to the dataset root when it lies inside it, else as given."""
    if path is None:
        return None
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


@dataclass
class DataFile:
    """One referenced data parquet: its schema and bookkeeping columns, or why it could not be read."""
    path: str                        # relative to the root
    schema: pa.Schema | None = None
    columns: pa.Table | None = None  # the INDEX_FEATURES columns the file has
    error: str | None = None         # "missing", or the reader's message
    # its numeric columns kept for the stats family (`data_files`): (a table joined from a block of consecutive
    # files, this file's first row in it, its rows)
    numeric: tuple[pa.Table, int, int] | None = None

    def kept(self, names: list[str]) -> pa.Table | None:
        """Columns `names` when this read kept every one of them (`data_files`), else None."""
        if self.numeric is None:
            return None
        table, first, rows = self.numeric
        if not set(names) <= set(table.column_names):
            return None
        return table.slice(first, rows).select(names)

    def release(self) -> None:
        """Let go of the numeric columns `data_files` kept (the stats family, their one reader, has them): the
        bookkeeping columns stay."""
        self.numeric = None

    def keep(self, needed: set[str]) -> None:
        """Let go of the bookkeeping columns not `needed` by a later family (`checks.run_checks`)."""
        if self.columns is not None:
            kept = [c for c in self.columns.column_names if c in needed]
            if len(kept) < self.columns.num_columns:
                self.columns = self.columns.select(kept)

    @property
    def ok(self) -> bool:
        return self.error is None


def read_data_file(root: Path, path: str, keep: tuple[str, ...] = ()) -> DataFile:
    """The file's footer and its INDEX_FEATURES columns, read as every parquet read is (`read_row_groups`: the
    columns' footer claims held to the memory budget and to the bytes the file holds first); any other column is
    never decoded. `keep`: columns read in the same pass, those of them the file has, for a later family (the stats
    family's numeric ones); if that wider read fails, the file is read as without them, so that what the
    bookkeeping families find does not change."""
    full = root / path
    if not full.is_file():
        return DataFile(path, error="missing")
    try:
        # a hub file: no pre-buffering, which coalesces the wanted column chunks with the feature columns between them
        parquet = pq.ParquetFile(access.source(full), pre_buffer=not access.is_remote(full))
        schema = parquet.schema_arrow
        names = set(schema.names)   # a new list at each `schema.names`: asked once a file, not once a column
        columns = [c for c in INDEX_FEATURES if c in names]
        groups = list(range(parquet.metadata.num_row_groups))
        wider = list(dict.fromkeys(columns + [c for c in keep if c in names]))
        if len(wider) > len(columns):
            try:
                table = read_row_groups(parquet, full, groups, wider)
                return DataFile(path, schema, table.select(columns), numeric=(table, 0, table.num_rows))
            except (LerodocError, OSError, pa.ArrowException, ValueError):
                pass       # the stats family reads those columns again and names what is wrong with them
        return DataFile(path, schema, read_row_groups(parquet, full, groups, columns))
    except Unreadable as exc:
        return DataFile(path, error=exc.reason)
    except LerodocError as exc:     # over the budget: its message and hint, without the file's name
        return DataFile(path, error=exc.message if exc.hint is None else f"{exc.message} ({exc.hint})")
    except (OSError, pa.ArrowException, ValueError) as exc:
        return DataFile(path, error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def _read_data_file(args: tuple[Path, str] | tuple[Path, str, tuple[str, ...]]) -> DataFile:
    """Worker: `read_data_file` of one (root, path[, keep])."""
    return read_data_file(*args)


READ_THREADS = 4   # data files `data_files` reads at once, at most
KEEP_SHARE = 4   # the numeric columns `data_files` keeps for the stats family: at most this share of the memory budget
# What pyarrow holds for a column chunk beside its values (its arrays, type and field objects): measured 0.6 KiB for a
# flat float column and 2.3 KiB for a list one, read from a file of 10 rows. A v2.1 dataset of 400 one-episode files
# of 300 features kept 26 KB of values a file and grew 2 MB a file, each file's columns held as read: validate peaked
# at 1.1 GiB. Kept columns are now joined a block of KEPT_BLOCK_FILES files at a time into one table (one chunk a
# column), and each block is charged KEPT_COLUMN_BYTES a column beside its values.
KEPT_COLUMN_BYTES = 4096
KEPT_BLOCK_FILES = 16
KEPT_JOIN_BYTES = 1 << 20   # a file kept with this many bytes of values or more is held as read (joining copies)


def numeric_features(ds: Dataset) -> list[str]:
    """Numeric features with a well-formed spec (layout reports the others): the stats family's columns."""
    return [name for name in ds.info.numeric_keys if valid_spec(ds.info.features[name])]


def data_files(ctx: Context) -> dict[str, DataFile]:
    """Every referenced data file in global row order (sorted paths), read once per context.

    When the stats family will recompute the stats here (no engine), each file's numeric columns are read in the
    same pass and kept while what is kept is within 1/KEEP_SHARE of the memory budget (READ_THREADS files are read at
    once, those not yet taken charged their bytes on disk meanwhile): the files the stats family would read again are
    then read once. Past that, the remaining files are read for their bookkeeping alone."""
    if "data_files" not in ctx.cache:
        paths = sorted(ctx.dataset.data_files())
        if ctx.engine is not None or not ctx.stats:
            files = pmap(_read_data_file, [(ctx.root, p) for p in paths], engine=ctx.engine)
        else:
            keep, room, files = tuple(numeric_features(ctx.dataset)), budget.memory_budget() // KEEP_SHARE, []
            block: list[tuple[DataFile, pa.Table]] = []

            ahead: list[int] = []   # the on-disk bytes of each file asked to keep, not yet taken: charged meanwhile

            def asked() -> Iterator[tuple[Path, str, tuple[str, ...]]]:
                """Each file with what it keeps, decided as it is handed to a thread (in this one, in order: the
                same files are kept whatever the threads' timing)."""
                for path in paths:
                    wanted = keep if room - sum(ahead) > 0 else ()
                    ahead.append(_disk_bytes(ctx.root / path) if wanted else 0)
                    yield ctx.root, path, wanted
            # READ_THREADS files at a time (pyarrow decodes without the GIL, beside the page walk and footers in
            # Python: 400 files of 302 features, 6.4-8.6 s in one thread, 4.4-5.6 s in two), taken in order
            threads = min(default_workers(), READ_THREADS)
            for data in in_order(_read_data_file, asked(), threads=threads) if threads > 1 else \
                    map(_read_data_file, asked()):   # one at a time: each taken before the next is asked
                files.append(data)
                ahead.pop(0)
                if data.numeric is None:
                    continue   # no numeric column kept
                wide = data.numeric[0]
                size = wide.nbytes   # a walk over every column's buffers: asked once
                if block and (size >= KEPT_JOIN_BYTES or not wide.schema.equals(block[0][1].schema)):
                    _join(block)
                room -= size + (KEPT_COLUMN_BYTES * wide.num_columns if not block else 0)
                block.append((data, wide))
                if len(block) == KEPT_BLOCK_FILES or size >= KEPT_JOIN_BYTES:
                    _join(block)
            _join(block)
        _share_schemas(files)
        ctx.cache["data_files"] = dict(zip(paths, files))
    return ctx.cache["data_files"]


def _disk_bytes(path: Path) -> int:
    """A file's size (the link itself for a link, which `read_data_file` refuses; 0 for a missing one)."""
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _join(block: list[tuple[DataFile, pa.Table]]) -> None:
    """The numeric columns kept of a block of files (each (file, its columns as read)) joined into one table, a chunk
    a column, each file given its rows of it (`DataFile.numeric`); the block is emptied. A block of one file keeps
    its columns as read."""
    if len(block) < 2:
        block.clear()
        return
    first = 0
    table = pa.concat_tables([wide.replace_schema_metadata(None) for _, wide in block]).combine_chunks()
    for data, wide in block:
        data.numeric = (table, first, wide.num_rows)
        first += wide.num_rows
    block.clear()


def _share_schemas(files: list[DataFile]) -> None:
    """A file whose schema equals the one before it (metadata included) holds that one, not its own copy: a schema
    of 300 features is about 0.3 MB, held for every file of a v2.1 dataset (a file an episode)."""
    last = None
    for data in files:
        if data.schema is not None and last is not None and data.schema.equals(last, check_metadata=True):
            data.schema = last
        last = data.schema if data.schema is not None else last


def episode_meta_files(ctx: Context) -> list[str]:
    """For each episode (by metadata position), the metadata file that lists it."""
    if "episode_meta_files" not in ctx.cache:
        ds = ctx.dataset
        if ds.version == "v3.0":
            files = []
            for path in sorted(ctx.root.glob(v30.EPISODES_GLOB)):
                files += [path.relative_to(ctx.root).as_posix()] * open_parquet(path).metadata.num_rows
        else:
            files = [v21.EPISODES_PATH]
        ctx.cache["episode_meta_files"] = (files + files[-1:] * len(ds.episodes))[:len(ds.episodes)]
    return ctx.cache["episode_meta_files"]


@dataclass(frozen=True)
class EpisodeColumns:
    """The episodes metadata as columns (one entry per metadata position): what the families compare with the data
    over whole arrays instead of episode by episode."""
    index: np.ndarray        # episode_index, int64
    length: np.ndarray       # int64
    data_row: np.ndarray     # first row inside the data file, int64
    from_index: np.ndarray   # dataset_from_index, int64
    file: np.ndarray         # position of the episode's data file in `files`, int64
    files: list[str]         # the data files, in first-mention order


def episode_columns(ctx: Context) -> EpisodeColumns:
    """ctx.dataset's episodes as columns, made once per context."""
    if "episode_columns" not in ctx.cache:
        eps = ctx.dataset.episodes
        n = len(eps)
        files = ctx.dataset.data_files()
        code = {f: i for i, f in enumerate(files)}
        ctx.cache["episode_columns"] = EpisodeColumns(
            *(np.fromiter((getattr(ep, name) for ep in eps), dtype=np.int64, count=n)
              for name in ("index", "length", "data_row", "from_index")),
            np.fromiter((code[ep.data_file] for ep in eps), dtype=np.int64, count=n), files)
    return ctx.cache["episode_columns"]


def ragged_arange(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, s + n) over (starts, lengths), without a loop: the rows of many spans."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths) + np.arange(total)


def flat_column(table: pa.Table | None, name: str) -> np.ndarray | None:
    """A numeric scalar (or list[1]) column as a flat numpy array (nulls become NaN); None when absent,
    not numeric or not one value per row."""
    if table is None or name not in table.column_names:
        return None
    if table.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    try:
        values = column_matrix(table.column(name), table.num_rows)
    except (ValueError, pa.ArrowException):
        return None
    if values.dtype.kind not in "biuf" or values.ndim != 2 or values.shape[1] != 1:
        return None
    return values[:, 0]


def valid_spec(spec: dict) -> bool:
    """A feature spec with a known dtype and a shape of positive integers (else LAY013)."""
    shape = spec.get("shape")
    return is_dtype(spec.get("dtype")) and isinstance(shape, list) and bool(shape) and \
        all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)


def is_dtype(dtype: object) -> bool:
    """A dtype info.json may name (formats.info.DTYPES: video, image, string or a numeric one a parquet column holds;
    numpy's `complex128` is none)."""
    return isinstance(dtype, str) and dtype in DTYPES
