"""Fast checks of the synthetic dataset factory against the LeRobot on-disk formats."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fixtures import factory
from tests.fixtures.factory import Fixture, FixtureSpec, make_dataset
from tests.fixtures.identity import decode_identity


def _decode(path: Path) -> tuple[list[float], list, list[bool]]:
    """Frame times, decoded identities and keyframe flags (in pts order) of an mp4."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        keys = [p.is_keyframe for p in sorted(container.demux(stream), key=lambda p: p.pts or 0)
                if p.pts is not None]
        container.seek(0)
        frames = [(f.time, decode_identity(f.to_ndarray(format="rgb24")))
                  for f in container.decode(stream)]
    return [t for t, _ in frames], [i for _, i in frames], keys


def _data(fx: Fixture) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(p) for p in sorted(fx.root.glob("data/*/*.parquet"))],
                     ignore_index=True)


def _info(fx: Fixture) -> dict:
    return json.loads((fx.root / "meta/info.json").read_text())


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _v3_episodes(fx: Fixture) -> pd.DataFrame:
    return pd.read_parquet(fx.root / "meta/episodes/chunk-000/file-000.parquet")


def _check_columns(fx: Fixture) -> None:
    df = _data(fx)
    assert list(df.columns) == ["observation.state", "action", "timestamp", "frame_index",
                                "episode_index", "index", "task_index"]
    assert df["index"].tolist() == list(range(fx.total_frames))
    for row in df.itertuples(index=False):
        e, k = row.episode_index, row.frame_index
        assert np.array_equal(row[0], fx.expected_state(e, k))
        assert np.array_equal(row[1], fx.expected_action(e, k))
        assert row.timestamp == np.float32(k / fx.spec.fps)
        assert row.task_index == fx.task_index(e)


@pytest.mark.parametrize("version", ["v2.0", "v2.1"])
def test_v2_layout(tmp_path, version):
    fx = make_dataset(tmp_path / "ds", version=version, dataset_id=3)
    info = _info(fx)
    assert info["codebase_version"] == version
    assert info["total_frames"] == fx.total_frames == sum(fx.lengths)
    assert (info["total_episodes"], info["total_videos"], info["total_chunks"]) == (3, 6, 1)
    assert info["video_path"] == ("videos/chunk-{episode_chunk:03d}/{video_key}/"
                                  "episode_{episode_index:06d}.mp4")
    assert info["features"]["timestamp"] == {"dtype": "float32", "shape": [1], "names": None}
    _check_columns(fx)
    table = pq.read_table(fx.root / "data/chunk-000/episode_000001.parquet")
    assert table.schema.field("observation.state").type == pa.list_(pa.float32(), 6)
    hf = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]
    assert hf["observation.state"]["length"] == 6 and hf["index"] == {"dtype": "int64",
                                                                      "_type": "Value"}
    assert [r["length"] for r in _jsonl(fx.root / "meta/episodes.jsonl")] == fx.lengths
    assert _jsonl(fx.root / "meta/tasks.jsonl")[1] == {"task_index": 1, "task": "place the cube"}
    if version == "v2.1":
        stats = _jsonl(fx.root / "meta/episodes_stats.jsonl")[2]["stats"]
        assert stats["index"]["min"] == [sum(fx.lengths[:2])]
        assert stats["observation.images.top"]["count"] == [fx.lengths[2]]
        assert np.shape(stats["observation.images.top"]["mean"]) == (3, 1, 1)
        assert not (fx.root / "meta/stats.json").exists()
    else:
        stats = json.loads((fx.root / "meta/stats.json").read_text())
        assert set(stats["action"]) == {"min", "max", "mean", "std"}
        assert not (fx.root / "meta/episodes_stats.jsonl").exists()


def test_v3_layout(tmp_path):
    fx = make_dataset(tmp_path / "ds", version="v3.0", episodes=5, episodes_per_file=2,
                      vector_storage="list", tasks=("a", "b", "c"))
    info = _info(fx)
    assert list(info)[:4] == ["codebase_version", "fps", "features", "total_episodes"]
    assert info["total_tasks"] == 3 and "total_chunks" not in info
    assert sorted(p.name for p in fx.root.glob("data/chunk-000/*")) == [
        "file-000.parquet", "file-001.parquet", "file-002.parquet"]
    assert pq.ParquetFile(fx.root / "data/chunk-000/file-001.parquet").num_row_groups == 2
    _check_columns(fx)
    assert pq.read_schema(fx.root / "data/chunk-000/file-000.parquet").field(
        "action").type == pa.list_(pa.float32())
    eps = _v3_episodes(fx)
    assert eps["episode_index"].tolist() == list(range(5))
    assert eps["data/file_index"].tolist() == [0, 0, 1, 1, 2]
    assert eps["videos/observation.images.wrist/file_index"].tolist() == [0, 0, 1, 1, 2]
    assert eps["dataset_to_index"].tolist() == np.cumsum(fx.lengths).tolist()
    assert list(eps["tasks"][4]) == ["b"]
    assert list(eps.columns[-2:]) == ["meta/episodes/chunk_index", "meta/episodes/file_index"]
    assert list(eps["stats/index/count"][1]) == [fx.lengths[1]]
    tasks = pd.read_parquet(fx.root / "meta/tasks.parquet")
    assert tasks.index.name == "task" and tasks.loc["c", "task_index"] == 2
    stats = json.loads((fx.root / "meta/stats.json").read_text())
    state = np.stack(_data(fx)["observation.state"]).astype(np.float64)
    assert np.allclose(stats["observation.state"]["q01"], np.quantile(state, 0.01, axis=0))
    assert stats["index"]["max"] == [fx.total_frames - 1]
    assert stats["observation.images.top"]["count"] == [fx.total_frames]


