"""Memory budgets (issue 34, item 4): a stranger's small file cannot make lerodoc allocate gigabytes.

Each attack the issue measured is rebuilt here inside the test, and the attacked command runs in a subprocess under
an address-space cap (CAP): it must end in exit 3 naming the file and the field (column or box) with the hint on
LERODOC_MEMORY_BUDGET, or exit 0 where the bomb lies in a column the command never decodes; never a traceback; its
peak resident memory at most PEAK; and the sandbox (every byte, mode and time) unchanged.

- a 1 KB meta/tasks.parquet with an extra, dictionary-encoded list column claiming 10^8 values (before: info and
  validate at 1.2-1.9 GB, a "realloc failed" refusal under a 3 GiB cap; lerodoc now reads only task_index and task);
- the same file's `task` column itself: one 1000-byte string repeated 10^7 times by a dictionary (read as a
  dictionary and measured before it is expanded);
- a 4 KB data parquet file with an undeclared list column claiming 10^8 values (before: convert at 1.2 GB under the
  cap, 3.7 GB uncapped, then exit 4); and the same with a footer that still counts 10^6 values while the page
  headers hold 10^8 (pyarrow decodes what the pages say);
- an mp4 whose sample tables claim 10^8 or 10^9 one-byte samples in a sparse file of 4 KB on disk (before: info at
  6.4 GB uncapped, MemoryError and exit 70 under the cap; 10^9 uncapped ran to 23 GB and was killed).

The attack files are made small: a parquet file written with about 2^20 dictionary-encoded values has the counts
of its pages, RLE runs and footer patched to the claim (each is an unsigned LEB128 varint of twice the count, of
the same length before and after), so the file claims 10^8 values that pyarrow really decodes.
"""

from __future__ import annotations

import io
import os
import resource
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc import budget
from lerodoc.errors import LerodocError
from lerodoc.media import mp4
from lerodoc.tables.parquet_io import decoded_claims, read_parquet
from tests.fixtures.factory import make_dataset
from tests.helpers import require
from tests.test_untrusted import listing

CAP = 3 << 30                 # RLIMIT_AS of the attacked command: the old code failed under it, or went past PEAK
PEAK = 1_500_000_000          # the bar: peak resident memory of an attacked command
CLAIM = 10 ** 8               # values (or samples) an attack claims
SEED = (1 << 20) + 12345      # values an attack file is written with: 2*SEED and 2*CLAIM are both 4-byte varints
ZOO = Path(__file__).parent / "zoo" / "members"
G1 = Path(__file__).resolve().parents[2] / "shared" / "data" / "g1_v21"

# runs `python -m lerodoc ARGS` under RLIMIT_AS and writes the child's peak RSS (bytes) to the file named first
MEASURE = """import resource, subprocess, sys
out, cap = sys.argv[1], int(sys.argv[2])
proc = subprocess.run([sys.executable, "-m", "lerodoc", *sys.argv[3:]],
                      preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
open(out, "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
sys.exit(proc.returncode if proc.returncode >= 0 else 128 - proc.returncode)
"""


def attacked(tmp_path: Path, *args, env: dict | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """`lerodoc ARGS` under CAP, and its peak resident memory in bytes (measured in a process of its own, so that
    no other child of the test process counts)."""
    peak = tmp_path / f"peak-{len(list(tmp_path.glob('peak-*')))}"
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(peak), str(CAP), *map(str, args)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})
    return proc, int(peak.read_text())


def refusal(proc: subprocess.CompletedProcess, file: Path, field: str, hint: bool = True) -> str:
    """The one error paragraph of a run refused over a budget: exit 3, no traceback, naming `file` and `field`,
    with the hint on raising the budget (`hint`; a claim of bytes the file does not hold has none: no budget
    admits it)."""
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr[-2000:]
    text = proc.stderr[proc.stderr.index("error:"):].strip()
    assert text.startswith(f"error: {file}: ") and f": {field}: " in text, text
    assert (budget.ENV in text) == hint, text
    return text


# ---------------------------------------------------------------- the attack files

