"""Run independent jobs across processes, in order, with an optional progress callback."""

from __future__ import annotations

import gc
import importlib
import os
from collections import deque
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Input bytes a worker process must have before a pool pays for itself: starting one (the fork server, its imports,
# results pickled back) costs about half a second on two cores, what copying about 64 MB of rows inline takes.
# At 20,000 short episodes (27 MB of data), merge of two copies took 3.15 s with two workers and 2.54 s inline.
POOL_BYTES = 64 << 20


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def data_workers(most: int = 8) -> int:
    """Training's DataLoader workers per process by default: `most`, capped at the CPUs this process may use
    (torch warns above that, and more workers than cores only queue)."""
    return min(most, default_workers())


def _context(module: str):
    """Workers come from a fork server, not from fork() of this process. This process holds other threads by the
    time it maps (pyarrow's pools; in a library user's process, anything's), and fork() copies a process whose other
    threads may hold locks: its child can hang or die at random (a BrokenProcessPool). The server is a fresh
    interpreter that holds no threads; it starts once per process, on the first pool, and imports that pool's
    `module` (the one its function lives in) once, so that each worker it forks starts with it loaded."""
    import multiprocessing   # only when a pool runs
    context = multiprocessing.get_context("forkserver")
    # heard only when the server starts. Each worker still imports the running script as `__mp_main__`, as under
    # spawn (Python 3.11-3.13): a script that maps through lerodoc runs its work under `if __name__ == "__main__":`
    context.set_forkserver_preload([__name__, module])
    return context


def _worker_init(environ: dict[str, str], cwd: str, one_thread: bool, gc_threshold: tuple[int, ...]) -> None:
    """A worker sees the environment, working folder and collector thresholds that the mapping process has now (the
    fork server keeps those it started with: a budget set since, LERODOC_MEMORY_BUDGET, must be heard, and the
    CLI's young-collection threshold, `cli.GC_FIRST_THRESHOLD`, applies to the rows a worker makes too). With
    `one_thread`, it runs pyarrow's decoding and encoding on one thread: the pool already fills the cores, and a
    thread pool per worker on top of it only adds switching."""
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    gc.set_threshold(*gc_threshold)
    if one_thread:
        # pyarrow: --help imports this module and loads no pyarrow
        import pyarrow
        pyarrow.set_cpu_count(1)
        pyarrow.set_io_thread_count(1)


def _pool(workers: int, module: str, one_thread: bool):
    """A ProcessPoolExecutor of `workers` from the fork server that imports `module` (`_context`), each worker set up
    as the calling process is now (`_worker_init`)."""
    from concurrent.futures import ProcessPoolExecutor   # only when a pool runs
    return ProcessPoolExecutor(max_workers=workers, mp_context=_context(module), initializer=_worker_init,
                               initargs=(dict(os.environ), os.getcwd(), one_thread, gc.get_threshold()))


def worth(workers: int, nbytes: int) -> int:
    """The workers that `nbytes` of input keep busy: one for each POOL_BYTES, at most `workers`; 1 (inline) below
    twice POOL_BYTES."""
    return max(1, min(workers, nbytes // POOL_BYTES))


def pmap(fn: Callable[[T], R], items: Iterable[T], *, workers: int = 1,
         progress: Callable[[int], None] | None = None, engine=None, nbytes: int | None = None) -> list[R]:
    """[fn(item) for item in items], across `workers` processes; the first error stops the rest.

    `nbytes`: the items' input bytes, when the work is proportional to them (copying rows, reading columns): a
    pool starts only when they keep its workers busy (`worth`). `engine` (a `lerodoc.run.engine.RayEngine`) runs
    the same units on a cluster instead."""
    items = list(items)
    if engine is not None:
        return engine.map(fn, items, progress)
    if nbytes is not None:
        workers = worth(workers, nbytes)
    if workers <= 1 or len(items) <= 1:
        results = []
        for item in items:
            results.append(fn(item))
            if progress:
                progress(1)
        return results
    from concurrent.futures import FIRST_EXCEPTION, wait   # only when a pool runs
    # one pyarrow thread per worker only when the workers fill the cores; fewer items keep pyarrow's threads
    with _pool(min(workers, len(items)), fn.__module__, one_thread=len(items) >= workers) as pool:
        futures = [pool.submit(fn, item) for item in items]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in done:
                if future.exception() is not None:
                    for other in pending:
                        other.cancel()
                    raise future.exception()
                if progress:
                    progress(1)
        return [f.result() for f in futures]


class SideProcess:
    """Python work (which holds the GIL) beside this process's, in `workers` processes that import `module`:
    `submit(name, *args)` calls its function `name` there and returns a Future at once. Only the function's name
    travels, so this process need not import the module (matplotlib's import, a third of a second, stays in the
    workers). The pool starts now; its first worker waits for the fork server to start and import `module`, and
    while it does, calls wait in the threads that hand them over (one a worker), not in the caller. With `workers`
    0 there is no process: each call runs in the caller's thread (a library call given workers=1 starts none, so a
    script that makes it need not keep its work under `if __name__ == "__main__":`, docs/api.md)."""

    def __init__(self, module: str, workers: int = 1):
        self.module = module
        self._pool = self._hands = None
        if workers < 1:   # no process: each call runs in this thread as it is submitted (`submit`)
            return
        from concurrent.futures import ThreadPoolExecutor   # only when asked
        self._pool = _pool(workers, module, one_thread=False)
        self._hands = ThreadPoolExecutor(workers)
        self._hands.submit(self._pool.submit, _ready)

    def submit(self, name: str, *args):
        from concurrent.futures import Future   # only when asked
        if self._pool is None:   # no worker: the call runs here, now, and its Future is done
            done = Future()
            done.set_result(_named(self.module, name, *args))
            return done
        return self._hands.submit(lambda: self._pool.submit(_named, self.module, name, *args).result())

    def __enter__(self) -> "SideProcess":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._hands.shutdown(cancel_futures=exc[0] is not None)
            self._pool.shutdown(cancel_futures=exc[0] is not None)


def _named(module: str, name: str, *args):
    # a worker's fork server imported the module first; with no worker, the caller's process imports it here
    return getattr(importlib.import_module(module), name)(*args)


def _ready() -> None:
    """The first job of a `SideProcess`: it makes the pool start its workers."""


def in_order(fn: Callable[[T], R], items: Iterable[T], *, threads: int = 1) -> Iterator[R]:
    """fn(item) for each item, in order, across `threads` threads, with at most `threads` results made ahead of the
    one the caller takes: Executor.map submits every item at once, and the results that finish early wait in
    memory (a data file's columns each) until the caller comes to them."""
    from concurrent.futures import ThreadPoolExecutor   # only when asked
    with ThreadPoolExecutor(max(1, threads)) as pool:
        pending = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > max(1, threads):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
