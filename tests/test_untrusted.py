"""Untrusted datasets (issue 25, paths and links): nothing lerodoc reads or writes leaves the dataset or output
root, no writer writes through a link into its input, push uploads the dataset's own files and never a token.

Each escape the issue measured is rebuilt here from a factory dataset inside a sandbox folder and run through
the CLI: it must be refused with exit 3 naming the field, and a listing of the whole sandbox (every file's
bytes, mode and mtime) must be the same before and after, so no file appeared outside the roots and no input
changed. The writer zoo (tests/test_zoo_conformance.py) shows that the same checks refuse nothing lerobot writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lerodoc.errors import ExitCode
from lerodoc import files
from lerodoc.formats import paths
from lerodoc.promote.links import link_or_copy
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli
from tests.hubserver import HubServer

EVIL = "cam/../../../evil"          # the camera key
SMALL = dict(episodes=2, lengths=4, height=32, width=48)
TOP = "observation.images.top"


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def listing(root: Path) -> dict[str, tuple]:
    """Every entry under `root`, links not followed: kind, bytes digest (read a MiB at a time: tests/test_budgets'
    sparse mp4s claim a GB), mode and mtime (ns)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[path.relative_to(root).as_posix()] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[path.relative_to(root).as_posix()] = ("dir",)
            else:
                digest = _digest(path) if stat.S_ISREG(st.st_mode) else None
                out[path.relative_to(root).as_posix()] = ("file", digest, st.st_mode, st.st_mtime_ns)
    return out


def refused(args: list, field: str, sandbox: Path) -> dict:
    """Run `lerodoc ARGS --json`; it must exit 3 naming `field`, with the sandbox exactly as it was."""
    before = listing(sandbox)
    proc = run_cli(*map(str, args), "--json", check=False)
    assert proc.returncode == ExitCode.BAD_INPUT, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["field"] == field, error
    assert listing(sandbox) == before, f"{args} changed the sandbox"
    return error


@pytest.fixture(scope="module")
def evil(tmp_path_factory) -> Path:
    """A sandbox holding DS, a v3.0 dataset whose camera key is `cam/../../../evil`, with the camera's files
    where that key leads: sandbox/evil/chunk-000/file-000.mp4, outside DS."""
    sandbox = tmp_path_factory.mktemp("evil")
    make_dataset(sandbox / "DS", version="v3.0", cameras=(EVIL,), **SMALL)
    assert (sandbox / "evil/chunk-000/file-000.mp4").is_file()
    return sandbox


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """A sandbox holding v21 and v30, clean factory datasets with one camera."""
    sandbox = tmp_path_factory.mktemp("clean")
    make_dataset(sandbox / "v21", version="v2.1", cameras=(TOP,), **SMALL)
    make_dataset(sandbox / "v30", version="v3.0", cameras=(TOP,), **SMALL)
    return sandbox


def copy(template: Path, tmp_path: Path) -> Path:
    sandbox = tmp_path / "sandbox"
    shutil.copytree(template, sandbox, symlinks=True)
    return sandbox


# The commands first, then every other command that opens a dataset.
COMMANDS = {
    "merge": ["merge", "DS", "DS", "-o", "outs/o2"],
    "convert --to v2.1": ["convert", "DS", "-o", "outs/o1", "--to", "v2.1"],
    "info": ["info", "DS"],
    "delete": ["delete", "DS", "-o", "outs/d", "--episodes", "0"],
    "split": ["split", "DS", "-o", "outs/s", "--into", "a=0.5,b=0.5"],
    "features": ["features", "DS", "-o", "outs/f", "--drop", "action"],
    "flatten": ["flatten", "DS", "-o", "outs/fl"],
    "select": ["select", "DS", "-o", "outs/sel", "--state", "observation.state", "--action", "action"],
    "tasks": ["tasks", "DS", "-o", "outs/t", "--set", "pick up the cube=pick it up"],
    "encode": ["encode", "DS", "-o", "outs/e", "--reencode"],
    "quantiles": ["quantiles", "DS", "-o", "outs/q"],
    "repair": ["repair", "DS", "-o", "outs/r"],
    "report": ["report", "DS", "-o", "outs/report.html"],
}


