"""load_frames on many episodes (issue 37): each column of a data file is read into numpy once and cut by the
episodes' row ranges, so the Arrow work per data file does not grow with its episodes, and importing
lerodoc.pi05.data (train's index build) loads neither torch nor PyAV.

- the frames equal an oracle that reads each episode's rows with pyarrow on its own (values, dtypes, order), on
  contiguous files and on episodes listed out of row order, across files, with a gap or an overlap;
- `column_matrix` runs once per column and data file: as often for 2,000 episodes as for 200 in the same files;
- a file whose episodes' rows follow one another is converted BATCH_ROWS rows at a time (never held whole), to the
  same frames;
- a row range past its file's end is still the error naming that episode.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.dataset import numeric_v30
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.pi05 import data
from lerodoc.pi05.data import DataSpec, Frames, load_frames, normalise
from tests.fixtures.factory import make_dataset
from tests.helpers import importable, require

ROOT = Path(__file__).resolve().parents[1]
DIMS = {"observation.state": 6, "action": 5}
SPEC = DataSpec(action_key="action", state_key="observation.state", cameras=(), action_horizon=8, image_size=16,
                state_in_prompt=True, max_token_len=48)
COLUMNS = 4   # action, timestamp, task_index, observation.state


def quantiles(dims: dict[str, int]) -> dict:
    """q01/q99 for numeric_v30's features (it writes no stats), different per channel."""
    return {key: {"q01": -np.linspace(0.5, 3.0, d), "q99": np.linspace(0.5, 3.0, d) + 0.25} for key, d in dims.items()}


def two_files(root: Path, episodes: int) -> Path:
    """A v3.0 dataset of `episodes` episodes of 7 or 8 frames in two data files, no video."""
    frames = 7 * episodes + episodes // 3
    return numeric_v30(root, frames=frames, episodes=episodes, dims=DIMS, rows_per_file=frames // 2 + 8)


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> dict[int, Path]:
    return {n: two_files(tmp_path_factory.mktemp(f"e{n}") / "ds", n) for n in (200, 2000)}


def oracle(dataset: Dataset, spec: DataSpec, stats: dict | None = None, raw_action: bool = False) -> dict:
    """load_frames' fields computed the plain way: each episode's rows read and converted on their own."""
    stats = stats or dataset.stats
    keys = [spec.action_key, "timestamp", "task_index"] + ([spec.state_key] if spec.state_key else [])
    rows = {key: [] for key in keys}
    for ep in dataset.episodes:
        table = pq.read_table(dataset.path(ep.data_file), columns=keys).slice(ep.data_row, ep.length)
        assert table.num_rows == ep.length
        for key in keys:
            rows[key] += table.column(key).to_pylist()
    schema = pq.read_schema(dataset.path(dataset.episodes[0].data_file))
    kinds = {key: schema.field(key).type for key in keys}
    kinds = {key: np.dtype((kind.value_type if pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind) else kind)
                           .to_pandas_dtype()) for key, kind in kinds.items()}
    values = {key: np.array(rows[key], dtype=kinds[key]).reshape(len(rows[key]), -1) for key in keys}
    lengths = [ep.length for ep in dataset.episodes]

    def normalised(key):
        return normalise(values[key], np.ravel(stats[key]["q01"]), np.ravel(stats[key]["q99"]))

    return {"action": normalised(spec.action_key),
            "state": normalised(spec.state_key) if spec.state_key else None,
            "timestamp": values["timestamp"].reshape(-1).astype(np.float64),
            "task": values["task_index"].reshape(-1).astype(np.int32),   # rows of meta/tasks: int32 holds them
            "episode": np.repeat(np.arange(len(lengths), dtype=np.int32), lengths),
            "ends": np.cumsum(lengths),
            "raw_action": values[spec.action_key].astype(np.float32) if raw_action else None}


def assert_same(frames: Frames, expected: dict) -> None:
    for name, want in expected.items():
        got = getattr(frames, name)
        if want is None:
            assert got is None, name
            continue
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
        assert np.array_equal(got, want), name
        assert got.flags.writeable, name


def counted(monkeypatch) -> list[int]:
    calls = []
    real = data.column_matrix

    def column_matrix(column, num_rows):
        calls.append(num_rows)
        return real(column, num_rows)

    monkeypatch.setattr(data, "column_matrix", column_matrix)
    return calls


@pytest.mark.parametrize("raw_action, state", [(False, True), (True, False)])
def test_frames_equal_each_episode_read_on_its_own(many, raw_action, state):
    dataset = Dataset.open(many[2000])
    spec = SPEC if state else replace(SPEC, state_key=None)
    stats = quantiles(DIMS)
    assert_same(load_frames(dataset, spec, stats, raw_action=raw_action), oracle(dataset, spec, stats, raw_action))


