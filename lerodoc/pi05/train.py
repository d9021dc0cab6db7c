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
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from lerodoc import render
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.jsonl import write_json
from lerodoc.pi05 import checkpoint, launch, preflight, runs
from lerodoc.pi05.config import CURVE_OPTIONS, RunConfig
from lerodoc.pi05.data import (DataSpec, Frames, Tokenizer, TrainingBatches, held_out_rows, load_frames,
                                longest_prompt)
from lerodoc.pi05.distributed import Processes, all_sum, parallelise, shutdown, start_processes
from lerodoc.pi05.float8 import check_float8
from lerodoc.pi05.metrics import peak_flops
from lerodoc.pi05.model import PI05, PI05Config, flops_per_sample
from lerodoc.pi05.plot import plot_losses
from lerodoc.pi05.presets import PRESETS
from lerodoc.pi05.tracking import Tracker
from lerodoc.pi05.weights import check_policy, locate_assets


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
        from lerodoc.pi05.weights import load_weights
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
    the metrics flush reports such steps (`Metrics.flush`). (One reduction per gradient instead of torch's
    multi-tensor norm was no faster on an H200: docs/results/scaling_call6_h200x2.json.)"""
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


@dataclass
class Setup:
    """Everything the loop needs, made once before it."""
    run: RunConfig
    procs: Processes
    dataset: Dataset
    frames: Frames
    tokenizer: Tokenizer
    config: PI05Config
    weights: Path | None
    train_rows: np.ndarray | None = None   # the frames training samples from (None: all)
    val_rows: np.ndarray | None = None     # the held-out frames the held-out loss is measured on (None: no loss)


def held_out_episodes(run: RunConfig, dataset: Dataset) -> tuple[int, ...]:
    """The episode numbers `--val-episodes` or `--val-fraction` (with `--seed`) hold out; at least one episode
    must remain to train on."""
    from lerodoc.selection import format_ranges, parse
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


def batches_of(setup: Setup, start: int, stop: int, batch_per_device: int | None = None) -> TrainingBatches:
    run, procs = setup.run, setup.procs
    return TrainingBatches(setup.dataset, setup.frames, run.data, setup.tokenizer, seed=run.seed,
                           batch_per_device=batch_per_device or run.batch_per_device, rank=procs.rank,
                           world=procs.world, start=start, stop=stop, noise_width=setup.config.max_action_dim,
                           rows=setup.train_rows)


def loader(setup: Setup, start: int, stop: int, batch_per_device: int | None = None) -> torch.utils.data.DataLoader:
    run, procs = setup.run, setup.procs
    batches = batches_of(setup, start, stop, batch_per_device)
    workers = run.workers
    cpus = rank_cpus(procs) if workers and run.pin_workers else None
    return torch.utils.data.DataLoader(batches, batch_size=None, num_workers=workers,
                                       pin_memory=procs.device.type == "cuda",
                                       prefetch_factor=4 if workers else None, persistent_workers=False,
                                       multiprocessing_context="fork" if workers else None,
                                       worker_init_fn=_Pin(cpus) if cpus else None)


def rank_cpus(procs: Processes) -> list[int] | None:
    """This rank's share of the CPUs this process may use, for its data workers, when several processes share a
    node: ranks' workers then do not compete for the same cores. None with one process per node or no affinity."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local_world <= 1 or not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    share = len(cpus) // local_world
    return cpus[procs.local_rank * share:(procs.local_rank + 1) * share] if share >= 2 else None


class _Pin:
    def __init__(self, cpus: list[int]):
        self.cpus = cpus

    def __call__(self, worker: int) -> None:
        os.sched_setaffinity(0, self.cpus)


def to_device(batch: dict, device: torch.device) -> dict:
    """Model inputs from a loader batch: uint8 images to [-1, 1] float per camera, on the device."""
    moved = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    images = moved.pop("images").permute(1, 0, 4, 2, 3)  # (cameras, B, 3, S, S)
    # every sample shows every camera the loader sends: masks of None (no mask.any() host sync in the step)
    return dict(images=[im.float() / 127.5 - 1 for im in images], image_masks=[None] * len(images),
                tokens=moved["tokens"], token_masks=moved["token_masks"], actions=moved["actions"],
                action_is_pad=moved["action_is_pad"], noise=moved["noise"], time=moved["time"],
                real_steps=moved["real_steps"])


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

    def __iter__(self):
        return iter((self.model, self.ema, self.wrapped, self.optimizer, self.step_fn, self.bf16))


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


def sweep(run: RunConfig, batches: list[int], steps: int = 8, warmup: int = 3) -> list[dict]:
    """Increasing batches per device until one runs out of memory: median step time, samples/s, peak memory,
    MFU and data wait of each (real data, no checkpoints). The model trains a few steps per batch size."""
    try:
        return _sweep(run, batches, steps, warmup)
    finally:
        shutdown()


