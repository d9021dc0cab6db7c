"""Hub I/O over real HTTP: huggingface_hub (and the ModelScope client) against tests/hubserver.py on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lerodoc.errors import ExitCode
from lerodoc.ops.validate import validate
from tests.fixtures.factory import make_dataset
from tests.helpers import importable, require, run_cli
from tests.hubserver import HubServer, folder_files

CLEAN = ("HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "MODELSCOPE_ENDPOINT",
         "MODELSCOPE_API_TOKEN", "MODELSCOPE_CACHE")


@pytest.fixture
def hub():
    with HubServer() as server:
        yield server


@pytest.fixture
def env(tmp_path, hub, monkeypatch):
    """Environment of a lerodoc subprocess: this test's endpoint, an empty HF_HOME, no token."""
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)
    return {"HF_ENDPOINT": hub.url, "MODELSCOPE_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"),
            "MODELSCOPE_CACHE": str(tmp_path / "ms"), "HF_HUB_DISABLE_TELEMETRY": "1"}


def visible(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in folder_files(root).items() if not k.startswith(".")}


def tokenizer_model() -> bytes:
    require(importable("sentencepiece"), "lerodoc's train extra (sentencepiece) is not installed")
    import sentencepiece as spm
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["pick up the red cube", "open the drawer"] * 20),
                                   model_writer=out, vocab_size=30, model_type="char", minloglevel=2)
    return out.getvalue()


def weights_file() -> bytes:
    from safetensors.numpy import save
    return save({"model.proj.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
                 "model.proj.bias": np.zeros(3, np.float32)})


def serve_assets(hub: HubServer, weights: bytes | None = None) -> tuple[bytes, bytes]:
    tok, w = tokenizer_model(), weights or weights_file()
    hub.add("model", "google/paligemma-3b-pt-224", {"tokenizer.model": tok, "config.json": b"{}"}, gated=True)
    hub.add("model", "lerobot/pi05_base", {"model.safetensors": w, "config.json": b'{"type": "pi05"}'})
    return tok, w


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, check=False, env=env)


