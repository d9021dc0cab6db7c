"""The ground floor of reading: how lerodoc opens, lists and looks at a local dataset's files.

A dataset is untrusted input (docs/security.md): any name in it may be a symbolic link planted to make lerodoc read
someone else's file, or a FIFO or device that never ends. Every read of a local dataset file goes through here:

- `open_fd` opens the file itself, never a link (`O_NOFOLLOW`), and only a regular file (`fstat`, after an open
  that cannot block on a FIFO). The one link it follows is a Hugging Face cache snapshot's: a file under
  `.../snapshots/<revision>/` that links into the same repository's `blobs/` folder, which is how huggingface_hub
  lays out every download.
- Under a dataset root that a reader has `confine`d (Dataset.open does), the folders on the way are checked too:
  once links are resolved they must still lie inside the root, so `data -> /elsewhere` is refused like a file link.
- `source` is what pyarrow and PyAV open by name: the checked file's own path (links resolved), after checking that
  the name still leads to the file that was checked.
- `files_under` lists a folder of a dataset the same way: regular files only, links neither listed nor followed
  (bar the cache's), for the readers that search a tree (repair's stray data files, the misplaced-file search).
- `meta_state`: what a dataset's `meta/` looked like when a command read it (Dataset.open notes it), for the swap
  that replaces it in place (`promote.staging`), which refuses to replace a `meta/` that changed meanwhile.

Every refusal is an `UnsafePath` (exit 3) naming the file. `tests/test_confined.py` holds every other module to
this: a module that opens a file by another way is listed there with its reason.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from pathlib import Path

from lerodoc.errors import LerodocError

READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
LINK_ERRORS = (errno.ELOOP, errno.EMLINK)   # O_NOFOLLOW met a link (Linux: ELOOP; FreeBSD: EMLINK)


class UnsafePath(LerodocError):
    """A name or path that would read or write outside its root, a link, or a file that is not a regular one."""


def _within(path: str, area: str) -> bool:
    return path == area or path.startswith(area.rstrip(os.sep) + os.sep)


def snapshot_blobs(path: Path | str) -> str | None:
    """The `blobs/` folder (resolved) of the Hugging Face cache repository whose snapshot holds `path`
    (`.../datasets--o--n/snapshots/<revision>/...`), or None when `path` is in no snapshot."""
    path = Path(os.path.abspath(path))
    for folder in path.parents:
        if folder.parent.name == "snapshots" and (folder.parent.parent / "blobs").is_dir():
            return os.path.realpath(folder.parent.parent / "blobs")
    return None


# ---------------------------------------------------------------- confined roots

_roots: dict[str, str] = {}   # a dataset root as named (absolute) -> the same root with links resolved


def confine(root: Path | str) -> None:
    """From now on, files under `root` are read only where its folders, links resolved, stay inside it (a root of
    a Hugging Face cache snapshot may also reach its repository's blobs). The root itself may be reached through a
    link: that is the user's choice of name, not the dataset's."""
    _roots[os.path.abspath(root)] = os.path.realpath(root)
    _real_folder.cache_clear()


@functools.lru_cache(maxsize=4096)
def _real_folder(folder: str) -> str:
    return os.path.realpath(folder)


def _check_folders(path: str) -> None:
    """Refuse `path` when a folder on its way below a confined root is a link leading out of that root. The roots
    it is under are its folder's ancestors that are confined, looked up one by one (as deep as the path goes), not
    every root asked in turn: a merge of a hundred datasets confines a hundred roots and opens thousands of files."""
    folder = here = os.path.dirname(path)
    while True:
        real = _roots.get(here)
        if real is not None:
            resolved = _real_folder(folder)
            if not _within(resolved, real) and not _within(resolved, snapshot_blobs(here) or real):
                raise UnsafePath(f"leads to {resolved} through a link, outside the dataset folder", file=folder,
                                 hint="copy the files into the dataset instead of linking them")
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


# ---------------------------------------------------------------- opening

def _not_regular(path, mode: int) -> UnsafePath:
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
    return UnsafePath(f"is {kind}, not a regular file, so it is not read", file=path,
                      hint="put the file itself there")


def open_fd(path: Path | str) -> int:
    """A read-only descriptor of the regular file `path`; UnsafePath for a link (bar a cache snapshot's link into
    its blobs), a FIFO, socket, device or folder, or a folder link leading out of a confined root. Other OSErrors
    (a missing file) are raised as they are, for the callers that report them."""
    name = os.path.abspath(path)
    _check_folders(name)
    try:
        fd = os.open(name, READ_FLAGS)
    except OSError as exc:
        if exc.errno not in LINK_ERRORS or not os.path.islink(name):
            raise
        target, blobs = os.path.realpath(name), snapshot_blobs(name)
        if blobs is None or not _within(target, blobs):
            raise UnsafePath(f"is a link (to {target}); lerodoc reads a dataset's own files, not links", file=path,
                             hint="copy the file into the dataset instead of linking it") from None
        fd = os.open(target, READ_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: Path | str):
    """`open_fd` as an unbuffered binary file object (closing it closes the descriptor)."""
    return os.fdopen(open_fd(path), "rb", buffering=0)


def read_bytes(path: Path | str) -> bytes:
    """The whole regular file `path` (`open_fd`)."""
    with open_file(path) as f:
        return f.read()


def read_range(path: Path | str, start: int, end: int) -> bytes:
    """Bytes [start, end) of the regular file `path`."""
    fd = open_fd(path)
    try:
        return os.pread(fd, max(0, end - start), start)
    finally:
        os.close(fd)


def source(path: Path | str) -> str:
    """The name a library that opens files by name (pyarrow, PyAV) is given for `path`: the checked regular file's
    own path, links resolved (a cache snapshot's blob), after `open_fd` accepted it and checking that this name
    leads to that very file."""
    return source_tail(path, 0)[0]


def source_tail(path: Path | str, size: int) -> tuple[str, bytes]:
    """`source(path)`, and the last `size` bytes of the file it checked (the whole file when shorter), read from
    the descriptor it checked."""
    fd = open_fd(path)
    try:
        real = os.path.realpath(path)
        opened, named = os.fstat(fd), os.stat(real)
        if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
            raise UnsafePath("changed while it was being opened", file=path, hint="run the command again")
        start = max(opened.st_size - size, 0)
        return real, os.pread(fd, opened.st_size - start, start) if size else b""
    finally:
        os.close(fd)


# ---------------------------------------------------------------- listing

def files_under(root: Path | str, folder: str, suffix: str = "") -> list[str]:
    """The regular files ending in `suffix` under `root/folder`, relative to `root` ('/'-separated) and sorted:
    folders are walked without following links, hidden entries are left out, a link is listed only when it is a
    cache snapshot's link to a regular file in its blobs, and FIFOs, sockets and devices never. Empty when the
    folder is not there."""
    root = os.path.abspath(root)
    base = os.path.join(root, folder) if folder else root
    if folder and os.path.relpath(os.path.realpath(base), os.path.realpath(root)) != os.path.normpath(folder):
        return []   # the folder, or one on its way, is a link: nothing under it is the dataset's own
    blobs = None
    found = []
    for here, dirs, names in os.walk(base, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            if name.startswith(".") or not name.endswith(suffix):
                continue
            path = os.path.join(here, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                blobs = blobs or snapshot_blobs(path)
                target = os.path.realpath(path)
                if blobs is None or not _within(target, blobs) or not os.path.isfile(target):
                    continue
            elif not stat.S_ISREG(mode):
                continue
            found.append(Path(os.path.relpath(path, root)).as_posix())
    return sorted(found)


# ---------------------------------------------------------------- meta/ as read

def meta_state(root: Path | str) -> tuple:
    """What a dataset's `meta/` is now: the folder's identity, and each entry's name, kind, inode, size and
    modification time (links not followed). Any writer's swap or rewrite of a metadata file changes it, so a
    command that notes it as it reads can tell, before it swaps its own `meta/` in, whether another changed it."""
    meta = os.path.join(os.path.realpath(root), "meta")
    try:
        st = os.lstat(meta)
    except FileNotFoundError:
        return ()
    entries = []
    for here, dirs, names in os.walk(meta, followlinks=False):
        for name in dirs + names:
            e = os.lstat(os.path.join(here, name))
            entries.append((os.path.relpath(os.path.join(here, name), meta), e.st_mode, e.st_ino, e.st_size,
                            e.st_mtime_ns))
    return (st.st_dev, st.st_ino, st.st_mode, tuple(sorted(entries)))
