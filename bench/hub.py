"""What reading a hub dataset in place costs: `info`, `validate`, `validate --videos`, `report --videos` and
`download dataset --episodes` of the served 1,000-episode test dataset (tests/test_hub_remote.py's, videos padded to
98% of the bytes), bytes and requests as the local hub server counts them, in one run.

    python -m bench.hub [--out docs/results/hub_remote_cpu.json]

Prints and writes: the repository's bytes; per reading command its bytes (of them video and meta/episodes) and
their share of the repository; the chosen episodes' own bytes (their row groups and video samples), download's
bytes and their ratio to the episodes' own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.results import ROOT, provenance, write_results

CHOSEN = "0-9,500"


def lerodoc(url: str, *args: str) -> dict:
    env = {**os.environ, "HF_ENDPOINT": url, "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run([sys.executable, "-m", "lerodoc", *args, "--json"], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs/results/hub_remote_cpu.json")
    args = parser.parse_args()
    from lerodoc.selection import parse
    from tests.fixtures.factory import make_dataset
    from tests.hubserver import HubServer, folder_files
    from tests.test_hub_remote import CAMERAS, FILLER, own_bytes, pad_videos

    with tempfile.TemporaryDirectory(prefix="bench-hub-") as tmp:
        root = Path(tmp) / "big"
        make_dataset(root, version="v3.0", episodes=1000, lengths=3, episodes_per_file=100, height=32, width=48,
                     cameras=CAMERAS)
        pad_videos(root, FILLER)
        with HubServer() as hub:
            files = folder_files(root)
            hub.add("dataset", "me/big", files)
            repository = sum(len(b) for b in files.values())
            reads = {}
            for name, command in [("info", ["info"]), ("validate", ["validate"]),
                                  ("validate_videos", ["validate", "--videos"]),
                                  ("report_videos", ["report", "--videos", "-o", str(Path(tmp) / "r.html")])]:
                hub.reset_counts()
                done = lerodoc(hub.url, command[0], "hf://datasets/me/big", *command[1:])
                reads[name] = {"file_bytes": hub.file_bytes, "share": round(hub.file_bytes / repository, 4),
                               "video_bytes": hub.bytes_of("videos/"),
                               "meta_episodes_bytes": hub.bytes_of("meta/episodes/"), "requests": len(hub.log),
                               "exit_code": done["exit_code"]}
            hub.reset_counts()
            report = lerodoc(hub.url, "download", "dataset", "me/big", "--episodes", CHOSEN, "-o",
                             str(Path(tmp) / "dl"))
            download_bytes = hub.file_bytes
        chosen = list(parse(CHOSEN, "--episodes").resolve(range(1000), "--episodes"))
        own = own_bytes(root, chosen)
    summary = {
        "provenance": provenance("python -m bench.hub"),
        "dataset": {"episodes": 1000, "frames_per_episode": 3, "episodes_per_file": 100, "cameras": list(CAMERAS),
                    "filler_bytes_per_sample": FILLER, "repository_bytes": repository,
                    "video_bytes": sum(len(b) for p, b in files.items() if p.startswith("videos/")),
                    "meta_episodes_bytes": sum(len(b) for p, b in files.items() if p.startswith("meta/episodes/"))},
        **reads,   # per command: its bytes, their share of the repository, of them video and meta/episodes
        "download": {"episodes": CHOSEN, "episode_bytes": own, "file_bytes": download_bytes,
                     "requests": report["transfer"]["requests"], "ratio": round(download_bytes / own, 2)},
    }
    print(write_results(summary, args.out))


if __name__ == "__main__":
    main()
