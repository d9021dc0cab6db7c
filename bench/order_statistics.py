"""bench/order_statistics: the exact quantiles' order statistics by a full sort against numpy's multi-kth partition.

    python -m bench.order_statistics [--values 400000,4000000] [--channels 8] [--runs 3] [--out FILE]

`lerodoc.tables.quantiles` finds q01..q99 of every channel of a (channels, values) array held in memory. The ten
ranks they need (floor and ceiling of each level's position) come either from sorting each row or from
`ndarray.partition` at those ranks; which is faster depends on the data and on the machine's numpy build (a SIMD
sort where numpy has one for the CPU). This times both, in place on copies of the same array, alternating, the
best of --runs each, for float32 and float64 rows of three kinds:
- `normal`: independent draws (no order to exploit);
- `walk`: a random walk per channel (smooth, as a robot's joint positions are);
- `repeated`: each value repeated in runs of ten, in order (the index columns, frame_index and episode_index).
Each case prints sort / partition (above 1: partition is faster). Results with provenance go to --out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench.results import provenance, write_results
from lerodoc.tables.quantiles import _ranks
from lerodoc.tables.stats import LEVELS


def rows(kind: str, channels: int, values: int, dtype, rng: np.random.Generator) -> np.ndarray:
    if kind == "normal":
        return rng.standard_normal((channels, values)).astype(dtype)
    if kind == "walk":
        return np.cumsum(rng.standard_normal((channels, values)), axis=1).astype(dtype)
    return np.repeat(np.arange(-(-values // 10)), 10)[:values][None].repeat(channels, axis=0).astype(dtype)


def best(fn, data: np.ndarray, runs: int) -> float:
    """The fastest of `runs` calls of fn on a fresh copy of `data` (the copy not timed)."""
    times = []
    for _ in range(runs):
        copy = data.copy()
        start = time.perf_counter()
        fn(copy)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--values", default="400000,4000000", help="values a row, comma-separated sizes")
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cases = []
    for values in (int(v) for v in args.values.split(",")):
        low, high, _ = _ranks(values, LEVELS)
        ranks = np.array(sorted({*low.tolist(), *high.tolist()}))
        for dtype in (np.float32, np.float64):
            for kind in ("normal", "walk", "repeated"):
                data = rows(kind, args.channels, values, dtype, rng)
                sort_s = best(lambda a: a.sort(axis=1), data, args.runs)
                partition_s = best(lambda a: a.partition(ranks, axis=1), data, args.runs)
                case = {"values": values, "channels": args.channels, "dtype": np.dtype(dtype).name, "kind": kind,
                        "sort_s": sort_s, "partition_s": partition_s, "sort_over_partition": sort_s / partition_s}
                cases.append(case)
                print(f"{values:>9} x {args.channels} {case['dtype']:<8} {kind:<9} sort {sort_s:.4f} s  "
                      f"partition {partition_s:.4f} s  {case['sort_over_partition']:.2f}x", flush=True)
    summary = {"provenance": provenance("python -m bench.order_statistics " + " ".join(sys.argv[1:])),
               "ranks": "floor and ceiling of (n - 1) x level for lerodoc.tables.stats.LEVELS", "cases": cases}
    write_results(summary, args.out)


if __name__ == "__main__":
    main()
