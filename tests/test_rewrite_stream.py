"""Rewrites past the stats budget (issue 37): the sources' per-episode stats tables are read one at a time and let go
(`formats.v30.StatsColumns.transient`), and delete, split and merge write the episodes metadata from a
`formats.model.GatherStream`. What they write is what the whole path writes."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from lerodoc import dataset as dataset_module
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.formats import model
from lerodoc.formats.model import GatherStream
from lerodoc.ops.quantiles import quantiles
from tests.fixtures.factory import make_dataset
from tests.helpers import run_here


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """1500 episodes of 3 frames with two cameras, their per-episode stats (quantiles too) in several episodes
    metadata files (lerobot's size cap set to 1 MiB)."""
    root = tmp_path_factory.mktemp("stream")
    fixture = make_dataset(root / "raw", version="v3.0", episodes=1500, lengths=3, episodes_per_file=300)
    info = json.loads((fixture.root / "meta/info.json").read_text())
    info["data_files_size_in_mb"] = 1
    (fixture.root / "meta/info.json").write_text(json.dumps(info))
    quantiles(fixture.root, root / "src", workers=2)
    assert len(list((root / "src").glob("meta/episodes/*/*.parquet"))) >= 3
    return root / "src"


def _same_output(whole, streamed):
    """Every file byte for byte the same, but stats.json, whose mean and std may differ by rounding (the aggregate
    of per-file aggregates)."""
    names = sorted(p.relative_to(whole) for p in whole.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(streamed) for p in streamed.rglob("*") if p.is_file())
    for name in names:
        if name.name != "stats.json":
            assert (whole / name).read_bytes() == (streamed / name).read_bytes(), name
            continue
        a, b = json.loads((whole / name).read_text()), json.loads((streamed / name).read_text())
        assert a.keys() == b.keys() and all(a[f].keys() == b[f].keys() for f in a)
        for feature in a:
            for stat in a[feature]:
                if stat in ("mean", "std"):
                    np.testing.assert_allclose(b[feature][stat], a[feature][stat], rtol=1e-12, atol=1e-12)
                else:
                    assert b[feature][stat] == a[feature][stat], (feature, stat)


CASES = {
    "delete renumbering every episode": (["delete", "{src}", "--episodes", "0-2"], True),
    "delete renumbering none": (["delete", "{src}", "--episodes", "1497-1499"], True),
    "split": (["split", "{src}", "--into", "a=0.8,b=0.2"], True),
    "merge of two copies (half renumbered)": (["merge", "{src}", "{src}"], True),
    "select": (["select", "{src}", "--state", "observation.state[0:2]", "--action", "action"], True),
    "features renaming one and dropping one": (["features", "{src}", "--rename", "action=action.joints", "--drop",
                                                "observation.state"], True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_rewrite_past_the_stats_budget_writes_what_the_whole_path_writes(source, tmp_path, monkeypatch, case):
    argv, streams = CASES[case]
    argv = [a.format(src=source) for a in argv]
    assert run_here(*argv, "-o", str(tmp_path / "whole")).returncode == 0
    held = []
    rows = GatherStream.rows

    def spy(self, lo, hi):
        out = rows(self, lo, hi)
        held.append(len({id(r.holder) for r in self.rows_of if getattr(r.holder, "_table", None) is not None}))
        return out
    monkeypatch.setattr(GatherStream, "rows", spy)
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: 1)
    assert run_here(*argv, "-o", str(tmp_path / "streamed")).returncode == 0
    _same_output(tmp_path / "whole", tmp_path / "streamed")
    if streams:   # one call per output episodes file, holding at most the table it ends in and the next
        assert held and max(held) <= 2
    else:
        assert not held


def test_a_stream_refused_after_the_blocks_are_joined_updates_from_the_join(source, tmp_path, monkeypatch):
    """The blocks' stats are let go stat by stat as they are joined (rewrite._new_stats); a GatherStream refused
    after that (GatherStream.of gives None) updates the episodes from the join itself, so what is written is what
    the whole path writes, not stats the join emptied."""
    argv = ["merge", str(source), str(source)]
    assert run_here(*argv, "-o", str(tmp_path / "whole")).returncode == 0
    refused = []

    def refuse(cls, episodes, updates, **kwargs):
        refused.append(updates is not None and len(updates) > 0)
        return None
    monkeypatch.setattr(GatherStream, "of", classmethod(refuse))
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: 1)
    assert run_here(*argv, "-o", str(tmp_path / "refused")).returncode == 0
    assert refused == [True]
    _same_output(tmp_path / "whole", tmp_path / "refused")
    for out in ("whole", "refused"):   # the renumbered copy's stats are its new numbers', not its source's
        table = pq.read_table(sorted((tmp_path / out).glob("meta/episodes/*/*.parquet")),
                              columns=["episode_index", "stats/episode_index/min", "stats/episode_index/max",
                                       "stats/index/min", "dataset_from_index"])
        numbers = table["episode_index"].to_numpy()
        assert len(numbers) == 3000
        for name, expected in (("stats/episode_index/min", numbers), ("stats/episode_index/max", numbers),
                               ("stats/index/min", table["dataset_from_index"].to_numpy())):
            assert np.array_equal(np.concatenate(table[name].to_numpy(zero_copy_only=False)), expected), (out, name)


def test_past_the_budget_the_shape_check_lets_each_table_go_and_keeps_what_is_asked_later(source, monkeypatch):
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: 1)
    ds = Dataset.open(source)
    ds.require_complete()
    holders = {id(r.holder): r.holder for r in map(model.stats_row, ds.episodes)}.values()
    assert len(holders) >= 3 and all(h.transient and h._table is None for h in holders)
    assert model.stats_held(ds.episodes).all()
    assert all(model.stats_normal(model.stats_row(ep), ds.info.features) for ep in ds.episodes[::500])
    assert all(h._table is None for h in holders)   # answered from what the check kept, nothing read again
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: 1 << 40)
    within = Dataset.open(source)
    within.require_complete()
    assert not any(r.holder.transient for r in map(model.stats_row, within.episodes))


