"""--push-to-hub REPO on every writing command (lerobot's editors' push_to_hub): once the output is written and
verified it goes through `lerodoc push`'s upload (validated, regular files only, one commit, a generated card) to
the local hub of tests/hubserver.py; --json's envelope says what was pushed; a dry run or a bad repo id is a usage
error and pushes nothing. One table across the commands, run in-process (tests.helpers.run_here) to stay fast."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.factory import make_dataset
from tests.helpers import run_here
from tests.hubserver import HubServer, folder_files

# command -> (its arguments; DS is the dataset, OUT the output), the outputs pushed relative to OUT, and the repos
# they go to ("" is the repo given; split's parts go to REPO_<part>, as lerobot's split_dataset names them)
CASES = {
    "convert": (["convert", "DS", "-o", "OUT", "--to", "v2.1"], {"": "."}),
    "convert-no-op": (["convert", "DS", "-o", "OUT", "--to", "v3.0"], {"": "DS"}),
    "merge": (["merge", "DS", "DS", "-o", "OUT"], {"": "."}),
    "delete": (["delete", "DS", "-o", "OUT", "--episodes", "0"], {"": "."}),
    "split": (["split", "DS", "-o", "OUT", "--into", "a=0.5,b=0.5"], {"_a": "a", "_b": "b"}),
    "tasks": (["tasks", "DS", "-o", "OUT", "--set", "pick up the cube=grab it"], {"": "."}),
    "features": (["features", "DS", "-o", "OUT", "--rename", "action=action.joints"], {"": "."}),
    "encode": (["encode", "DS", "-o", "OUT", "--reencode", "--gop", "4"], {"": "."}),
    "flatten": (["flatten", "DS", "-o", "OUT"], {"": "."}),
    "select": (["select", "DS", "-o", "OUT", "--state", "observation.state[0:2]"], {"": "."}),
    "quantiles": (["quantiles", "DS", "-o", "OUT"], {"": "."}),
    "quantiles-in-place": (["quantiles", "COPY"], {"": "COPY"}),
    "repair": (["repair", "DS", "-o", "OUT"], {"": "."}),
}


@pytest.fixture(scope="module")
def hub():
    with HubServer() as server:
        yield server


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("push") / "ds", version="v3.0", episodes=2, lengths=[8, 8],
                        cameras=("observation.images.top",), vector_storage="list").root   # flatten has work


@pytest.fixture
def endpoint(hub, monkeypatch):
    """This process's huggingface_hub talks to the local hub (its endpoint is read at import), with a token."""
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    return hub


def visible(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in folder_files(root).items() if not any(part.startswith(".") for part in k.split("/"))}


def test_every_writing_command_has_the_option():
    """Every command that writes a dataset takes --push-to-hub; report, export and the hub commands do not."""
    import typer.main
    from lerodoc.cli import app
    commands = typer.main.get_command(app).commands
    having = {name for name, cmd in commands.items() if any(p.name == "push_to_hub" for p in cmd.params)}
    assert having == {case.split("-")[0] for case in CASES}


@pytest.mark.parametrize("case", sorted(CASES))
def test_push_to_hub_after_the_output_is_written(case, ds, endpoint, tmp_path):
    hub = endpoint
    args, pushed_to = CASES[case]
    out, copy = tmp_path / "out", tmp_path / "copy"
    if "COPY" in args:
        shutil.copytree(ds, copy)
    places = {"DS": ds, "OUT": out, "COPY": copy}
    repo = f"lab/{case}"
    proc = run_here(*[places.get(a, a) for a in args], "-j", "1", "--push-to-hub", repo, "--json")
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    assert body["ok"] and body["exit_code"] == 0
    expected = {repo + suffix: places.get(where, out / where).resolve() for suffix, where in pushed_to.items()}
    assert {p["repo"]: Path(p["dataset"]).resolve() for p in body["pushed"]} == expected, body["pushed"]
    for name, root in expected.items():
        files = dict(hub.repos[("dataset", name)].files)
        card = files.pop("README.md").decode()
        assert files == visible(root), name   # every regular file, nothing hidden (no staging or lock leftovers)
        assert "A LeRobot dataset, pushed with lerodoc" in card
        entry = next(p for p in body["pushed"] if p["repo"] == name)
        assert entry["commit"] == hub.repos[("dataset", name)].sha and "README.md" in entry["files"]


def test_push_to_hub_in_text_mode_says_where(ds, endpoint, tmp_path):
    proc = run_here("-q", "delete", ds, "-o", tmp_path / "out", "--episodes", "1", "-j", "1", "--push-to-hub",
                    "lab/text")
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert f"of {tmp_path / 'out'} to lab/text: " in said and "deleted episodes 1" in said
    assert ("dataset", "lab/text") in endpoint.repos


@pytest.mark.parametrize("args, words", [
    (["delete", "DS", "-o", "OUT", "--episodes", "0", "--dry-run", "--push-to-hub", "lab/dry"],
     "--dry-run writes nothing to push"),
    (["flatten", "DS", "-o", "OUT", "--push-to-hub", "not a repo"], "is not a hub repository id (owner/name)"),
])
def test_usage_mistakes_push_nothing(args, words, ds, endpoint, tmp_path):
    before = set(endpoint.repos)
    proc = run_here(*[{"DS": ds, "OUT": tmp_path / "out"}.get(a, a) for a in args], "--json")
    assert proc.returncode == 2 and words in json.loads(proc.stdout)["error"]["message"], proc.stdout
    assert set(endpoint.repos) == before and not (tmp_path / "out").exists()


def test_a_refused_push_names_the_written_output(ds, endpoint, tmp_path):
    """The hub refuses (here: no such endpoint): exit 5, the output stays complete and the error says how to push
    it later."""
    from huggingface_hub import constants
    constants.ENDPOINT = "http://127.0.0.1:9"   # nothing listens there (restored by the fixture)
    proc = run_here("tasks", ds, "-o", tmp_path / "out", "--set", "pick up the cube=grab it", "-j", "1",
                    "--push-to-hub", "lab/refused", "--json")
    body = json.loads(proc.stdout)
    assert proc.returncode == 5 and body["exit_code"] == 5, proc.stderr
    assert f"lerodoc push {tmp_path / 'out'} lab/refused" in body["error"]["hint"]
    assert (tmp_path / "out" / "meta" / "info.json").is_file()
