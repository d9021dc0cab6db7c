"""docs/api.md's examples run as written, in a folder holding a v3.0 dataset at data/pusht; and every public
function of lerodoc.api is documented and exported."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from lerodoc import api
from tests.fixtures.factory import make_dataset

DOC = Path(__file__).resolve().parent.parent / "docs/api.md"


def test_api_md_examples_run(tmp_path, monkeypatch):
    make_dataset(tmp_path / "data/pusht", version="v3.0", episodes=4, lengths=[20, 22, 24, 26])
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 3
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)   # an assert in the docs that fails fails here
    assert (tmp_path / "data/pusht_twice/meta/info.json").is_file()


def test_every_operation_is_exported_and_documented():
    names = [n for n, f in inspect.getmembers(api, inspect.isfunction) if not n.startswith("_")
             and f.__module__ == api.__name__]
    assert sorted(names) == sorted(n for n in api.__all__ if n[0].islower())
    commands = ("info", "convert", "merge", "delete", "split", "tasks", "features", "encode", "flatten", "select",
                "quantiles", "validate", "repair", "report", "download_dataset", "download_tokenizer",
                "download_weights", "push", "train_pi05", "export_lerobot", "eval_pi05")
    for name in commands:
        assert name in names and getattr(api, name).__doc__, name
    documented = DOC.read_text()
    assert [n for n in commands if f"api.{n}(" not in documented] == []


def test_every_command_calls_the_api():
    """Each command module calls lerodoc.api: commands are thin over it."""
    from lerodoc import commands
    folder = Path(commands.__file__).parent
    thin = {path.stem for path in folder.glob("*.py")
            if any(line in path.read_text() for line in ("from lerodoc import api", "from lerodoc.api import"))}
    assert sorted({p.stem for p in folder.glob("*.py")} - thin) == ["__init__"]


def test_split_takes_typed_parts_and_gives_the_cli_report(tmp_path):
    """api.split hands its fractions or episode lists to the split operation as they are (no option string in
    between): the same parts and report as the CLI's --json, and a bad fraction is the same usage error."""
    import pytest

    from tests.helpers import run_json
    f = make_dataset(tmp_path / "d", version="v3.0", episodes=5, cameras=())
    by_api = api.split(f.root, tmp_path / "api", {"train": 0.6, "val": 0.4}, seed=3)
    by_cli = run_json("split", f.root, "-o", tmp_path / "cli", "--into", "train=0.6,val=0.4", "--seed", "3")
    assert by_api.parts == by_cli["parts"] and sorted(by_api.parts) == ["train", "val"]
    listed = api.split(f.root, tmp_path / "listed", {"a": [4, 0], "b": range(1, 3)})
    assert listed.parts == {"a": [0, 4], "b": [1, 2]} and listed.left_out == [3]
    with pytest.raises(api.UsageError, match="sum to at most 1"):
        api.split(f.root, tmp_path / "bad", {"a": 0.7, "b": 0.7})
    with pytest.raises(api.UsageError, match="episode 9"):
        api.split(f.root, tmp_path / "bad", {"a": [9]})
    assert not (tmp_path / "bad").exists()


def test_typed_results_give_the_cli_json(tmp_path):
    """A result's to_json() is the command's --json report, less the envelope (and the keys only the command
    adds: delete's `dataset` and `dry_run`, validate's `strict`)."""
    from tests.helpers import run_json
    f = make_dataset(tmp_path / "d", version="v3.0", episodes=3, cameras=())
    envelope = {"command", "version", "ok", "exit_code"}

    def cli(*args) -> dict:
        return {k: v for k, v in run_json(*args).items() if k not in envelope}
    assert api.info(f.root).to_json() == cli("info", f.root, "--json") | {"dataset": str(f.root)}
    found = api.validate(f.root)
    assert found.errors == 0 and found.to_json().keys() == cli("validate", f.root, "--json").keys() - {"strict"}
    plan = api.delete(f.root, [1], tmp_path / "out", dry_run=True)
    by_cli = cli("delete", f.root, "-o", tmp_path / "out", "--episodes", "1", "--dry-run", "--json")
    assert {k: v for k, v in plan.to_json().items() if k != "seconds"} == \
        {k: v for k, v in by_cli.items() if k not in ("dataset", "dry_run", "seconds")}
    assert plan.episodes == 2 and not (tmp_path / "out").exists()


def test_the_output_rule_is_the_one_rule(tmp_path):
    """select, features and tasks without -o or --in-place stop at staging.output_target's usage error."""
    import pytest
    f = make_dataset(tmp_path / "d", version="v3.0", episodes=2, cameras=())
    for call in (lambda: api.select(f.root, state=["observation.state[0:2]"]),
                 lambda: api.features(f.root, drop=["action"]),
                 lambda: api.tasks(f.root, changes=["pick up the cube=lift the cube"]),
                 lambda: api.select(f.root, tmp_path / "o", in_place=True, state=["observation.state[0:2]"])):
        with pytest.raises(api.UsageError, match="give either -o OUTPUT or --in-place"):
            call()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
