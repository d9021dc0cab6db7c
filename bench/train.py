"""bench/train: `lerodoc train pi05` on real video, as a user runs it: the batch sweep, then a training run.

    python -m bench.train [--seed-dataset DIR] [--episodes 60] [--preset full] [--sweep-batches 8,16,32]
                          [--batch 32] [--steps 60] [--workers 12] [--compile] [--fsdp] [--out bench_train.json]

The dataset is the seed v2.1 dataset (../shared/data/g1_v21: real AV1 640x480 recordings, keyframe every
second frame) tiled to --episodes episodes x 2 cameras (bench/dataset.py), with exact quantiles; pi0.5's
third camera slot has no data and is masked (skipped). The prompt is the task without the state, padded to
28 tokens (`--no-state-in-prompt --max-token-len 28`, the issue's setting); the tokenizer is a small
SentencePiece model trained here (PaliGemma's cannot be downloaded on the GPU machine).

1. `lerodoc train pi05 --sweep` (eager): per batch, median step time, samples/s, peak memory, MFU, data wait.
2. `lerodoc train pi05 --steps N --save-every 0 [--compile]`: samples/s, MFU and the share of wall time the
   loop waited for data, averaged over the logged windows after the first (which holds the warm-up and
   compilation), video decoding on.
MFU = flops_per_sample (lerodoc.pi05.model: 6 x multiply-accumulates of every linear layer x its tokens,
plus attention's QK^T and AV) x samples/s / the GPU's dense bf16 peak (989.4 TFLOP/s for H100/H200).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.dataset import SHARED_G1, seed_dataset, tile_v21
from tests.fixtures.tokenizer import train_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def lerodoc(*args: str) -> dict:
    """Run the CLI with --json; its JSON report (stderr passes through, so the progress shows)."""
    proc = subprocess.run([sys.executable, "-m", "lerodoc", *map(str, args), "--json"], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"lerodoc {' '.join(map(str, args))} exited {proc.returncode}")
    return json.loads(proc.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed-dataset", type=Path, default=None, help=f"default {SHARED_G1} (else generated)")
    p.add_argument("--episodes", type=int, default=60)
    p.add_argument("--preset", default="full")
    p.add_argument("--sweep-batches", default="8,16,32")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--fsdp", action="store_true", help="train with --fsdp (FSDP2; one process is one shard)")
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=Path("bench_train.json"))
    args = p.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-bench-train-"))
    started = time.perf_counter()
    seed = args.seed_dataset or seed_dataset(work)
    dataset = tile_v21(seed, work / "dataset", args.episodes, cameras=2)
    lerodoc("quantiles", dataset, "--in-place")
    tasks = tuple(json.loads(line)["task"] for line in (dataset / "meta/tasks.jsonl").read_text().splitlines() if line)
    tokenizer = train_tokenizer(work / "tokenizer", tasks=tasks)
    common = ("--preset", args.preset, "--tokenizer", tokenizer, "--no-state-in-prompt", "--max-token-len", "28",
              "--workers", args.workers)
    report = {"dataset": str(seed), "episodes": args.episodes, "cameras": 2, "prepare_s": time.perf_counter() - started}
    print(json.dumps(report), flush=True)
    if not args.skip_sweep:
        report["sweep"] = lerodoc("train", "pi05", dataset, *common, "--sweep", "--sweep-batches", args.sweep_batches)
        print(json.dumps(report["sweep"]), flush=True)
    report["train"] = lerodoc("train", "pi05", dataset, *common, "-o", work / "run", "--batch-per-device", args.batch,
                              "--steps", args.steps, "--save-every", "0", "--log-every", args.log_every,
                              *(("--compile",) if args.compile else ()), *(("--fsdp",) if args.fsdp else ()))
    report["train"] |= {"compile": args.compile, "fsdp": args.fsdp}
    report["windows"] = [json.loads(line) for line in (work / "run/metrics.jsonl").read_text().splitlines()
                         if "samples_per_s" in line]
    print(json.dumps(report["train"]), flush=True)
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
