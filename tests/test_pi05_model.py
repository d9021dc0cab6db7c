"""pi0.5 model: the tiny preset trains and samples on CPU; the full preset has lerobot 0.6.1's names, shapes,
parameter count and FLOPs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import importable, require

require(importable("torch") and importable("safetensors"), "lerodoc's train extra is not installed")
import torch  # noqa: E402

from safetensors.torch import load_file  # noqa: E402

from lerodoc.errors import LerodocError  # noqa: E402
from lerodoc.pi05 import weights  # noqa: E402
from lerodoc.pi05.model import PI05, flops_per_sample  # noqa: E402
from lerodoc.pi05.presets import full, tiny  # noqa: E402

# lerobot 0.6.1 PI05Policy's state dict: name, shape, dtype per line
REFERENCE = Path(__file__).resolve().parent / "fixtures/lerobot061_pi05_state_dict.tsv"


def make_batch(config, batch=4, prompt_len=12, seed=0):
    """Three cameras (the third masked for every sample), right-padded prompts, actions, noise and times."""
    g = torch.Generator().manual_seed(seed)
    size, H = config.vision.image_size, config.action_horizon
    images = [torch.rand(batch, 3, size, size, generator=g) * 2 - 1 for _ in range(3)]
    image_masks = [torch.ones(batch, dtype=torch.bool), torch.ones(batch, dtype=torch.bool),
                   torch.zeros(batch, dtype=torch.bool)]
    tokens = torch.randint(1, config.vocab_size, (batch, prompt_len), generator=g)
    lengths = torch.randint(3, prompt_len + 1, (batch,), generator=g)
    token_masks = torch.arange(prompt_len)[None] < lengths[:, None]
    tokens = tokens * token_masks
    return dict(images=images, image_masks=image_masks, tokens=tokens, token_masks=token_masks,
                actions=torch.randn(batch, H, config.action_dim, generator=g),
                noise=torch.randn(batch, H, config.max_action_dim, generator=g),
                time=torch.rand(batch, generator=g) * 0.999 + 0.001)


def observation(b):
    return b["images"], b["image_masks"], b["tokens"], b["token_masks"]


def loss_of(model, b, **extra):
    return model(*observation(b), b["actions"], noise=b["noise"], time=b["time"], **extra)


def train_a_little(model, b, steps=3):
    """A few large AdamW steps: the adaRMS gates start closed, and a test of the prefix needs them open."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with torch.enable_grad():
        for _ in range(steps):
            opt.zero_grad()
            loss_of(model, b).backward()
            opt.step()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matmuls on a shared 2-core machine: more threads only add contention (25x slower when busy)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return PI05(tiny())


def test_tiny_preset_size():
    n = PI05(tiny()).num_params()
    assert 1e6 < n < 5e6


def test_forward_gives_a_finite_scalar_loss(model):
    b = make_batch(model.config)
    loss = loss_of(model, b)
    assert loss.shape == () and torch.isfinite(loss)
    assert torch.isfinite(model(*observation(b), b["actions"]))  # sampled noise and time


def test_backward_gives_finite_nonzero_grads_on_every_trainable_parameter(model):
    b = make_batch(model.config)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    for _ in range(2):  # adaRMS gates start closed (zero), so the first step reaches only the expert's norms
        opt.zero_grad()
        loss_of(model, b).backward()
        opt.step()
    opt.zero_grad()
    loss_of(model, b).backward()
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    vlm = "model.paligemma_with_expert.paligemma.model.language_model."
    assert frozen == {vlm + name for name in ("layers.1.self_attn.q_proj.weight", "layers.1.self_attn.o_proj.weight",
                      "layers.1.post_attention_layernorm.weight", "layers.1.mlp.gate_proj.weight",
                      "layers.1.mlp.up_proj.weight", "layers.1.mlp.down_proj.weight", "norm.weight")}
    for name, p in model.named_parameters():
        if name in frozen:
            assert p.grad is None, name
            continue
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_loss_falls_on_a_fixed_batch(model):
    b = make_batch(model.config, batch=4)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = loss_of(model, b)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses


