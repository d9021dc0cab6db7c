"""Safe by construction (issue 34, items 1-3): one confined file layer, staging under fresh exclusive names, and
in place meaning read, check, swap.

Each attack the issue measured is built here inside a sandbox: a dataset, an outside "victim" folder it links to,
and the command as a user runs it. The victim's listing (every entry's kind, bytes, mode and mtime) must be the
same afterwards, and so must every file of the input the command was not asked to rewrite.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc import confined
from lerodoc.errors import ExitCode, LerodocError
from lerodoc.promote import staging
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli, run_here
from tests.test_layout import PACKAGE, _package, calls_outside
from tests.test_untrusted import listing

SMALL = dict(episodes=2, lengths=6, height=32, width=48, cameras=("observation.images.top",))


@pytest.fixture
def sandbox(tmp_path):
    """(dataset, victim): a v3.0 dataset and, beside it, another dataset's folder a crafted link may point into."""
    ds = make_dataset(tmp_path / "ds", version="v3.0", **SMALL).root
    victim = make_dataset(tmp_path / "victim", version="v3.0", dataset_id=3, **SMALL).root
    return ds, victim


def _data_and_videos(root: Path) -> dict:
    return {k: v for k, v in listing(root).items() if k.split("/")[0] in ("data", "videos")}


# ---------------------------------------------------------------- staging names


def test_in_place_quantiles_never_follows_a_planted_staging_name(sandbox):
    """The issue's write outside: the dataset ships the in-place swap's old staging name (`.lerodoc-meta.lerodoc-
    tmp-<pid>`) as a link to another dataset. Run in this process, so the pid the old name used is known; the new
    meta/ must land in the dataset, the victim stay as it was, and the planted link be left alone."""
    ds, victim = sandbox
    (ds / f".lerodoc-meta.lerodoc-tmp-{os.getpid()}").symlink_to(victim)
    before_victim, before_data = listing(victim), _data_and_videos(ds)
    proc = run_here("quantiles", ds, "--in-place", "--json")
    assert proc.returncode == 0, proc.stderr
    assert listing(victim) == before_victim
    assert _data_and_videos(ds) == before_data
    stats = json.loads((ds / "meta/stats.json").read_text())
    assert "q01" in stats["observation.state"]
    assert (ds / f".lerodoc-meta.lerodoc-tmp-{os.getpid()}").is_symlink()


