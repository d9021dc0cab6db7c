"""Delete episodes: `merge` of one source with `--exclude`, under the name users look for.

The output keeps the source's version (v2.0, which lerodoc does not write, becomes v2.1); rows are
renumbered, videos reused or cut by stream copy, stats recomputed exactly (all by `ops.merge`).
"""

from __future__ import annotations

from pathlib import Path

from lerodoc import formats
from lerodoc.errors import LerodocError
from lerodoc.ops import rewrite
from lerodoc.ops.merge import MergeReport, merge


def output_version(root: Path) -> str:
    """The version an edit writes: the source's own, v2.1 for a v2.0 source."""
    version = formats.detect_version(Path(root))
    return version if version in rewrite.TARGETS else "v2.1"


def delete(src: Path, out: Path | None, episodes: list[str], *, to: str | None = None, in_place: bool = False,
           workers: int = 1, force: bool = False, dry_run: bool = False,
           progress: rewrite.Progress | None = None) -> MergeReport:
    """Write `src` without the `episodes` (specs `3`, `7-9`, `3,7-9`) to `out`, or swap it in for `src`;
    as version `to` (default: `output_version(src)`)."""
    if not episodes:
        raise LerodocError("nothing to delete: give --episodes N,M-K")
    if not dry_run and in_place == (out is not None):
        raise LerodocError("give either -o OUTPUT or --in-place")
    target = Path(src) if in_place else Path(out or src)
    return merge([Path(src)], target, exclude=[f"A:{spec}" for spec in episodes], to=to or output_version(src),
                 workers=workers, force=force or in_place, dry_run=dry_run, progress=progress)
