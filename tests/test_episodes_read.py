"""v3.0's episodes metadata read column by column (issue 37) gives the episodes the row-by-row reading gives, and a
value the column reading cannot take falls back to the row reading, which names the row (exit 3, no traceback)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.formats import v30
from tests.helpers import run_cli

MEMBER = Path(__file__).parent / "zoo" / "members" / "lerobot-0.6.1-record"   # v3.0 with a camera


def _episodes_file(root: Path) -> Path:
    return sorted(root.glob(v30.EPISODES_GLOB))[0]


def _recast(root: Path, name: str, kind: pa.DataType) -> None:
    path = _episodes_file(root)
    table = pq.read_table(path)
    pq.write_table(table.set_column(table.column_names.index(name), name, table[name].cast(kind)), path)


def _plain(ds: Dataset) -> list[tuple]:
    return [(e.index, e.length, e.tasks, e.data_file, e.data_row, e.from_index, e.videos, e.source)
            for e in ds.episodes]


@pytest.fixture
def copy(tmp_path):
    shutil.copytree(MEMBER, tmp_path / "ds")
    return tmp_path / "ds"


def test_rows_read_column_by_column_equal_rows_read_one_by_one(copy):
    fast = _plain(Dataset.open(copy))
    assert fast and any(e[6] for e in fast)   # episodes with camera windows
    # float lengths and string episode indices: the column reading declines, the row reading takes them as lerobot does
    _recast(copy, "length", pa.float64())
    _recast(copy, "episode_index", pa.string())
    assert _plain(Dataset.open(copy)) == fast


@pytest.mark.parametrize("named", [1, 1 << 20])
def test_files_named_per_run_or_per_distinct_pair_are_the_same(tmp_path, monkeypatch, named):
    """A row's data and video files are named per run of rows (few runs) or per distinct (chunk, file) pair (many),
    with the same paths; episodes of one file that are not consecutive (rows reordered) are named alike."""
    from tests.fixtures.factory import make_dataset
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=7, lengths=4, episodes_per_file=2,
                        cameras=("observation.images.top",)).root
    want = _plain(Dataset.open(root))
    assert len({e[3] for e in want}) == 4
    path = _episodes_file(root)
    table = pq.read_table(path)
    order = pa.array([0, 2, 4, 6, 1, 3, 5])   # runs of one row: files 0,1,2,3,0,1,2
    pq.write_table(table.take(order), path)
    monkeypatch.setattr(v30, "RUNS_NAMED", named)
    got = _plain(Dataset.open(root))
    assert sorted(got, key=lambda e: e[0]) == want


@pytest.mark.parametrize("named", [1, 1 << 20])
def test_pairs_a_path_template_names_alike_are_one_file_as_the_row_reading_has_them(tmp_path, monkeypatch, named):
    """A data_path without {chunk_index} makes two (chunk, file) pairs one path: its episodes' first rows inside it
    (data_row) count from the first episode listed in that path, as the row-by-row reading counts them."""
    from tests.fixtures.factory import make_dataset
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=7, lengths=4, episodes_per_file=2).root
    path = _episodes_file(root)
    table = pq.read_table(path)
    column = table.column_names.index("data/chunk_index")
    pq.write_table(table.set_column(column, "data/chunk_index", pa.array([0, 1, 0, 1, 0, 1, 0], pa.int64())), path)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["data_path"] = "data/chunk-000/file-{file_index:03d}.parquet"
    (root / "meta" / "info.json").write_text(json.dumps(info))
    monkeypatch.setattr(v30, "RUNS_NAMED", named)
    fast = _plain(Dataset.open(root))
    monkeypatch.setattr(v30, "_whole_columns", lambda *args: None)
    assert fast == _plain(Dataset.open(root))
    assert [e[4] for e in fast] == [0, 4, 0, 4, 0, 4, 0]


@pytest.mark.parametrize("kind", [pa.int64(), pa.uint64(), pa.uint32()])
def test_episodes_listed_out_of_row_order_get_the_first_rows_the_row_reading_gives(tmp_path, monkeypatch, kind):
    """A file's episodes listed out of row order (crafted): each episode's first row inside its data file counts
    from the first listed, negative where it comes before it, as the row-by-row reading (Python ints) has it, for
    unsigned dataset_from_index columns too."""
    from tests.fixtures.factory import make_dataset
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=5, lengths=4, episodes_per_file=2).root
    path = _episodes_file(root)
    table = pq.read_table(path).take(pa.array([1, 0, 2, 3, 4]))
    column = table.column_names.index("dataset_from_index")
    pq.write_table(table.set_column(column, "dataset_from_index", table["dataset_from_index"].cast(kind)), path)
    fast = _plain(Dataset.open(root))
    monkeypatch.setattr(v30, "_whole_columns", lambda *args: None)
    assert fast == _plain(Dataset.open(root))
    assert [e[4] for e in fast] == [0, -4, 0, 4, 0]


def test_a_value_neither_reading_takes_is_named_at_its_row(copy):
    path = _episodes_file(copy)
    table = pq.read_table(path)
    values = table["length"].to_pylist()
    values[1] = "many"
    pq.write_table(table.set_column(table.column_names.index("length"), "length", pa.array(
        [str(v) for v in values])), path)
    with pytest.raises(LerodocError, match="episodes metadata row 1 lacks or mistypes"):
        Dataset.open(copy)


def test_a_path_template_with_an_unknown_field_is_refused_not_a_crash(copy):
    info = json.loads((copy / "meta/info.json").read_text())
    info["data_path"] = "data/{chunk_index:03d}/{shard}.parquet"
    (copy / "meta/info.json").write_text(json.dumps(info))
    proc = run_cli("info", copy, "--json", check=False)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_task_lists_are_the_rows_with_one_str_per_text():
    """An episode's tasks read column-wise: each row a list equal to pyarrow's row (null and empty rows an empty
    list), every distinct text one str and every distinct list of texts one list, shared by the rows that hold it
    (a million episodes held 1M copies of a few; nothing changes an episode's list in place)."""
    import pyarrow as pa
    from lerodoc.formats.v30 import _task_lists
    kind = pa.list_(pa.string())
    rows = [["pick"], ["place", "pick"], None, [], ["pick"]]
    for column in (pa.array(rows, kind), pa.array(rows, kind).slice(1, 3), pa.array(rows[:2], pa.large_list(pa.string())),
                   pa.chunked_array([pa.array(rows[:2], kind), pa.array(rows[3:], kind)]),
                   pa.array([["pick", None]], kind), pa.array([[1], [2]])):
        got = _task_lists(pa.table({"tasks": column}))
        assert got == [list(v or []) for v in column.to_pylist()]
    got = _task_lists(pa.table({"tasks": pa.array(rows[3:] + rows[:2], kind)}))
    assert got[1][0] is got[2][0] is got[3][1] and got[1] is got[2] and got[1] is not got[3]
    assert _task_lists(pa.table({"length": [1, 2]})) == [[], []]
    single = [["pick"], ["place"], ["pick"], ["stack"]]   # a task a row, as lerobot records them
    for column in (pa.array(single, kind), pa.array(single, kind).slice(1, 3), pa.array(rows, kind).slice(0, 1)):
        got = _task_lists(pa.table({"tasks": column}))
        assert got == column.to_pylist()
    got = _task_lists(pa.table({"tasks": pa.array(single, kind)}))
    assert got[0] is got[2] and got[0] is not got[1]


def test_opening_a_dataset_imports_no_pyarrow_compute(tmp_path):
    """Reading the episodes (their task lists included) imports neither pandas nor pyarrow.compute: each costs every
    command tens to hundreds of milliseconds at start."""
    import subprocess
    import sys
    from tests.fixtures.factory import make_dataset
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=3, lengths=[3, 4, 5], cameras=()).root
    code = ("import sys; from lerodoc.dataset import Dataset; ds = Dataset.open(sys.argv[1]); "
            "assert ds.episodes[0].tasks; print(sorted(m for m in ('pandas', 'pyarrow.compute') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_episodes_without_cameras_share_one_empty_videos_mapping_that_refuses_changes(tmp_path):
    """An episode without cameras holds NO_VIDEOS, shared (an empty dict each was 64 bytes an episode), in every
    reader and in a rewrite's new episodes; a change in place raises (videos are replaced), and a worker process's
    copy is NO_VIDEOS again."""
    import pickle
    from lerodoc.formats.model import NO_VIDEOS, Episode
    from lerodoc.ops.merge import merge
    from tests.fixtures.factory import make_dataset
    for version in ("v2.1", "v3.0"):
        root = make_dataset(tmp_path / version, version=version, episodes=3, lengths=[3, 4, 5], cameras=()).root
        assert all(ep.videos is NO_VIDEOS for ep in Dataset.open(root).episodes), version
    merge([tmp_path / "v2.1", tmp_path / "v3.0"], tmp_path / "merged")
    assert all(ep.videos is NO_VIDEOS for ep in Dataset.open(tmp_path / "merged").episodes)
    ep = Episode(index=0, length=1, tasks=[], data_file="data.parquet", data_row=0, from_index=0)
    assert ep.videos is NO_VIDEOS and ep.videos == {} and dict(ep.videos) == {}
    for change in (lambda v: v.__setitem__("cam", 1), lambda v: v.update(cam=1), lambda v: v.pop("cam", None),
                   lambda v: v.setdefault("cam", 1), lambda v: v.clear()):
        with pytest.raises(TypeError, match="replaced"):
            change(ep.videos)
    assert pickle.loads(pickle.dumps(ep)).videos is NO_VIDEOS and NO_VIDEOS == {}
