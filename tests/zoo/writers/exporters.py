"""Exporter-style zoo members: datasets as third-party exporters write them, not lerobot.

Runs in the project's own python (pyarrow, pandas, PyAV, numpy; never lerodoc):

    python tests/zoo/writers/exporters.py OUT_DIR [NAME ...]

Each member starts from tests/fixtures/factory.py's make_dataset (values and camera frames that
carry their identity) and is then rewritten the way some exporter in the wild stores it. For each
NAME, OUT_DIR/NAME/ holds the dataset and OUT_DIR/NAME.json holds {"writer", "version", "expect"}
(expect: tests/lerobot_oracle/check_dataset.py's format). Without NAME every member is written.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from av.video.frame import PictureType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "fixtures"))
import factory  # noqa: E402
from identity import Identity, encode_identity  # noqa: E402

STATE = "100000*d + 1000*s + f + 0.01*k"      # factory.py's observation.state
ACTION = "100000*d + 1000*s + f + 0.01*k + 0.5"
GRIPPER = "s + 0.01*f"
FPS = 30
LENGTHS = [12, 17, 14]
INDEX = ("timestamp", "frame_index", "episode_index", "index", "task_index")


# ---------------------------------------------------------------- expectations

def expect_of(fx: factory.Fixture, cameras: dict[str, int] | None = None, video: bool = True) -> dict:
    """check_dataset.py expectation of a factory dataset (episode e = source episode e)."""
    spec = fx.spec
    cams = {c: i for i, c in enumerate(spec.cameras)} if cameras is None else cameras
    return {
        "fps": spec.fps,
        "video_keys": sorted(cams) if video else [],
        "episodes": [
            {"length": n, "task": fx.task_names[fx.task_index(e)],
             "identity": {"dataset": spec.dataset_id, "episode": e, "frame_offset": 0, "cameras": cams},
             "values": {"observation.state": {"expr": STATE}, "action": {"expr": ACTION}}}
            for e, n in enumerate(fx.lengths)
        ],
    }


# ---------------------------------------------------------------- file helpers

def data_files(root: Path) -> list[Path]:
    return sorted((root / "data").rglob("*.parquet"))


def read_info(root: Path) -> dict:
    return json.loads((root / "meta/info.json").read_text())


def write_info(root: Path, info: dict) -> None:
    (root / "meta/info.json").write_text(json.dumps(info, indent=4) + "\n")


def hf_features(table: pa.Table) -> dict:
    meta = (table.schema.metadata or {}).get(b"huggingface")
    return json.loads(meta)["info"]["features"] if meta else {}


def with_hf(table: pa.Table, features: dict | None) -> pa.Table:
    """Replace the `huggingface` schema metadata (None drops it)."""
    meta = dict(table.schema.metadata or {})
    meta.pop(b"huggingface", None)
    if features is not None:
        meta[b"huggingface"] = json.dumps({"info": {"features": features}}).encode()
    return table.replace_schema_metadata(meta or None)


def episode_slices(table: pa.Table) -> list[tuple[int, int, int]]:
    """(episode, start, stop) row ranges of the episodes in a data table."""
    ep = table.column("episode_index").to_numpy()
    ep = np.array([x[0] if isinstance(x, (list, np.ndarray)) else x for x in ep]) if ep.dtype == object else ep
    edges = [0, *np.flatnonzero(np.diff(ep)) + 1, len(ep)]
    return [(int(ep[a]), a, b) for a, b in zip(edges, edges[1:])]


def rewrite_data(root: Path, fn) -> None:
    """Rewrite every data parquet as fn(table); one row group per episode, as lerobot writes."""
    for path in data_files(root):
        table = fn(pq.read_table(path))
        with pq.ParquetWriter(path, table.schema) as writer:
            for _, a, b in episode_slices(table):
                writer.write_table(table.slice(a, b - a))


def set_column(table: pa.Table, key: str, array: pa.Array, hf: dict | None = None) -> pa.Table:
    """Replace or add (after `action`) column `key`, with its huggingface feature."""
    features = hf_features(table)
    if key in table.column_names:
        table = table.set_column(table.column_names.index(key), key, array)
    else:
        table = table.add_column(table.column_names.index("action") + 1, key, array)
    if hf is not None:
        features = {name: (hf if name == key else features.get(name)) for name in table.column_names}
    return with_hf(table, features)


def vector_stats(values: np.ndarray, quantiles: bool) -> dict:
    return factory._stats(values, quantiles=quantiles)


def set_stats(root: Path, key: str, per_episode: list[dict], overall: dict | None = None) -> None:
    """Replace the stats of `key` in a v2.1 or v3.0 dataset: per episode, and (v3.0) dataset-wide
    `overall` (default: pooled from the episodes, as cameras are)."""
    jsonable = lambda s: {n: np.asarray(v).tolist() for n, v in s.items()}  # noqa: E731
    if read_info(root)["codebase_version"] != "v3.0":
        path = root / "meta/episodes_stats.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            stats, new = row["stats"], jsonable(per_episode[row["episode_index"]])
            row["stats"] = {k: new if k == key else v for k, v in stats.items()} if key in stats else \
                _insert_after(stats, "action", key, new)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return
    new = jsonable(overall if overall is not None else factory._pooled(per_episode))
    path = root / "meta/stats.json"
    stats = json.loads(path.read_text())
    stats = {k: new if k == key else v for k, v in stats.items()} if key in stats else \
        _insert_after(stats, "action", key, new)
    path.write_text(json.dumps(stats, indent=4) + "\n")
    for ep_path in sorted((root / "meta/episodes").rglob("*.parquet")):
        rows = pq.read_table(ep_path).to_pylist()
        for row in rows:
            for name, value in per_episode[row["episode_index"]].items():
                v = np.asarray(value)
                row[f"stats/{key}/{name}"] = v.tolist() if name == "count" else v.astype(np.float64).tolist()
        pq.write_table(pa.Table.from_pylist(rows), ep_path)


def _insert_after(d: dict, after: str, key: str, value) -> dict:
    out = {}
    for k, v in d.items():
        out[k] = v
        if k == after:
            out[key] = value
    out.setdefault(key, value)
    return out


def encode(path: Path, frames: np.ndarray, fps: int, keyframes: set[int], timescale: int | None = None) -> None:
    """h264 mp4 of RGB frames with pts k (in 1/fps), keyframes forced; timescale sets the mp4 time base."""
    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"video_track_timescale": str(timescale)} if timescale else {}
    with av.open(str(path), "w", format="mp4", options=options) as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "23", "g": str(fps), "bf": "0", "x264-params": "scenecut=0"}
        for k, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = k
            if k in keyframes:
                frame.pict_type = PictureType.I
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def identity_frames(dataset: int, camera: int, episode: int, n: int, height: int, width: int) -> np.ndarray:
    return np.stack([encode_identity(Identity(dataset, camera, episode, k), height, width) for k in range(n)])


def video_path(root: Path, info: dict, key: str, episode: int | None = None, chunk: int = 0, file: int = 0) -> Path:
    if info["codebase_version"] == "v3.0":
        return root / info["video_path"].format(video_key=key, chunk_index=chunk, file_index=file)
    return root / info["video_path"].format(video_key=key, episode_chunk=0, episode_index=episode)


def reencode_camera(fx: factory.Fixture, key: str, height: int | None = None, width: int | None = None,
                    timescale: int | None = None) -> None:
    """Encode camera `key` anew (other size and/or mp4 time base), with its stats and info.json entry."""
    root, spec = fx.root, fx.spec
    info = read_info(root)
    cam = spec.cameras.index(key)
    h, w = height or spec.height, width or spec.width
    frames = [identity_frames(spec.dataset_id, cam, e, n, h, w) for e, n in enumerate(fx.lengths)]
    if info["codebase_version"] == "v3.0":
        per = spec.episodes_per_file
        for f, first in enumerate(range(0, len(frames), per)):
            group = list(range(first, min(first + per, len(frames))))
            starts = np.cumsum([0] + [fx.lengths[e] for e in group])[:-1]
            encode(video_path(root, info, key, chunk=0, file=f), np.concatenate([frames[e] for e in group]),
                   spec.fps, set(starts.tolist()), timescale)
    else:
        for e, episode_frames in enumerate(frames):
            encode(video_path(root, info, key, episode=e), episode_frames, spec.fps, {0}, timescale)
    if (h, w) != (spec.height, spec.width):
        feat = info["features"][key]
        feat["shape"] = [h, w, 3]
        feat["info"].update({"video.height": h, "video.width": w})
        write_info(root, info)
        set_stats(root, key, [factory._image_stats(f) for f in frames])


# ---------------------------------------------------------------- members

MEMBERS = {}


def member(name: str, version: str, writer: str):
    def register(fn):
        MEMBERS[name] = (fn, version, writer)
        return fn
    return register


def base(root: Path, version: str, **kw) -> factory.Fixture:
    kw.setdefault("lengths", LENGTHS)
    kw.setdefault("episodes", len(kw["lengths"]))
    kw.setdefault("tasks", ("pick up the cube", "place the cube"))
    return factory.make_dataset(root, version=version, fps=FPS, episodes_per_file=2, **kw)


def _list1(root: Path, version: str) -> dict:
    """Every shape-(1,) feature (the index columns and a gripper) stored as a list<len 1> column."""
    fx = base(root, version, dataset_id=1, cameras=("observation.images.top",))

    def as_lists(table: pa.Table) -> pa.Table:
        gripper = np.concatenate([e + 0.01 * np.arange(b - a) for e, a, b in episode_slices(table)]).astype(np.float32)
        table = set_column(table, "observation.gripper", pa.array(gripper))
        features = hf_features(table)
        for key in (*INDEX, "observation.gripper"):
            col = table.column(key).combine_chunks()
            lists = pa.ListArray.from_arrays(pa.array(np.arange(len(col) + 1, dtype=np.int32)), col)
            table = table.set_column(table.column_names.index(key), key, lists)
            dtype = {"float": "float32", "double": "float64"}.get(str(col.type), str(col.type))
            features[key] = {"feature": {"dtype": dtype, "_type": "Value"}, "_type": "Sequence"}
        return with_hf(table, features)

    rewrite_data(root, as_lists)
    info = read_info(root)
    info["features"] = _insert_after(info["features"], "action", "observation.gripper",
                                     {"dtype": "float32", "shape": [1], "names": ["gripper"]})
    write_info(root, info)
    v3 = version == "v3.0"
    gripper = [(e + 0.01 * np.arange(n)).astype(np.float32)[:, None] for e, n in enumerate(fx.lengths)]
    set_stats(root, "observation.gripper", [vector_stats(g, v3) for g in gripper],
              vector_stats(np.concatenate(gripper), True) if v3 else None)
    expect = expect_of(fx)
    for ep in expect["episodes"]:
        ep["values"]["observation.gripper"] = {"expr": GRIPPER}
    return expect


@member("export-v21-list1", "v2.1", "exporter: v2.1, shape-(1,) features as list<len 1> columns (AgiBot style)")
def list1_v21(root: Path) -> dict:
    return _list1(root, "v2.1")


@member("export-v30-list1", "v3.0", "exporter: v3.0, shape-(1,) features as list<len 1> columns (AgiBot style)")
def list1_v30(root: Path) -> dict:
    return _list1(root, "v3.0")


def _nested_names(root: Path, version: str) -> dict:
    fx = base(root, version, dataset_id=2, cameras=("observation.images.top",))
    info = read_info(root)
    state, action = info["features"]["observation.state"], info["features"]["action"]
    state["names"] = {"motors": state["names"]}
    action["names"] = [action["names"]]
    write_info(root, info)
    return expect_of(fx)


@member("export-v21-nested-names", "v2.1", "exporter: v2.1, feature names nested (dict of lists, list of lists)")
def nested_names_v21(root: Path) -> dict:
    return _nested_names(root, "v2.1")


@member("export-v30-nested-names", "v3.0", "exporter: v3.0, feature names nested (dict of lists, list of lists)")
def nested_names_v30(root: Path) -> dict:
    return _nested_names(root, "v3.0")


def _camera_sizes(root: Path, version: str) -> dict:
    cams = ("observation.images.top", "observation.images.wrist", "observation.images.side")
    fx = base(root, version, dataset_id=3, cameras=cams)
    reencode_camera(fx, "observation.images.wrist", 48, 64)
    reencode_camera(fx, "observation.images.side", 32, 48)
    return expect_of(fx)


@member("export-v21-camera-sizes", "v2.1", "exporter: v2.1, three cameras of different sizes")
def camera_sizes_v21(root: Path) -> dict:
    return _camera_sizes(root, "v2.1")


@member("export-v30-camera-sizes", "v3.0", "exporter: v3.0, three cameras of different sizes")
def camera_sizes_v30(root: Path) -> dict:
    return _camera_sizes(root, "v3.0")


def _multitask(root: Path, version: str) -> dict:
    """Each episode switches task halfway: task_index changes within the episode."""
    tasks = ["pick up the cube", "place the cube", "open the drawer"]
    fx = base(root, version, dataset_id=4, cameras=("observation.images.top",), tasks=tuple(tasks[:2]))
    halves = {e: n // 2 for e, n in enumerate(fx.lengths)}
    per_episode = {e: [e % 3, (e + 1) % 3] for e in range(len(fx.lengths))}

    def retask(table: pa.Table) -> pa.Table:
        t = np.concatenate([np.where(np.arange(b - a) < halves[e], *per_episode[e])
                            for e, a, b in episode_slices(table)]).astype(np.int64)
        return table.set_column(table.column_names.index("task_index"), "task_index", pa.array(t))

    rewrite_data(root, retask)
    task_stats = [vector_stats(np.where(np.arange(n) < halves[e], *per_episode[e]).astype(np.int64)[:, None], False)
                  for e, n in enumerate(fx.lengths)]
    info = read_info(root)
    info["total_tasks"] = len(tasks)
    write_info(root, info)
    if version == "v3.0":
        import pandas as pd
        pd.DataFrame({"task_index": np.arange(len(tasks))}, index=pd.Index(tasks, name="task")).to_parquet(
            root / "meta/tasks.parquet")
        all_t = np.concatenate([np.where(np.arange(n) < halves[e], *per_episode[e]) for e, n in enumerate(fx.lengths)])
        overall = vector_stats(all_t.astype(np.int64)[:, None], True)
        for ep_path in sorted((root / "meta/episodes").rglob("*.parquet")):
            table = pq.read_table(ep_path)
            rows = table.to_pylist()
            for row in rows:
                row["tasks"] = [tasks[t] for t in per_episode[row["episode_index"]]]
            pq.write_table(pa.Table.from_pylist(rows), ep_path)
    else:
        (root / "meta/tasks.jsonl").write_text("".join(
            json.dumps({"task_index": k, "task": t}) + "\n" for k, t in enumerate(tasks)))
        (root / "meta/episodes.jsonl").write_text("".join(
            json.dumps({"episode_index": e, "tasks": [tasks[t] for t in per_episode[e]], "length": n}) + "\n"
            for e, n in enumerate(fx.lengths)))
    set_stats(root, "task_index", task_stats, overall if version == "v3.0" else None)
    expect = expect_of(fx)
    for e, ep in enumerate(expect["episodes"]):
        del ep["task"]
        idx = [per_episode[e][0] if i < halves[e] else per_episode[e][1] for i in range(ep["length"])]
        ep["values"]["task_index"] = idx
    return expect


@member("export-v21-multitask-episode", "v2.1", "exporter: v2.1, two tasks within each episode")
def multitask_v21(root: Path) -> dict:
    return _multitask(root, "v2.1")


@member("export-v30-multitask-episode", "v3.0", "exporter: v3.0, two tasks within each episode")
def multitask_v30(root: Path) -> dict:
    return _multitask(root, "v3.0")


@member("export-v30-float64", "v3.0", "exporter: v3.0, float64 observation.state")
def float64(root: Path) -> dict:
    fx = base(root, "v3.0", dataset_id=5, cameras=("observation.images.top",))

    def to64(table: pa.Table) -> pa.Table:
        rows = []
        for e, a, b in episode_slices(table):
            f = np.arange(b - a, dtype=np.float64)[:, None]
            rows.append(100000 * 5 + 1000 * e + f + 0.01 * np.arange(6))
        values = np.concatenate(rows)
        hf = {"feature": {"dtype": "float64", "_type": "Value"}, "length": 6, "_type": "Sequence"}
        return set_column(table, "observation.state",
                          pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 6), hf)

    rewrite_data(root, to64)
    info = read_info(root)
    info["features"]["observation.state"]["dtype"] = "float64"
    write_info(root, info)
    per = [vector_stats(500000 + 1000 * e + np.arange(n, dtype=np.float64)[:, None] + 0.01 * np.arange(6), True)
           for e, n in enumerate(fx.lengths)]
    overall = vector_stats(np.concatenate([
        500000 + 1000 * e + np.arange(n, dtype=np.float64)[:, None] + 0.01 * np.arange(6)
        for e, n in enumerate(fx.lengths)]), True)
    set_stats(root, "observation.state", per, overall)
    return expect_of(fx)


def _hf_list(features: dict) -> dict:
    """datasets>=4 metadata: `List` where datasets<4 wrote `Sequence`."""
    out = {}
    for key, feat in features.items():
        if feat.get("_type") == "Sequence":
            feat = {**feat, "_type": "List"}
        out[key] = feat
    return out


@member("export-v30-hf-list", "v3.0", "exporter: v3.0, huggingface schema metadata as datasets>=4 writes it (List)")
def hf_list(root: Path) -> dict:
    fx = base(root, "v3.0", dataset_id=6, cameras=("observation.images.top",))
    rewrite_data(root, lambda t: with_hf(t, _hf_list(hf_features(t))))
    return expect_of(fx)


@member("export-v21-hf-list", "v2.1", "exporter: v2.1, huggingface schema metadata as datasets>=4 writes it (List)")
def hf_list_v21(root: Path) -> dict:
    fx = base(root, "v2.1", dataset_id=6, cameras=("observation.images.top",))
    rewrite_data(root, lambda t: with_hf(t, _hf_list(hf_features(t))))
    return expect_of(fx)


@member("export-v30-minimal", "v3.0",
        "exporter: v3.0, robot_type null, no splits key, no huggingface schema metadata")
def minimal(root: Path) -> dict:
    fx = base(root, "v3.0", dataset_id=7, cameras=("observation.images.top",))
    rewrite_data(root, lambda t: with_hf(t, None))
    info = read_info(root)
    info["robot_type"] = None
    del info["splits"]
    write_info(root, info)
    return expect_of(fx)


@member("export-v21-minimal", "v2.1", "exporter: v2.1, robot_type null, no splits key, no huggingface schema metadata")
def minimal_v21(root: Path) -> dict:
    fx = base(root, "v2.1", dataset_id=7, cameras=("observation.images.top",))
    rewrite_data(root, lambda t: with_hf(t, None))
    info = read_info(root)
    info["robot_type"] = None
    del info["splits"]
    write_info(root, info)
    return expect_of(fx)


@member("export-v30-timebase-90000", "v3.0", "exporter: v3.0, mp4 time base 1/90000 (top) and 1/15360 (wrist)")
def timebase_90k(root: Path) -> dict:
    fx = base(root, "v3.0", dataset_id=8)
    reencode_camera(fx, "observation.images.top", timescale=90000)
    return expect_of(fx)


@member("export-v30-timebase-1000", "v3.0", "exporter: v3.0 at 30 fps, mp4 time base 1/1000 (pts rounded to ms)")
def timebase_1k(root: Path) -> dict:
    fx = base(root, "v3.0", dataset_id=9)
    reencode_camera(fx, "observation.images.top", timescale=1000)
    return expect_of(fx)


@member("export-v21-timebase-1000", "v2.1", "exporter: v2.1 at 30 fps, mp4 time base 1/1000 (pts rounded to ms)")
def timebase_1k_v21(root: Path) -> dict:
    fx = base(root, "v2.1", dataset_id=9)
    reencode_camera(fx, "observation.images.top", timescale=1000)
    return expect_of(fx)


@member("export-v30-images", "v3.0", "exporter: v3.0, camera frames as PNG images in the parquet (no videos)")
def images(root: Path) -> dict:
    cams = ("observation.images.top", "observation.images.wrist")
    fx = base(root, "v3.0", dataset_id=10, cameras=())
    size = {cams[0]: (64, 96), cams[1]: (48, 64)}

    def png(rgb: np.ndarray) -> bytes:   # PyAV's png encoder (PIL is not a dependency here)
        codec = av.CodecContext.create("png", "w")
        codec.width, codec.height, codec.pix_fmt = rgb.shape[1], rgb.shape[0], "rgb24"
        packets = codec.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")) + codec.encode(None)
        return b"".join(bytes(p) for p in packets)

    def add_images(table: pa.Table) -> pa.Table:
        for c, key in enumerate(cams):
            cells = []
            for e, a, b in episode_slices(table):
                frames = identity_frames(10, c, e, b - a, *size[key])
                cells += [{"bytes": png(f), "path": f"frame_{e:06d}_{i:06d}.png"} for i, f in enumerate(frames)]
            arr = pa.array(cells, type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
            table = set_column(table, key, arr, {"_type": "Image"})
        return table

    rewrite_data(root, add_images)
    info = read_info(root)
    for key in reversed(cams):
        h, w = size[key]
        info["features"] = _insert_after(info["features"], "action", key, {
            "dtype": "image", "shape": [h, w, 3], "names": ["height", "width", "channels"]})
    write_info(root, info)
    for c, key in enumerate(cams):
        set_stats(root, key, [factory._image_stats(identity_frames(10, c, e, n, *size[key]))
                              for e, n in enumerate(fx.lengths)])
    return expect_of(fx, cameras={k: i for i, k in enumerate(cams)}, video=False)


def write(out: Path, name: str) -> None:
    fn, version, writer = MEMBERS[name]
    root = out / name
    if root.exists():
        shutil.rmtree(root)
    expect = fn(root)
    (out / f"{name}.json").write_text(json.dumps({"writer": writer, "version": version, "expect": expect},
                                                 indent=1) + "\n")


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or list(MEMBERS):
        print(f"exporters: {name}", file=sys.stderr)
        write(out, name)


if __name__ == "__main__":
    main()
