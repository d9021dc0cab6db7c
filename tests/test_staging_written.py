"""Promotion's kept check reads the output a rewrite just verified, not a second open of it (issue 37), and only
while the output's meta/ is the one that open read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lerodoc.dataset import Dataset
from lerodoc.errors import VerificationError
from lerodoc.ops.merge import merge
from lerodoc.promote import staging
from lerodoc.promote.kept import require_kept
from tests.fixtures.factory import make_dataset


def test_a_rewrite_opens_its_output_once(tmp_path, monkeypatch):
    """merge of one dataset opens the input once and the staged output once (verify); the kept check before
    promotion reads verify's open."""
    root = make_dataset(tmp_path / "src", version="v3.0", episodes=3, lengths=[5, 6, 7]).root
    opened: list[str] = []
    real = Dataset.open.__func__

    def counting(cls, where):
        opened.append(Path(where).name)
        return real(cls, where)
    monkeypatch.setattr(Dataset, "open", classmethod(counting))
    merge([root], tmp_path / "out")
    assert opened[0] == "src" and len(opened) == 2, opened
    assert Dataset.open(tmp_path / "out").total_frames == 18


def test_a_noted_output_is_used_once_and_only_while_its_metadata_is_unchanged(tmp_path):
    root = make_dataset(tmp_path / "src", version="v3.0", episodes=2, lengths=[5, 6]).root
    ds = Dataset.open(root)
    staging.written(root, ds)
    assert staging._written(root) is ds
    assert staging._written(root) is None   # used once
    staging.written(root, ds)
    info = json.loads((root / "meta/info.json").read_text())
    info["robot_type"] = "changed"
    (root / "meta/info.json").write_text(json.dumps(info))   # a metadata write after the open
    assert staging._written(root) is None


def test_the_kept_check_still_refuses_a_loss_with_a_noted_output(tmp_path):
    """A noted output that lacks a camera of its input is refused, as an output opened again is."""
    src = make_dataset(tmp_path / "src", version="v3.0", episodes=2, lengths=[5, 6],
                       cameras=("observation.images.top", "observation.images.wrist")).root
    out = make_dataset(tmp_path / "out", version="v3.0", episodes=2, lengths=[5, 6],
                       cameras=("observation.images.top",)).root
    for kept in (out, Dataset.open(out)):
        with pytest.raises(VerificationError, match="observation.images.wrist"):
            require_kept([src], kept)
