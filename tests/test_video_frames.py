"""lerodoc.media.frames: a video's frame index and the Cursor; and the report's frames_at over it, the frames shown at
ascending times, decoded forward through one open container."""

from __future__ import annotations

import av
import numpy as np
import pytest

from lerodoc.media import mp4
from lerodoc.media.encoding import EncodeSettings, encode_frames
from lerodoc.media.frames import Cursor, Unreadable, clear_cache, index, keyframe_gap, open_video
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


def encoded(path, count: int = FRAMES):
    frames = ((k, av.VideoFrame.from_ndarray(np.full((32, 32, 3), 4 * k, np.uint8), format="rgb24"))
              for k in range(count))
    encode_frames(frames, path, FPS, EncodeSettings(codec="h264", gop=GOP, crf=18), 32, 32)
    return path


def test_the_index_reads_the_same_from_the_sample_tables_and_from_a_demux(tmp_path, monkeypatch):
    path = encoded(tmp_path / "v.mp4")
    tables = index(path)
    monkeypatch.setattr(mp4, "read_track", lambda p: (_ for _ in ()).throw(mp4.Unsupported()))
    clear_cache()
    demuxed = index(path)
    assert tables.from_tables and not demuxed.from_tables
    assert len(tables.ticks) == FRAMES and np.array_equal(tables.ticks, demuxed.ticks) and tables.end == demuxed.end
    assert np.allclose(tables.times, np.arange(FRAMES) / FPS, atol=1e-4)
    assert tables.keyframe_gap() == demuxed.keyframe_gap() and tables.keyframe_gap() <= GOP
    assert np.array_equal(tables.keyframe_times(), demuxed.keyframe_times()) and tables.keyframe_times()[0] == 0
    params = ("h264", 32, 32, "yuv420p")
    assert (tables.codec, tables.width, tables.height, tables.pix_fmt) == params
    assert (demuxed.codec, demuxed.width, demuxed.height, demuxed.pix_fmt) == params


def test_the_index_is_read_again_when_the_file_is_written_anew(tmp_path):
    path = encoded(tmp_path / "v.mp4")
    assert len(index(path).ticks) == FRAMES and index(path) is index(path)
    encoded(path, FRAMES // 2)                      # a new file under the same name
    assert len(index(path).ticks) == FRAMES // 2


def test_an_unreadable_file_is_named_with_the_reason(tmp_path):
    path = tmp_path / "v.mp4"
    path.write_bytes(b"not a video")
    with pytest.raises(Unreadable, match="cannot be opened as a video") as error:
        index(path)
    assert error.value.file == str(path)
    with pytest.raises(Unreadable, match="cannot be opened as a video"):
        index(tmp_path / "missing.mp4")


def test_the_cursor_gives_the_first_frame_as_ahead_when_none_is_shown_yet(tmp_path):
    path = encoded(tmp_path / "v.mp4")
    with open_video(path) as container:
        cursor = Cursor(container, container.streams.video[0], 1e-4)
        cursor.seek(0.0)
        assert cursor.at(-0.5) is None and cursor.ahead.pts == 0          # nothing shown before the first frame
        assert round(float(cursor.at(0.45).time), 6) == 0.4               # decoded on: the frame shown at 0.45 s
        assert round(float(cursor.ahead.time), 6) == 0.5
        assert round(float(cursor.at(10.0).time), 6) == 5.9 and cursor.ahead is None   # past the end: the last


def _scale_first_frame(path, size: int, done) -> None:
    from lerodoc.pi05.frames import resize_with_pad
    with open_video(path) as container:
        frame = next(container.decode(container.streams.video[0]))
        done.put(resize_with_pad(frame, size).shape)


def test_a_forked_worker_scales_frames_after_its_parent_did(tmp_path):
    """train's DataLoader workers are forked from a process that has scaled frames already (its checks, its first
    batch). PyAV 18.1.1 (FFmpeg 8.1.3) scales on a pool of threads by default, and a forked process's first scale then
    waited forever: `lerodoc train pi05` hung at its first batch on a fresh install. Frames are scaled on one thread
    (`pi05.frames.ONE_THREAD`)."""
    import multiprocessing
    import queue
    path = encoded(tmp_path / "v.mp4")
    here = multiprocessing.get_context("fork").Queue()
    _scale_first_frame(path, 24, here)
    assert here.get(timeout=10) == (24, 24, 3)
    child = multiprocessing.get_context("fork").Process(target=_scale_first_frame, args=(path, 16, here))
    child.start()
    child.join(60)
    hung = child.is_alive()
    if hung:
        child.kill()
        child.join()
    assert not hung, "the forked process's scale never returned"
    assert child.exitcode == 0
    try:
        assert here.get(timeout=10) == (16, 16, 3)
    except queue.Empty:
        raise AssertionError("the forked process scaled nothing") from None
