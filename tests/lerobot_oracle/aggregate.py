"""Merge v3.0 datasets with lerobot 0.6.1's aggregate_datasets (run with the reference venv's python).

    aggregate.py OUT SRC [SRC ...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"


def main() -> int:
    from lerobot.datasets.aggregate import aggregate_datasets

    out, sources = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
    aggregate_datasets(repo_ids=[f"lerodoc/src{i}" for i in range(len(sources))], aggr_repo_id="lerodoc/merged",
                       roots=sources, aggr_root=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
