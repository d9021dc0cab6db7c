"""A lerobot 0.6.1 pretrained-policy directory from a lerodoc pi0.5 checkpoint.

    DIR/config.json                 PI05Config ("type": "pi05"): the run's cameras, state and action shapes, chunk
                                    size, prompt length and image size; QUANTILES for state and action
    DIR/model.safetensors           the checkpoint's weights (already PI05Policy's layout)
    DIR/policy_preprocessor.json    rename -> batch -> relative actions (off) -> normalise -> state into the
    DIR/policy_postprocessor.json   prompt -> tokenise -> device; unnormalise -> absolute actions (off) -> CPU,
    DIR/policy_*processor_step_*_normalizer_processor.safetensors  the dataset's quantile stats
    DIR/tokenizer/                  tokenizer.json + tokenizer_config.json that transformers' AutoTokenizer loads
                                    offline (not written when the run used PaliGemma's tokenizer and the hub cache
                                    holds google/paligemma-3b-pt-224's tokenizer files: the processor names that)
    DIR/lerodoc.json                where it came from: the lerodoc model shapes, run and step

Every checkpoint also holds one, CHECKPOINT/lerobot/ (model.safetensors a hard link to the checkpoint's, the
tokenizer folder RUN/tokenizer): `lerodoc export lerobot` makes a self-contained copy. Either way
`PI05Policy.from_pretrained(DIR)` and `make_pre_post_processors(config, pretrained_path=DIR)` run it, as
`lerobot-record --policy.path=DIR` does. lerobot's PI05Policy builds gemma_2b/gemma_300m: only the full preset's
shapes load there as they are.

The tokenizer folder is the run's SentencePiece model written as a `tokenizers` JSON (Unigram or BPE, the
model's normaliser rules, BOS added), read from the model's protobuf with sentencepiece's own schema.
"""

from __future__ import annotations

import base64
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np

from lerodoc.errors import LerodocError
from lerodoc.formats.jsonl import write_json
from lerodoc.hub import cached_file, locate
from lerodoc.pi05 import runs
from lerodoc.promote.links import link_or_copy
from lerodoc.promote.staging import staged_output

PALIGEMMA = "google/paligemma-3b-pt-224"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
STATE, ACTION = "observation.state", "action"
NORM_MAP = {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}
PREPROCESSOR, POSTPROCESSOR = "policy_preprocessor", "policy_postprocessor"
NORMALIZER_STATE = f"{PREPROCESSOR}_step_3_normalizer_processor.safetensors"
UNNORMALIZER_STATE = f"{POSTPROCESSOR}_step_0_unnormalizer_processor.safetensors"


def find_checkpoint(source: Path) -> Path:
    """`source` is a checkpoint folder (holds trainer.json) or a run folder (its newest complete checkpoint)."""
    if (source / "trainer.json").is_file():
        return source
    found = runs.complete(source)
    if not found:
        raise LerodocError("is neither a checkpoint (no trainer.json) nor a run with a complete checkpoint",
                           file=source, hint="pass RUN or RUN/checkpoints/step-N of `lerodoc train pi05`")
    return found[-1][1]


# ------------------------------------------------------------------------------------------------ config.json


