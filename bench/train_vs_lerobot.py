"""bench/train_vs_lerobot: lerodoc's pi0.5 training step against lerobot 0.6.1's, same GPU, same run.

On the device (nvidia-h200), with carry [".whl"] (lerobot 0.6.1 and the few wheels its pi05 needs beyond the
image's packages: see below), from the repository root:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && PYTHONUNBUFFERED=1 python3 -m bench.train_vs_lerobot --batch 4 16 32 --out $OUT/train_vs_lerobot.json

Each side runs in its own subprocess, one after the other, so each has the GPU to itself and its memory is freed
when it exits: lerodoc under the image's own packages, lerobot with PYTHONPATH=/tmp/site (--site) in front.
Both build their models on the GPU directly: lerodoc's PI05 (3.35B) and lerobot's PI05Policy (4.14B: it also
holds the tied and the unused expert lm_head) under a torch.device context, a few seconds each, where lerobot on
its own would build in fp32 on CPU (16.6 GB, well over a minute) and move. Expected on an H200: lerodoc about 1
minute (eager), lerobot 1.5 to 2.5 minutes (imports of transformers ~20 s; at batch 32 it may run out of
memory, which is reported). `--compile` (lerodoc only) adds 1 to 2 minutes. The whole run stops within
--budget (520 s): lerodoc may use all but 200 s of it, lerobot the rest; a side stopped early keeps the batch
sizes it finished.

The same workload on both sides, from bench.pi05_step.synthetic_batch: the full preset (SigLIP So400m/14 at
224, Gemma 2B, gemma_300m expert), batch sizes from --batch, 3 cameras of which 2 shown and 1 masked for all
samples, a --prompt (28) token prompt with every token valid, a 50-step chunk of 32 real action dims, a fresh
noise and time draw per step, and one full training step: forward under bf16 autocast, backward, gradient-norm
clip at 1.0, AdamW step (lr 2.5e-5, betas 0.9/0.95, eps 1e-8, weight decay 0.01), zero_grad.

- lerodoc: PI05 (fp32 master weights) with fused AdamW, as lerodoc's trainer runs on GPU; optionally
  torch.compile'd (--compile). The masked camera is skipped (no sample shows it).
- lerobot: PI05Policy(PI05Config(dtype="bfloat16")) with random init, trained as lerobot_train.update_policy
  does for that config: policy.forward(batch) under bf16 autocast (what Accelerate's mixed_precision="bf16",
  which lerobot_train picks from dtype="bfloat16", enters), backward, clip_grad_norm_(1.0), the optimizer of
  PI05Config.get_optimizer_preset() (torch AdamW, foreach). Its own defaults otherwise: gradient_checkpointing
  False and compile_model False (--gradient-checkpointing turns it on for both sides), eager attention (lerobot
  hard-codes it). dtype="bfloat16" keeps SigLIP, the projector and the norms in fp32 and the rest in bf16, and
  AdamW then updates bf16 weights. The batch is what its preprocessor would hand over: images in [0, 1] under
  two camera keys (the third configured camera is absent, so lerobot feeds -1 images with mask False and still
  encodes them: 3 x 256 image tokens against lerodoc's 2 x 256), observation.language.tokens/attention_mask
  built directly (no tokenizer download) at tokenizer_max_length = --prompt. Note: lerobot's tokenizer step
  pads every prompt to tokenizer_max_length (200 by default); with 28 here, lerobot gets the same short prompt.

MFU on both sides counts the same FLOPs per sample: lerodoc.pi05.model.flops_per_sample with 2 cameras and the
prompt length (lerobot's masked camera counts as no useful work), against 989.4e12 (H200 dense bf16).
Step time: --steps steps run back to back after 3 warm-up steps, between two CUDA events, as a trainer runs
them (samples/s and MFU come from it); each run also keeps the median of --steps steps each waited for on its
own (step_s_synced, samples_per_s_synced: the host idles the GPU while it launches the next step). A batch that
runs out of memory is reported as such and the next is tried.

Wheels (.whl/, git-ignored; scripts/lerobot-device-wheels.sh downloads them, 16 MB): lerobot 0.6.1,
transformers 5.5.4 (the image has 5.17), tokenizers 0.22.2 (transformers 5.5.4 refuses the image's 0.23.2 at
import), draccus 0.11.6 and mergedeep 1.3.4 (lerobot's config parser), gymnasium 1.4.0 and farama-notifications
0.0.6 (lerobot.envs). `datasets` is left out on purpose: without it lerobot imports neither datasets nor PyAV
for the policy (with datasets but no PyAV its import fails).

Issue 28's best-vs-best call (one nvidia-h200, carry [".whl", ".whl2"]; .whl2 holds PyAV 18.1.0, which lerodoc's
side imports through lerodoc.pi05.train, and torchao 0.17.0 for --float8, installed into --torchao-site):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-torchao .whl2/*.whl && PYTHONUNBUFFERED=1 python3 -m bench.train_vs_lerobot --compile --batch 56 32 --lerobot-batch 32 --lerobot-compile-mode default --steps 8 --budget 575 --reserve 400 --out $OUT/tvl_best_h200.json

Both sides run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (as lerodoc's trainer sets it) unless
--no-expandable-segments. A compiled lerobot compiles once per batch size (about 280 s on an H200, cold), so
--lerobot-batch usually names one. `--sides lerodoc --float8 tensorwise [--float8-only]` times lerodoc's side with
float8 training (PI05.convert_float8). The JSON holds provenance (commit, command, date; each side's versions and
device), every step's loss, and the labelled ratios: best vs best and same batch.

CPU check (tiny preset; the lerodoc side in this Python, lerobot's in the reference venv):

    python3 -m bench.train_vs_lerobot --preset tiny --device cpu --batch 2 --steps 2 --lerobot-python ~/.cache/lerodoc/lerobot-0.6.1/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from lerodoc.pi05.float8 import RECIPES

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("lerodoc", "lerobot")
CAMERAS = 3          # cameras 0 and 1 shown to every sample, camera 2 to none
SHOWN = 2
CLIP = 1.0
LR = 2.5e-5
RESERVE = 200       # seconds kept for each side still to run (lerobot: imports, build, 3 batch sizes)
FLOAT8_LAYERS = ("the Linear layers of the SigLIP, Gemma and expert layers whose in and out widths are both "
                 ">= 1024 (not the 256-wide Gemma k/v projections, the action and time projections or the adaRMS "
                 "layers): lerodoc.pi05.model.float8_filter; tensorwise-vlm leaves the expert's out; -fast: fast "
                 "accumulation in the backward products too")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, nargs="+", default=[4, 16, 32])
    p.add_argument("--lerobot-batch", type=int, nargs="+", default=None,
                   help="lerobot's batch sizes (default: --batch); a compiled lerobot recompiles for each one")
    p.add_argument("--float8", nargs="+", default=[], choices=["rowwise", *RECIPES],
                   help="also run lerodoc's side with torchao float8 training of its large linears, one run per "
                        "recipe (torchao on the path: carried wheels)")
    p.add_argument("--float8-only", action="store_true", help="lerodoc's side only in its --float8 runs")
    p.add_argument("--float8-batch", type=int, nargs="+", default=None,
                   help="the batch sizes of lerodoc's --float8 runs (default: --batch); float8 fits larger ones")
    p.add_argument("--lerobot-gc-batch", type=int, nargs="+", default=None,
                   help="also run lerobot's side with its gradient checkpointing on, at these batch sizes (a "
                        "compiled lerobot compiles again)")
    p.add_argument("--lerobot-gc-only", action="store_true", help="lerobot's side only with gradient checkpointing")
    p.add_argument("--steps", type=int, default=8, help="timed steps per batch size (after 3 warm-up steps)")
    p.add_argument("--prompt", type=int, default=28, help="prompt tokens (lerobot: its tokenizer_max_length)")
    p.add_argument("--preset", choices=["full", "tiny"], default="full")
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", action="store_true", help="torch.compile lerodoc's model (lerobot: its default)")
    p.add_argument("--lerobot-compile-mode", default=None,
                   help="lerobot's side with PI05Config(compile_model=True, compile_mode=MODE); its own default "
                        "mode is max-autotune (default: lerobot's default compile_model=False, eager)")
    p.add_argument("--gradient-checkpointing", action="store_true", help="on both sides (default: off, as lerobot)")
    p.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    p.add_argument("--site", default="/tmp/site", help="where the carried wheels were installed (lerobot's side)")
    p.add_argument("--torchao-site", default="/tmp/site-torchao",
                   help="where torchao's carried wheel was installed (lerodoc's side, --float8)")
    p.add_argument("--lerobot-python", default=sys.executable, help="the interpreter of lerobot's side")
    p.add_argument("--budget", type=float, default=520,
                   help="seconds for the whole run; each side still to come keeps --reserve s of them")
    p.add_argument("--reserve", type=float, default=RESERVE, help="seconds kept for each side still to run")
    p.add_argument("--no-expandable-segments", action="store_true",
                   help="leave PYTORCH_CUDA_ALLOC_CONF alone (default: expandable_segments:True on both sides, as "
                        "lerodoc's trainer sets it, unless the environment sets it)")
    p.add_argument("--commit", default=None, help="the git commit to record (default: git rev-parse HEAD)")
    p.add_argument("--out", default="train_vs_lerobot.json")
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)       # internal: run one side, write --out
    p.add_argument("--side-float8", default=None, help=argparse.SUPPRESS)  # internal: lerodoc's float8 recipe
    return p


# ------------------------------------------------------------------------------------------------------------
# One side, in its own process


def run_side(args) -> None:
    import torch

    from bench.pi05_step import H200_BF16_DENSE, run_batches, synthetic_batch, train_step
    from lerodoc.pi05.model import flops_per_sample
    from lerodoc.pi05.presets import PRESETS

    started = time.perf_counter()
    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device(args.device)
    config = PRESETS[args.preset]()
    flops = flops_per_sample(config, args.prompt, cameras=SHOWN)
    cuda = device.type == "cuda"
    result = {"side": args.side, "preset": args.preset, "device": torch.cuda.get_device_name() if cuda else "cpu",
              "torch": torch.__version__, "prompt": args.prompt, "cameras": CAMERAS, "cameras_shown": SHOWN,
              "action_horizon": config.action_horizon, "action_dim": config.action_dim, "clip": CLIP, "lr": LR,
              "flops_per_sample": flops, "peak_flops": H200_BF16_DENSE if cuda else None,
              "gradient_checkpointing": args.gradient_checkpointing,
              "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), "runs": []}

    def save():
        Path(args.out).write_text(json.dumps(result, indent=2))

    losses: dict[int, list] = {}
    if args.side == "lerodoc":
        from lerodoc.pi05.model import PI05
        from lerodoc.pi05.train import clip_and_step

        result["setup"] = ("PI05 fp32 master weights, bf16 autocast, fused AdamW with the clip fused in"
                           + ", compile_layers (torch.compile per layer)" * args.compile
                           + (f", torchao float8 training ({args.side_float8}) of {FLOAT8_LAYERS}"
                              if args.side_float8 else ""))
        result["import_s"] = time.perf_counter() - started
        t0 = time.perf_counter()
        torch.manual_seed(0)
        with device:
            model = PI05(config)
        if args.gradient_checkpointing:
            if not hasattr(model, "gradient_checkpointing"):
                raise SystemExit("this lerodoc's PI05 has no gradient_checkpointing")
            model.gradient_checkpointing = True
        if args.side_float8:   # as the trainer converts (RunConfig.float8)
            import torchao
            result.update(torchao=torchao.__version__, float8=args.side_float8,
                          float8_linears=model.convert_float8(args.side_float8))
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01, fused=True)
        if args.compile:   # as the trainer compiles (RunConfig.compile_scope="layers")
            model.compile_layers()
        result.update(params=model.num_params(), trainable_params=sum(p.numel() for p in params),
                      compile=args.compile)

        def make_step(batch_size):
            batch = synthetic_batch(config, batch_size, args.prompt, device)
            return train_step(lambda: model(**batch), params, optimizer, device.type, CLIP, clip_and_step=clip_and_step,
                              losses=losses.setdefault(batch_size, []))
    else:
        import lerobot
        import transformers

        from bench.lerobot_pi05 import build_policy, camera_keys, policy_batch

        cameras = camera_keys(CAMERAS)
        result.update(lerobot=lerobot.__version__, transformers=transformers.__version__,
                      lerobot_file=lerobot.__file__, import_s=time.perf_counter() - started)
        t0 = time.perf_counter()
        torch.manual_seed(0)
        compiled = dict(compile_model=True, compile_mode=args.lerobot_compile_mode) if args.lerobot_compile_mode else {}
        policy = build_policy(asdict(config), cameras, dtype="bfloat16", device=args.device, build_on_device=True,
                              tokenizer_max_length=args.prompt, gradient_checkpointing=args.gradient_checkpointing,
                              **compiled)
        policy.train()
        optimizer = policy.config.get_optimizer_preset().build(policy.get_optim_params())
        params = list(policy.parameters())
        result.update(params=sum(p.numel() for p in params),
                      trainable_params=sum(p.numel() for p in params if p.requires_grad),
                      param_dtypes=sorted({str(p.dtype) for p in params}),
                      optimizer=repr(optimizer.defaults), compile=policy.config.compile_model,
                      compile_mode=policy.config.compile_mode if policy.config.compile_model else None,
                      setup='PI05Config(dtype="bfloat16"): bf16 weights (SigLIP, projector, norms fp32), bf16 '
                            "autocast, AdamW from get_optimizer_preset(), eager attention"
                            + (f", compile_model=True (mode {args.lerobot_compile_mode})" if compiled else ""))

        def make_step(batch_size):
            batch = policy_batch(synthetic_batch(config, batch_size, args.prompt, device), cameras)
            return train_step(lambda: policy.forward(batch)[0], params, optimizer, device.type, CLIP,
                              losses=losses.setdefault(batch_size, []))

    if cuda:
        torch.cuda.synchronize()
    result["build_s"] = time.perf_counter() - t0
    print(f"[{args.side}] built in {result['build_s']:.1f} s (imports {result['import_s']:.1f} s), "
          f"{result['params'] / 1e9:.3f}B params", flush=True)
    save()

    def on_run(run):
        if losses.get(run["batch"]):   # every step's loss (warm-up included), the same seed on every side
            run["losses"] = [float(x) for x in losses[run["batch"]]]
        result["runs"].append(run)
        save()
        print(f"[{args.side}] {json.dumps(run)}", flush=True)

    batches = args.lerobot_batch if args.side == "lerobot" and args.lerobot_batch else args.batch
    run_batches(batches, make_step, args.steps, device, flops, result["peak_flops"], on_run=on_run,
                cleanup=lambda: optimizer.zero_grad(set_to_none=True))
    result["total_s"] = time.perf_counter() - started
    save()


# ------------------------------------------------------------------------------------------------------------
# The parent: both sides, then the table


def side_env(side: str, site: str, torchao_site: str, expandable: bool = True) -> dict:
    """A side's environment: lerobot's side sees the carried wheels (`site`) first, lerodoc's only torchao's
    (`torchao_site`, for --float8) beside the image's own packages."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1")
    if expandable:
        env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    path = [str(ROOT)]
    extra = site if side == "lerobot" else torchao_site
    if Path(extra).is_dir():
        path.insert(0, extra)
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def plan(args) -> list[tuple[str, str, str | None]]:
    """(name, side, float8 recipe) of each subprocess, in order; "lerobot-gc" is lerobot with its gradient
    checkpointing (--lerobot-gc-batch)."""
    runs = []
    for side in args.sides:
        if not (side == "lerodoc" and args.float8_only) and not (side == "lerobot" and args.lerobot_gc_only):
            runs.append((side, side, None))
        if side == "lerodoc":
            runs += [(f"lerodoc-float8-{recipe}", side, recipe) for recipe in args.float8]
        if side == "lerobot" and args.lerobot_gc_batch:
            runs.append(("lerobot-gc", side, None))
    return runs


