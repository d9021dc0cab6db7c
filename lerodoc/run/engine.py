"""Where a command's units run: worker processes on this machine (the default) or a Ray cluster.

A unit is what the process pool already runs, so both engines call the same function on the same
arguments and return the results in unit order: outputs are the same bit for bit. The units are

- convert and merge (`ops.rewrite.execute`): one output data file (-> v3.0) or one source data file
  (-> v2.1), and one camera's clips (-> v3.0) or 16 episodes' clips (-> v2.1);
- quantiles: one data file's episodes (per-episode stats), then one tally pass of the dataset's radix
  selection over a run of data files (`lerodoc.tables.quantiles.Selection`: counts travel, rows do not);
- validate: one data file's bookkeeping columns and one data file's per-episode stats.

Ray is imported only when chosen (`pip install 'lerodoc[scale]'`). Every path a unit reads or writes must
be visible under the same name on every node (shared storage); see docs/scale.md.
"""

from __future__ import annotations

import os
import pickle
import socket
from typing import Callable, Iterable, TypeVar

from lerodoc.errors import LerodocError, UsageError

T = TypeVar("T")
R = TypeVar("R")
ENGINES = ("pool", "ray")
RETRIES = 3          # a unit whose worker process dies is run again, up to this many times
TASKS_PER_CPU = 4    # units are sent in batches, about this many per cluster CPU (a task costs milliseconds)


class RayEngine:
    """Runs units as Ray tasks on the cluster at `address` (None: RAY_ADDRESS, else a local one on this
    machine); a task whose worker dies is retried up to `retries` times, the first error stops the rest.

    Consecutive units go in one task when there are many more than `TASKS_PER_CPU` per cluster CPU (10,000
    one-episode files are some hundreds of tasks, not 10,000): each unit still runs alone, in order."""

    name = "ray"

    def __init__(self, address: str | None = None, retries: int = RETRIES):
        self.address, self.retries = address, retries
        self._ray = None

    def start(self):
        """Import Ray and join (or start) the cluster, once."""
        if self._ray is not None:
            return self._ray
        try:
            # ray: optional, loaded only by the ray engine
            import ray
        except ImportError:
            raise LerodocError("--engine ray needs Ray, which is not installed",
                               hint="pip install 'lerodoc[scale]', or pip install ray") from None
        if not ray.is_initialized():
            _reachable(self.address)
            try:
                ray.init(address=self.address, include_dashboard=False, logging_level="ERROR",
                         log_to_driver=False, configure_logging=True)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = self.address or os.environ.get("RAY_ADDRESS") or "a local cluster"
                raise LerodocError(f"cannot join the Ray cluster at {where}: {str(exc).splitlines()[0]}",
                                   hint="check --ray-address (host:6379 of `ray start --head`, or "
                                        "ray://host:10001)") from None
        self._ray = ray
        return ray

    @property
    def cpus(self) -> int:
        """CPUs of the whole cluster (how many units run at once)."""
        return max(1, int(self.start().cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[[T], R], items: Iterable[T], progress: Callable[[int], None] | None = None) -> list[R]:
        """[fn(item) for item in items] as Ray tasks, in order."""
        ray = self.start()
        # ray: optional, loaded only by the ray engine
        from ray.exceptions import RayError, RayTaskError
        items = list(items)
        size = max(1, len(items) // (self.cpus * TASKS_PER_CPU))
        batches = [items[i:i + size] for i in range(0, len(items), size)]
        remote = ray.remote(max_retries=self.retries, num_cpus=1)(_call)
        fn_ref = ray.put(fn)
        refs = [remote.remote(fn_ref, pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)) for batch in batches]
        units = {ref: len(batch) for ref, batch in zip(refs, batches)}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=min(len(pending), 64), timeout=0.2)
                ray.get(done)          # raises the first failure as soon as it is known
                if progress and done:
                    progress(sum(units[ref] for ref in done))
            return [result for batch in ray.get(refs) for result in pickle.loads(batch)]
        except RayTaskError as exc:
            _cancel(ray, pending)
            if isinstance(exc.cause, BaseException):
                raise exc.cause from None
            raise LerodocError(f"a unit failed on the Ray cluster: {str(exc).splitlines()[0]}") from None
        except RayError as exc:           # a worker died more than `retries` times, a node was lost, ...
            _cancel(ray, pending)
            raise LerodocError(f"a unit was lost on the Ray cluster ({type(exc).__name__}) after {self.retries} "
                               f"retries: {str(exc).splitlines()[0]}", hint="nothing was written; see the Ray "
                               "logs of the cluster (ray logs) for why its workers die") from None
        except BaseException:
            _cancel(ray, pending)
            raise


def _call(fn: Callable, batch: bytes) -> bytes:
    """Task body: fn over a batch of units. Arguments and results cross as pickles, as they do to and from the
    process pool (Ray's own serialisers rebuild some objects differently, e.g. an Arrow list's child field name)."""
    return pickle.dumps([fn(item) for item in pickle.loads(batch)], protocol=pickle.HIGHEST_PROTOCOL)


def _reachable(address: str | None, timeout: float = 10.0) -> None:
    """A host:port address answers, or a clear error now (Ray itself retries for minutes)."""
    if not address or "://" in address or ":" not in address or address == "auto":
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as exc:
        raise LerodocError(f"cannot join the Ray cluster at {address}: {exc}",
                           hint="check --ray-address (host:6379 of `ray start --head`, or ray://host:10001)") from None


def _cancel(ray, refs: list) -> None:
    for ref in refs:
        try:
            ray.cancel(ref, force=True)
        except Exception:   # already finished or gone: nothing to stop
            pass


def make(engine: str = "pool", address: str | None = None) -> RayEngine | None:
    """The engine a command's --engine/--ray-address name; None is the local process pool."""
    if engine not in ENGINES:
        raise LerodocError(f"unknown engine {engine!r} (choose {', '.join(ENGINES)})")
    if engine == "pool":
        if address:
            raise UsageError("--ray-address needs --engine ray")
        return None
    return RayEngine(address)
