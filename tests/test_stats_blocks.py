"""The stats family takes the episodes a block at a time (issue 37): whole episodes metadata files while they fit in
BLOCK episodes, each file's stats let go after its last block, each data file read once however many blocks its
episodes fall in, and the dataset stats held to the pooled aggregate of the blocks'. Whatever the blocks, validate
finds exactly what one block of every episode finds, in the same order, with the same messages.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.checks import common, open_context, run_checks, stats as stats_family
from lerodoc.formats.model import stats_row
from lerodoc.tables.stats import aggregate
from tests.fixtures.defects_data import V30_DATA, edit_parquet, replace_column, rows_of, vectors
from tests.fixtures.factory import make_dataset

EPISODES, PER_META_FILE = 12, 4
META = "meta/episodes/chunk-000/file-{:03d}.parquet"


def _split_episodes_metadata(root) -> None:
    """The one episodes metadata file the factory writes, as files of PER_META_FILE episodes."""
    table = pq.read_table(root / META.format(0))
    for i, first in enumerate(range(0, table.num_rows, PER_META_FILE)):
        pq.write_table(table.slice(first, PER_META_FILE), root / META.format(i))


def _edit_stat(root, episode: int, column: str, change) -> None:
    path = root / META.format(episode // PER_META_FILE)
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    change(values[episode % PER_META_FILE])
    pq.write_table(replace_column(table, column, pa.array(values, table.schema.field(column).type)), path)


@pytest.fixture(scope="module")
def shelf(tmp_path_factory):
    """12 episodes in 3 metadata files and 4 data files of 3 episodes (data file 1 holds episodes of two metadata
    files), planted: a NaN in episode 1's data, episode 7's stated mean and episode 10's q01 off, and the dataset
    stats' mean off."""
    root = make_dataset(tmp_path_factory.mktemp("blocks") / "ds", version="v3.0", episodes=EPISODES,
                        episodes_per_file=3, lengths=[7 + (e % 5) for e in range(EPISODES)], cameras=(),
                        noise=0.3).root
    _split_episodes_metadata(root)

    def nan(table: pa.Table) -> pa.Table:
        state = vectors(table, "observation.state")
        state[rows_of(table, 1)[3], 2] = np.nan
        return replace_column(table, "observation.state",
                              pa.array(list(state), table.schema.field("observation.state").type))
    edit_parquet(root / V30_DATA.format(0), nan)
    _edit_stat(root, 7, "stats/action/mean", lambda v: v.__setitem__(3, v[3] + 0.25))
    _edit_stat(root, 10, "stats/observation.state/q01", lambda v: v.__setitem__(0, v[0] + 5.0))
    stats = json.loads((root / "meta/stats.json").read_text())
    stats["action"]["mean"][1] += 0.05
    (root / "meta/stats.json").write_text(json.dumps(stats))
    return root


def _findings(root) -> list[tuple]:
    return [(f.code, f.file, f.episode, f.feature, f.channel, f.message)
            for f in run_checks(open_context(root), families=("stats",))]


def test_blocks_find_what_one_block_finds(shelf, monkeypatch):
    whole = _findings(shelf)
    planted = {(code, episode, feature) for code, _, episode, feature, *_ in whole}
    assert {("STA050", 1, "observation.state"), ("STA040", 7, "action"), ("STA040", None, "action")} <= planted, whole
    assert any(code in ("STA040", "STA043") and episode == 10 for code, _, episode, *_ in whole), whole
    for block in (1, 3, 4, 5, 8):   # one episode, cutting through files, a file each, and files together
        monkeypatch.setattr(stats_family, "BLOCK", block)
        assert _findings(shelf) == whole, block


def test_blocks_follow_the_metadata_files(shelf, monkeypatch):
    monkeypatch.setattr(stats_family, "BLOCK", 4)
    assert stats_family._blocks(open_context(shelf)).bounds == [(0, 4), (4, 8), (8, 12)]
    monkeypatch.setattr(stats_family, "BLOCK", 8)
    assert stats_family._blocks(open_context(shelf)).bounds == [(0, 8), (8, 12)]
    monkeypatch.setattr(stats_family, "BLOCK", 3)
    assert stats_family._blocks(open_context(shelf)).bounds == [(0, 3), (3, 4), (4, 7), (7, 8), (8, 11), (11, 12)]
    monkeypatch.setattr(stats_family, "BLOCK", 1 << 16)
    assert stats_family._blocks(open_context(shelf)).bounds == [(0, 12)]


def test_each_metadata_file_is_let_go_after_its_last_block(shelf, monkeypatch):
    monkeypatch.setattr(stats_family, "BLOCK", 4)
    ctx = open_context(shelf)
    run_checks(ctx, families=("stats",))
    holders = [stats_row(ctx.dataset.episodes[e]).holder for e in (0, 4, 11)]   # episodes whose stats nobody read
    # the last block's too, once the family is done: report and repair go on beside the opened dataset
    assert [h._table is None for h in holders] == [True, True, True]


def test_each_data_file_is_read_once_across_blocks(shelf, monkeypatch):
    monkeypatch.setattr(stats_family, "BLOCK", 4)
    monkeypatch.setattr(common, "KEEP_SHARE", 1 << 40)   # nothing kept from the bookkeeping families' pass
    reads = []
    real = stats_family.read_parquet
    monkeypatch.setattr(stats_family, "read_parquet", lambda path, *a, **k: reads.append(path.name) or real(path, *a,
                                                                                                         **k))
    found = run_checks(open_context(shelf), families=("stats",))
    assert any(f.code == "STA050" for f in found)
    assert sorted(reads) == [f"file-{i:03d}.parquet" for i in range(4)], reads


def test_pooled_dataset_stats_are_the_aggregate_of_every_episode(shelf, monkeypatch):
    ctx = open_context(shelf)
    data = stats_family._data_stats(ctx)
    complete = [f for f in stats_family.numeric_features(ctx.dataset) if f not in data.incomplete]
    whole = stats_family._recomputed(ctx, data, complete)
    monkeypatch.setattr(stats_family, "BLOCK", 4)
    ctx = open_context(shelf)
    tally = stats_family.Tally()
    for k, (lo, hi) in enumerate(stats_family._blocks(ctx).bounds):
        tally.add(stats_family._data_stats(ctx, block=k), stats_family.episode_columns(ctx).index[lo:hi])
    pooled = tally.recomputed(complete)
    assert len(tally.parts) == 3 and list(pooled) == list(whole) and "action" in whole
    for feature, stats in whole.items():
        for k, v in stats.items():
            np.testing.assert_allclose(pooled[feature][k], v, rtol=1e-12, atol=1e-12, err_msg=f"{feature} {k}")
    assert aggregate([{"x": p["action"]} for p in tally.parts])["x"]["count"][0] == whole["action"]["count"][0]


def test_block_stats_a_few_rows_at_a_time_gives_the_same_bits():
    """A long block's rows are taken a few at a time (bounded float64 temporaries at a million episodes' frames):
    each row's stats are its own, so the bits are those of the whole block at once."""
    from lerodoc.tables.stats import block_stats
    rng = np.random.default_rng(3)
    block = (rng.normal(size=(5, 4001)) * 1e3).astype(np.float32)
    block[1, 17] = block[1, 18]
    whole, parts = block_stats(block), block_stats(block, chunk=2 * 4001)
    assert whole.keys() == parts.keys()
    for key in whole:
        assert whole[key].shape == parts[key].shape and whole[key].tobytes() == parts[key].tobytes(), key
