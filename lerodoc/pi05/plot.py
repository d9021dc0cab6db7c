"""The training curves of a run as a PNG: loss (per step and smoothed, and the held-out loss where the run held
episodes out), lr, gradient norm and samples/s against step, from its metrics.jsonl (matplotlib, see
lerodoc.report.plots.training_curves)."""

from __future__ import annotations

import json
from pathlib import Path

from lerodoc.files import new_file


def plot_losses(metrics: Path, out: Path) -> None:
    """Draw `metrics` (one JSON object per step) into the PNG `out`."""
    from lerodoc.report.plots import png, training_curves   # matplotlib: 2 s to import, paid once the run is over
    rows = [json.loads(line) for line in Path(metrics).read_text().splitlines() if line.strip()]
    fig = training_curves(rows)
    held = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    if held:
        loss_ax = fig.axes[0]      # training_curves draws the loss first
        steps, values = zip(*held)
        loss_ax.plot(steps, values, "o-", color="#d1495b", linewidth=1.6, markersize=4,
                     label="held-out (fixed noise and times)")
        loss_ax.legend(fontsize=8)
    with new_file(out) as tmp:    # `out` may be a link (to an input, say): replaced by name, never written into
        tmp.write_bytes(png(fig))