def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value >> 7 else 0))
        value >>= 7
        if not value:
            return bytes(out)


def claiming(table: pa.Table, claim: int = CLAIM, footer: bool = True) -> bytes:
    """`table` (whose counts are SEED) as parquet bytes whose counts are `claim`: every varint of twice SEED + k
    (|k| <= 16: a list's runs of levels count a few values less or more) becomes twice claim + k, in the pages and,
    when `footer`, in the footer too (else the footer still counts SEED). Dictionary encoding and no compression
    keep every count a varint of its own in the file."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", use_dictionary=True, write_statistics=False, store_schema=False,
                   data_page_size=1 << 30, max_rows_per_page=1 << 30, row_group_size=1 << 30)
    raw = sink.getvalue()
    (length,) = struct.unpack("<I", raw[-8:-4])
    body, tail = (raw, b"") if footer else (raw[:-8 - length], raw[-8 - length:])
    patched = 0
    for k in range(-16, 17):
        old, new = _varint(2 * (SEED + k)), _varint(2 * (claim + k))
        assert len(old) == len(new) == 4
        patched += body.count(old)
        body = body.replace(old, new)
    assert patched >= 3, "no count was patched"
    return body + tail


def list_bomb(table: pa.Table, name: str, claim: int = CLAIM, footer: bool = True) -> bytes:
    """`table` and a list<int64> column `name` whose last row holds `claim` zeros, the others none (the footer
    saying so, or when not `footer`, still counting SEED)."""
    offsets = np.zeros(table.num_rows + 1, np.int32)
    offsets[-1] = SEED
    column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.zeros(SEED, np.int64)))
    return claiming(table.append_column(name, column), claim, footer)


def string_bomb(width: int = 1000, claim: int = CLAIM // 10) -> bytes:
    """A tasks table of `claim` rows, task_index 0 and one `width`-byte task in every row, from a dictionary."""
    zeros = pa.array(np.zeros(SEED, np.int32))
    return claiming(pa.table({
        "task_index": pa.DictionaryArray.from_arrays(zeros, pa.array([0], pa.int64())),
        "task": pa.DictionaryArray.from_arrays(zeros, pa.array(["x" * width]))}), claim)


def _box(kind: bytes, *parts: bytes) -> bytes:
    body = b"".join(parts)
    return struct.pack(">I4s", len(body) + 8, kind) + body


def _full(kind: bytes, *fields: int) -> bytes:
    return _box(kind, bytes(4), struct.pack(f">{len(fields)}I", *fields))


def sparse_mp4(video: Path, samples: int, sparse: bool = True) -> None:
    """Rewrite `video` (a factory mp4) as one whose sample tables hold `samples` samples of one byte: stsz of a
    fixed size, one stts run, one chunk, and an mdat of `samples` bytes that is a hole (a sparse file of a few KB
    on disk), or real bytes when not `sparse`. Its moov is the original's with that stbl and without the edit
    list."""
    track = mp4.read_track(video)

    def moov(chunk_offset: int) -> bytes:
        stbl = _box(b"stbl", bytes(track.boxes[b"stsd"].raw), _full(b"stts", 1, samples, 512),
                    _full(b"stsc", 1, 1, samples, 1), _full(b"stsz", 1, samples), _full(b"stco", 1, chunk_offset))
        return mp4._rebuild(track.moov, {b"stbl": stbl, b"edts": b""})
    head = len(track.ftyp) + len(moov(0)) + 8
    with open(video, "wb") as f:
        f.write(track.ftyp + moov(head) + struct.pack(">I4s", samples + 8, b"mdat"))
        if sparse:
            f.truncate(head + samples)
        else:
            f.write(bytes(samples))


# ---------------------------------------------------------------- the attacks

@pytest.fixture(scope="module")
def v30(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("v30") / "ds", version="v3.0", episodes=2, lengths=10,
                        cameras=()).root


def test_extra_tasks_column_is_never_decoded(v30, tmp_path):
    """A 1 KB tasks.parquet whose extra column claims 10^8 dictionary-encoded values: info and validate read only
    task_index and task, exit 0, and stay small (before: 1.2-1.4 GB and a refusal under the cap, 1.9 GB and exit 0
    without it)."""
    sandbox = tmp_path / "sandbox"
    ds = sandbox / "ds"
    shutil.copytree(v30, ds)
    tasks = ds / "meta/tasks.parquet"
    tasks.write_bytes(list_bomb(pq.read_table(tasks), "x"))
    assert tasks.stat().st_size < 2048
    assert pq.ParquetFile(tasks).metadata.row_group(0).column(2).num_values >= CLAIM
    before = listing(sandbox)
    proc, peak = attacked(tmp_path, "info", ds)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "pick up the cube" in proc.stdout or "tasks" in proc.stdout, proc.stdout
    assert peak <= PEAK, peak
    proc, peak = attacked(tmp_path, "validate", ds)
    assert proc.returncode == 0 and " 0 errors" in proc.stdout and "Traceback" not in proc.stderr, \
        (proc.stdout[-2000:], proc.stderr[-2000:])
    assert peak <= PEAK, peak
    assert listing(sandbox) == before


def test_task_strings_expanded_from_a_dictionary_refused(v30, tmp_path):
    """tasks.parquet's own `task` column: 10^7 rows repeating one 1000-byte string through a dictionary (10 GB
    expanded; the footer's counts, 10^7 indices, fit the budget). It is read as a dictionary and its expanded size
    measured before it is expanded: exit 3 naming the file and `task`, small. validate reports the same refusal as
    its finding on the metadata."""
    sandbox = tmp_path / "sandbox"
    ds = sandbox / "ds"
    shutil.copytree(v30, ds)
    tasks = ds / "meta/tasks.parquet"
    tasks.write_bytes(string_bomb())
    assert tasks.stat().st_size < 4096
    before = listing(sandbox)
    proc, peak = attacked(tmp_path, "info", ds)
    assert "expanding the dictionary of column 'task'" in refusal(proc, tasks, "task")
    assert peak <= PEAK, peak
    proc, peak = attacked(tmp_path, "validate", ds)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "LAY002" in proc.stdout and budget.ENV in proc.stdout, proc.stdout[-3000:]
    assert peak <= PEAK, peak
    assert listing(sandbox) == before


def test_data_file_column_bomb_refused_before_decoding(tmp_path):
    """A data file of a few KB whose undeclared column claims 10^8 values: convert stops before decoding it, exit
    3 naming the file and the column, with the hint on the budget (before: 1.2 GB and "realloc failed" under the
    cap, 3.7 GB uncapped). The commands that never read that column (info, quantiles) are not bothered by it."""
    sandbox = tmp_path / "sandbox"
    ds = make_dataset(sandbox / "ds", version="v2.1", episodes=1, lengths=10, cameras=()).root
    data = next(ds.glob("data/**/*.parquet"))
    data.write_bytes(list_bomb(pq.read_table(data), "x"))
    assert data.stat().st_size < 8192
    before = listing(sandbox)
    proc, peak = attacked(tmp_path, "convert", ds, "-o", tmp_path / "out", "--to", "v3.0")
    refusal(proc, data, "x")
    assert peak <= PEAK, peak
    assert not (tmp_path / "out").exists()
    proc, peak = attacked(tmp_path, "info", ds)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert peak <= PEAK, peak
    assert listing(sandbox) == before


def test_page_headers_counting_more_than_the_footer_refused(tmp_path):
    """The footer is not the last word: pyarrow decodes what the page headers say. A data file whose footer counts
    10^6 values of an extra list column (as written) while its pages hold 10^8: convert refuses it naming the file and
    the column, before decoding (before: a footer-only budget let 1.8 GB through)."""
    sandbox = tmp_path / "sandbox"
    ds = make_dataset(sandbox / "ds", version="v2.1", episodes=1, lengths=10, cameras=()).root
    data = next(ds.glob("data/**/*.parquet"))
    data.write_bytes(list_bomb(pq.read_table(data), "x", footer=False))
    assert pq.ParquetFile(data).metadata.row_group(0).column(pq.ParquetFile(data).metadata.num_columns - 1) \
        .num_values < 2 * SEED
    before = listing(sandbox)
    proc, peak = attacked(tmp_path, "convert", ds, "-o", tmp_path / "out", "--to", "v3.0")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    text = proc.stderr[proc.stderr.index("error:"):].strip()
    assert text.startswith(f"error: {data}: ") and ": x: its page headers hold" in text, text
    assert peak <= PEAK, peak
    assert listing(sandbox) == before and not (tmp_path / "out").exists()


@pytest.mark.parametrize("samples", [CLAIM, 10 * CLAIM])
def test_mp4_claiming_samples_a_sparse_file_lacks(tmp_path, samples):
    """An mp4 whose sample tables claim 10^8 (10^9) one-byte samples, its mdat a hole: 4 KB on disk. info refuses
    it, exit 3 naming the file and its stsz box, before a table is sized from the claim (before: 6.4 GB uncapped
    at 10^8; MemoryError, exit 70, under the cap); validate --videos reports it as the camera's unreadable file."""
    sandbox = tmp_path / "sandbox"
    ds = make_dataset(sandbox / "ds", version="v3.0", episodes=1, lengths=10, cameras=("observation.images.top",),
                      height=32, width=48).root
    video = next(ds.glob("videos/**/*.mp4"))
    sparse_mp4(video, samples)
    assert video.stat().st_size > samples
    require(video.stat().st_blocks * 512 < 1 << 20, "a file system with sparse files")
    before = listing(sandbox)
    proc, peak = attacked(tmp_path, "info", ds)
    text = refusal(proc, video, "stsz", hint=False)
    assert f"claims {samples} samples" in text and "on disk" in text, text
    assert peak <= PEAK, peak
    proc, peak = attacked(tmp_path, "validate", "--videos", ds)
    assert proc.returncode == 1 and "VID001" in proc.stdout and "Traceback" not in proc.stderr, \
        (proc.stdout[-2000:], proc.stderr[-2000:])
    assert peak <= PEAK, peak
    assert listing(sandbox) == before


