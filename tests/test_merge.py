"""merge: renumbering, exclusions, reconciliation, conflicts, exact stats, lerobot alignment."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from lerodoc import api
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats import v30
from lerodoc.ops.merge import merge, source_selections
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_episodes, rows_by_episode, run_cli
from tests.lerobot_oracle import check_with_lerobot


def expected_rows(parts):
    """State vectors, task strings and lengths of the merged episodes, in output order."""
    states, tasks, lengths = [], [], []
    for fixture, episodes in parts:
        for e in episodes:
            states.append(np.stack([fixture.expected_state(e, f) for f in range(fixture.lengths[e])]))
            tasks.append(fixture.spec.tasks[e % len(fixture.spec.tasks)])
            lengths.append(fixture.lengths[e])
    return states, tasks, lengths


def assert_stats_from_scratch(root, parts):
    """stats.json equals a from-scratch computation over the merged rows."""
    ds = Dataset.open(root)
    states, tasks, lengths = expected_rows(parts)
    values = np.concatenate(states).astype(np.float64)
    got = ds.stats["observation.state"]
    np.testing.assert_allclose(got["mean"], values.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(got["std"], values.std(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(got["min"], values.min(axis=0))
    np.testing.assert_array_equal(got["max"], values.max(axis=0))
    for q in ("q01", "q10", "q50", "q90", "q99"):
        np.testing.assert_allclose(got[q], np.quantile(values, int(q[1:]) / 100, axis=0), rtol=1e-12)
    total = sum(lengths)
    assert got["count"].tolist() == [total]
    assert ds.stats["index"]["max"].tolist() == [total - 1] and ds.stats["index"]["min"].tolist() == [0]
    assert ds.stats["episode_index"]["max"].tolist() == [len(lengths) - 1]
    task_ids = np.concatenate([[ds.tasks.index(t)] * n for t, n in zip(tasks, lengths)])
    np.testing.assert_allclose(ds.stats["task_index"]["mean"], [task_ids.mean()])
    for ep in ds.episodes:
        assert ep.stats["episode_index"]["min"].tolist() == [ep.index]
        assert ep.stats["index"]["min"].tolist() == [ep.from_index]



def sel(values: list[str], sources: list, option: str = "--exclude") -> dict:
    """The typed selections `merge` takes, read from command-line values as `lerodoc merge` reads them."""
    return source_selections(values, sources, option)

def test_two_v21_exports_one_excluded_merge_to_v30_and_load_aligned(tmp_path):
    a = make_dataset(tmp_path / "a", version="v2.1", dataset_id=1, episodes=4, codec="h264")
    b = make_dataset(tmp_path / "b", version="v2.1", dataset_id=2, episodes=3, codec="h264",
                     tasks=("place the cube", "wipe the table"))
    report = merge([a.root, b.root], tmp_path / "out", exclude=sel(["A:2"], [a.root, b.root]))
    assert [(s.episodes_out, s.excluded) for s in report.sources] == [(3, [2]), (3, [])]
    assert report.tasks == 3 and report.episodes == 6
    parts = [(a, [0, 1, 3]), (b, [0, 1, 2])]
    expect = {"fps": 30, "episodes": expect_episodes(a, [0, 1, 3]) + expect_episodes(b)}
    check_with_lerobot(tmp_path / "out", expect, backend="pyav")
    assert_stats_from_scratch(tmp_path / "out", parts)


@pytest.mark.parametrize("to", ["v3.0", "v2.1"])
def test_task_remap_and_pooled_stats_hold_without_lerobot(tmp_path, to):
    """The task remap (B's task 0 is the union's task 1) and the pooled mean/std/quantiles, checked frame by frame
    from the output's own files, so they are held where the lerobot oracle is not there (issue 35, item 9)."""
    a = make_dataset(tmp_path / "a", version="v2.1", dataset_id=1, episodes=4, lengths=[5, 9, 4, 7], cameras=())
    b = make_dataset(tmp_path / "b", version="v3.0", dataset_id=2, episodes=3, lengths=[6, 3, 8], cameras=(),
                     tasks=("place the cube", "wipe the table"))
    merge([a.root, b.root], tmp_path / "out", exclude=sel(["A:2"], [a.root, b.root]), to=to)
    parts = [(a, [0, 1, 3]), (b, [0, 1, 2])]
    if to == "v3.0":   # v2.1 keeps per-episode stats only (lerobot 0.3 pools them on load)
        assert_stats_from_scratch(tmp_path / "out", parts)
    ds = Dataset.open(tmp_path / "out")
    assert ds.tasks == ["pick up the cube", "place the cube", "wipe the table"]
    rows = rows_by_episode(tmp_path / "out")
    states, tasks, lengths = expected_rows(parts)
    assert sorted(rows) == list(range(6))
    for e, (state, task, length) in enumerate(zip(states, tasks, lengths)):
        assert [ds.tasks[t] for t in rows[e]["task_index"]] == [task] * length, e
        np.testing.assert_array_equal(np.array(rows[e]["observation.state"], dtype=np.float32), state)


