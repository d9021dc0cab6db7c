"""Hostile bytes: every file kind of small v2.1 and v3.0 datasets, corrupted, through every reading command.

Each file kind (info.json, episodes.jsonl, tasks.jsonl, episodes_stats.jsonl, stats.json, tasks.parquet,
meta/episodes parquet, data parquet and mp4, the first and the last of each) is truncated (to 0 bytes, to
half, short of its tail), has seeded bits flipped (anywhere, and in its tail: a parquet footer, an mp4 moov),
a seeded block zeroed and its head zeroed; the JSON files also get valid JSON of the wrong structure (null, a
wrong top-level type, a missing key, values of the wrong type, a list one element short), and the mp4 an
encoder tag that is not UTF-8. Every command that reads a dataset (info, validate, validate --videos,
convert, merge with a clean dataset, repair, flatten, quantiles, select, delete, split, tasks, features,
encode --reencode, report --videos, and repair and quantiles --in-place) runs on every mutated dataset, and on
the clean ones, where each must succeed; so does `train pi05` (tiny, two CPU steps) on datasets with quantiles.

A run must end in findings (codes, each error naming a file) or in one paragraph naming a file, with a
documented exit code; never a traceback or an internal error. A writing command that fails leaves neither
its output nor a staging sibling, and an in-place one leaves the dataset as it was; one that succeeds
wrote every episode, frame and task of its inputs.

The runs go through `lerodoc.cli.main` exactly as `python -m lerodoc` does, many per subprocess (a Python
start with pyarrow and PyAV costs about a second, the runs themselves tens of milliseconds), spread over
as many subprocesses as there are cores. Everything is seeded: the same cases run on every run.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.factory import make_dataset
from tests.helpers import packets, run_cli

SEED = int(os.environ.get("LERODOC_FUZZ_SEED", "1313"))   # another seed explores other bytes
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
    "report": (("--videos", "--sample", "3"), True),
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
LOSSY = {"quantiles", "delete", "split", "tasks", "features"}
NOT_DATASETS = {"report"}   # writes one HTML file: it must exist after exit 0 and not after a failure


# ------------------------------------------------------------------------------------------- mutations

def mutate(path: Path, mutation: str, rng: random.Random) -> None:
    """Corrupt the file at `path` in place."""
    data = bytearray(path.read_bytes())
    n = len(data)
    if mutation == "none":
        return
    if mutation in INFO_EDITS:
        info = json.loads(data)
        INFO_EDITS[mutation](info)
        path.write_text(json.dumps(info, indent=4))
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


def all_cases() -> list[Case]:
    """The cross product version x file kind x mutation x command (the in-place commands on every other
    mutation of each kind), in a fixed order."""
    cases = []
    for version, kinds in FILE_KINDS.items():
        cases += [Case(version, "info.json", "none", command) for command in COMMANDS]   # the baseline
        for kind, rel in kinds.items():
            mutations = BYTE_MUTATIONS + (JSON_MUTATIONS if rel.endswith((".json", ".jsonl")) else ()) \
                + (MP4_MUTATIONS if rel.endswith(".mp4") else ()) + (tuple(INFO_EDITS) if kind == "info.json" else ())
            for m, mutation in enumerate(mutations):
                for command in COMMANDS:
                    if command not in IN_PLACE or m % 2 == 0:   # in place: every other mutation, to bound the time
                        cases.append(Case(version, kind, mutation, command))
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
    # what a writing command that succeeds must carry over: every episode, frame and task of its inputs
    one = {"episodes": TINY["episodes"], "frames": sum(TINY["lengths"]), "tasks": min(TINY["episodes"], 2)}
    both = {"episodes": 2 * one["episodes"], "frames": 2 * one["frames"], "tasks": one["tasks"]}
    runs, made = [], set()
    for i, case in enumerate(all_cases()):
        ds = root / "ds" / case.name
        if case.name not in made:
            made.add(case.name)
            shutil.copytree(clean[case.version], ds)
            mutate(ds / FILE_KINDS[case.version][case.kind], case.mutation, random.Random(f"{SEED}:{case.name}"))
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
                     "dataset_out": case.command not in NOT_DATASETS,
                     "file": FILE_KINDS[case.version][case.kind], "index": i, "mutated": str(ds),
                     "source": str(source),
                     "expect": both if case.command == "merge" else one})
    return clean, runs


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


# ------------------------------------------------------------------------------------------- the driver

def drive(runs_file: str, results_file: str) -> None:
    """Run each run's arguments through `lerodoc.cli.main`, as `python -m lerodoc` would, in this process."""
    from lerodoc import cli
    runs = json.loads(Path(runs_file).read_text())
    results = []
    current = Path(results_file + ".current")   # names the run if the process dies (a crash inside FFmpeg)
    for run in runs:
        current.write_text(" ".join(run["args"]))
        sys.argv = ["lerodoc", *run["args"]]
        out, err = io.StringIO(), io.StringIO()
        start = time.perf_counter()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # what Python itself would print, and its exit code
                traceback.print_exc()
                code = 1
        results.append({**run, "rc": code, "stdout": out.getvalue()[-200_000:], "stderr": err.getvalue()[-4000:],
                        "seconds": time.perf_counter() - start,
                        "written": _written(run["out"]) if run["dataset_out"] else None})
    Path(results_file).write_text(json.dumps(results))


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` by relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _written(out: str | None) -> dict | str | None:
    """What a writing command's output holds (episodes, frames, tasks), or why it does not open."""
    from lerodoc.dataset import Dataset
    from lerodoc.errors import LerodocError
    if out is None or not Path(out).exists():
        return None
    try:
        ds = Dataset.open(out)
    except LerodocError as exc:
        return exc.render()
    return {"episodes": len(ds.episodes), "frames": ds.total_frames, "tasks": len(ds.tasks)}


def run_all(root: Path, runs: list[dict], shards: int) -> list[dict]:
    """The runs split over `shards` subprocesses running `drive`, in parallel."""
    procs = []
    for s in range(shards):
        part = runs[s::shards]
        runs_file, results_file = root / f"runs-{s}.json", root / f"results-{s}.json"
        runs_file.write_text(json.dumps(part))
        code = f"from tests.test_fuzz import drive; drive({str(runs_file)!r}, {str(results_file)!r})"
        env = {k: v for k, v in os.environ.items() if k != "LERODOC_DEBUG"}
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
    nothing_to_flatten = case["command"] == "flatten" and "no list column to flatten" in stderr   # v3.0: fixed
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
    if rc == 3 or rc == 4:
        if len(errors) != 1:
            found.append(f"{len(errors)} 'error:' paragraphs")
        elif not (re.search(r"[\w.-]+\.(json|jsonl|parquet|mp4)\b|meta/|data/|videos/", errors[0])
                  or result["source"] in errors[0]):   # a file, or the dataset (merge names both sides)
            found.append("the error names no file")
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
        if rc in (0,) and not exists:
            found.append("exit 0 but no output")
        if rc not in (0, 1) and exists:
            found.append(f"exit {rc} but the output exists")
        if rc == 1 and case["command"] != "repair" and exists:
            found.append("exit 1 but the output exists")
        written = result["written"]
        if rc == 0 and exists and written != result["expect"] and case["command"] not in LOSSY | NOT_DATASETS:
            found.append(f"exit 0 but the output holds {written}, the inputs {result['expect']}")
        left = [p.name for p in out.parent.iterdir() if STAGING.search(p.name)] if out.parent.exists() else []
        if left:
            found.append(f"staging left behind: {left}")
    return found


# ------------------------------------------------------------------------------------------- the tests

def test_fuzz_every_file_kind_every_command(tmp_path):
    start = time.perf_counter()
    _, runs = build(tmp_path)
    built = time.perf_counter() - start
    results = run_all(tmp_path, runs, shards=max(2, min(4, len(os.sched_getaffinity(0)))))
    bad = []
    for result in results:
        for problem in problems(result):
            c = result["case"]
            bad.append(f"{c['version']} {result['file']} {c['mutation']} | lerodoc {c['command']}: {problem}\n"
                       f"    {result['stderr'].strip()[-600:]}")
    seconds = time.perf_counter() - start
    datasets = {(r["case"]["version"], r["file"], r["case"]["mutation"]) for r in results}
    print(f"fuzz: {len(results)} runs on {len(datasets)} mutated datasets in {seconds:.1f} s (build {built:.1f} s)")
    assert not bad, f"{len(bad)} of {len(results)} runs broke the rules:\n" + "\n".join(bad[:40])


def test_fuzz_train_on_every_mutated_dataset(tmp_path):
    """`train pi05` (tiny preset, 2 CPU steps, the camera decoded) on every mutated dataset: it trains, or it
    stops with one paragraph naming the file (and, for a frame it cannot decode, the episode and camera)."""
    from tests.fixtures.tokenizer import train_tokenizer
    tokenizer = train_tokenizer(tmp_path / "tokenizer")
    runs = []
    for version, kinds in FILE_KINDS.items():
        clean = tmp_path / f"clean-{version}"
        make_dataset(clean, version=version, vector_storage="fixed", **TINY)
        assert run_cli("quantiles", clean, "--in-place").returncode == 0   # train needs q01/q99
        todo = [("info.json", "none")]
        for kind, rel in kinds.items():
            todo += [(kind, m) for m in BYTE_MUTATIONS + (JSON_MUTATIONS if rel.endswith((".json", ".jsonl")) else ())
                     + (MP4_MUTATIONS if rel.endswith(".mp4") else ()) + (tuple(INFO_EDITS) if kind == "info.json" else ())]
        for kind, mutation in todo:
            name = f"{version}-{kind}-{mutation}"
            ds = tmp_path / "ds" / name
            shutil.copytree(clean, ds)
            if mutation != "none":
                mutate(ds / kinds[kind], mutation, random.Random(f"{SEED}:{name}"))
            runs.append({"case": {"version": version, "kind": kind, "mutation": mutation, "command": "train"},
                         "args": ["train", "pi05", str(ds), "-o", str(tmp_path / "runs" / name), "--preset", "tiny",
                                  "--steps", "2", "--batch-per-device", "2", "--workers", "0", "--device", "cpu",
                                  "--tokenizer", str(tokenizer), "--camera", CAMERA, "--save-every", "0", "--json"],
                         "out": None, "dataset_out": False, "file": kinds[kind], "index": len(runs),
                         "mutated": str(ds), "source": str(ds), "expect": None})
    results = run_all(tmp_path, runs, shards=2)
    bad = [f"{r['case']['version']} {r['file']} {r['case']['mutation']}: {problem}\n    {r['stderr'].strip()[-600:]}"
           for r in results for problem in problems(r)]
    assert not bad, f"{len(bad)} of {len(results)} runs broke the rules:\n" + "\n".join(bad[:40])
    trained = [r for r in results if r["rc"] == 0]
    assert any(r["case"]["mutation"] == "none" for r in trained) and len(trained) < len(results)
    unseekable = [r for r in results if "cannot seek" in r["stderr"] or "cannot decode the frame" in r["stderr"]]
    assert all(re.search(r"episode \d+: observation\.images\.top: ", r["stderr"]) for r in unseekable)


def test_in_process_runs_end_as_python_m_lerodoc_does(tmp_path):
    """The fuzz runs many commands per process; a seeded sample of them, each run alone as `python -m lerodoc`,
    ends with the same exit code and the same error line."""
    _, runs = build(tmp_path)
    sample = sorted(random.Random(SEED).sample([r for r in runs if r["case"]["command"] not in IN_PLACE], 5),
                    key=lambda r: r["index"])   # run_all answers in index order
    for run in sample:   # fresh output paths: the driver's runs write their own
        if run["out"]:
            run["args"][run["args"].index(run["out"])] = run["out"] = run["out"] + "-alone"
    alone = [run_cli(*run["args"], check=False) for run in sample]
    for run in sample:
        if run["out"]:
            run["args"][run["args"].index(run["out"])] = run["out"] = run["out"][:-len("-alone")]
    for run, result, proc in zip(sample, run_all(tmp_path, sample, shards=1), alone):
        def error_line(text):
            return [line for line in text.splitlines() if line.startswith("error:")]
        assert (proc.returncode, error_line(proc.stderr)) == (result["rc"], error_line(result["stderr"])), run["args"]


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

    info = run_cli("info", root, "--json", check=False)
    assert info.returncode == 0 and "Traceback" not in info.stderr, info.stderr
    assert json.loads(info.stdout)["cameras"][CAMERA]["codec"] == "h264"

    validate = run_cli("validate", root, "--videos", "--deep", "--json", check=False)
    assert validate.returncode in (0, 1) and "Traceback" not in validate.stderr, validate.stderr
    found = [(f["code"], f["severity"], f["file"]) for f in json.loads(validate.stdout)["findings"]
             if f["code"].startswith("VID")]
    assert found == [("VID013", "warning", FILE_KINDS[version]["video.mp4"])]   # named; every frame decodes

    out = tmp_path / "out"
    convert = run_cli("convert", root, "-o", out, check=False)
    assert convert.returncode == 0 and "Traceback" not in convert.stderr, convert.stderr
    written = sorted(out.glob("videos/**/*.mp4"))
    for path in written:   # written with tags lerobot's pyav backend reads (strictly)
        av.open(str(path)).close()
    assert sum(len(packets(p)) for p in written) == sum(TINY["lengths"])

    repaired = tmp_path / "repaired"
    repair = run_cli("repair", root, "-o", repaired, check=False)
    assert repair.returncode == 0 and "Traceback" not in repair.stderr, repair.stderr
    av.open(str(repaired / FILE_KINDS[version]["video.mp4"])).close()


def test_mp4_unreadable_names_the_file(tmp_path):
    """A damaged mp4 through the real command line: one paragraph naming the file, exit 3, nothing written."""
    root = tmp_path / "ds"
    make_dataset(root, version="v2.1", **TINY)
    mp4 = root / FILE_KINDS["v2.1"]["video.mp4"]
    mp4.write_bytes(mp4.read_bytes()[: mp4.stat().st_size // 2])
    out = tmp_path / "out"
    convert = run_cli("convert", root, "-o", out, check=False)
    errors = [line for line in convert.stderr.splitlines() if line.startswith("error:")]
    assert convert.returncode == 3 and len(errors) == 1 and "episode_000000.mp4" in errors[0], convert.stderr
    assert "Traceback" not in convert.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if STAGING.search(p.name)]
    validate = run_cli("validate", root, "--videos", "--json", check=False)
    assert validate.returncode == 1 and "Traceback" not in validate.stderr
    assert any(f["code"] == "VID001" and f["file"].endswith("episode_000000.mp4")
               for f in json.loads(validate.stdout)["findings"])


def test_a_bug_is_named_as_one(tmp_path):
    """An exception that is not a LerodocError is lerodoc's bug: one line that says so and where, exit 70, the
    staged output removed; LERODOC_DEBUG=1 shows the traceback."""
    root = tmp_path / "ds"
    make_dataset(root, version="v2.1", **TINY)
    code = ("import sys\nfrom lerodoc import cli, formats\nimport lerodoc.ops.rewrite as rewrite\n"
            "def boom(*a, **k): raise KeyError('[planted]')\nrewrite.execute = boom\n"
            f"sys.argv = ['lerodoc', 'convert', {str(root)!r}, '-o', {str(tmp_path / 'out')!r}]\ncli.main()\n")
    env = {k: v for k, v in os.environ.items() if k != "LERODOC_DEBUG"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 70 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().startswith("internal error (a bug in lerodoc") and "KeyError: '[planted]'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if STAGING.search(p.name)]
    debug = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**env, "LERODOC_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_an_interrupted_command_leaves_nothing(tmp_path):
    """Ctrl-C in the middle of writing: exit 130, no output under the name asked for, no staging sibling."""
    root = tmp_path / "ds"
    make_dataset(root, version="v2.1", **TINY)
    code = ("import sys\nfrom lerodoc import cli\nimport lerodoc.ops.rewrite as rewrite\nexecute = rewrite.execute\n"
            "def interrupted(plan, tmp, *a, **k):\n"
            "    execute(plan, tmp, *a, **k)\n    raise KeyboardInterrupt\n"
            "rewrite.execute = interrupted\n"
            f"sys.argv = ['lerodoc', 'convert', {str(root)!r}, '-o', {str(tmp_path / 'out')!r}]\ncli.main()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if STAGING.search(p.name)]


def test_errors_cross_process_boundaries():
    """A worker's LerodocError (any subclass, whatever its __init__) reaches the parent with its location."""
    import pickle

    from lerodoc.errors import ExitCode, LerodocError
    from lerodoc.video import NotOnKeyframe, VerifyError

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
