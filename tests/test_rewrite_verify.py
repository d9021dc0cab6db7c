"""rewrite's read-back check: one digest per column of each written file, and a clear error naming the
first episode whose written rows differ from the planned ones."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.errors import VerificationError
from lerodoc.ops import rewrite
from tests.fixtures.factory import make_dataset


def test_a_written_value_that_differs_is_named_by_episode(tmp_path, monkeypatch):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=3, lengths=[20, 30, 25])
    real_writer = pq.ParquetWriter

    class Corrupting(real_writer):        # writes the first value of episode 1's action column shifted by one
        def write_table(self, table, row_group_size=None):
            rows = table.column("episode_index").to_pylist()
            if 1 in rows:
                action = table.column("action").combine_chunks()
                values = action.flatten().to_numpy().copy()
                values[rows.index(1) * (len(values) // len(rows))] += 1
                table = table.set_column(table.column_names.index("action"), table.schema.field("action"),
                                         pa.FixedSizeListArray.from_arrays(pa.array(values), action.type.list_size)
                                         if pa.types.is_fixed_size_list(action.type) else
                                         pa.ListArray.from_arrays(action.offsets, pa.array(values)))
            super().write_table(table, row_group_size=row_group_size)
    monkeypatch.setattr(rewrite.pq, "ParquetWriter", Corrupting)
    from lerodoc.ops.convert import convert
    with pytest.raises(VerificationError) as error:
        convert(fixture.root, tmp_path / "out", workers=1)
    assert error.value.episode == 1 and "action" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_a_clean_convert_passes_the_check(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=3, lengths=[20, 30, 25])
    from lerodoc.ops.convert import convert
    report = convert(fixture.root, tmp_path / "out", workers=1)
    assert report.frames == 75


def test_a_rewrite_lets_go_of_source_stats_tables_its_episodes_no_longer_use(tmp_path, monkeypatch):
    """Deleting episode 0 renumbers every kept episode, whose stats then live in a new table: the source's v3.0 stats tables are let
    go (gigabytes at a million episodes), and a source episode's stats asked for afterwards are read again, the same."""
    import numpy as np
    from lerodoc.dataset import Dataset
    from lerodoc.formats.model import stats_row
    from lerodoc.ops.merge import merge
    from lerodoc.selection import Selection
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=5, lengths=[20, 21, 22, 23, 24],
                        episodes_per_file=2, cameras=()).root
    source = Dataset.open(root)
    before = {ep.index: ep.stats for ep in Dataset.open(root).episodes}   # another open: source's rows stay unread
    released = []
    real = rewrite._release_sources
    monkeypatch.setattr(rewrite, "_release_sources", lambda picks, eps: (released.append(
        {id(stats_row(p.episode).holder): stats_row(p.episode).holder for p in picks}), real(picks, eps)))
    merge([source], tmp_path / "out", exclude={0: Selection.of([0])})   # every kept episode renumbered
    holders = list(released[0].values())
    assert holders and all(h._table is None for h in holders)
    for ep in source.episodes:   # read again on demand, the same values
        for feature, by_stat in before[ep.index].items():
            for stat, value in by_stat.items():
                assert np.array_equal(ep.stats[feature][stat], value, equal_nan=True), (ep.index, feature, stat)


def test_verify_holds_the_written_episodes_to_the_planned_ones(tmp_path):
    """rewrite.verify: the reopened output lists exactly the planned episodes (index, length, data file, first row);
    any one of those off in any episode, a missing episode or another version is a VerificationError."""
    from dataclasses import replace
    from lerodoc.dataset import Dataset
    verify = rewrite.verify
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=4, lengths=[3, 4, 5, 6], cameras=()).root
    planned = Dataset.open(root).episodes
    verify(root, "v3.0", rewrite.planned(planned))
    for changed in ({"index": 9}, {"length": 7}, {"data_file": "data/chunk-000/file-009.parquet"}, {"from_index": 1}):
        wrong = list(planned)
        wrong[2] = replace(planned[2], **changed)
        with pytest.raises(VerificationError):
            verify(root, "v3.0", rewrite.planned(wrong))
    for wrong, to in ((planned[:-1], "v3.0"), (planned, "v2.1")):
        with pytest.raises(VerificationError):
            verify(root, to, rewrite.planned(wrong))


def test_planned_is_columns_and_lets_go_of_the_written_stats(tmp_path):
    """rewrite.planned: the episodes' numbers, lengths, first rows and data files as verify compares them, and their
    stats let go (written: at a million episodes a table of gigabytes); the frames are the lengths' sum."""
    import numpy as np
    from lerodoc.dataset import Dataset
    from lerodoc.formats.model import stats_row
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=3, lengths=[3, 4, 5], cameras=()).root
    episodes = Dataset.open(root).episodes
    assert all(stats_row(ep) is not None for ep in episodes)
    expected = rewrite.planned(episodes)
    assert expected.index.tolist() == [0, 1, 2] and expected.length.tolist() == [3, 4, 5]
    assert expected.from_index.tolist() == [0, 3, 7] and expected.frames == 12 and len(expected) == 3
    assert expected.data_files == [ep.data_file for ep in episodes]
    assert all(stats_row(ep) is None and ep.stats == {} for ep in episodes)
    assert expected.index.dtype == np.int64


def test_verify_keeps_of_the_output_what_the_kept_check_reads(tmp_path):
    """The output verify opened is what promotion's kept check reads (staging.written): of a v3.0 output only its
    first episode is kept (the kept check reads its data file's footer; the cameras come from the episodes files'
    columns), of a v2.1 output every episode (their per-episode stats name its cameras)."""
    from lerodoc.dataset import Dataset
    from lerodoc.promote import staging
    for version in ("v3.0", "v2.1"):
        root = make_dataset(tmp_path / version, version=version, episodes=3, lengths=[3, 4, 5], cameras=()).root
        rewrite.verify(root, version, rewrite.planned(Dataset.open(root).episodes))
        noted = staging._written(root)
        assert noted is not None and len(noted.episodes) == (1 if version == "v3.0" else 3)
