"""One meaning per exit code (issue 35, item 5; docs/exit-codes.md is the contract): a case for each code, run as a
user runs the command (a fresh process). Codes 4 (verification), 5 (the hub) and 70 (a bug) are held by
test_rewrite_verify, test_hub/test_offline and test_fuzz, which plant their causes; 130 by test_fuzz's interrupt."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lerodoc.errors import ExitCode
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("codes") / "ds", version="v3.0", episodes=2, lengths=4, height=32,
                        width=48, cameras=("observation.images.top",)).root


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A dataset whose channel table is far longer than a pipe's buffer (64 KiB)."""
    return make_dataset(tmp_path_factory.mktemp("wide") / "ds", version="v3.0", episodes=2, lengths=4,
                        cameras=(), state_dim=1500).root


def test_0_success_and_a_no_op_that_says_so(ds, tmp_path):
    assert run_cli("info", ds, check=False).returncode == ExitCode.OK
    same = run_cli("convert", ds, "-o", tmp_path / "same", "--to", "v3.0", check=False)
    assert same.returncode == ExitCode.OK and not (tmp_path / "same").exists()
    flat = run_cli("flatten", ds, "-o", tmp_path / "flat", check=False)
    assert flat.returncode == ExitCode.OK and "nothing to flatten" in flat.stdout
    assert not (tmp_path / "flat").exists()
    body = json.loads(run_cli("flatten", ds, "-o", tmp_path / "flat", "--json").stdout)
    assert body["ok"] and body["exit_code"] == 0 and body["unchanged"] is True
    same = run_cli("encode", ds, "-o", tmp_path / "enc", "--reencode", "--codec", "h264", check=False)
    assert same.returncode == ExitCode.OK and "nothing to re-encode" in same.stdout, same.stdout + same.stderr
    assert not (tmp_path / "enc").exists()


def test_1_findings(ds, tmp_path):
    broken = tmp_path / "broken"
    subprocess.run(["cp", "-r", str(ds), str(broken)], check=True)
    info = json.loads((broken / "meta/info.json").read_text())
    info["total_frames"] = 99
    (broken / "meta/info.json").write_text(json.dumps(info))
    assert run_cli("validate", broken, check=False).returncode == ExitCode.FINDINGS


def test_2_usage(ds):
    assert run_cli("info", ds, "--no-such-option", check=False).returncode == ExitCode.USAGE


@pytest.mark.parametrize("name", ["missing-folder", "nobody/nothing"])
def test_3_not_found_is_one_code_for_a_path_and_a_repo_id(tmp_path, name, monkeypatch):
    """A missing folder used to be exit 2 and a missing repo id exit 3."""
    env = {"HF_LEROBOT_HOME": str(tmp_path / "home"), "HF_HUB_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1"}
    proc = run_cli("info", tmp_path / name if name == "missing-folder" else name, "--json", check=False, env=env)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == ExitCode.BAD_INPUT


def test_141_a_closed_pipe_ends_quietly(wide):
    """`lerodoc info DS | head -1` exited 1, the code for findings (rich's own handling of a closed pipe): here a
    channel table of 1,500 rows, far more than the pipe holds, read one line and closed."""
    proc = subprocess.Popen([sys.executable, "-m", "lerodoc", "quantiles", str(wide), "--dry-run"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 128 + 13), stderr
    assert "Traceback" not in stderr and "error" not in stderr.lower(), stderr


@pytest.mark.parametrize("flag", ["-q", "--quiet", "-v", "--verbose"])
def test_global_options_after_the_command(ds, flag):
    """`info DS -q` was a usage error: the root's options are taken after the command too."""
    proc = run_cli("info", ds, flag, check=False)
    assert proc.returncode == ExitCode.OK, proc.stderr
    before = run_cli(flag, "info", ds, check=False)
    assert proc.stdout == before.stdout
