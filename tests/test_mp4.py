"""lerodoc.media.mp4, the box-level fast path of video.concat / video.cut, against the PyAV remux path; and what its
header reading says of a track (codec, size, pixel format, rate: `lerodoc info`) against what PyAV says."""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
from collections import Counter
from fractions import Fraction
from pathlib import Path

import av
import av.logging
import numpy as np
import pytest

from lerodoc.media import frames, mp4, video
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.media.clips import Clip, NotOnKeyframe, Written
from tests.fixtures.factory import make_dataset
from tests.fixtures.identity import decode_identity
from tests.helpers import decode_all, packets, require

FPS = 30
CAMERA = "observation.images.top"
CODECS = {"h264": {"codec": "h264"}, "h264-bframes": {"codec": "h264", "bframes": 2}, "av1": {"codec": "av1"}}


@pytest.fixture(scope="module", params=CODECS)
def v21(request, tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp(request.param), version="v2.1", episodes=3, cameras=(CAMERA,),
                        **CODECS[request.param])


@pytest.fixture(scope="module", params=CODECS)
def v30(request, tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp(request.param), version="v3.0", episodes=5, episodes_per_file=3,
                        gop=10, cameras=(CAMERA,), **CODECS[request.param])


def episode_file(fixture, episode: int) -> Path:
    return fixture.root / f"videos/chunk-000/{CAMERA}/episode_{episode:06d}.mp4"


def episode_clip(fixture, episode: int) -> Clip:
    ds = Dataset.open(fixture.root)
    span = ds.episodes[episode].videos[CAMERA]
    return Clip(ds.path(span.file), span.from_timestamp, span.to_timestamp)


def pyav_concat(monkeypatch, clips: list[Clip], out: Path) -> list[Written]:
    """video.concat with the fast path switched off."""
    with monkeypatch.context() as patch:
        patch.setattr(mp4, "concat", lambda *args: (_ for _ in ()).throw(mp4.Unsupported("off")))
        return video.concat(clips, out, FPS)


def spans(written: list[Written]) -> list[tuple[float, float, int]]:
    return [(w.from_timestamp, w.to_timestamp, w.frames) for w in written]


def assert_frames(path: Path, fixture, episodes: list[int]) -> None:
    """Frame k decodes at k/fps to the identity of the k-th frame of `episodes` played back to back."""
    frames = decode_all(path)
    want = [fixture.expected_identity(e, f, 0) for e in episodes for f in range(fixture.lengths[e])]
    assert [decode_identity(img) for _, img in frames] == want
    assert [t for t, _ in frames] == pytest.approx([k / FPS for k in range(len(want))], abs=1e-9)


def assert_clean(path: Path) -> None:
    """FFmpeg (ffprobe, and PyAV demuxing and decoding) reads the file without a warning."""
    if shutil.which("ffprobe"):
        probe = subprocess.run(["ffprobe", "-v", "warning", "-show_packets", str(path)],
                               capture_output=True, text=True)
        assert probe.returncode == 0 and probe.stderr == ""
    av.logging.set_level(av.logging.WARNING)
    try:
        with av.logging.Capture() as logs, av.open(str(path)) as container:
            for _ in container.decode(video=0):
                pass
    finally:
        av.logging.set_level(None)
    assert logs == []


def test_concat_matches_the_pyav_path(v21, tmp_path, monkeypatch):
    clips = [Clip(episode_file(v21, e)) for e in range(3)]
    fast = mp4.concat(clips, tmp_path / "fast.mp4", FPS, [0, 1, 2])
    slow = pyav_concat(monkeypatch, clips, tmp_path / "slow.mp4")
    assert spans(fast) == spans(slow)
    assert [w.frames for w in fast] == v21.lengths
    assert packets(tmp_path / "fast.mp4") == packets(tmp_path / "slow.mp4")
    assert (tmp_path / "fast.mp4").read_bytes()[36:40] == b"moov"  # after the 32-byte ftyp: moov first
    assert_frames(tmp_path / "fast.mp4", v21, [0, 1, 2])
    assert_clean(tmp_path / "fast.mp4")


