"""Video containers without decoding: probe, concatenate and cut by stream copy (remux).

Every timestamp lerodoc writes comes from the packets of the file it wrote, not from sums of
durations. Decoding happens only for the rare cut that does not start on a keyframe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import av

from lerodoc import mp4
# re-exported: the clip primitives live in lerodoc.clips, which mp4 shares
from lerodoc import access
from lerodoc.clips import (READ_ERRORS, Clip, NotOnKeyframe, Written, fits_grid, grid_deviation,  # noqa: F401
                           grid_time_base, reason, window_ticks)
from lerodoc.errors import LerodocError
from lerodoc.files import new_file

ENCODERS = {"h264": "libx264", "av1": "libsvtav1", "hevc": "libx265", "mpeg4": "mpeg4"}
# Re-encoded clips are lossless in the decoded (YUV) domain, so a cut changes no pixel.
LOSSLESS = {"libx264": {"qp": "0", "preset": "veryfast"}, "libsvtav1": {"svtav1-params": "lossless=1"},
            "libx265": {"x265-params": "lossless=1"}}


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


NO_CODEC = "its video stream names no codec FFmpeg knows (damaged sample description?)"


def open_video(path: Path | str, **options):
    """av.open for reading. Metadata tags (moov/udta, stream tags) that are not UTF-8 are read with
    replacement characters, as lerodoc never uses them: PyAV's strict default turns one flipped bit in an
    encoder tag into a UnicodeDecodeError for a file whose frames are intact."""
    return av.open(_av_source(path), metadata_errors="replace", **options)


def _av_source(path):
    """What av.open reads: a local path as text, a hub file as a range-reading file object (lerodoc.access)."""
    return access.source(path) if access.is_remote(path) else str(path)


def strict_tags(path: Path | str) -> bool:
    """Whether PyAV's default, strict, reader opens the file, i.e. its metadata tags are UTF-8: lerobot's pyav
    backend reads that way, so a file lerodoc writes must pass (other faults are reported where they matter)."""
    try:
        with av.open(_av_source(path)):
            return True
    except UnicodeDecodeError:
        return False
    except READ_ERRORS:
        return True


def _open(path: Path, episode: int | None = None):
    try:
        container = open_video(path)
    except READ_ERRORS as exc:
        raise LerodocError(f"cannot open video ({reason(exc)})", file=path, episode=episode) from None
    if not container.streams.video:
        container.close()
        raise LerodocError("has no video stream", file=path, episode=episode)
    if container.streams.video[0].codec_context is None:
        container.close()
        raise LerodocError(f"cannot open video ({NO_CODEC})", file=path, episode=episode)
    return container


def probe(path: Path, count_packets: bool = False) -> Probe:
    """Container facts; `count_packets` demuxes (never decodes) when the header has no frame count."""
    with _open(path) as container:
        stream = container.streams.video[0]
        ctx = stream.codec_context
        frames = stream.frames
        if count_packets or not frames:
            frames = sum(1 for p in _demux_checked(container.demux(stream), access.path(path), None) if p.size)
        duration = (float(stream.duration * stream.time_base) if stream.duration
                    else (container.duration or 0) / av.time_base)
        rate = stream.average_rate or stream.base_rate or 0
        return Probe(codec=ctx.codec.canonical_name, width=ctx.width, height=ctx.height,
                     pix_fmt=ctx.pix_fmt, fps=float(rate), time_base=Fraction(stream.time_base),
                     frames=frames, duration_s=duration, bit_rate=ctx.bit_rate or None,
                     size_bytes=access.path(path).stat().st_size)


def signature(path: Path, episode: int | None = None) -> tuple:
    """What must be equal for two files to be joined by stream copy: the sample description and time
    scale from the mp4 headers, or codec, size, time base and codec headers as FFmpeg reports them."""
    try:
        track = mp4.read_track(path)
        return ("mp4", track.timescale, hashlib.blake2b(track.stsd, digest_size=8).hexdigest())
    except mp4.Unsupported:
        pass
    with _open(path, episode) as container:
        stream = container.streams.video[0]
        ctx = stream.codec_context
        return (ctx.codec.canonical_name, ctx.width, ctx.height, ctx.pix_fmt, Fraction(stream.time_base),
                hashlib.blake2b(ctx.extradata or b"", digest_size=8).hexdigest())


def time_base(path: Path, episode: int | None = None) -> Fraction:
    """The video stream's time base: the mp4 header's timescale, else what PyAV says."""
    try:
        return Fraction(1, mp4.read_track(path).timescale)
    except mp4.Unsupported:
        pass
    with _open(path, episode) as container:
        return Fraction(container.streams.video[0].time_base)


def _clip_packets(container, clip: Clip, fps: int, episode: int | None):
    """Yield the clip's packets (demux order); seeks to the keyframe before the window first."""
    stream = container.streams.video[0]
    lo, hi = window_ticks(clip, Fraction(stream.time_base), fps)
    if lo is not None and lo > 0:
        container.seek(max(lo, 0), stream=stream, backward=True, any_frame=False)
    for packet in container.demux(stream):
        if packet.dts is None or packet.pts is None or not packet.size:
            continue
        if packet.is_corrupt:
            raise LerodocError(f"video packet at {float(packet.pts * stream.time_base):.3f} s is damaged "
                               "(truncated or corrupt file)", file=clip.path, episode=episode)
        if lo is not None and packet.pts <= lo:
            continue
        if hi is not None and packet.pts > hi:
            if packet.dts > hi:
                break
            continue
        yield packet