def test_column_matrix_runs_once_per_column_and_file_however_many_episodes(many, monkeypatch):
    calls, seen = {}, counted(monkeypatch)
    for n, root in many.items():
        dataset = Dataset.open(root)
        assert len(dataset.episodes) == n and len(dataset.data_files()) == 2
        seen.clear()
        load_frames(dataset, SPEC, quantiles(DIMS))
        calls[n] = list(seen)
    assert {n: len(seen) for n, seen in calls.items()} == {200: 2 * COLUMNS, 2000: 2 * COLUMNS}
    for n, seen in calls.items():   # each call a whole file's column
        dataset = Dataset.open(many[n])
        assert sorted(set(seen)) == sorted(pq.read_metadata(dataset.path(f)).num_rows for f in dataset.data_files())


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_a_file_read_in_batches_gives_the_same_frames_and_is_never_held_whole(many, small, monkeypatch, batch):
    monkeypatch.setattr(data, "BATCH_ROWS", batch)
    seen = counted(monkeypatch)
    for root, stats in ((many[200], quantiles(DIMS)), (small, None)):
        dataset = Dataset.open(root)
        seen.clear()
        assert_same(load_frames(dataset, SPEC, stats, raw_action=True), oracle(dataset, SPEC, stats, raw_action=True))
        rows = sum(ep.length for ep in dataset.episodes)
        assert max(seen) <= batch and sum(seen) == COLUMNS * rows   # every row converted once, a batch at a time


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """make_dataset's v3.0 (with stats): 9 episodes of unequal lengths, 3 a data file."""
    return make_dataset(tmp_path_factory.mktemp("small") / "ds", version="v3.0", episodes=9,
                        lengths=[20 + 3 * e for e in range(9)], episodes_per_file=3, cameras=()).root


@pytest.mark.parametrize("order", [
    "as written", "reversed", "across files", "gap", "overlap",
])
def test_episodes_out_of_row_order_are_cut_by_their_ranges(small, order):
    dataset = Dataset.open(small)
    eps = dataset.episodes
    if order == "reversed":
        eps.reverse()
    elif order == "across files":   # each file read once per run of its episodes, as before
        eps[:] = [eps[i] for i in (0, 3, 1, 4, 2, 5, 8, 7, 6)]
    elif order == "gap":
        del eps[1]
    elif order == "overlap":
        eps[1].data_row = 5
    assert_same(load_frames(dataset, SPEC, raw_action=True), oracle(dataset, SPEC, raw_action=True))


@pytest.mark.parametrize("storage", ["fixed", "list"])
def test_list_and_fixed_size_list_columns_read_alike(tmp_path, storage):
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=5, lengths=[4, 9, 1, 7, 5], episodes_per_file=2,
                        cameras=(), vector_storage=storage).root
    dataset = Dataset.open(root)
    assert_same(load_frames(dataset, SPEC, raw_action=True), oracle(dataset, SPEC, raw_action=True))


def test_a_range_past_the_files_end_names_its_episode(small):
    dataset = Dataset.open(small)
    dataset.episodes[4].data_row = 70   # file 1 holds episodes 3-5: 29 + 32 + 35 rows; 70 + 32 > 96
    with pytest.raises(LerodocError, match="holds fewer rows than the episode's 32") as caught:
        load_frames(dataset, SPEC)
    assert caught.value.episode == 4


@pytest.mark.parametrize("shift", [-1, +1])
def test_a_task_index_without_a_task_is_refused_not_wrapped_nor_read_from_the_end(small, tmp_path, shift):
    """task_index is kept in int32 (a row of meta/tasks): one below 0 would index the task list from its end, one
    past it beyond any task; either is refused, never cast."""
    root = tmp_path / "ds"
    shutil.copytree(small, root)
    dataset = Dataset.open(root)
    assert load_frames(dataset, SPEC).task.dtype == np.int32
    path = dataset.path(dataset.episodes[0].data_file)
    table = pq.read_table(path)
    at = table.schema.get_field_index("task_index")
    wrong = -1 if shift < 0 else len(dataset.tasks)
    column = pa.array(np.full(table.num_rows, wrong), type=table.schema.field(at).type)
    pq.write_table(table.set_column(at, table.schema.field(at), column), path)
    dataset = Dataset.open(root)
    with pytest.raises(LerodocError, match=f"task_index {wrong} has no task") as caught:
        load_frames(dataset, SPEC)
    assert caught.value.field == "task_index"


def test_importing_the_data_module_loads_no_torch_nor_pyav():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(ROOT)}
    code = "import sys, lerodoc.pi05.data; print(sorted({'torch', 'av'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_training_batches_is_still_a_torch_iterable_dataset_that_pickles_by_name():
    require(importable("torch"), "lerodoc's train extra (torch) is not installed")
    import pickle

    import torch

    from lerodoc.pi05.data import TrainingBatches
    assert issubclass(TrainingBatches, torch.utils.data.IterableDataset)
    assert data.TrainingBatches is TrainingBatches and pickle.loads(pickle.dumps(TrainingBatches)) is TrainingBatches
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        data.nothing
