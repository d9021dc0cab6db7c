"""Training batches for pi0.5 from a LeRobot dataset (v2.1 or v3.0), deterministic by step.

- Numbers: state, action, timestamps and task indices of every frame are read once (only those parquet
  columns) and quantile-normalised to [-1, 1] with the dataset's q01/q99.
- Order: the run's sample stream is a concatenation of seeded permutations of the training frames (every frame
  but those of the held-out episodes); global batch `s` is its slice [s G, (s + 1) G), sorted, and rank r takes
  the r-th part. Flow-matching noise and times are
  drawn for the whole global batch from a generator seeded by (seed, s). A batch is therefore a function of
  (seed, s) alone: resuming at step s, or splitting G over any number of ranks, sees the same samples.
- Targets: the `action_horizon` actions from each frame on; steps past the episode's end repeat its last
  action and are marked in `action_is_pad`.
- Prompt (openpi's pi05): `Task: {task}, State: {s0 s1 ...};\\nAction: ` with the normalised state
  digitised into 256 bins, or `Task: {task};\\nAction: ` without state; SentencePiece with BOS, right-padded.
- Images: each camera's frame at the row's timestamp, decoded in DataLoader workers (lerodoc.pi05.frames),
  resized with padding, carried as uint8 (B, cameras, S, S, 3).
Worker w of n makes the steps s with (s - start) % n == w, so the DataLoader yields them in order.

Held-out episodes (`--val-episodes`, `--val-fraction`) are never in a training batch. Their loss is measured on a
fixed set of their frames (`held_out_rows`) with one fixed draw of noise and times (`held_out_noise`), so the
values of a run compare across steps, and across runs with the same seed and held-out episodes.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import pyarrow as pa

from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.formats.model import require_task_rows
from lerodoc.tables.parquet_io import (column_matrix, is_list_type, iter_batches, list_values, numpy_dtype,
                                      open_parquet, read_parquet, read_row_groups, to_numpy)
from lerodoc.tables.stats import normalised

if TYPE_CHECKING:   # torch and PyAV are imported where batches are made: load_frames (train's index) loads neither
    import torch

    from lerodoc.pi05.frames import FrameReader

STATE_BINS = 256


@dataclass(frozen=True)
class DataSpec:
    """What the model sees of a dataset; saved with a run so a resume reads the data the same way."""
    action_key: str
    state_key: str | None
    cameras: tuple[str, ...]
    action_horizon: int
    image_size: int
    state_in_prompt: bool
    max_token_len: int

    def to_json(self) -> dict:
        return asdict(self) | {"cameras": list(self.cameras)}

    @classmethod
    def from_json(cls, raw: dict) -> DataSpec:
        return cls(**(raw | {"cameras": tuple(raw["cameras"])}))


def normalise(values: np.ndarray, q01: np.ndarray, q99: np.ndarray) -> np.ndarray:
    """The quantile normalisation (`tables.stats.normalised`, the one rule) in float32, as the model takes it."""
    return normalised(values, q01, q99).astype(np.float32)


@dataclass
class Frames:
    """Per-frame numbers of the whole dataset, rows in episode order."""
    action: np.ndarray          # (N, A) normalised
    state: np.ndarray | None    # (N, S) normalised
    timestamp: np.ndarray       # (N,) seconds from the episode's start
    task: np.ndarray            # (N,) task_index (int32 where every task's fits)
    episode: np.ndarray         # (N,) position of the frame's episode in dataset.episodes (int32 where it fits)
    ends: np.ndarray            # (episodes,) exclusive end row of each episode: held per episode, not per frame
    raw_action: np.ndarray | None = None   # (N, A) as recorded (load_frames' raw_action: evaluation's reference)

    def __len__(self) -> int:
        return len(self.action)

    def end(self, rows: np.ndarray) -> np.ndarray:
        """The exclusive end row of each row's episode."""
        return self.ends[self.episode[rows]]


