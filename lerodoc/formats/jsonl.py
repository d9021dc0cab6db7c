"""Meta-file I/O shared by the format modules: JSON, JSON lines, stats, and atomic replacement.

Every meta file is written to a temporary name and renamed over its target, so a file that is a hard
link into another dataset (see staging.staged_edit) is replaced, never written through.

Every meta file read is untrusted input (docs/security.md), held to bounds before it is parsed: what parsing its
size and lines would take, against the memory budget (lerodoc.budget), the size of each JSON document in it, the
length of each string and how deep lists and objects nest (`check_json`, on the bytes: nothing is built from a
file over them, and neither json.loads' RecursionError nor pyarrow's JSON reader, which crashes the process on
10^5 levels, is ever reached). What is parsed is then held to its fields' types, a whole number to int64's range
(an index of 10^300 makes no path). Going over any is a LerodocError (exit 3) naming the file, the line and the
bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from lerodoc import access, budget
from lerodoc.errors import LerodocError
from lerodoc.files import new_file


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


# What parsing a meta file costs, held to the memory budget (lerodoc.budget) before it is read: Python objects take
# several times the JSON text they come from, and each record of a JSON-lines file some hundreds of bytes however
# short its line (`{}`).
PARSED_PER_BYTE = 4
PARSED_PER_LINE = 400
# Bounds on a dataset's meta JSON, far past any real dataset: lerobot's largest v2.1 episodes files hold ~10^5 lines
# of ~100 bytes (their per-episode stats a few KB each), its deepest nesting is 7 levels (an image's per-episode
# stats: line, stats, feature, stat, then 3x1x1), its longest strings are task texts of a sentence.
MAX_DOCUMENT_BYTES = 16 << 20   # one JSON document: a .json file, or one line of a JSON-lines file
MAX_DEPTH = 64                  # lists and objects nested in one document
MAX_STRING = 1 << 20            # the bytes of one string (a task, a robot_type, a name), as the file spells it
MAX_WHOLE = 2 ** 63 - 1         # the largest whole number a typed field holds (an index, a length): int64, as parquet


def read_json(path: Path) -> dict:
    """Parse a JSON file, turning a missing, malformed or over-budget file into a clear error."""
    if not path.is_file():
        raise LerodocError("file is missing", file=path,
                           hint="is this the root of a LeRobot dataset (the folder holding meta/)?")
    data = read_bytes(path)
    text = _decoded(data, path)
    check_json(data, path)
    return loads(text, path)


def loads(text: str, path: object, line: int | None = None):
    """json.loads of a document `check_json` passed (or one that is small), each way it can fail a LerodocError
    naming `path` and `line`: malformed JSON, an integer of more than 4300 digits (Python's own limit), and nesting
    past the interpreter's recursion limit."""
    where = f"line {line} " if line is not None else ""
    try:
        return json.loads(text)
    except RecursionError:
        raise LerodocError(f"{where}nests lists and objects deeper than Python parses (lerodoc reads up to "
                           f"{MAX_DEPTH} levels)", file=path) from None
    except (ValueError, UnicodeDecodeError) as exc:   # JSONDecodeError, and an integer past int's digit limit
        raise LerodocError(f"{where}is not valid JSON ({' '.join(str(exc).split())[:200]})", file=path) from None


def parse(data: bytes, path: object):
    """A JSON document a dataset file holds inside it (a parquet schema's pandas or huggingface metadata), held to
    `check_json`'s bounds before it is parsed: anything it cannot be is a LerodocError naming `path`."""
    text = _decoded(data, path)
    check_json(data, path)
    return loads(text, path)


def read_bytes(path: Path) -> bytes:
    """A meta file's bytes, refused before it is read when parsing them would go over the memory budget (its size as
    stat says, PARSED_PER_BYTE times: a sparse file of 10 GB takes no room on disk but would take 10 GB to read)."""
    try:
        size = path.stat().st_size
        budget.check(size * PARSED_PER_BYTE, f"reading and parsing its {size:,} bytes of JSON", file=path)
        return access.read_bytes(path)
    except OSError as exc:
        raise LerodocError(f"cannot be read ({exc.strerror or exc})", file=path) from None


def _decoded(data: bytes, path: Path, line0: int = 0) -> str:
    """`data` as text; bytes that are not UTF-8 are a LerodocError naming the line (`line0` lines precede `data`)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1 + line0
        raise LerodocError(f"line {line} is not UTF-8 text (byte {exc.object[exc.start:exc.start + 1]!r} "
                           f"at offset {exc.start})", file=path) from None


def read_text(path: Path) -> str:
    """A meta file's text; bytes that are not UTF-8 (a flipped bit) are a LerodocError naming the offset."""
    return _decoded(read_bytes(path), path)


_STEP = np.zeros(256, np.int8)   # how a byte changes the nesting, outside strings
_STEP[[ord("["), ord("{")]], _STEP[[ord("]"), ord("}")]] = 1, -1
_QUOTE, _NEWLINE = ord('"'), ord("\n")
_KIND = (_STEP != 0) | (np.arange(256) == _QUOTE)   # the bytes `_scan` looks at: brackets and quotes
_LINE_KIND = _KIND | (np.arange(256) == _NEWLINE)    # and, in JSON lines, newlines
_CHUNK = 1 << 20   # bytes scanned at once (whole lines of JSON lines): some 20 bytes of numpy arrays each
NEWLINE = b"\n"


def check_json(data: bytes, path: object, lines: bool = False, line0: int = 0) -> None:
    """Refuse `data`, a JSON document (with `lines`, JSON lines), before it is parsed, when it breaks a bound: more
    than MAX_DOCUMENT_BYTES in a document, more lines than the memory budget parses (PARSED_PER_LINE each), a string
    longer than MAX_STRING bytes, or lists and objects nested deeper than MAX_DEPTH. One pass of numpy over the
    bytes (`_scan`); a malformed document is left to the parser to name. `line0`: the lines of the file before
    `data` (a run of its lines, `line_runs`), for the line a message names."""
    if lines:
        count = data.count(NEWLINE) + (not data.endswith(NEWLINE))
        budget.check(count * PARSED_PER_LINE, f"parsing its {count:,} lines of JSON", file=path)
    if len(data) > MAX_DOCUMENT_BYTES:
        long = _longest_line(data) if lines else 0
        if not lines or long[1] > MAX_DOCUMENT_BYTES:
            where = _line(data, long[0], line0) if lines else ""
            raise LerodocError(f"{where}holds more than {MAX_DOCUMENT_BYTES:,} bytes of JSON, the most lerodoc reads "
                               f"in one {'line' if lines else 'file'}", file=path)
    if len(data) <= MAX_STRING and data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return   # no string in it can be longer, and no more brackets open than that: neither bound can break
    # an escaped backslash, then an escaped quote, as two plain bytes: each string keeps its length and its quotes
    plain = data.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b"\\" in data else data
    found = _scan(plain, lines)
    if found is None:
        return
    kind, offset, size = found
    line = _line(data, offset, line0) if lines else ""
    if kind == "string":
        raise LerodocError(f"{line}holds a string of {size:,} bytes; lerodoc reads strings of up to {MAX_STRING:,}",
                           file=path)
    raise LerodocError(f"{line}nests lists and objects deeper than {MAX_DEPTH} levels, the most lerodoc reads",
                       file=path)


def _longest_line(data: bytes) -> tuple[int, int]:
    """(offset, bytes) of the longest line of `data`."""
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == _NEWLINE)
    starts = np.concatenate(([0], ends + 1))
    sizes = np.append(ends, len(data)) - starts
    longest = int(np.argmax(sizes))
    return int(starts[longest]), int(sizes[longest])


