"""bench/float8_parity: does `lerodoc train pi05 --float8 tensorwise` learn like bf16? Several seeds, each trained in
both precisions through the CLI on real video, and the float8 effect set against the noise between seeds.

    python -m bench.float8_parity [--seed-dataset DIR] [--episodes 20] [--batch 8] [--steps 300] [--seeds 0 1 2]
                                  [--parallel 2] [--workers 4] [--budget 540] [--commit SHA] [--out parity.json]

The data is bench.train's: the seed v2.1 dataset (real AV1 640x480) tiled to --episodes episodes x 2 cameras, exact
quantiles, a SentencePiece tokenizer trained here, the prompt padded to 28 tokens. Each run is one
`lerodoc train pi05 DATA --preset full --weights none --compile --seed S --batch-per-device B --steps N
--save-every 0 [--float8 tensorwise]`, as a user types it; its metrics.jsonl gives every step's loss. The two
precisions of one seed start from the same initialisation and see the same samples, noise and flow times (the
seed fixes all three), so their difference is the float8 effect on that seed. --parallel runs of a seed share
the GPU at once (their step times are then not a speed measurement; bench.train_vs_lerobot times float8).

--precisions picks the runs of each seed: bf16, float8 (`--float8 tensorwise`, every large linear) and float8-vlm
(`--float8 tensorwise-vlm`, the action expert kept in bf16), and each with fast accumulation in the backward
products too (float8-fast, float8-vlm-fast: `--float8 tensorwise-fast`, `tensorwise-vlm-fast`). Reported per run: the mean loss over the last 100 and
the last 50 steps. Per seed: each float8 recipe's mean over bf16's, minus 1. Across seeds: the spread of bf16's
own means (the noise between seeds: (max - min) / mean, and the standard deviation over the mean) against the
float8 differences. The issue's bar: float8's mean over the last
100 steps within 2% of bf16's.
The JSON holds provenance (git commit, versions, device, command) and is rewritten after each seed, so a run cut
short keeps the seeds that finished; a seed that would start past --budget is skipped and listed as such.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.dataset import seed_dataset, tile_v21
from bench.results import git_commit, write_results
from tests.fixtures.tokenizer import train_tokenizer

ROOT = Path(__file__).resolve().parents[1]
# "float8": every large linear in float8; "float8-vlm": the SigLIP and Gemma ones, the action expert kept in bf16
PRECISIONS = {"bf16": (), "float8": ("--float8", "tensorwise"), "float8-vlm": ("--float8", "tensorwise-vlm"),
              "float8-fast": ("--float8", "tensorwise-fast"), "float8-vlm-fast": ("--float8", "tensorwise-vlm-fast")}


def cli(*args, log: Path | None = None, background: bool = False):
    """`python -m lerodoc ARGS --json`: its JSON report, or (background) the Popen writing it to log."""
    command = [sys.executable, "-m", "lerodoc", *map(str, args), "--json"]
    if background:
        return subprocess.Popen(command, cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True)
    proc = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"lerodoc {' '.join(map(str, args))} exited {proc.returncode}")
    return json.loads(proc.stdout)


def mean_last(losses: list[float], n: int) -> float | None:
    return statistics.fmean(losses[-n:]) if len(losses) >= n else None


def summarise(runs: list[dict], steps: int) -> dict:
    """Per seed float8 against bf16, and the noise between seeds in each precision."""
    done = {(r["seed"], r["precision"]): r for r in runs if r.get("rc") == 0 and len(r["losses"]) == steps}
    out: dict = {"per_seed": {}, "noise_between_seeds": {}}
    for window in (100, 50):
        key = f"last{window}"
        for precision in PRECISIONS:
            means = [r[f"mean_{key}"] for (s, p), r in sorted(done.items())
                     if p == precision and r[f"mean_{key}"] is not None]
            if len(means) >= 2:
                mean = statistics.fmean(means)
                out["noise_between_seeds"].setdefault(precision, {})[key] = {
                    "means": means, "range_over_mean": (max(means) - min(means)) / mean,
                    "std_over_mean": statistics.stdev(means) / mean}
        for precision in PRECISIONS:
            if precision == "bf16":
                continue
            diffs = []
            for seed in sorted({s for s, _ in done}):
                if (seed, "bf16") in done and (seed, precision) in done and done[seed, "bf16"][f"mean_{key}"]:
                    b, f = done[seed, "bf16"][f"mean_{key}"], done[seed, precision][f"mean_{key}"]
                    diffs.append(f / b - 1)
                    out["per_seed"].setdefault(str(seed), {})[f"{precision}_over_bf16_minus_1_{key}"] = f / b - 1
            if diffs:
                out[f"{precision}_effect_{key}"] = {"per_seed": diffs, "mean": statistics.fmean(diffs),
                                                    "largest_abs": max(map(abs, diffs)),
                                                    "within_2pct_every_seed": all(abs(d) <= 0.02 for d in diffs)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed-dataset", type=Path, default=None)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=["bf16", "float8"])
    p.add_argument("--parallel", type=int, default=2, help="runs of one seed at once on the GPU")
    p.add_argument("--workers", type=int, default=4, help="decoding workers per run")
    p.add_argument("--preset", default="full", help="tiny: the CPU check (with --no-compile and --precisions bf16)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--budget", type=float, default=540, help="seconds for the whole bench")
    p.add_argument("--commit", default=None)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=Path("float8_parity.json"))
    args = p.parse_args()
    started = time.perf_counter()

    import torch
    provenance = {"git_commit": args.commit or git_commit(), "python": platform.python_version(),
                  "torch": torch.__version__, "cuda": torch.version.cuda,
                  "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "command": "python -m bench.float8_parity " + " ".join(sys.argv[1:])}
    try:
        import torchao
        provenance["torchao"] = torchao.__version__
    except ImportError:
        provenance["torchao"] = None

    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-float8-parity-"))
    seed = args.seed_dataset or seed_dataset(work)
    dataset = tile_v21(seed, work / "dataset", args.episodes, cameras=2)
    cli("quantiles", dataset, "--in-place")
    tasks = tuple(json.loads(line)["task"] for line in (dataset / "meta/tasks.jsonl").read_text().splitlines() if line)
    tokenizer = train_tokenizer(work / "tokenizer", tasks=tasks)
    common = ("--preset", args.preset, "--weights", "none", "--tokenizer", tokenizer, "--no-state-in-prompt",
              "--max-token-len", "28", "--workers", args.workers, "--batch-per-device", args.batch,
              "--steps", args.steps, "--save-every", "0", "--log-every", 50,
              *(() if args.no_compile else ("--compile",)))
    report = {"provenance": provenance,
              "setup": {"dataset": str(seed), "episodes": args.episodes, "cameras": 2, "prompt": 28, "preset": args.preset,
                        "weights": "none (random init, seeded)", "batch": args.batch, "steps": args.steps,
                        "compile": not args.no_compile, "parallel_runs": args.parallel, "workers_per_run": args.workers,
                        "prepare_s": time.perf_counter() - started},
              "runs": [], "skipped": []}
    print(json.dumps(report["setup"]), flush=True)
    jobs = [(s, precision) for s in args.seeds for precision in args.precisions]
    longest = 0.0
    while jobs:
        batch, jobs = jobs[:args.parallel], jobs[args.parallel:]
        left = args.budget - (time.perf_counter() - started)
        if left < longest * 1.05:
            report["skipped"] += [{"seed": s, "precision": pr, "why": f"{left:.0f} s left of --budget, a round took "
                                                                      f"{longest:.0f} s"} for s, pr in batch]
            continue
        t0, procs = time.perf_counter(), []
        for s, precision in batch:
            out = work / f"run_s{s}_{precision}"
            procs.append((s, precision, out, cli("train", "pi05", dataset, *common, "-o", out, "--seed", s,
                                                  *PRECISIONS[precision], log=work / f"{out.name}.log",
                                                  background=True)))
        for s, precision, out, proc in procs:
            try:
                rc = proc.wait(timeout=max(1.0, args.budget - (time.perf_counter() - started)))
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = "killed at --budget"
            rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                    if line.strip()] if (out / "metrics.jsonl").is_file() else []
            losses = [r["loss"] for r in rows if "loss" in r]
            step_s = [r["step_s"] for r in rows if "step_s" in r]
            tail = (work / f"{out.name}.log").read_text()[-1500:]
            run = {"seed": s, "precision": precision, "rc": rc, "wall_s": time.perf_counter() - t0,
                   "steps_done": len(losses), "mean_last100": mean_last(losses, 100),
                   "mean_last50": mean_last(losses, 50), "first_loss": losses[0] if losses else None,
                   "median_step_s_shared_gpu": statistics.median(step_s[len(step_s) // 2:]) if step_s else None,
                   "losses": losses}
            if rc != 0:
                run["log_tail"] = tail
            report["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "losses"}), flush=True)
        longest = max(longest, time.perf_counter() - t0)
        report["summary"] = summarise(report["runs"], args.steps)
        report["total_s"] = time.perf_counter() - started
        write_results(report, args.out)
    report["total_s"] = time.perf_counter() - started
    write_results(report, args.out)   # again: the runs skipped after the last round are recorded too
    print(json.dumps(report.get("summary"), indent=1), flush=True)
    print(json.dumps({"skipped": report["skipped"]}), flush=True)
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