def load_frames(dataset: Dataset, spec: DataSpec, stats: dict | None = None, raw_action: bool = False) -> Frames:
    """Read the needed columns once per data file and normalise them with the dataset's quantiles, or with
    `stats` ({feature: {"q01": ..., "q99": ...}}: a trained run's, when its policy is evaluated on a dataset)."""

    def normalised(key: str) -> Callable[[np.ndarray], np.ndarray]:
        def convert(values: np.ndarray) -> np.ndarray:
            q = (stats or dataset.stats)[key]
            return normalise(values.reshape(len(values), -1), np.ravel(q["q01"]), np.ravel(q["q99"]))
        return convert

    tasks = len(dataset.tasks)

    def task_rows(values: np.ndarray) -> np.ndarray:
        """Rows of meta/tasks (validate's TSK001 holds every task_index to them), in int32 where every row fits: at
        ten million frames, 38 MiB less, a frame index whose peak sat at the 2 GB line."""
        values = values.reshape(-1)
        require_task_rows(values, tasks)
        return values.astype(np.int32 if tasks <= np.iinfo(np.int32).max else np.int64)

    wanted = {"action": (spec.action_key, normalised(spec.action_key)),
              "timestamp": ("timestamp", lambda values: values.reshape(-1).astype(np.float64)),
              "task": ("task_index", task_rows)}
    if spec.state_key:
        wanted["state"] = (spec.state_key, normalised(spec.state_key))
    if raw_action:
        wanted["raw_action"] = (spec.action_key, lambda values: values.reshape(len(values), -1).astype(np.float32))
    lengths = np.array([ep.length for ep in dataset.episodes])
    kept = _whole_columns(dataset, wanted, lengths)
    if kept is None:
        values = _episode_columns(dataset, list(dict.fromkeys(column for column, _ in wanted.values())))
        kept = {key: convert(values[column]) for key, (column, convert) in wanted.items()}
    # a frame's episode position in int32 where every position fits: at 10 million frames, 40 MB less
    positions = np.arange(len(lengths), dtype=np.int32 if len(lengths) <= np.iinfo(np.int32).max else np.int64)
    return Frames(action=kept["action"], state=kept.get("state"), timestamp=kept["timestamp"], task=kept["task"],
                  episode=np.repeat(positions, lengths), ends=np.cumsum(lengths), raw_action=kept.get("raw_action"))


Wanted = dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]]   # output -> (column, what its rows become)


BATCH_ROWS = 1 << 16   # rows of a data file converted together: a few MB, so one file's columns are never held whole


def _whole_columns(dataset: Dataset, wanted: Wanted, lengths: np.ndarray) -> dict[str, np.ndarray] | None:
    """Each output of `wanted` over every frame, episodes in dataset order: each data file read once (as
    `_episode_columns` reads it), its runs of consecutive episodes cut by their row ranges and converted into their
    rows of the output, so that what is held is the outputs and a few MB of one file's rows (the conversions work
    row by row). A run whose rows follow one another in the file is read in batches of BATCH_ROWS rows; one with
    gaps, overlaps or episodes out of row order is read whole and gathered.
    None where a row range or a column is odd (rows past the file's end, no rows, nulls, rows of unequal widths, not
    numbers, widths that differ between files) or a conversion fails: `_episode_columns` then gives the values, or
    the error, episode by episode."""
    columns = list(dict.fromkeys(column for column, _ in wanted.values()))
    starts = np.array([ep.data_row for ep in dataset.episodes])
    out: dict[str, np.ndarray] = {}
    widths: dict[str, tuple] = {}
    first, at = 0, 0

    def place(table, rows, size: int, to: int) -> bool:
        """Convert `rows` of `table` (a slice or row numbers; `size` of them) into the outputs at row `to`."""
        matrices = {}
        for name in columns:
            matrix = _matrix(table.column(name), table.num_rows)
            if matrix is None or widths.setdefault(name, matrix.shape[1:]) != matrix.shape[1:]:
                return False
            matrices[name] = matrix[rows]
        for key, (name, convert) in wanted.items():
            try:
                part = convert(matrices[name])
            except (KeyError, TypeError, ValueError):   # e.g. no quantiles: said where every file has been read
                return False
            if key not in out:
                out[key] = np.empty((int(lengths.sum()), *part.shape[1:]), dtype=part.dtype)
            out[key][to:to + size] = part
        return True

    for file, run in itertools.groupby(dataset.episodes, key=lambda ep: ep.data_file):
        head = next(run)
        stop = first + 1 + sum(1 for _ in run)
        path = dataset.path(file)
        parquet = open_parquet(path, head.index, streaming=True)
        start, length = starts[first:stop], lengths[first:stop]
        if (start < 0).any() or (length < 1).any() or (start + length > parquet.metadata.num_rows).any():
            return None
        size = int(length.sum())
        if np.array_equal(start[1:], (start + length)[:-1]):   # the run's rows in order, one after another
            low, high, offset = int(start[0]), int(start[0]) + size, 0
            for batch in iter_batches(parquet, path, columns, head.index, batch_size=BATCH_ROWS):
                lo, hi = max(low, offset), min(high, offset + batch.num_rows)
                if lo < hi and not place(batch, slice(lo - offset, hi - offset), hi - lo, at + lo - low):
                    return None
                offset += batch.num_rows
                if offset >= high:
                    break
        else:   # gaps, overlaps or episodes out of row order: each range's rows, in episode order
            table = read_row_groups(parquet, path, list(range(parquet.metadata.num_row_groups)), columns,
                                    head.index)   # the file opened above, not opened again
            rows = np.repeat(start - np.cumsum(length) + length, length) + np.arange(size)
            if not place(table, rows, size, at):
                return None
        first, at = stop, at + size
    return out or None   # no episode: `_episode_columns` says so