# ---------------------------------------------------------------- the rule itself

def test_mp4_samples_over_the_budget(tmp_path, monkeypatch):
    """Samples the file does hold (5 MB of real one-byte samples) but whose tables would take over the budget (160
    bytes a sample): refused naming the file and stsz, with the hint, before a table is sized; read once the budget
    is raised."""
    ds = make_dataset(tmp_path / "ds", version="v3.0", episodes=1, lengths=10, cameras=("observation.images.top",),
                      height=32, width=48).root
    video = next(ds.glob("videos/**/*.mp4"))
    sparse_mp4(video, 5_000_000, sparse=False)
    monkeypatch.delenv(budget.ENV, raising=False)
    mp4._read_track.cache_clear()
    with pytest.raises(LerodocError) as caught:
        mp4.read_track(video)
    assert caught.value.file == str(video) and caught.value.field == "stsz" and budget.ENV in caught.value.hint
    assert "5000000 samples" in caught.value.message
    monkeypatch.setenv(budget.ENV, "2GiB")
    assert len(mp4.read_track(video).size) == 5_000_000



def test_budget_from_the_environment(monkeypatch):
    """LERODOC_MEMORY_BUDGET in bytes or with a unit; anything else is refused naming the variable."""
    monkeypatch.delenv(budget.ENV, raising=False)
    assert budget.memory_budget() == budget.DEFAULT == 512 << 20
    for text, value in (("1073741824", 1 << 30), ("2GiB", 2 << 30), ("1.5G", 3 << 29), ("300 MB", 300_000_000),
                        ("64kib", 64 << 10)):
        monkeypatch.setenv(budget.ENV, text)
        assert budget.memory_budget() == value, text
    for text in ("lots", "-1", "0", "5 parsecs"):
        monkeypatch.setenv(budget.ENV, text)
        with pytest.raises(LerodocError) as caught:
            budget.memory_budget()
        assert caught.value.field == budget.ENV and caught.value.exit_code == 3


