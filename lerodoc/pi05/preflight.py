"""Checks before any GPU work: the dataset trains, the assets exist, the run folder is right.

Each problem is a LerodocError naming the file or feature and the command that fixes it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lerodoc.checks import open_context, run_checks
from lerodoc.checks.common import Context
from lerodoc.conventions import INFO_PATH
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.info import ACTION_FEATURES, STATE_FEATURES, flat_names
from lerodoc.hub import locate
from lerodoc.pi05.weights import locate_weights
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
    refuse(dataset_problems(ctx, cameras, skip))


def dataset_problems(ctx: Context, cameras: tuple[str, ...], skip: tuple[str, ...] = ()) -> list[LerodocError]:
    """`check_dataset`'s refusal, as a list (empty or one error: `lerodoc validate` lists them all)."""
    used = set(cameras)
    video_keys = set(ctx.dataset.info.video_keys)
    errors = [f for f in run_checks(ctx) if f.severity == "error" and f.code not in skip
              and not (f.feature in video_keys and f.feature not in used)]
    if not errors:
        return []
    root = ctx.root
    shown = "; ".join(f"{f.code} {f.message}" + (f" ({f.file})" if f.file else "") for f in errors[:3])
    codes = ",".join(sorted({f.code for f in errors}))
    return [LerodocError(f"does not validate: {len(errors)} error(s), first: {shown}", file=root,
                         episode=errors[0].episode, field=errors[0].feature,
                         hint=f"lerodoc validate {root} --videos lists them; lerodoc repair {root} -o FIXED fixes "
                              f"most; --skip-checks {codes} trains anyway")]


def refuse(problems: list[LerodocError]) -> None:
    """Nothing when `problems` is empty; one of them as it is; several as one refusal that lists each with its own
    fix (a usage error first, alone: the command line is wrong). Following a hint clears its own item only."""
    usage = [p for p in problems if isinstance(p, UsageError)]
    if usage:
        raise usage[0]
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise LerodocError(f"{len(problems)} things stop this run, each with its own fix:\n"   # a line each
                           + "\n".join(f"  ({n}) {p.render()}" for n, p in enumerate(problems, 1)) + "\n",
                           hint="fix each as its parentheses say, then run the same command again")


def gather(dataset: Path, output: Path | None, resume: bool, tokenizer: str, weights: str | None,
           action_key: str, state_key: str | None, cameras: tuple[str, ...], skip: tuple[str, ...] = ()) -> None:
    """Every missing prerequisite of a run in one refusal, before any model or GPU work: the tokenizer and the
    weights (found offline), the run folder, the dataset's features and cameras, `lerodoc validate --videos`'s
    errors (video windows included) and the q01/q99 stats and channels. A user fixes them all at once instead of
    meeting them one run at a time; each item carries the command that clears it, and only it. With --resume the
    run's saved features are checked later, by the run itself."""
    problems: list[LerodocError] = []

    def attempt(check, *args):
        try:
            return check(*args)
        except UsageError:
            raise
        except LerodocError as exc:
            problems.append(exc)
            return None

    attempt(locate, "tokenizer", tokenizer)
    if weights is not None and attempt(locate_weights, weights) is None:   # its own way out: no weights at all
        missing = problems.pop()
        problems.append(type(missing)(missing.message, file=missing.file, field=missing.field,
                                      hint=(f"{missing.hint}; " if missing.hint else "")
                                      + "or pass --weights none to train from random initialisation"))
    if output is not None:
        attempt(check_run_folder, output, resume, dataset)
    ctx = attempt(open_checked, dataset)
    if ctx is not None and not resume:
        (action, state), key_problems = _feature_keys(ctx.dataset, action_key, state_key)
        chosen, camera_problems = _camera_keys(ctx.dataset, cameras)
        problems += key_problems + camera_problems + dataset_problems(ctx, chosen, skip)
        problems += feature_problems(ctx.dataset, action, state)
    refuse(problems)


