"""bench/growth: every dataset command on collections of many short episodes, against the pyarrow floor (issue 37).

    python3 -m bench.growth [--episodes 2000,20000[,100000]] [--frames 10] [--v21-up-to 100000] [--work DIR]
                            [--only validate,merge2] [--runs 3] [--out docs/results/growth_cpu.json]

For each size, a parquet-only v3.0 collection of `--episodes` episodes of `--frames` rows (16-dim state and action,
data files of about 100 MiB as lerobot's writer makes them, per-episode stats from `lerodoc quantiles`) and, up to
`--v21-up-to` episodes, its v2.1 form (one parquet per episode, the hub's many-small-files layout) are built. Then
each command runs as a user runs it, a fresh `python -m lerodoc` process, and is timed as a whole (wall seconds) with
its peak resident memory (the child's ru_maxrss, from wait4): info, validate, convert (v2.1 -> v3.0), merge (2 parts
and 100 parts), delete, split, select, quantiles, repair, report (no videos) and train's index build (Dataset.open +
load_frames, what `train pi05` reads before its first step). flatten has nothing to flatten in a fixed-size-list
collection (exit 0, said) and is timed as such.

The floor, measured in the same run and the same way (a fresh process): pyarrow alone reading the same data files
(every column) and meta/episodes, run 3 times (its median run kept); each command runs --runs times (median kept,
every run listed). lerodoc's modules are compiled to bytecode first, as an installed package's are
(`compile_lerodoc`). Each command's ratio is its wall time over the floor of what it reads (v2.1 for convert's input;
for merge of two copies, the v3.0 dataset read twice in one process, `v30x2`; for merge of 100 parts, the 100 parts
read in one process, `parts100`: their 100 data files, episodes files and metadata; v3.0 for the rest). Where the floor
is not the v3.0 dataset's, the ratio to that one copy's floor is kept too, as `x_v30_floor`. Like for like, both
include interpreter start. Results and provenance (commit,
versions, machine, load, command) go to --out.

`x_floor_paired`: each run of a command comes right after a run of its floor, and the ratio is the median of the
pairs' ratios (`floor_paired_seconds` lists the floor's runs). On a shared machine whose speed drifts over the
minutes of a bench, the floor measured once at the start (`x_floor`) was seen at 0.45 s in one run and 0.86 s in
another at 20,000 episodes, while the commands moved less; a pair shares the machine's state of the moment.

With several sizes, `growth` gives each command's factor from the smallest size to each larger one (seconds and
peak; the issue's bar: at most 12x for 10x the episodes). `many_files` sets convert of the v2.1 form (one parquet per
episode: the hub's many-small-files layout) against pyarrow reading those files alone: the per-file overhead in
milliseconds beyond the floor. validate runs as a user runs it (stats recomputed) and, as `validate_nostats`, with
`--no-stats` (what a hub dataset gets by default): the checks other than the stats family's per-episode ones.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from bench.results import provenance, write_results

DIMS = {"observation.state": 16, "action": 16}
# data files of about 100 MiB of rows (lerobot's data_files_size_in_mb default): one file up to 63k episodes of 10
# frames, 16 at a million; a row: the float32 state and action, a float32 timestamp, four int64 indices
ROWS_PER_FILE = (100 << 20) // (4 * sum(DIMS.values()) + 4 + 4 * 8)

BUILD = """
import sys
from pathlib import Path
from typing import Callable
from bench.dataset import numeric_v30
from bench.growth import DIMS, ROWS_PER_FILE
episodes, frames = int(sys.argv[2]), int(sys.argv[3])
numeric_v30(Path(sys.argv[1]), episodes * frames, episodes, DIMS, rows_per_file=ROWS_PER_FILE)
"""

FLOOR = """
import sys, pyarrow.parquet as pq
from pathlib import Path
from typing import Callable
rows = 0
for root in map(Path, sys.argv[1:]):
    for path in sorted(root.glob("data/**/*.parquet")) + sorted(root.glob("meta/episodes/**/*.parquet")):
        rows += pq.read_table(path).num_rows
    for path in sorted(root.glob("meta/*.jsonl")):
        path.read_bytes()