def _demux_checked(packets, path: Path, episode: int | None):
    """Pass packets through, turning a demuxer failure (truncated or corrupt file) into a clear error."""
    try:
        yield from packets
    except READ_ERRORS as exc:
        raise LerodocError(f"cannot read video packets ({reason(exc)})", file=path, episode=episode) from None


def concat(clips: list[Clip], out: Path, fps: int, episodes: list[int] | None = None) -> list[Written]:
    """Write the clips back to back into `out` by stream copy, then read the file back.

    Every clip must start on a keyframe and share codec parameters with the first; otherwise a
    LerodocError names the clip. Returns each clip's window in the written file. Plain mp4 files are
    joined at box level (lerodoc.mp4); anything that path does not handle is remuxed packet by packet.
    """
    episodes = episodes or [None] * len(clips)
    try:
        return mp4.concat(clips, out, fps, episodes)
    except mp4.Unsupported:
        pass
    digests, counts, retimed = [], [], []
    with new_file(out) as tmp, av.open(str(tmp), "w", format="mp4") as dst:   # never into a link
        ostream, extradata, cursor = None, None, 0
        for clip, episode in zip(clips, episodes):
            with _open(clip.path, episode) as src:
                stream = src.streams.video[0]
                if ostream is None:
                    ostream = dst.add_stream_from_template(stream, opaque=True)
                    ostream.time_base = stream.time_base if fits_grid(stream.time_base, fps) else grid_time_base(fps)
                    extradata = stream.codec_context.extradata
                elif (stream.codec.canonical_name, stream.codec_context.extradata) != (ostream.codec.canonical_name,
                                                                                    extradata):
                    raise LerodocError("codec parameters differ from the first clip of this file, so it cannot "
                                       "be joined by stream copy", file=clip.path, episode=episode)
                src_tb, out_tb = Fraction(stream.time_base), Fraction(ostream.time_base)
                retime = not fits_grid(src_tb, fps)
                step = Fraction(1, fps) / out_tb   # ticks per frame on the output grid (whole when retiming)
                digest, n, first, end, last_dts, slots = hashlib.blake2b(digest_size=16), 0, None, None, None, set()
                for packet in _demux_checked(_clip_packets(src, clip, fps, episode), clip.path, episode):
                    if first is None:
                        if not packet.is_keyframe:
                            raise NotOnKeyframe(clip.path, episode)
                        first = packet.pts
                    duration = packet.duration or round(1 / (fps * src_tb))
                    end = max(end or 0, packet.pts + duration)
                    digest.update(bytes(packet))
                    if retime:   # each frame onto its nearest k/fps slot, one frame per slot
                        slot = round((packet.pts - first) * src_tb * fps)
                        dts = cursor + int(round((packet.dts - first) * src_tb * fps) * step)
                        if slot in slots or (last_dts is not None and dts <= last_dts):
                            raise LerodocError(f"two frames fall into one 1/{fps} s slot near "
                                               f"{float(packet.pts * src_tb):.4f} s, so the frames cannot be "
                                               "re-timed onto the frame grid without guessing", file=clip.path,
                                               episode=episode, hint="re-encode the video at a constant frame rate")
                        slots.add(slot)
                        packet.pts, packet.dts, packet.duration = cursor + int(slot * step), dts, int(step)
                        last_dts = dts
                    else:
                        packet.pts = cursor + round((packet.pts - first) * src_tb / out_tb)
                        packet.dts = cursor + round((packet.dts - first) * src_tb / out_tb)
                        packet.duration = round(duration * src_tb / out_tb)
                    packet.time_base = ostream.time_base
                    packet.stream = ostream
                    dst.mux(packet)
                    n += 1
                if not n:
                    raise LerodocError(f"holds no frames in [{clip.from_timestamp}, {clip.to_timestamp})",
                                       file=clip.path, episode=episode)
                if retime:
                    cursor += int(round((end - first) * src_tb * fps) * step)
                else:
                    cursor += round((end - first) * src_tb / out_tb)
                digests.append(digest.hexdigest())
                counts.append(n)
                retimed.append(retime)
    return [replace(w, retimed=r) for w, r in zip(read_back(out, counts, digests, fps), retimed)]


