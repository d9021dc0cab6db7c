"""Meta-file I/O shared by the format modules: JSON, JSON lines, stats, and atomic replacement.

Every meta file is written to a temporary name and renamed over its target, so a file that is a hard
link into another dataset (see staging.staged_edit) is replaced, never written through.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from lerodoc.errors import LerodocError


def replace_file(path: Path, write) -> None:
    """Call `write(tmp_path)`, then rename the result over `path` (atomic; never writes into `path`'s inode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    replace_file(path, lambda tmp: tmp.write_text(text))


def write_json(path: Path, obj, indent: int = 4) -> None:
    write_text(path, json.dumps(obj, indent=indent) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise LerodocError("file is missing", file=path)
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise LerodocError(f"line {lineno} is not valid JSON ({exc})", file=path) from None
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def stats_from_json(raw: dict) -> dict[str, dict[str, np.ndarray]]:
    """{feature: {stat: nested list}} -> arrays; scalars become shape (1,) as lerobot loads them."""
    return {feat: {name: np.atleast_1d(np.asarray(value, dtype=np.int64 if name == "count" else np.float64))
                   for name, value in by_stat.items()}
            for feat, by_stat in raw.items()}


def stats_to_json(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    return {feat: {name: np.asarray(value).tolist() for name, value in by_stat.items()}
            for feat, by_stat in stats.items()}
