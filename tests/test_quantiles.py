"""quantiles: exact against numpy, bounded-memory path, written only where asked, read by lerobot."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.tables.parquet_io import arrow_array
from lerodoc.ops.quantiles import quantiles
from lerodoc.tables.quantiles import quantiles as engine
from lerodoc.ops.stats import exact_stats
from lerodoc.tables import stats as stats_module
from lerodoc.tables.stats import block_stats
from lerodoc.tables.stats import LEVELS, QUANTILES
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_from_fixture, run_cli
from tests.lerobot_oracle import check_with_lerobot


def all_values(root, feature):
    return np.concatenate([np.array(pq.read_table(p, columns=[feature]).column(0).to_pylist(), dtype=np.float64)
                           .reshape(-1, 1 if feature != "observation.state" and feature != "action" else 6)
                           for p in sorted(root.glob("data/*/*.parquet"))])


def tree_digests(root):
    return {p.relative_to(root).as_posix(): hashlib.blake2b(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
@pytest.mark.parametrize("budget", [64 << 20, 50])   # in memory, and radix selection in passes
def test_quantiles_equal_numpy_and_only_stats_files_change(tmp_path, version, budget):
    fixture = make_dataset(tmp_path / "src", version=version, episodes=4, noise=0, lengths=[31, 57, 44, 60])
    before = tree_digests(fixture.root)
    report = quantiles(fixture.root, tmp_path / "out", budget=budget, workers=2)
    assert report.passes == (1 if budget > 1000 else report.passes) and (budget > 1000 or report.passes > 1)
    assert tree_digests(fixture.root) == before            # the input is untouched
    after = tree_digests(tmp_path / "out")
    changed = {k for k in after if after[k] != before.get(k)}
    ds = Dataset.open(tmp_path / "out")
    assert ds.version == "v3.0"   # a v2.1 dataset's copy is converted on the way
    if version == "v3.0":
        assert changed == {"meta/episodes/chunk-000/file-000.parquet", "meta/stats.json"}
    for feature in ("observation.state", "action", "timestamp", "index"):
        values = all_values(fixture.root, feature)
        for q, level in zip(QUANTILES, LEVELS):
            np.testing.assert_allclose(ds.stats[feature][q], np.quantile(values, level, axis=0), rtol=0, atol=0)
        np.testing.assert_allclose(ds.stats[feature]["mean"], values.mean(axis=0), rtol=1e-12)
        start = 0
        for ep in ds.episodes:
            part = values[start:start + ep.length]
            np.testing.assert_array_equal(ep.stats[feature]["q99"], np.quantile(part, 0.99, axis=0))
            start += ep.length


def test_engine_matches_numpy_on_awkward_data():
    rng = np.random.default_rng(1)
    data = np.concatenate([rng.normal(0, 1, (20011, 2)), rng.integers(0, 2, (20011, 1)), np.full((20011, 1), -2.5),
                           rng.standard_cauchy((20011, 1)) * 1e6], axis=1).astype(np.float32)
    data[:7, 0] = -0.0
    chunks = lambda: (data[i:i + 3000] for i in range(0, len(data), 3000))  # noqa: E731
    expected = np.quantile(data.astype(np.float64), LEVELS, axis=0)
    for budget, collect in ((1 << 30, 1 << 16), (10, 1 << 16), (10, 0)):
        got, passes = engine(chunks, LEVELS, count=len(data), width=data.shape[1], budget=budget, collect=collect)
        np.testing.assert_array_equal(got, expected)


def bits(stats):
    return {f: {k: np.asarray(v).tobytes() for k, v in by.items()} for f, by in stats.items()}


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_every_path_gives_the_same_bits(tmp_path, version):
    """In memory (1 or 3 threads), channel blocks and per-file worker processes, radix selection: the same bits
    for every stat of every episode and of the dataset."""
    fixture = make_dataset(tmp_path / "src", version=version, episodes=5, noise=3, lengths=[301, 57, 444, 60, 129])
    ds = Dataset.open(fixture.root)
    features = ds.info.numeric_keys
    frames = ds.total_frames
    runs = {"memory, 1 thread": exact_stats(ds, features, workers=1),
            "memory, 3 threads": exact_stats(ds, features, workers=3),
            "channel blocks": exact_stats(ds, features, workers=2, budget=frames * 3 // 2),
            "radix": exact_stats(ds, features, workers=2, budget=frames // 4)}
    assert [r[2] for r in runs.values()] == [1, 1, runs["channel blocks"][2], runs["radix"][2]]
    assert runs["channel blocks"][2] > 2 and runs["radix"][2] > 1
    reference = runs.pop("memory, 1 thread")
    for name, (dataset, per_episode, _) in runs.items():
        assert bits(dataset) == bits(reference[0]), name
        assert {e: bits(s) for e, s in per_episode.items()} == {e: bits(s) for e, s in reference[1].items()}, name


@pytest.mark.parametrize("partition", [0, 1 << 16])
def test_block_stats_are_numpys_bits(monkeypatch, partition):
    """Sorted or partitioned at the ranks (`tables.stats.PARTITION_WIDTH`: 0 partitions these rows of 1001)."""
    monkeypatch.setattr(stats_module, "PARTITION_WIDTH", partition)
    rng = np.random.default_rng(3)
    block = (rng.standard_normal((7, 1001)) * [[1], [1e3], [1e-3], [1], [5], [1], [1]]).astype(np.float32)
    block[3] = 2.5
    for rows in (block, block.T.copy().T, block[:, 17:900]):       # C order, F order, a slice of columns
        stats = block_stats(rows)
        values = np.ascontiguousarray(rows, dtype=np.float64)
        expect = {"min": values.min(axis=1), "max": values.max(axis=1), "mean": values.mean(axis=1),
                  "std": values.std(axis=1)}
        expect.update(zip(QUANTILES, np.quantile(values, LEVELS, axis=1)))
        for key, value in expect.items():
            assert stats[key].tobytes() == value.tobytes(), key


def test_engine_channel_blocks_read_only_their_channels():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((5000, 6)).astype(np.float32)
    chunks = lambda: (data[i:i + 700] for i in range(0, len(data), 700))  # noqa: E731
    expected = np.quantile(data.astype(np.float64), LEVELS, axis=0)
    asked = []

    def fill(rows, lo, hi):
        asked.append((lo, hi))
        rows[:] = data[:, lo:hi].T
    for use_fill in (None, fill):
        got, passes = engine(chunks, LEVELS, count=len(data), width=6, dtype=np.float32, budget=5000 * 2 // 2,
                             fill=use_fill)
        assert passes == 3 and got.tobytes() == expected.tobytes()
    assert asked == [(0, 2), (2, 4), (4, 6)]


def test_a_file_with_more_rows_than_its_episodes_is_a_clear_error(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2, lengths=[40, 50])
    path = fixture.root / "data/chunk-000/episode_000001.parquet"
    table = pq.read_table(path)
    pq.write_table(pa.concat_tables([table, table.slice(0, 3)]), path)
    for budget in (64 << 20, 20):
        with pytest.raises(LerodocError) as error:
            quantiles(fixture.root, budget=budget)
        assert str(error.value.file) == str(path) and "53 rows" in str(error.value)


def test_in_place_imports_no_pandas(tmp_path):
    """pandas costs a third of a second or more to import; pyarrow's pa.array imports it on first use."""
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=3)
    code = ("import sys; from lerodoc.cli import main; sys.argv = ['lerodoc', 'quantiles', sys.argv[1], '--in-place'];"
            "\ntry: main()\nexcept SystemExit as e: assert not e.code, e.code\nassert 'pandas' not in sys.modules")
    subprocess.run([sys.executable, "-c", code, str(fixture.root)], check=True, capture_output=True)
    assert "q99" in Dataset.open(fixture.root).stats["action"]


