"""pi0.5 weights in the `model.safetensors` layout of lerobot 0.6.1's PI05Policy and openpi's converter.

PI05's module tree carries lerobot's names, so the key table holds only three rules:
- `paligemma.lm_head.weight` is lerobot's tied alias of `embed_tokens`. safetensors writes a tied pair under
  its alphabetically first name, so files hold the embedding only as `lm_head`: it is read from there and
  written there. PI05 has no lm_head (it never produces logits).
- `gemma_expert.lm_head.weight` [vocab, expert width] is a head lerobot builds but never uses. PI05 does not
  build it: loading drops it, saving writes zeros (lerobot loads strictly and needs the key).
- openpi's converted files name keys without the leading `model.`; loading adds it.

`--weights` also takes a lerobot PI05 policy directory (config.json + model.safetensors, as
`PI05Policy.save_pretrained` or `lerodoc export lerobot` write it) or its hub id. Its config and processor
stats must then agree with the run: `check_policy` refuses other cameras, shapes or normalisation.
Importing this module loads no torch (the CLI resolves --weights before torch starts).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lerodoc.errors import LerodocError
from lerodoc.hub import ASSETS, locate
from lerodoc.hub_errors import hub_errors

if TYPE_CHECKING:
    import torch

    from lerodoc.pi05.data import DataSpec
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
        # torch (about 2 s to import): loaded only where weights are read or written
        import torch
        state[EXPERT_LM_HEAD] = torch.zeros(config.vocab_size, config.expert.width, dtype=state[LM_HEAD].dtype,
                                            device=state[LM_HEAD].device)
    return state


def load_weights(model: PI05, path: Path) -> None:
    """Load a lerobot/openpi `model.safetensors` into `model`, refusing any missing, extra or misshapen key.
    A model built on the meta device takes the file's tensors as they are (dtype included)."""
    # safetensors.torch loads torch (about 2 s): only where weights are read or written
    from safetensors.torch import load_file
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
    # safetensors.torch loads torch (about 2 s): only where weights are read or written
    from safetensors.torch import save_file
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(to_lerobot(state, model.config, expert_lm_head=expert_lm_head), str(path))


# ------------------------------------------------------------------------------------------------ policy dirs

POLICY_FILES = ["config.json", "model.safetensors", "policy_preprocessor*", "policy_postprocessor*"]


@functools.cache
def locate_weights(spec: str) -> tuple[Path, Path | None]:
    """(model.safetensors, the lerobot policy folder holding it or None) that `--weights spec` names: a file, a
    folder, a known name (lerodoc.hub.locate), or a hub id `owner/name` of a lerobot policy, taken from the
    Hugging Face cache or downloaded (config, weights and processors only; HF_HUB_OFFLINE is honoured).
    Resolved once per process: the command calls it before torch loads, the run's setup again."""
    path = Path(spec).expanduser()
    if path.exists() or spec in ASSETS or spec.count("/") != 1:
        found = locate("weights", spec)
        return found, found.parent if path.is_dir() and (path / "config.json").is_file() else None
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import snapshot_download
    with hub_errors(spec, taken_as="is no local file or folder; as a hub policy (owner/name): "):
        folder = Path(snapshot_download(spec, allow_patterns=POLICY_FILES))
    if not (folder / "model.safetensors").is_file():
        raise LerodocError("has no model.safetensors", file=spec, hint="pass a lerobot policy repo")
    return folder / "model.safetensors", folder if (folder / "config.json").is_file() else None


RANDOM = "none"   # --weights none: random initialisation, asked for
# the weights each preset fine-tunes from when --weights is not given (None: random initialisation, as no published
# checkpoint has the tiny preset's shapes)
DEFAULT_WEIGHTS = {"tiny": None, "full": "pi05_base"}


def weights_for(preset: str, spec: str | None) -> str | None:
    """What `--weights spec` means for `preset`: the preset's default when not given, None for `none`."""
    if spec is None:
        return DEFAULT_WEIGHTS.get(preset)
    return None if spec.lower() == RANDOM else spec


def locate_assets(tokenizer: str, weights: str | None) -> tuple[Path, tuple[Path, Path | None] | None]:
    """The tokenizer file and (weights, policy folder) a run needs (None: random initialisation), found offline.
    Every missing one is named in one LerodocError, each with the `lerodoc download` command that fetches it, so a
    user fixes them all at once."""
    found, missing = {}, []
    for kind, spec, find in (("tokenizer", tokenizer, lambda s: locate("tokenizer", s)),
                             ("weights", weights, locate_weights)):
        if spec is None:
            continue
        try:
            found[kind] = find(spec)
        except LerodocError as exc:
            missing.append((kind, exc))
    if len(missing) == 1:
        raise missing[0][1]
    if missing:
        raise LerodocError("; ".join(f"{exc.message}" + (f": {exc.hint}" if exc.hint else "")
                                     for _kind, exc in missing),
                           field="--tokenizer, --weights",
                           hint="fetch both, or pass --weights none to train from random initialisation")
    return found["tokenizer"], found.get("weights")


