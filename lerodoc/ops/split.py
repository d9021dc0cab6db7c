"""Split a dataset into parts, each a complete dataset at OUT/<part>: `merge` of one source with
`--episodes` per part, so rows are renumbered, videos cut by stream copy (only clips that do not start on
a keyframe are re-encoded, and reported), and each part gets exact stats of its own.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping

import numpy as np

from lerodoc import access
from lerodoc.conventions import WRITES
from lerodoc.dataset import Dataset
from lerodoc.errors import UsageError
from lerodoc.ops import rewrite
from lerodoc.ops.merge import MergeReport, merge
from lerodoc.selection import Selection, items, parse
from lerodoc.promote.staging import SPLIT_MARK, check_output, staged_output
from lerodoc.formats.jsonl import write_json

_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass
class SplitReport:
    dataset: str
    output: str
    parts: dict[str, list[int]]                       # part -> source episodes, in order
    left_out: list[int] = field(default_factory=list)  # source episodes in no part
    reports: dict[str, dict] = field(default_factory=dict)   # part -> its merge report
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def _part_name(name: str, option: str) -> str:
    if not _PART.fullmatch(name):
        raise UsageError(f"{option}: {name!r} is not a usable part name (letters, digits, _ . -)")
    return name


def parse_fractions(spec: str) -> dict[str, float]:
    """`train=0.9,val=0.1` -> {"train": 0.9, "val": 0.1}: the syntax only; `check_fractions` holds the values to
    the rules where `split` takes them."""
    parts: dict[str, float] = {}
    for item in (i.strip() for i in spec.split(",") if i.strip()):
        name, sep, value = item.partition("=")
        try:
            fraction = float(value)
        except ValueError:
            fraction = None
        if not sep or fraction is None:
            raise UsageError(f"--into {item!r}: expected NAME=FRACTION with 0 < FRACTION <= 1")
        if name.strip() in parts:
            raise UsageError(f"--into: part {name.strip()!r} is named twice")
        parts[name.strip()] = fraction
    return parts


def check_fractions(fractions: Mapping[str, float]) -> dict[str, float]:
    """Parts by fraction as `split` takes them: usable names, each fraction in (0, 1], summing to at most 1."""
    parts = {_part_name(name, "--into"): float(f) for name, f in fractions.items()}
    bad = next((name for name, f in parts.items() if not 0 < f <= 1), None)
    if bad is not None:
        raise UsageError(f"--into {bad}={parts[bad]!r}: expected NAME=FRACTION with 0 < FRACTION <= 1")
    if not parts or sum(parts.values()) > 1 + 1e-9:
        shown = ",".join(f"{name}={f!r}" for name, f in parts.items())
        raise UsageError(f"--into {shown!r}: fractions must be given and sum to at most 1")
    return parts


def check_parts(parts: Mapping[str, Selection]) -> dict[str, Selection]:
    """Parts by episode as `split` takes them: at least one, each with a usable name (`resolve_parts` checks the
    episodes against the dataset)."""
    if not parts:
        raise UsageError("--episodes: no part given", hint="e.g. --episodes train:0-7,val:8-9")
    return {_part_name(name, "--episodes"): selection for name, selection in parts.items()}


def assign_fractions(episodes: list[int], fractions: dict[str, float], seed: int | None) -> dict[str, list[int]]:
    """Episodes into parts by fraction: counts by largest remainder (every part at least one episode when
    the fractions sum to 1); in episode order, or shuffled by `seed` first. Each part's list is sorted."""
    order = list(episodes) if seed is None else [int(i) for i in np.random.default_rng(seed).permutation(episodes)]
    n = len(order)
    exact = {name: f * n for name, f in fractions.items()}
    counts = {name: int(np.floor(x)) for name, x in exact.items()}
    budget = min(n, int(round(sum(exact.values()))))
    for name in sorted(exact, key=lambda k: exact[k] - counts[k], reverse=True)[:max(budget - sum(counts.values()), 0)]:
        counts[name] += 1
    empty = [name for name, c in counts.items() if c == 0]
    if empty:
        raise UsageError(f"--into: part {empty[0]!r} would hold no episode ({n} episodes in the dataset)")
    parts, start = {}, 0
    for name, count in counts.items():
        parts[name] = sorted(order[start:start + count])
        start += count
    return parts


