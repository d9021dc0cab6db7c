"""Salvage ends in a dataset (issue 35, item 2): a partial download whose tables are intact, with every file of a
camera missing, is never a dead end between repair and features.

repair's refusal names one command for that very dataset, and that command, typed as printed, writes a dataset
that validates clean and that lerobot 0.6.1's LeRobotDataset loads with its frames aligned.
"""

from __future__ import annotations

import json
import shlex
import shutil

import pytest

from lerodoc.errors import ExitCode
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_episodes, run_cli
from tests.lerobot_oracle import check_many_with_lerobot, summarize

TOP, WRIST = "observation.images.top", "observation.images.wrist"
SPEC = dict(episodes=3, lengths=5, height=32, width=48, cameras=(TOP, WRIST))


def _partial(tmp_path, version: str, also_lost: bool):
    """A dataset whose wrist camera lost every file (and, with `also_lost`, a top video too: episode 1's in v2.1,
    episode 2's file in v3.0, which holds two episodes a file)."""
    fixture = make_dataset(tmp_path / f"partial-{version}", version=version, **SPEC)
    root = fixture.root
    shutil.rmtree(root / ("videos/" + WRIST if version == "v3.0" else f"videos/chunk-000/{WRIST}"))
    if also_lost:
        (root / (f"videos/{TOP}/chunk-000/file-001.mp4" if version == "v3.0"
                 else f"videos/chunk-000/{TOP}/episode_000001.mp4")).unlink()
    return fixture


def _hinted(root) -> list[str]:
    """The command repair's refusal names, as printed, with OUT given."""
    proc = run_cli("repair", root, "-o", root.parent / "refused", "--json", check=False)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    hint = json.loads(proc.stdout)["error"]["hint"]
    command = hint.split(" removes ")[0].split(" drops ")[0]
    assert command.startswith("lerodoc "), hint
    return shlex.split(command.replace(" OUT", f" {root.parent / 'salvaged'}"))[1:]


CASES = [("v3.0", False), ("v3.0", True), ("v2.1", False), ("v2.1", True)]
LOST = {("v3.0", True): 2, ("v2.1", True): 1}   # the episode whose top video went too


@pytest.fixture(scope="module")
def salvaged(tmp_path_factory):
    out = {}
    for version, also_lost in CASES:
        tmp = tmp_path_factory.mktemp(f"salvage-{version}-{also_lost}")
        fixture = _partial(tmp, version, also_lost)
        args = _hinted(fixture.root)
        proc = run_cli(*args, check=False)
        out[(version, also_lost)] = (fixture, args, proc, tmp / "salvaged")
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"{v}{'-and-an-episode' if a else ''}" for v, a in CASES])
def test_the_hinted_command_writes_a_clean_dataset(salvaged, case):
    fixture, args, proc, out = salvaged[case]
    assert args[0] == ("repair" if case[1] else "features"), args
    if not case[1]:
        assert args.count("--drop") == 1 and WRIST in args   # every gone camera in one command
    assert proc.returncode == 0, proc.stderr
    report = json.loads(run_cli("validate", out, "--json", check=False).stdout)
    assert report["errors"] == 0, report["findings"]
    info = json.loads((out / "meta/info.json").read_text())
    assert WRIST not in info["features"] and TOP in info["features"]
    assert info["total_episodes"] == (2 if case[1] else 3)


@pytest.mark.lerobot
def test_every_salvaged_dataset_loads_in_lerobot(salvaged):
    """The v3.0 outputs (lerobot 0.6.1 reads v3.0 only; the v2.1 ones convert like any v2.1 dataset)."""
    jobs = []
    for (version, also_lost), (fixture, _, _, out) in salvaged.items():
        if version != "v3.0":
            continue
        kept = [e for e in range(3) if e != LOST.get((version, also_lost))]
        episodes = expect_episodes(fixture, kept)
        for ep in episodes:
            ep["identity"]["cameras"] = {TOP: 0}
        jobs.append({"root": out, "expect": {"fps": fixture.spec.fps, "video_keys": [TOP], "episodes": episodes},
                     "frames": "all"})
    for report in check_many_with_lerobot(jobs):
        assert report["ok"], summarize(report)


def test_repair_drop_broken_drops_a_camera_whose_files_are_all_gone(tmp_path):
    fixture = _partial(tmp_path, "v3.0", also_lost=False)
    proc = run_cli("repair", fixture.root, "-o", tmp_path / "out", "--drop-broken", "--json")
    changes = json.loads(proc.stdout)["changes"]
    assert any(f"camera {WRIST} dropped" in c for c in changes), changes
    assert WRIST not in json.loads((tmp_path / "out/meta/info.json").read_text())["features"]