def test_the_parser_reads_what_ffmpeg_reads(v21, tmp_path):
    mp4.concat([Clip(episode_file(v21, e)) for e in (2, 0)], tmp_path / "out.mp4", FPS, [2, 0])
    for path in (episode_file(v21, 1), tmp_path / "out.mp4"):
        track = mp4.read_track(path)
        with av.open(str(path)) as container:
            got = [(p.pts, p.dts, p.size, p.pos, p.is_keyframe, p.duration)
                   for p in container.demux(video=0) if p.size]
        assert got == list(zip(track.pts, track.dts - track.media_time, track.size, track.offset, track.sync,
                               track.delta))


def test_cuts_reproduce_the_source_episode(v30, tmp_path, monkeypatch):
    for episode in range(5):
        clip = episode_clip(v30, episode)
        fast = mp4.concat([clip], tmp_path / f"fast{episode}.mp4", FPS, [episode])
        slow = pyav_concat(monkeypatch, [clip], tmp_path / f"slow{episode}.mp4")
        assert spans(fast) == spans(slow) == [(0.0, v30.lengths[episode] / FPS, v30.lengths[episode])]
        assert packets(tmp_path / f"fast{episode}.mp4") == packets(tmp_path / f"slow{episode}.mp4")
        assert_frames(tmp_path / f"fast{episode}.mp4", v30, [episode])
    assert_clean(tmp_path / "fast4.mp4")


def test_concat_of_cuts_from_several_files(v30, tmp_path):
    clips = [episode_clip(v30, e) for e in (4, 1, 2)]
    written = video.concat(clips, tmp_path / "out.mp4", FPS, [4, 1, 2])
    ends = [sum(v30.lengths[e] for e in (4, 1, 2)[:k + 1]) / FPS for k in range(3)]
    assert [w.to_timestamp for w in written] == pytest.approx(ends, abs=1e-9)
    assert_frames(tmp_path / "out.mp4", v30, [4, 1, 2])
    assert_clean(tmp_path / "out.mp4")


def test_a_cut_off_a_keyframe_is_reencoded(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=2, cameras=(CAMERA,), gop=10,
                           keyframe_at_episode_start=False, lengths=[25, 25])
    clip = episode_clip(fixture, 1)
    with pytest.raises(NotOnKeyframe):
        mp4.concat([clip], tmp_path / "fast.mp4", FPS, [1])
    assert video.cut(clip, tmp_path / "cut.mp4", FPS, 1).reencoded
    assert_frames(tmp_path / "cut.mp4", fixture, [1])


def remux(src: Path, dst: Path, time_base: Fraction | None = None, **options: str) -> Path:
    """Copy src's packets into a new mp4, optionally with another time base or muxer options."""
    with av.open(str(src)) as source, av.open(str(dst), "w", format="mp4", options=options) as target:
        stream = source.streams.video[0]
        out = target.add_stream_from_template(stream, opaque=True)
        out.time_base = time_base or stream.time_base
        for packet in source.demux(stream):
            if packet.size:
                packet.stream = out
                target.mux(packet)
    return dst


@pytest.mark.parametrize("variant", ["time base", "fragmented"])
def test_what_the_fast_path_refuses_falls_back_to_pyav(tmp_path, variant):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2, cameras=(CAMERA,), bframes=2)
    if variant == "time base":
        second = remux(episode_file(fixture, 1), tmp_path / "90k.mp4", Fraction(1, 90000))
        assert mp4.read_track(second).timescale == 90000
    else:
        second = remux(episode_file(fixture, 1), tmp_path / "frag.mp4", movflags="frag_keyframe+empty_moov")
        with pytest.raises(mp4.Unsupported):
            mp4.read_track(second)
    clips = [Clip(episode_file(fixture, 0)), Clip(second)]
    with pytest.raises(mp4.Unsupported):
        mp4.concat(clips, tmp_path / "fast.mp4", FPS, [0, 1])
    written = video.concat(clips, tmp_path / "out.mp4", FPS, [0, 1])
    assert [w.frames for w in written] == fixture.lengths
    assert_frames(tmp_path / "out.mp4", fixture, [0, 1])


def test_different_codec_parameters_are_still_refused(tmp_path):
    a = make_dataset(tmp_path / "a", version="v2.1", episodes=1, cameras=(CAMERA,))
    b = make_dataset(tmp_path / "b", version="v2.1", episodes=1, cameras=(CAMERA,), height=96)
    clips = [Clip(episode_file(a, 0)), Clip(episode_file(b, 0))]
    with pytest.raises(mp4.Unsupported):
        mp4.concat(clips, tmp_path / "fast.mp4", FPS, [0, 1])
    with pytest.raises(LerodocError, match="codec parameters differ"):
        video.concat(clips, tmp_path / "out.mp4", FPS, [0, 1])


