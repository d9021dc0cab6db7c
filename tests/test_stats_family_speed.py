"""The stats family's columnar bookkeeping (issue 37): the data's stats are held per feature as (episodes, channels)
matrices, and an episode is looked at on its own only when a whole-matrix check has flagged it.

- each episode's recomputed stats are numpy's on its rows (an episode in one run), or the `aggregate` of its runs'
  (an episode split across two files, or interleaved with another), its quantile brackets are those of its rows
  alone, and the dataset stats are the `aggregate` of those per-episode stats; the oracle here reads the files with
  pyarrow and cuts each episode's rows itself;
- the prefilters change no finding on such a dataset (split, interleaved, NaN and tampered stats);
- on a dataset whose stats all agree with the data, no episode's stats are looked at one by one.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.checks import open_context, run_checks, stats as stats_family
from lerodoc.tables.parquet_io import column_matrix
from lerodoc.tables.stats import aggregate, column_stats
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli

DATA = "data/chunk-000/file-{:03d}.parquet"
EPISODES_META = "meta/episodes/chunk-000/file-000.parquet"
NUMERIC = ("observation.state", "action", "timestamp", "frame_index", "episode_index", "index", "task_index")


def _quantiled(root):
    """A v3.0 dataset of 9 episodes, 3 a data file, with per-episode quantiles."""
    make_dataset(root, version="v3.0", episodes=9, lengths=[20 + 3 * e for e in range(9)], episodes_per_file=3,
                 cameras=(), noise=0.3)
    run_cli("quantiles", root, "--in-place")
    return root


def _set(table: pa.Table, name: str, values: list) -> pa.Table:
    at = table.column_names.index(name)
    return table.set_column(at, table.schema.field(name), pa.array(values, type=table.schema.field(name).type))


def _tamper(root, column: str, episode: int, channel: int, by: float) -> None:
    table = pq.read_table(root / EPISODES_META)
    values = table.column(column).to_pylist()
    values[episode][channel] += by
    pq.write_table(_set(table, column, values), root / EPISODES_META)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return _quantiled(tmp_path_factory.mktemp("clean") / "ds")


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """Episode 3 across files 0 and 1 (file 1's first row moved to the end of file 0); episodes 6 and 7 interleaved
    in file 2 (their second rows swapped); a NaN in episode 8's action; tampered stats of split and whole episodes."""
    root = _quantiled(tmp_path_factory.mktemp("split") / "ds")
    first, second = pq.read_table(root / DATA.format(0)), pq.read_table(root / DATA.format(1))
    pq.write_table(pa.concat_tables([first, second.slice(0, 1)]), root / DATA.format(0))
    pq.write_table(second.slice(1), root / DATA.format(1))
    third = pq.read_table(root / DATA.format(2))
    episodes = np.asarray(third.column("episode_index").to_pylist())
    order = np.arange(third.num_rows)
    a, b = np.flatnonzero(episodes == 6)[1], np.flatnonzero(episodes == 7)[1]
    order[a], order[b] = b, a
    third = third.take(pa.array(order))
    action = third.column("action").to_pylist()
    action[int(np.flatnonzero(episodes[order] == 8)[2])][1] = float("nan")
    pq.write_table(_set(third, "action", action), root / DATA.format(2))
    _tamper(root, "stats/observation.state/mean", 3, 1, 0.3)       # split across files
    _tamper(root, "stats/observation.state/std", 6, 2, 50.0)       # interleaved
    _tamper(root, "stats/action/q50", 4, 0, 5.0)                   # whole
    _tamper(root, "stats/observation.state/q10", 5, 2, -3.0)       # whole
    return root


def _runs(root) -> tuple[dict[int, list[dict]], dict[int, int]]:
    """Per episode, the stats (numpy's, `column_stats`) of each of its runs of rows, in row order over the sorted
    files; per episode, how many runs."""
    runs: dict[int, list[dict]] = {}
    for path in sorted(root.glob("data/*/*.parquet")):
        table = pq.read_table(path)
        episodes = np.asarray(table.column("episode_index").to_pylist())
        values = {f: column_matrix(table.column(f), table.num_rows).astype(np.float64) for f in NUMERIC}
        cuts = np.flatnonzero(np.diff(episodes)) + 1
        for start, stop in zip(np.r_[0, cuts], np.r_[cuts, len(episodes)]):
            runs.setdefault(int(episodes[start]), []).append({f: column_stats(v[start:stop]) for f, v in values.items()}
                                                             | {"": (start, stop, values)})
    return runs, {e: len(r) for e, r in runs.items()}


def test_recomputed_stats_are_numpys_per_episode_and_aggregates_of_split_ones(split):
    ctx = open_context(split)
    data = stats_family._data_stats(ctx)
    runs, count = _runs(split)
    assert count[3] == 2 and count[6] == 3 and count[7] == 3 and count[0] == 1   # the planted splits
    assert data.dirty == {(8, "action")}
    for episode, parts in runs.items():
        held = data.episode(episode)
        assert set(held) == set(NUMERIC), episode
        for feature in NUMERIC:
            want = parts[0][feature] if len(parts) == 1 else \
                aggregate([{feature: p[feature]} for p in parts])[feature]
            for k, v in want.items():
                assert np.array_equal(held[feature][k], v, equal_nan=True), (episode, feature, k)
                assert held[feature][k].dtype == v.dtype, (episode, feature, k)


def test_dataset_stats_recomputed_from_the_stacks_are_the_aggregate_of_numpys_per_episode(split):
    ctx = open_context(split)
    data = stats_family._data_stats(ctx)
    runs, _ = _runs(split)
    complete = [f for f in NUMERIC if f not in data.incomplete]
    assert "action" not in complete and "observation.state" in complete   # action holds a NaN
    per_episode = [{f: parts[0][f] if len(parts) == 1 else aggregate([{f: p[f]} for p in parts])[f]
                    for f in complete} for _, parts in sorted(runs.items())]   # metadata order: 0..8
    want = aggregate(per_episode)
    got = stats_family._recomputed(ctx, data, complete)
    assert list(got) == list(want) == sorted(complete)
    for feature, stats in want.items():
        for k, v in stats.items():
            assert got[feature][k].dtype == v.dtype and got[feature][k].tobytes() == v.tobytes(), (feature, k)


def test_quantile_brackets_are_those_of_the_episodes_rows_alone(split):
    ctx = open_context(split)
    data = stats_family._data_stats(ctx)
    runs, count = _runs(split)
    keys = stats_family._quantile_keys(ctx.dataset.episodes[0].stats["observation.state"])
    assert keys
    for episode, parts in runs.items():
        for feature in ("observation.state", "action"):
            found = data.bracket(episode, feature)
            if len(parts) > 1 or (episode, feature) in data.dirty:
                assert found is None, (episode, feature)
                continue
            start, stop, values = parts[0][""]
            want = stats_family._quantile_brackets(values[feature].T, np.array([start]), np.array([stop - start]),
                                                   keys)[0]
            assert list(found) == list(keys)
            for i, (low, high) in enumerate(found.values()):
                assert np.array_equal(low, want[i]) and np.array_equal(high, want[len(keys) + i]), (episode, i)


def _findings(root) -> list[tuple]:
    return [(f.code, f.file, f.episode, f.feature, f.channel, f.message)
            for f in run_checks(open_context(root), families=("stats",))]


def test_prefilters_change_no_finding_on_split_episodes(split, monkeypatch):
    fast = _findings(split)
    monkeypatch.setattr(stats_family, "_in_order", lambda flat, n: np.zeros(n, dtype=bool))
    monkeypatch.setattr(stats_family, "_agreeing", lambda ds, group, data, moments: np.zeros(len(group.episodes),
                                                                                             dtype=bool))
    assert fast == _findings(split)
    flagged = {(code, episode) for code, _, episode, *_ in fast}
    assert {("STA040", 3), ("STA040", 6), ("STA043", 4), ("STA050", 8)} <= flagged, fast


def test_a_clean_dataset_looks_at_no_episode_on_its_own(clean, monkeypatch):
    looked = []

    def spy(name, original):
        def wrapper(*args, **kwargs):
            looked.append(name)
            return original(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(stats_family.DataStats, "episode", spy("episode", stats_family.DataStats.episode))
    monkeypatch.setattr(stats_family.DataStats, "bracket", spy("bracket", stats_family.DataStats.bracket))
    well_formed = stats_family._well_formed
    monkeypatch.setattr(stats_family, "_well_formed",
                        lambda ds, source, only=None: looked.append(source.episode) or well_formed(ds, source, only))
    assert [f for f in _findings(clean) if f[2] is not None] == []
    assert looked == [None], looked   # the dataset stats alone


def test_small_files_read_together_keep_the_file_by_file_order_of_findings(tmp_path):
    """v2.1's one-episode files go to one worker unit together (BATCH_ROWS); what reading them finds is still listed
    file by file, each file's in feature order: NaN in two features of one file, a ragged column and a NaN in the
    next, then one feature each of two later files."""
    root = make_dataset(tmp_path / "ds", version="v2.1", episodes=6, lengths=[12, 9, 14, 10, 11, 13], cameras=(),
                        noise=0.3).root
    path = "data/chunk-000/episode_{:06d}.parquet"

    def edit(episode: int, feature: str, change, kind=None) -> None:
        table = pq.read_table(root / path.format(episode))
        values = table.column(feature).to_pylist()
        change(values)
        at = table.column_names.index(feature)
        kind = kind or table.schema.field(feature).type
        pq.write_table(table.set_column(at, pa.field(feature, kind), pa.array(values, type=kind)),
                       root / path.format(episode))

    def nan(row: int, channel: int):
        return lambda values: values[row].__setitem__(channel, float("nan"))

    edit(1, "action", nan(3, 2))
    edit(1, "observation.state", nan(0, 1))
    edit(2, "observation.state", lambda values: values.__setitem__(4, values[4][:-1]), pa.list_(pa.float32()))
    edit(2, "action", nan(7, 3))
    edit(4, "observation.state", nan(2, 5))
    edit(5, "action", nan(0, 0))
    found = [(code, file, episode, feature) for code, file, episode, feature, *_ in _findings(root)
             if code in ("STA050", "STA051", "STA052")]
    assert found == [("STA050", path.format(1), 1, "observation.state"), ("STA050", path.format(1), 1, "action"),
                     ("STA051", path.format(2), None, "observation.state"), ("STA050", path.format(2), 2, "action"),
                     ("STA050", path.format(4), 4, "observation.state"), ("STA050", path.format(5), 5, "action")]


def test_stats_read_as_columns_give_the_findings_of_stats_read_as_dicts(split, monkeypatch):
    """v3.0's episode stats are table rows (StatsRow): `_columns` takes them as columns; with that switched off it
    stacks each episode's dict, and the findings are the same."""
    from_columns = _findings(split)
    monkeypatch.setattr(stats_family, "stats_matrices", lambda episodes: None)
    assert from_columns == _findings(split)


def test_a_clean_dataset_reads_no_episodes_stats_dict(clean):
    """The clean v3.0 dataset's episode stats stay unread table rows through the stats family."""
    from lerodoc.formats.model import stats_row
    ctx = open_context(clean)
    assert all(stats_row(ep) is not None for ep in ctx.dataset.episodes)
    assert [f for f in run_checks(ctx, families=("stats",)) if f.episode is not None] == []
    assert all(stats_row(ep) is not None for ep in ctx.dataset.episodes)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_segment_stats_bits_do_not_depend_on_the_chunk_or_a_float64_cast(dtype):
    """segment_stats works a few MB at a time (its `chunk`) and the stats family hands it float32 data uncast: every
    chunk size gives the same bits, and those of the data cast to float64 first."""
    from lerodoc.tables.stats import segment_stats
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 40, size=300)
    lengths[[0, 7, 8]] = 0   # empty segments, leading and adjacent
    matrix = (rng.standard_normal((5, int(lengths.sum()))) * 1e3).astype(dtype)
    reference = segment_stats(matrix.astype(np.float64), lengths, chunk=1 << 22)
    for chunk in (1, 7, 64, 1 << 19, 1 << 22):
        got = segment_stats(matrix, lengths, chunk=chunk)
        assert got.keys() == reference.keys()
        for key, value in reference.items():
            assert got[key].dtype == value.dtype and np.array_equal(got[key], value, equal_nan=True), (chunk, key)
