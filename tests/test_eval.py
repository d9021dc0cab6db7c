"""`lerodoc eval pi05` and the held-out loss of `lerodoc train pi05`, on CPU with the tiny preset.

The data is learnable on purpose: the action zigzags between two values each frame, and the state says which way
it goes next, so the whole chunk follows from the state in the prompt. Holding the last action is then wrong on
every other step and the mean action is wrong by the zigzag's half-height everywhere; a policy that samples a
zigzag of unknown phase is off by the full height half the time (worse than the mean). The untrained policy
(1 step at lr 0) is also the trained run's --weights, so it is the base-weights baseline too.

What makes it learnable in a CPU test: 16 state channels, all +1 or all -1, so that 32 of the prompt's tokens carry
the phase (with 2 channels, 4 tokens of about 45, the tiny model from random initialisation still samples the phase
at chance after 150 steps), and 600 steps at lr 3e-3 (the first 300 steps teach the chunk's shape; reading the
phase from the prompt comes after). The trained run sees no camera (--camera none): its steps cost a tenth.
When the phase is learned depends on the seed: seed 0 (the default, used here) reads it by step 400; seeds 1 and 2
had not by step 600 (policy MSE 3.73 and 1.94 against the mean action's 2.125; docs/eval.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fixtures.factory import make_dataset
from tests.fixtures.tokenizer import train_tokenizer
from tests.helpers import importable, require, run_here

require(importable("torch") and importable("sentencepiece"), "lerodoc's train extra is not installed")

CAMERA = "observation.images.top"
COMMON = ("--preset", "tiny", "--batch-per-device", "8", "--workers", "0", "--val-episodes", "3",
          "--val-samples", "40", "--log-every", "50")
STEPS = 600
STATE_DIM = 16


def zigzag(root: Path, action_dim: int = 2, cameras: tuple[str, ...] = (CAMERA,), state_dim: int = STATE_DIM) -> Path:
    """4 episodes of 40 frames: every state channel +1 on even frames and -1 on odd ones (prompts "255 255 ..." and
    "0 0 ...": different tokens, not the same ones in another order), action = (3, -1) + that sign x (2, 0.5) (more
    dims repeat the pattern); quantiles recomputed. `cameras=()` writes no video (the feature checks need none)."""
    make_dataset(root, version="v3.0", episodes=4, lengths=[40, 40, 40, 40], state_dim=state_dim,
                 action_dim=action_dim, cameras=cameras)
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        sign = np.where(table.column("frame_index").to_numpy() % 2 == 0, 1.0, -1.0)
        state = np.repeat(sign[:, None], state_dim, axis=1)
        action = np.stack([(3 if d % 2 == 0 else -1) + (2 if d % 2 == 0 else 0.5) * sign
                           for d in range(action_dim)], 1)
        for name, values in (("observation.state", state), ("action", action)):
            column = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel(), pa.float32()), values.shape[1])
            table = table.set_column(table.schema.get_field_index(name), name, column)
        pq.write_table(table, path)
    cli("quantiles", root, "--in-place")
    return root


def cli(*args) -> dict | None:
    proc = run_here(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout) if "--json" in args else None


@pytest.fixture(scope="module")
def zigzag_data(tmp_path_factory) -> dict[str, Path]:
    top = tmp_path_factory.mktemp("eval")
    return {"data": zigzag(top / "zigzag"), "tokenizer": train_tokenizer(top / "tok"), "top": top}


@pytest.fixture(scope="module")
def runs(zigzag_data) -> dict[str, Path]:
    """The zigzag dataset, an untrained run (1 step at lr 0, with the camera) and a run trained from its weights
    (without the camera: the same weights' shapes)."""
    top, data, tokenizer = zigzag_data["top"], zigzag_data["data"], zigzag_data["tokenizer"]
    untrained, trained = top / "untrained", top / "trained"
    cli("train", "pi05", data, "-o", untrained, "--tokenizer", tokenizer, *COMMON, "--steps", "1", "--lr", "0",
        "--save-every", "1")
    cli("train", "pi05", data, "-o", trained, "--tokenizer", tokenizer, *COMMON, "--steps", str(STEPS), "--lr",
        "3e-3", "--val-every", str(STEPS // 3), "--save-every", str(STEPS), "--camera", "none",
        "--weights", untrained / "checkpoints/step-000001/model.safetensors")
    return {"data": data, "untrained": untrained, "trained": trained, "tokenizer": tokenizer, "top": top}


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_held_out_loss_is_logged_and_falls_on_learnable_data(runs):
    rows = metrics(runs["trained"])
    held = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    assert [s for s, _ in held] == [STEPS // 3, 2 * STEPS // 3, STEPS]
    start = metrics(runs["untrained"])[0]["val_loss"]        # the same frames, noise and times, before training
    print(f"observed: held-out loss {start:.3f} untrained -> {[round(v, 3) for _, v in held]}")
    assert held[-1][1] < 0.7 * start and held[-1][1] < held[0][1]
    config = json.loads((runs["trained"] / "config.json").read_text())
    assert config["held_out"] == [3] and config["val_episodes"] == "3"


def test_trained_policy_beats_every_baseline_and_the_untrained_one_does_not(runs, tmp_path):
    page = tmp_path / "page.html"
    report = cli("eval", "pi05", runs["trained"], runs["data"], "-o", page, "--json")
    assert report["command"] == "eval pi05" and report["ok"]
    assert report["episodes"] == [3] and report["held_out"]      # the run's held-out episode by default
    assert set(report["baselines"]) == {"hold_last_action", "mean_action", "base_weights"}
    assert report["frames"] == 40 and report["latency_ms_median"] > 0
    policy, baselines = report["policy"], report["baselines"]
    print("observed: policy MSE", round(policy["mse"], 4), "baselines",
          {k: round(b["mse"], 4) for k, b in baselines.items()})
    assert report["beats"] == {name: True for name in baselines}
    for name, baseline in baselines.items():
        assert policy["mse"] < baseline["mse"] and policy["mae_normalised"] < baseline["mae_normalised"], name
    assert policy["mse"] < 0.5 * baselines["mean_action"]["mse"]      # the phase is read, not guessed
    assert len(policy["per_dim"]["mae"]) == 2 and len(policy["by_horizon"]["mse"]) == 10
    assert [e["episode"] for e in policy["per_episode"]] == [3]
    # the baselines as the data makes them: holding is exact on odd steps, off by the zigzag's full height on even
    hold = baselines["hold_last_action"]
    assert hold["by_horizon"]["mae"][0] == pytest.approx((4 + 1) / 2 * 39 / 40, rel=1e-6)   # first frame: itself
    assert hold["by_horizon"]["mae"][1] == pytest.approx((4 + 1) / 2 / 39, rel=1e-6)        # only the first frame
    assert baselines["mean_action"]["mae"] == pytest.approx((2 + 0.5) / 2, rel=1e-6)
    html = page.read_text()
    assert html.count("data:image/png;base64,") >= 2 and "<script" not in html.lower() and "http" not in html

    page = tmp_path / "untrained.html"
    untrained = cli("eval", "pi05", runs["untrained"], runs["data"], "-o", page, "--json")
    print("observed: untrained MSE", round(untrained["policy"]["mse"], 4))
    # the 1-step run at lr 0 (the trained run's base weights) does not beat the mean action, the trained run does
    assert not untrained["beats"]["mean_action"] and policy["mse"] < untrained["policy"]["mse"]
    assert untrained["cameras"] == [CAMERA] and "data:image/jpeg;base64," in page.read_text()   # camera frames
    assert untrained["baselines"]["base_weights"] == {
        "available": False, "reason": "the run started from random initialisation (--weights none, the tiny "
                                      "preset's default)"}


def test_eval_of_the_export_equals_eval_of_the_checkpoint(runs, tmp_path):
    policy = tmp_path / "policy"
    cli("export", "lerobot", runs["trained"], "-o", policy, "--device", "cpu")
    args = ("--episodes", "2-3", "--stride", "3", "--json")
    before = cli("eval", "pi05", runs["trained"], runs["data"], *args)
    after = cli("eval", "pi05", policy, runs["data"], *args, "--batch-size", "5")
    assert after["source_kind"] == "lerobot export" and before["source_kind"] == "checkpoint"
    assert after["episodes"] == before["episodes"] == [2, 3] and after["frames"] == before["frames"] == 28
    for name in ("policy", "baselines"):
        flat_before, flat_after = _numbers(before[name]), _numbers(after[name])
        assert flat_before.keys() == flat_after.keys()
        for key, value in flat_before.items():
            assert flat_after[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def _numbers(tree, prefix: str = "") -> dict[str, float]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _numbers(sub, f"{prefix}.{key}").items()}
    if isinstance(tree, list):
        return {k: v for i, sub in enumerate(tree) for k, v in _numbers(sub, f"{prefix}[{i}]").items()}
    return {prefix: tree} if isinstance(tree, (int, float)) and not isinstance(tree, bool) else {}


@pytest.mark.parametrize("kind", ["action dims", "camera"])
def test_dataset_that_does_not_fit_the_policy_exits_3_naming_the_feature(runs, tmp_path, kind):
    if kind == "action dims":
        other = zigzag(tmp_path / "wide", action_dim=3, cameras=())
        policy, named = runs["trained"], "action"          # sees no camera: only the action differs
    else:
        other = zigzag(tmp_path / "no_camera", cameras=())
        policy, named = runs["untrained"], CAMERA
    proc = run_here("eval", "pi05", policy, other, "--json")
    assert proc.returncode == 3, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["field"] == named, error


def test_fraction_holds_out_seeded_episodes_and_both_ways_are_refused(zigzag_data, tmp_path):
    runs = zigzag_data
    out = tmp_path / "both"
    proc = run_here("train", "pi05", runs["data"], "-o", out, "--tokenizer", runs["tokenizer"], "--preset", "tiny",
                    "--steps", "1", "--val-episodes", "1", "--val-fraction", "0.5")
    assert proc.returncode == 2 and "not both" in proc.stderr
    proc = run_here("train", "pi05", runs["data"], "-o", out, "--tokenizer", runs["tokenizer"], "--preset", "tiny",
                    "--steps", "1", "--val-episodes", "0-3")
    assert proc.returncode == 2 and "leaves none to train on" in " ".join(proc.stderr.split())
    from lerodoc.dataset import Dataset
    from lerodoc.pi05.train import RunConfig, held_out_episodes
    dataset = Dataset.open(runs["data"])
    config = RunConfig(dataset=str(runs["data"]), output=str(out), tokenizer="x", val_fraction=0.5, seed=7)
    chosen = held_out_episodes(config, dataset)
    assert len(chosen) == 2 and chosen == held_out_episodes(config, dataset)
    assert {held_out_episodes(RunConfig(dataset="", output="", tokenizer="", val_fraction=0.5, seed=s), dataset)
            for s in range(8)} != {chosen}


def test_training_batches_never_hold_a_held_out_frame(zigzag_data, tmp_path):
    """Every frame of the first 30 batches (6 epochs of the 120 training frames) of a run holding out episode 3
    comes from episodes 0-2, and every one of their frames is drawn."""
    from lerodoc.pi05.train import RunConfig, batches_of, prepare
    runs = zigzag_data
    run = RunConfig(dataset=str(runs["data"]), output=str(tmp_path / "run"), tokenizer=str(runs["tokenizer"]),
                    preset="tiny", batch_per_device=8, val_episodes="3", workers=0)
    setup = prepare(run, resume=False, writes=False)
    batches = batches_of(setup, 0, 30)
    drawn = []
    batches.sample = lambda step, rows, *rest: drawn.append(rows)
    for step in range(30):
        batches.make(step)
    seen = np.concatenate(drawn)
    assert set(setup.frames.episode[seen].tolist()) == {0, 1, 2}
    assert len(set(seen.tolist())) == 120
    assert set(setup.frames.episode[setup.val_rows].tolist()) == {3} and len(setup.val_rows) == 40
