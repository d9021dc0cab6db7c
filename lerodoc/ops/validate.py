"""Run the check families over a dataset and summarise what they found."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from lerodoc import access
from lerodoc.checks import FAMILIES, family, open_context, run_checks
from lerodoc.checks.common import ERROR, Finding
from lerodoc.conventions import TOLERANCE_S
from lerodoc.dataset import Dataset


@dataclass
class ValidateReport:
    dataset: str
    version: str | None
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    transfer: dict | None = None   # a hub dataset: what reading it cost (lerodoc.access)
    skipped: list[dict] = field(default_factory=list)   # checks that did not run, why, and the option that runs them

    @property
    def errors(self) -> int:
        return sum(f.severity == ERROR for f in self.findings)

    @property
    def warnings(self) -> int:
        return len(self.findings) - self.errors

    def to_json(self) -> dict:
        return {"dataset": self.dataset, "codebase_version": self.version, "errors": self.errors,
                "warnings": self.warnings, "fixable": sum(f.fixable for f in self.findings),
                "seconds": self.seconds, "findings": [f.to_json() for f in self.findings],
                "skipped": self.skipped, **({"transfer": self.transfer} if self.transfer else {})}


# what validate leaves out of the stats family when it does not recompute the stats (`stats` below)
STATS_SKIPPED = {"family": "stats", "checks": "per-episode stats and their agreement with the data (STA0xx)",
                 "why": "they read every numeric column of every data file (and the episodes' stats columns)",
                 "run_with": "--stats"}


def validate(root: Path, *, videos: bool = False, deep: bool = False, tolerance_s: float = TOLERANCE_S,
             engine=None, dataset: Dataset | None = None, stats: bool | None = None) -> ValidateReport:
    """Run every check family on the dataset at `root`; `engine` (`lerodoc.run.engine`) reads the data files on a
    cluster (their bookkeeping columns and per-episode stats come back, not the feature values). `dataset` is
    `root` already opened by the caller, used as it is rather than opened again.

    `stats`: read the per-episode stats and recompute them from every numeric column. None (the default) does so for
    a local dataset and, for a hub one (hf://), only with `deep`: there it would fetch nearly every byte of the
    parquet, where the other checks read the bookkeeping columns and footers. When it does not run, the report's
    `skipped` says so; stats.json is checked either way."""
    started = time.perf_counter()
    root = access.path(root)
    recompute = stats if stats is not None else (deep or not access.is_remote(root))
    ctx = open_context(root, dataset, videos=videos or deep, deep=deep, tolerance_s=tolerance_s, engine=engine,
                       stats=recompute)
    report = ValidateReport(dataset=str(root), version=ctx.dataset.version if ctx.dataset else None,
                            findings=run_checks(ctx), skipped=[] if recompute else [dict(STATS_SKIPPED)])
    report.seconds = round(time.perf_counter() - started, 3)
    report.transfer = access.transfer(ctx.root)
    return report


def catalogue() -> list[dict]:
    """Every check code: family, severity, meaning, fix, whether repair fixes it."""
    rows = []
    for name in FAMILIES:
        codes = getattr(__import__(family(name).__module__, fromlist=["CODES"]), "CODES", {})
        for code, (severity, meaning, hint, fixable) in sorted(codes.items()):
            rows.append({"code": code, "family": name, "severity": severity, "meaning": meaning, "fix": hint,
                         "repair": fixable})
    return rows
