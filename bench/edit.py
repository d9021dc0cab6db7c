"""bench/edit: lerodoc's edit commands vs lerobot 0.6.1's lerobot-edit-dataset on the same data, in one run.

    python -m bench.edit [--episodes 20] [--cameras 2] [--frames 90] [--workers N] [--work DIR]
                         [--out docs/results/edit_cpu.json]

The data: a generated v3.0 video dataset (EPISODES x CAMERAS, h264, frames carrying their identity with
noise), and the same frames stored as PNG images in the parquet (an image dataset) for the encoders.
Each operation runs once per tool, each tool started as a fresh process as a user runs it (lerobot:
`python -m lerobot.scripts.lerobot_edit_dataset` in the reference venv; lerodoc: `python -m lerodoc`):

    delete        --operation.type delete_episodes      vs  lerodoc delete --episodes
    split         --operation.type split                vs  lerodoc split --into
    remove camera --operation.type remove_feature       vs  lerodoc features --drop
    edit tasks    --operation.type modify_tasks         vs  lerodoc tasks --set      (lerobot edits a copy in place)
    images->video --operation.type convert_image_to_video vs lerodoc encode         (same encoder settings)
    re-encode     --operation.type reencode_videos      vs  lerodoc encode --reencode (GOP 2 -> 10)

The encoders run with the same settings (libsvtav1, yuv420p, CRF 30, preset 12) and the same
parallelism (lerobot's num_workers = lerodoc's --workers). Ratios are lerobot's time over lerodoc's;
the issue's bars are >= 5x for the stream-copy operations and >= 2x for encoding.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lerodoc.media import frames
from lerodoc.dataset import Dataset
from lerodoc.formats import v30
from lerodoc.formats.hf import schema_for
from lerodoc.run.parallel import default_workers, pmap
from lerodoc.tables.parquet_io import read_parquet
from tests.fixtures.factory import make_dataset
from bench.results import provenance
from tests.lerobot_oracle import lerobot_python

ROOT = Path(__file__).resolve().parents[1]
STREAM_COPY, ENCODING = "stream copy", "encoding"


def png_bytes(frame: np.ndarray) -> bytes:
    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = frame.shape[1], frame.shape[0], "rgb24"
    return b"".join(bytes(p) for p in codec.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))


def episode_pngs(job: tuple) -> list[bytes]:
    """Worker: one camera's frames of one episode, as PNG files."""
    key, episode, path, start, stop, fps = job
    return [png_bytes(f.to_ndarray(format="rgb24")) for k, f in frames.decode_frames(Path(path), fps)
            if start * fps - 0.5 <= k < stop * fps - 0.5]


def image_dataset(src: Path, out: Path, workers: int = 1) -> Path:
    """`src` (v3.0, videos) with every camera stored as PNG images in the parquet instead: what lerobot
    records with use_videos=False."""
    ds = Dataset.open(src)
    keys = ds.info.video_keys
    features = {name: ({"dtype": "image", "shape": spec["shape"], "names": spec.get("names")}
                       if name in keys else spec) for name, spec in ds.info.features.items()}
    jobs = [(key, ep.index, str(ds.path(ep.videos[key].file)), ep.videos[key].from_timestamp,
             ep.videos[key].to_timestamp, ds.info.fps) for key in keys for ep in ds.episodes]
    frames = {(key, e): pngs for (key, e, *_), pngs in zip(jobs, pmap(episode_pngs, jobs, workers=workers))}
    for data_file in ds.data_files():
        table = read_parquet(ds.path(data_file))
        episodes = [ep for ep in ds.episodes if ep.data_file == data_file]
        for key in keys:
            values = [{"bytes": b, "path": f"frame-{i:06d}.png"} for ep in episodes
                      for i, b in enumerate(frames[(key, ep.index)])]
            table = table.append_column(key, pa.array(values, type=schema_for(features, [key]).field(key).type))
        schema = schema_for(features, [n for n in features], table.schema)
        (out / data_file).parent.mkdir(parents=True, exist_ok=True)
        with pq.ParquetWriter(out / data_file, schema) as writer:
            for ep in episodes:
                writer.write_table(table.select(schema.names).cast(schema).slice(ep.data_row, ep.length))
    for ep in ds.episodes:
        ep.videos = {}
    ds.info.features = features
    v30.write_meta(out, ds.info, ds.episodes, ds.tasks, ds.stats)
    return out


