"""Output a user can read and a script can grep (issue 29): text from the user and the dataset prints literally
(`the [red] cube`, `feature[name,glob*]`), a name is never cut across lines, tables fit 80 columns on a terminal,
and output to a pipe is one full line per row. Every command's --help at 80 columns and through a pipe; tables of
info, tasks, validate findings, merge and split plans on a terminal (a pseudo-terminal, 80 columns) and through
a pipe; the report's HTML escapes what the dataset holds."""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from lerodoc.cli import app
from lerodoc.render import fit_widths
from tests.fixtures.factory import make_dataset

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts/gen_cli_docs.py")
GEN = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(GEN)
LEAVES = GEN.leaf_commands()

BRACKETED = "the [red] cube"                          # rich markup would delete "[red]"
MARKUP = "<b>place</b> it & [bold]go[/bold]"          # HTML and rich markup in one task
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BOX = "│┃╭╮╰╯─━┏┓┗┛╇┡┩"


def in_terminal(*args, columns: int = 80, cwd: Path = ROOT) -> tuple[int, str]:
    """`lerodoc ARGS` on a pseudo-terminal `columns` wide: (exit code, what it showed, escape codes removed)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "lerodoc", *map(str, args)], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:   # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.wait(timeout=120)
    return proc.returncode, ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def through_pipe(*args) -> subprocess.CompletedProcess:
    """`lerodoc ARGS | ...`: stdout and stderr are pipes, no terminal anywhere (not even stdin)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "lerodoc", *map(str, args)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=env, cwd=ROOT)


def words(text: str) -> set[str]:
    return set("".join(" " if c in BOX else c for c in text).split())


def fits(text: str, columns: int = 80) -> list[str]:
    """The lines wider than `columns` (none, when the output fits)."""
    return [line for line in text.splitlines() if cell_len(line) > columns]


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("out") / "ds"
    make_dataset(root, version="v3.0", episodes=3, cameras=("observation.images.top",), tasks=(BRACKETED, MARKUP))
    return root


# ---------------------------------------------------------------- help

