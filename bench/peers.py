"""bench/peers: what lerodoc, robovet, trajlens and lerobot-doctor catch on the same planted defects.

    python3 -m bench.peers                  # everything, venvs made first (scripts/peer-venvs.sh)
    python -m bench.peers --work DIR [--only NAME ...] [--no-zoo] [--markdown FILE] [--json FILE] [--update-docs FILE]
    python -m bench.peers --work DIR --speed [--episodes 1000] [--cameras 3] [--rounds 3] [--v30]

Builds one dataset per planted defect (tests/fixtures/defects_data.DEFECTS on the v2.1/v3.0 bases of
BASES, and the timestamp/video defects of tests/fixtures/defects_media on the same bases, with an AV1 or
B-frame variant where the defect needs one), plus a clean dataset of every base, and runs on each:

- lerodoc: `python -m lerodoc validate ROOT --videos --json` (and, in a second column, `--videos --deep`);
- robovet: `robovet doctor ROOT --json FILE` (its full local mode: parquet scan, stats recompute, video
  containers demuxed with PyAV, no decode);
- trajlens: `trajlens lint ROOT --json` (local: every check; videos decoded first/middle/last);
- lerobot-doctor: `lerobot-doctor check ROOT --json` (all 11 check groups).

Each peer lives in its own venv, made by scripts/peer-venvs.sh (pinned PyPI versions) under
${LERODOC_PEER_VENVS:-~/.cache/lerodoc/peers}/{robovet,trajlens,lerobot-doctor}; $LERODOC_PEER_ROBOVET,
$LERODOC_PEER_TRAJLENS and $LERODOC_PEER_LEROBOT_DOCTOR point at other venvs. A run starts by calling the
script (it keeps venvs already made; --no-install skips it), and a venv still missing is reported as "not
installed". Peers run with HF_HUB_OFFLINE=1.

When does a tool "catch" a defect (one rule for every tool, lerodoc included):

- its report (parsed from its JSON) has a finding at warning level or worse that (1) is not in its
  report on the clean dataset of the same base (findings are compared as check id + severity + message
  with digits masked, so "episode 0 has 39 jumps" on the clean set also covers "episode 0 has 40
  jumps"), and (2) comes from a check whose subject is the defect's subject: every defect has subjects
  (SUBJECTS below: "timestamps", "stats", "video-sync", ...) and every check id (lerodoc's codes,
  robovet's and trajlens' ids, lerobot-doctor's check groups) has subjects (LERODOC, ROBOVET, TRAJLENS,
  LEROBOT_DOCTOR below). The evidence (the matching check id and message) is printed for every cell, so
  each verdict can be audited. For lerodoc the evidence also says whether the code its own tests expect
  (tests/fixtures/defects_*.py) is among the findings.
- A peer that declines to check the dataset (exits non-zero with a message and no traceback, or trajlens'
  report with grade ERROR) catches the defect only if its message names the planted file (its path, or
  its file name where that is distinctive: not a shared v3.0 "file-000.parquet"); shown "yes (refused)".
- Exit codes alone are not used: trajlens and lerobot-doctor warn on every clean factory dataset
  (trajlens exits 1), so a non-zero exit says nothing by itself.
- "crash": the peer printed a Python traceback or no parseable report, or one of its checks raised (a
  trajlens ERROR result) and nothing on-subject was reported. "other": new findings, none on the
  defect's subject. "no": nothing new.

Also builds robovet's own demo datasets (`robovet demo`, with and without its planted defects) and says
which of robovet's documented defects lerodoc reports; and runs every tool on the writer zoo (tests/zoo:
datasets written by lerobot 0.3.3-0.6.1 and exporter-style writers, with what LeRobotDataset 0.6.1 said
of each): on a member lerobot loads, a failing verdict is a false alarm; on one it refuses, a catch.

--speed times `lerodoc validate --videos --json` against `robovet doctor --json` (both in a fresh process,
wall clock and CPU time, imports included; one warm-up run each, then --rounds alternating runs, median)
on one tiled v2.1 dataset of --episodes x --cameras (bench/validate.py's builder), and with --v30 on the
same dataset converted to v3.0 by lerodoc.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures import defects_data  # noqa: E402
from tests.fixtures.defects_data import BASES, DEFECTS  # noqa: E402
from tests.fixtures.factory import make_dataset  # noqa: E402

try:
    from tests.fixtures import defects_media
except ImportError:          # the media planters are optional: only the data defects are run then
    defects_media = None

CAM = defects_data.TOP
TIMEOUT_S = 600
VENV_ROOT = Path(os.environ.get("LERODOC_PEER_VENVS", Path.home() / ".cache/lerodoc/peers"))
VENV_SCRIPT = REPO / "scripts" / "peer-venvs.sh"
PEERS = {  # name: (env var with its venv, default venv, executable)
    "robovet": ("LERODOC_PEER_ROBOVET", VENV_ROOT / "robovet", "robovet"),
    "trajlens": ("LERODOC_PEER_TRAJLENS", VENV_ROOT / "trajlens", "trajlens"),
    "lerobot-doctor": ("LERODOC_PEER_LEROBOT_DOCTOR", VENV_ROOT / "lerobot-doctor", "lerobot-doctor"),
}

# ---------------------------------------------------------------- bases and cases

BASE_KWARGS = {
    "v2.1": BASES["v2.1"],
    "v3.0": BASES["v3.0"],
    "v2.1-av1": {**BASES["v2.1"], "codec": "av1"},
    "v2.1-bframes": {**BASES["v2.1"], "bframes": 2},
    "v3.0-av1": {**BASES["v3.0"], "codec": "av1"},
    "v3.0-bframes": {**BASES["v3.0"], "bframes": 2},
}

# What each planted defect is about. A peer's finding counts only if its check shares a subject.
#   meta: a metadata file unreadable or invalid; file: a data file missing, unreadable or stray;
#   schema: column types / feature specs; index: episode/frame/global indices, lengths, totals, file
#   pointers; task: task table and task_index; stats: stored statistics; values: NaN / outliers in the
#   data; timestamps: the parquet timestamp column; video-file: an mp4 missing or unreadable;
#   video-sync: frames vs rows / windows / frame timing of the mp4; video-meta: codec, size, fps in
#   info.json vs the container; video-decode: a frame that does not decode.
SUBJECTS = {
    "list1_column": {"schema"},
    "truncated_parquet": {"file"},
    "missing_data_file": {"file"},
    "malformed_info_json": {"meta"},
    "truncated_episodes_metadata": {"meta"},
    "nested_names": {"schema"},
    "video_in_v21_folder": {"video-file"},
    "stray_data_file": {"file"},
    "datasets4_list_metadata": {"schema"},
    "gapped_episode_index": {"index"},
    "wrong_frame_index": {"index"},
    "wrong_global_index": {"index"},
    "wrong_totals": {"index"},
    "wrong_data_file_index": {"index"},
    "unresolvable_task_index": {"task"},
    "duplicate_task_text": {"task"},
    "count_zero_placeholder": {"stats"},
    "stats_shape_1x1": {"stats"},
    # the stats were recomputed and agree with the data: only the values (a 3e5 reading) are wrong
    "extreme_channel_recomputed": {"values"},
    "missing_quantiles": {"stats"},
    "quantiles_swapped": {"stats"},
    "missing_stats_json": {"stats"},
    "stats_disagree_with_data": {"stats"},
    "nan_in_data": {"values"},
}

# lerodoc code -> subjects (docs/checks.md's catalogue); a code not listed takes its family's subjects.
LERODOC_FAMILY = {"LAY": {"meta", "schema"}, "IDX": {"index"}, "TS": {"timestamps"}, "VID": {"video-sync"},
                  "STA": {"stats"}, "TSK": {"task"}}
LERODOC = {
    "LAY001": {"meta", "file"}, "LAY002": {"meta"}, "LAY003": {"meta"},
    "LAY030": {"file"}, "LAY031": {"file"}, "LAY032": {"schema"}, "LAY033": {"schema"}, "LAY034": {"schema"},
    "LAY035": {"schema"}, "LAY036": {"schema"}, "LAY037": {"schema"}, "LAY038": {"schema"}, "LAY039": {"schema"},
    "LAY040": {"video-file"}, "LAY041": {"file", "video-file"}, "LAY042": {"file", "video-file"},
    "LAY043": {"file"},
    "VID001": {"video-file", "video-decode"}, "VID002": {"video-meta"}, "VID003": {"video-meta"},
    "VID004": {"video-meta", "video-sync"}, "VID012": {"video-decode"}, "VID013": {"video-meta"},
    "STA031": {"values", "stats"}, "STA050": {"values"}, "STA051": {"values", "schema"}, "STA052": {"file", "values"},
}


def lerodoc_subjects(code: str) -> set[str]:
    return LERODOC.get(code) or LERODOC_FAMILY.get(code.rstrip("0123456789"), set())


# robovet check id -> subjects (robovet/checks/*.py)
ROBOVET = {
    "STRUCT-001": {"meta"}, "STRUCT-002": {"meta"}, "STRUCT-002b": {"meta"}, "STRUCT-003": {"meta"},
    "STRUCT-004": {"meta", "index"}, "STRUCT-005": {"task"}, "STRUCT-006": {"file"},
    "STRUCT-007": {"index"}, "STRUCT-008": {"file"},
    "META-501": {"index"}, "META-502": {"index"}, "META-503": {"stats"}, "META-504": {"video-sync"},
    "DATA-101": {"file"}, "DATA-102": {"schema"}, "DATA-103": {"schema"}, "DATA-104": {"index"},
    "DATA-105a": {"index"}, "DATA-105b": {"index"}, "DATA-105c": {"index"}, "DATA-106": {"index"},
    "DATA-107": {"values"}, "DATA-108": {"values"}, "DATA-109": {"task"},
    "TIME-201": {"timestamps"}, "TIME-202": {"timestamps"}, "TIME-203": {"timestamps"},
    "TIME-204": {"timestamps"}, "TIME-205": {"video-sync"},
    "STATS-301": {"stats"}, "STATS-302": {"stats"}, "STATS-303": {"stats"}, "STATS-304": {"stats"},
    "VIDEO-401": {"video-file"}, "VIDEO-401b": {"video-file", "video-decode"},
    "VIDEO-402": {"video-sync"}, "VIDEO-403": {"video-meta"}, "VIDEO-404": {"video-meta", "video-sync"},
    "VIDEO-405": {"video-sync"},
}
# trajlens check id -> subjects (trajlens/checks/*.py)
TRAJLENS = {
    "SEMANTIC.FEATURE_DIMENSIONALITY": {"schema"}, "SEMANTIC.TASK_INTEGRITY": {"task"},
    "SEMANTIC.LANGUAGE_PRESENT": {"task"}, "SEMANTIC.CAMERA_INTRINSICS_PLAUSIBLE": {"video-meta"},
    "STATISTICAL.STATS_MATCH_DATA": {"stats"}, "STATISTICAL.PER_EPISODE_STATS_MATCH": {"stats"},
    "STATISTICAL.VALUE_SANITY": {"values"},
    "STRUCTURAL.VERSION_DETECTED": {"meta"}, "STRUCTURAL.SCHEMA_CONSISTENCY": {"schema"},
    "STRUCTURAL.INDEX_CONTINUITY": {"index"}, "STRUCTURAL.METADATA_DATA_AGREEMENT": {"index"},
    "STRUCTURAL.PATH_TEMPLATE_RESOLVES": {"file", "video-file"}, "STRUCTURAL.ORPHAN_SHARD": {"file"},
    "TEMPORAL.TIMESTAMP_MONOTONIC": {"timestamps"}, "TEMPORAL.TIMESTAMP_SPACING": {"timestamps"},
    "KNOWNBUG.TIMESTAMP_DRIFT": {"timestamps"},
    "VIDEO.DECODABLE_SPOTCHECK": {"video-file", "video-decode"},
}
# lerobot-doctor check group -> subjects (lerobot_doctor/checks/*.py; it has no per-finding ids).
# "Per-Episode Summary" only repeats the other groups' findings per episode and is left out.
LEROBOT_DOCTOR = {
    "Metadata & Format Compliance": {"meta", "file", "schema", "index", "task"},
    "Temporal Consistency": {"timestamps", "index"},
    "Action Quality": {"values"},
    "Video Integrity": {"video-file", "video-sync", "video-meta", "video-decode"},
    "Data Distribution": {"stats", "values"},
    "Episode Health": {"index"},
    "Feature Consistency": {"schema", "values"},
    "Training Readiness": {"stats", "schema"},
    "Anomaly Detection": {"values"},
    "Portability": {"file", "schema"},
    "Per-Episode Summary": set(),
}


@dataclass
class Case:
    name: str
    base: str
    plant: Callable[[Path], object]
    codes: set[str]                  # lerodoc must report all of these
    subjects: set[str]
    note: str = ""


def data_cases() -> list[Case]:
    cases = []
    for name, (version, planter) in DEFECTS.items():
        def plant(root: Path, planter=planter):
            return planter(root)
        cases.append(Case(name, version, plant, set(), SUBJECTS.get(name, set()),
                          (planter.__doc__ or "").strip().split("\n")[0]))
    return cases


def media_cases() -> list[Case]:
    if defects_media is None:
        return []
    m = defects_media
    rows = [  # name, base, plant, lerodoc code, subjects (mirrors tests/test_checks_media.py)
        ("ts_offset_v21", "v2.1", lambda r: m.offset_timestamps(r, 1), "TS001", {"timestamps"}),
        ("ts_offset_v30", "v3.0", lambda r: m.offset_timestamps(r, 1), "TS001", {"timestamps"}),
        ("ts_dropped_frame", "v2.1", lambda r: m.drop_frame(r, 1), "TS004", {"timestamps"}),
        ("ts_duplicate", "v3.0", lambda r: m.duplicate_timestamp(r, 2), "TS003", {"timestamps"}),
        ("ts_clock_restart", "v2.1", lambda r: m.restart_timestamps(r, 2), "TS002", {"timestamps"}),
        ("ts_jitter_v21", "v2.1", lambda r: m.jitter_timestamps(r, 1), "TS005", {"timestamps"}),
        ("ts_jitter_v30", "v3.0", lambda r: m.jitter_timestamps(r, 1), "TS005", {"timestamps"}),
        ("ts_drift_29.97", "v2.1", lambda r: m.drift_timestamps(r, 2), "TS006", {"timestamps"}),
        ("vid_window_start_shifted", "v3.0", lambda r: m.shift_window_start(r, 0, CAM), "VID007", {"video-sync"}),
        ("vid_window_past_end", "v3.0", lambda r: m.window_past_end(r, 1, CAM), "VID006", {"video-sync"}),
        ("vid_window_off_grid", "v3.0-av1", lambda r: m.shift_window(r, 0, CAM, 0.4 / 30), "VID010",
         {"video-sync"}),
        ("vid_window_overlap", "v3.0-bframes", lambda r: m.shift_window_start(r, 1, CAM, frames=-1), "VID009",
         {"video-sync"}),
        ("vid_fewer_frames_h264", "v2.1", lambda r: m.trim_video(r, 1, CAM), "VID007", {"video-sync"}),
        ("vid_fewer_frames_av1", "v2.1-av1", lambda r: m.trim_video(r, 2, CAM), "VID007", {"video-sync"}),
        ("vid_truncated", "v2.1", lambda r: m.truncate_video(r, 1, CAM), "VID001",
         {"video-file", "video-decode"}),
        ("vid_truncated_faststart", "v2.1-av1", lambda r: m.truncate_video(r, 0, CAM, faststart=True), "VID001",
         {"video-file", "video-decode"}),
        ("vid_time_base_1000", "v2.1", lambda r: m.remux_time_base(r, 1, CAM), "VID005", {"video-sync"}),
        ("vid_half_fps", "v2.1", lambda r: m.retime_video(r, 1, CAM), "VID004", {"video-sync", "video-meta"}),
        ("vid_wrong_resolution", "v2.1", lambda r: m.set_video_info(r, CAM, height=480, width=640), "VID003",
         {"video-meta"}),
        ("vid_wrong_codec", "v2.1", lambda r: m.set_video_info(r, CAM, codec="av1"), "VID002", {"video-meta"}),
        ("vid_missing", "v2.1", lambda r: m.remove_video(r, 1, CAM), "LAY040", {"video-file"}),
        ("vid_corrupt_first_frame", "v2.1-bframes", lambda r: m.corrupt_frame(r, 1, CAM, "first"), "VID012",
         {"video-decode"}),
    ]
    return [Case(name, base, plant, {code}, subjects) for name, base, plant, code, subjects in rows]


# ---------------------------------------------------------------- running the tools

@dataclass
class Run:
    rc: int | None
    seconds: float
    report: object = None           # parsed JSON, or None
    stdout: str = ""
    stderr: str = ""

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stderr + self.stdout


def peer_exe(name: str) -> Path | None:
    var, default, exe = PEERS[name]
    path = Path(os.environ.get(var, default)) / "bin" / exe
    return path if path.is_file() else None


def execute(argv: list[str], cwd: Path | None = None) -> tuple[int | None, float, str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, cwd=cwd)
        return proc.returncode, time.perf_counter() - start, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        return None, time.perf_counter() - start, str(exc.stdout or ""), f"timeout after {TIMEOUT_S} s"


def parse_json(text: str):
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start = text.find("{")       # a banner line before the report
        try:
            return json.loads(text[start:]) if start >= 0 else None
        except json.JSONDecodeError:
            return None


def run_lerodoc(root: Path, deep: bool = False) -> Run:
    argv = [sys.executable, "-m", "lerodoc", "validate", str(root), "--videos", "--json"] + (["--deep"] if deep else [])
    rc, s, out, err = execute(argv, cwd=REPO)
    return Run(rc, s, parse_json(out), out, err)


def run_peer(name: str, root: Path, scratch: Path) -> Run | None:
    exe = peer_exe(name)
    if exe is None:
        return None
    if name == "robovet":
        out_json = scratch / "robovet.json"
        out_json.unlink(missing_ok=True)
        rc, s, out, err = execute([str(exe), "doctor", str(root), "--json", str(out_json)])
        report = json.loads(out_json.read_text()) if out_json.is_file() else None
        return Run(rc, s, report, out, err)
    if name == "trajlens":
        rc, s, out, err = execute([str(exe), "lint", str(root), "--json"])
    else:
        rc, s, out, err = execute([str(exe), "check", str(root), "--json"])
    return Run(rc, s, parse_json(out), out, err)


def peer_version(name: str) -> str:
    exe = peer_exe(name)
    if exe is None:
        return "not installed"
    rc, _, out, err = execute([str(exe), "--version"])
    text = (out + err).strip().splitlines()
    version = text[-1].strip() if text else "?"
    return version[len(name):].strip() if version.startswith(name + " ") else version


# ---------------------------------------------------------------- reading the reports

@dataclass(frozen=True)
class Signal:
    check: str
    severity: str
    message: str                     # digits masked

    def key(self) -> tuple[str, str, str]:
        return (self.check, self.severity, self.message)


def mask(text: str) -> str:
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", text)


def signals(name: str, report) -> tuple[list[Signal], list[str]]:
    """(findings at warning level or worse, raw messages for evidence) from a peer's JSON report."""
    found, raw = [], []
    if not isinstance(report, dict):
        return found, raw
    if name == "lerodoc":
        for f in report.get("findings", []):
            found.append(Signal(f["code"], f["severity"], mask(f["message"])))
            raw.append(f"{f['code']} {f['severity']}: {f['message']}")
    elif name == "robovet":
        for r in report.get("results", []):
            if r.get("severity") in ("WARN", "FAIL"):
                text = r.get("summary", "")
                found.append(Signal(r["check_id"], r["severity"], mask(text)))
                raw.append(f"{r['check_id']} {r['severity']}: {text}")
    elif name == "trajlens":
        for r in report.get("results", []):
            if r.get("severity") in ("WARN", "FAIL", "ERROR"):
                violations = (r.get("details") or {}).get("violations") or [r.get("message", "")]
                for v in violations:
                    found.append(Signal(r["check_id"], r["severity"], mask(str(v))))
                    raw.append(f"{r['check_id']} {r['severity']}: {v}")
    elif name == "lerobot-doctor":
        for c in report.get("checks", []):
            for m in c.get("messages", []):
                if m.get("severity") in ("WARN", "FAIL"):
                    found.append(Signal(c["name"], m["severity"], mask(m["message"])))
                    raw.append(f"{c['name']} {m['severity']}: {m['message']}")
    return found, raw


