"""Whether LeRobotDataset 0.6.1 would load a written tree: the check every output passes before it is promoted
(`staging.staged_output`), from footers and container headers only."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lerodoc import access
from lerodoc.conventions import INFO_PATH
from lerodoc.errors import LerodocError
from lerodoc.formats.hf import CAST_ON_LOAD, schema_problems
from lerodoc.formats.jsonl import read_json


def problems(root: Path) -> list[str]:
    """What would stop LeRobotDataset 0.6.1 from loading the dataset at `root`: each data parquet's schema
    against info.json's features, as the `datasets` cast on load sees it (footers only, no rows read), and
    each video's time base, which must place frames at k/fps within lerobot's tolerance, and its tags, which
    must be UTF-8 (headers only)."""


    root = access.path(root)
    info = read_json(root / INFO_PATH)
    features = info.get("features") or {}
    problems = []
    last: tuple[pa.Schema, list] | None = None   # files of one schema in a row (a v2.1 output's): asked once
    for path in [root / rel for rel in access.files(root, "data", ".parquet")]:
        try:
            schema = pq.read_schema(access.source(path))
        except (OSError, pa.ArrowException) as exc:
            problems.append(f"{path.relative_to(root)}: cannot be read ({exc})")
            continue
        if last is None or not schema.equals(last[0], check_metadata=True):
            last = schema, [(code, text) for code, _, text in schema_problems(features, schema)
                            if code not in CAST_ON_LOAD]
        problems += [f"{path.relative_to(root)}: {code} {text}" for code, text in last[1]]
    fps = info.get("fps")
    videos = ([root / rel for rel in access.files(root, "videos", ".mp4")] if isinstance(fps, (int, float)) and fps > 0
              else [])
    if videos:
        from lerodoc.media import clips, frames   # PyAV: loaded only for a dataset with videos
    for path in videos:
        try:
            time_base = frames.time_base(path)
        except LerodocError as exc:
            problems.append(f"{path.relative_to(root)}: {exc.message}")
            continue
        if not frames.strict_tags(path):
            problems.append(f"{path.relative_to(root)}: VID013 metadata tags are not UTF-8 (lerobot's pyav backend "
                            "cannot open it)")
        if not clips.fits_grid(time_base, int(fps)):
            problems.append(f"{path.relative_to(root)}: VID005 time base {time_base} places frames up to "
                            f"{float(clips.grid_deviation(time_base, int(fps))) * 1e3:.3g} ms off k/{int(fps)} s")
    return problems
