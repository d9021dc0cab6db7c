"""Delete episodes: `merge` of one source with `--exclude`, under the name users look for.

The output is v3.0 unless told (`conventions.WRITES`: LeRobotDataset 0.6.1 loads no other); rows are renumbered, videos
reused or cut by stream copy, stats recomputed exactly (all by `ops.merge`).
"""

from __future__ import annotations

from pathlib import Path

from lerodoc import access
from lerodoc.conventions import WRITES
from lerodoc.dataset import Dataset
from lerodoc.errors import UsageError
from lerodoc.ops import rewrite
from lerodoc.ops.merge import MergeReport, merge
from lerodoc.selection import Selection, format_ranges
from lerodoc.promote.staging import output_target


def delete(src: Path, out: Path | None, episodes: Selection, *, to: str | None = None, in_place: bool = False,
           workers: int = 1, force: bool = False, dry_run: bool = False,
           progress: rewrite.Progress | None = None) -> MergeReport:
    """Write `src` without the `episodes` to `out`, or swap it in for `src`; as version `to` (default:
    `conventions.WRITES`). An episode the dataset does not hold, or all of them, is a usage error in delete's
    words (`--episodes`), before anything is read but the metadata."""
    target = output_target(src, out, in_place, dry_run=dry_run) or access.path(src)
    ds = Dataset.open(src)
    numbers = [ep.index for ep in ds.episodes]
    chosen = episodes.resolve(numbers, "--episodes")
    if len(chosen) == len(numbers):
        raise UsageError(f"--episodes {episodes.text}: that is every episode of the dataset ({format_ranges(numbers)}); "
                         "nothing would be left", hint="keep at least one episode")
    return merge([ds], target, exclude={0: episodes}, to=to or WRITES, workers=workers,
                 force=force or in_place, dry_run=dry_run, progress=progress, in_place=in_place, consume=True)
