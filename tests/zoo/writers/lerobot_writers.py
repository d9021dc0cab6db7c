"""Zoo members written by lerobot itself; runs INSIDE a release venv (scripts/zoo-venv.sh VERSION).

    lerobot_writers.py record ROOT EXPECT.json --dataset D [--lengths 12,20,15] [--images] [--task-switch]
    lerobot_writers.py convert SRC_V21 ROOT EXPECT.json        # SRC's expectation is SRC.expect.json
    lerobot_writers.py aggregate ROOT EXPECT.json SRC_A SRC_B  # each SRC has SRC.expect.json
    lerobot_writers.py edit OP SRC ROOT EXPECT.json            # OP: delete_episodes, split, remove_feature,
                                                               #     modify_tasks, convert_image_to_video

Only the standard library, numpy and the venv's lerobot are used, plus tests/fixtures/identity.py.
Camera frames carry Identity(D, camera, episode, frame) and observation.state/action follow STATE and
ACTION, so EXPECT.json (tests/lerobot_oracle/check_dataset.py's format) describes the output exactly.
Exit status 3 with a one-line reason on stderr when the release lacks the operation.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import importlib.metadata as md
import inspect
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from identity import Identity, encode_identity  # noqa: E402

VERSION = md.version("lerobot")
FPS = 30
HEIGHT, WIDTH = 64, 96
CAMERAS = {"observation.images.front": 0, "observation.images.wrist": 1}
TASKS = ["pick the cube", "place the cube", "open the drawer"]
STATE = "1000*d + 100*s + f + 0.01*k"   # numpy expressions over d (dataset), s (episode), f (frame), k (channel)
ACTION = "-(1000*d + 100*s + f) - 0.5*k"
DIM = 6


class Missing(Exception):
    """The release has no such operation."""


def task_of(s: int, f: int, n: int, switch: bool) -> str:
    """Episode s has task TASKS[s % 2]; with --task-switch, the last episode turns to TASKS[2] halfway."""
    return TASKS[2] if switch and s == 2 and f >= n // 2 else TASKS[s % 2]


def record(root: Path, dataset: int, lengths: list[int], images: bool, switch: bool = False) -> dict:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    vector = {"dtype": "float32", "shape": (DIM,), "names": [f"joint_{k}" for k in range(DIM)]}
    camera = {"dtype": "image" if images else "video", "shape": (HEIGHT, WIDTH, 3),
              "names": ["height", "width", "channels"]}
    features = {"observation.state": vector, "action": vector, **{key: camera for key in CAMERAS}}
    ds = LeRobotDataset.create(repo_id=f"zoo/{root.name}", fps=FPS, features=features, root=root,
                               robot_type="identity_bot", use_videos=not images)
    task_in_frame = "task" not in inspect.signature(ds.add_frame).parameters   # 0.4+: frame["task"]
    k = np.arange(DIM)
    for s, n in enumerate(lengths):
        for f in range(n):
            frame = {key: encode_identity(Identity(dataset, cam, s, f), HEIGHT, WIDTH) for key, cam in CAMERAS.items()}
            ctx = {"d": dataset, "s": s, "f": f, "k": k}
            frame["observation.state"] = eval(STATE, {}, ctx).astype(np.float32)
            frame["action"] = eval(ACTION, {}, ctx).astype(np.float32)
            task = task_of(s, f, n, switch)
            if task_in_frame:
                frame["task"] = task
                ds.add_frame(frame)
            else:
                ds.add_frame(frame, task=task)
        ds.save_episode()
    if hasattr(ds, "finalize"):   # v3.0 writers: closes the parquet writers (0.3.x has none)
        ds.finalize()
    episodes = []
    for s, n in enumerate(lengths):
        ep = {"length": n,
              "identity": {"dataset": dataset, "episode": s, "frame_offset": 0, "cameras": dict(CAMERAS)},
              "values": {"observation.state": {"expr": STATE}, "action": {"expr": ACTION}}}
        tasks = [task_of(s, f, n, switch) for f in range(n)]
        if len(set(tasks)) == 1:
            ep["task"] = tasks[0]
        else:
            ep["tasks_per_frame"] = tasks   # task_index depends on the writer's task order
        episodes.append(ep)
    return {"fps": FPS, "video_keys": [] if images else sorted(CAMERAS), "episodes": episodes}


def load_expect(src: Path) -> dict:
    return json.loads(Path(str(src) + ".expect.json").read_text())


def convert(src: Path, root: Path) -> dict:
    """The release's v2.1 -> v3.0 converter on a copy of SRC, offline, without pushing."""
    for name in ("lerobot.scripts.convert_dataset_v21_to_v30", "lerobot.datasets.v30.convert_dataset_v21_to_v30"):
        try:
            mod = importlib.import_module(name)
            break
        except ModuleNotFoundError:
            continue
    else:
        raise Missing(f"lerobot {VERSION} has no convert_dataset_v21_to_v30")
    shutil.copytree(src, root)
    source = inspect.getsource(mod.convert_dataset)
    if "Path(root) / repo_id" in source:   # 0.4.x: the dataset lives at root/repo_id
        mod.convert_dataset(repo_id=root.name, root=root.parent, push_to_hub=False)
    else:                                   # 0.5+: root is the dataset itself
        mod.convert_dataset(repo_id=f"zoo/{root.name}", root=root, push_to_hub=False)
    shutil.rmtree(root.with_name(root.name + "_old"), ignore_errors=True)
    return load_expect(src)