def resolve_keys(dataset: Dataset, action_key: str, state_key: str | None, cameras: tuple[str, ...]
                 ) -> tuple[str, str | None, tuple[str, ...]]:
    """The action and state features and the cameras a run uses. A key given by name must exist; AUTO finds
    lerobot's name, then openpi's; no camera is an error unless asked for (--camera none): image features in the
    parquet are refused with the `lerodoc encode` command that makes them videos. The features and the cameras
    are checked apart, and what is wrong with both is refused at once."""
    keys, problems = _feature_keys(dataset, action_key, state_key)
    chosen, camera_problems = _camera_keys(dataset, cameras)
    refuse(problems + camera_problems)
    return keys[0], keys[1], chosen


def _feature_keys(dataset: Dataset, action_key: str, state_key: str | None
                  ) -> tuple[tuple[str | None, str | None], list[LerodocError]]:
    """(action, state) as found or given, and what is wrong with them (a key that is None was not found)."""
    features, info_file = dataset.info.features, dataset.root / INFO_PATH
    problems: list[LerodocError] = []
    if action_key == AUTO:
        action_key = next((k for k in ACTION_FEATURES if k in features), None)
        if action_key is None:
            problems.append(LerodocError(f"has no action feature ({' or '.join(ACTION_FEATURES)})", file=info_file,
                                         field="action",
                                         hint="name it with --action-key, or build it with lerodoc select"))
    if state_key == AUTO:
        state_key = next((k for k in STATE_FEATURES if k in features), None)
    found = []
    for flag, key in (("--action-key", action_key), ("--state-key", state_key)):
        if key is not None and key not in features:
            problems.append(LerodocError("no such feature in the dataset", file=info_file, field=key,
                                         hint=f"{flag} names one of: {', '.join(dataset.info.numeric_keys)}"))
            key = None
        found.append(key)
    return (found[0], found[1]), problems


def _camera_keys(dataset: Dataset, cameras: tuple[str, ...]) -> tuple[tuple[str, ...], list[LerodocError]]:
    """The cameras a run decodes (--camera as given, else every video feature), and what is wrong with them."""
    if cameras == (NO_CAMERAS,):
        return (), []
    if NO_CAMERAS in cameras:
        raise UsageError("--camera none cannot be combined with other cameras", field="--camera")
    features, root = dataset.info.features, dataset.root
    info_file = root / INFO_PATH
    images = dataset.info.image_keys
    encode = f"lerodoc encode {root} -o ENCODED" + "".join(f" --cameras {k}" for k in images)
    if not cameras:
        cameras = tuple(dataset.info.video_keys)
        if not cameras and images:
            return (), [LerodocError(f"stores its cameras ({', '.join(images)}) as images in the parquet; training "
                                     "decodes cameras from mp4, so this run would see no camera", file=info_file,
                                     field=images[0], hint=f"{encode} makes them video features (lerobot's "
                                                           "settings); or pass --camera none to train without images")]
        if not cameras:
            return (), [LerodocError("has no camera (no video feature): pi0.5 would train blind", file=info_file,
                                     field="features", hint="pass --camera none to train without images")]
    problems = []
    for key in cameras:
        dtype = features.get(key, {}).get("dtype")
        if dtype != "video":
            problems.append(LerodocError("is not a video feature of the dataset" if dtype is None else
                                         f"is stored as {dtype}; training decodes cameras from mp4 only",
                                         file=info_file, field=key,
                                         hint=encode if dtype == "image" else
                                         f"video features: {', '.join(dataset.info.video_keys) or 'none'}"))
    return tuple(cameras), problems


def check_features(dataset: Dataset, action_key: str, state_key: str | None) -> None:
    """The features (found by `resolve_keys`) are numeric vectors with q01/q99, have no near-constant or extreme
    channel, and the action fits pi0.5's 32 dims; everything wrong with them is refused at once."""
    refuse(feature_problems(dataset, action_key, state_key))