def _sweep(run: RunConfig, batches: list[int], steps: int, warmup: int) -> list[dict]:
    setup = prepare(run, resume=False, writes=False)
    procs = setup.procs
    parts = build(setup)
    flops = flops_per_sample(setup.config, setup.run.data.max_token_len, len(setup.run.data.cameras))
    peak = peak_flops(procs.device)
    cuda = procs.device.type == "cuda"
    results = []
    for batch_size in batches:
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(procs.device)
        times, waits = [], []
        try:
            stream = iter(loader(setup, 0, warmup + steps, batch_per_device=batch_size))
            for i in range(warmup + steps):
                started = time.perf_counter()
                batch = next(stream)
                waited = time.perf_counter() - started
                train_step(parts.step_fn, parts.wrapped, parts.optimizer, batch, setup, parts.bf16, run.lr)
                if cuda:
                    torch.cuda.synchronize(procs.device)
                if i >= warmup:
                    times.append(time.perf_counter() - started)
                    waits.append(waited)
        except torch.OutOfMemoryError:
            parts.optimizer.zero_grad(set_to_none=True)
            results.append({"batch_per_device": batch_size, "oom": True})
            break
        step_s = float(np.median(times))
        samples = batch_size * procs.world / step_s
        results.append({"batch_per_device": batch_size, "step_s": step_s, "samples_per_s": samples,
                        "samples_per_s_per_device": samples / procs.world,
                        "peak_gib": torch.cuda.max_memory_allocated(procs.device) / 2**30 if cuda else None,
                        "mfu": flops * samples / procs.world / peak if peak else None,
                        "data_wait": sum(waits) / sum(times)})
    return results


def run_job(run: RunConfig, resume: bool = False, progress: bool = True, nproc: int | None = None,
            sweep_batches: list[int] | None = None) -> dict | list[dict] | None:
    """Train (or, with `sweep_batches`, sweep) as one process, or start the job's processes on this host
    (lerodoc.pi05.launch: every GPU by default, `nproc` chooses) after one preflight here. Returns the first
    rank's summary (sweep: its rows), None in the other ranks' processes."""
    gpus = torch.cuda.device_count() if run.device in ("auto", "cuda") and torch.cuda.is_available() else 0
    job = launch.plan(dict(os.environ), nproc, gpus)
    if job is None:
        result = sweep(run, sweep_batches) if sweep_batches else train(run, resume=resume, progress=progress)
        first = int(os.environ.get("RANK", "0")) == 0
        return result if first else None
    check(run, resume, writes=not sweep_batches)     # once, before any process starts: a bad dataset fails here
    render.note(job.describe())
    return launch.start(job, _job_process, run.to_json(), resume, progress, sweep_batches, render.level)


def _job_process(run_json: dict, resume: bool, progress: bool, sweep_batches: list[int] | None,
                 level: int = render.NORMAL):
    """One process of a launched job (module level: the launcher starts it by name), at the job's -q / -v."""
    render.set_level(level == render.QUIET, level == render.VERBOSE)
    run = RunConfig.from_json(run_json)
    result = sweep(run, sweep_batches) if sweep_batches else train(run, resume=resume, progress=progress)
    return result if int(os.environ.get("RANK", "0")) == 0 else None


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
    model, ema, wrapped, optimizer, step_fn, bf16 = build(setup)
    start = 0
    if resume:
        start = checkpoint.load_latest(output, wrapped, optimizer, ema, procs.device)
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
    batches = iter(loader(setup, start, run.steps))
    held_out = batches_of(setup, 0, 0).held_out(setup.val_rows) if setup.val_rows is not None else None
    with log.live(progress and procs.main, start) as tick:
        for step in range(start, run.steps):
            waited = time.perf_counter()
            batch = next(batches)
            waited = time.perf_counter() - waited
            assert int(batch["step"]) == step, (int(batch["step"]), step)
            loss, grad_norm = train_step(step_fn, wrapped, optimizer, batch, setup, bf16, run.lr_at(step))
            if ema:
                ema.update()
            val_loss = None
            if held_out and ((step + 1) % run.val_every == 0 or step + 1 == run.steps):
                started = time.perf_counter()
                val_loss = held_out_loss(wrapped, held_out, setup, bf16)
                log.pause(time.perf_counter() - started)
            log.add(step, loss, grad_norm, run.lr_at(step), waited, val_loss)
            tick(step + 1, log)
            tracker.sync(log.rows)
            if run.save_every and ((step + 1) % run.save_every == 0 or step + 1 == run.steps):
                log.flush()
                checkpoint.save(output, step + 1, wrapped, optimizer, ema, setup, keep=run.keep)
    log.flush()
    tracker.close(log.rows)
    if procs.main:
        plot_losses(output / "metrics.jsonl", output / "loss.png")
    return log.summary() | {"output": str(output), "checkpoint": str(runs.path_of(output, run.steps)) if run.save_every else None,
                            "params": model.num_params(), "rank": procs.rank, "world_size": procs.world,
                            "global_batch": G, "max_token_len": run.data.max_token_len,
                            "weights": str(setup.weights) if setup.weights else None,
                            "cameras": list(run.data.cameras), "held_out": list(run.held_out)}