class _LerodocSubjects(dict):
    def get(self, code, default=None):
        return lerodoc_subjects(code) or default


SUBJECT_MAPS = {"lerodoc": _LerodocSubjects(), "robovet": ROBOVET, "trajlens": TRAJLENS,
                "lerobot-doctor": LEROBOT_DOCTOR}


@dataclass
class Verdict:
    outcome: str                      # yes / no / other / crash / not installed
    evidence: list[str] = field(default_factory=list)
    seconds: float = 0.0
    rc: int | None = None


def refusal(name: str, run: Run) -> str | None:
    """The message of a peer that declined to check the dataset (no traceback), else None."""
    if run.traceback:
        return None
    if run.report is None and run.rc not in (0, None):
        tail = (run.stderr or run.stdout).strip().splitlines()
        return tail[-1].strip() if tail else None
    if name == "trajlens" and isinstance(run.report, dict) and run.report.get("error_message"):
        return f"{run.report.get('error_category')}: {run.report['error_message']}"
    return None


def judge_peer(name: str, run: Run | None, clean: Run | None, subjects: set[str], files: set[str]) -> Verdict:
    if run is None:
        return Verdict("not installed")
    declined = refusal(name, run)
    if declined is not None:
        # It refused to check the dataset; that catches the defect only if it names the planted file.
        named = any(f in declined or (not re.fullmatch(r"file-\d+\.\w+", Path(f).name) and Path(f).name in declined)
                    for f in files)
        return Verdict("refused-named" if named else "refused", [f"rc={run.rc}: {declined[:220]}"], run.seconds,
                       run.rc)
    if run.report is None:
        tail = (run.stderr or run.stdout).strip().splitlines()
        return Verdict("crash", [f"rc={run.rc}: " + (tail[-1][:200] if tail else "no output")], run.seconds, run.rc)
    base = {s.key() for s in signals(name, clean.report)[0]} if clean and clean.report is not None else set()
    found, raw = signals(name, run.report)
    new = [(s, text) for s, text in zip(found, raw) if s.key() not in base]
    errors = [(s, text) for s, text in new if s.severity == "ERROR"]       # trajlens: a check raised
    warned = [(s, text) for s, text in new if s.severity != "ERROR"]
    subject_map = SUBJECT_MAPS[name]
    on_subject = [text for s, text in warned if subject_map.get(s.check, set()) & subjects]
    if on_subject:
        return Verdict("yes", dedupe(on_subject), run.seconds, run.rc)
    if run.traceback or errors:
        return Verdict("crash", dedupe([t for _, t in errors]) or ["traceback"], run.seconds, run.rc)
    if warned:
        return Verdict("other", dedupe([t for _, t in warned]), run.seconds, run.rc)
    return Verdict("no", [], run.seconds, run.rc)


