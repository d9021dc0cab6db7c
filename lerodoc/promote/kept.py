"""What a dataset holds, and the rule that no writer loses any of it unasked.

A camera can be held without being declared: its mp4 files and episode metadata are there, but info.json
lost its feature. lerobot ignores such a camera, and a rewrite that follows info.json would leave it behind
without a word. `undeclared_cameras` finds them (validate's LAY044, repair restores them); `require_kept`,
which staging runs on every writer's output before it is promoted, refuses an output that lacks a feature,
data column or camera of its input that the command was not asked to drop or rename.
"""

from __future__ import annotations

import re
from pathlib import Path

from lerodoc import formats
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, VerificationError
from lerodoc.formats.model import StatsUnreadable, stats_features
from lerodoc.tables.parquet_io import read_schema
from lerodoc.conventions import INFO_PATH

CHUNK_FOLDER = re.compile(r"chunk-\d+")   # the templates' chunk folders, which name no camera


def undeclared_cameras(ds: Dataset) -> dict[str, list[str]]:
    """Cameras `ds` holds that info.json does not declare: mp4 files under videos/ in a folder named after the
    camera, and episode metadata naming it (v3.0: the `videos/<key>/...` columns of meta/episodes; v2.x: its
    per-episode or dataset stats). Camera -> its mp4 files (relative, sorted); footers only are read, and the
    metadata only where an mp4 file lies in a folder info.json does not declare (v2.x's per-episode stats file is
    most of its metadata: 2.5 s to read back a 302-feature convert's)."""
    videos = [(path, Path(path).parts) for path in formats.loose_files(ds.root, ".mp4")]
    videos = [(path, parts) for path, parts in videos if parts[0] == "videos"
              and any(p not in ds.info.features and not CHUNK_FOLDER.fullmatch(p) for p in parts[1:-1])]
    if not videos:
        return {}
    if ds.version == "v3.0":
        named = {c[len("videos/"):-len("/chunk_index")]
                 for path in sorted(ds.root.glob(formats.module(ds.version).EPISODES_GLOB))
                 for c in read_schema(path).names if c.startswith("videos/") and c.endswith("/chunk_index")}
    else:
        try:
            named = stats_features(ds.episodes) | set(ds.stats or {})
        except StatsUnreadable:   # per-episode stats that cannot be read name no camera (repair recomputes them)
            named = set(ds.stats or {})
    named -= set(ds.info.features)
    out: dict[str, list[str]] = {}
    for path, parts in videos if named else ():
        camera = next((p for p in parts[1:-1] if p in named), None)
        if camera is not None:
            out.setdefault(camera, []).append(path)
    return out


def held(ds: Dataset, cameras: dict[str, list[str]] | None = None) -> set[str]:
    """What a rewrite of `ds` must carry or be asked to drop: info.json's features, the data columns of the first
    data file (its footer) and the undeclared cameras (`cameras`, when already found)."""
    first = ds.episodes[0]
    try:
        columns = set(read_schema(ds.path(first.data_file), first.index).names)
    except LerodocError:
        columns = set()
    return set(ds.info.features) | columns | set(undeclared_cameras(ds) if cameras is None else cameras)


def trim_to_held(ds: Dataset) -> None:
    """Let go of what `held` does not read of `ds`'s episodes: of a v3.0 dataset (its cameras are named by the
    episodes files' columns) all but the first (hundreds of MB at a million episodes); of a v2.x one, none (its
    per-episode stats name cameras)."""
    if ds.version == "v3.0":
        ds.episodes = ds.episodes[:1]


def require_kept(sources: list[Path | Dataset], out: Path | Dataset, *, dropped: set[str] = frozenset(),
                 renamed: dict[str, str] | None = None) -> None:
    """Refuse the written dataset at `out` (its path, or the dataset as the command opened it) when it lacks a
    feature, data column or camera that a source holds (`held`) and the command was not asked to drop (`dropped`,
    source names) or rename (`renamed`, source name -> output name). A source is a dataset's path, or the dataset
    as the command opened it (its metadata is not read twice). Raises VerificationError naming the input, what
    would be lost and, for an undeclared camera, repair."""
    renamed = renamed or {}
    have = held(out if isinstance(out, Dataset) else Dataset.open(out))
    for src in sources:
        ds = src if isinstance(src, Dataset) else Dataset.open(src)
        cameras = undeclared_cameras(ds)
        lost = sorted(n for n in held(ds, cameras) - set(dropped) if renamed.get(n, n) not in have)
        if not lost:
            continue
        what = ", ".join(f"{n!r}" + (f" (a camera info.json does not declare: {len(cameras[n])} video file(s) "
                                      f"such as {cameras[n][0]}, and episode metadata)" if n in cameras else "")
                         for n in lost)
        hint = ("lerodoc repair restores the camera's feature in info.json from its video files; run this command "
                "on repair's output" if any(n in cameras for n in lost) else
                "nothing asked for this loss: please report it with the command line")
        raise VerificationError(f"the output would lose {what}, which the input holds and nothing asked to drop; "
                                "nothing was written", file=ds.root / INFO_PATH, field=lost[0], hint=hint)