class Metrics:
    """Per-step losses kept on the device until `flush` (one sync per flush), written to metrics.jsonl by rank 0;
    the live line shows loss, samples/s and the share of wall time spent waiting for data."""

    def __init__(self, output: Path, procs: Processes, run: RunConfig, global_batch: int, flops: float,
                 peak: float | None):
        self.output, self.procs, self.run, self.global_batch = output, procs, run, global_batch
        self.flops, self.peak = flops, peak
        self.pending: list[tuple[int, torch.Tensor, torch.Tensor, float, float, float, float | None]] = []
        self.last_time = time.perf_counter()
        self.window_wait = 0.0
        self.rows: list[dict] = []
        self.latest: dict = {}

    def add(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor, lr: float, waited: float,
            val_loss: float | None = None) -> None:
        now = time.perf_counter()
        self.pending.append((step, loss, grad_norm, lr, waited, now - self.last_time, val_loss))
        self.last_time = now
        if len(self.pending) >= self.run.log_every:
            self.flush()

    def pause(self, seconds: float) -> None:
        """Leave `seconds` (a held-out evaluation) out of the step times and samples/s."""
        self.last_time += seconds

    def flush(self) -> None:
        if not self.pending:
            return
        losses = all_sum(torch.stack([p[1] for p in self.pending]).float(), self.procs).tolist()
        norms = torch.stack([p[2] for p in self.pending]).float().tolist()
        if self.procs.device.type == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        wall = sum(p[5] for p in self.pending) + (now - self.last_time)
        self.last_time = now
        rows = []
        for (step, _, _, lr, waited, seconds, val_loss), loss, norm in zip(self.pending, losses, norms):
            rows.append({"step": step + 1, "loss": loss, "grad_norm": norm, "lr": lr, "step_s": seconds,
                         "data_wait_s": waited} | ({} if math.isfinite(norm) else {"skipped": True})
                        | ({} if val_loss is None else {"val_loss": val_loss}))
        samples_per_s = self.global_batch * len(rows) / wall
        window = {"samples_per_s": samples_per_s, "data_wait": sum(r["data_wait_s"] for r in rows) / wall,
                  "mfu": samples_per_s * self.flops / self.procs.world / self.peak if self.peak else None}
        rows[-1] |= window
        self.rows.extend(rows)
        self.latest = rows[-1] | window
        self.pending = []
        if self.procs.main:
            with open(self.output / "metrics.jsonl", "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            last = rows[-1]
            render.detail(f"step {last['step']}/{self.run.steps}: loss {last['loss']:.4f}, grad norm "
                          f"{last['grad_norm']:.3g}, lr {last['lr']:.3g}, {samples_per_s:.1f} samples/s, data wait "
                          f"{100 * window['data_wait']:.0f}%"
                          + "".join(f"; held-out loss {r['val_loss']:.4f} at step {r['step']}"
                                    for r in rows if "val_loss" in r))
        if all("skipped" in r for r in rows):
            raise LerodocError(f"diverged: the loss or gradient was not finite at every step from {rows[0]['step']} "
                               f"to {rows[-1]['step']} (loss {rows[-1]['loss']}); those updates were skipped",
                               file=self.output / "metrics.jsonl",
                               hint="lower --lr, or check the dataset's stats and extreme channels (lerodoc "
                                    "validate, lerodoc quantiles); resume from the last checkpoint")

    def summary(self) -> dict:
        windows = [r for r in self.rows if "samples_per_s" in r]
        later = windows[1:] or windows   # the first window holds the warm-up (and compilation)
        held_out = [r["val_loss"] for r in self.rows if "val_loss" in r]
        return {"steps": len(self.rows), "final_loss": self.rows[-1]["loss"] if self.rows else None,
                "val_loss": held_out[-1] if held_out else None,
                "first_loss": self.rows[0]["loss"] if self.rows else None,
                "samples_per_s": float(np.mean([w["samples_per_s"] for w in later])) if later else None,
                "data_wait": float(np.mean([w["data_wait"] for w in later])) if later else None,
                "mfu": float(np.mean([w["mfu"] for w in later])) if later and self.peak else None,
                "skipped_steps": sum("skipped" in r for r in self.rows),   # non-finite: no update made
                "flops_per_sample": self.flops}

    def live(self, enabled: bool, start: int):
        return _live(enabled, start, self.run.steps)


class _live:
    """A rich progress line (loss, samples/s, data wait) on stderr; a no-op tick when disabled."""

    def __init__(self, enabled: bool, start: int, total: int):
        self.enabled, self.start, self.total = enabled, start, total

    def __enter__(self):
        if not self.enabled:
            return lambda step, log: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        self.bar = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                            TimeRemainingColumn(), console=render.err)
        self.bar.__enter__()
        task = self.bar.add_task("", total=self.total, completed=self.start)

        def tick(step: int, log: Metrics) -> None:
            r = log.latest
            text = (f"loss {r['loss']:.4f}  {r['samples_per_s']:.1f} samples/s  data wait {100 * r['data_wait']:.0f}%"
                    if r else "")
            self.bar.update(task, completed=step, description=text)
        return tick

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.__exit__(*exc)
        return False
