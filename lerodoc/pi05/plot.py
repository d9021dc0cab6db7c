"""The training curves of a run as a PNG: loss (per step and smoothed), lr, gradient norm and samples/s against
step, from its metrics.jsonl (matplotlib, see lerodoc.report.plots.training_curves)."""

from __future__ import annotations

import json
from pathlib import Path


def plot_losses(metrics: Path, out: Path) -> None:
    """Draw `metrics` (one JSON object per step) into the PNG `out`."""
    from lerodoc.execution.files import new_file
    from lerodoc.report.plots import png, training_curves
    rows = [json.loads(line) for line in Path(metrics).read_text().splitlines() if line.strip()]
    with new_file(out) as tmp:    # `out` may be a link (to an input, say): replaced by name, never written into
        tmp.write_bytes(png(training_curves(rows)))
