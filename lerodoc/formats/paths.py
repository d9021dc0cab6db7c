"""Where lerodoc may read and write: the one rule for every path a dataset or an option names.

Datasets are untrusted: their info.json decides file names (feature keys become folders, `data_path` and
`video_path` are templates). Every such path must stay inside its root:

- `component`: a name that becomes one path component (a feature or camera key, a `--rename` target, a
  split part name) is one component: not empty, not `.` or `..`, no `/` (lerobot refuses it in feature
  names: its stats columns are flattened with `/`), no `\\`, no NUL or other control character, valid
  UTF-8 of at most 255 bytes (a file system's longest name). Dots inside a name are fine
  (`observation.images.top`).
- `template`: `data_path`/`video_path` are relative templates with no `..` segment, filled or not.
- `inside`: a relative path read from a dataset or written into an output, joined to its root, lexically
  inside it (no absolute path, no `..` segment).
- `check_links`: the files a dataset names are its own files, not links (bar a Hugging Face cache snapshot's
  links into its repository's `blobs/` folder), and its folders, links followed, still lie inside it: the names
  metadata gives are checked here, with the field at fault, before `lerodoc.confined` opens each file the same
  way.
- writers never write into a file that exists (it may be a hard link to an input, see `lerodoc.promote.links`):
  they create a new file under a temporary name beside the target and rename it over (`lerodoc.files`).

Every refusal is an `UnsafePath` (exit 3) naming the file and the field.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Iterable

from lerodoc import access
from lerodoc.confined import UnsafePath

NAME_MAX = 255   # bytes in one file name (ext4, xfs, btrfs, APFS, NTFS in UTF-16 units)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")   # Unicode's control characters (category Cc), NUL included
_DRIVE = re.compile("^[A-Za-z]:")


def _control(text: str) -> str | None:
    """The first control character (NUL, newline, DEL, C1) of `text`, shown escaped; None when none."""
    found = _CONTROL.search(text)
    return repr(found.group()) if found else None


def name_problem(name: object) -> str | None:
    """Why `name` cannot be one path component, or None when it can."""
    if not isinstance(name, str):
        return f"is {type(name).__name__}, not a string"
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"is {name!r}, which names a folder, not a file"
    for char, what in (("/", "'/'"), ("\\", "'\\'")):
        if char in name:
            return f"contains {what}, a path separator"
    control = _control(name)
    if control:
        return f"contains the control character {control}"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8 text (a lone surrogate)"
    if size > NAME_MAX:
        return f"is {size} bytes long; a file name holds at most {NAME_MAX}"
    return None


def component(name: object, *, field: str, file: object = None, what: str = "name") -> str:
    """`name` when it is usable as one path component; else UnsafePath naming `field`."""
    problem = name_problem(name)
    if problem:
        raise UnsafePath(f"{what} {name!r} {problem}; it must be one usable file name", file=file, field=field)
    return name


def _segments_problem(path: str) -> str | None:
    """Why a filled-in or raw relative path leads out of its root, or None (string tests only: this runs for
    every file a dataset names)."""
    control = _control(path)
    if control:
        return f"contains the control character {control}"
    if "\\" in path:
        return "contains '\\' (paths inside a dataset use '/')"
    if path.startswith("/") or _DRIVE.match(path):
        return "is an absolute path"
    if ".." in path.split("/"):
        return "has a '..' segment"
    return None


def template(value: str, *, field: str, file: object = None, keys: Iterable[str] = (), fill: dict | None = None
             ) -> str:
    """`value` when it is a relative path template with no `..` segment, before and after `fill`ing it with each
    of `keys` as its `video_key` (the dataset's cameras); else UnsafePath naming `field`."""
    problem = "is empty" if not value.strip() else _segments_problem(value)
    for key in (list(keys) or ["camera"]) if problem is None and fill is not None else ():
        try:
            filled = value.format(**{**fill, "video_key": key})
        except (KeyError, ValueError, IndexError, AttributeError):
            break     # the placeholders are checked where the template is read (formats.info)
        problem = _segments_problem(filled)
        if problem:
            problem = f"gives {filled!r}, which {problem}"
            break
    if problem:
        raise UnsafePath(f"{value!r} {problem}; it must be a path template relative to the dataset folder",
                         file=file, field=field)
    return value


def inside(root: Path | str, relative: str, *, field: str | None = None, file: object = None) -> Path:
    """`root / relative` when `relative` stays inside `root` by its letters (relative, no `..` segment);
    else UnsafePath naming `field`. Links are `check_links`' business."""
    problem = _segments_problem(str(relative))
    if problem:
        raise UnsafePath(f"path {str(relative)!r} {problem}, so it would lead outside {root}",
                         file=file if file is not None else root, field=field)
    return access.path(root) / relative


def link_areas(root: Path | str) -> tuple[str, ...]:
    """Where the files of the dataset at `root` may lie once links are followed: the dataset folder (resolved),
    and for a Hugging Face cache snapshot (`.../datasets--o--n/snapshots/<revision>/...`), the repository's
    `blobs/` folder that the snapshot's links point into."""
    real = os.path.realpath(root)
    areas = [real]
    for folder in [Path(root).absolute(), *Path(root).absolute().parents]:
        if folder.parent.name == "snapshots" and (folder.parent.parent / "blobs").is_dir():
            areas.append(os.path.realpath(folder.parent.parent / "blobs"))
            break
    return tuple(areas)


def _within(path: str, areas: tuple[str, ...]) -> bool:
    return any(path == area or path.startswith(area.rstrip(os.sep) + os.sep) for area in areas)


def tree(folder: Path | str, root: Path | str) -> list[str]:
    """Every entry under `folder` (links not followed into), relative to `root`: what `check_links` checks
    of a folder read whole, such as meta/. Empty when `folder` is not there."""
    return [p.relative_to(root).as_posix() for p in sorted(access.path(folder).rglob("*"))]


def check_links(root: Path | str, relatives: Iterable[str], *, field: str | None = None) -> None:
    """Every relative path of `relatives` stays inside `root` by its letters (`inside`) and, following links, in
    `link_areas(root)`; else UnsafePath naming the file. One `realpath` per folder and one directory listing
    per folder find the links, so a dataset of many files costs little; files that are missing are left to
    the callers that report them."""
    root = access.path(root)
    relatives = [str(r) for r in relatives]
    # All their letters at once (a superset of what `_segments_problem` refuses: a '//' or ':' may pass on the
    # second look, which names the path at fault); string searches only, for a dataset of 10^5 files.
    joined = f"/{'/'.join(relatives)}/"
    if _CONTROL.search(joined) or "\\" in joined or "/../" in joined or "//" in joined or ":" in joined:
        for relative in relatives:
            inside(root, relative, field=field)
    if access.is_remote(root):   # a hub repository holds no links, FIFOs or devices
        return
    by_folder: dict[str, set[str]] = {}
    for relative in relatives:
        parent, _, name = relative.rpartition("/")
        by_folder.setdefault(parent, set()).add(name)
    areas = link_areas(root)
    for parent, names in by_folder.items():
        folder = root / parent if parent else root
        real = os.path.realpath(folder)
        if not _within(real, areas):
            raise UnsafePath(f"leads to {real} through a link, outside the dataset folder", file=folder,
                             field=field, hint="copy the files into the dataset instead of linking them")
        try:
            with os.scandir(folder) as entries:   # the kinds come with the listing: no call per file
                named = [e for e in entries if e.name in names]
        except OSError:   # a missing folder: its files are reported missing where they are read
            continue
        for entry in named:
            if entry.is_file(follow_symlinks=False):
                continue
            if entry.is_symlink():
                target = os.path.realpath(entry.path)
                if not _within(target, areas):
                    raise UnsafePath(f"is a link to {target}, outside the dataset folder", file=entry.path,
                                     field=field, hint="copy the file into the dataset instead of linking it")
                if not os.path.isdir(target) and not _within(target, areas[1:]):   # bar a cache snapshot's blob
                    raise UnsafePath(f"is a link (to {target}); lerodoc reads a dataset's own files, not links "
                                     "(lerodoc.confined)", file=entry.path, field=field,
                                     hint="copy the file into the dataset instead of linking it")
                special = os.path.exists(target) and not (os.path.isfile(target) or os.path.isdir(target))
            else:
                special = not entry.is_dir(follow_symlinks=False)
            if special:   # reading a FIFO would wait for ever, a device would never end
                raise UnsafePath("is not a regular file (a FIFO, socket or device), so it is not read",
                                 file=entry.path, field=field, hint="put the file itself there")


def regular_files(root: Path | str) -> list[str]:
    """The files of a dataset folder to publish, relative and sorted, hidden ones (download metadata, temp trees)
    left out: regular files, and links to regular files that `check_links` allows (a Hugging Face cache snapshot's).
    A link to a folder, a link leading outside, a FIFO, socket or device is an UnsafePath naming it: what is
    uploaded is the dataset's own bytes, nothing else."""
    root = Path(root)
    files, links = [], []
    for folder, dirs, names in os.walk(root):
        base = Path(folder)
        for name in [d for d in dirs if not d.startswith(".")]:
            if (base / name).is_symlink():
                raise UnsafePath("is a link to a folder; only the dataset folder's own files are uploaded",
                                 file=base / name, hint="copy the folder into the dataset instead of linking it")
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (base / d).is_symlink())
        for name in names:
            if name.startswith("."):
                continue
            path, rel = base / name, (base / name).relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                links.append(rel)
            elif not stat.S_ISREG(mode):
                raise UnsafePath("is not a regular file (a FIFO, socket or device); only files are uploaded",
                                 file=path, hint="remove it from the dataset folder")
            files.append(rel)
    check_links(root, links)
    for rel in links:
        if not (root / rel).is_file():
            raise UnsafePath("is a link to something that is not a regular file; only files are uploaded",
                             file=root / rel, hint="remove it from the dataset folder")
    return sorted(files)
