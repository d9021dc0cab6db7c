"""pi0.5 in one file: SigLIP + Gemma over images and prompt, an adaRMS action expert that shares attention with
it in every layer, the flow-matching loss, and Euler sampling over a cached prefix.

References: openpi `src/openpi/models/{pi0,gemma,siglip}.py` and lerobot 0.6.1 `policies/pi05` (see
../shared/research/openpi.md). The module tree uses lerobot's attribute paths, so `state_dict()` keys are
lerobot's PI05Policy names (weights.py handles its two lm_heads).

Shapes: B batch, N image tokens per camera, L prompt tokens, P prefix tokens, H action horizon, T tokens of a
call, h query heads, kv key/value heads, d head dim, A max action dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten


@dataclass(frozen=True)
class SiglipConfig:
    image_size: int
    patch_size: int
    width: int
    depth: int
    mlp_dim: int
    num_heads: int

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class GemmaConfig:
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class PI05Config:
    vision: SiglipConfig
    vlm: GemmaConfig          # prefix: images + prompt
    expert: GemmaConfig       # suffix: noisy actions
    vocab_size: int
    action_dim: int           # the robot's action dims: the loss and sample_actions use these
    max_action_dim: int = 32  # actions are zero-padded to this width for action_in/out_proj
    action_horizon: int = 50
    num_steps: int = 10       # Euler steps of sample_actions

    def __post_init__(self):
        v, e = self.vlm, self.expert
        if (v.depth, v.num_heads, v.num_kv_heads, v.head_dim) != (e.depth, e.num_heads, e.num_kv_heads, e.head_dim):
            raise ValueError("the VLM and the expert share attention: depth, heads and head_dim must match")
        if not 0 < self.action_dim <= self.max_action_dim:
            raise ValueError(f"action_dim {self.action_dim} must be in 1..{self.max_action_dim}")


# ------------------------------------------------------------------------------------------------------------
# SigLIP vision tower: patches -> pre-LN transformer -> post-LN


class SiglipAttention(nn.Module):
    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.num_heads = c.num_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(c.width, c.width) for _ in range(4))

    def forward(self, x):
        B, N, D = x.shape
        q, k, v = (p(x).view(B, N, self.num_heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v)  # (B, h, N, d)
        return self.out_proj(y.transpose(1, 2).reshape(B, N, D))


class SiglipMLP(nn.Module):
    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.fc1 = nn.Linear(c.width, c.mlp_dim)
        self.fc2 = nn.Linear(c.mlp_dim, c.width)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class SiglipLayer(nn.Module):
    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(c.width, eps=1e-6)
        self.self_attn = SiglipAttention(c)
        self.layer_norm2 = nn.LayerNorm(c.width, eps=1e-6)
        self.mlp = SiglipMLP(c)

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class Siglip(nn.Module):
    """(B, 3, S, S) images in [-1, 1] -> (B, N, width) tokens; no pooling head."""

    def __init__(self, c: SiglipConfig):
        super().__init__()
        self.vision_model = nn.ModuleDict(dict(
            embeddings=nn.ModuleDict(dict(
                patch_embedding=nn.Conv2d(3, c.width, c.patch_size, stride=c.patch_size),
                position_embedding=nn.Embedding(c.num_patches, c.width))),
            encoder=nn.ModuleDict(dict(layers=nn.ModuleList(SiglipLayer(c) for _ in range(c.depth)))),
            post_layernorm=nn.LayerNorm(c.width, eps=1e-6)))

    def forward(self, images, checkpoint: bool = False):
        m = self.vision_model
        x = m.embeddings.patch_embedding(images).flatten(2).transpose(1, 2)  # (B, N, width)
        x = x + m.embeddings.position_embedding.weight
        for layer in m.encoder.layers:
            if checkpoint and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return m.post_layernorm(x)


# ------------------------------------------------------------------------------------------------------------
# Gemma: RMSNorm (1 + w) or adaRMS, GQA with rotary positions, GeGLU MLP


class RMSNorm(nn.Module):
    """Gemma's x / rms(x) * (1 + weight), or with `cond_dim` adaRMS: a dense layer turns the condition into
    (scale, shift, gate) and the output is x / rms(x) * (1 + scale) + shift. Returns (output, gate or None)."""

    def __init__(self, dim: int, cond_dim: int | None = None):
        super().__init__()
        if cond_dim is None:
            self.weight = nn.Parameter(torch.zeros(dim))
        else:
            self.dense = nn.Linear(cond_dim, 3 * dim)

    def forward(self, x, cond=None):
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)  # float32, like openpi
        if cond is None:
            return (y * (1 + self.weight.float())).type_as(x), None
        scale, shift, gate = self.dense(cond)[:, None].chunk(3, dim=-1)  # (B, 1, dim) each
        return (y * (1 + scale.float()) + shift.float()).type_as(x), gate.type_as(x)


class GemmaAttention(nn.Module):
    """Projections only: the attention itself runs jointly over all streams in `run_layers`."""

    def __init__(self, c: GemmaConfig):
        super().__init__()
        self.head_dim = c.head_dim
        self.q_proj = nn.Linear(c.width, c.num_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.width, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.width, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.width, bias=False)

    def qkv(self, x):
        """(B, T, width) -> q (B, h, T, d), k and v (B, kv, T, d)."""
        B, T, _ = x.shape
        projections = (self.q_proj, self.k_proj, self.v_proj)
        return tuple(p(x).view(B, T, -1, self.head_dim).transpose(1, 2) for p in projections)


class GemmaMLP(nn.Module):
    def __init__(self, c: GemmaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.width, c.mlp_dim, bias=False)
        self.up_proj = nn.Linear(c.width, c.mlp_dim, bias=False)
        self.down_proj = nn.Linear(c.mlp_dim, c.width, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


def gated_residual(x, y, gate):
    return x + y if gate is None else x + y * gate


class GemmaLayer(nn.Module):
    def __init__(self, c: GemmaConfig, cond_dim: int | None):
        super().__init__()
        self.input_layernorm = RMSNorm(c.width, cond_dim)
        self.self_attn = GemmaAttention(c)
        self.post_attention_layernorm = RMSNorm(c.width, cond_dim)
        self.mlp = GemmaMLP(c)

    def attention_inputs(self, x, cond):
        """Pre-norm and projections of one stream: q, k, v and the residual gate."""
        h, gate = self.input_layernorm(x, cond)
        return (*self.self_attn.qkv(h), gate)

    def attention_outputs(self, x, y, gate, cond):
        """Output projection of the joint attention y (B, T, h*d), then the MLP block; both residuals gated."""
        x = gated_residual(x, self.self_attn.o_proj(y), gate)
        h, gate = self.post_attention_layernorm(x, cond)
        return gated_residual(x, self.mlp(h), gate)


class Gemma(nn.Module):
    """A Gemma stack: the VLM has `embed_tokens`; the expert has adaRMS norms (`cond_dim`) and no embedding."""

    def __init__(self, c: GemmaConfig, vocab_size: int | None = None, cond_dim: int | None = None):
        super().__init__()
        if vocab_size is not None:
            self.embed_tokens = nn.Embedding(vocab_size, c.width)
        self.layers = nn.ModuleList(GemmaLayer(c, cond_dim) for _ in range(c.depth))
        self.norm = RMSNorm(c.width, cond_dim)


def rotary(positions, head_dim: int, dtype, theta: float = 10_000.0):
    """cos and sin (B, 1, T, d) for integer positions (B, T); rotate-half layout over the whole head."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions[..., None].float() * inv_freq
    angles = torch.cat([angles, angles], dim=-1)[:, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def run_layers(towers, xs, conds, positions, mask, cache=None, checkpoint: bool = False, layer_fn=None):
    """Run streams xs (one per tower: [prefix, suffix], [prefix] or [suffix]) through all layers. In each layer
    every stream projects q/k/v with its own weights and one attention runs over the concatenated streams (plus
    the cached (k, v) of earlier tokens, if given). The prefix reaches the actions only through its keys and
    values, so its last layer stops there. Returns the suffix after the expert's final norm (None when only the
    prefix runs) and this call's per-layer (k, v) after RoPE. `checkpoint` recomputes each layer in backward.
    `layer_fn` runs one joint layer: joint_layer, or its torch.compile'd form (PI05.compile_layers)."""
    layer_fn = layer_fn or joint_layer
    cos, sin = rotary(positions, towers[0].layers[0].self_attn.head_dim, xs[0].dtype)
    new_cache = []
    depth = len(towers[0].layers)
    for i in range(depth):
        layers = [t.layers[i] for t in towers]
        past = None if cache is None else cache[i]
        last = i == depth - 1
        if last and conds[-1] is None:  # prefix only: the last layer is needed for its keys and values
            new_cache.append(joint_layer(layers, xs, conds, cos, sin, mask, past, keys_only=True))
            return None, new_cache
        if checkpoint and torch.is_grad_enabled():
            xs, kv = torch.utils.checkpoint.checkpoint(layer_fn, layers, xs, conds, cos, sin, mask, past, last,
                                                       use_reentrant=False)
        else:
            xs, kv = layer_fn(layers, xs, conds, cos, sin, mask, past, last)
        new_cache.append(kv)
    return towers[-1].norm(xs[-1], conds[-1])[0], new_cache


def joint_layer(layers, xs, conds, cos, sin, mask, past=None, last=False, keys_only=False):
    """One layer over all streams: per-stream projections, one attention, per-stream outputs. `last` keeps only
    the suffix stream (the prefix's last outputs are never read); `keys_only` returns just this call's (k, v)."""
    q, k, v, gates = zip(*(layer.attention_inputs(x, c) for layer, x, c in zip(layers, xs, conds)))
    q, k, v = (torch.cat(t, dim=2) if len(t) > 1 else t[0] for t in (q, k, v))  # (B, h|kv, T, d)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    kv = (k, v)
    if keys_only:
        return kv
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    lengths = [x.shape[1] for x in xs]
    if last:
        n = lengths[-1]
        q, mask, lengths = q[:, :, -n:], mask[:, :, -n:], [n]
        layers, xs, conds, gates = layers[-1:], xs[-1:], conds[-1:], gates[-1:]
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # (B, h, T, d)
    ys = y.transpose(1, 2).flatten(2).split(lengths, dim=1)
    return [layer.attention_outputs(x, y, g, c) for layer, x, y, g, c in zip(layers, xs, ys, gates, conds)], kv


def attention_layout(prefix_valid, horizon: int):
    """The pi0.5 mask (B, 1, S, S) and RoPE positions (B, S) over S = P + H tokens: prefix tokens attend to valid
    prefix tokens, action tokens to valid prefix tokens and to each other; padding takes no position. Each token
    also sees itself, so no row is empty (only padding rows change: they are never read)."""
    B, P = prefix_valid.shape
    S = P + horizon
    valid = F.pad(prefix_valid, (0, horizon), value=True)
    is_action = torch.arange(S, device=valid.device) >= P
    mask = valid[:, None, :] & (is_action[:, None] | ~is_action[None, :])  # [query, key]
    mask = mask | torch.eye(S, dtype=torch.bool, device=valid.device)
    return mask[:, None], valid.cumsum(-1) - 1


def time_embedding(t, dim: int, min_period: float = 4e-3, max_period: float = 4.0):
    """Sinusoidal embedding (B, dim) of flow times t (B,), computed in float64 as openpi does."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angles = (1.0 / period * 2 * math.pi)[None] * t[:, None]
    return torch.cat([angles.sin(), angles.cos()], dim=-1).to(t.dtype)


def sample_time(batch: int, device) -> torch.Tensor:
    """t ~ Beta(1.5, 1) * 0.999 + 0.001: t = 1 is noise, t = 0 is data."""
    return torch.distributions.Beta(1.5, 1.0).sample((batch,)).to(device) * 0.999 + 0.001


# ------------------------------------------------------------------------------------------------------------
# pi0.5


class PI05(nn.Module):
    """pi0.5 with lerobot's parameter names (`model.paligemma_with_expert.paligemma.model.*` for SigLIP, the
    projector and Gemma; `model.paligemma_with_expert.gemma_expert.model.*` for the expert; `model.action_*`,
    `model.time_mlp_*`). The VLM's last-layer q/o projections, post-attention norm and MLP and its final norm
    cannot affect the actions (openpi computes them and drops the result): they are frozen, and run_layers
    skips all of them but q_proj."""

    def __init__(self, config: PI05Config):
        super().__init__()
        self.config = c = config
        width = c.expert.width
        paligemma = nn.ModuleDict(dict(
            vision_tower=Siglip(c.vision),
            multi_modal_projector=nn.ModuleDict(dict(linear=nn.Linear(c.vision.width, c.vlm.width))),
            language_model=Gemma(c.vlm, vocab_size=c.vocab_size)))
        self.model = nn.ModuleDict(dict(
            paligemma_with_expert=nn.ModuleDict(dict(
                paligemma=nn.ModuleDict(dict(model=paligemma)),
                gemma_expert=nn.ModuleDict(dict(model=Gemma(c.expert, cond_dim=width))))),
            action_in_proj=nn.Linear(c.max_action_dim, width),
            action_out_proj=nn.Linear(width, c.max_action_dim),
            time_mlp_in=nn.Linear(width, width),
            time_mlp_out=nn.Linear(width, width)))
        self.gradient_checkpointing = False   # recompute each layer in backward: less memory, ~1/3 more compute
        self.layer_fn = joint_layer           # compile_layers swaps in the compiled form
        self.apply(init_weights)
        vlm = self.paligemma.language_model
        for unused in (vlm.layers[-1].self_attn.q_proj, vlm.layers[-1].self_attn.o_proj,
                       vlm.layers[-1].post_attention_layernorm, vlm.layers[-1].mlp, vlm.norm):
            unused.requires_grad_(False)  # never reach the actions (run_layers skips them); kept for the names

    def compile_layers(self, **options) -> None:
        """Regional compilation: torch.compile each repeated block (the joint Gemma layer, each SigLIP layer),
        and leave the glue eager. Every block's backward is then its own autograd node, so DDP's gradient hooks
        fire layer by layer and all-reduce while backward goes on (no DDPOptimizer graph splits), and the
        repeated layers share one compiled graph (a short compile). With float8 linears each new batch size gets
        its own graph (dynamic=False): a symbolic token count cannot be shown to be the multiple of 16 that
        torch._scaled_mm checks, so Inductor's automatic dynamic shapes fail to compile the second batch size."""
        if self.float8_linears():
            options.setdefault("dynamic", False)
        self.layer_fn = torch.compile(joint_layer, **options)
        for layer in self.paligemma.vision_tower.vision_model.encoder.layers:
            layer.compile(**options)

    def convert_float8(self, recipe: str = "tensorwise") -> int:
        """torchao's float8 training for the linears `float8_filter` picks; call before compile_layers. `recipe`:
        a torchao recipe name ("tensorwise", "rowwise"), then optionally one of FLOAT8_PARTS' ("tensorwise-vlm":
        the SigLIP and Gemma linears, the expert's left in bf16), then optionally "fast": fast accumulation in the
        two backward products too (torchao's default has it in the forward one only). Returns how many linears
        were converted. torch._scaled_mm needs every matrix dimension it multiplies over to be a multiple of 16,
        the token counts included (the trainer checks the batch)."""
        # torchao: optional, loaded only for float8 training
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        scaling, part, fast = float8_recipe(recipe)
        config = Float8LinearConfig.from_recipe_name(scaling)
        if fast:
            config = replace(config, gemm_config_grad_input=config.gemm_config_output,
                             gemm_config_grad_weight=config.gemm_config_output)
        convert_to_float8_training(self, config=config,
                                   module_filter_fn=lambda module, fqn: float8_filter(module, fqn, part))
        return self.float8_linears()

    def float8_linears(self) -> int:
        """How many linears convert_float8 made float8 (torchao's Float8Linear)."""
        return sum(type(m).__name__ == "Float8Linear" for m in self.modules())

    @property
    def paligemma(self) -> nn.ModuleDict:
        return self.model.paligemma_with_expert.paligemma.model

    @property
    def expert(self) -> Gemma:
        return self.model.paligemma_with_expert.gemma_expert.model

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def embed_prefix(self, images, image_masks, tokens, token_masks):
        """Images (list of (B, 3, S, S) in [-1, 1], masks (B,)) and prompt (B, L) -> prefix (B, P, D) and its
        validity (B, P). A camera that no sample of the batch shows is skipped; otherwise its tokens are
        masked per sample. A mask of None means every sample shows the camera: no `mask.any()`, so no host
        sync (and no torch.compile graph break) in the step."""
        pg = self.paligemma
        shown = [(image, mask) for image, mask in zip(images, image_masks) if mask is None or mask.any()]
        embs, valid = [], []
        if shown:
            tower = pg.vision_tower(torch.cat([image for image, _ in shown]), self.gradient_checkpointing)
            features = pg.multi_modal_projector.linear(tower)
            for f, (_, mask) in zip(features.chunk(len(shown)), shown):  # (B, N, D) per camera
                embs.append(f)
                valid.append(f.new_ones(f.shape[:2], dtype=torch.bool) if mask is None
                             else mask[:, None].expand(-1, f.shape[1]))
        embs.append(pg.language_model.embed_tokens(tokens) * math.sqrt(self.config.vlm.width))
        valid.append(token_masks)
        return torch.cat(embs, dim=1), torch.cat(valid, dim=1)

    def embed_suffix(self, x_t, t):
        """Noisy actions (B, H, A) and times (B,) -> action tokens (B, H, De) and the adaRMS condition (B, De)."""
        m = self.model
        cond = time_embedding(t, self.config.expert.width).to(x_t.dtype)   # sampling keeps t in float32
        cond = F.silu(m.time_mlp_out(F.silu(m.time_mlp_in(cond))))
        return m.action_in_proj(x_t), cond

    def velocity(self, prefix, prefix_valid, x_t, t):
        """Predicted velocity (B, H, A) from one joint pass over [prefix; actions]."""
        suffix, cond = self.embed_suffix(x_t, t)
        mask, positions = attention_layout(prefix_valid, suffix.shape[1])
        out, _ = run_layers([self.paligemma.language_model, self.expert], [prefix, suffix], [None, cond],
                            positions, mask, checkpoint=self.gradient_checkpointing, layer_fn=self.layer_fn)
        return self.model.action_out_proj(out)

    def forward(self, images, image_masks, tokens, token_masks, actions, action_is_pad=None, noise=None, time=None,
                denominator=None):
        """Flow-matching loss (a scalar): the squared velocity error summed over the real action dims (and the
        steps that are not padding when `action_is_pad` (B, H) is given), divided by their count, or by
        `denominator` (so that shards of one batch on several ranks add up to the batch's loss).
        actions: (B, H, action_dim); noise (B, H, max_action_dim) and time (B,) are drawn when None."""
        c = self.config
        actions = F.pad(actions, (0, c.max_action_dim - c.action_dim))
        noise = torch.randn_like(actions) if noise is None else noise.to(actions.dtype)
        time = sample_time(actions.shape[0], actions.device) if time is None else time.to(actions.dtype)
        t = time[:, None, None]
        x_t = t * noise + (1 - t) * actions
        prefix, prefix_valid = self.embed_prefix(images, image_masks, tokens, token_masks)
        v_t = self.velocity(prefix, prefix_valid, x_t, time)
        err = (v_t.float() - (noise - actions))[..., :c.action_dim].pow(2)  # (B, H, action_dim)
        if action_is_pad is not None:
            err = err * (~action_is_pad)[..., None]
        if denominator is None:
            denominator = err.numel() if action_is_pad is None else (~action_is_pad).sum() * c.action_dim
        return err.sum() / denominator

    def prefix_cache(self, images, image_masks, tokens, token_masks):
        """The prefix's per-layer (k, v) and the action rows' mask (B, 1, H, P + H) and positions (B, H). Images
        are cast to the weights' dtype (Policy gives float32 pixels; a bf16 model takes them as bf16). The mask
        is made additive (0 or -inf) here, as scaled_dot_product_attention would make it in every layer of
        every step: the same values, 2 fewer ops in each of ~200 attention calls of a chunk."""
        dtype = self.model.action_in_proj.weight.dtype
        images = [image.to(dtype) for image in images]
        prefix, prefix_valid = self.embed_prefix(images, image_masks, tokens, token_masks)
        P = prefix.shape[1]
        mask, positions = attention_layout(prefix_valid, self.config.action_horizon)
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))
        _, cache = run_layers([self.paligemma.language_model], [prefix], [None], positions[:, :P], mask[:, :, :P, :P])
        return cache, mask[:, :, P:], positions[:, P:]

    def denoise_velocity(self, x, t, cache, mask, positions):
        """The velocity (B, H, max_action_dim) at noisy actions x and times t (B,): the expert alone over the
        cached prefix. x and t stay float32 (the Euler sum and the time embedding); the expert runs in the
        weights' dtype."""
        suffix, cond = self.embed_suffix(x.to(self.model.action_in_proj.weight.dtype), t)
        out, _ = run_layers([self.expert], [suffix], [cond], positions, mask, cache)
        return self.model.action_out_proj(out)

    def compile_sampling(self, **options) -> None:
        """torch.compile the two parts of sample_actions: the prefix pass and one denoising step (the same graph
        for every step: the time is a tensor). `options` go to torch.compile. For CUDA graphs use
        capture_sampling (after this, or alone): torch.compile's own (mode="reduce-overhead") would record the
        prefix pass and the step as two graphs whose outputs, the k/v cache, the next replay overwrites."""
        self.sampling_fns = (torch.compile(self.prefix_cache, **options),
                             torch.compile(self.denoise_velocity, **options))

    def capture_sampling(self, images, image_masks, tokens, token_masks) -> None:
        """Record the whole of sample_actions (the prefix pass and every Euler step) for observations of these
        shapes as one CUDA graph, which sample_actions then replays for inputs of the same shapes: at batch 1
        the ~12k small kernels of a chunk cost more to launch than to run (docs/train.md). Uses the compiled parts if
        compile_sampling ran first. Masks must be None (as Policy gives them): a tensor mask asks the host
        whether any sample shows the camera, which a graph cannot."""
        if any(mask is not None for mask in image_masks):
            raise ValueError("capture_sampling needs image_masks of None: a camera's mask.any() syncs the host")
        c = self.config
        noise = torch.randn(tokens.shape[0], c.action_horizon, c.max_action_dim, device=tokens.device)
        self.sampling_graph = None
        self.sampling_graph = CapturedCall(self.euler, images, image_masks, tokens, token_masks, noise)

    @torch.no_grad()
    def sample_actions(self, images, image_masks, tokens, token_masks, noise=None):
        """Euler integration from noise (t = 1) to actions (t = 0) -> float32 (B, H, action_dim). The prefix runs
        once; each step runs only the expert, attending to the cached prefix keys and values. Replays the CUDA
        graph of capture_sampling when the inputs have its shapes; otherwise runs `euler` (compiled parts if
        compile_sampling ran)."""
        c = self.config
        if noise is None:
            noise = torch.randn(tokens.shape[0], c.action_horizon, c.max_action_dim, device=tokens.device)
        args = (images, image_masks, tokens, token_masks, noise)
        graph = getattr(self, "sampling_graph", None)
        if graph is not None and graph.fits(*args):
            return graph(*args)
        return self.euler(*args)

    def euler(self, images, image_masks, tokens, token_masks, noise):
        """sample_actions' computation: no host sync, no shape-dependent Python (what a CUDA graph records).
        Eager (no compile_sampling), the steps run `euler_fused`'s fewer, larger kernels unless `fused_sampling`
        is set False."""
        c = self.config
        fns = getattr(self, "sampling_fns", None)
        if fns is None and getattr(self, "fused_sampling", True):
            return self.euler_fused(images, image_masks, tokens, token_masks, noise)
        prefix_fn, velocity_fn = fns or (self.prefix_cache, self.denoise_velocity)
        cache, mask, positions = prefix_fn(images, image_masks, tokens, token_masks)
        x, dt = noise.float(), -1.0 / c.num_steps
        for step in range(c.num_steps):
            t = torch.full((x.shape[0],), 1.0 + step * dt, device=x.device, dtype=x.dtype)
            x = x + dt * velocity_fn(x, t, cache, mask, positions)
        return x[..., :c.action_dim]


    def fused_expert_weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per expert layer, the two matrices of euler_fused: [q; k; rot(q); rot(k); v] and [gate; up]. rot folds
        RoPE's rotate-half into the rows (each head's second half negated, then its first half), so one product
        gives q, k and their rotated forms. Made on first use and again when any source weight changes (its
        storage, dtype or version: `.to()`, a load, an in-place update); not parameters, not in state_dict."""
        attn = [(l.self_attn, l.mlp) for l in self.expert.layers]
        sources = [w for a, m in attn for w in (a.q_proj.weight, a.k_proj.weight, a.v_proj.weight,
                                                 m.gate_proj.weight, m.up_proj.weight)]
        key = tuple((w.data_ptr(), w.dtype, w._version) for w in sources)
        held = getattr(self, "_fused_expert", None)
        if held is not None and held[0] == key:
            return held[1]
        d = self.config.expert.head_dim

        def rot(w):   # (heads * d, width) -> the rows that give rotate_half of the projection
            w = w.view(-1, d, w.shape[-1])
            return torch.cat([-w[:, d // 2:], w[:, :d // 2]], dim=1).flatten(0, 1)

        with torch.no_grad():
            fused = [(torch.cat([a.q_proj.weight, a.k_proj.weight, rot(a.q_proj.weight), rot(a.k_proj.weight),
                                 a.v_proj.weight]),
                      torch.cat([m.gate_proj.weight, m.up_proj.weight])) for a, m in attn]
        self._fused_expert = (key, fused)
        return fused

    def euler_fused(self, images, image_masks, tokens, token_masks, noise):
        """`euler` in fewer kernels, for eager sampling at small batch, where launching kernels costs more than
        running them (docs/train.md). The same computation as the prefix_cache + denoise_velocity steps, up to
        rounding: every step's flow time is known before the first, so the time MLP and every adaRMS modulation
        of every step run once, batched over the steps; q/k/v and the rotated halves come from one product
        (fused_expert_weights), gate/up from one; residuals are addcmul; RoPE's cos/sin are made once."""
        c, e = self.config, self.expert
        m = self.model
        dtype = m.action_in_proj.weight.dtype
        cache, mask, positions = self.prefix_cache(images, image_masks, tokens, token_masks)
        B, steps, D = noise.shape[0], c.num_steps, c.expert.width
        heads, kv, d = c.expert.num_heads, c.expert.num_kv_heads, c.expert.head_dim
        dt = -1.0 / steps
        # the flow times 1 + s dt of every step (float64 like Python's, then float32 as torch.full makes them)
        t = torch.arange(steps, device=noise.device, dtype=torch.float64).mul(dt).add(1.0).float()
        cond = time_embedding(t.repeat_interleave(B), D).to(dtype)
        cond = F.silu(m.time_mlp_out(F.silu(m.time_mlp_in(cond))))   # (steps * B, D)
        mods = []   # per norm: (1 + scale) and shift in float32, gate in dtype; each (steps, B, 1, D)
        for norm in [n for layer in e.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)] + [e.norm]:
            scale, shift, gate = norm.dense(cond).view(steps, B, 1, 3 * D).chunk(3, dim=-1)
            mods.append((scale.float() + 1, shift.float(), gate))
        cos, sin = (r.transpose(1, 2) for r in rotary(positions, d, dtype))   # (B, H, 1, d)
        weights = self.fused_expert_weights()
        n = (heads + kv) * d

        def norm(x, j, s):
            scale1, shift, gate = mods[j]
            y = F.rms_norm(x.float(), (D,), eps=1e-6)
            return torch.addcmul(shift[s], y, scale1[s]).to(dtype), gate[s]

        x = noise.float()
        for s in range(steps):
            h = m.action_in_proj(x.to(dtype))   # (B, H, D)
            H = h.shape[1]
            for i, layer in enumerate(e.layers):
                w_qkv, w_gu = weights[i]
                a, gate = norm(h, 2 * i, s)
                qkv = F.linear(a, w_qkv)
                qk = torch.addcmul(qkv[..., :n].view(B, H, heads + kv, d) * cos,
                                   qkv[..., n:2 * n].view(B, H, heads + kv, d), sin)
                k = torch.cat([cache[i][0], qk[:, :, heads:].transpose(1, 2)], dim=2)
                v = torch.cat([cache[i][1], qkv[..., 2 * n:].view(B, H, kv, d).transpose(1, 2)], dim=2)
                y = F.scaled_dot_product_attention(qk[:, :, :heads].transpose(1, 2), k, v, attn_mask=mask,
                                                   enable_gqa=True)
                h = torch.addcmul(h, layer.self_attn.o_proj(y.transpose(1, 2).reshape(B, H, heads * d)), gate)
                a, gate = norm(h, 2 * i + 1, s)
                g, u = F.linear(a, w_gu).chunk(2, dim=-1)
                h = torch.addcmul(h, layer.mlp.down_proj(F.gelu(g, approximate="tanh") * u), gate)
            x = x + dt * m.action_out_proj(norm(h, 2 * len(e.layers), s)[0])
        return x[..., :c.action_dim]


