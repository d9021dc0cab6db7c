"""Reading video files: what frames a file holds, and the frame shown at a given time.

Every read of a video opens it here (`open_video`: local paths, hub files, damaged tags). `index(path)` lists a
file's frames (presentation times, ends, keyframes) and its codec parameters without decoding: from the mp4 sample
tables (lerodoc.media.mp4), or from PyAV's demuxer for a file those do not parse. It is read once per version of the
file. `video_format(path)` is what `lerodoc info` shows of a camera, from the mp4 header where it says it (PyAV,
imported on first use, is then not loaded). `Cursor` decodes one stream forward and returns the frame shown at each
time asked; when to seek, and what to refuse, is each caller's (validate --deep, report thumbnails, training).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from lerodoc import access
from lerodoc.media import clips, mp4
from lerodoc.media.clips import reason
from lerodoc.errors import LerodocError

NO_CODEC = "its video stream names no codec FFmpeg knows (damaged sample description?)"


# ---------------------------------------------------------------- opening

def open_video(path: Path | str, **options):
    """av.open for reading. Metadata tags (moov/udta, stream tags) that are not UTF-8 are read with
    replacement characters, as lerodoc never uses them: PyAV's strict default (before 19, which dropped the
    option) turns one flipped bit in an encoder tag into a UnicodeDecodeError for a file whose frames are intact."""
    import av   # here, not at the top: `lerodoc info` reads mp4 headers without PyAV (video_format)
    if int(av.__version__.split(".")[0]) < 19:
        options.setdefault("metadata_errors", "replace")
    return av.open(_av_source(path), **options)


def _av_source(path):
    """What av.open reads: a local regular file's checked path, a hub file as a range-reading file object
    (`access.source`)."""
    return access.source(path)


def strict_tags(path: Path | str) -> bool:
    """Whether PyAV's default, strict, reader opens the file, i.e. its metadata tags are UTF-8: lerobot's pyav
    backend reads that way, so a file lerodoc writes must pass (other faults are reported where they matter)."""
    # PyAV: loaded only where frames are decoded or encoded; info reads the mp4 headers without it
    import av
    try:
        with av.open(_av_source(path)):
            return True
    except UnicodeDecodeError:
        return False
    except clips.read_errors():
        return True


def open_stream(path: Path, episode: int | None = None):
    """The open container of a file with a video stream whose codec FFmpeg knows; a LerodocError otherwise."""
    try:
        container = open_video(path)
    except clips.read_errors() as exc:
        raise LerodocError(f"cannot open video ({reason(exc)})", file=path, episode=episode) from None
    if not container.streams.video:
        container.close()
        raise LerodocError("has no video stream", file=path, episode=episode)
    if container.streams.video[0].codec_context is None:
        container.close()
        raise LerodocError(f"cannot open video ({NO_CODEC})", file=path, episode=episode)
    return container


def demux_checked(packets, path: Path, episode: int | None):
    """Pass packets through, turning a demuxer failure (truncated or corrupt file) into a clear error."""
    try:
        yield from packets
    except clips.read_errors() as exc:
        raise LerodocError(f"cannot read video packets ({reason(exc)})", file=path, episode=episode) from None


def decode_checked(packet, path: Path, episode: int | None) -> list:
    """The packet's frames, turning a decoder failure (a damaged packet) into a clear error."""
    try:
        return packet.decode()
    except clips.read_errors() as exc:
        raise LerodocError(f"cannot decode video frames ({reason(exc)})", file=path, episode=episode) from None


# ---------------------------------------------------------------- container facts

@dataclass(frozen=True)
class Probe:
    """What the container says about its first video stream."""
    codec: str
    width: int
    height: int
    pix_fmt: str | None
    fps: float
    time_base: Fraction
    frames: int
    duration_s: float
    bit_rate: int | None
    size_bytes: int


def probe(path: Path, count_packets: bool = False) -> Probe:
    """Container facts; `count_packets` demuxes (never decodes) when the header has no frame count."""
    # PyAV: loaded only where frames are decoded or encoded; info reads the mp4 headers without it
    import av
    with open_stream(path) as container:
        stream = container.streams.video[0]
        ctx = stream.codec_context
        frames = stream.frames
        if count_packets or not frames:
            frames = sum(1 for p in demux_checked(container.demux(stream), access.path(path), None) if p.size)
        duration = (float(stream.duration * stream.time_base) if stream.duration
                    else (container.duration or 0) / av.time_base)
        rate = stream.average_rate or stream.base_rate or 0
        return Probe(codec=ctx.codec.canonical_name, width=ctx.width, height=ctx.height,
                     pix_fmt=ctx.pix_fmt, fps=float(rate), time_base=Fraction(stream.time_base),
                     frames=frames, duration_s=duration, bit_rate=ctx.bit_rate or None,
                     size_bytes=access.path(path).stat().st_size)


