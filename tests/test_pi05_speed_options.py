"""pi0.5's speed options on CPU: compiled sampling gives the eager actions, float8 training converts the linears
docs/train.md says and refuses what it cannot run (one paragraph), and bench.train_vs_lerobot labels its ratios."""

from __future__ import annotations

import pytest

from tests.helpers import importable, require

require(importable("torch"), "lerodoc's train extra (torch) is not installed")
import torch  # noqa: E402

from bench.pi05_step import synthetic_batch  # noqa: E402
from bench.train_vs_lerobot import comparisons  # noqa: E402
from lerodoc.errors import LerodocError  # noqa: E402
from lerodoc.pi05.data import DataSpec  # noqa: E402
from lerodoc.pi05.distributed import Processes  # noqa: E402
from lerodoc.pi05.model import FLOAT8_PARTS, PI05, float8_filter, float8_recipe  # noqa: E402
from lerodoc.pi05.presets import full, tiny  # noqa: E402
from lerodoc.pi05.config import RunConfig  # noqa: E402
from lerodoc.commands.train import Float8  # noqa: E402
from lerodoc.pi05.float8 import RECIPES, check_float8  # noqa: E402


def test_compiled_sampling_gives_the_eager_actions_in_one_graph_each():
    """compile_sampling traces the prefix pass and the denoising step without a graph break (fullgraph) and
    samples the same actions as the eager model, with fixed noise and with drawn noise of the same dtype."""
    torch.manual_seed(0)
    model = PI05(tiny()).eval()
    b = synthetic_batch(model.config, 2, 12, "cpu")
    inputs = dict(images=b["images"][:2], image_masks=[None, None], tokens=b["tokens"], token_masks=b["token_masks"])
    noise = torch.randn(2, model.config.action_horizon, model.config.max_action_dim)
    eager = model.sample_actions(**inputs, noise=noise)
    drawn = model.sample_actions(**inputs)
    model.compile_sampling(backend="eager", fullgraph=True, dynamic=False)
    compiled = model.sample_actions(**inputs, noise=noise)
    again = model.sample_actions(**inputs, noise=noise)
    print(f"compiled vs eager, largest difference: {(compiled - eager).abs().max().item():.3g}")
    torch.testing.assert_close(compiled, eager, rtol=0, atol=1e-6)
    torch.testing.assert_close(again, eager, rtol=0, atol=1e-6)
    assert model.sample_actions(**inputs).dtype == drawn.dtype == torch.float32
    assert eager.abs().max() > 0 and not torch.equal(eager, drawn)


def test_compiled_layers_with_float8_linears_compile_each_batch_size_on_its_own(monkeypatch):
    """With float8 linears compile_layers asks for static shapes: a second batch size under automatic dynamic
    shapes made the token count symbolic, and torch._scaled_mm's multiple-of-16 check failed to compile
    (the twentieth session's first device call, batch 68 after 64). Without them the options are torch.compile's own."""
    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **options: calls.append(options) or fn)
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **options: calls.append(options))
    model = PI05(tiny())
    model.compile_layers()
    assert calls and all(options == {} for options in calls)

    class Float8Linear(torch.nn.Linear):   # torchao's class, by the name PI05.float8_linears counts
        pass

    mlp = model.paligemma.language_model.layers[0].mlp
    mlp.down_proj = Float8Linear(mlp.down_proj.in_features, mlp.down_proj.out_features, bias=False)
    calls.clear()
    model.compile_layers(mode="default")
    assert model.float8_linears() == 1
    assert calls and all(options == {"mode": "default", "dynamic": False} for options in calls)


