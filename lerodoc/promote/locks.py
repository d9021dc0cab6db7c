"""One writer per output: a lock file beside the staging folder, held while a command writes and promotes.

`.NAME.lerodoc-lock` sits beside the output `NAME` (for --in-place, beside the dataset itself) and is held with
an exclusive flock(2) from before the staging folder is made until the output is promoted. A second command
writing the same -o, or --in-place on the same dataset, finds it held and stops at once (exit 3), naming the
lock and the command that holds it, so the output is never a mix of two writers. The kernel drops a flock when
its holder exits, however it exits (a crash, SIGKILL, a power cut), so a lock file left by a dead command is
stale by construction and the next command takes it over. Where the file system has no flock (some network
file systems), the pid and host written in the file decide: a pid alive on this host holds the lock.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lerodoc.errors import LerodocError, no_room

LOCK_SUFFIX = ".lerodoc-lock"
NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)   # the file system does not lock


def lock_path(out: Path) -> Path:
    """Where the lock of output `out` lives: a hidden file beside it (and beside its staging folder)."""
    out = Path(out).absolute()
    return out.parent / f".{out.name}{LOCK_SUFFIX}"


@contextmanager
def output_lock(out: Path) -> Iterator[Path]:
    """Hold the lock of output `out` for the block (its path is yielded); LerodocError (exit 3) at once when
    another live command holds it. The lock file is removed when the block ends."""
    path = lock_path(out)
    fd = _acquire(path)
    try:
        yield path
    finally:
        try:   # removed while still held: a command that opened it meanwhile sees another inode and retries
            if _same_file(path, fd):
                path.unlink()
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)   # explicit: a forked worker may still hold the descriptor
            except OSError:
                pass
            os.close(fd)


def _acquire(path: Path) -> int:
    for _ in range(8):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise no_room(exc, path) or LerodocError(
                f"cannot create the lock file that keeps two commands from writing one output ({exc.strerror})",
                file=path, hint="the output's folder must be writable") from None
        try:
            if os.fstat(fd).st_nlink > 1:   # never write into a file that has another name (an input's, say)
                raise LerodocError("the lock file has other names (hard links); lerodoc will not write into it",
                                   file=path, hint="remove it, then run the command again")
            if not _lock(fd, path):
                raise LerodocError(f"another lerodoc command ({_holder(fd)}) is writing this output; two writers "
                                   "would mix their files, so this one stops here", file=path,
                                   hint="wait for that command to finish, or write to another -o; the lock goes "
                                        "when that command ends, however it ends")
        except BaseException:
            os.close(fd)
            raise
        if _same_file(path, fd):   # not unlinked by a writer finishing between our open and our lock
            _stamp(fd, path)
            return fd
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    raise LerodocError("could not take the output's lock: it keeps being replaced", file=path,
                       hint="another program is creating and removing this file; stop it and run again")


def _lock(fd: int, path: Path) -> bool:
    """Whether the exclusive lock is ours: flock, or, where the file system has none, no live pid in the file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno not in NO_FLOCK:
            raise LerodocError(f"cannot lock the output ({exc.strerror})", file=path) from None
    holder = _read(fd)
    return not (holder and holder.get("host") == socket.gethostname() and _alive(holder.get("pid")))


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True    # someone else's live process
    return True


def _read(fd: int) -> dict:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _holder(fd: int) -> str:
    holder = _read(fd)
    if not holder:
        return "its pid unknown"
    command = holder.get("command")
    return f"pid {holder.get('pid')} on {holder.get('host')}" + (f": {command}" if command else "")


def _stamp(fd: int, path: Path) -> None:
    """Write who holds the lock (pid, host, command line) for the message a second command shows."""
    text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "command": " ".join(["lerodoc", *sys.argv[1:]])[:1000]}).encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    except OSError as exc:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        raise no_room(exc, path) or LerodocError(f"cannot write the lock file ({exc.strerror})", file=path) from None


def _same_file(path: Path, fd: int) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False
