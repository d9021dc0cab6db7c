"""Per-episode stats as columns (issue 37): the column-by-column paths give what the episode-by-episode ones give.

Each test runs the same step twice on the same v3.0 dataset: once with every episode's stats still an unread row of
its table (the fast path), once after reading every episode's dict (which forces the episode-by-episode path), and
compares what each writes or holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from lerodoc.formats import v30
from lerodoc.formats.model import stats_columns, stats_row, stats_stack, update_stats
from lerodoc.tables.parquet_io import arrow_array
from lerodoc.tables.stats import aggregate, stack_stats

ZOO = Path(__file__).parent / "zoo" / "members"
MEMBER = ZOO / "lerobot-0.6.1-record"   # v3.0, written by lerobot's own recorder, stats with quantiles


def _opened(read: bool) -> Dataset:
    ds = Dataset.open(MEMBER)
    if read:
        for ep in ds.episodes:
            ep.stats   # noqa: B018: reading turns the unread row into a dict
        assert all(stats_row(ep) is None for ep in ds.episodes)
    else:
        assert all(stats_row(ep) is not None for ep in ds.episodes)
    return ds


def _written(ds: Dataset, root: Path):
    v30.write_stats(root, ds.info, ds.episodes, None)
    return pq.read_table(root / v30.EPISODES_PATH.format(chunk_index=0, file_index=0))


def test_member_has_several_episodes_with_stats():
    ds = _opened(read=False)
    assert len(ds.episodes) >= 2 and stats_columns(ds.episodes) is not None


def test_episodes_table_is_the_same_from_columns_and_from_dicts(tmp_path):
    fast, slow = _written(_opened(False), tmp_path / "fast"), _written(_opened(True), tmp_path / "slow")
    assert fast.equals(slow)
    assert any(name.startswith("stats/") for name in fast.column_names)


def test_aggregate_from_stacks_is_the_aggregate_of_the_dicts():
    fast = aggregate(stats_stack(_opened(False).episodes))
    slow = aggregate([ep.stats for ep in _opened(True).episodes])
    assert fast.keys() == slow.keys() and fast
    for feature in fast:
        for stat in fast[feature]:
            np.testing.assert_array_equal(fast[feature][stat], slow[feature][stat])
    assert stack_stats([]) == {} and aggregate([]) == {}


@pytest.mark.parametrize("updated", ["all", "first", "last"])
def test_update_stats_as_columns_equals_episode_by_episode(tmp_path, updated):
    """New BASIC stats of one feature for every episode, or all but one (renumbering in merge/delete/split): the
    updated rows lose the feature's quantiles, the others keep them; the written table (column order included:
    first named by the episodes' dicts) and every row's dict are those of the episode-by-episode update."""
    fast_ds, slow_ds = _opened(False), _opened(True)
    feature = "index"
    n = len(fast_ds.episodes)
    which = {"all": range(n), "first": range(1, n), "last": range(n - 1)}[updated]
    rng = np.random.default_rng(0)
    updates = [{feature: {"min": rng.random(1), "max": rng.random(1), "mean": rng.random(1), "std": rng.random(1),
                          "count": np.array([7])}} if i in which else {} for i in range(n)]
    update_stats(fast_ds.episodes, updates)
    update_stats(slow_ds.episodes, updates)
    assert all(stats_row(ep) is not None for ep in fast_ds.episodes)   # the column path was taken
    for a, b in zip(fast_ds.episodes, slow_ds.episodes):
        assert list(a.stats) == list(b.stats)
        for f in a.stats:
            assert list(a.stats[f]) == list(b.stats[f])
            for stat in a.stats[f]:
                np.testing.assert_array_equal(a.stats[f][stat], b.stats[f][stat])
    # the fast dataset's dicts were read above: write from a fresh update, rows unread
    fresh = _opened(False)
    update_stats(fresh.episodes, updates)
    assert _written(fresh, tmp_path / "fast").equals(_written(slow_ds, tmp_path / "slow"))


def test_arrow_array_of_stacked_rows_with_missing_rows_is_the_list_form():
    for values in (np.arange(12.0).reshape(4, 3), np.arange(8).reshape(4, 2), np.ones((4, 3, 1, 1))):
        present = np.array([True, False, True, False])
        listed = [v if p else None for v, p in zip(values, present)]
        assert arrow_array(values, present=present).equals(arrow_array(listed))
        assert arrow_array(values).equals(arrow_array(list(values)))


def test_update_from_stacks_equals_update_from_dicts(tmp_path):
    """exact_stats' per-episode stats come stacked (EpisodeStacks); updating from them column by column writes
    what updating every episode from its dict writes."""
    from lerodoc.ops.stats import exact_stats
    from lerodoc.tables.stats import EpisodeStacks
    fast, slow = _opened(False), _opened(True)
    _, per_episode, _ = exact_stats(fast, fast.info.numeric_keys)
    assert isinstance(per_episode, EpisodeStacks)
    update_stats(fast.episodes, per_episode)
    update_stats(slow.episodes, [dict(per_episode[ep.index]) for ep in slow.episodes])
    assert all(stats_row(ep) is not None for ep in fast.episodes)
    assert _written(fast, tmp_path / "fast").equals(_written(slow, tmp_path / "slow"))


def test_tables_of_two_layouts_then_a_partial_update(tmp_path):
    """Episodes from two tables that hold different stats (a split part renumbered by lerodoc keeps no quantiles
    of `index`), then new `index` stats for the second table's episodes only (merge renumbering them): the column
    path writes what the episode-by-episode path writes, column order included."""
    import shutil
    other = tmp_path / "other"
    shutil.copytree(MEMBER, other)
    path = sorted(other.glob(v30.EPISODES_GLOB))[0]
    table = pq.read_table(path)
    pq.write_table(table.drop_columns([n for n in table.column_names if n.startswith("stats/index/q")]), path)

    def episodes(read: bool):
        eps = _opened(read).episodes + Dataset.open(other).episodes
        if read:
            for ep in eps:
                ep.stats   # noqa: B018
        return eps
    fast, slow = episodes(False), episodes(True)
    assert stats_columns(fast) is not None   # two layouts, one set of columns (rows without a stat marked)
    half = len(fast) // 2
    rng = np.random.default_rng(1)
    updates = [{} if i < half else {"index": {k: rng.random(1) for k in ("min", "max", "mean", "std")} |
                                     {"count": np.array([3])}} for i in range(len(fast))]
    update_stats(fast, updates)
    update_stats(slow, updates)
    assert all(stats_row(ep) is not None for ep in fast)
    ds = _opened(False)
    v30.write_stats(tmp_path / "fast", ds.info, fast, None)
    v30.write_stats(tmp_path / "slow", ds.info, slow, None)
    where = v30.EPISODES_PATH.format(chunk_index=0, file_index=0)
    assert pq.read_table(tmp_path / "fast" / where).equals(pq.read_table(tmp_path / "slow" / where))
    for a, b in zip(fast, slow):
        assert [(f, list(s)) for f, s in a.stats.items()] == [(f, list(s)) for f, s in b.stats.items()]


def test_keep_stats_renames_and_drops_as_the_dicts_do(tmp_path):
    from lerodoc.formats.model import keep_stats
    fast, slow = _opened(False), _opened(True)
    features = {("action.joints" if k == "action" else k): v for k, v in fast.info.features.items()
                if k != "observation.state"}
    for ds in (fast, slow):
        keep_stats(ds.episodes, features, {"action": "action.joints"})
    assert all(stats_row(ep) is not None for ep in fast.episodes)
    assert _written(fast, tmp_path / "fast").equals(_written(slow, tmp_path / "slow"))
    assert "action.joints" in fast.episodes[0].stats and "observation.state" not in fast.episodes[0].stats


def test_update_from_stacks_of_some_episodes_equals_update_from_dicts(tmp_path):
    """Stacks holding some episodes only (what a rewrite's block sends back for the episodes it renumbered)
    update those rows column by column as their dicts do, the other rows unchanged."""
    from lerodoc.tables.stats import EpisodeStacks
    fast, slow = _opened(False), _opened(True)
    some = [ep.index for ep in fast.episodes][1:]
    rng = np.random.default_rng(2)
    stacks = {"index": {"min": rng.random((len(some), 1)), "max": rng.random((len(some), 1)),
                        "mean": rng.random((len(some), 1)), "std": rng.random((len(some), 1)),
                        "count": np.full((len(some), 1), 5)}}
    held = EpisodeStacks(some[::-1], {f: {k: v[::-1] for k, v in s.items()} for f, s in stacks.items()})
    assert some[0] in held and fast.episodes[0].index not in held
    update_stats(fast.episodes, held)
    update_stats(slow.episodes, [dict(held[ep.index]) if ep.index in held else {} for ep in slow.episodes])
    assert all(stats_row(ep) is not None for ep in fast.episodes)   # the column path was taken
    assert _written(fast, tmp_path / "fast").equals(_written(slow, tmp_path / "slow"))


def test_rewrite_computes_the_missing_episode_stats_from_rows(tmp_path):
    """A v2.1 source whose episodes_stats.jsonl lacks some episodes: convert computes theirs from the rows (stacked
    per block in the worker, whichever episodes of a block need them) and keeps the others' as they were."""
    import json

    from tests.helpers import run_cli
    v21_root, out = tmp_path / "v21", tmp_path / "v30"
    run_cli("convert", MEMBER, "-o", v21_root, "--to", "v2.1")
    lines = (v21_root / "meta" / "episodes_stats.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["episode_index"] != 1]
    assert len(kept) == len(lines) - 1
    (v21_root / "meta" / "episodes_stats.jsonl").write_text("".join(line + "\n" for line in kept))
    report = json.loads(run_cli("convert", v21_root, "-o", out, "--json").stdout)
    assert report["ok"], report
    written, source = Dataset.open(out), Dataset.open(MEMBER)
    data = pq.read_table(sorted(out.glob("data/*/*.parquet"))[0])
    for ep, before in zip(written.episodes, source.episodes):
        if ep.index != 1:
            for feature in before.stats:
                np.testing.assert_array_equal(ep.stats[feature]["mean"], before.stats[feature]["mean"])
            continue
        rows = data.slice(ep.from_index, ep.length)
        for feature in ("observation.state", "action", "index", "episode_index"):
            values = np.stack(rows.column(feature).to_numpy(zero_copy_only=False)).astype(np.float64)
            values = values.reshape(ep.length, -1)
            np.testing.assert_allclose(ep.stats[feature]["min"], values.min(0))
            np.testing.assert_allclose(ep.stats[feature]["max"], values.max(0))
            np.testing.assert_allclose(ep.stats[feature]["mean"], values.mean(0), rtol=1e-6)
            np.testing.assert_allclose(ep.stats[feature]["std"], values.std(0), rtol=1e-5, atol=1e-7)
            assert int(np.ravel(ep.stats[feature]["count"])[0]) == ep.length


def test_several_tables_in_order_are_held_once():
    """Episodes that are several tables' rows in order (a dataset's episodes metadata files): the stacks are those
    rows' values, and each table's columns become views of them (one copy in memory, not two)."""
    from lerodoc.formats.model import Episode, StatsRow
    from lerodoc.formats.stats import StatsTable
    rng = np.random.default_rng(0)
    tables = [StatsTable({("x", "min"): rng.standard_normal((n, 3)), ("x", "count"): np.full((n, 1), 5)}, n)
              for n in (4, 2, 5)]
    before = [{k: v.copy() for k, v in t.columns.items()} for t in tables]
    episodes = [Episode(index=i, length=5, tasks=[], data_file="", data_row=0, from_index=5 * i, stats=StatsRow(t, r))
                for i, (t, r) in enumerate((t, r) for t in tables for r in range(t.rows))]
    columns = stats_columns(episodes)
    stack = columns["x", "min"][0]
    assert np.array_equal(stack, np.concatenate([b["x", "min"] for b in before]))
    for table, old in zip(tables, before):
        assert np.array_equal(table.columns["x", "min"], old["x", "min"])
        assert np.shares_memory(table.columns["x", "min"], stack)
    shuffled = stats_columns(episodes[::-1])   # not in order: gathered
    assert np.array_equal(shuffled["x", "min"][0], stack[::-1])
    assert np.array_equal(episodes[5].stats["x"]["min"], before[1]["x", "min"][1])   # a row read through its view


def test_joining_stacks_can_let_the_parts_go():
    from lerodoc.tables.stats import EpisodeStacks

    def parts():
        r = np.random.default_rng(1)
        return [([0, 1], {"x": {"min": r.standard_normal((2, 3)), "count": np.ones((2, 1))}}),
                ([2], {"x": {"min": r.standard_normal((1, 3)), "count": np.ones((1, 1))}})]
    kept, consumed = parts(), parts()
    a, b = EpisodeStacks.joined(kept), EpisodeStacks.joined(consumed, consume=True)
    assert a.order.tolist() == b.order.tolist() == [0, 1, 2]
    assert list(a.stacks["x"]) == list(b.stacks["x"]) == ["min", "count"]
    assert all(np.array_equal(a.stacks["x"][k], b.stacks["x"][k]) for k in ("min", "count"))
    assert all(part["x"] == {} for _, part in consumed) and all(len(part["x"]) == 2 for _, part in kept)


def test_update_replacing_every_feature_reads_no_old_value(tmp_path, monkeypatch):
    """quantiles replaces every feature's stats of every episode: the old values are then never read (at a million
    episodes the episodes metadata's stats columns are gigabytes). The holders say from their footers which stats
    every row holds, in the order the table gives them, and the episodes metadata written is the one written after
    reading them (column by column, and episode by episode from the dicts)."""
    from lerodoc.formats import model
    from lerodoc.ops.stats import exact_stats
    from tests.fixtures.factory import make_dataset
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=5, lengths=[4, 6, 5, 7, 3], cameras=()).root
    fast, slow, read = Dataset.open(root), Dataset.open(root), Dataset.open(root)
    features = fast.info.numeric_keys
    _, per_episode, _ = exact_stats(fast, features)
    for ep in read.episodes:
        ep.stats   # noqa: B018: dicts
    update_stats(read.episodes, [dict(per_episode[ep.index]) for ep in read.episodes])
    holders = {id(stats_row(ep).holder): stats_row(ep).holder for ep in fast.episodes}
    assert holders and all(h.full_keys() for h in holders.values())
    monkeypatch.setattr(v30.StatsColumns, "table", property(lambda self: pytest.fail("an old value was read")))
    update_stats(fast.episodes, per_episode)
    monkeypatch.undo()
    monkeypatch.setattr(model, "_replaced_keys", lambda episodes, features: None)   # the path that reads them
    update_stats(slow.episodes, per_episode)
    written = [_written(ds, tmp_path / name) for ds, name in ((fast, "fast"), (slow, "slow"), (read, "read"))]
    assert written[0].equals(written[1]) and written[0].equals(written[2])
    assert {c for c in written[0].column_names if c.startswith("stats/")} == \
        {f"stats/{f}/{s}" for f in features for s in per_episode.stacks[f]}


def test_gathering_with_release_lets_each_table_go_after_its_rows(tmp_path):
    """A rewrite's stats gathered with `release` (the episodes are about to hold the stacks): the same stacks and
    masks as without, each old table let go by its holder once its last rows are copied (a million episodes held the
    tables and the stacks together: 5.2 GB), and read again when asked."""
    from lerodoc.formats.model import Episode, StatsRow
    from lerodoc.formats.stats import StatsTable

    class Holder:   # a holder that reads its table on first use, as v30.StatsColumns does
        def __init__(self, make):
            self.make, self._table, self.reads, self.order = make, None, 0, []

        @property
        def table(self):
            if self._table is None:
                self._table, self.reads = self.make(), self.reads + 1
            return self._table

        def release(self):
            self.order.append(self)
            self._table = None
    rng = np.random.default_rng(2)
    made = [({("x", "min"): rng.standard_normal((n, 3)), ("x", "count"): np.full((n, 1), n)} |
             ({("y", "mean"): rng.standard_normal((n, 2))} if n != 2 else {}), n) for n in (4, 2, 5)]
    order: list = []
    holders = [Holder(lambda c=c, n=n: StatsTable(dict(c), n, {("x", "min"): np.arange(n) % 3 > 0} if n == 5 else None))
               for c, n in made]
    for h in holders:
        h.order = order
    picks = [(0, 3), (1, 0), (0, 1), (2, 4), (2, 0), (1, 1), (2, 2)]   # a table's rows in two runs, one missing
    episodes = [Episode(index=i, length=5, tasks=[], data_file="", data_row=0, from_index=5 * i,
                        stats=StatsRow(holders[h], r)) for i, (h, r) in enumerate(picks)]
    kept = stats_columns(episodes)
    released = stats_columns(episodes, release=True)
    assert kept.keys() == released.keys() and list(kept) == list(released)
    for key, (values, present) in kept.items():
        assert np.array_equal(values, released[key][0]) and values.dtype == released[key][0].dtype, key
        assert (present is None) == (released[key][1] is None) and (present is None or
                                                                      np.array_equal(present, released[key][1])), key
    assert [holders.index(h) for h in order] == [0, 1, 2] and all(h._table is None for h in holders)
    assert np.array_equal(episodes[3].stats["x"]["min"], made[2][0]["x", "min"][4])   # read again
    assert holders[2].reads == 2


def test_let_go_stats_frees_the_table_the_rows_point_into(tmp_path):
    """Once written, a rewrite's episodes let their stats go: the one table their rows point into (gigabytes at a
    million episodes) is freed, not held through verify's second open."""
    import gc
    import weakref
    from lerodoc.formats.model import StatsRow, let_go_stats
    from lerodoc.formats.stats import StatsTable
    from tests.fixtures.factory import make_dataset
    ds = Dataset.open(make_dataset(tmp_path / "src", version="v3.0", episodes=4).root)
    table = StatsTable({("action", "mean"): np.zeros((4, 6))}, 4)
    for i, ep in enumerate(ds.episodes):
        ep.stats = StatsRow(table, i)   # what update_stats leaves a rewrite's new episodes
    gone = weakref.ref(table)
    del table
    gc.collect()
    assert gone() is not None   # the rows hold it
    let_go_stats(ds.episodes)
    gc.collect()
    assert gone() is None and all(ep.stats == {} for ep in ds.episodes)


def test_stats_columns_only_gathers_the_stats_asked_for(tmp_path):
    """stats_stack asks for the BASIC stats alone: the quantiles (half of a rewrite's stats, gigabytes at a million
    episodes) are neither gathered nor compared; a quantile of another shape in one table does not stop it."""
    from lerodoc.formats.model import StatsRow
    from lerodoc.formats.stats import StatsTable
    from tests.fixtures.factory import make_dataset
    ds = Dataset.open(make_dataset(tmp_path / "src", version="v3.0", episodes=4).root)
    rng = np.random.default_rng(0)
    basic = {("action", k): rng.normal(size=(2, 6)) for k in ("min", "max", "mean", "std")}
    tables = [StatsTable({**basic, ("action", "count"): np.full((2, 1), 5), ("action", "q01"): rng.normal(size=(2, w))},
                         2) for w in (6, 3)]
    for i, ep in enumerate(ds.episodes):
        ep.stats = StatsRow(tables[i // 2], i % 2)
    assert stats_columns(ds.episodes) is None   # q01 of two shapes: no column path for every stat
    only = stats_columns(ds.episodes, only={"mean", "count"})
    assert sorted(only) == [("action", "count"), ("action", "mean")]
    np.testing.assert_array_equal(only["action", "mean"][0], np.concatenate([basic["action", "mean"]] * 2))
    stack = stats_stack(ds.episodes)
    assert sorted(stack["action"]) == ["count", "max", "mean", "min", "std"] and len(stack["action"]["mean"]) == 4
