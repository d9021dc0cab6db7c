"""episodes_stats.jsonl read a run of lines at a time (issue 37): the same arrays as one pass, however the file is
cut into runs; a bad line named by its line in the file, not in its run; the memory budget charged with what is
held, so a file of 4x the budget's worth of JSON text still reads when its arrays are small."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lerodoc.errors import LerodocError
from lerodoc.formats import jsonl, v21


def _write(root, episodes: int, dims: int = 6) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = [{"episode_index": e, "stats": {f: {s: rng.random(dims).tolist() for s in ("min", "max", "mean", "std")}
                                             | {"count": [10]} for f in ("observation.state", "action")}}
            for e in range(episodes)]
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / v21.EPISODES_STATS_PATH).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _same(got, rows: list[dict]) -> None:
    assert list(got) == [r["episode_index"] for r in rows] and len(got) == len(rows)
    for r in rows:
        want = jsonl.stats_from_json(r["stats"])
        mine = got[r["episode_index"]]
        assert list(mine) == list(want)
        for feature, by_stat in want.items():
            assert list(mine[feature]) == list(by_stat)
            for stat, value in by_stat.items():
                assert (mine[feature][stat].dtype, mine[feature][stat].shape) == (value.dtype, value.shape)
                assert mine[feature][stat].tobytes() == value.tobytes(), (r["episode_index"], feature, stat)


@pytest.mark.parametrize("run_bytes", [1 << 20, 3000, 1])
def test_runs_give_the_one_pass_arrays(tmp_path, monkeypatch, run_bytes):
    """Runs of 1 MiB (the whole file), ~3 lines, and one line each give the arrays of each line's stats_from_json;
    an episode written twice keeps its last line, as a dict built line by line does."""
    monkeypatch.setattr(jsonl, "RUN_BYTES", run_bytes)
    rows = _write(tmp_path, 40)
    got = v21.read_episode_stats(tmp_path)
    assert isinstance(got, v21.StatColumns)
    _same(got, rows)
    with pytest.raises(KeyError):
        got[40]
    again = dict(rows[3], stats=rows[7]["stats"])
    with (tmp_path / v21.EPISODES_STATS_PATH).open("a") as f:
        f.write(json.dumps(again) + "\n")
    _same(v21.read_episode_stats(tmp_path), [*rows[:3], again, *rows[4:]])


def test_irregular_run_falls_back_and_names_the_file_line(tmp_path, monkeypatch):
    """A ragged stat in a late run sends the whole file line by line (still the same arrays); a bad value there is
    named by its episode, and a line nested too deep by its line number in the file."""
    monkeypatch.setattr(jsonl, "RUN_BYTES", 3000)
    rows = _write(tmp_path, 30)
    rows[25]["stats"]["action"]["min"] = rows[25]["stats"]["action"]["min"][:2]
    path = tmp_path / v21.EPISODES_STATS_PATH
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = v21.read_episode_stats(tmp_path)
    assert not isinstance(got, v21.StatColumns)
    _same(got, rows)
    rows[25]["stats"]["action"]["max"] = "high"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(LerodocError) as error:
        v21.read_episode_stats(tmp_path)
    assert error.value.episode == 25 and error.value.field == "action.max"
    rows[25]["stats"]["action"]["max"] = rows[24]["stats"]["action"]["max"]
    lines = [json.dumps(r) for r in rows]
    lines[27] = lines[27].replace('"min": [', '"min": [' + "[" * 100 + "]" * 100 + ", ", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LerodocError, match="line 28 nests lists and objects deeper than 64"):
        v21.read_episode_stats(tmp_path)


def test_budget_charges_what_is_held(tmp_path, monkeypatch):
    """A file whose parse the old whole-file estimate put at 4x the budget reads within it a run at a time
    (before: refused, the whole file's parse charged); a budget below what its arrays hold is still refused, naming
    the file."""
    rows = _write(tmp_path, 400, dims=32)
    size = (tmp_path / v21.EPISODES_STATS_PATH).stat().st_size
    held = 400 * 2 * (4 * 32 + 1) * 8
    assert size > 2 * held
    monkeypatch.setattr(jsonl, "RUN_BYTES", 64 << 10)
    monkeypatch.setenv("LERODOC_MEMORY_BUDGET", str(size))   # the whole text, parsed at 4x, is over it
    _same(v21.read_episode_stats(tmp_path), rows)
    monkeypatch.setenv("LERODOC_MEMORY_BUDGET", str(held // 2))
    with pytest.raises(LerodocError, match="per-episode stats") as error:
        v21.read_episode_stats(tmp_path)
    assert error.value.file == str(tmp_path / v21.EPISODES_STATS_PATH)


def test_a_line_longer_than_the_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A sparse file with no newline: refused after MAX_DOCUMENT_BYTES, naming line 1 (not read to its end)."""
    monkeypatch.setattr(jsonl, "MAX_DOCUMENT_BYTES", 1 << 16)
    monkeypatch.setattr(jsonl, "RUN_BYTES", 1 << 14)
    path = tmp_path / v21.EPISODES_STATS_PATH
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.write(b'{"episode_index": 0, "stats": "')
        f.truncate(1 << 30)
    with pytest.raises(LerodocError, match="line 1 holds more than 65,536 bytes"):
        v21.read_episode_stats(tmp_path)


@pytest.mark.parametrize("ragged", [False, True])
def test_episodes_take_their_stats_as_rows_of_one_table(tmp_path, monkeypatch, ragged):
    """A v2.1 dataset's episodes hold their stats as rows of one table in their own order (EpisodeStats): each
    row is the episode's stats as read (its last line where it appears twice), an episode the file does not list
    holds none, and the features the episodes' stats name are found from the table's columns (stats_features),
    whether the file read as columns or, with a ragged stat, line by line."""
    from lerodoc.formats.model import StatsRow, stats_features
    monkeypatch.setattr(jsonl, "RUN_BYTES", 3000)
    rows = _write(tmp_path, 12)
    del rows[5]
    rows.append(dict(rows[2], stats=rows[8]["stats"]))            # episode 2 again: its last line wins
    if ragged:   # a short stat, and a camera only episode 11's line names
        rows[0]["stats"]["action"]["min"] = [0.5]
        rows.append({"episode_index": 11, "stats": {"observation.images.side": {"count": [10]}}})
    (tmp_path / v21.EPISODES_STATS_PATH).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert isinstance(v21.read_episode_stats(tmp_path), v21.StatColumns) is not ragged
    listed = np.array([0, 2, 5, 9, 11], dtype=np.int64)
    holder = v21.EpisodeStats(tmp_path, listed)
    table = holder.table
    assert table.rows == 5 and table.regular is False
    last = {r["episode_index"]: r for r in rows}
    for position, episode in enumerate(listed.tolist()):
        got = StatsRow(holder, position)()
        want = jsonl.stats_from_json(last[episode]["stats"]) if episode in last else {}
        assert {f: {s: v.tolist() for s, v in by.items()} for f, by in got.items()} == \
            {f: {s: v.tolist() for s, v in by.items()} for f, by in want.items()}, episode

    class Ep:   # what stats_features reads of an Episode: its unread row
        def __init__(self, position):
            self.__dict__["_stats"] = StatsRow(holder, position)
    assert stats_features([Ep(0), Ep(1), Ep(2)]) == {"observation.state", "action"}
    assert stats_features([Ep(4)]) == ({"observation.images.side"} if ragged else {"observation.state", "action"})
    assert stats_features([Ep(2)]) == set()                         # episode 5: no line