def test_the_stream_goes_forward_only_and_is_whole_before_its_aggregate(source, monkeypatch):
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: 1)
    ds = Dataset.open(source)
    ds.require_complete()
    stream = GatherStream.of(ds.episodes, None)
    first = stream.rows(0, 700)
    assert {len(v) for v in first.values()} == {700} and list(first) == list(stream.layout())
    with pytest.raises(ValueError):
        stream.rows(0, 700)
    with pytest.raises(ValueError):
        stream.basic()
    stream.rows(700, 1500)
    assert stream.basic()["action"]["count"].sum() == 1500 * 3
    ds.episodes[0].stats = dict(ds.episodes[0].stats)   # a read dict: not a row of a table, so not streamed
    assert GatherStream.of(ds.episodes, None) is None


def test_a_table_changed_after_its_check_is_a_lerodoc_error(source, tmp_path, monkeypatch):
    """The checked layout is what the stream writes; a file rewritten with other stats in between is named."""
    import shutil
    shutil.copytree(source, tmp_path / "src")
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: 1)
    ds = Dataset.open(tmp_path / "src")
    ds.require_complete()
    stream = GatherStream.of(ds.episodes, None)
    path = sorted((tmp_path / "src").glob("meta/episodes/*/*.parquet"))[0]
    table = pq.read_table(path)
    pq.write_table(table.drop_columns([n for n in table.column_names if n.startswith("stats/action/")]), path)
    with pytest.raises(LerodocError, match="changed since they were checked") as caught:
        stream.rows(0, 10)
    assert caught.value.file == str(path)