@pytest.mark.parametrize("values, kind", [
    ([1, 2, 3], None), (list(range(4)), pa.int64()), ([0.5, 1.5], pa.float64()), ([1.0, 2], None), ([], pa.int64()),
    ([[1.0, 2.0], [3.0, 4.0]], None), ([[1, 2], None, [3, 4]], None), ([[5]], None), ([[1, 2]], pa.list_(pa.float64())),
    ([[[[0.1]], [[0.2]]], None, [[[1.0]], [[2.0]]]], None), ([["a", "bé"], [], ["c"]], pa.list_(pa.string())),
    (["x", "yz", ""], pa.string()), ([[1.0], [2.0, 3.0]], None), ([1, None], None), (["a", None], pa.string())])
def test_arrow_array_is_pa_array(values, kind):
    want = pa.array(values, type=kind)
    for given in (values, [np.asarray(v) if isinstance(v, list) else v for v in values]):   # lists or arrays
        got = arrow_array(given, kind)
        assert got.type == want.type and got.equals(want)


def test_in_place_swaps_and_openpi_norm_stats(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=3)
    report = quantiles(fixture.root, in_place=True, openpi_path=tmp_path / "norm_stats.json")
    assert report.output == str(fixture.root)
    ds = Dataset.open(fixture.root)
    assert "q01" in ds.stats["observation.state"] and "q99" in ds.episodes[0].stats["action"]
    norm = json.loads((tmp_path / "norm_stats.json").read_text())["norm_stats"]
    assert set(norm) == {"state", "actions"} and set(norm["state"]) == {"mean", "std", "q01", "q99"}
    np.testing.assert_allclose(norm["actions"]["q99"], ds.stats["action"]["q99"])
    assert not list(tmp_path.glob(".src*"))


