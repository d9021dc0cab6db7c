"""`--force` replaces only what lerodoc can prove is replaceable (issue 35, item 1; docs/outputs.md).

An empty folder, a LeRobot dataset (meta/info.json and nothing foreign at its top level), or lerodoc's own
earlier output (split's parts, an export, a checkpoint). Anything else, a shelf of datasets, a home folder, a
file, is refused naming what it holds, and is left exactly as it was (every entry's bytes, mode and mtime).
"""

from __future__ import annotations

import json
import shutil

import pytest

from lerodoc.errors import ExitCode
from tests.fixtures.factory import make_dataset
from tests.helpers import run_here
from tests.test_untrusted import listing

SMALL = dict(episodes=2, lengths=4, height=32, width=48, cameras=("observation.images.top",))


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("force")
    return (make_dataset(root / "a", version="v3.0", **SMALL).root,
            make_dataset(root / "b", version="v3.0", dataset_id=1, **SMALL).root)


def refused(args, sandbox) -> dict:
    before = listing(sandbox)
    proc = run_here(*args, "--json")
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    assert listing(sandbox) == before, "a refused --force changed something"
    return json.loads(proc.stdout)["error"]


def test_a_shelf_of_datasets_and_a_readme_is_never_wiped(sources, tmp_path):
    """The issue's case: `merge a b -o datasets --force` wiped a folder holding two other datasets and a README."""
    shelf = tmp_path / "datasets"
    for name in ("one", "two"):
        shutil.copytree(sources[0], shelf / name)
    (shelf / "README.md").write_text("my datasets\n")
    error = refused(["merge", *sources, "-o", shelf, "--force"], tmp_path)
    assert "README.md, one/, two/" in error["message"] and "never replaced" in error["message"]
    assert "--force" not in error["hint"]


def test_a_shelf_of_datasets_alone_is_never_wiped(sources, tmp_path):
    """Only datasets in it, no README: still a shelf, not lerodoc's output (split marks its own)."""
    shelf = tmp_path / "datasets"
    for name in ("one", "two"):
        shutil.copytree(sources[0], shelf / name)
    refused(["convert", sources[0], "-o", shelf, "--to", "v2.1", "--force"], tmp_path)


def test_a_dataset_with_foreign_files_is_never_wiped(sources, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sources[0], out)
    (out / "notes.txt").write_text("the only copy of my notes\n")
    error = refused(["convert", sources[0], "-o", out, "--to", "v2.1", "--force"], tmp_path)
    assert "notes.txt" in error["message"]


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_file_or_link_is_never_replaced_by_a_folder(sources, tmp_path, kind):
    """`convert SRC -o afile.txt --force` used to turn the file into a folder."""
    target = tmp_path / "afile.txt"
    (tmp_path / "real.txt").write_text("keep me\n")
    if kind == "file":
        target.write_text("keep me\n")
    else:
        target.symlink_to(tmp_path / "real.txt")
    error = refused(["convert", sources[0], "-o", target, "--to", "v2.1", "--force"], tmp_path)
    assert f"is a {kind}" in error["message"]


def test_a_dataset_is_replaced_only_with_force(sources, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sources[1], out)
    error = refused(["convert", sources[0], "-o", out, "--to", "v2.1"], tmp_path)
    assert "a LeRobot dataset" in error["message"] and "--force" in error["hint"]
    assert run_here("convert", sources[0], "-o", out, "--to", "v2.1", "--force").returncode == 0
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1"


def test_an_empty_folder_is_taken_over(sources, tmp_path):
    (tmp_path / "out").mkdir()
    assert run_here("convert", sources[0], "-o", tmp_path / "out", "--to", "v2.1").returncode == 0


def test_splits_own_output_is_replaced_with_force(sources, tmp_path):
    out = tmp_path / "parts"
    assert run_here("split", sources[0], "-o", out, "--episodes", "a:0,b:1").returncode == 0
    assert (out / ".lerodoc-split.json").is_file()
    refused(["split", sources[0], "-o", out, "--episodes", "a:0,b:1"], tmp_path)
    assert run_here("split", sources[0], "-o", out, "--episodes", "x:0,y:1", "--force").returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [".lerodoc-split.json", "x", "y"]


def test_a_file_output_replaces_a_file_only(sources, tmp_path):
    page = tmp_path / "page.html"
    page.write_text("old\n")
    refused(["report", sources[0], "-o", page], tmp_path)
    assert run_here("report", sources[0], "-o", page, "--force").returncode == 0
    assert page.read_text().startswith("<!")
    folder = tmp_path / "folder.html"
    folder.mkdir()
    refused(["report", sources[0], "-o", folder, "--force"], tmp_path)
