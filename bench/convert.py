"""bench/convert: lerodoc convert vs lerobot 0.6.1's converter vs copying the bytes, in one run.

    python -m bench.convert [--episodes 200] [--cameras 3] [--work DIR] [--out FILE]
    python -m bench.convert --parquet-only [--episodes 681] [--frames 305425]

Prints wall times (each tool started as a fresh process, as a user runs it; the median of --rounds
alternating runs for the copies and lerodoc, one run of lerobot's converter) and the ratios, and the CPU
seconds (user + system, all processes) of each side. lerodoc's modules are byte-compiled first, as `pip install`
does (lerobot's venv has its bytecode from its install): an editable checkout run with PYTHONDONTWRITEBYTECODE
would otherwise compile every module on every start.

--parquet-only converts many small files instead: a v2.1 dataset of numeric features only, one parquet
file per episode (by default the field report's 681 episodes, 305,425 frames x 199 dims, 240 MiB),
generated with `bench.dataset.numeric_v30` and written as v2.1 by lerodoc (per-episode stats included).
It also times `bench.parquet_floor` on the same files: pyarrow alone reading them, writing the same output
files and reading them back, with and without that read-back, the floor under any verified rewrite here.
"""

from __future__ import annotations

import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

from pathlib import Path

import lerodoc
from bench.dataset import numeric_v30, parser, seed_dataset, tile_v21, work_dir
from bench.quantiles import SEED_DIMS
from bench.results import provenance, write_results
from lerodoc.dataset import Dataset
from tests.lerobot_oracle import convert_with_lerobot


