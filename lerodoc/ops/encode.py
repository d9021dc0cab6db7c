"""Encode image features into video features, or re-encode video features with other settings.

Images: every (camera, episode) is encoded on its own, in parallel, from the PNG/JPEG frames stored in
the parquet (lerobot's settings by default: AV1, yuv420p, GOP 2, CRF 30). v3.0 episodes of a camera are
then joined into `videos/<key>/chunk-XXX/file-XXX.mp4` files by stream copy (`rewrite.write_videos`), v2.1
keeps one file per episode. The data files go through `ops.derive` without their image columns (every
other column checksummed on both sides); info.json gets lerobot's video metadata. The image stats stay as
they are: they describe the same frames, in the same (C,1,1) form lerobot gives video stats.

Re-encoding: a video file changes only where a requested setting (codec, GOP measured from the file, CRF
recorded in info.json, pixel format) differs from what it has; each such file is decoded and encoded
again in parallel, every frame keeping its time, so the episodes' windows stay valid. Every other file
is a hard link.

Both check frame counts against the episodes' lengths and report PSNR against the source frames on a
few frames per file.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import av
import numpy as np

from lerodoc import formats
from lerodoc.media import clips, encoding
from lerodoc.media.clips import window_frames
from lerodoc.dataset import Dataset, read_rows
from lerodoc.formats.model import VideoSpan
from lerodoc.errors import LerodocError, UsageError, VerificationError
from lerodoc.formats import v21
from lerodoc.formats.jsonl import write_json
from lerodoc.formats.paths import inside
from lerodoc.media.frames import decode_frames, keyframe_gap, probe as probe_video
from lerodoc.ops import rewrite
from lerodoc.ops.derive import as_written, derive
from lerodoc.ops.features import FeatureEdit
from lerodoc.run.parallel import pmap
from lerodoc.promote.staging import output_target, scratch_beside, staged_edit
from lerodoc.conventions import INFO_PATH
from lerodoc.formats.jsonl import read_json

SAMPLES = 3            # frames per file compared with the source for the PSNR report
IMAGE_CODECS = {b"\x89PNG": "png", b"\xff\xd8\xff": "mjpeg"}


@dataclass
class EncodeReport:
    dataset: str
    output: str | None
    mode: str                                   # "images" (to video) or "reencode"
    settings: dict = field(default_factory=dict)
    cameras: list[str] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)   # {camera, file, frames, changed, why, psnr_db}
    encoded: int = 0                            # files (re-encode) or episode clips (images) encoded
    unchanged: int = 0                          # files kept as they were
    psnr_min_db: float | None = None
    psnr_mean_db: float | None = None
    workers: int = 1
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def settings_of(codec: str | None, gop: int | None, crf: int | None, pix_fmt: str | None,
                preset: str | None = None) -> encoding.EncodeSettings:
    """The settings asked for, lerobot's defaults for the rest; a codec this PyAV cannot encode is refused."""
    base = encoding.EncodeSettings()
    settings = encoding.EncodeSettings(codec=codec or base.codec, gop=gop or base.gop,
                                       crf=base.crf if crf is None else crf, pix_fmt=pix_fmt or base.pix_fmt,
                                       preset=preset)
    check_settings(settings)
    return settings


def check_settings(settings: encoding.EncodeSettings) -> None:
    if settings.codec not in encoding.CODECS:
        raise UsageError(f"--codec {settings.codec!r}: expected one of {', '.join(encoding.CODECS)}")
    if not encoding.can_encode(settings.codec):
        raise LerodocError(f"this PyAV build (av {av.__version__}) has no {settings.encoder} encoder, so it "
                           f"cannot encode {settings.codec}", field="codec",
                           hint="choose --codec " + " or ".join(c for c in encoding.CODECS if encoding.can_encode(c)))
    if settings.pix_fmt not in [f.name for f in av.codec.Codec(settings.encoder, "w").video_formats or []]:
        raise UsageError(f"--pix-fmt {settings.pix_fmt!r}: {settings.encoder} cannot encode it", field="pix_fmt")
    if settings.gop < 1 or settings.crf < 0:
        raise UsageError("--gop must be 1 or more and --crf 0 or more")


