"""Run tracking: `--wandb` under WANDB_MODE=offline writes its offline run folder (no network), `--tensorboard`
writes event files that the tensorboard package reads back as metrics.jsonl's values."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.factory import make_dataset
from tests.fixtures.tokenizer import train_tokenizer
from tests.helpers import importable, require, run_cli

require(importable("torch") and importable("sentencepiece"), "lerodoc's train extra is not installed")


def needs(package: str) -> None:
    """The dev extra installs wandb and tensorboard: under CI a missing one fails the test."""
    require(importable(package), f"{package} is not installed (pip install -e '.[dev]')")


def test_wandb_offline_and_tensorboard_mirror_the_metrics(tmp_path):
    needs("wandb")
    needs("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    make_dataset(tmp_path / "ds", version="v3.0", episodes=2, lengths=[20, 25], bframes=2)
    tokenizer = train_tokenizer(tmp_path / "tok")
    run = tmp_path / "run"
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
           "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"), "HTTPS_PROXY": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9"}   # any network use would fail
    run_cli("train", "pi05", tmp_path / "ds", "-o", run, "--tokenizer", tokenizer, "--preset", "tiny", "--steps", "6",
            "--batch-per-device", "2", "--workers", "0", "--log-every", "3", "--save-every", "0", "--wandb",
            "--wandb-project", "lerodoc-test", "--tensorboard", env=env)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]

    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1
    record = next(offline[0].glob("run-*.wandb")).read_bytes()
    run_id = json.loads((run / "tracking.json").read_text())["wandb_id"]
    assert offline[0].name.endswith(run_id)
    for name in (b"train/loss", b"train/grad_norm", b"train/lr", b"perf/samples_per_s", b"perf/data_wait"):
        assert name in record, name

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert {"train/loss", "train/grad_norm", "train/lr", "train/step_s", "train/data_wait_s", "perf/samples_per_s",
            "perf/data_wait"} <= set(scalars)
    assert "perf/mfu" not in scalars   # CPU: no peak FLOPs, no MFU (metrics.jsonl holds null)
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [r["step"] for r in rows]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in rows], rel=1e-6)
    assert [e.step for e in events.Scalars("perf/samples_per_s")] == [3, 6]


def test_missing_tracker_package_is_named_before_any_work(tmp_path, monkeypatch):
    from lerodoc.errors import LerodocError
    from lerodoc.pi05 import tracking
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LerodocError, match="needs the tensorboard package") as refused:
        tracking.require(False, True)
    assert "pip install 'lerodoc[tensorboard]'" in refused.value.render()
    tracking.require(False, False)
