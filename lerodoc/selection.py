"""Episode selections: the one syntax every command that picks episodes takes, and its one set of errors.

A selection is `N`, `N-M` or `N,M-K` (an option may be repeated: the selections add up), or lerobot's JSON
list `[0, 2, 5]` (what `--episodes` of lerobot's scripts takes). A reversed range (`5-3`), an empty selection
and an episode the dataset does not hold are usage errors (exit 2) that name the valid episodes in the
command's own words; nothing is read or written before the selection is known to be good.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable

from lerodoc.errors import UsageError

SYNTAX = "write N, N-M, N,M-K or a JSON list such as [0, 2, 5]"
_RANGE = re.compile(r"(\d+)(?:\s*-\s*(\d+))?")


@dataclass(frozen=True)
class Selection:
    """Episode numbers as typed: inclusive spans (`3-5` is (3, 5)), checked against a dataset by `resolve`."""
    text: str
    spans: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, numbers: Iterable[int]) -> Selection:
        """The selection of exactly `numbers` (as `format_ranges` writes them)."""
        numbers = sorted(set(numbers))
        spans: list[tuple[int, int]] = []
        for n in numbers:
            if spans and spans[-1][1] == n - 1:
                spans[-1] = (spans[-1][0], n)
            else:
                spans.append((n, n))
        return cls(format_ranges(numbers), tuple(spans))

    def resolve(self, available: Iterable[int], option: str, holder: str = "the dataset") -> tuple[int, ...]:
        """The selected episodes, sorted; every one must be in `available` (`holder` names whose episodes they
        are, in the message: "the dataset", "source B (day2)")."""
        have = sorted(set(available))
        present = set(have)
        chosen: set[int] = set()
        for lo, hi in self.spans:
            missing = next((n for n in (lo, hi) if not have or not have[0] <= n <= have[-1]), None)
            if missing is None:
                numbers = range(lo, hi + 1)
                missing = next((n for n in numbers if n not in present), None)
            if missing is not None:
                held = f"it holds episodes {format_ranges(have)}" if have else "it holds no episode"
                raise UsageError(f"{option} {self.text}: {holder} has no episode {missing} ({held})",
                                 hint=f"choose among {format_ranges(have) or 'none'}")
            chosen.update(numbers)
        return tuple(sorted(chosen))


def parse(values: str | Iterable[str], option: str) -> Selection:
    """One selection from an option's value(s); a value that is not the syntax, a reversed range or nothing at
    all is a UsageError naming `option`."""
    texts = [values] if isinstance(values, str) else list(values)
    spans: list[tuple[int, int]] = []
    for text in texts:
        spans += _spans(text, option)
    shown = " ".join(t.strip() for t in texts)
    if not spans:
        raise UsageError(f"{option} {shown!r}: no episode given" if shown else f"{option}: no episode given",
                         hint=SYNTAX)
    return Selection(shown, tuple(spans))


def _spans(text: str, option: str) -> list[tuple[int, int]]:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            value = json.loads(stripped)
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
            raise UsageError(f"{option} {text!r}: not a JSON list of episode numbers", hint=SYNTAX)
        return [(v, v) for v in value]
    spans = []
    for part in (p.strip() for p in stripped.split(",")):
        if not part and stripped:
            raise UsageError(f"{option} {text!r}: an empty item between commas", hint=SYNTAX)
        if not part:
            continue
        match = _RANGE.fullmatch(part)
        if not match:
            raise UsageError(f"{option} {text!r}: {part!r} is not an episode number or range", hint=SYNTAX)
        lo, hi = int(match[1]), int(match[2] or match[1])
        if hi < lo:
            raise UsageError(f"{option} {text!r}: {lo}-{hi} is a reversed range", hint=f"write {hi}-{lo}")
        spans.append((lo, hi))
    return spans


def items(text: str) -> list[str]:
    """`text` cut at the commas outside brackets: `train:[0, 1],val:2-3` -> ['train:[0, 1]', 'val:2-3']."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [item.strip() for item in out if item.strip()]


def format_ranges(numbers: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the selection syntax, shortest form)."""
    numbers = sorted(numbers)
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)
