"""Clips of video files and the rules that place frames in them: the half-frame window, the k/fps grid,
and what a read of a damaged file raises. Shared by frames.py and video.py (PyAV) and mp4.py (box level);
imports none of them, nor PyAV until read_errors() is called (`lerodoc info` reads mp4 headers without it).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from lerodoc.conventions import TOLERANCE_S
from lerodoc.errors import LerodocError


@dataclass(frozen=True)
class Clip:
    """A window [from_timestamp, to_timestamp) of a video file; None bounds mean the file's ends."""
    path: Path
    from_timestamp: float | None = None
    to_timestamp: float | None = None


@dataclass(frozen=True)
class Written:
    """Where a clip landed in the file written, read back from its packets."""
    from_timestamp: float
    to_timestamp: float
    frames: int
    digest: str          # blake2b of the clip's packet payloads, in order; "" where not computed
    reencoded: bool = False
    retimed: bool = False   # packets moved onto the k/fps grid (a time base that could not place them there)


class NotOnKeyframe(LerodocError):
    def __init__(self, path: Path, episode: int | None):
        super().__init__("clip does not start on a keyframe, so it cannot be cut by stream copy",
                         file=path, episode=episode)


def window(from_timestamp: float | None, to_timestamp: float | None, fps: int
           ) -> tuple[Fraction | None, Fraction | None]:
    """The half-frame rule: a clip [from, to) holds the frames whose time t has lo < t <= hi, lo and hi being
    its bounds moved half a frame early, so float rounding of a stored timestamp cannot drop or add a frame.
    None bounds (the file's ends) stay None."""
    half = Fraction(1, 2 * fps)
    return tuple(None if t is None else Fraction(t) - half for t in (from_timestamp, to_timestamp))


def window_frames(from_timestamp: float, to_timestamp: float, fps: int) -> int:
    """How many k/fps grid frames the window [from, to) holds under the half-frame rule: what its episode's
    length must be."""
    lo, hi = window(from_timestamp, to_timestamp, fps)
    return math.floor(hi * fps) - math.floor(lo * fps)


def window_ticks(clip: Clip, time_base: Fraction, fps: int) -> tuple[int | None, int | None]:
    """`window` in stream ticks of `time_base`: the clip's frames have lo < pts <= hi."""
    return tuple(None if t is None else int(t / time_base) for t in window(clip.from_timestamp,
                                                                           clip.to_timestamp, fps))


GRID_TIME_BASE = 15360   # lerobot's (and FFmpeg's mp4 default for 30 fps) video time base


def grid_deviation(time_base: Fraction, fps: int) -> Fraction:
    """How far (seconds) ticks of `time_base` can be from k/fps at worst: frame k at the nearest tick."""
    ratio = Fraction(1, fps) / Fraction(time_base)        # ticks per frame, p/q in lowest terms
    return Fraction(ratio.denominator // 2, ratio.denominator) * Fraction(time_base)


def fits_grid(time_base: Fraction, fps: int) -> bool:
    """Whether ticks of `time_base` place frame k close enough to k/fps for lerobot (1/1000 does not at 30 fps:
    frames are up to a third of a millisecond off, past its 1e-4 s tolerance)."""
    return grid_deviation(time_base, fps) < TOLERANCE_S


def grid_time_base(fps: int) -> Fraction:
    """The time base retimed files get: 1/15360 where it fits `fps`, else 1/(512 fps)."""
    return Fraction(1, GRID_TIME_BASE) if GRID_TIME_BASE % fps == 0 else Fraction(1, 512 * fps)


@functools.cache
def read_errors() -> tuple[type[BaseException], ...]:
    """What PyAV raises on a damaged or hostile file: FFmpeg's errors, the OS's, and UnicodeDecodeError where a
    string it converts (a codec or format name, say) is not UTF-8. Every place that reads a video catches these.
    A function, so that importing this module does not import PyAV (a dataset without videos never loads it)."""
    # PyAV: loaded only where frames are decoded or encoded; info reads the mp4 headers without it
    import av
    return (av.FFmpegError, OSError, UnicodeDecodeError)


def reason(exc: BaseException) -> str:
    """One line for a PyAV error, without the file name FFmpeg repeats."""
    if isinstance(exc, UnicodeDecodeError):
        return f"a string in the container is not UTF-8 (byte {exc.object[exc.start:exc.start + 1]!r} " \
               f"at position {exc.start})"
    text = getattr(exc, "strerror", None) or str(exc)
    return " ".join(str(text).split())