def test_a_merge_of_parts_each_within_the_budget_streams_when_past_it_together(source, tmp_path, monkeypatch):
    """Three copies of one part (a split's renumbered part): each within the budget, past it together.""" 
    assert run_here("split", str(source), "--into", "a=0.6,b=0.4", "-o", str(tmp_path / "parts")).returncode == 0
    parts = [str(tmp_path / "parts" / "b")] * 3
    sizes = []
    for part in parts:
        ds = Dataset.open(part)
        ds.require_complete()
        sizes.append(ds.stats_bytes)
    assert run_here("merge", *parts, "-o", str(tmp_path / "whole")).returncode == 0
    streamed = []
    rows = GatherStream.rows
    monkeypatch.setattr(GatherStream, "rows", lambda self, lo, hi: streamed.append(hi) or rows(self, lo, hi))
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: max(sizes) + 1)   # each part within, not all three
    assert run_here("merge", *parts, "-o", str(tmp_path / "streamed")).returncode == 0
    assert streamed
    _same_output(tmp_path / "whole", tmp_path / "streamed")


def test_a_merge_of_parts_lets_their_tables_go_as_soon_as_they_are_past_the_budget_together(source, tmp_path,
                                                                                            monkeypatch):
    """A hundred parts each within the budget held every part's stats table until the last part was checked (3 GB at
    a million episodes): now no more than the budget and one part's tables are held when the next part is checked."""
    assert run_here("split", str(source), "--into", "a=0.6,b=0.4", "-o", str(tmp_path / "parts")).returncode == 0
    part = Dataset.open(tmp_path / "parts" / "b")
    part.require_complete()
    opened, held = [], []
    open_ = Dataset.open.__func__
    require = Dataset.require_complete

    def open_and_note(cls, *args, **kwargs):
        ds = open_(cls, *args, **kwargs)
        opened.append(ds)
        return ds

    def noting(self, *args, **kwargs):   # the tables the parts checked before this one still hold
        held.append(sum(h._table is not None for ds in opened if ds is not self
                        for h in model.stats_holders(ds.episodes).values()))
        return require(self, *args, **kwargs)
    monkeypatch.setattr(Dataset, "open", classmethod(open_and_note))
    monkeypatch.setattr(Dataset, "require_complete", noting)
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: part.stats_bytes + 1)   # one part, not two
    assert run_here("merge", *[str(tmp_path / "parts" / "b")] * 4, "-o", str(tmp_path / "whole")).returncode == 0
    assert len(held) == 4 and held[1] >= 1   # the first part's table is held while it alone is within the budget
    assert held[2:] == [0, 0]                # past it together: let go before the third part is checked


def test_repair_past_the_budgets_writes_what_the_whole_path_writes(source, tmp_path, monkeypatch):
    """repair past the stats budget and past exact_stats' values budget: its episodes keep their sources' rows for
    the cameras, and the numeric features' exact stats come a data file at a time (`ops.stats.StatsStream`)."""
    from lerodoc.ops import stats as stats_module
    assert run_here("repair", str(source), "-o", str(tmp_path / "whole")).returncode == 0
    slices = []
    rows = stats_module.StatsStream.rows
    monkeypatch.setattr(stats_module.StatsStream, "rows", lambda self, lo, hi: slices.append(hi) or rows(self, lo, hi))
    monkeypatch.setattr(stats_module, "_fits", lambda *args: False)
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: 1)
    assert run_here("repair", str(source), "-o", str(tmp_path / "streamed")).returncode == 0
    assert len(slices) >= 3
    _same_output(tmp_path / "whole", tmp_path / "streamed")