def child_args(args, side: str, out: Path, float8: str | None = None, name: str | None = None) -> list[str]:
    python = args.lerobot_python if side == "lerobot" else sys.executable
    gc = name == "lerobot-gc"
    batches = args.lerobot_batch if side == "lerobot" and args.lerobot_batch else args.batch
    batches = (args.lerobot_gc_batch if gc else args.float8_batch if float8 and args.float8_batch else batches)
    cmd = [python, "-m", "bench.train_vs_lerobot", "--side", side, "--out", str(out), "--preset", args.preset,
           "--device", args.device, "--steps", str(args.steps), "--prompt", str(args.prompt),
           "--batch", *map(str, batches)]
    if args.compile:
        cmd.append("--compile")
    if args.lerobot_compile_mode:
        cmd += ["--lerobot-compile-mode", args.lerobot_compile_mode]
    if args.gradient_checkpointing or gc:
        cmd.append("--gradient-checkpointing")
    if float8:
        cmd += ["--side-float8", float8]
    return cmd


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(sides: dict) -> list[str]:
    lines = [f"{'side':<24} {'batch':>5} {'step s':>8} {'samples/s':>10} {'peak GiB':>9} {'MFU':>6} "
             f"{'synced samples/s':>17}"]
    for name, result in sides.items():
        for run in result.get("runs", []):
            if "step_s" in run:
                lines.append(f"{name:<24} {run['batch']:>5} {run['step_s']:>8.3f} {run['samples_per_s']:>10.2f} "
                             f"{fmt(run['peak_gib'], '.1f'):>9} {fmt(run['mfu'], '.1%'):>6} "
                             f"{fmt(run.get('samples_per_s_synced'), '.2f'):>17}")
            else:
                lines.append(f"{name:<24} {run['batch']:>5} {'out of memory' if run.get('oom') else run['error']}")
        if result.get("failed"):
            lines.append(f"{name:<24} failed: {result['failed']}")
    return lines


