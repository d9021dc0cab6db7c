"""Test helpers: run the CLI, decode videos, compare datasets value by value."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.fixtures.identity import Identity, decode_identity


def under_ci() -> bool:
    """True in CI (CI=true, as GitHub Actions, GitLab and .ci/run set it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require(condition: object, reason: str) -> None:
    """A claim-holding test's prerequisite: skip without it locally, FAIL without it under CI.

    Works at module level too (a missing prerequisite there skips, or fails, the whole file)."""
    if condition:
        return
    if under_ci():
        pytest.fail(f"prerequisite missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def importable(module: str) -> bool:
    """Whether `module` imports (for `require(importable("torch"), ...)`)."""
    import importlib.util
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


CLI_TIMEOUT = 600   # seconds: the longest run_cli (a tiny training run) takes about 25 s on two cores


def run_cli(*args: str, check: bool = True, env: dict[str, str] | None = None,
            timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess:
    """`python -m lerodoc ARGS` in a subprocess, as a user runs it (`env` is added to the environment).

    A run past `timeout` s fails the test with every thread's stack of the run: it is sent SIGABRT, which the
    faulthandler it starts with (PYTHONFAULTHANDLER) answers by printing them, before it ends."""
    command = [sys.executable, "-m", "lerodoc", *map(str, args)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})}) as running:
        try:
            stdout, stderr = running.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            running.send_signal(signal.SIGABRT)
            try:
                stderr = running.communicate(timeout=60)[1]
            except subprocess.TimeoutExpired as late:   # a child of the run holds its pipes: what came so far
                running.kill()
                stderr = late.stderr.decode(errors="replace") if isinstance(late.stderr, bytes) else late.stderr or ""
            raise AssertionError(f"lerodoc {' '.join(map(str, args))} ran past {timeout} s; its stacks:\n"
                                 f"{stderr[-8000:]}") from None
    proc = subprocess.CompletedProcess(command, running.returncode, stdout, stderr)
    if check and proc.returncode != 0:
        raise AssertionError(f"lerodoc {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def run_here(*args, check: bool = False) -> subprocess.CompletedProcess:
    """`lerodoc ARGS` in this process, through the same `cli.main` a user runs (errors, exit codes, the JSON
    envelope), its stdout and stderr caught: no interpreter start and no imports per run, for the table-driven
    tests that must stay fast. The root options' state (render level) is
    reset afterwards. An exception that escapes `main` is printed as Python would, exit 1."""
    from lerodoc import cli, render
    saved_argv, saved_level, saved_hook = sys.argv, render.level, sys.unraisablehook
    sys.argv = ["lerodoc", *map(str, args)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:
            traceback.print_exc()
            code = 1
        finally:
            sys.argv, sys.unraisablehook = saved_argv, saved_hook
            render.level, render.command = saved_level, None
    proc = subprocess.CompletedProcess(["lerodoc", *map(str, args)], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"lerodoc {' '.join(map(str, args))} exited {code}:\n{proc.stderr}")
    return proc


def run_json(*args: str) -> dict:
    return json.loads(run_cli(*args, "--json").stdout)


def decode_all(path: Path) -> list[tuple[float, np.ndarray]]:
    """Every frame of the file as (time in seconds, RGB array), in presentation order."""
    with av.open(str(path)) as container:
        frames = [(float(f.pts * f.time_base), f.to_ndarray(format="rgb24"))
                  for f in container.decode(video=0)]
    return sorted(frames, key=lambda item: item[0])


def identities_at(path: Path, times: list[float], tolerance: float = 1e-4) -> list[Identity | None]:
    """Decode the frame shown at each time (within tolerance) and read its identity."""
    frames = decode_all(path)
    stamps = np.array([t for t, _ in frames])
    out = []
    for t in times:
        k = int(np.argmin(np.abs(stamps - t)))
        out.append(decode_identity(frames[k][1]) if abs(stamps[k] - t) < tolerance else None)
    return out


def packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as container:
        return [bytes(p) for p in container.demux(video=0) if p.size]


def rows_by_episode(root: Path) -> dict[int, dict[str, list]]:
    """All parquet rows of a dataset (any version), grouped by episode_index, as Python lists."""
    out: dict[int, dict[str, list]] = {}
    for path in sorted(Path(root).glob("data/*/*.parquet")):
        table = pq.read_table(path)
        for episode in sorted(set(table.column("episode_index").to_pylist())):
            mask = [e == episode for e in table.column("episode_index").to_pylist()]
            part = table.filter(mask).to_pydict()
            target = out.setdefault(episode, {k: [] for k in part})
            for k, v in part.items():
                target[k].extend(v)
    return out


def expect_episodes(fixture, episodes: list[int] | None = None) -> list[dict]:
    """The lerobot oracle's per-episode expectation for `fixture`'s episodes (all, or those listed)."""
    spec = fixture.spec
    value = f"({spec.dataset_id}*100000 + 1000*s + f + k/8)"   # factory._vector
    return [{"length": fixture.lengths[e], "task": spec.tasks[e % len(spec.tasks)],
             "identity": {"dataset": spec.dataset_id, "episode": e,
                          "cameras": {key: c for c, key in enumerate(spec.cameras)}},
             "values": {"observation.state": {"expr": value}, "action": {"expr": f"-({value} + 0.5)"}}}
            for e in (range(len(fixture.lengths)) if episodes is None else episodes)]


def expect_from_fixture(fixture) -> dict:
    """The lerobot oracle's expectation for a dataset holding `fixture`'s episodes unchanged."""
    return {"fps": fixture.spec.fps, "video_keys": list(fixture.spec.cameras), "episodes": expect_episodes(fixture)}