@pytest.mark.parametrize("bare_first", [False, True])
def test_a_source_without_per_episode_stats_merges_with_one_that_has_quantiles(tmp_path, bare_first):
    """A source whose episodes hold no stats beside one whose episodes hold quantiles too (lerodoc quantiles -o, as
    lerobot 0.6.1 records them): the stats the first lacks are computed from its rows. (The merged rows' quantile
    columns then hold values for some episodes only, and merge stopped with an internal error.)"""
    a = make_dataset(tmp_path / "a", version="v3.0", dataset_id=1, episodes=4, lengths=[5, 9, 4, 7], cameras=())
    bare = Dataset.open(a.root)
    for ep in bare.episodes:
        ep.stats = {}
    v30.write_meta(bare.root, bare.info, bare.episodes, bare.tasks, bare.stats)
    api.quantiles(a.root, tmp_path / "q")
    assert "q01" in Dataset.open(tmp_path / "q").episodes[0].stats["observation.state"]
    assert not any(ep.stats for ep in Dataset.open(a.root).episodes)
    sources = [a.root, tmp_path / "q"] if bare_first else [tmp_path / "q", a.root]
    merge(sources, tmp_path / "out")
    assert_stats_from_scratch(tmp_path / "out", [(a, [0, 1, 2, 3]), (a, [0, 1, 2, 3])])
    for ep in Dataset.open(tmp_path / "out").episodes:
        assert ep.stats["observation.state"]["count"].tolist() == [ep.length], ep.index


def test_v30_inputs_with_a_middle_episode_excluded(tmp_path):
    a = make_dataset(tmp_path / "a", version="v3.0", dataset_id=3, episodes=5, episodes_per_file=3, codec="av1",
                     gop=2)
    b = make_dataset(tmp_path / "b", version="v3.0", dataset_id=4, episodes=4, episodes_per_file=4, codec="av1",
                     gop=2)
    report = merge([a.root, b.root], tmp_path / "out", exclude=sel(["A:1", "B:1-2"], [a.root, b.root]))
    assert report.reencoded_clips == []
    expect = {"fps": 30, "episodes": expect_episodes(a, [0, 2, 3, 4]) + expect_episodes(b, [0, 3])}
    check_with_lerobot(tmp_path / "out", expect, backend="pyav")
    assert_stats_from_scratch(tmp_path / "out", [(a, [0, 2, 3, 4]), (b, [0, 3])])


def test_mixed_versions_merge_to_v21(tmp_path):
    a = make_dataset(tmp_path / "a", version="v2.0", dataset_id=5, episodes=2)
    b = make_dataset(tmp_path / "b", version="v3.0", dataset_id=6, episodes=3)
    merge([a.root, b.root], tmp_path / "out", to="v2.1")
    ds = Dataset.open(tmp_path / "out")
    assert ds.version == "v2.1" and [e.length for e in ds.episodes] == a.lengths + b.lengths
    rows = rows_by_episode(tmp_path / "out")
    assert rows[3]["observation.state"][0] == pytest.approx(list(b.expected_state(1, 0)))
    assert rows[4]["index"][0] == sum(a.lengths) + sum(b.lengths[:2])


