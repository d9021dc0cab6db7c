"""repair: every fixable planted defect is gone afterwards, what is not fixable is named, and the
result loads in lerobot 0.6.1 with its frames aligned."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from lerodoc.checks import open_context, run_checks
from lerodoc.checks.common import ERROR
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.formats.info import channels_last
from lerodoc.ops.repair import repair
from tests.fixtures.defects_data import BASES, DEFECTS
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_from_fixture, rows_by_episode, run_cli
from tests.lerobot_oracle import summarize

# Planted defects that need a human: data that cannot be read or is ambiguous (repair refuses with a
# clear error) and channels that need choosing (validate keeps warning).
REFUSED = {"truncated_parquet", "malformed_info_json", "truncated_episodes_metadata", "stray_data_file",
           "unresolvable_task_index", "nan_in_data", "missing_data_file"}
STILL_WARNED = {"extreme_channel_recomputed": "STA031"}


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    return {version: make_dataset(root / version, **spec) for version, spec in BASES.items()}


@pytest.fixture(scope="module")
def repaired(bases, tmp_path_factory) -> dict[str, tuple[set[str], object, object]]:
    """Each planted defect repair takes on (not REFUSED): name -> (planted codes, report, output root), each
    planted and repaired once for the tests below."""
    out = {}
    for name in sorted(set(DEFECTS) - REFUSED):
        version, plant = DEFECTS[name]
        work = tmp_path_factory.mktemp(name)
        root = work / "ds"
        shutil.copytree(bases[version].root, root)
        planted = {p.code for p in plant(root)}
        out[name] = (planted, repair(root, work / "out"), work / "out")
    return out


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_repair_fixes_what_is_fixable_and_refuses_the_rest(bases, repaired, tmp_path, name):
    if name in REFUSED:
        version, plant = DEFECTS[name]
        root = tmp_path / "ds"
        shutil.copytree(bases[version].root, root)
        plant(root)
        with pytest.raises(LerodocError):
            repair(root, tmp_path / "out")
        assert not (tmp_path / "out").exists()
        return
    planted, report, out = repaired[name]
    after = run_checks(open_context(out, videos=True))
    assert [f for f in after if f.severity == ERROR] == []
    # repair validates its input and its output without recomputing per-episode stats (it replaces the input's
    # with the exact stats of the rows it writes): with them recomputed, the output's findings are the ones it
    # reported
    assert [(s["of"], s["family"]) for s in report.skipped] == [("input", "stats"), ("output", "stats")]
    assert dict(Counter(f.code for f in after)) == report.after, name
    if name in STILL_WARNED:
        assert STILL_WARNED[name] in {f.code for f in after}
    else:
        assert not planted & {f.code for f in after}, report.remaining


@pytest.fixture(scope="module")
def lerobot_on_repaired(bases, repaired, tmp_path_factory) -> dict[str, dict]:
    """LeRobotDataset 0.6.1 on every repaired output (a v2.1 one converted to v3.0 by lerodoc first, as 0.6.1
    loads v3.0 only), all in one interpreter; 8 frames per episode (first, last, 6 between) of every camera checked
    against their identity and their state/action values against the factory's formula (except where the defect
    changed the values)."""
    from tests.lerobot_oracle import check_many_with_lerobot
    jobs = []
    for name, (_, _, out) in repaired.items():
        version = DEFECTS[name][0]
        root = out
        if Dataset.open(out).version != "v3.0":
            root = tmp_path_factory.mktemp(name) / "v30"
            run_cli("convert", out, "-o", root, "--to", "v3.0")
        expect = expect_from_fixture(bases[version])
        tasks = bases[version].spec.tasks
        for ep in expect["episodes"]:
            for feature in VALUES_CHANGED.get(name, ()):
                ep["values"].pop(feature)
            if name == "duplicate_task_text" and ep["task"] == tasks[1]:
                ep["task"] = tasks[0]      # the planted defect renamed the second task to the first
        jobs.append({"root": root, "expect": expect, "frames": 8})   # first, last and 6 between, per episode
    return dict(zip(repaired, check_many_with_lerobot(jobs)))


VALUES_CHANGED = {"extreme_channel_recomputed": ("observation.state",)}   # the planted spike stays in the data


@pytest.mark.lerobot
@pytest.mark.parametrize("name", sorted(set(DEFECTS) - REFUSED))
def test_every_repaired_dataset_loads_aligned_in_lerobot(lerobot_on_repaired, name):
    """Whatever repair says it fixed, lerobot 0.6.1 then loads: the frames checked aligned, their values as written."""
    report = lerobot_on_repaired[name]
    assert report["ok"], summarize(report)


def test_missing_episode_is_dropped_only_when_asked(bases, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(bases["v2.1"].root, root)
    DEFECTS["missing_data_file"][1](root)
    with pytest.raises(LerodocError) as refused:
        repair(root, tmp_path / "refused")
    assert refused.value.episode == 2 and not (tmp_path / "refused").exists()
    report = repair(root, tmp_path / "out", drop_broken=True)
    assert report.changes == ["episode 2 has no rows in any data file: dropped"], report.changes
    assert report.left_out == [2]
    assert len(open_context(tmp_path / "out").dataset.episodes) == 2
    before, after = rows_by_episode(bases["v2.1"].root), rows_by_episode(tmp_path / "out")
    assert sorted(after) == [0, 1]
    for e in (0, 1):   # the kept episodes' values, frame for frame
        for key in ("observation.state", "action", "timestamp", "frame_index", "index", "task_index"):
            assert after[e][key] == before[e][key], (e, key)


def test_in_place_swaps_and_keeps_the_input_name(bases, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(bases["v3.0"].root, root)
    DEFECTS["wrong_data_file_index"][1](root)
    proc = run_cli("repair", root, "--in-place", "--json")
    assert proc.returncode == 0
    assert [f for f in run_checks(open_context(root)) if f.severity == ERROR] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_repair_without_cameras_reads_no_input_stats(tmp_path, monkeypatch):
    """Every per-episode stat of a dataset without cameras is of a numeric feature, and repair replaces each with
    the exact stats of the rows it writes: it never reads the input's stats tables (at a million episodes that read
    took 4.6 of 70 s), and stale input stats still come out exact."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lerodoc.formats import v30
    from lerodoc.ops.validate import validate

    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=4, lengths=[20, 25, 30, 35], cameras=()).root
    episodes_file = next((root / "meta" / "episodes").rglob("*.parquet"))
    table = pq.read_table(episodes_file)
    column = "stats/observation.state/mean"
    stale = [[v + 1.0 for v in row] for row in table.column(column).to_pylist()]   # every episode's mean is off
    pq.write_table(table.set_column(table.column_names.index(column), column,
                                    pa.array(stale, type=table.schema.field(column).type)), episodes_file)
    assert sorted((f.code, f.episode) for f in validate(root).findings) == [("STA040", e) for e in range(4)]

    def unread(self):
        raise AssertionError(f"repair read the input's stats table {self.path}")
    monkeypatch.setattr(v30.StatsColumns, "table", property(unread))
    report = repair(root, tmp_path / "out")
    monkeypatch.undo()
    assert [(s["of"], s["family"]) for s in report.skipped] == [("input", "stats"), ("output", "stats")]
    after = validate(tmp_path / "out")   # with the stats recomputed from the rows: they agree
    assert [f.code for f in after.findings] == [], after.findings
    assert Dataset.open(tmp_path / "out").episodes[0].stats["observation.state"]["mean"].shape == (
        Dataset.open(root).info.features["observation.state"]["shape"][0],)


