"""Checks before any GPU work: the dataset trains, the assets exist, the run folder is right.

Each problem is a LerodocError naming the file or feature and the command that fixes it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lerodoc.checks import Context, open_context, run_checks
from lerodoc.conventions import INFO_PATH
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.info import ACTION_FEATURES, STATE_FEATURES, flat_names
from lerodoc.tables.stats import channel_flags

MAX_ACTION_DIM = 32


AUTO = "auto"          # --state-key / --action-key not given: found by name (formats.info's STATE/ACTION_FEATURES)
NO_CAMERAS = "none"    # --camera none: train without images, asked for


def open_checked(root: Path) -> Context:
    """The dataset, opened for the checks (container-level video checks on: no frame is decoded)."""
    ctx = open_context(root, videos=True)
    if ctx.dataset is None:
        raise ctx.open_error
    return ctx


def check_dataset(ctx: Context, cameras: tuple[str, ...], skip: tuple[str, ...] = ()) -> None:
    """Refuse the dataset if `lerodoc validate --videos` finds an error in the data or in the cameras the run will
    decode: layout, indices, timestamps, stats, tasks, and each used camera's mp4 tables (windows against
    lengths, query times against frame times). No frame is decoded. `skip` lists codes the user overrides."""
    used = set(cameras)
    video_keys = set(ctx.dataset.info.video_keys)
    errors = [f for f in run_checks(ctx) if f.severity == "error" and f.code not in skip
              and not (f.feature in video_keys and f.feature not in used)]
    if errors:
        root = ctx.root
        shown = "; ".join(f"{f.code} {f.message}" + (f" ({f.file})" if f.file else "") for f in errors[:3])
        codes = ",".join(sorted({f.code for f in errors}))
        raise LerodocError(f"does not validate: {len(errors)} error(s), first: {shown}", file=root,
                           episode=errors[0].episode, field=errors[0].feature,
                           hint=f"lerodoc validate {root} --videos lists them; lerodoc repair {root} -o FIXED fixes "
                                f"most; --skip-checks {codes} trains anyway")


def resolve_keys(dataset: Dataset, action_key: str, state_key: str | None, cameras: tuple[str, ...]
                 ) -> tuple[str, str | None, tuple[str, ...]]:
    """The action and state features and the cameras a run uses. A key given by name must exist; AUTO finds
    lerobot's name, then openpi's; no camera is an error unless asked for (--camera none): image features in the
    parquet are refused with the `lerodoc encode` command that makes them videos."""
    features, root = dataset.info.features, dataset.root
    info_file = root / INFO_PATH
    if action_key == AUTO:
        action_key = next((k for k in ACTION_FEATURES if k in features), None)
        if action_key is None:
            raise LerodocError(f"has no action feature ({' or '.join(ACTION_FEATURES)})", file=info_file,
                               field="action", hint="name it with --action-key, or build it with lerodoc select")
    if state_key == AUTO:
        state_key = next((k for k in STATE_FEATURES if k in features), None)
    for flag, key in (("--action-key", action_key), ("--state-key", state_key)):
        if key is not None and key not in features:
            raise LerodocError("no such feature in the dataset", file=info_file, field=key,
                               hint=f"{flag} names one of: {', '.join(dataset.info.numeric_keys)}")
    if cameras == (NO_CAMERAS,):
        return action_key, state_key, ()
    if NO_CAMERAS in cameras:
        raise UsageError("--camera none cannot be combined with other cameras", field="--camera")
    images = dataset.info.image_keys
    encode = f"lerodoc encode {root} -o ENCODED" + "".join(f" --cameras {k}" for k in images)
    if not cameras:
        cameras = tuple(dataset.info.video_keys)
        if not cameras and images:
            raise LerodocError(f"stores its cameras ({', '.join(images)}) as images in the parquet; training decodes "
                               "cameras from mp4, so this run would see no camera", file=info_file, field=images[0],
                               hint=f"{encode} makes them video features (lerobot's settings); or pass --camera none "
                                    "to train without images")
        if not cameras:
            raise LerodocError("has no camera (no video feature): pi0.5 would train blind", file=info_file,
                               field="features", hint="pass --camera none to train without images")
    for key in cameras:
        dtype = features.get(key, {}).get("dtype")
        if dtype != "video":
            raise LerodocError("is not a video feature of the dataset" if dtype is None else
                               f"is stored as {dtype}; training decodes cameras from mp4 only",
                               file=info_file, field=key,
                               hint=encode if dtype == "image" else
                               f"video features: {', '.join(dataset.info.video_keys) or 'none'}")
    return action_key, state_key, tuple(cameras)


def check_features(dataset: Dataset, action_key: str, state_key: str | None) -> None:
    """The features (found by `resolve_keys`) are numeric vectors with q01/q99, have no near-constant or extreme
    channel, and the action fits pi0.5's 32 dims."""
    features = dataset.info.features
    root = dataset.root
    for key in [action_key] + ([state_key] if state_key else []):
        if key not in features:
            raise LerodocError("no such feature in the dataset", file=root / INFO_PATH, field=key,
                               hint="pass --action-key/--state-key, or build it with lerodoc select")
        stats = (dataset.stats or {}).get(key, {})
        if "q01" not in stats or "q99" not in stats:
            raise LerodocError("has no q01/q99 stats: pi0.5 normalises state and action with quantiles",
                               file=root / "meta", field=key,
                               hint=f"lerodoc quantiles {root} computes and stores them")
        q01, q99 = np.ravel(stats["q01"]), np.ravel(stats["q99"])
        if not (np.isfinite(q01).all() and np.isfinite(q99).all()):
            raise LerodocError("has non-finite q01/q99 stats", file=root / "meta", field=key,
                               hint=f"lerodoc quantiles {root} recomputes them")
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
        raise LerodocError(f"has {dims} dims; pi0.5 predicts at most {MAX_ACTION_DIM}", file=root / INFO_PATH,
                           field=action_key, hint=f"lerodoc select {root} -o SELECTED --action '{action_key}[0:32]'")


def check_run_folder(output: Path, resume: bool, dataset: Path | None = None) -> None:
    if dataset is not None:
        real, data = Path(os.path.realpath(output)), Path(os.path.realpath(dataset))
        if real == data or real.is_relative_to(data) or data.is_relative_to(real):
            raise LerodocError("is, holds or is inside the dataset: a run folder there would change the dataset",
                               file=output, hint="choose an --output outside the dataset (default: runs/NAME-pi05 "
                                                 "in the current folder)")
    if resume:
        if not (output / "config.json").is_file():
            raise LerodocError("holds no run to resume (no config.json)", file=output,
                               hint="drop --resume to start a new run there")
    elif output.exists() and any(output.iterdir()):
        raise LerodocError("already exists", file=output,
                           hint="pass --resume to continue that run, or choose a new --output")