def test_repair_without_cameras_streams_its_output_stats_past_the_values_budget(tmp_path, monkeypatch):
    """A repair that replaces every per-episode stat (no camera: it never reads, so never weighs, the sources'
    tables) still computes the output's stats a data file at a time past exact_stats' values budget: all of them in
    memory were 3.9 GB at a million episodes. What it writes is what the whole path writes."""
    from lerodoc.ops import stats as stats_module
    root = tmp_path / "raw"
    fixture = make_dataset(root, version="v3.0", episodes=900, lengths=3, episodes_per_file=300, cameras=())
    info = json.loads((fixture.root / "meta/info.json").read_text())
    info["data_files_size_in_mb"] = 1
    (fixture.root / "meta/info.json").write_text(json.dumps(info))
    src = tmp_path / "src"
    quantiles(fixture.root, src, workers=2)
    assert run_here("repair", str(src), "-o", str(tmp_path / "whole")).returncode == 0
    slices = []
    rows = stats_module.StatsStream.rows
    monkeypatch.setattr(stats_module.StatsStream, "rows", lambda self, lo, hi: slices.append(hi) or rows(self, lo, hi))
    monkeypatch.setattr(stats_module, "_fits", lambda *args: False)
    from lerodoc.ops import repair as repair_module

    def in_memory(*args, **kwargs):
        raise AssertionError("repair held every value of the output for its stats")
    monkeypatch.setattr(repair_module, "exact_stats", in_memory)
    assert run_here("repair", str(src), "-o", str(tmp_path / "streamed")).returncode == 0
    assert len(slices) >= 2   # an output episodes file at a time
    _same_output(tmp_path / "whole", tmp_path / "streamed")


def test_select_past_the_budget_reads_its_new_stats_from_spilled_files_a_slice_at_a_time(source, tmp_path,
                                                                                        monkeypatch):
    """derive's workers save the changed columns' per-episode stats beside the output (a scratch folder), the stream
    reads them a slice at a time, and the folder is gone once the output is written, or once the command fails."""
    from lerodoc.tables.stats import SpilledStack
    reads = []
    getitem = SpilledStack.__getitem__
    monkeypatch.setattr(SpilledStack, "__getitem__", lambda self, key: reads.append(key) or getitem(self, key))
    monkeypatch.setattr(dataset_module, "stats_budget", lambda: 1)
    out = tmp_path / "out"
    assert run_here("select", str(source), "--state", "observation.state[0:2]", "--action", "action",
                    "-o", str(out)).returncode == 0
    assert reads and all(isinstance(k, slice) and k != slice(None) for k in reads)   # never the whole stack
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    stats = pq.read_table(sorted(out.glob("meta/episodes/*/*.parquet"))[-1]).column("stats/action/q99")
    assert len(stats) and stats.null_count == 0
    from lerodoc.ops import derive

    seen = []

    def fail(*args, **kwargs):
        seen.extend(p.name for p in tmp_path.iterdir() if "lerodoc-scratch" in p.name and any(p.glob("*.npy")))
        raise LerodocError("stopped after the workers spilled")
    monkeypatch.setattr(derive, "dataset_quantiles", fail)
    assert run_here("select", str(source), "--state", "observation.state[0:2]", "--action", "action",
                    "-o", str(tmp_path / "out2")).returncode == 3
    assert len(seen) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_spilled_stack_reads_any_run_of_rows_across_its_parts(tmp_path):
    from lerodoc.tables.stats import SpilledStack
    whole = np.arange(2 * 17, dtype=np.float64).reshape(17, 2)
    paths = []
    for k, (a, b) in enumerate([(0, 5), (5, 6), (6, 17)]):
        paths.append(str(tmp_path / f"{k}.npy"))
        np.save(paths[-1], whole[a:b])
    stack = SpilledStack(paths, [5, 1, 11], (2,), np.float64)
    assert stack.shape == (17, 2) and len(stack) == 17
    for lo, hi in [(0, 17), (0, 5), (4, 7), (5, 6), (6, 6), (16, 17), (3, 40)]:
        np.testing.assert_array_equal(stack[lo:hi], whole[lo:hi])
    with pytest.raises(TypeError):
        stack[[0, 2]]


