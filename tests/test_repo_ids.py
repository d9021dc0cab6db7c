"""Repo ids as lerobot resolves them: DATASET may be owner/name, found at HF_LEROBOT_HOME/owner/name (where
`lerodoc download dataset` puts it and LeRobotDataset(repo_id) reads it offline) or in a hub cache; a folder of
that name wins; a repo id found nowhere names the download command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli
from tests.hubserver import HubServer, folder_files
from tests.lerobot_oracle import lerobot_python

CLEAN = ("HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "HF_LEROBOT_HOME",
         "MODELSCOPE_ENDPOINT", "MODELSCOPE_API_TOKEN", "MODELSCOPE_CACHE")


@pytest.fixture
def hub():
    with HubServer() as server:
        yield server


@pytest.fixture
def env(tmp_path, hub, monkeypatch):
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)
    return {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}


def cli(env: dict, *args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    if cwd is None:
        return run_cli(*args, check=False, env=env)
    return subprocess.run([sys.executable, "-m", "lerodoc", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}, cwd=cwd)


def visible(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in folder_files(root).items() if not k.startswith(".")}


def info_root(env: dict, dataset, cwd: Path | None = None) -> str:
    proc = cli(env, "info", dataset, "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["dataset"]


def test_download_puts_the_dataset_where_lerobot_reads_it_and_info_finds_it_by_repo_id(tmp_path, hub, env):
    make_dataset(tmp_path / "src", version="v3.0", episodes=2, cameras=("observation.images.top",))
    source = folder_files(tmp_path / "src")
    hub.add("dataset", "lab/ds", source)

    proc = cli(env, "download", "dataset", "lab/ds", "--json")
    assert proc.returncode == 0, proc.stderr
    home = tmp_path / "hf" / "lerobot"
    assert json.loads(proc.stdout)["path"] == str(home / "lab/ds")
    assert visible(home / "lab/ds") == source
    # huggingface_hub's local_dir bookkeeping would make lerobot 0.6.1 fetch the dataset again: moved aside
    assert not (home / "lab/ds/.cache/huggingface/download").exists()
    assert (home / "lab/ds/.cache/lerodoc-download").is_dir()

    offline = {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    assert info_root(offline, "lab/ds") == str(home / "lab/ds")

    # lerobot 0.6.1 loads it by repo id alone, offline, from HF_LEROBOT_HOME
    script = ("from lerobot.datasets.lerobot_dataset import LeRobotDataset; ds = LeRobotDataset('lab/ds'); "
              "print(ds.root, ds.num_episodes, ds.num_frames, ds[0]['observation.state'].shape[0])")
    lerobot_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", *CLEAN)}
    lerobot_env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    loaded = subprocess.run([str(lerobot_python()), "-c", script], capture_output=True, text=True, env=lerobot_env,
                            timeout=600)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    root, episodes, frames, state = loaded.stdout.split()[-4:]
    meta = json.loads(source["meta/info.json"])
    assert (root, int(episodes), int(frames)) == (str(home / "lab/ds"), 2, meta["total_frames"])

    # a second download fetches no file again, and the dataset stays where lerobot reads it
    hub.log.clear()
    again = cli(env, "download", "dataset", "lab/ds", "--json")
    assert again.returncode == 0, again.stderr
    assert not [r for r in hub.log if r.method == "GET" and "/resolve/" in r.path]
    assert not (home / "lab/ds/.cache/huggingface/download").exists()


def test_hf_lerobot_home_is_honoured_and_a_local_folder_of_the_same_name_wins(tmp_path, hub, env):
    custom = tmp_path / "custom-home"
    make_dataset(custom / "lab" / "ds", version="v2.1", episodes=2, cameras=())
    here = tmp_path / "work"
    make_dataset(here / "lab" / "ds", version="v3.0", episodes=3, cameras=())
    env = {**env, "HF_LEROBOT_HOME": str(custom)}
    assert info_root(env, "lab/ds") == str(custom / "lab/ds")
    assert info_root(env, "lab/ds", cwd=here) == "lab/ds"   # the folder ./lab/ds, as typed
    proc = cli(env, "convert", "lab/ds", "-o", tmp_path / "v30", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dataset"] == str(custom / "lab/ds")


def test_a_dataset_in_lerobots_hub_cache_is_found_offline(tmp_path, hub, env):
    make_dataset(tmp_path / "src", version="v3.0", episodes=2, cameras=())
    hub.add("dataset", "lab/cached", folder_files(tmp_path / "src"))
    home = tmp_path / "hf" / "lerobot"
    code = ("import sys; from huggingface_hub import snapshot_download; "
            "print(snapshot_download('lab/cached', repo_type='dataset', cache_dir=sys.argv[1]))")
    fetched = subprocess.run([sys.executable, "-c", code, str(home / "hub")], capture_output=True, text=True,
                             env={**os.environ, **env}, check=True).stdout.strip()
    assert Path(fetched).is_relative_to(home / "hub")
    offline = {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    assert info_root(offline, "lab/cached") == fetched


def test_a_repo_id_found_nowhere_names_the_download_command(tmp_path, env):
    for args in (["info", "nobody/nothing"], ["info", "nobody/nothing", "--json"],
                 ["delete", "nobody/nothing", "-e", "0", "-o", tmp_path / "out"]):
        proc = cli(env, *args)
        text = " ".join(proc.stderr.split())
        assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
        assert "run `lerodoc download dataset nobody/nothing` (it puts it at" in text
        assert str(tmp_path / "hf" / "lerobot" / "nobody" / "nothing") in text
    typo = cli(env, "info", "no/such/folder")
    assert typo.returncode == 3 and "does not exist" in typo.stderr   # not found: one code, path or repo id


def test_download_never_writes_into_a_folder_it_did_not_make(tmp_path, hub, env):
    make_dataset(tmp_path / "src", version="v3.0", episodes=2, cameras=())
    hub.add("dataset", "lab/rec", folder_files(tmp_path / "src"))
    recorded = tmp_path / "hf" / "lerobot" / "lab" / "rec"
    make_dataset(recorded, version="v3.0", dataset_id=5, episodes=1, cameras=())   # as lerobot-record leaves one
    before = folder_files(recorded)
    proc = cli(env, "download", "dataset", "lab/rec")
    assert proc.returncode == 3 and "no `lerodoc download dataset` put there" in " ".join(proc.stderr.split())
    assert folder_files(recorded) == before
    elsewhere = cli(env, "download", "dataset", "lab/rec", "-o", tmp_path / "copy", "--json")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert visible(tmp_path / "copy") == folder_files(tmp_path / "src")

