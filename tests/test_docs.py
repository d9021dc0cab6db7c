"""Generated documentation matches the code it is generated from."""

from pathlib import Path

from bench.peers import catalogue_markdown, replace_between

ROOT = Path(__file__).resolve().parents[1]


def test_check_catalogue_in_docs_is_current():
    doc = (ROOT / "docs/checks.md").read_text()
    assert replace_between(doc, "catalogue", catalogue_markdown()) == doc, \
        "docs/checks.md's catalogue is stale: python -c 'from bench.peers import ...' (see tests/test_docs.py)"
