"""Every performance figure in README.md and docs/*.md (speed ratios, samples/s, MFU, seconds) is tied to a results
file in docs/results/ that exists, says where it came from, and holds that figure.

How a figure finds its files: those the paragraph (or table) that holds it names (`docs/results/*.json`, with brace
lists and `*` as in `scaling_call{6,7}_h200*.json`), and those of the nearest paragraph above and below it in the
same section that names any. The figure must then be one of those files' values of its kind, at the digits
shown: samples/s a `*samples_per_s*` value, MFU a `*mfu*` value x 100, seconds a `*_s`/`*seconds*` value; a
speed ratio (`1.56x`, a weak-scaling percentage) one of the files' ratios, or the quotient of two of their
samples/s, seconds or `*_ms` values.

A results file carries provenance (`provenance`: git commit, library versions, device, command); a figure from a
file without it must say so where it stands ("no provenance recorded", in its paragraph or the one naming the file).
A figure whose run kept no file at all must say that above it in its section ("no results file kept"); those are
listed by test_figures_without_a_results_file, and kept few. Figures that are not measurements (test
bounds, estimates on paper, others' numbers) are listed in NOT_MEASURED with the reason, and each entry must still
be found in its document.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs/results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NO_PROVENANCE = "no provenance recorded"

# a number and its unit: a speed ratio, samples/s, MFU, seconds
FIGURE = re.compile(r"(?<![\w.$/^-])(\d+(?:,\d{3})*(?:\.\d+)?)(x(?![\w^])| samples/s|% MFU| s\b)|MFU (\d+(?:\.\d+)?)%")
# table columns whose cells are figures of one kind
COLUMN_KINDS = (("samples/s", "samples/s"), ("mfu", "MFU"), ("ratio", "x"), ("weak scaling", "%ratio"),
                ("against 1 gpu", "%ratio"), ("step s", " s"), ("wall s", " s"), ("warm-up s", " s"))
SECONDS_IN = {"README.md", "train.md", "scale.md"}   # where seconds are run times, not a dataset's timestamps
# a results file's name (`x.json[l]`: x.json and x.jsonl), not a markdown **bold** one
NAMED = re.compile(r"(?<![\w*{},.\-])[\w{},.\-][\w{},*.\-]*\.json(?:\[l\])?")
NO_RESULTS_FILE = "no results file kept"   # a run that printed its figures into the page and kept no file

# (document, text that holds the figure, why it is not a measurement held in docs/results)
NOT_MEASURED = [
    ("docs/scale.md", "(0.056 to 0.29 s a MiB)", "the measured u over the bench's episode size (the cost model)"),
    ("docs/scale.md", "b = 3x an", "an assumption of the cost model (read, write, read back)"),
    ("docs/train.md", "(≥ 66 samples/s, full preset)", "the issue's bar, not a measurement"),
    ("docs/train.md", "one H200 at ≥ 66 samples/s", "the issue's bar, not a measurement"),
    ("docs/train.md", "1.76x its 38.4 samples/s at batch 16 (the issue's measurement)",
     "lerobot's figure as the issue measured it, kept in the issue, not here"),
    ("docs/train.md", "in the time left (about 200 s)", "what the call had left, not a measurement"),
    ("docs/train.md", "Sampled every 2 s", "nvidia-smi's sampling interval, a setting"),
    ("docs/train.md", "moves 0.75x those bytes", "an estimate on paper (bf16 all-gather and fp32 reduce-scatter)"),
    ("docs/train.md", "is 2.1 s per step", "an estimate on paper (26.8 GB at 12.5 GB/s), as the section says"),
    ("docs/train.md", "about 1.55x lerodoc's FLOPs", "a FLOPs ratio, not a speed: test_masked_camera_flops_ratio"),
    ("README.md", "about 1.55x lerodoc's FLOPs", "a FLOPs ratio, not a speed: test_masked_camera_flops_ratio"),
    ("docs/hub.md", "(at most 3x the episodes' own bytes)", "the issue's bar, not a measurement"),
]


def expand(pattern: str) -> list[Path]:
    """docs/results files a name in the docs stands for (`{a,b}` alternatives, `*`, `.json[l]`)."""
    name = pattern.rsplit("/", 1)[-1]
    if name.endswith("[l]"):
        return expand(name[:-3]) + expand(name[:-3] + "l")
    match = re.search(r"\{([^{}]*)\}", name)
    if match:
        return [p for alt in match.group(1).split(",")
                for p in expand(name[:match.start()] + alt + name[match.end():])]
    return sorted(RESULTS.glob(name))


def blocks(text: str) -> list[tuple[int, str, str]]:
    """(first line number, section heading, text) of every paragraph or table: runs of non-blank lines."""
    out, section, start, lines = [], "", 0, []
    for number, line in enumerate(text.splitlines() + [""], 1):
        if line.startswith("#"):
            section = line
        if line.strip() and not line.startswith("```"):
            if not lines:
                start = number
            lines.append(line)
        elif lines:
            out.append((start, section, "\n".join(lines)))
            lines = []
    return out


def figures(block: str) -> list[tuple[str, str, str]]:
    """(number as shown, kind, the line) of every figure in a paragraph or table."""
    found = []
    header = None
    for line in block.splitlines():
        if line.startswith("|") and header is None:
            header = [cell.strip().lower() for cell in line.strip("|").split("|")]
            continue
        if line.startswith("|"):
            if set(line) <= set("|-: "):
                continue
            for name, cell in zip(header, line.strip("|").split("|")):
                kind = next((k for column, k in COLUMN_KINDS if column in name), None)
                if kind:
                    cell = re.sub(r"\d+(?:\.\d+)? GiB|\([^)]*\)", "", cell.replace("*", ""))   # memory, asides
                    found += [(n, kind, line) for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", cell)]
            found += [(n, unit, line) for n, unit, _ in (m.groups() for m in FIGURE.finditer(line)) if n]
            continue
        header = None
        for match in FIGURE.finditer(line):
            number, unit, mfu = match.groups()
            found.append((number or mfu, unit or "% MFU", line))
    return found


@functools.lru_cache(maxsize=None)
def load(path: Path):
    """A results file: JSON, or JSON lines (a list of their values)."""
    text = path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()] if path.suffix == ".jsonl" \
        else json.loads(text)


def leaves(value, key: str = ""):
    """(path of keys, lower case, '/'-joined; number) of every number inside a JSON value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, f"{key}/{k}")
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v, key)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        yield key.lower(), float(value)