def policy_config(model: dict, data: dict, state_dim: int, device: str = "cuda") -> dict:
    """lerobot's PI05Config, as `save_pretrained` writes it, for a lerodoc run (model: PI05Config as a dict,
    data: DataSpec as a dict)."""
    size, horizon = data["image_size"], model["action_horizon"]
    inputs = {camera: {"type": "VISUAL", "shape": [3, size, size]} for camera in data["cameras"]}
    inputs[STATE] = {"type": "STATE", "shape": [state_dim]}
    return {
        "type": "pi05", "n_obs_steps": 1, "input_features": inputs,
        "output_features": {ACTION: {"type": "ACTION", "shape": [model["action_dim"]]}},
        "device": device, "use_amp": False, "use_peft": False, "push_to_hub": False, "repo_id": None,
        "private": None, "tags": None, "license": None, "pretrained_path": None, "pretrained_revision": None,
        "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m", "dtype": "float32",
        "chunk_size": horizon, "n_action_steps": horizon, "max_state_dim": 32,
        "max_action_dim": model["max_action_dim"], "num_inference_steps": model["num_steps"],
        "time_sampling_beta_alpha": 1.5, "time_sampling_beta_beta": 1.0, "time_sampling_scale": 0.999,
        "time_sampling_offset": 0.001, "min_period": 4e-3, "max_period": 4.0, "use_relative_actions": False,
        "relative_exclude_joints": ["gripper"], "action_feature_names": None, "rtc_config": None,
        "image_resolution": [size, size], "empty_cameras": 0, "tokenizer_max_length": data["max_token_len"],
        "normalization_mapping": dict(NORM_MAP), "gradient_checkpointing": False, "compile_model": False,
        "compile_mode": "max-autotune", "freeze_vision_encoder": False, "train_expert_only": False,
        "optimizer_lr": 2.5e-5, "optimizer_betas": [0.9, 0.95], "optimizer_eps": 1e-8,
        "optimizer_weight_decay": 0.01, "optimizer_grad_clip_norm": 1.0, "scheduler_warmup_steps": 1000,
        "scheduler_decay_steps": 30000, "scheduler_decay_lr": 2.5e-6}


# ------------------------------------------------------------------------------------------------ processors


def processors(config: dict, data: dict, tokenizer_name: str) -> tuple[dict, dict]:
    """policy_preprocessor.json and policy_postprocessor.json of lerobot 0.6.1's PI05 pipelines. The run's
    state feature is renamed to observation.state first, so the robot's observation keys are the dataset's."""
    features = config["input_features"] | config["output_features"]
    rename = {data["state_key"]: STATE} if data["state_key"] != STATE else {}
    device = {"registry_name": "device_processor", "config": {"device": config["device"], "float_dtype": None}}
    pre = {"name": PREPROCESSOR, "steps": [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": rename}},
        {"registry_name": "to_batch_processor", "config": {}},
        {"registry_name": "relative_actions_processor",
         "config": {"enabled": False, "exclude_joints": ["gripper"], "action_names": None}},
        {"registry_name": "normalizer_processor", "config": {"eps": 1e-8, "features": features,
                                                             "norm_map": dict(NORM_MAP)},
         "state_file": NORMALIZER_STATE},
        {"registry_name": "pi05_prepare_state_tokenizer_processor_step", "config": {}},
        {"registry_name": "tokenizer_processor",
         "config": {"max_length": config["tokenizer_max_length"], "task_key": "task", "padding_side": "right",
                    "padding": "max_length", "truncation": True, "tokenizer_name": tokenizer_name}},
        device]}
    post = {"name": POSTPROCESSOR, "steps": [
        {"registry_name": "unnormalizer_processor",
         "config": {"eps": 1e-8, "features": config["output_features"], "norm_map": dict(NORM_MAP)},
         "state_file": UNNORMALIZER_STATE},
        {"registry_name": "absolute_actions_processor", "config": {"enabled": False}},
        device]}
    return pre, post


def stats_tensors(norm_stats: dict) -> dict:
    """The normaliser's state: '{feature}.{stat}' float32 tensors of the stats the run normalised with."""
    # torch (about 2 s to import): loaded only where weights are read or written
    import torch
    out = {}
    for name, key in (("state", STATE), ("actions", ACTION)):
        for stat, values in norm_stats[name].items():
            if stat != "feature":
                out[f"{key}.{stat}"] = torch.tensor(np.asarray(values, np.float32))
    return out


# ------------------------------------------------------------------------------------------------ tokenizer


def paligemma_in_cache() -> bool:
    return all(cached_file(PALIGEMMA, name) for name in TOKENIZER_FILES)


