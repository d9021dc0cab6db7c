"""The timestamps (TS) and videos (VID) check families: every planted defect is found, with its code and
location; clean datasets (generated, and the real g1 subset) give no finding."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from lerodoc.checks import open_context, run_checks
from lerodoc.checks.common import Context, ERROR, WARNING
from lerodoc.media import frames
from lerodoc.checks import timestamps, videos
from lerodoc.dataset import Dataset
from lerodoc.ops.repair import repair
from tests.fixtures import defects_media as defects
from tests.fixtures.factory import make_dataset
from tests.helpers import require

FAMILIES = ("timestamps", "videos")
CAM = "observation.images.top"
G1 = Path(__file__).resolve().parents[2] / "shared" / "data" / "g1_v21"
CLEAN = {"v2.1-h264": dict(version="v2.1"), "v2.1-bframes": dict(version="v2.1", bframes=2),
         "v2.1-av1": dict(version="v2.1", codec="av1"), "v3.0-h264": dict(version="v3.0"),
         "v3.0-bframes": dict(version="v3.0", bframes=2), "v3.0-av1": dict(version="v3.0", codec="av1")}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """clean(name) -> root of a clean factory dataset, written once per module."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            get.fixtures[name] = make_dataset(tmp_path_factory.mktemp(name), **CLEAN[name])
            made[name] = get.fixtures[name].root
        return made[name]
    get.fixtures = {}   # name -> its factory Fixture (what lerobot must find in it)
    return get


def check(root: Path, families=FAMILIES, **options) -> list:
    return run_checks(open_context(root, videos=True, **options), families)


def errors(findings) -> set[tuple]:
    return {(f.code, f.file, f.episode, f.feature) for f in findings if f.severity == ERROR}


# ---------------------------------------------------------------- clean data

@pytest.mark.parametrize("name", CLEAN)
def test_clean_datasets_have_no_findings(clean, name):
    assert check(clean(name), deep=True) == []


def test_without_cameras_no_episode_rows_are_gathered(tmp_path, monkeypatch):
    """--videos on a dataset without cameras: nothing to set against a file, so the videos family gathers no
    episode's rows (a million episodes' rows held 400 MB in repair's validate)."""
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=3, cameras=()).root

    def gathered(ctx):
        raise AssertionError("episode rows gathered for a dataset without cameras")
    monkeypatch.setattr(videos, "episode_rows", gathered)
    assert check(root, deep=True) == []


@pytest.mark.shared
def test_real_g1_has_no_findings():
    require(G1.is_dir(), "../shared/data/g1_v21 is absent")
    assert check(G1, deep=True) == []


def test_float32_timestamps_of_long_episodes_pass():
    """float32 k/fps misses k/fps by up to half a unit in the last place: 3e-5 s at 10 minutes."""
    ts = (np.arange(30 * 600) / 30).astype(np.float32).astype(np.float64)
    timing = timestamps.measure(ts, 30, 1e-4)
    assert 1e-6 < timing.worst_offset < 1e-4 and not timestamps.fails(timing, "v3.0", 1e-4)


# ---------------------------------------------------------------- planted defects

DEFECTS = {  # name: (clean dataset, plant, error code expected where the plant says)
    "offset-v21": ("v2.1-h264", lambda r: defects.offset_timestamps(r, 1), "TS001"),
    "offset-v30": ("v3.0-h264", lambda r: defects.offset_timestamps(r, 1), "TS001"),
    "dropped-frame": ("v2.1-h264", lambda r: defects.drop_frame(r, 1), "TS004"),
    "duplicate": ("v3.0-h264", lambda r: defects.duplicate_timestamp(r, 2), "TS003"),
    "clock-restart": ("v2.1-av1", lambda r: defects.restart_timestamps(r, 2), "TS002"),
    "jitter-v21": ("v2.1-h264", lambda r: defects.jitter_timestamps(r, 1), "TS005"),
    "jitter-v30": ("v3.0-h264", lambda r: defects.jitter_timestamps(r, 1), "TS005"),
    "drift": ("v2.1-h264", lambda r: defects.drift_timestamps(r, 2), "TS006"),
    "window-start-shifted": ("v3.0-h264", lambda r: defects.shift_window_start(r, 0, CAM), "VID007"),
    "window-past-end": ("v3.0-h264", lambda r: defects.window_past_end(r, 1, CAM), "VID006"),
    "window-off-grid": ("v3.0-av1", lambda r: defects.shift_window(r, 0, CAM, 0.4 / 30), "VID010"),
    "window-overlap": ("v3.0-bframes", lambda r: defects.shift_window_start(r, 1, CAM, frames=-1), "VID009"),
    "fewer-frames-h264": ("v2.1-h264", lambda r: defects.trim_video(r, 1, CAM), "VID007"),
    "fewer-frames-av1": ("v2.1-av1", lambda r: defects.trim_video(r, 2, CAM), "VID007"),
    "truncated": ("v2.1-h264", lambda r: defects.truncate_video(r, 1, CAM), "VID001"),
    "truncated-faststart": ("v2.1-av1", lambda r: defects.truncate_video(r, 0, CAM, faststart=True), "VID001"),
    "time-base-1000": ("v2.1-h264", lambda r: defects.remux_time_base(r, 1, CAM), "VID005"),
    "wrong-resolution": ("v2.1-h264", lambda r: defects.set_video_info(r, CAM, height=480, width=640), "VID003"),
}