def judge_lerodoc(run: Run, clean: Run | None, subjects: set[str], codes: set[str]) -> Verdict:
    """The peers' rule (judge_peer), plus whether the code lerodoc's own tests expect is there."""
    if run.report is None or "findings" not in run.report:
        tail = (run.stderr or run.stdout).strip().splitlines()
        return Verdict("crash", [f"rc={run.rc}: " + (tail[-1][:200] if tail else "no output")], run.seconds, run.rc)
    verdict = judge_peer("lerodoc", run, clean, subjects, set())
    got = {f["code"] for f in run.report["findings"]}
    if codes:
        verdict.evidence.append(f"expected {', '.join(sorted(codes))}: "
                                f"{'all reported' if codes <= got else 'missing ' + ', '.join(sorted(codes - got))}")
    return verdict


def dedupe(items: list[str], limit: int = 4) -> list[str]:
    seen: list[str] = []
    for item in items:
        item = " ".join(item.split())[:220]
        if item not in seen:
            seen.append(item)
    return seen[:limit] + ([f"... and {len(seen) - limit} more"] if len(seen) > limit else [])


# ---------------------------------------------------------------- the side-by-side

TOOLS = ("lerodoc", "lerodoc --deep", "robovet", "trajlens", "lerobot-doctor")
MARK = {"yes": "**yes**", "refused-named": "**yes** (refused)", "no": "no", "other": "other", "crash": "crash",
        "refused": "refused", "not installed": "not installed"}
