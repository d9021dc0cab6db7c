"""lerodoc.media.mp4, the box-level fast path of video.concat / video.cut, against the PyAV remux path."""

from __future__ import annotations

import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import av.logging
import pytest

from lerodoc.media import mp4, video
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from tests.fixtures.factory import make_dataset
from tests.fixtures.identity import decode_identity
from tests.helpers import decode_all, packets

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


def episode_clip(fixture, episode: int) -> video.Clip:
    ds = Dataset.open(fixture.root)
    span = ds.episodes[episode].videos[CAMERA]
    return video.Clip(ds.path(span.file), span.from_timestamp, span.to_timestamp)


def pyav_concat(monkeypatch, clips: list[video.Clip], out: Path) -> list[video.Written]:
    """video.concat with the fast path switched off."""
    with monkeypatch.context() as patch:
        patch.setattr(mp4, "concat", lambda *args: (_ for _ in ()).throw(mp4.Unsupported("off")))
        return video.concat(clips, out, FPS)


def spans(written: list[video.Written]) -> list[tuple[float, float, int]]:
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
    clips = [video.Clip(episode_file(v21, e)) for e in range(3)]
    fast = mp4.concat(clips, tmp_path / "fast.mp4", FPS, [0, 1, 2])
    slow = pyav_concat(monkeypatch, clips, tmp_path / "slow.mp4")
    assert spans(fast) == spans(slow)
    assert [w.frames for w in fast] == v21.lengths
    assert packets(tmp_path / "fast.mp4") == packets(tmp_path / "slow.mp4")
    assert (tmp_path / "fast.mp4").read_bytes()[36:40] == b"moov"  # after the 32-byte ftyp: moov first
    assert_frames(tmp_path / "fast.mp4", v21, [0, 1, 2])
    assert_clean(tmp_path / "fast.mp4")


def test_the_parser_reads_what_ffmpeg_reads(v21, tmp_path):
    mp4.concat([video.Clip(episode_file(v21, e)) for e in (2, 0)], tmp_path / "out.mp4", FPS, [2, 0])
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
    with pytest.raises(video.NotOnKeyframe):
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
    clips = [video.Clip(episode_file(fixture, 0)), video.Clip(second)]
    with pytest.raises(mp4.Unsupported):
        mp4.concat(clips, tmp_path / "fast.mp4", FPS, [0, 1])
    written = video.concat(clips, tmp_path / "out.mp4", FPS, [0, 1])
    assert [w.frames for w in written] == fixture.lengths
    assert_frames(tmp_path / "out.mp4", fixture, [0, 1])


def test_different_codec_parameters_are_still_refused(tmp_path):
    a = make_dataset(tmp_path / "a", version="v2.1", episodes=1, cameras=(CAMERA,))
    b = make_dataset(tmp_path / "b", version="v2.1", episodes=1, cameras=(CAMERA,), height=96)
    clips = [video.Clip(episode_file(a, 0)), video.Clip(episode_file(b, 0))]
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
    parts = [mp4.select(mp4.read_track(episode_file(fixture, e)), video.Clip(episode_file(fixture, e)), FPS, e)
             for e in range(2)]
    out = mp4.layout(parts)
    mp4.write(tmp_path / "out.mp4", parts, out)
    mp4.verify(tmp_path / "out.mp4", parts, out)
    (start, end, frames), rest = out.spans[1], out.spans[2:]
    out.spans[1:] = [(start + 512, end, frames), *rest]
    with pytest.raises(mp4.Unsupported):
        mp4.verify(tmp_path / "out.mp4", parts, out)
