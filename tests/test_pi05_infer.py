"""pi0.5 inference path (PI05.sample_actions): the prefix (images + prompt) runs once per chunk and its k/v cache
serves every flow step; the cached path equals a full recompute; bf16 weights sample in float32; on CUDA, the
recorded graph (capture_sampling) gives the eager actions. Tiny preset; the GPU timings are bench.infer_latency's."""

from __future__ import annotations

import pytest

from tests.helpers import importable, require

require(importable("torch"), "lerodoc's train extra (torch) is not installed")
import torch  # noqa: E402

from lerodoc.pi05.model import PI05  # noqa: E402
from lerodoc.pi05.presets import tiny  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_model(seed: int = 0) -> PI05:
    """Random matrices of unit gain (fan-in scaled), the adaRMS gates open: init_weights' closed gates and small
    weights leave the actions almost blind to the prefix, and then a comparison of two prefix paths tests little."""
    torch.manual_seed(seed)
    model = PI05(tiny()).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, p[0].numel() ** -0.5)
    return model


def make_inputs(config, batch: int = 2, prompt_len: int = 12, seed: int = 0, device="cpu") -> dict:
    g = torch.Generator().manual_seed(seed)
    size = config.vision.image_size
    tokens = torch.randint(1, config.vocab_size, (batch, prompt_len), generator=g)
    token_masks = torch.arange(prompt_len)[None] < torch.randint(3, prompt_len + 1, (batch, 1), generator=g)
    x = dict(images=[torch.rand(batch, 3, size, size, generator=g) * 2 - 1 for _ in range(2)],
             image_masks=[None, None], tokens=tokens * token_masks, token_masks=token_masks,
             noise=torch.randn(batch, config.action_horizon, config.max_action_dim, generator=g))
    return {k: [t.to(device) for t in v] if k == "images" else v if k == "image_masks" else v.to(device)
            for k, v in x.items()}


def recompute_every_step(model, x):
    """Reference sampler: one joint pass over [prefix; actions] per step, the prefix recomputed each time."""
    c = model.config
    prefix, valid = model.embed_prefix(x["images"], x["image_masks"], x["tokens"], x["token_masks"])
    a, dt = x["noise"], -1.0 / c.num_steps
    for step in range(c.num_steps):
        t = torch.full((a.shape[0],), 1.0 + step * dt)
        a = a + dt * model.velocity(prefix, valid, a, t)
    return a[..., :c.action_dim]


class Passes:
    """Counts forward passes through SigLIP, the VLM's first layer (the prefix) and the expert (its input projection,
    which every step runs, euler_fused as well)."""

    def __init__(self, model):
        self.counts = dict(siglip=0, vlm=0, expert=0)
        modules = dict(siglip=model.paligemma.vision_tower,
                       vlm=model.paligemma.language_model.layers[0].input_layernorm,
                       expert=model.model.action_in_proj)   # once per flow step, fused or not
        self.hooks = [m.register_forward_hook(lambda *_, k=k: self.counts.__setitem__(k, self.counts[k] + 1))
                      for k, m in modules.items()]

    def __enter__(self):
        return self.counts

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()


@torch.no_grad()
def test_prefix_runs_once_per_chunk_and_equals_recomputing_it():
    model = make_model()
    x = make_inputs(model.config)
    steps = model.config.num_steps
    with Passes(model) as counts:
        actions = model.sample_actions(**x)
    assert counts == dict(siglip=1, vlm=1, expert=steps), counts   # the cache serves all steps
    with Passes(model) as counts:
        reference = recompute_every_step(model, x)
    assert counts == dict(siglip=1, vlm=steps, expert=steps), counts   # the counter sees recomputation
    torch.testing.assert_close(actions, reference, atol=1e-5, rtol=1e-5)
    # the prefix matters to the actions (so the comparison above could fail): another image changes them
    other = dict(x, images=[x["images"][0].flip(-1), x["images"][1]])
    assert (model.sample_actions(**other) - actions).abs().max() > 1e-3


@torch.no_grad()
def test_fused_steps_equal_the_unfused_ones_and_follow_the_weights():
    """euler_fused (eager sampling's default) computes what prefix_cache + denoise_velocity compute, in fewer ops."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Ops.n += not func.is_view   # ops that compute (views launch no kernel)
            return func(*args, **(kwargs or {}))

    model = make_model()
    x = make_inputs(model.config, batch=1)
    counts = {}
    for fused in (False, True):
        model.fused_sampling = fused
        Ops.n = 0
        with Ops():
            out = model.sample_actions(**x)
        counts[fused] = Ops.n
        if not fused:
            unfused = out
    torch.testing.assert_close(out, unfused, atol=1e-5, rtol=1e-5)
    assert counts[True] < 0.6 * counts[False], counts
    # the fused matrices follow the weights: an in-place change, then a dtype change
    model.expert.layers[0].self_attn.k_proj.weight.mul_(2)
    changed = model.sample_actions(**x)
    model.fused_sampling = False
    torch.testing.assert_close(changed, model.sample_actions(**x), atol=1e-5, rtol=1e-5)
    assert (changed - out).abs().max() > 1e-3
    half = model.to(torch.bfloat16).sample_actions(**x)
    model.fused_sampling = True
    fused_half = model.sample_actions(**x)
    assert fused_half.dtype == torch.float32
    error = ((fused_half - half).norm() / half.norm()).item()
    assert 0 < error < 2e-2, error   # bf16 rounding, not another computation


@torch.no_grad()
def test_bf16_weights_sample_float32_actions_near_the_float32_model():
    """Policy gives float32 pixels and noise; a bf16 model casts them itself and integrates in float32."""
    model = make_model()
    x = make_inputs(model.config)
    full = model.sample_actions(**x)
    half = model.to(torch.bfloat16).sample_actions(**x)
    assert half.dtype == torch.float32 and half.shape == full.shape
    error = ((half - full).norm() / full.norm()).item()
    print(f"bf16 against float32 weights, relative error {error:.3g}")
    assert 0 < error < 3e-2
    drawn = model.sample_actions(**{k: v for k, v in x.items() if k != "noise"})
    assert drawn.dtype == torch.float32 and not torch.equal(drawn, half)
