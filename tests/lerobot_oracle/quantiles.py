"""lerobot 0.6.1's quantile augmentation on a local dataset, without its Hub push (run in the reference venv).

    quantiles.py ROOT OUT.json

Writes the seconds it took (load and compute) and the q01/q99 it found for every feature.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"


def main() -> int:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.scripts.augment_dataset_quantile_stats import compute_quantile_stats_for_dataset

    root, out = sys.argv[1], sys.argv[2]
    start = time.perf_counter()
    dataset = LeRobotDataset("lerodoc/quantiles", root=root)
    loaded = time.perf_counter()
    stats = compute_quantile_stats_for_dataset(dataset)
    done = time.perf_counter()
    with open(out, "w") as f:
        json.dump({"load_s": loaded - start, "compute_s": done - loaded,
                   "stats": {k: {q: v[q].tolist() for q in ("q01", "q99") if q in v} for k, v in stats.items()}}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
