"""The writer zoo (tests/zoo): its members are in place, and lerobot 0.6.1 still loads those it loaded."""

from __future__ import annotations

import json

import pytest

from tests.lerobot_oracle import check_many_with_lerobot, summarize
from tests.zoo import members

MEMBERS = members()
LOADING = [m for m in MEMBERS if m.lerobot_loads and m.version == "v3.0"]   # v2.x: judged after lerobot's converter


def test_zoo_is_there():
    assert len(MEMBERS) >= 10, "tests/zoo/members is missing: run `python3 -m tests.zoo.build`"
    assert LOADING, "no member loads in lerobot 0.6.1"


@pytest.mark.parametrize("member", MEMBERS, ids=str)
def test_member_metadata(member):
    info = json.loads((member.root / "meta/info.json").read_text())
    assert info["codebase_version"] == member.version
    assert member.version in ("v2.0", "v2.1", "v3.0")
    assert (member.root / "data").is_dir()
    episodes = member.expect["episodes"]
    assert episodes and info["total_episodes"] == len(episodes)
    assert info["total_frames"] == sum(ep["length"] for ep in episodes)
    assert member.writer
    assert member.lerobot_loads or member.refusal, "a member lerobot refuses names the reason"


@pytest.fixture(scope="module")
def lerobot_reports():
    """One lerobot 0.6.1 interpreter checks every member that loaded when the zoo was built."""
    reports = check_many_with_lerobot([{"root": m.root, "expect": m.expect} for m in LOADING])
    return dict(zip((m.name for m in LOADING), reports))


@pytest.mark.lerobot
@pytest.mark.parametrize("member", LOADING, ids=str)
def test_member_loads_in_lerobot(member, lerobot_reports):
    report = lerobot_reports[member.name]
    assert report["ok"], summarize(report)
    assert report["frames_checked"] == sum(ep["length"] for ep in member.expect["episodes"])


# ---------------------------------------------------------------- the members lerobot refuses, asked again

REFUSED = [m for m in MEMBERS if not m.lerobot_loads]
REFUSAL = {   # member -> (what lerobot 0.6.1 says now, the error code validate must give)
    "export-v21-list1": ("load failed: DatasetGenerationError", "LAY033"),
    "export-v30-list1": ("load failed: DatasetGenerationError", "LAY033"),
    "export-v21-timebase-1000": ("FrameTimestampError", "VID005"),
    "export-v30-timebase-1000": ("FrameTimestampError", "VID005"),
}


def test_every_refused_member_has_its_expected_refusal():
    assert sorted(m.name for m in REFUSED) == sorted(REFUSAL)


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> dict[str, str]:
    """What lerobot 0.6.1 says about each refused member now (not the label frozen at build time): a v3.0
    member loaded as it is, a v2.x member converted by lerobot's own converter first (as tests/zoo/build.py
    judged it), all loads in one interpreter."""
    from tests.lerobot_oracle import convert_with_lerobot
    work, jobs, failed = tmp_path_factory.mktemp("refused"), [], {}
    for member in REFUSED:
        root = member.root
        if member.version != "v3.0":
            try:
                root = convert_with_lerobot(member.root, work / member.name, repo_id=f"zoo/{member.name}").root
            except RuntimeError as exc:
                failed[member.name] = f"lerobot's converter failed: {exc}"
        jobs.append({"root": root, "expect": {k: v for k, v in member.expect.items() if k != "stats_keys"}})
    reports = check_many_with_lerobot(jobs)
    out = {}
    for member, report in zip(REFUSED, reports):
        assert not report["ok"] or member.name in failed, f"{member.name}: lerobot 0.6.1 loads it now"
        out[member.name] = failed.get(member.name) or "; ".join(
            report["problems"] + [json.dumps(x) for x in report.get("exceptions", [])[:2]])
    return out


@pytest.mark.lerobot
@pytest.mark.parametrize("member", REFUSED, ids=str)
def test_refused_member_is_refused_by_lerobot_and_coded_by_validate(member, refusals):
    from lerodoc.ops.validate import validate
    said, code = REFUSAL[member.name]
    assert said in refusals[member.name], refusals[member.name]
    assert code in {f.code for f in validate(member.root, videos=True).findings if f.severity == "error"}
