"""The writer zoo: small datasets written by real lerobot releases and exporter-style writers.

`members()` lists what tests/zoo/members/ holds (regenerate with `python3 -m tests.zoo.build`,
see tests/zoo/README.md). Each member carries its check_dataset.py expectation and what
lerobot 0.6.1's LeRobotDataset said when it loaded it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ZOO = Path(__file__).resolve().parent
MEMBERS = ZOO / "members"


@dataclass(frozen=True)
class Member:
    name: str
    root: Path                 # the dataset folder (meta/, data/, videos/); read it, never write into it
    version: str               # codebase_version: "v2.1" or "v3.0"
    expect: dict               # tests/lerobot_oracle/check_dataset.py's format
    lerobot_loads: bool        # LeRobotDataset 0.6.1 loads it with every frame aligned
    writer: str                # e.g. "lerobot 0.4.4 record (...)" or "exporter: ..."
    refusal: str | None = None  # what lerobot 0.6.1 said when it did not load it
    oracle: str = ""           # how lerobot_loads was decided (v2.x: lerobot 0.6.1's converter, then the loader)

    @property
    def release(self) -> str | None:
        """The lerobot release that wrote it ("0.4.4"), None for exporter-style members."""
        return self.writer.split()[1] if self.writer.startswith("lerobot ") else None

    def __str__(self) -> str:   # readable pytest ids
        return self.name


def members() -> list[Member]:
    out = []
    for path in sorted(MEMBERS.glob("*.json")):
        meta = json.loads(path.read_text())
        out.append(Member(name=path.stem, root=MEMBERS / path.stem, version=meta["version"],
                          expect=meta["expect"], lerobot_loads=bool(meta.get("lerobot_loads")),
                          writer=meta["writer"], refusal=meta.get("refusal"),
                          oracle=meta.get("oracle", "")))
    return out
