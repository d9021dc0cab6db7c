"""The CUDA-graph replay of `PI05.sample_actions` (needs a CUDA device; CI has none, so this is no pytest test: a
test that skipped there would pass without running). Run it on the GPU machine:

    python -m tests.gpu_graph

It checks that the replayed graph gives the eager actions bit for bit, runs no Python pass, replays new values of
the same shapes, falls back to the ordinary path for other shapes, and refuses tensor camera masks.
"""

from __future__ import annotations

import torch

from tests.test_pi05_infer import Passes, make_inputs, make_model


@torch.no_grad()
def recorded_graph_gives_the_eager_actions_and_falls_back_for_other_shapes():
    model = make_model().cuda().to(torch.bfloat16)
    x = make_inputs(model.config, device="cuda")
    eager = model.sample_actions(**x)
    model.capture_sampling(x["images"], x["image_masks"], x["tokens"], x["token_masks"])
    with Passes(model) as counts:
        replayed = model.sample_actions(**x)
    assert counts == dict(siglip=0, vlm=0, expert=0)   # replayed, not run in Python
    torch.testing.assert_close(replayed, eager, atol=0, rtol=0)   # the same kernels, the same order
    y = make_inputs(model.config, seed=1, device="cuda")   # new values, same shapes: replayed on new inputs
    torch.testing.assert_close(model.sample_actions(**y), model.euler(**y), atol=0, rtol=0)
    assert not torch.equal(model.sample_actions(**y), replayed)
    z = make_inputs(model.config, batch=3, device="cuda")   # another batch: the ordinary path
    with Passes(model) as counts:
        model.sample_actions(**z)
    assert counts["vlm"] == 1
    try:
        model.capture_sampling(x["images"], [torch.ones(2, dtype=torch.bool, device="cuda")] * 2, x["tokens"],
                               x["token_masks"])
    except ValueError as exc:
        assert "image_masks of None" in str(exc), exc
    else:
        raise AssertionError("capture_sampling took tensor camera masks, which need a host sync")


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run this on the GPU machine")
    recorded_graph_gives_the_eager_actions_and_falls_back_for_other_shapes()
    print("CUDA graph replay: eager actions bit for bit, fallback and refusal as documented")
