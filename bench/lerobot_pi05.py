"""lerobot 0.6.1's PI05Policy at the shapes of a lerodoc PI05Config, and the batch its forward takes.

Import this only where lerobot and its pi extra (transformers) are installed: the lerobot reference venv
(tests/test_pi05_model.py) or a device's carried wheels (bench/train_vs_lerobot.py). It calls lerobot; it
copies none of it.

lerobot fixes the model's shapes: Gemma variants by name (get_gemma_config), SigLIP So400m and the 257152-token
vocabulary inside PaliGemmaWithExpertModel. At the full preset's shapes the policy is built as lerobot builds it;
at any other shapes (the tiny preset) those three are swapped, for the build only, for versions that take the
config's sizes.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict

import torch

from lerodoc.pi05.presets import full

SHAPE_KEYS = ("vision", "vlm", "expert", "vocab_size")


def camera_keys(n: int) -> list[str]:
    return [f"observation.images.camera{i}" for i in range(n)]


@contextlib.contextmanager
def shapes_of(spec: dict):
    """While open, lerobot's pi05 builds a model at spec's (a lerodoc PI05Config as a dict) vision, VLM, expert
    and vocabulary sizes. A no-op at the full preset's sizes."""
    import lerobot.policies.pi05.modeling_pi05 as M

    reference = asdict(full())
    if all(spec[k] == reference[k] for k in SHAPE_KEYS):
        yield
        return
    vis, vocab = spec["vision"], spec["vocab_size"]
    gemma = {"gemma_2b": spec["vlm"], "gemma_300m": spec["expert"]}
    saved = M.get_gemma_config, M.PaliGemmaForConditionalGenerationWithPiGemma, M.PiGemmaForCausalLM
    get_gemma_config, PaliGemma, Expert = saved

    def sized_gemma_config(variant):
        return M.GemmaConfig(**{k: gemma[variant][k] for k in
                                ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim")})

    def paligemma(config):
        v = config.vision_config
        v.hidden_size, v.intermediate_size, v.num_hidden_layers = vis["width"], vis["mlp_dim"], vis["depth"]
        v.num_attention_heads, v.patch_size, v.image_size = vis["num_heads"], vis["patch_size"], vis["image_size"]
        v.projection_dim, config.text_config.vocab_size = spec["vlm"]["width"], vocab
        return PaliGemma(config=config)

    def expert(config):
        config.vocab_size = vocab
        return Expert(config=config)

    M.get_gemma_config, M.PaliGemmaForConditionalGenerationWithPiGemma, M.PiGemmaForCausalLM = (
        sized_gemma_config, paligemma, expert)
    try:
        yield
    finally:
        M.get_gemma_config, M.PaliGemmaForConditionalGenerationWithPiGemma, M.PiGemmaForCausalLM = saved


def build_policy(spec: dict, cameras: list[str], dtype: str = "float32", device: str = "cpu",
                 build_on_device: bool = False, **config_fields):
    """PI05Policy(PI05Config(...)) with random init: spec's action horizon, action dims and image size, the given
    camera features, lerobot's `dtype` ("bfloat16": bf16 weights but SigLIP, the projector and the norms in
    fp32, as lerobot trains). build_on_device: allocate the weights on `device` from the start (under a
    torch.device context) instead of lerobot's build on CPU in fp32 and move. config_fields: other PI05Config
    fields (tokenizer_max_length, gradient_checkpointing, ...)."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.pi05.configuration_pi05 import PI05Config
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy

    horizon, size = spec["action_horizon"], spec["vision"]["image_size"]
    config = PI05Config(chunk_size=horizon, n_action_steps=horizon, image_resolution=(size, size), dtype=dtype,
                        device=device,
                        input_features={k: PolicyFeature(FeatureType.VISUAL, (3, size, size)) for k in cameras},
                        output_features={"action": PolicyFeature(FeatureType.ACTION, (spec["action_dim"],))},
                        **config_fields)
    with shapes_of(spec), (torch.device(device) if build_on_device else contextlib.nullcontext()):
        return PI05Policy(config)


def policy_batch(batch: dict, cameras: list[str]) -> dict:
    """bench.pi05_step.synthetic_batch (images in [-1, 1], masks, tokens, actions) as PI05Policy.forward takes
    it after lerobot's preprocessor: images in [0, 1] under their camera keys, language tokens and attention
    mask, actions. A camera no sample shows is left out of the batch: lerobot then feeds -1 images with mask
    False in its place (and still encodes them)."""
    out = {key: (image + 1) / 2 for key, image, mask in zip(cameras, batch["images"], batch["image_masks"])
           if mask.all()}
    if len(out) + sum(not m.any() for m in batch["image_masks"]) != len(batch["images"]):
        raise ValueError("lerobot masks whole cameras only: each camera is shown to all samples or to none")
    out["observation.language.tokens"] = batch["tokens"]
    out["observation.language.attention_mask"] = batch["token_masks"]
    out["action"] = batch["actions"]
    return out
