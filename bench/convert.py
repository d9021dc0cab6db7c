"""bench/convert: lerodoc convert vs lerobot 0.6.1's converter vs copying the bytes, in one run.

    python -m bench.convert [--episodes 200] [--cameras 3] [--work DIR]

Prints wall times (each tool started as a fresh process, as a user runs it; the median of --rounds
alternating runs for the copies and lerodoc, one run of lerobot's converter) and the ratios.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from bench.dataset import parser, seed_dataset, tile_v21, work_dir
from lerodoc.dataset import Dataset
from tests.lerobot_oracle import convert_with_lerobot


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    options = parser(__doc__, episodes=200)
    options.add_argument("--skip-lerobot", action="store_true")
    args = options.parse_args()
    work = work_dir(args, "lerodoc-bench-convert-")
    src = tile_v21(seed_dataset(work), work / "src_v21", args.episodes, args.cameras)
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    ds = Dataset.open(src)
    print(f"dataset: {len(ds.episodes)} episodes x {args.cameras} cameras, {ds.total_frames} frames, "
          f"{size / 2**20:.0f} MiB (v2.1, {ds.info.features[ds.info.video_keys[0]]['info'].get('video.codec')})")

    lerodoc_cmd = [sys.executable, "-m", "lerodoc", "convert", str(src), "-o", str(work / "lerodoc_v30"), "--json"]
    tools = {
        "copy (shutil.copytree)": lambda: shutil.copytree(src, work / "copy"),
        "copy (cp -r)": lambda: subprocess.run(["cp", "-r", str(src), str(work / "copy")], check=True),
        "lerodoc convert": lambda: subprocess.run(lerodoc_cmd, check=True, capture_output=True),
    }
    outputs = {"copy (shutil.copytree)": work / "copy", "copy (cp -r)": work / "copy",
               "lerodoc convert": work / "lerodoc_v30"}
    runs: dict[str, list[float]] = {name: [] for name in tools}
    for _ in range(args.rounds):            # alternate the tools; each starts with clean page-cache writeback
        for name, fn in tools.items():
            shutil.rmtree(outputs[name], ignore_errors=True)
            os.sync()
            runs[name].append(timed(fn))
    out = Dataset.open(work / "lerodoc_v30")
    assert out.total_frames == ds.total_frames and len(out.episodes) == len(ds.episodes)
    results = {name: statistics.median(times) for name, times in runs.items()}
    if not args.skip_lerobot:
        os.sync()
        converted = convert_with_lerobot(src, work / "lerobot")
        results["lerobot 0.6.1 convert_dataset_v21_to_v30"] = converted.seconds

    copy = results["copy (shutil.copytree)"]
    ours = results["lerodoc convert"]
    print(f"\n{'tool':<44}{'seconds':>9}{'vs lerodoc':>12}")
    for name, seconds in results.items():
        print(f"{name:<44}{seconds:>9.2f}{seconds / ours:>11.2f}x")
    summary = {"episodes": len(ds.episodes), "cameras": args.cameras, "frames": ds.total_frames, "bytes": size,
               "seconds": results, "runs": runs, "lerodoc_over_copy": ours / copy}
    if "lerobot 0.6.1 convert_dataset_v21_to_v30" in results:
        summary["lerobot_over_lerodoc"] = results["lerobot 0.6.1 convert_dataset_v21_to_v30"] / ours
        print(f"\nlerodoc is {summary['lerobot_over_lerodoc']:.1f}x faster than lerobot's converter "
              f"(bar: >= 5x)")
    print(f"lerodoc takes {summary['lerodoc_over_copy']:.2f}x the time of copying the bytes (bar: <= 2x)")
    (work / "bench_convert.json").write_text(json.dumps(summary, indent=2))
    print(f"results in {work / 'bench_convert.json'}")


if __name__ == "__main__":
    main()
