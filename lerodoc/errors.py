"""One error type for bad input, and the exit codes every command uses."""

from __future__ import annotations

import errno
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1          # validate found errors
    USAGE = 2             # bad command line (Typer's own code)
    BAD_INPUT = 3         # the dataset or an argument is unusable; nothing was written
    VERIFY_FAILED = 4     # the output failed verification and was not promoted
    NETWORK = 5           # the hub could not be reached or refused; files already fetched are kept
    BUG = 70              # an unexpected exception: a bug in lerodoc, not in the input (EX_SOFTWARE)
    INTERRUPTED = 130


class LerodocError(Exception):
    """A problem with the user's input, rendered once as a one-paragraph message.

    `file`, `episode` and `field` locate the problem; `hint` names what fixes it.
    """

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, message: str, *, file: object = None, episode: int | None = None,
                 field: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = None if file is None else str(file)
        self.episode = episode
        self.field = field
        self.hint = hint

    def __reduce__(self):
        """Pickle by state, not by __init__'s arguments, so that subclasses with their own signatures cross
        process boundaries (a worker's error reaches the parent whole, not as an unpickling failure)."""
        return _restore, (type(self), dict(self.__dict__))

    def location(self) -> str:
        parts = [self.file] if self.file else []
        if self.episode is not None:
            parts.append(f"episode {self.episode}")
        if self.field:
            parts.append(self.field)
        return ": ".join(parts)

    def render(self) -> str:
        where = self.location()
        text = f"{where}: {self.message}" if where else self.message
        return f"{text} ({self.hint})" if self.hint else text

    def to_json(self) -> dict:
        """The `error` of the --json envelope (render.envelope, docs/json.md)."""
        return {"message": self.message, "file": self.file, "episode": self.episode, "field": self.field,
                "hint": self.hint}


class UsageError(LerodocError):
    """A command line that cannot be right for this dataset (an episode or a channel it does not hold, a reversed
    range): exit 2 like Typer's own usage errors, though found only once the dataset is read."""

    exit_code = ExitCode.USAGE


class VerificationError(LerodocError):
    """The written output does not match what was read; it is left unpromoted."""

    exit_code = ExitCode.VERIFY_FAILED


# A write that ran out of room: what each errno means to the user.
NO_ROOM = {errno.ENOSPC: "no space is left on its device",
           errno.EDQUOT: "the disk quota is used up",
           errno.EFBIG: "it outgrew the largest file allowed here (the file system's limit, or the process's: "
                        "ulimit -f)"}


def no_room(exc: BaseException, file: object = None) -> LerodocError | None:
    """A write that found the disk full (ENOSPC), the quota used up (EDQUOT) or the file-size limit reached (EFBIG)
    as one LerodocError naming `file` (default: the error's own file name); None for any other exception."""
    if not isinstance(exc, OSError) or exc.errno not in NO_ROOM:
        return None
    hint = ("raise the limit, or write the output to a file system that holds larger files" if exc.errno == errno.EFBIG
            else "free some space, or write the output to another disk")
    return LerodocError(f"cannot be written: {NO_ROOM[exc.errno]}; nothing was written and the input is untouched",
                        file=file or exc.filename, hint=hint)


def _restore(cls: type, state: dict) -> LerodocError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, state.get("message"))
    exc.__dict__.update(state)
    return exc