def aggregate(root: Path, sources: list[Path]) -> dict:
    try:
        from lerobot.datasets.aggregate import aggregate_datasets
    except ModuleNotFoundError as exc:
        raise Missing(f"lerobot {VERSION} has no lerobot.datasets.aggregate ({exc})") from exc
    aggregate_datasets(repo_ids=[f"zoo/{s.name}" for s in sources], aggr_repo_id=f"zoo/{root.name}",
                       roots=list(sources), aggr_root=root)
    expects = [load_expect(s) for s in sources]
    return {"fps": FPS, "video_keys": expects[0]["video_keys"],
            "episodes": [ep for e in expects for ep in e["episodes"]]}


def _tools():
    try:
        return importlib.import_module("lerobot.datasets.dataset_tools")
    except ModuleNotFoundError as exc:
        raise Missing(f"lerobot {VERSION} has no lerobot.datasets.dataset_tools") from exc


def _tool(name: str):
    tools = _tools()
    if not hasattr(tools, name):
        raise Missing(f"lerobot {VERSION}: lerobot.datasets.dataset_tools has no {name}")
    return getattr(tools, name)


def edit(op: str, src: Path, root: Path) -> dict:
    """One dataset_tools operation on SRC (never modified), written at ROOT."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    expect = copy.deepcopy(load_expect(src))
    episodes = expect["episodes"]
    if op == "delete_episodes":
        fn = _tool("delete_episodes")
        fn(LeRobotDataset(f"zoo/{src.name}", root=src), episode_indices=[1], output_dir=root,
           repo_id=f"zoo/{root.name}")
        expect["episodes"] = [ep for e, ep in enumerate(episodes) if e != 1]
    elif op == "split":
        fn = _tool("split_dataset")
        with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
            fn(LeRobotDataset(f"zoo/{src.name}", root=src), splits={"train": [0, 2], "val": [1]},
               output_dir=Path(tmp))
            shutil.move(str(Path(tmp) / "train"), str(root))
        expect["episodes"] = [episodes[0], episodes[2]]
    elif op == "remove_feature":
        fn = _tool("remove_feature")
        fn(LeRobotDataset(f"zoo/{src.name}", root=src), feature_names=["observation.images.wrist"],
           output_dir=root, repo_id=f"zoo/{root.name}")
        expect["video_keys"] = [k for k in expect["video_keys"] if k != "observation.images.wrist"]
        for ep in episodes:
            ep["identity"]["cameras"].pop("observation.images.wrist")
    elif op == "modify_tasks":
        fn = _tool("modify_tasks")
        shutil.copytree(src, root)   # modify_tasks works in place
        fn(LeRobotDataset(f"zoo/{root.name}", root=root), episode_tasks={0: "stack the blocks"})
        episodes[0]["task"] = "stack the blocks"
    elif op == "convert_image_to_video":
        fn = _tool("convert_image_to_video_dataset")
        kwargs = {"output_dir": root, "repo_id": f"zoo/{root.name}"}
        if "num_workers" in inspect.signature(fn).parameters:
            kwargs["num_workers"] = 1
        fn(LeRobotDataset(f"zoo/{src.name}", root=src), **kwargs)
        expect["video_keys"] = sorted(CAMERAS)
    else:
        raise SystemExit(f"unknown operation {op}")
    return expect


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("record")
    p.add_argument("root", type=Path)
    p.add_argument("expect", type=Path)
    p.add_argument("--dataset", type=int, required=True)
    p.add_argument("--lengths", default="12,20,15")
    p.add_argument("--images", action="store_true")
    p.add_argument("--task-switch", action="store_true")
    p = sub.add_parser("convert")
    p.add_argument("src", type=Path)
    p.add_argument("root", type=Path)
    p.add_argument("expect", type=Path)
    p = sub.add_parser("aggregate")
    p.add_argument("root", type=Path)
    p.add_argument("expect", type=Path)
    p.add_argument("sources", type=Path, nargs="+")
    p = sub.add_parser("edit")
    p.add_argument("op")
    p.add_argument("src", type=Path)
    p.add_argument("root", type=Path)
    p.add_argument("expect", type=Path)
    args = parser.parse_args()
    root = args.root.resolve()
    try:
        if args.cmd == "record":
            expect = record(root, args.dataset, [int(x) for x in args.lengths.split(",")], args.images,
                            args.task_switch)
        elif args.cmd == "convert":
            expect = convert(args.src.resolve(), root)
        elif args.cmd == "aggregate":
            expect = aggregate(root, [s.resolve() for s in args.sources])
        else:
            expect = edit(args.op, args.src.resolve(), root)
    except Missing as exc:
        print(f"MISSING: {exc}", file=sys.stderr)
        return 3
    args.expect.write_text(json.dumps(expect, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
