"""flatten: list[1] columns become scalars, constant-length lists become fixed-size lists."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.ops.flatten import flatten
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_from_fixture, rows_by_episode, run_cli
from tests.lerobot_oracle import OracleFailure, check_with_lerobot


def add_list1_column(root, name="ts", ragged_episode=None):
    """Add a float64 feature declared shape [1] but stored as list<double> of length 1 (the seed's pitfall #2)."""
    info = json.loads((root / "meta/info.json").read_text())
    info["features"][name] = {"dtype": "float64", "shape": [1], "names": None}
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    for path in sorted(root.glob("data/*/*.parquet")):
        table = pq.read_table(path)
        episodes = table.column("episode_index").to_pylist()
        values = [[float(i)] if e != ragged_episode else [float(i), 0.0] for i, e in enumerate(episodes)]
        pq.write_table(table.append_column(name, pa.array(values, pa.list_(pa.float64()))), path)


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_list1_becomes_scalar_and_lists_become_fixed(tmp_path, version):
    fixture = make_dataset(tmp_path / "src", version=version, episodes=3, vector_storage="list")
    add_list1_column(fixture.root)
    report = flatten(fixture.root, tmp_path / "out")
    assert set(report.columns) == {"ts", "observation.state", "action"}
    ds = Dataset.open(tmp_path / "out")
    schema = pq.read_schema(ds.path(ds.episodes[0].data_file))
    assert schema.field("ts").type == pa.float64()
    assert schema.field("observation.state").type == pa.list_(pa.float32(), 6)
    hf = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert hf["ts"] == {"dtype": "float64", "_type": "Value"} and hf["action"]["_type"] == "Sequence"
    before, after = rows_by_episode(fixture.root), rows_by_episode(tmp_path / "out")
    for e in before:
        assert after[e]["ts"] == [v[0] for v in before[e]["ts"]]
        assert after[e]["observation.state"] == before[e]["observation.state"]
        assert after[e]["index"] == before[e]["index"]
    assert ds.info.features["ts"]["shape"] == [1]
    np.testing.assert_allclose(ds.stats["ts"]["max"], [max(max(r["ts"]) for r in after.values())])


def test_ragged_column_is_an_error_naming_column_and_episode(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=3)
    add_list1_column(fixture.root, ragged_episode=2)
    with pytest.raises(LerodocError) as error:
        flatten(fixture.root, tmp_path / "out")
    assert error.value.field == "ts" and error.value.episode == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
@pytest.mark.parametrize("row", ["first", "middle", "last"])
def test_one_ragged_row_anywhere_in_an_episode_is_found(tmp_path, version, row):
    """A single list of another length, at an episode's first, middle or last row (in v3.0, episode 1's last row
    sits in the middle of its file): a check that skipped a row of each episode would let it shift values."""
    fixture = make_dataset(tmp_path / "src", version=version, episodes=3, lengths=6)
    add_list1_column(fixture.root)
    for path in sorted(fixture.root.glob("data/*/*.parquet")):
        table = pq.read_table(path)
        episodes = table.column("episode_index").to_pylist()
        rows = [i for i, e in enumerate(episodes) if e == 1]
        if not rows:
            continue
        target = {"first": rows[0], "middle": rows[len(rows) // 2], "last": rows[-1]}[row]
        values = table.column("ts").to_pylist()
        values[target] = values[target] + [0.0]
        pq.write_table(table.set_column(table.schema.get_field_index("ts"), "ts",
                                        pa.array(values, pa.list_(pa.float64()))), path)
    with pytest.raises(LerodocError) as error:
        flatten(fixture.root, tmp_path / "out")
    assert error.value.field == "ts" and error.value.episode == 1
    assert not (tmp_path / "out").exists()


def test_nothing_to_flatten_is_said(tmp_path):
    """A no-op is a success that says so (exit 0, like convert's), and writes nothing."""
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2)
    report = flatten(fixture.root, tmp_path / "out")
    assert report.unchanged and report.output is None and not (tmp_path / "out").exists()
    proc = run_cli("flatten", fixture.root, "-o", tmp_path / "out")
    assert "nothing to flatten" in proc.stdout and not (tmp_path / "out").exists()


@pytest.mark.lerobot
def test_flatten_makes_lerobot_load_the_dataset(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=3)
    add_list1_column(fixture.root)
    expect = expect_from_fixture(fixture)
    with pytest.raises(OracleFailure) as failure:          # the defect is real: lerobot cannot load it
        check_with_lerobot(fixture.root, expect, backend="pyav", frames="2")
    assert failure.value.report["load_error"]
    flatten(fixture.root, tmp_path / "out")
    check_with_lerobot(tmp_path / "out", expect, backend="pyav", frames="3")
