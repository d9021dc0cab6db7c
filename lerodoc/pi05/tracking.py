"""Run tracking beside metrics.jsonl: Weights & Biases (`--wandb`) and TensorBoard (`--tensorboard`).

metrics.jsonl stays the record (resume truncates and repeats it); the trackers mirror its rows as they are
flushed: per step train/loss, train/grad_norm, train/lr, train/step_s, train/data_wait_s, per logging window
perf/samples_per_s, perf/data_wait (share of wall time) and perf/mfu (on GPUs with a known peak), and at each
held-out evaluation val/loss (metrics.jsonl's val_loss).

- W&B logs into RUN/wandb/ under the project `--wandb-project`. It honours WANDB_MODE: `offline` writes the
  run folder (RUN/wandb/offline-run-*) with no network, for `wandb sync` later. The run id is kept in
  RUN/tracking.json, so `--resume` continues the same W&B run.
- TensorBoard writes event files into RUN/tensorboard/ (`tensorboard --logdir RUN/tensorboard`).
Only rank 0 tracks. Both packages are optional extras: `pip install 'lerodoc[wandb]'`, `'lerodoc[tensorboard]'`.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from pathlib import Path

from lerodoc.errors import LerodocError
from lerodoc.formats.jsonl import write_json

# metrics.jsonl key -> tracker scalar name
NAMES = {"loss": "train/loss", "grad_norm": "train/grad_norm", "lr": "train/lr", "step_s": "train/step_s",
         "data_wait_s": "train/data_wait_s", "samples_per_s": "perf/samples_per_s", "data_wait": "perf/data_wait",
         "mfu": "perf/mfu", "val_loss": "val/loss"}


def require(wandb: bool, tensorboard: bool) -> None:
    """Refuse a tracker whose package is missing, before any work."""
    for wanted, package in ((wandb, "wandb"), (tensorboard, "tensorboard")):
        if wanted and importlib.util.find_spec(package) is None:
            raise LerodocError(f"--{package} needs the {package} package, which is not installed",
                               hint=f"pip install 'lerodoc[{package}]'")


def scalars(row: dict) -> dict[str, float]:
    """A metrics.jsonl row as tracker scalars (NAMES); None and flags left out."""
    return {NAMES[k]: float(v) for k, v in row.items() if k in NAMES and v is not None and not isinstance(v, bool)}


class Tracker:
    """Mirrors metrics rows to the trackers a run asked for; a no-op without any (or off rank 0)."""

    def __init__(self, output: Path, config: dict, *, wandb_project: str | None, tensorboard: bool):
        self.sent = 0
        self.wandb = self.writer = None
        if wandb_project:
            import wandb   # an optional extra, imported only when asked for
            state_path = output / "tracking.json"
            state = json.loads(state_path.read_text()) if state_path.is_file() else {}
            run_id = state.get("wandb_id") or uuid.uuid4().hex[:8]
            write_json(state_path, state | {"wandb_id": run_id})
            self.wandb = wandb.init(project=wandb_project, dir=str(output), id=run_id, resume="allow",
                                    name=output.name, config=config)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter   # needs the optional tensorboard package
            self.writer = SummaryWriter(log_dir=str(output / "tensorboard"))

    @classmethod
    def open(cls, output: Path, run, main: bool) -> Tracker:
        """The trackers of RunConfig `run` on the main process; none elsewhere."""
        project = run.wandb_project if main else None
        return cls(output, run.to_json(), wandb_project=project, tensorboard=main and run.tensorboard)

    def sync(self, rows: list[dict]) -> None:
        """Send the rows not sent yet (Metrics.rows grows by a window at each flush)."""
        if len(rows) == self.sent or not (self.wandb or self.writer):
            return
        for row in rows[self.sent:]:
            values = scalars(row)
            if self.wandb:
                self.wandb.log(values, step=row["step"])
            if self.writer:
                for name, value in values.items():
                    self.writer.add_scalar(name, value, row["step"])
        self.sent = len(rows)
        if self.writer:
            self.writer.flush()

    def close(self, rows: list[dict]) -> None:
        self.sync(rows)
        if self.wandb:
            self.wandb.finish()
        if self.writer:
            self.writer.close()
