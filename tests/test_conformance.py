"""lerodoc's outputs as lerobot 0.6.1's LeRobotDataset sees them: every episode, row and video frame."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.ops.convert import convert
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_from_fixture, require
from tests.lerobot_oracle import OracleFailure, check_with_lerobot, convert_with_lerobot

pytestmark = pytest.mark.lerobot
BACKENDS = ["pyav", "torchcodec"]


def needs_backend(backend: str) -> None:
    """lerobot's torchcodec backend needs system FFmpeg: without it a torchcodec case skips, or fails in CI."""
    if backend == "torchcodec":
        require(shutil.which("ffmpeg"), "ffmpeg is not installed (lerobot's torchcodec backend needs it)")
G1 = Path(__file__).resolve().parents[2] / "shared" / "data" / "g1_v21"


@pytest.mark.parametrize("backend", BACKENDS)
def test_v21_to_v30_loads_aligned_in_lerobot(tmp_path, backend):
    needs_backend(backend)
    fixture = make_dataset(tmp_path / "src", version="v2.1", dataset_id=3, episodes=4, codec="h264",
                           bframes=2, gop=10)
    convert(fixture.root, tmp_path / "out", to="v3.0")
    report = check_with_lerobot(tmp_path / "out", expect_from_fixture(fixture), backend=backend)
    assert report["frames_checked"] == fixture.total_frames and report["misaligned"] == 0


def test_av1_multi_file_v30_loads_in_lerobot(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", dataset_id=5, episodes=5, codec="av1", gop=2,
                           noise=20)
    convert(fixture.root, tmp_path / "out", to="v3.0", data_file_size_mb=0.01, video_file_size_mb=0.05)
    report = check_with_lerobot(tmp_path / "out", expect_from_fixture(fixture), backend="pyav")
    assert report["episodes_checked"] == 5 and report["misaligned"] == 0


def test_v30_v21_v30_round_trip_loads_in_lerobot(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", dataset_id=7, episodes=5, episodes_per_file=3,
                           keyframe_at_episode_start=False, gop=8)
    report = convert(fixture.root, tmp_path / "v21", to="v2.1")
    assert report.reencoded_clips  # boundaries off keyframes were re-encoded, and said so
    convert(tmp_path / "v21", tmp_path / "back", to="v3.0")
    check_with_lerobot(tmp_path / "back", expect_from_fixture(fixture), backend="torchcodec" if shutil.which("ffmpeg") else "pyav")


def test_lerobot_converter_output_converts_back_and_forth(tmp_path):
    """A v3.0 written by lerobot's own converter goes to v2.1 and back and still loads aligned."""
    fixture = make_dataset(tmp_path / "src", version="v2.1", dataset_id=9, episodes=3)
    theirs = convert_with_lerobot(fixture.root, tmp_path / "lerobot").root
    convert(theirs, tmp_path / "v21", to="v2.1")
    convert(tmp_path / "v21", tmp_path / "back", to="v3.0")
    check_with_lerobot(tmp_path / "back", expect_from_fixture(fixture), backend="pyav")


@pytest.mark.shared
@pytest.mark.parametrize("backend", BACKENDS)
def test_real_g1_converts_and_loads_frame_exact(tmp_path, backend):
    require(G1.is_dir(), "../shared/data/g1_v21 is not present")
    needs_backend(backend)
    convert(G1, tmp_path / "g1_v30", to="v3.0")
    key = "observation.images.cam_high"
    lengths = [393, 343, 357]
    expect = {"fps": 30, "video_keys": [key], "episodes": [
        {"length": n, "task": "Pick up the yellow bottle on the table.",
         "reference": {key: str(G1 / f"videos/chunk-000/{key}/episode_{e:06d}.mp4")}}
        for e, n in enumerate(lengths)]}
    report = check_with_lerobot(tmp_path / "g1_v30", expect, backend=backend, frames="12")
    assert report["misaligned"] == 0 and report["episodes_checked"] == 3


@pytest.mark.shared
def test_reference_check_catches_a_one_frame_shift(tmp_path):
    """The frame-exact check above can fail: shift one episode's window by a frame and it does."""
    require(G1.is_dir(), "../shared/data/g1_v21 is not present")
    convert(G1, tmp_path / "g1_v30", to="v3.0")
    key = "observation.images.cam_high"
    path = tmp_path / "g1_v30/meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    column = f"videos/{key}/from_timestamp"
    shifted = [t + (1 / 30 if e == 1 else 0) for e, t in enumerate(table.column(column).to_pylist())]
    pq.write_table(table.set_column(table.column_names.index(column), column,
                                    pa.array(shifted, pa.float64())), path)
    expect = {"fps": 30, "episodes": [
        {"length": n, "reference": {key: str(G1 / f"videos/chunk-000/{key}/episode_{e:06d}.mp4")}}
        for e, n in enumerate([393, 343, 357])]}
    with pytest.raises(OracleFailure) as failure:
        check_with_lerobot(tmp_path / "g1_v30", expect, backend="pyav", frames="12")
    examples = failure.value.report["misaligned_examples"]
    assert examples and {x["episode"] for x in examples} == {1}