def test_spilled_updates_out_of_the_episodes_order_are_loaded_in_memory(tmp_path):
    """A stream reads spilled stats by position; stats not in the episodes' order (or not every episode's) are read
    into memory for `update_stats`, which finds episodes by index."""
    from types import SimpleNamespace

    from lerodoc.ops.derive import _spill, _updates
    from lerodoc.tables.stats import SpilledStack
    a, b = np.arange(6.0).reshape(3, 2), np.arange(6.0, 10.0).reshape(2, 2)
    parts = [([3, 4, 5], {"x": {"min": _spill(str(tmp_path / "0.npy"), a)}}),
             ([0, 1], {"x": {"min": _spill(str(tmp_path / "1.npy"), b)}})]
    in_order = _updates(parts, [SimpleNamespace(index=i) for i in (3, 4, 5, 0, 1)], True)
    assert isinstance(in_order.stacks["x"]["min"], SpilledStack)
    np.testing.assert_array_equal(in_order.stacks["x"]["min"][1:4], np.concatenate([a, b])[1:4])
    other = _updates(parts, [SimpleNamespace(index=i) for i in (0, 1, 3, 4, 5)], True)
    assert isinstance(other.stacks["x"]["min"], np.ndarray)
    np.testing.assert_array_equal(other[0]["x"]["min"], b[0])
    np.testing.assert_array_equal(other[5]["x"]["min"], a[2])


def test_a_merge_of_parts_laid_out_unlike_streams_each_stat_where_its_tables_hold_it(source, tmp_path, monkeypatch):
    """A split's first part keeps its bookkeeping features' quantiles; the renumbered parts hold the five basic stats
    for them. Their merge streams the quantile columns masked where a part's table lacks them, as the whole path
    gathers them."""
    assert run_here("split", str(source), "--into", "a=0.4,b=0.3,c=0.3", "-o", str(tmp_path / "parts")).returncode == 0
    layouts = [pq.read_schema(sorted((tmp_path / "parts" / p).glob("meta/episodes/*/*.parquet"))[0]).names
               for p in "ab"]
    assert "stats/index/q01" in layouts[0] and "stats/index/q01" not in layouts[1]
    for order in ("bac", "abc"):
        parts = [str(tmp_path / "parts" / p) for p in order]
        assert run_here("merge", *parts, "-o", str(tmp_path / f"whole_{order}")).returncode == 0
        streamed = []
        rows = GatherStream.rows
        monkeypatch.setattr(GatherStream, "rows", lambda self, lo, hi: streamed.append(hi) or rows(self, lo, hi))
        monkeypatch.setattr(dataset_module, "stats_budget", lambda: 1)
        assert run_here("merge", *parts, "-o", str(tmp_path / f"streamed_{order}")).returncode == 0
        monkeypatch.undo()
        assert len(streamed) >= 2
        _same_output(tmp_path / f"whole_{order}", tmp_path / f"streamed_{order}")
        files = sorted((tmp_path / f"streamed_{order}").glob("meta/episodes/*/*.parquet"))
        if order == "abc":   # a's rows hold index quantiles; b's and c's (renumbered) hold the basic stats alone
            nulls = [pq.read_table(f, columns=["stats/index/q01"]).column(0).null_count for f in files]
            assert nulls[0] == 0 and nulls[-1] > 0
        else:   # b's table lacks them, and a's rows are renumbered: no row holds them, no column
            assert not any("stats/index/q01" in pq.read_schema(f).names for f in files)


def test_merge_lets_go_of_the_episodes_of_sources_it_owns_once_executed(source, tmp_path):
    """A v3.0 source merge opened itself, or one given with `consume` (delete's), keeps only its first episode (what
    the kept check reads) once the plan is executed; one given without it (split's, merged once per part) keeps all."""
    from lerodoc.ops.merge import merge
    from lerodoc.selection import parse
    given = Dataset.open(source)
    merge([given], tmp_path / "kept", exclude={0: parse("0-2", "--episodes")})
    assert len(given.episodes) == 1500
    merge([given], tmp_path / "consumed", exclude={0: parse("0-2", "--episodes")}, consume=True)
    assert len(given.episodes) == 1
    assert len(Dataset.open(tmp_path / "consumed").episodes) == 1497
    assert (tmp_path / "kept" / "meta").is_dir()