def test_raising_the_budget_admits_what_it_refused(tmp_path, monkeypatch):
    """One rule, one knob. At the default, a column claiming 2^27 values (70 bytes of pages, about 1.5 GB decoded)
    is refused naming its file and column, and a column beside it that is read alone is not counted. A column of
    2^22 values (48 MB decoded) is refused under a 16 MiB budget and read once the budget is raised to 256 MiB."""
    big = tmp_path / "big.parquet"
    big.write_bytes(list_bomb(pa.table({"a": [1]}), "x", claim=(1 << 27) - 100))
    monkeypatch.delenv(budget.ENV, raising=False)
    with pytest.raises(LerodocError) as caught:
        read_parquet(big)
    assert caught.value.file == str(big) and caught.value.field == "x" and budget.ENV in caught.value.hint
    assert read_parquet(big, ["a"]).column("a").to_pylist() == [1]
    assert decoded_claims(pq.ParquetFile(big).metadata)[0][0]["x"] >= 8 * ((1 << 27) - 100)   # counted, not 70 B

    small = tmp_path / "small.parquet"
    small.write_bytes(list_bomb(pa.table({"a": [1]}), "x", claim=1 << 22))
    monkeypatch.setenv(budget.ENV, "16MiB")
    with pytest.raises(LerodocError) as caught:
        read_parquet(small)
    assert caught.value.field == "x" and "16.0 MiB" in caught.value.message
    monkeypatch.setenv(budget.ENV, "256MiB")
    table = read_parquet(small)
    assert len(table.column("x")[0]) == 1 << 22 and table.column("a").to_pylist() == [1]


