"""bench/merge: lerodoc merge vs lerobot 0.6.1's aggregate_datasets vs copying the bytes, in one run.

    python -m bench.merge [--episodes 300] [--cameras 3] [--work DIR] [--check-frames 2]

Two v3.0 datasets of EPISODES x CAMERAS are merged by each tool (each started as a fresh process; the
median of --rounds alternating runs for the copy and lerodoc, one run of lerobot).
Both results are then loaded with lerobot's LeRobotDataset and every episode's first and last frames
(--check-frames per episode) are compared with the source videos: the bench reports whether each
tool's output is aligned.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.dataset import expectation, parser, seed_dataset, seed_episodes, tile_v21, work_dir
from lerodoc.dataset import Dataset
from lerodoc.ops.convert import convert
from tests.lerobot_oracle import aggregate_with_lerobot, check_with_lerobot


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def aligned(root: Path, expect: dict, frames: str) -> dict:
    report = check_with_lerobot(root, expect, backend="pyav", frames=frames, raise_on_failure=False, timeout=7200)
    return {"ok": report["ok"], "episodes_checked": report["episodes_checked"],
            "frames_checked": report["frames_checked"], "misaligned": report["misaligned"],
            "exceptions": len(report["exceptions"]), "problems": report["problems"][:5]}


def main() -> None:
    options = parser(__doc__, episodes=300)
    options.add_argument("--check-frames", default="2")
    args = options.parse_args()
    work = work_dir(args, "lerodoc-bench-merge-")
    seed = seed_dataset(work)
    sources = []
    for offset, name in enumerate("ab"):
        if not (work / f"{name}_v30").is_dir():      # inputs of an earlier run in the same --work are reused
            tiled = tile_v21(seed, work / f"{name}_v21", args.episodes, args.cameras, dataset_offset=offset)
            convert(tiled, work / f"{name}_v30", to="v3.0", workers=2)
            shutil.rmtree(tiled)
        sources.append(work / f"{name}_v30")
    size = sum(p.stat().st_size for s in sources for p in s.rglob("*") if p.is_file())
    frames = sum(Dataset.open(s).total_frames for s in sources)
    print(f"inputs: 2 x {args.episodes} episodes x {args.cameras} cameras (v3.0), {frames} frames, "
          f"{size / 2**20:.0f} MiB")

    cmd = [sys.executable, "-m", "lerodoc", "merge", *map(str, sources), "-o", str(work / "lerodoc"), "--json"]
    tools = {"copy (shutil.copytree)": (work / "copy", lambda: [shutil.copytree(s, work / "copy" / s.name)
                                                                for s in sources]),
             "lerodoc merge": (work / "lerodoc", lambda: subprocess.run(cmd, check=True, capture_output=True))}
    runs: dict[str, list[float]] = {name: [] for name in tools}
    for _ in range(args.rounds):            # alternate the tools; each starts with clean page-cache writeback
        for name, (output, fn) in tools.items():
            shutil.rmtree(output, ignore_errors=True)
            os.sync()
            runs[name].append(timed(fn))
    results = {name: statistics.median(times) for name, times in runs.items()}
    os.sync()
    shutil.rmtree(work / "lerobot", ignore_errors=True)
    results["lerobot 0.6.1 aggregate_datasets"] = aggregate_with_lerobot(sources, work / "lerobot").seconds

    expect = expectation(seed, seed_episodes(seed, args.episodes) + seed_episodes(seed, args.episodes, 1),
                         args.cameras)
    checks = {"lerodoc merge": aligned(work / "lerodoc", expect, args.check_frames),
              "lerobot 0.6.1 aggregate_datasets": aligned(work / "lerobot", expect, args.check_frames)}
    ours, copy = results["lerodoc merge"], results["copy (shutil.copytree)"]
    print(f"\n{'tool':<36}{'seconds':>9}{'vs lerodoc':>12}  aligned in LeRobotDataset")
    for name, seconds in results.items():
        check = checks.get(name)
        verdict = "" if check is None else ("yes" if check["ok"] else
                                            f"NO: {check['misaligned']} misaligned, {check['exceptions']} errors")
        print(f"{name:<36}{seconds:>9.2f}{seconds / ours:>11.2f}x  {verdict}")
    summary = {"episodes_per_source": args.episodes, "cameras": args.cameras, "frames": frames, "bytes": size,
               "seconds": results, "runs": runs, "alignment": checks, "lerodoc_over_copy": ours / copy,
               "lerobot_over_lerodoc": results["lerobot 0.6.1 aggregate_datasets"] / ours}
    print(f"\nlerodoc is {summary['lerobot_over_lerodoc']:.1f}x faster than lerobot's aggregate_datasets (bar: >= 5x)")
    print(f"lerodoc takes {summary['lerodoc_over_copy']:.2f}x the time of copying the bytes (bar: <= 2x)")
    (work / "bench_merge.json").write_text(json.dumps(summary, indent=2))
    print(f"results in {work / 'bench_merge.json'}")


if __name__ == "__main__":
    main()
