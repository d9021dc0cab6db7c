"""repair's -o on its own input (issue 35, item 9): the input itself, a folder inside it, or one that holds it, is
refused before anything is read or written, with and without --force; the input stays byte for byte as it was.
--in-place is the way to repair a dataset where it is."""

from __future__ import annotations

import json

import pytest

from lerodoc.errors import ExitCode
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli
from tests.test_untrusted import listing


@pytest.fixture
def broken(tmp_path):
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=2, lengths=4, height=32, width=48,
                        cameras=("observation.images.top",)).root
    info = json.loads((root / "meta/info.json").read_text())
    info["total_frames"] = 999   # something repair would fix
    (root / "meta/info.json").write_text(json.dumps(info))
    return root


@pytest.mark.parametrize("where, relation", [(".", "is the input"), ("meta/fixed", "is inside the input"),
                                             ("..", "holds the input")])
@pytest.mark.parametrize("force", [False, True])
def test_repair_onto_its_input_is_refused(broken, where, relation, force):
    before = listing(broken.parent)
    proc = run_cli("repair", broken, "-o", broken / where, "--json", *(["--force"] if force else []), check=False)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert relation in error["message"] and "outside the input" in error["hint"]
    assert listing(broken.parent) == before


def test_in_place_is_the_way(broken):
    run_cli("repair", broken, "--in-place")
    assert json.loads((broken / "meta/info.json").read_text())["total_frames"] == 8
