"""Every `Example:` line of every command's --help runs as printed and exits 0.

The examples are read from the Typer app itself (scripts/gen_cli_docs.py enumerates the commands as docs/cli.md
does), split as a shell would, and run in a fresh folder where the datasets they name are laid out under those
very names (tests/fixtures/factory.py). The hub commands run against tests/hubserver.py on 127.0.0.1 (HF_ENDPOINT),
which serves the repos and assets the examples name. Only the examples that need what a test cannot give are
listed in EXCLUDED, each with its reason; a new command's example that is in neither table fails the test."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
from pathlib import Path

import pytest

from tests.fixtures.defects_data import DEFECTS
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli
from tests.hubserver import HubServer, folder_files

ROOT = Path(__file__).resolve().parents[1]


def _docs_module():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def examples() -> dict[str, str]:
    """{'merge': 'lerodoc merge ...', 'train pi05': ...}: the Example line of every command that has one."""
    docs = _docs_module()
    found = {}
    for path, command in docs.leaf_commands():
        line = docs.example(command.help)
        if line is not None:
            found[" ".join(path)] = line
    return found


SMALL = dict(lengths=6, height=32, width=48)


def _dataset(cwd: Path, name: str, **spec) -> None:
    make_dataset(cwd / name, **{**SMALL, **spec})


def _broken(cwd: Path, name: str) -> None:
    """A dataset with a defect repair fixes: task_index stored as list<int64> of length 1 in one file."""
    version, plant = DEFECTS["list1_column"]
    make_dataset(cwd / name, version=version, episodes=3, lengths=[8, 9, 10], height=32, width=48)
    plant(cwd / name)


def _hub_dataset(cwd: Path, hub: HubServer, repo_id: str) -> None:
    make_dataset(cwd / ".src", version="v3.0", episodes=206, lengths=2, cameras=(), episodes_per_file=206)
    hub.add("dataset", repo_id, folder_files(cwd / ".src"))
    shutil.rmtree(cwd / ".src")


def _assets(hub: HubServer) -> None:
    from tests.test_hub import serve_assets
    serve_assets(hub)


# command -> what the folder must hold (and the hub serve) for its example, as the example names it
LAYOUTS = {
    "info": lambda cwd, hub: _dataset(cwd, "data/pusht"),
    "convert": lambda cwd, hub: _dataset(cwd, "data/pusht_v21", version="v2.1"),
    "merge": lambda cwd, hub: (_dataset(cwd, "data/day1", version="v3.0"),
                               _dataset(cwd, "data/day2", version="v2.1", episodes=6, dataset_id=1)),
    "delete": lambda cwd, hub: _dataset(cwd, "DATASET", episodes=10),
    "split": lambda cwd, hub: _dataset(cwd, "DATASET", episodes=10),
    "tasks": lambda cwd, hub: _dataset(cwd, "DATASET"),
    "features": lambda cwd, hub: _dataset(cwd, "DATASET"),
    "encode": lambda cwd, hub: _dataset(cwd, "DATASET"),
    "flatten": lambda cwd, hub: _dataset(cwd, "data/g1", vector_storage="list"),
    "select": lambda cwd, hub: _dataset(cwd, "DATASET", state_dim=110),
    "quantiles": lambda cwd, hub: _dataset(cwd, "data/pusht"),
    "validate": lambda cwd, hub: _dataset(cwd, "data/pusht", version="v3.0"),
    "repair": lambda cwd, hub: _broken(cwd, "data/broken"),
    "report": lambda cwd, hub: _dataset(cwd, "my_dataset", episodes=8),
    "push": lambda cwd, hub: _dataset(cwd, "data/pusht_v30", version="v3.0"),
    "download dataset": lambda cwd, hub: _hub_dataset(cwd, hub, "lerobot/pusht"),
    "download tokenizer": lambda cwd, hub: _assets(hub),
    "download weights": lambda cwd, hub: _assets(hub),
}

EXCLUDED = {
    "train pi05": "trains the full pi05_base preset (a 3B model, its multi-GB weights) for 30000 steps: a GPU "
                  "job; tests/test_train*.py run the same command on the tiny preset",
    "export lerobot": "exports a finished training run (runs/pusht-pi05), which only the excluded train example "
                      "makes; tests/test_export.py exports a tiny run",
    "eval pi05": "scores a finished training run (runs/pusht-pi05), which only the excluded train example makes",
}


def test_every_example_is_run_or_excluded_with_a_reason():
    found = examples()
    assert not set(found) - set(LAYOUTS) - set(EXCLUDED), "a command's example is neither run nor excluded"
    assert set(LAYOUTS) <= set(found) and not set(LAYOUTS) & set(EXCLUDED)
    assert all(line.startswith("lerodoc ") for line in found.values())


@pytest.mark.parametrize("command", sorted(LAYOUTS))
def test_example_runs_as_printed(command, tmp_path, monkeypatch):
    line = examples()[command]
    cwd = tmp_path / "work"
    cwd.mkdir()
    with HubServer() as hub:
        LAYOUTS[command](cwd, hub)
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_LEROBOT_HOME", "MODELSCOPE_API_TOKEN",
                     "MODELSCOPE_CACHE"):
            monkeypatch.delenv(name, raising=False)
        env = {"HF_ENDPOINT": hub.url, "MODELSCOPE_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"),
               "MODELSCOPE_CACHE": str(tmp_path / "ms"), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN": "hf_test"}
        monkeypatch.chdir(cwd)
        argv = shlex.split(line)
        proc = run_cli(*argv[1:], check=False, env=env)
        assert proc.returncode == 0, f"{line}\nexited {proc.returncode}:\n{proc.stderr}"
        if "-o" in argv:   # what it writes is where the example says
            assert (cwd / argv[argv.index("-o") + 1]).exists(), line
        if command == "push":
            assert ("dataset", "me/pusht") in hub.repos


def test_merge_names_a_source_by_label_path_or_folder(tmp_path, monkeypatch):
    """`--exclude SOURCE:N` takes the source as typed and every other spelling of the same folder; a folder name
    two sources share is refused (it named the first before), as is a path that is no source."""
    from lerodoc.errors import UsageError
    from lerodoc.ops.merge import source_selections
    monkeypatch.chdir(tmp_path)
    for name in ("data/day1", "data/day2", "other/day2"):
        (tmp_path / name).mkdir(parents=True)
    sources = [Path("data/day1"), Path("data/day2"), Path("other/day2")]
    for label, position in [("B", 1), ("data/day2", 1), ("./data/day2/", 1), (str(tmp_path / "data/day2"), 1),
                            ("data/../data/day2", 1), ("day1", 0), ("other/day2", 2), ("C", 2)]:
        chosen = source_selections([f"{label}:4"], sources, "--exclude")
        assert list(chosen) == [position], label
        assert chosen[position].resolve(range(6), "--exclude") == (4,)
    with pytest.raises(UsageError, match="'day2' names sources B, C"):
        source_selections(["day2:4"], sources, "--exclude")
    with pytest.raises(UsageError, match="no source called 'data/day3'"):
        source_selections(["data/day3:4"], sources, "--exclude")


def test_merge_names_a_source_by_its_repo_id(tmp_path, monkeypatch):
    """A source given as a repo id (found under HF_LEROBOT_HOME, as DATASET finds it) is named by that id too."""
    home = tmp_path / "home"
    make_dataset(home / "lab/day2", version="v3.0", episodes=3, **SMALL)
    make_dataset(tmp_path / "day1", version="v3.0", episodes=2, **SMALL)
    monkeypatch.chdir(tmp_path)
    proc = run_cli("merge", "day1", "lab/day2", "-o", "both", "--exclude", "lab/day2:1", "--dry-run", "--json",
                   env={"HF_LEROBOT_HOME": str(home)})
    import json
    sources = json.loads(proc.stdout)["sources"]
    assert [s["excluded"] for s in sources] == [[], [1]], sources
