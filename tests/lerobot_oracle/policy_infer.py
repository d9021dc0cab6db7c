"""In the lerobot 0.6.1 venv: load a policy directory as lerobot does (PI05Policy.from_pretrained and
make_pre_post_processors(pretrained_path=DIR)), run raw observations through preprocessor -> policy ->
postprocessor with the given noise, and write the actions.

    python policy_infer.py DIR INPUTS.safetensors TASKS.json OUT.safetensors

INPUTS holds `image.{camera}` (B, H, W, 3) uint8, `state` (B, S) raw and `noise` (B, H, 32); TASKS a list of
task strings. A directory whose shapes are not lerobot's full pi05 (DIR/lerodoc.json says) is built with
bench.lerobot_pi05.shapes_of those shapes (PYTHONPATH must hold the lerodoc repository then).
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from lerobot.configs.policies import PreTrainedConfig
from lerobot.policies.factory import make_pre_post_processors
from lerobot.policies.pi05.modeling_pi05 import PI05Policy


def shapes(folder: Path):
    import contextlib
    meta = folder / "lerodoc.json"
    if not meta.is_file():
        return contextlib.nullcontext()
    from bench.lerobot_pi05 import shapes_of
    return shapes_of(json.loads(meta.read_text())["model"])


def main(folder: str, inputs: str, tasks: str, out: str) -> None:
    torch.set_num_threads(1)
    folder = Path(folder)
    config = PreTrainedConfig.from_pretrained(folder)
    config.device = "cpu"
    with shapes(folder):
        policy = PI05Policy.from_pretrained(folder, config=config, strict=True)
    policy.eval()
    loaded = {k: v for k, v in policy.state_dict().items()}
    files = load_file(str(folder / "model.safetensors"))
    # from_pretrained prints and carries on when keys do not load: check they did
    for key, value in files.items():
        assert key in loaded and torch.equal(loaded[key], value), f"{key} did not load"
    on_cpu = {"device_processor": {"device": "cpu"}}   # as lerobot-eval and async inference override it
    pre, post = make_pre_post_processors(config, pretrained_path=str(folder), preprocessor_overrides=on_cpu,
                                         postprocessor_overrides=on_cpu)
    x = load_file(inputs)
    batch = {key[len("image."):]: value.permute(0, 3, 1, 2).float() / 255.0
             for key, value in x.items() if key.startswith("image.")}
    batch["observation.state"] = x["state"]
    batch["task"] = json.loads(Path(tasks).read_text())
    processed = pre(batch)
    with torch.no_grad():
        actions = policy.predict_action_chunk(processed, noise=x["noise"])
    actions = post(actions)
    save_file({"actions": actions.contiguous(), "tokens": processed["observation.language.tokens"].contiguous(),
               "token_masks": processed["observation.language.attention_mask"].to(torch.uint8).contiguous()}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