def _line(data: bytes, offset: int, line0: int = 0) -> str:
    return f"line {data.count(NEWLINE, 0, offset) + 1 + line0} "


def _scan(plain: bytes, lines: bool) -> tuple[str, int, int] | None:
    """("string", offset, bytes) of the first string longer than MAX_STRING, or ("depth", offset, 0) where lists
    and objects first nest deeper than MAX_DEPTH, in `plain` (JSON whose escaped backslashes and quotes are plain
    bytes, so every quote begins or ends a string); else None. A byte is inside a string when an odd number of quotes
    precede it (on its line, for JSON lines, each line counting from its start). A line with an odd number of quotes
    is malformed (the parser names it): its opening brackets count, wherever they are, its closing ones do not, so
    that no line reaches a parser nested deeper (pyarrow's reader, v21's per-episode stats, crashes at 10^5 levels).
    Only the bytes that matter are looked at after one pass: quotes, brackets and (JSON lines) newlines, a few in a
    hundred of a document of numbers."""
    carry_quotes = carry_level = opened = 0   # a document's state where the previous chunk ended (not JSON lines)
    kinds = _LINE_KIND if lines else _KIND
    for start, end in _chunks(plain, lines):
        a = np.frombuffer(plain, np.uint8, count=end - start, offset=start)
        at = np.flatnonzero(kinds[a])          # the bytes that matter, in order
        if not len(at):
            continue
        kind = a[at]
        is_quote, newline = kind == _QUOTE, kind == _NEWLINE
        line = np.cumsum(newline, dtype=np.int32) - newline   # each event's line (a newline's: the one it ends)
        count = int(np.count_nonzero(newline & (at < len(a) - 1))) + 1   # lines in the chunk
        ends = np.flatnonzero(newline)
        quotes = np.cumsum(is_quote, dtype=np.int32) + carry_quotes
        before = np.concatenate(([0], quotes[ends]))[:count]   # quotes before each line (JSON lines)
        after = np.append(quotes[ends], quotes[-1])[:count]
        bad = ((after - before) & 1).astype(bool) if lines else np.zeros(count, bool)
        ok = ~bad[line]
        inside = ((quotes - before[line]) & 1).astype(bool) & ok
        marks = at[is_quote & ok] + start
        if carry_quotes & 1:   # a string of the document opened in an earlier chunk
            marks = np.concatenate(([opened], marks))
        if len(marks) % 2:
            opened, marks = int(marks[-1]), marks[:-1]
        if len(marks):
            sizes = marks[1::2] - marks[0::2] - 1
            over = np.flatnonzero(sizes > MAX_STRING)
            if len(over):
                return "string", int(marks[2 * over[0]]), int(sizes[over[0]])
        step = _STEP[kind]
        step[inside | ~ok & (step < 0)] = 0   # a malformed line: its opening brackets bound how deep it nests
        running = np.cumsum(step, dtype=np.int32) + carry_level
        level = np.concatenate(([0], running[ends]))[:count]
        over = np.flatnonzero(running - level[line] > MAX_DEPTH)
        if len(over):
            return "depth", start + int(at[over[0]]), 0
        if not lines:
            carry_quotes, carry_level = int(quotes[-1]), int(running[-1])
    return None


