"""Representations that other writers use and lerobot accepts: read them, and never write what lerobot can't load."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from lerodoc.errors import ExitCode
from lerodoc.ops.convert import convert
from lerodoc.ops.merge import merge
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_episodes, expect_from_fixture, rows_by_episode, run_cli, run_json
from tests.lerobot_oracle import check_with_lerobot

SCALARS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def store_scalars_as_lists(root, columns=SCALARS) -> None:
    """Every shape-(1,) column as list<len 1>, as AgiBot-style exporters write them."""
    for path in sorted(root.glob("data/*/*.parquet")):
        table = pq.read_table(path)
        for name in columns:
            column = table.column(name).combine_chunks()
            listed = pa.ListArray.from_arrays(pa.array(range(len(column) + 1), pa.int32()), column)
            table = table.set_column(table.column_names.index(name), name, listed)
        pq.write_table(table, path)


def tasks_as_pandas_index(root) -> None:
    """meta/tasks.parquet as lerobot 0.4.x writes it: the task strings are the unnamed pandas index."""
    tasks = Dataset.open(root).tasks
    pd.DataFrame({"task_index": range(len(tasks))}, index=tasks).to_parquet(root / "meta/tasks.parquet")


def test_tasks_stored_as_the_pandas_index_are_read(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=3)
    tasks_as_pandas_index(fixture.root)
    assert "__index_level_0__" in pq.read_schema(fixture.root / "meta/tasks.parquet").names
    assert Dataset.open(fixture.root).tasks == fixture.task_names
    assert run_json("info", fixture.root)["tasks"] == len(fixture.task_names)
    assert run_json("validate", fixture.root)["errors"] == 0
    convert(fixture.root, tmp_path / "v21", to="v2.1")
    assert Dataset.open(tmp_path / "v21").tasks == fixture.task_names


def test_tasks_parquet_without_task_text_names_the_file(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=2)
    pq.write_table(pa.table({"task_index": [0, 1]}), fixture.root / "meta/tasks.parquet")
    proc = run_cli("info", fixture.root, check=False)
    assert proc.returncode == ExitCode.BAD_INPUT and "Traceback" not in proc.stderr
    assert "meta/tasks.parquet" in proc.stderr and "task_index and task" in proc.stderr


@pytest.mark.lerobot
def test_convert_stores_list1_columns_as_scalars_and_lerobot_loads_it(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", dataset_id=4, episodes=3, vector_storage="list")
    want = rows_by_episode(fixture.root)
    store_scalars_as_lists(fixture.root)
    report = convert(fixture.root, tmp_path / "out", to="v3.0")
    assert set(report.normalised_columns) == {*SCALARS, "observation.state", "action"}
    assert report.normalised_columns["index"] == {"from": "list<element: int64>", "to": "int64"}
    schema = pq.read_schema(next((tmp_path / "out").glob("data/*/*.parquet")))
    assert schema.field("index").type == pa.int64()
    assert schema.field("action").type == pa.list_(pa.float32(), fixture.spec.action_dim)
    assert json.loads(schema.metadata[b"huggingface"])["info"]["features"]["index"] == \
        {"dtype": "int64", "_type": "Value"}
    assert rows_by_episode(tmp_path / "out") == want   # every value conserved: a list<1> row is its scalar
    findings = run_json("validate", tmp_path / "out")["findings"]
    assert [f for f in findings if f["code"].startswith("LAY")] == []
    check_with_lerobot(tmp_path / "out", expect_from_fixture(fixture), backend="pyav")


@pytest.mark.lerobot
def test_merge_of_list1_and_scalar_sources_loads_in_lerobot(tmp_path):
    a = make_dataset(tmp_path / "a", version="v3.0", dataset_id=1, episodes=2)
    b = make_dataset(tmp_path / "b", version="v2.1", dataset_id=2, episodes=2)
    store_scalars_as_lists(b.root)
    report = merge([a.root, b.root], tmp_path / "out")
    assert "frame_index" in report.normalised_columns
    check_with_lerobot(tmp_path / "out", {"fps": 30, "episodes": expect_episodes(a) + expect_episodes(b)},
                       backend="pyav")


def test_no_output_is_promoted_that_lerobot_cannot_load(tmp_path):
    """quantiles -o keeps the data files as they are; when those hold list<1> columns, lerobot could not
    load the result, so nothing is written (exit 4) and the message names the column and the fix."""
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=2)
    store_scalars_as_lists(fixture.root, columns=("frame_index",))
    proc = run_cli("quantiles", fixture.root, "-o", tmp_path / "out", check=False)
    assert proc.returncode == ExitCode.VERIFY_FAILED, proc.stderr
    assert "Traceback" not in proc.stderr and "frame_index" in proc.stderr and "lerodoc repair" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    run_cli("flatten", fixture.root, "-o", tmp_path / "flat")
    run_cli("quantiles", tmp_path / "flat", "-o", tmp_path / "out")
    assert (tmp_path / "out/meta/info.json").is_file()


def test_a_time_base_off_the_frame_grid_is_retimed_by_stream_copy(tmp_path):
    """An exporter's mp4 on a 1/1000 time base at 30 fps (lerobot refuses: frames up to 0.33 ms off k/30 s)
    converts into files on 1/15360 with every packet on its k/30 slot and every payload unchanged."""
    from fractions import Fraction

    import av

    from tests.helpers import packets
    from tests.zoo import members

    [member] = [m for m in members() if m.name == "export-v21-timebase-1000"]
    assert not member.lerobot_loads
    before = json.loads(run_cli("validate", member.root, "--videos", "--json", check=False).stdout)
    assert "VID005" in {f["code"] for f in before["findings"] if f["severity"] == "error"}
    report = convert(member.root, tmp_path / "out", to="v3.0")
    top = "observation.images.top"    # on 1/1000; the wrist camera is on 1/15360 and is joined as it is
    assert sorted((c["camera"], c["episode"]) for c in report.retimed_clips) == \
        [(top, e) for e in range(len(member.expect["episodes"]))]
    after = run_json("validate", tmp_path / "out", "--videos")
    assert after["errors"] == 0, after["findings"]
    [written] = sorted((tmp_path / "out/videos" / top).rglob("*.mp4"))
    with av.open(str(written)) as container:
        stream = container.streams.video[0]
        assert Fraction(stream.time_base) == Fraction(1, 15360)
        pts = sorted(p.pts for p in container.demux(stream) if p.size)
    assert pts == [512 * k for k in range(len(pts))]     # frame k at exactly k/30 s
    sources = sorted((member.root / "videos").glob(f"*/{top}/*.mp4"))
    assert packets(written) == [p for src in sources for p in packets(src)]   # stream copy: payloads unchanged


@pytest.mark.lerobot
def test_videos_under_another_top_folder_are_named_and_moved_by_repair(tmp_path):
    """Videos stored as video/<camera>/chunk-000/file-000.mp4 while info.json says videos/... (seen on the hub):
    validate names where each one is and that repair moves it; repair's output loads aligned."""
    import shutil

    fixture = make_dataset(tmp_path / "src", version="v3.0", dataset_id=6, episodes=3)
    for path in sorted((fixture.root / "videos").rglob("*.mp4")):
        moved = fixture.root / "video" / path.relative_to(fixture.root / "videos")
        moved.parent.mkdir(parents=True, exist_ok=True)
        path.rename(moved)
    shutil.rmtree(fixture.root / "videos")
    report = json.loads(run_cli("validate", fixture.root, "--json", check=False).stdout)
    misplaced = [f for f in report["findings"] if f["code"] == "LAY041"]
    assert misplaced and all(f["file"].startswith("video/") and f["fixable"] for f in misplaced)
    assert "belongs at videos/observation.images.top/chunk-000/file-000.mp4" in " ".join(f["message"] for f in misplaced)
    assert not [f for f in report["findings"] if f["code"] in ("LAY040", "LAY042")]
    run_cli("repair", fixture.root, "-o", tmp_path / "fixed")
    assert (tmp_path / "fixed/videos/observation.images.top/chunk-000/file-000.mp4").is_file()
    assert not (tmp_path / "fixed/video").exists()
    check_with_lerobot(tmp_path / "fixed", expect_from_fixture(fixture), backend="pyav")
