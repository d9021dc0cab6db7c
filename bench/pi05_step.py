"""bench/pi05_step: one GPU, the full pi0.5 preset, bf16 autocast over fp32 master weights, AdamW.

    python -m bench.pi05_step [--batch 4 8 16 32] [--steps 8] [--out results.json]

Synthetic batch like the issue's bar: two real cameras and one masked camera (skipped, as the model
skips cameras no sample shows), a 28-token prompt, a 50-step action chunk. For each per-device batch:
step time (--steps steps run back to back after 3 warm-up steps, as a trainer runs them, between two CUDA events;
and the median of --steps more, each waited for on its own), samples/s, peak memory, and MFU =
6 x params x tokens FLOPs per sample (lerodoc.pi05.model.flops_per_sample) x samples/s / peak bf16 FLOP/s.
A batch that runs out of memory is reported as such.

The helpers (synthetic_batch, train_step, measure, run_batches) are shared with bench/train_vs_lerobot.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from typing import Callable

import torch

from lerodoc.pi05.model import PI05, flops_per_sample
from lerodoc.pi05.presets import full

H200_BF16_DENSE = 989.4e12     # NVIDIA's spec for H200 SXM dense bf16 tensor-core FLOP/s
WARMUP = 3


def synthetic_batch(config, batch: int, prompt: int, device) -> dict:
    """PI05.forward's keyword arguments: cameras 0 and 1 shown to every sample, camera 2 to none."""
    size = config.vision.image_size
    images = [torch.rand(batch, 3, size, size, device=device) * 2 - 1 for _ in range(3)]
    masks = [torch.ones(batch, dtype=torch.bool, device=device)] * 2 + [torch.zeros(batch, dtype=torch.bool,
                                                                                    device=device)]
    return dict(images=images, image_masks=masks,
                tokens=torch.randint(0, config.vocab_size, (batch, prompt), device=device),
                token_masks=torch.ones(batch, prompt, dtype=torch.bool, device=device),
                actions=torch.randn(batch, config.action_horizon, config.action_dim, device=device))


def train_step(loss_fn: Callable[[], torch.Tensor], params, optimizer, device_type: str,
               clip: float | None = None, clip_and_step: Callable | None = None,
               losses: list | None = None) -> Callable[[], None]:
    """One full training step as a callable: loss under bf16 autocast, backward, optional gradient-norm clip,
    optimizer step, zero_grad. `clip_and_step(optimizer, clip)` replaces torch's clip_grad_norm_ + step (lerodoc's
    trainer fuses the clip into its AdamW: lerodoc.pi05.train.clip_and_step). `losses`: each step's loss is
    appended, still on the device (no sync)."""
    params = [p for p in params if p.requires_grad]

    def step():
        with torch.autocast(device_type, dtype=torch.bfloat16):
            loss = loss_fn()
        if losses is not None:
            losses.append(loss.detach())
        loss.backward()
        if clip_and_step is not None:
            clip_and_step(optimizer, clip or 0.0)
        else:
            if clip:
                torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def measure(step: Callable[[], None], steps: int, device) -> tuple[float, float, float | None]:
    """After WARMUP calls: (seconds a step over `steps` calls run back to back, as a trainer runs them: one pair of
    CUDA events around them all and no sync between steps; the median of `steps` more calls each waited for on its
    own, which leaves the GPU idle while the host launches the next step's first kernels; peak GiB, None off CUDA).
    Off CUDA both are wall-clock figures."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    def window(calls: int) -> float:
        if not cuda:
            t0 = time.perf_counter()
            for _ in range(calls):
                step()
            return time.perf_counter() - t0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            step()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000
    window(WARMUP)
    synced = statistics.median(window(1) for _ in range(steps))
    back_to_back = window(steps) / steps
    return back_to_back, synced, (torch.cuda.max_memory_allocated() / 2**30 if cuda else None)


def run_batches(batch_sizes, make_step: Callable[[int], Callable[[], None]], steps: int, device, flops: float,
                peak_flops: float | None, on_run: Callable[[dict], None] = print, cleanup: Callable[[], None] = None,
                ) -> list[dict]:
    """measure(make_step(batch)) for each batch size: step_s, samples_per_s, peak_gib and MFU (None off
    CUDA) of steps run back to back, and step_s_synced, samples_per_s_synced of steps each waited for. A batch
    that runs out of memory is reported as {"oom": true}, any other error as {"error": ...}; either way `cleanup`
    (say, optimizer.zero_grad) runs and the next batch size is tried."""
    runs = []
    for batch_size in batch_sizes:
        failed = None
        try:
            step_s, synced_s, peak = measure(make_step(batch_size), steps, device)
            run = {"batch": batch_size, "step_s": step_s, "samples_per_s": batch_size / step_s, "peak_gib": peak,
                   "mfu": flops * batch_size / step_s / peak_flops if peak_flops else None,
                   "step_s_synced": synced_s, "samples_per_s_synced": batch_size / synced_s}
        except torch.OutOfMemoryError:
            failed = {"batch": batch_size, "oom": True}
        except Exception as e:  # noqa: BLE001 - reported, and the next batch size still runs
            failed = {"batch": batch_size, "error": f"{type(e).__name__}: {e}"[:2000]}
        if failed:  # outside the except block: its traceback no longer holds the step's tensors
            run = failed
            if cleanup:
                cleanup()
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        runs.append(run)
        on_run(run)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=28)
    parser.add_argument("--out", default="pi05_step.json")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model first")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    config = full()
    started = time.perf_counter()
    with torch.device("cuda"):
        model = PI05(config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2.5e-5, betas=(0.9, 0.95),
                                  weight_decay=0.01, fused=True)
    flops = flops_per_sample(config, args.prompt, cameras=2)
    step_model = torch.compile(model) if args.compile else model
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "compile": args.compile,
               "params": model.num_params(),
               "flops_per_sample": flops, "peak_flops": H200_BF16_DENSE, "build_s": time.perf_counter() - started,
               "runs": []}

    def make_step(batch_size):
        batch = synthetic_batch(config, batch_size, args.prompt, "cuda")
        return train_step(lambda: step_model(**batch), model.parameters(), optimizer, "cuda")

    results["runs"] = run_batches(args.batch, make_step, args.steps, "cuda", flops, H200_BF16_DENSE,
                                  on_run=lambda run: print(json.dumps(run), flush=True),
                                  cleanup=lambda: optimizer.zero_grad(set_to_none=True))
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
