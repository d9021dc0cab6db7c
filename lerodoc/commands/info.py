"""`lerodoc info`: what a dataset holds, from metadata and container headers only."""

from __future__ import annotations

from lerodoc import api, render
from lerodoc.options import DatasetArg, JsonOpt


def _coverage(keys: list[str]) -> str:
    """'basic+q' when min/max/mean/std/count and q01..q99 are all there, else what is."""
    from lerodoc.tables.stats import BASIC, QUANTILES   # numpy and pyarrow: never on --help
    have = set(keys)
    parts = ["basic" if have >= set(BASIC) else " ".join(k for k in BASIC if k in have),
             "q" if have >= set(QUANTILES) else " ".join(k for k in QUANTILES if k in have)]
    return "+".join(p for p in parts if p) or "-"


def info(dataset: DatasetArg = None, json: JsonOpt = False) -> None:
    """Version, fps, totals, features, cameras (codec, size, pixel format) and which stats exist.

    Example: lerodoc info data/pusht --json
    """
    report = api.info(dataset)
    if json:
        render.print_json(report.to_json())
        return
    o = render.out()
    render.heading(f"{report.dataset}  LeRobot {report.codebase_version}  {report.fps} fps  "
                   f"robot {report.robot_type}")
    o.print(f"{report.episodes} episodes, {report.frames} frames, {report.tasks} tasks, "
            f"{report.data_files} data files, {render.human_bytes(report.size_bytes)} on disk")
    rows = []
    for name, feat in report.features.items():
        names = feat["names"] or []
        shown = ", ".join(names[:4]) + (f", … ({len(names)})" if len(names) > 4 else "")
        cov = report.stats[name]
        rows.append([name, feat["dtype"], tuple(feat["shape"]), shown,
                     f"{_coverage(cov['dataset'])} / {_coverage(cov['episodes'])}"])
    o.print(render.table("features", ["feature", "dtype", "shape", "names", "stats (stats.json / episodes)"], rows))
    if report.cameras:
        o.print(render.table("cameras", ["camera", "codec", "size", "pix_fmt", "fps", "files"],
                             [[k, c.get("codec"), f"{c.get('width')}x{c.get('height')}", c.get("pix_fmt"),
                               c.get("fps"), c["files"]] for k, c in report.cameras.items()]))
    if report.transfer:
        o.print(render.transfer_line(report.transfer))