def read_back(path: Path, counts: list[int], digests: list[str], fps: int) -> list[Written]:
    """Split a written file into consecutive clips of `counts` packets and check their payloads."""
    with _open(path) as container:
        stream = container.streams.video[0]
        tb = Fraction(stream.time_base)
        packets = [(p.pts, p.duration, bytes(p)) for p in _demux_checked(container.demux(stream), path, None)
                   if p.size]
    if len(packets) != sum(counts):
        raise VerifyError(f"holds {len(packets)} packets, expected {sum(counts)}", path)
    written, start = [], 0
    bounds = []
    for count in counts:
        chunk = packets[start:start + count]
        bounds.append((min(p[0] for p in chunk), max(p[0] + (p[1] or round(1 / (fps * tb))) for p in chunk)))
        start += count
    start = 0
    for (lo, hi), count, expected in zip(bounds, counts, digests):
        digest = hashlib.blake2b(digest_size=16)
        for _, _, payload in packets[start:start + count]:
            digest.update(payload)
        if digest.hexdigest() != expected:
            raise VerifyError("packet payloads differ from the source clip", path)
        written.append(Written(float(lo * tb), float(hi * tb), count, expected))
        start += count
    return written


def linkable(clips: list[Clip], fps: int, episodes: list[int]) -> list[Written] | None:
    """Where `clips` lie in their one source file, when that whole file can be reused as it is: the clips tile
    it, its sample tables can be read, its time base is on the k/fps grid and its tags are UTF-8. None when not
    (the clips are then joined anew by `concat`)."""
    source = clips[0].path
    try:
        track = mp4.read_track(source)
        if not fits_grid(Fraction(1, track.timescale), fps):
            return None      # re-timed by concat's remux
        parts = [mp4.select(track, clip, fps, episode) for clip, episode in zip(clips, episodes)]
    except (mp4.Unsupported, NotOnKeyframe):
        return None
    if [p.start for p in parts] != [0] + [p.stop for p in parts[:-1]] or parts[-1].stop != len(track.pts):
        return None      # the clips do not tile the file
    if not strict_tags(source):
        return None      # tags that are not UTF-8: written anew by concat's remux
    tb = Fraction(1, track.timescale)
    return [Written(float(track.pts[p.start:p.stop].min() * tb),
                    float((track.pts[p.start:p.stop] + track.delta[p.start:p.stop]).max() * tb),
                    p.stop - p.start, "") for p in parts]


def starts_on_keyframe(clip: Clip, fps: int, episode: int | None = None) -> bool:
    """Whether the clip's first frame (in decode order) is a keyframe, so that it can be cut by stream copy:
    from the mp4 sample tables, or from the first packet PyAV demuxes in the window."""
    try:
        mp4.select(mp4.read_track(clip.path), clip, fps, episode)
        return True
    except NotOnKeyframe:
        return False
    except mp4.Unsupported:
        pass
    with _open(clip.path, episode) as src:
        for packet in _demux_checked(_clip_packets(src, clip, fps, episode), clip.path, episode):
            return bool(packet.is_keyframe)
    return True