class CapturedCall:
    """fn(*args) recorded as one CUDA graph over static copies of args' tensors (in nested tuples and lists;
    other leaves, such as None, are part of the recording). Calling it with new tensors of the same structure,
    shapes and dtypes copies them into those copies, replays the graph and returns a clone of the output (the
    graph's own output is overwritten by the next replay). The weights are read where they lie: record after
    the model has its final device and dtype."""

    def __init__(self, fn, *args, warmup: int = 2):
        leaves, self.spec = tree_flatten(args)
        self.inputs = [x.clone() if torch.is_tensor(x) else x for x in leaves]
        side = torch.cuda.Stream()   # warm-up off the default stream, as torch.cuda.graphs asks
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(warmup):   # lazy inits, cuBLAS workspaces and compiled kernels happen here
                fn(*tree_unflatten(self.inputs, self.spec))
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.output = fn(*tree_unflatten(self.inputs, self.spec))

    def fits(self, *args) -> bool:
        leaves, spec = tree_flatten(args)
        return spec == self.spec and all(
            torch.is_tensor(x) and (x.shape, x.dtype, x.device) == (s.shape, s.dtype, s.device)
            if torch.is_tensor(s) else x is s
            for x, s in zip(leaves, self.inputs))

    def __call__(self, *args):
        for static, x in zip(self.inputs, tree_flatten(args)[0]):
            if torch.is_tensor(static):
                static.copy_(x)
        self.graph.replay()
        return self.output.clone()