CAUGHT = ("yes", "refused-named")


def build_case(work: Path, clean_roots: dict[str, Path], case: Case) -> tuple[Path, set[str], set[str]]:
    """Copy the clean base and plant the defect; return the root, the codes lerodoc must report and the
    planted files (relative to the root)."""
    root = work / "cases" / case.name
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(clean_roots[case.base], root)
    planted = case.plant(root)
    planted = planted if isinstance(planted, list) else [planted]
    codes = set(case.codes)
    if not codes:     # data planters return Planted(code=...) records
        codes = {p.code for p in planted}
    files = {p.file for p in planted if p.file}
    return root, codes, files


def side_by_side(work: Path, only: list[str] | None) -> dict:
    cases = data_cases() + media_cases()
    if only:
        cases = [c for c in cases if c.name in only]
    bases = sorted({c.base for c in cases} | {"v2.1", "v3.0"})
    clean_roots = {}
    for base in bases:
        root = work / "clean" / base
        if not (root / "meta/info.json").is_file():
            if root.exists():
                shutil.rmtree(root)
            make_dataset(root, **BASE_KWARGS[base])
        clean_roots[base] = root
    scratch = work / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    peers = [p for p in PEERS]
    clean_runs: dict[str, dict[str, Run | None]] = {}
    rows = []
    for base in bases:
        print(f"clean {base} ...", file=sys.stderr, flush=True)
        runs = {p: run_peer(p, clean_roots[base], scratch) for p in peers}
        clean_runs[base] = runs
        lero = run_lerodoc(clean_roots[base])
        deep = run_lerodoc(clean_roots[base], deep=True)
        runs["lerodoc"], runs["lerodoc --deep"] = lero, deep
        cells = {"lerodoc": clean_cell(lero.report, lero), "lerodoc --deep": clean_cell(deep.report, deep)}
        for p in peers:
            cells[p] = clean_peer_cell(p, runs[p])
        rows.append({"name": f"clean {base}", "base": base, "codes": [], "subjects": [], "cells": cells})
    for case in cases:
        print(f"{case.name} ({case.base}) ...", file=sys.stderr, flush=True)
        try:
            root, codes, files = build_case(work, clean_roots, case)
        except Exception as exc:  # a planter that fails is reported, not hidden
            rows.append({"name": case.name, "base": case.base, "codes": sorted(case.codes), "subjects": [],
                         "cells": {t: {"outcome": "plant failed", "evidence": [repr(exc)[:200]]} for t in TOOLS}})
            continue
        clean = clean_runs[case.base]
        cells = {"lerodoc": vars(judge_lerodoc(run_lerodoc(root), clean["lerodoc"], case.subjects, codes)),
                 "lerodoc --deep": vars(judge_lerodoc(run_lerodoc(root, deep=True), clean["lerodoc --deep"],
                                                      case.subjects, codes))}
        for p in peers:
            cells[p] = vars(judge_peer(p, run_peer(p, root, scratch), clean_runs[case.base][p], case.subjects,
                                        files))
        rows.append({"name": case.name, "base": case.base, "codes": sorted(codes),
                     "subjects": sorted(case.subjects), "cells": cells})
    versions = {"lerodoc": lerodoc_version(), **{p: peer_version(p) for p in peers}}
    import platform
    return {"date": date.today().isoformat(), "versions": versions, "rows": rows,
            "device": f"{platform.machine()} CPU x{os.cpu_count()}, {platform.platform()}, Python "
                      f"{platform.python_version()}", "command": " ".join(["python3 -m bench.peers", *sys.argv[1:]])}


