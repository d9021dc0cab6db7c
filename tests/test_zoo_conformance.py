"""Differential conformance over the writer zoo (tests/zoo): datasets written by lerobot's own releases and by
exporter-style tools.

For every member:
- where lerobot 0.6.1 loads it, `lerodoc info` and `validate --videos` read it with no error-level finding;
- where lerobot refuses it, `validate` names the reason with a code;
- every writing command (convert both ways, merge, delete, split, flatten, select, quantiles -o, repair -o) writes a
  dataset that LeRobotDataset 0.6.1 loads with every frame aligned and every value as recorded (v2.1 outputs
  are converted back to v3.0 by lerodoc first, since 0.6.1 loads v3.0 only).

The lerobot loads of all outputs run in one interpreter (check_many_with_lerobot), so the whole module costs
one lerobot start-up plus the decoding.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import run_cli, run_here
from tests.lerobot_oracle import check_many_with_lerobot
from tests.zoo import Member, members

pytestmark = pytest.mark.lerobot

MEMBERS = members()
IDS = [m.name for m in MEMBERS]
QUANTILE_KEYS = ["min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"]


def test_the_zoo_is_complete():
    """The zoo holds every release's writers and the exporter variants; a missing one fails, never skips."""
    writers = " | ".join(m.writer for m in MEMBERS)
    for release in ("0.3.3", "0.4.0", "0.4.4", "0.6.1"):
        assert f"lerobot {release}" in writers, f"no member written by lerobot {release}"
    assert {"v2.1", "v3.0"} <= {m.version for m in MEMBERS}
    assert sum(m.lerobot_loads for m in MEMBERS) >= 10


def _json(proc) -> dict:
    return json.loads(proc.stdout)


def _no_traceback(proc) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("member", MEMBERS, ids=IDS)
def test_info_and_validate_read_every_member(member: Member):
    info = run_here("info", member.root, "--json")
    _no_traceback(info)
    validate = run_here("validate", member.root, "--videos", "--json")
    _no_traceback(validate)
    report = _json(validate)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    if member.lerobot_loads:
        assert info.returncode == 0, info.stderr
        assert _json(info)["episodes"] == len(member.expect["episodes"])
        assert errors == [], f"{member.name} ({member.writer}) loads in lerobot, yet: " + \
            "; ".join(f"{f['code']} {f['message']}" for f in errors)
        assert validate.returncode == 0
    else:
        # lerobot refuses it: validate must say why, with a code
        assert validate.returncode == 1 and errors, f"{member.name}: lerobot refuses it ({member.refusal}), " \
                                                    "validate finds nothing"


def _expect(member: Member, repeat: int = 1, stats_keys: dict | None = None, keep=None) -> dict:
    """The member's expectation for an output holding its episodes (those at `keep` positions) `repeat`
    times, in order."""
    expect = copy.deepcopy(member.expect)
    expect.pop("stats_keys", None)
    for key in ("total_frames", "total_episodes"):
        expect.pop(key, None)
    episodes = expect["episodes"] if keep is None else [expect["episodes"][i] for i in keep]
    expect["episodes"] = episodes * repeat
    if stats_keys:
        expect["stats_keys"] = stats_keys
    return expect


