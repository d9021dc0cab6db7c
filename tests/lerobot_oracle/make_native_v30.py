"""Record a small v3.0 dataset with lerobot 0.6.1 itself (LeRobotDataset.create/add_frame/save_episode).

Run with the reference venv's python:

    make_native_v30.py ROOT --expect EXPECT.json [--lengths 40,55] [--height 64 --width 96] [--images]

ROOT must not exist. --images stores the cameras as PNG images in the parquet instead of videos.
Camera frames carry Identity(DATASET, camera, episode, frame) and observation.state/action
follow the formulas STATE/ACTION, so EXPECT.json (check_dataset.py's format) describes the
recording exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from identity import Identity, encode_identity  # noqa: E402

FPS = 30
DATASET = 1
CAMERAS = {"observation.images.front": 0, "observation.images.wrist": 1}
TASKS = ["pick the cube", "place the cube"]
STATE = "1000*s + f + 0.01*k"  # numpy expressions over s (episode), f (frame), k (channel)
ACTION = "-(1000*s + f) - 0.5*k"
DIM = 6


def expect_for(lengths: list[int], images: bool) -> dict:
    return {
        "fps": FPS,
        "video_keys": [] if images else sorted(CAMERAS),
        "stats_keys": {"observation.state": ["min", "max", "mean", "std", "count", "q01", "q99"]},
        "episodes": [
            {"length": n, "task": TASKS[ep % len(TASKS)],
             "identity": {"dataset": DATASET, "episode": ep, "frame_offset": 0, "cameras": CAMERAS},
             "values": {"observation.state": {"expr": STATE}, "action": {"expr": ACTION}}}
            for ep, n in enumerate(lengths)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--expect", type=Path, required=True)
    parser.add_argument("--lengths", default="40,55")
    parser.add_argument("--height", type=int, default=64)
    parser.add_argument("--width", type=int, default=96)
    parser.add_argument("--images", action="store_true")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    vector = {"dtype": "float32", "shape": (DIM,), "names": [f"joint_{k}" for k in range(DIM)]}
    camera = {"dtype": "image" if args.images else "video", "shape": (args.height, args.width, 3),
              "names": ["height", "width", "channels"]}
    features = {"observation.state": vector, "action": vector, **{key: camera for key in CAMERAS}}
    ds = LeRobotDataset.create(repo_id="lerodoc/native", fps=FPS, features=features, root=args.root,
                               robot_type="identity_bot", use_videos=not args.images)
    k = np.arange(DIM)
    for s, n in enumerate(lengths):
        for f in range(n):
            frame = {key: encode_identity(Identity(DATASET, cam, s, f), args.height, args.width)
                     for key, cam in CAMERAS.items()}
            frame["observation.state"] = eval(STATE, {}, {"s": s, "f": f, "k": k}).astype(np.float32)
            frame["action"] = eval(ACTION, {}, {"s": s, "f": f, "k": k}).astype(np.float32)
            frame["task"] = TASKS[s % len(TASKS)]
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    args.expect.write_text(json.dumps(expect_for(lengths, args.images), indent=1))


if __name__ == "__main__":
    main()
