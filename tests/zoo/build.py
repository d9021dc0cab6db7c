"""Regenerate the writer zoo: tests/zoo/members/<name>/ (a dataset) and <name>.json (what it should hold).

    python3 -m tests.zoo.build                      # everything: exporters, then each lerobot release
    python3 -m tests.zoo.build --only 'lerobot-0.4.4-*' --releases 0.4.4
    python3 -m tests.zoo.build --no-exporters --releases 0.6.1 --recheck   # refill lerobot_loads only

Each lerobot release runs in its own venv (scripts/zoo-venv.sh VERSION; made once, cached under
${LERODOC_ZOO_VENVS:-~/.cache/lerodoc}) through tests/zoo/writers/lerobot_writers.py, offline, with
every Hugging Face cache in a throwaway folder. The exporter-style members come from
tests/zoo/writers/exporters.py in this python. Every member is then loaded with lerobot 0.6.1's
LeRobotDataset (tests.lerobot_oracle.check_with_lerobot) and the verdict is stored in its json
("lerobot_loads", "refusal"). A release or an operation that fails is reported in
tests/zoo/build-report.json and leaves the members it could not write out.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ZOO = Path(__file__).resolve().parent
REPO = ZOO.parents[1]
MEMBERS = ZOO / "members"
WRITERS = ZOO / "writers"
RELEASES = ("0.3.3", "0.4.0", "0.4.4", "0.6.1")
DATASET_ID = {"0.3.3": 1, "0.4.0": 2, "0.4.4": 3, "0.6.1": 4}   # identity of each release's recordings
EDITS = ("delete_episodes", "split", "remove_feature", "modify_tasks", "convert_image_to_video")
JUNK = ("images", ".cache")   # left by some writers next to meta/, data/, videos/


def log(msg: str) -> None:
    print(f"zoo: {msg}", file=sys.stderr, flush=True)


def venv_python(version: str) -> Path:
    proc = subprocess.run(["bash", str(REPO / "scripts" / "zoo-venv.sh"), version], capture_output=True,
                          text=True, timeout=3600)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not Path(lines[-1]).exists():
        raise RuntimeError(f"scripts/zoo-venv.sh {version} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return Path(lines[-1])


def run_writer(python: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A writer in a release venv: offline, caches in a throwaway folder."""
    with tempfile.TemporaryDirectory(prefix="zoo-hf-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env.update(HF_HUB_OFFLINE="1", HF_HOME=f"{tmp}/hf", HF_DATASETS_CACHE=f"{tmp}/hf/datasets",
                   HF_LEROBOT_HOME=f"{tmp}/hf/lerobot", HF_HUB_DISABLE_TELEMETRY="1", SVT_LOG="1",
                   TQDM_DISABLE="1")
        return subprocess.run([str(python), str(WRITERS / "lerobot_writers.py"), *args], capture_output=True,
                              text=True, timeout=1800, env=env, cwd=cwd)


def task_names(root: Path) -> list[str]:
    """Tasks in task_index order, from tasks.jsonl (v2.x) or tasks.parquet (v3.0, task as column or index)."""
    if (root / "meta/tasks.jsonl").exists():
        rows = [json.loads(line) for line in (root / "meta/tasks.jsonl").read_text().splitlines() if line]
        return [r["task"] for r in sorted(rows, key=lambda r: r["task_index"])]
    import pandas as pd

    df = pd.read_parquet(root / "meta/tasks.parquet")
    if "task" not in df.columns:
        df = df.reset_index().rename(columns={df.index.name or "index": "task", "__index_level_0__": "task"})
    return list(df.sort_values("task_index")["task"])


def settle_expect(root: Path, expect: dict) -> dict:
    """Per-frame tasks (an episode that switches task) become per-frame task_index values."""
    names = None
    for ep in expect["episodes"]:
        tasks = ep.pop("tasks_per_frame", None)
        if tasks is not None:
            names = names or task_names(root)
            ep.setdefault("values", {})["task_index"] = [names.index(t) for t in tasks]
    return expect


def clean(root: Path) -> None:
    for name in JUNK:
        shutil.rmtree(root / name, ignore_errors=True)
    for path in root.rglob("*"):
        if path.is_file():
            path.chmod(0o644)