def test_dry_run_writes_nothing(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2)
    before = tree_digests(fixture.root)
    out = json.loads(run_cli("quantiles", fixture.root, "--dry-run", "--json").stdout)
    assert out["output"] is None and not out["stored"] and len(out["channels"]) == 6 + 6 + 5
    assert out["changes"] and {c["stat"] for c in out["changes"]} == {"q01", "q99"}
    assert tree_digests(fixture.root) == before


def test_nan_is_an_error_naming_episode_and_feature(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2, vector_storage="list")
    path = fixture.root / "data/chunk-000/episode_000001.parquet"
    table = pq.read_table(path)
    state = table.column("observation.state").to_pylist()
    state[3][2] = float("nan")
    pq.write_table(table.set_column(0, table.schema.field(0), pa.array(state, table.schema.field(0).type)), path)
    with pytest.raises(LerodocError) as error:
        quantiles(fixture.root)
    assert error.value.episode == 1 and error.value.field == "observation.state" and "frame 3" in str(error.value)


def test_flags_near_constant_and_extreme_channels(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2, lengths=[200, 200])
    path = fixture.root / "data/chunk-000/episode_000000.parquet"
    table = pq.read_table(path)
    state = np.array(table.column("observation.state").to_pylist())
    state[:, 1] = 0.25                   # constant joint
    state[0, 4] = 1e5                    # one wild reading
    field = table.schema.field("observation.state")
    pq.write_table(table.set_column(table.column_names.index("observation.state"), field,
                                    pa.array(state.tolist(), field.type)), path)
    (fixture.root / "data/chunk-000/episode_000001.parquet").write_bytes(path.read_bytes())
    report = quantiles(fixture.root)
    flags = {(r["feature"], r["channel"]): r["flags"] for r in report.channels}
    assert flags[("observation.state", 1)] == ["near-constant"]
    assert flags[("observation.state", 4)] == ["extreme"]
    assert flags[("observation.state", 0)] == [] and all(not f for (name, _), f in flags.items() if name == "index")


