"""Where a training run keeps its checkpoints: RUN/checkpoints/step-NNNNNN, complete when trainer.json is in it.

The one home of the run folder's layout, for the trainer (lerodoc.pi05.checkpoint) and for the readers of runs
(lerodoc.pi05.export)."""

from __future__ import annotations

import json
from pathlib import Path

from lerodoc.errors import LerodocError


def path_of(output: Path, step: int) -> Path:
    return output / "checkpoints" / f"step-{step:06d}"


def complete(output: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint, oldest first."""
    found = []
    for folder in (output / "checkpoints").glob("step-*"):
        if (folder / "trainer.json").is_file() and folder.name[5:].isdigit():
            found.append((int(folder.name[5:]), folder))
    return sorted(found)


def load_trainer(checkpoint: Path) -> dict:
    """A checkpoint's trainer.json: its step, the run's config, the model's config and the norm stats."""
    path = Path(checkpoint) / "trainer.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LerodocError(f"could not be read ({exc})", file=path,
                           hint="pass a complete checkpoint of `lerodoc train pi05`") from None