FLOOR = "pyarrow floor: read, write, read back (bench.parquet_floor)"
FLOOR_UNVERIFIED = "pyarrow floor without the read-back"


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    options = parser(__doc__, episodes=200)
    options.add_argument("--skip-lerobot", action="store_true")
    options.add_argument("--parquet-only", action="store_true", help="numeric features only, one file per episode")
    options.add_argument("--frames", type=int, default=305_425, help="with --parquet-only")
    options.add_argument("--out", type=Path, default=None, help="also write the results JSON here")
    args = options.parse_args()
    work = work_dir(args, "lerodoc-bench-convert-")
    command = "python -m bench.convert " + " ".join(sys.argv[1:])
    if args.parquet_only:
        from lerodoc.ops.convert import convert
        numeric_v30(work / "src_v30", args.frames, args.episodes, SEED_DIMS)
        convert(work / "src_v30", work / "src_v21", to="v2.1", force=True)
        shutil.rmtree(work / "src_v30")
        src, args.cameras = work / "src_v21", 0
    else:
        src = tile_v21(seed_dataset(work), work / "src_v21", args.episodes, args.cameras)
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    ds = Dataset.open(src)
    codec = ds.info.features[ds.info.video_keys[0]]["info"].get("video.codec") if ds.info.video_keys else "no video"
    print(f"dataset: {len(ds.episodes)} episodes x {args.cameras} cameras, {ds.total_frames} frames, "
          f"{size / 2**20:.0f} MiB (v2.1, {codec})")

    compileall.compile_dir(Path(lerodoc.__file__).parent, quiet=1)   # as an installed package runs
    lerodoc_cmd = [sys.executable, "-m", "lerodoc", "convert", str(src), "-o", str(work / "lerodoc_v30"), "--json"]
    tools = {
        "copy (shutil.copytree)": lambda: shutil.copytree(src, work / "copy"),
        "copy (cp -r)": lambda: subprocess.run(["cp", "-r", str(src), str(work / "copy")], check=True),
        "lerodoc convert": lambda: subprocess.run(lerodoc_cmd, check=True, capture_output=True),
    }
    outputs = {"copy (shutil.copytree)": work / "copy", "copy (cp -r)": work / "copy",
               "lerodoc convert": work / "lerodoc_v30"}
    if args.parquet_only:   # the floor under lerodoc: pyarrow's read, write and read-back of the same files
        for name, extra in ((FLOOR, []), (FLOOR_UNVERIFIED, ["--no-read-back"])):
            floor_cmd = [sys.executable, "-m", "bench.parquet_floor", str(src), str(work / "floor")] + extra
            tools[name] = lambda cmd=floor_cmd: subprocess.run(cmd, check=True, capture_output=True)
            outputs[name] = work / "floor"
    runs: dict[str, list[float]] = {name: [] for name in tools}
    cpu: dict[str, list[float]] = {name: [] for name in tools if name.startswith(("lerodoc", "pyarrow"))}
    for _ in range(args.rounds):            # alternate the tools; each starts with clean page-cache writeback
        for name, fn in tools.items():
            shutil.rmtree(outputs[name], ignore_errors=True)
            os.sync()
            before = children_cpu()
            runs[name].append(timed(fn))
            if name in cpu:
                cpu[name].append(children_cpu() - before)
    out = Dataset.open(work / "lerodoc_v30")
    assert out.total_frames == ds.total_frames and len(out.episodes) == len(ds.episodes)
    results = {name: statistics.median(times) for name, times in runs.items()}
    if not args.skip_lerobot:
        os.sync()
        before = children_cpu()
        converted = convert_with_lerobot(src, work / "lerobot")
        results["lerobot 0.6.1 convert_dataset_v21_to_v30"] = converted.seconds
        cpu["lerobot 0.6.1 convert_dataset_v21_to_v30"] = [children_cpu() - before]

    copy = results["copy (shutil.copytree)"]
    ours = results["lerodoc convert"]
    print(f"\n{'tool':<44}{'seconds':>9}{'vs lerodoc':>12}")
    for name, seconds in results.items():
        print(f"{name:<44}{seconds:>9.2f}{seconds / ours:>11.2f}x")
    bar = 10 if args.parquet_only else 5
    summary = {"provenance": provenance(command), "parquet_only": args.parquet_only,
               "episodes": len(ds.episodes), "cameras": args.cameras, "frames": ds.total_frames, "bytes": size,
               "seconds": results, "runs": runs, "cpu_seconds": cpu, "lerodoc_over_copy": ours / copy,
               "lerodoc_best": min(runs["lerodoc convert"]), "lerodoc_bytecode": "compiled before timing"}
    if "lerobot 0.6.1 convert_dataset_v21_to_v30" in results:
        summary["lerobot_over_lerodoc"] = results["lerobot 0.6.1 convert_dataset_v21_to_v30"] / ours
        summary["lerobot_over_lerodoc_best"] = results["lerobot 0.6.1 convert_dataset_v21_to_v30"] / min(
            runs["lerodoc convert"])
        summary["bar_ratio"] = bar
        summary["lerobot_over_lerodoc_cpu"] = cpu["lerobot 0.6.1 convert_dataset_v21_to_v30"][0] / min(
            cpu["lerodoc convert"])
        print(f"\nlerodoc is {summary['lerobot_over_lerodoc']:.1f}x faster than lerobot's converter on the median "
              f"of its runs, {summary['lerobot_over_lerodoc_best']:.1f}x on the best (bar: >= {bar}x); CPU seconds "
              f"(user + system, all processes): lerodoc {min(cpu['lerodoc convert']):.2f}, lerobot "
              f"{cpu['lerobot 0.6.1 convert_dataset_v21_to_v30'][0]:.2f}: {summary['lerobot_over_lerodoc_cpu']:.1f}x")
    if FLOOR in results and "lerobot_over_lerodoc" in summary:
        summary["lerobot_over_floor"] = results["lerobot 0.6.1 convert_dataset_v21_to_v30"] / results[FLOOR]
        summary["lerodoc_over_floor"] = ours / results[FLOOR]
        print(f"the verified pyarrow floor alone is {summary['lerobot_over_floor']:.1f}x faster than lerobot's "
              f"converter; lerodoc takes {summary['lerodoc_over_floor']:.2f}x the floor's time")
    # with video most bytes are stream-copied, so the copy is the yardstick; parquet is decoded and re-encoded
    print(f"lerodoc takes {summary['lerodoc_over_copy']:.2f}x the time of copying the bytes"
          + ("" if args.parquet_only else " (bar: <= 2x)"))
    write_results(summary, work / "bench_convert.json", args.out)
    print(f"results in {work / 'bench_convert.json'}" + (f" and {args.out}" if args.out else ""))


if __name__ == "__main__":
    main()
