"""`train pi05 --sweep`: the batch per device that trains fastest before memory runs out. Each batch size trains a
few steps on the real data (no checkpoints), from the smallest up, stopping at the first out-of-memory."""

from __future__ import annotations

import time

import numpy as np
import torch

from lerodoc.pi05.config import RunConfig
from lerodoc.pi05.distributed import shutdown
from lerodoc.pi05.feed import step_batches
from lerodoc.pi05.metrics import peak_flops
from lerodoc.pi05.model import flops_per_sample
from lerodoc.pi05.train import build, prepare, train_step


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
            stream = step_batches(setup, 0, warmup + steps, batch_per_device=batch_size)
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
