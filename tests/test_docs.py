"""Generated documentation matches the code it is generated from; every command and option is documented."""

import importlib.util
import shlex
from pathlib import Path

import pytest

from bench.peers import catalogue_markdown, replace_between

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts/gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
COMMANDS = GEN.leaf_commands()
IDS = [" ".join(path) for path, _ in COMMANDS]


def test_check_catalogue_in_docs_is_current():
    doc = (ROOT / "docs/checks.md").read_text()
    assert replace_between(doc, "catalogue", catalogue_markdown()) == doc, \
        "docs/checks.md's catalogue is stale: python -c 'from bench.peers import ...' (see tests/test_docs.py)"


def test_cli_reference_is_current():
    """docs/cli.md is exactly what scripts/gen_cli_docs.py makes from the Typer app today."""
    assert (ROOT / "docs/cli.md").read_text() == GEN.reference(), \
        "docs/cli.md is stale: run python3 scripts/gen_cli_docs.py"


def test_reference_names_every_command_and_option():
    text = GEN.reference()
    for path, command in COMMANDS:
        assert f"## `lerodoc {' '.join(path)}`" in text
        for param in command.params:
            for name in param.opts if GEN.is_option(param) else [param.name.upper()]:
                assert f"`{name}`" in text, f"lerodoc {' '.join(path)}: {name} missing from docs/cli.md"


@pytest.mark.parametrize("path,command", COMMANDS, ids=IDS)
def test_every_argument_and_option_has_help(path, command):
    missing = [p.name for p in command.params if not (getattr(p, "help", None) or "").strip()]
    assert not missing, f"lerodoc {' '.join(path)}: no help text for {missing}"


@pytest.mark.parametrize("path,command", COMMANDS, ids=IDS)
def test_docstring_ends_with_an_example_that_parses(path, command):
    """The last paragraph is `Example: lerodoc CMD ...`, and its options and arguments are the command's own."""
    run = GEN.example(command.help)
    assert run, f"lerodoc {' '.join(path)}: the docstring does not end with 'Example: lerodoc ...'"
    words = shlex.split(run)
    assert words[:1 + len(path)] == ["lerodoc", *path], f"the example runs {words[:1 + len(path)]}, not {path}"
    ctx = command.context_class(command, info_name=path[-1])
    _, extra, _ = command.make_parser(ctx).parse_args(words[1 + len(path):])   # unknown options raise
    assert not extra, f"lerodoc {' '.join(path)}: the example passes unexpected arguments {extra}"


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=IDS)
def test_every_command_has_a_page(path):
    pages = [ROOT / "docs/commands" / f"{path[0]}.md", ROOT / "docs" / f"{path[0]}.md"]
    page = next((p for p in pages if p.exists()), None)
    assert page, f"lerodoc {' '.join(path)} has no page: add docs/commands/{path[0]}.md"
    assert f"lerodoc {' '.join(path)}" in page.read_text()
