"""lerodoc.report.data.frames_at (over lerodoc.frames.Cursor): the frames shown at ascending times, decoded forward through one open container."""

from __future__ import annotations

import av
import numpy as np

from lerodoc.encoding import EncodeSettings, encode_frames
from lerodoc.frames import keyframe_gap, open_video
from lerodoc.report.data import frames_at

FPS, FRAMES, GOP = 10, 60, 10


class Counted:
    """An open container that records where it was asked to seek."""

    def __init__(self, container):
        self.container, self.seeks = container, []

    def seek(self, offset, **kwargs):
        self.seeks.append(offset)
        return self.container.seek(offset, **kwargs)

    def decode(self, stream):
        return self.container.decode(stream)


def shown_times(path, targets, gap_s):
    with open_video(path) as container:
        counted = Counted(container)
        stream = container.streams.video[0]
        found = frames_at(counted, stream, targets, gap_s, 1e-4)
        return [None if f is None else round(float(f.time), 6) for f in found], counted.seeks


def test_frames_at_decodes_forward_and_seeks_only_past_a_keyframe_interval(tmp_path):
    path = tmp_path / "v.mp4"
    frames = ((k, av.VideoFrame.from_ndarray(np.full((32, 32, 3), 4 * k, np.uint8), format="rgb24"))
              for k in range(FRAMES))
    encode_frames(frames, path, FPS, EncodeSettings(codec="h264", gop=GOP, crf=18), 32, 32)
    gap = keyframe_gap(path)
    assert 5 <= gap <= GOP
    targets = [0.0, 0.25, 0.31, 2.0, 2.05, 4.4, 5.9, 7.0]
    expected = [0.0, 0.2, 0.3, 2.0, 2.0, 4.4, 5.9, 5.9]   # the last frame starting at or before each target

    forward, seeks = shown_times(path, targets, gap / FPS)
    assert forward == expected
    # 0.25, 0.31 and 2.05 lie within a keyframe interval of the frame decoded last: decoded on, not sought
    assert seeks == sorted(seeks) and len(seeks) == len(targets) - 3

    each, seeks = shown_times(path, targets, 0.0)   # no interval known: a seek per target past the decoded frames
    assert each == expected and len(seeks) == len(targets) - 1
