"""One JSON envelope for every --json outcome (docs/json.md): {"command", "version", "ok", "exit_code", ...,
"error"?}, success, findings, bad input, usage mistakes, lerodoc's own bugs and interruptions alike, with the
same names for the same things (`dataset` for the dataset a command read, `field` in findings and errors).
Every command is run here with --json at least twice: once ending well, once failing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lerodoc import __version__
from tests.fixtures.factory import make_dataset
from tests.helpers import importable, require, run_cli
from tests.hubserver import HubServer, folder_files

ENVELOPE = ["command", "version", "ok", "exit_code"]
ERROR = {"message", "file", "episode", "field", "hint"}
ROOT = Path(__file__).resolve().parents[1]


def check(proc: subprocess.CompletedProcess, command: str) -> dict:
    """The envelope's rules, for one run of `lerodoc COMMAND ... --json`: stdout is one JSON object and nothing
    else, its first keys are the envelope's, they agree with the process's exit code, and `error` is there exactly
    when the command failed with one (exit 2 and up: usage, bad input, verification, hub, bug, interrupt)."""
    try:
        body = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"lerodoc {command} --json printed no JSON (exit {proc.returncode}):\n"
                             f"{proc.stdout!r}\n{proc.stderr}") from None
    assert isinstance(body, dict) and list(body)[:4] == ENVELOPE, body
    assert body["command"] == command and body["version"] == __version__, body
    assert body["exit_code"] == proc.returncode and body["ok"] is (proc.returncode == 0), (body, proc.stderr)
    if proc.returncode >= 2:
        assert set(body) == {*ENVELOPE, "error"} and set(body["error"]) >= ERROR and body["error"]["message"], body
    else:
        assert "error" not in body, body
        assert "root" not in body, f"{command}: the dataset is named 'dataset': {sorted(body)}"
        assert body.get("source", "hf") in ("hf", "modelscope"), f"{command}: the dataset is named 'dataset'"
    for finding in body.get("findings", []):
        assert "field" in finding and "feature" not in finding, finding
    return body


def run(command: str, *args, env: dict | None = None) -> dict:
    proc = run_cli(*command.split(), *args, "--json", check=False, env=env)
    return check(proc, command)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("json")
    v3 = make_dataset(base / "v3", version="v3.0", episodes=3, cameras=("observation.images.top",)).root
    v21 = make_dataset(base / "v21", version="v2.1", episodes=2, cameras=(), vector_storage="list").root
    broken = base / "broken"
    shutil.copytree(v3, broken)
    (broken / "meta/info.json").write_text("{ not json")
    findings = base / "findings"
    shutil.copytree(v3, findings)
    info = json.loads((findings / "meta/info.json").read_text())
    info["total_frames"] += 1
    (findings / "meta/info.json").write_text(json.dumps(info))
    return {"v3": v3, "v21": v21, "broken": broken, "findings": findings, "base": base}


def test_every_command_is_covered_here():
    """A new command gets a case in this file (SUCCESS and the usage-error sweep name every one)."""
    import typer.main
    from lerodoc.cli import app, command_of
    cli = typer.main.get_command(app)
    leaves = []

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if not subs:
            leaves.append(" ".join(path))
            return
        for name, sub in subs.items():
            walk(sub, (*path, name))
    walk(cli, ())
    assert sorted(leaves) == sorted(SUCCESS_ELSEWHERE | set(SUCCESS)), leaves
    assert command_of(cli, ["-q", "train", "pi05", "DS"]) == "train pi05" and command_of(cli, ["--json"]) is None


# the commands whose success this file runs on the module's datasets (the others: the hub and train tests below)
SUCCESS = {
    "info": lambda d, t: [d["v3"]],
    "convert": lambda d, t: [d["v3"], "-o", t / "convert", "--to", "V2.1"],   # choices are case-insensitive
    "merge": lambda d, t: [d["v3"], d["v3"], "-o", t / "merge"],
    "delete": lambda d, t: [d["v3"], "-o", t / "delete", "--episodes", "1"],
    "split": lambda d, t: [d["v3"], "-o", t / "split", "--into", "train=0.5,val=0.5"],
    "tasks": lambda d, t: [d["v3"], "-o", t / "tasks", "--set", "pick up the cube=grab the cube"],
    "features": lambda d, t: [d["v3"], "-o", t / "features", "--drop", "action"],
    "encode": lambda d, t: [d["v3"], "-o", t / "encode", "--reencode", "--gop", "5"],
    "flatten": lambda d, t: [d["v21"], "-o", t / "flatten"],
    "select": lambda d, t: [d["v3"], "-o", t / "select", "--state", "observation.state[0:2]"],
    "quantiles": lambda d, t: [d["v3"]],
    "validate": lambda d, t: [d["v3"]],
    "repair": lambda d, t: [d["v3"], "-o", t / "repair"],
    "report": lambda d, t: [d["v3"], "-o", t / "report.html"],
}
SUCCESS_ELSEWHERE = {"download dataset", "download tokenizer", "download weights", "push", "train pi05",
                     "export lerobot", "eval pi05"}   # eval pi05: tests/test_eval.py


@pytest.mark.parametrize("command", sorted(SUCCESS))
def test_success_is_the_envelope_around_the_result(command, data, tmp_path):
    body = run(command, *SUCCESS[command](data, tmp_path))
    assert body["ok"] and body["exit_code"] == 0
    if command not in ("merge",):
        assert body["dataset"] == str(SUCCESS[command](data, tmp_path)[0]), body


@pytest.mark.parametrize("command", sorted(SUCCESS) + sorted(SUCCESS_ELSEWHERE))
def test_a_usage_error_is_the_envelope_with_exit_2(command):
    """Typer's own parse errors (an unknown option) come out on stdout as the envelope too."""
    body = run(command, "--no-such-option")
    assert body["exit_code"] == 2 and "--no-such-option" in body["error"]["message"]


