"""train's preflight names every missing prerequisite in one refusal, and each hint, followed alone, clears its
own item and no other.

The dataset is built to fail five ways at once: no q01/q99 (v2.1 as lerobot writes it), no tokenizer and no
weights on this machine (an empty HF_HOME, offline), a --camera that is no feature, and an episode whose video
window in the v3.0 metadata is shifted (VID007: the window checks). Before, the first run named the tokenizer and
the weights only, the stats came a run later, and "or pass --weights none" then failed on the tokenizer."""

from __future__ import annotations

import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fixtures.factory import make_dataset
from tests.helpers import importable, require, run_cli

WRIST = "observation.images.wrist"
EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"


def _strip_quantiles(root):
    """A dataset as lerobot's v2.1 -> v3.0 converter leaves it: min/max/mean/std/count, no q01..q99."""
    import json
    path = root / "meta/stats.json"
    stats = json.loads(path.read_text())
    for feature in stats.values():
        for q in ("q01", "q10", "q50", "q90", "q99"):
            feature.pop(q, None)
    path.write_text(json.dumps(stats))
    table = pq.read_table(root / EPISODES_FILE)
    keep = [n for n in table.column_names if not re.search(r"/q\d\d$", n)]
    pq.write_table(table.select(keep), root / EPISODES_FILE)


def _shift_window(root, episode: int, camera: str, by: float):
    """Episode `episode`'s window in `camera`'s file starts `by` seconds late: fewer frames than rows (VID007)."""
    table = pq.read_table(root / EPISODES_FILE)
    name = f"videos/{camera}/from_timestamp"
    values = table.column(name).to_pylist()
    values[episode] += by
    table = table.set_column(table.column_names.index(name), name, pa.array(values, table.schema.field(name).type))
    pq.write_table(table, root / EPISODES_FILE)


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    root = tmp_path_factory.mktemp("preflight") / "ds"
    make_dataset(root, version="v3.0", episodes=4, lengths=[20, 24, 22, 26], episodes_per_file=4)
    _strip_quantiles(root)
    _shift_window(root, 1, WRIST, 0.25)
    return root


def train(root, out, env, *extra):
    return run_cli("train", "pi05", root, "-o", out, "--camera", "observation.images.wrist", "--camera",
                   "observation.images.side", *extra, check=False, env=env)


def offline(tmp_path) -> dict:
    return {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}


ITEMS = {   # item -> a phrase only its line holds
    "tokenizer": "tokenizer.model",
    "weights": "model.safetensors",
    "stats": "no q01/q99 stats",
    "camera": "observation.images.side: is not a video feature",
    "windows": "VID007",
}


def items_in(message: str) -> set[str]:
    text = " ".join(message.split())
    return {item for item, phrase in ITEMS.items() if phrase in text}


def test_one_refusal_names_every_missing_prerequisite(broken, tmp_path):
    proc = train(broken, tmp_path / "run", offline(tmp_path))
    assert proc.returncode == 3, proc.stderr
    text = " ".join(proc.stderr.split())
    assert items_in(proc.stderr) == set(ITEMS), text
    assert "5 things stop this run" in text and "Traceback" not in text
    # the stats item names both features, with the one command that computes them
    assert re.search(r"meta: (action, observation\.state|observation\.state, action): have no q01/q99", text), text
    assert f"lerodoc quantiles {broken}" in text
    assert "lerodoc download tokenizer paligemma" in text and "lerodoc download weights pi05_base" in text
    assert "--skip-checks VID007" in text and "or pass --weights none" in text
    assert not (tmp_path / "run").exists()


def test_each_hint_clears_its_own_item_only(broken, tmp_path):
    require(importable("sentencepiece"), "lerodoc's train extra (sentencepiece) is not installed")
    from tests.fixtures.tokenizer import train_tokenizer
    tokenizer = train_tokenizer(tmp_path / "tok")
    quantiled = tmp_path / "quantiled"
    shutil.copytree(broken, quantiled)
    run_cli("quantiles", quantiled)                     # the stats hint, as printed
    env = offline(tmp_path)
    fixes = {
        "stats": (quantiled, ()),
        "weights": (broken, ("--weights", "none")),
        "tokenizer": (broken, ("--tokenizer", tokenizer)),
        "camera": (broken, ("--camera", "none")),       # replaced below: --camera is repeatable
        "windows": (broken, ("--skip-checks", "VID007")),
    }
    for item, (root, extra) in fixes.items():
        if item == "camera":
            proc = run_cli("train", "pi05", root, "-o", tmp_path / "run", "--camera", "observation.images.wrist",
                           check=False, env=env)
        else:
            proc = train(root, tmp_path / "run", env, *extra)
        assert proc.returncode == 3, (item, proc.stderr)
        assert items_in(proc.stderr) == set(ITEMS) - {item}, (item, " ".join(proc.stderr.split()))
        assert "4 things stop this run" in " ".join(proc.stderr.split()), item


def test_every_hint_followed_trains(broken, tmp_path):
    require(importable("torch") and importable("sentencepiece"), "lerodoc's train extra is not installed")
    from tests.fixtures.tokenizer import train_tokenizer
    tokenizer = train_tokenizer(tmp_path / "tok")
    root = tmp_path / "ds"
    shutil.copytree(broken, root)
    run_cli("quantiles", root)
    proc = run_cli("train", "pi05", root, "-o", tmp_path / "run", "--camera", "observation.images.wrist",
                   "--weights", "none", "--tokenizer", tokenizer, "--skip-checks", "VID007", "--preset", "tiny",
                   "--steps", "2", "--batch-per-device", "2", "--workers", "0", "--save-every", "0",
                   check=False, env=offline(tmp_path))
    assert proc.returncode == 0, proc.stderr