def _matrix(column, num_rows: int) -> np.ndarray | None:
    """`column_matrix` of a whole column of numbers without nulls whose rows all hold the same number (one or
    more) of values: any run of its rows is then that run's own `column_matrix`. None for any other column."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column   # a batch's: one chunk
    if array.null_count:
        return None
    values = array
    if is_list_type(array.type):
        if not pa.types.is_fixed_size_list(array.type):
            widths = np.diff(to_numpy(array.offsets))
            if (widths != widths[0]).any():   # (rows: at least one, as every episode's range holds one)
                return None
        values = list_values(array)
        if len(values) == 0:
            return None
    if values.null_count or numpy_dtype(values.type) is None:
        return None
    return column_matrix(array, num_rows)


def _episode_columns(dataset: Dataset, columns: list[str]) -> dict[str, np.ndarray]:
    """Each column's values of every frame, read and cut episode by episode: the values, or the error naming the
    episode, of a dataset `_whole_columns` finds odd."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in columns}
    tables: dict[str, object] = {}
    for ep in dataset.episodes:
        if ep.data_file not in tables:
            tables = {ep.data_file: read_parquet(dataset.path(ep.data_file), columns, ep.index)}
        table = tables[ep.data_file].slice(ep.data_row, ep.length)
        if table.num_rows != ep.length:
            raise LerodocError(f"holds fewer rows than the episode's {ep.length}", file=ep.data_file,
                               episode=ep.index)
        for name in columns:
            parts[name].append(column_matrix(table.column(name), ep.length))
    return {name: np.concatenate(parts[name]) for name in columns}


