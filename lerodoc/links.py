"""Files placed by hard link: the same bytes under a new name, none copied (a copy across file systems)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link `src` at `dst` (a copy across file systems): the same bytes, none copied."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_tree(src: Path, dst: Path, skip: set[str]) -> None:
    """Mirror `src` into `dst` by hard links (copies across file systems), leaving out `skip` paths."""
    for path in sorted(Path(src).rglob("*")):
        rel = path.relative_to(src).as_posix()
        if path.is_dir() or rel in skip:
            continue
        link_or_copy(path, dst / rel)