def test_single_source_exclude_is_deletion_and_episodes_is_a_split(tmp_path):
    a = make_dataset(tmp_path / "a", version="v2.1", dataset_id=1, episodes=5)
    merge([a.root], tmp_path / "deleted", exclude=sel(["A:0,3"], [a.root]))
    merge([a.root], tmp_path / "split", episodes=sel(["a:1-2"], [a.root], "--episodes"))
    assert [e.length for e in Dataset.open(tmp_path / "deleted").episodes] == [a.lengths[i] for i in (1, 2, 4)]
    split = rows_by_episode(tmp_path / "split")
    assert sorted(split) == [0, 1] and split[0]["frame_index"][-1] == a.lengths[1] - 1


def _set_info(root, edit):
    info = json.loads((root / "meta/info.json").read_text())
    edit(info)
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))


def test_representational_differences_are_unified_and_reported(tmp_path):
    a = make_dataset(tmp_path / "a", version="v2.1", dataset_id=1, episodes=2, vector_storage="fixed")
    b = make_dataset(tmp_path / "b", version="v2.1", dataset_id=2, episodes=2, vector_storage="list")

    def nest_and_rename(info):
        info["features"]["observation.state"]["names"] = [info["features"]["observation.state"]["names"]]
        info["features"]["action"]["fps"] = 30
        for key in ("observation.images.top", "observation.images.wrist"):
            info["features"][key]["info"]["video.codec"] = "libx264"
        info["fps"] = 30.0
    _set_info(b.root, nest_and_rename)
    lines = [json.loads(x) for x in (b.root / "meta/episodes_stats.jsonl").read_text().splitlines()]
    for line in lines:
        line["stats"]["timestamp"] = {k: [v] for k, v in line["stats"]["timestamp"].items()}  # (1,) -> (1,1)
    (b.root / "meta/episodes_stats.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = merge([a.root, b.root], tmp_path / "out")
    text = " ".join(report.reconciled)
    assert "observation.state" in text and "names" in text and "action" in text and "(1,1) -> (1,)" in text
    # B's variable-length lists are stored as the fixed-size lists lerobot 0.6.1 writes, and the report says so
    assert report.normalised_columns["observation.state"] == {"from": "list<element: float>",
                                                              "to": "fixed_size_list<item: float>[6]"}
    ds = Dataset.open(tmp_path / "out")
    assert ds.info.features["observation.state"]["names"] == [f"j{j}" for j in range(6)]
    assert all(ep.stats["timestamp"]["mean"].shape == (1,) for ep in ds.episodes)
    expect = {"fps": 30, "episodes": expect_episodes(a) + expect_episodes(b)}
    check_with_lerobot(tmp_path / "out", expect, backend="pyav")


@pytest.mark.parametrize("field, edit, words", [
    ("fps", lambda info: info.update(fps=15), ["fps", "30", "15"]),
    ("shape", lambda info: info["features"]["action"].update(shape=[7]), ["features.action.shape", "[6]", "[7]"]),
    ("codec", lambda info: info["features"]["observation.images.top"]["info"].update({"video.codec": "hevc"}),
     ["video.codec", "h264", "hevc"]),
    ("cameras", lambda info: info["features"].pop("observation.images.wrist"), ["features"]),
])
def test_conflicts_fail_before_writing_naming_both_sides(tmp_path, field, edit, words):
    a = make_dataset(tmp_path / "a", version="v2.1", dataset_id=1, episodes=2)
    b = make_dataset(tmp_path / "b", version="v2.1", dataset_id=2, episodes=2)
    _set_info(b.root, edit)
    proc = run_cli("merge", a.root, b.root, "-o", tmp_path / "out", check=False)
    assert proc.returncode == 3
    message = " ".join(proc.stderr.split())
    assert all(w in message for w in words) and str(a.root) in message and str(b.root) in message
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_selection_syntax(tmp_path):
    sources = [tmp_path / "a", tmp_path / "b"]
    chosen = source_selections(["A:1,3-5", "b:7", "B:[9, 8]"], sources, "--exclude")
    assert {i: s.resolve(range(10), "--exclude") for i, s in chosen.items()} == {0: (1, 3, 4, 5), 1: (7, 8, 9)}
    with pytest.raises(UsageError, match="no source called 'C'"):
        source_selections(["C:1"], sources, "--exclude")
    with pytest.raises(UsageError, match="'x' is not an episode number"):
        source_selections(["A:x"], sources, "--exclude")
    with pytest.raises(UsageError, match="5-3 is a reversed range"):
        source_selections(["A:5-3"], sources, "--exclude")


def test_unknown_episode_is_named(tmp_path):
    a = make_dataset(tmp_path / "a", version="v2.1", episodes=2)
    with pytest.raises(UsageError, match=r"--exclude A:9: source A \(.*\) has no episode 9 \(it holds episodes 0-1\)"):
        merge([a.root], tmp_path / "out", exclude=sel(["A:9"], [a.root]))


def test_inputs_are_not_modified(tmp_path):
    a = make_dataset(tmp_path / "a", version="v3.0", episodes=3)
    before = {p: p.read_bytes() for p in a.root.rglob("*") if p.is_file()}
    merge([a.root, a.root], tmp_path / "out", exclude=sel(["B:0"], [a.root, a.root]))
    assert before == {p: p.read_bytes() for p in a.root.rglob("*") if p.is_file()}
    assert Dataset.open(tmp_path / "out").total_frames == sum(a.lengths) + sum(a.lengths[1:])
    shutil.rmtree(tmp_path / "out")
    assert pq.read_table(a.root / "data/chunk-000/file-000.parquet").num_rows == sum(a.lengths[:2])


def test_whole_v30_video_files_are_reused_not_rewritten(tmp_path):
    a = make_dataset(tmp_path / "a", version="v3.0", dataset_id=1, episodes=4, episodes_per_file=2)
    b = make_dataset(tmp_path / "b", version="v3.0", dataset_id=2, episodes=3, episodes_per_file=3)
    merge([a.root, b.root], tmp_path / "out", exclude=sel(["A:3"], [a.root, b.root]))
    out = Dataset.open(tmp_path / "out")
    key = "observation.images.top"
    files = out.video_files(key)
    assert len(files) == 3    # A's first file as is, A's episode 2 alone, B's file as is
    assert (tmp_path / "out" / files[0]).stat().st_ino == (a.root / Dataset.open(a.root).video_files(key)[0]).stat().st_ino
    assert (tmp_path / "out" / files[2]).stat().st_ino == (b.root / Dataset.open(b.root).video_files(key)[0]).stat().st_ino
    data = out.data_files()   # A's first data file keeps its rows and numbering: reused; B's is renumbered
    assert (tmp_path / "out" / data[0]).stat().st_ino == (a.root / Dataset.open(a.root).data_files()[0]).stat().st_ino
    assert all((tmp_path / "out" / f).stat().st_nlink == 1 for f in data[1:])
    expect = {"fps": 30, "episodes": expect_episodes(a, [0, 1, 2]) + expect_episodes(b)}
    check_with_lerobot(tmp_path / "out", expect, backend="pyav")
    assert_stats_from_scratch(tmp_path / "out", [(a, [0, 1, 2]), (b, [0, 1, 2])])


def test_written_files_do_not_depend_on_workers(tmp_path):
    """The same bytes with one process or a pool: pyarrow serialises a schema read from a file and its pickled copy
    (what a worker gets) to different footer bytes, so the writers always get the pickled form."""
    a = make_dataset(tmp_path / "a", version="v3.0", episodes=4, episodes_per_file=2)   # a video job and a row job
    outs = []
    for workers in (1, 2):
        merge([a.root], tmp_path / f"out{workers}", exclude=sel(["A:1"], [a.root]), workers=workers)
        outs.append({p.relative_to(tmp_path / f"out{workers}").as_posix(): p.read_bytes()
                     for p in sorted((tmp_path / f"out{workers}").rglob("*")) if p.is_file()})
    assert outs[0] == outs[1]
