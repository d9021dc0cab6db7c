"""validate reads each data file once (issue 37): the bookkeeping read (`checks.common.data_files`) also reads and
keeps the numeric columns the stats family recomputes, while they fit its share of the memory budget.

- what validate finds is the same whether the columns were kept or read again, on datasets with defects the stats
  family finds (a NaN, stats that disagree with the data, an episode split across files), and whether the files
  were read one at a time or in threads;
- when kept, the stats family reads no data file itself; past the share, it reads the files not kept;
- a file whose numeric columns cannot be read within the budget while its bookkeeping columns can is read as
  before: the bookkeeping families see it, and the stats family names it (STA052).
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.checks import common, open_context, run_checks, stats as stats_family
from tests.fixtures.factory import make_dataset

KEEP_ALL, KEEP_NONE = 1, 10 ** 18   # KEEP_SHARE: the whole budget, or no room at all


def _defective(root):
    """A v2.1 dataset of 5 one-episode files: a NaN in episode 1's action, episode 3's state mean off by 0.5."""
    root = make_dataset(root, version="v2.1", episodes=5, lengths=[12, 30, 9, 20, 15], cameras=(), noise=0.3).root
    path = root / "data/chunk-000/episode_000001.parquet"
    table = pq.read_table(path)
    action = table.column("action").to_pylist()
    action[4][2] = float("nan")
    at = table.column_names.index("action")
    pq.write_table(table.set_column(at, table.schema.field("action"),
                                    pa.array(action, type=table.schema.field("action").type)), path)
    stats = root / "meta/episodes_stats.jsonl"
    lines = stats.read_text().splitlines()
    record = json.loads(lines[3])
    record["stats"]["observation.state"]["mean"][0] += 0.5
    lines[3] = json.dumps(record)
    stats.write_text("\n".join(lines) + "\n")
    return root


def _split_v30(root):
    """A v3.0 dataset of 6 episodes, 2 a file, episode 2 split across files 0 and 1."""
    root = make_dataset(root, version="v3.0", episodes=6, lengths=[14, 11, 16, 10, 13, 12], episodes_per_file=2,
                        cameras=(), noise=0.3).root
    name = "data/chunk-000/file-{:03d}.parquet"
    first, second = pq.read_table(root / name.format(0)), pq.read_table(root / name.format(1))
    pq.write_table(pa.concat_tables([first, second.slice(0, 1)]), root / name.format(0))
    pq.write_table(second.slice(1), root / name.format(1))
    return root


def _validate(root, monkeypatch, share: int, threads: int = 1) -> tuple[list[tuple], list[str]]:
    """Every family's findings with KEEP_SHARE `share`, and the names of the data files the stats family read itself.
    One file read at a time unless `threads` says otherwise: which files are kept is then the rule's alone, not also
    what the files read ahead were charged."""
    monkeypatch.setattr(common, "KEEP_SHARE", share)
    monkeypatch.setattr(common, "READ_THREADS", threads)
    monkeypatch.setattr(common, "default_workers", lambda: 4)
    reads = []
    original = stats_family.read_parquet
    monkeypatch.setattr(stats_family, "read_parquet", lambda *a, **k: reads.append(a[0].name) or original(*a, **k))
    findings = [(f.code, f.file, f.episode, f.feature, f.channel, f.message) for f in run_checks(open_context(root))]
    return findings, list(reads)   # a later call's spy calls this one's: what it reads later is not this call's


@pytest.mark.parametrize("make", [_defective, _split_v30])
def test_kept_columns_find_what_a_second_read_finds(tmp_path, monkeypatch, make):
    root = make(tmp_path / "ds")
    files = len(list(root.glob("data/*/*.parquet")))
    kept, kept_reads = _validate(root, monkeypatch, KEEP_ALL)
    again, again_reads = _validate(root, monkeypatch, KEEP_NONE)
    assert kept == again
    assert (len(kept_reads), len(again_reads)) == (0, files)
    if make is _defective:
        codes = {(code, episode) for code, _, episode, *_ in kept}
        assert {("STA050", 1), ("STA040", 3)} <= codes, kept


@pytest.mark.parametrize("make", [_defective, _split_v30])
def test_files_read_in_threads_find_what_one_at_a_time_finds(tmp_path, monkeypatch, make):
    """data_files reads READ_THREADS files at once, each asked to keep its columns as it is handed to a thread (the
    room less the bytes on disk of the files not yet taken): the same findings, and the same files kept from run to
    run."""
    root = make(tmp_path / "ds")
    first = pq.read_table(sorted(root.glob("data/*/*.parquet"))[0])
    alone, _ = _validate(root, monkeypatch, KEEP_NONE)
    share = common.budget.memory_budget() // (2 * first.nbytes)   # room for about two files
    runs = [_validate(root, monkeypatch, share, threads=3) for _ in range(3)]
    assert all(found == alone for found, _ in runs)
    assert runs[0][1] == runs[1][1] == runs[2][1]
    assert 0 < len(runs[0][1]) < len(list(root.glob("data/*/*.parquet")))   # some kept, some read again


def test_past_the_share_the_files_not_kept_are_read_again(tmp_path, monkeypatch):
    root = _defective(tmp_path / "ds")
    everything, _ = _validate(root, monkeypatch, KEEP_NONE)
    first = pq.read_table(root / "data/chunk-000/episode_000000.parquet",
                          columns=list(common.INDEX_FEATURES) + common.numeric_features(open_context(root).dataset))
    # room for half the first file: it is kept, and the remaining four are read by the stats family
    found, reads = _validate(root, monkeypatch, common.budget.memory_budget() // (first.nbytes // 2))
    assert found == everything
    assert reads == [f"episode_{e:06d}.parquet" for e in range(1, 5)]


def test_a_file_whose_numeric_columns_are_over_the_budget_is_named_by_the_stats_family(tmp_path, monkeypatch):
    root = make_dataset(tmp_path / "ds", version="v2.1", episodes=3, lengths=[40, 3000, 50], cameras=(),
                        noise=0.3).root
    # its bookkeeping columns fit this budget, its numeric ones do not (3000 rows of 16 + 16 float32s)
    monkeypatch.setenv("LERODOC_MEMORY_BUDGET", "200000")
    kept, kept_reads = _validate(root, monkeypatch, KEEP_ALL)
    again, _ = _validate(root, monkeypatch, KEEP_NONE)
    assert kept == again
    errors = [(code, file) for code, file, _, _, _, _ in kept if code.startswith(("LAY", "IDX", "STA052"))]
    assert errors == [("STA052", "data/chunk-000/episode_000001.parquet")], kept
    assert kept_reads == ["episode_000001.parquet"]   # the file the wider read could not keep


def test_stats_shapes_are_checked_once_per_opened_dataset(tmp_path, monkeypatch):
    """split runs one merge per part on the dataset it opened: the stats' shapes, checked by the first part, are not
    read again for the next (each part lets the stats tables go once it has copied them)."""
    from lerodoc.dataset import Dataset
    from lerodoc.formats import v30
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=4, lengths=[3, 4, 5, 6], cameras=()).root
    ds = Dataset.open(root)
    reads = []
    table = v30.StatsColumns.table.fget
    monkeypatch.setattr(v30.StatsColumns, "table", property(lambda self: reads.append(self.path) or table(self)))
    ds.require_complete()
    first = len(reads)
    for holder in {id(h): h for h in (ep._stats.holder for ep in ds.episodes)}.values():
        holder.release()
    ds.require_complete()
    assert first and len(reads) == first and ds.stats_fit
    assert not Dataset.open(root).stats_fit


def test_a_footer_is_parsed_once_for_the_same_bytes_and_again_when_the_file_changes(tmp_path, monkeypatch):
    """parquet_io parses a file's footer once per process (`_footer`): opening the same file again, in any of the
    readers, reuses it. The key is the footer's own bytes, read from the file each time, so a file rewritten in place
    with the same size, inode and times is read through its new footer: its new values and statistics."""
    from lerodoc.tables import parquet_io
    parsed = []   # every footer pyarrow parses: read_metadata, or a ParquetFile opened without one given
    real_read, real_file = pq.read_metadata, pq.ParquetFile

    class Counted(real_file):
        def __init__(self, source, *args, metadata=None, **kwargs):
            if metadata is None:
                parsed.append(source)
            super().__init__(source, *args, metadata=metadata, **kwargs)
    monkeypatch.setattr(parquet_io.pq, "read_metadata", lambda source: parsed.append(source) or real_read(source))
    monkeypatch.setattr(parquet_io.pq, "ParquetFile", Counted)
    path = tmp_path / "file.parquet"

    def write(values):
        with open(path, "r+b" if path.exists() else "wb") as f:   # in place: same inode
            pq.write_table(pa.table({"x": pa.array(values, pa.int64())}), f, compression="none")

    write([1, 2, 3])
    stat = path.stat()
    assert parquet_io.read_parquet(path).column("x").to_pylist() == [1, 2, 3]
    assert parquet_io.read_schema(path).names == ["x"]
    assert parquet_io.open_parquet(path).metadata.num_rows == 3
    assert len(parsed) == 1
    write([4, 5, 6])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_ino == stat.st_ino
    assert parquet_io.read_parquet(path).column("x").to_pylist() == [4, 5, 6]
    assert parquet_io.open_parquet(path).metadata.row_group(0).column(0).statistics.max == 6
    assert len(parsed) == 2


def test_footers_held_are_bounded_least_recently_used_first(tmp_path, monkeypatch):
    """The parsed footers held stay within FOOTERS_HELD (their estimated size: a parsed footer is about ten times its
    bytes); the least recently used is let go first, and is parsed again when asked for."""
    from lerodoc.tables import parquet_io
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"f{i}.parquet")
        pq.write_table(pa.table({f"c{j}": [i] for j in range(8)}), paths[-1])
    monkeypatch.setattr(parquet_io, "_FOOTERS", {})
    monkeypatch.setattr(parquet_io, "_footers_held", 0)
    one = 8 * parquet_io.FOOTER_CHUNK   # 8 columns, one row group
    monkeypatch.setattr(parquet_io, "FOOTERS_HELD", 2 * one + 4096)   # two footers and their bytes
    parquet_io.read_schema(paths[0])
    parquet_io.read_schema(paths[1])
    parquet_io.read_schema(paths[0])            # used again: paths[1] is now the least recently used
    parquet_io.read_schema(paths[2])
    footers = [parquet_io._footer_bytes(path.read_bytes()) for path in paths]   # distinct: each file's own values
    assert len(set(footers)) == 3
    assert list(parquet_io._FOOTERS) == [footers[0], footers[2]]
    assert parquet_io._footers_held <= parquet_io.FOOTERS_HELD
    assert parquet_io.read_parquet(paths[1]).column("c0").to_pylist() == [1]   # parsed again


def test_the_share_counts_what_pyarrow_holds_for_each_kept_column(tmp_path, monkeypatch):
    """A kept column costs pyarrow its arrays beside its values (`common.KEPT_COLUMN_BYTES`, a few KiB): a v2.1
    dataset of 400 small files of 300 features kept 26 KB of values a file and grew 2 MB a file. Room for three
    files' values is room for one file here: the stats family reads the other four."""
    root = _defective(tmp_path / "ds")
    everything, _ = _validate(root, monkeypatch, KEEP_NONE)
    first = pq.read_table(root / "data/chunk-000/episode_000000.parquet",
                          columns=list(common.INDEX_FEATURES) + common.numeric_features(open_context(root).dataset))
    assert first.num_columns * common.KEPT_COLUMN_BYTES > 2 * first.nbytes   # the charge is most of what is held
    found, reads = _validate(root, monkeypatch, common.budget.memory_budget() // (3 * first.nbytes))
    assert found == everything
    assert reads == [f"episode_{e:06d}.parquet" for e in range(1, 5)]
