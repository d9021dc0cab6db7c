"""delete, split, tasks, features: the stream-copy edit commands.

Each command runs through the CLI on factory datasets whose frames carry their identity, and on members of
the writer zoo. Every output's values are compared with the source here, and every v3.0 output is loaded by
lerobot 0.6.1's LeRobotDataset with every frame checked (all of them in one lerobot start-up).
"""

from __future__ import annotations

import copy
import hashlib
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_episodes, expect_from_fixture, rows_by_episode, run_cli, run_json
from tests.lerobot_oracle import check_many_with_lerobot
from tests.zoo import members

ZOO = {m.name: m for m in members() if m.name in ("lerobot-0.6.1-record", "lerobot-0.4.4-record",
                                                    "export-v30-images")}
TOP, WRIST = "observation.images.top", "observation.images.wrist"


def tree_digests(root) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.blake2b(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def same_rows(out_rows: dict, src_rows: dict, mapping: dict[int, int], skip=("episode_index", "index"),
              tasks: tuple[list[str], list[str]] | None = None) -> None:
    """Output episode e holds exactly source episode mapping[e]'s values (but the renumbered columns); with
    `tasks` (the output's and the source's task lists) task_index is compared as the task text it names."""
    assert sorted(out_rows) == sorted(mapping)
    for new, old in mapping.items():
        for column, values in src_rows[old].items():
            if column in skip:
                continue
            if column == "task_index" and tasks is not None:
                assert [tasks[0][i] for i in out_rows[new][column]] == [tasks[1][i] for i in values], (new, old)
            else:
                assert out_rows[new][column] == values, (new, old, column)


def task_lists(out, src) -> tuple[list[str], list[str]]:
    return Dataset.open(out).tasks, Dataset.open(src).tasks


def assert_exact_stats(root) -> None:
    """stats.json of observation.state equals a from-scratch computation over the dataset's rows."""
    ds = Dataset.open(root)
    values = np.concatenate([np.asarray(r["observation.state"], dtype=np.float64)
                             for r in rows_by_episode(root).values()])
    got = ds.stats["observation.state"]
    assert got["count"].tolist() == [len(values)] == [ds.total_frames]
    np.testing.assert_array_equal(got["min"], values.min(axis=0))
    np.testing.assert_array_equal(got["max"], values.max(axis=0))
    np.testing.assert_allclose(got["mean"], values.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(got["q50"], np.quantile(values, 0.5, axis=0), rtol=1e-12)
    for ep in ds.episodes:
        assert ep.stats["observation.state"]["count"].tolist() == [ep.length]


def zoo_expect(member, episodes: list[int] | None = None, **edits) -> dict:
    expect = copy.deepcopy(member.expect)
    if episodes is not None:
        expect["episodes"] = [expect["episodes"][i] for i in episodes]
    for key in ("total_frames", "total_episodes"):
        expect.pop(key, None)
    return expect


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Sources, outputs and lerobot expectations: label -> dict(src, out, report, expect, ...)."""
    tmp = tmp_path_factory.mktemp("edit")
    out: dict[str, dict] = {}

    a = make_dataset(tmp / "a", version="v3.0", dataset_id=1, episodes=6, episodes_per_file=2)
    a_before = tree_digests(a.root)
    out["delete"] = {"src": a, "report": run_json("delete", a.root, "-o", tmp / "a_del", "--episodes", "1,3-4"),
                     "out": tmp / "a_del", "expect": {**expect_from_fixture(a), "episodes": expect_episodes(a, [0, 2, 5])},
                     "mapping": {0: 0, 1: 2, 2: 5}}
    for label, seed in (("split-seed7", 7), ("split-seed7b", 7)):
        out[label] = {"src": a, "out": tmp / label,
                      "report": run_json("split", a.root, "-o", tmp / label, "--into", "train=0.5,val=0.5",
                                         "--seed", str(seed))}
    parts = out["split-seed7"]["report"]["parts"]
    for name, eps in parts.items():
        out[f"split-{name}"] = {"src": a, "out": tmp / "split-seed7" / name, "mapping": dict(enumerate(eps)),
                                "expect": {**expect_from_fixture(a), "episodes": expect_episodes(a, eps)}}
    out["tasks-rename"] = {"src": a, "out": tmp / "a_tasks", "report": run_json(
        "tasks", a.root, "-o", tmp / "a_tasks", "--set", "place the cube=put the cube down")}
    out["tasks-rename"]["expect"] = {**expect_from_fixture(a), "episodes": [
        {**e, "task": e["task"].replace("place the cube", "put the cube down")} for e in expect_episodes(a)]}
    out["tasks-join"] = {"src": a, "out": tmp / "a_join", "report": run_json(
        "tasks", a.root, "-o", tmp / "a_join", "--set", "place the cube=pick up the cube")}
    out["tasks-join"]["expect"] = {**expect_from_fixture(a), "episodes": [
        {**e, "task": "pick up the cube"} for e in expect_episodes(a)]}
    out["features"] = {"src": a, "out": tmp / "a_feat", "report": run_json(
        "features", a.root, "-o", tmp / "a_feat", "--drop", WRIST, "--rename", f"{TOP}=observation.images.front",
        "--rename", "action=action.joints")}
    episodes = expect_episodes(a)
    for e in episodes:
        e["identity"]["cameras"] = {"observation.images.front": 0}
        e["values"]["action.joints"] = e["values"].pop("action")
    out["features"]["expect"] = {"fps": 30, "video_keys": ["observation.images.front"], "episodes": episodes}
    out["a_before"], out["a_after"] = a_before, tree_digests(a.root)

    # v3.0 files encoded continuously: episodes past the first of a file do not start on a keyframe
    k = make_dataset(tmp / "k", version="v3.0", dataset_id=2, episodes=4, episodes_per_file=4, gop=1000,
                     keyframe_at_episode_start=False)
    out["split-keyframes"] = {"src": k, "report": run_json("split", k.root, "-o", tmp / "k_split", "--episodes",
                                                           "odd:1,3", "--episodes", "even:0,2")}
    out["split-keyframes-v21"] = {"src": k, "report": run_json("split", k.root, "-o", tmp / "k_split21", "--episodes",
                                                               "odd:1,3", "--episodes", "even:0,2", "--to", "v2.1")}
    for name, eps in (("odd", [1, 3]), ("even", [0, 2])):
        out[f"split-keyframes-{name}"] = {"src": k, "out": tmp / "k_split" / name,
                                          "expect": {**expect_from_fixture(k), "episodes": expect_episodes(k, eps)}}
        run_cli("convert", tmp / "k_split21" / name, "-o", tmp / f"k_{name}30", "--to", "v3.0")
        out[f"split-keyframes-v21-{name}"] = {"src": k, "out": tmp / f"k_{name}30",
                                              "expect": {**expect_from_fixture(k), "episodes": expect_episodes(k, eps)}}

    for name, member in ZOO.items():
        n = len(member.expect["episodes"])
        work = tmp / name
        run_cli("delete", member.root, "-o", work / "delete", "--episodes", "1")
        out[f"{name}:delete"] = {"out": work / "delete", "expect": zoo_expect(member, [i for i in range(n) if i != 1])}
        run_cli("split", member.root, "-o", work / "split", "--episodes", f"first:0,rest:1-{n - 1}")
        out[f"{name}:split-first"] = {"out": work / "split/first", "expect": zoo_expect(member, [0])}
        out[f"{name}:split-rest"] = {"out": work / "split/rest", "expect": zoo_expect(member, list(range(1, n)))}
        old = member.expect["episodes"][0]["task"]
        run_cli("tasks", member.root, "-o", work / "tasks", "--set", f"{old}=do it")
        expect = zoo_expect(member)
        for e in expect["episodes"]:
            e["task"] = "do it" if e["task"] == old else e["task"]
        out[f"{name}:tasks"] = {"out": work / "tasks", "expect": expect}
        camera = sorted(member.expect["episodes"][0]["identity"]["cameras"])[0]
        run_cli("features", member.root, "-o", work / "features", "--rename", f"{camera}=observation.images.renamed",
                "--rename", "observation.state=observation.state.renamed")
        expect = zoo_expect(member)
        expect["video_keys"] = ["observation.images.renamed" if k == camera else k for k in expect["video_keys"]]
        for e in expect["episodes"]:
            cams = e["identity"]["cameras"]
            cams["observation.images.renamed"] = cams.pop(camera)
            e["values"]["observation.state.renamed"] = e["values"].pop("observation.state")
        out[f"{name}:features"] = {"out": work / "features", "expect": expect}
    return out


def test_delete_renumbers_keeps_values_and_stats_exact_and_leaves_the_input(built):
    case = built["delete"]
    assert case["report"]["episodes"] == 3 and case["report"]["sources"][0]["excluded"] == [1, 3, 4]
    assert case["report"]["to_version"] == "v3.0"
    same_rows(rows_by_episode(case["out"]), rows_by_episode(case["src"].root), case["mapping"],
              tasks=task_lists(case["out"], case["src"].root))
    assert_exact_stats(case["out"])
    assert built["a_before"] == built["a_after"]


def test_delete_dry_run_writes_nothing_and_in_place_swaps(tmp_path):
    f = make_dataset(tmp_path / "b", version="v2.1", dataset_id=3, episodes=4)
    src_rows, src_tasks = rows_by_episode(f.root), Dataset.open(f.root).tasks
    plan = run_json("delete", f.root, "--episodes", "0,2", "--dry-run")
    assert plan["dry_run"] and plan["episodes"] == 2 and plan["frames"] == f.lengths[1] + f.lengths[3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"] and rows_by_episode(f.root) == src_rows
    run_cli("delete", f.root, "--in-place", "--episodes", "0,2")
    ds = Dataset.open(f.root)
    assert ds.version == "v3.0" and [e.length for e in ds.episodes] == [f.lengths[1], f.lengths[3]]
    same_rows(rows_by_episode(f.root), src_rows, {0: 1, 1: 3}, tasks=(ds.tasks, src_tasks))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]   # no temp or old tree left behind


@pytest.mark.parametrize("args, words", [
    (["--episodes", "9"], "--episodes 9: the dataset has no episode 9 (it holds episodes 0-3)"),
    (["--episodes", "2-6"], "--episodes 2-6: the dataset has no episode 6 (it holds episodes 0-3)"),
    (["--episodes", "[1, 7]"], "the dataset has no episode 7 (it holds episodes 0-3)"),
    (["--episodes", "0-3"], "that is every episode of the dataset (0-3); nothing would be left"),
    (["--episodes", "5-3"], "--episodes '5-3': 5-3 is a reversed range (write 3-5)"),
    (["--episodes", "x"], "'x' is not an episode number or range"),
    (["--episodes", "[1, -2]"], "not a JSON list of episode numbers"),
    (["--episodes", "[]"], "no episode given"),
])
def test_delete_bad_selections_are_usage_errors_in_deletes_words(tmp_path, args, words):
    f = make_dataset(tmp_path / "c", version="v3.0", episodes=4, cameras=())
    proc = run_cli("delete", f.root, "-o", tmp_path / "out", *args, check=False)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and words in message, proc.stderr
    assert "source A" not in message and "--exclude" not in message and "Traceback" not in message
    assert not (tmp_path / "out").exists()


def test_delete_takes_lerobots_json_list_and_drops_tasks_no_episode_uses(tmp_path):
    f = make_dataset(tmp_path / "d", version="v3.0", episodes=4, cameras=(), tasks=("pick", "place", "wipe", "stack"))
    src_rows, src_tasks = rows_by_episode(f.root), Dataset.open(f.root).tasks
    assert [Dataset.open(f.root).episodes[e].tasks for e in (1, 3)] == [["place"], ["stack"]]
    report = run_json("delete", f.root, "-o", tmp_path / "out", "--episodes", "[3, 1]")   # lerobot's syntax
    out = Dataset.open(tmp_path / "out")
    assert report["sources"][0]["excluded"] == [1, 3] and report["tasks"] == 2
    assert out.tasks == ["pick", "wipe"] and [ep.tasks for ep in out.episodes] == [["pick"], ["wipe"]]
    same_rows(rows_by_episode(tmp_path / "out"), src_rows, {0: 0, 1: 2}, tasks=(out.tasks, src_tasks))


def test_split_parts_are_complete_seeded_and_exact(built):
    parts = built["split-seed7"]["report"]["parts"]
    assert sorted(e for eps in parts.values() for e in eps) == list(range(6)) and len(parts["val"]) == 3
    assert parts == built["split-seed7b"]["report"]["parts"]          # the seed decides
    assert parts == {"train": [0, 2, 5], "val": [1, 3, 4]}            # numpy.random.default_rng(7), not in order
    src = rows_by_episode(built["delete"]["src"].root)
    for name in parts:
        case = built[f"split-{name}"]
        same_rows(rows_by_episode(case["out"]), src, case["mapping"],
                  tasks=task_lists(case["out"], built["delete"]["src"].root))
        assert_exact_stats(case["out"])
    out = built["split-seed7"]["out"]
    assert sorted(p.name for p in out.iterdir()) == [".lerodoc-split.json", "train", "val"]
    assert json.loads((out / ".lerodoc-split.json").read_text())["parts"] == ["train", "val"]   # --force may replace it


def test_split_without_seed_is_in_order_and_bad_parts_are_refused(tmp_path):
    from lerodoc.ops.split import assign_fractions, parse_parts, resolve_parts
    assert assign_fractions(list(range(10)), {"train": 0.9, "val": 0.1}, None) == {"train": list(range(9)),
                                                                                   "val": [9]}
    assert resolve_parts(parse_parts(["train:0-2,5", "val:3"]), list(range(6))) == {"train": [0, 1, 2, 5],
                                                                                   "val": [3]}
    f = make_dataset(tmp_path / "d", version="v2.1", episodes=3, cameras=())
    assert resolve_parts(parse_parts(["train:[0, 5, 1],val:3-4"]), list(range(6))) == {"train": [0, 1, 5],
                                                                                       "val": [3, 4]}
    for args, words in ((["--episodes", "a:0-1,b:1"], "episode 1 is in both"),
                        (["--into", "a=0.9,b=0.05"], "would hold no episode"),
                        (["--into", "a=0.7,b=0.7"], "sum to at most 1"),
                        (["--episodes", "a:7"], "--episodes a:7: the dataset has no episode 7 (it holds episodes 0-2)"),
                        (["--episodes", "a:[0, 9]"], "the dataset has no episode 9 (it holds episodes 0-2)"),
                        (["--episodes", "a:2-1"], "2-1 is a reversed range (write 1-2)")):
        proc = run_cli("split", f.root, "-o", tmp_path / "out", *args, check=False)
        message = " ".join(proc.stderr.split())
        assert proc.returncode == 2 and words in message, (args, proc.stderr)
        assert not (tmp_path / "out").exists()
    report = run_json("split", f.root, "-o", tmp_path / "v30", "--episodes", "x:[2],y:0")
    assert report["left_out"] == [1]
    assert [Dataset.open(tmp_path / "v30" / p).version for p in "xy"] == ["v3.0", "v3.0"]
    run_cli("split", f.root, "-o", tmp_path / "v21", "--episodes", "x:[2],y:0", "--to", "v2.1")
    assert [Dataset.open(tmp_path / "v21" / p).version for p in "xy"] == ["v2.1", "v2.1"]


def test_split_parts_list_only_the_tasks_their_episodes_use(built):
    """As lerobot's split_dataset: a part's tasks are those its frames use (task_index renumbered to them); the
    parts load in lerobot 0.6.1 with each frame's task text (test_every_output_loads_aligned_in_lerobot)."""
    source = Dataset.open(built["split-keyframes"]["src"].root).tasks
    assert source == ["pick up the cube", "place the cube"]
    for label in ("split-keyframes", "split-keyframes-v21"):
        reports = built[label]["report"]["reports"]
        assert reports["odd"]["tasks"] == reports["even"]["tasks"] == 1, label
    for name, task in (("odd", "place the cube"), ("even", "pick up the cube")):
        out = built[f"split-keyframes-{name}"]["out"]
        assert Dataset.open(out).tasks == [task]
        assert {t for r in rows_by_episode(out).values() for t in r["task_index"]} == {0}


def test_split_reencodes_only_clips_off_a_keyframe_and_says_which(built):
    """Files encoded continuously: only the clips that do not start on a keyframe are re-encoded, and listed,
    whether the parts are v3.0 (joined files) or v2.1 (one file per episode)."""
    for label in ("split-keyframes", "split-keyframes-v21"):
        report = built[label]["report"]
        odd = report["reports"]["odd"]["reencoded_clips"]
        even = report["reports"]["even"]["reencoded_clips"]
        # source episode 0 starts its file on a keyframe; 1, 2 and 3 start mid-GOP
        assert {c["episode"] for c in even} == {1} and {c["episode"] for c in odd} == {0, 1}, label
        assert len(odd) == 4 and len(even) == 2, label   # both cameras
    assert not list(built["split-keyframes"]["src"].root.parent.glob("k_split/**/.reencoded*"))


def test_tasks_rename_keeps_task_index_and_join_repoints(built):
    src_rows = rows_by_episode(built["delete"]["src"].root)
    renamed = built["tasks-rename"]
    assert renamed["report"]["task_map"] == [0, 1]
    ds = Dataset.open(renamed["out"])
    assert ds.tasks == ["pick up the cube", "put the cube down"]
    assert [e.tasks for e in ds.episodes][:2] == [["pick up the cube"], ["put the cube down"]]
    same_rows(rows_by_episode(renamed["out"]), src_rows, {e: e for e in src_rows}, skip=())
    joined = built["tasks-join"]
    ds = Dataset.open(joined["out"])
    assert ds.tasks == ["pick up the cube"] and joined["report"]["merged"] == {
        "pick up the cube": ["pick up the cube", "place the cube"]}
    rows = rows_by_episode(joined["out"])
    assert {t for r in rows.values() for t in r["task_index"]} == {0}
    same_rows(rows, src_rows, {e: e for e in src_rows}, skip=("task_index",))
    assert ds.stats["task_index"]["max"].tolist() == [0] and ds.info.total_tasks == 1


def test_tasks_that_move_no_task_index_keep_data_and_videos_byte_identical(built, tmp_path):
    src, out = built["tasks-rename"]["src"].root, built["tasks-rename"]["out"]
    before, after = tree_digests(src), tree_digests(out)
    kept = [k for k in before if k.startswith(("data/", "videos/"))]
    assert kept and all(after[k] == before[k] for k in kept)
    assert (out / kept[0]).stat().st_ino == (src / kept[0]).stat().st_ino   # the same file, not a copy
    assert after["meta/tasks.parquet"] != before["meta/tasks.parquet"]
    # a v2.1 dataset's edit is written as v3.0 (converted on the way): the same rows, the new task texts
    f = make_dataset(tmp_path / "v21", version="v2.1", episodes=2)
    run_cli("tasks", f.root, "-o", tmp_path / "out", "--set", "place the cube=put it down")
    out = Dataset.open(tmp_path / "out")
    assert out.version == "v3.0" and out.tasks == ["pick up the cube", "put it down"]
    assert rows_by_episode(tmp_path / "out") == rows_by_episode(f.root)
    # a join re-points task_index
    run_cli("tasks", f.root, "-o", tmp_path / "join", "--set", "place the cube=pick up the cube")
    assert {t for r in rows_by_episode(tmp_path / "join").values() for t in r["task_index"]} == {0}


@pytest.mark.parametrize("args", [("tasks", "--set", "place the cube=put it down"), ("features", "--drop", "action")])
def test_tasks_and_features_refuse_v20_pointing_to_convert(tmp_path, args):
    f = make_dataset(tmp_path / "v20", version="v2.0", episodes=2)
    before = tree_digests(f.root)
    proc = run_cli(args[0], f.root, "-o", tmp_path / "out", *args[1:], check=False)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "lerodoc convert" in proc.stderr
    assert not (tmp_path / "out").exists() and tree_digests(f.root) == before


def test_tasks_from_file_dry_run_and_unknown_text(tmp_path):
    f = make_dataset(tmp_path / "t", version="v2.1", episodes=3, cameras=())
    (tmp_path / "tasks.json").write_text(json.dumps(["grab", "grab"]))
    plan = run_json("tasks", f.root, "--from", tmp_path / "tasks.json", "--dry-run")
    assert plan["tasks"] == ["grab"] and plan["task_map"] == [0, 0] and plan["output"] is None
    run_cli("tasks", f.root, "-o", tmp_path / "out", "--from", tmp_path / "tasks.json")
    assert Dataset.open(tmp_path / "out").tasks == ["grab"]
    assert {t for r in rows_by_episode(tmp_path / "out").values() for t in r["task_index"]} == {0}
    assert [e.tasks for e in Dataset.open(tmp_path / "out").episodes] == [["grab"]] * 3
    proc = run_cli("tasks", f.root, "-o", tmp_path / "o2", "--set", "nope=x", check=False)
    assert proc.returncode == 2 and "no task reads 'nope'" in proc.stderr
    # `=` inside a task text: the split taken is the one naming an existing task
    run_cli("tasks", f.root, "-o", tmp_path / "o3", "--set", "pick up the cube=a=b")
    assert Dataset.open(tmp_path / "o3").tasks[0] == "a=b"


def test_features_drop_and_rename_follow_everywhere(built):
    case = built["features"]
    ds = Dataset.open(case["out"])
    assert WRIST not in ds.info.features and TOP not in ds.info.features and "action" not in ds.info.features
    assert ds.info.video_keys == ["observation.images.front"]
    assert set(ds.stats) >= {"observation.images.front", "action.joints"} and WRIST not in ds.stats
    for ep in ds.episodes:
        assert set(ep.videos) == {"observation.images.front"} and "action.joints" in ep.stats
    files = sorted(p.relative_to(case["out"]).as_posix() for p in case["out"].rglob("*.mp4"))
    src = case["src"].root
    assert files == sorted(p.relative_to(src).as_posix().replace(TOP, "observation.images.front")
                           for p in src.rglob(f"videos/{TOP}/**/*.mp4"))
    for rel in files:   # byte for byte
        assert (case["out"] / rel).read_bytes() == (src / rel.replace("observation.images.front", TOP)).read_bytes()
    names = pq.read_schema(case["out"] / ds.episodes[0].data_file).names
    assert "action.joints" in names and "action" not in names
    src_rows, out_rows = rows_by_episode(src), rows_by_episode(case["out"])
    for e in src_rows:
        assert out_rows[e]["action.joints"] == src_rows[e]["action"]
        assert out_rows[e]["observation.state"] == src_rows[e]["observation.state"]
    np.testing.assert_array_equal(ds.stats["action.joints"]["q99"], Dataset.open(src).stats["action"]["q99"])


def test_features_v21_and_refusals(tmp_path):
    f = make_dataset(tmp_path / "v", version="v2.1", episodes=2)
    report = run_json("features", f.root, "-o", tmp_path / "out", "--drop", "observation.state",
                      "--rename", f"{WRIST}=observation.images.hand")
    assert report["files_moved"] == 2 and report["dropped"] == ["observation.state"]
    ds = Dataset.open(tmp_path / "out")
    assert sorted(ds.info.video_keys) == ["observation.images.hand", TOP]
    assert all(set(ep.stats) & {"observation.state", WRIST} == set() for ep in ds.episodes)
    assert sorted(p.relative_to(tmp_path / "out").parts[1] for p in (tmp_path / "out").rglob("*.mp4")) == \
        ["observation.images.hand", TOP]   # v3.0 (converted on the way): one file a camera
    run_cli("validate", tmp_path / "out")
    for args, words in ((["--drop", "index"], "index column"), (["--drop", "nope"], "no feature 'nope'"),
                        (["--rename", f"action={TOP}"], "already a feature"), (["--rename", "action"], "OLD=NEW")):
        proc = run_cli("features", f.root, "-o", tmp_path / "bad", *args, check=False)
        assert proc.returncode == 2 and words in proc.stderr, (args, proc.stderr)
    plan = run_json("features", f.root, "--drop", TOP, "--dry-run")
    assert plan["cameras_dropped"] == [TOP] and plan["files_left_out"] == 2 and not (tmp_path / "bad").exists()


def test_zoo_members_are_edited(built):
    assert set(ZOO) == {"lerobot-0.6.1-record", "lerobot-0.4.4-record", "export-v30-images"}
    for name, member in ZOO.items():
        assert Dataset.open(built[f"{name}:delete"]["out"]).total_frames == sum(
            e["length"] for i, e in enumerate(member.expect["episodes"]) if i != 1)
        ds = Dataset.open(built[f"{name}:features"]["out"])
        assert "observation.state.renamed" in ds.info.features and "observation.state" not in ds.info.features


def test_every_output_loads_aligned_in_lerobot(built):
    jobs = [(label, case) for label, case in built.items() if isinstance(case, dict) and "expect" in case]
    assert len(jobs) >= 20
    reports = check_many_with_lerobot([{"root": str(case["out"]), "expect": case["expect"], "backend": "pyav"}
                                       for _, case in jobs])
    bad = {label: report.get("problems") for (label, _), report in zip(jobs, reports) if not report["ok"]}
    assert bad == {}
    for (label, case), report in zip(jobs, reports):
        assert report["frames_checked"] == sum(e["length"] for e in case["expect"]["episodes"]), label
        assert report["misaligned"] == 0 and report["value_mismatches"] == 0, label


def test_split_reads_its_sources_stats_table_once_for_every_part(tmp_path, monkeypatch):
    """A part's rewrite lets its source's stats table go once its rows are copied; within the stats budget split
    keeps it for the next part instead of reading it again. A table past the budget (transient) goes all the same."""
    from lerodoc.formats import v30
    from lerodoc.ops.split import split
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=9, lengths=6, cameras=()).root
    real, reads = v30._stats_table, []
    monkeypatch.setattr(v30, "_stats_table", lambda path: reads.append(path) or real(path))
    split(root, tmp_path / "parts", fractions={"a": 0.4, "b": 0.3, "c": 0.3})
    assert len(reads) == 1
    assert sum(len(Dataset.open(tmp_path / "parts" / name).episodes) for name in ("a", "b", "c")) == 9

    holder = v30.StatsColumns(next(root.glob("meta/episodes/*/*.parquet")))
    holder.keep = True
    held = holder.table
    holder.release()
    assert holder.table is held                 # kept
    holder.transient = True
    holder.release()
    assert holder.table is not held             # past the budget: let go, read again


def test_repair_asks_a_transient_stats_table_whether_it_is_clean_in_one_read(tmp_path, monkeypatch):
    """Whether repair has anything to clean in a table's stats (normal against the features, and finite) is asked of
    one read of a table past the stats budget: at a million episodes each read is gigabytes."""
    from lerodoc.formats import v30
    from lerodoc.formats.model import stats_clean, stats_row
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=5, lengths=4, cameras=()).root
    real, reads = v30._stats_table, []
    monkeypatch.setattr(v30, "_stats_table", lambda path: reads.append(path) or real(path))
    ds = Dataset.open(root)
    row = stats_row(ds.episodes[0])
    row.holder.transient = True
    assert stats_clean(row, ds.info.features) is True
    assert len(reads) == 1 and row.holder._table is None     # read once for both answers, then let go
    assert all(stats_clean(stats_row(ep), ds.info.features) for ep in ds.episodes)
    assert len(reads) == 1                                  # kept across the release
