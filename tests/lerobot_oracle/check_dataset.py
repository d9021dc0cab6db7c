"""Load a v3.0 dataset with lerobot 0.6.1's LeRobotDataset and check it against an expectation.

Run with the reference venv's python (never imported by lerodoc or its tests):

    check_dataset.py ROOT --expect EXPECT.json --backend pyav|torchcodec --out REPORT.json [--frames all|N]

EXPECT.json (every key optional except "episodes"):

    {
      "fps": 30, "total_frames": 95, "total_episodes": 2,      # totals default to the episodes' sums
      "video_keys": ["observation.images.front", ...],          # exact set of video features
      "stats_keys": {"observation.state": ["q01", "q99"]},      # stats.json must hold these
      "atol": 1e-6,                                             # after casting to the item's dtype
      "quantile_normalize": ["observation.state", "action"],    # report frame 0 through lerobot's QUANTILES
      "episodes": [                                             # output episode e is episodes[e]
        {"length": 40, "task": "pick",
         "identity": {"dataset": 1, "episode": 0, "frame_offset": 0, "frame_step": 1,
                      "cameras": {"observation.images.front": 0, "observation.images.wrist": 1}},
         "values": {"observation.state": {"expr": "1000*s + f + 0.01*k"},
                    "action": [[...], ...],                     # one value per output frame
                    "next.done": {"const": false}}}
      ]
    }

An episode may also name "reference": {camera: mp4 path}: then output frame i of that camera must
look like frame i of the reference file decoded with PyAV (mean absolute difference under 2 levels
of 255, and no closer to a neighbouring frame). This checks real data that carries no identity.

For output frame i of episode e, camera `key` must decode (tests/fixtures/identity.py) to
Identity(dataset, cameras[key], episode, frame_offset + frame_step*i). An "expr" is a numpy
expression over i (output frame), e (output episode), s (source episode), d (source dataset),
f (source frame) and k (channel index, np.arange(shape[0])). "cameras" may name video or
image features. Every frame is also checked for episode_index == e, frame_index == i,
index == running frame count and timestamp == i/fps.

The report lists problems; the exit code is 0 only when there are none.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before anything imports huggingface_hub

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from identity import Identity, decode_identity  # noqa: E402

MAX_EXAMPLES = 10


class _Collect(logging.Handler):
    """Keeps distinct warning messages emitted while loading and reading."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = f"{record.name}: {record.getMessage()}"[:500]
        if msg not in self.messages and len(self.messages) < 50:
            self.messages.append(msg)


def sample_frames(length: int, frames: str) -> list[int]:
    """All frame positions, or N spread evenly including the first and last."""
    if frames == "all" or int(frames) >= length:
        return list(range(length))
    return sorted({int(round(x)) for x in np.linspace(0, length - 1, int(frames))})


def expected_value(spec, ctx: dict, shape: tuple[int, ...]):
    """Evaluate one "values" entry for the frame described by ctx."""
    if isinstance(spec, list):
        return np.asarray(spec[ctx["i"]])
    if "const" in spec:
        return np.asarray(spec["const"])
    k = np.arange(shape[0]) if shape else 0
    return np.broadcast_to(np.asarray(eval(spec["expr"], {"np": np, "__builtins__": {}}, {**ctx, "k": k})), shape)


def same(got: np.ndarray, want: np.ndarray, atol: float) -> bool:
    """Equal values; shape (1,) features come back as scalars, so only the sizes must agree."""
    if got.size != want.size:
        return False
    want = want.reshape(got.shape)
    if got.dtype.kind in "fc":
        return bool(np.allclose(got, want.astype(got.dtype), atol=atol, rtol=0, equal_nan=True))
    return bool(np.array_equal(got, want))


def to_numpy(value):
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def describe_meta(ds) -> dict:
    meta = ds.meta
    stats = meta.stats or {}
    return {
        "codebase_version": meta.info.codebase_version,
        "total_episodes": meta.total_episodes,
        "total_frames": meta.total_frames,
        "total_tasks": meta.total_tasks,
        "fps": meta.fps,
        "len_dataset": len(ds),
        "video_keys": list(meta.video_keys),
        "camera_keys": list(meta.camera_keys),
        "features": {k: {"dtype": v["dtype"], "shape": list(v["shape"])} for k, v in meta.features.items()},
        "stats_keys": {k: sorted(v) for k, v in stats.items()} if meta.stats is not None else None,
    }


@functools.lru_cache(maxsize=4)
def reference_frames(path: str) -> list[np.ndarray]:
    """Every frame of an mp4 as uint8 RGB, in presentation order (cached: many episodes may share one)."""
    import av

    with av.open(path) as container:
        frames = sorted(((f.pts, f.to_ndarray(format="rgb24")) for f in container.decode(video=0)),
                        key=lambda x: x[0])
    return [img for _, img in frames]