@dataclass(frozen=True)
class VideoFormat:
    """A video's codec (FFmpeg's canonical name), frame size, pixel format and frame rate, as `probe` gives them."""
    codec: str
    width: int
    height: int
    pix_fmt: str | None
    fps: float


def video_format(path: Path) -> VideoFormat:
    """What `probe` says of the codec, size, pixel format and rate, read from the mp4 header where it settles them
    (mp4.picture, mp4.average_rate), so `lerodoc info` loads no PyAV; from `probe` otherwise. (In a damaged file
    that still parses, the header's word can differ from the decoder's; finding damage is validate --videos'.)"""
    try:
        track = mp4.read_track(path)
        picture, rate = mp4.picture(track), mp4.average_rate(track)
        return VideoFormat(picture.codec, picture.width, picture.height, picture.pix_fmt, float(rate))
    except mp4.Unsupported:
        found = probe(path)
        return VideoFormat(found.codec, found.width, found.height, found.pix_fmt, found.fps)


def time_base(path: Path, episode: int | None = None) -> Fraction:
    """The video stream's time base: the mp4 header's timescale, else what PyAV says (headers only)."""
    try:
        return Fraction(1, mp4.read_track(path).timescale)
    except mp4.Unsupported:
        pass
    with open_stream(path, episode) as container:
        return Fraction(container.streams.video[0].time_base)


# ---------------------------------------------------------------- the index of a file's frames

class Unreadable(LerodocError):
    """The file cannot be read as a video; the message says why, in words that follow the file's name."""


@dataclass(frozen=True, eq=False)
class Index:
    """A video file's frames as its container lists them, and its stream's codec parameters.

    Per frame, in decode order: its presentation time and end (ticks of `time_base`) and whether it is a
    keyframe. `ticks` and `times` are the presentation times ascending, the order lerobot looks frames up in."""
    time_base: Fraction
    pts: np.ndarray          # int64, decode order
    ends: np.ndarray         # int64, pts + duration
    sync: np.ndarray         # bool: a keyframe
    codec: str
    width: int
    height: int
    pix_fmt: str | None
    from_tables: bool        # read from the mp4 sample tables (else from a demux)

    order: np.ndarray = field(init=False, repr=False)   # decode positions in presentation order
    ticks: np.ndarray = field(init=False, repr=False)   # pts ascending
    times: np.ndarray = field(init=False, repr=False)   # seconds, from ticks

    def __post_init__(self):
        order = np.argsort(self.pts, kind="stable")
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "ticks", self.pts[order])
        object.__setattr__(self, "times", self.ticks * float(self.time_base))

    @property
    def end(self) -> int:
        """End of the last frame shown, in ticks."""
        return int(self.ends.max())

    @property
    def end_s(self) -> float:
        return float(self.end * self.time_base)

    def keyframe_times(self) -> np.ndarray:
        """The keyframes' presentation times in seconds, ascending."""
        return np.sort(self.pts[self.sync]) * self.time_base.numerator / self.time_base.denominator

    def keyframe_gap(self) -> int:
        """The longest run of frames (decode order) from one keyframe to the next; the whole file when it has one
        keyframe."""
        keys = [int(i) for i in np.flatnonzero(self.sync)] + [len(self.sync)]
        return max((b - a for a, b in zip(keys, keys[1:])), default=len(self.sync))


def index(path: Path) -> Index:
    """The file's Index, read once per version of the file (`access.version`); Unreadable when it is not a
    readable video."""
    try:
        version = access.version(path)
    except OSError as exc:
        raise Unreadable(f"cannot be opened as a video ({reason(exc)})", file=path) from None
    return _index(access.path(path), *version)


def clear_cache() -> None:
    """Forget every Index read so far (and the codec parameters learnt per sample description)."""
    _index.cache_clear()
    _PARAMS.clear()


@functools.lru_cache(maxsize=256)
def _index(path: Path, *version: int) -> Index:
    try:
        return _from_tables(path)
    except mp4.Unsupported:
        return _from_demux(path)
    except Unreadable:
        raise
    except LerodocError as exc:   # headers claiming more than the file holds or the budget allows (mp4.read_track)
        raise Unreadable(exc.message, file=exc.file, field=exc.field, hint=exc.hint) from None


# codec parameters per mp4 sample description: FFmpeg derives them from it, so one file's serve every file with
# the same description, and a dataset of many files opens PyAV once per camera
_PARAMS: dict[bytes, tuple[str, int, int, str | None]] = {}
_PARAMS_KEPT = 64