def video_info(path: Path, settings: encoding.EncodeSettings) -> dict:
    """The `info` block lerobot 0.6.1 writes for a video feature (get_video_info with its encoder config)."""
    probe = probe_video(path)
    channels = {"gray": 1, "gray12le": 1, "yuva420p": 4, "rgba": 4}.get(probe.pix_fmt or "", 3)
    return {"video.height": probe.height, "video.width": probe.width, "video.codec": probe.codec,
            "video.pix_fmt": probe.pix_fmt, "video.fps": round(probe.fps), "video.channels": channels,
            "has_audio": False, "video.g": settings.gop, "video.crf": settings.crf,
            "video.preset": int(settings.preset_used) if (settings.preset_used or "").isdigit()
            else settings.preset_used, "video.fast_decode": 0, "video.video_backend": "pyav",
            "video.extra_options": {}, "is_depth_map": False}


def sample_positions(n: int) -> list[int]:
    return sorted({0, n // 2, n - 1} if n > 2 else set(range(n)))[:SAMPLES]


def psnr_of(sources: dict[int, np.ndarray], path: Path, fps: int, episode: int | None) -> tuple[list[int], list[float]]:
    """Every frame's k in the written file, and the PSNR of its frames at the `sources` positions."""
    ks, scores = [], []
    for position, (k, frame) in enumerate(decode_frames(path, fps, episode)):
        ks.append(k)
        if position in sources:
            scores.append(encoding.psnr(frame.to_ndarray(format="rgb24"), sources[position]))
    return ks, scores


# ---------------------------------------------------------------- images -> video

@dataclass(frozen=True)
class ImageJob:
    key: str
    data_file: str
    row: int
    length: int
    episode: int
    out: str
    fps: int
    shape: tuple[int, int]        # (height, width) info.json gives the camera
    settings: encoding.EncodeSettings


def decode_image(value, job: ImageJob, i: int) -> av.VideoFrame:
    """One stored image (datasets' Image struct {bytes, path}) as an RGB frame."""
    data = value.get("bytes") if isinstance(value, dict) else value
    codec = next((c for magic, c in IMAGE_CODECS.items() if data and data.startswith(magic)), None)
    if codec is None:
        raise LerodocError(f"frame {i} is not a PNG or JPEG image" + ("" if data else " (no bytes: an image "
                           "stored by path only)"), file=job.data_file, episode=job.episode, field=job.key)
    try:
        frames = av.CodecContext.create(codec, "r").decode(av.Packet(data))
    except clips.read_errors() as exc:
        raise LerodocError(f"frame {i} does not decode ({clips.reason(exc)})", file=job.data_file,
                           episode=job.episode, field=job.key) from None
    if len(frames) != 1 or (frames[0].height, frames[0].width) != job.shape:
        got = f"{frames[0].height}x{frames[0].width}" if frames else "nothing"
        raise LerodocError(f"frame {i} is {got}, info.json says {job.shape[0]}x{job.shape[1]}",
                           file=job.data_file, episode=job.episode, field=job.key)
    # a fresh frame: a decoded PNG carries full (JPEG) range, which the encoder's conversion to YUV would
    # keep, and decoders read as limited range (lerobot's frames from PIL carry none)
    return av.VideoFrame.from_ndarray(frames[0].to_ndarray(format="rgb24"), format="rgb24")


def encode_episode(job: ImageJob) -> dict:
    """Worker: encode one camera of one episode into its own mp4; check its frames and their times."""
    column = read_rows(job.data_file, job.row, job.length, [job.key], job.episode).column(job.key)
    samples = set(sample_positions(job.length))
    sources: dict[int, np.ndarray] = {}

    def frames():
        for i, value in enumerate(column.to_pylist()):
            frame = decode_image(value, job, i)
            if i in samples:
                sources[i] = frame.to_ndarray()
            yield i, frame
    Path(job.out).parent.mkdir(parents=True, exist_ok=True)
    encoding.encode_frames(frames(), Path(job.out), job.fps, job.settings, job.shape[1], job.shape[0])
    ks, scores = psnr_of(sources, Path(job.out), job.fps, job.episode)
    if ks != list(range(job.length)):
        raise VerificationError(f"encoded clip holds {len(ks)} frames at other times than the episode's "
                                f"{job.length}", file=job.out, episode=job.episode, field=job.key)
    return {"camera": job.key, "episode": job.episode, "frames": job.length, "psnr_db": scores}


def images_to_video(ds: Dataset, out: Path | None, report: EncodeReport, settings: encoding.EncodeSettings, *,
                    in_place: bool, force: bool, workers: int, dry_run: bool, progress) -> None:
    if ds.version == "v2.0":
        raise LerodocError("v2.0 datasets are read-only here", file=ds.root / INFO_PATH,
                           hint="convert it first: lerodoc convert DATASET -o OUT --to v2.1")
    keys = report.cameras
    if not keys:
        raise LerodocError("has no image features to encode" + (" (its cameras are videos already: "
                           "--reencode re-encodes them)" if ds.info.video_keys else ""),
                           file=ds.root / INFO_PATH)
    ds.require_complete()
    report.files = [{"camera": k, "episodes": len(ds.episodes), "frames": ds.total_frames, "changed": True,
                     "why": "image -> video"} for k in keys]
    if dry_run:
        return
    with scratch_beside(Path(ds.root if in_place else out)) as scratch:
        jobs = [ImageJob(k, str(ds.path(ep.data_file)), ep.data_row, ep.length, ep.index,
                         str(scratch / ("clips" if ds.version == "v3.0" else "") / v21.video_file(ds.info, k, ep.index)),
                         ds.info.fps, tuple(ds.info.features[k]["shape"][:2]), settings)
                 for k in keys for ep in ds.episodes]
        tick = progress("encoding", len(jobs)) if progress else None
        clips = pmap(encode_episode, jobs, workers=workers, progress=tick)
        placed = place_clips(ds, jobs, scratch, workers)
        moved = {}
        for job, (rel, span) in zip(jobs, placed):
            moved[str(scratch / rel)] = rel
            ep = next(ep for ep in ds.episodes if ep.index == job.episode)
            ep.videos = {**ep.videos, job.key: span}
        features = {}
        for name, spec in ds.info.features.items():
            if name in keys:
                first = next(rel for job, (rel, _) in zip(jobs, placed) if job.key == name)
                spec = {"dtype": "video", "shape": spec["shape"], "names": spec.get("names"),
                        "info": video_info(scratch / first, settings)}
            features[name] = spec
        ds.info.video_path = None   # set by write_meta for the version
        report.output = str(derive(ds, out, FeatureEdit(drop=tuple(keys), rename=()), features,
                                   in_place=in_place, force=force, workers=workers, moved=moved))
    report.files = [{"camera": c["camera"], "episode": c["episode"], "frames": c["frames"], "changed": True,
                     "why": "image -> video", "psnr_db": c["psnr_db"]} for c in clips]
    report.encoded = len(clips)


def place_clips(ds: Dataset, jobs: list[ImageJob], scratch: Path, workers: int) -> list[tuple[str, VideoSpan]]:
    """Where each job's clip ends up (relative path, span): v2.1 keeps it as it is; v3.0 joins a camera's
    clips, in episode order, into files of up to video_files_size_in_mb by stream copy."""
    if ds.version != "v3.0":
        return [(Path(j.out).relative_to(scratch).as_posix(), VideoSpan(Path(j.out).relative_to(scratch).as_posix(),
                                                                        0.0, j.length / ds.info.fps)) for j in jobs]
    by_key: dict[str, list[ImageJob]] = {}
    for job in jobs:
        by_key.setdefault(job.key, []).append(job)
    video_jobs = [(rewrite.VideoJob(key=key, episodes=tuple(j.episode for j in group),
                                    clips=tuple(clips.Clip(Path(j.out)) for j in group),
                                    sizes=tuple(Path(j.out).stat().st_size for j in group), out_root=str(scratch),
                                    cap_bytes=ds.info.video_files_size_in_mb * rewrite.MB,
                                    chunks_size=ds.info.chunks_size), ds.info.fps) for key, group in by_key.items()]
    spans = {}
    for (vjob, _), written in zip(video_jobs, pmap(rewrite.write_videos, video_jobs, workers=workers)):
        for episode, (out_file, w) in zip(vjob.episodes, written):
            rel = Path(out_file).relative_to(scratch).as_posix()
            length = next(j.length for j in by_key[vjob.key] if j.episode == episode)
            if w.frames != length:
                raise VerificationError(f"holds {w.frames} frames for the episode, expected {length}",
                                        file=out_file, episode=episode, field=vjob.key)
            spans[(vjob.key, episode)] = (rel, VideoSpan(rel, w.from_timestamp, w.to_timestamp))
    shutil.rmtree(scratch / "clips", ignore_errors=True)
    return [spans[(j.key, j.episode)] for j in jobs]


# ---------------------------------------------------------------- re-encoding

@dataclass(frozen=True)
class FileJob:
    key: str
    src: str
    out: str
    fps: int
    frames: int                   # what the episodes put in the file
    settings: encoding.EncodeSettings


def reencode_file(job: FileJob) -> dict:
    """Worker: decode a video file and encode it again, each frame at its time; check count, times, PSNR."""
    samples = set(sample_positions(job.frames))
    sources: dict[int, np.ndarray] = {}
    source_ks: list[int] = []
    probe = probe_video(Path(job.src))

    def frames():
        for position, (k, frame) in enumerate(decode_frames(Path(job.src), job.fps)):
            if position in samples:
                sources[position] = frame.to_ndarray(format="rgb24")
            source_ks.append(k)
            yield k, frame
    Path(job.out).parent.mkdir(parents=True, exist_ok=True)
    encoding.encode_frames(frames(), Path(job.out), job.fps, job.settings, probe.width, probe.height)
    ks, scores = psnr_of(sources, Path(job.out), job.fps, None)
    if len(source_ks) != job.frames:
        raise LerodocError(f"decodes to {len(source_ks)} frames, but the episodes put {job.frames} in it",
                           file=job.src, field=job.key)
    if ks != source_ks:
        raise VerificationError(f"re-encoded file holds {len(ks)} frames, or frames at other times than the "
                                f"source's {len(source_ks)}", file=job.out, field=job.key)
    return {"psnr_db": scores}


def current_settings(ds: Dataset, key: str, rel: str) -> dict:
    path = ds.path(rel)
    probe = probe_video(path)
    if not probe.pix_fmt or not probe.width or not probe.height:   # the codec parameters did not parse
        raise LerodocError("the video's pixel format and size cannot be read from its headers, so it cannot be "
                           "re-encoded", file=path, field=key, hint="lerodoc validate --videos names the damage")
    info = ds.info.features[key].get("info") or {}
    return {"codec": probe.codec, "pix_fmt": probe.pix_fmt, "gop": keyframe_gap(path),
            "frames": probe.frames, "crf": info.get("video.crf")}


def changes(now: dict, settings: encoding.EncodeSettings, asked: set[str]) -> list[str]:
    """What differs between a file and the settings asked for (only those given on the command line)."""
    why = []
    if "codec" in asked and now["codec"] != settings.codec:
        why.append(f"codec {now['codec']} -> {settings.codec}")
    if "pix_fmt" in asked and now["pix_fmt"] != settings.pix_fmt:
        why.append(f"pix_fmt {now['pix_fmt']} -> {settings.pix_fmt}")
    if "gop" in asked and now["gop"] != settings.gop and not (now["gop"] == now["frames"] <= settings.gop):
        why.append(f"keyframe interval {now['gop']} -> {settings.gop}")
    if "crf" in asked and now["crf"] != settings.crf:
        why.append(f"crf {now['crf']} -> {settings.crf}")
    return why


def reencode_videos(ds: Dataset, out: Path | None, report: EncodeReport, asked: dict, *, in_place: bool,
                    force: bool, workers: int, dry_run: bool, progress) -> None:
    keys = report.cameras
    if not keys:
        raise LerodocError("has no video features to re-encode", file=ds.root / INFO_PATH)
    ds.require_complete()
    if ds.version == "v3.0":   # the windows are kept as they are: each must hold its episode's frames
        for ep in ds.episodes:
            for key in keys:
                span = ep.videos[key]
                frames = window_frames(span.from_timestamp, span.to_timestamp, ds.info.fps)
                if frames != ep.length:
                    raise LerodocError(f"window [{span.from_timestamp:.4f}, {span.to_timestamp:.4f}) s is {frames} "
                                       f"frames' worth at {ds.info.fps} fps for {ep.length} rows; re-encoding keeps "
                                       "the windows, so frames and rows would stay misaligned",
                                       file=ds.path(ep.source or formats.module(ds.version).EPISODES_META),
                                       episode=ep.index,
                                       field=f"videos/{key}/from_timestamp, to_timestamp",
                                       hint="lerodoc validate --videos names the cause; lerodoc repair recomputes the "
                                            "windows from the video files")
    jobs, plans = [], {}
    for key in keys:
        rels = ds.video_files(key)
        now = {rel: current_settings(ds, key, rel) for rel in rels}
        first = now[rels[0]]
        # what is not asked for stays as the camera's first file has it
        settings = encoding.EncodeSettings(codec=asked.get("codec") or first["codec"],
                                           gop=asked.get("gop") or first["gop"],
                                           crf=asked["crf"] if asked.get("crf") is not None else
                                           (first["crf"] if isinstance(first["crf"], int) else 30),
                                           pix_fmt=asked.get("pix_fmt") or first["pix_fmt"],
                                           preset=asked.get("preset"))
        check_settings(settings)
        plans[key] = settings
        given = {k for k, v in asked.items() if v is not None}
        for rel in rels:
            frames = ds.rows_in_file(rel, key)
            why = changes(now[rel], settings, given)
            report.files.append({"camera": key, "file": rel, "frames": frames, "changed": bool(why),
                                 "why": "; ".join(why) or "already as asked"})
            if why:
                jobs.append((rel, FileJob(key, str(ds.path(rel)), "", ds.info.fps, frames, settings)))
    report.settings = {k: asdict(s) for k, s in plans.items()}
    report.encoded, report.unchanged = len(jobs), len(report.files) - len(jobs)
    if dry_run or not jobs:   # nothing to re-encode is a success that says so, and writes nothing
        return
    changed = {rel for rel, _ in jobs}
    results = []

    def write(target: Path | None, in_place: bool, force: bool) -> Path:   # in the dataset's own layout
        with staged_edit(ds.root, target, in_place=in_place, force=force, rewrite=changed | {INFO_PATH},
                         seen=ds.meta_seen) as tmp:
            work = [replace(job, out=str(inside(tmp, rel, field="video_path"))) for rel, job in jobs]
            tick = progress("encoding", len(work)) if progress else None
            results.extend(pmap(reencode_file, work, workers=workers, progress=tick))
            raw = read_json(ds.root / INFO_PATH)
            for key, settings in plans.items():
                if any(job.key == key for job in work):
                    first = next(job.out for job in work if job.key == key)
                    raw["features"][key]["info"] = {**(raw["features"][key].get("info") or {}),
                                                       **video_info(Path(first), settings)}
            write_json(tmp / INFO_PATH, raw)
        return Path(ds.root if in_place else target).absolute()
    report.output = str(as_written(ds, out, in_place=in_place, force=force, workers=workers, edit=write))
    by_file = dict(zip([rel for rel, _ in jobs], results))
    for entry in report.files:
        if entry["file"] in by_file:
            entry["psnr_db"] = by_file[entry["file"]]["psnr_db"]


# ---------------------------------------------------------------- the command

def encode(src: Path, out: Path | None = None, *, reencode: bool = False, codec: str | None = None,
           gop: int | None = None, crf: int | None = None, pix_fmt: str | None = None, preset: str | None = None,
           cameras: list[str] = (), in_place: bool = False, dry_run: bool = False, workers: int = 1,
           force: bool = False, progress: rewrite.Progress | None = None) -> EncodeReport:
    """Turn `src`'s image features into video features (or, with `reencode`, re-encode its videos) into `out`
    or in place."""
    started = time.perf_counter()
    ds = Dataset.open(src)
    output_target(src, out, in_place, dry_run=dry_run)
    report = EncodeReport(dataset=str(ds.root), output=None, mode="reencode" if reencode else "images",
                          workers=workers)
    kind = "video" if reencode else "image"
    available = ds.info.video_keys if reencode else ds.info.image_keys
    for key in cameras:
        if key not in available:
            raise UsageError(f"--cameras {key!r}: no {kind} feature of that name ({kind} features: "
                             f"{', '.join(available) or 'none'})", file=ds.root / INFO_PATH, field=key)
    report.cameras = list(cameras) or list(available)
    if reencode:
        if codec is not None:
            check_settings(replace(encoding.EncodeSettings(), codec=codec))
        asked = {"codec": codec, "gop": gop, "crf": crf, "pix_fmt": pix_fmt, "preset": preset}
        if all(v is None for k, v in asked.items() if k != "preset"):
            raise UsageError("nothing to change: give --codec, --gop, --crf or --pix-fmt")
        reencode_videos(ds, out, report, asked, in_place=in_place, force=force, workers=workers, dry_run=dry_run,
                        progress=progress)
    else:
        settings = settings_of(codec, gop, crf, pix_fmt, preset)
        report.settings = asdict(settings)
        images_to_video(ds, out, report, settings, in_place=in_place, force=force, workers=workers,
                        dry_run=dry_run, progress=progress)
    scores = [s for f in report.files for s in f.get("psnr_db", []) if math.isfinite(s)]
    if scores:
        report.psnr_min_db, report.psnr_mean_db = round(min(scores), 2), round(float(np.mean(scores)), 2)
    report.seconds = round(time.perf_counter() - started, 3)
    return report
