"""The "exact" claims of flatten, convert and merge, held on every column of every episode with no tolerance.

Rows are compared as Python values (`rows_by_episode`): floats equal bit for bit, lists element for element. The
bookkeeping columns a merge renumbers (episode_index, index, task_index) are compared with the numbers they must
have; everything else is the source's, unchanged. Per-episode stats that a command carries over from its input
are compared with `np.array_equal` (atol 0), and dataset min/max (which no float sum touches) likewise.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from tests.fixtures.factory import make_dataset
from tests.helpers import rows_by_episode, run_cli

RENUMBERED = ("episode_index", "index", "task_index")


def assert_same_stats(a: dict, b: dict, features) -> None:
    for name in features:
        assert a[name].keys() == b[name].keys(), name
        for stat, value in a[name].items():
            assert np.array_equal(np.ravel(value), np.ravel(b[name][stat])), (name, stat, value, b[name][stat])


@pytest.mark.parametrize("to,version", [("v3.0", "v2.1"), ("v2.1", "v3.0")])
def test_convert_copies_every_column_and_episode_stat_exactly(tmp_path, to, version):
    fixture = make_dataset(tmp_path / "src", version=version, dataset_id=13, episodes=3, lengths=[9, 12, 10],
                           episodes_per_file=2, cameras=("observation.images.top",))
    run_cli("convert", fixture.root, "-o", tmp_path / "out", "--to", to)
    before, after = rows_by_episode(fixture.root), rows_by_episode(tmp_path / "out")
    assert list(after) == list(before)
    for e in before:
        assert list(after[e]) == list(before[e]), e          # every column, in order
        for column in before[e]:
            assert after[e][column] == before[e][column], (e, column)
    src, out = Dataset.open(fixture.root), Dataset.open(tmp_path / "out")
    numeric = [k for k in src.info.features if src.info.features[k]["dtype"] not in ("video", "image")]
    for a, b in zip(src.episodes, out.episodes):
        assert_same_stats(a.stats, b.stats, [*numeric, "observation.images.top"])


def test_flatten_copies_every_column_exactly(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", dataset_id=11, episodes=3, lengths=[9, 12, 10],
                           vector_storage="list", cameras=())
    info = json.loads((fixture.root / "meta/info.json").read_text())
    info["features"]["gripper"] = {"dtype": "float64", "shape": [1], "names": None}
    (fixture.root / "meta/info.json").write_text(json.dumps(info, indent=4))
    for path in sorted(fixture.root.glob("data/*/*.parquet")):   # a list<1> column of distinct float64s
        table = pq.read_table(path)
        index = table.column("index").to_pylist()
        pq.write_table(table.append_column("gripper", pa.array([[i / 3] for i in index], pa.list_(pa.float64()))),
                       path)
    run_cli("flatten", fixture.root, "-o", tmp_path / "out")
    before, after = rows_by_episode(fixture.root), rows_by_episode(tmp_path / "out")
    assert list(after) == list(before)
    for e in before:
        assert set(after[e]) == set(before[e]), e
        for column in before[e]:
            want = [v[0] for v in before[e][column]] if column == "gripper" else before[e][column]
            assert after[e][column] == want, (e, column)


def test_merge_copies_every_column_exactly_and_renumbers_only_the_bookkeeping(tmp_path):
    a = make_dataset(tmp_path / "a", version="v3.0", dataset_id=14, episodes=3, lengths=[9, 12, 10],
                     cameras=("observation.images.top",))
    b = make_dataset(tmp_path / "b", version="v2.1", dataset_id=15, episodes=2, lengths=[11, 8],
                     cameras=("observation.images.top",), tasks=("place the cube", "wipe the table"))
    run_cli("merge", a.root, b.root, "-o", tmp_path / "out", "--exclude", "A:1")
    picks = [(a, 0), (a, 2), (b, 0), (b, 1)]
    rows = {id(f): rows_by_episode(f.root) for f in (a, b)}
    after = rows_by_episode(tmp_path / "out")
    out = Dataset.open(tmp_path / "out")
    assert list(after) == list(range(len(picks)))
    start = 0
    for e, (fixture, source) in enumerate(picks):
        got, want = after[e], rows[id(fixture)][source]
        assert set(got) == set(want), e
        for column in want:
            if column not in RENUMBERED:
                assert got[column] == want[column], (e, column)
        n = fixture.lengths[source]
        task = out.tasks.index(fixture.spec.tasks[source % len(fixture.spec.tasks)])
        assert (got["episode_index"], got["index"], got["task_index"]) == ([e] * n, list(range(start, start + n)),
                                                                           [task] * n)
        start += n
        copied = [k for k in ("observation.state", "action", "timestamp", "frame_index", "observation.images.top")]
        assert_same_stats(Dataset.open(fixture.root).episodes[source].stats, out.episodes[e].stats, copied)
    everything = np.concatenate([np.array(after[e]["observation.state"]) for e in after])
    assert np.array_equal(out.stats["observation.state"]["min"], everything.min(axis=0))
    assert np.array_equal(out.stats["observation.state"]["max"], everything.max(axis=0))
