"""Fine-tune pi0.5 on a LeRobot dataset: one process, or many under torchrun (DDP, or FSDP2 with --fsdp).

The loop: AdamW over fp32 master weights, bf16 autocast on GPU, linear warmup then cosine decay, gradient
clipping, optional EMA. Every batch is a function of (seed, step) (lerodoc.pi05.data), and the step itself
draws no random numbers, so a resumed run repeats the uninterrupted run's losses, and the same global batch
split over N ranks gives the one-process curve (each rank's loss is its error sum over the global count of
real targets, so the gradient all-reduce averages to the global loss's gradient).

Held-out episodes (`val_episodes` or `val_fraction`) never reach a training batch; every `val_every` steps (and at
the last) the same flow-matching loss is measured on a fixed set of their frames with one fixed draw of noise and
times (lerodoc.pi05.data.held_out_noise), so its values compare across steps: metrics.jsonl's `val_loss`.

Only rank 0 writes (checkpoints, metrics.jsonl, loss.png); every rank reads the checkpoint to resume.

Beside the loop: its options (config.py), the batches it is fed (feed.py), what it measures (metrics.py, progress.py),
the batch sweep (sweep.py) and the processes a job starts (launch.py); a map and the measurements behind the
defaults are in docs/train-history.md.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from lerodoc import render
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.jsonl import write_json
from lerodoc.pi05 import checkpoint, preflight, runs
from lerodoc.pi05.config import CURVE_OPTIONS, RunConfig
from lerodoc.pi05.data import DataSpec, Tokenizer, held_out_rows, load_frames, longest_prompt
from lerodoc.pi05.distributed import Processes, all_sum, parallelise, shutdown, start_processes
from lerodoc.pi05.feed import Setup, batches_of, step_batches, to_device
from lerodoc.pi05.float8 import check_float8
from lerodoc.pi05.metrics import Metrics, peak_flops
from lerodoc.pi05.model import PI05, PI05Config, flops_per_sample
from lerodoc.pi05.plot import plot_losses
from lerodoc.pi05.presets import PRESETS
from lerodoc.pi05.progress import progress_line
from lerodoc.pi05.tracking import Tracker
from lerodoc.pi05.weights import check_policy, load_weights, locate_assets
from lerodoc.selection import format_ranges, parse


# ------------------------------------------------------------------------------------------------ the model


def build_model(config: PI05Config, run: RunConfig, procs: Processes, weights: Path | None) -> PI05:
    """fp32 master weights on the device, from `weights` or the seeded initialisation."""
    torch.manual_seed(run.seed)
    if weights is None:
        with torch.device(procs.device):
            model = PI05(config)
    else:
        with torch.device("meta"):
            model = PI05(config)
        load_weights(model, weights)
        model = model.to(device=procs.device, dtype=torch.float32)
    model.gradient_checkpointing = run.gradient_checkpointing
    return model


def make_optimizer(model: torch.nn.Module, run: RunConfig, device: torch.device) -> torch.optim.Optimizer:
    """Fused AdamW (CPU and CUDA): one pass over parameters, gradients and moments, which also applies the gradient
    clip and skips a non-finite step (see `clip_and_step`)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=run.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=run.weight_decay,
                             fused=device.type in ("cuda", "cpu"))


def clip_and_step(optimizer: torch.optim.Optimizer, clip: float) -> torch.Tensor:
    """Clip the gradients to norm `clip` and step, without a host sync; returns the norm before clipping.

    The clip is torch's (gradients x clip / (norm + 1e-6) when that is below 1) fused into the optimizer's own pass:
    fused AdamW divides each gradient by `grad_scale` as it reads it, so no separate pass rescales them. A
    non-finite norm sets `found_inf`, which makes the step leave parameters, moments and step counts untouched;
    the metrics flush reports such steps (`Metrics.flush`). What else was measured: docs/train-history.md."""
    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, foreach=True)
    if hasattr(norm, "full_tensor"):  # FSDP: a DTensor
        norm = norm.full_tensor()
    norm = norm.float()
    optimizer.found_inf = (~torch.isfinite(norm)).float()
    optimizer.grad_scale = torch.clamp((norm + 1e-6) / clip, min=1.0) if clip > 0 else None
    optimizer.step()
    return norm


class EMA:
    """An fp32 exponential moving average of the trainable parameters."""

    def __init__(self, model: PI05, decay: float):
        self.decay = decay
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.shadow = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update(self) -> None:
        torch._foreach_lerp_(self.shadow, [p.detach() for p in self.params], 1 - self.decay)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.shadow))

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, tensor in zip(self.names, self.shadow):
            tensor.copy_(state[name])


