"""Encoding frames into mp4 files, and measuring what the encoding cost (PSNR).

Lossy encoding uses lerobot's settings (its VideoEncoderConfig: libsvtav1, yuv420p, g=2, crf=30, preset 12);
re-encoded clips (a cut that does not start on a keyframe: lerodoc.media.video) are lossless instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from lerodoc.files import new_file

ENCODERS = {"h264": "libx264", "av1": "libsvtav1", "hevc": "libx265", "mpeg4": "mpeg4"}
# Re-encoded clips are lossless in the decoded (YUV) domain, so a cut changes no pixel.
LOSSLESS = {"libx264": {"qp": "0", "preset": "veryfast"}, "libsvtav1": {"svtav1-params": "lossless=1"},
            "libx265": {"x265-params": "lossless=1"}}
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


def psnr(a, b) -> float:
    """Peak signal-to-noise ratio (dB) of two uint8 images; inf when equal."""
    mse = float(np.mean((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)
