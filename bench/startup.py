"""bench/startup: lerodoc's start-up and its convert against the parquet floor, in one run (issue 26 item 7).

    python -m bench.startup [--rounds 10] [--convert-rounds 3] [--episodes 681] [--frames 305425] [--work DIR]
                            [--out FILE] [--skip-convert] [--also-path DIR]

Times, each as a fresh process started from the shell as a user runs it (the minimum and the median of --rounds
runs, alternating):
- `lerodoc --help`;
- `lerodoc info SMALL`, SMALL being the writer zoo's lerobot 0.6.1 recording (3 episodes, 47 frames, two AV1
  cameras: tests/zoo/members/lerobot-0.6.1-record);
- `python -c pass`, `python -c "import typer.main"`, `python -c "import typer.main, rich.console, rich.table,
  rich.panel"` and the same with pyarrow.parquet: the interpreter's own start-up and the libraries', the floors under
  the two above (`--help` loads typer and no rich; `info` prints its tables with rich and reads v3.0 metadata with
  pyarrow, which loads numpy: the last line is the floor under `info`);
- the 681-episode parquet-only convert (bench.convert --parquet-only's dataset) against `bench.parquet_floor`
  on the same files, alternating, --convert-rounds each: the ratio of the minimum times, and of the CPU seconds;
  and `convert --dry-run` of the same dataset (start-up, the metadata read and checked, the plan; nothing
  written): the work convert does before its first row, which the floor leaves out, as a share of the floor.

Every figure is a whole process: wall seconds and CPU seconds (user + system, the process and its children). The
machine's load average is recorded at the start, before each part and at the end: on a shared 2-core machine the
wall times follow the load, CPU seconds less so. Bytecode is compiled first (to a cache outside the checkout,
PYTHONPYCACHEPREFIX), as an installed package runs. Results: docs/results/startup_cpu_2core.json (--out).

`--also-path DIR` times `--help` and `info SMALL` a second time in the same rounds with DIR first on PYTHONPATH:
another release of a library installed there (`pip install --no-deps --target DIR typer==0.29.2`) set against the
installed one, run by run. Each side's typer version is recorded.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import ROOT, provenance, write_results

SMALL = ROOT / "tests/zoo/members/lerobot-0.6.1-record"
TYPER = "import typer.main"
LIBRARIES = "import typer.main, rich.console, rich.table, rich.panel"
INFO_LIBRARIES = LIBRARIES + ", pyarrow.parquet"   # what `info` cannot do without
HELP_BAR_S, INFO_BAR_S, FLOOR_BAR = 0.15, 0.3, 1.15   # the bars
DRY_RUN = "lerodoc convert --dry-run"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of `cmd` as a fresh process; it must exit 0."""
    before, start = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return wall, children_cpu() - before


def alternate(commands: dict[str, list[str]], rounds: int, env: dict, before=None, envs=None) -> dict:
    """Each command `rounds` times, in turn; per command its runs and their min and median. `envs` gives some
    commands an environment of their own."""
    runs = {name: {"wall_s": [], "cpu_s": []} for name in commands}
    for _ in range(rounds):
        for name, cmd in commands.items():
            if before:
                before(name)
            wall, cpu = run(cmd, (envs or {}).get(name, env))
            runs[name]["wall_s"].append(wall)
            runs[name]["cpu_s"].append(cpu)
    return {name: {**r, "wall_min_s": min(r["wall_s"]), "wall_median_s": statistics.median(r["wall_s"]),
                   "cpu_min_s": min(r["cpu_s"]), "cpu_median_s": statistics.median(r["cpu_s"])}
            for name, r in runs.items()}


