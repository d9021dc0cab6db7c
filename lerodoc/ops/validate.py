"""Run the check families over a dataset and summarise what they found."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from lerodoc import access
from lerodoc.checks import ERROR, FAMILIES, Finding, family, open_context, run_checks
from lerodoc.conventions import TOLERANCE_S
from lerodoc.dataset import Dataset


@dataclass
class ValidateReport:
    dataset: str
    version: str | None
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    transfer: dict | None = None   # a hub dataset: what reading it cost (lerodoc.access)

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
                **({"transfer": self.transfer} if self.transfer else {})}


def validate(root: Path, *, videos: bool = False, deep: bool = False, tolerance_s: float = TOLERANCE_S,
             engine=None, dataset: Dataset | None = None) -> ValidateReport:
    """Run every check family on the dataset at `root`; `engine` (`lerodoc.run.engine`) reads the data files on a
    cluster (their bookkeeping columns and per-episode stats come back, not the feature values). `dataset` is
    `root` already opened by the caller, used as it is rather than opened again."""
    started = time.perf_counter()
    ctx = open_context(access.path(root), dataset, videos=videos or deep, deep=deep, tolerance_s=tolerance_s, engine=engine)
    report = ValidateReport(dataset=str(root), version=ctx.dataset.version if ctx.dataset else None,
                            findings=run_checks(ctx))
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
