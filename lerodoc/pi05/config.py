"""A training run's options (RunConfig, saved as RUN/config.json) and its learning-rate schedule."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from lerodoc.pi05.data import DataSpec
from lerodoc.run.parallel import data_workers

# options that change the loss curve: a resume must use the values the run started with
CURVE_OPTIONS = ("dataset", "preset", "steps", "lr", "min_lr", "warmup_steps", "weight_decay",
                 "clip", "ema", "seed", "weights", "precision", "float8", "data", "val_episodes", "val_fraction")


@dataclass
class RunConfig:
    dataset: str
    output: str
    tokenizer: str
    preset: str = "full"
    weights: str | None = None
    steps: int = 1000
    batch_per_device: int = 4
    lr: float = 2.5e-5
    min_lr: float = 2.5e-6
    warmup_steps: int | None = None       # None: 10% of the steps, at most 1000
    weight_decay: float = 0.01
    clip: float = 1.0
    ema: float | None = None
    seed: int = 0
    precision: str = "auto"               # bf16 autocast on GPU, fp32 on CPU
    device: str = "auto"
    compile: bool = False
    # "layers": PI05.compile_layers, DDP eager around them (overlaps its all-reduce with backward layer by layer);
    # "model": torch.compile(DDP(model)), which DDPOptimizer splits at bucket boundaries (docs/train-history.md)
    compile_scope: str = "layers"
    ddp_bucket_mb: int = 100              # DDP's gradient bucket size (torch's default is 25)
    ddp_bucket_view: bool = True          # gradients are views into DDP's buckets (no copy into them)
    ddp_static_graph: bool = False
    ddp_reduce: str = "fp32"              # "bf16": sum bf16-rounded gradients (half the bytes, not exact)
    fsdp_reshard: bool = True             # FSDP2 frees each layer's gathered parameters after forward (False: ZeRO-2)
    pin_workers: bool = True              # each rank's data workers on its own share of the CPUs
    gradient_checkpointing: bool = False
    # "tensorwise": torchao float8 training of the large linears (PI05.convert_float8), gated by float8.check_float8;
    # why tensorwise only: docs/train-history.md
    float8: str | None = None
    fsdp: bool = False
    workers: int = field(default_factory=data_workers)
    save_every: int = 1000
    keep: int = 2
    log_every: int = 10
    wandb_project: str | None = None      # --wandb: mirror metrics to this W&B project (lerodoc.pi05.tracking)
    tensorboard: bool = False             # --tensorboard: event files in RUN/tensorboard
    data: DataSpec | None = None
    world_size: int = 1
    skip_checks: tuple[str, ...] = ()     # validate codes the user overrides (--skip-checks)
    val_episodes: str | None = None       # --val-episodes as typed (lerodoc.selection syntax)
    val_fraction: float | None = None     # --val-fraction: that share of the episodes, drawn with `seed`
    val_every: int = 100                  # steps between held-out evaluations (and one at the last step)
    val_samples: int = 256                # held-out frames evaluated, evenly spaced over the held-out episodes
    held_out: tuple[int, ...] = ()        # the held-out episode numbers, resolved when the run starts

    def to_json(self) -> dict:
        return asdict(self) | {"data": self.data.to_json() if self.data else None, "held_out": list(self.held_out)}

    @classmethod
    def from_json(cls, raw: dict) -> RunConfig:
        return cls(**(raw | {"data": DataSpec.from_json(raw["data"]) if raw.get("data") else None,
                             "skip_checks": tuple(raw.get("skip_checks", ())),
                             "held_out": tuple(raw.get("held_out", ()))}))

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else min(1000, self.steps // 10)

    def lr_at(self, step: int) -> float:
        """Linear warmup to `lr`, then cosine decay to `min_lr` at the last step."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))
