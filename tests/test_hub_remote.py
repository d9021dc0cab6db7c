"""hf://datasets/OWNER/NAME read in place (issue 27): validate and info of a served 1,000-episode dataset by range
requests, the same findings as the local copy, what the server sent, and the hub's refusals as one paragraph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.factory import make_dataset
from tests.hubserver import HubServer, folder_files

CAMERAS = ("observation.images.top", "observation.images.wrist")


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """1,000 episodes of 3 frames, 100 episodes per data and video file, two cameras; served as me/big, plus a
    gated copy of meta/info.json only and a rate-limited repository."""
    root = tmp_path_factory.mktemp("remote") / "big"
    make_dataset(root, version="v3.0", episodes=1000, lengths=3, episodes_per_file=100, height=32, width=48,
                 cameras=CAMERAS)
    with HubServer() as hub:
        files = folder_files(root)
        hub.add("dataset", "me/big", files)
        hub.add("dataset", "me/gated", {"meta/info.json": files["meta/info.json"]}, gated=True)
        hub.refuse["me/limited"] = 429
        yield hub, root, files


def lerodoc(hub: HubServer, *args: str, env: dict | None = None) -> tuple[int, dict]:
    """Run the CLI in its own process (huggingface_hub reads HF_ENDPOINT at import) with --json."""
    environ = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1", **(env or {})}
    environ.pop("HF_HUB_OFFLINE", None) if "HF_HUB_OFFLINE" not in (env or {}) else None
    done = subprocess.run([sys.executable, "-m", "lerodoc", *args, "--json"], capture_output=True, text=True,
                          env=environ, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_validate_remote_equals_local_and_reads_no_video(served):
    hub, root, files = served
    code_local, local = lerodoc(hub, "validate", str(root))
    hub.reset_counts()
    code, remote = lerodoc(hub, "validate", "hf://datasets/me/big")
    assert (code, remote["findings"]) == (code_local, local["findings"])
    assert remote["codebase_version"] == "v3.0" and remote["dataset"] == "hf://datasets/me/big"
    total = sum(len(d) for d in files.values())
    videos = sum(len(d) for p, d in files.items() if p.startswith("videos/"))
    tables = total - videos   # meta/ and the data parquet: what validate's checks read (stats need every column)
    ranged = [r for r in hub.log if "range" in r.headers]
    assert not any("/videos/" in r.path for r in ranged), "validate without --videos reads no video byte"
    assert hub.file_bytes <= tables, (hub.file_bytes, tables)
    t = remote["transfer"]
    assert t["repository_bytes"] == total and t["file_bytes"] == hub.file_bytes
    assert t["requests"] == len(hub.log) and t["bytes"] >= hub.file_bytes
    print(f"validate hf://: {hub.file_bytes} of {total} bytes ({hub.file_bytes / total:.1%}), "
          f"{len(hub.log)} requests")


def test_info_remote_reads_moov_not_samples(served):
    hub, root, files = served
    _, local = lerodoc(hub, "info", str(root))
    hub.reset_counts()
    code, remote = lerodoc(hub, "info", "hf://datasets/me/big")
    assert code == 0
    for key in ("codebase_version", "fps", "episodes", "frames", "tasks", "features", "stats", "size_bytes"):
        assert remote[key] == local[key], key
    assert {k: {n: v for n, v in c.items()} for k, c in remote["cameras"].items()} == local["cameras"]
    video_bytes = sum(len(d) for p, d in files.items() if p.startswith("videos/"))
    probed = sum(len(files[f"videos/{k}/chunk-000/file-000.mp4"]) for k in CAMERAS)
    assert hub.file_bytes - sum(len(d) for p, d in files.items() if p.startswith("meta/")) <= probed < video_bytes
    assert remote["transfer"]["requests"] == len(hub.log)


@pytest.mark.parametrize("repo, says", [
    ("me/none", "no such repository"),
    ("me/gated", "is gated"),
    ("me/limited", "429"),
])
def test_refusals_are_one_paragraph(served, repo, says):
    hub = served[0]
    code, body = lerodoc(hub, "validate", f"hf://datasets/{repo}")
    assert code == 5 and says in body["error"]["message"] and body["error"]["hint"]
    assert body["error"]["file"] == f"hf://datasets/{repo}"


def test_offline_and_unreachable_are_one_paragraph(served):
    hub = served[0]
    code, body = lerodoc(hub, "info", "hf://datasets/me/big", env={"HF_HUB_OFFLINE": "1"})
    assert code == 5 and "HF_HUB_OFFLINE" in body["error"]["message"]
    code, body = lerodoc(hub, "info", "hf://datasets/me/big", env={"HF_ENDPOINT": "http://127.0.0.1:9"})
    assert code == 5 and "ConnectError" in body["error"]["message"]