@functools.lru_cache(maxsize=None)
def _candidates(files: tuple[Path, ...], kind: str) -> tuple[float, ...]:
    return tuple(candidates(list(files), kind))


def candidates(files: list[Path], kind: str) -> list[float]:
    """The values of `kind` the files hold, as the docs show them."""
    values = [(k, v) for f in files for k, v in leaves(load(f))]
    speed = [v for k, v in values if "samples_per_s" in k]
    seconds = [v for k, v in values if k.endswith("_s") or "seconds" in k or "wall" in k.rsplit("/", 1)[-1]]
    if kind == " samples/s":
        return speed
    if kind == "samples/s":   # a table column: samples/s, or a total of several GPUs
        return speed
    if kind in ("% MFU", "MFU"):
        return [100 * v for k, v in values if "mfu" in k.rsplit("/", 1)[-1]]
    if kind == " s":
        return seconds
    ratios = [v for k, v in values if "ratio" in k or "_over_" in k.rsplit("/", 1)[-1]]
    millis = [v for k, v in values if k.endswith("_ms")]
    quotients = [a / b for group in (speed, seconds, millis) for a, b in itertools.permutations(group, 2) if b]
    if kind == "%ratio":
        return [100 * v for v in ratios + quotients]
    return ratios + quotients   # "x"


def holds(shown: str, values: list[float]) -> bool:
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    number = float(shown.replace(",", ""))
    return any(abs(v - number) <= 0.5 * 10 ** -decimals + 1e-9 for v in values)


def provenance_of(path: Path) -> list[str]:
    """What the file's provenance lacks: git commit, a library version, the device, the command. The device and
    versions may sit in each side's (or part's) own entry instead, as bench.train_vs_lerobot and
    bench.infer_latency write them (every such entry must then hold them)."""
    data = load(path)
    p = data.get("provenance") if isinstance(data, dict) else None
    if not isinstance(p, dict):
        return ["provenance"]
    parts = [v for key in ("sides", "parts") for v in (data.get(key) or {}).values()
             if isinstance(v, dict) and "device" in v]
    libraries = ("torch", "pyarrow", "numpy", "lerobot", "robovet", "ray")
    has = {"git commit": bool(p.get("git_commit")), "command": bool(p.get("command")),
           "device": bool(p.get("device") or p.get("gpu")) or (bool(parts) and all(v.get("device") for v in parts)),
           "library versions": any(p.get(k) for k in libraries) or (bool(parts) and all(v.get("torch") for v in parts))}
    return [name for name, ok in has.items() if not ok]


