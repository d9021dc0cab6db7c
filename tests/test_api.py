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