@pytest.mark.lerobot
def test_lerobot_quantile_normalisation_reads_the_stats(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=3)
    run_cli("convert", fixture.root, "-o", tmp_path / "v30")
    quantiles(tmp_path / "v30", in_place=True)
    expect = {**expect_from_fixture(fixture), "stats_keys": {"observation.state": list(QUANTILES),
                                                             "action": list(QUANTILES)},
              "quantile_normalize": ["observation.state", "action"]}
    report = check_with_lerobot(tmp_path / "v30", expect, backend="pyav", frames="3")
    stats = Dataset.open(tmp_path / "v30").stats
    for key in ("observation.state", "action"):
        raw = np.array(report["normalized"][key]["raw"], dtype=np.float64)
        ours = 2 * (raw - stats[key]["q01"]) / (stats[key]["q99"] - stats[key]["q01"]) - 1
        np.testing.assert_allclose(report["normalized"][key]["normalized"], ours, rtol=1e-5, atol=1e-5)


def test_hard_linked_copies_never_write_through_to_the_source(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2)
    before = tree_digests(fixture.root)
    quantiles(fixture.root, tmp_path / "a")
    quantiles(tmp_path / "a", in_place=True)       # rewrites meta files of a tree that shares inodes with src
    assert tree_digests(fixture.root) == before


def test_dataset_stats_gives_no_empty_entry_for_a_listed_feature_without_stats():
    """A feature asked for that neither the per-episode stats nor the quantiles hold gets no entry (an empty one
    would reach stats.json as a feature without stats); one that `previous` holds keeps its stats from there."""
    from lerodoc.tables.stats import dataset_stats
    one = {"count": np.array([2]), "min": np.array([0.0]), "max": np.array([1.0]), "mean": np.array([0.5]),
           "std": np.array([0.5])}
    stats = dataset_stats([{"a": one}], features=["a", "b"])
    assert list(stats) == ["a"] and stats["a"]["mean"].tolist() == [0.5]
    kept = {"min": np.array([7.0])}
    stats = dataset_stats([{"a": one}], features=["a", "b"], previous={"b": kept})
    assert list(stats) == ["b", "a"] and stats["b"] == kept


def _stats_json(root):
    return json.loads((root / "meta/stats.json").read_text())


def test_streamed_stats_equal_in_memory_and_hold_a_file_at_a_time(tmp_path, monkeypatch):
    """Past the budget, quantiles hands the episodes files their stats one data file at a time (StatsStream): the
    episodes files are byte for byte those the in-memory path writes, the dataset stats equal up to rounding (a
    file's episodes aggregated, then the files), and no more than the file being handed out and the next are held."""
    from lerodoc.ops import stats as stats_module
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=1500, lengths=3, episodes_per_file=300)
    info = json.loads((fixture.root / "meta/info.json").read_text())
    info["data_files_size_in_mb"] = 1   # episodes files of 1 MiB: several, each handed out as it is written
    (fixture.root / "meta/info.json").write_text(json.dumps(info))
    ds = Dataset.open(fixture.root)
    features = ds.info.numeric_keys
    assert stats_module.StatsStream.of(ds, features, budget=64 << 20) is None   # fits: the in-memory path
    assert stats_module.StatsStream.of(ds, features, budget=50) is not None
    held = []
    rows = stats_module.StatsStream.rows

    def spy(self, lo, hi):
        out = rows(self, lo, hi)
        held.append(len(self.parts))
        return out
    monkeypatch.setattr(stats_module.StatsStream, "rows", spy)
    whole = quantiles(fixture.root, tmp_path / "whole", workers=2)
    streamed = quantiles(fixture.root, tmp_path / "streamed", budget=50, workers=2)
    assert len(held) >= 3 and max(held) <= 1   # per episodes file; a file straddling two is the one kept
    episodes = sorted((tmp_path / "whole").glob("meta/episodes/*/*.parquet"))
    assert len(episodes) == len(held)
    for path in episodes:
        assert path.read_bytes() == (tmp_path / "streamed" / path.relative_to(tmp_path / "whole")).read_bytes()
    a, b = _stats_json(tmp_path / "whole"), _stats_json(tmp_path / "streamed")
    assert a.keys() == b.keys()
    for feature in a:
        assert a[feature].keys() == b[feature].keys()
        for stat in a[feature]:
            if stat in ("mean", "std"):
                np.testing.assert_allclose(b[feature][stat], a[feature][stat], rtol=1e-12, atol=1e-12)
            else:
                assert b[feature][stat] == a[feature][stat], (feature, stat)
    assert [r["feature"] for r in streamed.channels] == [r["feature"] for r in whole.channels]
    assert streamed.changes == whole.changes
    shutil.copytree(fixture.root, tmp_path / "in_place")
    quantiles(tmp_path / "in_place", in_place=True, budget=50)   # the old stats read while the new are staged
    for path in episodes:
        assert path.read_bytes() == (tmp_path / "in_place" / path.relative_to(tmp_path / "whole")).read_bytes()
    dry = quantiles(fixture.root, budget=50, workers=2)   # nothing written: the stats still reported
    assert dry.output is None and [r["q99"] for r in dry.channels] == [r["q99"] for r in streamed.channels]


