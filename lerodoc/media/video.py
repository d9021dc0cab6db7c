"""Video files written by stream copy: clips joined back to back and cut out, their packets copied as they are.

Every timestamp lerodoc writes comes from the packets of the file it wrote, not from sums of durations. Plain
mp4 files are joined at box level (lerodoc.media.mp4); anything else is remuxed packet by packet with PyAV. A cut that
does not start on a keyframe is the one case that decodes (lerodoc.media.frames) and encodes, losslessly
(lerodoc.media.encoding).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av

from lerodoc.media import mp4
from lerodoc.media.clips import (Clip, NotOnKeyframe, Written, fits_grid, grid_time_base, read_errors, reason,
                                 window_ticks)
from lerodoc.errors import ExitCode, LerodocError
from lerodoc.files import new_file
from lerodoc.media.encoding import ENCODERS, LOSSLESS, mux_encoded
from lerodoc.media.frames import decode_checked, demux_checked, open_stream, probe, strict_tags


def signature(path: Path, episode: int | None = None) -> tuple:
    """What must be equal for two files to be joined by stream copy: the sample description and time
    scale from the mp4 headers, or codec, size, time base and codec headers as FFmpeg reports them."""
    try:
        track = mp4.read_track(path)
        return ("mp4", track.timescale, hashlib.blake2b(track.stsd, digest_size=8).hexdigest())
    except mp4.Unsupported:
        pass
    with open_stream(path, episode) as container:
        stream = container.streams.video[0]
        ctx = stream.codec_context
        return (ctx.codec.canonical_name, ctx.width, ctx.height, ctx.pix_fmt, Fraction(stream.time_base),
                hashlib.blake2b(ctx.extradata or b"", digest_size=8).hexdigest())


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


def concat(clips: list[Clip], out: Path, fps: int, episodes: list[int] | None = None) -> list[Written]:
    """Write the clips back to back into `out` by stream copy, then read the file back.

    Every clip must start on a keyframe and share codec parameters with the first; otherwise a
    LerodocError names the clip. Returns each clip's window in the written file. Plain mp4 files are
    joined at box level (lerodoc.media.mp4); anything that path does not handle is remuxed packet by packet.
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
            with open_stream(clip.path, episode) as src:
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
                for packet in demux_checked(_clip_packets(src, clip, fps, episode), clip.path, episode):
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
    with open_stream(path) as container:
        stream = container.streams.video[0]
        tb = Fraction(stream.time_base)
        packets = [(p.pts, p.duration, bytes(p)) for p in demux_checked(container.demux(stream), path, None)
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
    with open_stream(clip.path, episode) as src:
        for packet in demux_checked(_clip_packets(src, clip, fps, episode), clip.path, episode):
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
    with open_stream(clip.path, episode) as src:
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
                except read_errors() as exc:
                    raise LerodocError(f"cannot seek in the video ({reason(exc)})", file=clip.path,
                                       episode=episode) from None

            def window():
                for packet in demux_checked(src.demux(stream), clip.path, episode):
                    for frame in decode_checked(packet, clip.path, episode):
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


class VerifyError(LerodocError):
    def __init__(self, message: str, path: Path):
        super().__init__(message, file=path)
        self.exit_code = ExitCode.VERIFY_FAILED
