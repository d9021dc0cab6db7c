"""Inference with a lerodoc pi0.5 checkpoint: raw observations in, raw actions out.

    policy = Policy.load("runs/pi05/checkpoints/step-001000")
    actions = policy.predict({"observation.images.front": frames}, state, ["pick up the cube"])  # (B, H, A)

The same path as training and as lerobot's PI05 processors: the state is quantile-normalised and digitised
into the prompt, the prompt tokenised with BOS and right-padded to the run's length, images resized with
padding to the model's size and scaled to [-1, 1], actions sampled from noise and unnormalised with the
action quantiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lerodoc.errors import LerodocError
from lerodoc.hub import locate
from lerodoc.pi05.data import DataSpec, Tokenizer, normalise, pad_tokens, prompt_text
from lerodoc.pi05.export import find_checkpoint
from lerodoc.pi05.frames import resize_with_pad
from lerodoc.pi05.model import GemmaConfig, PI05, PI05Config, SiglipConfig
from lerodoc.pi05.runs import load_trainer
from lerodoc.pi05.weights import load_weights


def unnormalise(values: np.ndarray, q01: np.ndarray, q99: np.ndarray) -> np.ndarray:
    """The inverse of data.normalise: (x + 1) / 2 (q99 - q01) + q01, as lerobot's QUANTILES unnormaliser."""
    span = np.asarray(q99, np.float32) - np.asarray(q01, np.float32)
    span = np.where(span == 0, np.float32(1e-8), span)
    return ((values + 1) / 2 * span + np.asarray(q01, np.float32)).astype(np.float32)


def model_config(raw: dict) -> PI05Config:
    """PI05Config from its asdict form (trainer.json's "model")."""
    return PI05Config(**(raw | {"vision": SiglipConfig(**raw["vision"]), "vlm": GemmaConfig(**raw["vlm"]),
                                "expert": GemmaConfig(**raw["expert"])}))


def to_image(image, size: int) -> np.ndarray:
    """(H, W, 3) uint8 -> (size, size, 3) uint8, resized with padding as the training frames are."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise LerodocError(f"an image is {image.dtype} {list(image.shape)}; expected (H, W, 3) uint8")
    if image.shape[:2] == (size, size):
        return image
    # PyAV: loaded only where frames are decoded or encoded; info reads the mp4 headers without it
    import av
    return resize_with_pad(av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24"), size)


@dataclass
class Policy:
    model: PI05
    spec: DataSpec
    tokenizer: Tokenizer
    norm_stats: dict

    @classmethod
    def load(cls, checkpoint: Path, tokenizer: Path | None = None, device: str = "cpu") -> Policy:
        """A checkpoint folder (or a run: its newest); `tokenizer` overrides the run's."""
        folder = find_checkpoint(Path(checkpoint))
        trainer = load_trainer(folder)
        with torch.device("meta"):
            model = PI05(model_config(trainer["model"]))
        load_weights(model, folder / "model.safetensors")
        model = model.to(device=device, dtype=torch.float32).eval()
        path = tokenizer or locate("tokenizer", trainer["run"]["tokenizer"])
        return cls(model, DataSpec.from_json(trainer["run"]["data"]), Tokenizer(path),
                   trainer["norm_stats"]["norm_stats"])

    def inputs(self, images: dict, state, tasks: list[str]) -> dict:
        """Model inputs for a batch: images {camera: (B, H, W, 3) uint8}, state (B, S) raw, one task each."""
        spec, device = self.spec, next(self.model.parameters()).device
        missing = [c for c in spec.cameras if c not in images]
        if missing:
            raise LerodocError(f"the observation lacks camera(s) {', '.join(missing)}",
                               hint=f"the policy sees {', '.join(spec.cameras)}")
        if spec.state_key and state is None:
            raise LerodocError(f"the observation lacks the state; the policy was trained with {spec.state_key}")
        state = None if state is None else np.asarray(state, np.float32).reshape(len(tasks), -1)
        normalised = None
        if spec.state_key:
            s = self.norm_stats["state"]
            normalised = normalise(state, np.asarray(s["q01"], np.float32), np.asarray(s["q99"], np.float32))
        texts = [prompt_text(task, normalised[i] if spec.state_in_prompt else None) for i, task in enumerate(tasks)]
        tokens, masks = pad_tokens(self.tokenizer, texts, spec.max_token_len)
        pixels = [np.stack([to_image(im, spec.image_size) for im in images[c]]) for c in spec.cameras]
        return dict(images=[torch.from_numpy(p).to(device).permute(0, 3, 1, 2).float() / 127.5 - 1 for p in pixels],
                    image_masks=[None] * len(pixels), tokens=torch.from_numpy(tokens).to(device),
                    token_masks=torch.from_numpy(masks).to(device))

    @torch.no_grad()
    def predict(self, images: dict, state, tasks: list[str], noise: torch.Tensor | None = None) -> np.ndarray:
        """Raw actions (B, H, action_dim) for a batch of observations; `noise` (B, H, 32) fixes the draw."""
        actions = self.model.sample_actions(**self.inputs(images, state, tasks), noise=noise)
        a = self.norm_stats["actions"]
        return unnormalise(actions.float().cpu().numpy(), np.asarray(a["q01"], np.float32),
                           np.asarray(a["q99"], np.float32))