@pytest.mark.parametrize("path, command", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_every_help_prints_its_texts_literally_at_80_columns(path, command, monkeypatch):
    """Each word of the command's and its options' help is in --help whole (brackets kept, nothing cut), and no
    line is wider than the terminal; the docstring's paragraphs are filled to the width, not cut at its own
    line ends."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    shown = words(result.output)
    texts = [command.help or ""] + [p.help or "" for p in command.params]
    missing = sorted({w for t in texts for w in t.split() if w not in shown})
    assert not missing, f"lerodoc {' '.join(path)} --help lost or cut: {missing}"
    assert not fits(result.output), fits(result.output)


@pytest.mark.parametrize("args, literal", [
    (["select", "--help"], "feature[name,glob*]"),
    (["convert", "--help"], "[default: v3.0 for v2.x input, v2.1 for v3.0 input]"),
    (["train", "pi05", "--help"], "pip install 'lerodoc[wandb]'"),
    (["convert", "--help"], "pip install 'lerodoc[scale]'"),
])
def test_bracketed_help_survives_a_terminal_and_a_pipe(args, literal):
    """The issue's cases: rich had read these brackets as markup and deleted them."""
    rc, shown = in_terminal(*args)
    piped = through_pipe(*args)
    assert rc == 0 and piped.returncode == 0, piped.stderr
    for text in (shown, piped.stdout):
        flat = " ".join("".join(" " if c in BOX else c for c in text).split())
        assert literal in flat, text
        assert not fits(text), fits(text)


def test_a_help_paragraph_is_filled_to_the_terminal():
    """select's second paragraph: its first source line ends at "follow the selected" (88 characters); at 120
    columns the paragraph's first line is filled past it."""
    rc, out = in_terminal("select", "--help", columns=120)
    assert rc == 0, out
    line = next(line.strip() for line in out.splitlines() if "Names, shapes and stats" in line)
    assert "follow the selected channels" in line and len(line) > 100, out


def test_short_help_option_completion_and_quiet_verbose():
    assert "Usage:" in through_pipe("info", "-h").stdout
    root = through_pipe("--help").stdout
    for option in ("--install-completion", "--show-completion", "--quiet", "--verbose", "-q", "-v"):
        assert option in words(root.replace(",", " ")), option   # "-q, --quiet"
    both = through_pipe("-q", "-v", "info", "x")
    assert both.returncode == 2 and "not both" in both.stderr


def test_quiet_shows_no_progress_and_verbose_says_more(ds, tmp_path):
    """-q: only errors and results (no progress bar on a terminal); -v: the cause behind an error and the time
    taken, never a traceback (that is LERODOC_DEBUG's)."""
    rc, normal = in_terminal("convert", ds, "-o", tmp_path / "a", "--to", "v2.1")
    assert rc == 0 and "files" in normal and "3/3" in normal, normal          # the bar: "files ━━━ 3/3"
    rc, quiet = in_terminal("-q", "convert", ds, "-o", tmp_path / "b", "--to", "v2.1")
    assert rc == 0 and "3/3" not in quiet and "converted v3.0 -> v2.1" in quiet, quiet
    piped = through_pipe("convert", ds, "-o", tmp_path / "c", "--to", "v2.1")   # no bar is drawn into a pipe
    assert piped.returncode == 0 and piped.stderr == "" and "converted v3.0 -> v2.1" in piped.stdout, piped
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "meta").mkdir()
    (broken / "meta/info.json").write_text("{ not json")
    plain, verbose = through_pipe("info", broken), through_pipe("-v", "info", broken)
    assert plain.returncode == verbose.returncode == 3
    assert "caused by" not in plain.stderr and "Traceback" not in verbose.stderr
    lines = verbose.stderr.splitlines()
    assert lines[0].startswith("error: ") and lines[1].startswith("caused by JSONDecodeError: "), verbose.stderr
    done = through_pipe("-v", "info", ds)
    assert done.returncode == 0 and "lerodoc info: exit 0 in " in done.stderr and done.stdout.startswith(str(ds))


# ---------------------------------------------------------------- tables

def test_info_through_a_pipe_is_one_full_line_per_feature(ds):
    """`lerodoc info DS | grep observation.state` finds the feature's whole row; no box drawing."""
    proc = through_pipe("info", ds)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("observation.state ")]
    assert len(rows) == 1 and "float32" in rows[0] and "(6,)" in rows[0], proc.stdout
    assert "j0, j1, j2, j3" in rows[0]
    assert not set(proc.stdout) & set(BOX)
    for name in ("episode_index", "observation.images.top", "frame_index"):
        assert any(line.startswith(name + " ") for line in proc.stdout.splitlines()), name


def test_info_at_80_columns_fits_and_keeps_every_name_whole(ds):
    rc, shown = in_terminal("info", ds)
    assert rc == 0, shown
    assert not fits(shown), fits(shown)
    for name in ("observation.state", "observation.images.top", "episode_index", "frame_index", "task_index"):
        assert name in words(shown), (name, shown)


@pytest.mark.parametrize("columns", [80, 40])
def test_tasks_with_brackets_and_markup_print_literally(ds, columns):
    args = ["tasks", ds, "--set", f"{BRACKETED}=the [blue] cube", "--dry-run"]
    rc, shown = in_terminal(*args, columns=columns)
    piped = through_pipe(*args)
    assert rc == 0 and piped.returncode == 0, piped.stderr
    assert BRACKETED in piped.stdout and "the [blue] cube" in piped.stdout and MARKUP in piped.stdout
    if columns == 80:
        assert BRACKETED in shown and "the [blue] cube" in shown and MARKUP in shown, shown
    else:   # wrapped between words, each word whole
        assert set(f"{BRACKETED} {MARKUP} the [blue] cube".split()) <= words(shown), shown
    assert not fits(shown, columns), fits(shown, columns)
    row = next(line for line in piped.stdout.splitlines() if line.startswith("0 "))
    assert "the [blue] cube" in row and BRACKETED in row


