"""Float8 training's gate: whether a run may convert its large linears to torchao float8 (PI05.convert_float8)."""

from __future__ import annotations

import torch

from lerodoc.errors import LerodocError, UsageError
from lerodoc.pi05.config import RunConfig
from lerodoc.pi05.distributed import Processes
from lerodoc.pi05.model import PI05Config


# tensorwise scaling of every large linear, or of the SigLIP and Gemma ones only (the action expert kept in bf16);
# "-fast": fast accumulation in the backward products too (PI05.convert_float8)
RECIPES = ("tensorwise", "tensorwise-vlm", "tensorwise-fast", "tensorwise-vlm-fast")


def check_float8(run: RunConfig, config: PI05Config, procs: Processes) -> None:
    """Float8 training runs on CUDA GPUs with float8 matrix units (compute capability 8.9+), without FSDP, with
    torchao installed, and at a batch whose token counts are multiples of 16 (torch._scaled_mm's rule)."""
    if run.float8 not in RECIPES:
        raise LerodocError(f"float8 recipe {run.float8!r} is not offered (rowwise scaling was no faster than bf16)",
                           hint=f"use {' or '.join(RECIPES)}")
    B, H = run.batch_per_device, config.action_horizon
    prefix = len(run.data.cameras) * config.vision.num_patches + run.data.max_token_len
    if (B * H) % 16 or (B * prefix) % 16:
        good = [b for b in range(8, 129, 8) if not (b * H) % 16 and not (b * prefix) % 16][:4]
        raise LerodocError(f"float8 training multiplies over the batch's tokens, which must be a multiple of 16: "
                           f"batch {B} gives {B * H} action and {B * prefix} prefix tokens per device",
                           hint=f"use a batch per device such as {', '.join(map(str, good))}")
    if procs.device.type != "cuda" or torch.cuda.get_device_capability(procs.device) < (8, 9):
        raise LerodocError(f"float8 training needs a GPU with float8 matrix units (H100, H200, L40S, ...); this run "
                           f"is on {procs.device}", hint="drop the float8 option")
    if run.fsdp:
        raise UsageError("float8 training is not supported with --fsdp", hint="drop one of them")
    try:
        import torchao  # noqa: F401
    except ImportError:
        raise LerodocError("float8 training needs torchao, which is not installed",
                           hint="pip install torchao (a release built for this torch)") from None
