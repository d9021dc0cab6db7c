"""Reading parquet leaves no footer behind as cyclic garbage (issue 37, the many-feature v2.1 peak).

pyarrow's `FileMetaData.schema` caches a `ParquetSchema` that points back at the footer: each footer read through it
is freed only by CPython's cycle collector, which the CLI runs rarely (`cli.GC_FIRST_THRESHOLD`). A validate of 400
one-episode files of 300 features held 470 MB of such footers (1.2 MB each in memory) and peaked at 1.1 GiB.
lerodoc reads a footer's schema through `parquet_io.footer_schema`, which makes no cycle.
"""

from __future__ import annotations

import gc

import pyarrow.parquet as pq
import pytest

from lerodoc import api
from lerodoc.checks import open_context, run_checks
from lerodoc.dataset import Dataset
from tests.fixtures.factory import make_dataset


def _footer_garbage(work) -> list:
    """The footers and parquet schemas that `work()` left as cyclic garbage."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        work()
        gc.collect()
        return [o for o in gc.garbage if isinstance(o, (pq.FileMetaData, pq.ParquetSchema))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_validate_and_merge_leave_no_footer_cycles(tmp_path, version):
    root = make_dataset(tmp_path / "ds", version=version, episodes=4, lengths=[5, 6, 7, 8], cameras=(),
                        episodes_per_file=2).root

    def work():
        run_checks(open_context(root))
        api.merge([root, root], tmp_path / "merged")
        Dataset.open(tmp_path / "merged").require_complete()

    assert _footer_garbage(work) == []


def test_footer_schema_is_the_footers_schema(tmp_path):
    from lerodoc.tables.parquet_io import footer_schema
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=2, lengths=[3, 4], cameras=()).root
    meta = pq.ParquetFile(next(root.glob("data/*/*.parquet"))).metadata
    assert footer_schema(meta).equals(meta.schema)
    assert footer_schema(meta).to_arrow_schema() == meta.schema.to_arrow_schema()
