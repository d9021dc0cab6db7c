"""Everything lerodoc knows about LeRobot's on-disk formats, one module per version.

Commands never build a path or read a meta file themselves: they open a `Dataset`, which asks
`module(version)` for the version's reader, and write through the same modules.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from lerodoc import access
from lerodoc.conventions import INFO_PATH
from lerodoc.errors import LerodocError
from lerodoc.formats.jsonl import read_json

VERSIONS = ("v2.0", "v2.1", "v3.0")
META_DIR = "meta"


def detect_version(root: Path) -> str:
    """The dataset's `codebase_version`, checked against the versions lerodoc reads."""
    root = access.path(root)
    info = read_json(root / INFO_PATH)
    if not isinstance(info, dict):
        raise LerodocError("is not a JSON object", file=root / INFO_PATH)
    version = info.get("codebase_version")
    if version not in VERSIONS:
        raise LerodocError(f"unknown codebase_version {version!r}; lerodoc reads {', '.join(VERSIONS)}",
                           file=root / INFO_PATH, field="codebase_version")
    found = files_version(root)
    if found is not None and (found == "v3.0") != (version == "v3.0"):
        raise LerodocError(f"says {version}, but the metadata files are laid out for {found} "
                           f"({'meta/episodes/*/*.parquet' if found == 'v3.0' else 'meta/episodes.jsonl'})",
                           file=root / INFO_PATH, field="codebase_version",
                           hint=f"set codebase_version to {found} if the files are right")
    return version


def files_version(root: Path) -> str | None:
    """The version the metadata files are laid out for, whatever info.json says: v3.0 (meta/episodes/ parquet
    files), v2.1 (meta/episodes.jsonl and episodes_stats.jsonl), v2.0 (episodes.jsonl alone); None when the files
    show neither, or both."""
    v3 = any(root.glob("meta/episodes/*/*.parquet"))
    v2 = (root / "meta/episodes.jsonl").is_file()
    if v3 == v2:
        return None
    return "v3.0" if v3 else "v2.1" if (root / "meta/episodes_stats.jsonl").is_file() else "v2.0"


def module(version: str) -> ModuleType:
    """The format module for a version: v20, v21 or v30."""
    if version not in VERSIONS:
        raise LerodocError(f"unknown format version {version!r}; choose one of {', '.join(VERSIONS)}")
    return importlib.import_module(f"lerodoc.formats.v{version[1]}{version[3]}")


def loose_files(root: Path, suffix: str) -> list[str]:
    """Every `suffix` file of the dataset tree outside meta/ and hidden folders, relative, sorted: where a
    data or video file may sit when it is not where the template puts it. Regular files only: a link, FIFO or
    device is not one of them, and no link is followed to find them (`access.files`)."""
    return [rel for rel in access.files(access.path(root), "", suffix) if rel.split("/")[0] != META_DIR]


def find_misplaced(expected: str, candidates: list[str], key: str | None = None) -> str | None:
    """The one candidate that is `expected` stored under another folder: the same path parts below the top
    folder in another order or under another top folder (`video/image/chunk-000/file-000.mp4` for
    `videos/image/chunk-000/file-000.mp4`), else the same file name in a folder naming the camera `key`.
    None when there is none, or more than one (then nothing can be moved without guessing)."""
    parts = sorted(Path(expected).parts[1:])
    same = [c for c in candidates if c != expected and sorted(Path(c).parts[1:]) == parts]
    if same:
        return same[0] if len(same) == 1 else None
    named = [c for c in candidates if c != expected and Path(c).name == Path(expected).name
             and (key is None or key in Path(c).parts)]
    return named[0] if len(named) == 1 else None
