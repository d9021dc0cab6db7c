"""The main job on a generated sample: two small v2.1 exports, run through every lerodoc command that exists.

    python scripts/demo.py [WORKDIR]

Each step prints the command it runs; the outputs stay in WORKDIR (default: ./lerodoc-demo).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures.factory import make_dataset  # noqa: E402


def lerodoc(*args) -> None:
    command = [sys.executable, "-m", "lerodoc", *map(str, args)]
    print(f"\n$ lerodoc {shlex.join(map(str, args))}", flush=True)
    subprocess.run(command, check=True)


def main() -> None:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "lerodoc-demo").absolute()
    shutil.rmtree(work, ignore_errors=True)
    print(f"writing a two-part sample dataset under {work}")
    part_a = make_dataset(work / "part_a_v21", version="v2.1", dataset_id=1, episodes=4, codec="h264",
                          cameras=("observation.images.top", "observation.images.wrist"))
    part_b = make_dataset(work / "part_b_v21", version="v2.1", dataset_id=2, episodes=3, codec="h264",
                          cameras=("observation.images.top", "observation.images.wrist"))
    print(f"  part A: {len(part_a.lengths)} episodes, {part_a.total_frames} frames, h264")
    print(f"  part B: {len(part_b.lengths)} episodes, {part_b.total_frames} frames, h264")
    lerodoc("info", part_a.root)
    lerodoc("convert", part_a.root, "-o", work / "part_a_v30")
    lerodoc("convert", work / "part_a_v30", "-o", work / "part_a_back_v21", "--to", "v2.1")
    lerodoc("merge", part_a.root, part_b.root, "-o", work / "merged_v30", "--exclude", "A:1")
    lerodoc("quantiles", work / "merged_v30", "--in-place", "--openpi-norm-stats", work / "norm_stats.json")
    lerodoc("info", work / "merged_v30")
    print(f"\ndone: part A converted to v3.0 ({work}/part_a_v30) and back to v2.1 ({work}/part_a_back_v21);"
          f"\n      A (without its episode 1) and B merged into {work}/merged_v30, with exact q01..q99 stats"
          f"\n      and openpi norm stats in {work}/norm_stats.json")


if __name__ == "__main__":
    main()
