"""bench/breadth: commands on collections wide in tasks or in features, against the pyarrow floor (issue 37).

    python3 -m bench.breadth [--tasks 60000] [--features 300] [--episodes 400] [--runs 3] [--work DIR] [--out F]

bench.growth grows the episodes; this grows the other two axes a real collection grows along:
- tasks: two 10-episode v3.0 datasets whose task lists hold `--tasks` texts each (an instruction an episode, as
  language-annotated collections have; "move" shared, the rest their own). Timed: merge of the two, repair of one,
  and `tasks --set` of one. The floor: pyarrow reading the same files (their data, episodes and tasks parquet).
- features: a v3.0 dataset of `--episodes` episodes of 10 rows with `--features` numeric features of 2 channels
  beside a 8-dim state and action (per-episode stats from `lerodoc quantiles`), and its v2.1 form (a parquet file an
  episode, each holding every feature's column). Timed: validate and report (no videos) of each form, convert v3.0
  -> v2.1 and back. The floor: pyarrow reading the form the command reads.

Each command runs as a user runs it (a fresh `python -m lerodoc`), right after a run of its floor; its ratio is the
median over the `--runs` pairs (`x_floor_paired`), as bench.growth pairs them. lerodoc's modules are compiled to
bytecode first (bench.growth.compile_lerodoc). Results and provenance (commit, versions, machine, load, command) go
to --out.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.growth import compile_lerodoc, lerodoc, paired, save
from bench.results import provenance

TASKS_BUILD = """
import sys
from pathlib import Path
from bench.dataset import numeric_v30
from lerodoc.dataset import Dataset
from lerodoc.formats import v30
root, prefix, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
numeric_v30(root, 100, 10, {"observation.state": 2, "action": 2})
ds = Dataset.open(root)
v30.write_meta(root, ds.info, ds.episodes, ["move"] + [f"{prefix}: put object {i} in the bin" for i in range(1, count)],
               None)
"""

FEATURES_BUILD = """
import sys
from pathlib import Path
from bench.dataset import numeric_v30
features, episodes = int(sys.argv[2]), int(sys.argv[3])
dims = {"observation.state": 8, "action": 8, **{f"observation.sensor_{i}": 2 for i in range(features)}}
numeric_v30(Path(sys.argv[1]), episodes * 10, episodes, dims)
"""


def build(work: Path, tasks: int, features: int, episodes: int) -> dict[str, Path]:
    roots = {name: work / name for name in ("tasks_a", "tasks_b", "raw", "v30", "v21")}
    if not roots["v21"].exists():
        for name, prefix in (("tasks_a", "a"), ("tasks_b", "b")):
            subprocess.run([sys.executable, "-c", TASKS_BUILD, roots[name], prefix, str(tasks)], check=True)
        subprocess.run([sys.executable, "-c", FEATURES_BUILD, roots["raw"], str(features), str(episodes)], check=True)
        subprocess.run(lerodoc("-q", "quantiles", roots["raw"], "-o", roots["v30"]), check=True)
        subprocess.run(lerodoc("-q", "convert", roots["v30"], "-o", roots["v21"], "--to", "v2.1"), check=True)
    return roots


def commands(roots: dict[str, Path], out: Path) -> dict[str, tuple[list[str], list[Path]]]:
    """name -> (argv, the datasets its floor reads)."""
    a, b = roots["tasks_a"], roots["tasks_b"]
    return {
        "tasks_merge": (lerodoc("merge", a, b, "-o", out / "merge"), [a, b]),
        "tasks_repair": (lerodoc("repair", a, "-o", out / "repair"), [a]),
        "tasks_set": (lerodoc("tasks", a, "-o", out / "tasks", "--set", "move=go"), [a]),
        "features_validate_v30": (lerodoc("validate", roots["v30"], "--json"), [roots["v30"]]),
        "features_validate_v21": (lerodoc("validate", roots["v21"], "--json"), [roots["v21"]]),
        "features_convert_to_v21": (lerodoc("convert", roots["v30"], "-o", out / "to_v21", "--to", "v2.1"),
                                    [roots["v30"]]),
        "features_convert_to_v30": (lerodoc("convert", roots["v21"], "-o", out / "to_v30", "--to", "v3.0"),
                                    [roots["v21"]]),
        "features_report_v30": (lerodoc("report", roots["v30"], "-o", out / "report_v30.html"), [roots["v30"]]),
        "features_report_v21": (lerodoc("report", roots["v21"], "-o", out / "report_v21.html"), [roots["v21"]]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=60_000)
    parser.add_argument("--features", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default=None, help="comma-separated command names")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-breadth-"))
    work.mkdir(parents=True, exist_ok=True)
    bytecode = compile_lerodoc()
    roots = build(work, args.tasks, args.features, args.episodes)
    out = work / "out"
    rows = {}
    for name, (argv, floor_roots) in commands(roots, out).items():
        if args.only and name not in args.only.split(","):
            continue
        result = rows[name] = paired(argv, floor_roots, args.runs,
                                     before=lambda: shutil.rmtree(out, ignore_errors=True))
        print(f"{name:<26} {result['seconds']:8.2f} s {result['peak_mib']:8.1f} MiB "
              f"{result['x_floor_paired']:6.2f}x paired floor (exit {result['exit']})", flush=True)
    summary = {"provenance": provenance(" ".join(["python3 -m bench.breadth", *sys.argv[1:]])), "bytecode": bytecode,
               "tasks_per_source": args.tasks, "features": args.features + 2, "episodes": args.episodes,
               "commands": rows}
    save(summary, args.out, work if args.work is None else None)


if __name__ == "__main__":
    main()
