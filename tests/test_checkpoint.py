"""Checkpoints go through staging.staged_output: a save that fails leaves no folder behind, neither a complete-looking
step nor a hidden partial one, and a save that succeeds replaces an older save of the same step whole."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

from lerodoc.errors import LerodocError
from lerodoc.pi05 import checkpoint, export, runs


@dataclasses.dataclass
class Config:
    width: int = 4


def _setup():
    return SimpleNamespace(config=Config(), run=SimpleNamespace(to_json=lambda: {"steps": 1}))


def _save(tmp_path, monkeypatch, fail: bool):
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    (tmp_path / "norm_stats.json").write_text(json.dumps({"state": {}}))
    monkeypatch.setattr(checkpoint.layout, "to_lerobot", lambda state, config: state)

    def policy(folder, output, trainer):
        if fail:
            raise OSError(28, "No space left on device", str(folder / "lerobot/model.safetensors"))
        (folder / "lerobot").mkdir()
    monkeypatch.setattr(export, "checkpoint_policy", policy)
    return checkpoint.save(tmp_path, 100, model, optimizer, None, _setup(), keep=2)


def test_a_failed_save_leaves_nothing(tmp_path, monkeypatch):
    with pytest.raises(LerodocError, match="no space is left on its device") as caught:
        _save(tmp_path, monkeypatch, fail=True)
    assert caught.value.file == str(runs.path_of(tmp_path, 100) / "lerobot/model.safetensors")
    assert runs.complete(tmp_path) == []
    leftovers = [p.name for p in (tmp_path / "checkpoints").iterdir()] if (tmp_path / "checkpoints").exists() else []
    assert leftovers == []


def test_a_save_is_complete_and_replaces_the_same_step(tmp_path, monkeypatch):
    final = _save(tmp_path, monkeypatch, fail=False)
    assert sorted(p.name for p in final.iterdir()) == ["lerobot", "model.safetensors", "optimizer.pt", "trainer.json"]
    (final / "stale").write_text("from an older save")
    again = _save(tmp_path, monkeypatch, fail=False)
    assert again == final and not (final / "stale").exists()
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == [final.name]
    assert runs.complete(tmp_path) == [(100, final)]