@pytest.mark.parametrize("name", COMMANDS)
def test_a_camera_key_leading_outside_is_refused(evil, tmp_path, name):
    sandbox = copy(evil, tmp_path)
    args = [sandbox / a if a in ("DS",) or a.startswith("outs/") else a for a in COMMANDS[name]]
    error = refused(args, f"features.{EVIL}", sandbox)
    assert error["file"].endswith("meta/info.json") and "'/'" in error["message"]


def test_validate_names_the_camera_key(evil, tmp_path):
    sandbox = copy(evil, tmp_path)
    before = listing(sandbox)
    proc = run_cli("validate", sandbox / "DS", "--json", check=False)
    assert proc.returncode == ExitCode.FINDINGS, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    assert [(f["code"], f.get("feature") or f.get("field")) for f in findings] == [("LAY015", EVIL)], findings
    assert listing(sandbox) == before


@pytest.mark.parametrize("new", ["../../../../x", "..", "a/b", "a\\b", "tab\there", "x" * 256])
def test_features_rename_to_a_path_is_refused(clean, tmp_path, new):
    sandbox = copy(clean, tmp_path)
    for ds in ("v21", "v30"):
        error = refused(["features", sandbox / ds, "-o", sandbox / "outs" / "OUT", "--rename", f"{TOP}={new}"],
                        "--rename", sandbox)
        assert repr(new) in error["message"]


def test_features_rename_keeps_dotted_names(clean, tmp_path):
    """Dots are fine in a key (lerobot's own are dotted): the camera's folder is renamed inside OUT."""
    sandbox = copy(clean, tmp_path)
    out = sandbox / "outs" / "OUT"
    run_cli("features", sandbox / "v30", "-o", out, "--rename", f"{TOP}=observation.images.front.left")
    assert (out / "videos/observation.images.front.left/chunk-000/file-000.mp4").is_file()
    assert sorted(p.name for p in sandbox.iterdir()) == ["outs", "v21", "v30"]


def test_split_part_name_leading_outside_is_refused(clean, tmp_path):
    sandbox = copy(clean, tmp_path)
    before = listing(sandbox)
    for into in ("../../x=0.5,b=0.5", "..=0.5,b=0.5"):
        proc = run_cli("split", sandbox / "v30", "-o", sandbox / "outs" / "S", "--into", into, check=False)
        assert proc.returncode in (ExitCode.USAGE, ExitCode.BAD_INPUT) and "--into" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert listing(sandbox) == before


def _edit_info(root: Path, **changes) -> None:
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info.update(changes)
    path.write_text(json.dumps(info, indent=4))


@pytest.mark.parametrize("command", ["convert", "info", "merge"])
def test_an_absolute_data_path_is_refused(clean, tmp_path, command):
    """The issue's v2.1 dataset whose data_path is absolute, its parquet files outside it: nothing is read."""
    sandbox = copy(clean, tmp_path)
    ds = sandbox / "v21"
    elsewhere = sandbox / "elsewhere"
    shutil.move(ds / "data", elsewhere / "data")
    template = json.loads((ds / "meta/info.json").read_text())["data_path"]
    _edit_info(ds, data_path=f"{elsewhere}/{template}")
    args = {"convert": ["convert", ds, "-o", sandbox / "outs/c", "--to", "v3.0"], "info": ["info", ds],
            "merge": ["merge", ds, ds, "-o", sandbox / "outs/m"]}[command]
    error = refused(args, "data_path", sandbox)
    assert "absolute" in error["message"]


@pytest.mark.parametrize("field,template", [
    ("data_path", "data/../../elsewhere/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"),
    ("video_path", "videos/chunk-{episode_chunk:03d}/../../../{video_key}/episode_{episode_index:06d}.mp4"),
    ("video_path", "/videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"),
])
def test_a_template_leading_outside_is_refused(clean, tmp_path, field, template):
    sandbox = copy(clean, tmp_path)
    _edit_info(sandbox / "v21", **{field: template})
    refused(["convert", sandbox / "v21", "-o", sandbox / "outs/c", "--to", "v3.0"], field, sandbox)
    proc = run_cli("validate", sandbox / "v21", "--json", check=False)
    assert [f["code"] for f in json.loads(proc.stdout)["findings"]] == ["LAY012"]


