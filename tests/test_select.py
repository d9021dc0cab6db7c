"""select: state/action from slices, names, globs and separate features; values and stats follow."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.ops.select import select
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_episodes, rows_by_episode
from tests.lerobot_oracle import check_with_lerobot


def add_agibot_features(root):
    """AgiBot-style separate features: a 4-channel joint position and a 2-channel effector position."""
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["observation.states.joint.position"] = {"dtype": "float32", "shape": [4],
                                                             "names": [f"joint{i}" for i in range(4)]}
    info["features"]["observation.states.effector.position"] = {"dtype": "float32", "shape": [2],
                                                                "names": ["left_gripper", "right_gripper"]}
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    for path in sorted(root.glob("data/*/*.parquet")):
        table = pq.read_table(path)
        index = np.array(table.column("index").to_pylist(), dtype=np.float32)
        joint = np.stack([index * 10 + i for i in range(4)], axis=1)
        effector = np.stack([-index, index + 0.5], axis=1)
        table = table.append_column("observation.states.joint.position",
                                    pa.FixedSizeListArray.from_arrays(pa.array(joint.ravel()), 4))
        table = table.append_column("observation.states.effector.position",
                                    pa.FixedSizeListArray.from_arrays(pa.array(effector.ravel()), 2))
        pq.write_table(table, path)


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_slices_keep_per_frame_values_and_stats_follow(tmp_path, version):
    fixture = make_dataset(tmp_path / "src", version=version, episodes=3)
    report = select(fixture.root, tmp_path / "out", state=["observation.state[1:4]", "observation.state[j5]"],
                    action=["action[0,2]"])
    assert [c["name"] for c in report.channels] == ["j1", "j2", "j3", "j5", "j0", "j2"]
    ds = Dataset.open(tmp_path / "out")
    assert ds.info.features["observation.state"]["shape"] == [4] and ds.info.features["action"]["shape"] == [2]
    before, after = rows_by_episode(fixture.root), rows_by_episode(tmp_path / "out")
    for e in before:
        src = np.array(before[e]["observation.state"], dtype=np.float32)
        np.testing.assert_array_equal(np.array(after[e]["observation.state"], dtype=np.float32), src[:, [1, 2, 3, 5]])
        np.testing.assert_array_equal(np.array(after[e]["action"], dtype=np.float32),
                                      np.array(before[e]["action"], dtype=np.float32)[:, [0, 2]])
        assert after[e]["frame_index"] == before[e]["frame_index"]
    values = np.concatenate([np.array(after[e]["observation.state"], dtype=np.float64) for e in sorted(after)])
    np.testing.assert_array_equal(ds.stats["observation.state"]["q99"], np.quantile(values, 0.99, axis=0))
    np.testing.assert_allclose(ds.stats["observation.state"]["mean"], values.mean(axis=0), rtol=1e-12)
    assert ds.episodes[1].stats["action"]["min"].shape == (2,)


def test_separate_features_are_joined_and_dropped(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=2)
    add_agibot_features(fixture.root)
    report = select(fixture.root, tmp_path / "out", state=["observation.states.joint.position[1:3]",
                                                           "observation.states.effector.position"])
    assert report.dropped == ["observation.states.effector.position", "observation.states.joint.position"]
    ds = Dataset.open(tmp_path / "out")
    assert "observation.states.joint.position" not in ds.info.features
    assert ds.info.features["observation.state"]["names"] == [
        "observation.states.joint.position.joint1", "observation.states.joint.position.joint2",
        "observation.states.effector.position.left_gripper", "observation.states.effector.position.right_gripper"]
    rows = rows_by_episode(tmp_path / "out")
    index = np.array(rows[1]["index"], dtype=np.float32)
    np.testing.assert_array_equal(np.array(rows[1]["observation.state"], dtype=np.float32),
                                  np.stack([index * 10 + 1, index * 10 + 2, -index, index + 0.5], axis=1))
    assert "observation.states.joint.position" not in pq.read_schema(ds.path(ds.episodes[0].data_file)).names


def test_dry_run_reports_quantiles_and_flags_and_writes_nothing(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2, state_dim=40)
    report = select(fixture.root, state=["observation.state"], dry_run=True)
    assert report.output is None and not (tmp_path / "out").exists()
    assert len(report.channels) == 40 and all("q01" in c and "q99" in c for c in report.channels)
    assert report.warnings and "32" in report.warnings[0]


@pytest.mark.parametrize("spec, message", [
    ("observation.state[j9*]", "no channel"), ("nosuch[0:2]", "no feature"), ("observation.state[0,0]", "twice"),
    ("observation.state[99]", "out of range"), ("observation.images.top", "not a numeric vector")])
def test_bad_specs_are_named(tmp_path, spec, message):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2)
    with pytest.raises(LerodocError, match=message):
        select(fixture.root, tmp_path / "out", state=[spec])


@pytest.mark.lerobot
def test_selected_dataset_loads_in_lerobot_with_the_sliced_values(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=3)
    select(fixture.root, tmp_path / "out", state=["observation.state[2:5]"], action=["action[0:2]"])
    episodes = expect_episodes(fixture)
    value = f"{fixture.spec.dataset_id}*100000 + 1000*s + f"
    for ep in episodes:
        ep["values"] = {"observation.state": {"expr": value + " + (k + 2)/8"},
                        "action": {"expr": f"-({value} + k/8 + 0.5)"}}
    check_with_lerobot(tmp_path / "out", {"fps": 30, "episodes": episodes,
                                          "stats_keys": {"observation.state": ["q01", "q99"]}}, backend="pyav")


def test_outputs_of_flatten_select_and_quantiles_validate_clean(tmp_path):
    from lerodoc.checks import open_context, run_checks
    from lerodoc.checks.common import ERROR
    from lerodoc.ops.flatten import flatten
    from lerodoc.ops.quantiles import quantiles

    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=3, vector_storage="list")
    flatten(fixture.root, tmp_path / "flat")
    select(tmp_path / "flat", tmp_path / "sel", state=["observation.state[0:4]"], action=["action[0:4]"])
    quantiles(tmp_path / "sel", tmp_path / "q")
    for name in ("flat", "sel", "q"):
        found = run_checks(open_context(tmp_path / name, videos=True))
        assert [f.code for f in found if f.severity == ERROR] == [], name
