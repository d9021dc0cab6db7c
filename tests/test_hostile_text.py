"""Hostile text and crafted metadata (issue 34, items 5 and 6): what a dataset says reaches a terminal escaped and
cut to a bounded length, and every crafted metadata file ends in one paragraph and exit 3, never an internal error.

Each attack is built here from a factory dataset inside a sandbox and run through the CLI as a user runs it
(`python -m lerodoc`). Every run must leave no raw escape byte (ESC, BEL, CSI, any C0 but tab and newline, DEL, C1,
a bidi override) on stdout or stderr, print a bounded amount, show no traceback, and leave every byte of the
sandbox as it was (`listing` hashes each file before and after). `--json` keeps a dataset's strings whole, escaped
as JSON escapes them (ASCII only).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import pytest

from lerodoc import render
from lerodoc.errors import ExitCode
from lerodoc.formats import jsonl
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli
from tests.test_untrusted import listing

SMALL = dict(episodes=2, lengths=4, height=32, width=48)
TOP = "observation.images.top"
OSC52 = "\x1b]52;c;ZXZpbA==\x07"       # sets the clipboard to "evil"
CLEAR = "\x1b[2J\x1b[H"                # clears the screen
HOSTILE = f"{OSC52}{CLEAR}[bold red]robot[/bold red]\x9b31m\u202egnp.exe\x7f\r"
# what must never reach a terminal: C0 but tab and newline, DEL, C1, the bidi embeddings, overrides and isolates
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
BOUND = 20_000   # characters any run here may print: a line of LINE_LIMIT per cut string, and the rest


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """A folder holding v21 and v30, clean factory datasets with one camera."""
    folder = tmp_path_factory.mktemp("hostile")
    make_dataset(folder / "v21", version="v2.1", cameras=(TOP,), **SMALL)
    make_dataset(folder / "v30", version="v3.0", cameras=(TOP,), **SMALL)
    return folder


def sandbox_of(clean: Path, tmp_path: Path) -> Path:
    sandbox = tmp_path / "sandbox"
    shutil.copytree(clean, sandbox)
    return sandbox


def edit_info(ds: Path, change) -> None:
    path = ds / "meta/info.json"
    info = json.loads(path.read_text())
    change(info)
    path.write_text(json.dumps(info, indent=4))


def edit_line(path: Path, line: int, change) -> None:
    """Replace line `line` (from 0) of a JSON-lines file by `change(its text)`."""
    lines = path.read_text().splitlines()
    lines[line] = change(lines[line])
    path.write_text("\n".join(lines) + "\n")


def run(sandbox: Path, *args, code: int | set[int]) -> tuple[str, str]:
    """`lerodoc ARGS`: its exit code one of `code`, no raw control byte and no traceback in what it printed, a
    bounded amount printed, and the sandbox as it was. Returns (stdout, stderr)."""
    before = listing(sandbox)
    proc = run_cli(*map(str, args), check=False)
    codes = {code} if isinstance(code, int) else code
    shown = f"lerodoc {' '.join(map(str, args))}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert proc.returncode in codes, shown
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, shown
    for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        raw = RAW.search(text)
        assert raw is None, f"{name} holds {raw.group()!r} raw: {text[max(0, raw.start() - 80):raw.end() + 80]!r}"
        assert len(text) < BOUND, f"{name} holds {len(text):,} characters"
    assert listing(sandbox) == before, f"lerodoc {' '.join(map(str, args))} changed the sandbox"
    return proc.stdout, proc.stderr


def one_error(stderr: str, *fragments: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    assert all(f in errors[0] for f in fragments), (fragments, errors[0])
    return errors[0]


# ---------------------------------------------------------------- item 5: what reaches a terminal

def test_shown_escapes_controls_and_cuts_long_text():
    assert render.shown("a\x1b[2Jb\x07\x00\x7f\x85\x9b\u202e\u2066z") == \
        "a\\x1b[2Jb\\x07\\x00\\x7f\\x85\\x9b\\u202e\\u2066z"
    assert render.shown("tab\there\nnext line [bold]x[/]") == "tab\there\nnext line [bold]x[/]"
    word = render.shown("R" * 10_000_000)
    assert len(word) <= render.WORD_LIMIT and "…(10,000,000 characters)…" in word
    line = render.shown("pick up the cube " * 100_000)
    assert len(line) <= render.LINE_LIMIT and "…(1,700,000 characters)…" in line
    assert render.shown(word) == word and render.shown(line) == line   # shown twice: cut once
    assert render.shown("x" * render.WORD_LIMIT) == "x" * render.WORD_LIMIT   # a 255-byte feature name stays whole


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_info_shows_robot_type_and_names_escaped(clean, tmp_path, version):
    """The issue's OSC 52 and CSI 2J in robot_type and in a feature's names: printed as visible escapes, rich markup
    printed literally; --json keeps them whole, escaped as JSON (ASCII only)."""
    sandbox = sandbox_of(clean, tmp_path)
    names = [f"{CLEAR}j0", "\u202ej1", "j2\x1b[31m", "j3", "j4", "j5"]

    def change(info):
        info["robot_type"] = HOSTILE
        info["features"]["observation.state"]["names"] = names
    edit_info(sandbox / version, change)
    out, _ = run(sandbox, "info", sandbox / version, code=0)
    assert render.shown(HOSTILE) in out and "\\x1b]52;c;ZXZpbA==\\x07" in out and "[bold red]robot[/bold red]" in out
    assert "\\x1b[2J\\x1b[Hj0, \\u202ej1, j2\\x1b[31m, j3" in out, out
    out, _ = run(sandbox, "info", sandbox / version, "--json", code=0)
    assert out.isascii() and "\\u001b]52;c;ZXZpbA==\\u0007" in out
    report = json.loads(out)
    assert report["robot_type"] == HOSTILE and report["features"]["observation.state"]["names"] == names


def test_info_cuts_a_long_robot_type(clean, tmp_path):
    """A robot_type of 1,000,000 characters (within the reader's string budget) prints as one bounded line that
    says how long it is; --json keeps it whole."""
    sandbox = sandbox_of(clean, tmp_path)
    edit_info(sandbox / "v30", lambda i: i.update(robot_type="R" * 1_000_000))
    out, _ = run(sandbox, "info", sandbox / "v30", code=0)
    assert "…(1,000,000 characters)…" in out and len(out.splitlines()[0]) < 400, out[:500]
    proc = run_cli("info", sandbox / "v30", "--json")
    assert json.loads(proc.stdout)["robot_type"] == "R" * 1_000_000


def test_errors_echo_a_key_escaped_and_cut(clean, tmp_path):
    """A feature key with an escape sequence, and one of 100,000 characters: the error that names each is one
    bounded paragraph, the escape visible; --json names the key whole."""
    sandbox = sandbox_of(clean, tmp_path)
    ds = sandbox / "v30"
    edit_info(ds, lambda i: i["features"].update({f"action{CLEAR}": i["features"].pop("action")}))
    _, err = run(sandbox, "info", ds, code=3)
    one_error(err, "features.action\\x1b[2J\\x1b[H", "meta/info.json")
    out, _ = run(sandbox, "info", ds, "--json", code=3)
    assert out.isascii() and json.loads(out)["error"]["field"] == f"features.action{CLEAR}"
    out, _ = run(sandbox, "validate", ds, code=1)   # the findings table
    assert "action\\x1b[2J" in out
    edit_info(ds, lambda i: i["features"].update({"k" * 100_000: i["features"].pop(f"action{CLEAR}")}))
    _, err = run(sandbox, "convert", ds, "-o", sandbox / "out", code=3)
    assert "…(100,0" in one_error(err, "meta/info.json")


def test_a_long_hostile_task_prints_bounded(tmp_path):
    """A task of 11 MB holding CSI 2J, and one holding OSC 52: the tasks table and the error that lists the tasks
    print them escaped and cut."""
    sandbox = tmp_path / "sandbox"
    long = f"pick {CLEAR} up " * 700_000
    make_dataset(sandbox / "ds", version="v3.0", tasks=(long, f"place{OSC52} it"), **SMALL)
    out, _ = run(sandbox, "tasks", sandbox / "ds", "--set", "place it=put it", "--dry-run", code=2)
    out, _ = run(sandbox, "tasks", sandbox / "ds", "--set", f"place{OSC52} it=put it", "--dry-run", code=0)
    assert "place\\x1b]52;c;ZXZpbA==\\x07 it" in out and "characters)…" in out
    _, err = run(sandbox, "tasks", sandbox / "ds", "--set", "nothing=x", code=2)
    one_error(err, "meta/tasks.parquet")


# ---------------------------------------------------------------- item 6: crafted metadata is exit 3, never 70

DEEP = 100_000


def deep_list(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


# name -> (version, file, how the file's text changes)
CRAFTED = {
    "data_path 300 wide": ("v21", "meta/info.json",
                           lambda t: t.replace("{episode_chunk:03d}", "{episode_chunk:0300d}")),
    "data_path 10^8 wide": ("v21", "meta/info.json",
                                  lambda t: t.replace("{episode_index:06d}", "{episode_index:0100000000d}")),
    "data_path a field as wide as another": ("v30", "meta/info.json",
                                             lambda t: t.replace("{chunk_index:03d}", "{chunk_index:{file_index}}", 1)),
    "video_path a 300-byte folder": ("v30", "meta/info.json", lambda t: t.replace("videos/", "v" * 300 + "/", 1)),
    "info.json nested 100,000 deep": ("v30", "meta/info.json", lambda t: '{"a":' * DEEP + "1" + "}" * DEEP),
    "names nested 500 deep": ("v30", "meta/info.json",
                              lambda t: re.sub(r'"names": \[\s*"j0"', f'"names": [{deep_list(500)}, "j0"', t, count=1)),
    "stats.json nested 100,000 deep": ("v30", "meta/stats.json",
                                       lambda t: '{"action": {"min": ' + deep_list() + "}}"),
    "episodes.jsonl line nested 100,000 deep": ("v21", "meta/episodes.jsonl",
                                                lambda t: t.replace('"tasks": [', f'"tasks": [{deep_list()}, ', 1)),
    "episodes_stats.jsonl nested 100,000 deep": ("v21", "meta/episodes_stats.jsonl",
                                                 lambda t: t.replace('"min": [', f'"min": [{deep_list()}, ', 1)),
    "episode_index 10^300": ("v21", "meta/episodes.jsonl",
                             lambda t: t.replace('"episode_index": 0', '"episode_index": 1' + "0" * 300, 1)),
    "length of 5000 digits": ("v21", "meta/episodes.jsonl",
                              lambda t: re.sub(r'"length": \d+', '"length": ' + "9" * 5000, t, count=1)),
    "fps true": ("v30", "meta/info.json", lambda t: re.sub(r'"fps": \d+', '"fps": true', t, count=1)),
    "robot_type of 2 MB": ("v30", "meta/info.json",
                           lambda t: t.replace('"robot_type": "synthetic"', '"robot_type": "' + "R" * (2 << 20) + '"')),
}


@pytest.mark.parametrize("name", CRAFTED)
def test_crafted_metadata_is_refused(clean, tmp_path, name):
    """Each crafted file: convert and info refuse it in one paragraph naming it (exit 3), validate reports it (exit
    1) or refuses it (exit 3); nothing is written."""
    version, rel, change = CRAFTED[name]
    sandbox = sandbox_of(clean, tmp_path)
    path = sandbox / version / rel
    text = path.read_text()
    path.write_text(change(text))
    assert path.read_text() != text, "the attack did not apply"
    _, err = run(sandbox, "convert", sandbox / version, "-o", sandbox / "out", code=3)
    one_error(err, rel)
    _, err = run(sandbox, "info", sandbox / version, code=3)
    one_error(err, rel)
    out, err = run(sandbox, "validate", sandbox / version, "--json", code={1, 3})
    if out and json.loads(out)["exit_code"] == 1:
        assert any(rel in (f.get("file") or "") for f in json.loads(out)["findings"] if f["severity"] == "error")
    assert not (sandbox / "out").exists()


def test_parquet_metadata_nested_100000_deep_is_not_read(clean, tmp_path):
    """JSON a parquet schema holds (pandas' in tasks.parquet, datasets' in a data file) nested 10^5 deep: metadata
    lerodoc only consults is passed over, as unreadable metadata is, where json.loads raised RecursionError."""
    import pyarrow.parquet as pq
    sandbox = sandbox_of(clean, tmp_path)
    for rel, key in (("meta/tasks.parquet", b"pandas"), ("data/chunk-000/file-000.parquet", b"huggingface")):
        table = pq.read_table(sandbox / "v30" / rel)
        deep = b'{"a": ' * DEEP + b"1" + b"}" * DEEP
        pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), key: deep}),
                       sandbox / "v30" / rel)
    run(sandbox, "info", sandbox / "v30", code=0)
    run(sandbox, "validate", sandbox / "v30", code={0, 1})


def test_complex128_is_a_dtype_no_one_writes(clean, tmp_path):
    """numpy knows complex128, but no parquet column holds it: validate reports it (LAY013), convert refuses it."""
    from lerodoc.formats.hf import ARROW
    from lerodoc.formats.info import DTYPES
    assert set(DTYPES) == {*ARROW, "image", "video"}   # one list: what validate accepts is what writers write
    sandbox = sandbox_of(clean, tmp_path)
    edit_info(sandbox / "v30", lambda i: i["features"]["action"].update(dtype="complex128"))
    out, _ = run(sandbox, "validate", sandbox / "v30", "--json", code=1)
    findings = json.loads(out)["findings"]
    assert [(f["code"], f.get("feature") or f.get("field")) for f in findings] == [("LAY013", "action")], findings
    _, err = run(sandbox, "convert", sandbox / "v30", "-o", sandbox / "out", code=3)
    one_error(err, "complex128")


def test_a_sparse_meta_file_is_refused_before_it_is_read(clean, tmp_path):
    """An episodes.jsonl that claims 1 GiB but takes no room on disk (sparse): refused by its size, in a moment."""
    sandbox = sandbox_of(clean, tmp_path)
    path = sandbox / "v21/meta/episodes.jsonl"
    with path.open("r+b") as f:
        f.truncate(1 << 30)
    assert os.stat(path).st_blocks * 512 < 1 << 20
    _, err = run(sandbox, "info", sandbox / "v21", code=3)
    one_error(err, "meta/episodes.jsonl", f"{1 << 30:,} bytes")


def test_check_json_budgets():
    """The reader's budgets, on bytes: a bracket inside a string nests nothing, each line of JSON lines counts from
    its own start, and a malformed document is left to the parser."""
    def refusal(data: bytes, lines: bool = False) -> str | None:
        try:
            jsonl.check_json(data, "f.json", lines)
        except jsonl.LerodocError as exc:
            return exc.message
        return None
    depth = jsonl.MAX_DEPTH
    assert refusal(b"[" * depth + b"]" * depth) is None
    assert "deeper than" in refusal(b"[" * (depth + 1) + b"]" * (depth + 1))
    assert refusal(b'{"a": "' + b"[" * 1000 + b'", "b": "\\" [[[["}') is None
    assert refusal((b"[" * 40 + b"\n") * 3 + b"[]\n", lines=True) is None   # malformed lines: the parser's
    deep_line = b"[" * (depth + 1) + b"]" * (depth + 1) + b"\n"
    assert refusal(b'{"a": 1}\n' * 3 + deep_line, lines=True).startswith("line 4 ")
    assert "a string of 1,048,577 bytes" in refusal(b'{"a": "' + b"x" * (jsonl.MAX_STRING + 1) + b'"}')
    assert refusal(b'{"a": "' + b"x" * jsonl.MAX_STRING + b'"}') is None
    assert refusal(b'{"a": "unterminated}\n', lines=True) is None   # the parser's to name
    # a malformed line (an odd number of quotes) whose closing brackets hide in a string: its openers still count,
    # so pyarrow's reader never meets 10^5 levels
    hidden = b'"' + b"]" * DEEP + b'"' + b"[" * DEEP + b'"\n'
    assert refusal(b'{"a": 1}\n' + hidden, lines=True) == f"line 2 nests lists and objects deeper than {depth} " \
        "levels, the most lerodoc reads"


def _read_byte_by_byte(data: bytes, lines: bool, chunks: list[tuple[int, int]]):
    """What `jsonl._scan` finds, read a byte at a time: per document (a line, or the whole text), quotes open and
    close strings and brackets outside them nest, except in a line of an odd number of quotes, where only the opening
    brackets count. Each chunk's findings come in turn: the first long string closed in it (by where it opens), else
    the first bracket in it past MAX_DEPTH."""
    chunk_of = [i for i, (start, end) in enumerate(chunks) for _ in range(start, end)]
    strings, deep = [], []
    documents = [(0, data)] if not lines else []
    if lines:
        at = 0
        for line in data.split(b"\n"):
            documents.append((at, line))
            at += len(line) + 1
    for offset, document in documents:
        bad = lines and document.count(b'"') % 2 == 1
        depth, inside, opened = 0, False, None
        for i, byte in enumerate(document):
            where = offset + i
            if byte == ord('"') and not bad:
                if inside:
                    strings.append((chunk_of[where], opened, where - opened - 1))
                inside, opened = not inside, where
            elif byte in b"[{" and not inside:
                depth += 1
                if depth > jsonl.MAX_DEPTH:
                    deep.append((chunk_of[where], where))
            elif byte in b"]}" and not inside and not bad:
                depth -= 1
    for chunk in range(len(chunks)):
        long = [(start, size) for c, start, size in strings if c == chunk and size > jsonl.MAX_STRING]
        if long:
            return ("string", *min(long))
        hit = [where for c, where in deep if c == chunk]
        if hit:
            return "depth", hit[0], 0
    return None


def test_check_json_scan_reads_as_a_byte_by_byte_reading_does(monkeypatch):
    """`_scan` looks only at the quotes, brackets and newlines; on random texts of those bytes and others, with small
    bounds and small chunks, it finds what reading every byte finds, and check_json refuses what it finds."""
    rng = random.Random(37)
    alphabet = [b"[", b"]", b"{", b"}", b'"', b"\n", b"a", b"1", b","]
    found = set()
    for trial in range(3000):
        data = b"".join(rng.choices(alphabet, [rng.random() for _ in alphabet], k=rng.choice([1, 5, 40, 300])))
        for lines in (False, True):
            monkeypatch.setattr(jsonl, "MAX_DEPTH", rng.choice([1, 3, 8]))
            monkeypatch.setattr(jsonl, "MAX_STRING", rng.choice([0, 4, 30]))
            monkeypatch.setattr(jsonl, "_CHUNK", rng.choice([1 << 20, 16, 3]))
            want = _read_byte_by_byte(data, lines, list(jsonl._chunks(data, lines)))
            assert jsonl._scan(data, lines) == want, (data, lines, jsonl.MAX_DEPTH, jsonl.MAX_STRING, jsonl._CHUNK)
            try:   # and check_json, with its shortcut for short documents of few brackets, refuses just those
                jsonl.check_json(data, "f.json", lines)
                refused = False
            except jsonl.LerodocError:
                refused = True
            assert refused == (want is not None), (data, lines, jsonl.MAX_DEPTH, jsonl.MAX_STRING)
            found.add(want[0] if want else None)
    assert found == {"string", "depth", None}
