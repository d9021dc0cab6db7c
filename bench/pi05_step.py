"""bench/pi05_step: one GPU, the full pi0.5 preset, bf16 autocast over fp32 master weights, AdamW.

    python -m bench.pi05_step [--batch 4 8 16 32] [--steps 8] [--out results.json]

Synthetic batch like the issue's bar: two real cameras and one masked camera (skipped, as the model
skips cameras no sample shows), a 28-token prompt, a 50-step action chunk. For each per-device batch:
step time (median of --steps after 3 warm-up steps, CUDA events), samples/s, peak memory, and MFU =
6 x params x tokens FLOPs per sample (lerodoc.pi05.model.flops_per_sample) x samples/s / peak bf16 FLOP/s.
A batch that runs out of memory is reported as such.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from lerodoc.pi05.model import PI05, flops_per_sample
from lerodoc.pi05.presets import full

H200_BF16_DENSE = 989.4e12     # NVIDIA's spec for H200 SXM dense bf16 tensor-core FLOP/s


def synthetic_batch(config, batch: int, prompt: int, device) -> dict:
    size = config.vision.image_size
    images = [torch.rand(batch, 3, size, size, device=device) * 2 - 1 for _ in range(3)]
    masks = [torch.ones(batch, dtype=torch.bool, device=device)] * 2 + [torch.zeros(batch, dtype=torch.bool,
                                                                                    device=device)]
    return dict(images=images, image_masks=masks,
                tokens=torch.randint(0, config.vocab_size, (batch, prompt), device=device),
                token_masks=torch.ones(batch, prompt, dtype=torch.bool, device=device),
                actions=torch.randn(batch, config.action_horizon, config.action_dim, device=device))


def measure(model, optimizer, batch: dict, steps: int) -> tuple[float, float]:
    """(median step seconds, peak GiB) for forward + backward + optimizer step."""
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(steps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1000)
    return statistics.median(times), torch.cuda.max_memory_allocated() / 2**30


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
    for batch_size in args.batch:
        try:
            step, peak = measure(step_model, optimizer, synthetic_batch(config, batch_size, args.prompt, "cuda"), args.steps)
            run = {"batch": batch_size, "step_s": step, "samples_per_s": batch_size / step, "peak_gib": peak,
                   "mfu": flops * batch_size / step / H200_BF16_DENSE}
        except torch.OutOfMemoryError:
            run = {"batch": batch_size, "oom": True}
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
        results["runs"].append(run)
        print(json.dumps(run), flush=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