def test_float8_converts_the_large_layer_linears_only():
    with torch.device("meta"):
        model = PI05(full())
    picked = {name for name, module in model.named_modules() if float8_filter(module, name)}
    # SigLIP 27 x 6, the VLM 18 x 5 less the last layer's frozen q/o/MLP (5), the expert 18 x 5
    assert len(picked) == 27 * 6 + 18 * 5 - 5 + 18 * 5 == 337
    assert not [n for n in picked if n.endswith((".dense", ".k_proj", ".v_proj")) and "vision_tower" not in n]
    assert not [n for n in picked if "layers.17" in n and "language_model" in n]
    assert "model.action_in_proj" not in picked and "model.time_mlp_in" not in picked
    assert any(n.endswith("vision_model.encoder.layers.0.self_attn.k_proj") for n in picked)   # 1152 x 1152
    vlm = {name for name, module in model.named_modules() if float8_filter(module, name, "vlm")}
    assert picked - vlm == {n for n in picked if ".gemma_expert." in n} and len(picked - vlm) == 18 * 5
    mlp = {name for name, module in model.named_modules() if float8_filter(module, name, "mlp")}
    assert mlp < vlm and len(mlp) == 27 * 2 + 17 * 3 and not [n for n in mlp if "self_attn" in n]
    lm = {name for name, module in model.named_modules() if float8_filter(module, name, "lm")}
    assert lm < vlm and len(lm) == 18 * 5 - 5 and not [n for n in lm if "vision_tower" in n]


def test_float8_recipes_name_a_scaling_a_part_and_fast_accumulation():
    assert [float8_recipe(r) for r in RECIPES] == [("tensorwise", "", False), ("tensorwise", "vlm", False),
                                                    ("tensorwise", "", True), ("tensorwise", "vlm", True)]
    assert all(float8_recipe(r)[1] in FLOAT8_PARTS for r in RECIPES)
    assert float8_recipe("rowwise") == ("rowwise", "", False)
    assert [f.value for f in Float8] == list(RECIPES)   # the CLI offers what check_float8 admits


def run_config(batch: int, float8: str = "tensorwise", prompt: int = 28) -> RunConfig:
    data = DataSpec(action_key="action", state_key=None, cameras=("a", "b"), action_horizon=50, image_size=224,
                    state_in_prompt=False, max_token_len=prompt)
    return RunConfig(dataset="d", output="o", tokenizer="t", preset="full", batch_per_device=batch, float8=float8,
                     data=data)


def test_float8_refuses_what_it_cannot_run_in_one_paragraph():
    config, cpu = full(), Processes()
    with pytest.raises(LerodocError, match="recipe 'fp8' is not offered"):
        check_float8(run_config(48, "fp8"), config, cpu)
    with pytest.raises(LerodocError, match="recipe 'rowwise' is not offered"):   # measured, no faster: dropped
        check_float8(run_config(48, "rowwise"), config, cpu)
    with pytest.raises(LerodocError, match="needs a GPU with float8 matrix units"):   # the recipe is offered
        check_float8(run_config(48, "tensorwise-vlm"), config, cpu)
    with pytest.raises(LerodocError, match="batch 3 gives 150 action and 1620 prefix tokens") as info:
        check_float8(run_config(3), config, cpu)
    assert "such as 8, 16, 24, 32" in info.value.hint
    with pytest.raises(LerodocError, match="needs a GPU with float8 matrix units"):
        check_float8(run_config(48), config, cpu)   # batch 48 passes the token rule; the CPU does not


def test_comparisons_label_best_vs_best_and_same_batch():
    sides = {"lerodoc": {"runs": [{"batch": 56, "samples_per_s": 66.0}, {"batch": 32, "samples_per_s": 61.0},
                                  {"batch": 64, "oom": True}]},
             "lerobot": {"runs": [{"batch": 32, "samples_per_s": 41.0}]}}
    best, same = comparisons(sides)
    assert best["label"].startswith("best vs best") and (best["batch_ours"], best["batch_lerobot"]) == (56, 32)
    assert best["ratio"] == pytest.approx(66 / 41)
    assert same["label"].startswith("same batch 32") and "camera no sample shows" in same["label"]
    assert same["ratio"] == pytest.approx(61 / 41)
