"""bench/scale: many small episodes through the process pool and through Ray, against lerobot's converter.

    python3 -m bench.scale [--episodes 10000] [--frames 20] [--workers 1,2] [--slice 1000] [--work DIR]
                           [--out docs/results/scale_cpu.json]

A generated parquet-only collection (v3.0, numeric features, --frames rows per episode, 100 episodes per
source file) is turned into v2.1 (one parquet per episode), the many-small-files layout of the hub. Then, for
each worker count, with the pool (`--workers N`) and with a local Ray cluster of N CPUs (`--engine ray`), in
this process so interpreter start is not counted:

- convert v2.1 -> v3.0 (units: one output data file each; --data-file-size-mb 1 gives enough of them),
- convert v3.0 -> v2.1 (units: one source data file each, 100 episodes, writing 100 files),
- quantiles of the v2.1 collection (units: one data file each, then tally passes on Ray).

Ray's units are timed where they run (the sum is the work a cluster spreads out; wall minus the units' span
is the driver's share, which does not shrink with more nodes). Last, lerobot 0.6.1's
convert_dataset_v21_to_v30 runs on the first --slice episodes, and lerodoc converts the same slice (pool,
one fresh process each, like for like). Results and provenance go to --out.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.dataset import numeric_v30
from bench.results import provenance
from lerodoc.dataset import Dataset
from lerodoc.run.engine import RayEngine
from lerodoc.ops.convert import convert
from lerodoc.ops.quantiles import quantiles

ROOT = Path(__file__).resolve().parents[1]
DIMS = {"observation.state": 14, "action": 14}


def timed_call(fn, item):
    """A unit, timed where it runs: (seconds, result)."""
    start = time.perf_counter()
    result = fn(item)
    return time.perf_counter() - start, time.time(), result


class TimedRay(RayEngine):
    """RayEngine that records each unit's run time and end time (wall clock, one machine here)."""

    def __init__(self):
        super().__init__()
        self.units: list[tuple[float, float]] = []

    def map(self, fn, items, progress=None):
        done = super().map(functools.partial(timed_call, fn), items, progress)
        self.units += [(seconds, end) for seconds, end, _ in done]
        return [result for _, _, result in done]


def build(work: Path, episodes: int, frames: int) -> tuple[Path, Path]:
    """(v3.0 source, v2.1 source) of `episodes` x `frames` rows, with per-episode stats."""
    v30 = work / "src_v30"
    if not v30.exists():
        raw = numeric_v30(work / "raw_v30", episodes * frames, episodes, DIMS, rows_per_file=100 * frames)
        quantiles(raw, v30, workers=os.cpu_count() or 1)       # per-episode stats, as recorded datasets have
        shutil.rmtree(raw)
    v21 = work / "src_v21"
    if not v21.exists():
        convert(v30, v21, to="v2.1", workers=os.cpu_count() or 1)
    return v30, v21


def run_case(name: str, fn, engine) -> dict:
    start = time.perf_counter()
    report = fn(engine)
    wall = time.perf_counter() - start
    row = {"case": name, "seconds": round(wall, 3)}
    if hasattr(report, "passes"):
        row["passes"] = report.passes
    if isinstance(engine, TimedRay) and engine.units:
        seconds = [s for s, _ in engine.units]
        first_start = min(end - s for s, end in engine.units)
        row.update(units=len(seconds), unit_seconds_sum=round(sum(seconds), 3),
                   unit_seconds_median=round(float(np.median(seconds)), 4),
                   units_span=round(max(end for _, end in engine.units) - first_start, 3))
        engine.units.clear()
    return row


def cases(work: Path, v30: Path, v21: Path, workers: int) -> dict:
    def out(name: str) -> Path:
        path = work / name
        shutil.rmtree(path, ignore_errors=True)
        return path
    return {
        "convert v2.1 -> v3.0": lambda engine: convert(v21, out("o_v30"), to="v3.0", workers=workers, engine=engine,
                                                       data_file_size_mb=1),
        "convert v3.0 -> v2.1": lambda engine: convert(v30, out("o_v21"), to="v2.1", workers=workers, engine=engine),
        "quantiles v2.1": lambda engine: quantiles(v21, workers=workers, engine=engine),
    }