def plant(clean, tmp_path, name: str, plant_fn) -> tuple[Path, defects.Planted]:
    root = tmp_path / "ds"
    shutil.copytree(clean(name), root)
    return root, plant_fn(root)


@pytest.mark.parametrize("name", DEFECTS)
def test_planted_defect_is_found_where_it_is(clean, tmp_path, name):
    base, plant_fn, code = DEFECTS[name]
    root, planted = plant(clean, tmp_path, base, plant_fn)
    findings = check(root)
    if code in ("VID002", "VID003"):     # a camera-wide finding names the camera's first file and no episode
        first = Dataset.open(root).video_files(planted.feature)[0]
        assert errors(findings) == {(code, first, None, planted.feature)}, findings
    else:
        assert errors(findings) == {(code, planted.file, planted.episode, planted.feature)}, findings
    assert all(f.code in timestamps.CODES or f.code in videos.CODES for f in findings)


@pytest.mark.parametrize("name", ["window-past-end", "window-overlap", "fewer-frames-h264", "time-base-1000"])
def test_demux_fallback_finds_the_same(clean, tmp_path, monkeypatch, name):
    """Files the mp4 header parser does not take are read by PyAV's demuxer, with the same findings."""
    base, plant_fn, _ = DEFECTS[name]
    root, _ = plant(clean, tmp_path, base, plant_fn)
    from_headers = check(root)
    monkeypatch.setattr(frames.mp4, "read_track", lambda path: (_ for _ in ()).throw(frames.mp4.Unsupported()))
    frames.clear_cache()                           # each file's index is read once: forget the ones from headers
    assert check(root) == from_headers


@pytest.fixture(scope="module")
def repaired(clean, tmp_path_factory) -> dict:
    """Each planted defect, planted and repaired once: name -> (error findings before, repaired root or None when
    repair refused, its report or None)."""
    from lerodoc.errors import LerodocError
    from lerodoc.ops.repair import repair
    out = {}
    for name, (base, plant_fn, _) in DEFECTS.items():
        work = tmp_path_factory.mktemp(name)
        root, _ = plant(clean, work, base, plant_fn)
        found = [f for f in check(root) if f.severity == ERROR]
        try:
            report = repair(root, work / "out")
        except LerodocError:
            out[name] = (found, None, None)
            continue
        out[name] = (found, work / "out", report)
    return out


@pytest.mark.parametrize("name", DEFECTS)
def test_repair_fixes_what_is_marked_fixable(repaired, name):
    """The fixable flag is a promise: after `lerodoc repair` those findings are gone; the others stay, in the output
    or in what repair lists as needing a human (a file it could not read, whose episodes it left out)."""
    found, out, report = repaired[name]
    if out is None:
        assert not all(f.fixable for f in found)      # repair refused: something needed a human
        return
    left = {f.code for f in check(out) if f.severity == ERROR}
    listed = {f["code"] for f in report.remaining if f["severity"] == ERROR}
    assert left | listed == {f.code for f in found if not f.fixable}


NOT_REPAIRED = {   # repair refuses these (the finding is not fixable): frames are gone, or the one unreadable file
    "fewer-frames-h264", "fewer-frames-av1", "truncated-faststart"}   # holds every episode (v3.0)
LEFT_OUT = {       # the file cannot be read: repair writes the other episodes and lists the file (exit 1)
    "truncated"}


