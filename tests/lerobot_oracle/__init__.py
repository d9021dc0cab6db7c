"""lerobot 0.6.1 as an oracle: its loader and converter, run in the reference venv via subprocesses.

lerobot is never imported here; scripts/lerobot-venv.sh makes (once) a Python 3.12 venv
and the scripts next to this file run inside it. If the venv cannot be made, the calls
raise (tests fail) unless LERODOC_SKIP_LEROBOT=1, which skips them instead (except under CI=true, where
a test that holds a claim fails without its oracle: tests.helpers.require).
Each subprocess runs offline with HF_HOME and its caches in a throwaway directory. The loader checks and lerobot's own
recordings run in one long-lived interpreter (server.py: lerobot imported once per session, a new datasets cache
per request); what is timed (convert, aggregate, quantiles) runs in a new process each time.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV_SCRIPT = REPO / "scripts" / "lerobot-venv.sh"

_python: Path | Exception | None = None


class LerobotUnavailable(RuntimeError):
    """The reference venv could not be made."""


class OracleFailure(AssertionError):
    """lerobot rejected or misread a dataset; `.report` holds the full report."""

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


class Converted(NamedTuple):
    root: Path
    seconds: float  # wall time of the converter subprocess, interpreter start included


def lerobot_python() -> Path:
    """Path of the reference venv's python, made on first use and cached for the session."""
    global _python
    if os.environ.get("LERODOC_SKIP_LEROBOT") == "1":
        from tests.helpers import require

        require(False, "LERODOC_SKIP_LEROBOT=1: lerobot 0.6.1 oracle not used")   # under CI=true: a failure
    if _python is None:
        proc = subprocess.run(["bash", str(VENV_SCRIPT)], capture_output=True, text=True, timeout=3600)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode == 0 and lines and Path(lines[-1]).exists():
            _python = Path(lines[-1])
        else:
            _python = LerobotUnavailable(
                f"{VENV_SCRIPT.name} failed (exit {proc.returncode}); set LERODOC_SKIP_LEROBOT=1 to skip "
                f"lerobot checks.\n{proc.stderr[-3000:]}")
    if isinstance(_python, Exception):
        raise _python
    return _python


