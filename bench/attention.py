"""bench/attention: pi0.5's attention at training shapes, each way PyTorch offers to run it, forward and backward.

    python -m bench.attention [--batch 72] [--cameras 2] [--prompt 28] [--iters 20] [--out FILE]

`lerodoc.pi05.model.joint_layer` calls `scaled_dot_product_attention` with the pi0.5 mask (`attention_layout`: a
boolean (B, 1, T, T) over T = cameras x 256 image tokens + prompt + 50 action tokens) and Gemma's grouped queries
(8 query heads, 1 key/value head, head size 256), in each of the 18 joint layers; SigLIP's layers call it without a
mask (16 heads of 72, 256 tokens an image). This times one call, forward and backward (gradients of q, k and v),
on one GPU, each way:
- `default`: the model's call, with the backend PyTorch picks;
- `cudnn`, `efficient`, `math`: the same call held to one backend (`torch.nn.attention.sdpa_kernel`);
- `additive`: the mask made additive (0 or -inf, bf16) once, as `PI05.prefix_cache` does for inference;
- `expanded`: the key and value head repeated to 8 heads, without enable_gqa;
- `flex`: FlexAttention (compiled) with a block mask made from the same rule (prefix validity, action rows);
- `flash_no_mask`: flash attention without any mask: a bound on what the mask costs, not the model's attention.
Each way's output and gradients are set against `default`'s (largest absolute difference); `x default` is default's
time over the way's (above 1: faster). Results with provenance go to --out.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench.results import git_commit, write_results
from lerodoc.pi05.model import attention_layout

IMAGE_TOKENS, HORIZON = 256, 50


def inputs(batch: int, heads: int, kv_heads: int, tokens: int, dim: int, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    def make(h):
        return torch.randn(batch, h, tokens, dim, device="cuda", dtype=torch.bfloat16, generator=g)
    return make(heads), make(kv_heads), make(kv_heads), make(heads)   # q, k, v and the output's gradient


def timed(fn, q, k, v, dy, iters: int) -> tuple[float, tuple]:
    """Median milliseconds of fn forward and backward, and (output, dq, dk, dv) of the last call."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    for _ in range(3):
        y = fn(q, k, v)
        y.backward(dy)
    times = []
    for _ in range(iters):
        q.grad = k.grad = v.grad = None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        y = fn(q, k, v)
        y.backward(dy)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2], (y.detach(), q.grad, k.grad, v.grad)


def joint_ways(mask: torch.Tensor, valid: torch.Tensor, prefix: int) -> dict:
    """pi0.5's joint attention (grouped queries, the boolean mask), each way."""
    additive = torch.zeros(mask.shape, dtype=torch.bfloat16, device=mask.device).masked_fill(~mask, float("-inf"))

    def sdpa(backend=None, attn_mask=mask):
        def call(q, k, v):
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=True)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=True)
        return call

    def expanded(q, k, v):
        groups = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                              attn_mask=mask)

    def flash_no_mask(q, k, v):
        groups = q.shape[1] // k.shape[1]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1))

    ways = {"default": sdpa(), "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
            "efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION), "math": sdpa(SDPBackend.MATH),
            "additive": sdpa(attn_mask=additive), "expanded": expanded,
            "flash_no_mask": flash_no_mask}
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:   # an older torch: no FlexAttention
        return ways
    B, T = mask.shape[0], mask.shape[-1]
    valid_keys = F.pad(valid, (0, T - valid.shape[1]), value=True)

    def rule(b, h, q_idx, kv_idx):   # attention_layout's rule, per element
        return (valid_keys[b, kv_idx] & ((q_idx >= prefix) | (kv_idx < prefix))) | (q_idx == kv_idx)
    block = create_block_mask(rule, B, None, T, T, device="cuda")
    flex = torch.compile(flex_attention)
    ways["flex"] = lambda q, k, v: flex(q, k, v, block_mask=block, enable_gqa=True)
    return ways


def measure(ways: dict, shape: tuple, iters: int) -> list[dict]:
    q, k, v, dy = inputs(*shape)
    base_ms, base = None, None
    rows = []
    for name, fn in ways.items():
        try:
            ms, out = timed(fn, q, k, v, dy, iters)
        except Exception as exc:   # a backend that refuses these shapes: recorded, not fatal
            rows.append({"way": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
            print(f"  {name:14s} failed: {rows[-1]['error']}", flush=True)
            continue
        if base is None:
            base_ms, base = ms, out
        diff = [float((a.float() - b.float()).abs().max()) for a, b in zip(out, base)]
        rows.append({"way": name, "ms": round(ms, 3), "x_default": round(base_ms / ms, 3),
                     "max_abs_diff_y_dq_dk_dv": [round(d, 5) for d in diff]})
        print(f"  {name:14s} {ms:8.3f} ms  x default {base_ms / ms:5.2f}  diff {rows[-1]['max_abs_diff_y_dq_dk_dv']}",
              flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=72)
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=28)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--commit", default=None, help="the git commit to record (default: git rev-parse HEAD)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    prefix = args.cameras * IMAGE_TOKENS + args.prompt
    T = prefix + HORIZON
    g = torch.Generator().manual_seed(0)
    prompt_lengths = torch.randint(8, args.prompt + 1, (args.batch,), generator=g)
    valid = torch.ones(args.batch, prefix, dtype=torch.bool)
    valid[:, args.cameras * IMAGE_TOKENS:] = torch.arange(args.prompt)[None] < prompt_lengths[:, None]
    mask, _ = attention_layout(valid.cuda(), HORIZON)
    results = {"provenance": {"git_commit": args.commit or git_commit(), "torch": torch.__version__,
                              "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(),
                              "python": platform.python_version(), "command": "python -m bench.attention " +
                              " ".join(f"--{k} {v}" for k, v in vars(args).items() if v is not None and k != "out")},
               "shapes": {}}
    print(f"Gemma joint attention: batch {args.batch}, 8 query heads, 1 key/value head, {T} tokens, head size 256")
    results["shapes"]["joint"] = measure(joint_ways(mask, valid.cuda(), prefix), (args.batch, 8, 1, T, 256),
                                         args.iters)
    siglip = (args.batch * args.cameras, 16, 16, IMAGE_TOKENS, 72)
    print(f"SigLIP attention: {siglip[0]} images, 16 heads, {IMAGE_TOKENS} tokens, head size 72, no mask")
    plain = {name: (lambda backend: (lambda q, k, v: _plain(q, k, v, backend)))(backend) for name, backend in
             [("default", None), ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
              ("efficient", SDPBackend.EFFICIENT_ATTENTION)]}
    results["shapes"]["siglip"] = measure(plain, siglip, args.iters)
    if args.out:
        write_results(results, Path(args.out))


def _plain(q, k, v, backend):
    if backend is None:
        return F.scaled_dot_product_attention(q, k, v)
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v)


if __name__ == "__main__":
    main()
