"""Outputs appear whole or not at all: write to a hidden temp sibling, verify, rename."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from lerodoc.errors import LerodocError

TEMP_SUFFIX = ".lerodoc-tmp"


def temp_sibling(out: Path) -> Path:
    return out.parent / f".{out.name}{TEMP_SUFFIX}-{os.getpid()}"


@contextmanager
def staged_output(out: Path, *, force: bool = False):
    """Yield a temp directory beside `out`; promote it to `out` only when the block succeeds.

    Any exception (Ctrl-C included) removes the temp directory, so no half-written dataset is left
    under the name the user asked for.
    """
    out = Path(out).absolute()
    if out.exists() and not force:
        raise LerodocError("output already exists", file=out, hint="choose another -o or pass --force")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        old = out.parent / f".{out.name}.lerodoc-old-{os.getpid()}"
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)