def test_held_counts_what_a_sparse_file_holds(tmp_path):
    """budget.held: a file's size when its blocks cover it, only its data where it has holes."""
    whole = tmp_path / "whole"
    whole.write_bytes(os.urandom(100_000))
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.write(b"x" * 5000)
        f.truncate(1 << 30)
    require(sparse.stat().st_blocks * 512 < 1 << 20, "a file system with sparse files")
    for path, low, high in ((whole, 100_000, 100_000), (sparse, 5000, 64 << 10)):
        fd = os.open(path, os.O_RDONLY)
        try:
            assert low <= budget.held(fd) <= high, path
        finally:
            os.close(fd)


def test_real_datasets_within_the_default_budget(monkeypatch):
    """No budget refuses what lerobot writes: every data and metadata parquet file of every zoo member and of the
    real g1 dataset reads whole, and every mp4 whose tables mp4 reads indexes, at the default budget."""
    monkeypatch.delenv(budget.ENV, raising=False)
    roots = sorted(p for p in ZOO.iterdir() if (p / "meta/info.json").is_file())
    require(G1.is_dir(), f"the real dataset {G1} (../shared/data/g1_v21)")
    assert len(roots) > 20
    parquets = videos = 0
    for root in roots + [G1]:
        for path in sorted(root.rglob("*.parquet")):
            read_parquet(path)
            parquets += 1
        for path in sorted(root.rglob("*.mp4")):
            try:
                mp4.read_track(path)
            except mp4.Unsupported:
                continue
            videos += 1
    assert parquets > 50 and videos > 20, (parquets, videos)


def test_give_back_returns_freed_blocks_to_the_system():
    """budget.give_back: blocks of a few MB freed (a million episodes' stats tables, 30 of 90 MB each) stay resident
    until glibc is asked to trim them; after it the process's resident memory falls by most of what was freed."""
    import subprocess
    import sys
    code = """
import numpy as np
from lerodoc.budget import give_back
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
big = np.ones(16 << 17)   # a 16 MB block, freed: glibc serves blocks below that size from its heap from here
del big
blocks, kept = [], []
for _ in range(100):   # 100 blocks of 4 MB, touched, each followed on the heap by a small block that stays
    blocks.append(np.ones(1 << 19))
    kept.append(np.ones(1 << 10))
before = resident()
del blocks
held = resident()
give_back()
print(before, held, resident())
"""
    before, held, after = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                  check=True).stdout.split())
    assert held - after > 300 << 20, (before, held, after)   # most of the 400 MB, given back only when asked