def lerobot_version() -> str:
    return subprocess.run([str(lerobot_python()), "-c", "import importlib.metadata as m; print(m.version('lerobot'))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def run(cmd: list[str], env: dict | None = None) -> tuple[float, str]:
    """Wall seconds of the command (a fresh process) and its stdout."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--cameras", type=int, default=2)
    p.add_argument("--frames", type=int, default=90, help="frames per episode")
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--workers", type=int, default=default_workers(), help="lerodoc --workers = lerobot num_workers")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=ROOT / "docs/results/edit_cpu.json")
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-bench-edit-"))
    work.mkdir(parents=True, exist_ok=True)
    started, where = time.perf_counter(), provenance("python3 -m bench.edit " + " ".join(sys.argv[1:]), av=av.__version__, lerobot=lerobot_version())

    cameras = tuple(f"observation.images.cam{c}" for c in range(args.cameras))
    src = work / "videos"
    if not src.is_dir():
        make_dataset(src, version="v3.0", episodes=args.episodes, lengths=args.frames, cameras=cameras,
                     height=args.height, width=args.width, noise=6, gop=2, episodes_per_file=args.episodes)
    images = work / "images"
    if not images.is_dir():
        image_dataset(src, images, args.workers)
    ds = Dataset.open(src)
    print(f"data: {len(ds.episodes)} episodes x {args.cameras} cameras, {ds.total_frames} frames, "
          f"{args.height}x{args.width} (v3.0; videos h264 GOP 2, and the same frames as PNG in the parquet); "
          f"{args.workers} workers each")

    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    scratch = work / "hf"
    lerobot_env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(scratch), "HF_LEROBOT_HOME": str(scratch / "lerobot")}
    lerobot = [str(lerobot_python()), "-m", "lerobot.scripts.lerobot_edit_dataset", "--repo_id", "bench/src"]
    lerodoc = [sys.executable, "-m", "lerodoc"]
    task = ds.tasks[0]
    drop = list(range(1, args.episodes, 4))
    n_val = max(1, args.episodes // 5)
    ops = [
        ("delete", STREAM_COPY,
         lerodoc + ["delete", src, "-o", out / "lerodoc_delete", "--episodes", ",".join(map(str, drop))],
         lerobot + ["--root", src, "--new_repo_id", "bench/delete", "--new_root", out / "lerobot_delete",
                    "--operation.type", "delete_episodes", "--operation.episode_indices", json.dumps(drop)]),
        ("split", STREAM_COPY,
         lerodoc + ["split", src, "-o", out / "lerodoc_split", "--episodes",
                    f"train:0-{args.episodes - n_val - 1},val:{args.episodes - n_val}-{args.episodes - 1}"],
         lerobot + ["--root", src, "--new_root", out / "lerobot_split", "--operation.type", "split",
                    "--operation.splits", json.dumps({"train": list(range(args.episodes - n_val)),
                                                      "val": list(range(args.episodes - n_val, args.episodes))})]),
        ("remove camera", STREAM_COPY,
         lerodoc + ["features", src, "-o", out / "lerodoc_features", "--drop", cameras[-1]],
         lerobot + ["--root", src, "--new_repo_id", "bench/features", "--new_root", out / "lerobot_features",
                    "--operation.type", "remove_feature", "--operation.feature_names", json.dumps([cameras[-1]])]),
        ("edit tasks", STREAM_COPY,
         lerodoc + ["tasks", src, "-o", out / "lerodoc_tasks", "--set", f"{task}=do the task"],
         lerobot + ["--root", out / "lerobot_tasks", "--operation.type", "modify_tasks",
                    "--operation.task_replacements", json.dumps({task: "do the task"})]),
        ("images -> video", ENCODING,
         lerodoc + ["encode", images, "-o", out / "lerodoc_encode", "--workers", str(args.workers)],
         [str(lerobot_python()), "-m", "lerobot.scripts.lerobot_edit_dataset", "--repo_id", "bench/images",
          "--root", images, "--new_repo_id", "bench/encoded", "--new_root", out / "lerobot_encode",
          "--operation.type", "convert_image_to_video", "--operation.num_workers", str(args.workers)]),
        ("re-encode GOP 2 -> 10", ENCODING,
         lerodoc + ["encode", out / "lerodoc_encode", "-o", out / "lerodoc_reencode", "--reencode", "--gop", "10",
                    "--workers", str(args.workers)],
         [str(lerobot_python()), "-m", "lerobot.scripts.lerobot_edit_dataset", "--repo_id", "bench/encoded",
          "--root", out / "lerodoc_encode", "--new_repo_id", "bench/reencoded", "--new_root",
          out / "lerobot_reencode", "--operation.type", "reencode_videos", "--operation.rgb_encoder.g", "10",
          "--operation.num_workers", str(args.workers)]),
    ]
    results = []
    print(f"\n{'operation':<24}{'kind':<13}{'lerobot s':>10}{'lerodoc s':>10}{'ratio':>8}  bar")
    for name, kind, ours, theirs in ops:
        ours, theirs = [str(a) for a in ours], [str(a) for a in theirs]
        if name == "edit tasks":          # modify_tasks edits in place: it gets its own copy (not timed)
            shutil.copytree(src, out / "lerobot_tasks")
        t_ours, report = run(ours + ["--json"])
        t_theirs, _ = run(theirs, lerobot_env)
        bar = 5.0 if kind == STREAM_COPY else 2.0
        ratio = t_theirs / t_ours
        results.append({"operation": name, "kind": kind, "lerobot_seconds": round(t_theirs, 3),
                        "lerodoc_seconds": round(t_ours, 3), "lerobot_over_lerodoc": round(ratio, 2),
                        "bar": bar, "meets_bar": ratio >= bar, "lerodoc_command": " ".join(ours[2:]),
                        "lerodoc_psnr_min_db": json.loads(report).get("psnr_min_db"),
                        "lerobot_command": " ".join(theirs[1:])})
        print(f"{name:<24}{kind:<13}{t_theirs:>10.2f}{t_ours:>10.2f}{ratio:>7.1f}x  >= {bar:.0f}x "
              f"{'met' if ratio >= bar else 'NOT met'}")

    # both tools' outputs hold the frames they should
    for name in ("delete", "encode", "reencode"):
        a, b = Dataset.open(out / f"lerodoc_{name}"), Dataset.open(out / f"lerobot_{name}")
        assert (a.total_frames, len(a.episodes)) == (b.total_frames, len(b.episodes)), name
    encoded = json.loads(subprocess.run(lerodoc + ["info", str(out / "lerodoc_encode"), "--json"],
                                        capture_output=True, text=True, check=True).stdout)
    summary = {"dataset": {"episodes": len(ds.episodes), "cameras": args.cameras, "frames": ds.total_frames,
                           "height": args.height, "width": args.width, "video_codec": "h264 GOP 2",
                           "image_format": "png"},
               "workers": args.workers, "encoder_settings": "libsvtav1 yuv420p crf 30 preset 12, GOP 2 "
               "(re-encode: GOP 10); lerobot num_workers = lerodoc --workers",
               "results": results, "lerodoc_encode_info": encoded.get("cameras", encoded.get("features")),
               "total_seconds": round(time.perf_counter() - started, 1), "provenance": where}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"\nresults in {args.out} ({summary['total_seconds']} s in all)")


if __name__ == "__main__":
    main()
