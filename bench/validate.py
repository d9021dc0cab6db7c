"""bench/validate: `validate --videos` (the timestamps and videos families) on a large dataset.

    python -m bench.validate [--episodes 1000] [--cameras 3] [--work DIR] [--rounds 3] [--v30] [--real]

Builds a v2.1 dataset of --episodes x --cameras by tiling a generated seed (4 episodes of 300-400
frames with tiny AV1 frames, a keyframe every 2 frames like the real g1 recording: the headers and
sample tables are full size, the bytes small), optionally converts it to v3.0 with lerodoc, then times
opening the dataset plus run_checks(timestamps, videos) with videos=True, each round in a fresh
process so no cache carries over. --real also times ../shared/data/g1_v21.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.dataset import SHARED_G1, tile_v21
from tests.fixtures.factory import make_dataset

FAMILIES = ("timestamps", "videos")
TIMED = """
import json, sys, time
start = time.perf_counter()
from lerodoc.checks import open_context, run_checks
ctx = open_context(sys.argv[1], videos=True)
findings = run_checks(ctx, {families!r})
print(json.dumps({{"seconds": time.perf_counter() - start, "findings": len(findings),
                  "errors": sum(f.severity == "error" for f in findings)}}))
"""


def seed(work: Path) -> Path:
    fixture = make_dataset(work / "seed", version="v2.1", episodes=4, cameras=("observation.images.cam",),
                           lengths=[393, 343, 357, 300], codec="av1", gop=2)
    return fixture.root


def build(work: Path, episodes: int, cameras: int, v30: bool) -> Path:
    """The tiled dataset (cached under `work` by its size)."""
    root = work / f"v21_{episodes}x{cameras}"
    if not (root / "meta/info.json").is_file():
        tile_v21(seed(work), root, episodes, cameras)
    if not v30:
        return root
    out = work / f"v30_{episodes}x{cameras}"
    if not (out / "meta/info.json").is_file():
        from lerodoc.ops.convert import convert
        convert(root, out, workers=2)
    return out


def timed_run(root: Path) -> dict:
    """One validate --videos in a fresh interpreter (imports included)."""
    proc = subprocess.run([sys.executable, "-c", TIMED.format(families=FAMILIES), str(root)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.splitlines()[-1])


def report(name: str, root: Path, rounds: int) -> None:
    runs = [timed_run(root) for _ in range(rounds)]
    seconds = [r["seconds"] for r in runs]
    each = ", ".join(f"{s:.2f}" for s in seconds)
    print(f"{name}: median {statistics.median(seconds):.2f} s over {rounds} run(s) ({each}), "
          f"{runs[0]['findings']} findings, {runs[0]['errors']} errors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--cameras", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--v30", action="store_true", help="also time the dataset converted to v3.0")
    parser.add_argument("--real", action="store_true", help="also time ../shared/data/g1_v21")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-bench-validate-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.real and SHARED_G1.is_dir():
        report("g1_v21 (3 episodes x 1 camera)", SHARED_G1, args.rounds)
    for v30 in (False, True) if args.v30 else (False,):
        root = build(work, args.episodes, args.cameras, v30)
        report(f"{'v3.0' if v30 else 'v2.1'} {args.episodes} episodes x {args.cameras} cameras", root, args.rounds)


if __name__ == "__main__":
    main()
