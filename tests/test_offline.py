"""A hub that cannot be reached fails each hub command in seconds, once, naming the operation (exit 5).

The endpoint is a port on 127.0.0.1 that this test bound and closed, so nothing listens there: every connection is
refused at once. Before, huggingface_hub retried its first request five times with backoff ("Retrying in 8s",
24 s for `download tokenizer paligemma`), and push said "download failed ... run the same command again to
resume"."""

from __future__ import annotations

import socket
import time

import pytest

from lerodoc.errors import ExitCode
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli

CLEAN = ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_LEROBOT_HOME", "HF_HUB_ETAG_TIMEOUT",
         "HF_HUB_DOWNLOAD_TIMEOUT", "MODELSCOPE_ENDPOINT")


def closed_port() -> int:
    """A port of 127.0.0.1 with nothing listening: bound by the kernel, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def env(tmp_path, monkeypatch):
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)
    return {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "HF_HOME": str(tmp_path / "hf"),
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN": "hf_test"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline") / "ds"
    make_dataset(root, version="v3.0", episodes=2, lengths=5, height=32, width=48)
    return root


CASES = {
    "push": lambda ds, out: ("push", ds, "me/pushed"),
    "download tokenizer": lambda ds, out: ("download", "tokenizer", "paligemma"),
    "download weights": lambda ds, out: ("download", "weights", "pi05_base"),
    "download dataset": lambda ds, out: ("download", "dataset", "lerobot/pusht", "-o", out),
    "download dataset --episodes": lambda ds, out: ("download", "dataset", "lerobot/pusht", "--episodes", "0-1",
                                                    "-o", out),
}


@pytest.fixture(scope="module")
def floor() -> float:
    """Seconds a process takes to start and import what these commands import, before any request: on a loaded
    machine that alone can take seconds, which the bound below must not count against the command."""
    import subprocess
    import sys
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import lerodoc.cli, lerodoc.hub, huggingface_hub"], check=True)
    return time.perf_counter() - started


@pytest.mark.parametrize("case", sorted(CASES))
def test_unreachable_hub_fails_fast_once_naming_the_operation(case, env, dataset, tmp_path, floor):
    out = tmp_path / "out"
    started = time.perf_counter()
    proc = run_cli(*CASES[case](dataset, out), check=False, env=env)
    took = time.perf_counter() - started
    assert proc.returncode == ExitCode.NETWORK, proc.stderr
    assert took < 5.0 or took - floor < 4.0, (took, floor, proc.stderr)   # the client's retries took 24 s
    text = " ".join(proc.stderr.split())
    operation = case.split()[0]
    assert f"{operation} failed" in text and "could not be reached" in text, text
    assert ("download" in text) == (operation == "download"), text     # push never speaks of a download
    assert "Retrying" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("error:") == 1, proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".out*")), list(tmp_path.iterdir())
