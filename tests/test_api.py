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
    for name in ("convert", "merge", "delete", "split", "select", "flatten", "quantiles", "validate", "repair",
                 "report"):
        assert name in names and getattr(api, name).__doc__, name


def test_split_takes_typed_parts_and_gives_the_cli_report(tmp_path):
    """api.split hands its fractions or episode lists to the split operation as they are (no option string in
    between): the same parts and report as the CLI's --json, and a bad fraction is the same usage error."""
    import pytest

    from tests.helpers import run_json
    f = make_dataset(tmp_path / "d", version="v3.0", episodes=5, cameras=())
    by_api = api.split(f.root, tmp_path / "api", {"train": 0.6, "val": 0.4}, seed=3)
    by_cli = run_json("split", f.root, "-o", tmp_path / "cli", "--into", "train=0.6,val=0.4", "--seed", "3")
    assert by_api["parts"] == by_cli["parts"] and sorted(by_api["parts"]) == ["train", "val"]
    listed = api.split(f.root, tmp_path / "listed", {"a": [4, 0], "b": range(1, 3)})
    assert listed["parts"] == {"a": [0, 4], "b": [1, 2]} and listed["left_out"] == [3]
    with pytest.raises(api.UsageError, match="sum to at most 1"):
        api.split(f.root, tmp_path / "bad", {"a": 0.7, "b": 0.7})
    with pytest.raises(api.UsageError, match="episode 9"):
        api.split(f.root, tmp_path / "bad", {"a": [9]})
    assert not (tmp_path / "bad").exists()
