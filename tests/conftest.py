"""Collection order: the longest test modules first, so that with pytest-xdist (scripts/test.sh: one module per
worker) no long module starts last and leaves the other workers idle. Within a module the order is unchanged."""

from __future__ import annotations

# measured in a full run on the 2-core CI kind (longest first); modules not named keep their places after these
LONGEST = ["test_zoo_conformance", "test_journey", "test_train", "test_fuzz", "test_export", "test_edit",
           "test_json", "test_outputs", "test_untrusted", "test_zoo", "test_checks_media"]


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rsplit(".", 1)[-1], len(LONGEST)))


def pytest_runtest_setup(item):
    """Each test starts under the normal scheduler. Seen here: pytest-xdist workers ended up SCHED_FIFO at priority
    99 part way through a run (the cause was not found), and real-time processes of one priority never yield to
    each other, so a spinning child (headless Chromium) starved the rest of the run. Leaving real time is always
    allowed."""
    import os
    if hasattr(os, "sched_getscheduler") and os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