def tokenizer_files(model_file: Path, max_length: int) -> tuple[dict, dict]:
    """tokenizer.json (the `tokenizers` format) and tokenizer_config.json for a SentencePiece model: the same
    ids as `SentencePieceProcessor.encode(text, add_bos=True)` for Unigram and BPE models."""
    # sentencepiece: optional, loaded only where a tokenizer is built or read
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    proto.ParseFromString(Path(model_file).read_bytes())
    P = pb.ModelProto.SentencePiece
    spec, norm = proto.trainer_spec, proto.normalizer_spec
    pieces = [(p.piece, p.score, p.type) for p in proto.pieces]
    if spec.model_type not in (pb.TrainerSpec.UNIGRAM, pb.TrainerSpec.BPE):
        raise LerodocError("is a SentencePiece model of a type other than Unigram or BPE", file=model_file,
                           hint="train the tokenizer with model_type unigram or bpe")
    normalizers = []
    if norm.precompiled_charsmap:
        normalizers.append({"type": "Precompiled",
                            "precompiled_charsmap": base64.b64encode(norm.precompiled_charsmap).decode()})
    if norm.remove_extra_whitespaces:
        normalizers += [{"type": "Strip", "strip_left": True, "strip_right": True},
                        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
    if norm.add_dummy_prefix:
        normalizers.append({"type": "Prepend", "prepend": "▁"})
    if norm.escape_whitespaces:
        normalizers.append({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})
    unk = pieces[spec.unk_id][0]
    if spec.model_type == pb.TrainerSpec.UNIGRAM:
        model = {"type": "Unigram", "unk_id": spec.unk_id, "vocab": [[p, s] for p, s, _ in pieces],
                 "byte_fallback": spec.byte_fallback}
    else:
        model = {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": spec.byte_fallback,
                 "ignore_merges": False, "vocab": {p: i for i, (p, _, _) in enumerate(pieces)},
                 "merges": bpe_merges(pieces, P)}
    special = {P.CONTROL, P.UNKNOWN}
    added = [{"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": t in special} for i, (p, _, t) in enumerate(pieces) if t in special | {P.USER_DEFINED}]
    post = None
    if spec.bos_id >= 0:
        bos = pieces[spec.bos_id][0]
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [spec.bos_id], "tokens": [bos]}}}
    decoders = [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}]
    if norm.add_dummy_prefix:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                 "normalizer": {"type": "Sequence", "normalizers": normalizers}, "pre_tokenizer": None,
                 "post_processor": post, "decoder": {"type": "Sequence", "decoders": decoders}, "model": model}

    def named(i: int) -> str | None:
        return pieces[i][0] if 0 <= i < len(pieces) else None

    pad = named(spec.pad_id) or unk   # lerobot pads to max_length; padded ids are masked out
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": named(spec.bos_id),
              "eos_token": named(spec.eos_id), "unk_token": unk, "pad_token": pad, "padding_side": "right",
              "model_max_length": max_length, "clean_up_tokenization_spaces": False}
    return tokenizer, config


def bpe_merges(pieces: list[tuple[str, float, int]], P) -> list[list[str]]:
    """The merges a BPE SentencePiece model applies, ranked as it applies them: the merged piece's score."""
    mergeable = {p: (s, i) for i, (p, s, t) in enumerate(pieces) if t in (P.NORMAL, P.USER_DEFINED)}
    ranked = []
    for piece, (score, i) in mergeable.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in mergeable and right in mergeable:
                ranked.append((-score, i, mergeable[left][1], mergeable[right][1], left, right))
    return [[left, right] for *_, left, right in sorted(ranked)]


# ------------------------------------------------------------------------------------------------ export


def deployable(trainer: dict) -> bool:
    """lerobot's PI05 processor always puts the state in the prompt: a run without it cannot deploy there."""
    data = trainer["run"]["data"]
    stats = trainer["norm_stats"]["norm_stats"]
    return bool(data.get("state_key") and data.get("state_in_prompt") and "state" in stats)


def write_tokenizer(trainer: dict, folder: Path) -> tuple[str, Path]:
    """(the name the tokenizer step loads, the run's SentencePiece model): PaliGemma's repo when that is the run's
    tokenizer and the hub cache holds its tokenizer files; else `folder`, written unless it is there already."""
    run = trainer["run"]
    model_file = locate("tokenizer", run["tokenizer"])
    if run["tokenizer"] == "paligemma" and paligemma_in_cache():
        return PALIGEMMA, model_file
    if not (folder / "tokenizer.json").is_file():
        tok, tok_config = tokenizer_files(model_file, run["data"]["max_token_len"])
        with staged_output(folder, force=True, own=True) as staged:
            write_json(staged / "tokenizer.json", tok)
            write_json(staged / "tokenizer_config.json", tok_config)
            shutil.copyfile(model_file, staged / "tokenizer.model")
    return str(folder.resolve()), model_file