def install(staged: Path, name: str, writer: str, expect: dict) -> None:
    """Move a staged dataset into members/ and write its json (lerobot's verdict comes later)."""
    dest = MEMBERS / name
    shutil.rmtree(dest, ignore_errors=True)
    MEMBERS.mkdir(parents=True, exist_ok=True)
    shutil.copytree(staged, dest)
    clean(dest)
    version = json.loads((dest / "meta/info.json").read_text())["codebase_version"]
    meta = {"writer": writer, "version": version, "expect": settle_expect(dest, expect),
            "lerobot_loads": None, "refusal": None}
    (MEMBERS / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    log(f"wrote {name} ({version}, {writer})")


def build_release(version: str, work: Path, wanted, report: dict) -> None:
    try:
        python = venv_python(version)
    except Exception as exc:  # noqa: BLE001 - recorded, the other releases go on
        report["failures"].append({"release": version, "step": "venv", "error": str(exc)[-3000:]})
        log(f"lerobot {version}: venv failed")
        return
    d = DATASET_ID[version]
    steps = [
        (f"lerobot-{version}-record", f"lerobot {version} record (create/add_frame/save_episode, videos)",
         ["record", "{root}", "{expect}", "--dataset", str(d)]),
        (f"lerobot-{version}-record-images",
         f"lerobot {version} record (use_videos=False, images in parquet; last episode switches task)",
         ["record", "{root}", "{expect}", "--dataset", str(d), "--images", "--lengths", "10,14,12",
          "--task-switch"]),
    ]
    if version != "0.3.3":
        steps += [
            (f"_source-{version}-b", "second recording for aggregate",
             ["record", "{root}", "{expect}", "--dataset", str(d + 8), "--lengths", "10,13"]),
            (f"lerobot-{version}-convert", f"lerobot {version} convert_dataset_v21_to_v30 of lerobot-0.3.3-record",
             ["convert", str(work / "lerobot-0.3.3-record"), "{root}", "{expect}"]),
            (f"lerobot-{version}-aggregate", f"lerobot {version} aggregate_datasets of record + a second recording",
             ["aggregate", "{root}", "{expect}", str(work / f"lerobot-{version}-record"),
              str(work / f"_source-{version}-b")]),
        ]
        for op in EDITS:
            src = f"lerobot-{version}-record-images" if op == "convert_image_to_video" else f"lerobot-{version}-record"
            label = {"split": "split_dataset (train = episodes 0 and 2)",
                     "delete_episodes": "delete_episodes (episode 1)",
                     "remove_feature": "remove_feature (observation.images.wrist)",
                     "modify_tasks": "modify_tasks (episode 0 renamed)",
                     "convert_image_to_video": "convert_image_to_video_dataset of record-images"}[op]
            steps.append((f"lerobot-{version}-{op.replace('_', '-')}", f"lerobot {version} dataset_tools.{label}",
                          ["edit", op, str(work / src), "{root}", "{expect}"]))
    for name, writer, args in steps:
        needed = name.startswith("_") or wanted(name) or any(
            wanted(n) for n, _, a in steps if str(work / name) in a)
        if not needed:
            continue
        if any(a.startswith(str(work)) and not Path(a).exists() for a in args):
            report["failures"].append({"release": version, "member": name, "step": "source missing",
                                       "error": "its source member was not written"})
            continue
        root, expect = work / name, work / f"{name}.expect.json"
        shutil.rmtree(root, ignore_errors=True)
        log(f"lerobot {version}: {name}")
        proc = run_writer(python, [a.format(root=root, expect=expect) for a in args], work)
        if proc.returncode != 0:
            missing = proc.returncode == 3 and "MISSING:" in proc.stderr
            report["missing" if missing else "failures"].append(
                {"release": version, "member": name, "step": args[0],
                 "error": proc.stderr.strip().splitlines()[-1] if missing else proc.stderr[-3000:]})
            log(f"lerobot {version}: {name} {'not in this release' if missing else 'FAILED'}")
            shutil.rmtree(root, ignore_errors=True)
            continue
        if not name.startswith("_") and wanted(name):
            install(root, name, writer, json.loads(expect.read_text()))


def build_exporters(work: Path, wanted) -> None:
    sys.path.insert(0, str(WRITERS))
    import exporters

    names = [n for n in exporters.MEMBERS if wanted(n)]
    if not names:
        return
    out = work / "exporters"
    subprocess.run([sys.executable, str(WRITERS / "exporters.py"), str(out), *names], check=True)
    for name in names:
        meta = json.loads((out / f"{name}.json").read_text())
        install(out / name, name, meta["writer"], meta["expect"])


def recheck(wanted) -> None:
    """Load every wanted member with lerobot 0.6.1 and store the verdict in its json.

    0.6.1 loads v3.0 only; a v2.x member is judged the way a 0.6.1 user meets it: lerobot's own converter
    (convert_dataset_v21_to_v30) on a copy, then LeRobotDataset on the result."""
    sys.path.insert(0, str(REPO))
    from tests.lerobot_oracle import check_many_with_lerobot, convert_with_lerobot

    paths = [p for p in sorted(MEMBERS.glob("*.json")) if wanted(p.stem)]
    metas = [json.loads(p.read_text()) for p in paths]
    with tempfile.TemporaryDirectory(prefix="zoo-recheck-") as tmp:
        jobs, converter_failed = [], {}
        for path, meta in zip(paths, metas):
            root = MEMBERS / path.stem
            if meta["version"] == "v3.0":
                meta["oracle"] = "lerobot 0.6.1 LeRobotDataset"
                jobs.append({"root": root, "expect": meta["expect"]})
                continue
            meta["oracle"] = "lerobot 0.6.1 convert_dataset_v21_to_v30, then LeRobotDataset"
            expect = {k: v for k, v in meta["expect"].items() if k != "stats_keys"}   # the converter adds none
            try:
                converted = convert_with_lerobot(root, Path(tmp) / path.stem, repo_id=f"zoo/{path.stem}").root
            except RuntimeError as exc:
                converter_failed[path.stem] = f"lerobot's converter failed: {str(exc)[-1500:]}"
                converted = root   # judged as it is: its load fails and names why
            jobs.append({"root": converted, "expect": expect})
        reports = check_many_with_lerobot(jobs)
    for path, meta, report in zip(paths, metas, reports):
        failed = converter_failed.get(path.stem)
        meta["lerobot_loads"] = bool(report["ok"]) and not failed
        refusal = failed or "; ".join(report["problems"])
        examples = [json.dumps(x)[:300] for key in ("misaligned_examples", "value_mismatch_examples", "exceptions")
                    for x in report.get(key, [])[:2]]
        meta["refusal"] = None if meta["lerobot_loads"] else "; ".join([refusal, *examples])[:2000]
        path.write_text(json.dumps(meta, indent=1) + "\n")
        log(f"{meta['oracle']} on {path.stem}: {'loads' if meta['lerobot_loads'] else 'REFUSES: ' + refusal[:200]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="glob over member names (repeatable)")
    parser.add_argument("--releases", default=",".join(RELEASES))
    parser.add_argument("--no-exporters", action="store_true")
    parser.add_argument("--recheck", action="store_true", help="only refill lerobot_loads of existing members")
    parser.add_argument("--no-check", action="store_true", help="skip the lerobot 0.6.1 loads")
    args = parser.parse_args()

    def wanted(name: str) -> bool:
        return not args.only or any(fnmatch.fnmatch(name, pat) for pat in args.only)

    report = {"failures": [], "missing": []}
    if not args.recheck:
        releases = [r for r in args.releases.split(",") if r]
        with tempfile.TemporaryDirectory(prefix="zoo-build-") as tmp:
            work = Path(tmp)
            if not args.no_exporters:
                build_exporters(work, wanted)
            src = MEMBERS / "lerobot-0.3.3-record"
            if "0.3.3" not in releases or not wanted(src.name):   # the converters read 0.3.3's recording
                if src.is_dir():
                    shutil.copytree(src, work / src.name)
                    expect = json.loads((MEMBERS / f"{src.name}.json").read_text())["expect"]
                    (work / f"{src.name}.expect.json").write_text(json.dumps(expect))
                elif "0.3.3" not in releases:
                    releases.insert(0, "0.3.3")
            for version in sorted(releases, key=RELEASES.index):
                build_release(version, work, wanted, report)
        path = ZOO / "build-report.json"
        old = json.loads(path.read_text()) if path.exists() else {"failures": [], "missing": []}
        done = {(f.get("release"), f.get("member")) for f in report["failures"] + report["missing"]}
        for key in ("failures", "missing"):   # keep what this run did not redo
            report[key] += [f for f in old.get(key, []) if (f.get("release"), f.get("member")) not in done
                            and f.get("release") not in releases]
        path.write_text(json.dumps(report, indent=1) + "\n")
    if not args.no_check:
        recheck(wanted)
    for f in report["failures"]:
        log(f"FAILED {f.get('release')} {f.get('member', '')} {f['step']}: {f['error'][-300:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