def test_download_dataset_cut_mid_file_resumes_by_range_and_validates(tmp_path, hub, env):
    from huggingface_hub.constants import DOWNLOAD_CHUNK_SIZE
    # One data file above the client's 10 MiB read chunk: it resumes from the last whole chunk it wrote.
    make_dataset(tmp_path / "src", version="v3.0", episodes=2, lengths=[48000, 48000], cameras=(),
                 state_dim=128, action_dim=128)
    source = folder_files(tmp_path / "src")
    big = max(source, key=lambda p: len(source[p]))
    assert len(source[big]) > DOWNLOAD_CHUNK_SIZE + (1 << 20)
    hub.add("dataset", "lab/big", source)
    hub.cut[big] = DOWNLOAD_CHUNK_SIZE + (1 << 20)

    proc = cli(env, "download", "dataset", "lab/big", "-o", tmp_path / "out", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    gets = hub.gets(f"/{big}")
    assert [r.headers.get("range") for r in gets] == [None, f"bytes={DOWNLOAD_CHUNK_SIZE}-"]
    assert visible(tmp_path / "out") == source
    assert report["path"] == str(tmp_path / "out") and report["verified"] == "validate: 0 errors, 0 warnings"
    assert report["notes"] == []   # v3.0: nothing to say
    assert validate(tmp_path / "out").errors == 0


def test_interrupted_download_fetches_only_what_is_missing(tmp_path, hub, env):
    make_dataset(tmp_path / "src", version="v2.1", episodes=2)
    source = folder_files(tmp_path / "src")
    video = next(p for p in source if p.endswith("episode_000001.mp4"))
    hub.add("dataset", "lab/ds", source)
    hub.fail.add(video)

    first = cli(env, "download", "dataset", "lab/ds")
    assert first.returncode == ExitCode.NETWORK
    assert "lab/ds" in first.stderr and "run the same command again" in first.stderr
    assert "Traceback" not in first.stderr

    target = tmp_path / "hf" / "lerobot" / "lab" / "ds"   # HF_LEROBOT_HOME/REPO_ID, where lerobot reads it
    kept = set(visible(target))
    assert video not in kept and kept
    hub.fail.clear()
    hub.log.clear()
    second = cli(env, "download", "dataset", "lab/ds", "--json")
    assert second.returncode == 0, second.stderr
    fetched = {r.path.split("/resolve/", 1)[1].split("/", 1)[1] for r in hub.log
               if r.method == "GET" and "/resolve/" in r.path}
    assert fetched == set(source) - kept
    root = Path(json.loads(second.stdout)["path"])
    assert root == target
    assert visible(root) == source and validate(root).errors == 0
    # the hub's v2.1 snapshot as published, and said so: LeRobotDataset 0.6.1 loads v3.0 only
    note, = json.loads(second.stdout)["notes"]
    assert note.startswith("v2.1: LeRobotDataset 0.6.1 loads v3.0 only") and f"lerodoc convert {root} -o OUT" in note
    third = cli(env, "download", "dataset", "lab/ds")
    assert third.returncode == 0 and "LeRobotDataset 0.6.1 loads v3.0 only" in " ".join(third.stderr.split())


def test_assets_download_verify_and_are_found_offline(tmp_path, hub, env):
    tok, weights = serve_assets(hub)
    online = {**env, "HF_TOKEN": "hf_test"}
    t = json.loads(cli(online, "download", "tokenizer", "--json").stdout)
    w = json.loads(cli(online, "download", "weights", "pi05_base", "--json").stdout)
    assert t["verified"].startswith("SentencePiece model loads") and "--tokenizer" in t["train"]
    assert w["verified"] == "safetensors header reads, 2 tensors" and "--weights" in w["train"]
    assert Path(w["files"][1]).name == "config.json"

    hub.log.clear()
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    code = ("from lerodoc.hub import locate; "
            "print(locate('tokenizer', 'paligemma')); print(locate('weights', 'pi05_base'))")
    found = subprocess.run([sys.executable, "-c", code], env={**os.environ, **offline}, capture_output=True,
                           text=True, check=True).stdout.split()
    assert [Path(p).read_bytes() for p in found] == [tok, weights]
    again = cli(offline, "download", "tokenizer", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["path"] == found[0]
    assert hub.log == []


def test_gated_tokenizer_without_token_names_the_way_out(hub, env):
    serve_assets(hub)
    proc = cli(env, "download", "tokenizer", "paligemma")
    assert proc.returncode == ExitCode.NETWORK
    assert "gated" in proc.stderr and "lerodoc download tokenizer paligemma --source modelscope" in proc.stderr


def test_truncated_weights_fail_verification(tmp_path, hub, env):
    serve_assets(hub, weights=weights_file()[:-8])
    proc = cli(env, "download", "weights", "-o", tmp_path / "w", "--json")
    assert proc.returncode == ExitCode.BAD_INPUT
    error = json.loads(proc.stdout)["error"]
    assert "header describes" in error["message"] and "incomplete" in error["hint"]


@pytest.mark.parametrize("kind,name", [("tokenizer", "paligemma"), ("weights", "pi05_base")])
def test_locate_offline_with_empty_cache_fails_fast(tmp_path, kind, name):
    code = (f"import time; t = time.perf_counter()\nfrom lerodoc.hub import locate\n"
            f"try:\n    locate({kind!r}, {name!r})\nexcept Exception as exc:\n"
            f"    print(time.perf_counter() - t); print(exc.render())")
    env = {**{k: v for k, v in os.environ.items() if k not in CLEAN}, "HF_HUB_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "empty"), "HF_ENDPOINT": "http://192.0.2.1"}   # unroutable: must not be used
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - started
    seconds, message = out.split("\n", 1)
    assert float(seconds) < 1.0 and wall < 5.0
    assert f"`lerodoc download {kind} {name}`" in message and "--source modelscope" in message
    assert ("tokenizer.model" if kind == "tokenizer" else "model.safetensors") in message


def test_locate_local_paths(tmp_path):
    from lerodoc.errors import LerodocError
    from lerodoc.hub import locate
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.model").write_bytes(b"x")
    (tmp_path / "w.safetensors").write_bytes(b"x")
    assert locate("tokenizer", str(tmp_path / "tok")) == tmp_path / "tok" / "tokenizer.model"
    assert locate("tokenizer", str(tmp_path / "tok" / "tokenizer.model")) == tmp_path / "tok" / "tokenizer.model"
    assert locate("weights", str(tmp_path / "w.safetensors")) == tmp_path / "w.safetensors"
    with pytest.raises(LerodocError, match="no model.safetensors in this folder"):
        locate("weights", str(tmp_path / "tok"))
    with pytest.raises(LerodocError, match="not a file, a folder or a known weights name"):
        locate("weights", "paligemma")


def test_push_uploads_every_file_with_a_card(tmp_path, hub, env):
    fixture = make_dataset(tmp_path / "ds", version="v3.0", episodes=3)
    (tmp_path / "ds" / ".cache").mkdir()
    (tmp_path / "ds" / ".cache" / "note").write_text("download metadata")
    proc = cli({**env, "HF_TOKEN": "hf_test"}, "push", tmp_path / "ds", "lab/pushed", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    uploaded = dict(hub.repos[("dataset", "lab/pushed")].files)
    card = uploaded.pop("README.md").decode()
    assert uploaded == visible(tmp_path / "ds")
    assert report["card"] == "generated README.md" and report["commit"] == hub.repos[("dataset", "lab/pushed")].sha
    assert "LeRobot v3.0" in card and f"| frames | {sum(fixture.lengths)} |" in card and "lerodoc 0.1.0" in card
    assert "`observation.state` | float32 | [6]" in card


def test_push_refuses_a_dataset_with_errors(tmp_path, hub, env):
    make_dataset(tmp_path / "ds", version="v2.1", episodes=2)
    info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
    info["total_frames"] += 5
    (tmp_path / "ds" / "meta" / "info.json").write_text(json.dumps(info))
    proc = cli({**env, "HF_TOKEN": "hf_test"}, "push", tmp_path / "ds", "lab/broken")
    assert proc.returncode == ExitCode.BAD_INPUT and "nothing was pushed" in proc.stderr
    assert ("dataset", "lab/broken") not in hub.repos


def test_modelscope_dataset_cut_mid_file_resumes_and_validates(tmp_path, hub, env):
    require(importable("modelscope_hub"), "lerodoc's hub extra (modelscope) is not installed")
    make_dataset(tmp_path / "src", version="v2.1", episodes=2)
    source = folder_files(tmp_path / "src")
    data = "data/chunk-000/episode_000001.parquet"
    hub.add("dataset", "lab/ds", source)
    hub.cut[data] = 5000
    proc = cli(env, "download", "dataset", "lab/ds", "--source", "modelscope", "-o", tmp_path / "out", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r.headers.get("range") for r in hub.gets(f"FilePath={data}")] == [None, "bytes=5000-"]
    assert visible(tmp_path / "out") == source
    assert json.loads(proc.stdout)["verified"].startswith("validate: 0 errors")   # v2.1 stats lack quantiles


def test_modelscope_tokenizer_from_the_mirror_is_found_offline(tmp_path, hub, env):
    require(importable("modelscope_hub"), "lerodoc's hub extra (modelscope) is not installed")
    tok = tokenizer_model()
    hub.add("model", "AI-ModelScope/paligemma-3b-pt-224", {"tokenizer.model": tok, "config.json": b"{}"})
    proc = cli(env, "download", "tokenizer", "paligemma", "--source", "modelscope", "--json")
    assert proc.returncode == 0, proc.stderr
    path = Path(json.loads(proc.stdout)["path"])
    assert path == tmp_path / "hf" / "modelscope" / "AI-ModelScope" / "paligemma-3b-pt-224" / "tokenizer.model"
    code = "from lerodoc.hub import locate; print(locate('tokenizer', 'paligemma'))"
    found = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env, "HF_HUB_OFFLINE": "1"},
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found) == path and path.read_bytes() == tok


def test_weights_hub_policy_is_fetched_and_hub_failures_are_hub_errors(tmp_path, hub, env):
    """--weights owner/name of a lerobot policy repo downloads its config and weights through huggingface_hub; a
    repo the hub lacks, or an id the hub refuses, is one LerodocError paragraph from lerodoc.hub.hub_errors."""
    hub.add("model", "someone/policy", {"model.safetensors": weights_file(), "config.json": b'{"type": "pi05"}',
                                        "README.md": b"not fetched"})
    show = ("import sys; from lerodoc.errors import LerodocError; from lerodoc.pi05.weights import locate_weights\n"
            "try: print(*locate_weights(sys.argv[1]), sep='|')\n"
            "except LerodocError as e: print(e.render()); sys.exit(int(e.exit_code))")
    def locate(spec: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", show, spec], capture_output=True, text=True,
                              env={**os.environ, **env})

    found = locate("someone/policy")
    assert found.returncode == 0, found.stderr
    weights, folder = found.stdout.strip().split("|")
    assert Path(weights).read_bytes() == weights_file() and not (Path(folder) / "README.md").exists()
    missing = locate("someone/other")
    assert missing.returncode == ExitCode.NETWORK and "Traceback" not in missing.stderr
    assert "someone/other" in missing.stdout and "is no local file or folder" in missing.stdout
    bad = locate("./not-here")
    assert bad.returncode == ExitCode.BAD_INPUT and "not a valid repository id" in bad.stdout