def pad_tokens(tokenizer: Tokenizer, texts: list[str], length: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompts' token ids right-padded (and cut) to `length`, and the mask of real tokens: the one form
    training batches and inference share. Longer prompts are cut (longest_prompt sizes the run's length)."""
    tokens = np.zeros((len(texts), length), np.int64)
    lengths = np.zeros(len(texts), np.int64)
    for i, ids in enumerate(tokenizer.encode(texts)):
        lengths[i] = min(len(ids), length)
        tokens[i, :lengths[i]] = ids[:lengths[i]]
    return tokens, np.arange(length)[None] < lengths[:, None]


def prompt_text(task: str, state: np.ndarray | None) -> str:
    """openpi's pi05 prompt; the state (normalised) is digitised into 256 bins over [-1, 1]: 0..255, and -1 below
    -1 (openpi and lerobot's processor do not clip there, so neither does training)."""
    cleaned = task.strip().replace("_", " ").replace("\n", " ")
    if state is None:
        return f"Task: {cleaned};\nAction: "
    bins = np.digitize(state, np.linspace(-1, 1, STATE_BINS + 1)[:-1]) - 1
    return f"Task: {cleaned}, State: {' '.join(map(str, bins))};\nAction: "


class Tokenizer:
    """A SentencePiece model, loaded on first use (each DataLoader worker loads its own)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._sp = None

    @property
    def sp(self):
        if self._sp is None:
            # sentencepiece: optional, loaded only where a tokenizer is built or read
            import sentencepiece
            self._sp = sentencepiece.SentencePieceProcessor(model_file=str(self.path))
        return self._sp

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts, add_bos=True)

    def __getstate__(self):
        return {"path": self.path, "_sp": None}


def longest_prompt(frames: Frames, tasks: list[str], tokenizer: Tokenizer, state_in_prompt: bool,
                   sample: int = 4096, seed: int = 0) -> int:
    """Token count of the longest prompt over every task and `sample` random frames (all when fewer)."""
    rows = np.arange(len(frames))
    if len(rows) > sample:
        rows = np.random.default_rng(seed).choice(rows, sample, replace=False)
    texts = [prompt_text(tasks[frames.task[i]], frames.state[i] if state_in_prompt else None) for i in rows]
    texts += [prompt_text(task, None) for task in tasks]
    return max(len(ids) for ids in tokenizer.encode(texts))


@functools.lru_cache(maxsize=2)
def _permutation(seed: int, epoch: int, total: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(total)


def batch_rows(step: int, global_batch: int, total: int, seed: int) -> np.ndarray:
    """The sorted frame rows of global batch `step`: a slice of concatenated seeded permutations."""
    start, need, parts = step * global_batch, global_batch, []
    while need:
        epoch, offset = divmod(start, total)
        take = min(need, total - offset)
        parts.append(_permutation(seed, epoch, total)[offset:offset + take])
        start, need = start + take, need - take
    return np.sort(np.concatenate(parts))


def step_noise(step: int, seed: int, global_batch: int, horizon: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flow-matching noise (G, H, width) and times (G,) of global batch `step`, t ~ Beta(1.5, 1) * 0.999 + 0.001."""
    # torch only where noise and batches are made: load_frames loads none
    import torch
    return _draws(torch.Generator().manual_seed(seed * 1_000_003 + step), global_batch, horizon, width)


def held_out_noise(seed: int, count: int, horizon: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The one draw of noise and times the held-out loss uses at every evaluation (its own generator, seeded by
    the run's seed alone: no training step's draw)."""
    # torch only where noise and batches are made: load_frames loads none
    import torch
    return _draws(torch.Generator().manual_seed(-1 - seed), count, horizon, width)


def held_out_rows(frames: Frames, episodes: np.ndarray, limit: int) -> np.ndarray:
    """The frame rows the held-out loss is measured on: every frame of the held-out `episodes` (positions in
    dataset.episodes), or `limit` of them evenly spaced when there are more (the same rows at every evaluation)."""
    rows = np.flatnonzero(np.isin(frames.episode, episodes))
    if len(rows) > limit:
        rows = rows[np.linspace(0, len(rows) - 1, limit).round().astype(np.int64)]
    return rows


def _draws(g: torch.Generator, count: int, horizon: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    # torch only where noise and batches are made: load_frames loads none
    import torch
    noise = torch.randn(count, horizon, width, generator=g)
    u = torch.rand(count, 2, generator=g, dtype=torch.float64)
    # Beta(1.5, 1) has CDF x^1.5: inverse transform sampling with the first uniform
    time = (u[:, 0] ** (1 / 1.5) * 0.999 + 0.001).float()
    return noise, time


def __getattr__(name: str):
    """`TrainingBatches`, made on first use (PEP 562): it is a torch IterableDataset, and importing this module for
    DataSpec or load_frames loads no torch. Made once, so it pickles by name like a class defined at the top."""
    if name != "TrainingBatches":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # torch only where noise and batches are made: load_frames loads none
    import torch

    class TrainingBatches(_Batches, torch.utils.data.IterableDataset):
        __doc__ = _Batches.__doc__
        __qualname__ = "TrainingBatches"

    globals()[name] = TrainingBatches
    return TrainingBatches


class _Batches:
    """This rank's batches for steps [start, stop), each a dict of tensors (see the module docstring)."""

    def __init__(self, dataset: Dataset, frames: Frames, spec: DataSpec, tokenizer: Tokenizer, *, seed: int,
                 batch_per_device: int, rank: int, world: int, start: int, stop: int, noise_width: int,
                 rows: np.ndarray | None = None):
        """`rows`: the frames training samples from (sorted; None: every frame)."""
        super().__init__()
        self.rows = rows
        self.root, self.frames, self.spec, self.tokenizer = dataset.root, frames, spec, tokenizer
        self.tasks = dataset.tasks
        self.videos = [[(ep.videos[k].file, ep.videos[k].from_timestamp) for k in spec.cameras]
                       for ep in dataset.episodes]
        self.seed, self.batch, self.rank, self.world = seed, batch_per_device, rank, world
        self.start, self.stop, self.noise_width = start, stop, noise_width
        self.tolerance_s = 0.5 / dataset.info.fps
        self.reader: FrameReader | None = None

    def __iter__(self):
        # torch and PyAV only where batches are made: load_frames loads neither
        import torch
        from lerodoc.pi05.frames import FrameReader
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        self.reader = FrameReader(self.spec.image_size, self.tolerance_s)
        try:
            for step in range(self.start + worker, self.stop, workers):
                yield self.make(step)
        finally:
            self.reader.close()

    def make(self, step: int) -> dict[str, torch.Tensor]:
        G, H = self.batch * self.world, self.spec.action_horizon
        if self.rows is None:
            rows = batch_rows(step, G, len(self.frames), self.seed)
        else:
            rows = self.rows[batch_rows(step, G, len(self.rows), self.seed)]
        return self.sample(step, rows, *step_noise(step, self.seed, G, H, self.noise_width))

    def sample(self, step: int, rows: np.ndarray, noise: torch.Tensor, time: torch.Tensor,
               padding: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        """This rank's part of the global batch of frame `rows` (G of them) with their noise and times; the rows
        where `padding` is True count as no target (they fill the held-out set's last batch)."""
        # torch only where noise and batches are made: load_frames loads none
        import torch
        H, f = self.spec.action_horizon, self.frames
        chunk = rows[:, None] + np.arange(H)                         # (G, H) rows of the targets
        is_pad = chunk >= f.end(rows)[:, None]
        if padding is not None:
            is_pad |= padding[:, None]
        real_steps = int((~is_pad).sum())
        part = slice(self.rank * self.batch, (self.rank + 1) * self.batch)
        rows, chunk, is_pad = rows[part], chunk[part], is_pad[part]
        chunk = np.minimum(chunk, f.end(rows)[:, None] - 1)
        texts = [prompt_text(self.tasks[f.task[i]], f.state[i] if self.spec.state_in_prompt else None) for i in rows]
        tokens, masks = pad_tokens(self.tokenizer, texts, self.spec.max_token_len)
        return {"step": torch.tensor(step),
                "images": torch.from_numpy(self.images(rows)),
                "tokens": torch.from_numpy(tokens),
                "token_masks": torch.from_numpy(masks),
                "actions": torch.from_numpy(f.action[chunk]),
                "action_is_pad": torch.from_numpy(is_pad),
                "noise": noise[part], "time": time[part],
                "real_steps": torch.tensor(real_steps)}

    def held_out(self, rows: np.ndarray) -> list[dict[str, torch.Tensor]]:
        """This rank's batches of the held-out frame `rows`, with `held_out_noise`: global batches of G rows, the
        last one filled up with copies of its first row marked as padding, so that every rank runs as many
        forward passes of the same shape (FSDP's collectives need that)."""
        # torch and PyAV only where batches are made: load_frames loads neither
        import torch
        from lerodoc.pi05.frames import FrameReader
        G, H = self.batch * self.world, self.spec.action_horizon
        noise, time = held_out_noise(self.seed, len(rows), H, self.noise_width)
        self.reader = FrameReader(self.spec.image_size, self.tolerance_s)
        batches = []
        try:
            for start in range(0, len(rows), G):
                part = rows[start:start + G]
                fill = G - len(part)
                padding = np.arange(G) >= len(part)
                first = slice(start, start + 1)
                batches.append(self.sample(-1, np.concatenate([part, np.repeat(part[:1], fill)]),
                                           torch.cat([noise[start:start + G], noise[first].expand(fill, -1, -1)]),
                                           torch.cat([time[start:start + G], time[first].expand(fill)]), padding))
        finally:
            self.reader.close()
        return batches

    def images(self, rows: np.ndarray) -> np.ndarray:
        """(B, cameras, S, S, 3) uint8; each file's frames are read in one sorted pass."""
        S, cams = self.spec.image_size, len(self.spec.cameras)
        out = np.zeros((len(rows), cams, S, S, 3), np.uint8)
        wanted: dict[str, list[tuple[int, int, float]]] = {}
        for b, row in enumerate(rows):
            for c, (file, offset) in enumerate(self.videos[self.frames.episode[row]]):
                wanted.setdefault(file, []).append((b, c, offset + float(self.frames.timestamp[row])))
        for file, items in wanted.items():
            decoded = self.reader.read(self.root / file, np.array([t for _, _, t in items]),
                                       [(int(self.frames.episode[rows[b]]), self.spec.cameras[c]) for b, c, _ in items])
            for (b, c, _), image in zip(items, decoded):
                out[b, c] = image
        return out
