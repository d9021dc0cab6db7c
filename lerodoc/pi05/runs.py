"""Where a training run keeps its checkpoints: RUN/checkpoints/step-NNNNNN, complete when trainer.json is in it.

The one home of the run folder's layout, for the trainer (lerodoc.pi05.checkpoint) and for the readers of runs
(lerodoc.pi05.export)."""

from __future__ import annotations

from pathlib import Path


def path_of(output: Path, step: int) -> Path:
    return output / "checkpoints" / f"step-{step:06d}"


def complete(output: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint, oldest first."""
    found = []
    for folder in (output / "checkpoints").glob("step-*"):
        if (folder / "trainer.json").is_file() and folder.name[5:].isdigit():
            found.append((int(folder.name[5:]), folder))
    return sorted(found)
