"""bench/train_vs_lerobot on CPU at the tiny preset: the shared step helpers, lerobot's batch, and one whole run
(lerodoc's side here, lerobot's in the reference venv) that prints a ratio."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import importable, require

require(importable("torch"), "lerodoc's train extra (torch) is not installed")
import torch  # noqa: E402

from bench.lerobot_pi05 import camera_keys, policy_batch  # noqa: E402
from bench.pi05_step import WARMUP, measure, run_batches, synthetic_batch  # noqa: E402
from lerodoc.pi05.presets import tiny  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_run_batches_reports_out_of_memory_and_errors_and_goes_on():
    cleaned = []

    def make_step(batch):
        if batch == 8:
            raise torch.OutOfMemoryError("CUDA out of memory")
        if batch == 16:
            raise RuntimeError("boom")
        return lambda: None

    runs = run_batches([4, 8, 16, 2], make_step, steps=2, device="cpu", flops=1e9, peak_flops=None,
                       on_run=lambda run: None, cleanup=lambda: cleaned.append(1))
    assert [r["batch"] for r in runs] == [4, 8, 16, 2]
    assert runs[1] == {"batch": 8, "oom": True} and runs[2] == {"batch": 16, "error": "RuntimeError: boom"}
    assert runs[0]["samples_per_s"] > 0 and runs[0]["peak_gib"] is None and runs[0]["mfu"] is None
    assert runs[0]["samples_per_s_synced"] > 0 and runs[0]["step_s_synced"] > 0
    assert len(cleaned) == 2


def test_measure_times_steps_back_to_back_and_each_on_its_own():
    """samples/s come from `steps` calls in one window (as a trainer runs them); the synced median from as many
    more, each timed alone; the warm-up calls count in neither."""
    calls = []

    def step():
        calls.append(1)
        time.sleep(0.01 if len(calls) <= WARMUP else 0.002)   # the warm-up's calls are slower: not counted

    step_s, synced_s, peak = measure(step, 4, "cpu")
    assert len(calls) == WARMUP + 4 + 4 and peak is None
    assert 0.002 <= step_s < 0.008 and 0.002 <= synced_s < 0.008, (step_s, synced_s)


def test_policy_batch_is_lerobots_view_of_the_synthetic_batch():
    config = tiny()
    b = synthetic_batch(config, 3, 28, "cpu")
    out = policy_batch(b, camera_keys(3))
    assert sorted(out) == ["action", "observation.images.camera0", "observation.images.camera1",
                           "observation.language.attention_mask", "observation.language.tokens"]
    torch.testing.assert_close(out["observation.images.camera1"] * 2 - 1, b["images"][1])
    assert out["observation.language.tokens"].shape == (3, 28) and out["action"].shape == (3, 10, 7)
    b["image_masks"][1] = torch.tensor([True, False, True])
    with pytest.raises(ValueError, match="whole cameras"):
        policy_batch(b, camera_keys(3))


@pytest.mark.lerobot
def test_tiny_run_measures_both_sides_and_their_ratio(tmp_path):
    from tests.lerobot_oracle import lerobot_python

    python = str(lerobot_python())
    require(subprocess.run([python, "-c", "import transformers"], capture_output=True).returncode == 0,
            "the reference venv lacks lerobot[pi] (transformers): rerun scripts/lerobot-venv.sh")
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, "-m", "bench.train_vs_lerobot", "--preset", "tiny", "--device", "cpu",
                           "--batch", "2", "--steps", "1", "--lerobot-python", python, "--site", str(tmp_path / "no"),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "x  same batch 2: lerodoc / lerobot" in proc.stdout and "x  best vs best: lerodoc" in proc.stdout
    result = json.loads(out.read_text())
    assert result["provenance"]["command"].startswith("python -m bench.train_vs_lerobot --preset tiny")
    assert [c["label"].split(":")[0] for c in result["comparisons"]] == ["best vs best", "same batch 2"]
    ours, theirs = result["sides"]["lerodoc"], result["sides"]["lerobot"]
    assert theirs["lerobot"] == "0.6.1" and theirs["param_dtypes"] == ["torch.bfloat16", "torch.float32"]
    assert ours["flops_per_sample"] == theirs["flops_per_sample"] > 0
    assert ours["runs"][0]["batch"] == theirs["runs"][0]["batch"] == 2
    assert result["ratio_samples_per_s"]["2"] == pytest.approx(
        ours["runs"][0]["samples_per_s"] / theirs["runs"][0]["samples_per_s"])