def cut(clip: Clip, out: Path, fps: int, episode: int | None = None) -> Written:
    """Copy one clip into its own file; re-encode it only when it does not start on a keyframe."""
    try:
        return concat([clip], out, fps, [episode])[0]
    except NotOnKeyframe:
        return reencode(clip, out, fps, episode)


def reencode(clip: Clip, out: Path, fps: int, episode: int | None = None) -> Written:
    """Decode the clip's frames (from the keyframe before it) and encode them into `out`."""
    with _open(clip.path, episode) as src:
        stream = src.streams.video[0]
        tb = Fraction(stream.time_base)
        lo, hi = window_ticks(clip, tb, fps)
        codec = stream.codec_context
        if not (codec.pix_fmt and codec.width and codec.height):
            raise LerodocError(f"cannot re-encode the clip: the stream's pixel format or size is unknown "
                               f"({codec.pix_fmt}, {codec.width}x{codec.height}; damaged header?)",
                               file=clip.path, episode=episode)
        with new_file(out) as tmp, av.open(str(tmp), "w", format="mp4") as dst:   # never into a link
            encoder = ENCODERS.get(codec.codec.canonical_name, codec.codec.canonical_name)
            ostream = dst.add_stream(encoder, rate=fps, options=LOSSLESS.get(encoder, {}))
            ostream.width, ostream.height, ostream.pix_fmt = codec.width, codec.height, codec.pix_fmt
            if lo is not None and lo > 0:
                try:
                    src.seek(lo, stream=stream, backward=True, any_frame=False)
                except READ_ERRORS as exc:
                    raise LerodocError(f"cannot seek in the video ({reason(exc)})", file=clip.path,
                                       episode=episode) from None

            def window():
                for packet in _demux_checked(src.demux(stream), clip.path, episode):
                    for frame in _decode_checked(packet, clip.path, episode):
                        if frame.pts is None or (lo is not None and frame.pts <= lo):
                            continue
                        if hi is not None and frame.pts > hi:
                            break
                        yield frame
            n = mux_encoded(dst, ostream, enumerate(window()), fps)
    probe_ = probe(out, count_packets=True)
    if probe_.frames != n:
        raise VerifyError(f"re-encoded clip holds {probe_.frames} frames, expected {n}", out)
    return Written(0.0, n / fps, n, "", reencoded=True)


def _decode_checked(packet, path: Path, episode: int | None) -> list:
    """The packet's frames, turning a decoder failure (a damaged packet) into a clear error."""
    try:
        return packet.decode()
    except READ_ERRORS as exc:
        raise LerodocError(f"cannot decode video frames ({reason(exc)})", file=path, episode=episode) from None


class VerifyError(LerodocError):
    def __init__(self, message: str, path: Path):
        from lerodoc.errors import ExitCode
        super().__init__(message, file=path)
        self.exit_code = ExitCode.VERIFY_FAILED


# ---------------------------------------------------------------- encoding (lerodoc encode)
# Lossy encoding with lerobot's settings (its VideoEncoderConfig: libsvtav1, yuv420p, g=2, crf=30, preset 12).
# the codecs `lerodoc encode --codec` offers (mpeg4 is only for re-encoding clips of mpeg4 sources)
CODECS = {c: e for c, e in ENCODERS.items() if c != "mpeg4"}


@dataclass(frozen=True)
class EncodeSettings:
    """What `encode_frames` encodes with; `preset` None is lerobot's default (12 for libsvtav1, the
    encoder's own otherwise)."""
    codec: str = "av1"
    gop: int = 2
    crf: int = 30
    pix_fmt: str = "yuv420p"
    preset: str | None = None
    threads: int | None = None    # per encoder; None lets the encoder decide

    @property
    def encoder(self) -> str:
        return CODECS[self.codec]

    @property
    def preset_used(self) -> str | None:
        return self.preset if self.preset is not None else ("12" if self.encoder == "libsvtav1" else None)

    def options(self) -> dict[str, str]:
        """The codec options lerobot's VideoEncoderConfig.get_codec_options gives for the same settings."""
        opts = {"g": str(self.gop), "crf": str(self.crf)}
        if self.preset_used is not None:
            opts["preset"] = self.preset_used
        if self.encoder == "libsvtav1":
            opts["svtav1-params"] = "fast-decode=0" + (f":lp={self.threads}" if self.threads else "")
        elif self.threads:
            opts["threads"] = str(self.threads)
        if self.encoder == "libx265":
            opts["x265-params"] = "log-level=error"
        return opts


