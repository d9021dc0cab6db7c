"""Run units of work: a local process pool (parallel) or a Ray cluster (engine), results in unit order."""