def test_action_pad_mask_averages_over_real_steps_only(model):
    b = make_batch(model.config)
    train_a_little(model, b)  # open the gates: action tokens now see each other and the prefix
    pad = torch.zeros(4, model.config.action_horizon, dtype=torch.bool)
    assert torch.allclose(loss_of(model, b, action_is_pad=pad), loss_of(model, b))
    pad[:, 6:] = True
    pad[0, 3:] = True
    with torch.no_grad():
        actions = torch.nn.functional.pad(b["actions"], (0, model.config.max_action_dim - model.config.action_dim))
        t = b["time"][:, None, None]
        v = model.velocity(*model.embed_prefix(*observation(b)), t * b["noise"] + (1 - t) * actions, b["time"])
        err = (v - (b["noise"] - actions))[..., :model.config.action_dim].pow(2)  # (B, H, action_dim)
        expected = err[~pad].mean()
        torch.testing.assert_close(loss_of(model, b, action_is_pad=pad), expected)


def euler_recomputing_prefix(model, b):
    """Reference sampler: one joint pass over [prefix; actions] per step, no cache."""
    c = model.config
    prefix, valid = model.embed_prefix(*observation(b))
    x, dt = b["noise"], -1.0 / c.num_steps
    for step in range(c.num_steps):
        t = torch.full((x.shape[0],), 1.0 + step * dt)
        x = x + dt * model.velocity(prefix, valid, x, t)
    return x[..., :c.action_dim]


@torch.no_grad()
def test_sample_actions_with_cached_prefix_equals_recomputing_it(model):
    b = make_batch(model.config)
    c = model.config
    train_a_little(model, b)  # open the gates so the prefix matters
    actions = model.sample_actions(*observation(b), noise=b["noise"])
    assert actions.shape == (4, c.action_horizon, c.action_dim)
    torch.testing.assert_close(actions, euler_recomputing_prefix(model, b), atol=1e-5, rtol=1e-5)
    assert model.sample_actions(*observation(b)).shape == actions.shape  # own noise


@torch.no_grad()
def test_fully_masked_camera_changes_nothing(model):
    """Camera 2 is masked for every sample: other pixels there, or no camera 2 at all, give the same loss and
    actions; while new pixels in a shown camera, or camera 2 unmasked, change them (so the comparison can fail)."""
    b = make_batch(model.config)
    train_a_little(model, b)
    g = torch.Generator().manual_seed(7)

    def repaint(i: int, **more) -> dict:
        images = list(b["images"])
        images[i] = torch.rand(images[i].shape, generator=g) * 2 - 1
        return dict(b, images=images, **more)

    def outputs(x: dict) -> tuple:
        return loss_of(model, x), model.sample_actions(*observation(x), noise=x["noise"])

    same = outputs(b)
    for variant in (repaint(2), dict(b, images=b["images"][:2], image_masks=b["image_masks"][:2])):
        for ours, theirs in zip(outputs(variant), same):
            torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)
    shown = repaint(1)
    unmasked = dict(b, image_masks=[*b["image_masks"][:2], torch.ones_like(b["image_masks"][2])])
    for variant in (shown, unmasked):
        for ours, theirs in zip(outputs(variant), same):
            assert (ours - theirs).abs().max() > 1e-4, "the model ignores its cameras: the test above proves nothing"
    prefix, _ = model.embed_prefix(*observation(b))
    assert prefix.shape[1] == 2 * model.config.vision.num_patches + b["tokens"].shape[1]  # not encoded at all


@torch.no_grad()
def test_camera_masked_for_one_sample_equals_that_sample_without_it(model):
    b = make_batch(model.config, batch=2)
    train_a_little(model, b)
    b["image_masks"][1] = torch.tensor([True, False])  # sample 1 lacks camera 1; its tokens stay, masked
    both = model.sample_actions(*observation(b), noise=b["noise"])
    alone = dict(images=[b["images"][0][1:]], image_masks=[b["image_masks"][0][1:]], tokens=b["tokens"][1:],
                 token_masks=b["token_masks"][1:])
    torch.testing.assert_close(both[1:], model.sample_actions(*observation(alone), noise=b["noise"][1:]),
                               atol=1e-5, rtol=1e-5)


