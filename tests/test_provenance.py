"""Every result file the docs cite carries its provenance (issue 39, item 4): the commit it was measured at and the
command that measured it, so a figure can be traced and re-run. A file without them is re-measured or taken out."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cited() -> set[str]:
    """The result files named in README.md and docs/ (with or without their folder)."""
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    held = {p.name for p in (ROOT / "docs/results").glob("*.json")}
    named = {name for path in texts for name in re.findall(r"([\w.-]+\.json)\b", path.read_text())}
    missing = {n for path in texts for n in re.findall(r"docs/results/([\w.-]+\.json)\b", path.read_text())} - held
    assert not missing, f"the docs cite result files that are not there: {sorted(missing)}"
    return named & held


def provenance_of(body) -> dict:
    found = {}

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("git_commit", "commit") and isinstance(value, str) and re.fullmatch(r"[0-9a-f]{7,40}", value):
                    found["commit"] = value
                elif key == "command" and isinstance(value, str) and value.strip():
                    found["command"] = value
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(body)
    return found


def test_every_cited_result_carries_commit_and_command():
    names = cited()
    assert len(names) >= 20, names   # the docs cite results; a broken pattern would pass on nothing
    lacking = {}
    for name in sorted(names):
        path = ROOT / "docs/results" / name
        assert path.is_file(), f"docs cite {name}, which is not in docs/results/"
        found = provenance_of(json.loads(path.read_text()))
        if set(found) != {"commit", "command"}:
            lacking[name] = sorted({"commit", "command"} - set(found))
    assert not lacking, lacking
