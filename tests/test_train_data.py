"""The pi0.5 data pipeline: sample order, action chunks, prompts and decoded frames are the right ones."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from tests.fixtures.factory import make_dataset
from tests.fixtures.identity import decode_identity
from tests.helpers import importable, require

require(importable("torch"), "lerodoc's train extra (torch) is not installed")
import torch  # noqa: E402

from lerodoc.dataset import Dataset  # noqa: E402
from lerodoc.pi05.data import (DataSpec, TrainingBatches, batch_rows, load_frames, normalise,  # noqa: E402
                               prompt_text)
from lerodoc.pi05.frames import FrameReader, resize_with_pad  # noqa: E402


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    """v3.0, two episodes per file, B-frames, keyframes only every 30 frames: decoding must find exact frames."""
    return make_dataset(tmp_path_factory.mktemp("data") / "ds", version="v3.0", episodes=5,
                        lengths=[33, 47, 20, 61, 38], bframes=2, gop=30)


class FakeTokenizer:
    def encode(self, texts):
        return [[1] + [ord(c) % 97 + 3 for c in text] for text in texts]


def spec(**overrides) -> DataSpec:
    return DataSpec(**({"action_key": "action", "state_key": "observation.state",
                        "cameras": ("observation.images.top", "observation.images.wrist"), "action_horizon": 8,
                        "image_size": 16, "state_in_prompt": True, "max_token_len": 200} | overrides))


def test_batches_cover_each_frame_once_per_epoch_and_repeat_by_seed():
    rows = np.concatenate([batch_rows(s, 7, 70, seed=3) for s in range(10)])
    assert sorted(rows.tolist()) == list(range(70))
    assert np.array_equal(batch_rows(4, 7, 70, seed=3), batch_rows(4, 7, 70, seed=3))
    assert not np.array_equal(batch_rows(4, 7, 70, seed=3), batch_rows(4, 7, 70, seed=4))
    crossing = batch_rows(9, 8, 70, seed=3)   # rows 72..79: the end of epoch 0 and the start of epoch 1
    assert len(crossing) == 8


def test_action_chunks_pad_at_episode_end_and_ranks_split_the_global_batch(fixture):
    dataset = Dataset.open(fixture.root)
    data = spec()
    frames = load_frames(dataset, data)
    one = TrainingBatches(dataset, frames, data, FakeTokenizer(), seed=0, batch_per_device=6, rank=0, world=1,
                          start=0, stop=1, noise_width=32)
    one.reader = FrameReader(16, 1 / 60)
    whole = one.make(5)
    stats = dataset.stats["action"]
    for b, row in enumerate(batch_rows(5, 6, len(frames), seed=0)):
        episode = int(frames.episode[row])
        start = fixture.episode_from_index(episode)
        frame = row - start
        for h in range(8):
            last = fixture.lengths[episode] - 1
            expected = normalise(fixture.expected_action(episode, min(frame + h, last)), stats["q01"], stats["q99"])
            np.testing.assert_allclose(whole["actions"][b, h].numpy(), expected, rtol=1e-6)
            assert bool(whole["action_is_pad"][b, h]) == (frame + h > last)
    parts = []
    for rank in range(3):
        shard = TrainingBatches(dataset, frames, data, FakeTokenizer(), seed=0, batch_per_device=2, rank=rank,
                                world=3, start=0, stop=1, noise_width=32)
        shard.reader = FrameReader(16, 1 / 60)
        parts.append(shard.make(5))
    for key in ("actions", "action_is_pad", "noise", "time", "tokens", "images"):
        assert torch.equal(torch.cat([p[key] for p in parts]), whole[key]), key
    assert all(int(p["real_steps"]) == int(whole["real_steps"]) for p in parts)


def test_prompt_is_openpis_pi05_format():
    state = np.array([-1.0, 0.0, 0.999, 5.0], np.float32)
    assert prompt_text(" pick_up\nthe cube ", state) == "Task: pick up the cube, State: 0 128 255 255;\nAction: "
    assert prompt_text("pick", None) == "Task: pick;\nAction: "


def test_frames_are_the_ones_at_the_row_timestamps(fixture):
    """Every camera frame of random rows (sorted reads with forward decoding and seeks) carries its identity."""
    dataset = Dataset.open(fixture.root)
    reader = FrameReader(None, 0.5 / fixture.spec.fps)
    rng = np.random.default_rng(0)
    for camera in fixture.spec.cameras:
        wanted: dict[str, list[tuple[int, int, float]]] = {}
        for episode in rng.choice(len(fixture.lengths), 12):
            frame = int(rng.integers(fixture.lengths[episode]))
            span = dataset.episodes[episode].videos[camera]
            wanted.setdefault(span.file, []).append((int(episode), frame, span.from_timestamp + frame / fixture.spec.fps))
        for file, items in wanted.items():
            images = reader.read(dataset.root / file, np.array([t for _, _, t in items]))
            for (episode, frame, _), image in zip(items, images):
                assert decode_identity(image) == fixture.expected_identity(episode, frame, camera)
    reader.close()


def test_resize_with_pad_keeps_the_aspect_on_black():
    frame = av.VideoFrame.from_ndarray(np.full((64, 96, 3), 200, np.uint8), format="rgb24")
    image = resize_with_pad(frame, 48)
    assert image.shape == (48, 48, 3)
    assert (image[:8] == 0).all() and (image[-8:] == 0).all()        # 48 x 32 content, 8 rows of pad each side
    assert abs(int(image[24, 24, 0]) - 200) <= 2


def test_frames_of_files_converted_in_place_are_those_of_the_rows_gathered_first(tmp_path, fixture):
    """load_frames converts each data file's rows into their place in the outputs (held: the outputs and one file):
    the arrays are, bit for bit, those of every episode's rows gathered first and converted at once (the episode by
    episode path), over files of two dtypes; and where the quantiles are missing and a data file too, the missing
    file is what is said, as when every file was read first."""
    import shutil
    import pyarrow.parquet as pq
    from lerodoc.errors import LerodocError
    from lerodoc.pi05 import data as data_module
    root = tmp_path / "ds"
    shutil.copytree(fixture.root, root)
    first = sorted((root / "data").rglob("*.parquet"))[0]
    table = pq.read_table(first)
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp",
                             table.column("timestamp").cast("float64"))   # one file's timestamps in float64
    pq.write_table(table, first)
    dataset = Dataset.open(root)
    assert len({ep.data_file for ep in dataset.episodes}) > 1
    whole = load_frames(dataset, spec(), raw_action=True)
    gathered = data_module._whole_columns
    try:
        data_module._whole_columns = lambda *args: None   # every episode's rows gathered, then converted
        slow = load_frames(dataset, spec(), raw_action=True)
    finally:
        data_module._whole_columns = gathered
    for key in ("action", "state", "timestamp", "task", "episode", "ends", "raw_action"):
        a, b = getattr(whole, key), getattr(slow, key)
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), key
    (root / "meta/stats.json").unlink()
    first.unlink()
    with pytest.raises(LerodocError, match="cannot read|missing|No such file"):
        load_frames(Dataset.open(root), spec())