def typer_version(env: dict) -> str:
    return subprocess.run([sys.executable, "-c", "import typer; print(typer.__version__)"], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def print_rows(results: dict) -> None:
    """One line per command: minimum and median wall seconds, minimum and median CPU seconds."""
    for name, r in results.items():
        print(f"{name:<50}{r['wall_min_s']:>10.3f}{r['wall_median_s']:>10.3f}{r['cpu_min_s']:>10.3f}"
              f"{r['cpu_median_s']:>10.3f}")


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--rounds", type=int, default=10, help="runs of each start-up command")
    options.add_argument("--convert-rounds", type=int, default=3, help="runs of convert and of the floor")
    options.add_argument("--episodes", type=int, default=681)
    options.add_argument("--frames", type=int, default=305_425)
    options.add_argument("--work", type=Path, default=None)
    options.add_argument("--out", type=Path, default=None, help="also write the results JSON here")
    options.add_argument("--skip-convert", action="store_true")
    options.add_argument("--also-path", type=Path, default=None,
                         help="also time --help and info with this folder first on PYTHONPATH")
    args = options.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-bench-startup-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "COLUMNS")}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")   # bytecode written once, outside the checkout
    python = sys.executable
    lerodoc = [python, "-m", "lerodoc"]
    loads = {"start": os.getloadavg()}
    summary = {"provenance": provenance("python -m bench.startup " + " ".join(sys.argv[1:])),
               "small_dataset": str(SMALL.relative_to(ROOT)), "rounds": args.rounds,
               "timing": "whole processes from the shell (subprocess), wall and CPU (user + system) seconds",
               "bytecode": "compiled before timing (PYTHONPYCACHEPREFIX, one warm-up run each)"}

    startup = {"lerodoc --help": [*lerodoc, "--help"], "lerodoc info SMALL": [*lerodoc, "info", str(SMALL)],
               "python -c pass": [python, "-c", "pass"], "python: typer imported": [python, "-c", TYPER],
               "python: typer + rich imported": [python, "-c", LIBRARIES],
               "python: typer + rich + pyarrow.parquet imported": [python, "-c", INFO_LIBRARIES]}
    envs = {}
    if args.also_path:
        also = {**env, "PYTHONPATH": os.pathsep.join([str(args.also_path.absolute()), *filter(None, [
            env.get("PYTHONPATH")])])}
        for name in ("lerodoc --help", "lerodoc info SMALL"):
            startup[f"{name} (--also-path)"] = startup[name]
            envs[f"{name} (--also-path)"] = also
        summary["also_path"] = {"path": str(args.also_path), "typer": typer_version(also),
                                "typer_installed": typer_version(env)}
    alternate(startup, 1, env, envs=envs)   # warm-up: bytecode written, files in the page cache
    loads["startup"] = os.getloadavg()
    summary["startup"] = alternate(startup, args.rounds, env, envs=envs)
    s = summary["startup"]
    summary["help_min_s"], summary["help_cpu_min_s"] = s["lerodoc --help"]["wall_min_s"], s["lerodoc --help"]["cpu_min_s"]
    summary["info_min_s"] = s["lerodoc info SMALL"]["wall_min_s"]
    summary["info_cpu_min_s"] = s["lerodoc info SMALL"]["cpu_min_s"]
    summary["info_floor_min_s"] = s["python: typer + rich + pyarrow.parquet imported"]["wall_min_s"]
    summary["bars"] = {"help_s": HELP_BAR_S, "info_s": INFO_BAR_S, "convert_over_floor": FLOOR_BAR}
    print(f"{'command':<50}{'wall min':>10}{'median':>10}{'cpu min':>10}{'median':>10}")
    print_rows(s)
    if args.also_path:
        for name in ("lerodoc --help", "lerodoc info SMALL"):
            ratio = s[name]["wall_median_s"] / s[f"{name} (--also-path)"]["wall_median_s"]
            summary.setdefault("over_also_path_median", {})[name] = ratio
            print(f"{name}: {ratio:.2f}x the median wall time with typer {summary['also_path']['typer']} "
                  f"(installed: {summary['also_path']['typer_installed']})")

    if not args.skip_convert:
        from bench.dataset import numeric_v30
        from bench.quantiles import SEED_DIMS
        from lerodoc.ops.convert import convert
        src = work / "src_v21"
        if not (src / "meta/info.json").is_file():
            numeric_v30(work / "src_v30", args.frames, args.episodes, SEED_DIMS)
            convert(work / "src_v30", src, to="v2.1", force=True)
            shutil.rmtree(work / "src_v30")
        outputs = {"lerodoc convert": work / "lerodoc_v30", "pyarrow floor (bench.parquet_floor)": work / "floor",
                   DRY_RUN: work / "dry_run"}
        commands = {"lerodoc convert": [*lerodoc, "convert", str(src), "-o", str(outputs["lerodoc convert"]),
                                        "--json"],
                    "pyarrow floor (bench.parquet_floor)": [python, "-m", "bench.parquet_floor", str(src),
                                                            str(outputs["pyarrow floor (bench.parquet_floor)"])],
                    DRY_RUN: [*lerodoc, "convert", str(src), "-o", str(outputs[DRY_RUN]), "--dry-run"]}

        def clean(name: str) -> None:   # each run writes anew, after the last one's writeback
            shutil.rmtree(outputs[name], ignore_errors=True)
            os.sync()
        loads["convert"] = os.getloadavg()
        c = summary["convert"] = alternate(commands, args.convert_rounds, env, before=clean)
        ours, floor = c["lerodoc convert"], c["pyarrow floor (bench.parquet_floor)"]
        summary["convert_dataset"] = {"episodes": args.episodes, "frames": args.frames, "version": "v2.1 -> v3.0",
                                      "bytes": sum(p.stat().st_size for p in src.rglob("*") if p.is_file())}
        summary["convert_over_floor"] = ours["wall_min_s"] / floor["wall_min_s"]
        summary["convert_over_floor_median"] = ours["wall_median_s"] / floor["wall_median_s"]
        summary["convert_over_floor_cpu"] = ours["cpu_min_s"] / floor["cpu_min_s"]
        # what convert does before its first row is written, which the floor leaves out by design
        summary["dry_run_share_of_floor"] = c[DRY_RUN]["wall_min_s"] / floor["wall_min_s"]
        print_rows(c)
        print(f"convert / floor: {summary['convert_over_floor']:.2f}x on the minimum wall times, "
              f"{summary['convert_over_floor_median']:.2f}x on the medians, {summary['convert_over_floor_cpu']:.2f}x "
              f"on the minimum CPU seconds (bar: <= {FLOOR_BAR}x)")
        print(f"convert --dry-run (start-up, metadata read and checked, plan; nothing written) alone takes "
              f"{summary['dry_run_share_of_floor']:.0%} of the floor's time")
    loads["end"] = os.getloadavg()
    summary["load_average"] = loads
    print(f"--help {summary['help_min_s']:.3f} s (bar {HELP_BAR_S} s), info {summary['info_min_s']:.3f} s "
          f"(bar {INFO_BAR_S} s; its libraries' floor {summary['info_floor_min_s']:.3f} s), minimum wall times; "
          f"load average {loads['start'][0]:.1f} at the start, {loads['end'][0]:.1f} at the end")
    write_results(summary, work / "bench_startup.json", args.out)
    print(f"results in {work / 'bench_startup.json'}" + (f" and {args.out}" if args.out else ""))


if __name__ == "__main__":
    main()