def clean_cell(report, run: Run) -> dict:
    if not isinstance(report, dict) or "findings" not in report:
        return {"outcome": "crash", "evidence": [(run.stderr or run.stdout)[-200:]], "rc": run.rc}
    f = report["findings"]
    errors = sum(x["severity"] == "error" for x in f)
    return {"outcome": f"{errors} err / {len(f) - errors} warn", "rc": run.rc,
            "evidence": dedupe([f"{x['code']} {x['severity']}: {x['message']}" for x in f]), "seconds": run.seconds}


def clean_peer_cell(name: str, run: Run | None) -> dict:
    if run is None:
        return {"outcome": "not installed", "evidence": []}
    if run.report is None:
        return {"outcome": "crash", "evidence": [(run.stderr or run.stdout)[-200:]], "rc": run.rc}
    found, raw = signals(name, run.report)
    fails = sum(s.severity in ("FAIL", "ERROR") for s in found)
    return {"outcome": f"{fails} fail / {len(found) - fails} warn", "rc": run.rc, "evidence": dedupe(raw),
            "seconds": run.seconds}


def lerodoc_version() -> str:
    from lerodoc import __version__
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    return f"{__version__} (git {proc.stdout.strip() or '?'})"


def markdown(result: dict) -> str:
    head = "| defect | base | lerodoc code | " + " | ".join(TOOLS) + " |"
    lines = [head, "|" + "---|" * (3 + len(TOOLS))]
    for row in result["rows"]:
        cells = [MARK.get(row["cells"][t]["outcome"], row["cells"][t]["outcome"]) +
                 (f" (rc {row['cells'][t]['rc']})" if row["name"].startswith("clean") and
                  row["cells"][t].get("rc") not in (None,) else "") for t in TOOLS]
        lines.append(f"| {row['name']} | {row['base']} | {', '.join(row['codes'])} | " + " | ".join(cells) + " |")
    totals = []
    defects = [r for r in result["rows"] if not r["name"].startswith("clean")]
    for t in TOOLS:
        outcomes = [r["cells"][t]["outcome"] for r in defects]
        totals.append(f"{sum(o in CAUGHT for o in outcomes)}/{len(defects)}" +
                      (f", {outcomes.count('crash')} crash" if outcomes.count("crash") else ""))
    lines.append("| **caught** | | | " + " | ".join(totals) + " |")
    return "\n".join(lines)