def test_an_output_never_reuses_a_planted_staging_name(sandbox, tmp_path):
    """`-o OUT` staged beside OUT under the old predictable `.OUT.lerodoc-tmp-<pid>`: a link planted there (to the
    victim) was kept, mkdir failed and the run ended as a bug (exit 70). Fresh exclusive names ignore it."""
    ds, victim = sandbox
    out = tmp_path / "out"
    for mark in (".lerodoc-tmp", ".lerodoc-scratch", ".lerodoc-old"):
        (tmp_path / f".out{mark}-{os.getpid()}").symlink_to(victim)
    before = listing(victim)
    proc = run_here("convert", ds, "-o", out, "--to", "v2.1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert (out / "meta/info.json").is_file() and listing(victim) == before


def test_fresh_folders_are_new_and_unpredictable(tmp_path):
    names = {staging.fresh_folder(tmp_path / "out", ".lerodoc-tmp").name for _ in range(20)}
    assert len(names) == 20 and all(n.startswith(f".out.lerodoc-tmp-{os.getpid()}-") for n in names)


# ---------------------------------------------------------------- reading through links


def _foreign_parquet(path: Path, like: Path, episode: int, rows: int) -> None:
    """A parquet with `like`'s schema holding `rows` rows of `episode`, every value 777: someone else's data."""
    table = pq.read_table(like)
    columns = {}
    for field in table.schema:
        if pa.types.is_fixed_size_list(field.type):
            values = pa.array(np.full(rows * field.type.list_size, 777, dtype=field.type.value_type.to_pandas_dtype()))
            columns[field.name] = pa.FixedSizeListArray.from_arrays(values, field.type.list_size)
        elif field.name == "episode_index":
            columns[field.name] = pa.array(np.full(rows, episode), type=field.type)
        elif field.name in ("index", "frame_index"):
            columns[field.name] = pa.array(np.arange(rows), type=field.type)
        elif field.name == "timestamp":
            columns[field.name] = pa.array(np.arange(rows) / 30.0, type=field.type)
        else:
            columns[field.name] = pa.array(np.zeros(rows), type=field.type)
    pq.write_table(pa.table(columns, schema=table.schema), path)


def test_repair_never_reads_a_stray_data_link(tmp_path):
    """The issue's read outside: episode 1's data file is gone, and a stray data file links to someone else's
    parquet holding 700 rows that say they are episode 1. repair's search for rows used to read it and copy the
    700 foreign rows into the output (exit 0, 0 findings after). A link is not the dataset's file: the search
    does not list it, so episode 1 has no rows, which repair names."""
    ds = make_dataset(tmp_path / "ds", version="v2.1", **SMALL).root
    secret = tmp_path / "secret"
    secret.mkdir()
    own = ds / "data/chunk-000/episode_000001.parquet"
    _foreign_parquet(secret / "theirs.parquet", own, episode=1, rows=700)
    own.unlink()
    (ds / "data/chunk-000/episode_000009.parquet").symlink_to(secret / "theirs.parquet")
    before, before_ds = listing(secret), listing(ds)
    out = tmp_path / "out"
    proc = run_cli("repair", ds, "-o", out, "--json", check=False)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["episode"] == 1 and "700" not in error["message"], error
    assert not out.exists()
    run_cli("repair", ds, "-o", out, "--drop-broken")   # the way out: the dataset without episode 1
    rows = sum(pq.read_metadata(p).num_rows for p in (out / "data").rglob("*.parquet"))
    assert rows == 6, f"{rows} rows in the output: foreign rows were copied"
    for path in (out / "data").rglob("*.parquet"):
        state = pq.read_table(path, columns=["observation.state"]).column(0).to_pylist()
        assert all(777 not in row for row in state)
    assert listing(secret) == before and listing(ds) == before_ds


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_link_where_a_dataset_file_is_refused_by_the_reader(sandbox, tmp_path, kind):
    """Below the metadata's checks, the file layer itself refuses: a data file that is a link, or a data folder
    that is one, even when metadata does not name it (read directly through lerodoc.confined)."""
    ds, victim = sandbox
    confined.confine(ds)
    target = ds / "data/chunk-000/file-000.parquet"
    if kind == "file":
        target.unlink()
        target.symlink_to(victim / "data/chunk-000/file-000.parquet")
    else:
        shutil.rmtree(ds / "data")
        (ds / "data").symlink_to(victim / "data")
    with pytest.raises(confined.UnsafePath):
        confined.source(target)
    with pytest.raises(confined.UnsafePath):
        confined.read_bytes(target)
    assert confined.files_under(ds, "data", ".parquet") == []


def test_a_fifo_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "file-000.parquet"
    os.mkfifo(fifo)
    with pytest.raises(confined.UnsafePath, match="FIFO"):
        confined.open_fd(fifo)
    assert confined.files_under(tmp_path, "", ".parquet") == []


def test_a_hugging_face_cache_snapshot_link_is_read(tmp_path):
    """huggingface_hub's cache: snapshot files are links into the repository's blobs/ folder, and are read."""
    repo = tmp_path / "datasets--o--n"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs/abc").write_bytes(b"bytes")
    link = repo / "snapshots/rev/meta/info.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(repo / "blobs/abc", link.parent))
    confined.confine(repo / "snapshots/rev")
    assert confined.read_bytes(link) == b"bytes"
    assert confined.files_under(repo / "snapshots/rev", "meta") == ["meta/info.json"]



def test_each_root_a_file_is_under_is_checked_among_many(tmp_path):
    """A folder link is refused by whichever confined root it leaves, among many roots (a merge of a hundred parts)
    and where one root lies inside another; a folder that leaves no root it is under is read."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file.parquet").write_bytes(b"outside")
    for i in range(50):
        (tmp_path / f"part{i}").mkdir()
        confined.confine(tmp_path / f"part{i}")
    outer = tmp_path / "outer"
    inner = outer / "inner"
    (inner / "sibling").mkdir(parents=True)
    (inner / "sibling/file.parquet").write_bytes(b"inside")
    (inner / "out").symlink_to(outside)            # leaves both roots
    (inner / "across").symlink_to(outer / "sibling2")  # leaves inner, stays in outer
    (outer / "sibling2").mkdir()
    (outer / "sibling2/file.parquet").write_bytes(b"outer")
    (tmp_path / "part7/out").symlink_to(outside)
    confined.confine(outer)
    confined.confine(inner)
    assert confined.read_bytes(inner / "sibling/file.parquet") == b"inside"
    for path in (inner / "out/file.parquet", inner / "across/file.parquet", tmp_path / "part7/out/file.parquet"):
        with pytest.raises(confined.UnsafePath, match="through a link"):
            confined.read_bytes(path)
    (tmp_path / "free").symlink_to(outside)        # under no confined root: the user's own name for a folder
    assert confined.read_bytes(tmp_path / "free/file.parquet") == b"outside"

# ---------------------------------------------------------------- in place: read, check, swap


def test_a_lost_update_is_refused(sandbox, monkeypatch):
    """The issue's lost update: in-place quantiles read the metadata, `tasks --in-place` finished meanwhile, and
    quantiles swapped its older meta/ over the new one (both exit 0, validate then found 3 errors). Now quantiles
    sees that meta/ changed since it read it and stops, and the other command's edit is kept."""
    ds, _ = sandbox
    from lerodoc.ops import quantiles as quantiles_op
    real = quantiles_op.staged_meta

    def meanwhile(*args, **kwargs):   # another writer finishes between quantiles' read and its swap
        run_cli("tasks", ds, "--in-place", "--set", "pick up the cube=lift the cube")
        return real(*args, **kwargs)
    monkeypatch.setattr(quantiles_op, "staged_meta", meanwhile)
    proc = run_here("quantiles", ds, "--in-place", "--json")
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    assert "changed while this command ran" in json.loads(proc.stdout)["error"]["message"]
    assert "lift the cube" in pq.read_table(ds / "meta/tasks.parquet").to_pandas().to_string()
    assert run_cli("validate", ds, "--json", check=False).returncode == 0
    assert not staging.leftovers(ds)


def test_an_unchanged_dataset_swaps_in_place(sandbox):
    ds, _ = sandbox
    run_cli("tasks", ds, "--in-place", "--set", "pick up the cube=lift the cube")
    run_cli("quantiles", ds, "--in-place")
    assert run_cli("validate", ds, "--json", check=False).returncode == 0


def test_in_place_through_a_link_rewrites_the_real_dataset_and_keeps_the_link(sandbox, tmp_path):
    """`repair DSLINK --in-place` used to replace the link with a new folder and leave the real dataset broken."""
    ds, _ = sandbox
    info = json.loads((ds / "meta/info.json").read_text())
    info["total_frames"] = 999
    (ds / "meta/info.json").write_text(json.dumps(info))
    link = tmp_path / "dslink"
    link.symlink_to(ds)
    run_cli("repair", link, "--in-place")
    assert link.is_symlink() and os.readlink(link) == str(ds)
    assert json.loads((ds / "meta/info.json").read_text())["total_frames"] == 12
    run_cli("quantiles", link, "--in-place")
    assert link.is_symlink()
    assert "q01" in json.loads((ds / "meta/stats.json").read_text())["observation.state"]
    assert not (tmp_path / ".dslink.lerodoc-lock").exists()


# ---------------------------------------------------------------- leftovers of dead commands


def test_leftover_staging_is_reported_then_removed_by_the_next_writer(sandbox, tmp_path):
    """A SIGKILLed command leaves its staging folders; validate names them (LAY045), and the next command writing
    the same output (holding its lock, so no owner is alive) removes its staging folders, but never a link or
    file planted under such a name, nor another output's staging whose name begins alike."""
    ds, victim = sandbox
    dead_meta = ds / ".lerodoc-meta.lerodoc-tmp-4242-0123abcd"
    (dead_meta / "meta").mkdir(parents=True)
    dead_out = tmp_path / ".ds.lerodoc-tmp-4242-89abcdef"
    (dead_out / "meta").mkdir(parents=True)
    planted = tmp_path / ".ds.lerodoc-tmp-4243-feedbeef"
    planted.symlink_to(victim)
    other = tmp_path / ".ds.b.lerodoc-tmp-4242-00000000"   # output `ds.b`'s, not `ds`'s
    other.mkdir()
    report = json.loads(run_cli("validate", ds, "--json", check=False).stdout)
    named = {f["file"] for f in report["findings"] if f["code"] == "LAY045"}
    assert named == {dead_meta.name, str(dead_out), str(planted)}
    run_cli("quantiles", ds, "--in-place")
    assert not dead_meta.exists() and not dead_out.exists()
    assert planted.is_symlink() and other.is_dir()
    assert listing(victim) == listing(victim)


# ---------------------------------------------------------------- one way to open a dataset file

# Calls that open a file for reading by its name, and the modules allowed to make them: the file layer itself,
# and readers of files that are no dataset's (listed with their reason; tests/test_layout.py holds writes).
READ_HOME = {"confined", "access"}
DIRECT_READS = {
    "hub.check_safetensors": "a downloaded weights file's safetensors header, in lerodoc's own download folder",
    "ops.tasks.read_mapping": "the user's own --from tasks.json, named on the command line",
}


def _read_call(call: ast.Call) -> bool:
    """Whether `call` opens a file for reading by name: open() without a write mode, Path.read_text/read_bytes,
    pyarrow's and PyAV's openers given anything but `access.source(...)`."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    text = ast.unparse(func)
    first = ast.unparse(call.args[0]) if call.args else ""
    if name == "open" and text in ("open", "io.open"):
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        return not (isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+"))
    if isinstance(func, ast.Attribute) and name in {"read_text", "read_bytes"}:
        return text not in ("access.read_bytes", "confined.read_bytes")
    if text in {"pq.ParquetFile", "pq.read_table", "pq.read_schema", "pq.read_metadata", "av.open"}:
        return bool(call.args) and not first.startswith(("access.source(", "_av_source(", "source")) \
            and "str(tmp)" not in first
    return False


def direct_reads(root: Path) -> dict[str, int]:
    """'module.function' -> line of each call outside the file layer that opens a file by name."""
    found = {}
    for short, node, parents in calls_outside(root, READ_HOME, _read_call):
        where, up = [], node
        while up in parents:
            up = parents[up]
            if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                where.insert(0, up.name)
        found.setdefault(".".join([short, *where]), node.lineno)
    return found


def test_every_dataset_read_goes_through_the_file_layer():
    """No module of lerodoc outside the file layer opens a file by name, bar the listed non-dataset files (pi05's
    own checkpoints and tokenizer are files lerodoc wrote or the user named, and are read there)."""
    found = {k: v for k, v in direct_reads(PACKAGE).items() if not k.startswith("pi05.")}
    assert sorted(found) == sorted(DIRECT_READS), found


def test_a_direct_read_is_found(tmp_path):
    root = _package(tmp_path, {"a.py": "from pathlib import Path\ndef f(p):\n    return Path(p).read_bytes()\n",
                               "b.py": "import pyarrow.parquet as pq\nfrom x import access\n"
                                       "def g(p):\n    return pq.ParquetFile(access.source(p))\n",
                               "c.py": "import pyarrow.parquet as pq\ndef h(p):\n    return pq.read_table(p)\n",
                               "d.py": "def k(p):\n    with open(p, 'rb') as f:\n        return f.read()\n"})
    assert direct_reads(root) == {"a.f": 3, "c.h": 3, "d.k": 2}


def test_layer_errors_are_exit_3():
    assert issubclass(confined.UnsafePath, LerodocError)
    assert confined.UnsafePath("x").exit_code == ExitCode.BAD_INPUT