def reference_shapes() -> dict[str, list[int]]:
    rows = [line.split("\t") for line in REFERENCE.read_text().splitlines() if line.strip()]
    return {name: [int(d) for d in shape.strip("[]").split(",")] for name, shape, _ in rows}


def meta_full():
    with torch.device("meta"):
        return PI05(full())


def test_full_preset_state_dict_is_lerobots():
    reference = reference_shapes()
    assert len(reference) == 813
    ours = {k: list(v.shape) for k, v in meta_full().state_dict().items()}
    # lerobot also lists the tied alias paligemma.lm_head and the unused expert lm_head: PI05 builds neither
    assert ours == {k: v for k, v in reference.items() if k not in (weights.LM_HEAD, weights.EXPERT_LM_HEAD)}
    model = meta_full()
    saved = {k: list(v.shape) for k, v in weights.to_lerobot(model.state_dict(), model.config).items()}
    assert saved == {k: v for k, v in reference.items() if k != weights.EMBED}  # what save_pretrained writes
    assert reference[weights.LM_HEAD] == reference[weights.EMBED]


def test_full_preset_parameter_count():
    assert meta_full().num_params() == 3_353_433_872  # research/openpi.md §1.2, without the two lm_heads


def test_flops_per_sample_matches_the_research_estimate():
    # research/openpi.md §6: 3.92 TF forward x 3 = 11.75 TF at prompt 28, horizon 10, three cameras
    h10 = replace(full(), action_horizon=10)
    assert flops_per_sample(h10, prompt_len=28, cameras=3, openpi=True) == pytest.approx(11.75e12, rel=0.02)
    assert flops_per_sample(h10, prompt_len=28, cameras=2, openpi=True) == pytest.approx(7.9e12, rel=0.02)
    assert flops_per_sample(full(), prompt_len=200, cameras=3, openpi=True) == pytest.approx(3 * 4.68e12, rel=0.02)


def test_flops_per_sample_counts_only_the_work_done():
    # the last joint layer: the prefix projects q, k, v only (no o_proj, no MLP) and only the H action rows attend
    c = full()
    v, g, e, P, H = c.vision, c.vlm, c.expert, 2 * c.vision.num_patches + 28, c.action_horizon
    skipped = P * (g.width * g.num_heads * g.head_dim + 3 * g.width * g.mlp_dim)   # o_proj and the MLP
    skipped += 2 * g.num_heads * g.head_dim * P * (P + H)
    # backward's one product that is not needed: the input gradient of the layers fed by data, the weight
    # gradient of the frozen last-layer q_proj (2 of the 6 FLOPs per multiply-accumulate)
    one_gradient = (2 * v.num_patches * 3 * v.patch_size**2 * v.width + H * c.max_action_dim * e.width + e.width**2
                    + P * g.width * g.num_heads * g.head_dim)
    done, openpi = flops_per_sample(c, 28, 2), flops_per_sample(c, 28, 2, openpi=True)
    assert openpi - done == pytest.approx(6 * skipped + 2 * one_gradient, rel=1e-9)
    assert done == pytest.approx(7.64e12, rel=0.01)


def counted_flops(config, prompt_len: int, shown: int, masked: int, batch: int = 1) -> int:
    """torch's own count (FlopCounterMode: every matmul, convolution and attention, forward and backward) of one
    training step's forward and backward, on the meta device (no memory, no arithmetic: the full preset too).
    The masked cameras' all-false masks live on the CPU, where embed_prefix's `mask.any()` can read them."""
    from torch.utils.flop_counter import FlopCounterMode

    size, H = config.vision.image_size, config.action_horizon
    with torch.device("meta"):
        model = PI05(config)
        images = [torch.empty(batch, 3, size, size) for _ in range(shown + masked)]
        tokens = torch.zeros(batch, prompt_len, dtype=torch.long)
        token_masks = torch.ones(batch, prompt_len, dtype=torch.bool)
        actions = torch.empty(batch, H, config.action_dim)
        noise, time = torch.empty(batch, H, config.max_action_dim), torch.empty(batch)
    image_masks = [None] * shown + [torch.zeros(batch, dtype=torch.bool)] * masked
    counter = FlopCounterMode(display=False)
    with counter:
        loss = model(images, image_masks, tokens, token_masks, actions, noise=noise, time=time)
        loss.backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert all(p.grad is not None for p in trainable)   # backward reached every trainable weight
    return counter.get_total_flops()