def _writes(member: Member, work: Path) -> list[tuple[str, Path, dict]]:
    """Run every writing command on `member` under `work`: (label, v3.0 root to load, expectation).

    On a member lerobot loads, every command must succeed (flatten's no-op, no list column, writes nothing). On one
    it refuses, a command may also refuse (exit 1, 3 or 4, leaving no output); what it does write must load.
    """
    src = member.root
    to_load: list[tuple[str, Path, dict]] = []
    outputs: list[tuple[str, Path, dict]] = []
    lenient = () if member.lerobot_loads else (1, 3, 4)

    def cli(label: str, *args, ok_codes=(0,)) -> bool:
        proc = run_here(*args)
        _no_traceback(proc)
        assert proc.returncode in (*ok_codes, *lenient), \
            f"{member.name}: lerodoc {label} exited {proc.returncode}: {proc.stderr}"
        if proc.returncode not in (0, 1):
            out = Path(args[args.index("-o") + 1])
            assert not out.exists() and not list(out.parent.glob(f".{out.name}*")), f"{label} left {out}"
        return proc.returncode == 0

    def as_v30(label: str, root: Path, expect: dict) -> None:
        version = json.loads((root / "meta/info.json").read_text())["codebase_version"]
        if version != "v3.0":
            back = root.with_name(root.name + "_v30")
            cli(f"{label} then convert", "convert", root, "-o", back, "--to", "v3.0")
            root = back
        outputs.append((label, root, expect))

    if member.version == "v3.0":
        if cli("convert --to v2.1", "convert", src, "-o", work / "v21", "--to", "v2.1"):
            as_v30("convert v3.0 -> v2.1 -> v3.0", work / "v21", _expect(member))
    elif cli("convert --to v3.0", "convert", src, "-o", work / "v30", "--to", "v3.0"):
        as_v30("convert -> v3.0", work / "v30", _expect(member))
    if cli("merge", "merge", src, src, "-o", work / "merged"):
        as_v30("merge with itself", work / "merged", _expect(member, repeat=2))
    n = len(member.expect["episodes"])
    if n >= 2:
        if cli("delete", "delete", src, "-o", work / "deleted", "--episodes", "0"):
            as_v30("delete episode 0", work / "deleted", _expect(member, keep=range(1, n)))
        if cli("split", "split", src, "-o", work / "split", "--episodes", "a:0", "--episodes", f"b:1-{n - 1}"):
            as_v30("split part a", work / "split/a", _expect(member, keep=[0]))
            as_v30("split part b", work / "split/b", _expect(member, keep=range(1, n)))
    if cli("flatten", "flatten", src, "-o", work / "flat") and (work / "flat").exists():   # no list column: a no-op
        as_v30("flatten", work / "flat", _expect(member))
    features = json.loads((src / "meta/info.json").read_text())["features"]
    if "observation.state" in features and "action" in features:
        if cli("select", "select", src, "-o", work / "selected", "--state", "observation.state", "--action",
               "action"):
            as_v30("select", work / "selected", _expect(member))
    numeric = [k for k in ("observation.state", "action") if k in features]
    if cli("quantiles -o", "quantiles", src, "-o", work / "quantiles"):
        as_v30("quantiles -o", work / "quantiles", _expect(member, stats_keys={k: QUANTILE_KEYS for k in numeric}))
    if cli("repair -o", "repair", src, "-o", work / "repaired", ok_codes=(0, 1) if member.lerobot_loads else (0,)):
        as_v30("repair -o", work / "repaired", _expect(member))
    to_load += outputs
    return to_load


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[str, list[tuple[str, dict]]]:
    """Every writing command on every loadable member, then all outputs loaded by lerobot in one go."""
    jobs, labels = [], []
    for member in MEMBERS:
        work = tmp_path_factory.mktemp(member.name)
        try:
            for label, root, expect in _writes(member, work):
                jobs.append({"root": str(root), "expect": expect, "backend": "pyav"})
                labels.append((member.name, label))
        except AssertionError as exc:   # reported per member below
            labels.append((member.name, f"FAILED: {exc}"))
    reports = check_many_with_lerobot(jobs) if jobs else []
    out: dict[str, list[tuple[str, dict]]] = {}
    reports_iter = iter(reports)
    for name, label in labels:
        out.setdefault(name, []).append((label, {"ok": False, "problems": [label]} if label.startswith("FAILED")
                                         else next(reports_iter)))
    return out


@pytest.mark.parametrize("member", MEMBERS, ids=IDS)
def test_every_writing_command_output_loads_aligned_in_lerobot(member: Member, loaded):
    results = loaded.get(member.name, [])
    written = {label.split()[0] for label, _ in results}
    # lerobot refuses the list<1> and 1/1000 time base members; convert, merge and repair still fix them
    wanted = {"convert", "merge", "repair", "quantiles", "select", "delete", "split"} if member.lerobot_loads else \
        {"convert", "merge", "repair"}
    assert wanted <= written, f"{member.name}: only {[label for label, _ in results]} were written"
    bad = [f"{label}: {'; '.join(report['problems'])}" for label, report in results if not report["ok"]]
    assert bad == [], f"{member.name} ({member.writer}):\n" + "\n".join(bad)
    for label, report in results:
        assert report["frames_checked"] > 0 and report["misaligned"] == 0, label


def test_cross_release_merge_loads_in_lerobot(tmp_path):
    """The lerobot recordings of every release, merged into one v3.0, load aligned."""
    recorded = [m for m in MEMBERS if m.lerobot_loads and " record (create/add_frame/save_episode, videos)" in m.writer]
    assert len({m.writer for m in recorded}) >= 3, [m.writer for m in recorded]
    proc = run_cli("merge", *[m.root for m in recorded], "-o", tmp_path / "all", check=False)
    _no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    expect = {"fps": recorded[0].expect["fps"], "episodes": [e for m in recorded for e in m.expect["episodes"]]}
    [report] = check_many_with_lerobot([{"root": str(tmp_path / "all"), "expect": expect}])
    assert report["ok"], report["problems"]
    shutil.rmtree(tmp_path / "all")
