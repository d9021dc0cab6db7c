"""The main job on a generated sample: two small v2.1 exports, run through every lerodoc command that exists.

    python scripts/demo.py [WORKDIR]

Each step prints the command it runs; the outputs stay in WORKDIR (default: ./lerodoc-demo).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures.factory import make_dataset  # noqa: E402
from tests.fixtures.tokenizer import train_tokenizer  # noqa: E402


def lerodoc(*args, ok_codes: tuple[int, ...] = (0,)) -> None:
    command = [sys.executable, "-m", "lerodoc", *map(str, args)]
    print(f"\n$ lerodoc {shlex.join(map(str, args))}", flush=True)
    code = subprocess.run(command).returncode
    if code not in ok_codes:
        raise SystemExit(f"lerodoc exited {code}")


def break_totals(root: Path) -> None:
    """What a hand-edited export looks like: info.json claims frames that are not there."""
    info = json.loads((root / "meta/info.json").read_text())
    info["total_frames"] += 12
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))


def train_tiny(work: Path) -> None:
    """A few CPU steps of the tiny pi0.5 on the selected dataset, with a SentencePiece model trained here
    (the real run passes PaliGemma's: `lerodoc download tokenizer paligemma`)."""
    try:
        import sentencepiece  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        print("\nskipping `lerodoc train pi05`: install the train extra (pip install -e '.[train]')")
        return
    tokenizer = train_tokenizer(work / "tokenizer")
    lerodoc("train", "pi05", work / "merged_selected", "-o", work / "run_tiny", "--preset", "tiny", "--tokenizer",
            tokenizer, "--steps", "40", "--batch-per-device", "8", "--lr", "1e-3", "--save-every", "20",
            "--workers", "2", "--val-episodes", "0", "--val-every", "20")
    lerodoc("export", "lerobot", work / "run_tiny", "-o", work / "policy_tiny", "--device", "cpu")
    # open-loop scores on the held-out episode against the baselines (40 steps learn little: the page says so)
    lerodoc("eval", "pi05", work / "run_tiny", work / "merged_selected", "--stride", "2", "-o",
            work / "eval_tiny.html")


def main() -> None:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "lerodoc-demo").absolute()
    shutil.rmtree(work, ignore_errors=True)
    print(f"writing a two-part sample dataset under {work}")
    cameras = ("observation.images.top", "observation.images.wrist")
    part_a = make_dataset(work / "part_a_v21", version="v2.1", dataset_id=1, episodes=4, cameras=cameras,
                          state_dim=8, action_dim=8)
    part_b = make_dataset(work / "part_b_v21", version="v2.1", dataset_id=2, episodes=3, cameras=cameras,
                          state_dim=8, action_dim=8, vector_storage="list")
    print(f"  part A: {len(part_a.lengths)} episodes, {part_a.total_frames} frames, h264, vectors as fixed-size lists")
    print(f"  part B: {len(part_b.lengths)} episodes, {part_b.total_frames} frames, h264, vectors as plain lists")
    lerodoc("info", part_a.root)
    lerodoc("convert", part_a.root, "-o", work / "part_a_v30")
    lerodoc("convert", work / "part_a_v30", "-o", work / "part_a_back_v21", "--to", "v2.1")
    lerodoc("flatten", part_b.root, "-o", work / "part_b_flat")
    lerodoc("merge", part_a.root, work / "part_b_flat", "-o", work / "merged_v30", "--exclude", "A:1")
    lerodoc("validate", work / "merged_v30", "--videos")
    lerodoc("quantiles", work / "merged_v30", "--openpi-norm-stats", work / "norm_stats.json")   # stored in its meta/
    lerodoc("select", work / "merged_v30", "-o", work / "merged_selected", "--state", "observation.state[0:6]",
            "--state", "observation.state[j7]", "--action", "action[0:6]")
    shutil.copytree(work / "merged_v30", work / "broken_v30")
    break_totals(work / "broken_v30")
    lerodoc("validate", work / "broken_v30", ok_codes=(1,))
    lerodoc("repair", work / "broken_v30", "-o", work / "repaired_v30")
    lerodoc("info", work / "merged_selected")
    lerodoc("delete", work / "merged_v30", "-o", work / "merged_without_0", "--episodes", "0")
    lerodoc("split", work / "merged_v30", "-o", work / "merged_split", "--into", "train=0.8,val=0.2", "--seed", "0")
    lerodoc("tasks", work / "merged_v30", "-o", work / "merged_retasked", "--set", "pick up the cube=grasp the cube")
    lerodoc("features", work / "merged_v30", "-o", work / "merged_one_camera", "--drop", "observation.images.wrist",
            "--rename", "observation.images.top=observation.images.front")
    lerodoc("encode", work / "merged_v30", "-o", work / "merged_wrist_gop10", "--reencode", "--gop", "10",
            "--cameras", "observation.images.wrist")
    train_tiny(work)
    print(f"\ndone under {work}:"
          f"\n  part_a_v30, part_a_back_v21  A converted to v3.0 and back to v2.1"
          f"\n  part_b_flat                  B with its list columns flattened"
          f"\n  merged_v30                   A (without episode 1) + B, validated, exact q01..q99 stats;"
          f"\n                               openpi norm stats in norm_stats.json"
          f"\n  merged_selected              state/action cut to the chosen channels"
          f"\n  broken_v30 -> repaired_v30   a copy with wrong totals, found by validate and repaired"
          f"\n  merged_without_0, merged_split/{{train,val}}, merged_retasked, merged_one_camera"
          f"\n                               episode 0 deleted; split 80/20; a task text edited; the wrist camera"
          f"\n                               dropped and the top one renamed (all by stream copy)"
          f"\n  merged_wrist_gop10           the wrist camera re-encoded with a keyframe every 10 frames"
          f"\n  run_tiny, policy_tiny        pi0.5 (tiny preset) trained on merged_selected, episode 0 held"
          f"\n                               out: checkpoints, metrics.jsonl (with the held-out loss), loss.png;"
          f"\n                               exported as a lerobot PI05 policy (skipped without torch)"
          f"\n  eval_tiny.html               lerodoc eval pi05 of run_tiny on its held-out episode, against the"
          f"\n                               baselines"
          f"\n  not run here (they need the network): lerodoc download dataset|tokenizer|weights, lerodoc push")
    lerodoc("report", work / "merged_v30", "-o", work / "report.html", "--videos")
    print(f"\nthe report of the merged sample, one self-contained page to open in a browser: {work / 'report.html'}")


if __name__ == "__main__":
    main()
