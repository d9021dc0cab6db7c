"""`lerodoc encode`: image features to video features, or re-encode videos."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, ForceOpt, InPlaceOpt, JsonOpt, OptionalOutput,
                             PushOpt, WorkersOpt, pushing)


class Codec(str, Enum):
    h264 = "h264"
    av1 = "av1"
    hevc = "hevc"


def encode(
    dataset: DatasetArg = None,
    output: OptionalOutput = None,
    reencode: Annotated[bool, typer.Option("--reencode", help="Re-encode the video features instead of encoding "
                                           "image features.")] = False,
    codec: Annotated[Optional[Codec], typer.Option("--codec", case_sensitive=False, help="Video codec (default: av1 "
                                                   "for images; the file's own for --reencode).")] = None,
    gop: Annotated[Optional[int], typer.Option("--gop", min=1, help="Keyframe interval in frames (default 2, "
                                               "lerobot's).")] = None,
    crf: Annotated[Optional[int], typer.Option("--crf", min=0, help="Constant rate factor: lower is better "
                                               "quality and bigger files (default 30, lerobot's).")] = None,
    pix_fmt: Annotated[Optional[str], typer.Option("--pix-fmt", help="Pixel format (default yuv420p).")] = None,
    preset: Annotated[Optional[str], typer.Option("--preset", help="Encoder speed preset (default: 12 for av1, "
                                                  "the encoder's own otherwise).")] = None,
    cameras: Annotated[list[str], typer.Option("--cameras", help="Only these cameras (repeatable; default: all)."
                                               )] = [],
    in_place: InPlaceOpt = False,
    dry_run: DryRunOpt = False,
    workers: WorkersOpt = DEFAULT_WORKERS,
    force: ForceOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Encode image features (frames stored in the parquet) as video features, or --reencode videos.

    Camera episodes (or, re-encoding, video files) are encoded in parallel; frame counts and times are
    checked, and the report gives the PSNR of a few frames per file against the source. Only files whose
    settings change are re-encoded; the others are kept byte for byte.

    Example: lerodoc encode DATASET -o OUT --reencode --gop 10 --crf 23
    """
    with pushing("encode", push_to_hub, [dataset], dry_run=dry_run):
        with render.progress(not json and not dry_run) as track:
            report = api.encode(dataset, output, reencode=reencode, codec=codec.value if codec else None, gop=gop,
                                crf=crf, pix_fmt=pix_fmt, preset=preset, cameras=cameras, in_place=in_place,
                                workers=workers, force=force, dry_run=dry_run, progress=track)
        show(report, json, dry_run)


def show(report, json: bool, dry_run: bool) -> None:
    """What `lerodoc encode` prints of `report` (an `ops.encode.EncodeReport`)."""
    if json:
        render.print_json({**report.to_json(), "dry_run": dry_run})
        return
    if report.mode == "reencode":
        rows = [[f["camera"], f["file"], f["frames"], "re-encode" if f["changed"] else "keep", f["why"],
                 _psnr(f.get("psnr_db"))] for f in report.files]
        render.out().print(render.table("video files", ["camera", "file", "frames", "action", "why", "PSNR dB"],
                                      rows))
    else:
        by_camera: dict[str, list] = {}
        for f in report.files:
            by_camera.setdefault(f["camera"], []).append(f)
        rows = [[cam, sum(f.get("episodes", 1) for f in files), sum(f["frames"] for f in files),
                 _psnr([s for f in files for s in f.get("psnr_db", [])])] for cam, files in by_camera.items()]
        render.out().print(render.table("image features -> video", ["camera", "episodes", "frames", "PSNR dB (min)"],
                                      rows))
    settings = report.settings if report.mode == "images" else next(iter(report.settings.values()), {})
    render.out().print(f"codec {settings.get('codec')}, gop {settings.get('gop')}, crf {settings.get('crf')}, "
                       f"{settings.get('pix_fmt')}; {report.encoded} encoded, {report.unchanged} kept; "
                       + (f"written to {report.output} ({report.seconds:.2f} s, {report.workers} workers)"
                          if report.output else "dry run: nothing written" if dry_run
                          else "nothing to re-encode: every file already has the settings asked for; nothing written"))


def _psnr(scores) -> str:
    return f"{min(scores):.1f}" if scores else "-"