def speeds(result: dict) -> dict[int, float]:
    return {r["batch"]: r["samples_per_s"] for r in result.get("runs", []) if "samples_per_s" in r}


def ratios(sides: dict, ours: str = "lerodoc") -> dict[int, float]:
    """lerodoc / lerobot samples/s at each batch size both sides ran."""
    mine, theirs = speeds(sides.get(ours, {})), speeds(sides.get("lerobot", {}))
    return {b: mine[b] / theirs[b] for b in mine if b in theirs}


def comparisons(sides: dict) -> list[dict]:
    """The labelled ratios: each lerodoc run's best batch against lerobot's best batch (best vs best), and the
    same batch size on both sides. lerobot encodes the camera that no sample shows (3 x 256 image tokens against
    lerodoc's 2 x 256): the FLOPs counted for MFU are the work both must do, the same for both."""
    out = []
    theirs = speeds(sides.get("lerobot", {}))
    lerobots = [(n, b, v) for n, r in sides.items() if n.startswith("lerobot") for b, v in speeds(r).items()]
    for name, result in sides.items():
        if name.startswith("lerobot"):
            continue
        mine = speeds(result)
        if mine and lerobots:
            b_ours = max(mine, key=mine.get)
            n_theirs, b_theirs, v_theirs = max(lerobots, key=lambda x: x[2])
            out.append({"label": f"best vs best: {name} at its best batch measured ({b_ours}) / lerobot at its best "
                                 f"measured ({n_theirs}, batch {b_theirs}), both as configured above, same call",
                        "ours": name, "batch_ours": b_ours, "lerobot_run": n_theirs, "batch_lerobot": b_theirs,
                        "samples_per_s_ours": mine[b_ours], "samples_per_s_lerobot": v_theirs,
                        "ratio": mine[b_ours] / v_theirs})
        for b, r in ratios(sides, name).items():
            out.append({"label": f"same batch {b}: {name} / lerobot (lerobot also encodes the camera no sample "
                                 "shows)", "ours": name, "batch_ours": b, "batch_lerobot": b,
                        "samples_per_s_ours": mine[b], "samples_per_s_lerobot": theirs[b], "ratio": r})
    return out


