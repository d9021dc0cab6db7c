"""Open-loop evaluation of a trained pi0.5 policy on recorded episodes: `lerodoc eval pi05`.

A robot is not needed to see whether a policy learned something: replay recorded episodes, predict an action chunk
at every chosen frame from what the robot recorded there (its cameras, its state, the episode's task), and compare
the chunk with the actions the robot then took.

- Inputs are made exactly as in training (lerodoc.pi05.data: the frames decoded and resized with padding, the state
  quantile-normalised with the run's stats and digitised into the prompt, the prompt tokenised and padded), and
  the chunk comes from the model's own `sample_actions` from a fixed draw of noise (one seeded generator, one
  draw per evaluated frame, in frame order), so a result repeats exactly and does not depend on the batch size.
- The chunk is unnormalised with the run's action quantiles (policy.unnormalise, the inverse of data.normalise)
  and compared with the recorded actions of the next `action_horizon` frames; steps past the episode's end are
  masked out.
- Scores: MAE and MSE per action dimension and over all of them, in the dataset's units and normalised by the
  run's q01..q99 range of each dimension (error / (q99 - q01), squared for MSE: dimensions of different units
  then weigh alike); the error at each horizon step; the error of each episode.
- Baselines, scored the same way on the same frames: holding the last recorded action (the action of the frame
  before; the frame's own on an episode's first frame), the dataset's mean action over all its frames (from its
  stats), and the weights the run started from (with the same noise), when it started from any.

Sources: a checkpoint or run folder of `lerodoc train pi05`, or a lerobot policy folder that `lerodoc export
lerobot` wrote (config, weights, quantile stats and tokenizer; lerodoc.json says the model's shapes and data).
Both give the same numbers: the same weights, stats and tokenizer reach the same code.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from lerodoc.conventions import INFO_PATH
from lerodoc.errors import LerodocError, UsageError
from lerodoc.hub import locate
from lerodoc.pi05 import preflight
from lerodoc.pi05.data import DataSpec, Frames, Tokenizer, TrainingBatches, load_frames
from lerodoc.pi05.eval_page import write_page
from lerodoc.pi05.export import ACTION, PALIGEMMA, PREPROCESSOR, STATE, find_checkpoint
from lerodoc.pi05.frames import FrameReader
from lerodoc.pi05.model import PI05
from lerodoc.pi05.policy import model_config, unnormalise
from lerodoc.pi05.preflight import refuse
from lerodoc.pi05.runs import load_trainer
from lerodoc.pi05.train import to_device
from lerodoc.pi05.weights import load_weights, locate_weights, policy_stats
from lerodoc.promote.staging import check_output

Progress = Callable[[str, int], Callable[[int], None]]
HOLD, MEAN, BASE = "hold_last_action", "mean_action", "base_weights"
LATENCY_RUNS = 10


# ------------------------------------------------------------------------------------------------ the source


@dataclass
class Source:
    """A trained policy, wherever it was read from: its weights, model shapes, data spec, stats and tokenizer."""
    path: Path
    kind: str                   # "checkpoint" or "lerobot export"
    step: int | None
    model: dict                 # PI05Config as a dict
    data: DataSpec
    norm_stats: dict            # {"actions": {"q01", "q99", ...}, "state": {...}}
    weights: Path
    tokenizer: Path
    run: dict | None            # the run's config (None: the export names no checkpoint that still holds it)

    def base_weights(self) -> tuple[Path | None, str | None]:
        """(the weights the run started from, None) or (None, why there are none to compare with)."""
        if self.run is None:
            return None, ("the export folder names no checkpoint whose run config is still there, so the weights "
                          "the run started from are unknown")
        spec = self.run.get("weights")
        if spec is None:
            return None, "the run started from random initialisation (--weights none, the tiny preset's default)"
        try:
            return locate_weights(spec)[0], None
        except LerodocError as exc:
            return None, f"the run's --weights {spec} cannot be found here ({exc.message})"


def load_source(path: Path) -> Source:
    """A run folder (its newest checkpoint), a checkpoint folder, or a `lerodoc export lerobot` folder."""
    path = Path(path)
    if (path / "lerodoc.json").is_file() and not (path / "trainer.json").is_file():
        return _export_source(path)
    folder = find_checkpoint(path)
    trainer = load_trainer(folder)
    run = trainer["run"]
    try:
        tokenizer = locate("tokenizer", run["tokenizer"])
    except LerodocError:
        # --tokenizer as typed, relative to where training ran: the run keeps a copy in RUN/tokenizer (written
        # with each checkpoint's lerobot policy)
        tokenizer = folder.parent.parent / "tokenizer" / "tokenizer.model"
        if not tokenizer.is_file():
            raise
    return Source(folder, "checkpoint", trainer.get("step"), trainer["model"], DataSpec.from_json(run["data"]),
                  trainer["norm_stats"]["norm_stats"], folder / "model.safetensors", tokenizer, run)


def _export_source(folder: Path) -> Source:
    """A lerobot policy folder of `lerodoc export lerobot` (or a checkpoint's lerobot/): lerodoc.json holds the
    model's shapes and data spec, the preprocessor's normaliser the quantiles, the tokenizer step its tokenizer."""
    meta = _read_json(folder / "lerodoc.json")
    if not isinstance(meta, dict) or not {"model", "data"} <= meta.keys():
        raise LerodocError("lacks the model and data of the policy (not written by `lerodoc export lerobot`?)",
                           file=folder / "lerodoc.json", hint="pass a folder that `lerodoc export lerobot` wrote")
    arrays = policy_stats(folder)
    stats: dict[str, dict] = {}
    for name, key in (("actions", ACTION), ("state", STATE)):
        found = {k[len(key) + 1:]: v.tolist() for k, v in arrays.items() if k.startswith(key + ".")}
        if found:
            stats[name] = found
    if "q01" not in stats.get("actions", {}):
        raise LerodocError("has no action quantiles in its normaliser", file=folder / f"{PREPROCESSOR}.json",
                           hint="export the policy again with `lerodoc export lerobot`")
    tokenizer = folder / "tokenizer" / "tokenizer.model"
    if not tokenizer.is_file():
        steps = _read_json(folder / f"{PREPROCESSOR}.json").get("steps", [])
        name = next((s["config"].get("tokenizer_name") for s in steps
                     if s.get("registry_name") == "tokenizer_processor"), None)
        if name and (Path(name) / "tokenizer.model").is_file():
            tokenizer = Path(name) / "tokenizer.model"
        else:
            tokenizer = locate("tokenizer", "paligemma" if name == PALIGEMMA else meta.get("tokenizer", "paligemma"))
    run = None
    origin = meta.get("checkpoint")
    if origin and (Path(origin) / "trainer.json").is_file():
        run = load_trainer(Path(origin))["run"]
    return Source(folder, "lerobot export", meta.get("step"), meta["model"], DataSpec.from_json(meta["data"]),
                  stats, folder / "model.safetensors", tokenizer, run)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LerodocError(f"could not be read ({exc})", file=path) from None


def build_model(config, weights: Path, device: torch.device):
    """The policy's PI05 in float32 on `device` (built on the meta device, then given the file's tensors)."""
    with torch.device("meta"):
        model = PI05(config)
    load_weights(model, weights)
    return model.to(device=device, dtype=torch.float32).eval()


# ------------------------------------------------------------------------------------------------ the dataset


def check_features(dataset, source: Source) -> None:
    """The dataset must hold what the policy reads and predicts, in its shapes: the action and state features
    (dims as the run's stats), and each camera as a video feature. Every mismatch is named at once (exit 3)."""
    features, info = dataset.info.features, dataset.root / INFO_PATH
    spec, problems = source.data, []

    def dims(key: str) -> int:
        return int(np.prod(features[key].get("shape") or [1]))

    wanted = [(spec.action_key, len(source.norm_stats["actions"]["q01"]), "action")]
    if spec.state_key:
        wanted.append((spec.state_key, len(source.norm_stats["state"]["q01"]), "state"))
    for key, width, role in wanted:
        if key not in features:
            problems.append(LerodocError(f"has no feature {key!r}, the policy's {role}", file=info, field=key,
                                         hint="evaluate on a dataset with the features the policy was trained on"))
        elif dims(key) != width:
            problems.append(LerodocError(f"has {key} of {dims(key)} dims; the policy's {role} has {width}",
                                         file=info, field=key,
                                         hint="evaluate on a dataset with the features the policy was trained on"))
    for camera in spec.cameras:
        if camera not in dataset.info.video_keys:
            problems.append(LerodocError(f"has no video feature {camera!r}, a camera the policy sees", file=info,
                                         field=camera, hint=f"the policy sees {', '.join(spec.cameras)}"))
    refuse(problems)


def chosen_rows(frames: Frames, positions: list[int], stride: int) -> np.ndarray:
    """Every `stride`-th frame row of the episodes at `positions` (from each episode's first frame)."""
    ends = np.cumsum(np.bincount(frames.episode))
    starts = ends - np.bincount(frames.episode)
    return np.concatenate([np.arange(starts[p], ends[p], stride) for p in positions]).astype(np.int64)


# ------------------------------------------------------------------------------------------------ scores


def scores(pred: np.ndarray, recorded: np.ndarray, valid: np.ndarray, span: np.ndarray, episode: np.ndarray,
           numbers: list[int]) -> dict:
    """MAE and MSE of `pred` against `recorded` ((N, H, A), over the `valid` (N, H) steps): overall, per action
    dimension, per horizon step and per episode (`episode` (N,) holds each row's episode number, `numbers` the
    episodes in order), in the dataset's units and normalised by each dimension's q01..q99 `span`."""
    w = valid[..., None].astype(np.float64)
    err = (pred.astype(np.float64) - recorded.astype(np.float64)) * w
    err_n = err / span
    A = err.shape[2]

    def four(over, count) -> dict:
        return {"mae": np.abs(err).sum(over) / count, "mse": (err ** 2).sum(over) / count,
                "mae_normalised": np.abs(err_n).sum(over) / count, "mse_normalised": (err_n ** 2).sum(over) / count}

    steps = valid.sum()
    per_dim = four((0, 1), max(1, steps))
    horizon = four((0, 2), np.maximum(1, valid.sum(0) * A))
    overall = {k: float(v) for k, v in four((0, 1, 2), max(1, steps * A)).items()}
    episodes = []
    for n in numbers:
        mine = episode == n
        counted = valid[mine].sum() * A
        row = {k: float(v) for k, v in {
            "mae": np.abs(err[mine]).sum(), "mse": (err[mine] ** 2).sum(), "mae_normalised": np.abs(err_n[mine]).sum(),
            "mse_normalised": (err_n[mine] ** 2).sum()}.items()}
        episodes.append({"episode": n, "frames": int(mine.sum())} | {k: v / max(1, counted) for k, v in row.items()})
    return {"available": True} | overall | {"per_dim": {k: v.tolist() for k, v in per_dim.items()},
                                            "by_horizon": {k: v.tolist() for k, v in horizon.items()},
                                            "per_episode": episodes}


# ------------------------------------------------------------------------------------------------ evaluation


@dataclass
class Evaluation:
    """What `evaluate` measured: the JSON report, and what the page draws."""
    report: dict
    predicted: np.ndarray       # (N, H, A) the policy's chunks, dataset units
    recorded: np.ndarray        # (N, H, A)
    valid: np.ndarray           # (N, H)
    rows: np.ndarray            # (N,) frame rows
    frames: Frames
    numbers: list[int]          # the dataset's episode numbers, in frames.episode's positions


def evaluate(source_path: Path, dataset_path: Path, *, episodes=None, stride: int = 1, batch_size: int = 16,
             seed: int = 0, device: str = "auto", output: Path | None = None, force: bool = False,
             progress: Progress | None = None) -> Evaluation:
    """Score the policy at `source_path` on `dataset_path`'s `episodes` (a Selection; default: the run's held-out
    episodes when this is the dataset it trained on and it held any out, else every episode), every `stride`-th
    frame; write the HTML page to `output` when given. Bad input raises LerodocError (a feature the policy needs
    that the dataset lacks or shapes differently: exit 3 naming it)."""
    started = time.perf_counter()
    if stride < 1:
        raise UsageError(f"--stride {stride}: expected a positive number of frames")
    source = load_source(Path(source_path))
    if output is not None:
        check_output(Path(output), (Path(dataset_path), source.path), force=force, folder=False)
    ctx = preflight.open_checked(Path(dataset_path))
    dataset = ctx.dataset
    # validate's checks first (crafted metadata is named there), then what this policy needs of the features
    preflight.check_dataset(ctx, tuple(c for c in source.data.cameras if c in dataset.info.video_keys))
    check_features(dataset, source)
    numbers = [ep.index for ep in dataset.episodes]
    default = _default_episodes(source, dataset)
    if episodes is not None:
        picked = list(episodes.resolve(numbers, "--episodes"))
    else:
        picked = default or numbers
    spec = source.data
    config = model_config(source.model)
    stats = {spec.action_key: source.norm_stats["actions"]} | (
        {spec.state_key: source.norm_stats["state"]} if spec.state_key else {})
    frames = load_frames(dataset, spec, stats, raw_action=True)
    position = {n: i for i, n in enumerate(numbers)}
    rows = chosen_rows(frames, [position[n] for n in picked], stride)
    H, A = config.action_horizon, config.action_dim
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       "cpu" if device == "auto" else device)
    tokenizer = Tokenizer(source.tokenizer)
    # one draw per evaluated frame, in frame order: a frame's noise does not depend on the batching
    noise = torch.randn(len(rows), H, config.max_action_dim, generator=torch.Generator().manual_seed(seed))
    batches = TrainingBatches(dataset, frames, spec, tokenizer, seed=seed, batch_per_device=batch_size, rank=0,
                              world=1, start=0, stop=0, noise_width=config.max_action_dim)
    batches.reader = FrameReader(spec.image_size, batches.tolerance_s)
    try:
        inputs = _inputs(batches, rows, noise, batch_size, progress)
    finally:
        batches.reader.close()
    valid = ~np.concatenate([b["action_is_pad"].numpy() for b in inputs])
    chunk = np.minimum(rows[:, None] + np.arange(H), frames.end(rows)[:, None] - 1)
    recorded = frames.raw_action[chunk]
    q01, q99 = (np.asarray(source.norm_stats["actions"][k], np.float32) for k in ("q01", "q99"))
    span = np.asarray(q99, np.float64) - np.asarray(q01, np.float64)
    span = np.where(span == 0, 1e-8, span)
    episode_of = np.asarray(numbers)[frames.episode[rows]]

    def score(pred: np.ndarray) -> dict:
        return scores(pred, recorded, valid, span, episode_of, picked)

    model = build_model(config, source.weights, dev)
    predicted = unnormalise(_predict(model, inputs, dev, progress, "policy"), q01, q99)
    latency = _latency(model, inputs[0], dev)
    del model
    first = frames.end(rows) - np.bincount(frames.episode)[frames.episode[rows]]   # each row's episode start
    held = frames.raw_action[np.where(rows > first, rows - 1, rows)]
    baselines = {HOLD: score(np.repeat(held[:, None], H, axis=1)),
                 MEAN: score(np.broadcast_to(_mean_action(dataset, spec.action_key, A), recorded.shape))}
    base_path, missing = source.base_weights()
    if base_path is not None:
        try:
            base = build_model(config, base_path, dev)
        except LerodocError as exc:
            missing = f"the run's --weights do not fit this policy's model ({exc.message})"
        else:
            baselines[BASE] = score(unnormalise(_predict(base, inputs, dev, progress, "base"), q01, q99))
            del base
    if missing:
        baselines[BASE] = {"available": False, "reason": missing}
    policy = score(predicted)
    names = _names(dataset.info.features[spec.action_key], A)
    report = {
        "source": str(source.path), "source_kind": source.kind, "step": source.step, "dataset": str(dataset.root),
        "episodes": picked, "held_out": bool(default) and picked == default, "stride": stride,
        "frames": int(len(rows)), "action_horizon": H, "action_key": spec.action_key, "action_names": names,
        "cameras": list(spec.cameras), "seed": seed, "device": _device_name(dev),
        "policy": policy, "baselines": baselines,
        "beats": {k: policy["mse"] < b["mse"] for k, b in baselines.items() if b["available"]},
        "latency_ms_median": latency, "output": None}
    result = Evaluation(report, predicted, recorded, valid, rows, frames, numbers)
    if output is not None:
        write_page(Path(output), result, dataset, progress)
        report["output"] = str(Path(output).absolute())
    report["seconds"] = round(time.perf_counter() - started, 3)
    return result


