"""The stats family's whole-column prefilters (issue 37) never hide a finding.

`_in_order` and `_agreeing` decide for all episodes at once which ones the per-episode checks would pass, so that
only the others are looked at one by one. Here many episodes' stats are damaged in every way those checks know
(a NaN, a negative std, an order swapped, a mean, std, min or count off by less and by more than rounding, a
quantile outside the data's brackets), and validate's findings must be exactly those of the checks run on every
episode with the prefilters switched off.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from lerodoc.checks import open_context, run_checks, stats as stats_family
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli

EPISODES = 24


def damage(stats: dict, kind: str) -> None:
    state = stats["observation.state"]
    if kind == "nan":
        state["mean"][2] = float("nan")
    elif kind == "negative-std":
        state["std"][1] = -0.5
    elif kind == "swapped":
        state["min"][0], state["max"][0] = state["max"][0], state["min"][0]
    elif kind == "mean-off":
        state["mean"][3] += 0.25
    elif kind == "mean-rounding":
        state["mean"][3] = float(np.float32(state["mean"][3]))
    elif kind == "std-off":
        state["std"][4] *= 1.5
    elif kind == "min-off":
        state["min"][5] -= 1.0
    elif kind == "count-off":
        state["count"][0] += 1
    elif kind == "q01-wild":
        state["q01"][0] = state["max"][0]
    elif kind == "q99-near":
        state["q99"][1] += 1e-6 * (abs(state["q99"][1]) + 1)
    elif kind == "q50-off":
        state["q50"][2] = state["min"][2] + 0.2 * (state["max"][2] - state["min"][2])


KINDS = ["nan", "negative-std", "swapped", "mean-off", "mean-rounding", "std-off", "min-off", "count-off",
         "q01-wild", "q99-near", "q50-off"]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    root = make_dataset(tmp_path_factory.mktemp("prefilter") / "ds", version="v2.1", episodes=EPISODES,
                        lengths=[7 + (e % 5) for e in range(EPISODES)], cameras=(), noise=0.3).root
    run_cli("quantiles", root, "--in-place")   # per-episode quantiles, so the brackets are checked too
    path = root / "meta/episodes_stats.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for i, kind in enumerate(KINDS):
        damage(lines[2 * i]["stats"], kind)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def _findings(root) -> list[tuple]:
    return sorted((f.code, f.file, f.episode, f.feature, f.channel, f.message)
                  for f in run_checks(open_context(root), families=("stats",)))


def test_prefilters_change_no_finding(damaged, monkeypatch):
    fast = _findings(damaged)
    monkeypatch.setattr(stats_family, "_in_order", lambda flat, n: np.zeros(n, dtype=bool))
    monkeypatch.setattr(stats_family, "_agreeing", lambda ds, group, data, moments: np.zeros(len(group.episodes),
                                                                                             dtype=bool))
    slow = _findings(damaged)
    assert fast == slow
    flagged = {episode for _, _, episode, *_ in slow if episode is not None}
    assert len(flagged) >= 8, slow   # most damages are findings; the prefilter let none of them through


def test_prefilters_pass_the_clean_episodes(damaged):
    """The point of them: the undamaged episodes (every odd one) are decided without the one-by-one checks."""
    ctx = open_context(damaged)
    sources = stats_family._sources(ctx)
    groups = stats_family._columns(sources)
    suspect = stats_family._suspects(ctx.dataset, groups)
    unsure = stats_family._unsure(ctx.dataset, groups, stats_family._data_stats(ctx))
    odd = {e for e in range(1, EPISODES, 2)}
    assert not any("observation.state" in suspect.get(e, ()) for e in odd), suspect
    assert not any("observation.state" in unsure.get(e, ()) for e in odd), unsure
    assert all("observation.state" in unsure.get(2 * KINDS.index(k), ()) for k in
               ("mean-off", "std-off", "min-off", "count-off", "q01-wild")), unsure


def test_prefilter_in_row_chunks_decides_the_same(damaged, monkeypatch):
    """`_unsure` hands `_agreeing` AGREE_ROWS rows at a time: chunks of 5 rows (cutting through the damaged episodes)
    decide every episode as one chunk of all of them does, and the findings are the same."""
    ctx = open_context(damaged)
    groups = stats_family._columns(stats_family._sources(ctx))
    data = stats_family._data_stats(ctx)
    whole = stats_family._unsure(ctx.dataset, groups, data)
    fast = _findings(damaged)
    monkeypatch.setattr(stats_family, "AGREE_ROWS", 5)
    seen = []
    real = stats_family._agreeing
    monkeypatch.setattr(stats_family, "_agreeing", lambda *a: seen.append(len(a[1].episodes)) or real(*a))
    assert stats_family._unsure(ctx.dataset, groups, data) == whole
    assert max(seen) == 5 and len(seen) > len(groups)   # it did cut the groups
    assert _findings(damaged) == fast
    assert whole   # the damaged episodes are among the unsure ones


def test_prefilter_over_many_bracket_blocks_decides_the_same(damaged, monkeypatch):
    """A data file a unit (BATCH_ROWS 1): each file's quantile brackets are a block of their own, and `_agreeing`
    places each block's share of a group's episodes; the findings are those of one block for them all."""
    fast = _findings(damaged)
    monkeypatch.setattr(stats_family, "BATCH_ROWS", 1)
    blocks = stats_family._data_stats(open_context(damaged)).brackets["observation.state"]
    assert len(blocks) == EPISODES   # v2.1: a file an episode
    assert _findings(damaged) == fast