def matches_reference(image: np.ndarray, refs: list[np.ndarray], i: int) -> bool:
    """The decoded (C,H,W) [0,1] image is reference frame i, not a neighbour."""
    img = image.transpose(1, 2, 0) * 255.0 if image.shape[0] == 3 else image
    if i >= len(refs):
        return False
    diffs = {j: float(np.abs(img - refs[j].astype(np.float32)).mean()) for j in (i - 1, i, i + 1) if 0 <= j < len(refs)}
    return diffs[i] < 2.0 and diffs[i] <= min(diffs.values())   # ties: a static scene repeats frames


def check_frame(item: dict, wanted: dict, identities: dict, where: dict, atol: float, rep: dict,
                references: dict | None = None) -> None:
    """Compare one LeRobotDataset item with its expected values, camera identities and reference frames."""
    for key, want in wanted.items():
        got = item.get(key)
        if isinstance(want, str):
            ok = got == want
        else:
            ok = got is not None and same(to_numpy(got), np.asarray(want), 1e-5 if key == "timestamp" else atol)
        if not ok:
            rep["value_mismatches"] += 1
            if len(rep["value_mismatch_examples"]) < MAX_EXAMPLES:
                rep["value_mismatch_examples"].append(
                    {**where, "key": key, "expected": np.asarray(want).tolist(),
                     "got": got if got is None or isinstance(got, str) else to_numpy(got).tolist()})
    for cam, want in identities.items():
        got = decode_identity(to_numpy(item[cam])) if cam in item else None
        if got != want:
            rep["misaligned"] += 1
            if len(rep["misaligned_examples"]) < MAX_EXAMPLES:
                rep["misaligned_examples"].append({**where, "camera": cam, "expected": want._asdict(),
                                                   "got": got._asdict() if got else None})
    for cam, refs in (references or {}).items():
        if not matches_reference(to_numpy(item[cam]), refs, where["frame"]):
            rep["misaligned"] += 1
            if len(rep["misaligned_examples"]) < MAX_EXAMPLES:
                rep["misaligned_examples"].append({**where, "camera": cam, "expected": "reference frame"})


def check_episode(ds, e: int, exp: dict, start_index: int, frames: str, atol: float, rep: dict) -> None:
    """Check the length and the sampled frames of output episode e; results are added to rep."""
    ident = exp.get("identity", {})
    shapes = {k: tuple(v["shape"]) for k, v in ds.meta.features.items()}
    i = None
    try:
        row = ds.meta.episodes[e]
        length, first, last = row["length"], row["dataset_from_index"], row["dataset_to_index"]
        references = {cam: reference_frames(path) for cam, path in exp.get("reference", {}).items()}
        if not (exp["length"] == length == last - first):
            rep["length_mismatches"].append({"episode": e, "expected": exp["length"], "length": length,
                                             "data_rows": last - first})
        for i in sample_frames(min(exp["length"], last - first), frames):
            item = ds[first + i]
            rep["frames_checked"] += 1
            src_frame = ident.get("frame_offset", 0) + ident.get("frame_step", 1) * i
            src = (ident.get("dataset", 0), ident.get("episode", e))
            ctx = {"i": i, "e": e, "f": src_frame, "d": src[0], "s": src[1]}
            wanted = {"episode_index": e, "frame_index": i, "index": start_index + i, "timestamp": i / ds.meta.fps}
            if "task" in exp:
                wanted["task"] = exp["task"]
            for key, spec in exp.get("values", {}).items():
                wanted[key] = expected_value(spec, ctx, shapes.get(key, ()))
            identities = {cam: Identity(src[0], cam_id, src[1], src_frame)
                          for cam, cam_id in ident.get("cameras", {}).items()}
            check_frame(item, wanted, identities, {"episode": e, "frame": i}, atol, rep, references)
    except Exception as exc:  # one bad frame must not hide the other episodes
        rep["exceptions"].append({"episode": e, "frame": i, "error": f"{type(exc).__name__}: {exc}"[:1000]})


def run(args, expect: dict, rep: dict) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    t0 = time.perf_counter()
    ds = LeRobotDataset(repo_id=args.repo_id, root=args.root, video_backend=args.backend)
    rep["load_s"] = round(time.perf_counter() - t0, 3)
    rep["meta"] = meta = describe_meta(ds)
    episodes = expect["episodes"]
    wanted = {"fps": expect.get("fps", meta["fps"]),
              "total_episodes": expect.get("total_episodes", len(episodes)),
              "total_frames": expect.get("total_frames", sum(ep["length"] for ep in episodes))}
    for key, value in wanted.items():
        if meta[key] != value:
            rep["problems"].append(f"meta {key} is {meta[key]}, expected {value}")
    if "video_keys" in expect and sorted(meta["video_keys"]) != sorted(expect["video_keys"]):
        rep["problems"].append(f"video keys {meta['video_keys']}, expected {expect['video_keys']}")
    for feat, keys in expect.get("stats_keys", {}).items():
        missing = sorted(set(keys) - set((meta["stats_keys"] or {}).get(feat, [])))
        if missing:
            rep["problems"].append(f"stats for {feat} lack {missing}")
    checked_cams = {c for ep in episodes for c in [*ep.get("identity", {}).get("cameras", {}),
                                                   *ep.get("reference", {})]}
    rep["unchecked_cameras"] = sorted(set(meta["camera_keys"]) - checked_cams)

    t0 = time.perf_counter()
    start = 0
    for e, exp in enumerate(episodes[: meta["total_episodes"]]):
        check_episode(ds, e, exp, start, args.frames, expect.get("atol", 1e-6), rep)
        rep["episodes_checked"] += 1
        start += exp["length"]
    rep["check_s"] = round(time.perf_counter() - t0, 3)
    if expect.get("quantile_normalize"):
        rep["normalized"] = quantile_normalize(ds, expect["quantile_normalize"])


