"""Checks before any GPU work: the dataset trains, the assets exist, the run folder is right.

Each problem is a LerodocError naming the file or feature and the command that fixes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lerodoc.checks import open_context, run_checks
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.formats.info import flat_names
from lerodoc.stats import channel_flags

MAX_ACTION_DIM = 32


def check_dataset(root: Path) -> Dataset:
    """Open the dataset and refuse it if `lerodoc validate` finds an error (videos are checked when decoded)."""
    ctx = open_context(root)
    if ctx.dataset is None:
        raise ctx.open_error
    errors = [f for f in run_checks(ctx, families=("layout", "indices", "timestamps", "stats", "tasks"))
              if f.severity == "error"]
    if errors:
        shown = "; ".join(f"{f.code} {f.message}" + (f" ({f.file})" if f.file else "") for f in errors[:3])
        raise LerodocError(f"does not validate: {len(errors)} error(s), first: {shown}", file=root,
                           hint=f"lerodoc validate {root} lists them; lerodoc repair {root} -o FIXED fixes most")
    return ctx.dataset


def check_features(dataset: Dataset, action_key: str, state_key: str | None, cameras: tuple[str, ...]) -> None:
    """The features exist, are numeric vectors with q01/q99, have no near-constant or extreme channel, and
    the action fits pi0.5's 32 dims; the cameras are video features."""
    features = dataset.info.features
    root = dataset.root
    for key in [action_key] + ([state_key] if state_key else []):
        if key not in features:
            raise LerodocError("no such feature in the dataset", file=root / "meta/info.json", field=key,
                               hint="pass --action-key/--state-key, or build it with lerodoc select")
        stats = (dataset.stats or {}).get(key, {})
        if "q01" not in stats or "q99" not in stats:
            raise LerodocError("has no q01/q99 stats: pi0.5 normalises state and action with quantiles",
                               file=root / "meta", field=key,
                               hint=f"lerodoc quantiles {root} --in-place (or -o COPY) computes them")
        q01, q99 = np.ravel(stats["q01"]), np.ravel(stats["q99"])
        if not (np.isfinite(q01).all() and np.isfinite(q99).all()):
            raise LerodocError("has non-finite q01/q99 stats", file=root / "meta", field=key,
                               hint=f"lerodoc quantiles {root} --in-place recomputes them")
        flags = channel_flags(stats)
        bad = [(i, f) for i, f in enumerate(flags) if f]
        if bad:
            names = flat_names(features[key].get("names"))
            listed = ", ".join(f"{i} ({names[i] if names else 'ch'} {'/'.join(f)})" for i, f in bad[:8])
            keep = [i for i, f in enumerate(flags) if not f]
            raise LerodocError(
                f"has {len(bad)} channel(s) that would blow up the loss: {listed}"
                + (" ..." if len(bad) > 8 else ""), file=root / "meta", field=key,
                hint=f"keep the others with: lerodoc select {root} -o SELECTED "
                     f"--{'action' if key == action_key else 'state'} '{key}[{','.join(map(str, keep))}]'")
    dims = int(np.prod(features[action_key].get("shape") or [1]))
    if dims > MAX_ACTION_DIM:
        raise LerodocError(f"has {dims} dims; pi0.5 predicts at most {MAX_ACTION_DIM}", file=root / "meta/info.json",
                           field=action_key, hint=f"lerodoc select {root} -o SELECTED --action '{action_key}[0:32]'")
    for key in cameras:
        dtype = features.get(key, {}).get("dtype")
        if dtype != "video":
            raise LerodocError("is not a video feature of the dataset" if dtype is None else
                               f"is stored as {dtype}; training decodes cameras from mp4 only",
                               file=root / "meta/info.json", field=key,
                               hint=f"video features: {', '.join(dataset.info.video_keys) or 'none'}")


def check_run_folder(output: Path, resume: bool) -> None:
    if resume:
        if not (output / "config.json").is_file():
            raise LerodocError("holds no run to resume (no config.json)", file=output,
                               hint="drop --resume to start a new run there")
    elif output.exists() and any(output.iterdir()):
        raise LerodocError("already exists", file=output,
                           hint="pass --resume to continue that run, or choose a new --output")
