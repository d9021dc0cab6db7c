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