def can_encode(codec: str) -> bool:
    """Whether this PyAV build has the encoder lerodoc uses for `codec` (h264, av1, hevc)."""
    try:
        av.codec.Codec(CODECS[codec], "w")
        return True
    except (KeyError, ValueError, av.FFmpegError):
        return False


def encode_frames(frames, out: Path, fps: int, settings: EncodeSettings, width: int, height: int) -> int:
    """Encode `frames` ((k, av.VideoFrame): frame k shown at k/fps) into the mp4 `out`; returns the count."""
    import os
    os.environ.setdefault("SVT_LOG", "1")   # SVT-AV1 prints its banner and config on stderr otherwise
    with new_file(out) as tmp, av.open(str(tmp), "w", format="mp4") as dst:   # never into a link
        stream = dst.add_stream(settings.encoder, rate=fps, options=settings.options())
        stream.width, stream.height, stream.pix_fmt = width, height, settings.pix_fmt
        return mux_encoded(dst, stream, frames, fps)


def mux_encoded(dst, stream, frames, fps: int) -> int:
    """Encode (k, frame) pairs, frame k shown at k/fps, with `stream` (the encoder picks the frame types), mux
    the packets into `dst` and flush the encoder; returns how many frames went in."""
    n = 0
    for k, frame in frames:
        frame.pts, frame.time_base = k, Fraction(1, fps)
        frame.pict_type = av.video.frame.PictureType.NONE
        for packet in stream.encode(frame):
            dst.mux(packet)
        n += 1
    for packet in stream.encode(None):
        dst.mux(packet)
    return n


def decode_frames(path: Path, fps: int, episode: int | None = None):
    """Yield (k, frame) for every frame of the file in presentation order, k = its time * fps rounded."""
    with _open(path, episode) as src:
        stream = src.streams.video[0]
        tb = Fraction(stream.time_base)
        for packet in _demux_checked(src.demux(stream), path, episode):
            for frame in _decode_checked(packet, path, episode):
                if frame.pts is not None:
                    yield round(frame.pts * tb * fps), frame


def frames_at(container, stream, targets: list[float], gap_s: float, tolerance_s: float) -> Iterator:
    """The frame shown at each of `targets` (seconds in the file, ascending): the last one starting at or before
    it (within `tolerance_s`), or the first decoded when none does; None where nothing decodes. One decode runs
    forward through the open `container`: it seeks (to the keyframe before a target) only where the target lies
    more than `gap_s`, the longest keyframe interval, past the last frame decoded, so no seek goes back.
    Frames are yielded as found, so a decode error later in the file leaves the earlier ones to the caller."""
    frames, shown, ahead = None, None, None
    for target in targets:
        last = ahead if ahead is not None else shown
        if frames is None or last is None or target - last.time > gap_s:
            container.seek(max(0, int(target / stream.time_base)), stream=stream, backward=True)
            frames, shown, ahead = (f for f in container.decode(stream) if f.time is not None), None, None
        while ahead is None or ahead.time <= target + tolerance_s:
            if ahead is not None:
                shown = ahead
            ahead = next(frames, None)
            if ahead is None:
                break
        yield shown if shown is not None else ahead


def keyframe_gap(path: Path) -> int:
    """The longest run of frames from one keyframe to the next (the whole file when it has one keyframe):
    from the mp4 sample tables, or by demuxing."""
    try:
        sync = mp4.read_track(path).sync
    except mp4.Unsupported:
        with _open(path) as src:
            sync = [bool(p.is_keyframe) for p in _demux_checked(src.demux(src.streams.video[0]), path, None)
                    if p.size]
    keys = [i for i, s in enumerate(sync) if s] + [len(sync)]
    return max((b - a for a, b in zip(keys, keys[1:])), default=len(sync))


def psnr(a, b) -> float:
    """Peak signal-to-noise ratio (dB) of two uint8 images; inf when equal."""
    import numpy as np
    mse = float(np.mean((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)
