"""Run folder and checkpoints of `lerodoc train pi05`.

    RUN/config.json  norm_stats.json  metrics.jsonl  loss.png
    RUN/checkpoints/step-000100/
        model.safetensors      the trained weights, lerobot PI05Policy layout (lerodoc.pi05.weights)
        ema.safetensors        with --ema
        optimizer.pt           AdamW state (full, unsharded)
        trainer.json           step, config, norm stats: everything to resume or to deploy
        lerobot/               the lerobot PI05 policy directory of this checkpoint (lerodoc.pi05.export)

A checkpoint is written through `staging.staged_output` (a hidden sibling, removed on any failure, renamed when
complete), so an interrupted save never looks done; the oldest complete ones beyond `keep` are then removed.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict, set_model_state_dict,
                                                     set_optimizer_state_dict)

from lerodoc.errors import LerodocError
from lerodoc.formats.jsonl import write_json, write_text
from lerodoc.pi05 import export, weights as layout
from lerodoc.pi05.runs import complete, path_of
from lerodoc.promote.staging import staged_output

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save(output: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, ema, setup,
         keep: int) -> Path:
    """Gather the full state on every rank (FSDP needs all of them), write it from rank 0."""
    state = get_model_state_dict(model, options=FULL)
    optim = get_optimizer_state_dict(model, optimizer, options=FULL)
    final = path_of(output, step)
    if _is_main():
        with staged_output(final, force=True, own=True) as partial:   # removed on any failure; renamed to `final` when done
            config = setup.config
            save_file(layout.to_lerobot({k: v.contiguous() for k, v in state.items()}, config),
                      str(partial / "model.safetensors"))
            if ema is not None:
                save_file({k: v.detach().cpu().contiguous() for k, v in ema.state_dict().items()},
                          str(partial / "ema.safetensors"))
            torch.save(optim, partial / "optimizer.pt")
            trainer = {"step": step, "run": setup.run.to_json(), "model": asdict(config),
                       "norm_stats": json.loads((output / "norm_stats.json").read_text())}
            write_json(partial / "trainer.json", trainer)
            export.checkpoint_policy(partial, output, trainer)   # partial/lerobot: this checkpoint's lerobot policy
        for _, old in complete(output)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final


def load_latest(output: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, ema,
                device: torch.device) -> int:
    """Restore the newest complete checkpoint on every rank; returns its step."""
    found = complete(output)
    if not found:
        raise LerodocError("has no complete checkpoint to resume from", file=output / "checkpoints",
                           hint="start a new run (without --resume) in a new folder")
    step, folder = found[-1]
    state = layout.from_lerobot(load_file(str(folder / "model.safetensors")))
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
    optim = torch.load(folder / "optimizer.pt", map_location="cpu", mmap=True, weights_only=True)
    set_optimizer_state_dict(model, optimizer, optim, options=StateDictOptions(full_state_dict=True))
    if ema is not None:
        ema.load_state_dict({k: v.to(device) for k, v in load_file(str(folder / "ema.safetensors")).items()})
    return step


def truncate_metrics(output: Path, step: int) -> None:
    """Drop metrics.jsonl rows past `step`: the part of an interrupted run that the resume repeats."""
    path = output / "metrics.jsonl"
    if not path.is_file():
        return
    rows = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
    write_text(path, "".join(row + "\n" for row in rows))


def write_norm_stats(output: Path, dataset, data) -> None:
    """The quantile stats the run normalised with (and openpi's field names), for deployment."""
    keys = [("actions", data.action_key)] + ([("state", data.state_key)] if data.state_key else [])
    stats = {}
    for name, key in keys:
        s = dataset.stats[key]
        stats[name] = {"feature": key} | {k: np.ravel(s[k]).tolist() for k in ("mean", "std", "q01", "q99") if k in s}
    write_json(output / "norm_stats.json", {"norm_stats": stats})
