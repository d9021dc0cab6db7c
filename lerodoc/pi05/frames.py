"""Decode video frames at given times for training: few seeks, uint8 out, resized with padding.

A reader keeps a few files open, each with a `lerodoc.media.frames.Cursor`. For the sorted times asked of one file it
decodes forward from the last frame it returned whenever no keyframe lies between that frame and the next target
(so frames of one episode in a batch cost one seek), and seeks otherwise. Keyframe times come from the file's
index (`lerodoc.media.frames.index`); for a file that cannot be indexed it seeks when the target is over a second
ahead.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import av
import numpy as np

from lerodoc.media.clips import read_errors, reason
from lerodoc.errors import LerodocError
from lerodoc.media.frames import Cursor, Unreadable, index, open_video

FALLBACK_GAP_S = 1.0
# Frames are scaled on one thread. From PyAV 17 `reformat` scales on a thread per CPU by default, and PyAV 18.1.1
# (FFmpeg 8.1.3) leaves that pool's state to a process forked after a frame was scaled: a DataLoader worker's first
# scale then waits forever (train pi05 hung at its first batch on a fresh install). Before 17 there is no pool.
ONE_THREAD = {"threads": 1} if int(av.__version__.split(".")[0]) >= 17 else {}


def resize_with_pad(frame: av.VideoFrame, size: int) -> np.ndarray:
    """(size, size, 3) uint8: the frame scaled to fit, aspect kept (bilinear), centred on black (openpi's
    resize_with_pad)."""
    scale = size / max(frame.width, frame.height)
    width, height = max(1, round(frame.width * scale)), max(1, round(frame.height * scale))
    image = frame.reformat(width=width, height=height, format="rgb24", interpolation="BILINEAR",
                           **ONE_THREAD).to_ndarray()
    out = np.zeros((size, size, 3), np.uint8)
    top, left = (size - height) // 2, (size - width) // 2
    out[top:top + height, left:left + width] = image
    return out


class _Open:
    """One open file: its cursor (lerodoc.media.frames) and keyframe times."""

    def __init__(self, path: Path, tolerance_s: float):
        try:
            self.container = open_video(path)
            stream = self.container.streams.video[0]
        except read_errors() + (IndexError,) as exc:
            raise LerodocError(f"cannot open video for training ({reason(exc)})", file=path) from None
        stream.thread_type = "AUTO"
        self.cursor = Cursor(self.container, stream, tolerance_s)
        try:
            self.keyframes = index(path).keyframe_times()
        except Unreadable:
            self.keyframes = None

    def must_seek(self, target: float) -> bool:
        """Seek when the target lies behind the frame shown last, or a keyframe lies between them (decoding on
        from there would decode a whole group of pictures for nothing); without keyframe times, more than
        FALLBACK_GAP_S ahead."""
        position = None if self.cursor.shown is None else float(self.cursor.shown.time)
        if position is None or target < position:
            return True
        if self.keyframes is None:
            return target - position > FALLBACK_GAP_S
        return bool(np.any((self.keyframes > position + 1e-6) & (self.keyframes <= target + 1e-6)))


class FrameReader:
    """Frames of mp4 files at given times; `size` None keeps the native size."""

    def __init__(self, size: int | None, tolerance_s: float, open_files: int = 16):
        self.size, self.tolerance_s, self.open_files = size, tolerance_s, open_files
        self._open: OrderedDict[Path, _Open] = OrderedDict()

    def _file(self, path: Path) -> _Open:
        if path in self._open:
            self._open.move_to_end(path)
        else:
            self._open[path] = _Open(path, self.tolerance_s)
            if len(self._open) > self.open_files:
                self._open.popitem(last=False)[1].container.close()
        return self._open[path]

    def read(self, path: Path, times: np.ndarray, where: list[tuple[int, str]] | None = None) -> np.ndarray:
        """(len(times), H, W, 3) uint8: for each time (seconds in the file), the frame shown then. `where` names
        each time's (episode, camera) for an error about it."""
        order = np.argsort(times, kind="stable")
        out: list[np.ndarray | None] = [None] * len(times)
        for i in order:
            target = float(times[i])
            try:
                f = self._file(path)
                if f.must_seek(target):
                    self._seek(f, target, path)
                frame = self._decode_to(f, target, path)
            except LerodocError as exc:
                if where is not None and exc.episode is None:
                    exc.episode, exc.field = where[i]
                raise
            out[i] = resize_with_pad(frame, self.size) if self.size else frame.to_ndarray(format="rgb24", **ONE_THREAD)
        return np.stack(out) if out else np.zeros((0, self.size or 0, self.size or 0, 3), np.uint8)

    @staticmethod
    def _seek(f: _Open, target: float, path: Path) -> None:
        try:
            f.cursor.seek(target)
        except read_errors() as exc:
            raise LerodocError(f"cannot seek to {target:.4f} s ({reason(exc)})", file=path,
                               hint="lerodoc validate --videos DATASET names the damage") from None

    def _decode_to(self, f: _Open, target: float, path: Path) -> av.VideoFrame:
        """The frame shown at `target` (the last one starting at or before it, within the tolerance), refused when
        none is, or it lies further from the target than the tolerance or 1.5 frames."""
        try:
            best = f.cursor.at(target)
        except read_errors() as exc:
            raise LerodocError(f"cannot decode the frame at {target:.4f} s ({reason(exc)})", file=path) from None
        if best is None or abs(float(best.time) - target) > max(self.tolerance_s, 1.5 / self._fps(f)):
            raise LerodocError(f"no frame at {target:.4f} s (the nearest decoded one is at "
                               f"{'none' if best is None else f'{float(best.time):.4f} s'})", file=path,
                               hint="lerodoc validate --videos DATASET checks the video windows")
        return best

    @staticmethod
    def _fps(f: _Open) -> float:
        rate = f.cursor.stream.average_rate or f.cursor.stream.guessed_rate
        return float(rate) if rate else 30.0

    def close(self) -> None:
        for f in self._open.values():
            f.container.close()
        self._open.clear()
