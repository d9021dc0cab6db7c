"""Named pi0.5 configurations: `tiny` for CPU tests and demos, `full` for the published checkpoints."""

from __future__ import annotations

from dataclasses import replace

from lerodoc.pi05.model import GemmaConfig, PI05Config, SiglipConfig


def tiny(**overrides) -> PI05Config:
    """About 1.2M parameters: 56x56 images (16 tokens per camera), 2 layers, a 300-token vocabulary. 8 query
    heads and 1 KV head as in `full` (lerobot's joint attention hard-codes 8 heads)."""
    config = PI05Config(
        vision=SiglipConfig(image_size=56, patch_size=14, width=128, depth=2, mlp_dim=512, num_heads=4),
        vlm=GemmaConfig(width=128, depth=2, mlp_dim=512, num_heads=8, num_kv_heads=1, head_dim=16),
        expert=GemmaConfig(width=64, depth=2, mlp_dim=256, num_heads=8, num_kv_heads=1, head_dim=16),
        vocab_size=300, action_dim=7, action_horizon=10)
    return replace(config, **overrides)


def full(**overrides) -> PI05Config:
    """openpi/lerobot pi05: SigLIP So400m/14 at 224, Gemma 2B prefix, gemma_300m expert (3.35B parameters)."""
    config = PI05Config(
        vision=SiglipConfig(image_size=224, patch_size=14, width=1152, depth=27, mlp_dim=4304, num_heads=16),
        vlm=GemmaConfig(width=2048, depth=18, mlp_dim=16_384, num_heads=8, num_kv_heads=1, head_dim=256),
        expert=GemmaConfig(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
        vocab_size=257_152, action_dim=32, action_horizon=50)
    return replace(config, **overrides)


PRESETS = {"tiny": tiny, "full": full}
