"""lerodoc.run.parallel.pmap: its workers start from a fresh interpreter, not from fork() of the mapping process,
and see the environment and working folder the mapping process has when it maps. `in_order` runs threads in order
with few results made ahead."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lerodoc import budget
from lerodoc.cli import GC_FIRST_THRESHOLD
from lerodoc.run.parallel import POOL_BYTES, pmap, worth
from tests.fixtures.factory import make_dataset

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


def _pid(_) -> int:
    return os.getpid()


def _gc_threshold(_) -> tuple[int, ...]:
    return gc.get_threshold()


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


def test_a_pool_starts_only_for_as_many_workers_as_the_bytes_keep_busy():
    """Starting a pool costs about what copying POOL_BYTES inline takes: work sized below two workers' worth runs in
    this process; above it, in as many workers as it fills (at most those asked for)."""
    assert [worth(4, n) for n in (0, 2 * POOL_BYTES - 1, 2 * POOL_BYTES, 3 * POOL_BYTES, 100 * POOL_BYTES)] == \
        [1, 1, 2, 3, 4]
    assert pmap(_pid, [0, 1], workers=2, nbytes=POOL_BYTES) == [os.getpid()] * 2            # inline
    assert os.getpid() not in pmap(_pid, [0, 1], workers=2, nbytes=2 * POOL_BYTES)           # a pool
    assert os.getpid() not in pmap(_pid, [0, 1], workers=2)                                  # size unknown: a pool


def test_workers_see_the_environment_and_folder_set_since_the_first_pool(monkeypatch, tmp_path):
    monkeypatch.delenv(budget.ENV, raising=False)
    assert pmap(_budget, [0, 1], workers=2) == [budget.DEFAULT] * 2   # the fork server runs from here on
    monkeypatch.setenv(budget.ENV, "3MiB")
    monkeypatch.chdir(tmp_path)
    assert pmap(_budget, [0, 1], workers=2) == [3 << 20] * 2
    assert pmap(_cwd, [0, 1], workers=2) == [str(tmp_path)] * 2


def test_workers_collect_at_the_thresholds_of_the_mapping_process():
    """The CLI's young-collection threshold (cli.GC_FIRST_THRESHOLD) reaches the workers, which the fork server
    starts with CPython's own (700): a worker unpickling a million episodes' row pieces walked them over and over."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(GC_FIRST_THRESHOLD, 50, 100)
        assert pmap(_gc_threshold, [0, 1], workers=2) == [(GC_FIRST_THRESHOLD, 50, 100)] * 2
        gc.set_threshold(*before)
        assert pmap(_gc_threshold, [0, 1], workers=2) == [before] * 2
    finally:
        gc.set_threshold(*before)


def test_the_workers_example_of_api_md_runs_as_a_script(tmp_path):
    """docs/api.md's "Workers" block, saved as a script and run by Python in a folder holding data/pusht: the call
    maps over processes (a pool that imports the script again in each worker), and its work runs once."""
    text = (Path(__file__).resolve().parent.parent / "docs/api.md").read_text()
    block = re.search(r"## Workers\n.*?```python\n(.*?)```", text, flags=re.S).group(1)
    make_dataset(tmp_path / "data/pusht", version="v3.0", episodes=4, lengths=[20, 22, 24, 26])
    script = tmp_path / "convert_it.py"
    script.write_text("import lerodoc.run.parallel as parallel\n"
                      "pools = []\n"
                      "_pmap = parallel.pmap\n"
                      "def pmap(fn, items, **kw):\n"
                      "    items = list(items)\n"
                      "    pools.append((len(items), kw.get('workers')))\n"
                      "    return _pmap(fn, items, **kw)\n"
                      "parallel.pmap = pmap\n"
                      "import lerodoc.ops.rewrite as rewrite\n"
                      "rewrite.pmap = pmap\n" + block +
                      "    print('pools', max(pools))\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("4 episodes in ") == 1, proc.stdout
    items, workers = map(int, proc.stdout.split("pools (")[1].split(")")[0].split(", "))
    assert workers == 2 and items >= 2, proc.stdout   # a pool ran
    assert (tmp_path / "data/pusht_v21/meta/info.json").is_file()


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_in_order_gives_results_in_order_with_few_made_ahead(threads):
    from lerodoc.run.parallel import in_order
    pulled = []

    def items():
        for i in range(10):
            pulled.append(i)
            yield i
    results = in_order(lambda i: i * i, items(), threads=threads)
    assert next(results) == 0
    assert len(pulled) == threads + 1   # Executor.map would have taken all ten
    assert list(results) == [i * i for i in range(1, 10)]


def test_a_side_process_of_no_worker_runs_each_call_here():
    """SideProcess(module, 0) starts no process: a call runs in the caller's thread as it is submitted; with one
    worker the same call runs in a process of its own (its pid is not this one's)."""
    from lerodoc.run.parallel import SideProcess
    with SideProcess("os", 0) as here:
        assert here.submit("getpid").result() == os.getpid()
    with SideProcess("os", 1) as there:
        assert there.submit("getpid").result() != os.getpid()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_script_that_reports_without_a_main_guard_runs_once(tmp_path, workers):
    """api.report from a script with no `if __name__ == "__main__":` (a notebook exported, a quick script): with
    workers=1 (the API's default) its figures are drawn in the script's own process, so nothing imports the script
    again. With workers=2 they are drawn in processes of their own, which is why such a script guards itself
    (docs/api.md, "Workers"); guarded, it runs once."""
    make_dataset(tmp_path / "ds", version="v3.0", episodes=3, lengths=12, cameras=())
    call = f"api.report('ds', 'r.html', workers={workers})\nprint('reported')\n"
    guarded = "if __name__ == '__main__':\n" + "".join(f"    {line}\n" for line in call.splitlines())
    body = "from lerodoc import api\n" + (call if workers == 1 else guarded)
    script = tmp_path / "report_it.py"
    script.write_text(body)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("reported") == 1, proc.stdout
    assert (tmp_path / "r.html").read_text().count("<img") >= 3
