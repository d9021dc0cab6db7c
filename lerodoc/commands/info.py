"""`lerodoc info`: what a dataset holds, from metadata and container headers only."""

from __future__ import annotations

from lerodoc import render
from lerodoc.ops.info import describe
from lerodoc.options import DatasetArg, JsonOpt


def info(dataset: DatasetArg, json: JsonOpt = False) -> None:
    """Version, fps, totals, features, cameras (codec, size, pixel format) and which stats exist."""
    report = describe(dataset)
    if json:
        render.print_json(report)
        return
    o = render.out
    o.print(f"[bold]{report['root']}[/]  LeRobot {report['version']}  {report['fps']} fps  "
            f"robot {report['robot_type']}")
    o.print(f"{report['episodes']} episodes, {report['frames']} frames, {report['tasks']} tasks, "
            f"{report['data_files']} data files, {render.human_bytes(report['size_bytes'])} on disk")
    rows = []
    for name, feat in report["features"].items():
        names = feat["names"] or []
        shown = ", ".join(names[:4]) + (f", … ({len(names)})" if len(names) > 4 else "")
        cov = report["stats"][name]
        rows.append([name, feat["dtype"], tuple(feat["shape"]), shown,
                     " ".join(cov["dataset"]) or "-", " ".join(cov["episodes"]) or "-"])
    o.print(render.table("features", ["feature", "dtype", "shape", "names", "stats.json", "per-episode stats"],
                         rows))
    if report["cameras"]:
        o.print(render.table("cameras", ["camera", "codec", "size", "pix_fmt", "fps", "files"],
                             [[k, c.get("codec"), f"{c.get('width')}x{c.get('height')}", c.get("pix_fmt"),
                               c.get("fps"), c["files"]] for k, c in report["cameras"].items()]))
