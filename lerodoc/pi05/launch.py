"""How many training processes a plain `lerodoc train pi05` starts, and starting them.

Three cases, decided from the environment before any process group exists:

- **Already one rank of a job.** torchrun (and torch's elastic agent under SLURM or Kubernetes) sets LOCAL_RANK for
  every process it starts: the process joins the job as it is (`distributed.start_processes`).
- **A platform that starts one process per node**, as seed 001's cluster does (TI-ONE): it sets WORLD_SIZE to the
  number of *nodes*, RANK to the node's index, MASTER_ADDR/MASTER_PORT to node 0 and GPU_NUM_PER_NODE, but no
  LOCAL_RANK. lerodoc starts `--nproc` (default GPU_NUM_PER_NODE, else every local GPU) processes on each node, in
  one static rendezvous at MASTER_ADDR:MASTER_PORT, so a multi-node job never runs one GPU per node.
- **A plain command on one host:** `--nproc` processes (default: every GPU torch sees, or one on the CPU).

Several processes are started through torch's own elastic launcher (the `torchrun` API), each running the same
run; the caller gets rank 0's result. `run_job` is what `lerodoc train pi05` calls: train (lerodoc.pi05.train) or
sweep (lerodoc.pi05.sweep) here, or in the processes it starts.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import torch
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from lerodoc import render
from lerodoc.errors import LerodocError
from lerodoc.pi05.config import RunConfig
from lerodoc.pi05.sweep import sweep
from lerodoc.pi05.train import check, train

DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class Launch:
    """Processes to start on this node, and the job they belong to."""
    nproc: int
    nnodes: int = 1
    node_rank: int = 0
    master: str | None = None      # host:port of node 0 (several nodes); None: a standalone job on this host
    source: str = "this host"      # what decided it, for the header line

    def describe(self) -> str:
        nodes = f" on each of {self.nnodes} nodes (this is node {self.node_rank}, rendezvous {self.master})" \
            if self.nnodes > 1 else ""
        return f"starting {self.nproc} training process(es){nodes}, one per GPU ({self.source})"


def plan(env: dict[str, str], nproc: int | None, gpus: int) -> Launch | None:
    """The processes to start from this process, or None when it trains itself (it is a rank already, or the job
    is one process). `gpus` is the number of local GPUs the run would use (0 on the CPU)."""
    if "LOCAL_RANK" in env or "TORCHELASTIC_RUN_ID" in env:
        return None
    if "GPU_NUM_PER_NODE" in env or ("WORLD_SIZE" in env and "MASTER_ADDR" in env):
        nnodes, node_rank = _int(env, "WORLD_SIZE", 1), _int(env, "RANK", 0)
        if not 0 <= node_rank < nnodes:
            raise LerodocError(f"RANK={node_rank} is not a node index below WORLD_SIZE={nnodes}", field="RANK",
                               hint="a platform that starts one process per node sets WORLD_SIZE to the number "
                                    "of nodes and RANK to this node's index (docs/train.md)")
        per_node = nproc or _int(env, "GPU_NUM_PER_NODE", 0) or gpus or 1
        master = f"{env.get('MASTER_ADDR', '127.0.0.1')}:{env.get('MASTER_PORT') or DEFAULT_MASTER_PORT}"
        if per_node == 1 and nnodes == 1:
            return None
        return Launch(per_node, nnodes, node_rank, master if nnodes > 1 else None,
                      source="WORLD_SIZE nodes, RANK node index, GPU_NUM_PER_NODE")
    per_node = nproc or gpus or 1
    if per_node == 1:
        return None
    return Launch(per_node, source="--nproc" if nproc else "every GPU on this host; --nproc chooses")


def _int(env: dict[str, str], name: str, default: int) -> int:
    value = env.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise LerodocError(f"{name}={value!r} is not an integer", field=name) from None


def start(launch: Launch, entrypoint, *args) -> object:
    """Run `entrypoint(*args)` in `launch.nproc` processes through torch's elastic launcher (what `torchrun` runs);
    returns local rank 0's result. A failed rank is one LerodocError naming it and its error."""
    # here, not at the top: the elastic launcher's modules take 0.2 s to import, which a one-process run never needs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    several = launch.nnodes > 1
    config = LaunchConfig(
        min_nodes=launch.nnodes, max_nodes=launch.nnodes, nproc_per_node=launch.nproc,
        run_id=os.environ.get("TORCHELASTIC_RUN_ID") or ("lerodoc" if several else uuid.uuid4().hex[:12]),
        rdzv_backend="static" if several else "c10d", rdzv_endpoint=launch.master if several else "localhost:0",
        rdzv_configs={"rank": launch.node_rank} if several else {}, max_restarts=0, start_method="spawn",
        monitor_interval=0.1)
    try:
        results = elastic_launch(config, entrypoint)(*args)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        raise LerodocError(f"training process {rank} failed (exit {failure.exitcode}): "
                           f"{failure.message or 'see the output above'}",
                           hint="the first error printed above names the cause") from None
    return results.get(0) if results else None


def run_job(run: RunConfig, resume: bool = False, progress: bool = True, nproc: int | None = None,
            sweep_batches: list[int] | None = None) -> dict | list[dict] | None:
    """Train (or, with `sweep_batches`, sweep) as one process, or start the job's processes (`plan`: on this
    host every GPU by default, `nproc` chooses) after one preflight here. Returns the first rank's summary (sweep:
    its rows), None in the other ranks' processes."""
    gpus = torch.cuda.device_count() if run.device in ("auto", "cuda") and torch.cuda.is_available() else 0
    job = plan(dict(os.environ), nproc, gpus)
    if job is None:
        result = sweep(run, sweep_batches) if sweep_batches else train(run, resume=resume, progress=progress)
        first = int(os.environ.get("RANK", "0")) == 0
        return result if first else None
    check(run, resume, writes=not sweep_batches)     # once, before any process starts: a bad dataset fails here
    render.note(job.describe())
    return start(job, _job_process, run.to_json(), resume, progress, sweep_batches, render.level)


def _job_process(run_json: dict, resume: bool, progress: bool, sweep_batches: list[int] | None,
                 level: int = render.NORMAL):
    """One process of a launched job (module level: the launcher starts it by name), at the job's -q / -v."""
    render.set_level(level == render.QUIET, level == render.VERBOSE)
    run = RunConfig.from_json(run_json)
    result = sweep(run, sweep_batches) if sweep_batches else train(run, resume=resume, progress=progress)
    return result if int(os.environ.get("RANK", "0")) == 0 else None