def _env(scratch: Path) -> dict:
    """The environment of an oracle process: offline, with every Hugging Face cache under `scratch`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    hf = scratch / "hf"
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(hf), HF_DATASETS_CACHE=str(hf / "datasets"),
               HF_LEROBOT_HOME=str(hf / "lerobot"), HF_HUB_DISABLE_TELEMETRY="1")
    return env


def _run(args: list[str], scratch: Path, timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the venv's python offline, with every Hugging Face cache under `scratch`, in a new process (for what is
    timed, or runs lerobot's own modules)."""
    return subprocess.run([str(lerobot_python()), *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(scratch), cwd=cwd)


class _Server:
    """server.py in the reference venv: lerobot imported once, the oracle scripts run in it on request."""

    RESTART_AFTER = 40          # requests; a fresh interpreter now and then bounds what the checks leave behind

    def __init__(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="lerobot-oracle-server-"))
        self.log = open(self.scratch / "server.log", "w+")
        read, write = os.pipe()
        self.proc = subprocess.Popen([str(lerobot_python()), str(HERE / "server.py"), str(write)],
                                     stdin=subprocess.PIPE, stdout=self.log, stderr=self.log, text=True,
                                     pass_fds=(write,), env=_env(self.scratch), cwd=self.scratch)
        os.close(write)
        self.replies = os.fdopen(read)
        self.served = 0

    def call(self, script: Path, args: list[str], scratch: Path, timeout: float,
             cwd: Path | None) -> subprocess.CompletedProcess:
        argv = [str(script), *args]
        request = {"script": str(script), "args": args, "scratch": str(scratch), "cwd": str(cwd) if cwd else None}
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self.died(argv)
        if not select.select([self.replies], [], [], timeout)[0]:
            self.close()
            raise subprocess.TimeoutExpired(argv, timeout)
        line = self.replies.readline()
        if not line:
            return self.died(argv)
        self.served += 1
        reply = json.loads(line)
        return subprocess.CompletedProcess(argv, reply["returncode"], reply["stdout"], reply["stderr"])

    def died(self, argv: list[str]) -> subprocess.CompletedProcess:
        """The interpreter ended mid-request (a crash in a decoder, say): this request fails with its log."""
        code = self.proc.wait()
        self.log.seek(0)
        tail = self.log.read()[-3000:]
        self.close()
        return subprocess.CompletedProcess(argv, code or -1, "", f"oracle server ended (exit {code}):\n{tail}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.replies.close()
        self.log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


_server: _Server | None = None


def _serve(script: Path, args: list[str], scratch: Path, timeout: float,
           cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run an oracle script (a file next to this one) in the session's server, started on first use and again
    after a crash, a timeout or every `RESTART_AFTER` requests."""
    global _server
    if _server is not None and _server.served >= _Server.RESTART_AFTER:
        _server.close()
        _server = None
    server = _server = _server or _Server()
    try:
        return server.call(script, args, scratch, timeout, cwd)
    finally:
        if server.proc.poll() is not None:
            server.close()
            _server = None


@atexit.register
def _stop_server() -> None:
    if _server is not None:
        _server.close()


def summarize(report: dict) -> str:
    """A few lines saying what lerobot found wrong."""
    lines = [f"lerobot {report.get('lerobot_version')} ({report.get('backend')}) on {report.get('root')}: "
             + ("; ".join(report.get("problems", [])) or "ok")]
    for key in ("misaligned_examples", "value_mismatch_examples", "length_mismatches", "exceptions"):
        for example in report.get(key, [])[:3]:
            lines.append(f"  {key.split('_')[0]}: {json.dumps(example)[:400]}")
    if report.get("traceback"):
        lines.append(report["traceback"][-1500:])
    return "\n".join(lines)


def check_with_lerobot(root: str | Path, expect: dict, backend: str = "pyav", frames: str | int = "all",
                       raise_on_failure: bool = True, timeout: float = 900) -> dict:
    """Load `root` with LeRobotDataset and compare it to `expect` (format: check_dataset.py).

    Returns the report; raises OracleFailure (an AssertionError) with a summary when it fails.
    """
    with tempfile.TemporaryDirectory(prefix="lerobot-oracle-") as tmp:
        scratch = Path(tmp)
        (scratch / "expect.json").write_text(json.dumps(expect))
        out = scratch / "report.json"
        proc = _serve(HERE / "check_dataset.py", [str(Path(root).resolve()), "--expect",
                      str(scratch / "expect.json"), "--backend", backend, "--out", str(out),
                      "--frames", str(frames)], scratch, timeout)
        if not out.exists():
            raise OracleFailure(f"check_dataset.py wrote no report (exit {proc.returncode}):\n"
                                f"{proc.stderr[-3000:]}", {})
        report = json.loads(out.read_text())
    if raise_on_failure and not report["ok"]:
        raise OracleFailure(summarize(report), report)
    return report


def check_many_with_lerobot(jobs: list[dict], timeout: float = 1800) -> list[dict]:
    """`check_with_lerobot` for many datasets in one interpreter: jobs are {root, expect, backend?, frames?};
    returns one report per job, in order (never raises for a failed check: read `report["ok"]`)."""
    with tempfile.TemporaryDirectory(prefix="lerobot-oracle-") as tmp:
        scratch = Path(tmp)
        batch = [{**job, "root": str(Path(job["root"]).resolve())} for job in jobs]
        (scratch / "batch.json").write_text(json.dumps(batch))
        out = scratch / "reports.json"
        proc = _serve(HERE / "check_dataset.py", ["--batch", str(scratch / "batch.json"), "--out", str(out)],
                      scratch, timeout)
        if not out.exists():
            raise OracleFailure(f"check_dataset.py --batch wrote no report (exit {proc.returncode}):\n"
                                f"{proc.stderr[-3000:]}", {})
        return json.loads(out.read_text())


def convert_with_lerobot(src_root: str | Path, work_dir: str | Path, repo_id: str = "lerodoc/convert",
                         keep_old: bool = False, timeout: float = 3600) -> Converted:
    """Convert a COPY of v2.1 `src_root` with lerobot's convert_dataset_v21_to_v30, offline.

    The copy is work_dir/<src name>; the converter swaps it in place for the v3.0 result
    (the v2.1 copy becomes <name>_old, removed unless keep_old).
    """
    src_root, work_dir = Path(src_root).resolve(), Path(work_dir).resolve()
    root = work_dir / src_root.name
    if root.exists():
        raise FileExistsError(root)
    work_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src_root, root)
    with tempfile.TemporaryDirectory(prefix="lerobot-convert-") as tmp:
        start = time.perf_counter()
        proc = _run(["-m", "lerobot.scripts.convert_dataset_v21_to_v30", f"--repo-id={repo_id}",
                     f"--root={root}", "--push-to-hub=false"], Path(tmp), timeout, cwd=work_dir)
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"lerobot converter failed (exit {proc.returncode}) on {root}:\n{proc.stderr[-4000:]}")
    if not keep_old:
        shutil.rmtree(root.with_name(root.name + "_old"), ignore_errors=True)
    return Converted(root, seconds)


def aggregate_with_lerobot(sources: list[str | Path], out: str | Path, timeout: float = 3600) -> Converted:
    """Merge v3.0 `sources` into `out` with lerobot's aggregate_datasets, offline; returns root and wall time."""
    out = Path(out).resolve()
    with tempfile.TemporaryDirectory(prefix="lerobot-aggregate-") as tmp:
        start = time.perf_counter()
        proc = _run([str(HERE / "aggregate.py"), str(out), *(str(Path(s).resolve()) for s in sources)],
                    Path(tmp), timeout)
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"lerobot aggregate_datasets failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return Converted(out, seconds)


def quantiles_with_lerobot(root: str | Path, timeout: float = 7200) -> dict:
    """lerobot's compute_quantile_stats_for_dataset on `root`: {"load_s", "compute_s", "seconds", "stats"}."""
    with tempfile.TemporaryDirectory(prefix="lerobot-quantiles-") as tmp:
        out = Path(tmp) / "out.json"
        start = time.perf_counter()
        proc = _run([str(HERE / "quantiles.py"), str(Path(root).resolve()), str(out)], Path(tmp), timeout)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"lerobot quantiles failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        return {**json.loads(out.read_text()), "seconds": seconds}


def make_native_v30(root: str | Path, lengths: tuple[int, ...] = (40, 55), images: bool = False,
                    timeout: float = 600) -> dict:
    """Record a dataset with lerobot itself (make_native_v30.py) at `root`; returns its expectation."""
    with tempfile.TemporaryDirectory(prefix="lerobot-native-") as tmp:
        expect_path = Path(tmp) / "expect.json"
        proc = _serve(HERE / "make_native_v30.py", [str(Path(root).resolve()), "--expect", str(expect_path),
                      "--lengths", ",".join(map(str, lengths)), *(["--images"] if images else [])], Path(tmp), timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"make_native_v30.py failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(expect_path.read_text())