def policy_stats(folder: Path) -> dict[str, np.ndarray]:
    """The '{feature}.{stat}' arrays of the policy preprocessor's normaliser step ({} when it has none)."""
    path = folder / "policy_preprocessor.json"
    if not path.is_file():
        return {}
    steps = json.loads(path.read_text()).get("steps", [])
    files = [s["state_file"] for s in steps if s.get("registry_name") == "normalizer_processor" and s.get("state_file")]
    if not files or not (folder / files[0]).is_file():
        return {}
    # safetensors.torch loads torch (about 2 s): only where weights are read or written
    from safetensors.numpy import load_file
    return load_file(str(folder / files[0]))


def check_policy(folder: Path, config: PI05Config, data: DataSpec, stats: dict, state_dim: int | None) -> None:
    """Refuse a lerobot policy folder whose type, chunk size, action or state dims, image size, cameras or
    normalisation (mapping and q01/q99) differ from this run's dataset."""
    cfg_path = folder / "config.json"
    cfg = json.loads(cfg_path.read_text())
    whole = "pass FOLDER/model.safetensors to start from the weights alone"

    def refuse(message: str, field: str, hint: str) -> None:
        raise LerodocError(message, file=cfg_path, field=field, hint=f"{hint}; or {whole}")

    if cfg.get("type") != "pi05":
        refuse(f"is a {cfg.get('type')!r} policy, not pi05", "type", "use a pi05 policy")
    inputs, outputs = cfg.get("input_features") or {}, cfg.get("output_features") or {}
    action = (outputs.get("action") or {}).get("shape") or [None]
    if action[0] != config.action_dim:
        refuse(f"predicts {action[0]} action dims; the dataset's {data.action_key} has {config.action_dim}",
               "output_features.action", "train on a dataset with the policy's action, or select its channels")
    if cfg.get("chunk_size") != config.action_horizon:
        refuse(f"has chunk_size {cfg.get('chunk_size')}; this run predicts {config.action_horizon} actions",
               "chunk_size", f"pass --action-horizon {cfg.get('chunk_size')}")
    cameras = [k for k, v in inputs.items() if v.get("type") == "VISUAL"]
    if sorted(cameras) != sorted(data.cameras):
        refuse(f"sees cameras {', '.join(cameras) or 'none'}; this run shows {', '.join(data.cameras) or 'none'}",
               "input_features", "pass --camera for each of the policy's cameras (the dataset's video features)")
    size = list(cfg.get("image_resolution") or [])
    if size != [config.vision.image_size] * 2:
        refuse(f"takes {size} images; the model is built for {config.vision.image_size}", "image_resolution",
               "use the preset the policy was trained with")
    state = (inputs.get("observation.state") or {}).get("shape") or [None]
    if state_dim is not None and state[0] != state_dim:
        refuse(f"takes a {state[0]}-dim state; the dataset's {data.state_key} has {state_dim}",
               "input_features.observation.state", "train with the state feature the policy was trained on")
    mapping = cfg.get("normalization_mapping") or {}
    for kind in ("STATE", "ACTION"):
        if mapping.get(kind) != "QUANTILES":
            refuse(f"normalises {kind} with {mapping.get(kind)}; lerodoc trains pi0.5 with QUANTILES (q01/q99)",
                   f"normalization_mapping.{kind}", "fine-tune a policy trained with QUANTILES")
    theirs = policy_stats(folder)
    for feature, key in (("observation.state", data.state_key), ("action", data.action_key)):
        if key is None or f"{feature}.q01" not in theirs:
            continue
        for q in ("q01", "q99"):
            ours, other = np.ravel(stats[key][q]).astype(np.float32), np.ravel(theirs[f"{feature}.{q}"])
            if ours.shape != other.shape or not np.allclose(ours, other, rtol=1e-4, atol=1e-6):
                worst = int(np.argmax(np.abs(ours - other))) if ours.shape == other.shape else None
                raise LerodocError(
                    f"normalises {feature} with other {q} stats than the dataset's {key}"
                    + (f" (channel {worst}: {other[worst]:.6g} there, {ours[worst]:.6g} here)"
                       if worst is not None else f" ({other.shape} there, {ours.shape} here)"),
                    file=folder / "policy_preprocessor.json", field=f"{feature}.{q}",
                    hint=f"the policy was trained on other data: {whole} (the dataset's quantiles then apply)")