# a float8 recipe's suffix -> which of float8_filter's candidate linears it converts, by their names: every one; the
# SigLIP and Gemma ones (the action expert's in bf16); their MLPs only (attention projections in bf16); Gemma's only
FLOAT8_PARTS = {"": lambda fqn: True,
                "vlm": lambda fqn: ".gemma_expert." not in fqn,
                "mlp": lambda fqn: ".gemma_expert." not in fqn and ".mlp." in fqn,
                "lm": lambda fqn: ".language_model." in fqn}


def float8_recipe(recipe: str) -> tuple[str, str, bool]:
    """A float8 recipe's (torchao recipe name, FLOAT8_PARTS key, fast accumulation in the backward products):
    "tensorwise-vlm-fast" -> ("tensorwise", "vlm", True)."""
    scaling, *rest = recipe.split("-")
    fast = rest[-1:] == ["fast"]
    return scaling, "-".join(rest[:-1] if fast else rest), fast


def float8_filter(module: nn.Module, fqn: str, part: str = "") -> bool:
    """The linears float8 training converts: among those of the SigLIP, Gemma and expert layers whose in and out
    widths are both >= 1024 (not the 256-wide Gemma k/v projections), and not the adaRMS `dense` layers (one row per
    sample), the action and time projections or the frozen last-layer ones, the ones FLOAT8_PARTS[part] names."""
    return (isinstance(module, nn.Linear) and ".layers." in fqn and not fqn.endswith(".dense")
            and FLOAT8_PARTS[part](fqn)
            and module.weight.requires_grad and min(module.in_features, module.out_features) >= 1024
            and module.in_features % 16 == 0 and module.out_features % 16 == 0)


