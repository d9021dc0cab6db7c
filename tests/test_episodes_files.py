"""The v3.0 episodes metadata is written in files of bounded size (issue 37): at a million episodes one file would
be gigabytes, past every reader's memory budget, lerodoc's own included. Each file holds at most
`formats.v30.EPISODES_FILE_MB` MiB of Arrow columns; lerobot's loader reads the files in path order, as lerodoc does."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from lerodoc.formats import v30
from lerodoc.formats.model import stats_columns
from lerodoc.ops.merge import merge
from lerodoc.ops.validate import validate
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_from_fixture
from tests.lerobot_oracle import check_with_lerobot

CAMERAS = ("observation.images.top",)


def _split(tmp_path, monkeypatch):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=30, lengths=[4] * 30, cameras=CAMERAS)
    monkeypatch.setattr(v30, "EPISODES_FILE_MB", 0.02)   # about 20 KB a file: several files for 30 episodes
    merge([fixture.root], tmp_path / "out")
    return fixture, tmp_path / "out"


def test_episodes_metadata_files_are_bounded_and_numbered(tmp_path, monkeypatch):
    fixture, out = _split(tmp_path, monkeypatch)
    files = sorted(out.glob(v30.EPISODES_GLOB))
    assert len(files) > 2, files
    first = 0
    for path in files:
        table = pq.read_table(path)
        chunk, file = map(int, re.search(r"chunk-(\d+)/file-(\d+)", path.as_posix()).groups())
        assert set(table.column("meta/episodes/chunk_index").to_pylist()) == {chunk}
        assert set(table.column("meta/episodes/file_index").to_pylist()) == {file}
        assert table.column("episode_index").to_pylist() == list(range(first, first + table.num_rows))
        assert table.nbytes <= 1.05 * v30.EPISODES_FILE_MB * (1 << 20)   # the cap, and a file's own buffers' ends
        first += table.num_rows
    assert first == 30
    before, after = Dataset.open(fixture.root), Dataset.open(out)
    assert [(e.index, e.length, e.from_index, e.videos[CAMERAS[0]].from_timestamp) for e in after.episodes] == \
        [(e.index, e.length, e.from_index, e.videos[CAMERAS[0]].from_timestamp) for e in before.episodes]
    a, b = stats_columns(before.episodes), stats_columns(after.episodes)
    assert a.keys() == b.keys() and all(np.array_equal(a[k][0], b[k][0]) for k in a)
    assert validate(out, videos=True).errors == 0


def test_one_file_while_the_table_fits():
    """The cap: min(info's data_files_size_in_mb, EPISODES_FILE_MB), at least 1 MiB from info; chunks roll over."""
    info = v30.Info.__new__(v30.Info)
    info.data_files_size_in_mb, info.chunks_size = 100, 2
    assert v30._episodes_files(62 << 20, 20_000, info) == [(20_000, 0, 0)]
    assert v30._episodes_files(0, 0, info) == [(0, 0, 0)]
    files = v30._episodes_files(250 << 20, 1000, info)
    assert [f[1:] for f in files] == [(0, 0), (0, 1), (1, 0)] and sum(f[0] for f in files) == 1000
    info.data_files_size_in_mb = 0   # crafted: still 1 MiB a file, not one file per episode
    assert len(v30._episodes_files(10 << 20, 1000, info)) == 10


@pytest.mark.lerobot
def test_split_episodes_metadata_loads_in_lerobot(tmp_path, monkeypatch):
    fixture, out = _split(tmp_path, monkeypatch)
    check_with_lerobot(out, expect_from_fixture(fixture), backend="pyav")


def test_float_stats_are_split_by_byte_stream_and_the_rest_as_before(tmp_path, monkeypatch):
    """The episodes metadata's float stats are written BYTE_STREAM_SPLIT (a third less time to write, an eighth
    smaller); integer stats are not (readers before pyarrow 17 cannot decode split integers), and tasks are
    dictionary encoded. Both options take leaf paths: pyarrow ignores a list column's own name without a word (tasks
    had no dictionary until this test). What is read back is the same table either way."""
    _, out = _split(tmp_path, monkeypatch)
    for path in sorted(out.glob(v30.EPISODES_GLOB)):
        parquet = pq.ParquetFile(path)
        types = dict(zip(parquet.schema_arrow.names, parquet.schema_arrow.types))
        group = parquet.metadata.row_group(0)
        for i in range(group.num_columns):
            column = group.column(i)
            name = column.path_in_schema.split(".list.")[0]
            kind = getattr(types[name], "value_type", types[name])
            split = "BYTE_STREAM_SPLIT" in column.encodings
            assert split == (name.startswith("stats/") and kind in (pa.float32(), pa.float64())), (name, column)
        assert any("BYTE_STREAM_SPLIT" in group.column(i).encodings for i in range(group.num_columns))
        assert "RLE_DICTIONARY" in group.column(parquet.schema_arrow.names.index("tasks")).encodings
        table = parquet.read()
        pq.write_table(table, tmp_path / "plain.parquet")
        assert pq.read_table(tmp_path / "plain.parquet").equals(table)
