"""Wide datasets (issue 37's breadth: an exporter that stores each sensor as its own feature), where a cost grows with
the files times the features rather than with the bytes:

- a write to v2.1 (a parquet file an episode) from one source file is split over the workers: its cost is per
  output file (a writer, a footer, a read-back and digests each), and one job per source file ran it on one core
  (400 files of 302 features: 23 s in one process), with the same bytes whatever the workers;
- v2.1's episodes_stats.jsonl is written from the stats' columns, each column listed once, a block of episodes at a
  time, with the lines the per-episode dicts give (a row without a stat leaves it out);
- promotion's check for cameras info.json does not declare reads no per-episode stats when no mp4 file lies in an
  undeclared folder (reading back a 302-feature v2.1 output's stats file took 2.5 s of a convert).
"""

from __future__ import annotations

import filecmp
import json

import numpy as np
import pytest

from lerodoc.dataset import Dataset
from lerodoc.formats import v21
from lerodoc.formats.jsonl import stats_to_json
from lerodoc.formats.model import Episode, StatsRow
from lerodoc.formats.stats import StatsTable
from lerodoc.ops import rewrite
from lerodoc.ops.convert import convert
from lerodoc.promote import kept
from tests.fixtures.factory import make_dataset


def _same_tree(a, b) -> None:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    _, mismatch, errors = filecmp.cmpfiles(a, b, [str(f) for f in files], shallow=False)
    assert not mismatch and not errors, (mismatch, errors)


def test_a_v21_write_from_one_source_file_is_split_over_the_workers(tmp_path, monkeypatch):
    src = make_dataset(tmp_path / "src", version="v3.0", episodes=9, lengths=5, cameras=(), state_dim=4,
                       action_dim=4, episodes_per_file=9).root
    assert len(Dataset.open(src).data_files()) == 1
    jobs, real = [], rewrite.plan

    def plan(*args, **kwargs):
        made = real(*args, **kwargs)
        jobs.append([len(job) for job in made.row_jobs])
        return made
    monkeypatch.setattr(rewrite, "plan", plan)
    convert(src, tmp_path / "small", to="v2.1", workers=2)   # 9 episodes of a few columns: one job, no pool
    monkeypatch.setattr(rewrite, "SPLIT_CELLS", 9)             # as if each file were worth a pool's start
    convert(src, tmp_path / "one", to="v2.1", workers=1)
    convert(src, tmp_path / "two", to="v2.1", workers=2)
    convert(src, tmp_path / "three", to="v2.1", workers=3)
    assert jobs == [[9], [9], [5, 4], [3, 3, 3]]
    _same_tree(tmp_path / "one", tmp_path / "small")
    _same_tree(tmp_path / "one", tmp_path / "two")
    _same_tree(tmp_path / "one", tmp_path / "three")


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("block", [2, 4096])   # episodes made into lines at a time: a part of them, or all
def test_episodes_stats_written_from_columns_are_the_episodes_dicts(tmp_path, monkeypatch, block):
    monkeypatch.setattr(v21, "JSON_ROWS", block)
    present = np.array([True, False, True])
    table = StatsTable({("a", "min"): np.arange(6.0).reshape(3, 2), ("a", "max"): np.arange(6.0, 12.0).reshape(3, 2),
                        ("a", "count"): np.array([[4], [5], [6]]), ("b", "mean"): np.array([[0.5], [1.5], [2.5]])},
                       3, present={("b", "mean"): present})
    episodes = [Episode(index=i, length=4, tasks=[], data_file="", data_row=0, from_index=0,
                        stats=StatsRow(table, i)) for i in range(3)]
    (tmp_path / "meta").mkdir()
    v21.write_stats(tmp_path, None, episodes, None)
    written = _lines(tmp_path / v21.EPISODES_STATS_PATH)
    assert written == [{"episode_index": i, "stats": stats_to_json(table.row(i))} for i in range(3)]
    assert written[1]["stats"] == {"a": {"min": [2.0, 3.0], "max": [8.0, 9.0], "count": [5]}}
    assert list(written[0]["stats"]) == ["a", "b"] and type(written[2]["stats"]["a"]["count"][0]) is int

    # episodes whose stats are dicts (no table's columns): the same lines, one dict at a time
    held = [Episode(index=i, length=4, tasks=[], data_file="", data_row=0, from_index=0, stats=table.row(i))
            for i in range(3)]
    v21.write_stats(tmp_path, None, held, None)
    assert _lines(tmp_path / v21.EPISODES_STATS_PATH) == written


def test_undeclared_cameras_read_no_stats_without_an_undeclared_video_folder(tmp_path, monkeypatch):
    root = make_dataset(tmp_path / "ds", version="v2.1", episodes=3, lengths=5, cameras=("front",)).root
    assert list(root.glob("videos/*/*/*.mp4"))

    def refuse(episodes):
        raise AssertionError("read the per-episode stats")
    monkeypatch.setattr(kept, "stats_features", refuse)
    assert kept.undeclared_cameras(Dataset.open(root)) == {}
    moved = root / "videos/chunk-000/observation.images.back"
    moved.mkdir()
    (moved / "episode_000000.mp4").write_bytes(b"")
    try:
        kept.undeclared_cameras(Dataset.open(root))
    except AssertionError as exc:
        assert "per-episode stats" in str(exc)
    else:
        raise AssertionError("an mp4 file in an undeclared folder must have the stats read")


def test_the_load_check_names_every_file_of_a_schema_it_asks_once(tmp_path, monkeypatch):
    """promote.load.problems asks schema_problems once for files of one schema in a row (400 files of 302
    features: 1.1 s), and still names each file, and a file of another schema gets its own answer."""
    import pyarrow.parquet as pq
    from lerodoc.formats import hf
    from lerodoc.promote import load
    root = make_dataset(tmp_path / "ds", version="v2.1", episodes=4, lengths=5, cameras=()).root
    files = sorted(root.glob("data/*/*.parquet"))
    for path in files[:3]:   # a column info.json does not declare: LAY038 in each
        table = pq.read_table(path)
        pq.write_table(table.append_column("extra", table.column("index")), path)
    asked, real = [], hf.schema_problems

    def schema_problems(features, schema):
        asked.append(schema)
        return real(features, schema)
    monkeypatch.setattr(load, "schema_problems", schema_problems)
    found = load.problems(root)
    assert [p.split(":")[0] for p in found] == [str(f.relative_to(root)) for f in files[:3]]
    assert all("LAY038" in p for p in found)
    assert len(asked) == 2   # the three files of one schema, then the untouched one