def evidence_markdown(result: dict) -> str:
    out = []
    for row in result["rows"]:
        out.append(f"- **{row['name']}** ({row['base']})")
        for t in TOOLS:
            cell = row["cells"][t]
            ev = "; ".join(cell.get("evidence") or []) or "-"
            out.append(f"  - {t}: {cell['outcome']} — {ev}")
    return "\n".join(out)


# ---------------------------------------------------------------- defects planted by a peer

# `robovet demo DIR [--v3]` writes a small dataset with the defects its docstring lists (robovet/fixtures.py);
# `--clean` the same without them. Which of those lerodoc reports: (defect, lerodoc codes that name it,
# episode the finding must name, or None). Defects robovet only scores (idle, jerky, duplicate episodes)
# are not validation defects and are left out.
ROBOVET_DEMO = {
    "v2.1": [
        ("episode 0: timestamps start at 0.5 s", {"TS001"}, 0),
        ("episode 1: wrist video 5 frames shorter than the data", {"VID007"}, 1),
        ("episode 2: +-4 ms timestamp jitter", {"TS005"}, 2),
        ("episode 5: corrupted stored stats", {"STA040"}, 5),
        ("episode 6: metadata length off by +12", {"IDX005"}, 6),
        ("info.json total_frames stale by -37", {"IDX030"}, None),
        ("wrist camera encoded as mpeg4 (robovet: Hub viewer cannot show it)", {"VID002"}, None),
    ],
    "v3.0": [
        ("episode 1: stats/action/mean corrupted", {"STA040"}, 1),
        ("episode 1: cam_top from_timestamp +4 ms off the frame grid", {"VID010"}, 1),
        ("last episode: cam_top window 4 frames short in the shared file", {"VID006", "VID007"}, 3),
        ("stats.json: q01/q99 swapped for observation.state", {"STA022"}, None),
    ],
}


def robovet_demo(work: Path) -> dict | None:
    exe = peer_exe("robovet")
    if exe is None:
        return None
    out = {"rows": [], "summary": []}
    scratch = work / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    for version, defects in ROBOVET_DEMO.items():
        roots = {}
        for kind in ("clean", "defects"):
            root = work / "robovet-demo" / f"{version}-{kind}"
            if root.exists():
                shutil.rmtree(root)
            argv = [str(exe), "demo", str(root)] + (["--v3"] if version == "v3.0" else []) + \
                (["--clean"] if kind == "clean" else [])
            rc, _, o, e = execute(argv)
            if rc != 0:
                raise RuntimeError(f"robovet demo failed: {(o + e)[-300:]}")
            roots[kind] = root
            lero = run_lerodoc(root)
            cells = {"lerodoc": clean_cell(lero.report, lero)}
            for p in PEERS:
                cells[p] = clean_peer_cell(p, run_peer(p, root, scratch))
            out["summary"].append({"name": f"robovet demo {version} {kind}", "cells": cells})
            if kind == "defects":
                findings = (lero.report or {}).get("findings", [])
                for what, codes, episode in defects:
                    hits = [f"{f['code']} {f['severity']}: {f['message']}" for f in findings
                            if f["code"] in codes and (episode is None or f["episode"] == episode)]
                    out["rows"].append({"version": version, "defect": what, "codes": sorted(codes),
                                        "caught": bool(hits), "evidence": dedupe(hits, 2)})
    return out