@pytest.fixture(scope="module")
def lerobot_on_repaired(clean, repaired, tmp_path_factory) -> dict[str, dict]:
    """LeRobotDataset 0.6.1 on the output of every repair that went through (a v2.1 output converted to v3.0 by
    lerodoc first: 0.6.1 loads v3.0 only), in one interpreter, 8 frames per episode against their identity."""
    from tests.helpers import expect_episodes, expect_from_fixture, run_cli
    from tests.lerobot_oracle import check_many_with_lerobot
    names, jobs = [], []
    for name, (_, out, report) in repaired.items():
        if out is None:
            continue
        fixture = clean.fixtures[DEFECTS[name][0]]
        kept = [e for e in range(len(fixture.lengths)) if e not in report.left_out]
        if Dataset.open(out).version != "v3.0":
            converted = tmp_path_factory.mktemp(name) / "v30"
            run_cli("convert", out, "-o", converted, "--to", "v3.0")
            out = converted
        names.append(name)
        jobs.append({"root": out, "expect": {**expect_from_fixture(fixture), "episodes": expect_episodes(fixture, kept)},
                     "frames": 8})   # first, last and 6 between, per episode
    return dict(zip(names, check_many_with_lerobot(jobs)))


@pytest.mark.lerobot
@pytest.mark.parametrize("name", DEFECTS)
def test_repaired_media_defect_loads_aligned_in_lerobot(repaired, lerobot_on_repaired, name):
    """What repair says it fixed loads in lerobot 0.6.1 with its frames aligned; what it refuses is listed; where a
    file cannot be read, the output holds the other episodes (and loads), and only those episodes are left out."""
    from tests.lerobot_oracle import summarize
    _, out, repair_report = repaired[name]
    if name in NOT_REPAIRED:
        assert out is None and name not in lerobot_on_repaired
        return
    assert out is not None, f"{name}: repair refused it"
    assert bool(repair_report.left_out) == (name in LEFT_OUT), repair_report.left_out
    report = lerobot_on_repaired[name]
    assert report["ok"], summarize(report)


def test_duplicate_timestamp_is_not_also_a_dropped_frame(clean, tmp_path):
    root, _ = plant(clean, tmp_path, "v2.1-h264", lambda r: defects.duplicate_timestamp(r, 0, row=5))
    assert [f.code for f in check(root, ("timestamps",))] == ["TS003", "TS007"]


def test_truncated_file_names_every_episode_it_holds(clean, tmp_path):
    root, planted = plant(clean, tmp_path, "v3.0-h264", lambda r: defects.truncate_video(r, 0, CAM, faststart=True))
    (found,) = [f for f in check(root) if f.code == "VID001"]
    assert found.file == planted.file and found.episode is None and "episode(s) 0, 1 " in found.message


def test_wrong_codec_is_a_warning(clean, tmp_path):
    root, _ = plant(clean, tmp_path, "v2.1-h264", lambda r: defects.set_video_info(r, CAM, codec="av1"))
    (found,) = check(root)
    assert (found.code, found.severity, found.feature, found.fixable) == ("VID002", WARNING, CAM, True)
    assert "codec h264, info.json says av1" in found.message
    repair(root, tmp_path / "repaired")                 # repair writes the files' codec into info.json
    assert check(tmp_path / "repaired") == []


def test_wrong_frame_rate(clean, tmp_path):
    root, planted = plant(clean, tmp_path, "v2.1-h264", lambda r: defects.retime_video(r, 1, CAM))
    found = {f.code: f for f in check(root)}
    assert (found["VID004"].file, found["VID004"].feature) == (planted.file, CAM)
    assert "1 of 3 observation.images.top file(s) have fps 15, info.json says 30" in found["VID004"].message


def test_missing_video_is_left_to_layout(clean, tmp_path):
    root, planted = plant(clean, tmp_path, "v2.1-h264", lambda r: defects.remove_video(r, 1, CAM))
    assert check(root) == []
    assert ("LAY040", planted.file, 1, CAM) in errors(check(root, ("layout", *FAMILIES)))


def test_deep_decodes_first_and_last_frames(clean, tmp_path):
    root, planted = plant(clean, tmp_path, "v2.1-bframes", lambda r: defects.corrupt_frame(r, 1, CAM, "first"))
    assert check(root) == []                       # the container still lists the frame
    assert errors(check(root, deep=True)) == {("VID012", planted.file, 1, CAM)}


def test_window_past_end_names_the_query_and_the_end(clean, tmp_path):
    root, _ = plant(clean, tmp_path, "v3.0-h264", lambda r: defects.window_past_end(r, 1, CAM))
    (found,) = [f for f in check(root) if f.code == "VID006"]
    assert "ends past the file's end at" in found.message and "last row queries 60" in found.message
    assert found.fixable


