"""Hostile bytes: every file kind of small v2.1 and v3.0 datasets, corrupted, through every reading command.

Each file kind (info.json, episodes.jsonl, tasks.jsonl, episodes_stats.jsonl, stats.json, tasks.parquet,
meta/episodes parquet, data parquet and mp4, the first and the last of each) is truncated (to 0 bytes, to
half, short of its tail), has seeded bits flipped (anywhere, and in its tail: a parquet footer, an mp4 moov),
a seeded block zeroed and its head zeroed; the JSON files also get valid JSON of the wrong structure (null, a
wrong top-level type, a missing key, values of the wrong type, a list one element short), and the mp4 an
encoder tag that is not UTF-8. info.json also gets paths that lead outside the dataset (an absolute or `..`
data_path or video_path) and feature keys that are not path components (a camera key that climbs out of the
dataset, its videos moved where it leads; a control character; a slash), and sizes its files do not hold
(totals of 10^12, a shape of 10^9, chunks of 0 or 10^15, fps of 0 or 1e9); the episodes metadata a length of
10^12, huge indices, a window ending at 1e12 s and file pointers that lead nowhere. Crafted metadata (issue 34)
comes in four more families: path lengths (a data_path field 300 or 10^8 wide, a 300-byte folder, a 300-byte camera
key, a 2 MB robot_type), integer sizes (10^300, 5000 digits, negative, fractional and boolean indices, lengths,
counts, fps and shapes), nesting (info.json, a names list, stats.json and a line of each JSON-lines file nested
10^5 deep; names 500 and 60 deep) and dtypes (complex128, object, datetime64, a number). Every command that reads a
dataset (info, validate, validate --videos, convert, merge with a clean dataset, repair, flatten, quantiles,
select, delete, split, tasks, features, encode --reencode, report --videos, and repair and quantiles
--in-place) runs on every mutated dataset, and on the clean ones, where each must succeed; so does `train pi05`
(tiny, two CPU steps) on datasets with quantiles.

A run must end in findings (codes) or in one paragraph, with a documented exit code, never a traceback or an
internal error, and what it reports must name the mutated file. `validate` may pass a mutated dataset only
when the mutation leaves what lerobot reads unchanged, as far as that validate looks (must_report); a path
that leads outside the dataset is always refused (exit 3; validate: an error). A writing command that fails
leaves neither its output nor a staging sibling, and an in-place one leaves the dataset as it was. One that
succeeds wrote what it promises, read back without lerodoc (read_content: pyarrow, PyAV) against its input
read the same way, as made or as mutated: each column's values per episode (leaf type included), the task
texts, the camera set and, where videos are stream-copied, each episode window's packets (payload, keyframe
flag, frame slot); encode --reencode keeps the frame count per window; select, delete, split, tasks and
features keep what their arguments leave (sliced channels, the other episodes, the parts' union, renamed
texts or keys); quantiles writes numpy's quantiles of the rows bit for bit; report --json names the input's
episodes, frames, tasks and cameras and each channel's min and max; episode_index and index number the
output 0..E-1 and 0..N-1. `train pi05` that trains logs finite losses, and each batch image shows the frame
of its row (the factory's frames spell their episode and frame). No file appears outside the datasets and
outputs, and no input changes (bytes, mode, mtime).

The runs go through `lerodoc.cli.main` exactly as `python -m lerodoc` does, in the test's own process (a Python
start with pyarrow and PyAV costs about a second, the runs themselves tens of milliseconds). Everything is
seeded: the same cases run on every run. By default (and in CI, where the suite's time is bounded) every command
runs on both clean datasets, two of the seven byte mutations are made of each file kind (in turn), and each
mutated dataset goes through one command: every other one `validate` (or `validate --videos`), the rest the other
commands but `report` in turn (about seven mutated datasets each, of several file kinds), and `train` runs on a
handful; LERODOC_FUZZ_FULL=1 runs the whole cross product (every command on
every mutated dataset, `train` on each), and LERODOC_FUZZ_SEED another seed (other bytes, another sample).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager, nullcontext, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.factory import make_dataset
from tests.helpers import importable, packets, require, run_cli

SEED = int(os.environ.get("LERODOC_FUZZ_SEED", "1313"))   # another seed explores other bytes and another sample
FULL = os.environ.get("LERODOC_FUZZ_FULL", "").strip().lower() in ("1", "true", "yes")
BYTES_PER_KIND = 2  # byte mutations per file kind (of 7), in turn, unless FULL
TRAIN_SAMPLE = 1    # mutated datasets `train` runs on, unless FULL (besides a clean one and an emptied data file)
TRAIN_STEPS = 2
CAMERA = "observation.images.top"
# three episodes; v3.0 holds two per file, so the last episode's data and video are files of their own
TINY = dict(episodes=3, lengths=[5, 6, 4], cameras=(CAMERA,), height=32, width=48, gop=30, episodes_per_file=2)

# file kind -> path in the dataset, per version
FILE_KINDS = {
    "v2.1": {
        "info.json": "meta/info.json",
        "episodes.jsonl": "meta/episodes.jsonl",
        "tasks.jsonl": "meta/tasks.jsonl",
        "episodes_stats.jsonl": "meta/episodes_stats.jsonl",
        "stats.json": "meta/stats.json",
        "data.parquet": "data/chunk-000/episode_000000.parquet",
        "data-last.parquet": "data/chunk-000/episode_000002.parquet",   # read by a worker, not up front
        "video.mp4": f"videos/chunk-000/{CAMERA}/episode_000000.mp4",
        "video-last.mp4": f"videos/chunk-000/{CAMERA}/episode_000002.mp4",
    },
    "v3.0": {
        "info.json": "meta/info.json",
        "stats.json": "meta/stats.json",
        "tasks.parquet": "meta/tasks.parquet",
        "episodes.parquet": "meta/episodes/chunk-000/file-000.parquet",
        "data.parquet": "data/chunk-000/file-000.parquet",
        "data-last.parquet": "data/chunk-000/file-001.parquet",
        "video.mp4": f"videos/{CAMERA}/chunk-000/file-000.mp4",
        "video-last.mp4": f"videos/{CAMERA}/chunk-000/file-001.mp4",
    },
}
BYTE_MUTATIONS = ("truncate-0", "truncate-half", "truncate-tail", "flip-bits", "flip-tail", "zero-block",
                  "zero-head")
JSON_MUTATIONS = ("json-null", "json-wrong-type", "json-missing-key", "json-wrong-value", "json-wrong-value-2",
                  "json-short-list")
MP4_MUTATIONS = ("flip-tag",)   # a bit flipped in the moov's encoder tag: PyAV's strict reader fails on it
# info.json edits that are valid JSON and plausible by themselves, each wrong for this dataset
INFO_EDITS = {
    "info-dtype-unknown": lambda i: i["features"]["action"].update(dtype="foo"),
    "info-dtype-string": lambda i: i["features"]["action"].update(dtype="string"),
    "info-state-as-video": lambda i: i["features"]["observation.state"].update(dtype="video"),
    "info-shape-zero": lambda i: i["features"]["action"].update(shape=[0]),
    "info-shape-wider": lambda i: i["features"]["action"].update(shape=[7]),
    "info-shape-2d": lambda i: i["features"]["action"].update(shape=[2, 3]),
    "info-names-number": lambda i: i["features"]["action"].update(names=5),
    "info-fps-fraction": lambda i: i.update(fps=29.97),
    "info-data-path-key": lambda i: i.update(data_path="data/{bogus}.parquet"),
    "info-video-path-brace": lambda i: i.update(video_path="videos/{"),
    "info-feature-absent": lambda i: i["features"].update(extra={"dtype": "float32", "shape": [2], "names": None}),
    "info-no-timestamp": lambda i: i["features"].pop("timestamp"),
    "info-no-camera": lambda i: i["features"].pop(CAMERA),
    "info-camera-info-string": lambda i: i["features"][CAMERA].update(info="x"),
    "info-codebase-v2.0": lambda i: i.update(codebase_version="v2.0"),
}

# Hostile paths and sizes (issue 25). Reads that would leave the dataset point at files that exist (the clean copy
# beside it, or the camera's videos moved to where its key leads), so a reader that follows them finds data.
PATH_EDITS = ("path-data-absolute", "path-data-dotdot", "path-video-dotdot", "key-camera-dotdot", "key-camera-control",
              "key-state-slash")
SIZE_EDITS = {  # info.json: a few bytes that claim sizes the files do not hold
    "size-total-frames": lambda i: i.update(total_frames=10**12),
    "size-total-episodes": lambda i: i.update(total_episodes=10**12),
    "size-shape": lambda i: i["features"]["action"].update(shape=[10**9]),
    "size-chunks-zero": lambda i: i.update(chunks_size=0),
    "size-chunks-huge": lambda i: i.update(chunks_size=10**15),
    "size-fps-zero": lambda i: i.update(fps=0),
    "size-fps-huge": lambda i: i.update(fps=1e9),
}
EPISODE_EDITS = {  # the episodes metadata: column (v3.0) or key (v2.1) of the first episode -> value
    "v2.1": {"size-length": ("length", 10**12), "size-episode-index": ("episode_index", 2**40)},
    "v3.0": {"size-length": ("length", 10**12), "size-to-index": ("dataset_to_index", 10**15),
             "size-to-timestamp": (f"videos/{CAMERA}/to_timestamp", 1e12),
             "path-file-index": ("data/file_index", 10**9), "path-chunk-negative": ("data/chunk_index", -1)},
}
# Hostile sizes, lengths, nesting and dtypes (issue 34): crafted metadata must end in exit 3 (or, from validate, a
# finding), never an internal error. Edits of a JSON-lines file's first record: kind -> mutation -> (key path, value).
LINE_EDITS = {
    "episodes.jsonl": {"int-episode-index-huge": (("episode_index",), 10**300),
                       "int-episode-index-negative": (("episode_index",), -1),
                       "int-episode-index-fraction": (("episode_index",), 0.5),
                       "int-episode-index-bool": (("episode_index",), True),
                       "int-length-negative": (("length",), -4),
                       "int-length-fraction": (("length",), 4.5),
                       "int-length-bool": (("length",), True)},
    "tasks.jsonl": {"int-task-index-huge": (("task_index",), 10**300), "int-task-index-bool": (("task_index",), True)},
    "episodes_stats.jsonl": {"int-stats-count-huge": (("stats", "action", "count"), [10**300]),
                             "int-stats-episode-bool": (("episode_index",), True)},
}
# info.json, its parsed value edited: integers where they do not fit or are not integers, and dtypes no writer writes
NUMBER_EDITS = {
    "int-fps-bool": lambda i: i.update(fps=True),
    "int-fps-negative": lambda i: i.update(fps=-30),
    "int-total-frames-huge": lambda i: i.update(total_frames=10**300),
    "int-chunks-fraction": lambda i: i.update(chunks_size=1000.5),
    "int-shape-bool": lambda i: i["features"]["action"].update(shape=[True]),
    "int-shape-huge": lambda i: i["features"]["action"].update(shape=[10**300]),
    "int-shape-negative": lambda i: i["features"]["action"].update(shape=[-6]),
    "dtype-complex128": lambda i: i["features"]["action"].update(dtype="complex128"),
    "dtype-object": lambda i: i["features"]["action"].update(dtype="object"),
    "dtype-datetime": lambda i: i["features"]["observation.state"].update(dtype="datetime64[ns]"),
    "dtype-number": lambda i: i["features"]["action"].update(dtype=32),
}


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


# Edits of a file's text (what json.dumps cannot write: 10^5 levels, 5000-digit numbers): kind -> mutation -> edit
TEXT_EDITS = {
    "info.json": {
        "length-data-path-wide": lambda t: re.sub(r'("data_path": "[^"]*?):0?\d+d}', r"\1:0300d}", t, count=1),
        "length-data-path-huge": lambda t: re.sub(r'("data_path": "[^"]*?):0?\d+d}', r"\1:0100000000d}", t,
                                                      count=1),
        "length-data-path-nested": lambda t: re.sub(r'("data_path": "[^"]*?):0?\d+d}', r"\1:{file_index}}", t,
                                                    count=1),
        "length-video-path-folder": lambda t: t.replace('"videos/', '"' + "v" * 300 + "/", 1),
        "length-robot-type": lambda t: re.sub(r'"robot_type": "[^"]*"', '"robot_type": "' + "R" * (2 << 20) + '"', t,
                                              count=1),
        "length-camera-key": lambda t: t.replace(f'"{CAMERA}": {{', f'"{CAMERA}{"x" * 300}": {{', 1),
        "int-total-frames-digits": lambda t: re.sub(r'"total_frames": \d+', '"total_frames": ' + "9" * 5000, t,
                                                    count=1),
        "depth-info": lambda t: '{"a": ' * 100_000 + "1" + "}" * 100_000,
        "depth-names": lambda t: re.sub(r'"names": \[\s*"', f'"names": [{_deep(500)}, "', t, count=1),
        "depth-names-within": lambda t: re.sub(r'"names": \[\s*"', f'"names": [{_deep(60)}, "', t, count=1),
    },
    "episodes.jsonl": {"depth-line": lambda t: t.replace('"tasks": [', f'"tasks": [{_deep(100_000)}, ', 1)},
    "episodes_stats.jsonl": {"depth-stats-line": lambda t: t.replace('"min": [', f'"min": [{_deep(100_000)}, ', 1)},
    "tasks.jsonl": {"depth-task": lambda t: t.replace('"task": ', f'"task": {_deep(100_000)}, "was": ', 1)},
    "stats.json": {"depth-stats": lambda t: '{"action": {"min": ' + _deep(100_000) + "}}"},
}
UNIQUE_NAMES = {"info.json", "episodes.jsonl", "tasks.jsonl", "episodes_stats.jsonl", "stats.json",
                "tasks.parquet"}   # a file of the dataset that no other file's name equals
MUST_REFUSE = set(PATH_EDITS)   # a read outside the root can only be refused (or, by validate, reported)

SELECT_ARGS = ("--state", "observation.state[0:3]", "--action", "action[0:3]")
# command name -> (arguments after the dataset, writes an output)
COMMANDS = {
    "info": ((), False),
    "validate": (("--json",), False),
    "validate-videos": (("--videos", "--json"), False),
    "convert": (("-j", "2"), True),
    "merge": (("-j", "2"), True),
    "repair": (("-j", "2"), True),
    "flatten": (("-j", "2"), True),
    "quantiles": (("-j", "2"), True),
    "select": (("-j", "2", *SELECT_ARGS), True),
    "delete": (("--episodes", "1"), True),
    "split": (("--into", "a=0.5,b=0.5"), True),
    "tasks": (("--set", "pick up the cube=grasp the cube"), True),
    "features": (("--rename", "action=action.joints"), True),
    "encode": (("--reencode", "--gop", "5", "-j", "2"), True),
    "report": (("--videos", "--sample", "1", "--json"), True),
    "repair-inplace": (("-j", "2", "--in-place"), False),
    "quantiles-inplace": (("-j", "2", "--in-place"), False),
}
IN_PLACE = {"repair-inplace", "quantiles-inplace"}   # each runs on its own copy, which a failure leaves as it was
EXIT_CODES = {  # docs/exit-codes.md: 1 only where a command reports findings
    "validate": {0, 1, 3}, "validate-videos": {0, 1, 3}, "repair": {0, 1, 3, 4}, "repair-inplace": {0, 1, 3, 4},
    # an argument naming what the mutated dataset lost (a task, a feature, a channel, an episode): a usage error
    **{command: {0, 2, 3, 4} for command in ("tasks", "features", "select", "delete", "split")},
}
DEFAULT_EXIT_CODES = {0, 3, 4}
STAGING = re.compile(r"\.lerodoc-(tmp|old)")
# quantiles -o rewrites only the stats and links the rest as it is; the edits change what the output holds
NOT_DATASETS = {"report"}   # writes one HTML file: it must exist after exit 0 and not after a failure


# ------------------------------------------------------------------------------------------- mutations

def mutations_of(version: str, kind: str) -> tuple[str, ...]:
    """Every mutation of one file kind, in a fixed order."""
    rel = FILE_KINDS[version][kind]
    return (BYTE_MUTATIONS + (JSON_MUTATIONS if rel.endswith((".json", ".jsonl")) else ())
            + (MP4_MUTATIONS if rel.endswith(".mp4") else ())
            + ((*INFO_EDITS, *PATH_EDITS, *SIZE_EDITS, *NUMBER_EDITS) if kind == "info.json" else ())
            + (tuple(EPISODE_EDITS[version]) if kind in ("episodes.jsonl", "episodes.parquet") else ())
            + tuple(LINE_EDITS.get(kind, ())) + tuple(TEXT_EDITS.get(kind, ())))


def mutate(path: Path, mutation: str, rng: random.Random, root: Path | None = None,
           clean: Path | None = None) -> None:
    """Corrupt the file at `path` in place (the path and key edits also touch the dataset `root` around it;
    `clean` is the clean copy the path edits point at)."""
    data = bytearray(path.read_bytes())
    n = len(data)
    if mutation == "none":
        return
    if mutation in INFO_EDITS or mutation in SIZE_EDITS or mutation in NUMBER_EDITS:
        info = json.loads(data)
        (INFO_EDITS.get(mutation) or SIZE_EDITS.get(mutation) or NUMBER_EDITS[mutation])(info)
        path.write_text(json.dumps(info, indent=4))
        return
    if mutation in TEXT_EDITS.get(path.name, {}):
        text = data.decode()
        path.write_text(TEXT_EDITS[path.name][mutation](text))
        assert path.read_text() != text, f"{mutation} did not change {path.name}"
        return
    if mutation in LINE_EDITS.get(path.name, {}):
        keys, value = LINE_EDITS[path.name][mutation]
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        lines[0] = _replace(lines[0], keys, lambda _: value)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return
    if mutation in PATH_EDITS:
        _path_edit(root, clean, mutation)
        return
    if path.suffix == ".jsonl" and mutation in EPISODE_EDITS["v2.1"]:
        key, value = EPISODE_EDITS["v2.1"][mutation]
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        lines[0][key] = value
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return
    if path.suffix == ".parquet" and mutation in EPISODE_EDITS["v3.0"]:
        import pyarrow as pa
        import pyarrow.parquet as pq
        column, value = EPISODE_EDITS["v3.0"][mutation]
        table = pq.read_table(path)
        values = table.column(column).to_pylist()
        values[0] = value
        at = table.schema.get_field_index(column)
        table = table.set_column(at, table.schema.field(at), pa.array(values, table.schema.field(at).type))
        pq.write_table(table, path)
        return
    if mutation == "truncate-0":
        data = b""
    elif mutation == "truncate-half":
        data = data[: n // 2]
    elif mutation == "truncate-tail":
        data = data[: max(0, n - 1 - rng.randrange(min(16, n)))]
    elif mutation == "flip-bits":
        for _ in range(max(4, n // 256)):
            data[rng.randrange(n)] ^= 1 << rng.randrange(8)
    elif mutation == "flip-tail":   # the footer of a parquet file, the moov of an mp4 written without faststart
        tail = max(1, n // 8)
        for _ in range(8):
            data[n - 1 - rng.randrange(tail)] ^= 1 << rng.randrange(8)
    elif mutation == "zero-head":   # magic bytes, ftyp, the first keys of a JSON file
        size = max(1, min(64, n // 4))
        data[:size] = bytes(size)
    elif mutation == "zero-block":
        size = max(1, min(256, n // 4))
        start = rng.randrange(n - size + 1)
        data[start:start + size] = bytes(size)
    elif mutation == "flip-tag":
        data = flip_tag(bytes(data))
    elif mutation.startswith("json-"):
        data = _mutate_json(path, data.decode(), mutation, rng).encode()
    else:
        raise ValueError(mutation)
    path.write_bytes(bytes(data))


def _path_edit(root: Path, clean: Path, mutation: str) -> None:
    """info.json's path templates lead outside the dataset (to the clean copy beside it), or a feature key is not
    a path component: the camera's key climbs out of the dataset (its videos and, in v3.0, its episodes columns
    moved where the key leads, as a crafted dataset would have them), holds a control character, or a slash."""
    info_path = root / "meta/info.json"
    info = json.loads(info_path.read_text())
    outside = os.path.relpath(clean, root) + "/"   # ../../clean-VERSION/
    if mutation == "path-data-absolute":
        info["data_path"] = str(clean / info["data_path"])
    elif mutation == "path-data-dotdot":
        info["data_path"] = outside + info["data_path"]
    elif mutation == "path-video-dotdot":
        info["video_path"] = outside + info["video_path"]
    else:
        old = {"key-state-slash": "observation.state"}.get(mutation, CAMERA)
        new = {"key-camera-control": CAMERA + "\x01", "key-state-slash": "observation/state"}.get(mutation)
        if mutation == "key-camera-dotdot":   # out of the dataset: videos/<key>/... (v3.0), videos/chunk/<key>/...
            depth = 4 if info["codebase_version"] == "v2.1" else 3
            new = f"{CAMERA}/{'../' * depth}escaped-{root.name}"
        info["features"] = {new if k == old else k: v for k, v in info["features"].items()}
        if old == CAMERA:
            for mp4 in sorted(root.glob(f"videos/**/{CAMERA}/**/*.mp4") if info["codebase_version"] == "v3.0"
                              else root.glob(f"videos/*/{CAMERA}/*.mp4")):
                rel = mp4.relative_to(root).as_posix().replace(CAMERA, new)
                target = Path(os.path.normpath(root / rel))
                target.parent.mkdir(parents=True, exist_ok=True)
                mp4.rename(target)
        import pyarrow.parquet as pq
        for table_path in (root.glob("meta/episodes/*/*.parquet") if old == CAMERA else root.glob("data/*/*.parquet")):
            table = pq.read_table(table_path)
            names = [c.replace(f"/{old}/", f"/{new}/") if old == CAMERA else (new if c == old else c)
                     for c in table.column_names]
            pq.write_table(table.rename_columns(names), table_path)
    info_path.write_text(json.dumps(info, indent=4))


def flip_tag(data: bytes) -> bytes:
    """The mp4 with the high bit of one byte of its encoder tag (moov/udta/meta/ilst, "Lavf...") flipped:
    the frames are intact, but the tag is no longer UTF-8."""
    at = data.find(b"Lavf")
    assert at > 0, "no encoder tag in the mp4"
    out = bytearray(data)
    out[at + 1] ^= 0x80
    return bytes(out)


def _mutate_json(path: Path, text: str, mutation: str, rng: random.Random) -> str:
    if path.suffix == ".jsonl":
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        k = rng.randrange(len(lines))
        lines[k] = _mutate_value(lines[k], mutation, rng)
        return "".join(json.dumps(line) + "\n" for line in lines)
    return json.dumps(_mutate_value(json.loads(text), mutation, rng), indent=2)


def _mutate_value(value, mutation: str, rng: random.Random):
    if mutation == "json-short-list":   # one list (a shape, a stat's channels, names) loses its last element
        lists = list(_lists(value, ()))
        if not lists:
            return None
        return _replace(value, rng.choice(lists), lambda v: v[:-1])
    if mutation == "json-null":
        return None
    if mutation == "json-wrong-type":
        return [value] if isinstance(value, dict) else {"value": value}
    keys = sorted(value) if isinstance(value, dict) else []
    if not keys:
        return None
    key = rng.choice(keys)
    if mutation == "json-missing-key":
        return {k: v for k, v in value.items() if k != key}
    # json-wrong-value: a key's value replaced by one of another type, one level down where it nests
    inner = value[key]
    if isinstance(inner, dict) and inner:
        sub = rng.choice(sorted(inner))
        return {**value, key: {**inner, sub: _wrong(inner[sub], rng)}}
    return {**value, key: _wrong(inner, rng)}


def _lists(value, path: tuple):
    """Paths to every list of two or more elements inside `value`."""
    if isinstance(value, list) and len(value) >= 2:
        yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield from _lists(inner, path + (key,))


def _replace(value, path: tuple, change):
    if not path:
        return change(value)
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], change)
    return copy


def _wrong(value, rng: random.Random):
    choices = [None, "x", -1, 1.5, [], {}, [1, "a"], {"a": None}]
    return rng.choice([c for c in choices if type(c) is not type(value)])


# ------------------------------------------------------------------------------------------- cases

@dataclass
class Case:
    version: str
    kind: str
    mutation: str
    command: str

    @property
    def name(self) -> str:
        return f"{self.version}-{self.kind}-{self.mutation}"


VIDEO_READS = ("video.mp4", "video-last.mp4", "episodes.parquet", "info.json")   # what --videos reads besides


def all_cases(full: bool = FULL) -> list[Case]:
    """Every command on each version's clean dataset, then per mutated dataset: with `full` the cross product
    version x file kind x mutation x command (the in-place commands on every other mutation of each kind);
    else BYTES_PER_KIND of the byte mutations of each kind (in turn, so that each is made of several kinds) and
    one command per mutated dataset: on every other one validate (or validate --videos, where the mutation touches
    what it reads), on the others the next of the other commands but report, in a seeded order, so that every
    command meets mutations of several kinds. In a fixed order."""
    cases = []
    others = [c for c in COMMANDS if not c.startswith("validate")]
    random.Random(SEED).shuffle(others)
    others.remove("report")   # the slowest (decodes frames): on the clean datasets only, unless full
    turn = kinds_seen = 0
    for version, kinds in FILE_KINDS.items():
        cases += [Case(version, "info.json", "none", command) for command in COMMANDS]   # the baseline
        for kind in kinds:
            kinds_seen += 1
            bytewise = {BYTE_MUTATIONS[(3 * kinds_seen + j) % len(BYTE_MUTATIONS)] for j in range(BYTES_PER_KIND)}
            for m, mutation in enumerate(mutations_of(version, kind)):
                if not full and mutation in BYTE_MUTATIONS and mutation not in bytewise:
                    continue   # BYTES_PER_KIND of the byte mutations per file kind, in turn over the kinds
                if full:
                    commands = [c for c in COMMANDS if c not in IN_PLACE or m % 2 == 0]   # in place: every other
                else:   # every other dataset validate (--videos where it reads the mutated file), else the next
                    turn += 1
                    commands = [("validate-videos" if kind in VIDEO_READS and turn // 2 % 2 == 0 else "validate")
                                if turn % 2 else others[(turn // 2) % len(others)]]
                cases += [Case(version, kind, mutation, command) for command in commands]
    return cases


def build(root: Path) -> tuple[dict[str, Path], list[dict]]:
    """Clean datasets, one mutated copy per (version, kind, mutation), and the runs to do on them."""
    clean = {}
    for version in FILE_KINDS:
        clean[version] = root / f"clean-{version}"
        # v2.1 stores its vectors as plain lists, as some exporters do, so flatten has work to do
        make_dataset(clean[version], version=version, vector_storage="list" if version == "v2.1" else "fixed",
                     **TINY)
        if version != "v3.0":  # a v2.1 stats.json, as lerobot's v2.1 writer leaves one
            _write_v21_stats(clean[version])
    partner = root / "partner"  # merge's clean second dataset
    make_dataset(partner, version="v2.1", dataset_id=1, **TINY)
    runs, made, report = [], set(), {}
    for i, case in enumerate(all_cases()):
        ds = root / "ds" / case.name
        rel = FILE_KINDS[case.version][case.kind]
        if case.name not in made:
            made.add(case.name)
            shutil.copytree(clean[case.version], ds)
            mutate(ds / rel, case.mutation, random.Random(f"{SEED}:{case.name}"), ds, clean[case.version])
            report[case.name] = must_report(case, clean[case.version] / rel, ds / rel)
        extra, writes = COMMANDS[case.command]
        out = root / "out" / f"{case.name}-{case.command}"
        source = ds
        if case.command in IN_PLACE:
            source = root / "in-place" / f"{case.name}-{case.command}"
            shutil.copytree(ds, source)
        args = [case.command.split("-")[0], str(source)]
        if case.command == "merge":
            args.append(str(partner))
        args += list(extra)
        if writes:
            args += ["-o", str(out)]
        runs.append({"case": case.__dict__, "args": args, "out": str(out) if writes else None,
                     "file": rel, "index": i, "mutated": str(ds), "source": str(source),
                     "clean": str(clean[case.version]), "partner": str(partner),
                     "must_report": report[case.name].get(case.command, False)})
    return clean, runs


def must_report(case: Case, clean: Path, mutated: Path) -> dict[str, bool]:
    """Whether `validate` and `validate --videos` must report the mutation: whether it changes what lerobot 0.6.1
    reads, as far as each looks. JSON counts by its parsed value (a mutation that leaves the value equal changes
    nothing lerobot sees), parquet by the table pyarrow reads (the episodes metadata's video windows, its
    `videos/` columns, only under --videos), mp4 (only under --videos, which checks containers and decodes
    nothing) by the container: that it opens with its metadata read strictly, as lerobot's pyav backend reads
    it, the stream's parameters, and each packet's time, size and keyframe flag; a payload byte that changed in
    place is for --deep. A v2.1 stats.json is not read by lerobot at all (its converter aggregates
    episodes_stats.jsonl). The path edits lead outside the dataset: always reported."""
    if case.mutation == "none":
        return {}
    if case.mutation in MUST_REFUSE:
        return {"validate": True, "validate-videos": True}
    if case.version == "v2.1" and case.kind == "stats.json":
        return {}

    def seen(path: Path, videos: bool):
        if path.suffix == ".json":
            return json.loads(path.read_text())
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if path.suffix == ".parquet":   # the episodes' video windows are --videos' to check
            import pyarrow.parquet as pq
            table = pq.read_table(path)
            return table if videos else table.drop_columns([c for c in table.column_names if c.startswith("videos/")])
        if not videos:
            return None
        import av
        with av.open(str(path)) as container:   # strict, as lerobot's pyav backend opens it; tags' values aside
            stream = container.streams.video[0]
            return (stream.codec_context.name, stream.codec_context.extradata,
                    stream.width, stream.height, stream.time_base, stream.average_rate,
                    [(p.pts, p.dts, p.size, p.is_keyframe) for p in container.demux(stream)])

    changed = {}
    for command, videos in (("validate", False), ("validate-videos", True)):
        try:
            before = seen(clean, videos)
        except Exception as exc:   # the clean file reads: anything else is the test's own bug
            raise AssertionError(f"{clean} does not read") from exc
        try:
            after = seen(mutated, videos)
        except Exception:
            changed[command] = True
            continue
        changed[command] = not (after.equals(before, check_metadata=True) if hasattr(after, "equals")
                                else after == before)
    return changed


def _write_v21_stats(root: Path) -> None:
    """meta/stats.json aggregated from the per-episode stats, as v2.1 datasets converted from v2.0 keep one."""
    import numpy as np

    episodes = [json.loads(line)["stats"] for line in (root / "meta/episodes_stats.jsonl").read_text().splitlines()]
    out = {}
    for name in episodes[0]:
        got = {k: np.array([ep[name][k] for ep in episodes], dtype=np.float64) for k in episodes[0][name]}
        n = got["count"].reshape((len(episodes),) + (1,) * (got["mean"].ndim - 1))
        mean = (got["mean"] * n).sum(0) / n.sum()
        square = ((got["std"] ** 2 + got["mean"] ** 2) * n).sum(0) / n.sum()
        out[name] = {"min": got["min"].min(0).tolist(), "max": got["max"].max(0).tolist(), "mean": mean.tolist(),
                     "std": np.sqrt(np.maximum(square - mean ** 2, 0)).tolist(), "count": [int(n.sum())]}
    (root / "meta/stats.json").write_text(json.dumps(out, indent=2))


# ------------------------------------------------------------------------------------------- content

STATS_FILES = re.compile(r"meta/(stats\.json|episodes_stats\.jsonl|episodes/.*)")   # what quantiles rewrites
BOOKKEEPING = ("index", "episode_index", "task_index")   # renumbered by merge, delete and split: checked apart
_CACHE: dict = {}


def _blake(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _packets(path: Path, strict: bool) -> list[tuple[float, bool, str]]:
    """(time in seconds, keyframe, payload digest) of every packet of the file's video stream, by time. `strict`
    reads the container metadata as lerobot's pyav backend does (a tag that is not UTF-8 fails)."""
    data = path.read_bytes()
    key = ("packets", _blake(data), strict)
    if key not in _CACHE:
        import av
        with av.open(str(path), metadata_errors="strict" if strict else "ignore") as container:
            _CACHE[key] = sorted((float(p.pts * p.time_base), bool(p.is_keyframe), _blake(bytes(p)))
                                 for p in container.demux(video=0) if p.size and p.pts is not None)
    return _CACHE[key]