def parse_parts(values: list[str]) -> dict[str, Selection]:
    """`train:0-99,val:100-119` or `train:[0, 3, 4]` (or repeated options) -> {part: its selection}; an item
    without `NAME:` continues the part before it (`train:0-3,7`). `resolve_parts` checks them against a dataset."""
    parts: dict[str, list[str]] = {}
    current = None
    for value in values:
        for item in items(value):
            name, sep, spec = item.partition(":")
            if sep:
                current = name.strip()
                parts.setdefault(current, [])
            elif current is None:
                raise UsageError(f"--episodes {value!r}: expected PART:EPISODES,PART:EPISODES",
                                 hint="e.g. --episodes train:0-7,val:8-9")
            else:
                spec = name
            parts[current].append(spec)
    return {name: replace(parse(specs, "--episodes"), text=f"{name}:{','.join(specs)}")
            for name, specs in parts.items()}


def resolve_parts(parts: Mapping[str, Selection], episodes: list[int]) -> dict[str, list[int]]:
    """{part: sorted episodes}: every episode must be the dataset's and in one part only (usage errors otherwise,
    naming the dataset's episodes)."""
    out, seen = {}, {}
    for name, selection in parts.items():
        chosen = selection.resolve(episodes, "--episodes")
        for e in chosen:
            if e in seen:
                raise UsageError(f"--episodes: episode {e} is in both {seen[e]!r} and {name!r}", episode=e,
                                 hint="each episode goes into one part")
            seen[e] = name
        out[name] = list(chosen)
    return out


def split(src: Path, out: Path, *, fractions: Mapping[str, float] | None = None,
          parts: Mapping[str, Selection] | None = None, seed: int | None = None, to: str | None = None,
          workers: int = 1, force: bool = False, dry_run: bool = False,
          progress: rewrite.Progress | None = None) -> SplitReport:
    """Write each part of `src` as a complete dataset at `out/<part>`: parts by `fractions` of the episodes
    ({"train": 0.9, "val": 0.1}; in episode order, or shuffled by `seed`) or by episode (`parts`)."""
    started = time.perf_counter()
    if (fractions is None) == (parts is None):
        raise UsageError("give either --into NAME=FRACTION,... or --episodes NAME:N-M,...")
    fractions = check_fractions(fractions) if fractions is not None else None
    parts = check_parts(parts) if parts is not None else None
    ds = Dataset.open(src)
    if not dry_run:   # before any work: an -o on the input, or taken, stops here
        check_output(out, (ds.root,), force=force)
    numbers = [ep.index for ep in ds.episodes]
    parts = assign_fractions(numbers, fractions, seed) if fractions is not None else resolve_parts(parts, numbers)
    used = {e for eps in parts.values() for e in eps}
    shown = ds.root if access.is_remote(ds.root) else Path(src).absolute()   # a hub dataset by its URL
    report = SplitReport(dataset=str(shown), output=str(Path(out).absolute()), parts=parts,
                         left_out=[e for e in numbers if e not in used])
    to = to or WRITES

    def run(root: Path, plan_only: bool) -> None:
        last = list(parts)[-1] if parts else None
        for name, chosen in parts.items():
            ds.keep_stats(name != last)   # the source's stats tables, read once for every part
            part: MergeReport = merge([ds], root / name, episodes={0: Selection.of(chosen)}, to=to, workers=workers,
                                      dry_run=plan_only, progress=progress)
            part.output = str(Path(out).absolute() / name)
            report.reports[name] = part.to_json()

    if dry_run:
        run(Path(out), True)
    else:
        with staged_output(Path(out), force=force, inputs=(ds.root,)) as tmp:   # every part, or none
            run(tmp, False)
            write_json(tmp / SPLIT_MARK, {"command": "split", "source": str(ds.root), "parts": list(report.reports)})
    report.seconds = round(time.perf_counter() - started, 3)
    return report
