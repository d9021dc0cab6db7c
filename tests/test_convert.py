"""convert: v2.x -> v3.0, v3.0 -> v2.1, v2.0 -> v2.1, round trips, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lerodoc.dataset import Dataset, read_rows
from lerodoc.errors import LerodocError
from lerodoc.formats.jsonl import stats_from_json
from lerodoc.formats.v21 import read_episode_stats
from lerodoc.ops.convert import convert
from lerodoc.ops.rewrite import _group_by_size
from tests.fixtures.factory import make_dataset
from tests.helpers import decode_all, identities_at, packets, rows_by_episode, run_cli
from tests.fixtures.identity import decode_identity


def assert_aligned(root: Path, fixture) -> None:
    """Every row's video frame, at from_timestamp + timestamp, shows that row's identity."""
    ds = Dataset.open(root)
    assert [e.length for e in ds.episodes] == fixture.lengths
    for ep in ds.episodes:
        rows = read_rows(ds.path(ep.data_file), ep.data_row, ep.length, episode=ep.index,
                         columns=["timestamp", "frame_index", "episode_index", "index", "observation.state"]).to_pydict()
        assert rows["frame_index"] == list(range(ep.length))
        assert rows["index"] == list(range(ep.from_index, ep.to_index))
        assert set(rows["episode_index"]) == {ep.index}
        np.testing.assert_array_equal(np.array(rows["observation.state"], dtype=np.float32),
                                      np.stack([fixture.expected_state(ep.index, f) for f in range(ep.length)]))
        for camera, key in enumerate(fixture.spec.cameras):
            span = ep.videos[key]
            assert span.to_timestamp - span.from_timestamp == pytest.approx(ep.length / fixture.spec.fps, abs=1e-9)
            times = [span.from_timestamp + t for t in rows["timestamp"]]
            got = identities_at(ds.path(span.file), times)
            want = [fixture.expected_identity(ep.index, f, camera) for f in range(ep.length)]
            assert got == want, f"episode {ep.index} {key} misaligned"


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_v21_to_v30_keeps_rows_and_aligns_frames(tmp_path, codec):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=4, codec=codec)
    report = convert(fixture.root, tmp_path / "out", to="v3.0", workers=2)
    assert (report.episodes, report.frames, report.reencoded_clips) == (4, fixture.total_frames, [])
    ds = Dataset.open(tmp_path / "out")
    assert ds.version == "v3.0" and ds.info.total_frames == fixture.total_frames
    assert len(ds.data_files()) == 1 and all(len(ds.video_files(k)) == 1 for k in fixture.spec.cameras)
    assert rows_by_episode(tmp_path / "out") == rows_by_episode(fixture.root)
    assert_aligned(tmp_path / "out", fixture)
    src = Dataset.open(fixture.root)
    for a, b in zip(src.episodes, ds.episodes):
        assert a.stats.keys() == b.stats.keys()
        np.testing.assert_allclose(a.stats["observation.state"]["mean"], b.stats["observation.state"]["mean"])
    state = ds.stats["observation.state"]
    values = np.stack([fixture.expected_state(e, f) for e in range(4) for f in range(fixture.lengths[e])])
    np.testing.assert_allclose(state["mean"], values.astype(np.float64).mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(state["std"], values.astype(np.float64).std(axis=0), rtol=1e-5)
    assert state["count"].tolist() == [fixture.total_frames]


def test_size_caps_roll_files_over(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=5, noise=20)
    convert(fixture.root, tmp_path / "out", to="v3.0", data_file_size_mb=1e-6, video_file_size_mb=1e-6)
    ds = Dataset.open(tmp_path / "out")
    assert (ds.info.data_files_size_in_mb, ds.info.video_files_size_in_mb) == (1, 1)
    assert len(ds.data_files()) == 5 and len(ds.video_files("observation.images.top")) == 5
    assert_aligned(tmp_path / "out", fixture)


def test_group_by_size_keeps_order_and_cap():
    assert _group_by_size([4, 4, 4, 9, 1], 8) == [[0, 1], [2], [3], [4]]


@pytest.mark.parametrize("keyframes", [True, False])
def test_v30_to_v21_cuts_without_bleeding(tmp_path, keyframes):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=5, episodes_per_file=3, gop=10,
                           keyframe_at_episode_start=keyframes)
    report = convert(fixture.root, tmp_path / "out", to="v2.1")
    assert bool(report.reencoded_clips) is (not keyframes)
    ds = Dataset.open(tmp_path / "out")
    assert ds.version == "v2.1" and len(ds.data_files()) == 5
    for ep in ds.episodes:
        for camera, key in enumerate(fixture.spec.cameras):
            frames = decode_all(ds.path(ep.videos[key].file))
            assert [decode_identity(img) for _, img in frames] == \
                [fixture.expected_identity(ep.index, f, camera) for f in range(ep.length)]
            assert [t for t, _ in frames] == pytest.approx([f / fixture.spec.fps for f in range(ep.length)], abs=1e-9)
    assert rows_by_episode(tmp_path / "out") == rows_by_episode(fixture.root)


def test_round_trip_v21_v30_v21_is_lossless(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=3, bframes=2)
    convert(fixture.root, tmp_path / "v30", to="v3.0")
    report = convert(tmp_path / "v30", tmp_path / "back", to="v2.1")
    assert report.reencoded_clips == []
    assert rows_by_episode(tmp_path / "back") == rows_by_episode(fixture.root)
    src, back = Dataset.open(fixture.root), Dataset.open(tmp_path / "back")
    for a, b in zip(src.episodes, back.episodes):
        for key in fixture.spec.cameras:
            assert packets(back.path(b.videos[key].file)) == packets(src.path(a.videos[key].file))
        assert json.dumps({k: {s: v.tolist() for s, v in d.items()} for k, d in a.stats.items()}) == \
            json.dumps({k: {s: v.tolist() for s, v in d.items()} for k, d in b.stats.items()})
    assert (tmp_path / "back/meta/tasks.jsonl").read_text() == (fixture.root / "meta/tasks.jsonl").read_text()


def test_round_trip_v30_v21_v30_is_lossless(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=4, episodes_per_file=2)
    convert(fixture.root, tmp_path / "v21", to="v2.1")
    convert(tmp_path / "v21", tmp_path / "back", to="v3.0")
    assert rows_by_episode(tmp_path / "back") == rows_by_episode(fixture.root)
    assert_aligned(tmp_path / "back", fixture)
    src, back = Dataset.open(fixture.root), Dataset.open(tmp_path / "back")
    for key in fixture.spec.cameras:
        assert sum((packets(src.path(f)) for f in src.video_files(key)), []) == \
            sum((packets(back.path(f)) for f in back.video_files(key)), [])


def test_v20_to_v21_computes_episode_stats(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.0", episodes=3)
    report = convert(fixture.root, tmp_path / "out", to="v2.1")
    assert report.warnings and "camera stats" in report.warnings[0]
    ds = Dataset.open(tmp_path / "out")
    for ep in ds.episodes:
        values = np.stack([fixture.expected_state(ep.index, f) for f in range(ep.length)]).astype(np.float64)
        np.testing.assert_allclose(ep.stats["observation.state"]["mean"], values.mean(axis=0))
        np.testing.assert_allclose(ep.stats["observation.state"]["min"], values.min(axis=0))
        assert ep.stats["observation.state"]["count"].tolist() == [ep.length]


def test_gapped_episode_indices_are_renumbered(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=3)
    # renumber episode 2 -> 5 on disk, as a hand-edited export would
    root = fixture.root
    lines = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines()]
    lines[2]["episode_index"] = 5
    (root / "meta/episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (root / "data/chunk-000/episode_000002.parquet").rename(root / "data/chunk-000/episode_000005.parquet")
    for key in fixture.spec.cameras:
        d = root / "videos/chunk-000" / key
        (d / "episode_000002.mp4").rename(d / "episode_000005.mp4")
    stats = [json.loads(x) for x in (root / "meta/episodes_stats.jsonl").read_text().splitlines()]
    stats[2]["episode_index"] = 5
    (root / "meta/episodes_stats.jsonl").write_text("".join(json.dumps(x) + "\n" for x in stats))
    report = convert(root, tmp_path / "out", to="v3.0")
    assert report.renumbered_episodes == []  # the parquet rows still say episode 2: nothing moved
    ds = Dataset.open(tmp_path / "out")
    assert [e.index for e in ds.episodes] == [0, 1, 2]


BAD_INPUTS = {
    "missing info.json": lambda root: (root / "meta/info.json").unlink(),
    "unknown version": lambda root: (root / "meta/info.json").write_text(
        (root / "meta/info.json").read_text().replace('"v2.1"', '"v7.0"')),
    "truncated parquet": lambda root: _truncate(root / "data/chunk-000/episode_000001.parquet", 200),
    "truncated mp4": lambda root: _truncate(root / "videos/chunk-000/observation.images.top/episode_000001.mp4", 900),
    "malformed jsonl": lambda root: (root / "meta/episodes.jsonl").write_text('{"episode_index": 0,\n'),
}


def _truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@pytest.mark.parametrize("defect", BAD_INPUTS)
def test_bad_input_is_a_clear_error_and_leaves_no_output(tmp_path, defect):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2)
    BAD_INPUTS[defect](fixture.root)
    proc = run_cli("convert", fixture.root, "-o", tmp_path / "out", check=False)
    assert proc.returncode == 3, proc.stderr
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_cli_converts_and_reports_json(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2)
    out = run_cli("convert", fixture.root, "-o", tmp_path / "out", "--json")
    report = json.loads(out.stdout)
    assert report["to_version"] == "v3.0" and report["frames"] == fixture.total_frames
    again = run_cli("convert", fixture.root, "-o", tmp_path / "out", check=False)
    assert again.returncode == 3 and "already exists" in again.stderr


def _line_by_line_stats(root: Path) -> dict:
    path = root / "meta/episodes_stats.jsonl"
    return {row["episode_index"]: stats_from_json(row["stats"]) for row in map(json.loads, path.read_text().splitlines())}


def _assert_same_stats(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for episode, by_feature in want.items():
        assert list(got[episode]) == list(by_feature)
        for feature, by_stat in by_feature.items():
            assert list(got[episode][feature]) == list(by_stat)
            for stat, value in by_stat.items():
                mine = got[episode][feature][stat]
                assert (mine.dtype, mine.shape, mine.tobytes()) == (value.dtype, value.shape, value.tobytes()), \
                    (episode, feature, stat)


def test_episode_stats_read_in_one_pass_are_the_line_by_line_arrays(tmp_path):
    """episodes_stats.jsonl read column-wise (pyarrow) gives the arrays of each line's stats_from_json, bit for
    bit; lines that are not regular (a scalar beside lists, ragged values) fall back and still agree; a bad value
    is still named by episode."""
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=3)
    _assert_same_stats(read_episode_stats(fixture.root), _line_by_line_stats(fixture.root))
    path = fixture.root / "meta/episodes_stats.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    feature = next(iter(rows[0]["stats"]))
    rows[1]["stats"][feature]["count"] = rows[1]["stats"][feature]["count"][0]     # a scalar among lists
    rows[2]["stats"][feature]["min"] = rows[2]["stats"][feature]["min"][:1]         # ragged
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _assert_same_stats(read_episode_stats(fixture.root), _line_by_line_stats(fixture.root))
    rows[2]["stats"][feature]["max"] = "high"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(LerodocError) as error:
        read_episode_stats(fixture.root)
    assert error.value.episode == rows[2]["episode_index"] and error.value.field == f"{feature}.max"


def test_column_digests_do_not_depend_on_chunking():
    """The read-back check digests planned rows (episode blocks) and re-read rows (parquet batches): the same
    values must give the same digest however they are chunked, and one changed value must not."""
    import pyarrow as pa

    from lerodoc.tables.parquet_io import column_digests
    rng = np.random.default_rng(0)
    values = rng.random(600, dtype=np.float32)
    table = pa.table({"state": pa.FixedSizeListArray.from_arrays(pa.array(values), 3),
                      "listed": pa.ListArray.from_arrays(pa.array(np.arange(0, 601, 3, dtype=np.int32)),
                                                         pa.array(values)),
                      "index": pa.array(np.arange(200)), "gaps": pa.array([1.0, None] * 100),
                      "text": pa.array([str(i) for i in range(200)])})
    rechunked = pa.concat_tables([table.slice(0, 7), table.slice(7, 0), table.slice(7, 150), table.slice(157)])
    assert rechunked.column("state").num_chunks == 4
    digests = column_digests(table)
    assert column_digests(rechunked) == digests and digests["state"] == digests["listed"]
    changed = values.copy()
    changed[100] = np.nextafter(changed[100], np.float32(2))
    table = table.set_column(0, "state", pa.FixedSizeListArray.from_arrays(pa.array(changed), 3))
    assert column_digests(table)["state"] != digests["state"]


def test_read_rows_reads_only_the_row_groups_that_hold_them(tmp_path):
    """An episode's rows come from the row groups that hold them (sliced where a group holds more): a
    damaged group elsewhere in the file is never read, and rows past the file's end are a clear error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"index": pa.array(np.arange(10)), "x": pa.array(np.arange(10) * 0.5)}), path,
                   row_group_size=4, compression="none")
    column = pq.ParquetFile(path).metadata.row_group(2).column(0)      # rows 8..9: overwrite its page header
    data = bytearray(path.read_bytes())
    data[column.data_page_offset:column.data_page_offset + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))
    with pytest.raises(LerodocError, match="cannot read parquet"):
        read_rows(path, 0, 10, episode=0)
    assert read_rows(path, 3, 3, ["index"]).column("index").to_pylist() == [3, 4, 5]   # across two groups
    assert read_rows(path, 4, 4).to_pydict() == {"index": [4, 5, 6, 7], "x": [2.0, 2.5, 3.0, 3.5]}
    assert read_rows(path, 2, 0, ["x"]).num_rows == 0
    with pytest.raises(LerodocError, match=r"holds 10 rows but the metadata puts rows 8\.\.10 there") as error:
        read_rows(path, 8, 3, episode=7)
    assert error.value.episode == 7
