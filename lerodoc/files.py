"""The one way lerodoc writes a file: a new file under a temporary name beside the target, renamed over it.

A name in an output may be a hard link to an input's file (`lerodoc.promote.links`), or a link an untrusted dataset
planted: writing into it would change the input. So no writer opens an existing file for writing; it creates a
file no one else can have (hidden, this process's, random, created exclusively, links not followed), writes it,
and renames it over the target, which replaces the name and leaves whatever it pointed at untouched. A failed
write removes its temporary file; a full disk is one error naming the target. tests/test_layout.py holds every
other module to this (writes outside `new_file` are listed there with their reason).
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lerodoc.errors import no_room

NEW_SUFFIX = ".lerodoc-new"


def fresh_name(path: Path) -> Path:
    """A name beside `path` that no file has: hidden, this process's and random."""
    return path.with_name(f".{path.name[:180]}.{os.getpid()}-{secrets.token_hex(4)}{NEW_SUFFIX}")


@contextmanager
def new_file(path: Path | str) -> Iterator[Path]:
    """Yield a temporary name beside `path` holding a new empty file (created exclusively, so no link can be
    there); when the block succeeds it is renamed over `path`, replacing whatever had that name without writing
    into it. When the block fails, the temporary file is removed and `path` is untouched; a write that ran out of
    room (ENOSPC, EDQUOT, EFBIG) is one LerodocError naming `path` (`errors.no_room`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = fresh_name(path)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        full = no_room(exc, path)
        if full is None:
            raise
        raise full from exc


def write_bytes(path: Path | str, data: bytes) -> None:
    """`data` as the new file `path` (`new_file`)."""
    with new_file(path) as tmp:
        tmp.write_bytes(data)
