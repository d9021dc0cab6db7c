"""The processes of a training job and how the model is spread over them: DDP or FSDP2, gradients summed.

Each rank's loss is its own error sum over the global count of real targets, so the global loss is the sum of
the ranks' losses and its gradient is the sum of theirs. Both wrappers therefore reduce by summing: DDP through a
comm hook that all-reduces without dividing by the world size (torch's default hook divides, which costs an fp32
pass over every gradient and a world factor in the loss to undo it), FSDP2 with a gradient divide factor of 1.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from lerodoc.errors import LerodocError


@dataclass
class Processes:
    """This process's place in the job, from the variables torchrun (or a platform) sets."""
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def main(self) -> bool:
        return self.rank == 0


# CUDA's caching allocator with expandable segments: as fast (66.1 and 66.0 samples/s at batch 48 on an H200),
# and it fragments less, so a larger batch fits: batch 56 of the full preset runs in 137.1 GiB with it and runs out
# of memory without (docs/results/scaling_call8_h200.json to scaling_call10_h200.json). A user's own setting wins.
CUDA_ALLOCATOR = "expandable_segments:True"


def start_processes(device: str) -> Processes:
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", CUDA_ALLOCATOR)   # read at CUDA's first allocation, after this
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise LerodocError("--device cuda, but torch sees no GPU", hint="use --device cpu")
        torch.cuda.set_device(local_rank)
        where = torch.device("cuda", local_rank)
    else:
        where = torch.device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if where.type == "cuda" else "gloo", device_id=where if where.type == "cuda"
                                else None)
    return Processes(rank, world, local_rank, where)


def shutdown() -> None:
    """Tear the process group down (called in `finally`, so a failed rank does not leave NCCL hanging)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def all_sum(value: torch.Tensor, procs: Processes) -> torch.Tensor:
    if procs.world > 1:
        dist.all_reduce(value)
    return value


def sum_hook(state, bucket):  # no annotations: DDP compares them with dist.GradBucket, and this module's are strings
    """DDP comm hook: all-reduce a gradient bucket in place, summing (no division by the world size)."""
    work = dist.all_reduce(bucket.buffer(), group=state, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def bf16_sum_hook(state, bucket):
    """DDP comm hook: sum bf16-rounded gradients (half the bytes on the wire, not exact)."""
    buffer = bucket.buffer()
    low = buffer.to(torch.bfloat16)
    work = dist.all_reduce(low, group=state, async_op=True)

    def back(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(fut.value()[0])
        return buffer
    return work.get_future().then(back)


DDP_HOOKS = {"fp32": sum_hook, "bf16": bf16_sum_hook}


def parallelise(model: torch.nn.Module, procs: Processes, *, fsdp: bool, bf16: bool, bucket_mb: int = 100,
                bucket_view: bool = True, static_graph: bool = False, reduce: str = "fp32",
                reshard_after_forward: bool = True) -> torch.nn.Module:
    """FSDP2 (one unit per transformer layer, bf16 compute, fp32 reduce) or DDP; the model itself for one process
    without `fsdp`. Gradients are summed over ranks either way (see the module docstring)."""
    if fsdp:
        return _fully_shard(model, procs, bf16, reshard_after_forward)
    if procs.world > 1:
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[procs.device] if procs.device.type == "cuda" else None, bucket_cap_mb=bucket_mb,
            gradient_as_bucket_view=bucket_view, static_graph=static_graph)
        ddp.register_comm_hook(None, DDP_HOOKS[reduce])
        return ddp
    return model


def _fully_shard(model: torch.nn.Module, procs: Processes, bf16: bool, reshard_after_forward: bool) -> torch.nn.Module:
    # FSDP2 (about 1 s to import on top of torch): loaded only with --fsdp
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
    if not dist.is_initialized():  # one process: FSDP still needs a process group
        dist.init_process_group("nccl" if procs.device.type == "cuda" else "gloo", store=dist.HashStore(),
                                rank=0, world_size=1)
    # joint_layer and embed_prefix return views (q/k/v, concatenations); nothing writes to them in place
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else torch.float32, reduce_dtype=torch.float32)
    units = []
    pg = model.paligemma
    for layer in pg.vision_tower.vision_model.encoder.layers:
        units.append(fully_shard(layer, mp_policy=policy, reshard_after_forward=reshard_after_forward))
    for tower in (pg.language_model, model.expert):
        for layer in tower.layers:
            units.append(fully_shard(layer, mp_policy=policy, reshard_after_forward=reshard_after_forward))
            for method in ("attention_inputs", "attention_outputs"):
                register_fsdp_forward_method(layer, method)
    units.append(fully_shard(model, mp_policy=policy, reshard_after_forward=reshard_after_forward))
    for method in ("embed_prefix", "velocity"):
        register_fsdp_forward_method(model, method)
    for unit in units:   # sum, as DDP's hook does, with a plain SUM collective (gloo has no PREMUL_SUM)
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    return model