def provenance(args) -> dict:
    import datetime
    import platform

    from bench.results import git_commit
    return {"git_commit": args.commit or git_commit(), "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python -m bench.train_vs_lerobot " + " ".join(sys.argv[1:]),
            "note": "each side's torch, device, lerobot and transformers versions are in its own entry"}


def main() -> None:
    args = parser().parse_args()
    if args.side:
        run_side(args)
        sys.stdout.flush()
        os._exit(0)      # all is saved: skip the interpreter's teardown (compile workers, CUDA context)
    if args.device.startswith("cuda") and "lerobot" in args.sides and not Path(args.site).is_dir():
        print(f"warning: {args.site} does not exist: lerobot's side uses {args.lerobot_python}'s own packages",
              flush=True)
    sides, failures = {}, []
    deadline = time.perf_counter() + args.budget
    runs = plan(args)
    summary = {"provenance": provenance(args), "sides": sides,
               "args": {k: v for k, v in vars(args).items() if k not in ("side", "side_float8")}}
    with tempfile.TemporaryDirectory(prefix="train_vs_lerobot-") as tmp:
        for i, (name, side, float8) in enumerate(runs):
            out = Path(tmp) / f"{name}.json"
            started = time.perf_counter()
            timeout = max(60.0, deadline - started - args.reserve * (len(runs) - 1 - i))
            cmd = child_args(args, side, out, float8, name)
            print(f"=== {name} (at most {timeout:.0f} s): {' '.join(cmd)}", flush=True)
            try:
                proc = subprocess.run(cmd, cwd=ROOT, env=side_env(side, args.site, args.torchao_site,
                                                                   not args.no_expandable_segments),
                                      timeout=timeout)
                failed = f"exit status {proc.returncode}" if proc.returncode else None
            except subprocess.TimeoutExpired:
                failed = f"stopped after {timeout:.0f} s (--budget)"
            result = json.loads(out.read_text()) if out.exists() else {"side": side, "runs": []}
            result["wall_s"] = time.perf_counter() - started
            if failed and "total_s" in result:
                result["note"] = f"{failed} after it had saved every result"
            elif failed:
                result["failed"] = failed
                failures.append(name)
            sides[name] = result
            summary["comparisons"] = comparisons(sides)
            summary["ratio_samples_per_s"] = {str(b): r for b, r in ratios(sides).items()}
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(summary, indent=2))   # after each side: a cut call keeps them
    print()
    for name, result in sides.items():
        print(f"{name}: {result.get('setup', '?')}; {fmt(result.get('params') and result['params'] / 1e9, '.3f')}B "
              f"params, build {fmt(result.get('build_s'), '.1f')} s, side total {result['wall_s']:.0f} s")
    print(f"same FLOPs per sample on both sides: {sides[next(iter(sides))].get('flops_per_sample', 0) / 1e12:.2f} "
          f"TFLOP ({SHOWN} cameras, prompt {args.prompt}); MFU against 989.4 TFLOP/s")
    print("\n".join(table(sides)))
    for c in summary.get("comparisons", []):
        print(f"{c['ratio']:.2f}x  {c['label']}: {c['samples_per_s_ours']:.2f} / {c['samples_per_s_lerobot']:.2f}")
    print(f"wrote {args.out}")
    if failures:
        sys.exit(f"failed: {', '.join(failures)}")


if __name__ == "__main__":
    main()