def _mean_action(dataset, key: str, dims: int) -> np.ndarray:
    """The dataset's mean action over all its frames, from its stats (meta/stats.json: the stats home computes it,
    validate checks it against the data)."""
    mean = dataset.stats.get(key, {}).get("mean")
    if mean is None or np.size(mean) != dims:
        raise LerodocError(f"has no mean of {key} in its stats", file=dataset.root / "meta" / "stats.json",
                           field=key, hint=f"lerodoc quantiles {dataset.root}")
    return np.ravel(np.asarray(mean, np.float64))


def _default_episodes(source: Source, dataset) -> list[int]:
    """The run's held-out episodes when `dataset` is the one it trained on (same folder) and it held any out."""
    if not source.run or not source.run.get("held_out"):
        return []
    trained_on = Path(source.run["dataset"]).resolve()
    if trained_on != Path(dataset.root).resolve():
        return []
    have = {ep.index for ep in dataset.episodes}
    return [n for n in source.run["held_out"] if n in have]


def _inputs(batches: TrainingBatches, rows: np.ndarray, noise: torch.Tensor, size: int,
            progress: Progress | None) -> list[dict]:
    """The model inputs of every evaluated frame, in batches of `size` (CPU tensors, as training makes them)."""
    tick = progress("frames", len(rows)) if progress else None
    out = []
    for start in range(0, len(rows), size):
        part = rows[start:start + size]
        batches.batch = len(part)
        out.append(batches.sample(0, part, noise[start:start + size], torch.zeros(len(part))))
        if tick:
            tick(len(part))
    return out


