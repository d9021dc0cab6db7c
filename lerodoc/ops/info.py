"""Describe a dataset from its metadata and container headers (nothing is decoded)."""

from __future__ import annotations

from pathlib import Path

from lerodoc import access
from lerodoc.media import frames
from lerodoc.dataset import Dataset
from lerodoc.formats.info import flat_names
from lerodoc.tables.stats import BASIC, QUANTILES


def describe(root: Path) -> dict:
    ds = Dataset.open(root)
    info = ds.info
    features = {
        name: {"dtype": spec["dtype"], "shape": list(spec["shape"]),
               "names": flat_names(spec.get("names")) if spec["dtype"] not in ("video", "image") else None}
        for name, spec in info.features.items()}
    cameras = {}
    for key in info.video_keys:
        files = ds.video_files(key)
        first = ds.path(files[0]) if files else None
        if first is not None and first.is_file():
            f = frames.video_format(first)
            cameras[key] = {"codec": f.codec, "width": f.width, "height": f.height, "pix_fmt": f.pix_fmt,
                            "fps": f.fps, "files": len(files), "probed_file": files[0]}
        else:
            cameras[key] = {"files": len(files), "missing": files[0] if files else None}
    stat_keys = BASIC + QUANTILES
    held = ds.stats_held()   # from the footers where they tell: the per-episode stats are not read
    coverage = {name: {"dataset": [k for k in stat_keys if k in (ds.stats or {}).get(name, {})],
                       "episodes": [k for k in stat_keys if k in held.get(name, set())]}
                for name in info.features}
    return {
        "dataset": str(ds.root), "codebase_version": ds.version, "fps": info.fps, "robot_type": info.robot_type,
        "episodes": len(ds.episodes), "frames": ds.total_frames, "tasks": len(ds.tasks),
        "totals_in_info": {"episodes": info.total_episodes, "frames": info.total_frames, "tasks": info.total_tasks},
        "data_files": len(ds.data_files()),
        "size_bytes": sum(p.stat().st_size for p in ds.root.rglob("*") if p.is_file()),
        "features": features, "cameras": cameras, "stats": coverage,
        **({"transfer": access.transfer(ds.root)} if access.is_remote(ds.root) else {}),
    }
