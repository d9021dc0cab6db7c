"""Untrusted sizes, full disks and two writers (issue 25, items 2-4).

- Sizes: what info.json, the episodes metadata, a parquet footer or an mp4 box claims is bounded or checked
  against the data on disk before anything is allocated from it; crafted datasets run under RLIMIT_AS.
- Disk full: a write that hits ENOSPC (a small tmpfs) or EFBIG (RLIMIT_FSIZE) is one message naming the output
  file, exit 3, no staging folder left, the input's bytes, modes and times unchanged.
- Two writers: a second command writing the same output stops at once, naming the lock; a stale lock is taken over.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.media import mp4
from lerodoc.errors import LerodocError
from lerodoc.formats.info import Info
from lerodoc.promote.locks import lock_path
from lerodoc.tables.parquet_io import leaf_values
from tests.fixtures.factory import make_dataset
from tests.helpers import require

ZOO = Path(__file__).parent / "zoo" / "members"
G1 = Path(__file__).resolve().parents[2] / "shared" / "data" / "g1_v21"
MEMORY = 1 << 30          # RLIMIT_AS for the crafted datasets: far below what their claims would need
LEFTOVERS = ("lerodoc-tmp", "lerodoc-lock", "lerodoc-new", "lerodoc-old")


def lerodoc(*args, memory: int | None = None, file_size: int | None = None, timeout: float = 300
            ) -> subprocess.CompletedProcess:
    """`python -m lerodoc ARGS` under an address-space limit and/or a file-size limit (SIGXFSZ ignored, so that
    a write past the limit fails with EFBIG as on a file system's own limit)."""
    def limits():
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if file_size is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    return subprocess.run([sys.executable, "-m", "lerodoc", *map(str, args)], capture_output=True, text=True,
                          preexec_fn=limits, timeout=timeout)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file under `root`: its bytes, mode and modification time."""
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mode, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if any(mark in p.name for mark in LEFTOVERS)]


def one_error(proc: subprocess.CompletedProcess) -> str:
    """The one error paragraph of a run, checked to be alone and without a traceback or MemoryError."""
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert proc.stderr.count("error:") == 1, proc.stderr
    text = proc.stderr[proc.stderr.index("error:"):].strip()
    assert "\n\n" not in text, text
    return text


# ---------------------------------------------------------------- bounded by the data, not the metadata

@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    """A small v2.1 dataset without cameras (a few KB on disk)."""
    return make_dataset(tmp_path_factory.mktemp("plain") / "ds", version="v2.1", episodes=1, lengths=10,
                        cameras=()).root


def edited(src: Path, dst: Path, info=None, episodes=None) -> Path:
    """A copy of `src` with its info.json and/or episodes.jsonl rows edited in place by the given functions."""
    shutil.copytree(src, dst)
    if info:
        path = dst / "meta/info.json"
        raw = json.loads(path.read_text())
        info(raw)
        path.write_text(json.dumps(raw))
    if episodes:
        path = dst / "meta/episodes.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        episodes(rows)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


CLAIMS = {   # info.json edit -> the field named in the refusal
    "frames 1e12": (lambda i: i.update(total_frames=10 ** 12), "total_frames"),
    "episodes 1e12": (lambda i: i.update(total_episodes=10 ** 12), "total_episodes"),
    "shape 1e9": (lambda i: i["features"]["observation.state"].update(shape=[10 ** 9]), "features.observation.state.shape"),
    "image 1e5 x 1e5": (lambda i: i["features"]["action"].update(shape=[10 ** 5, 10 ** 5, 3]), "features.action.shape"),
    "chunks_size 0": (lambda i: i.update(chunks_size=0), "chunks_size"),
    "chunks_size 1e15": (lambda i: i.update(chunks_size=10 ** 15), "chunks_size"),
    "files_size 0": (lambda i: i.update(data_files_size_in_mb=0), "data_files_size_in_mb"),
    "files_size 1e15": (lambda i: i.update(video_files_size_in_mb=10 ** 15), "video_files_size_in_mb"),
    "fps 0": (lambda i: i.update(fps=0), "fps"),
    "fps 1e9": (lambda i: i.update(fps=10 ** 9), "fps"),
    "fps inf": (lambda i: i.update(fps=float("inf")), "fps"),
}


@pytest.mark.parametrize("claim", CLAIMS)
def test_info_claims_refused_naming_the_field(plain, claim):
    edit, field = CLAIMS[claim]
    raw = json.loads((plain / "meta/info.json").read_text())
    edit(raw)
    with pytest.raises(LerodocError) as caught:
        Info.from_dict(raw, source=plain / "meta/info.json")
    assert caught.value.field == field and caught.value.exit_code == 3


def test_real_datasets_within_the_bounds():
    """The bounds refuse no real dataset: every zoo member (every lerobot release's writer, exporter styles) and
    the real g1 dataset parse."""
    infos = sorted(ZOO.glob("*/meta/info.json"))
    require(G1.is_dir(), f"the real dataset {G1} (../shared/data/g1_v21)")
    assert len(infos) > 20
    for path in infos + [G1 / "meta/info.json"]:
        Info.load(path)


def test_crafted_claims_exit_3_under_a_memory_limit(plain, tmp_path):
    """Commands on small datasets claiming huge sizes stop with one message naming the file and field, fast and
    within 1 GiB of address space: they never size anything from the claims (before: `quantiles` asked for
    47 TiB for an episode claiming 1e12 frames, and for 5 GiB for a shape of 2^27 values)."""
    frames = edited(plain, tmp_path / "frames", info=lambda i: i.update(total_frames=10 ** 12))
    shape = edited(plain, tmp_path / "shape", info=lambda i: i["features"]["observation.state"].update(shape=[10 ** 9]))
    wide = edited(plain, tmp_path / "wide", info=lambda i: i["features"]["observation.state"].update(shape=[1 << 27]))
    length = edited(plain, tmp_path / "length", episodes=lambda rows: rows[0].update(length=10 ** 12))
    started = time.monotonic()
    for args, field in (((("info", frames), "total_frames")), (("info", shape), "features.observation.state.shape")):
        proc = lerodoc(*args, memory=MEMORY)
        assert proc.returncode == 3 and f"info.json: {field}:" in one_error(proc), proc.stderr
    proc = lerodoc("validate", frames, memory=MEMORY)   # validate reports the refusal as its finding LAY002
    assert proc.returncode == 1 and "LAY002" in proc.stdout and "total_frames" in proc.stdout, proc.stdout
    proc = lerodoc("quantiles", wide, "-o", tmp_path / "out-wide", memory=MEMORY)
    assert proc.returncode == 3 and "observation.state" in one_error(proc), proc.stderr
    proc = lerodoc("quantiles", length, "-o", tmp_path / "out-length", memory=MEMORY)
    assert proc.returncode == 3 and "episode_000000.parquet" in one_error(proc), proc.stderr
    proc = lerodoc("quantiles", plain, "-o", tmp_path / "out-plain", memory=MEMORY)   # the limit itself is livable
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 120
    assert not (tmp_path / "out-wide").exists() and not (tmp_path / "out-length").exists()


@pytest.fixture(scope="module")
def filmed(tmp_path_factory) -> Path:
    """A small v3.0 dataset with one camera."""
    return make_dataset(tmp_path_factory.mktemp("filmed") / "ds", version="v3.0", episodes=2, lengths=20,
                        cameras=("observation.images.top",), height=32, width=48).root


def _box(data: bytes, kind: bytes) -> int:
    """The offset of the first `kind` box's type field (its size is the 4 bytes before)."""
    at = data.find(kind)
    assert at > 4
    return at


def test_mp4_tables_claiming_more_than_the_file(filmed, tmp_path):
    """Sample tables whose counts claim 2^32 samples in a 3 KB file are refused before an array is sized from
    them (before: 32 GiB asked for, a MemoryError); convert then remuxes the file with FFmpeg or names it."""
    video = next(filmed.glob("videos/**/*.mp4"))
    data = video.read_bytes()
    stsz, stts = _box(data, b"stsz"), _box(data, b"stts")
    crafted = {"stsz": lambda b: struct.pack_into(">II", b, stsz + 8, 1, 0xFFFFFFFF),   # 2^32 samples of 1 byte
               "stts": lambda b: struct.pack_into(">I", b, stts + 12, 0xFFFFFFFF)}      # a run of 2^32 samples
    paths = []
    for name, patch in crafted.items():
        raw = bytearray(data)
        patch(raw)
        paths.append(tmp_path / f"{name}.mp4")
        paths[-1].write_bytes(raw)
    script = ("import sys\nfrom lerodoc.media import mp4\nfor p in sys.argv[1:]:\n    try:\n        mp4.read_track(p)\n"
              "        print('read')\n    except mp4.Unsupported as exc:\n        print('unsupported', exc)\n")
    proc = subprocess.run([sys.executable, "-c", script, *map(str, paths)], capture_output=True, text=True,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("unsupported") and "stsz claims 4294967295 samples" in lines[0], lines
    assert lines[1].startswith("unsupported") and "stts" in lines[1], lines
    assert len(mp4.read_track(video).size) == 40     # the untouched file still reads
    ds = tmp_path / "ds"
    shutil.copytree(filmed, ds)
    shutil.copyfile(paths[0], ds / video.relative_to(filmed))
    proc = lerodoc("convert", ds, "-o", tmp_path / "out", "--to", "v2.1", memory=MEMORY)
    assert proc.returncode in (0, 3), proc.stderr
    if proc.returncode == 3:
        assert video.name in one_error(proc)


def test_parquet_footer_claiming_bytes_the_file_lacks(plain, tmp_path):
    """A data file whose footer places its column chunks over bytes that are not there (500 cut out before the
    footer) is one message naming the file, within the memory limit; the footer's own counts are checked
    against the episodes metadata (test_crafted_claims_exit_3_under_a_memory_limit)."""
    ds = tmp_path / "ds"
    shutil.copytree(plain, ds)
    data = next(ds.glob("data/**/*.parquet"))
    raw = data.read_bytes()
    (footer_size,) = struct.unpack("<I", raw[-8:-4])
    body = len(raw) - 8 - footer_size
    data.write_bytes(raw[:body - 500] + raw[body:])
    assert pq.ParquetFile(data).metadata.num_rows == 10    # the footer itself still reads
    proc = lerodoc("quantiles", ds, "-o", tmp_path / "out", memory=MEMORY)
    assert proc.returncode == 3 and f"error: {data}" in one_error(proc), proc.stderr
    assert leaf_values(pq.ParquetFile(next(plain.glob("data/**/*.parquet"))).metadata)["observation.state"] == 60


# ---------------------------------------------------------------- disk full, file-size limits

WRITERS = {
    "convert": lambda src, out: ("convert", src, "-o", out, "--to", "v2.1"),
    "merge": lambda src, out: ("merge", src, src, "-o", out),
    "quantiles": lambda src, out: ("quantiles", src, "-o", out),
    "split": lambda src, out: ("split", src, "-o", out, "--into", "a=0.5,b=0.5", "--seed", "0"),
    "report": lambda src, out: ("report", src, "-o", out),      # a file written outside any staging folder
}


@pytest.mark.parametrize("command", WRITERS)
def test_file_size_limit_one_message_nothing_left(filmed, tmp_path, command):
    """EFBIG (RLIMIT_FSIZE of 3000 bytes: every data and metadata file written, and the report page, is larger)
    during the write: exit 3, one paragraph naming the output, no staging folder, lock or temporary file left, the
    input unchanged."""
    src = tmp_path / "in"
    shutil.copytree(filmed, src)
    before = snapshot(src)
    out = tmp_path / "outs" / "out"
    out.parent.mkdir()
    proc = lerodoc(*WRITERS[command](src, out), file_size=3000)
    assert proc.returncode == 3, proc.stderr
    text = one_error(proc)
    named = text[len("error: "):text.index(": cannot be written")]
    assert "ulimit -f" in text and (named == str(out) if command == "report" else
                                    named.startswith(f"{out}/") and Path(named).suffix in (".parquet", ".mp4", ".json")), text
    assert not out.exists() and leftovers(out.parent) == [] and leftovers(tmp_path) == []
    assert snapshot(src) == before


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_disk_full_on_a_small_tmpfs(filmed, tmp_path):
    """ENOSPC on a real full file system (a 256 KiB tmpfs, mostly filled): one message naming the output, exit 3,
    nothing left, the input (on the same tmpfs) unchanged."""
    small = tmp_path / "small"
    require(_mount_tmpfs(small, "256k"), "mount -t tmpfs (needs root, CAP_SYS_ADMIN)")
    try:
        src = small / "in"
        shutil.copytree(filmed, src)
        (small / "filler").write_bytes(bytes(shutil.disk_usage(small).free - 24 * 1024))
        before = snapshot(src)
        for command in ("convert", "quantiles"):
            out = small / f"out-{command}"
            proc = lerodoc(*WRITERS[command](src, out))
            assert proc.returncode == 3, proc.stderr
            text = one_error(proc)
            assert text.startswith(f"error: {out}/") and "no space is left" in text, text
            assert not out.exists() and leftovers(small) == []
        assert snapshot(src) == before
    finally:
        subprocess.run(["umount", str(small)], capture_output=True, timeout=30)


# ---------------------------------------------------------------- two writers, one output

def _stopped_writer(args: list, lock: Path) -> subprocess.Popen:
    """Start `lerodoc ARGS` and stop it (SIGSTOP) once it holds `lock` (the file names its pid), before it promotes
    anything."""
    proc = subprocess.Popen([sys.executable, "-m", "lerodoc", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the writer never took its lock"
        if lock.exists() and lock.stat().st_size:
            proc.send_signal(signal.SIGSTOP)
            try:
                if json.loads(lock.read_text()).get("pid") == proc.pid:
                    return proc
            except (OSError, ValueError):   # caught between creating the file and writing it
                pass
            proc.send_signal(signal.SIGCONT)
        time.sleep(0.01)


def _finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    proc.send_signal(signal.SIGCONT)
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_second_writer_of_one_output_refused(filmed, tmp_path):
    """While one convert writes OUT, a second convert to OUT (with --force too) stops at once naming the lock and
    the first command's pid; the first then finishes and its output is whole."""
    out = tmp_path / "out"
    lock = lock_path(out)
    first = _stopped_writer(["convert", filmed, "-o", out, "--to", "v2.1", "-j", "1"], lock)
    try:
        holder = json.loads(lock.read_text())
        assert holder["pid"] == first.pid and holder["host"] == socket.gethostname()
        for extra in ([], ["--force"]):
            started = time.monotonic()
            proc = lerodoc("convert", filmed, "-o", out, "--to", "v2.1", *extra)
            assert proc.returncode == 3, proc.stderr
            text = one_error(proc)
            assert f"error: {lock}" in text and f"pid {first.pid}" in text, text
            assert time.monotonic() - started < 60
            assert not out.exists() and lock.exists()
    finally:
        done = _finish(first)
    assert done.returncode == 0, done.stderr
    assert not lock.exists() and leftovers(tmp_path) == []
    check = lerodoc("validate", out)
    assert check.returncode == 0 and " 0 errors" in check.stdout, check.stdout


def test_second_in_place_edit_refused(filmed, tmp_path):
    """--in-place on a dataset another command is rewriting in place stops at once, and so does `quantiles
    DATASET` (which stores its stats in the dataset's own meta/); the first edit lands whole."""
    ds = tmp_path / "ds"
    shutil.copytree(filmed, ds)
    lock = lock_path(ds)
    first = _stopped_writer(["tasks", ds, "--in-place", "--set", "pick up the cube=pick it", "-j", "1"], lock)
    try:
        for second in (["tasks", ds, "--in-place", "--set", "place the cube=put it"], ["quantiles", ds]):
            proc = lerodoc(*second)
            assert proc.returncode == 3 and f"error: {lock}" in one_error(proc), proc.stderr
    finally:
        done = _finish(first)
    assert done.returncode == 0, done.stderr
    tasks = pq.read_table(ds / "meta/tasks.parquet").to_pydict()
    assert "pick it" in tasks["task"] and "place the cube" in tasks["task"], tasks
    assert not lock.exists() and leftovers(tmp_path) == []


def test_stale_lock_of_a_dead_command_taken_over(filmed, tmp_path):
    """A lock file left by a command that died (its pid is gone, nothing holds the lock) does not stop the next."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "out"
    lock = lock_path(out)
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "command": "lerodoc convert"}))
    proc = lerodoc("convert", filmed, "-o", out, "--to", "v2.1")
    assert proc.returncode == 0, proc.stderr
    assert out.is_dir() and not lock.exists() and leftovers(tmp_path) == []