print(rows)
"""

TRAIN_INDEX = """
import sys
from lerodoc.dataset import Dataset
from lerodoc.pi05.data import DataSpec, load_frames
ds = Dataset.open(sys.argv[1])
spec = DataSpec(action_key="action", state_key="observation.state", cameras=(), action_horizon=50, image_size=224,
                state_in_prompt=True, max_token_len=48)
print(len(load_frames(ds, spec)))
"""


# the v2.1 form's episodes_stats.jsonl (q01..q99 per episode and channel) is 142 MB at 20,000 episodes: its reading
# is estimated over the default 512 MiB budget, so the build and convert of the v2.1 form (a trusted file of the bench's
# own) run with this budget, recorded in the results
V21_ENV = {"LERODOC_MEMORY_BUDGET": "2GiB"}


def run(argv: list[str], env: dict | None = None) -> dict:
    """Run `argv` as a fresh process (with `env` added): wall seconds, peak resident MiB (wait4's ru_maxrss), exit
    code, and the kernel's accounting of the child (user and system CPU seconds, minor page faults): on a virtual
    machine whose page faults cost 5-25 us each from one run to the next, system time is what moves the wall time,
    while user time and the fault count stay put."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **env} if env else None)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"seconds": round(wall, 3), "peak_mib": round(usage.ru_maxrss / 1024, 1), "exit": proc.returncode,
            "user_s": round(usage.ru_utime, 3), "sys_s": round(usage.ru_stime, 3), "minor_faults": usage.ru_minflt,
            **({"stderr_tail": stderr[-400:]} if proc.returncode not in (0, 1) else {})}


FLOOR_RUNS = 3


def median(runs: list[dict]) -> dict:
    """The run of median seconds, with every run's seconds, peak, CPU seconds and minor faults listed (in the order
    they ran)."""
    kept = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    return {**kept, **{f"runs_{key}": [r[key] for r in runs] for key in ("seconds", "peak_mib", "user_s", "sys_s",
                                                                           "minor_faults")}}


def floor_run(*roots: Path) -> dict:
    """One run of the floor: the datasets `roots` read in one process (FLOOR)."""
    return run([sys.executable, "-c", FLOOR, *map(str, roots)])


def floor(*roots: Path) -> dict:
    """The floor of datasets read in one process: FLOOR run FLOOR_RUNS times, the run of median seconds kept (every
    run's seconds listed): one run of ~1 s on a shared machine was seen to move by half its time."""
    return median([floor_run(*roots) for _ in range(FLOOR_RUNS)])


def paired(argv: list[str], roots: list[Path], runs: int, env: dict | None = None,
           before: Callable[[], None] | None = None) -> dict:
    """`argv` run `runs` times, each right after a run of the floor of `roots` (`floor_run`; `before` called ahead of
    each pair: an output cleared): the run of median seconds (`median`), the floor's runs' seconds, and the median of
    the pairs' ratios (`x_floor_paired`)."""
    timed, floors = [], []
    for _ in range(runs):
        if before is not None:
            before()
        floors.append(floor_run(*roots))
        timed.append(run(argv, env))
    result = median(timed)
    result["floor_paired_seconds"] = [r["seconds"] for r in floors]
    result["x_floor_paired"] = round(statistics.median(t["seconds"] / f["seconds"] for t, f in zip(timed, floors)), 2)
    return result


def save(summary: dict, out: Path | None, temporary: Path | None) -> None:
    """Write the results (`write_results`: to `out`, else printed) and remove the `temporary` work folder."""
    text = write_results(summary, out)
    print(text if out is None else f"written to {out}")
    if temporary is not None:
        shutil.rmtree(temporary, ignore_errors=True)


def lerodoc(*args) -> list[str]:
    return [sys.executable, "-m", "lerodoc", *map(str, args)]


