"""The lerobot oracle itself: a dataset lerobot recorded passes, and corruptions of it fail."""

from __future__ import annotations

import copy
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.lerobot_oracle import OracleFailure, check_with_lerobot, make_native_v30

pytestmark = pytest.mark.lerobot

FRONT = "observation.images.front"


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    """(root, expect) of a 2-episode, 2-camera v3.0 dataset recorded by lerobot 0.6.1."""
    root = tmp_path_factory.mktemp("oracle") / "native"
    return root, make_native_v30(root)


@pytest.mark.parametrize("backend", ["pyav", "torchcodec"])
def test_native_dataset_passes(native, backend):
    root, expect = native
    report = check_with_lerobot(root, expect, backend=backend)
    assert report["episodes_checked"] == 2
    assert report["frames_checked"] == sum(ep["length"] for ep in expect["episodes"]) == 95
    assert report["meta"]["stats_keys"][FRONT]  # native recordings carry image stats


def test_native_image_dataset_passes(tmp_path):
    root = tmp_path / "images"
    expect = make_native_v30(root, lengths=(12, 7), images=True)
    report = check_with_lerobot(root, expect)
    assert report["frames_checked"] == 19 and report["meta"]["video_keys"] == []


def test_shifted_video_window_is_caught(native, tmp_path):
    root, expect = native
    bad = tmp_path / "bad"
    shutil.copytree(root, bad)
    path = bad / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    column = f"videos/{FRONT}/from_timestamp"
    starts = table.column(column).to_pylist()
    starts[0] += 1 / expect["fps"]  # episode 0's front camera now starts one frame late
    pq.write_table(table.set_column(table.column_names.index(column), column, pa.array(starts)), path)

    with pytest.raises(OracleFailure, match="misaligned") as failure:
        check_with_lerobot(bad, expect)
    report = failure.value.report
    assert report["misaligned"] == expect["episodes"][0]["length"]  # every frame, silently, no exception
    first = report["misaligned_examples"][0]
    assert (first["camera"], first["expected"]["frame"], first["got"]["frame"]) == (FRONT, 0, 1)
    assert not report["exceptions"]


def test_wrong_expectation_is_caught(native):
    root, expect = native
    wrong = copy.deepcopy(expect)
    wrong["episodes"][1]["length"] += 1
    wrong["episodes"][1]["values"]["observation.state"]["expr"] += " + 1"
    report = check_with_lerobot(root, wrong, frames=3, raise_on_failure=False)
    assert not report["ok"] and report["frames_checked"] == 6
    assert report["length_mismatches"] == [{"episode": 1, "expected": 56, "length": 55, "data_rows": 55}]
    assert report["value_mismatches"] == 3 and report["misaligned"] == 0
