"""All terminal output: tables, messages and progress on stderr/stdout, JSON on stdout; the one place that formats.

Text is printed literally: rich markup is off on both consoles, so a task `the [red] cube` or an option's
`feature[name,glob*]` prints as typed; style comes only from `message` and the table header. On a terminal, tables
fit its width by wrapping cells between whole names (a name is never cut); where even whole names cannot fit, each
row prints as a block of `column: value` lines. Output that is not a terminal (a pipe, a file) is plain full-width
lines, one per row, so `lerodoc info DS | grep observation.state` finds it.

Every string a dataset supplies is hostile (a `robot_type`, a task, a feature key or name, a path), and every
string printed goes through `shown` on its way out: control characters (C0 but newline and tab, DEL, C1) and the
bidirectional overrides and isolates (U+202A-202E, U+2066-2069) print as visible escapes (`\\x1b`, `\\u202e`), so
no escape sequence a dataset holds reaches the terminal (OSC 52 would set the clipboard, CSI 2J clear the screen),
and a run of more than WORD_LIMIT characters without a space, or a line of more than LINE_LIMIT, prints as its head
and tail around the count of characters it holds (a 200 MB robot_type prints as a line). The consoles apply it to
every string they print (and escape every Text), tables to every cell, and the messages, the error paragraph,
headings and progress labels to their text, so no command has to.

`--json` output is one envelope (docs/json.md): `{"command", "version", "ok", "exit_code", ...result, "error"?}`.
It is escaped as JSON escapes (ASCII only: a control or bidi character is `\\u001b`, `\\u202e`) and not cut: it is
for programs, which get every character; the readers' budgets bound what a dataset can make it hold (a meta JSON
file, formats.jsonl.MAX_DOCUMENT_BYTES; one string in it, MAX_STRING).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import warnings
from contextlib import contextmanager
from lerodoc import __version__
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

PLAIN_WIDTH = 1 << 16      # the width of output that is not a terminal: lines are never wrapped

# --- what a dataset says, made safe to show -------------------------------------------------------------------------

WORD_LIMIT = 256    # characters of one run without a space shown whole: any feature name (255 bytes at most) fits
LINE_LIMIT = 1000   # characters of one line shown whole (lerodoc's own longest lines, its check catalogue, are ~300)
# C0 controls but tab and newline, DEL, C1, the bidi embeddings and overrides, the bidi isolates
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_LONG_WORD = re.compile(r"\S{%d,}" % (WORD_LIMIT + 1))
_LONG_LINE = re.compile(r"[^\n]{%d,}" % (LINE_LIMIT + 1))
_MARK = 40          # room for the cut's mark, "…(1,000,000,000,000 characters)…"


def shown(text: object) -> str:
    """`text` as it may reach a terminal: each run without a space longer than WORD_LIMIT, then each line longer
    than LINE_LIMIT, cut to its head and tail around `…(N characters)…`; then each control or bidi character as a
    visible escape (ESC as `\\x1b`, RLO as `\\u202e`). Cutting comes first, so that a 200 MB string costs a scan and
    a copy of a thousand characters, not its escaped copy."""
    text = text if isinstance(text, str) else str(text)
    if len(text) > WORD_LIMIT:
        text = _LONG_WORD.sub(lambda m: _cut(m.group(), WORD_LIMIT), text)
    if len(text) > LINE_LIMIT:
        text = _LONG_LINE.sub(lambda m: _cut(m.group(), LINE_LIMIT), text)
    return _escaped(text)


def _cut(text: str, limit: int) -> str:
    keep = limit - _MARK
    head = keep * 3 // 4
    return f"{text[:head]}…({len(text):,} characters)…{text[len(text) - (keep - head):]}"


def _escaped(text: str) -> str:
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _console(stderr: bool):
    """A console whose width is the terminal's, or unlimited when it writes to a pipe or a file (rich would take
    the width of another stream's terminal, or 80, and cut piped lines there), and that prints every string it is
    given as `shown` makes it (a command's `render.out().print(f"... {task} ...")` included), every Text escaped."""
    # rich: --help prints click's plain text; render's consoles are made on first use
    from rich.console import Console, ConsoleDimensions
    from rich.text import Text

    class _Console(Console):
        @property
        def size(self) -> ConsoleDimensions:
            if not self.is_terminal:
                return ConsoleDimensions(PLAIN_WIDTH, 25)
            return super().size

        @size.setter
        def size(self, new_size) -> None:
            Console.size.fset(self, new_size)

        def print(self, *objects, **options) -> None:
            super().print(*(_shown_renderable(o, Text) for o in objects), **options)

        def on_broken_pipe(self) -> None:   # rich would exit 1, the code for findings: cli.main ends quietly instead
            raise BrokenPipeError
    return _Console(stderr=stderr, markup=False, highlight=False, emoji=False)


def _shown_renderable(renderable, text_type):
    """A str as `shown` makes it; a Text (render.py makes its Texts of shown strings, already cut) with any control or
    bidi character escaped, as a Text of its style (spans dropped); anything else as it is (a table shows its own
    cells)."""
    if isinstance(renderable, str):
        return shown(renderable)
    if isinstance(renderable, text_type) and _UNSAFE.search(renderable.plain):
        return text_type(_escaped(renderable.plain), style=renderable.style, justify=renderable.justify,
                         end=renderable.end)
    return renderable


@functools.cache
def out() -> Console:
    """The console on stdout, made on first use: rich is most of what a command's start-up imports, and
    `lerodoc --help` prints without it."""
    return _console(stderr=False)


@functools.cache
def err() -> Console:
    """The console on stderr (messages, progress), made on first use."""
    return _console(stderr=True)


QUIET, NORMAL, VERBOSE = 0, 1, 2
level = NORMAL               # set once by the root options -q / -v
command: str | None = None   # the command line's command ("info", "train pi05"), named in the JSON envelope
ENVELOPE = ("command", "version", "ok", "exit_code")


def transfer_line(transfer: dict | None) -> str | None:
    """What reading a hub dataset cost, in words (lerodoc.access.HubStore.transfer), or None for a local one."""
    if not transfer:
        return None
    share = transfer["bytes"] / transfer["repository_bytes"] if transfer["repository_bytes"] else 0
    return (f"read {human_bytes(transfer['bytes'])} in {transfer['requests']} requests from {transfer['source']} "
            f"({share:.1%} of its {human_bytes(transfer['repository_bytes'])})")


def set_level(quiet: bool, verbose: bool) -> None:
    """The root options -q / -v, for this process (a launched training process is given them again): -q keeps
    only errors and results (no progress, warnings, notes, library logs or hub progress bars); -v adds details and
    the libraries' log on stderr."""
    global level
    level = QUIET if quiet else VERBOSE if verbose else NORMAL
    # logging: --help imports this module and loads no logging
    import logging
    if quiet:
        warnings.simplefilter("ignore")
        logging.basicConfig(level=logging.ERROR)
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"   # read when huggingface_hub loads
        if "huggingface_hub" in sys.modules:
            # huggingface_hub: loaded only for hub work, never by --help or a local command
            from huggingface_hub.utils import disable_progress_bars
            disable_progress_bars()
    elif verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")


def shows_progress(wanted: bool = True) -> bool:
    """Whether a progress bar or live line is drawn: where the command wants one (not under --json, say) and -q is
    not given."""
    return wanted and level > QUIET


def message(kind: str, text: str, *, style: str = "yellow") -> None:
    """`kind: text` on stderr, the kind styled (warning, note); nothing under -q (only errors and results)."""
    if level > QUIET:
        # rich: --help prints click's plain text; render's consoles are made on first use
        from rich.text import Text
        console = err()
        console.print(Text.assemble((f"{kind}:", style), " ", shown(text)), soft_wrap=not console.is_terminal)


def warning(text: str) -> None:
    message("warning", text)


def note(text: str) -> None:
    """A plain line on stderr about what the command is doing (train's start line); nothing under -q."""
    if level > QUIET:
        # rich: --help prints click's plain text; render's consoles are made on first use
        from rich.text import Text
        console = err()
        console.print(Text(shown(text)), soft_wrap=not console.is_terminal)


def detail(text: str) -> None:
    """More detail, printed only under -v."""
    if level >= VERBOSE:
        # rich: --help prints click's plain text; render's consoles are made on first use
        from rich.text import Text
        console = err()
        console.print(Text(shown(text), style="dim"), soft_wrap=not console.is_terminal)


def error(text: str, *, prefix: str = "error:") -> None:
    """The one-paragraph error, always printed (-q keeps errors)."""
    # rich: --help prints click's plain text; render's consoles are made on first use
    from rich.text import Text
    console = err()
    console.print(Text.assemble((prefix, "bold red"), " ", shown(text)), soft_wrap=not console.is_terminal)


def heading(text: str) -> None:
    # rich: --help prints click's plain text; render's consoles are made on first use
    from rich.text import Text
    out().print(Text(shown(text), style="bold"))


# --- JSON ---------------------------------------------------------------------------------------------------------

def envelope(result: dict | None = None, *, exit_code: int = 0, error: dict | None = None) -> dict:
    """The JSON every `--json` prints, success or failure: the command, lerodoc's version, whether it succeeded
    (exit 0), its exit code, the command's own result keys, and `error` ({message, file, episode, field, hint})
    when it failed with one."""
    body = dict(zip(ENVELOPE, (command, __version__, int(exit_code) == 0, int(exit_code))))
    clash = [k for k in (result or {}) if k in ENVELOPE or k == "error"]
    if clash:
        raise ValueError(f"a --json result may not use the envelope's keys: {clash}")
    body.update(result or {})
    if error is not None:
        body["error"] = error
    return body


def print_json(result: dict, *, exit_code: int = 0) -> None:
    """A command's result as the JSON envelope on stdout (`exit_code`: the code the command is about to exit
    with, 1 when it reports findings); kept back instead while `held_json` runs."""
    body = envelope(result, exit_code=exit_code)
    if _held is not None:
        _held.append(body)
        return
    write_json(body)


_held: list[dict] | None = None


@contextmanager
def held_json():
    """Yield the list that the envelopes `print_json` makes go to while the block runs, instead of stdout: a step
    after the command (--push-to-hub) adds its own keys, then writes them (`write_json`). An error leaves them
    unwritten: the error's envelope is the one printed."""
    global _held
    saved, _held = _held, []
    try:
        yield _held
    finally:
        _held = saved


def write_json(body: dict) -> None:
    """`body` as JSON on stdout, ASCII only: every control, bidi or other non-ASCII character a dataset string holds is
    a `\\uXXXX` escape, so no raw byte of one reaches a terminal that shows the JSON (see the module's docstring)."""
    sys.stdout.write(json.dumps(body, indent=2, default=str, ensure_ascii=True) + "\n")
    sys.stdout.flush()


# --- tables -------------------------------------------------------------------------------------------------------

_WORD = re.compile(r"\S+")


def _width(text: str) -> int:
    """Terminal cells `text` takes (wide characters count two)."""
    # rich: --help prints click's plain text; render's consoles are made on first use
    from rich.cells import cell_len
    return cell_len(text)


def _longest_word(text: str) -> int:
    return max((_width(w) for w in _WORD.findall(text)), default=0)


def _widest_line(text: str) -> int:
    return max((_width(line) for line in text.split("\n")), default=0)


GAP = 2   # spaces between two columns of a terminal table


def fit_widths(columns: list[str], rows: list[list[str]], width: int) -> list[int] | None:
    """The content width of each column so that the table fits `width` characters, or None when it cannot.

    Whole cells when they fit; else every column at least as wide as its longest word (a feature name, a path, a
    channel name is never cut) and its header (else the header's longest word), and the room left shared out in
    proportion to how much each column would still wrap. None when even the longest words do not fit side by
    side (the table then prints as records)."""
    n = len(columns)
    room = width - GAP * (n - 1)
    cells = [[columns[i], *(row[i] for row in rows)] for i in range(n)]
    full = [max(_widest_line(c) for c in col) for col in cells]
    if sum(full) <= room:
        return full
    words = [max((_longest_word(c) for c in col[1:]), default=0) for col in cells]
    for least in ([max(_width(col[0]), w, 1) for col, w in zip(cells, words)],
                  [max(_longest_word(col[0]), w, 1) for col, w in zip(cells, words)]):
        if sum(least) <= room:
            return _share(least, full, room)
    return None


def _share(least: list[int], full: list[int], room: int) -> list[int]:
    """`least` widened towards `full` with the room left, in proportion to what each column lacks."""
    spare = room - sum(least)
    want = [max(f - m, 0) for f, m in zip(full, least)]
    total = sum(want) or 1
    widths = [m + spare * w // total for m, w in zip(least, want)]
    for i in sorted(range(len(widths)), key=lambda i: want[i], reverse=True):   # the rounding remainder
        if sum(widths) >= room:
            break
        if widths[i] < max(full[i], least[i]):
            widths[i] += 1
    return widths


class _Table:
    """A table that fits its console (see `fit_widths`), or a block of `column: value` lines per row."""

    def __init__(self, title: str, columns: list[str], rows: list[list]):
        self.title = shown(title)
        self.columns = [shown(c) for c in columns]
        self.rows = [["" if v is None else shown(v) for v in row] for row in rows]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # rich: --help prints click's plain text; render's consoles are made on first use
        from rich import box
        from rich.table import Table
        if not console.is_terminal:
            yield from self._plain()
            return
        widths = fit_widths(self.columns, self.rows, options.max_width)
        if widths is None:
            yield from self._records(options.max_width)
            return
        t = Table(title=self.title or None, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, GAP - 1, 0, 0), header_style="bold")
        for name, w in zip(self.columns, widths):
            t.add_column(name, width=w, overflow="fold")
        for row in self.rows:
            t.add_row(*row)
        yield t

    def _plain(self) -> RenderResult:
        """For a pipe or a file: the title, then the header and each row on one line, cells in aligned columns
        two spaces apart, nothing cut, no rules."""
        # rich: --help prints click's plain text; render's consoles are made on first use
        from rich.text import Text
        lines = [self.columns, *self.rows]
        widths = [max(_widest_line(line[i]) for line in lines) for i in range(len(self.columns))]
        if self.title:
            yield Text(self.title)
        for line in lines:
            cells = [" ".join(c.split("\n")) for c in line]
            yield Text("  ".join(c + " " * (w - _width(c)) for c, w in zip(cells, widths)).rstrip())

    def _records(self, width: int) -> RenderResult:
        """Too wide for the terminal even with whole names: each row as its first cell on a line of its own, then
        its other cells as `column: value` on an indented line that wraps between words."""
        # rich: --help prints click's plain text; render's consoles are made on first use
        from rich.padding import Padding
        from rich.text import Text
        if self.title:
            yield Text(self.title, style="italic")
        for row in self.rows:
            yield Text(row[0], style="bold")
            pairs = [Text.assemble((f"{name}:", "dim"), " ", value) for name, value in zip(self.columns[1:], row[1:])
                     if value != ""]
            if pairs:
                yield Padding(Text("  ").join(pairs), (0, 0, 0, 2))


def table(title: str, columns: list[str], rows: list[list]) -> _Table:
    return _Table(title, columns, rows)


@contextmanager
def progress(enabled: bool = True):
    """Yield `track(label, total) -> tick(n)`; a live bar on stderr while the block runs (none under -q, and none
    where stderr is no terminal: a transient bar draws nothing into a pipe or a file, and it costs a command that
    writes there 20 ms of imports and a refresh thread)."""
    if not shows_progress(enabled) or not err().is_terminal:
        yield None
        return
    # rich: --help prints click's plain text; render's consoles are made on first use
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn   # a bar runs
    bar = Progress(TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=err(), transient=True)

    def track(label: str, total: int) -> Callable[[int], None]:
        task = bar.add_task(escape(shown(label)), total=total)
        return lambda n=1: bar.advance(task, n)

    with bar:
        yield track


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def print_plan(plan: dict) -> None:
    """A writing command's --dry-run: the files its plan writes (`plan["files"]`: file, action, episodes) and
    what it changes, on stdout; nothing is written."""
    rows = []
    for f in plan.get("files", []):
        eps = f.get("episodes") or []
        shown = "" if not eps else str(eps[0]) if len(eps) == 1 else f"{len(eps)} ({eps[0]}..{eps[-1]})"
        rows.append([f["file"], f["action"], shown, ", ".join(map(str, f.get("reencode") or []))])
    columns = ["file", "action", "episodes", "re-encoded"]
    if not any(r[3] for r in rows):   # nothing re-encoded: no empty column
        columns, rows = columns[:3], [r[:3] for r in rows]
    console = out()
    console.print(table("plan: files", columns, rows))
    for line in plan.get("changes", []):
        console.print(f"plan: {line}")
    console.print("dry run: nothing written")
