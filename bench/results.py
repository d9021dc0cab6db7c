"""What every benchmark's results file carries (git commit, library versions, machine, load, date, command), and
how it is written: one home for the benchmarks in this folder."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def provenance(command: str, **versions) -> dict:
    """Git commit, pyarrow/numpy (plus `versions`), machine and load: what a CPU results file needs to be read
    later."""
    import numpy as np
    import pyarrow

    from lerodoc.run.parallel import default_workers
    return {"git_commit": git_commit(), "python": platform.python_version(), "pyarrow": pyarrow.__version__,
            "numpy": np.__version__, **versions, "cpus_available": default_workers(),
            "load_average_at_start": os.getloadavg(),
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "device": "cpu",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "command": command}


def write_results(summary: dict, *paths: Path | None) -> str:
    """Write `summary` as indented JSON to each of `paths` given (folders made); returns the text."""
    text = json.dumps(summary, indent=2)
    for path in filter(None, paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return text
