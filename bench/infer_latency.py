"""bench/infer_latency: one observation in, one action chunk out, lerodoc's Policy.predict against lerobot 0.6.1's
select_action on the policy lerodoc exports, same GPU, same call.

On the device (nvidia-h200), with carry [".whl"] (bench/train_vs_lerobot.py's wheels), from the repository root:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && PYTHONUNBUFFERED=1 python3 -m bench.infer_latency --out $OUT/infer_latency.json

1. A checkpoint as `lerodoc train pi05` writes it (trainer.json, model.safetensors in lerobot's layout, and its
   lerobot/ policy folder from lerodoc.pi05.export.checkpoint_policy), for the full preset with its seeded random
   initialisation: 2 cameras (224x224), a 14-dim state in the prompt, 14-dim actions, horizon 50, 10 flow steps,
   a SentencePiece tokenizer trained here (PaliGemma's cannot be downloaded on the device).
2. lerodoc (its own process): `Policy(model, ...)`, fp32 weights as Policy.load gives them, then `predict(images,
   state, [task])` for batch 1: raw uint8 images and raw state in, raw actions out (CPU numpy). Eager, then with
   `PI05.compile_sampling(**options)` for each --modes entry (the prefix pass and one denoising step compiled).
3. lerobot (its own process, the carried wheels first on the path): PI05Policy.from_pretrained(CHECKPOINT/lerobot)
   and make_pre_post_processors(..., pretrained_path=...) as lerobot-record loads them (fp32, as exported;
   compile_model False, lerobot's default), then per chunk: policy.reset(), post(select_action(pre(observation)))
   -- select_action computes the whole chunk on its first call after a reset and returns its first action.

Per row: median, min and p90 of --repeats calls after --warmup calls (wall clock; each call ends on the host with
the result, so it includes the device sync), ms per action chunk. The model-only time (lerodoc sample_actions,
lerobot predict_action_chunk on the preprocessed batch, CUDA-synchronised) is recorded beside it. Both sides also
predict with the same fixed noise once; the largest raw-unit difference between their chunks is recorded, to
show that the two time the same policy.

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
                   help="comma-separated torch.compile modes for lerodoc's compiled rows ('none': no compiled row)")
    p.add_argument("--site", default="/tmp/site", help="where the carried wheels were installed (lerobot's side)")
    p.add_argument("--lerobot-python", default=sys.executable)
    p.add_argument("--budget", type=float, default=540, help="seconds for the whole run")
    p.add_argument("--commit", default=None)
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", default="infer_latency.json")
    p.add_argument("--part", choices=["prepare", "lerodoc", "lerobot"], help=argparse.SUPPRESS)
    return p


def timed(call, repeats: int, warmup: int, sync=None) -> dict:
    """Median, min and p90 ms of `call` over `repeats` calls after `warmup` calls."""
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
    return {"median_ms": statistics.median(times), "min_ms": times[0],
            "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))], "repeats": repeats, "warmup": warmup}


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
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else None
    result.update(load_s=time.perf_counter() - t0, torch=torch.__version__,
                  device=torch.cuda.get_device_name() if cuda else "cpu",
                  dtype=str(next(policy.model.parameters()).dtype),
                  tf32=torch.backends.cuda.matmul.allow_tf32, rows=[])
    save()
    images, state, noise = inputs(work)
    fixed = policy.predict(images, state, [TASK], noise=noise.to(args.device))
    model_inputs = policy.inputs(images, state, [TASK])
    result["fixed_noise_actions"] = fixed.tolist()

    def row(name: str, extra: dict) -> None:
        t = time.perf_counter()
        chunk = timed(lambda: policy.predict(images, state, [TASK]), args.repeats, args.warmup)
        model = timed(lambda: policy.model.sample_actions(**model_inputs), args.repeats, 1, sync)
        again = policy.predict(images, state, [TASK], noise=noise.to(args.device))
        result["rows"].append({"name": name, **extra, "predict": chunk, "sample_actions": model,
                               "seconds": time.perf_counter() - t,
                               "max_abs_diff_vs_eager_fixed_noise": float(abs(again - fixed).max())})
        save()
        print(f"[lerodoc] {name}: predict {chunk['median_ms']:.1f} ms, sample_actions {model['median_ms']:.1f} ms "
              f"({time.perf_counter() - t:.0f} s)", flush=True)

    row("lerodoc eager", {"compile": None})
    for mode in [m for m in args.modes.split(",") if m and m != "none"]:
        if time.perf_counter() - STARTED > args.budget - 100:   # a compile and its rows take up to ~100 s
            result["rows"].append({"name": f"lerodoc compiled ({mode})", "skipped": "budget"})
            continue
        torch.compiler.reset()
        policy.model.compile_sampling(mode=mode, dynamic=False)
        row(f"lerodoc compiled ({mode})", {"compile": mode})
    policy.model.sampling_fns = None


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

    for name in ("prepare", "lerodoc", "lerobot"):
        out = work / f"{name}-result.json"
        python = args.lerobot_python if name == "lerobot" else sys.executable
        cmd = [python, "-m", "bench.infer_latency", "--part", name, "--work", str(work), "--out", str(out),
               "--preset", args.preset, "--device", args.device, "--repeats", str(args.repeats),
               "--warmup", str(args.warmup), "--modes", args.modes,
               "--budget", str(max(60.0, args.budget - (time.perf_counter() - started) - LEROBOT_RESERVE))]
        left = args.budget - (time.perf_counter() - started)
        print(f"=== {name} ({left:.0f} s left)", flush=True)
        try:   # lerodoc's parts leave LEROBOT_RESERVE seconds for lerobot's
            proc = subprocess.run(cmd, cwd=ROOT, env=env_for(name, args.site),
                                  timeout=max(30.0, left - (LEROBOT_RESERVE if name != "lerobot" else 0)))
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
    rows = []
    for row in summary["parts"].get("lerodoc", {}).get("rows", []):
        if "predict" in row:
            rows.append((row["name"], row["predict"]["median_ms"], row["sample_actions"]["median_ms"]))
    for row in summary["parts"].get("lerobot", {}).get("rows", []):
        rows.append((row["name"], row["select_action"]["median_ms"], row["predict_action_chunk"]["median_ms"]))
    summary["table"] = [{"name": n, "chunk_ms": c, "model_ms": m} for n, c, m in rows]
    write()
    print(f"{'':<44} {'chunk ms':>9} {'model ms':>9}")
    for n, c, m in rows:
        print(f"{n:<44} {c:>9.1f} {m:>9.1f}")
    if "fixed_noise_max_abs_diff" in summary:
        print(f"same noise, largest raw action difference lerodoc vs lerobot: {summary['fixed_noise_max_abs_diff']:.3g}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