@pytest.mark.parametrize("mover", ["_sendfile", "_read_write"])
def test_every_copy_method_writes_the_same_file(tmp_path, monkeypatch, mover):
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=3, episodes_per_file=3, cameras=(CAMERA,))
    clips = [episode_clip(fixture, e) for e in (2, 0)]
    mp4.concat(clips, tmp_path / "default.mp4", FPS, [2, 0])
    monkeypatch.setattr(mp4, "MOVERS", [getattr(mp4, mover)])
    mp4.concat(clips, tmp_path / "other.mp4", FPS, [2, 0])
    assert (tmp_path / "other.mp4").read_bytes() == (tmp_path / "default.mp4").read_bytes()


def test_verify_rejects_tables_that_read_back_wrong(tmp_path):
    fixture = make_dataset(tmp_path / "src", version="v2.1", episodes=2, cameras=(CAMERA,))
    parts = [mp4.select(mp4.read_track(episode_file(fixture, e)), Clip(episode_file(fixture, e)), FPS, e)
             for e in range(2)]
    out = mp4.layout(parts)
    mp4.write(tmp_path / "out.mp4", parts, out)
    mp4.verify(tmp_path / "out.mp4", parts, out)
    (start, end, frames), rest = out.spans[1], out.spans[2:]
    out.spans[1:] = [(start + 512, end, frames), *rest]
    with pytest.raises(mp4.Unsupported):
        mp4.verify(tmp_path / "out.mp4", parts, out)


# ---------------------------------------------------------------- what the header says of a track (lerodoc info)

ROOT = Path(__file__).resolve().parents[1]
G1 = ROOT.parent / "shared/data/g1_v21"
ZOO_VIDEOS = sorted((ROOT / "tests/zoo/members").glob("*/videos/**/*.mp4"))
# A file made here for every format mp4.PIX_FMTS names, (codec, bit depth, chroma format): the encoder and the pixel
# format it is given. This machine's PyAV encodes with libx264, libx265 and libsvtav1 (4:2:0, 8 and 10-bit only).
MADE = {
    ("av1", 8, 1): ("libsvtav1", "yuv420p"), ("av1", 10, 1): ("libsvtav1", "yuv420p10le"),
    ("h264", 8, 0): ("libx264", "gray"), ("h264", 8, 1): ("libx264", "yuv420p"), ("h264", 8, 2): ("libx264", "yuv422p"),
    ("h264", 8, 3): ("libx264", "yuv444p"), ("h264", 10, 0): ("libx264", "gray10le"),
    ("h264", 10, 1): ("libx264", "yuv420p10le"), ("h264", 10, 2): ("libx264", "yuv422p10le"),
    ("h264", 10, 3): ("libx264", "yuv444p10le"),
    ("hevc", 8, 0): ("libx265", "gray"), ("hevc", 10, 0): ("libx265", "gray10le"), ("hevc", 12, 0): ("libx265", "gray12le"),
    ("hevc", 8, 2): ("libx265", "yuv422p"), ("hevc", 10, 1): ("libx265", "yuv420p10le"),
    ("hevc", 12, 1): ("libx265", "yuv420p12le"), ("hevc", 10, 2): ("libx265", "yuv422p10le"),
}
# Formats whose name FFmpeg takes from the colour signal in the bitstream ("yuvj..." for full range, "gbrp" for an
# RGB matrix): the header reading leaves them to PyAV (the HEVC SPS, holding that signal, is not parsed).
ASKS_PYAV = [("libx264", "yuvj420p", None), ("libx264", "yuv444p", "jpeg"), ("libx264", "gray", "jpeg"),
             ("libx265", "yuv420p", None), ("libx265", "yuvj420p", None), ("libx265", "yuv444p", None),
             ("libx265", "gbrp", None)]


def encode(path: Path, encoder: str, pix_fmt: str, color_range: str | None = None, fps: int = 30) -> Path:
    """Six frames of noise, 64x48, in an mp4."""
    require(encoder in av.codecs_available, f"PyAV has no {encoder} encoder")
    with av.open(str(path), "w") as out:
        stream = out.add_stream(encoder, rate=fps)
        stream.width, stream.height, stream.pix_fmt = 64, 48, pix_fmt
        if color_range:
            stream.codec_context.color_range = av.video.reformatter.ColorRange[color_range.upper()]
        for i in range(6):
            image = np.random.default_rng(i).integers(0, 256, (48, 64, 3), dtype=np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode())
    return path


