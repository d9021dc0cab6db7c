"""bench/infer_latency: one observation in, one action chunk out, lerodoc's Policy.predict (fp32 and bf16 weights,
eager, compiled, and replayed as one CUDA graph) against lerobot 0.6.1's select_action on the policy lerodoc
exports, same GPU, same call.

On the device (nvidia-h200), with carry [".whl"] (a PyAV wheel, for lerodoc's video decoding; plus
bench/train_vs_lerobot.py's wheels for lerobot's side), from the repository root, the commit read here with
`git rev-parse HEAD` (the device's copy of the tree has no .git):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 -m bench.infer_latency --commit COMMIT --out $OUT/infer_latency.json

(`--skip-lerobot` when only PyAV is carried.)

1. A checkpoint as `lerodoc train pi05` writes it (trainer.json, model.safetensors in lerobot's layout, and its
   lerobot/ policy folder from lerodoc.pi05.export.checkpoint_policy), for the full preset with its seeded
   random initialisation, every matrix drawn with unit gain (std fan_in^-1/2) and so the adaRMS gates open
   (init_weights' small weights and closed gates leave the actions almost blind to the prefix, and then the
   equality checks below would test little but the expert): 2 cameras (224x224), a 14-dim state in the
   prompt, 14-dim actions, horizon 50, 10 flow steps, a SentencePiece tokenizer trained here (PaliGemma's
   cannot be downloaded on the device).
2. lerodoc (its own process): `Policy.load`, then `predict(images, state, [task])` for batch 1: raw uint8 images
   and raw state in, raw actions out (CPU numpy). Rows: fp32 weights as Policy.load gives them, eager; then the
   weights cast to bf16 (`policy.model.to(torch.bfloat16)`): eager (PI05.euler_fused), and eager with the steps
   unfused (`fused_sampling = False`: prefix_cache + denoise_velocity per step, calls 4-8's path); `PI05.capture_sampling` (the whole chunk,
   prefix and 10 Euler steps, recorded as one CUDA graph of the eager kernels); and for each --modes entry,
   `PI05.compile_sampling(mode=...)` alone and then with capture_sampling over the compiled parts.
3. lerobot (its own process, the carried wheels first on the path): PI05Policy.from_pretrained(CHECKPOINT/lerobot)
   and make_pre_post_processors(..., pretrained_path=...) as lerobot-record loads them (fp32, as exported;
   compile_model False, lerobot's default), then per chunk: policy.reset(), post(select_action(pre(observation)))
   -- select_action computes the whole chunk on its first call after a reset and returns its first action.

Per row: median, p10, p90 and min of --repeats calls after --warmup calls (wall clock; each call ends on the host
with the result, so it includes the device sync), ms per action chunk. The model-only time (lerodoc
sample_actions, lerobot predict_action_chunk on the preprocessed batch, CUDA-synchronised) is recorded beside it,
and on CUDA one more sample_actions under torch.profiler: the device's busy time against the wall time. Same
noise everywhere: each lerodoc row's sample_actions output (normalised actions) is compared with the bf16
eager row's and the fp32 eager row's (largest absolute difference and relative error ||a - b|| / ||b||); a bf16
row passes when its relative error against bf16 eager is at most --tolerance. The prefix's weight in the actions
(another image, same noise) is recorded beside it, so a comparison that could not fail shows. Both sides also
predict with the same fixed noise once in fp32; the largest raw-unit difference between their chunks is
recorded, to show that the two time the same policy.

CPU check (tiny preset; lerobot's side in the reference venv):

    python -m bench.infer_latency --preset tiny --device cpu --repeats 2 --warmup 1 --modes none --lerobot-python ~/.cache/lerodoc/lerobot-0.6.1/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAMERAS = ("observation.images.cam_high", "observation.images.cam_wrist")
STATE_DIM = ACTION_DIM = 14
TASK = "pick up the cube"
LEROBOT_RESERVE = 60   # seconds: lerobot's part loads and times in ~25 s on an H200


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=["full", "tiny"], default="full")
    p.add_argument("--device", default="cuda")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--modes", default="default",
                   help="comma-separated torch.compile modes for lerodoc's compiled rows ('none': no compiled row); "
                        "max-autotune-no-cudagraphs autotuned for over 4 minutes on the full preset (call 6)")
    p.add_argument("--tolerance", type=float, default=2e-2,
                   help="largest relative error of a bf16 row's actions against bf16 eager's, same noise")
    p.add_argument("--skip-lerobot", action="store_true", help="time lerodoc only (no lerobot wheels carried)")
    p.add_argument("--site", default="/tmp/site", help="where the carried wheels were installed (lerobot's side)")
    p.add_argument("--lerobot-python", default=sys.executable)
    p.add_argument("--budget", type=float, default=540, help="seconds for the whole run")
    p.add_argument("--commit", default=None)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", default="infer_latency.json")
    p.add_argument("--part", choices=["prepare", "lerodoc", "lerobot"], help=argparse.SUPPRESS)
    return p


def timed(call, repeats: int, warmup: int, sync=None) -> dict:
    """Median, p10, p90 and min ms of `call` over `repeats` calls after `warmup` calls."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        call()
        if sync:
            sync()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return {"median_ms": statistics.median(times), "p10_ms": times[int(0.1 * len(times))], "min_ms": times[0],
            "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))], "repeats": repeats, "warmup": warmup}


def profile_chunk(call, sync) -> dict:
    """One call under torch.profiler: its wall time there, and how many CUDA kernels (and copies) it ran and for
    how long in all. Kernel time far under the wall time means the host (launches, dispatch) sets the pace."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    call()
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        call()
        sync()
        wall = (time.perf_counter() - t0) * 1e3
    device = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"wall_ms_under_profiler": wall, "device_ops": len(device),
            "device_busy_ms": sum(e.time_range.elapsed_us() for e in device) / 1e3}


def observation(size: int, q01, q99, seed: int = 0):
    """One raw observation: uint8 images per camera (1, S, S, 3), a state (1, 14) inside q01..q99."""
    import numpy as np
    g = np.random.default_rng(seed)
    images = {c: g.integers(0, 256, (1, size, size, 3), dtype=np.uint8) for c in CAMERAS}
    state = (np.asarray(q01) + (np.asarray(q99) - np.asarray(q01)) * g.uniform(0, 1, (1, len(q01)))).astype(np.float32)
    return images, state


# ------------------------------------------------------------------------------------------------ parts


def prepare(args, work: Path) -> None:
    """The checkpoint (and its lerobot/ folder) and the shared inputs (images, state, noise) under `work`."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from lerodoc.formats.jsonl import write_json
    from lerodoc.pi05 import export
    from lerodoc.pi05.data import DataSpec, Tokenizer, pad_tokens, prompt_text
    from lerodoc.pi05.model import PI05
    from lerodoc.pi05.presets import PRESETS
    from lerodoc.pi05.train import RunConfig
    from lerodoc.pi05.weights import to_lerobot
    from tests.fixtures.tokenizer import train_tokenizer

    t0 = time.perf_counter()
    run_folder, ckpt = work / "run", work / "run/checkpoints/step-000000"
    ckpt.mkdir(parents=True)
    tok_path = train_tokenizer(work / "tokenizer", tasks=(TASK,))
    config = PRESETS[args.preset](action_dim=ACTION_DIM, **({"vocab_size": Tokenizer(tok_path).vocab_size}
                                                             if args.preset == "tiny" else {}))
    rng = np.random.default_rng(1)
    q01 = rng.uniform(-2, -1, STATE_DIM).round(3)
    q99 = rng.uniform(1, 2, STATE_DIM).round(3)
    stats = {name: {"feature": key, "mean": [0.0] * STATE_DIM, "std": [1.0] * STATE_DIM, "q01": q01.tolist(),
                    "q99": q99.tolist()} for name, key in (("state", "observation.state"), ("actions", "action"))}
    images, state = observation(config.vision.image_size, q01, q99)
    from lerodoc.pi05.data import normalise
    text = prompt_text(TASK, normalise(state[0], q01.astype(np.float32), q99.astype(np.float32)))
    tokenizer = Tokenizer(tok_path)
    longest = int(pad_tokens(tokenizer, [text], 4096)[1].sum())
    data = DataSpec(action_key="action", state_key="observation.state", cameras=CAMERAS,
                    action_horizon=config.action_horizon, image_size=config.vision.image_size, state_in_prompt=True,
                    max_token_len=-(-longest // 8) * 8)
    run = RunConfig(dataset="synthetic", output=str(run_folder), tokenizer=str(tok_path), preset=args.preset, data=data)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = PI05(config)
    with torch.no_grad():   # unit-gain matrices, the adaRMS gates open: the actions depend on the prefix
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, p[0].numel() ** -0.5)
    save_file({k: v.detach().cpu().contiguous() for k, v in to_lerobot(model.state_dict(), config).items()},
              str(ckpt / "model.safetensors"))
    del model
    trainer = {"step": 0, "run": run.to_json(), "model": asdict(config), "norm_stats": {"norm_stats": stats}}
    write_json(ckpt / "trainer.json", trainer)
    export.checkpoint_policy(ckpt, run_folder, trainer, device="cuda" if args.device.startswith("cuda") else "cpu")
    noise = torch.randn(1, config.action_horizon, config.max_action_dim, generator=torch.Generator().manual_seed(0))
    save_file({**{f"image.{c}": torch.from_numpy(v) for c, v in images.items()}, "state": torch.from_numpy(state),
               "noise": noise}, str(work / "inputs.safetensors"))
    write_json(work / "prepare.json", {"prepare_s": time.perf_counter() - t0, "prompt_tokens": longest,
                                       "max_token_len": data.max_token_len, "checkpoint": str(ckpt)})


def inputs(work: Path):
    from safetensors.torch import load_file
    x = load_file(str(work / "inputs.safetensors"))
    images = {k[len("image."):]: v.numpy() for k, v in x.items() if k.startswith("image.")}
    return images, x["state"].numpy(), x["noise"]


def run_lerodoc(args, work: Path, result: dict, save) -> None:
    import torch

    from lerodoc.pi05.policy import Policy
    ckpt = work / "run/checkpoints/step-000000"
    t0 = time.perf_counter()
    policy = Policy.load(ckpt, device=args.device)
    model = policy.model
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else None
    result.update(load_s=time.perf_counter() - t0, torch=torch.__version__, cuda=torch.version.cuda,
                  device=torch.cuda.get_device_name() if cuda else "cpu",
                  tf32=torch.backends.cuda.matmul.allow_tf32, rows=[])
    save()
    images, state, noise = inputs(work)
    noise = noise.to(args.device)
    result["fixed_noise_actions"] = policy.predict(images, state, [TASK], noise=noise).tolist()
    model_inputs = policy.inputs(images, state, [TASK])
    flipped = {c: v[:, :, ::-1].copy() for c, v in images.items()}   # another image: the prefix's weight
    references = {}

    def actions(use: dict) -> torch.Tensor:
        return model.sample_actions(**use, noise=noise).float()

    def compare(ours: torch.Tensor, name: str) -> dict:
        ref = references[name]
        return {"max_abs": float((ours - ref).abs().max()), "relative": float((ours - ref).norm() / ref.norm())}

    def row(name: str, extra: dict) -> None:
        t, began = time.perf_counter(), time.time()
        chunk = timed(lambda: policy.predict(images, state, [TASK]), args.repeats, args.warmup)
        alone = timed(lambda: model.sample_actions(**model_inputs), args.repeats, 1, sync)
        if cuda:
            try:
                extra = dict(extra, profile=profile_chunk(lambda: model.sample_actions(**model_inputs), sync))
            except Exception as e:   # the profiler is a diagnosis: its failure must not cost the row
                extra = dict(extra, profile_error=f"{type(e).__name__}: {e}")
        ours = actions(model_inputs)
        dtype = str(next(model.parameters()).dtype)
        check = {"vs_fp32_eager": compare(ours, "fp32")}
        if "bf16" in references:
            check["vs_bf16_eager"] = compare(ours, "bf16")
            check["within_tolerance"] = check["vs_bf16_eager"]["relative"] <= args.tolerance
        result["rows"].append({"name": name, "dtype": dtype, **extra, "predict": chunk, "sample_actions": alone,
                               "same_noise": check, "seconds": time.perf_counter() - t,
                               "unix_time": [began, time.time()]})
        save()
        agree = f", vs bf16 eager {check['vs_bf16_eager']['relative']:.2g}" if "vs_bf16_eager" in check else ""
        if "profile" in extra:
            prof = extra["profile"]
            agree += (f"; profiled: {prof['device_ops']} device ops, busy {prof['device_busy_ms']:.1f} of "
                      f"{prof['wall_ms_under_profiler']:.1f} ms")
        print(f"[lerodoc] {name}: predict {chunk['median_ms']:.1f} ms (p10 {chunk['p10_ms']:.1f}, p90 "
              f"{chunk['p90_ms']:.1f}), sample_actions {alone['median_ms']:.1f} ms{agree} "
              f"({time.perf_counter() - t:.0f} s)", flush=True)

    def budget_left(need: float, name: str) -> bool:
        if time.perf_counter() - STARTED <= args.budget - need:
            return True
        result["rows"].append({"name": name, "skipped": "budget"})
        print(f"[lerodoc] {name}: skipped (budget)", flush=True)
        return False

    references["fp32"] = actions(model_inputs)
    row("fp32 eager", {"compile": None, "cuda_graph": False, "steps": "euler_fused"})
    model.to(torch.bfloat16)
    references["bf16"] = actions(model_inputs)
    other = actions(policy.inputs(flipped, state, [TASK]))
    result["prefix_weight"] = {"flipped_images_vs_bf16_eager": {
        "max_abs": float((other - references["bf16"]).abs().max()),
        "relative": float((other - references["bf16"]).norm() / references["bf16"].norm())}}
    row("bf16 eager", {"compile": None, "cuda_graph": False, "steps": "euler_fused"})
    model.fused_sampling = False   # the steps as prefix_cache + denoise_velocity run them (calls 4-8's eager path)
    row("bf16 eager, steps unfused", {"compile": None, "cuda_graph": False, "steps": "denoise_velocity"})
    model.fused_sampling = True
    if cuda:
        t = time.perf_counter()
        model.capture_sampling(**model_inputs)
        row("bf16 eager kernels, one CUDA graph", {"compile": None, "cuda_graph": True,
                                                    "capture_s": time.perf_counter() - t})
        model.sampling_graph = None
    for mode in [m for m in args.modes.split(",") if m and m != "none"]:
        if not budget_left(150 if "autotune" in mode else 100, f"bf16 compiled ({mode})"):
            continue
        torch.compiler.reset()
        t = time.perf_counter()
        model.compile_sampling(mode=mode, dynamic=False)
        actions(model_inputs)   # compiles here
        row(f"bf16 compiled ({mode})", {"compile": mode, "cuda_graph": False, "compile_s": time.perf_counter() - t})
        if cuda:
            t = time.perf_counter()
            model.capture_sampling(**model_inputs)
            row(f"bf16 compiled ({mode}), one CUDA graph", {"compile": mode, "cuda_graph": True,
                                                            "capture_s": time.perf_counter() - t})
            model.sampling_graph = None
        model.sampling_fns = None


def run_lerobot(args, work: Path, result: dict, save) -> None:
    import lerobot
    import torch
    import transformers
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy

    folder = work / "run/checkpoints/step-000000/lerobot"
    t0 = time.perf_counter()
    config = PreTrainedConfig.from_pretrained(folder)
    config.device = args.device
    shapes = __import__("contextlib").nullcontext()
    if args.preset != "full":
        from bench.lerobot_pi05 import shapes_of
        shapes = shapes_of(json.loads((folder / "lerodoc.json").read_text())["model"])
    with shapes, torch.device(args.device):   # built on the device (lerobot alone builds in fp32 on CPU, then moves)
        policy = PI05Policy.from_pretrained(folder, config=config)
    policy.eval()
    device = {"device_processor": {"device": args.device}}
    pre, post = make_pre_post_processors(config, pretrained_path=str(folder), preprocessor_overrides=device,
                                         postprocessor_overrides=device)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else None
    result.update(load_s=time.perf_counter() - t0, torch=torch.__version__, lerobot=lerobot.__version__,
                  transformers=transformers.__version__, device=torch.cuda.get_device_name() if cuda else "cpu",
                  dtype=config.dtype, compile_model=config.compile_model,
                  param_dtypes=sorted({str(p.dtype) for p in policy.parameters()}), rows=[])
    save()
    images, state, noise = inputs(work)
    raw = {c: torch.from_numpy(v).permute(0, 3, 1, 2).float() / 255.0 for c, v in images.items()}
    raw |= {"observation.state": torch.from_numpy(state), "task": [TASK]}

    def chunk():
        policy.reset()
        with torch.no_grad():
            action = post(policy.select_action(pre(dict(raw))))
        return action.cpu()

    with torch.no_grad():
        batch = pre(dict(raw))
        fixed = post(policy.predict_action_chunk(batch, noise=noise.to(args.device))).cpu()
    result["fixed_noise_actions"] = fixed.tolist()
    t = time.perf_counter()
    first = timed(chunk, args.repeats, args.warmup)
    with torch.no_grad():
        model = timed(lambda: policy.predict_action_chunk(batch), args.repeats, 1, sync)
    result["rows"].append({"name": "lerobot select_action (eager, as exported)", "compile": None,
                           "select_action": first, "predict_action_chunk": model,
                           "seconds": time.perf_counter() - t})
    save()
    print(f"[lerobot] select_action chunk {first['median_ms']:.1f} ms, predict_action_chunk "
          f"{model['median_ms']:.1f} ms", flush=True)


STARTED = time.perf_counter()


def part(args) -> None:
    work = args.work
    result: dict = {"part": args.part}

    def save():
        Path(args.out).write_text(json.dumps(result, indent=2))

    if args.part == "prepare":
        prepare(args, work)   # writes work/prepare.json itself
        return
    if args.part == "lerodoc":
        run_lerodoc(args, work, result, save)
    else:
        run_lerobot(args, work, result, save)
    save()


# ------------------------------------------------------------------------------------------------ parent


def env_for(part_name: str, site: str) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1")
    path = [str(ROOT)]
    if part_name == "lerobot" and Path(site).is_dir():
        path.insert(0, site)
    elif os.environ.get("PYTHONPATH"):   # lerodoc's parts keep the caller's path (PyAV carried as a wheel)
        path.append(os.environ["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def main() -> None:
    args = parser().parse_args()
    if args.part:
        part(args)
        sys.stdout.flush()
        os._exit(0)
    import datetime
    import platform

    from bench.results import git_commit
    started = time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-infer-"))
    summary = {"provenance": {"git_commit": args.commit or git_commit(), "python": platform.python_version(),
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "command": "python -m bench.infer_latency " + " ".join(sys.argv[1:])},
               "setup": {"preset": args.preset, "batch": 1, "cameras": len(CAMERAS), "state_dim": STATE_DIM,
                         "action_dim": ACTION_DIM, "flow_steps": 10, "task": TASK}, "parts": {}}

    def write():
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(summary, indent=2))

    reserve = 0 if args.skip_lerobot else LEROBOT_RESERVE
    for name in ("prepare", "lerodoc") + (() if args.skip_lerobot else ("lerobot",)):
        out = work / f"{name}-result.json"
        python = args.lerobot_python if name == "lerobot" else sys.executable
        cmd = [python, "-m", "bench.infer_latency", "--part", name, "--work", str(work), "--out", str(out),
               "--preset", args.preset, "--device", args.device, "--repeats", str(args.repeats),
               "--warmup", str(args.warmup), "--modes", args.modes, "--tolerance", str(args.tolerance),
               "--budget", str(max(60.0, args.budget - (time.perf_counter() - started) - reserve))]
        left = args.budget - (time.perf_counter() - started)
        print(f"=== {name} ({left:.0f} s left)", flush=True)
        try:   # lerodoc's parts leave LEROBOT_RESERVE seconds for lerobot's
            proc = subprocess.run(cmd, cwd=ROOT, env=env_for(name, args.site),
                                  timeout=max(30.0, left - (reserve if name != "lerobot" else 0)))
            failed = f"exit status {proc.returncode}" if proc.returncode else None
        except subprocess.TimeoutExpired:
            failed = "stopped: budget"
        result = json.loads(out.read_text()) if out.exists() else {}
        if name == "prepare":   # its own file
            result = json.loads((work / "prepare.json").read_text()) if (work / "prepare.json").exists() else {}
        if failed:
            result["failed"] = failed
        summary["parts"][name] = result
        write()
        if name == "prepare" and failed:
            break
    import numpy as np
    ours, theirs = (summary["parts"].get(k, {}).get("fixed_noise_actions") for k in ("lerodoc", "lerobot"))
    if ours and theirs:
        summary["fixed_noise_max_abs_diff"] = float(np.abs(np.asarray(ours) - np.asarray(theirs)).max())
    ours = summary["parts"].get("lerodoc", {})
    summary["provenance"].update({k: ours.get(k) for k in ("torch", "cuda", "device")})
    table = []
    for row in ours.get("rows", []):
        if "predict" in row:
            same = row["same_noise"].get("vs_bf16_eager", {})
            table.append({"name": "lerodoc " + row["name"], "chunk_ms": row["predict"]["median_ms"],
                          "chunk_p10_ms": row["predict"]["p10_ms"], "chunk_p90_ms": row["predict"]["p90_ms"],
                          "model_ms": row["sample_actions"]["median_ms"], "vs_bf16_eager": same.get("relative"),
                          "within_tolerance": row["same_noise"].get("within_tolerance")})
    for row in summary["parts"].get("lerobot", {}).get("rows", []):
        t = row["select_action"]
        table.append({"name": row["name"], "chunk_ms": t["median_ms"], "chunk_p10_ms": t["p10_ms"],
                      "chunk_p90_ms": t["p90_ms"], "model_ms": row["predict_action_chunk"]["median_ms"]})
    summary["table"] = table
    write()
    print(f"{'':<56} {'chunk ms':>9} {'p10':>7} {'p90':>7} {'model ms':>9} {'vs bf16 eager':>14}")
    for r in table:
        same = "" if r.get("vs_bf16_eager") is None else f"{r['vs_bf16_eager']:.2g}"
        print(f"{r['name']:<56} {r['chunk_ms']:>9.1f} {r['chunk_p10_ms']:>7.1f} {r['chunk_p90_ms']:>7.1f} "
              f"{r['model_ms']:>9.1f} {same:>14}")
    if "prefix_weight" in ours:
        print(f"prefix weight (flipped images, same noise), relative: "
              f"{ours['prefix_weight']['flipped_images_vs_bf16_eager']['relative']:.3g}")
    if "fixed_noise_max_abs_diff" in summary:
        print(f"same noise, largest raw action difference lerodoc vs lerobot: {summary['fixed_noise_max_abs_diff']:.3g}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
