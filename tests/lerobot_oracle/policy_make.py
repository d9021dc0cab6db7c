"""In the lerobot 0.6.1 venv: make a PI05 policy directory as lerobot users do (PI05Policy with lerobot's own
random initialisation, save_pretrained, and make_pi05_pre_post_processors with the dataset's stats), load it back
with PI05Policy.from_pretrained, and write lerobot's flow-matching loss on a given batch.

    python policy_make.py SPEC.json

SPEC: "dir" (to write), "model" (a lerodoc PI05Config as a dict: the shapes), "cameras", "state_dim",
"tokenizer_max_length", "stats" {feature: {stat: list}}, "batch" (safetensors: image.N in [-1, 1], tokens,
token_masks, actions, action_is_pad, noise, time) and "loss" (safetensors to write). PYTHONPATH must hold the
lerodoc repository (bench.lerobot_pi05.shapes_of builds lerobot's model at the spec's shapes).
"""

import json
import sys

import torch
from safetensors.torch import load_file, save_file

import lerobot.processor.tokenizer_processor as tokenizer_processor
from bench.lerobot_pi05 import shapes_of
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.pi05.configuration_pi05 import PI05Config
from lerobot.policies.pi05.modeling_pi05 import PI05Policy
from lerobot.policies.pi05.processor_pi05 import make_pi05_pre_post_processors

spec = json.load(open(sys.argv[1]))
torch.set_num_threads(1)
torch.manual_seed(0)
model = spec["model"]
size, horizon, A = model["vision"]["image_size"], model["action_horizon"], model["action_dim"]
features = {camera: PolicyFeature(FeatureType.VISUAL, (3, size, size)) for camera in spec["cameras"]}
features["observation.state"] = PolicyFeature(FeatureType.STATE, (spec["state_dim"],))
config = PI05Config(chunk_size=horizon, n_action_steps=horizon, image_resolution=(size, size), device="cpu",
                    tokenizer_max_length=spec["tokenizer_max_length"], input_features=features,
                    output_features={"action": PolicyFeature(FeatureType.ACTION, (A,))})
with shapes_of(model):
    PI05Policy(config).save_pretrained(spec["dir"])
# the processors name google/paligemma-3b-pt-224, which this offline venv does not hold: saving needs only the name
tokenizer_processor.AutoTokenizer.from_pretrained = lambda *args, **kwargs: None
stats = {feature: {k: torch.tensor(v) for k, v in values.items()} for feature, values in spec["stats"].items()}
for pipeline in make_pi05_pre_post_processors(config, stats):
    pipeline.save_pretrained(spec["dir"])

with shapes_of(model):
    policy = PI05Policy.from_pretrained(spec["dir"], strict=True)
x = load_file(spec["batch"])
cameras = sorted((k for k in x if k.startswith("image.")), key=lambda k: int(k.split(".")[1]))
images = [x[k] for k in cameras]
masks = [torch.ones(len(x["tokens"]), dtype=torch.bool) for _ in cameras]
actions = torch.nn.functional.pad(x["actions"], (0, model["max_action_dim"] - A))
with torch.no_grad():
    losses = policy.model.forward(images, masks, x["tokens"], x["token_masks"].bool(), actions, x["noise"], x["time"])
real = ~x["action_is_pad"].bool()
loss = (losses[:, :, :A] * real[..., None]).sum() / (real.sum() * A)
save_file({"loss": loss.reshape(1)}, spec["loss"])
