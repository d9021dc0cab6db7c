"""Start-up (issue 26 item 7) held by what a command line imports, not by the clock, so a loaded CI machine cannot
make it flake and a regression (a heavy import moved back to a module's top) still fails: `import lerodoc.cli`
and `lerodoc --help` load none of numpy, pyarrow, PyAV, torch, huggingface_hub or pydantic, nor rich (help is
click's plain text, render's consoles are made on first use); `lerodoc info` and a convert plan of a small dataset load
no pydantic, and info of a v3.0 or v2.1 mp4 dataset no PyAV (its cameras are read from the mp4 headers). The
lazily built command (cli.command_for) shows what the full app shows, and the quick coercion in front of Typer's gives
Typer's values. The times themselves are measured by bench/startup.py (docs/results/startup_cpu_2core.json)."""

from __future__ import annotations

import os
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import pytest
import typer
import typer.main
import typer.testing
from typer.testing import CliRunner

from lerodoc import cli
from tests.helpers import require

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "tests/zoo/members/lerobot-0.6.1-record"
SMALL_V21 = ROOT / "tests/zoo/members/export-v21-camera-sizes"
G1 = ROOT.parent / "shared/data/g1_v21"
HEAVY = ("numpy", "pyarrow", "av", "torch", "huggingface_hub", "pydantic", "pandas", "matplotlib")
HELP_ONLY = ("rich", "markdown_it", "pygments")


def imported(*args: str, code: int = 0) -> set[str]:
    """The modules a fresh interpreter imports running `python -X importtime ARGS`, which exits `code`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("_LERODOC_COMPLETE")}
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)
    assert proc.returncode == code, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


def roots(modules: set[str], names) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_import_cli_loads_no_heavy_library():
    assert roots(imported("-c", "import lerodoc.cli"), HEAVY) == []


@pytest.mark.parametrize("args, code", [(["--help"], 0), (["convert", "--help"], 0), (["train", "pi05", "--help"], 0),
                                        (["info", "--bogus"], 2)])
def test_help_and_usage_errors_load_no_heavy_library_nor_rich(args, code):
    assert roots(imported("-m", "lerodoc", *args, code=code), HEAVY + HELP_ONLY) == []


@pytest.mark.parametrize("args", [["info", "SMALL"], ["convert", "SMALL", "-o", "OUT", "--dry-run", "--json"],
                                  ["merge", "SMALL", "SMALL", "-o", "OUT", "--dry-run", "--json"]])
def test_a_command_on_a_small_dataset_loads_no_pydantic(args, tmp_path):
    """Its options (paths, numbers, choices, defaults) are coerced without Typer's pydantic adapters."""
    assert SMALL.is_dir(), f"{SMALL}: the zoo member is committed with the tests"
    args = [{"SMALL": str(SMALL), "OUT": str(tmp_path / "out")}.get(a, a) for a in args]
    assert roots(imported("-m", "lerodoc", *args), ("pydantic", "torch", "huggingface_hub")) == []


@pytest.mark.parametrize("root", [SMALL, SMALL_V21, G1], ids=["v30-av1", "v21-h264", "g1-v21"])
def test_info_of_an_mp4_dataset_loads_no_pyav(root):
    """info shows each camera's codec, size, pixel format and rate from the mp4 header (frames.video_format)."""
    require(root.is_dir(), f"{root} is absent")
    assert sorted(root.glob("videos/**/*.mp4")), root
    assert roots(imported("-m", "lerodoc", "info", str(root)), ("av",)) == []
    assert roots(imported("-m", "lerodoc", "info", str(root), "--json"), ("av",)) == []


@pytest.mark.parametrize("args", [[], ["info"], ["train"], ["train", "pi05"], ["download", "weights"], ["infp"],
                                  ["info", "--bogus"]])
def test_lazily_built_help_is_the_full_apps(args, monkeypatch):
    full = CliRunner().invoke(cli.app, [*args, "--help"], prog_name="lerodoc")
    monkeypatch.setattr(typer.testing, "_get_command", lambda app: cli.command_for([*args, "--help"]))
    lazy = CliRunner().invoke(cli.app, [*args, "--help"], prog_name="lerodoc")
    assert (lazy.exit_code, lazy.output) == (full.exit_code, full.output)


def test_lazily_built_command_keeps_every_name():
    full, listed = typer.main.get_command(cli.app), cli.command_for(["--help"])
    assert list(listed.commands) == list(full.commands)
    for name, command in full.commands.items():
        assert listed.commands[name].help == command.help
        assert getattr(listed.commands[name], "rich_help_panel", None) == getattr(command, "rich_help_panel", None)
    assert list(cli.command_for(["train", "pi05"]).commands) == ["train"]


class Colour(str, Enum):
    red = "red"
    green = "green"


CASES = [   # (annotation, typer option keywords, value)
    (str, {}, "a [red] cube"), (Path, {}, "some/where"), (Path, {}, Path("x")), (int, {}, "12"), (int, {}, -3),
    (int, {"min": 1}, "4"), (int, {"min": 1}, 8), (int, {}, "007"), (int, {"max": 5}, "-0"), (float, {}, "2.5"),
    (float, {}, 100.0), (float, {}, 0), (float, {"min": 0}, "3"), (float, {}, "00.50"),
    (Colour, {"case_sensitive": False}, "RED"),
    (Colour, {}, Colour.green), (list[str], {}, ("a", "b")), (list[str], {}, "a"), (list[Path], {}, ("x", "y")),
    (list[Path], {"exists": True}, ("tests",)), (list[int], {"min": 0}, ("1", "2")), (list[Colour], {}, ["red"]),
    (Optional[str], {}, "s"), (bool, {}, "true"),
]


@pytest.mark.parametrize("annotation, keywords, value", CASES)
def test_quick_coercion_gives_typers_values(annotation, keywords, value):
    from typer._coercion import build_runtime_param
    app = typer.Typer()

    def command(x=typer.Option(None, "--x", **keywords)) -> None:   # noqa: B008
        pass
    command.__annotations__ = {"x": annotation, "return": None}
    app.command()(command)
    param = next(p for p in typer.main.get_command(app).params if p.name == "x")
    descriptor = param.type_descriptor
    ctx = typer.Context(typer.main.get_command(app))
    expected = build_runtime_param(descriptor)._coerce_value(value, param=param, ctx=ctx)
    quick = cli._quicken(param)._runtime_param._coerce_value(value, param=param, ctx=ctx)
    assert quick == expected and type(quick) is type(expected)


def test_quick_coercion_leaves_errors_to_typer():
    from typer._coercion import build_runtime_param
    app = typer.Typer()

    @app.command()
    def command(n: int = typer.Option(1, "--n", min=1), c: Colour = typer.Option(Colour.red, "--c"),
                p: list[Path] = typer.Option([], "--p", exists=True)) -> None:   # noqa: B006
        pass
    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    for name, bad in (("n", "0"), ("n", "x1"), ("c", "blue"), ("p", ["tests", "no/such/path"])):
        param = next(p for p in group.params if p.name == name)
        with pytest.raises(typer.BadParameter) as typer_says:
            build_runtime_param(param.type_descriptor)._coerce_value(bad, param=param, ctx=ctx)
        with pytest.raises(typer.BadParameter) as quick_says:
            cli._quicken(param)._runtime_param._coerce_value(bad, param=param, ctx=ctx)
        assert quick_says.value.format_message() == typer_says.value.format_message()
