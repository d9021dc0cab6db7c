"""Issue 37: validate's whole-column kernels against the one-episode-at-a-time rules they replace, on random layouts
(runs across files, files of no rows, episodes that come back, timestamps with every kind of defect)."""

from __future__ import annotations

import numpy as np
import pytest

from lerodoc.checks import indices, open_context, run_checks
from lerodoc.checks.common import ragged_arange
from lerodoc.checks.indices import Placement
from lerodoc.checks.timestamps import _failing, fails, measure
from tests.fixtures.defects_data import BASES, DEFECTS, TOP
from tests.fixtures.factory import make_dataset


def test_ragged_arange_is_the_spans_rows():
    rng = np.random.default_rng(0)
    starts, lengths = rng.integers(0, 1000, 200), rng.integers(0, 7, 200)
    expected = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])
    assert np.array_equal(ragged_arange(starts, lengths), expected)
    assert len(ragged_arange(np.array([5]), np.array([0]))) == 0


@pytest.mark.parametrize("seed", range(5))
def test_placement_runs_are_the_changes_of_episode_and_file(seed):
    rng = np.random.default_rng(seed)
    rows = [int(n) for n in rng.integers(0, 30, 6)]          # some files hold no row
    columns = [np.sort(rng.integers(0, 8, n)) for n in rows]   # an episode may continue into the next file
    where = Placement([f"f{i}" for i in range(len(rows))], np.array(rows, np.int64),
                      np.concatenate(columns).astype(np.int64))
    expected, offset = [], 0
    for i, episodes in enumerate(columns):                   # the per-file rule the arrays replace
        if len(episodes):
            bounds = np.flatnonzero(episodes[1:] != episodes[:-1]) + 1
            for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(episodes)]):
                expected.append((int(episodes[a]), f"f{i}", int(a), int(b), offset + int(a)))
        offset += len(episodes)
    assert [(r.episode, r.file, r.start, r.stop, r.global_start) for r in where.runs] == expected
    lo, hi = where.runs_of(np.arange(10))
    for episode in range(10):
        assert [where.runs[r] for r in where.run_order[lo[episode]:hi[episode]]] == \
            [run for run in where.runs if run.episode == episode]


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_failing_episodes_are_those_measure_rejects(version):
    rng = np.random.default_rng(1)
    fps, tol, lengths = 30, 1e-4, rng.integers(1, 40, 300)
    parts = []
    for n in lengths:                                          # clean, then one planted defect in most episodes
        ts = np.arange(n) / fps
        kind = rng.integers(0, 7)
        k = int(rng.integers(0, n))
        if kind == 1:
            ts = ts + 0.5                                      # offset start
        elif kind == 2:
            ts[k] -= 0.02                                      # a step back
        elif kind == 3:
            ts[k:] += 1 / fps                                  # a skipped frame
        elif kind == 4:
            ts = ts + np.arange(n) * 2e-5                      # drift, every step within tolerance
        elif kind == 5:
            ts[k] = np.nan
        elif kind == 6:
            ts[k] += 5e-5                                      # within tolerance: passes
        parts.append(ts)
    ts_all = np.concatenate(parts)
    start = np.r_[0, np.cumsum(lengths)[:-1]]
    index = np.arange(len(lengths))
    owner = np.repeat(index, lengths)
    owner[start[7]] = 99                                       # episode 7's rows are not all its own: left out
    got = _failing(ts_all, owner, start, lengths, index, fps, tol, version)
    expected = np.array([fails(measure(p, fps, tol), version, tol) for p in parts])
    unowned = _failing(ts_all, None, start, lengths, index, fps, tol, version)   # a file without episode_index
    assert np.array_equal(unowned, expected)
    expected[7] = False
    assert np.array_equal(got, expected) and 0 < expected.sum() < len(expected)
    assert np.array_equal(_failing(ts_all.astype(np.float32), owner, start, lengths, index, fps, tol, version),
                          [fails(measure(p.astype(np.float32).astype(np.float64), fps, tol), version, tol) and e != 7
                           for e, p in enumerate(parts)])   # float32 timestamps measured in float64, as one by one


@pytest.mark.parametrize("family, case", [("indices", "wrong_frame_index"), ("indices", "wrong_global_index"),
                                          ("tasks", "unresolvable_task_index"), ("tasks", "episode_lists_another_task")])
def test_row_columns_in_chunks_find_what_one_chunk_finds(family, case, tmp_path, monkeypatch):
    """The indices family compares frame_index and index, and the tasks family resolves task_index, ROW_CHUNK rows at
    a time (issue 37: a million episodes' columns without 80 MB temporaries each): chunks of 3 rows, which cut through
    every episode, find the same first wrong row of the same episodes, with the same counts and values (and the same
    unlisted tasks, TSK005), as one chunk of all rows."""
    from lerodoc.checks import tasks
    from tests.test_check_codes import CASES
    version, plant = DEFECTS[case] if case in DEFECTS else CASES[case]
    root = tmp_path / case
    make_dataset(root, **BASES[version])
    planted = plant(root)
    whole = [(f.code, f.file, f.episode, f.message) for f in run_checks(open_context(root), (family,))]
    assert any((code, file, episode) == (planted[0].code, planted[0].file, planted[0].episode)
               for code, file, episode, _ in whole), whole
    monkeypatch.setattr({"indices": indices, "tasks": tasks}[family], "ROW_CHUNK", 3)
    assert [(f.code, f.file, f.episode, f.message) for f in run_checks(open_context(root), (family,))] == whole


@pytest.mark.parametrize("case", ["unresolvable_task_index", "wrong_frame_index", "jitter_timestamps", "shift_window"])
def test_families_find_the_same_after_earlier_ones_let_go(case, tmp_path, monkeypatch):
    """run_checks lets go of the data files' bookkeeping columns, and of the caches made from them, once no later
    family reads them (checks.READS: 40-80 MB a column at a million episodes); a family that runs after others let
    go finds what it finds alone, whether its cache (placement, the timestamps' rows) was made before or not. (No
    numeric columns kept for the stats family: a file holding them keeps its bookkeeping ones until stats ran.)"""
    from lerodoc.checks import FAMILIES, common
    monkeypatch.setattr(common, "KEEP_SHARE", 1 << 62)
    from tests.fixtures import defects_media as media
    media_plants = {"jitter_timestamps": ("v3.0", lambda root: media.jitter_timestamps(root, 1)),
                    "shift_window": ("v3.0", lambda root: media.shift_window(root, 2, TOP, 0.5))}
    version, plant = DEFECTS[case] if case in DEFECTS else media_plants[case]
    root = tmp_path / case
    make_dataset(root, **BASES[version])
    plant(root)

    def found(families):
        return [(f.code, f.file, f.episode, f.message) for f in run_checks(open_context(root, videos=True), families)]
    alone = {name: found((name,)) for name in FAMILIES}
    assert any(alone.values())
    for later in FAMILIES:   # each family after layout alone (its caches made late) and after all before it
        assert found(("layout", later))[len(alone["layout"]):] == alone[later], later
    assert found(FAMILIES) == [f for name in FAMILIES for f in alone[name]]