@pytest.mark.parametrize("preset, prompt_len, shown, masked", [
    ("tiny", 12, 1, 0), ("tiny", 28, 2, 1), ("full", 28, 2, 1), ("full", 200, 3, 0)])
def test_flops_per_sample_equals_torchs_flop_counter(preset, prompt_len, shown, masked):
    """MFU in README and docs/train.md rests on flops_per_sample: it must equal what torch counts for one
    sample's forward and backward, exactly (both count the same multiply-accumulates as integers; a layer that
    one of them misses or counts twice would show as a difference of at least one layer's products). The masked
    camera is skipped by the model, so it counts for nothing."""
    config = {"tiny": tiny, "full": full}[preset]()
    counted = counted_flops(config, prompt_len, shown, masked)
    assert flops_per_sample(config, prompt_len, cameras=shown) == counted
    if preset == "tiny":   # per sample: two samples cost twice one
        assert counted_flops(config, prompt_len, shown, masked, batch=2) == 2 * counted


def test_weights_round_trip_in_lerobot_layout(model, tmp_path):
    path = tmp_path / "model.safetensors"
    weights.save_weights(model, path)
    on_disk = load_file(str(path))
    assert weights.LM_HEAD in on_disk and weights.EXPERT_LM_HEAD in on_disk and weights.EMBED not in on_disk
    assert set(on_disk) - {weights.LM_HEAD, weights.EXPERT_LM_HEAD} == set(model.state_dict()) - {weights.EMBED}

    loaded = PI05(tiny())
    weights.load_weights(loaded, path)
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k

    with torch.device("meta"):
        lazy = PI05(tiny())
    weights.load_weights(lazy, path)  # meta model: takes the file's tensors
    assert torch.equal(lazy.state_dict()[weights.EMBED], model.state_dict()[weights.EMBED])


def test_openpi_keys_load_and_misfits_are_refused(model, tmp_path):
    from safetensors.torch import save_file

    state = weights.to_lerobot(model.state_dict(), model.config, expert_lm_head=False)
    openpi = tmp_path / "openpi.safetensors"
    save_file({k.removeprefix("model."): v.contiguous() for k, v in state.items()}, str(openpi))
    loaded = PI05(tiny())
    weights.load_weights(loaded, openpi)
    assert torch.equal(loaded.state_dict()[weights.EMBED], model.state_dict()[weights.EMBED])

    with pytest.raises(LerodocError, match="shape"):
        weights.load_weights(PI05(tiny(action_horizon=10, vocab_size=301)), openpi)


# ------------------------------------------------------------------------------------------------------------
# Equivalence with lerobot 0.6.1's PI05 (needs lerobot[pi] in the reference venv)

LEROBOT_PI05 = r'''
"""In the lerobot venv: lerobot's PI05Policy at the spec's tiny shapes loads our model.safetensors as
from_pretrained does (strict), then writes its loss, sampled actions and gradients for the same inputs."""
import json, sys
import torch
from safetensors.torch import load_file, save_file
from bench.lerobot_pi05 import build_policy  # lerobot's PI05Policy, shrunk to the spec's shapes

spec = json.load(open(sys.argv[1]))
torch.set_num_threads(1)
A = spec["action_dim"]
policy = build_policy(spec, ["observation.images.a"], dtype="float32", device="cpu")
names = {k: list(v.shape) for k, v in policy.state_dict().items()}
state = policy._fix_pytorch_state_dict_keys(load_file(spec["weights"]), policy.config)
policy.load_state_dict({k if k.startswith("model.") else f"model.{k}": v for k, v in state.items()}, strict=True)

x = load_file(spec["inputs"])
cameras = sorted(k for k in x if k.startswith("image."))
images, masks = [x[k] for k in cameras], [x["mask." + k].bool() for k in cameras]
obs = (images, masks, x["tokens"], x["token_masks"].bool())
actions = torch.nn.functional.pad(x["actions"], (0, 32 - A))
loss = policy.model.forward(*obs, actions, x["noise"], x["time"])[:, :, :A].mean()
loss.backward()
out = {"grad." + k: p.grad for k, p in policy.named_parameters() if p.grad is not None}
with torch.no_grad():
    out["actions"] = policy.model.sample_actions(*obs, noise=x["noise"], num_steps=10)[:, :, :A].contiguous()
save_file(out | {"loss": loss.detach().reshape(1)}, spec["outputs"])
json.dump(names, open(spec["names"], "w"))
'''