@pytest.mark.parametrize("command, args", [
    ("info", ["broken"]), ("convert", ["broken", "-o", "OUT"]), ("report", ["broken", "-o", "OUT.html"]),
    ("quantiles", ["broken"]), ("merge", ["v3", "broken", "-o", "OUT"]), ("push", ["broken", "lab/x"]),
])
def test_bad_input_is_the_envelope_with_exit_3_naming_the_file(command, args, data, tmp_path):
    args = [data[a] if a in data else tmp_path / a if a.startswith("OUT") else a for a in args]
    body = run(command, *args)
    assert body["exit_code"] == 3 and body["error"]["file"].startswith(str(data["broken"])), body   # named


@pytest.mark.parametrize("command, args", [
    ("info", ["MISSING"]), ("validate", ["MISSING"]), ("train pi05", ["MISSING"]), ("export lerobot", ["MISSING", "-o", "OUT"]),
    ("eval pi05", ["MISSING", "v3"]),
])
def test_not_found_is_exit_3(command, args, data, tmp_path):
    """A folder that is not there is bad input, one code with a repo id found nowhere (docs/exit-codes.md)."""
    args = [data[a] if a in data else tmp_path / a if a in ("MISSING", "OUT") else a for a in args]
    body = run(command, *args)
    assert body["exit_code"] == 3 and body["error"]["file"] == str(tmp_path / "MISSING"), body


@pytest.mark.parametrize("command, args", [
    ("download dataset", ["lab/x", "--source", "nowhere"]), ("tasks", ["v3", "-o", "OUT", "--set", "nope=x"]),
    ("features", ["v3", "-o", "OUT", "--drop", "nope"]), ("validate", ["v3", "--tolerance-s", "x"]),
    ("flatten", ["v21", "-o", "OUT", "--columns", "nope"]), ("features", ["v3", "--drop", "action"]),
    ("encode", ["v3", "-o", "OUT", "--reencode", "--codec", "nope"]), ("merge", ["v3", "-o", "OUT", "--to", "v9"]),
])
def test_usage_mistakes_are_exit_2(command, args, data, tmp_path):
    """Typer's own checks and lerodoc's UsageError alike: exit 2, the envelope on stdout."""
    args = [data[a] if a in data else tmp_path / a if a in ("MISSING", "OUT") else a for a in args]
    body = run(command, *args)
    assert body["exit_code"] == 2, body


def test_findings_are_ok_false_with_exit_1_and_no_error(data):
    body = run("validate", data["findings"])
    assert body["exit_code"] == 1 and not body["ok"] and body["errors"] >= 1
    assert body["dataset"] == str(data["findings"]) and body["codebase_version"] == "v3.0"
    finding = next(f for f in body["findings"] if f["code"] == "IDX030")
    assert finding["file"] == "meta/info.json" and "field" in finding