def test_repair_without_cameras_v21_stale_stats_come_out_exact(tmp_path):
    """The same for a v2.1 dataset (its per-episode stats are episodes_stats.jsonl lines, read with the metadata):
    every episode's stale mean is replaced by the exact mean of the rows written."""
    import json

    from lerodoc.ops.validate import validate

    root = make_dataset(tmp_path / "ds", version="v2.1", episodes=3, lengths=[20, 25, 30], cameras=()).root
    path = root / "meta" / "episodes_stats.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        line["stats"]["observation.state"]["mean"] = [v + 1.0 for v in line["stats"]["observation.state"]["mean"]]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert "STA040" in {f.code for f in validate(root).findings}   # the stale means show
    report = repair(root, tmp_path / "out")
    assert [(s["of"], s["family"]) for s in report.skipped] == [("input", "stats"), ("output", "stats")]
    assert [f.code for f in validate(tmp_path / "out").findings] == []


def test_a_channels_first_camera_is_written_channels_last(tmp_path):
    """A camera declared channels first ([3, H, W] named [channels, height, width], LAY018) gets the names lerobot
    0.6.1 writes and its shape in their order, [H, W, 3]. Before, repair renamed it and took the camera's channels
    from the old shape's last axis: [32, 48, 48], a camera of 48 channels whose stats were then dropped (STA016);
    renaming alone would make lerobot 0.6.1 (which reads names[2] == 'channels' as channels last) take the image
    for one of 48 channels."""
    src = tmp_path / "channels_first"
    make_dataset(src, version="v3.0", episodes=3, lengths=[12, 15, 11], height=32, width=48)
    info_path = src / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"]["observation.images.top"].update(shape=[3, 32, 48], names=["channels", "height", "width"])
    info_path.write_text(json.dumps(info, indent=4))
    out = tmp_path / "repaired"
    repair(src, out)
    camera = json.loads((out / "meta" / "info.json").read_text())["features"]["observation.images.top"]
    assert (camera["shape"], camera["names"]) == ([32, 48, 3], ["height", "width", "channels"])
    ctx = open_context(out)
    assert run_checks(ctx) == [], run_checks(ctx)
    # names that do not name each axis once leave the shape as it is (taken as channels last)
    assert channels_last(["h", "w", "c"], [32, 48, 3]) is None
    assert channels_last(["channels", "height", "width"], [3, 480, 640]) == [480, 640, 3]
    # a video whose shape already leads with the height and width its info says keeps it (its names are wrong)
    assert channels_last(["width", "height", "channels"], [480, 640, 3], (480, 640)) == [480, 640, 3]
    assert channels_last(["width", "height", "channels"], [640, 480, 3], (480, 640)) == [480, 640, 3]