def _from_tables(path: Path) -> Index:
    """From the mp4 sample tables; codec parameters probed once per distinct sample description."""
    track = mp4.read_track(path)
    if track.stsd not in _PARAMS:
        try:
            with open_video(path) as container:
                params = _params(container, path)
        except clips.read_errors() + (IndexError,):
            raise mp4.Unsupported("PyAV cannot open it") from None
        if len(_PARAMS) >= _PARAMS_KEPT:
            _PARAMS.clear()
        _PARAMS[track.stsd] = params
    return Index(Fraction(1, track.timescale), track.pts, track.pts + track.delta, track.sync,
                 *_PARAMS[track.stsd], from_tables=True)


def _params(container, path: Path) -> tuple[str, int, int, str | None]:
    context = container.streams.video[0].codec_context
    if context is None:
        raise Unreadable(f"cannot be opened as a video ({NO_CODEC})", file=path)
    return context.codec.canonical_name, context.width, context.height, context.pix_fmt


def _from_demux(path: Path) -> Index:
    """From PyAV's demuxer (no decoding), for files the mp4 header parser does not handle."""
    try:
        with open_video(path) as container:
            if not container.streams.video:
                raise Unreadable("holds no video stream", file=path)
            stream = container.streams.video[0]
            starts, durations, sync = [], [], []
            for packet in container.demux(stream):
                if not packet.size or packet.pts is None:
                    continue
                if packet.is_corrupt:
                    raise Unreadable(f"has a damaged packet at {float(packet.pts * stream.time_base):.3f} s "
                                     f"(truncated or corrupt file)", file=path)
                starts.append(packet.pts)
                durations.append(packet.duration or 0)
                sync.append(bool(packet.is_keyframe))
            if not starts:
                raise Unreadable("holds no frames", file=path)
            if stream.frames and len(starts) < stream.frames:
                raise Unreadable(f"holds {len(starts)} of the {stream.frames} frames its header lists "
                                 f"(truncated file)", file=path)
            pts = np.array(starts, np.int64)
            ticks = np.sort(pts)
            step = int(np.median(np.diff(ticks))) if len(ticks) > 1 else 0     # for packets without a duration
            ends = pts + np.where(np.array(durations) > 0, durations, step)
            return Index(Fraction(stream.time_base), pts, ends, np.array(sync, bool), *_params(container, path),
                         from_tables=False)
    except clips.read_errors() as exc:
        raise Unreadable(f"cannot be opened as a video ({reason(exc)})", file=path) from None


def keyframe_gap(path: Path) -> int:
    """The longest run of frames from one keyframe to the next (`Index.keyframe_gap`)."""
    return index(path).keyframe_gap()


# ---------------------------------------------------------------- decoding

class Cursor:
    """Decodes one open video stream forward and returns the frame shown at each time asked: the last frame that
    starts at or before it, `tolerance_s` allowed.

    Times asked between two seeks must not decrease. The caller decides when to `seek` (a new cursor must seek
    first), from the frame last `shown` and the one decoded `ahead` of it, and what it refuses; PyAV's errors
    (clips.read_errors()) reach it as they are, for it to word."""

    def __init__(self, container, stream, tolerance_s: float):
        self.container, self.stream, self.tolerance_s = container, stream, tolerance_s
        self.frames: Iterator | None = None     # the decoder's frames since the last seek
        self.shown = None                        # the frame `at` returned last
        self.ahead = None                        # the frame decoded after it, past the last time asked

    def seek(self, t: float) -> None:
        """Go to the keyframe at or before `t`."""
        self.container.seek(max(0, int(t / self.stream.time_base)), stream=self.stream, backward=True)
        self.frames = (f for f in self.container.decode(self.stream) if f.time is not None)
        self.shown = self.ahead = None

    def at(self, t: float):
        """The frame shown at `t`, decoding on from the last one; None when no frame since the last seek starts by
        t + tolerance_s (`ahead` is then the first one, or None at the end of the stream)."""
        while self.ahead is None or self.ahead.time <= t + self.tolerance_s:
            if self.ahead is not None:
                self.shown = self.ahead
            self.ahead = next(self.frames, None)
            if self.ahead is None:
                break
        return self.shown


def decode_frames(path: Path, fps: int, episode: int | None = None):
    """Yield (k, frame) for every frame of the file in presentation order, k = its time * fps rounded."""
    with open_stream(path, episode) as src:
        stream = src.streams.video[0]
        tb = Fraction(stream.time_base)
        for packet in demux_checked(src.demux(stream), path, episode):
            for frame in decode_checked(packet, path, episode):
                if frame.pts is not None:
                    yield round(frame.pts * tb * fps), frame
