"""What a run feeds its model: the Setup made once before the loop, its batches (lerodoc.pi05.data) through a
DataLoader whose workers decode video, each rank's workers pinned to its own CPUs, and a batch moved to the device
as the model's inputs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.pi05.config import RunConfig
from lerodoc.pi05.data import Frames, Tokenizer, TrainingBatches
from lerodoc.pi05.distributed import Processes
from lerodoc.pi05.model import PI05Config


@dataclass
class Setup:
    """Everything the loop needs, made once before it."""
    run: RunConfig
    procs: Processes
    dataset: Dataset
    frames: Frames
    tokenizer: Tokenizer
    config: PI05Config
    weights: Path | None
    train_rows: np.ndarray | None = None   # the frames training samples from (None: all)
    val_rows: np.ndarray | None = None     # the held-out frames the held-out loss is measured on (None: no loss)


def batches_of(setup: Setup, start: int, stop: int, batch_per_device: int | None = None) -> TrainingBatches:
    run, procs = setup.run, setup.procs
    return TrainingBatches(setup.dataset, setup.frames, run.data, setup.tokenizer, seed=run.seed,
                           batch_per_device=batch_per_device or run.batch_per_device, rank=procs.rank,
                           world=procs.world, start=start, stop=stop, noise_width=setup.config.max_action_dim,
                           rows=setup.train_rows)


# seconds a step waits for its batch from the data workers before the run stops: a batch takes well under a second,
# and a worker that hangs (a decoder stuck on a damaged file) would otherwise hold the run without a word for ever
BATCH_WAIT = 600


def loader(setup: Setup, start: int, stop: int, batch_per_device: int | None = None) -> torch.utils.data.DataLoader:
    run, procs = setup.run, setup.procs
    batches = batches_of(setup, start, stop, batch_per_device)
    workers = run.workers
    cpus = rank_cpus(procs) if workers and run.pin_workers else None
    return torch.utils.data.DataLoader(batches, batch_size=None, num_workers=workers,
                                       pin_memory=procs.device.type == "cuda",
                                       prefetch_factor=4 if workers else None, persistent_workers=False,
                                       multiprocessing_context="fork" if workers else None,
                                       worker_init_fn=_Pin(cpus) if cpus else None,
                                       timeout=BATCH_WAIT if workers else 0)


def step_batches(setup: Setup, start: int, stop: int, batch_per_device: int | None = None) -> Iterator[dict]:
    """The batches of steps `start`..`stop` (`loader`'s), one a step; a LerodocError naming the step when the data
    workers give none within BATCH_WAIT s."""
    stream = iter(loader(setup, start, stop, batch_per_device))
    for step in range(start, stop):
        try:
            batch = next(stream)
        except RuntimeError as exc:
            # torch's DataLoader says so in these words (its `_get_data`), with no exception type of its own
            if not str(exc).startswith("DataLoader timed out"):
                raise
            raise LerodocError(f"no batch for step {step} came from the {setup.run.workers} data worker(s) in "
                               f"{BATCH_WAIT} s; the run stopped there",
                               hint="run again: with --resume where a checkpoint was saved, else into a new -o "
                                    "folder; where it stops again, lerodoc validate --deep decodes the first and "
                                    "last frame of each episode's videos") from None
        yield batch


def rank_cpus(procs: Processes) -> list[int] | None:
    """This rank's share of the CPUs this process may use, for its data workers, when several processes share a
    node: ranks' workers then do not compete for the same cores. None with one process per node or no affinity."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local_world <= 1 or not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    share = len(cpus) // local_world
    return cpus[procs.local_rank * share:(procs.local_rank + 1) * share] if share >= 2 else None


class _Pin:
    def __init__(self, cpus: list[int]):
        self.cpus = cpus

    def __call__(self, worker: int) -> None:
        os.sched_setaffinity(0, self.cpus)


def to_device(batch: dict, device: torch.device) -> dict:
    """Model inputs from a loader batch: uint8 images to [-1, 1] float per camera, on the device."""
    moved = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    images = moved.pop("images").permute(1, 0, 4, 2, 3)  # (cameras, B, 3, S, S)
    # every sample shows every camera the loader sends: masks of None (no mask.any() host sync in the step)
    return dict(images=[im.float() / 127.5 - 1 for im in images], image_masks=[None] * len(images),
                tokens=moved["tokens"], token_masks=moved["token_masks"], actions=moved["actions"],
                action_is_pad=moved["action_is_pad"], noise=moved["noise"], time=moved["time"],
                real_steps=moved["real_steps"])
