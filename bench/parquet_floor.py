"""bench/parquet_floor: the least work a verified v2.1 -> v3.0 parquet rewrite can do, in pyarrow alone.

    python -m bench.parquet_floor SRC_V21 OUT [--cap-mb 100] [--workers N] [--no-read-back]

What it does is what `lerodoc convert` must do for a parquet-only dataset, and nothing else: the episode
files, in order, are grouped into output files of at most --cap-mb source bytes; per output file, in a pool
of --workers processes running pyarrow on one thread each, every episode file is read, written as one row
group, and the written file is read back and given a CRC-32 per column (lerodoc's proof that the values
survived). No metadata, no stats, no renumbering, no checks of the input, no CLI. bench.convert runs it as a
fresh process, like the tools it compares, so its time includes Python's start-up and pyarrow's import:
the floor under lerodoc's time on the same machine in the same run.
"""

from __future__ import annotations

import argparse
import os
import zlib

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def _single_thread() -> None:
    import pyarrow
    pyarrow.set_cpu_count(1)
    pyarrow.set_io_thread_count(1)


def rewrite(job: tuple[list[str], str, bool]) -> int:
    """Write the episode files into one parquet file (a row group each), read it back, CRC each column."""
    import pyarrow.parquet as pq
    sources, out, read_back = job
    tables = [pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 20).read() for f in sources]
    with pq.ParquetWriter(out, tables[0].schema, use_dictionary=False) as writer:
        for table in tables:
            writer.write_table(table, row_group_size=max(table.num_rows, 1))
    if read_back:
        crcs: dict[str, int] = {}
        for batch in pq.ParquetFile(out, pre_buffer=False, buffer_size=1 << 20).iter_batches(batch_size=1 << 14):
            for name, column in zip(batch.schema.names, batch.columns):
                for buffer in column.buffers():
                    if buffer is not None:
                        crcs[name] = zlib.crc32(buffer, crcs.get(name, 0))
    return sum(t.num_rows for t in tables)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("src", type=Path)
    options.add_argument("out", type=Path)
    options.add_argument("--cap-mb", type=float, default=100)
    options.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    options.add_argument("--no-read-back", action="store_true")
    args = options.parse_args()
    files = sorted((args.src / "data").rglob("*.parquet"))
    groups, size = [[]], 0
    for f in files:
        n = f.stat().st_size
        if groups[-1] and size + n > args.cap_mb * 2**20:
            groups.append([])
            size = 0
        groups[-1].append(str(f))
        size += n
    args.out.mkdir(parents=True)
    jobs = [(group, str(args.out / f"file-{i:03d}.parquet"), not args.no_read_back) for i, group in enumerate(groups)]
    with ProcessPoolExecutor(max_workers=min(args.workers, len(jobs)), initializer=_single_thread) as pool:
        rows = sum(pool.map(rewrite, jobs))
    print(f"{len(files)} files -> {len(jobs)} files, {rows} rows")


if __name__ == "__main__":
    main()
