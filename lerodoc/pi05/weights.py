"""pi0.5 weights in the `model.safetensors` layout of lerobot 0.6.1's PI05Policy and openpi's converter.

PI05's module tree carries lerobot's names, so the key table holds only three rules:
- `paligemma.lm_head.weight` is lerobot's tied alias of `embed_tokens`. safetensors writes a tied pair under
  its alphabetically first name, so files hold the embedding only as `lm_head`: it is read from there and
  written there. PI05 has no lm_head (it never produces logits).
- `gemma_expert.lm_head.weight` [vocab, expert width] is a head lerobot builds but never uses. PI05 does not
  build it: loading drops it, saving writes zeros (lerobot loads strictly and needs the key).
- openpi's converted files name keys without the leading `model.`; loading adds it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from lerodoc.errors import LerodocError
from lerodoc.pi05.model import PI05, PI05Config

EMBED = "model.paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
LM_HEAD = "model.paligemma_with_expert.paligemma.lm_head.weight"
EXPERT_LM_HEAD = "model.paligemma_with_expert.gemma_expert.lm_head.weight"


def from_lerobot(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """lerobot/openpi file keys -> PI05.state_dict() keys."""
    state = {k if k.startswith("model.") else f"model.{k}": v for k, v in state.items()}
    head = state.pop(LM_HEAD, None)
    if head is not None:
        state.setdefault(EMBED, head)
    state.pop(EXPERT_LM_HEAD, None)
    return state


def to_lerobot(state: dict[str, torch.Tensor], config: PI05Config, *, expert_lm_head: bool = True
               ) -> dict[str, torch.Tensor]:
    """PI05.state_dict() keys -> the keys lerobot's save_pretrained writes (and its from_pretrained expects)."""
    state = dict(state)
    state[LM_HEAD] = state.pop(EMBED)
    if expert_lm_head:
        state[EXPERT_LM_HEAD] = torch.zeros(config.vocab_size, config.expert.width, dtype=state[LM_HEAD].dtype,
                                            device=state[LM_HEAD].device)
    return state


def load_weights(model: PI05, path: Path) -> None:
    """Load a lerobot/openpi `model.safetensors` into `model`, refusing any missing, extra or misshapen key.
    A model built on the meta device takes the file's tensors as they are (dtype included)."""
    state = from_lerobot(load_file(str(path)))
    expected = model.state_dict()
    problems = [f"missing {k}" for k in expected.keys() - state.keys()]
    problems += [f"unexpected {k}" for k in state.keys() - expected.keys()]
    problems += [f"{k}: shape {list(state[k].shape)}, model has {list(v.shape)}"
                 for k, v in expected.items() if k in state and state[k].shape != v.shape]
    if problems:
        raise LerodocError(f"{len(problems)} key(s) do not fit the model: " + "; ".join(sorted(problems)[:5]),
                           file=path, hint="check the --preset and the action dims against the checkpoint")
    model.load_state_dict(state, assign=any(p.is_meta for p in model.parameters()))


def save_weights(model: PI05, path: Path, *, expert_lm_head: bool = True) -> None:
    """Write `model` as a `model.safetensors` that lerobot's PI05Policy.from_pretrained loads."""
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(to_lerobot(state, model.config, expert_lm_head=expert_lm_head), str(path))