def _model_inputs(batch: dict, device: torch.device) -> tuple:
    moved = to_device(batch, device)
    return moved["images"], moved["image_masks"], moved["tokens"], moved["token_masks"], moved["noise"]


@torch.no_grad()
def _predict(model, inputs: list[dict], device: torch.device, progress: Progress | None, label: str) -> np.ndarray:
    """Normalised chunks (N, H, A) from `sample_actions` over every batch."""
    tick = progress(label, sum(len(b["tokens"]) for b in inputs)) if progress else None
    out = []
    for batch in inputs:
        out.append(model.sample_actions(*_model_inputs(batch, device)).float().cpu().numpy())
        if tick:
            tick(len(batch["tokens"]))
    return np.concatenate(out)


@torch.no_grad()
def _latency(model, batch: dict, device: torch.device) -> float:
    """Median milliseconds of one chunk at batch 1 (the first evaluated frame), after two warm-up chunks."""
    one = {k: v[:1] if v.ndim else v for k, v in batch.items()}
    args = _model_inputs(one, device)
    times = []
    for i in range(LATENCY_RUNS + 2):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        model.sample_actions(*args)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= 2:
            times.append(1000 * (time.perf_counter() - started))
    return float(np.median(times))


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def _names(feature: dict, dims: int) -> list[str]:
    """The action's channel names from info.json when it lists them flat, else action[i]."""
    names = feature.get("names")
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    if isinstance(names, list) and len(names) == dims and all(isinstance(n, str) for n in names):
        return list(names)
    return [f"{i}" for i in range(dims)]

