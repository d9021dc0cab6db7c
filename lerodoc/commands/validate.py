"""`lerodoc validate`: every defect a training run would trip over, found up front."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lerodoc import api, render
from lerodoc.conventions import TOLERANCE_S
from lerodoc.errors import ExitCode
from lerodoc.options import EngineName, EngineOpt, JsonOpt, RayAddressOpt, resolve_dataset


def validate(
    dataset: Annotated[Optional[Path], typer.Argument(help="Dataset root (the folder holding meta/), or "
                                                      "hf://datasets/OWNER/NAME[@REVISION], read in place by "
                                                      "range requests.",
                                                      show_default="the current folder, when it holds "
                                                      "meta/info.json")] = None,
    videos: Annotated[bool, typer.Option("--videos", help="Also check the video containers (no decoding).")] = False,
    deep: Annotated[bool, typer.Option("--deep", help="Also decode the first and last frame of each episode.")] = False,
    tolerance_s: Annotated[float, typer.Option(help="Timestamp tolerance, as lerobot's tolerance_s.")] = TOLERANCE_S,
    stats: Annotated[Optional[bool], typer.Option("--stats/--no-stats", help="Read the per-episode stats and "
                                                  "recompute them from every numeric column.",
                                                  show_default="on for a local dataset; for hf:// only with "
                                                  "--deep")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Count warnings as errors: exit 1 when there is any "
                                         "finding.")] = False,
    list_checks: Annotated[bool, typer.Option("--list-checks", help="Print every check code and exit.")] = False,
    engine: EngineOpt = EngineName.pool,
    ray_address: RayAddressOpt = None,
    json: JsonOpt = False,
) -> None:
    """Check layout and schema, indices, timestamps, stats, tasks and (with --videos) videos.

    Each finding has a stable code, a severity, where it is (file, episode, feature, channel), what is
    wrong and how to fix it, and whether `lerodoc repair` fixes it. Exit 0 when there is no error
    (warnings allowed), 1 when there are errors (with --strict: any finding).

    Example: lerodoc validate data/pusht --videos
    """
    if list_checks:
        from lerodoc.ops.validate import catalogue   # numpy and pyarrow: never on --help
        rows = catalogue()
        if json:
            render.print_json({"checks": rows})
        else:
            render.out().print(render.table("checks", ["code", "family", "severity", "meaning", "fix", "repair"],
                                          [[r["code"], r["family"], r["severity"], r["meaning"], r["fix"],
                                            "yes" if r["repair"] else "-"] for r in rows]))
        return
    dataset = resolve_dataset(dataset)
    report = api.validate(dataset, videos=videos, deep=deep, tolerance_s=tolerance_s, engine=engine.value,
                          ray_address=ray_address, stats=stats)
    failed = report.errors or (strict and report.warnings)
    code = ExitCode.FINDINGS if failed else ExitCode.OK
    if json:
        render.print_json({**report.to_json(), "strict": strict}, exit_code=code)
    else:
        if report.findings:
            render.out().print(render.table(
                f"{len(report.findings)} findings", ["code", "severity", "where", "message", "fix"],
                [[f.code, f.severity, _where(f), f.message, (f.hint or "") + (" [repair]" if f.fixable else "")]
                 for f in report.findings]))
        render.out().print(f"{report.dataset}: {report.errors} errors, {report.warnings} warnings "
                           f"({report.seconds:.2f} s)")
        for skipped in report.skipped:
            render.out().print(f"skipped: {skipped['checks']}, as {skipped['why']}; {skipped['run_with']} runs them")
        if report.transfer:
            render.out().print(render.transfer_line(report.transfer))
    if code:
        raise typer.Exit(int(code))


def _where(finding) -> str:
    parts = [finding.file, None if finding.episode is None else f"episode {finding.episode}", finding.feature,
             None if finding.channel is None else f"channel {finding.channel}"]
    return ", ".join(p for p in parts if p)