def _inside(root: Path, rel: str) -> Path:
    path = Path(os.path.normpath(root / rel))
    if not path.is_relative_to(root):
        raise ValueError(f"{rel} leads outside the dataset")
    return path


def read_content(root: Path, strict: bool = True, videos: bool = True) -> dict:
    """What a dataset holds, read without lerodoc: its rows (pyarrow, every data file, grouped by the
    episode_index column, by frame_index), each row's task text, and each episode's video packets per camera
    (PyAV; the episode's window of its file). Raises when something cannot be read."""
    import pyarrow.parquet as pq
    info = json.loads((root / "meta/info.json").read_text())
    version, fps = info["codebase_version"], info["fps"]
    cameras = sorted(k for k, f in info["features"].items() if f.get("dtype") == "video") if videos else []
    if version == "v3.0":
        table = pq.read_table(root / "meta/tasks.parquet").to_pydict()
        tasks = dict(zip(table["task_index"], table["task"] if "task" in table else table["__index_level_0__"]))
    else:
        lines = [json.loads(line) for line in (root / "meta/tasks.jsonl").read_text().splitlines() if line.strip()]
        tasks = {line["task_index"]: line["task"] for line in lines}
    rows: dict[int, list[dict]] = {}
    types = {}
    for path in sorted(root.glob("data/*/*.parquet")):
        table = pq.read_table(path)
        for field in table.schema:
            leaf = field.type
            while hasattr(leaf, "value_type"):
                leaf = leaf.value_type
            types[field.name] = str(leaf)
        columns = table.to_pydict()
        for i, episode in enumerate(columns["episode_index"]):
            rows.setdefault(episode, []).append({k: v[i] for k, v in columns.items()})
    windows: dict[int, dict[str, tuple[Path, float, float]]] = {}
    if version == "v3.0":
        for path in sorted(root.glob("meta/episodes/*/*.parquet")):
            table = pq.read_table(path).to_pydict()
            for i, episode in enumerate(table["episode_index"]):
                windows[episode] = {cam: (_inside(root, info["video_path"].format(
                    video_key=cam, chunk_index=table[f"videos/{cam}/chunk_index"][i],
                    file_index=table[f"videos/{cam}/file_index"][i])), table[f"videos/{cam}/from_timestamp"][i],
                    table[f"videos/{cam}/to_timestamp"][i]) for cam in cameras}
    else:
        for episode in rows:
            windows[episode] = {cam: (_inside(root, info["video_path"].format(
                episode_chunk=episode // info["chunks_size"], video_key=cam, episode_index=episode)), 0.0, math.inf)
                for cam in cameras}
    episodes = []
    for episode in sorted(rows):
        frames = sorted(rows[episode], key=lambda row: row["frame_index"])
        videos = {}
        for cam, (path, start, stop) in windows[episode].items():
            videos[cam] = [(round((t - start) * fps), key, digest) for t, key, digest in _packets(path, strict)
                           if start - 0.5 / fps <= t < stop - 0.5 / fps]
        episodes.append({"episode": episode, "rows": frames, "tasks": [tasks[row["task_index"]] for row in frames],
                         "videos": videos})
    return {"cameras": cameras, "types": types, "episodes": episodes}


def transformed(content: dict, command: str) -> dict:
    """What `command` promises its output holds, given its input's content (the fuzz's arguments: COMMANDS)."""
    content = {**content, "episodes": list(content["episodes"]), "types": dict(content["types"])}
    if command == "select":   # SELECT_ARGS: the first three channels of state and action
        content["episodes"] = [{**e, "rows": [{**r, "observation.state": r["observation.state"][0:3],
                                                "action": r["action"][0:3]} for r in e["rows"]]}
                               for e in content["episodes"]]
    elif command == "features":   # --rename action=action.joints
        content["types"]["action.joints"] = content["types"].pop("action")
        content["episodes"] = [{**e, "rows": [{("action.joints" if k == "action" else k): v for k, v in r.items()}
                                              for r in e["rows"]]} for e in content["episodes"]]
    elif command == "tasks":   # --set 'pick up the cube=grasp the cube'
        content["episodes"] = [{**e, "tasks": [("grasp the cube" if t == "pick up the cube" else t)
                                               for t in e["tasks"]]} for e in content["episodes"]]
    elif command == "delete":   # --episodes 1
        content["episodes"] = [e for e in content["episodes"] if e["episode"] != 1]
    return content


def summary(content: dict, packets: bool = True) -> dict:
    """Per episode, in order: a digest of each column's values (leaf type included) and of the task texts, and per
    camera a digest of the window's packets (payload, keyframe flag, frame slot), or their count where the command
    re-encodes (`packets=False`); the camera set and the data columns. The bookkeeping columns are checked here:
    episode_index numbers the episodes 0..E-1 and index the rows 0..N-1, in order."""
    episodes, index, problems = [], 0, []
    for e, episode in enumerate(content["episodes"]):
        rows = episode["rows"]
        if episode["episode"] != e:
            problems.append(f"episode_index {episode['episode']} where {e} is due")
        got = [row["index"] for row in rows]
        if got != list(range(index, index + len(rows))):
            problems.append(f"episode {e}: index {got[:3]}... where {index}... is due")
        index += len(rows)
        columns = sorted(k for k in (rows[0] if rows else {}) if k not in BOOKKEEPING)
        digest = {k: _blake(json.dumps([content["types"].get(k), [row[k] for row in rows]]).encode()) for k in columns}
        digest["tasks"] = _blake(json.dumps(episode["tasks"]).encode())
        for cam, items in episode["videos"].items():
            digest[f"video {cam}"] = _blake(json.dumps(items).encode()) if packets else f"{len(items)} frames"
        episodes.append(digest)
    return {"cameras": content["cameras"], "episodes": episodes, "bookkeeping": problems}


def check_quantiles(content: dict, stats: dict) -> list[str]:
    """The stats' q01..q99 of state and action equal numpy's quantiles over every row, bit for bit."""
    import numpy as np
    from lerodoc.tables.stats import LEVELS, QUANTILES
    found = []
    for feature in ("observation.state", "action"):
        values = np.array([row[feature] for e in content["episodes"] for row in e["rows"]], dtype=np.float64)
        for q, level in zip(QUANTILES, LEVELS):
            stored = (stats.get(feature) or {}).get(q)
            if stored is None:
                found.append(f"{feature} has no {q}")
            elif not np.array_equal(np.asarray(stored, dtype=np.float64), np.quantile(values, level, axis=0)):
                found.append(f"{feature} {q} is not numpy's quantile of the rows")
    return found


def check_report(content: dict, report: dict) -> list[str]:
    """report --json: the summary's episodes, frames, tasks and cameras, and every channel's min and max, are the
    input's."""
    import numpy as np
    found = []
    s = report["summary"]
    tasks = {t for e in content["episodes"] for t in e["tasks"]}
    want = (len(content["episodes"]), sum(len(e["rows"]) for e in content["episodes"]), len(tasks), content["cameras"])
    undeclared = {f.get("field") for f in report["validate"]["findings"] if f["code"] == "LAY044"}
    got = (s["episodes"], s["frames"], s["tasks"], sorted({c["camera"] for c in s["cameras"]} | undeclared))
    if got != want:
        found.append(f"the report's episodes, frames, tasks, cameras {got}, the input's {want}")
    for channel in report["channels"]:
        values = np.array([row[channel["feature"]] for e in content["episodes"] for row in e["rows"]], np.float64)
        column = values[:, channel["channel"]]
        if (channel["min"], channel["max"]) != (column.min(), column.max()):
            found.append(f"{channel['feature']}[{channel['channel']}] min/max {channel['min']}/{channel['max']}, "
                         f"the rows' {column.min()}/{column.max()}")
    return found


def observe(run: dict, rc: int, stdout: str) -> dict:
    """After a run that ended in exit 0: what its output holds, against what the command promises from its
    input. The input is read as it was made (the clean dataset) and, when the mutation changed values (a data
    parquet, an mp4, the tasks) and the mutated dataset reads, as mutated (a value carried over as it is): the
    output must equal one of the two. The camera set is always the clean one: a camera that metadata lost is
    still the input's."""
    command = run["case"]["command"]
    if rc != 0 or command in ("info", "validate", "validate-videos"):
        return {}
    if command == "flatten" and run.get("out") and not Path(run["out"]).exists():   # the no-op: nothing written
        return {}
    if command == "train":   # every step's loss is a finite number
        import numpy as np
        metrics = Path(run["run_dir"]) / "metrics.jsonl"
        losses = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
        return {"content": [[] if len(losses) == TRAIN_STEPS and np.isfinite(losses).all()
                             else [f"the losses {losses} are not {TRAIN_STEPS} finite numbers"]]}
    expected = []
    values = run["case"]["kind"].startswith(("data", "video", "tasks"))
    for source in (run["clean"], run["mutated"]) if values else (run["clean"],):
        key = ("content", source)
        if key not in _CACHE:
            try:
                _CACHE[key] = read_content(Path(source), strict=False)
            except Exception as exc:   # the mutated input may not read: the clean one is then the truth
                _CACHE[key] = f"{type(exc).__name__}: {exc}"
        if isinstance(_CACHE[key], dict):
            expected.append({**_CACHE[key], "cameras": _CACHE[("content", run["clean"])]["cameras"]})
    if command == "merge":   # the partner's episodes follow the input's (renumbering is summary's to check)
        key = ("content", run["partner"])
        if key not in _CACHE:
            _CACHE[key] = read_content(Path(run["partner"]))
        expected = [{**c, "episodes": c["episodes"] + _CACHE[key]["episodes"]} for c in expected]
    expected = [transformed(c, command.split("-")[0]) for c in expected]
    if command == "report":
        return {"content": [check_report(c, json.loads(stdout)) for c in expected]}
    out = Path(run["source"] if command in IN_PLACE else run["out"])
    stated = []   # quantiles: its stats against the rows it wrote
    if command.startswith("quantiles"):
        try:
            stated = check_quantiles(read_content(out, videos=False), json.loads((out / "meta/stats.json").read_text()))
        except Exception as exc:
            return {"content": [[f"the output does not read: {type(exc).__name__}: {exc}"]]}
        if command in IN_PLACE or run["case"]["version"] == "v3.0":   # the stats only: every other file keeps its bytes
            kept, theirs = _tree(out), _tree(Path(run["mutated"]))
            return {"content": [stated + [f"{rel} changed" for rel in sorted(set(kept) | set(theirs))
                                          if not STATS_FILES.match(rel) and kept.get(rel) != theirs.get(rel)]]}
        # a v2.x dataset's copy is written as v3.0 (converted): its content is held to the input's, as any rewrite's
    parts = [out / "a", out / "b"] if command == "split" else [out]
    try:
        got = [read_content(part) for part in parts]
    except Exception as exc:
        return {"content": [[f"the output does not read: {type(exc).__name__}: {exc}"]]}
    packets = command != "encode"   # encode --reencode keeps every frame, not its bytes
    mine = [summary(part, packets) for part in got]
    problems = [f"{part.name}: {p}" for part, m in zip(parts, mine) for p in m["bookkeeping"]]
    verdicts = []
    for want in expected:
        theirs = summary(want, packets)
        found = list(problems)
        if any(m["cameras"] != theirs["cameras"] for m in mine):
            found.append(f"cameras {[m['cameras'] for m in mine]}, the input's {theirs['cameras']}")
        if command == "split":   # the parts together hold every episode once
            key = lambda d: json.dumps(d, sort_keys=True)
            if sorted(map(key, mine[0]["episodes"] + mine[1]["episodes"])) != sorted(map(key, theirs["episodes"])):
                found.append("the parts' episodes are not the input's")
        elif mine[0]["episodes"] != theirs["episodes"]:
            diff = [(e, sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)))
                    for e, (a, b) in enumerate(zip(mine[0]["episodes"], theirs["episodes"])) if a != b]
            found.append(f"{len(mine[0]['episodes'])} episodes against {len(theirs['episodes'])}; differing "
                         f"(episode, columns): {diff[:4]}")
        verdicts.append(stated + found)
    return {"content": verdicts}


# ------------------------------------------------------------------------------------------- the driver

def run_one(run: dict) -> dict:
    """Run one run's arguments through `lerodoc.cli.main`, as `python -m lerodoc` would, in this process; its
    result: exit code, stdout, stderr, seconds, the train run's frames and what `observe` finds in its output."""
    from lerodoc import cli, render
    saved = sys.argv, sys.unraisablehook, render.level
    sys.argv = ["lerodoc", *run["args"]]
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    watch = watching_frames() if run["case"]["command"] == "train" else nullcontext({})
    with redirect_stdout(out), redirect_stderr(err), watch as frames:
        try:
            cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what Python itself would print, and its exit code
            traceback.print_exc()
            code = 1
        finally:
            (sys.argv, sys.unraisablehook, render.level), render.command = saved, None
    seconds = time.perf_counter() - start
    try:
        seen = observe(run, code, out.getvalue())
    except Exception as exc:   # the fuzz's own reading failed on this output: the run's problem, not a crash
        seen = {"content": [[f"reading the output back failed: {type(exc).__name__}: {exc}"]]}
    return {**run, "rc": code, "stdout": out.getvalue()[-200_000:], "stderr": err.getvalue()[-4000:],
            "seconds": seconds, "frames": frames, **seen}


def drive(runs_file: str, results_file: str) -> None:
    """`run_one` for each run of the file, in this process (a subprocess shard of `run_all`)."""
    runs = json.loads(Path(runs_file).read_text())
    results = []
    current = Path(results_file + ".current")   # names the run if the process dies (a crash inside FFmpeg)
    for run in runs:
        current.write_text(" ".join(run["args"]))
        results.append(run_one(run))
    Path(results_file).write_text(json.dumps(results))


@contextmanager
def watching_frames():
    """During a `train` run: every image of every batch must carry the identity of its row's episode and frame
    (the factory's frames spell it; read back inside resize_with_pad's black border). Yields the tally."""
    import numpy as np
    from lerodoc.pi05.data import TrainingBatches
    from tests.fixtures.identity import Identity, decode_identity
    tally = {"images": 0, "wrong": []}
    original = TrainingBatches.images

    def images(self, rows):
        out = original(self, rows)
        for b, row in enumerate(rows):
            episode = int(self.frames.episode[row])
            frame = int(row) - int(np.searchsorted(self.frames.episode, episode))
            for c in range(out.shape[1]):
                image = out[b, c]
                lit_rows, lit_cols = np.where(image.max(axis=(1, 2)) > 20)[0], np.where(image.max(axis=(0, 2)) > 20)[0]
                got = decode_identity(image[lit_rows[0]:lit_rows[-1] + 1, lit_cols[0]:lit_cols[-1] + 1]) \
                    if len(lit_rows) and len(lit_cols) else None
                tally["images"] += 1
                if got != Identity(0, c, episode, frame):
                    tally["wrong"].append(f"row {int(row)} (episode {episode} frame {frame}) camera {c}: {got}")
        return out

    TrainingBatches.images = images
    try:
        yield tally
    finally:
        TrainingBatches.images = original


def _digest_tree(root: Path) -> dict[str, tuple]:
    """Every file under `root` by relative path: its bytes' digest, mode and mtime."""
    return {p.relative_to(root).as_posix(): (_blake(p.read_bytes()), p.stat().st_mode, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` by relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_all(root: Path, runs: list[dict], shards: int = 0) -> list[dict]:
    """The runs in this process (`shards` 0), or split over `shards` subprocesses running `drive`, in parallel."""
    env = {k: v for k, v in os.environ.items() if k != "LERODOC_DEBUG"}
    if not shards:
        saved = os.environ.pop("LERODOC_DEBUG", None)
        try:
            return [run_one(run) for run in runs]
        finally:
            if saved is not None:
                os.environ["LERODOC_DEBUG"] = saved
    procs = []
    for s in range(shards):
        part = runs[s::shards]
        runs_file, results_file = root / f"runs-{s}.json", root / f"results-{s}.json"
        runs_file.write_text(json.dumps(part))
        code = f"from tests.test_fuzz import drive; drive({str(runs_file)!r}, {str(results_file)!r})"
        procs.append((subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).parent.parent, env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
                      results_file))
    results = []
    for proc, results_file in procs:
        output, _ = proc.communicate()
        if proc.returncode != 0:
            current = Path(str(results_file) + ".current")
            running = current.read_text() if current.exists() else "?"
            raise AssertionError(f"the fuzz driver died (exit {proc.returncode}) running lerodoc {running}:\n"
                                 f"{output[-4000:]}")
        results += json.loads(results_file.read_text())
    return sorted(results, key=lambda r: r["index"])


def problems(result: dict) -> list[str]:
    """What is wrong with one run's ending; empty when it ended as the rules say."""
    case, rc, stderr = result["case"], result["rc"], result["stderr"]
    found = []
    stdout = result.get("stdout") or ""   # flatten's no-op (v3.0: fixed-size lists) exits 0 writing nothing
    nothing_to_flatten = case["command"] == "flatten" and ("nothing to flatten" in stdout
                                                           or '"unchanged": true' in stdout)
    if case["mutation"] == "none" and rc != 0 and not nothing_to_flatten:   # failing on clean data: all moot
        found.append(f"exit {rc} on the clean dataset")
    if "Traceback" in stderr:
        found.append("traceback")
    if "internal error (a bug in lerodoc" in stderr:
        found.append("an internal error (a bug)")
    allowed = EXIT_CODES.get(case["command"], DEFAULT_EXIT_CODES)
    if rc not in allowed:
        found.append(f"exit {rc} not in {sorted(allowed)}")
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    mutated = result["file"]   # relative to the dataset; an absolute path in a message holds it too

    def names(text: str) -> bool:   # the path, or a name that only one file of the dataset has (meta/info.json)
        return mutated in text or (Path(mutated).name in UNIQUE_NAMES and Path(mutated).name in text)

    if rc == 3 or rc == 4:
        if len(errors) != 1:
            found.append(f"{len(errors)} 'error:' paragraphs")
        elif not names(errors[0]) and not nothing_to_flatten:
            found.append(f"the error does not name the mutated file {mutated}")
    if case["mutation"] in MUST_REFUSE and rc != (1 if case["command"].startswith("validate") else 3):
        found.append(f"exit {rc}: a dataset whose paths or keys lead outside it must be refused")
    if case["command"].startswith("validate") and rc in (0, 1):
        try:
            report = json.loads(result["stdout"])
            findings = report["findings"]
        except (ValueError, KeyError):
            found.append("validate --json printed no report")
        else:
            if rc == 1 and not any(f["severity"] == "error" for f in findings):
                found.append("validate exit 1 without an error finding")
            if rc == 0 and any(f["severity"] == "error" for f in findings):
                found.append("validate exit 0 with an error finding")
            for f in findings:
                if not re.fullmatch(r"[A-Z]{2,4}\d{3}", f.get("code") or ""):
                    found.append(f"a finding without a code: {f}")
                elif f["severity"] == "error" and not f.get("file"):
                    found.append(f"an error finding that names no file: {f}")
            naming = [f for f in findings if names(f.get("file") or "") or names(f.get("message") or "")]
            if rc == 1 and not any(f["severity"] == "error" for f in naming):
                found.append(f"no error finding names the mutated file {mutated}: "
                             f"{sorted({(f['code'], f.get('file')) for f in findings if f['severity'] == 'error'})}")
            if rc == 0 and result["must_report"] and not naming:
                found.append(f"exit 0 and no finding names {mutated}, whose change lerobot reads")
    if case["command"] in IN_PLACE:
        source = Path(result["source"])
        if rc not in (0, 1) and _tree(source) != _tree(Path(result["mutated"])):
            found.append(f"exit {rc} but the dataset was changed in place")
        left = [p.name for p in source.parent.iterdir() if STAGING.search(p.name)]
        if left:
            found.append(f"staging left behind: {left}")
    out = result["out"]
    if out is not None:
        out = Path(out)
        exists = out.exists()
        if rc in (0,) and not exists and not nothing_to_flatten:
            found.append("exit 0 but no output")
        if rc not in (0, 1) and exists:
            found.append(f"exit {rc} but the output exists")
        if rc == 1 and case["command"] != "repair" and exists:
            found.append("exit 1 but the output exists")
        left = [p.name for p in out.parent.iterdir() if STAGING.search(p.name)] if out.parent.exists() else []
        if left:
            found.append(f"staging left behind: {left}")
    verdicts = result.get("content")   # exit 0: one per reading of the input (as made, as mutated)
    if verdicts and all(verdicts) and not nothing_to_flatten:   # flatten's no-op has no output to read
        found += [f"exit 0 but {problem}" for problem in verdicts[0]]
    return found


def escapes(root: Path, runs: list[dict]) -> list[str]:
    """Files under the fuzz's folder that belong to no dataset, output or bookkeeping of its own: what a command
    wrote outside its output (or outside the dataset it changed in place)."""
    allowed = {Path(p) for r in runs for p in (r["out"], r["mutated"], r["source"], r["clean"], r["partner"]) if p}
    allowed |= {*root.glob("clean-*"), root / "partner", *root.glob("ds/escaped-*")}   # the latter: key-camera-dotdot's
    # own videos, where its key leads
    stray = []
    for path in root.rglob("*"):
        if path.is_file() and path.parent != root and allowed.isdisjoint((path, *path.parents)):
            stray.append(path.relative_to(root).as_posix())
    return sorted(stray)


# ------------------------------------------------------------------------------------------- the tests

def here(*args) -> subprocess.CompletedProcess:
    """`lerodoc ARGS` through `cli.main` in this process (as `run_one`, without reading the output back)."""
    result = run_one({"case": {"command": str(args[0])}, "args": [str(a) for a in args]})
    return subprocess.CompletedProcess(["lerodoc", *map(str, args)], result["rc"], result["stdout"], result["stderr"])


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """The mutated datasets built, every run of them done, and the inputs' digests before the runs."""
    root = tmp_path_factory.mktemp("fuzz")
    start = time.perf_counter()
    _, runs = build(root)
    built = time.perf_counter() - start
    inputs = {p: _digest_tree(p) for p in (root / "ds", root / "partner", *root.glob("clean-*"))}
    results = run_all(root, runs)
    (root / "results.json").write_text(json.dumps(results))   # for a look at a failure
    seconds = time.perf_counter() - start
    datasets = {(r["case"]["version"], r["file"], r["case"]["mutation"]) for r in results}
    print(f"fuzz: {len(results)} runs on {len(datasets)} mutated datasets in {seconds:.1f} s (build {built:.1f} s)")
    return root, runs, results, inputs


def test_fuzz_every_file_kind_every_command(fuzzed):
    root, runs, results, inputs = fuzzed
    assert {r["case"]["command"] for r in results} == set(COMMANDS)
    assert {(r["case"]["version"], r["case"]["kind"]) for r in results} == \
        {(v, k) for v, kinds in FILE_KINDS.items() for k in kinds}
    bad = []
    for result in results:
        for problem in problems(result):
            c = result["case"]
            bad.append(f"{c['version']} {result['file']} {c['mutation']} | lerodoc {c['command']}: {problem}\n"
                       f"    {result['stderr'].strip()[-600:]}")
    bad += [f"a file outside every root: {path}" for path in escapes(root, runs)]
    for tree, before in inputs.items():   # no command wrote into its input (in place runs on copies)
        after = _digest_tree(tree)
        bad += [f"an input changed: {tree.name}/{rel}" for rel in sorted(set(before) | set(after))
                if before.get(rel) != after.get(rel)]
    assert not [p for p in root.parent.iterdir() if STAGING.search(p.name)], "staging beside the fuzz's folder"
    assert not bad, f"{len(bad)} of {len(results)} runs broke the rules:\n" + "\n".join(bad[:40])


def test_the_fuzz_reads_content():
    """The content comparison catches what it claims to: a value changed in one row, a packet's payload, a camera
    lost, a task text, or a row renumbered, each differs from the input's summary."""
    row = {"index": 0, "episode_index": 0, "frame_index": 0, "task_index": 0, "action": [1.0, 2.0, 3.0, 4.0],
           "observation.state": [5.0, 6.0, 7.0, 8.0]}
    content = {"cameras": ["cam"], "types": {"action": "float", "observation.state": "float"},
               "episodes": [{"episode": 0, "rows": [row], "tasks": ["pick up the cube"],
                             "videos": {"cam": [(0, True, "ab")]}}]}
    want = summary(content)
    changed = [
        {**content, "episodes": [{**content["episodes"][0], "rows": [{**row, "action": [1.0, 2.5, 3.0, 4.0]}]}]},
        {**content, "episodes": [{**content["episodes"][0], "videos": {"cam": [(0, True, "ac")]}}]},
        {**content, "episodes": [{**content["episodes"][0], "videos": {"cam": [(1, True, "ab")]}}]},
        {**content, "cameras": []},
        {**content, "types": {"action": "double"}},
        {**content, "episodes": [{**content["episodes"][0], "tasks": ["u"]}]},
    ]
    assert all(summary(c) != want for c in changed)
    assert summary({**content, "episodes": [{**content["episodes"][0], "rows": [{**row, "index": 3}]}]})["bookkeeping"]
    assert summary(transformed(content, "select")) != want and summary(transformed(content, "tasks")) != want


def train_cases() -> list[tuple[str, str, str]]:
    """(version, kind, mutation) that `train` runs on: with FULL each version clean and every mutation of it;
    else (a training run costs seconds) the v3.0 dataset clean, each version's first data file emptied (it must
    not train) and TRAIN_SAMPLE seeded mutations of any kind and version."""
    every = [(version, kind, m) for version, kinds in FILE_KINDS.items() for kind in kinds
             for m in mutations_of(version, kind)]
    if FULL:
        return [(version, "info.json", "none") for version in FILE_KINDS] + every
    emptied = [(version, "data.parquet", "truncate-0") for version in FILE_KINDS]
    return [("v3.0", "info.json", "none"), *emptied,
            *random.Random(f"{SEED}:train").sample([e for e in every if e not in emptied], TRAIN_SAMPLE)]


def test_fuzz_train_on_mutated_datasets(tmp_path):
    """`train pi05` (tiny preset, 2 CPU steps, the camera decoded) on mutated datasets: it trains, or it stops
    with one paragraph naming the file (and, for a frame it cannot decode, the episode and camera)."""
    require(importable("torch"), "torch (pip install -e '.[train]') for train pi05")
    from tests.fixtures.tokenizer import train_tokenizer
    tokenizer = train_tokenizer(tmp_path / "tokenizer")
    runs = []
    for version, kind, mutation in train_cases():
        kinds = FILE_KINDS[version]
        clean = tmp_path / f"clean-{version}"
        if not clean.exists():
            make_dataset(clean, version=version, vector_storage="fixed", **TINY)
            assert here("quantiles", clean, "--in-place").returncode == 0   # train needs q01/q99
        name = f"{version}-{kind}-{mutation}"
        ds = tmp_path / "ds" / name
        shutil.copytree(clean, ds)
        mutate(ds / kinds[kind], mutation, random.Random(f"{SEED}:{name}"), ds, clean)
        out = tmp_path / "runs" / name
        runs.append({"case": {"version": version, "kind": kind, "mutation": mutation, "command": "train"},
                     "args": ["train", "pi05", str(ds), "-o", str(out), "--preset", "tiny",
                              "--steps", str(TRAIN_STEPS), "--batch-per-device", "2", "--workers", "0",
                              "--device", "cpu", "--tokenizer", str(tokenizer), "--camera", CAMERA,
                              "--save-every", "0", "--json"],
                     "out": None, "run_dir": str(out), "file": kinds[kind], "index": len(runs), "mutated": str(ds),
                     "source": str(ds), "clean": str(clean), "partner": None, "must_report": False})
    results = run_all(tmp_path, runs)
    bad = [f"{r['case']['version']} {r['file']} {r['case']['mutation']}: {problem}\n    {r['stderr'].strip()[-600:]}"
           for r in results for problem in problems(r)]
    assert not bad, f"{len(bad)} of {len(results)} runs broke the rules:\n" + "\n".join(bad[:40])
    trained = [r for r in results if r["rc"] == 0]
    assert {r["case"]["version"] for r in trained if r["case"]["mutation"] == "none"} == \
        {v for v, _, m in train_cases() if m == "none"}
    assert not [r for r in trained if r["case"]["mutation"] == "truncate-0"], "trained on an empty data file"
    wrong = [f"{r['case']['version']} {r['file']} {r['case']['mutation']}: {w}" for r in trained
             for w in r["frames"]["wrong"]]
    assert not wrong, f"{len(wrong)} batch images show another frame:\n" + "\n".join(wrong[:20])
    # every trained run looked at its images: the batches of TRAIN_STEPS steps of 2 samples, one camera each
    assert all(r["frames"]["images"] == 2 * TRAIN_STEPS for r in trained), [r["frames"] for r in trained][:5]
    unseekable = [r for r in results if "cannot seek" in r["stderr"] or "cannot decode the frame" in r["stderr"]]
    assert all(re.search(r"episode \d+: observation\.images\.top: ", r["stderr"]) for r in unseekable)


def test_in_process_runs_end_as_python_m_lerodoc_does(fuzzed, tmp_path):
    """The fuzz runs its commands in the test's process; a seeded sample of them (one that failed, one that
    succeeded), each run alone as `python -m lerodoc`, ends with the same exit code and the same error line."""
    root, runs, results, _ = fuzzed
    cheap = [r for r in results if r["case"]["command"] in ("info", "convert", "delete", "tasks", "features")]
    sample = [random.Random(SEED).choice([r for r in cheap if r["rc"] == ok]) for ok in (3, 0)]
    for result in sample:
        args = list(result["args"])
        if result["out"]:   # a fresh output path: the fuzz's run wrote its own
            args[args.index(result["out"])] = str(tmp_path / "alone")
        proc = run_cli(*args, check=False)

        def error_line(text):
            return [line for line in text.splitlines() if line.startswith("error:")]
        assert (proc.returncode, error_line(proc.stderr)) == (result["rc"], error_line(result["stderr"])), args


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_mp4_tag_that_is_not_utf8(tmp_path, version):
    """The field report's crash: bits flipped in the mp4's metadata made PyAV raise UnicodeDecodeError while
    it read the container, in validate's demux path and in convert's. The frames are intact, so every
    command reads the file, and the converted dataset holds every frame."""
    import av

    root = tmp_path / "ds"
    make_dataset(root, version=version, **TINY)
    mp4 = root / FILE_KINDS[version]["video.mp4"]
    mp4.write_bytes(flip_tag(mp4.read_bytes()))
    with pytest.raises(UnicodeDecodeError):   # the reproduction: PyAV's default, strict, reading
        av.open(str(mp4)).close()

    info = here("info", root, "--json")
    assert info.returncode == 0 and "Traceback" not in info.stderr, info.stderr
    assert json.loads(info.stdout)["cameras"][CAMERA]["codec"] == "h264"

    validate = here("validate", root, "--videos", "--deep", "--json")
    assert validate.returncode in (0, 1) and "Traceback" not in validate.stderr, validate.stderr
    found = [(f["code"], f["severity"], f["file"]) for f in json.loads(validate.stdout)["findings"]
             if f["code"].startswith("VID")]
    assert found == [("VID013", "warning", FILE_KINDS[version]["video.mp4"])]   # named; every frame decodes

    out = tmp_path / "out"
    convert = here("convert", root, "-o", out)
    assert convert.returncode == 0 and "Traceback" not in convert.stderr, convert.stderr
    written = sorted(out.glob("videos/**/*.mp4"))
    for path in written:   # written with tags lerobot's pyav backend reads (strictly)
        av.open(str(path)).close()
    assert sum(len(packets(p)) for p in written) == sum(TINY["lengths"])

    repaired = tmp_path / "repaired"
    repair = here("repair", root, "-o", repaired)
    assert repair.returncode == 0 and "Traceback" not in repair.stderr, repair.stderr
    av.open(str(repaired / FILE_KINDS["v3.0"]["video.mp4"])).close()   # repair writes v3.0 whatever it reads


def test_mp4_unreadable_names_the_file(tmp_path):
    """A damaged mp4: one paragraph naming the file, exit 3, nothing written; validate --videos names it."""
    root = tmp_path / "ds"
    make_dataset(root, version="v2.1", **TINY)
    mp4 = root / FILE_KINDS["v2.1"]["video.mp4"]
    mp4.write_bytes(mp4.read_bytes()[: mp4.stat().st_size // 2])
    out = tmp_path / "out"
    convert = here("convert", root, "-o", out)
    errors = [line for line in convert.stderr.splitlines() if line.startswith("error:")]
    assert convert.returncode == 3 and len(errors) == 1 and "episode_000000.mp4" in errors[0], convert.stderr
    assert "Traceback" not in convert.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if STAGING.search(p.name)]
    validate = here("validate", root, "--videos", "--json")
    assert validate.returncode == 1 and "Traceback" not in validate.stderr
    assert any(f["code"] == "VID001" and f["file"].endswith("episode_000000.mp4")
               for f in json.loads(validate.stdout)["findings"])


def test_a_bug_is_named_as_one(tmp_path, monkeypatch):
    """An exception that is not a LerodocError is lerodoc's bug: one line that says so and where, exit 70, the
    staged output removed; LERODOC_DEBUG=1 lets the exception (and its traceback) through."""
    import lerodoc.ops.rewrite as rewrite
    root = tmp_path / "ds"
    make_dataset(root, version="v2.1", **TINY)

    def boom(*a, **k):
        raise KeyError("[planted]")
    monkeypatch.setattr(rewrite, "execute", boom)
    monkeypatch.delenv("LERODOC_DEBUG", raising=False)
    proc = here("convert", root, "-o", tmp_path / "out")
    assert proc.returncode == 70 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().startswith("internal error (a bug in lerodoc") and "KeyError: '[planted]'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if STAGING.search(p.name)]
    from lerodoc import cli
    monkeypatch.setenv("LERODOC_DEBUG", "1")
    monkeypatch.setattr(sys, "argv", ["lerodoc", "convert", str(root), "-o", str(tmp_path / "out")])
    with pytest.raises(KeyError, match="planted"):
        cli.main()
    assert not (tmp_path / "out").exists()


def test_an_interrupted_command_leaves_nothing(tmp_path, monkeypatch):
    """Ctrl-C in the middle of writing: exit 130, no output under the name asked for, no staging sibling."""
    import lerodoc.ops.rewrite as rewrite
    root = tmp_path / "ds"
    make_dataset(root, version="v2.1", **TINY)
    execute = rewrite.execute

    def interrupted(plan, tmp, *a, **k):
        execute(plan, tmp, *a, **k)
        raise KeyboardInterrupt
    monkeypatch.setattr(rewrite, "execute", interrupted)
    proc = here("convert", root, "-o", tmp_path / "out")
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if STAGING.search(p.name)]


def test_errors_cross_process_boundaries():
    """A worker's LerodocError (any subclass, whatever its __init__) reaches the parent with its location."""
    import pickle

    from lerodoc.errors import ExitCode, LerodocError
    from lerodoc.media.video import VerifyError
    from lerodoc.media.clips import NotOnKeyframe

    for exc in (LerodocError("m", file="f.parquet", episode=3, field="x", hint="h"),
                VerifyError("differs", Path("v.mp4")), NotOnKeyframe(Path("v.mp4"), 2)):
        back = pickle.loads(pickle.dumps(exc))
        assert (type(back), back.render(), back.exit_code) == (type(exc), exc.render(), exc.exit_code)
    assert pickle.loads(pickle.dumps(VerifyError("x", Path("v")))).exit_code == ExitCode.VERIFY_FAILED


if __name__ == "__main__":  # python -m tests.test_fuzz DIR: build and run, keep everything under DIR
    root = Path(sys.argv[1])
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _, runs = build(root)
    results = run_all(root, runs, shards=2)
    (root / "results.json").write_text(json.dumps(results, indent=1))
    for result in results:
        for problem in problems(result):
            c = result["case"]
            print(f"{c['version']} {result['file']} {c['mutation']} | {c['command']}: {problem}\n"
                  f"    {result['stderr'].strip()[-400:]}")