@pytest.mark.parametrize("version, codec", [
    ("v2.0", "h264"), ("v2.1", "h264"), ("v2.1", "av1"), ("v3.0", "h264"), ("v3.0", "av1")])
def test_frames_decode_to_their_identity(tmp_path, version, codec):
    # SVT-AV1's fastest presets skip changed blocks of these frames at 128x192: keep this size
    size = {"height": 128, "width": 192} if codec == "av1" else {"noise": 4.0}
    fx = make_dataset(tmp_path / "ds", version=version, codec=codec, dataset_id=7,
                      lengths=[21, 17, 25], episodes_per_file=2, **size)
    info, fps = _info(fx), fx.spec.fps
    eps = _v3_episodes(fx) if version == "v3.0" else None
    decoded = {}  # v3.0 episodes share files: decode each once
    for camera in fx.spec.cameras:
        for e, n in enumerate(fx.lengths):
            if eps is None:
                path, start = info["video_path"].format(
                    episode_chunk=0, episode_index=e, video_key=camera), 0.0
            else:
                row = eps.iloc[e]
                path = info["video_path"].format(
                    video_key=camera, chunk_index=row[f"videos/{camera}/chunk_index"],
                    file_index=row[f"videos/{camera}/file_index"])
                start = row[f"videos/{camera}/from_timestamp"]
                assert row[f"videos/{camera}/to_timestamp"] == pytest.approx(start + n / fps,
                                                                             abs=1e-12)
            if path not in decoded:
                decoded[path] = _decode(fx.root / path)
            times, idents, _ = decoded[path]
            first = round(start * fps)
            assert abs(times[first] - start) < 1e-9
            for k in range(n):
                assert abs(times[first + k] - (start + k / fps)) < 1e-9
                assert idents[first + k] == fx.expected_identity(e, k, camera)


def test_every_frame_time_is_exact_with_bframes(tmp_path):
    fx = make_dataset(tmp_path / "ds", version="v2.1", bframes=3, gop=12, cameras=("cam",))
    times, idents, keys = _decode(fx.root / "videos/chunk-000/cam/episode_000000.mp4")
    assert [round(t * 30) for t in times] == list(range(fx.lengths[0]))
    assert all(abs(t - k / 30) < 1e-9 for k, t in enumerate(times))
    assert [i.frame for i in idents] == list(range(fx.lengths[0]))
    assert [k for k, key in enumerate(keys) if key] == list(range(0, fx.lengths[0], 12))


@pytest.mark.parametrize("codec", ["h264", "av1"])
@pytest.mark.parametrize("forced", [True, False])
def test_v3_keyframes_at_episode_starts(tmp_path, codec, forced):
    fx = make_dataset(tmp_path / "ds", version="v3.0", codec=codec, lengths=[40, 25, 33],
                      episodes_per_file=3, gop=30, keyframe_at_episode_start=forced,
                      cameras=("observation.images.top",))
    _, idents, keys = _decode(fx.root / "videos/observation.images.top/chunk-000/file-000.mp4")
    assert len(idents) == 98 and None not in idents
    assert keys[0]
    assert (keys[40], keys[65]) == (forced, forced)


def test_no_cameras(tmp_path):
    fx = make_dataset(tmp_path / "v3", version="v3.0", cameras=())
    assert _info(fx)["video_path"] is None and not (fx.root / "videos").exists()
    assert not any(c.startswith("videos/") for c in _v3_episodes(fx).columns)
    fx = make_dataset(tmp_path / "v2", spec=FixtureSpec(cameras=(), lengths=10))
    assert _info(fx)["video_path"] is None and _info(fx)["total_videos"] == 0
    assert fx.lengths == [10, 10, 10]


def test_defaults_are_deterministic(tmp_path):
    a, b = make_dataset(tmp_path / "a"), make_dataset(tmp_path / "b")
    assert a.lengths == b.lengths and len(set(a.lengths)) > 1
    assert make_dataset(tmp_path / "c", seed=1, cameras=()).lengths != a.lengths
    for name in ("meta/episodes_stats.jsonl", "data/chunk-000/episode_000002.parquet"):
        assert (a.root / name).read_bytes() == (b.root / name).read_bytes()


@pytest.mark.parametrize("dataset_id", range(16))
def test_every_channel_differs_in_float32(dataset_id):
    """In every row of every dataset id (0..15, the identity's range), the state and action channels all hold
    different float32 values, and each decodes back to its own channel: a swapped or mis-sliced channel
    (or state read as action) shows. The episodes and frames are the far corners the fixtures use."""
    for episode in (0, 1, 99):
        frames = np.array([0, 1, 59, 999])
        for dim in (2, 6, 40, 128):
            state = factory._vector(dataset_id, episode, frames, dim)
            action = factory._vector(dataset_id, episode, frames, dim, offset=0.5)
            assert state.dtype == action.dtype == np.float32
            both = np.concatenate([state, action], axis=1)
            assert not len(factory.collapsed_channels(both)), (dataset_id, episode, dim)
            base = dataset_id * 100000 + episode * 1000 + frames[:, None]
            assert np.array_equal((state.astype(np.float64) - base) * 8, np.broadcast_to(np.arange(dim), state.shape))


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_fixture_rows_have_distinct_channels(tmp_path, version):
    """What make_dataset writes, read back: no two channels of a row (state and action together) are equal."""
    fx = make_dataset(tmp_path / "ds", version=version, dataset_id=15, episodes=2, cameras=())
    df = _data(fx)
    both = np.concatenate([np.stack(df["observation.state"]), np.stack(df["action"])], axis=1)
    assert both.dtype == np.float32 and not len(factory.collapsed_channels(both))