def claims() -> list[dict]:
    """Every figure of every document with the files it rests on: those its paragraph names, and those of the
    nearest naming paragraph above and below it in the same section (a table's files are often listed under it)."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        parsed = []
        for line, section, block in blocks(text):
            named = [p for name in NAMED.findall(block) for p in expand(name)
                     if "results/" in block or name.startswith(("scaling_", "tvl_", "train_vs", "bench_",
                                                                "cli_train", "convert_", "infer_"))]
            parsed.append((line, section, block, named))
        section_text: dict[str, str] = {}
        for i, (line, section, block, named) in enumerate(parsed):
            section_text[section] = section_text.get(section, "") + "\n" + block
            near = [next(((b, n) for _, s, b, n in order if s == section and n), ("", []))
                    for order in (reversed(parsed[:i]), parsed[i + 1:])]
            files = sorted(set(named) | set(near[0][1]) | set(near[1][1]))
            naming = "\n".join([block, near[0][0], near[1][0]])
            for number, kind, where in figures(block):
                if kind == " s" and doc.name not in SECONDS_IN:   # elsewhere seconds are the data's timestamps
                    continue
                out.append({"doc": doc.relative_to(ROOT).as_posix(), "line": line, "figure": number, "kind": kind,
                            "text": where.strip(), "block": block, "files": files, "naming": naming,
                            "section": section_text[section]})
    return out


def exempt(claim: dict) -> bool:
    return any(claim["doc"] == doc and text in claim["block"] and
               (claim["figure"] in text) for doc, text, _ in NOT_MEASURED)


def test_every_figure_is_held_by_a_results_file_with_provenance():
    bad = []
    for claim in claims():
        if exempt(claim):
            continue
        where = f"{claim['doc']}:{claim['line']}: {claim['figure']}{claim['kind']} in {claim['text'][:120]!r}"
        if NO_RESULTS_FILE in claim["section"]:
            continue   # said where it stands; listed by test_figures_without_a_results_file
        if not claim["files"]:
            bad.append(f"{where}: names no results file")
            continue
        if not holds(claim["figure"], _candidates(tuple(claim["files"]), claim["kind"])):
            bad.append(f"{where}: not in {[f.name for f in claim['files']]}")
            continue
        lacking = {f.name: provenance_of(f) for f in claim["files"] if provenance_of(f)}
        if lacking and NO_PROVENANCE not in claim["naming"]:
            bad.append(f"{where}: {lacking} lack provenance, and the text does not say '{NO_PROVENANCE}'")
    assert not bad, f"{len(bad)} figures not held:\n" + "\n".join(bad)


def test_figures_without_a_results_file():
    """The figures whose paragraph says it kept no results file, listed (the test output names them) and few."""
    loose = [f"{c['doc']}:{c['line']}: {c['figure']}{c['kind']}" for c in claims() if NO_RESULTS_FILE in c["section"]]
    print("figures without a results file:", loose)
    assert len(loose) <= 8, loose


def test_masked_camera_flops_ratio():
    """The docs' 'about 1.55x the FLOPs per sample' for lerobot's step against lerodoc's: lerobot encodes the
    third, masked camera and computes the last layer's prefix rows (openpi's count at 3 cameras) where lerodoc
    skips both (the work done at 2 cameras)."""
    from tests.helpers import importable, require
    require(importable("torch"), "lerodoc's train extra is not installed")
    from lerodoc.pi05.model import flops_per_sample
    from lerodoc.pi05.presets import full
    lerobot, lerodoc = flops_per_sample(full(), 28, 3, openpi=True), flops_per_sample(full(), 28, 2)
    assert (round(lerobot / 1e12, 2), round(lerodoc / 1e12, 2), round(lerobot / lerodoc, 2)) == (11.86, 7.64, 1.55)
    for doc in ("README.md", "docs/train.md"):
        assert "1.55x" in (ROOT / doc).read_text(), doc


def test_not_measured_entries_are_in_their_documents():
    for doc, text, reason in NOT_MEASURED:
        assert text in (ROOT / doc).read_text(), (doc, text, reason)
        assert reason


def test_names_in_the_docs_resolve_to_files():
    for doc in DOCS:
        for name in NAMED.findall(doc.read_text()):
            if "results/" in name:
                assert expand(name), f"{doc.name} names {name}, which is not in docs/results"


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_results_files_are_json(path):
    json.loads(path.read_text())
