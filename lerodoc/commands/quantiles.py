"""`lerodoc quantiles`: exact stats and q01..q99 for every numeric feature, from parquet only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lerodoc import api, render
from lerodoc.options import (DEFAULT_WORKERS, DatasetArg, DryRunOpt, EngineName, EngineOpt, ForceOpt, JsonOpt,
                             PushOpt, RayAddressOpt, WorkersOpt, pushing)


def quantiles(
    dataset: DatasetArg = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Store the stats in a copy instead "
                                                   "(unchanged files are hard links).", rich_help_panel="Output")] = None,
    in_place: Annotated[bool, typer.Option("--in-place", help="Store the stats in DATASET's metadata (the default "
                                           "without -o; kept for scripts that pass it).",
                                           rich_help_panel="Output")] = False,
    dry_run: DryRunOpt = False,
    features: Annotated[list[str], typer.Option("--features", "-f", help="Only these features (repeatable); "
                                                "default: every numeric feature.")] = [],
    openpi_norm_stats: Annotated[Optional[Path], typer.Option(help="Also write openpi's norm_stats.json here.",
                                                              rich_help_panel="Output")] = None,
    openpi_state_key: Annotated[Optional[str], typer.Option(help="The feature openpi's `state` comes from.",
                                                            show_default="observation.state, else state",
                                                            rich_help_panel="Output")] = None,
    openpi_action_key: Annotated[Optional[str], typer.Option(help="The feature openpi's `actions` come from.",
                                                             show_default="action, else actions",
                                                             rich_help_panel="Output")] = None,
    budget_mb: Annotated[int, typer.Option(help="Memory for holding values; larger data is selected exactly "
                                           "in passes.", rich_help_panel="Performance")] = 512,
    workers: WorkersOpt = DEFAULT_WORKERS,
    engine: EngineOpt = EngineName.pool,
    ray_address: RayAddressOpt = None,
    force: ForceOpt = False,
    json: JsonOpt = False,
    push_to_hub: PushOpt = None,
) -> None:
    """Compute min, max, mean, std, count and q01, q10, q50, q90, q99 per channel, exactly, from the parquet,
    and store them in DATASET's metadata.

    The stats go to meta/stats.json and the per-episode stats (v3.0: meta/episodes; v2.1:
    episodes_stats.jsonl), replaced in one atomic swap; the data and video files keep their bytes and
    inodes. With -o the stats go into a copy instead; with --dry-run nothing is written. The channel
    table flags near-constant channels and channels whose quantile-normalised extremes are huge (the
    cause of exploding losses), and the summary names the q01/q99 that are new or moved.

    Example: lerodoc quantiles data/pusht
    """
    with pushing("quantiles", push_to_hub, [dataset], dry_run=dry_run, output=output):
        from lerodoc.promote.staging import output_target   # numpy and pyarrow: never on --help
        output_target(dataset, output, in_place or output is None)   # -o or (--in-place, the default): not both
        if dry_run and openpi_norm_stats is not None:
            raise typer.BadParameter("--dry-run writes nothing; drop --openpi-norm-stats or --dry-run",
                                     param_hint="--dry-run")
        report = api.quantiles(dataset, output, store=not dry_run, features=features or None, workers=workers,
                               budget_mb=budget_mb, openpi_norm_stats=openpi_norm_stats,
                               openpi_state_key=openpi_state_key, openpi_action_key=openpi_action_key, force=force,
                               engine=engine.value, ray_address=ray_address)
        show(report, json)


def show(report, json: bool) -> None:
    """What `lerodoc quantiles` prints of `report` (an `ops.quantiles.QuantilesReport`)."""
    if json:
        render.print_json(report.to_json())
        return
    render.out().print(render.table(
        f"{report.frames} frames, {len(report.features)} features",
        ["feature", "ch", "name", "min", "q01", "q50", "q99", "max", "flags"],
        [[r["feature"], r["channel"], r["name"], *(f"{r[k]:.6g}" for k in ("min", "q01", "q50", "q99", "max")),
          ", ".join(r["flags"])] for r in report.channels]))
    flagged = [r for r in report.channels if r["flags"]]
    if flagged:
        render.warning(f"{len(flagged)} channels flagged; drop them from state/action "
                       "with `lerodoc select` before training")
    render.out().print(change_summary(report.changes))
    where = report.output if report.stored else "nowhere (--dry-run)"
    render.out().print(f"stats stored in {where}" + (f"; openpi norm stats in {report.openpi_norm_stats}"
                                                    if report.openpi_norm_stats else "")
                     + f" ({report.seconds:.2f} s, {report.passes} pass(es) for the dataset quantiles)")


def change_summary(changes: list[dict]) -> str:
    """One line: how many q01/q99 values are new, how many moved, and the largest moves."""
    if not changes:
        return "q01/q99: unchanged"
    new = [c for c in changes if c["old"] is None]
    moved = sorted((c for c in changes if c["old"] is not None), key=lambda c: -abs(c["new"] - c["old"]))
    parts = []
    if new:
        parts.append(f"{len(new)} new (no q01/q99 before)" if len(new) > 1 else "1 new")
    if moved:
        shown = ", ".join(f"{c['feature']}[{c['channel']}] {c['stat']} {c['old']:.6g} -> {c['new']:.6g}"
                          for c in moved[:3])
        parts.append(f"{len(moved)} moved (largest: {shown})")
    return "q01/q99: " + "; ".join(parts)
