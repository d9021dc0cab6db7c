"""The memory budget: how much one reader may allocate on a dataset's word, and the one rule that checks it.

A dataset is untrusted input, and its files state sizes that reading them would allocate: a 1 KB parquet file can
list 10^8 dictionary-encoded values in its footer, a 4 KB sparse mp4 can claim 10^8 samples in its sample tables.
The readers (lerodoc.tables.parquet_io, lerodoc.media.mp4) work out from those claims how many bytes decoding would
take, and call `check` before they allocate anything; a claim over the budget is a LerodocError (exit 3) naming
the file and the field (column or box), with a hint on how to raise the budget for a file that is trusted.

The budget is per reader call, so per worker process: LERODOC_MEMORY_BUDGET (bytes, or a number with a unit:
512MiB, 2GiB, 1.5G), else DEFAULT. `held` is the other half of the rule: what a file really holds on disk, which
no claim of the bytes it stores may exceed (a sparse file's holes hold nothing).

Bottom floor: imports nothing of lerodoc but its errors.
"""

from __future__ import annotations

import errno
import os
import re

from lerodoc.errors import LerodocError

ENV = "LERODOC_MEMORY_BUDGET"
DEFAULT = 512 << 20
UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 10 ** 3, "m": 1 << 20, "mib": 1 << 20, "mb": 10 ** 6,
         "g": 1 << 30, "gib": 1 << 30, "gb": 10 ** 9, "t": 1 << 40, "tib": 1 << 40, "tb": 10 ** 12}
_AMOUNT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
HINT = (f"if the file is trusted, raise the budget with the environment variable {ENV} (bytes, or e.g. 2GiB; "
        f"the default is {DEFAULT >> 20} MiB per worker)")


def parse_size(text: str) -> int:
    """Bytes from `text`: a whole number of bytes, or a number with a unit (K/KiB/M/MiB/G/GiB/T/TiB binary,
    KB/MB/GB/TB decimal). ValueError for anything else."""
    match = _AMOUNT.fullmatch(text)
    if not match or match.group(2).lower() not in UNITS:
        raise ValueError(text)
    return int(float(match.group(1)) * UNITS[match.group(2).lower()])


def memory_budget() -> int:
    """The bytes one reader may allocate for what a file claims: LERODOC_MEMORY_BUDGET, else DEFAULT. Read at each
    check, so a process (or a test) that sets it later is heard."""
    text = os.environ.get(ENV)
    if text is None or not text.strip():
        return DEFAULT
    try:
        value = parse_size(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise LerodocError(f"is {text!r}, not a positive size", field=ENV,
                           hint="bytes, or a number with a unit: 512MiB, 2GiB, 1.5G")
    return value


def human(size: int) -> str:
    """A byte count for a message: 1.2 GiB, 512 MiB, 4.0 KiB, 10 bytes."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.1f} {unit}"
    return f"{size} bytes"


class BudgetExceeded(LerodocError):
    """What `check` raises: a read the memory budget does not allow (not a defect of the file: raising the budget
    lets a trusted one be read)."""


def check(need: int, what: str, *, file: object, field: str | None = None, episode: int | None = None) -> None:
    """The rule: `need` bytes (what reading `field` of `file` would allocate, worked out from the file's own
    claims before anything is allocated) must fit the memory budget; else a LerodocError naming the file and
    field. `what` says what would take them ("decoding column 'x'")."""
    limit = memory_budget()
    if need > limit:
        raise BudgetExceeded(f"{what} would take about {human(need)}, over the memory budget of {human(limit)}",
                             file=file, field=field, episode=episode, hint=HINT)


def held(fd: int) -> int:
    """The bytes the open local file `fd` really holds: its size, less the holes of a sparse file. Its allocated
    blocks (st_blocks) settle it when they cover the size; where they do not (a sparse file, or a file system that
    compresses or has not yet allocated what was written), its data extents are counted (SEEK_DATA/SEEK_HOLE), so
    that only holes count as missing. (A descriptor, not a path: the file is opened where every dataset file is,
    lerodoc.access.)"""
    stat = os.fstat(fd)
    size = stat.st_size
    if getattr(stat, "st_blocks", None) is None or stat.st_blocks * 512 >= size:
        return size
    data, pos = 0, 0
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:   # ENXIO: nothing but a hole after pos
                    raise
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            data, pos = data + min(end, size) - start, end
    except (OSError, AttributeError):   # no SEEK_DATA here: the blocks are all there is to go by
        return stat.st_blocks * 512
    return data


def give_back() -> None:
    """Return the memory the process has freed to the system (glibc's `malloc_trim`; elsewhere nothing): a step that
    lets go of gigabytes held in many blocks of a few MB (a million episodes' stats tables) before it allocates as
    much anew. glibc keeps such freed blocks for reuse, and the new allocations, larger, cannot reuse them, so both
    stay resident (measured: 7.7 GB where 5.1 GB were live)."""
    try:
        import ctypes   # only where a step gives memory back: most commands never load it
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