def quantile_normalize(ds, keys: list[str]) -> dict:
    """Frame 0 of `keys` through lerobot's own NormalizerProcessorStep in QUANTILES mode (as pi05 trains)."""
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.processor.normalize_processor import NormalizerProcessorStep

    kinds = {key: FeatureType.ACTION if key == "action" else FeatureType.STATE for key in keys}
    features = {key: PolicyFeature(type=kinds[key], shape=tuple(ds.meta.features[key]["shape"])) for key in keys}
    step = NormalizerProcessorStep.from_lerobot_dataset(
        ds, features, {FeatureType.STATE: NormalizationMode.QUANTILES, FeatureType.ACTION: NormalizationMode.QUANTILES})
    item = ds[0]
    out = {}
    for key in keys:
        if kinds[key] == FeatureType.ACTION:
            value = step._normalize_action(item[key], inverse=False)
        else:
            value = step._normalize_observation({key: item[key]}, inverse=False)[key]
        out[key] = {"raw": to_numpy(item[key]).tolist(), "normalized": to_numpy(value).tolist()}
    return out


def check(root: Path, expect: dict, backend: str, frames: str, repo_id: str = "lerodoc/check") -> dict:
    """Load `root` and compare it to `expect`; the report (never raises)."""
    import importlib.metadata as md

    collect = _Collect()
    logging.getLogger().addHandler(collect)
    args = argparse.Namespace(root=Path(root), backend=backend, frames=frames, repo_id=repo_id)
    rep = {"root": str(args.root), "backend": args.backend, "frames": args.frames,
           "lerobot_version": md.version("lerobot"), "load_error": None, "meta": None, "problems": [],
           "episodes_checked": 0, "frames_checked": 0, "length_mismatches": [],
           "misaligned": 0, "misaligned_examples": [], "value_mismatches": 0, "value_mismatch_examples": [],
           "exceptions": [], "warnings": collect.messages}
    try:
        run(args, expect, rep)
    except Exception as exc:
        rep["load_error"] = f"{type(exc).__name__}: {exc}"[:2000]
        if "offline" in rep["load_error"].lower():
            rep["load_error"] += (" [lerobot found the local copy incomplete (meta, data episodes or"
                                  " video files) and fell back to the Hub]")
        tb = traceback.extract_tb(exc.__traceback__)
        ours = [f for f in tb if "site-packages/lerobot/" in f.filename] or tb
        rep["traceback"] = "".join(traceback.format_list(ours))[-3000:]  # lerobot's own frames
    finally:
        logging.getLogger().removeHandler(collect)
    if rep["load_error"]:
        rep["problems"].append(f"load failed: {rep['load_error']}")
    for key in ("length_mismatches", "exceptions"):
        if rep[key]:
            rep["problems"].append(f"{len(rep[key])} {key.replace('_', ' ')}")
    if rep["misaligned"]:
        rep["problems"].append(f"{rep['misaligned']} misaligned camera frames")
    if rep["value_mismatches"]:
        rep["problems"].append(f"{rep['value_mismatches']} value mismatches")
    rep["ok"] = not rep["problems"]
    return rep


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, nargs="?")
    parser.add_argument("--expect", type=Path)
    parser.add_argument("--backend", choices=["pyav", "torchcodec"], default="pyav")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--frames", default="all", help="'all' or N frames per episode")
    parser.add_argument("--repo-id", default="lerodoc/check")
    parser.add_argument("--batch", type=Path, help="a JSON list of {root, expect, backend?, frames?}: one "
                                                   "interpreter checks them all; --out gets the list of reports")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.captureWarnings(True)
    if args.batch:
        jobs = json.loads(args.batch.read_text())
        reports = [check(Path(j["root"]), j["expect"], j.get("backend", args.backend), str(j.get("frames", "all")),
                         f"lerodoc/check{i}") for i, j in enumerate(jobs)]
        args.out.write_text(json.dumps(reports, indent=1, default=str))
        return 0 if all(r["ok"] for r in reports) else 1
    rep = check(args.root, json.loads(args.expect.read_text()), args.backend, args.frames, args.repo_id)
    args.out.write_text(json.dumps(rep, indent=1, default=str))
    print(("OK " if rep["ok"] else "FAIL ") + "; ".join(rep["problems"]), file=sys.stderr)
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