def test_links_leading_outside_are_refused(clean, tmp_path):
    """A data file, a meta file or a folder that links outside the dataset: refused before anything is read."""
    sandbox = copy(clean, tmp_path)
    ds, outside = sandbox / "v21", sandbox / "outside"
    outside.mkdir()
    data = ds / "data/chunk-000/episode_000000.parquet"
    shutil.move(data, outside / data.name)
    data.symlink_to(outside / data.name)
    error = refused(["convert", ds, "-o", sandbox / "outs/c", "--to", "v3.0"], "data_path", sandbox)
    assert "outside the dataset" in error["message"] and error["file"].endswith(data.name)
    data.unlink()
    shutil.move(outside / data.name, data)

    tasks = ds / "meta/tasks.jsonl"
    shutil.move(tasks, outside / tasks.name)
    tasks.symlink_to(os.path.relpath(outside / tasks.name, tasks.parent))
    refused(["info", ds], None, sandbox)
    tasks.unlink()
    shutil.move(outside / tasks.name, tasks)

    shutil.move(ds / "videos", outside / "videos")
    (ds / "videos").symlink_to(outside / "videos")
    refused(["merge", ds, ds, "-o", sandbox / "outs/m"], "video_path", sandbox)


def test_a_stray_link_leading_outside_is_never_taken_for_a_misplaced_file(clean, tmp_path):
    """repair reads a file stored under the wrong folder as the one the metadata names: a link there leading out
    of the dataset is not such a file (it read and copied the outside file before)."""
    sandbox = copy(clean, tmp_path)
    ds, outside = sandbox / "v21", sandbox / "outside"
    outside.mkdir()
    shutil.move(ds / f"videos/chunk-000/{TOP}/episode_000000.mp4", outside / "secret.mp4")
    stray = ds / f"videos/{TOP}/episode_000000.mp4"
    stray.parent.mkdir(parents=True)
    stray.symlink_to(os.path.relpath(outside / "secret.mp4", stray.parent))
    before = listing(sandbox)
    proc = run_cli("repair", ds, "-o", sandbox / "outs/r", "--json", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr   # written, with a file listed lost
    report = json.loads(proc.stdout)
    (lost,) = [f for f in report["remaining"] if f["code"] == "LAY040"]
    assert lost["field"] == TOP and lost["episode"] == 0 and "missing" in lost["message"], lost
    assert report["left_out"] == [0]
    secret = (outside / "secret.mp4").read_bytes()
    written = [p for p in (sandbox / "outs/r").rglob("*") if p.is_file()]
    assert written and not any(p.is_symlink() or p.read_bytes() == secret for p in written)
    assert {k: v for k, v in listing(sandbox).items() if "outs" not in Path(k).parts} == before


def test_a_fifo_where_a_file_should_be_is_refused_not_read(clean, tmp_path):
    """Reading a FIFO would wait for ever: a data file that is one is refused before anything opens it."""
    sandbox = copy(clean, tmp_path)
    data = sandbox / "v21/data/chunk-000/episode_000001.parquet"
    data.unlink()
    os.mkfifo(data)
    before = listing(sandbox)
    proc = subprocess.run([sys.executable, "-m", "lerodoc", "convert", str(sandbox / "v21"), "-o",
                           str(sandbox / "outs/c"), "--to", "v3.0", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["field"] == "data_path" and "FIFO" in error["message"] and error["file"].endswith(data.name)
    assert listing(sandbox) == before


def test_a_hugging_face_cache_snapshot_keeps_working(clean, tmp_path):
    """Snapshot files are links into the repository's blobs/: they are read, converted and never written."""
    repo = tmp_path / "hub/datasets--lab--ds"
    snapshot = repo / "snapshots/0123abcd"
    source = clean / "v21"
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        blob = repo / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, blob)
        link = snapshot / path.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs/main").write_text("0123abcd")
    before = listing(repo)
    assert json.loads(run_cli("info", snapshot, "--json").stdout)["episodes"] == 2
    report = json.loads(run_cli("validate", snapshot, "--json", check=False).stdout)
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    run_cli("convert", snapshot, "-o", tmp_path / "out", "--to", "v3.0")
    run_cli("features", snapshot, "-o", tmp_path / "renamed", "--rename", f"{TOP}=front")
    assert listing(repo) == before
    assert json.loads(run_cli("info", tmp_path / "out", "--json").stdout)["episodes"] == 2


# ------------------------------------------------------------------ never write through a link

def test_a_rename_onto_a_linked_file_leaves_the_input_alone(clean, tmp_path):
    """features hard-links the input's files into its output; a stray input file where the renamed camera's
    videos go is one of them. The camera's file must replace that link by name, not be copied into it."""
    sandbox = copy(clean, tmp_path)
    ds = sandbox / "v30"
    stray = ds / "videos/front/chunk-000/file-000.mp4"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"a stray file nobody references")
    os.chmod(stray, 0o640)
    os.utime(stray, ns=(1_000_000_000, 1_000_000_000))
    before = listing(ds)
    out = sandbox / "outs/OUT"
    run_cli("features", ds, "-o", out, "--rename", f"{TOP}=front")
    assert listing(ds) == before
    assert (out / "videos/front/chunk-000/file-000.mp4").read_bytes() == \
        (ds / f"videos/{TOP}/chunk-000/file-000.mp4").read_bytes()


@pytest.mark.parametrize("hidden", ["meta/.info.json.tmp", "meta/.tasks.parquet.tmp", "meta/.stats.json.tmp"])
def test_a_leftover_temp_name_in_the_input_is_never_written(clean, tmp_path, hidden):
    """A file in the input under the name a meta writer once used for its temporary file is hard-linked into the
    output tree like every other: the writer must not open it."""
    sandbox = copy(clean, tmp_path)
    ds = sandbox / "v30"
    (ds / hidden).write_text("leftover")
    before = listing(ds)
    run_cli("tasks", ds, "-o", sandbox / "outs/t", "--set", "pick up the cube=pick it up")
    run_cli("flatten", ds, "-o", sandbox / "outs/f", check=False)
    assert listing(ds) == before


def test_two_outputs_aliasing_one_path_never_change_the_input(clean, tmp_path):
    """Every writer of a file (meta files, parquet, stream-copied and re-encoded mp4, hard links) replaces the
    name it writes: with the output path already a hard link to an input file, the input keeps its bytes, mode
    and mtime."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lerodoc.media import video
    from lerodoc.formats.jsonl import write_json

    sandbox = copy(clean, tmp_path)
    src = sandbox / "v30"
    before = listing(src)
    clip = src / f"videos/{TOP}/chunk-000/file-000.mp4"
    out = sandbox / "out"
    writers = {
        "meta/info.json": lambda p: write_json(p, {"written": True}),
        "data/chunk-000/file-000.parquet": lambda p: paths_write_parquet(p, pa, pq),
        f"videos/{TOP}/chunk-000/file-000.mp4": lambda p: video.concat([video.Clip(clip)], p, 30),
        "meta/tasks.parquet": lambda p: video.reencode(video.Clip(clip), p, 30),
        "meta/stats.json": lambda p: link_or_copy(src / "meta/info.json", p),
    }
    for rel, write in writers.items():
        target = out / rel
        link_or_copy(src / rel, target)                  # the first output: the input's file by hard link
        assert os.path.samefile(src / rel, target)
        write(target)                                    # the second, aliasing it
        assert not os.path.samefile(src / rel, target) or rel == "meta/stats.json"
    assert listing(src) == before
    assert not [p for p in out.rglob("*") if p.name.endswith(files.NEW_SUFFIX)]


def paths_write_parquet(path: Path, pa, pq) -> None:
    """A parquet writer as rewrite's: a new file, renamed over `path`."""
    with files.new_file(path) as tmp:
        pq.write_table(pa.table({"x": [1, 2, 3]}), tmp)


def test_a_failed_write_leaves_the_target_and_no_temporary(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(b"before")
    with pytest.raises(RuntimeError):
        with files.new_file(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("disk trouble")
    assert target.read_bytes() == b"before" and sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]


# ------------------------------------------------------------------ the rule itself

def test_the_name_rule():
    for good in ("observation.images.top", "action", "cam front", "kamera_ü", "a..b", ".hidden", "x" * 255):
        assert paths.name_problem(good) is None, good
    for bad in ("", ".", "..", "a/b", "a\\b", "nul\0", "line\nbreak", "del\x7f", "c1\x85", "x" * 256, "\ud800",
                3):
        assert paths.name_problem(bad), bad
    with pytest.raises(paths.UnsafePath) as caught:
        paths.component("a/../b", field="features.a/../b", file="meta/info.json")
    assert caught.value.field == "features.a/../b" and caught.value.exit_code == ExitCode.BAD_INPUT


def test_the_template_rule():
    fill = {"episode_chunk": 0, "episode_index": 0, "chunk_index": 0, "file_index": 0}
    for good in ("data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                 "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"):
        assert paths.template(good, field="t", fill=fill, keys=[TOP]) == good
    for bad in ("/abs/{episode_index}.parquet", "../x/{episode_index}.parquet", "data\\{episode_index}.parquet",
                "C:/data/{episode_index}.parquet", "", "a/../../{episode_index}"):
        with pytest.raises(paths.UnsafePath):
            paths.template(bad, field="t", fill=fill)
    assert paths.inside("/r", "data/a.parquet") == Path("/r/data/a.parquet")
    for bad in ("../a", "/etc/passwd", "a/../../b", "a\\..\\b"):
        with pytest.raises(paths.UnsafePath):
            paths.inside("/r", bad, field="data_path")


# ------------------------------------------------------------------ push

@pytest.fixture
def hub():
    with HubServer() as server:
        yield server


TOKEN = "hf_lerodocTESTtoken0123456789abcdef"


def _push(hub: HubServer, tmp_path: Path, *args, endpoint: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "MODELSCOPE"))}
    env.update(HF_ENDPOINT=endpoint or hub.url, HF_HOME=str(tmp_path / "hf"), HF_TOKEN=TOKEN,
               HF_HUB_DISABLE_TELEMETRY="1")
    return subprocess.run([sys.executable, "-m", "lerodoc", *map(str, args)], capture_output=True, text=True,
                          env=env)


def test_push_uploads_only_the_datasets_own_regular_files(clean, tmp_path, hub):
    sandbox = copy(clean, tmp_path)
    ds = sandbox / "v30"
    (sandbox / "secret.txt").write_text("not part of the dataset")
    (ds / "notes.txt").symlink_to("../secret.txt")
    proc = _push(hub, tmp_path, "push", ds, "lab/linked", "--json")
    assert proc.returncode == ExitCode.BAD_INPUT and "outside the dataset" in json.loads(proc.stdout)["error"]["message"]
    assert ("dataset", "lab/linked") not in hub.repos
    (ds / "notes.txt").unlink()

    os.mkfifo(ds / "pipe")
    proc = _push(hub, tmp_path, "push", ds, "lab/fifo")
    assert proc.returncode == ExitCode.BAD_INPUT and "not a regular file" in proc.stderr, proc.stderr
    assert ("dataset", "lab/fifo") not in hub.repos
    (ds / "pipe").unlink()

    (ds / "notes.txt").write_text("a note of the dataset's own")
    (ds / "same.txt").symlink_to("notes.txt")   # even inside the dataset, a file link is not read (lerodoc.confined)
    proc = _push(hub, tmp_path, "push", ds, "lab/same", "--json")
    assert proc.returncode == ExitCode.BAD_INPUT and "is a link" in json.loads(proc.stdout)["error"]["message"]
    assert ("dataset", "lab/same") not in hub.repos
    (ds / "same.txt").unlink()
    proc = _push(hub, tmp_path, "push", ds, "lab/ok", "--json")
    assert proc.returncode == 0, proc.stderr
    uploaded = hub.repos[("dataset", "lab/ok")].files
    assert uploaded["notes.txt"] == b"a note of the dataset's own"
    assert b"not part of the dataset" not in b"".join(uploaded.values())


def test_push_never_shows_the_token(clean, tmp_path, hub):
    """HF_TOKEN is absent from every byte written: stdout, stderr (-v included), --json, the files under the test's
    folder and what reached the hub; on success and on each kind of failure."""
    sandbox = copy(clean, tmp_path)
    ds, linked = sandbox / "v30", sandbox / "v21"
    (linked / "notes.txt").symlink_to("/etc/hostname")
    runs = [_push(hub, tmp_path, "push", ds, "lab/a", "--json"), _push(hub, tmp_path, "-v", "push", ds, "lab/b"),
            _push(hub, tmp_path, "-v", "push", ds, "lab/c", "--json", endpoint="http://127.0.0.1:9"),
            _push(hub, tmp_path, "-v", "push", linked, "lab/d", "--json")]
    assert [p.returncode for p in runs] == [0, 0, ExitCode.NETWORK, ExitCode.BAD_INPUT], [p.stderr for p in runs]
    assert any(r.headers.get("authorization", r.headers.get("Authorization", "")).endswith(TOKEN) for r in hub.log)
    written = "".join(p.stdout + p.stderr for p in runs).encode()
    written += b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink())
    written += b"".join(b for repo in hub.repos.values() for b in repo.files.values())
    assert TOKEN.encode() not in written and TOKEN[3:].encode() not in written