def build(work: Path, episodes: int, frames: int, v21: bool) -> tuple[Path, Path | None]:
    """(v3.0 collection with stats, its v2.1 form or None): built once per size under `work`."""
    v30 = work / f"v30_{episodes}"
    if not v30.exists():
        # the rows are made in a child: made here, they would grow this process, and every command it starts after
        # would report that size as its own peak (ru_maxrss counts the parent's pages a child shares until exec)
        raw = work / f"raw_{episodes}"
        subprocess.run([sys.executable, "-c", BUILD, str(raw), str(episodes), str(frames)], check=True)
        subprocess.run(lerodoc("-q", "quantiles", raw, "-o", v30), check=True)
        shutil.rmtree(raw)
    v21_root = work / f"v21_{episodes}"
    if v21 and not v21_root.exists():
        subprocess.run(lerodoc("-q", "convert", v30, "-o", v21_root, "--to", "v2.1"), check=True,
                       env={**os.environ, **V21_ENV})
    return v30, v21_root if v21 else None


def commands(v30: Path, v21: Path | None, out: Path, episodes: int) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, the floor it is set against: "v30", "v21", "v30x2" (the v3.0 dataset read twice in one
    process: merge2's two inputs) or "parts100" (split's hundred parts, merge100's inputs; set in `measure`))."""
    hundred = ",".join(f"p{i}={1 / 100:.2f}" for i in range(100))
    cases = {
        "info": (lerodoc("info", v30, "--json"), "v30"),
        "validate": (lerodoc("validate", v30, "--json"), "v30"),
        "validate_nostats": (lerodoc("validate", v30, "--no-stats", "--json"), "v30"),
        "merge2": (lerodoc("merge", v30, v30, "-o", out / "merge2"), "v30x2"),
        "delete": (lerodoc("delete", v30, "-o", out / "delete", "--episodes", f"0-{min(9, episodes - 2)}"), "v30"),
        "split": (lerodoc("split", v30, "-o", out / "split", "--into", "train=0.9,val=0.1"), "v30"),
        "select": (lerodoc("select", v30, "-o", out / "select", "--state", "observation.state[0:8]",
                           "--action", "action"), "v30"),
        "flatten": (lerodoc("flatten", v30, "-o", out / "flatten"), "v30"),
        "quantiles": (lerodoc("quantiles", v30, "-o", out / "quantiles"), "v30"),
        "repair": (lerodoc("repair", v30, "-o", out / "repair"), "v30"),
        "report": (lerodoc("report", v30, "-o", out / "report.html"), "v30"),
        "train_index": ([sys.executable, "-c", TRAIN_INDEX, str(v30)], "v30"),
        "split100": (lerodoc("split", v30, "-o", out / "parts100", "--into", hundred), "v30"),
    }
    if v21 is not None:
        cases["convert"] = (lerodoc("convert", v21, "-o", out / "convert", "--to", "v3.0"), "v21")
    return cases


def measure(work: Path, episodes: int, frames: int, v21_up_to: int, only: set[str] | None, runs: int = 1) -> dict:
    v30, v21 = build(work, episodes, frames, episodes <= v21_up_to)
    floor_roots = {"v30": [v30]}   # each floor and what it reads
    if v21 is not None:
        floor_roots["v21"] = [v21]
    if only is None or "merge2" in only:   # merge2 reads the dataset twice: its like-for-like floor
        floor_roots["v30x2"] = [v30, v30]
    rows = {}
    out = work / f"out_{episodes}"
    planned = commands(v30, v21, out, episodes)
    if only is None or "merge100" in only:   # 100 parts: split's output, merged back
        if not (out / "parts100").exists():
            subprocess.run(planned["split100"][0], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        parts = sorted(p for p in (out / "parts100").iterdir() if p.is_dir())
        planned["merge100"] = (lerodoc("merge", *parts, "-o", out / "merge100"), "parts100")
        floor_roots["parts100"] = parts   # what merge100 reads: a hundred datasets' files, not one's
    floors = {name: floor(*roots) for name, roots in floor_roots.items()}
    for name, (argv, base) in planned.items():
        if only is not None and name not in only or name == "split100":
            continue
        target = next((Path(a) for a in argv if str(a).startswith(str(out / "")) and "parts100" not in str(a)), None)
        def clear(target=target) -> None:
            if target is not None and target.exists():
                shutil.rmtree(target) if target.is_dir() else target.unlink()
        result = paired(argv, floor_roots[base], runs, V21_ENV if base == "v21" else None, clear)
        result["floor"] = base
        if base == "v21":
            result["env"] = V21_ENV
        result["x_floor"] = round(result["seconds"] / floors[base]["seconds"], 2)
        if base != "v30" and base != "v21":   # and against one copy's floor, as runs before v30x2 gave it
            result["x_v30_floor"] = round(result["seconds"] / floors["v30"]["seconds"], 2)
        rows[name] = result
        print(f"{episodes:>8} {name:<12} {result['seconds']:8.2f} s {result['peak_mib']:8.1f} MiB "
              f"{result['x_floor']:6.2f}x floor, {result['x_floor_paired']:.2f}x paired (exit {result['exit']})",
              flush=True)
    result = {"episodes": episodes, "frames_per_episode": frames, "floors": floors, "commands": rows}
    if v21 is not None and "convert" in rows:
        files = len(list(v21.glob("data/**/*.parquet")))
        result["many_files"] = {
            "v21_data_files": files, "convert_seconds": rows["convert"]["seconds"],
            "read_files_seconds": floors["v21"]["seconds"], "x_floor": rows["convert"]["x_floor"],
            "overhead_ms_per_file": round(1000 * (rows["convert"]["seconds"] - floors["v21"]["seconds"]) / files, 3)}
    return result


def growth(sizes: list[dict]) -> dict:
    """Each command's factor from the smallest size to each larger one: seconds and peak memory."""
    if len(sizes) < 2:
        return {}
    base, out = sizes[0], {}
    for size in sizes[1:]:
        key = f"{base['episodes']}->{size['episodes']}"
        out[key] = {"episodes_x": round(size["episodes"] / base["episodes"], 2),
                    "floor_v30_x": round(size["floors"]["v30"]["seconds"] / base["floors"]["v30"]["seconds"], 2),
                    "commands": {name: {"seconds_x": round(row["seconds"] / base["commands"][name]["seconds"], 2),
                                        "peak_x": round(row["peak_mib"] / base["commands"][name]["peak_mib"], 2)}
                                 for name, row in size["commands"].items() if name in base["commands"]}}
    return out


def compile_lerodoc() -> str:
    """Compile lerodoc's modules to bytecode before anything is timed, as an installed package has them (pip compiles
    a wheel's modules when it installs them, and pyarrow's and numpy's, which the floor imports, were): an editable
    checkout under PYTHONDONTWRITEBYTECODE=1 (this machine's environment) otherwise compiles every module it imports
    in every command, 0.07 s of `info` at 20,000 episodes. Said in the results."""
    import compileall   # only here: the timed commands never compile
    import lerodoc      # only here: its folder is what the commands import
    package = Path(lerodoc.__file__).parent
    if not compileall.compile_dir(str(package), quiet=1):
        raise SystemExit(f"could not compile {package}")
    return f"lerodoc's modules compiled to bytecode before timing ({package}), as an installed package's are"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", default="2000,20000", help="comma-separated sizes (default 2000,20000)")
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--v21-up-to", type=int, default=100_000, help="build the v2.1 form up to this size")
    parser.add_argument("--only", default=None, help="comma-separated command names")
    parser.add_argument("--runs", type=int, default=1, help="runs of each command, the median kept (default 1)")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-growth-"))
    work.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    sizes = [int(s) for s in args.episodes.split(",")]
    bytecode = compile_lerodoc()
    summary = {"provenance": provenance(" ".join(["python3 -m bench.growth", *sys.argv[1:]])), "bytecode": bytecode,
               "sizes": [measure(work, n, args.frames, args.v21_up_to, only, args.runs) for n in sizes]}
    summary["growth"] = growth(summary["sizes"])
    summary["load_average_at_end"] = os.getloadavg()
    save(summary, args.out, work if args.work is None else None)


if __name__ == "__main__":
    main()