def _chunks(data: bytes, lines: bool):
    """(start, end) of each chunk of about _CHUNK bytes, JSON lines cut only after a newline."""
    start = 0
    while start < len(data):
        end = min(start + _CHUNK, len(data))
        if lines and end < len(data):
            newline = data.find(NEWLINE, end - 1)
            end = len(data) if newline < 0 else newline + 1
        yield start, end
        start = end


RUN_BYTES = 8 << 20   # the bytes of whole lines `line_runs` reads at once (a line longer: that line alone)


def line_runs(path: Path, size: int | None = None):
    """(lines before, bytes) of each run of whole lines of `path`, about `size` bytes each, read in turn: memory held
    for one run, not the file. Each run is held to `check_json`'s bounds; a line over MAX_DOCUMENT_BYTES is a
    LerodocError naming it before more of it is read (a sparse file of 10 GB reads 16 MiB of it)."""
    if not path.is_file():
        raise LerodocError("file is missing", file=path)
    lines, rest, size = 0, b"", size or RUN_BYTES
    try:
        with access.open_binary(path) as f:
            while True:
                block = f.read(size)
                data = rest + block if rest else block
                end = data.rfind(NEWLINE) + 1 if block else len(data)
                if not end and len(data) > MAX_DOCUMENT_BYTES:
                    raise LerodocError(f"line {lines + 1} holds more than {MAX_DOCUMENT_BYTES:,} bytes of JSON, the "
                                       f"most lerodoc reads in one line", file=path)
                if end:
                    run, rest = data[:end], data[end:]
                    check_json(run, path, lines=True, line0=lines)
                    yield lines, run
                    lines += run.count(NEWLINE)
                else:
                    rest = data
                if not block:
                    return
    except OSError as exc:
        raise LerodocError(f"cannot be read ({exc.strerror or exc})", file=path) from None


def parse_lines(run: bytes | str, path: Path, line0: int = 0, fields: dict[str, type] | None = None):
    """The records of `run`, whole lines of a JSON-lines file (`line0` lines before them) that `check_json` passed:
    each a JSON object whose `fields` present have their type (`read_jsonl`)."""
    text = run if isinstance(run, str) else _decoded(run, path, line0)
    rows = []
    for lineno, line in enumerate(text.split("\n"), line0 + 1):
        if not line.strip():
            continue
        value = loads(line, path, lineno)
        if not isinstance(value, dict):
            raise LerodocError(f"line {lineno} is {_kind(value)}, not a JSON object", file=path)
        for key, kind in (fields or {}).items():
            if key in value and not _is(value[key], kind):
                raise LerodocError(f"line {lineno}: must be {_KINDS[kind]}, got {json.dumps(value[key])[:60]}",
                                   file=path, field=key)
        rows.append(Row(value, path, lineno))
    return rows


def read_jsonl(path: Path, fields: dict[str, type] | None = None) -> list[dict]:
    """The file's records in order; each must be a JSON object, and each of `fields` present must have its
    type (int: a whole number in int64's range; float: any number)."""
    if not path.is_file():
        raise LerodocError("file is missing", file=path)
    data = read_bytes(path)
    text = _decoded(data, path)
    check_json(data, path, lines=True)
    return parse_lines(text, path, 0, fields)


_KINDS = {int: "a whole number in int64's range", float: "a number", str: "a string", dict: "an object",
          list: "a list"}


def _is(value, kind: type) -> bool:
    if kind is int:
        whole = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and \
            value.is_integer()
        return whole and -MAX_WHOLE <= value <= MAX_WHOLE
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def _kind(value) -> str:
    return {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    """One JSON object a line, written as `rows` gives them: 20,000 episodes' stats lines were first joined into one
    string, beside the list of their dicts."""
    with new_file(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


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