def pyav_says(path: Path) -> frames.VideoFormat:
    found = frames.probe(path)
    return frames.VideoFormat(found.codec, found.width, found.height, found.pix_fmt, found.fps)


def header_says(path: Path) -> frames.VideoFormat:
    track = mp4.read_track(path)
    picture = mp4.picture(track)
    return frames.VideoFormat(picture.codec, picture.width, picture.height, picture.pix_fmt,
                              float(mp4.average_rate(track)))


def test_every_format_the_header_names_is_made_here():
    assert set(MADE) == {(codec, *key) for codec, names in mp4.PIX_FMTS.items() for key in names}


@pytest.mark.parametrize("key", MADE, ids=lambda key: "-".join(map(str, key)))
def test_the_header_names_what_pyav_names(key, tmp_path):
    path = encode(tmp_path / "v.mp4", *MADE[key])
    said = header_says(path)
    assert said == pyav_says(path) and said.codec == key[0]
    assert frames.video_format(path) == said


@pytest.mark.parametrize("encoder, pix_fmt, color_range", ASKS_PYAV)
def test_what_the_header_does_not_settle_is_asked_of_pyav(encoder, pix_fmt, color_range, tmp_path):
    path = encode(tmp_path / "v.mp4", encoder, pix_fmt, color_range)
    with pytest.raises(mp4.Unsupported):
        header_says(path)
    assert frames.video_format(path) == pyav_says(path)


def test_the_header_of_every_zoo_and_shared_video_says_what_pyav_says():
    """Every mp4 lerobot wrote in the writer zoo (AV1 and H.264, at several rates) and the G1 recordings."""
    require(G1.is_dir(), f"{G1} is absent")
    paths = ZOO_VIDEOS + sorted(G1.glob("videos/**/*.mp4"))
    said = {path: header_says(path) for path in paths}
    assert {path: pyav_says(path) for path in paths} == said
    assert {f.codec for f in said.values()} == {"av1", "h264"} and len({f.fps for f in said.values()}) > 2


def test_a_damaged_sample_description_is_asked_of_pyav_or_named(tmp_path):
    """Bits flipped, bytes zeroed and box sizes changed in the sample description (its entry, the configuration
    box): video_format reads the header, or falls back to PyAV, or raises a LerodocError naming the file; nothing
    else escapes. (Where a damaged header still reads, its word may differ from the decoder's: a frame size, or a
    pixel format the decoder cannot find; validate --videos is what finds the damage.)"""
    sources = [next(p for p in ZOO_VIDEOS if header_says(p).codec == codec) for codec in ("av1", "h264")]
    sources.append(encode(tmp_path / "hevc.mp4", *MADE[("hevc", 10, 1)]))
    rng = random.Random(7)
    outcomes = Counter()
    for source in sources:
        data = source.read_bytes()
        stsd = data.index(b"stsd") - 4
        end = stsd + struct.unpack_from(">I", data, stsd)[0]
        config = max(data.find(kind, stsd, end) for kind in (b"av1C", b"avcC", b"hvcC")) - 4
        for i in range(60):
            raw = bytearray(data)
            if i % 3 == 0:
                for _ in range(rng.randint(1, 3)):
                    raw[rng.randrange(stsd + 16, end)] ^= 1 << rng.randrange(8)
            elif i % 3 == 1:
                start, length = rng.randrange(config, end), rng.randint(1, 8)
                raw[start:start + length] = bytes(len(raw[start:start + length]))
            else:
                struct.pack_into(">I", raw, rng.choice([config, stsd + 16]), rng.randrange(0, 200))
            path = tmp_path / f"{source.stem}-{i}.mp4"
            path.write_bytes(raw)
            try:
                header = header_says(path)
            except mp4.Unsupported:
                header = None
            try:
                said = frames.video_format(path)
            except LerodocError as exc:
                assert header is None and exc.file == str(path), exc
                outcomes["named"] += 1
                continue
            assert said == (header or pyav_says(path))
            outcomes["header" if header else "pyav"] += 1
    assert outcomes["header"] and outcomes["pyav"] and outcomes["named"], outcomes
