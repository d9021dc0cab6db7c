"""No camera or column is lost without a word (issue 30, item 1).

A camera whose videos and episode metadata are on disk but whose info.json feature is gone is an error in
validate (LAY044); every writing command refuses an output that lacks a feature, column or camera of its
input it was not asked to drop (`dataset.require_kept`, run by staging for every writer); repair restores the
camera's feature from its video files, and the repaired dataset loads in lerobot with all three cameras.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lerodoc.dataset import Dataset
from lerodoc.promote.kept import undeclared_cameras
from lerodoc.ops.validate import validate
from tests.fixtures.factory import make_dataset
from tests.lerobot_oracle import check_with_lerobot
from tests.helpers import expect_from_fixture, run_cli

CAMERAS = ("observation.images.top", "observation.images.wrist", "observation.images.side")
LOST = CAMERAS[2]


def plant(root: Path, version: str):
    """A three-camera dataset whose info.json forgot the third camera (its videos and metadata stay)."""
    fixture = make_dataset(root, version=version, episodes=3, lengths=[10, 12, 11], cameras=CAMERAS,
                           episodes_per_file=2, vector_storage="list")   # list columns: flatten has work
    info = json.loads((root / "meta/info.json").read_text())
    del info["features"][LOST]
    if "total_videos" in info:
        info["total_videos"] -= 3
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    return fixture


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("planted")
    return {version: plant(base / version, version).root for version in ("v2.1", "v3.0")}


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_undeclared_camera_is_an_error_in_validate(planted, version):
    report = validate(planted[version], videos=True)
    found = [(f.code, f.severity, f.file, f.feature) for f in report.findings if f.code == "LAY044"]
    assert found == [("LAY044", "error", "meta/info.json", LOST)]
    assert not [f for f in report.findings if f.code == "LAY042"], "its videos are LAY044's, not leftovers"
    proc = run_cli("validate", "--videos", planted[version], check=False)
    assert proc.returncode != 0 and "LAY044" in proc.stdout + proc.stderr


WRITERS = {   # command line after the input and before -o; None: the output is a folder of parts
    "convert": ["convert"],
    "merge": ["merge"],
    "delete": ["delete", "--episodes", "1"],
    "split": ["split", "--episodes", "a:0-1", "--episodes", "b:2"],
    "tasks": ["tasks", "--set", "pick up the cube=lift the cube"],
    "features": ["features", "--drop", "action"],
    "flatten": ["flatten"],
    "select": ["select", "--state", "observation.state[0:3]", "--keep-source"],
    "quantiles": ["quantiles"],
    "encode": ["encode", "--reencode", "--cameras", "observation.images.top", "--codec", "h264", "--gop", "5"],
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_every_writer_refuses_to_lose_the_undeclared_camera(planted, tmp_path, command):
    """v3.0 input (convert writes v2.1): exit 4 naming the camera and nothing at -o; or, for an edit that keeps
    the files it does not touch (encode of another camera), an output that still holds the camera as the input
    does: its videos (the same bytes) and its episode metadata."""
    args = WRITERS[command]
    out = tmp_path / "out"
    proc = run_cli(args[0], planted["v3.0"], *args[1:], "-o", out, check=False)
    if proc.returncode == 0:
        source = undeclared_cameras(Dataset.open(planted["v3.0"]))[LOST]
        assert undeclared_cameras(Dataset.open(out)).get(LOST) == source, command
        assert all((out / f).read_bytes() == (planted["v3.0"] / f).read_bytes() for f in source)
        return
    assert proc.returncode == 4, (command, proc.returncode, proc.stderr)
    assert LOST in proc.stderr and "repair" in proc.stderr, proc.stderr
    assert not out.exists()


def test_a_camera_dropped_on_request_is_not_refused(tmp_path):
    """`features --drop CAMERA` asks for the loss: the output has two cameras and validates clean."""
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=2, lengths=[8, 9], cameras=CAMERAS)
    run_cli("features", fixture.root, "--drop", LOST, "-o", tmp_path / "out")
    info = json.loads((tmp_path / "out/meta/info.json").read_text())
    assert [k for k, s in info["features"].items() if s["dtype"] == "video"] == list(CAMERAS[:2])
    assert not (tmp_path / "out/videos" / LOST).exists()
    assert validate(tmp_path / "out", videos=True).errors == 0


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_repair_restores_the_camera_and_convert_keeps_it(planted, tmp_path, version):
    run_cli("repair", planted[version], "-o", tmp_path / "fixed")
    info = json.loads((tmp_path / "fixed/meta/info.json").read_text())
    spec = info["features"][LOST]
    assert spec["dtype"] == "video" and spec["shape"] == [64, 96, 3]
    assert (spec["info"]["video.codec"], spec["info"]["video.pix_fmt"]) == ("h264", "yuv420p")
    assert validate(tmp_path / "fixed", videos=True).errors == 0
    assert info["codebase_version"] == "v3.0"   # what repair writes, whatever it reads
    run_cli("convert", tmp_path / "fixed", "-o", tmp_path / "converted", "--to", "v2.1")
    converted = json.loads((tmp_path / "converted/meta/info.json").read_text())
    assert [k for k, s in converted["features"].items() if s["dtype"] == "video"] == \
        [k for k, s in info["features"].items() if s["dtype"] == "video"]
    assert sorted(p.name for p in (tmp_path / "converted/videos").rglob(f"*{LOST}*") if p.is_dir()) == [LOST]


@pytest.mark.lerobot
def test_repaired_camera_loads_in_lerobot_frame_exact(tmp_path):
    fixture = plant(tmp_path / "src", "v3.0")
    run_cli("repair", fixture.root, "-o", tmp_path / "fixed")
    expect = expect_from_fixture(fixture)
    assert set(expect["video_keys"]) == set(CAMERAS)
    check_with_lerobot(tmp_path / "fixed", expect, backend="pyav")

