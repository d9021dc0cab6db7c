"""What a training run measures: per-step loss, gradient norm and lr, and per logging window samples/s, the share
of wall time spent waiting for data and MFU (against the GPU's dense bf16 peak, PEAK_BF16_FLOPS), written to
RUN/metrics.jsonl by rank 0 (one JSON object per step; a window's figures on its last step's line) and summarised
for the command's result."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from lerodoc import render
from lerodoc.errors import LerodocError
from lerodoc.pi05.config import RunConfig
from lerodoc.pi05.distributed import Processes, all_sum

PEAK_BF16_FLOPS = {"H200": 989.4e12, "H100": 989.4e12, "A100": 312e12}   # dense tensor-core spec sheets


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


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