def feature_problems(dataset: Dataset, action_key: str | None, state_key: str | None) -> list[LerodocError]:
    """What `check_features` refuses, one error per fix: the keys without q01/q99 together (one `lerodoc
    quantiles` computes them all), then each key's non-finite quantiles or bad channels, then the action's dims."""
    features = dataset.info.features
    root = dataset.root
    problems: list[LerodocError] = []
    keys = [k for k in (action_key, state_key) if k is not None]
    for key in keys:
        if key not in features:
            problems.append(LerodocError("no such feature in the dataset", file=root / INFO_PATH, field=key,
                                         hint="pass --action-key/--state-key, or build it with lerodoc select"))
    keys = [k for k in keys if k in features]
    stats = {key: (dataset.stats or {}).get(key, {}) for key in keys}
    unquantiled = [key for key in keys if "q01" not in stats[key] or "q99" not in stats[key]]
    if unquantiled:
        problems.append(LerodocError(f"{'have' if len(unquantiled) > 1 else 'has'} no q01/q99 stats: pi0.5 "
                                     "normalises state and action with quantiles", file=root / "meta",
                                     field=", ".join(unquantiled),
                                     hint=f"lerodoc quantiles {root} computes and stores them"))
    for key in keys:
        if key in unquantiled:
            continue
        q01, q99 = np.ravel(stats[key]["q01"]), np.ravel(stats[key]["q99"])
        if not (np.isfinite(q01).all() and np.isfinite(q99).all()):
            problems.append(LerodocError("has non-finite q01/q99 stats", file=root / "meta", field=key,
                                         hint=f"lerodoc quantiles {root} recomputes them"))
            continue
        flags = channel_flags(stats[key])
        bad = [(i, f) for i, f in enumerate(flags) if f]
        if bad:
            names = flat_names(features[key].get("names"))
            listed = ", ".join(f"{i} ({names[i] if names else 'ch'} {'/'.join(f)})" for i, f in bad[:8])
            keep = [i for i, f in enumerate(flags) if not f]
            problems.append(LerodocError(
                f"has {len(bad)} channel(s) that would blow up the loss: {listed}"
                + (" ..." if len(bad) > 8 else ""), file=root / "meta", field=key,
                hint=f"keep the others with: lerodoc select {root} -o SELECTED "
                     f"--{'action' if key == action_key else 'state'} '{key}[{','.join(map(str, keep))}]'"))
    if action_key in features:
        dims = int(np.prod(features[action_key].get("shape") or [1]))
        if dims > MAX_ACTION_DIM:
            problems.append(LerodocError(f"has {dims} dims; pi0.5 predicts at most {MAX_ACTION_DIM}",
                                         file=root / INFO_PATH, field=action_key,
                                         hint=f"lerodoc select {root} -o SELECTED --action '{action_key}[0:32]'"))
    return problems


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


def preflight_command(dataset: Path, output: Path, resume: bool, sweep: bool, tokenizer: str, weights: str | None,
                      action_key: str | None, state_key: str | None, cameras: list[str],
                      skip_checks: str | None) -> None:
    """`lerodoc train pi05`'s preflight, from its options as typed, before torch loads: `gather` (a hub policy is
    fetched here, and remembered for the run). The run folder is checked by the first process only (under torchrun
    every rank runs the command, and rank 0 may have made it already), and not for --sweep, which writes none."""
    no_state = state_key is not None and state_key.lower() == NO_CAMERAS
    first = int(os.environ.get("RANK", "0")) == 0
    gather(dataset, output if first and not sweep else None, resume, tokenizer, weights,
           action_key or AUTO, None if no_state else (state_key or AUTO),
           tuple(c.lower() if c.lower() == NO_CAMERAS else c for c in cameras),
           tuple(c.strip().upper() for c in (skip_checks or "").split(",") if c.strip()))