def test_stream_only_forward_and_only_in_file_order(tmp_path):
    from lerodoc.ops.stats import StatsStream
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=6, lengths=4, episodes_per_file=2)
    ds = Dataset.open(fixture.root)
    stream = StatsStream.of(ds, ds.info.numeric_keys, budget=1)
    first = stream.rows(0, 3)
    assert {len(v) for v in first.values()} == {3} and list(stream.layout()) == list(first)
    with pytest.raises(ValueError):
        stream.rows(0, 3)
    assert {len(v) for v in stream.rows(3, 6).values()} == {3}
    ds.episodes[1], ds.episodes[2] = ds.episodes[2], ds.episodes[1]   # files interleaved: taken whole, not streamed
    assert StatsStream.of(ds, ds.info.numeric_keys, budget=1) is None


def test_streamed_openpi_error_keeps_no_output(tmp_path, monkeypatch):
    """The stream's dataset stats are known once its episodes files are written; an openpi refusal then (a NaN
    mean or std) still leaves no output and no norm stats file."""
    from lerodoc.ops import quantiles as quantiles_module

    def refuse(stats, keys):
        raise LerodocError("has non-finite std: openpi cannot read NaN or infinity", field="observation.state")
    monkeypatch.setattr(quantiles_module, "openpi_norm_stats", refuse)
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=4, lengths=5, episodes_per_file=2)
    with pytest.raises(LerodocError, match="non-finite"):
        quantiles(fixture.root, tmp_path / "out", budget=1, openpi_path=tmp_path / "norm.json")
    assert not (tmp_path / "out").exists() and not (tmp_path / "norm.json").exists()


def test_stream_refuses_kept_stats_that_change_shape_between_files(tmp_path):
    """Footers say every row of both episodes files holds the cameras' stats, but the second file's are another shape
    (crafted): the stream names the file (exit 3), and nothing is written."""
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=4, lengths=5, episodes_per_file=2)
    path = fixture.root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(0, 2), path)
    rest = table.slice(2)
    name = "stats/observation.images.top/mean"
    flat = pa.array([np.ravel(v).tolist() for v in rest.column(name).to_pylist()], pa.list_(pa.float64()))
    rest = rest.set_column(rest.schema.get_field_index(name), name, flat)
    if "meta/episodes/file_index" in rest.column_names:
        rest = rest.set_column(rest.schema.get_field_index("meta/episodes/file_index"), "meta/episodes/file_index",
                               pa.array([1] * rest.num_rows, pa.int64()))
    pq.write_table(rest, path.with_name("file-001.parquet"))
    assert len(Dataset.open(fixture.root).episodes) == 4
    result = run_cli("quantiles", fixture.root, "-o", tmp_path / "out", "--budget-mb", "0", check=False)
    assert result.returncode == 3, result.stderr
    assert "file-001.parquet" in result.stderr and "observation.images.top" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