# ------------------------------------------------------------------------------------------------ setup


def held_out_episodes(run: RunConfig, dataset: Dataset) -> tuple[int, ...]:
    """The episode numbers `--val-episodes` or `--val-fraction` (with `--seed`) hold out; at least one episode
    must remain to train on."""
    numbers = [ep.index for ep in dataset.episodes]
    if run.val_episodes is not None and run.val_fraction is not None:
        raise UsageError("give --val-episodes or --val-fraction, not both")
    if run.val_episodes is not None:
        chosen = parse(run.val_episodes, "--val-episodes").resolve(numbers, "--val-episodes")
    elif run.val_fraction is not None:
        if not 0 < run.val_fraction < 1:
            raise UsageError(f"--val-fraction {run.val_fraction}: expected a fraction between 0 and 1 (exclusive)")
        count = max(1, round(run.val_fraction * len(numbers)))
        chosen = tuple(sorted(int(n) for n in np.random.default_rng(run.seed).permutation(numbers)[:count]))
    else:
        return ()
    if len(chosen) >= len(numbers):
        raise UsageError(f"holding out episodes {format_ranges(chosen)} leaves none to train on "
                         f"({len(numbers)} episode(s) in the dataset)", hint="hold out fewer episodes")
    return chosen


def check(run: RunConfig, resume: bool, writes: bool = True) -> tuple[RunConfig | None, Dataset, DataSpec]:
    """Preflight, before any GPU work: the run folder is free (or holds the run to resume) when the run `writes`,
    the dataset validates with the cameras it uses, state and action have usable stats. Returns the resumed run's
    saved config (or None), the dataset and the resolved data spec."""
    output = Path(run.output)
    if writes:
        preflight.check_run_folder(output, resume, Path(run.dataset))
    if resume:
        saved = RunConfig.from_json(json.loads((output / "config.json").read_text()))
        changed = [k for k in CURVE_OPTIONS if k != "data" and getattr(saved, k) != getattr(run, k)]
        if changed:
            raise LerodocError("differs from the run being resumed in " + ", ".join(
                f"--{k.replace('_', '-')} ({getattr(run, k)} now, {getattr(saved, k)} then)" for k in changed),
                file=output / "config.json", hint="resume with the options the run started with")
    else:
        saved = None
    ctx = preflight.open_checked(Path(run.dataset))
    dataset = ctx.dataset
    if saved:
        data = saved.data                       # resolved when the run started
    else:
        data = run.data or DataSpec(action_key=preflight.AUTO, state_key=preflight.AUTO, cameras=(),
                                    action_horizon=0, image_size=0, state_in_prompt=True, max_token_len=0)
        action_key, state_key, cameras = preflight.resolve_keys(dataset, data.action_key, data.state_key,
                                                                data.cameras)
        data = replace(data, action_key=action_key, state_key=state_key, cameras=cameras,
                       state_in_prompt=data.state_in_prompt and state_key is not None)
    preflight.check_dataset(ctx, data.cameras, run.skip_checks)
    preflight.check_features(dataset, data.action_key, data.state_key)
    if not saved:
        held_out_episodes(run, dataset)
    return saved, dataset, data