def demo_markdown(demo: dict | None) -> str:
    if demo is None:
        return "robovet is not installed: its demo datasets were not built."
    lines = ["| robovet demo | defect robovet planted | lerodoc codes looked for | lerodoc reports it |",
             "|---|---|---|---|"]
    for r in demo["rows"]:
        lines.append(f"| {r['version']} | {r['defect']} | {', '.join(r['codes'])} | "
                     f"{'**yes**' if r['caught'] else 'no'} |")
    lines += ["", "| dataset | " + " | ".join(("lerodoc",) + tuple(PEERS)) + " |",
              "|---|" + "---|" * (1 + len(PEERS))]
    for row in demo["summary"]:
        cells = [f"{row['cells'][t]['outcome']} (rc {row['cells'][t].get('rc')})" for t in ("lerodoc",) + tuple(PEERS)]
        lines.append(f"| {row['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def demo_evidence(demo: dict | None) -> str:
    if demo is None:
        return ""
    out = []
    for r in demo["rows"]:
        out.append(f"- {r['version']} {r['defect']}: " + ("; ".join(r["evidence"]) or "-"))
    for row in demo["summary"]:
        out.append(f"- **{row['name']}**")
        for t, cell in row["cells"].items():
            out.append(f"  - {t}: {cell['outcome']} — " + ("; ".join(cell.get("evidence") or []) or "-"))
    return "\n".join(out)


# ---------------------------------------------------------------- the writer zoo

def zoo_verdict(name: str, run: Run | None) -> dict:
    """'fails' when the tool says the dataset is broken (lerodoc: an error finding; a peer: a FAIL, a check
    that raised, a refusal or a crash), else 'passes'; with the failing findings as evidence."""
    if run is None:
        return {"outcome": "not installed", "evidence": []}
    if run.report is None or (name == "lerodoc" and "findings" not in run.report):
        tail = (run.stderr or run.stdout).strip().splitlines()
        return {"outcome": "fails", "evidence": [f"no report, rc={run.rc}: " + (tail[-1][:200] if tail else "")],
                "rc": run.rc}
    declined = refusal(name, run) if name != "lerodoc" else None
    if declined:
        return {"outcome": "fails", "evidence": [f"refused: {declined[:200]}"], "rc": run.rc}
    found, raw = signals(name, run.report)
    bad = [text for s, text in zip(found, raw) if s.severity in ("error", "FAIL", "ERROR")]
    return {"outcome": "fails" if bad else "passes", "evidence": dedupe(bad, 3), "rc": run.rc}


def writer_zoo(work: Path) -> list[dict]:
    from tests.zoo import members
    scratch = work / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    rows = []
    for m in members():
        print(f"zoo {m.name} ...", file=sys.stderr, flush=True)
        cells = {"lerodoc": zoo_verdict("lerodoc", run_lerodoc(m.root))}
        for p in PEERS:
            cells[p] = zoo_verdict(p, run_peer(p, m.root, scratch))
        rows.append({"name": m.name, "writer": m.writer, "lerobot_loads": m.lerobot_loads,
                     "refusal": m.refusal, "cells": cells})
    return rows


def zoo_markdown(rows: list[dict]) -> str:
    tools = ("lerodoc",) + tuple(PEERS)
    lines = ["| zoo member | LeRobotDataset 0.6.1 | " + " | ".join(tools) + " |", "|---|---|" + "---|" * len(tools)]
    for r in rows:
        cells = [r["cells"][t]["outcome"] for t in tools]
        lines.append(f"| {r['name']} | {'loads' if r['lerobot_loads'] else 'refuses'} | " + " | ".join(cells) + " |")
    loads = [r for r in rows if r["lerobot_loads"]]
    refused = [r for r in rows if not r["lerobot_loads"]]
    for label, group in ((f"**false alarms** (fails, of {len(loads)} that load)", loads),
                         (f"**caught** (fails, of {len(refused)} refused)", refused)):
        counts = [str(sum(r["cells"][t]["outcome"] == "fails" for r in group)) for t in tools]
        lines.append(f"| {label} | | " + " | ".join(counts) + " |")
    return "\n".join(lines)


def zoo_evidence(rows: list[dict]) -> str:
    out = []
    for r in rows:
        failing = {t: c for t, c in r["cells"].items() if c["outcome"] == "fails"}
        if failing or not r["lerobot_loads"]:
            out.append(f"- **{r['name']}** ({r['writer']}; lerobot 0.6.1: "
                       f"{'loads' if r['lerobot_loads'] else 'refuses: ' + (r['refusal'] or '')[:160]})")
            for t, c in failing.items():
                out.append(f"  - {t}: " + ("; ".join(c["evidence"]) or "-"))
    return "\n".join(out)


# ---------------------------------------------------------------- speed

def speed_dataset(work: Path, episodes: int, cameras: int, v30: bool) -> tuple[Path, str]:
    """The tiled benchmark dataset: bench/validate.py's builder where it exists, else tile_v21 here."""
    try:
        from bench.validate import build
        return build(work, episodes, cameras, v30=v30), "bench.validate.build"
    except ImportError:
        from bench.dataset import seed_dataset, tile_v21
        root = work / f"v21_{episodes}x{cameras}"
        if not (root / "meta/info.json").is_file():
            tile_v21(seed_dataset(work), root, episodes, cameras)
        if not v30:
            return root, "bench.dataset.tile_v21"
        out = work / f"v30_{episodes}x{cameras}"
        if not (out / "meta/info.json").is_file():
            from lerodoc.ops.convert import convert
            convert(root, out, workers=2)
        return out, "bench.dataset.tile_v21 + lerodoc convert"


def cpu_pressure() -> str | None:
    """The kernel's CPU pressure line (share of time runnable tasks waited for a CPU): other load on the
    machine shows here, and makes wall clock longer than CPU time."""
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None


def timed(argv: list[str]) -> tuple[int | None, float, float, str]:
    """(exit code, wall s, CPU s of the child, stdout) of one run in a fresh process."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc, wall, out, _ = execute(argv, cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rc, wall, cpu, out


def speed(work: Path, episodes: int, cameras: int, rounds: int, v30: bool) -> dict:
    exe = peer_exe("robovet")
    results = []
    for version in ("v2.1", "v3.0") if v30 else ("v2.1",):
        root, builder = speed_dataset(work, episodes, cameras, version == "v3.0")
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        robo_json = work / "robovet-speed.json"
        tools = {"lerodoc": [sys.executable, "-m", "lerodoc", "validate", str(root), "--videos", "--json"]}
        if exe:
            tools["robovet"] = [str(exe), "doctor", str(root), "--json", str(robo_json)]
        wall: dict[str, list[float]] = {n: [] for n in tools}
        cpu: dict[str, list[float]] = {n: [] for n in tools}
        summary: dict[str, str] = {}
        for k in range(rounds + 1):      # round 0 warms the page cache and is not counted
            for name, argv in tools.items():
                rc, w, c, out = timed(argv)
                print(f"  {version} {name} round {k}: {w:.2f} s wall, {c:.2f} s CPU (rc {rc})", file=sys.stderr,
                      flush=True)
                if k:
                    wall[name].append(w)
                    cpu[name].append(c)
                if name == "lerodoc":
                    r = parse_json(out) or {}
                    summary[name] = f"rc {rc}, {r.get('errors')} errors, {r.get('warnings')} warnings"
                else:
                    r = json.loads(robo_json.read_text()) if robo_json.is_file() else {}
                    summary[name] = f"rc {rc}, {r.get('counts')}"
        med = {n: statistics.median(v) for n, v in wall.items()}
        results.append({"version": version, "dataset": str(root), "builder": builder, "bytes": size,
                        "wall": wall, "cpu": cpu, "median": med,
                        "median_cpu": {n: statistics.median(v) for n, v in cpu.items()}, "summary": summary,
                        "ratio": med["robovet"] / med["lerodoc"] if "robovet" in med else None,
                        "cpu_pressure_after": cpu_pressure()})
    return {"episodes": episodes, "cameras": cameras, "rounds": rounds, "cpus": os.cpu_count(),
            "date": date.today().isoformat(), "versions": {"lerodoc": lerodoc_version(),
                                                           "robovet": peer_version("robovet")},
            "results": results}


def speed_markdown(s: dict) -> str:
    cmds = {"lerodoc": "python -m lerodoc validate ROOT --videos --json",
            "robovet": "robovet doctor ROOT --json OUT.json"}
    lines = [f"{s['episodes']} episodes x {s['cameras']} cameras; {s['cpus']} CPUs; {s['rounds']} timed rounds "
             f"after one warm-up round, tools alternating, each run a fresh process (wall clock and CPU time of "
             f"the child, imports included); {', '.join(f'{k} {v}' for k, v in s['versions'].items())}.", "",
             "| dataset | tool | command | median wall s | wall s per run | median CPU s | result |",
             "|---|---|---|---|---|---|---|"]
    for r in s["results"]:
        for name in r["median"]:
            runs = ", ".join(f"{t:.2f}" for t in r["wall"][name])
            lines.append(f"| {r['version']}, {r['bytes'] / 1e6:.0f} MB ({r['builder']}) | {name} | `{cmds[name]}` | "
                         f"{r['median'][name]:.2f} | {runs} | {r['median_cpu'][name]:.2f} | {r['summary'][name]} |")
    lines.append("")
    for r in s["results"]:
        if r.get("cpu_pressure_after"):
            lines.append(f"- {r['version']}: /proc/pressure/cpu after the runs: `{r['cpu_pressure_after']}`")
        if r["ratio"]:
            cpu = r["median_cpu"]["robovet"] / r["median_cpu"]["lerodoc"]
            lines.append(f"- {r['version']}: robovet / lerodoc = **{r['ratio']:.2f}x** median wall clock, "
                         f"{cpu:.2f}x median CPU time.")
    return "\n".join(lines)


# ---------------------------------------------------------------- docs

def catalogue_markdown() -> str:
    proc = subprocess.run([sys.executable, "-m", "lerodoc", "validate", "--list-checks", "--json"],
                          capture_output=True, text=True, cwd=REPO, check=True)
    rows = json.loads(proc.stdout)["checks"]
    lines = ["| code | family | severity | meaning | fix | repaired by `lerodoc repair` |", "|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["code"], r["family"], r["severity"], r["meaning"], r["fix"] or "", "yes" if r["repair"] else "no"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def replace_between(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text:
        return text
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=None, help="where datasets are built (kept)")
    parser.add_argument("--only", nargs="*", help="run only these defects")
    parser.add_argument("--markdown", type=Path, help="also write the table and the evidence here")
    parser.add_argument("--json", type=Path, help="also write the raw verdicts here")
    parser.add_argument("--update-docs", type=Path,
                        help="rewrite the generated sections (peers, catalogue, speed) of this markdown file")
    parser.add_argument("--speed", action="store_true", help="time validate --videos against robovet instead")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--cameras", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--v30", action="store_true", help="--speed: also time the dataset converted to v3.0")
    parser.add_argument("--no-install", action="store_true", help="do not run scripts/peer-venvs.sh first")
    parser.add_argument("--no-zoo", action="store_true", help="skip the writer zoo section")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lerodoc-bench-peers-"))
    work.mkdir(parents=True, exist_ok=True)
    if not args.no_install and not all(peer_exe(p) for p in PEERS):
        proc = subprocess.run(["bash", str(VENV_SCRIPT)], text=True, stdout=subprocess.PIPE)
        if proc.returncode:
            print(f"{VENV_SCRIPT.name} failed (exit {proc.returncode}); peers without a venv show as not installed",
                  file=sys.stderr)
    if args.speed:
        s = speed(work, args.episodes, args.cameras, args.rounds, args.v30)
        text = speed_markdown(s)
        print(text)
        if args.json:
            args.json.write_text(json.dumps(s, indent=2))
        if args.update_docs:
            doc = args.update_docs.read_text()
            body = (f"Run {s['date']}: `python -m bench.peers --work DIR --speed --episodes {s['episodes']} "
                    f"--cameras {s['cameras']} --rounds {s['rounds']}{' --v30' if args.v30 else ''} "
                    f"--update-docs docs/checks.md`\n\n{text}")
            args.update_docs.write_text(replace_between(doc, "speed", body))
        return
    result = side_by_side(work, args.only)
    result["robovet_demo"] = None if args.only else robovet_demo(work)
    result["zoo"] = None if args.only or args.no_zoo else writer_zoo(work)
    table = markdown(result)
    print(table)
    if not args.only:
        print()
        print(demo_markdown(result["robovet_demo"]))
    if result["zoo"] is not None:
        print()
        print(zoo_markdown(result["zoo"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.markdown:
        zoo = "" if result["zoo"] is None else zoo_markdown(result["zoo"]) + "\n\n" + zoo_evidence(result["zoo"])
        args.markdown.write_text(table + "\n\n" + evidence_markdown(result) + "\n\n" +
                                 demo_markdown(result["robovet_demo"]) + "\n\n" +
                                 demo_evidence(result["robovet_demo"]) + "\n\n" + zoo + "\n")
    if args.update_docs:
        doc = args.update_docs.read_text()
        versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
        body = (f"Run {result['date']} with {versions}: `python -m bench.peers --work DIR --update-docs "
                f"docs/checks.md`\n\n{table}")
        doc = replace_between(doc, "peers", body)
        doc = replace_between(doc, "evidence", evidence_markdown(result))
        if not args.only:
            doc = replace_between(doc, "demo", demo_markdown(result["robovet_demo"]))
            doc = replace_between(doc, "demo-evidence", demo_evidence(result["robovet_demo"]))
        if result["zoo"] is not None:
            doc = replace_between(doc, "zoo", zoo_markdown(result["zoo"]))
            doc = replace_between(doc, "zoo-evidence", zoo_evidence(result["zoo"]))
        doc = replace_between(doc, "catalogue", catalogue_markdown())
        args.update_docs.write_text(doc)


if __name__ == "__main__":
    main()