def test_an_error_naming_a_bracketed_spec_prints_it(ds, tmp_path):
    proc = through_pipe("select", ds, "-o", tmp_path / "out", "--state", "observation.state[jj*]")
    assert proc.returncode in (2, 3) and "'observation.state[jj*]'" in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def broken(tmp_path_factory, ds) -> Path:
    """A copy of `ds` whose info.json miscounts its frames and whose first episode's state stats are wrong."""
    import shutil
    root = tmp_path_factory.mktemp("broken") / "ds"
    shutil.copytree(ds, root)
    info = json.loads((root / "meta/info.json").read_text())
    info["total_frames"] += 1
    (root / "meta/info.json").write_text(json.dumps(info))
    return root


def test_validate_findings_fit_80_columns_with_whole_paths_and_names(broken):
    rc, shown = in_terminal("validate", broken)
    assert rc == 1, shown
    assert not fits(shown), fits(shown)
    assert "meta/info.json" in words(shown) and "IDX030" in shown
    piped = through_pipe("validate", broken)
    line = next(line for line in piped.stdout.splitlines() if line.startswith("IDX030"))
    assert "meta/info.json" in line and "total_frames" in line   # the finding on one line, message and all


def test_merge_and_split_plans_fit_80_columns_with_one_line_headers(ds, tmp_path):
    rc, shown = in_terminal("merge", ds.name, ds.name, "-o", tmp_path / "m", "--dry-run", cwd=ds.parent)
    assert rc == 0, shown
    assert not fits(shown), fits(shown)
    flat = [" ".join(line.split()) for line in shown.splitlines()]
    assert "source dataset version episodes frames excluded" in flat, shown
    assert "B ds v3.0 3->3 150->150 -" in flat, shown
    # a path (60 characters, relative, so pytest's temp folder does not change it) too long for a table row at 80
    # columns, short enough for a line of its own: one block a source
    long = "a-folder-whose-name-leaves-no-room-for-a-table-row-of-80/ds"
    shutil.copytree(ds, tmp_path / long)
    rc, shown = in_terminal("merge", long, long, "-o", "m", "--dry-run", cwd=tmp_path)
    assert rc == 0 and not fits(shown), shown
    assert f"dataset: {long}" in [" ".join(line.split()[:2]) for line in shown.splitlines()], shown
    assert any(line.startswith("data/chunk-000/file-000.parquet ") for line in flat), shown
    rc, shown = in_terminal("split", ds, "-o", tmp_path / "parts", "--into", "train=0.5,val=0.5", "--dry-run")
    assert rc == 0, shown
    assert not fits(shown), fits(shown)
    assert "part episodes (of the source) frames tasks re-encoded" in \
        [" ".join(line.split()) for line in shown.splitlines()], shown


def test_fit_widths_keeps_words_whole_or_gives_up():
    rows = [["observation.images.cam_high", "video", "a b c d e f g h i j k l m n o p"]]
    widths = fit_widths(["feature", "dtype", "names"], rows, 60)
    assert widths[0] >= len("observation.images.cam_high") and sum(widths) + 4 <= 60
    assert fit_widths(["feature", "dtype", "names"], rows, 30) is None       # the name alone needs 27 + 2 + 5
    assert fit_widths(["a", "b"], [["x", "y"]], 80) == [1, 1]


# ---------------------------------------------------------------- report

def test_report_escapes_what_the_dataset_holds(ds, tmp_path):
    """A task holding HTML reaches the page as text: every table cell is escaped once (page.table)."""
    out = tmp_path / "r.html"
    proc = through_pipe("report", ds, "-o", out)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert "<b>place</b>" not in page and "[bold]go[/bold]" in page
    assert "&lt;b&gt;place&lt;/b&gt; it &amp; [bold]go[/bold]" in page
    assert "&amp;lt;" not in page and BRACKETED in page   # escaped once, not twice