def prepare(run: RunConfig, resume: bool, writes: bool = True) -> Setup:
    """`check`, then the assets, the model config, the per-frame numbers and this process's place in the job."""
    saved, dataset, data = check(run, resume, writes)
    output = Path(run.output)
    run = replace(run, data=saved.data, held_out=saved.held_out) if saved else \
        replace(run, held_out=held_out_episodes(run, dataset))
    tokenizer_path, found = locate_assets(run.tokenizer, run.weights)
    tokenizer = Tokenizer(tokenizer_path)
    weights, policy = found or (None, None)
    preset = PRESETS.get(run.preset)
    if preset is None:
        raise LerodocError(f"unknown preset {run.preset!r}", hint=f"choose one of {', '.join(PRESETS)}")
    action_dim = int(np.prod(dataset.info.features[data.action_key].get("shape") or [1]))
    overrides = {"action_dim": action_dim}
    if data.action_horizon:
        overrides["action_horizon"] = data.action_horizon
    if run.preset == "tiny":
        overrides["vocab_size"] = tokenizer.vocab_size
    elif tokenizer.vocab_size > preset().vocab_size:
        raise LerodocError(f"has {tokenizer.vocab_size} tokens; the {run.preset} model embeds {preset().vocab_size}",
                           file=tokenizer.path, hint="use the PaliGemma tokenizer (lerodoc download tokenizer)")
    config = preset(**overrides)
    if policy:   # a lerobot policy folder: its cameras, shapes and normalisation must be this run's
        state = dataset.info.features[data.state_key].get("shape") if data.state_key else None
        check_policy(policy, config, data, dataset.stats, int(np.prod(state or [1])) if data.state_key else None)
    frames = load_frames(dataset, replace(data, action_horizon=config.action_horizon))
    data = replace(data, action_horizon=config.action_horizon, image_size=config.vision.image_size,
                   state_in_prompt=data.state_in_prompt and frames.state is not None)
    if not data.max_token_len:
        longest = longest_prompt(frames, dataset.tasks, tokenizer, data.state_in_prompt)
        data = replace(data, max_token_len=-(-longest // 8) * 8)
    procs = start_processes(run.device)
    if saved and saved.batch_per_device * saved.world_size != run.batch_per_device * procs.world:
        raise LerodocError(f"differs from the run being resumed in its global batch: {run.batch_per_device} per "
                           f"device x {procs.world} process(es) now, {saved.batch_per_device} x {saved.world_size} "
                           "then", file=output / "config.json",
                           hint="keep --batch-per-device x processes equal to resume the same curve")
    train_rows = val_rows = None
    if run.held_out:
        positions = np.flatnonzero(np.isin([ep.index for ep in dataset.episodes], run.held_out))
        train_rows = np.flatnonzero(~np.isin(frames.episode, positions))
        val_rows = held_out_rows(frames, positions, run.val_samples)
    return Setup(replace(run, data=data, world_size=procs.world), procs, dataset, frames, tokenizer, config, weights,
                 train_rows, val_rows)


# ------------------------------------------------------------------------------------------------ the loop


@torch.no_grad()
def held_out_loss(wrapped: torch.nn.Module, batches: list[dict], setup: Setup, bf16: bool) -> float:
    """The flow-matching loss over the held-out frames: every rank's error sum over the global count of real
    targets (the training loss's definition, over the whole held-out set at once)."""
    procs = setup.procs
    total = torch.zeros((), device=procs.device)
    count = 0
    one = torch.ones((), device=procs.device)
    for batch in batches:
        inputs = to_device(batch, procs.device)
        count += int(inputs.pop("real_steps"))
        with torch.autocast(procs.device.type, dtype=torch.bfloat16, enabled=bf16 and not setup.run.fsdp):
            total += wrapped(**inputs, denominator=one).float()   # the batch's error sum on this rank
    return float(all_sum(total, procs)) / max(1, count * setup.config.action_dim)


def train_step(step_fn, wrapped: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict, setup: Setup,
               bf16: bool, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward, backward, clip, AdamW. Returns this rank's loss share (the global loss is their sum) and the
    gradient norm before clipping, both still on the device."""
    run, procs = setup.run, setup.procs
    inputs = to_device(batch, procs.device)
    # the global count of real targets (real_steps counts every rank's); a tensor, not a Python float:
    # torch.compile would specialise on (and recompile for) each value
    denominator = inputs.pop("real_steps").float() * setup.config.action_dim
    for group in optimizer.param_groups:
        group["lr"] = lr
    with torch.autocast(procs.device.type, dtype=torch.bfloat16, enabled=bf16 and not run.fsdp):
        loss = step_fn(**inputs, denominator=denominator)
    loss.backward()
    grad_norm = clip_and_step(optimizer, run.clip)
    optimizer.zero_grad(set_to_none=True)
    return loss.detach(), grad_norm


@dataclass
class Parts:
    """The model and what trains it: `wrapped` is DDP/FSDP's view, `step_fn` the (compiled) callable."""
    model: PI05
    ema: EMA | None
    wrapped: torch.nn.Module
    optimizer: torch.optim.Optimizer
    step_fn: object
    bf16: bool


def build(setup: Setup) -> Parts:
    run, procs = setup.run, setup.procs
    bf16 = run.precision == "bf16" or (run.precision == "auto" and procs.device.type == "cuda")
    model = build_model(setup.config, run, procs, setup.weights)
    if run.ema and run.fsdp:
        raise UsageError("--ema is not supported with --fsdp", hint="drop one of them")
    ema = EMA(model, run.ema) if run.ema else None
    if run.float8:
        check_float8(run, setup.config, procs)
        model.convert_float8(run.float8)
    # FSDP2's per-layer hooks sit inside the joint layer (attention_inputs/outputs), so FSDP compiles the whole model
    layers = run.compile and run.compile_scope == "layers" and not run.fsdp
    if layers:   # before DDP wraps the model: DDP then runs eager around compiled layers
        model.compile_layers()
    wrapped = parallelise(model, procs, fsdp=run.fsdp, bf16=bf16, bucket_mb=run.ddp_bucket_mb,
                          bucket_view=run.ddp_bucket_view, static_graph=run.ddp_static_graph, reduce=run.ddp_reduce,
                          reshard_after_forward=run.fsdp_reshard)
    optimizer = make_optimizer(wrapped, run, procs.device)
    return Parts(model, ema, wrapped, optimizer, torch.compile(wrapped) if run.compile and not layers else wrapped,
                 bf16)


def train(run: RunConfig, resume: bool = False, progress: bool = True) -> dict:
    """Train to `run.steps`; returns a summary (final loss, samples/s, data-wait share, where things are)."""
    try:
        return _train(run, resume, progress)
    finally:
        shutdown()


def _train(run: RunConfig, resume: bool, progress: bool) -> dict:
    setup = prepare(run, resume)
    run, procs = setup.run, setup.procs
    output = Path(run.output)
    parts = build(setup)
    model, ema, wrapped, bf16 = parts.model, parts.ema, parts.wrapped, parts.bf16
    start = 0
    if resume:
        start = checkpoint.load_latest(output, wrapped, parts.optimizer, ema, procs.device)
    elif procs.main:
        output.mkdir(parents=True, exist_ok=True)
        write_json(output / "config.json", run.to_json())
        checkpoint.write_norm_stats(output, setup.dataset, run.data)
    if procs.main:
        checkpoint.truncate_metrics(output, start)
    if start >= run.steps:
        raise LerodocError(f"is complete: its newest checkpoint is step {start} of {run.steps}", file=output,
                           hint="pass a new --output to train again")
    G = run.batch_per_device * procs.world
    flops = flops_per_sample(setup.config, run.data.max_token_len, len(run.data.cameras))
    if procs.main:
        start_from = f"from {setup.weights}" if setup.weights else "from random initialisation (no pretrained weights)"
        cams = f"{len(run.data.cameras)} camera(s)" + (" (--camera none)" if not run.data.cameras else "")
        render.note(f"pi0.5 {run.preset} {start_from}: {model.num_params():,} parameters on {procs.device} x "
                         f"{procs.world}"
                         f" ({'FSDP' if run.fsdp else 'DDP' if procs.world > 1 else 'one process'}), global batch "
                         f"{G} = {run.batch_per_device} per device x {procs.world}; prompt {run.data.max_token_len} "
                         f"tokens, {cams}, horizon {setup.config.action_horizon}; "
                         f"steps {start}..{run.steps}")
    log = Metrics(output, procs, run, G, flops, peak_flops(procs.device))
    tracker = Tracker.open(output, run, procs.main)
    batches = step_batches(setup, start, run.steps)
    held_out = batches_of(setup, 0, 0).held_out(setup.val_rows) if setup.val_rows is not None else None
    with progress_line(progress and procs.main, start, run.steps) as tick:
        for step in range(start, run.steps):
            waited = time.perf_counter()
            batch = next(batches)
            waited = time.perf_counter() - waited
            assert int(batch["step"]) == step, (int(batch["step"]), step)
            loss, grad_norm = train_step(parts.step_fn, wrapped, parts.optimizer, batch, setup, bf16, run.lr_at(step))
            if ema:
                ema.update()
            val_loss = None
            if held_out and ((step + 1) % run.val_every == 0 or step + 1 == run.steps):
                started = time.perf_counter()
                val_loss = held_out_loss(wrapped, held_out, setup, bf16)
                log.pause(time.perf_counter() - started)
            log.add(step, loss, grad_norm, run.lr_at(step), waited, val_loss)
            tick(step + 1, log.latest)
            tracker.sync(log.rows)
            if run.save_every and ((step + 1) % run.save_every == 0 or step + 1 == run.steps):
                log.flush()
                checkpoint.save(output, step + 1, wrapped, parts.optimizer, ema, setup, keep=run.keep)
    log.flush()
    tracker.close(log.rows)
    if procs.main:
        plot_losses(output / "metrics.jsonl", output / "loss.png")
    last = str(runs.path_of(output, run.steps)) if run.save_every else None
    return log.summary() | {"output": str(output), "checkpoint": last,
                            "params": model.num_params(), "rank": procs.rank, "world_size": procs.world,
                            "global_batch": G, "max_token_len": run.data.max_token_len,
                            "weights": str(setup.weights) if setup.weights else None,
                            "cameras": list(run.data.cameras), "held_out": list(run.held_out)}