# ---------------------------------------------------------------- against lerobot 0.6.1

ORACLE = {  # plant on a v3.0 dataset: validate's error codes; lerobot then fails or misaligns frames
    "clean": (lambda r: None, set()),
    "jitter-within-tolerance": (lambda r: defects.jitter_timestamps(r, 1, amplitude_s=6e-5), set()),
    "jitter": (lambda r: defects.jitter_timestamps(r, 1, amplitude_s=3e-4), {"TS005"}),
    "window-off-grid": (lambda r: defects.shift_window(r, 0, CAM, 0.4 / 30), {"VID010"}),
    "window-start-shifted": (lambda r: defects.shift_window_start(r, 0, CAM), {"VID007"}),
    "time-base-1000": (lambda r: defects.remux_time_base(r, 2, CAM), {"VID005"}),
}


@pytest.fixture(scope="module")
def oracle_base(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("oracle"), version="v3.0", bframes=2)


@pytest.mark.lerobot
@pytest.mark.parametrize("name", ORACLE)
def test_errors_are_what_lerobot_trips_over(oracle_base, tmp_path, name):
    """An error from these families means lerobot 0.6.1 raises or serves wrong frames; none means it loads
    every frame right (timestamps planted off k/fps are value mismatches to the oracle, not load faults)."""
    from tests.helpers import expect_from_fixture
    from tests.lerobot_oracle import check_with_lerobot
    plant_fn, codes = ORACLE[name]
    root = tmp_path / "ds"
    shutil.copytree(oracle_base.root, root)
    plant_fn(root)
    assert {f.code for f in check(root) if f.severity == ERROR} == codes
    report = check_with_lerobot(root, expect_from_fixture(oracle_base), raise_on_failure=False)
    # exactly the episodes validate names are those lerobot raises at or serves wrong frames for
    named = {f.episode for f in check(root) if f.severity == ERROR}
    faulted = {x["episode"] for key in ("exceptions", "misaligned_examples", "length_mismatches")
               for x in report[key]} | ({None} if report["load_error"] else set())
    assert faulted == named, report["problems"]


# ---------------------------------------------------------------- tolerance_s

def test_summary_gives_the_tolerance_that_passes(clean, tmp_path):
    root, _ = plant(clean, tmp_path, "v3.0-h264", lambda r: defects.jitter_timestamps(r, 1, amplitude_s=3e-4))
    summary = {f.code: f for f in check(root)}
    assert "tolerance_s 0.00031 or more" in summary["TS007"].message
    assert "tolerance_s 0.00031 or more" in summary["VID011"].message
    assert check(root, tolerance_s=3.1e-4) == []


def test_time_base_passes_with_a_larger_tolerance(clean, tmp_path):
    root, _ = plant(clean, tmp_path, "v2.1-h264", lambda r: defects.remux_time_base(r, 1, CAM))
    assert "0.00034 or more" in {f.code: f for f in check(root)}["VID011"].message
    assert check(root, tolerance_s=3.4e-4) == []


def test_suggested_tolerance_is_strictly_above_the_worst():
    assert timestamps.suggest_tolerance(3.3333e-4) == pytest.approx(3.4e-4)
    assert timestamps.suggest_tolerance(3.4e-4) > 3.4e-4


# ---------------------------------------------------------------- no crash, no noise

def test_without_cameras_timestamps_are_warnings(tmp_path):
    root = make_dataset(tmp_path / "ds", version="v3.0", cameras=()).root
    defects.offset_timestamps(root, 0)
    assert {(f.code, f.severity) for f in check(root)} == {("TS001", WARNING), ("TS007", WARNING)}


def test_no_dataset_and_no_videos_give_nothing(clean):
    assert timestamps.check(Context(Path("nowhere"), None)) == []
    assert videos.check(Context(Path("nowhere"), None, videos=True)) == []
    assert videos.check(open_context(clean("v3.0-h264"))) == []      # --videos not given


def test_unreadable_data_file_is_skipped(clean, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(clean("v2.1-h264"), root)
    data = root / "data/chunk-000/episode_000001.parquet"
    data.write_bytes(data.read_bytes()[:100])
    assert check(root) == []                       # layout reports the file (LAY031)


def test_codes_table():
    for prefix, codes in (("TS", timestamps.CODES), ("VID", videos.CODES)):
        for code, (severity, meaning, hint, fixable) in codes.items():
            assert code.startswith(prefix) and code[len(prefix):].isdigit()
            assert severity in (ERROR, WARNING) and meaning and hint and isinstance(fixable, bool)
