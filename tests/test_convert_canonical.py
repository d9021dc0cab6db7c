"""convert writes canonical output: what repair would fix in names and spellings (nested names LAY016, camera names
LAY018/LAY019) and the q01..q99 that v3.0 stats lack (STA020) are fixed on the way, each said in a line, and
validate of the output has nothing left for repair. Before, convert of the real G1 v2.1 dataset gave 5 warnings
that said "run repair" (2 nested names, the camera's 'channel', 2 missing quantiles)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.factory import make_dataset
from tests.helpers import require, run_cli

G1 = Path(__file__).resolve().parents[2] / "shared" / "data" / "g1_v21"


def fixable(root: Path) -> list[dict]:
    proc = run_cli("validate", root, "--json", check=False)
    report = json.loads(proc.stdout)
    assert report["errors"] == 0, report
    return [f for f in report["findings"] if f["fixable"]]


def test_real_v21_dataset_converts_to_canonical_v30(tmp_path):
    require(G1.is_dir(), f"{G1} (the real G1 v2.1 dataset) is not here")
    before = json.loads((G1 / "meta/info.json").read_text())["features"]
    out = tmp_path / "g1_v30"
    proc = run_cli("convert", G1, "-o", out)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("canonical on the way")]
    assert any("LAY016" in line and "observation.state" in line for line in lines), proc.stdout
    assert any("LAY018" in line for line in lines) and any("STA020" in line for line in lines), proc.stdout
    assert fixable(out) == []
    assert "[repair]" not in run_cli("validate", out, check=False).stdout
    after = json.loads((out / "meta/info.json").read_text())["features"]
    for key in ("observation.state", "action"):   # the same names, flat, in order
        assert after[key]["names"] == [n for group in before[key]["names"] for n in group]
    stats = json.loads((out / "meta/stats.json").read_text())
    assert all({"q01", "q99"} <= set(stats[k]) for k in ("observation.state", "action"))


def test_generated_nested_names_are_flat_after_convert(tmp_path):
    src = tmp_path / "nested"
    make_dataset(src, version="v2.1", episodes=3, lengths=[12, 15, 11], height=32, width=48)
    info_path = src / "meta/info.json"
    info = json.loads(info_path.read_text())
    motors = [f"motor_{i}" for i in range(6)]
    info["features"]["observation.state"]["names"] = {"motors": motors}           # a dict: LAY016
    info["features"]["action"]["names"] = [motors]                                # a list of one list: LAY016
    info["features"]["observation.images.top"]["names"] = ["height", "width", "channel"]   # LAY018
    info["features"]["observation.images.wrist"]["names"] = None                  # LAY019
    info_path.write_text(json.dumps(info, indent=4))
    found = {f["code"] for f in json.loads(run_cli("validate", src, "--json", check=False).stdout)["findings"]}
    assert {"LAY016", "LAY018", "LAY019"} <= found

    out = tmp_path / "out"
    proc = run_cli("convert", src, "-o", out, "--json")
    report = json.loads(proc.stdout)
    assert len([c for c in report["canonical"] if "LAY016" in c]) == 2, report["canonical"]
    assert any("LAY018" in c for c in report["canonical"]) and any("LAY019" in c for c in report["canonical"])
    features = json.loads((out / "meta/info.json").read_text())["features"]
    assert features["observation.state"]["names"] == motors and features["action"]["names"] == motors
    assert features["observation.images.top"]["names"] == ["height", "width", "channels"]
    assert features["observation.images.wrist"]["names"] == ["height", "width", "channels"]
    assert fixable(out) == []



def test_delete_split_and_merge_write_camera_names_as_convert_does(tmp_path):
    """delete, split and merge (one rewrite, `ops.merge.reconcile`) write a camera's names as convert does: before,
    they kept a v3.0 input's channels-first names (LAY018, a warning) and missing names (LAY019, an error lerobot
    0.6.1's policy features meet at names[2]), which repair then had to fix."""
    src = tmp_path / "cams"
    make_dataset(src, version="v3.0", episodes=4, lengths=[12, 15, 11, 9], height=32, width=48)
    info_path = src / "meta/info.json"
    info = json.loads(info_path.read_text())
    # channels first (LAY018): written [height, width, channels] with its shape reordered to match
    info["features"]["observation.images.top"].update(names=["channels", "height", "width"], shape=[3, 32, 48])
    info["features"]["observation.images.wrist"]["names"] = None                           # LAY019
    info_path.write_text(json.dumps(info, indent=4))
    found = {f["code"] for f in json.loads(run_cli("validate", src, "--json", check=False).stdout)["findings"]}
    assert {"LAY018", "LAY019"} <= found

    report = json.loads(run_cli("delete", src, "-o", tmp_path / "deleted", "--episodes", "0", "--json").stdout)
    notes = " ".join(report["reconciled"])
    assert "LAY018" in notes and "LAY019" in notes, report["reconciled"]
    run_cli("split", src, "-o", tmp_path / "parts", "--into", "a=0.5,b=0.5")
    run_cli("merge", tmp_path / "parts" / "a", tmp_path / "parts" / "b", "-o", tmp_path / "merged")
    outputs = [tmp_path / "deleted", tmp_path / "parts" / "a", tmp_path / "parts" / "b", tmp_path / "merged"]
    for out in outputs:
        features = json.loads((out / "meta/info.json").read_text())["features"]
        for camera in ("observation.images.top", "observation.images.wrist"):
            assert features[camera]["names"] == ["height", "width", "channels"], (out, camera)
            assert features[camera]["shape"] == [32, 48, 3], (out, camera)
        assert fixable(out) == [], out


@pytest.mark.parametrize("names", [["rgb"], ["height", "width"], {"axes": ["height", "width", "channels"]},
                                   [["height", "width", "channels"]]])
def test_camera_names_lerobot_cannot_read_are_an_error_that_convert_and_repair_fix(tmp_path, names):
    """lerobot 0.6.1's policy features read a camera's names[2]: names of fewer than 3, a dict or a nested list
    raise there (IndexError, KeyError), as null names do. validate calls them LAY019 (an error; they were LAY018, a
    warning), and convert, delete and repair write [height, width, channels]: before, repair left them as they were
    though LAY018's hint said it would write [height, width, channels]."""
    src = tmp_path / "named"
    make_dataset(src, version="v3.0", episodes=3, lengths=[12, 15, 11], height=32, width=48)
    info_path = src / "meta/info.json"
    info = json.loads(info_path.read_text())
    info["features"]["observation.images.top"]["names"] = names
    info_path.write_text(json.dumps(info, indent=4))
    report = json.loads(run_cli("validate", src, "--json", check=False).stdout)
    assert [(f["code"], f["severity"]) for f in report["findings"]] == [("LAY019", "error")], report["findings"]

    run_cli("repair", src, "-o", tmp_path / "repaired")
    run_cli("convert", src, "-o", tmp_path / "v21", "--to", "v2.1")
    run_cli("delete", src, "-o", tmp_path / "deleted", "--episodes", "0")
    for out in (tmp_path / "repaired", tmp_path / "v21", tmp_path / "deleted"):
        camera = json.loads((out / "meta/info.json").read_text())["features"]["observation.images.top"]
        assert (camera["names"], camera["shape"]) == (["height", "width", "channels"], [32, 48, 3]), out
        report = json.loads(run_cli("validate", out, "--json", check=False).stdout)
        assert report["errors"] == 0 and not [f for f in report["findings"] if f["code"] in ("LAY018", "LAY019")], \
            (out, report["findings"])
