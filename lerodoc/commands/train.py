"""`lerodoc train pi05`: fine-tune pi0.5 on a dataset, on CPU, one GPU or many (torchrun)."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from lerodoc import api, render
from lerodoc.options import DatasetArg, JsonOpt, working_in
from lerodoc.run.parallel import data_workers
from lerodoc.selection import format_ranges, parse

app = typer.Typer(name="train", no_args_is_help=True, help="Train policies on a dataset.")

MODEL, DATA, OPTIM, RUN, PERF, VAL = "Model", "Data", "Optimisation", "Run", "Performance", "Held-out episodes"


class Float8(str, Enum):
    tensorwise = "tensorwise"
    tensorwise_vlm = "tensorwise-vlm"
    tensorwise_fast = "tensorwise-fast"
    tensorwise_vlm_fast = "tensorwise-vlm-fast"


@app.command("pi05")
def pi05(
    dataset: DatasetArg = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Run folder (config, checkpoints, "
                                                   "metrics), never inside the dataset.",
                                                   show_default="runs/NAME-pi05 here, or beside the dataset when "
                                                   "here is inside it", rich_help_panel=RUN)] = None,
    preset: Annotated[str, typer.Option(help="Model size: tiny (CPU tests, demos) or full (3.35B, the published "
                                        "shapes).", rich_help_panel=MODEL)] = "full",
    weights: Annotated[Optional[str], typer.Option(help="pi0.5 model.safetensors (file or folder), a lerobot PI05 "
                                                   "policy folder or hub id (owner/name; its cameras, shapes and "
                                                   "quantiles must be the dataset's), a known name such as "
                                                   "pi05_base, or 'none' for random initialisation.",
                                                   show_default="pi05_base with --preset full; none with --preset "
                                                   "tiny", rich_help_panel=MODEL)] = None,
    tokenizer: Annotated[str, typer.Option(help="SentencePiece model (file, folder, or 'paligemma' from the hub "
                                           "cache).", rich_help_panel=MODEL)] = "paligemma",
    action_key: Annotated[Optional[str], typer.Option(help="Action feature.", show_default="action, else actions",
                                                      rich_help_panel=DATA)] = None,
    state_key: Annotated[Optional[str], typer.Option(help="State feature ('none' for no state).",
                                                     show_default="observation.state, else state, else none",
                                                     rich_help_panel=DATA)] = None,
    cameras: Annotated[list[str], typer.Option("--camera", help="Video feature to show the model (repeatable); "
                                               "'none' trains without images.", show_default="every video feature",
                                               rich_help_panel=DATA)] = [],
    skip_checks: Annotated[Optional[str], typer.Option(help="Validate codes to train anyway (comma-separated, e.g. "
                                                       "VID010); preflight otherwise stops on any error.",
                                                       rich_help_panel=DATA)] = None,
    state_in_prompt: Annotated[bool, typer.Option(help="Put the discretised state in the prompt (pi0.5's "
                                                  "default).", rich_help_panel=DATA)] = True,
    action_horizon: Annotated[int, typer.Option(min=0, help="Actions per chunk; 0: the preset's (50 full, 10 "
                                                "tiny).", rich_help_panel=DATA)] = 0,
    max_token_len: Annotated[int, typer.Option(min=0, help="Prompt tokens; 0: the data's longest prompt, rounded "
                                               "up to 8.", rich_help_panel=DATA)] = 0,
    val_episodes: Annotated[Optional[list[str]], typer.Option("--val-episodes", help="Episodes never trained on, whose "
                                                    "loss is measured every --val-every steps: N, N-M, N,M-K or a "
                                                    "JSON list [N, M] (repeatable).", show_default="none",
                                                    rich_help_panel=VAL)] = None,
    val_fraction: Annotated[Optional[float], typer.Option(help="Hold out this share of the episodes instead, drawn "
                                                          "with --seed.", rich_help_panel=VAL)] = None,
    val_every: Annotated[int, typer.Option(min=1, help="Steps between held-out losses (one more at the last step), "
                                           "each with the same noise and times.", rich_help_panel=VAL)] = 100,
    val_samples: Annotated[int, typer.Option(min=1, help="Held-out frames measured, evenly spaced over the held-out "
                                             "episodes.", rich_help_panel=VAL)] = 256,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps.", rich_help_panel=OPTIM)] = 1000,
    batch_per_device: Annotated[int, typer.Option(min=1, help="Samples per GPU (or process) per step; the global "
                                                  "batch is this x the number of processes.",
                                                  rich_help_panel=OPTIM)] = 4,
    lr: Annotated[float, typer.Option(help="Peak learning rate.", rich_help_panel=OPTIM)] = 2.5e-5,
    min_lr: Annotated[float, typer.Option(help="Learning rate at the last step (cosine decay).",
                                          rich_help_panel=OPTIM)] = 2.5e-6,
    warmup_steps: Annotated[Optional[int], typer.Option(help="Linear warmup steps; default 10% of the steps, at "
                                                        "most 1000.", rich_help_panel=OPTIM)] = None,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.", rich_help_panel=OPTIM)] = 0.01,
    clip: Annotated[float, typer.Option(help="Gradient norm clip.", rich_help_panel=OPTIM)] = 1.0,
    ema: Annotated[Optional[float], typer.Option(help="EMA decay of the weights (e.g. 0.999); saved as "
                                                 "ema.safetensors.", rich_help_panel=OPTIM)] = None,
    seed: Annotated[int, typer.Option(help="Seeds the initialisation, the sample order and the noise.",
                                      rich_help_panel=OPTIM)] = 0,
    precision: Annotated[str, typer.Option(help="auto (bf16 autocast on GPU, fp32 on CPU), bf16 or fp32.",
                                           rich_help_panel=PERF)] = "auto",
    device: Annotated[str, typer.Option(help="auto, cpu or cuda (under torchrun: cuda:LOCAL_RANK).",
                                        rich_help_panel=PERF)] = "auto",
    compile: Annotated[bool, typer.Option("--compile", help="torch.compile the model.", rich_help_panel=PERF)] = False,
    float8: Annotated[Optional[Float8], typer.Option(help="torchao float8 training of the large linear layers "
                                                     "(tensorwise scaling; tensorwise-vlm keeps the action expert in "
                                                     "bf16; -fast also accumulates the backward products fast; "
                                                     "CUDA GPUs with float8 units, not with "
                                                     "--fsdp; needs torchao, the float8 extra). Off by default: "
                                                     "faster at large batches, slower at small ones, slightly "
                                                     "different numerics (docs/train.md).",
                                                     case_sensitive=False, rich_help_panel=PERF)] = None,
    gradient_checkpointing: Annotated[bool, typer.Option("--gradient-checkpointing", help="Recompute layers in "
                                                         "backward: less memory, about 1/3 more compute.",
                                                         rich_help_panel=PERF)] = False,
    fsdp: Annotated[bool, typer.Option("--fsdp", help="Shard parameters, gradients and optimizer state (FSDP2) "
                                       "instead of DDP.", rich_help_panel=PERF)] = False,
    fsdp_reshard: Annotated[bool, typer.Option("--fsdp-reshard/--fsdp-keep-gathered",
                                               help="With --fsdp: free each layer's gathered parameters after "
                                               "forward and gather again in backward, or keep them (ZeRO-2: one "
                                               "gather per step, more memory per GPU; measurements in "
                                               "docs/train.md).", rich_help_panel=PERF)] = True,
    workers: Annotated[int, typer.Option(min=0, help="DataLoader processes decoding video, per GPU.",
                                         show_default="8, at most the CPUs available",
                                         rich_help_panel=PERF)] = data_workers(),
    nproc: Annotated[Optional[int], typer.Option(min=1, help="Training processes on this host (one per GPU), "
                                                 "started through torch's elastic launcher; ignored under torchrun.",
                                                 show_default="every GPU torch sees (GPU_NUM_PER_NODE on a platform "
                                                 "that starts one process per node); 1 on the CPU",
                                                 rich_help_panel=PERF)] = None,
    save_every: Annotated[int, typer.Option(min=0, help="Checkpoint every N steps and at the end (0: never).",
                                            rich_help_panel=RUN)] = 1000,
    keep: Annotated[int, typer.Option(min=1, help="Complete checkpoints to keep.", rich_help_panel=RUN)] = 2,
    log_every: Annotated[int, typer.Option(min=1, help="Steps per metrics flush (one GPU sync each).",
                                           rich_help_panel=RUN)] = 10,
    sweep: Annotated[bool, typer.Option("--sweep", help="Measure increasing --sweep-batches per device (step time, "
                                        "samples/s, peak memory, MFU) until one runs out of memory; no "
                                        "checkpoints.", rich_help_panel=PERF)] = False,
    sweep_batches: Annotated[str, typer.Option(help="Batches per device that --sweep tries, in order.",
                                               rich_help_panel=PERF)] = "1,2,4,8,16,24,32,48,64",
    wandb: Annotated[bool, typer.Option("--wandb", help="Also log to Weights & Biases (WANDB_MODE=offline: a local "
                                        "run folder, no network); pip install 'lerodoc[wandb]'.",
                                        rich_help_panel=RUN)] = False,
    wandb_project: Annotated[str, typer.Option(help="W&B project for --wandb.", rich_help_panel=RUN)] = "lerodoc",
    tensorboard: Annotated[bool, typer.Option("--tensorboard", help="Also write TensorBoard event files to "
                                              "RUN/tensorboard; pip install 'lerodoc[tensorboard]'.",
                                              rich_help_panel=RUN)] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --output from its newest "
                                         "checkpoint, exactly.", rich_help_panel=RUN)] = False,
    json: JsonOpt = False,
) -> None:
    """Fine-tune pi0.5 on DATASET (v2.1 or v3.0, with q01/q99 stats).

    Preflight first (the dataset validates, quantiles exist, no near-constant or extreme channel, tokenizer
    and weights found, the run folder free unless --resume), then the loop: AdamW, warmup + cosine, grad
    clip, bf16 autocast on GPU. Under torchrun every process runs this same command (DDP, or --fsdp).

    Example: lerodoc train pi05 data/pusht_v30 -o runs/pusht --weights pi05_base --steps 30000
    """
    if precision not in ("auto", "bf16", "fp32"):
        raise typer.BadParameter("auto, bf16 or fp32", param_hint="--precision")
    result = api.train_pi05(
        dataset, output or default_run(dataset), preset=preset, weights=weights, tokenizer=tokenizer,
        action_key=action_key, state_key=state_key, cameras=cameras, skip_checks=(skip_checks or "").split(","),
        state_in_prompt=state_in_prompt, action_horizon=action_horizon, max_token_len=max_token_len,
        val_episodes=_held_out(val_episodes), val_fraction=val_fraction, val_every=val_every, val_samples=val_samples,
        steps=steps, batch_per_device=batch_per_device, lr=lr, min_lr=min_lr, warmup_steps=warmup_steps,
        weight_decay=weight_decay, clip=clip, ema=ema, seed=seed, precision=precision, device=device,
        compile=compile, float8=float8.value if float8 else None, gradient_checkpointing=gradient_checkpointing,
        fsdp=fsdp, fsdp_reshard=fsdp_reshard, workers=workers, nproc=nproc, save_every=save_every, keep=keep,
        log_every=log_every, wandb_project=wandb_project if wandb else None, tensorboard=tensorboard,
        resume=resume, sweep_batches=_batches(sweep_batches) if sweep else None,
        progress=render.shows_progress(not json))
    if result is None:      # not the job's first process: rank 0's process reports
        return
    if sweep:
        render_sweep(result, json)
        return
    summary = result.to_json()
    if json:
        render.print_json(summary)
        return
    held_out = (f"; held-out loss {summary['val_loss']:.4f} on episodes {format_ranges(summary['held_out'])}"
                if summary.get("val_loss") is not None else "")
    render.out().print(f"trained {summary['steps']} steps: loss {summary['first_loss']:.4f} -> "
                       f"{summary['final_loss']:.4f}{held_out}, {summary['samples_per_s']:.1f} samples/s, data wait "
                       f"{100 * summary['data_wait']:.1f}% of the time; checkpoint {summary['checkpoint'] or 'none'}")


def _held_out(values: list[str] | None) -> list[int] | None:
    """--val-episodes (repeatable, any form of the selection syntax) as episode numbers (the run's config keeps
    them as one canonical selection, `0-2,5`, which a resume compares)."""
    if not values:
        return None
    chosen = parse(values, "--val-episodes")
    return sorted({n for lo, hi in chosen.spans for n in range(lo, hi + 1)})


def _batches(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise typer.BadParameter("a comma-separated list of positive integers", param_hint="--sweep-batches")
    return values


def render_sweep(sweep, as_json: bool) -> None:
    """What `train pi05 --sweep` prints of `sweep` (a `results.Sweep`)."""
    if os.environ.get("RANK", "0") != "0":
        return
    if as_json:
        render.print_json(sweep.to_json())
        return
    rows, fits, best = sweep.runs, sweep.fits, sweep.best

    def cell(value, fmt):
        return "-" if value is None else format(value, fmt)

    render.out().print(render.table("batch sweep (per device)", ["batch", "step s", "samples/s", "per device",
                                                               "peak GiB", "MFU", "data wait"],
                                  [[r["batch_per_device"], "out of memory"] if r.get("oom") else
                                   [r["batch_per_device"], cell(r["step_s"], ".3f"), cell(r["samples_per_s"], ".1f"),
                                    cell(r["samples_per_s_per_device"], ".1f"), cell(r["peak_gib"], ".1f"),
                                    cell(r["mfu"], ".1%"), cell(r["data_wait"], ".1%")] for r in rows]))
    if best:
        render.out().print(f"largest batch that fits: {fits[-1]['batch_per_device']}; fastest: "
                           f"{best['batch_per_device']} ({best['samples_per_s']:.1f} samples/s)")


def default_run(dataset: Path) -> Path:
    """runs/NAME-pi05 in the current folder, or beside the dataset when the current folder is inside it (the card's
    command is typed there; a run folder is never written into its dataset)."""
    root = Path(dataset).resolve()
    return (root.parent / "runs" if working_in(root) else Path("runs")) / f"{root.name}-pi05"