def init_weights(module: nn.Module):
    """Normal(0, 0.02) matrices and zero biases; the adaRMS dense layers start at zero (identity modulation,
    closed gates), as in openpi. RMSNorm weights start at zero (a gain of 1), LayerNorms at (1, 0)."""
    if isinstance(module, (nn.Linear, nn.Conv2d, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    if isinstance(module, RMSNorm) and hasattr(module, "dense"):
        nn.init.zeros_(module.dense.weight)


def flops_per_sample(config: PI05Config, prompt_len: int, cameras: int, openpi: bool = False) -> float:
    """Training FLOPs of one sample: 6 x multiply-accumulates (2 forward, 4 backward). Linears count
    params x tokens: SigLIP (patch embedding, layers) and the projector x N tokens per camera, VLM layers x
    P = cameras * N + prompt_len, expert layers and action_in/out_proj x H, the time MLP and adaRMS dense layers
    x 1 (once per sample). Attention counts QK^T and AV: 2 h d per query-key pair, with T = N in SigLIP and
    T = P + H in the joint layers. Embedding lookups and norms are free.
    The work done (default): in the last joint layer the prefix only projects q, k and v (run_layers skips its
    o_proj and MLP) and only the H action rows attend; and backward computes only the gradients it needs, so a
    layer fed by data that needs no gradient (the patch embedding, action_in_proj, time_mlp_in) costs 4 x its
    multiply-accumulates (no input gradient), and so does the frozen last-layer q_proj of the prefix (no weight
    gradient). This equals torch's FlopCounterMode over one training step (tests/test_pi05_model.py).
    `openpi=True` is the plain 6 x rule with that layer's prefix rows in full, as openpi computes them (then
    drops the result)."""
    v, g, e = config.vision, config.vlm, config.expert
    N, H = v.num_patches, config.action_horizon
    P = cameras * N + prompt_len
    siglip_layer = 4 * v.width**2 + 2 * v.width * v.mlp_dim
    vision = cameras * N * (3 * v.patch_size**2 * v.width + v.depth * siglip_layer + v.width * g.width)
    vision_attention = cameras * v.depth * 2 * v.width * N**2

    def gemma_layer(c: GemmaConfig) -> int:
        attention = 2 * c.width * (c.num_heads + c.num_kv_heads) * c.head_dim  # q and o, k and v
        return attention + 3 * c.width * c.mlp_dim

    expert = H * (e.depth * gemma_layer(e) + 2 * config.max_action_dim * e.width)
    per_sample = 2 * e.width**2 + (2 * e.depth + 1) * 3 * e.width**2
    attention_pair = 2 * g.num_heads * g.head_dim
    if openpi:
        vlm = P * g.depth * gemma_layer(g)
        joint_attention = g.depth * attention_pair * (P + H) ** 2
        return 6.0 * (vision + vision_attention + vlm + expert + per_sample + joint_attention)
    last_prefix = g.width * (g.num_heads + 2 * g.num_kv_heads) * g.head_dim   # q, k, v only
    vlm = P * ((g.depth - 1) * gemma_layer(g) + last_prefix)
    joint_attention = attention_pair * (P + H) * ((g.depth - 1) * (P + H) + H)
    # one of the two backward products not needed: no input gradient for the layers fed by data (patches, noisy
    # actions, the time embedding), no weight gradient for the frozen last-layer q_proj of the prefix
    one_gradient = (cameras * N * 3 * v.patch_size**2 * v.width + H * config.max_action_dim * e.width + e.width**2
                    + P * g.width * g.num_heads * g.head_dim)
    return 6.0 * (vision + vision_attention + vlm + expert + per_sample + joint_attention) - 2.0 * one_gradient
