"""bench/scaling: pi0.5 training throughput on 1 and N GPUs of one host (weak scaling), eager and compiled.

    python -m bench.scaling [--seed-dataset DIR] [--episodes 60] [--batch 32] [--worlds 1,2] [--modes compile,eager]
                            [--variants after] [--steps 20] [--warmup 6] [--workers 12] [--profile] [--budget-s 540]
                            [--commit SHA] [--out scaling.json]

The data is bench.train's: the seed v2.1 dataset (real AV1 640x480) tiled to --episodes episodes x 2 cameras, the
prompt padded to 28 tokens, the full preset, batch --batch per GPU, --workers decoding workers per rank. Each
run is one `torchrun --standalone --nproc-per-node W -m bench.scaling --worker SPEC` over lerodoc.pi05.train's
own prepare/build/loader/train_step and its Metrics (one loss all-reduce and host sync per --log-every steps),
so it measures what `lerodoc train pi05` does. Per run: --warmup steps (compilation, DDP's bucket rebuild),
then --steps timed steps between two device syncs.

Printed and written per run: per-GPU samples/s, MFU on the work done (lerodoc.pi05.model.flops_per_sample over
989.4 TFLOP/s), the share of the timed wall time spent waiting for data, peak memory (rank 0), and weak-scaling
efficiency = per-GPU samples/s at W GPUs / per-GPU samples/s at 1 GPU of the same mode and variant.
--profile traces --profile-steps steps after the timed ones on rank 0 (torch.profiler) and summarises: the top
GPU ops, NCCL kernel time and how much of it no compute kernel overlaps (exposed), GPU idle time and its
largest gaps, and host syncs. Variants are RunConfig settings (VARIANTS below): `before` is the code's old
defaults (torch.compile over DDP, 25 MB buckets), `after` the new ones.
The JSON holds provenance (git commit, torch/CUDA versions, GPU name, date, command) and is rewritten after
each run, so a run cut short by a time limit keeps what finished. Runs that would start past --budget-s are
skipped and listed as such.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import git_commit

ROOT = Path(__file__).resolve().parents[1]

# RunConfig settings per variant ("env": environment variables set before the process group starts);
# "after" is RunConfig's defaults now, "before" the defaults of c93f43b's parent
VARIANTS = {
    "before": dict(compile_scope="model", ddp_bucket_mb=25, ddp_bucket_view=False, ddp_static_graph=False,
                   pin_workers=False),
    "after": dict(),
    "buckets": dict(compile_scope="model", ddp_bucket_mb=100, ddp_bucket_view=True, pin_workers=True),
    "layers": dict(compile_scope="layers", ddp_bucket_mb=100, ddp_bucket_view=True, pin_workers=True),
    "layers25": dict(compile_scope="layers", ddp_bucket_mb=25, ddp_bucket_view=True, pin_workers=True),
    "static": dict(ddp_static_graph=True),
    "ctas8": dict(env={"NCCL_MAX_CTAS": "8"}),
    "simple": dict(env={"NCCL_PROTO": "Simple"}),
    "simple_ctas8": dict(env={"NCCL_PROTO": "Simple", "NCCL_MAX_CTAS": "8"}),
    "bf16": dict(ddp_reduce="bf16"),
    # FSDP2, one unit per layer, bf16 parameters gathered, fp32 gradients reduce-scattered, the optimizer on the shard
    "fsdp": dict(fsdp=True),
    "fsdp_zero2": dict(fsdp=True, fsdp_reshard=False),   # gathered parameters kept from forward to backward
    # the step on a high-priority stream: its kernels' blocks are scheduled before NCCL's (normal priority)
    "prio": dict(stream_priority=-1),
    "cdt": dict(env={"TORCHINDUCTOR_COORDINATE_DESCENT_TUNING": "1"}),   # inductor tunes its kernels' launch
    # the caching allocator's fixed blocks, as before lerodoc set expandable segments (calls 1-7 ran so)
    "fixed_blocks": dict(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}),
    # torchao float8 training (issue 39): the CLI's --float8 recipes, and the tensorwise one with other settings
    "float8": dict(float8="tensorwise"),
    "float8_vlm": dict(float8="tensorwise-vlm"),
    "float8_model": dict(float8="tensorwise", compile_scope="model"),
    "float8_cdt": dict(float8="tensorwise", env={"TORCHINDUCTOR_COORDINATE_DESCENT_TUNING": "1"}),
    # candidates for the cast kernels' share of a float8 step (issue 39): fewer float8 layers (the MLPs only; Gemma's
    # only), fast accumulation in the two backward products too (torchao's tensorwise default: forward only),
    # Inductor's n-d tiling for the casts that also write a transposed copy, coordinate-descent tuning; "experiment"
    # lets a recipe the CLI does not offer (yet) through float8.check_float8
    "float8_mlp": dict(float8="tensorwise-mlp", experiment=True),
    "float8_lm": dict(float8="tensorwise-lm", experiment=True),
    # call 3 (0673a82) set this variant's torchao config through a patch here; the recipe makes the same one
    "float8_vlm_fastacc": dict(float8="tensorwise-vlm-fast"),
    "float8_vlm_nd": dict(float8="tensorwise-vlm", inductor={"triton.prefer_nd_tiling": True}),
    "float8_vlm_cdt": dict(float8="tensorwise-vlm", env={"TORCHINDUCTOR_COORDINATE_DESCENT_TUNING": "1"}),
    # the fastest recipe of call 3 with the whole model compiled as one graph (casts fused across layer edges), and
    # with coordinate-descent tuning set through Inductor's config (call 1's environment variable run exited 1)
    "float8_fast": dict(float8="tensorwise-fast"),
    "float8_fast_model": dict(float8="tensorwise-fast", compile_scope="model"),
    "float8_fast_cdt": dict(float8="tensorwise-fast", inductor={"coordinate_descent_tuning": True}),
}
# weak scaling of a variant with no 1-GPU run of its own is taken against this one (same mode)
BASELINE = "after"


# ------------------------------------------------------------------------------------------------ worker


def experiment(recipe: bool, inductor: dict) -> None:
    """A variant's settings that are not RunConfig's: admit any recipe FLOAT8_PARTS names, Inductor config values."""
    import torch._inductor.config

    from lerodoc.pi05 import float8, model
    if recipe:
        float8.RECIPES = tuple(f"tensorwise-{part}".rstrip("-") for part in model.FLOAT8_PARTS)
    for key, value in inductor.items():
        section, _, name = key.rpartition(".")
        setattr(getattr(torch._inductor.config, section) if section else torch._inductor.config, name, value)


def worker(spec: dict) -> None:
    """One run under torchrun: warm-up, timed steps, optional profile; rank 0 writes spec['result']."""
    import torch
    import torch.distributed as dist

    settings = dict(VARIANTS[spec["variant"]])
    os.environ.update(settings.pop("env", {}))
    priority = settings.pop("stream_priority", 0)
    experiment(settings.pop("experiment", False), settings.pop("inductor", {}))
    from lerodoc.pi05 import train as T
    from lerodoc.pi05.data import DataSpec
    from lerodoc.pi05.feed import step_batches
    from lerodoc.pi05.metrics import peak_flops
    from lerodoc.pi05.model import flops_per_sample

    if spec.get("dump_after_s"):
        import faulthandler
        faulthandler.dump_traceback_later(spec["dump_after_s"], exit=True)
    started = time.perf_counter()
    data = DataSpec(action_key="action", state_key="observation.state", cameras=(), action_horizon=0, image_size=0,
                    state_in_prompt=False, max_token_len=28)
    run = T.RunConfig(dataset=spec["dataset"], output=spec["work"], tokenizer=spec["tokenizer"], preset=spec["preset"],
                      steps=10**6, batch_per_device=spec["batch"], compile=spec["mode"] == "compile",
                      workers=spec["workers"], log_every=spec["log_every"], data=data, save_every=0,
                      **settings)
    setup = T.prepare(run, resume=False, writes=False)
    run, procs = setup.run, setup.procs
    parts = T.build(setup)
    flops = flops_per_sample(setup.config, run.data.max_token_len, len(run.data.cameras))
    peak = peak_flops(procs.device)
    total = spec["warmup"] + spec["steps"] + (spec["profile_steps"] if spec["profile"] else 0)
    stream = step_batches(setup, 0, total)
    log = T.Metrics(Path(spec["work"]), procs, run, run.batch_per_device * procs.world, flops, peak)
    Path(spec["work"]).mkdir(parents=True, exist_ok=True)

    def step(i: int) -> float:
        t = time.perf_counter()
        batch = next(stream)
        waited = time.perf_counter() - t
        loss, norm = T.train_step(parts.step_fn, parts.wrapped, parts.optimizer, batch, setup, parts.bf16,
                                  run.lr_at(i))
        log.add(i, loss, norm, run.lr_at(i), waited)
        return waited

    cuda = procs.device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(procs.device)
        if dist.is_initialized():
            dist.barrier()

    if cuda and priority:   # every step, sync and flush on one stream of that priority
        high = torch.cuda.Stream(device=procs.device, priority=priority)
        high.wait_stream(torch.cuda.current_stream(procs.device))
        torch.cuda.set_stream(high)
    for i in range(spec["warmup"]):
        step(i)
    log.flush()
    sync()
    warm_s = time.perf_counter() - started
    if cuda:
        torch.cuda.reset_peak_memory_stats(procs.device)
    t0 = time.perf_counter()
    waits = [step(spec["warmup"] + i) for i in range(spec["steps"])]
    log.flush()
    sync()
    wall = time.perf_counter() - t0
    per_gpu = run.batch_per_device * spec["steps"] / wall
    result = {"mode": spec["mode"], "variant": spec["variant"], "settings": VARIANTS[spec["variant"]],
              "world": procs.world, "batch_per_gpu": run.batch_per_device, "steps": spec["steps"],
              "step_s": wall / spec["steps"], "samples_per_s_per_gpu": per_gpu,
              "samples_per_s": per_gpu * procs.world, "mfu": per_gpu * flops / peak if peak else None,
              "data_wait": sum(waits) / wall,
              "peak_gib": torch.cuda.max_memory_allocated(procs.device) / 2**30 if cuda else 0.0,
              "warmup_s": warm_s, "flops_per_sample": flops, "losses": [r["loss"] for r in log.rows]}
    if spec["profile"]:
        from torch.profiler import ProfilerActivity, profile
        first = spec["warmup"] + spec["steps"]
        if procs.main:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for i in range(spec["profile_steps"]):
                    step(first + i)
                if cuda:
                    torch.cuda.synchronize(procs.device)
            trace = Path(spec["work"]) / "trace.json"
            prof.export_chrome_trace(str(trace))
            result["profile"] = summarise(prof, trace, spec["profile_steps"])
            if spec.get("trace_out"):
                with open(trace, "rb") as src, gzip.open(spec["trace_out"], "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst)
        else:
            for i in range(spec["profile_steps"]):
                step(first + i)
        log.flush()
        sync()
    if procs.main:
        Path(spec["result"]).write_text(json.dumps(result))
    if dist.is_initialized():
        dist.destroy_process_group()
    # exit without tearing down the DataLoader iterator: after torch.profiler its fork()ed workers can hang
    # the shutdown (seen on CPU with gloo)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def _intersect(xs, ys) -> float:
    i = j = 0
    total = 0.0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        total += max(0.0, b - a)
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


def summarise(prof, trace: Path, steps: int) -> dict:
    """Where the GPU time of the profiled steps goes (ms per step): kernels by name, NCCL and how much of it
    overlaps no compute kernel, idle time and the largest idle gaps, host-device syncs."""
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    if not kernels:
        return {"error": "no kernel events"}
    nccl = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" in e["name"].lower()]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e["name"].lower()]
    busy_all, busy_compute, busy_nccl = _union(nccl + compute), _union(compute), _union(nccl)
    start, end = busy_all[0][0], busy_all[-1][1]
    gaps = sorted(((b[0] - a[1], a[1] - start) for a, b in zip(busy_all, busy_all[1:])), reverse=True)
    by_name: dict[str, list[float]] = {}
    for e in kernels:
        by_name.setdefault(e["name"][:120], []).append(e["dur"])
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:20]
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"]
    syncs = {}
    for e in runtime:
        name = e.get("name", "")
        if "Synchronize" in name or ("Memcpy" in name and "Async" not in name):
            syncs[name] = syncs.get(name, 0) + 1
    ms = 1e-3 / steps   # trace times are microseconds
    return {"steps": steps, "wall_ms_per_step": (end - start) * ms,
            "compute_busy_ms": _length(busy_compute) * ms, "nccl_ms": _length(busy_nccl) * ms,
            "nccl_exposed_ms": (_length(busy_nccl) - _intersect(busy_nccl, busy_compute)) * ms,
            "idle_ms": ((end - start) - _length(busy_all)) * ms, "nccl_kernels": len(nccl) / steps,
            "kernels_per_step": len(kernels) / steps,
            "largest_gaps_ms": [[round(g * 1e-3, 3), round(at * 1e-3, 2)] for g, at in gaps[:12]],
            "gaps_over_1ms_total_ms": sum(g for g, _ in gaps if g > 1000) * ms,
            "top_kernels": [{"name": n, "ms_per_step": sum(d) * ms, "calls_per_step": len(d) / steps}
                            for n, d in top],
            "kernels_ms_per_step": {n: sum(d) * ms for n, d in by_name.items()},
            "host_syncs": syncs}


# ------------------------------------------------------------------------------------------------ driver


def provenance(commit: str | None) -> dict:
    import torch
    return {"git_commit": commit or git_commit(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "gpus": torch.cuda.device_count(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python -m bench.scaling " + " ".join(sys.argv[1:])}


def table(runs: list[dict]) -> str:
    lines = ["| mode | variant | GPUs | batch/GPU | per-GPU samples/s | total | weak scaling | MFU | data wait | "
             "peak GiB | step s | warm-up s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if "samples_per_s_per_gpu" not in r:
            lines.append(f"| {r['mode']} | {r['variant']} | {r['world']} | {r.get('batch_per_gpu')} | "
                         f"{r.get('error', 'skipped')} |||||||| |")
            continue
        eff = r.get("weak_scaling")
        lines.append(f"| {r['mode']} | {r['variant']} | {r['world']} | {r['batch_per_gpu']} | "
                     f"{r['samples_per_s_per_gpu']:.1f} | "
                     f"{r['samples_per_s']:.1f} | {'' if eff is None else f'{100 * eff:.1f}%'} | "
                     f"{100 * (r['mfu'] or 0):.1f}% | {100 * r['data_wait']:.2f}% | {r['peak_gib']:.1f} | "
                     f"{r['step_s']:.3f} | {r['warmup_s']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--seed-dataset", type=Path, default=None)
    p.add_argument("--episodes", type=int, default=60)
    p.add_argument("--preset", default="full")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--worlds", default="1,2")
    p.add_argument("--modes", default="compile,eager")
    p.add_argument("--variants", default="after")
    p.add_argument("--order", choices=["variant", "world"], default="variant",
                   help="variant: every world of one (mode, variant) before the next; world: every variant at "
                        "the largest world first")
    p.add_argument("--plan", default=None, help="explicit runs MODE:VARIANT:GPUS[:BATCH],... (instead of the product of "
                   "--modes, --variants and --worlds)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=6)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--profile", action="store_true", help="profile the multi-GPU runs (rank 0)")
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--profile-all", action="store_true", help="profile the 1-GPU runs too")
    p.add_argument("--budget-s", type=float, default=540, help="start no run after this many seconds")
    p.add_argument("--commit", default=None)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=Path("scaling.json"))
    args = p.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return

    from bench.dataset import seed_dataset, tile_v21
    from bench.train import lerodoc
    from tests.fixtures.tokenizer import train_tokenizer

    started = time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-scaling-"))
    seed = args.seed_dataset or seed_dataset(work)
    dataset = tile_v21(seed, work / "dataset", args.episodes, cameras=2)
    lerodoc("quantiles", dataset, "--in-place")
    tasks = tuple(json.loads(line)["task"] for line in (dataset / "meta/tasks.jsonl").read_text().splitlines() if line)
    tokenizer = train_tokenizer(work / "tokenizer", tasks=tasks)
    report = {"provenance": provenance(args.commit),
              "setup": {"dataset": str(seed), "episodes": args.episodes, "cameras": 2, "prompt": 28,
                        "preset": args.preset, "batch_per_gpu": args.batch, "workers_per_rank": args.workers,
                        "warmup_steps": args.warmup, "timed_steps": args.steps, "log_every": args.log_every},
              "variants": VARIANTS, "runs": []}
    worlds = [int(w) for w in args.worlds.split(",")]
    plan = [(m, v, w, args.batch) for m in args.modes.split(",") for v in args.variants.split(",") for w in worlds]
    if args.order == "world":
        plan.sort(key=lambda mvwb: -mvwb[2])
    if args.plan:   # MODE:VARIANT:GPUS[:BATCH]
        plan = [(p[0], p[1], int(p[2]), int(p[3]) if len(p) > 3 else args.batch)
                for p in (item.split(":") for item in args.plan.split(","))]
    for mode, variant, world, batch in plan:
        entry = {"mode": mode, "variant": variant, "world": world, "batch_per_gpu": batch}
        left = args.budget_s - (time.perf_counter() - started)
        if left < 60:
            report["runs"].append(entry | {"error": "skipped: budget"})
            continue
        spec = {"dataset": str(dataset), "tokenizer": str(tokenizer), "preset": args.preset, "batch": batch,
                "mode": mode, "variant": variant, "workers": args.workers, "log_every": args.log_every,
                "warmup": args.warmup, "steps": args.steps, "profile": args.profile and (world > 1 or args.profile_all),
                "profile_steps": args.profile_steps, "dump_after_s": max(60.0, left - 20), "work": str(work / f"run-{mode}-{variant}-{world}-{batch}"),
                "result": str(work / f"result-{mode}-{variant}-{world}-{batch}.json"),
                "trace_out": str(args.out.parent / f"trace_{mode}_{variant}_{world}_{batch}.json.gz")
                if args.profile else None}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
               "-m", "bench.scaling", "--worker", json.dumps(spec)]
        print(f"== {mode} {variant} x{world} batch {batch} ({left:.0f} s left)", flush=True)
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, timeout=left, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            rc, out = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            rc, out = "timeout", (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        result = Path(spec["result"])
        if rc == 0 and result.exists():
            entry = json.loads(result.read_text())
        else:
            causes = [line for line in out.splitlines() if "Error" in line and "ChildFailedError" not in line]
            entry |= {"error": f"exit {rc}", "causes": causes[-8:], "log_tail": out[-3000:]}
            print(*causes[-8:], sep="\n", flush=True)
            print(out[-3000:], flush=True)
        entry["run_s"] = time.perf_counter() - t
        report["runs"].append(entry)
        one = {(r["mode"], r["variant"], r["batch_per_gpu"]): r for r in report["runs"]
               if r["world"] == 1 and "samples_per_s_per_gpu" in r}
        for r in report["runs"]:
            batch_ = r.get("batch_per_gpu")
            base = one.get((r["mode"], r["variant"], batch_)) or one.get((r["mode"], BASELINE, batch_)) \
                or one.get((r["mode"], BASELINE, args.batch))
            if base and "samples_per_s_per_gpu" in r:
                r["weak_scaling"] = r["samples_per_s_per_gpu"] / base["samples_per_s_per_gpu"]
                r["weak_scaling_against"] = f"{base['mode']}:{base['variant']}:1 at batch {base['batch_per_gpu']}"
        args.out.write_text(json.dumps(report, indent=2))
        show = {k: entry.get(k) for k in ("samples_per_s_per_gpu", "mfu", "data_wait", "peak_gib", "warmup_s")}
        print(json.dumps(show), flush=True)
        if "profile" in entry:
            prof = {k: v for k, v in entry["profile"].items() if k != "top_kernels"}
            print(json.dumps(prof), flush=True)
            for k in entry["profile"].get("top_kernels", [])[:12]:
                print(f"  {k['ms_per_step']:8.2f} ms {k['calls_per_step']:6.0f}x  {k['name'][:90]}", flush=True)
    print(table(report["runs"]), flush=True)
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
