"""bench/quantiles: exact quantiles from parquet, against lerobot 0.6.1's augment_dataset_quantile_stats.

    python -m bench.quantiles [--frames 305425] [--episodes 681] [--work DIR] [--lerobot-frames 30000]
                              [--memory-frames 10000000] [--rounds 3] [--skip-lerobot] [--out FILE]

1. The seed's case: 305,425 frames, 199 numeric dims over several features (163-dim state, 16-dim
   action, 14-dim velocity, the 5 index columns, one timestamp-like channel): `lerodoc quantiles
   --in-place` wall time from the shell (best of --rounds) and its CPU time; every quantile of the
   state must equal numpy.quantile on all rows, to the bit.
2. lerobot's compute_quantile_stats_for_dataset on a smaller copy of the same kind (--lerobot-frames;
   its per-episode Python loop is slow), and lerodoc on that copy, for the ratio; q01/q99 of both are
   compared with numpy.quantile on all rows.
3. Memory: `lerodoc quantiles` on --memory-frames rows (0 skips), its peak memory: the proportional
   set size of the process and its workers, summed and sampled every 0.2 s.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench.dataset import numeric_v30
from bench.results import provenance, write_results
from tests.lerobot_oracle import quantiles_with_lerobot

SEED_DIMS = {"observation.state": 163, "action": 16, "observation.velocity": 14, "observation.ts": 1}


def _tree_pss_kib(pid: int) -> int:
    """Proportional set size of a process and its descendants (shared pages counted once overall)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += next(int(line.split()[1]) for line in Path(f"/proc/{current}/smaps_rollup").read_text()
                          .splitlines() if line.startswith("Pss:"))
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
    return total


def run_lerodoc(root: Path, *args: str) -> tuple[float, dict, int, float]:
    """(wall seconds, JSON report, peak PSS in KiB of the process and its workers, sampled every 0.2 s, and CPU
    seconds (user + system) of the process and its workers)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lerodoc", "quantiles", str(root), "--json", *args],
                                stdout=out, stderr=subprocess.DEVNULL)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_pss_kib(proc.pid))
            time.sleep(0.2)
        seconds = time.perf_counter() - start
        if proc.returncode:
            raise RuntimeError(f"lerodoc quantiles exited {proc.returncode}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        return seconds, json.loads(out.read()), peak, cpu


def numpy_quantiles(root: Path, feature: str, levels=(0.01, 0.99)) -> np.ndarray:
    values = np.concatenate([np.asarray(pq.read_table(p, columns=[feature]).column(0).combine_chunks()
                                        .flatten().to_numpy(zero_copy_only=False)).reshape(-1, SEED_DIMS[feature])
                             for p in sorted(root.glob("data/*/*.parquet"))])
    return np.quantile(values.astype(np.float64), list(levels), axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=305_425)
    parser.add_argument("--episodes", type=int, default=681)
    parser.add_argument("--lerobot-frames", type=int, default=30_000)
    parser.add_argument("--memory-frames", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of the seed case (best reported)")
    parser.add_argument("--skip-lerobot", action="store_true")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the results JSON here")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-bench-quantiles-"))
    work.mkdir(parents=True, exist_ok=True)
    summary: dict = {"provenance": provenance("python -m bench.quantiles " + " ".join(sys.argv[1:]))}

    seed = numeric_v30(work / "seed_case", args.frames, args.episodes, SEED_DIMS)
    runs = [run_lerodoc(seed, "--in-place") for _ in range(args.rounds)]
    dims = sum(SEED_DIMS.values()) + 5
    levels = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
    truth = numpy_quantiles(seed, "observation.state", tuple(levels.values()))
    report = runs[-1][1]
    got = np.array([[c[q] for c in report["channels"] if c["feature"] == "observation.state"] for q in ("q01", "q50", "q99")])
    exact = bool((got == truth[[0, 2, 4]]).all())
    best = min(r[0] for r in runs)
    summary["seed_case"] = {"frames": args.frames, "episodes": args.episodes, "dims": dims, "seconds_best": best,
                            "seconds": [r[0] for r in runs], "cpu_seconds": [r[3] for r in runs],
                            "reported_seconds": [r[1]["seconds"] for r in runs],
                            "peak_pss_mib": max(r[2] for r in runs) / 1024, "bar_seconds": 2.5,
                            "state_q01_q50_q99_equal_numpy_bitwise": exact,
                            "max_abs_error_vs_numpy": float(np.abs(got - truth[[0, 2, 4]]).max())}
    print(f"seed case: {args.frames} frames x {dims} dims, quantiles --in-place: best {best:.2f} s of "
          f"{[round(r[0], 2) for r in runs]} (bar: <= 2.5 s), CPU {[round(r[3], 2) for r in runs]} s, "
          f"state q01/q50/q99 equal numpy.quantile bit for bit: {exact}")

    if not args.skip_lerobot:
        small_episodes = max(1, args.episodes * args.lerobot_frames // args.frames)
        small = numeric_v30(work / "small", args.lerobot_frames, small_episodes, SEED_DIMS, seed=1)
        theirs = quantiles_with_lerobot(small)
        ours = run_lerodoc(small)[0]
        truth = numpy_quantiles(small, "observation.state")
        their_error = float(np.abs(np.array([theirs["stats"]["observation.state"]["q01"],
                                             theirs["stats"]["observation.state"]["q99"]]) - truth).max())
        summary["versus_lerobot"] = {"frames": args.lerobot_frames, "episodes": small_episodes, "lerodoc_s": ours,
                                     "lerobot_s": theirs["seconds"], "lerobot_compute_s": theirs["compute_s"],
                                     "lerobot_max_abs_error_vs_numpy": their_error, "ratio": theirs["seconds"] / ours}
        print(f"{args.lerobot_frames} frames, {small_episodes} episodes: lerobot {theirs['seconds']:.2f} s "
              f"(compute {theirs['compute_s']:.2f} s, max |q - numpy| = {their_error:.3g}), lerodoc {ours:.2f} s: "
              f"{theirs['seconds'] / ours:.1f}x")

    if args.memory_frames:
        big = numeric_v30(work / "big", args.memory_frames, max(1, args.memory_frames // 450),
                          {"observation.state": 16, "action": 16})
        shutil.rmtree(work / "seed_case")
        seconds, report, peak_kib, cpu = run_lerodoc(big)
        summary["memory"] = {"frames": args.memory_frames, "dims": 37, "seconds": seconds, "cpu_seconds": cpu,
                             "peak_pss_mib": peak_kib / 1024, "passes": report["passes"], "bar_seconds": 60,
                             "bar_mib": 2048}
        print(f"{args.memory_frames} frames x 37 dims: {seconds:.1f} s (bar: <= 60 s), CPU {cpu:.1f} s, "
              f"{report['passes']} passes, peak {peak_kib / 1024:.0f} MiB summed PSS (bar: < 2048 MiB)")
    write_results(summary, work / "bench_quantiles.json", args.out)
    print(f"results in {work / 'bench_quantiles.json'}" + (f" and {args.out}" if args.out else ""))


if __name__ == "__main__":
    main()
