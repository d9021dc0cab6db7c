"""The optimizer step of lerodoc's trainer: the gradient clip fused into AdamW equals torch's clip, a non-finite
step is skipped on the device and reported, a diverged window stops the run with one paragraph, and DDP sums
gradients over ranks (no division by the world size)."""

from __future__ import annotations

import math
import os
import socket

import pytest

from tests.helpers import importable, require

require(importable("torch"), "lerodoc's train extra is not installed")

import torch  # noqa: E402

from lerodoc.errors import LerodocError  # noqa: E402
from lerodoc.pi05.distributed import Processes, sum_hook  # noqa: E402
from lerodoc.pi05.config import RunConfig  # noqa: E402
from lerodoc.pi05.metrics import Metrics  # noqa: E402
from lerodoc.pi05.train import clip_and_step  # noqa: E402


def params_with_grads(seed: int, scale: float) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(n, generator=g)) for n in (7, 33, 128)]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * scale
    return params


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01, fused=True)


@pytest.mark.parametrize("scale", [0.01, 10.0])   # below the clip (untouched) and above it (scaled down)
def test_fused_clip_equals_torch_clip(scale):
    ours, theirs = params_with_grads(0, scale), params_with_grads(0, scale)
    norm = clip_and_step(adamw(ours), clip=1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    adamw(theirs).step()
    assert float(norm) == pytest.approx(float(expected), rel=1e-6)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=1e-6)
    moved = max(float((a.detach() - b.detach()).abs().max()) for a, b in zip(ours, params_with_grads(0, scale)))
    assert moved > 1e-3   # the step did update


def test_non_finite_gradient_skips_the_step():
    params = params_with_grads(1, 1.0)
    params[1].grad[3] = float("nan")
    before = [p.detach().clone() for p in params]
    optimizer = adamw(params)
    norm = clip_and_step(optimizer, clip=1.0)
    assert not math.isfinite(float(norm))
    for p, b in zip(params, before):
        assert torch.equal(p.detach(), b)
    assert all(float(optimizer.state[p]["step"]) == 0 for p in params)   # the step count did not move either
    for p in params:
        p.grad = torch.ones_like(p)
    clip_and_step(optimizer, clip=1.0)                                    # the next finite step goes through
    assert all(float(optimizer.state[p]["step"]) == 1 for p in params)
    assert not torch.equal(params[0].detach(), before[0])


def test_metrics_report_skipped_steps_and_stop_a_diverged_run(tmp_path):
    run = RunConfig(dataset="d", output=str(tmp_path), tokenizer="t", log_every=3)
    log = Metrics(tmp_path, Processes(), run, global_batch=4, flops=1.0, peak=None)
    log.add(0, torch.tensor(1.0), torch.tensor(2.0), 1e-3, 0.0)
    log.add(1, torch.tensor(float("nan")), torch.tensor(float("nan")), 1e-3, 0.0)
    log.add(2, torch.tensor(0.9), torch.tensor(1.5), 1e-3, 0.0)           # flush: one skipped step, no error
    assert [r.get("skipped", False) for r in log.rows] == [False, True, False]
    assert log.summary()["skipped_steps"] == 1
    with pytest.raises(LerodocError, match="diverged: .* every step from 4 to 6"):
        for step in (3, 4, 5):
            log.add(step, torch.tensor(float("inf")), torch.tensor(float("nan")), 1e-3, 0.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_rank(rank: int, port: int, out: dict) -> None:
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        model = torch.nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            model.weight.fill_(1.0)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp.register_comm_hook(None, sum_hook)
        x = torch.full((1, 3), float(rank + 1))
        ddp(x).sum().backward()                      # d/dw = x: rank 0 gives 1s, rank 1 gives 2s
        out[rank] = model.weight.grad.tolist()
    finally:
        dist.destroy_process_group()


def test_ddp_sum_hook_sums_over_ranks():
    import torch.multiprocessing as mp
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_ddp_rank, args=(_free_port(), out), nprocs=2, join=True)
        grads = dict(out)
    assert grads[0] == grads[1] == [[3.0, 3.0, 3.0]]  # 1 + 2, not their mean 1.5


def test_training_processes_default_to_expandable_segments_and_keep_a_users_setting(monkeypatch):
    from lerodoc.pi05.distributed import CUDA_ALLOCATOR, start_processes
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    start_processes("cpu")
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == CUDA_ALLOCATOR == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")
    start_processes("cpu")
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512"
