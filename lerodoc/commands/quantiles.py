"""`lerodoc quantiles`: exact stats and q01..q99 for every numeric feature, from parquet only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lerodoc import render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, EngineName, EngineOpt, ForceOpt, InPlaceOpt, JsonOpt,
                             RayAddressOpt, WorkersOpt)


def quantiles(
    dataset: DatasetArg,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write a copy with the new stats "
                                                   "(unchanged files are hard links).", rich_help_panel="Output")] = None,
    in_place: InPlaceOpt = False,
    features: Annotated[list[str], typer.Option("--features", "-f", help="Only these features (repeatable); "
                                                "default: every numeric feature.")] = [],
    openpi_norm_stats: Annotated[Optional[Path], typer.Option(help="Also write openpi's norm_stats.json here.",
                                                              rich_help_panel="Output")] = None,
    budget_mb: Annotated[int, typer.Option(help="Memory for holding values; larger data is selected exactly "
                                           "in passes.", rich_help_panel="Performance")] = 512,
    workers: WorkersOpt = DEFAULT_WORKERS,
    engine: EngineOpt = EngineName.pool,
    ray_address: RayAddressOpt = None,
    force: ForceOpt = False,
    json: JsonOpt = False,
) -> None:
    """Compute min, max, mean, std, count and q01, q10, q50, q90, q99 per channel, exactly, from the parquet.

    Without -o or --in-place nothing is written but --openpi-norm-stats; the channel table flags
    near-constant channels and channels whose quantile-normalised extremes are huge (the cause of
    exploding losses). Stats go to stats.json and the per-episode stats of v3.0, or episodes_stats.jsonl
    of v2.1; no other file changes.

    Example: lerodoc quantiles data/pusht --in-place
    """
    from lerodoc.engine import make as make_engine
    from lerodoc.ops.quantiles import quantiles as compute_quantiles
    report = compute_quantiles(dataset, output, in_place=in_place, features=features or None, workers=workers,
                               budget=budget_mb << 17, openpi_path=openpi_norm_stats, force=force,
                               engine=make_engine(engine.value, ray_address))
    if json:
        render.print_json(report.to_json())
        return
    render.out.print(render.table(
        f"{report.frames} frames, {len(report.features)} features",
        ["feature", "ch", "name", "min", "q01", "q50", "q99", "max", "flags"],
        [[r["feature"], r["channel"], r["name"], *(f"{r[k]:.6g}" for k in ("min", "q01", "q50", "q99", "max")),
          ", ".join(r["flags"])] for r in report.channels]))
    flagged = [r for r in report.channels if r["flags"]]
    if flagged:
        render.warning(f"{len(flagged)} channels flagged; drop them from state/action "
                       "with `lerodoc select` before training")
    where = report.output or "nowhere (pass -o or --in-place to store them)"
    render.out.print(f"stats written to {where}" + (f"; openpi norm stats in {report.openpi_norm_stats}"
                                                     if report.openpi_norm_stats else "")
                     + f" ({report.seconds:.2f} s, {report.passes} pass(es) for the dataset quantiles)")
