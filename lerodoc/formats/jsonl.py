"""Meta-file I/O shared by the format modules: JSON, JSON lines, stats, and atomic replacement.

Every meta file is written to a temporary name and renamed over its target, so a file that is a hard
link into another dataset (see staging.staged_edit) is replaced, never written through.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lerodoc import access
from lerodoc.errors import LerodocError
from lerodoc.execution.files import new_file


def replace_file(path: Path, write) -> None:
    """Call `write(tmp_path)`, then rename the result over `path` (atomic; never writes into `path`'s inode):
    `files.new_file`, whose temporary name no file (a hard link into an input included) can already have, and
    which names `path` when the disk is full."""
    with new_file(path) as tmp:
        write(tmp)


def write_text(path: Path, text: str) -> None:
    replace_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: Path, obj, indent: int = 4) -> None:
    write_text(path, json.dumps(obj, indent=indent) + "\n")


class Row(dict):
    """One JSON-lines record; a missing key is a LerodocError naming the file, the line and the key."""

    def __init__(self, values: dict, path: Path, lineno: int):
        super().__init__(values)
        self.path, self.lineno = path, lineno

    def __missing__(self, key):
        raise LerodocError(f"line {self.lineno} lacks the key {key!r}", file=self.path, field=str(key))


def read_json(path: Path) -> dict:
    """Parse a JSON file, turning a missing or malformed file into a clear error."""
    if not path.is_file():
        raise LerodocError("file is missing", file=path,
                           hint="is this the root of a LeRobot dataset (the folder holding meta/)?")
    try:
        return json.loads(read_text(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LerodocError(f"is not valid JSON ({exc})", file=path) from None


def read_text(path: Path) -> str:
    """A meta file's text; bytes that are not UTF-8 (a flipped bit) are a LerodocError naming the offset."""
    try:
        return access.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise LerodocError(f"line {line} is not UTF-8 text (byte {exc.object[exc.start:exc.start + 1]!r} "
                           f"at offset {exc.start})", file=path) from None
    except OSError as exc:
        raise LerodocError(f"cannot be read ({exc.strerror or exc})", file=path) from None


def read_jsonl(path: Path, fields: dict[str, type] | None = None) -> list[dict]:
    """The file's records in order; each must be a JSON object, and each of `fields` present must have its
    type (int: a whole number; float: any number)."""
    if not path.is_file():
        raise LerodocError("file is missing", file=path)
    rows = []
    for lineno, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LerodocError(f"line {lineno} is not valid JSON ({exc})", file=path) from None
        if not isinstance(value, dict):
            raise LerodocError(f"line {lineno} is {_kind(value)}, not a JSON object", file=path)
        for key, kind in (fields or {}).items():
            if key in value and not _is(value[key], kind):
                raise LerodocError(f"line {lineno}: must be {_KINDS[kind]}, got {json.dumps(value[key])[:60]}",
                                   file=path, field=key)
        rows.append(Row(value, path, lineno))
    return rows


_KINDS = {int: "a whole number", float: "a number", str: "a string", dict: "an object", list: "a list"}


def _is(value, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def _kind(value) -> str:
    return {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def stats_from_json(raw: dict, source: Path | None = None,
                    episode: int | None = None) -> dict[str, dict[str, np.ndarray]]:
    """{feature: {stat: nested list}} -> arrays; scalars become shape (1,) as lerobot loads them.

    Anything else (null, a string, a ragged list) is a LerodocError naming `source`, the episode and the
    feature.stat it found there.
    """
    if not isinstance(raw, dict):
        raise LerodocError(f"stats are {_kind(raw)}, not an object of features", file=source, episode=episode)
    out = {}
    for feat, by_stat in raw.items():
        if not isinstance(by_stat, dict):
            raise LerodocError(f"is {_kind(by_stat)}, not an object of stats", file=source, episode=episode,
                               field=feat)
        out[feat] = {}
        for name, value in by_stat.items():
            try:
                array = np.asarray(value, dtype=np.int64 if name == "count" else np.float64)
            except (TypeError, ValueError, OverflowError):
                raise LerodocError(f"is not a number or a list of numbers ({str(value)[:40]})", file=source,
                                   episode=episode, field=f"{feat}.{name}") from None
            out[feat][name] = np.atleast_1d(array)
    return out


def stats_to_json(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    return {feat: {name: np.asarray(value).tolist() for name, value in by_stat.items()}
            for feat, by_stat in stats.items()}
