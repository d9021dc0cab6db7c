"""lerodoc.run.parallel.pmap: its workers start from a fresh interpreter, not from fork() of the mapping process,
and see the environment and working folder the mapping process has when it maps."""

from __future__ import annotations

import os
import threading

from lerodoc import budget
from lerodoc.run.parallel import pmap

HELD = threading.Lock()


def _free(_) -> bool:
    """Whether this module's lock is free in the worker: fork() would copy it locked, as another thread of the
    mapping process holds it (as pyarrow's threads may hold theirs when a command maps)."""
    got = HELD.acquire(timeout=2)
    if got:
        HELD.release()
    return got


def _budget(_) -> int:
    return budget.memory_budget()


def _cwd(_) -> str:
    return os.getcwd()


def test_a_worker_does_not_inherit_a_lock_that_another_thread_holds():
    taken, done = threading.Event(), threading.Event()

    def hold():
        with HELD:
            taken.set()
            done.wait()
    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait()
    try:
        assert pmap(_free, [0, 1], workers=2) == [True, True]
    finally:
        done.set()
        holder.join()


def test_workers_see_the_environment_and_folder_set_since_the_first_pool(monkeypatch, tmp_path):
    monkeypatch.delenv(budget.ENV, raising=False)
    assert pmap(_budget, [0, 1], workers=2) == [budget.DEFAULT] * 2   # the fork server runs from here on
    monkeypatch.setenv(budget.ENV, "3MiB")
    monkeypatch.chdir(tmp_path)
    assert pmap(_budget, [0, 1], workers=2) == [3 << 20] * 2
    assert pmap(_cwd, [0, 1], workers=2) == [str(tmp_path)] * 2