@pytest.mark.lerobot
def test_same_weights_give_lerobots_loss_actions_and_gradients(model, tmp_path):
    import dataclasses
    import json
    import subprocess

    from safetensors.torch import save_file

    from tests.lerobot_oracle import lerobot_python

    python = str(lerobot_python())
    require(subprocess.run([python, "-c", "import transformers"], capture_output=True).returncode == 0,
            "the reference venv lacks lerobot[pi] (transformers): rerun scripts/lerobot-venv.sh")
    b = make_batch(model.config, batch=3, seed=1)
    b["image_masks"][1] = torch.tensor([True, False, True])  # one sample lacks camera 1; camera 2 absent for all
    train_a_little(model, b, steps=5)
    weights.save_weights(model, tmp_path / "model.safetensors")
    inputs = dict(tokens=b["tokens"], token_masks=b["token_masks"].to(torch.uint8), actions=b["actions"],
                  noise=b["noise"], time=b["time"])
    for i, (image, mask) in enumerate(zip(b["images"], b["image_masks"])):
        inputs[f"image.{i}"], inputs[f"mask.image.{i}"] = image.contiguous(), mask.to(torch.uint8)
    save_file(inputs, str(tmp_path / "inputs.safetensors"))
    spec = dataclasses.asdict(model.config) | dict(
        weights=str(tmp_path / "model.safetensors"), inputs=str(tmp_path / "inputs.safetensors"),
        outputs=str(tmp_path / "outputs.safetensors"), names=str(tmp_path / "names.json"))
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run([python, "-c", LEROBOT_PI05, str(tmp_path / "spec.json")], capture_output=True, text=True,
                          env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin",
                               "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = load_file(spec["outputs"])

    names = json.loads(Path(spec["names"]).read_text())
    assert {k: list(v.shape) for k, v in model.state_dict().items()} == {
        k: v for k, v in names.items() if k not in (weights.LM_HEAD, weights.EXPERT_LM_HEAD)}
    model.zero_grad()
    loss = loss_of(model, b)
    loss.backward()
    # the bounds docs/train.md quotes, and the differences observed (printed: pytest -s shows them)
    actions = model.sample_actions(*observation(b), noise=b["noise"])
    grads = [(p.grad, theirs["grad." + name]) for name, p in model.named_parameters() if p.requires_grad]
    used = max(((a - g).abs().max() / (1e-5 * g.abs().max() + 1e-9)).item() for a, g in grads)
    print(f"observed: loss {abs(loss.item() - theirs['loss'].item()):.2g}, actions "
          f"{(actions - theirs['actions']).abs().max().item():.2g}, gradients {used * 1e-5:.2g} of each tensor's "
          f"largest")
    assert abs(loss.item() - theirs["loss"].item()) < 1e-5
    torch.testing.assert_close(actions, theirs["actions"], atol=1e-5, rtol=1e-5)
    for name, p in model.named_parameters():
        if p.requires_grad:  # lerobot: the frozen ones get no gradient or a zero one
            g = theirs["grad." + name]
            torch.testing.assert_close(p.grad, g, atol=1e-5 * g.abs().max().item() + 1e-9, rtol=0, msg=name)
        else:
            assert "grad." + name not in theirs or not theirs["grad." + name].any(), name


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(model):
    b = make_batch(model.config)
    train_a_little(model, b)

    def loss_and_grads():
        model.zero_grad()
        loss = loss_of(model, b)
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain_loss, plain = loss_and_grads()
    model.gradient_checkpointing = True
    ckpt_loss, ckpt = loss_and_grads()
    torch.testing.assert_close(ckpt_loss, plain_loss)
    assert ckpt.keys() == plain.keys()
    for name in plain:
        torch.testing.assert_close(ckpt[name], plain[name], rtol=1e-5, atol=1e-7)
