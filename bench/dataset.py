"""Benchmark datasets: a few real or generated v2.1 episodes tiled out to many episodes and cameras.

Tiling copies the episodes' mp4 bytes and rewrites only the bookkeeping columns, so the result has the
byte size and packet structure of real recordings without hours of encoding.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.fixtures.factory import make_dataset

SHARED_G1 = Path(__file__).resolve().parents[2] / "shared" / "data" / "g1_v21"


def parser(doc: str, episodes: int) -> argparse.ArgumentParser:
    """The options every tiled-dataset bench takes."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=episodes)
    p.add_argument("--cameras", type=int, default=3)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--rounds", type=int, default=3, help="timed runs of the fast tools (median reported)")
    return p


def work_dir(args: argparse.Namespace, prefix: str) -> Path:
    work = args.work or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    return work


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


def numeric_v30(root: Path, frames: int, episodes: int, dims: dict[str, int], fps: int = 30, seed: int = 0,
                rows_per_file: int = 1_000_000) -> Path:
    """A v3.0 dataset of numeric features only (no video, no stats), written through lerodoc's format layer.

    Channels mix scales like real robot logs: joint angles, forces, currents (x3000), a constant channel.
    """
    from lerodoc.formats.model import Episode
    from lerodoc.formats import v30
    from lerodoc.formats.hf import schema_for
    from lerodoc.formats.info import DEFAULT_FEATURE_SPECS, Info

    rng = np.random.default_rng(seed)
    features = {name: {"dtype": "float32", "shape": [d], "names": [f"{name}.{i}" for i in range(d)]}
                for name, d in dims.items()}
    features.update(DEFAULT_FEATURE_SPECS)
    columns = list(features)
    schema = schema_for(features, columns)
    lengths = np.full(episodes, frames // episodes)
    lengths[: frames % episodes] += 1
    scale = {name: np.where(np.arange(d) % 7 == 3, 3000.0, 1.0).astype(np.float32) for name, d in dims.items()}
    info = Info(codebase_version="v3.0", fps=fps, features=features, robot_type="synthetic")
    eps, start, chunk, file_index = [], 0, 0, 0
    while start < episodes:
        stop, rows = start, 0
        while stop < episodes and (rows == 0 or rows + lengths[stop] <= rows_per_file):
            rows += lengths[stop]
            stop += 1
        first = int(lengths[:start].sum())
        episode_index = np.repeat(np.arange(start, stop), lengths[start:stop])
        frame_index = np.concatenate([np.arange(n) for n in lengths[start:stop]])
        data = {}
        for name, d in dims.items():
            values = pa.array((rng.standard_normal((rows, d), dtype=np.float32) * scale[name]).ravel())
            data[name] = values if d == 1 else pa.FixedSizeListArray.from_arrays(values, d)
        data.update(timestamp=pa.array((frame_index / fps).astype(np.float32)), frame_index=pa.array(frame_index),
                    episode_index=pa.array(episode_index), index=pa.array(np.arange(first, first + rows)),
                    task_index=pa.array(np.zeros(rows, dtype=np.int64)))
        name = v30.data_file(chunk, file_index)   # chunks_size files a chunk, as lerobot numbers them
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(data, schema=schema), path)
        for e in range(start, stop):
            offset = int(lengths[start:e].sum())
            eps.append(Episode(index=e, length=int(lengths[e]), tasks=["move"], data_file=name, data_row=offset,
                               from_index=first + offset))
        start = stop
        chunk, file_index = v30.next_file(chunk, file_index, info.chunks_size)
    v30.write_meta(root, info, eps, ["move"], None)
    return root