def write_policy(folder: Path, trainer: dict, tokenizer_name: str, device: str) -> None:
    """config.json, the pre/post-processor files and their stats into `folder` (the caller puts
    model.safetensors there)."""
    # safetensors.torch loads torch (about 2 s): only where weights are read or written
    from safetensors.torch import save_file
    model, data, stats = trainer["model"], trainer["run"]["data"], trainer["norm_stats"]["norm_stats"]
    config = policy_config(model, data, len(stats["state"]["q01"]), device)
    pre, post = processors(config, data, tokenizer_name)
    write_json(folder / "config.json", config)
    write_json(folder / f"{PREPROCESSOR}.json", pre)
    write_json(folder / f"{POSTPROCESSOR}.json", post)
    tensors = stats_tensors(stats)
    save_file(tensors, str(folder / NORMALIZER_STATE))
    save_file({k: v for k, v in tensors.items() if k.startswith(ACTION + ".")}, str(folder / UNNORMALIZER_STATE))


def checkpoint_policy(checkpoint: Path, run_folder: Path, trainer: dict, device: str = "cuda") -> None:
    """Give a checkpoint being written (its trainer.json holds `trainer`) its lerobot policy: CHECKPOINT/lerobot/
    with the config and processors and model.safetensors as a hard link to the checkpoint's; the tokenizer folder
    is RUN/tokenizer, written once. Nothing for a run that cannot deploy with lerobot (no state in the prompt)."""
    if not deployable(trainer):
        return
    tokenizer_name, _ = write_tokenizer(trainer, Path(run_folder) / "tokenizer")
    folder = checkpoint / "lerobot"
    folder.mkdir()
    write_policy(folder, trainer, tokenizer_name, device)
    link_or_copy(checkpoint / "model.safetensors", folder / "model.safetensors")
    write_json(folder / "lerodoc.json", {"step": trainer["step"], "model": trainer["model"],
                                         "data": trainer["run"]["data"]})


def export_lerobot(source: Path, output: Path, *, device: str = "cuda") -> dict:
    """Write the lerobot policy directory `output` for a run or checkpoint `source`; returns a summary."""
    folder = find_checkpoint(Path(source))
    trainer = runs.load_trainer(folder)
    if not deployable(trainer):
        raise LerodocError("was trained without the state in the prompt; lerobot's PI05 processor always puts "
                           "the state there", file=folder / "trainer.json", field="data.state_in_prompt",
                           hint="train with a state feature and without --no-state-in-prompt to deploy with lerobot")
    output = Path(output)
    with staged_output(output, inputs=(Path(source),)) as staged:   # an empty folder is taken over, nothing else
        tokenizer_name, model_file = write_tokenizer(trainer, staged / "tokenizer")
        if tokenizer_name != PALIGEMMA:
            tokenizer_name = str(output.resolve() / "tokenizer")   # where the folder is once renamed
        write_policy(staged, trainer, tokenizer_name, device)
        shutil.copyfile(folder / "model.safetensors", staged / "model.safetensors")
        write_json(staged / "lerodoc.json", {"checkpoint": str(folder.resolve()), "step": trainer["step"],
                                             "model": trainer["model"], "data": trainer["run"]["data"],
                                             "tokenizer": str(model_file)})
    model, data = trainer["model"], trainer["run"]["data"]
    return {"output": str(output), "checkpoint": str(folder), "step": trainer["step"],
            "cameras": list(data["cameras"]), "state_dim": len(trainer["norm_stats"]["norm_stats"]["state"]["q01"]),
            "action_dim": model["action_dim"], "chunk_size": model["action_horizon"], "tokenizer": tokenizer_name,
            "lerobot_shapes": is_full(model)}


def is_full(model: dict) -> bool:
    """Whether lerobot's PI05Policy (gemma_2b + gemma_300m, SigLIP So400m, PaliGemma's vocabulary) has these
    shapes; otherwise it loads the weights only where its sizes are patched (tests use the tiny preset)."""
    # start-up: lerodoc.pi05.presets loads torch
    from lerodoc.pi05.presets import full
    reference = asdict(full())
    return all(model[k] == reference[k] for k in ("vision", "vlm", "expert", "vocab_size"))
