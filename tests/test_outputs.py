"""No -o destroys data: every writing command refuses an -o that is, holds or is inside one of its inputs (even
with --force), refuses an existing file or folder without --force, and leaves nothing behind when it refuses
(staging.check_output is the one rule; this table runs it through every command line)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli

# command -> its arguments after DATASET and before -o (the one writing step it takes)
WRITERS = {
    "convert": ["--to", "v2.1"],
    "delete": ["--episodes", "0"],
    "split": ["--into", "a=0.5,b=0.5"],
    "tasks": ["--set", "pick up the cube=grab it"],
    "features": ["--rename", "action=action.joints"],
    "encode": ["--reencode", "--gop", "4"],
    "flatten": [],
    "select": ["--state", "observation.state[0:2]"],
    "quantiles": [],
    "repair": [],
    "report": [],
}
REFUSED = ("is the input", "is inside the input", "holds the input", "already exists", "is a folder")


def tree(root: Path) -> dict[str, str]:
    """Every file and folder under `root` (hidden ones included: a leftover temporary shows here) -> digest."""
    return {p.relative_to(root).as_posix(): hashlib.blake2b(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def area(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("outputs")
    make_dataset(root / "parent" / "ds", version="v3.0", episodes=2, lengths=[12, 12], cameras=("observation.images.top",),
                 vector_storage="list")   # list columns: flatten has work to do
    make_dataset(root / "other", version="v3.0", dataset_id=2, episodes=2, lengths=[12, 12],
                 cameras=("observation.images.top",))
    (root / "taken").mkdir()
    (root / "taken" / "keep.txt").write_text("not yours")
    (root / "taken.html").write_text("<p>not yours</p>")
    return root


def targets(area: Path) -> dict[str, Path]:
    ds = area / "parent" / "ds"
    return {"the input": ds, "inside the input": ds / "meta" / "info.json", "a new folder inside the input": ds / "new",
            "the folder holding the input": area / "parent"}


def commands(area: Path) -> list[tuple[str, list]]:
    ds = area / "parent" / "ds"
    cases = [(name, [name, ds, *args]) for name, args in WRITERS.items()]
    cases.append(("merge", ["merge", area / "other", ds]))   # the input as a second source
    return cases


def refused(area: Path, argv: list, expect_words=REFUSED) -> str:
    before = tree(area)
    proc = run_cli(*argv, check=False)
    message = " ".join(proc.stderr.split())
    assert proc.returncode in (2, 3), (argv, proc.returncode, proc.stderr)
    assert any(w in message for w in expect_words), (argv, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert tree(area) == before, f"{argv} changed the tree or left a temporary"
    return message


@pytest.mark.parametrize("where", ["the input", "inside the input", "a new folder inside the input",
                                   "the folder holding the input"])
@pytest.mark.parametrize("name", [*WRITERS, "merge"])
def test_no_output_on_around_or_inside_an_input_even_with_force(area, name, where):
    argv = dict(commands(area))[name]
    out = targets(area)[where]
    message = refused(area, [*argv, "-o", out, "--force"])
    assert str(area / "parent" / "ds") in message   # the input it protects is named


@pytest.mark.parametrize("name", [*WRITERS, "merge"])
def test_an_existing_output_needs_force(area, name):
    argv = dict(commands(area))[name]
    out = area / ("taken.html" if name == "report" else "taken")
    refused(area, [*argv, "-o", out], expect_words=("already exists",))


def test_report_over_a_folder_is_refused_even_with_force_and_leaves_no_temporary(area):
    ds = area / "parent" / "ds"
    refused(area, ["report", ds, "-o", area / "taken"], expect_words=("is a folder",))
    refused(area, ["report", ds, "-o", area / "taken", "--force"], expect_words=("is a folder",))


def test_report_replaces_a_file_with_force(area, tmp_path):
    ds = area / "parent" / "ds"
    page = tmp_path / "old.html"
    page.write_text("old")
    proc = run_cli("report", ds, "-o", page, "--force", "--json", check=False)
    assert proc.returncode == 0, proc.stderr
    assert page.read_text().startswith("<!DOCTYPE html>") and sorted(p.name for p in tmp_path.iterdir()) == ["old.html"]


def test_the_three_reported_data_loss_cases(area):
    """The issue's cases: report onto info.json, report onto a folder, merge onto a source with --force."""
    ds, other = area / "parent" / "ds", area / "other"
    info = (ds / "meta/info.json").read_bytes()
    refused(area, ["report", ds, "-o", ds / "meta/info.json"])
    refused(area, ["report", ds, "-o", ds / "meta/info.json", "--force"])
    refused(area, ["report", ds, "-o", area / "taken"])
    refused(area, ["merge", other, ds, "-o", other, "--force"])
    assert (ds / "meta/info.json").read_bytes() == info and json.loads(info)["codebase_version"] == "v3.0"


def test_an_empty_folder_is_taken_over_without_force(area, tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run_cli("delete", area / "parent" / "ds", "--episodes", "1", "-o", tmp_path / "empty", check=False)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "empty" / "meta/info.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_an_output_folder_is_as_mkdir_makes_one_and_in_place_keeps_the_datasets_mode(tmp_path):
    """The staging folder is private (mkdtemp: 0o700) while it is written; promoted, it takes what mkdir gives a new
    folder (0o777 less the umask), or, in place, the dataset folder's own mode: others who read the dataset before
    still can (`staging.folder_mode`)."""
    fixture = make_dataset(tmp_path / "ds", version="v3.0", episodes=3, lengths=[6, 7, 8], cameras=())
    umask = os.umask(0o022)
    os.umask(umask)
    run_cli("delete", fixture.root, "--episodes", "0", "-o", tmp_path / "out")
    assert stat.S_IMODE(os.stat(tmp_path / "out").st_mode) == 0o777 & ~umask
    os.chmod(fixture.root, 0o750)
    run_cli("delete", fixture.root, "--episodes", "0", "--in-place")
    assert stat.S_IMODE(os.stat(fixture.root).st_mode) == 0o750
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