def test_strict_counts_warnings_as_errors(tmp_path):
    root = make_dataset(tmp_path / "ds", version="v2.1", episodes=2, cameras=()).root   # no q01/q99: warnings
    relaxed = run("validate", root)
    assert relaxed["exit_code"] == 0 and relaxed["warnings"] > 0 and relaxed["errors"] == 0, relaxed
    strict = run("validate", root, "--strict")
    assert strict["exit_code"] == 1 and strict["strict"] is True and not strict["ok"]
    assert run_cli("validate", root, "--strict", check=False).returncode == 1


def test_list_checks_is_an_object():
    body = run("validate", "--list-checks")
    assert body["ok"] and {"code", "family", "severity"} <= set(body["checks"][0])


def _planted(tmp_path: Path, data: dict, fault: str) -> subprocess.CompletedProcess:
    """convert, with lerodoc's rewrite replaced by one that fails: `bug` (a KeyError) or `interrupt` (Ctrl-C)."""
    raised = "KeyError('[planted]')" if fault == "bug" else "KeyboardInterrupt"
    code = ("import sys\nfrom lerodoc import cli\nimport lerodoc.ops.rewrite as rewrite\n"
            f"def boom(*a, **k): raise {raised}\nrewrite.execute = boom\n"
            f"sys.argv = ['lerodoc', 'convert', {str(data['v3'])!r}, '-o', {str(tmp_path / 'out')!r}, '--json']\n"
            "cli.main()\n")
    env = {k: v for k, v in os.environ.items() if k != "LERODOC_DEBUG"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)


def test_a_bug_and_an_interrupt_are_the_envelope_too(data, tmp_path):
    bug = check(_planted(tmp_path, data, "bug"), "convert")
    assert bug["exit_code"] == 70 and bug["error"]["bug"] is True and "[planted]" in bug["error"]["message"]
    interrupted = check(_planted(tmp_path, data, "interrupt"), "convert")
    assert interrupted["exit_code"] == 130


# ---------------------------------------------------------------- the hub and training

@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    for name in ("HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "HF_LEROBOT_HOME"):
        monkeypatch.delenv(name, raising=False)
    with HubServer() as server:
        yield server, {"HF_ENDPOINT": server.url, "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": "hf_test",
                       "HF_LEROBOT_HOME": str(tmp_path / "lerobot"), "HF_HUB_DISABLE_TELEMETRY": "1"}


def test_hub_commands_are_the_envelope(data, tmp_path, hub_env):
    from tests.test_hub import serve_assets
    hub, env = hub_env
    hub.add("dataset", "lab/ds", folder_files(data["v3"]))
    serve_assets(hub)
    got = run("download dataset", "lab/ds", "-o", tmp_path / "ds", env=env)
    assert got["path"] == str(tmp_path / "ds")
    run("download tokenizer", "--source", "HF", env=env)   # choices are case-insensitive
    run("download weights", env=env)
    pushed = run("push", data["v3"], "lab/pushed", env=env)
    assert pushed["dataset"] == str(data["v3"])
    missing = run("download dataset", "lab/nothing-here", "-o", tmp_path / "none", env=env)
    assert missing["exit_code"] == 5


def test_train_and_export_are_the_envelope(data, tmp_path):
    require(importable("torch") and importable("sentencepiece"), "lerodoc's train extra is not installed")
    from tests.fixtures.tokenizer import train_tokenizer
    tokenizer = train_tokenizer(tmp_path / "tokenizer")
    root = data["base"] / "trainable"
    if not root.exists():
        shutil.copytree(data["v3"], root)
        assert run_cli("quantiles", root, "--in-place").returncode == 0
    body = run("train pi05", root, "-o", tmp_path / "run", "--tokenizer", tokenizer, "--preset", "tiny",
               "--steps", "2", "--batch-per-device", "2", "--workers", "0", "--save-every", "2")
    assert body["ok"] and body["steps"] == 2
    exported = run("export lerobot", tmp_path / "run", "-o", tmp_path / "policy")
    assert exported["ok"] and exported["output"] == str(tmp_path / "policy")