def measure(work: Path, v30: Path, v21: Path, counts: list[int]) -> list[dict]:
    import ray
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    rows = []
    for n in counts:
        for name, fn in cases(work, v30, v21, n).items():
            row = run_case(name, fn, None)
            rows.append({"engine": "pool", "workers": n, **row})
            print(f"pool  {n}  {name:<22} {row['seconds']:8.2f} s")
        start = time.perf_counter()
        ray.init(num_cpus=n, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        engine = TimedRay()
        engine.map(abs, range(4 * n))      # worker processes start on first use: counted as start-up, not work
        engine.units.clear()
        started = time.perf_counter() - start
        for name, fn in cases(work, v30, v21, n).items():
            row = run_case(name, fn, engine)
            rows.append({"engine": "ray", "workers": n, "ray_start_seconds": round(started, 2), **row})
            print(f"ray   {n}  {name:<22} {row['seconds']:8.2f} s  ({row.get('units')} units, "
                  f"{row.get('unit_seconds_sum')} s of unit work)")
        ray.shutdown()
    return rows


def slice_v21(v21: Path, out: Path, episodes: int) -> Path:
    """The first `episodes` of the v2.1 collection as a v2.1 dataset of its own."""
    if not out.exists():
        from lerodoc.ops.merge import merge
        from lerodoc.selection import Selection
        merge([v21], out, episodes={0: Selection.of(range(episodes))}, to="v2.1", workers=os.cpu_count() or 1)
    return out


def against_lerobot(work: Path, v21: Path, episodes: int) -> dict:
    from tests.lerobot_oracle import convert_with_lerobot
    part = slice_v21(v21, work / "slice_v21", episodes)
    shutil.rmtree(work / "lerobot", ignore_errors=True)
    os.sync()
    lerobot = convert_with_lerobot(part, work / "lerobot").seconds
    shutil.rmtree(work / "slice_lerodoc", ignore_errors=True)
    os.sync()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lerodoc", "convert", str(part), "-o", str(work / "slice_lerodoc"),
                    "--json"], check=True, capture_output=True)
    ours = time.perf_counter() - start
    print(f"slice of {episodes} episodes, v2.1 -> v3.0, fresh processes: lerobot 0.6.1 {lerobot:.2f} s, "
          f"lerodoc {ours:.2f} s ({lerobot / ours:.1f}x)")
    return {"episodes": episodes, "lerobot_0_6_1_seconds": round(lerobot, 3), "lerodoc_seconds": round(ours, 3),
            "lerobot_over_lerodoc": round(lerobot / ours, 2),
            "lerobot_seconds_per_episode": lerobot / episodes, "lerodoc_seconds_per_episode": ours / episodes}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=10_000)
    p.add_argument("--frames", type=int, default=20, help="rows per episode")
    p.add_argument("--workers", default="1,2", help="worker counts (comma-separated)")
    p.add_argument("--slice", type=int, default=1000, help="episodes converted by lerobot (0 skips it)")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None, help="results JSON (default: WORK/scale.json)")
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    import ray
    meta = provenance("python3 -m bench.scale " + " ".join(sys.argv[1:]), ray=ray.__version__)
    v30, v21 = build(work, args.episodes, args.frames)
    ds = Dataset.open(v21)
    size = sum(p.stat().st_size for p in v21.rglob("*") if p.is_file())
    print(f"collection: {len(ds.episodes)} episodes x {args.frames} frames, {len(list(v21.rglob('*.parquet')))} "
          f"parquet files, {size / 2**20:.1f} MiB (v2.1); v3.0 copy in {len(list(v30.glob('data/*/*.parquet')))} "
          f"data files")
    rows = measure(work, v30, v21, [int(n) for n in args.workers.split(",")])
    for row in rows:
        row["episodes_per_second"] = round(len(ds.episodes) / row["seconds"], 1)
        row["ms_per_episode"] = round(1000 * row["seconds"] / len(ds.episodes), 4)
        if "unit_seconds_sum" in row:
            row["unit_ms_per_episode"] = round(1000 * row["unit_seconds_sum"] / len(ds.episodes), 4)
            row["driver_seconds"] = round(row["seconds"] - row["units_span"], 3)
    result = {"provenance": meta, "episodes": len(ds.episodes), "frames_per_episode": args.frames,
              "bytes_v21": size, "runs": rows}
    if args.slice:
        result["lerobot_slice"] = against_lerobot(work, v21, min(args.slice, len(ds.episodes)))
    print(f"\n{'engine':<6}{'N':>3}  {'case':<22}{'seconds':>9}{'episodes/s':>12}{'vs N=1':>8}")
    for row in rows:
        base = next(r for r in rows if (r["engine"], r["case"]) == (row["engine"], row["case"]))
        print(f"{row['engine']:<6}{row['workers']:>3}  {row['case']:<22}{row['seconds']:>9.2f}"
              f"{row['episodes_per_second']:>12.0f}{base['seconds'] / row['seconds']:>7.2f}x")
    out = args.out or work / "scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results in {out}")


if __name__ == "__main__":
    main()
