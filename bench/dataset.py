"""Benchmark datasets: a few real or generated v2.1 episodes tiled out to many episodes and cameras.

Tiling copies the episodes' mp4 bytes and rewrites only the bookkeeping columns, so the result has the
byte size and packet structure of real recordings without hours of encoding.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.fixtures.factory import make_dataset

SHARED_G1 = Path(__file__).resolve().parents[2] / "shared" / "data" / "g1_v21"


def seed_dataset(work: Path) -> Path:
    """A small real v2.1 dataset: ../shared/data/g1_v21 if present, else generated episodes."""
    if SHARED_G1.is_dir():
        return SHARED_G1
    fixture = make_dataset(work / "seed", version="v2.1", episodes=4, cameras=("observation.images.cam",),
                           height=240, width=320, noise=6, lengths=[300, 280, 320, 290], gop=2, codec="av1")
    return fixture.root


def tile_v21(seed: Path, out: Path, episodes: int, cameras: int, dataset_offset: int = 0) -> Path:
    """Write a v2.1 dataset of `episodes` x `cameras` by repeating the seed's episodes and its first camera."""
    info = json.loads((seed / "meta/info.json").read_text())
    src_eps = [json.loads(x) for x in (seed / "meta/episodes.jsonl").read_text().splitlines() if x.strip()]
    src_stats = {json.loads(x)["episode_index"]: json.loads(x)["stats"]
                 for x in (seed / "meta/episodes_stats.jsonl").read_text().splitlines() if x.strip()}
    video_keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    camera_spec = info["features"].pop(video_keys[0])
    for k in video_keys[1:]:
        info["features"].pop(k)
    names = [f"observation.images.cam{c}" for c in range(cameras)]
    info["features"] = {**{n: camera_spec for n in names}, **info["features"]}
    chunks = info["chunks_size"]
    episodes_rows, stats_rows, cursor = [], [], 0
    for e in range(episodes):
        src = src_eps[(e + dataset_offset) % len(src_eps)]
        s = src["episode_index"]
        table = pq.read_table(seed / info["data_path"].format(episode_chunk=s // chunks, episode_index=s))
        n = table.num_rows
        for name, values in (("episode_index", np.full(n, e)), ("index", np.arange(cursor, cursor + n))):
            table = table.set_column(table.column_names.index(name), name, pa.array(values, pa.int64()))
        data = out / info["data_path"].format(episode_chunk=e // chunks, episode_index=e)
        data.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, data)
        src_video = seed / info["video_path"].format(episode_chunk=s // chunks, video_key=video_keys[0],
                                                     episode_index=s)
        for name in names:
            dst = out / info["video_path"].format(episode_chunk=e // chunks, video_key=name, episode_index=e)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src_video, dst)
        stats = dict(src_stats[s])
        camera_stats = stats.pop(video_keys[0], None)
        stats.update({name: camera_stats for name in names if camera_stats})
        stats["episode_index"] = {"min": [e], "max": [e], "mean": [float(e)], "std": [0.0], "count": [n]}
        idx = np.arange(cursor, cursor + n)
        stats["index"] = {"min": [int(idx.min())], "max": [int(idx.max())], "mean": [float(idx.mean())],
                          "std": [float(idx.std())], "count": [n]}
        episodes_rows.append({"episode_index": e, "tasks": src["tasks"], "length": n})
        stats_rows.append({"episode_index": e, "stats": stats})
        cursor += n
    info.update(total_episodes=episodes, total_frames=cursor, total_videos=episodes * cameras,
                total_chunks=(episodes - 1) // chunks + 1, splits={"train": f"0:{episodes}"})
    (out / "meta").mkdir(parents=True, exist_ok=True)
    (out / "meta/info.json").write_text(json.dumps(info, indent=4))
    shutil.copyfile(seed / "meta/tasks.jsonl", out / "meta/tasks.jsonl")
    (out / "meta/episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in episodes_rows))
    (out / "meta/episodes_stats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stats_rows))
    return out


def seed_episodes(seed: Path, episodes: int, dataset_offset: int = 0) -> list[int]:
    """Which seed episode each tiled episode repeats (the rule `tile_v21` uses)."""
    numbers = [json.loads(x)["episode_index"] for x in (seed / "meta/episodes.jsonl").read_text().splitlines()
               if x.strip()]
    return [numbers[(e + dataset_offset) % len(numbers)] for e in range(episodes)]


def expectation(seed: Path, seed_eps: list[int], cameras: int) -> dict:
    """The lerobot oracle's expectation for a dataset whose episodes repeat `seed_eps` of the seed:
    frame identities for a generated seed, frame-exact reference videos for a real one."""
    info = json.loads((seed / "meta/info.json").read_text())
    lengths = {json.loads(x)["episode_index"]: json.loads(x)["length"]
               for x in (seed / "meta/episodes.jsonl").read_text().splitlines() if x.strip()}
    key = next(k for k, f in info["features"].items() if f["dtype"] == "video")
    names = [f"observation.images.cam{c}" for c in range(cameras)]
    episodes = []
    for s in seed_eps:
        video = seed / info["video_path"].format(episode_chunk=s // info["chunks_size"], video_key=key,
                                                 episode_index=s)
        entry = {"length": lengths[s]}
        if seed == SHARED_G1:
            entry["reference"] = {name: str(video) for name in names}
        else:
            entry["identity"] = {"dataset": 0, "episode": s, "cameras": {name: 0 for name in names}}
        episodes.append(entry)
    return {"fps": info["fps"], "episodes": episodes}
