"""Every check code in validate's catalogue fires on a planted defect, at its exact file and episode; clean
datasets are quiet.

tests/test_checks_data.py (fixtures/defects_data.py) and tests/test_checks_media.py (its DEFECTS) plant part of
the defects. The cases here plant the rest, one minimal defect each, into a clean factory dataset (or a dataset
of their own), and assert that the code appears at the defect's file and episode (and feature and channel where
the case names them). `test_every_code_has_a_planted_case` keeps the catalogue and the cases in step: a new code
that no case plants, and that UNPLANTABLE does not list with a reason, fails there. Stats here are recomputed
with numpy (the factory's `_stats`), never by lerodoc.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lerodoc.checks import open_context, run_checks
from lerodoc.ops.validate import catalogue
from tests.fixtures.defects_data import (BASES, TOP, V21_DATA, V30_DATA, V30_EPISODES, Planted, edit_json,
                                         edit_jsonl, edit_parquet, replace_column, rows_of, vectors)
from tests import test_stats_tolerance as tolerance
from tests.fixtures import defects_media as media
from tests.fixtures.factory import _stats, make_dataset

TESTS = Path(__file__).resolve().parent
STATE = "observation.state"
V30_VIDEO = "videos/{}/chunk-000/file-{:03d}.mp4"
CASES: dict[str, tuple[str | None, Callable[[Path], list[Planted]]]] = {}   # name -> (base, planter)
VIDEO_CASES: set[str] = set()   # cases that need validate --videos
DEEP_CASES: set[str] = set()    # cases that need validate --deep


def case(base: str | None, videos: bool = False, deep: bool = False):
    """Register a planter: it edits a copy of BASES[base] at `root` (base None: it writes its own dataset at
    `root`) and returns where validate must report each code."""
    def register(planter):
        CASES[planter.__name__] = (base, planter)
        if videos:
            VIDEO_CASES.add(planter.__name__)
        if deep:
            DEEP_CASES.add(planter.__name__)
        return planter
    return register


# ---------------------------------------------------------------- layout: info.json

@case("v3.0")
def unknown_codebase_version(root):
    edit_json(root / "meta/info.json", lambda i: i.update(codebase_version="v9.9"))
    return [Planted("LAY003", file="meta/info.json")]


@case("v3.0")
def float_fps(root):
    edit_json(root / "meta/info.json", lambda i: i.update(fps=30.0))
    return [Planted("LAY010", file="meta/info.json")]


@case("v2.1")
def missing_total(root):
    edit_json(root / "meta/info.json", lambda i: i.pop("total_chunks"))
    return [Planted("LAY011", file="meta/info.json")]


@case("v3.0")
def video_path_without_placeholders(root):
    edit_json(root / "meta/info.json", lambda i: i.update(video_path="videos/{video_key}/all.mp4"))
    return [Planted("LAY012", file="meta/info.json")]


@case("v3.0")
def unknown_dtype(root):
    edit_json(root / "meta/info.json", lambda i: i["features"]["action"].update(dtype="float33"))
    return [Planted("LAY013", file="meta/info.json", feature="action")]


@case("v2.1")
def undeclared_frame_index(root):
    edit_json(root / "meta/info.json", lambda i: i["features"].pop("frame_index"))
    return [Planted("LAY014", file="meta/info.json", feature="frame_index")]


@case("v3.0")
def slash_in_feature_name(root):
    def rename(info):
        info["features"] = {("action/joints" if k == "action" else k): v for k, v in info["features"].items()}
    edit_json(root / "meta/info.json", rename)
    return [Planted("LAY015", file="meta/info.json", feature="action/joints")]


@case("v3.0")
def names_one_short(root):
    edit_json(root / "meta/info.json", lambda i: i["features"][STATE].update(names=["a", "b", "c", "d", "e"]))
    return [Planted("LAY017", file="meta/info.json", feature=STATE)]


@case("v3.0")
def camera_names_null(root):
    edit_json(root / "meta/info.json", lambda i: i["features"][TOP].update(names=None))
    return [Planted("LAY019", file="meta/info.json", feature=TOP)]


@case("v2.1")
def feature_fps_differs(root):
    edit_json(root / "meta/info.json", lambda i: i["features"]["action"].update(fps=15))
    return [Planted("LAY020", file="meta/info.json", feature="action")]


@case("v2.1")
def version_understated(root):
    edit_json(root / "meta/info.json", lambda i: i.update(codebase_version="v2.0"))
    return [Planted("LAY021", file="meta/info.json")]


@case("v3.0")
def camera_shape_two_dims(root):
    edit_json(root / "meta/info.json", lambda i: i["features"][TOP].update(shape=i["features"][TOP]["shape"][:2]))
    return [Planted("LAY013", file="meta/info.json", feature=TOP)]


# ---------------------------------------------------------------- layout: data columns

def _edit_column(root: Path, file: str, name: str, change: Callable[[pa.Table], pa.Array | None]) -> None:
    """Replace (or, when `change` gives None, drop) one column of one data file."""
    def edit(table: pa.Table) -> pa.Table:
        array = change(table)
        position = table.column_names.index(name)
        if array is None:
            return table.remove_column(position)
        return table.set_column(position, pa.field(name, array.type), array)
    edit_parquet(root / file, edit)


@case("v2.1")
def column_missing(root):
    _edit_column(root, V21_DATA.format(1), "action", lambda t: None)
    return [Planted("LAY032", file=V21_DATA.format(1), episode=1, feature="action")]


@case("v2.1")
def vector_nested_one_level_too_deep(root):
    _edit_column(root, V21_DATA.format(1), STATE,
                 lambda t: pa.array([[row] for row in t.column(STATE).to_pylist()], pa.list_(pa.list_(pa.float32()))))
    return [Planted("LAY034", file=V21_DATA.format(1), episode=1, feature=STATE)]


@case("v2.1")
def action_stored_as_float64(root):
    _edit_column(root, V21_DATA.format(1), "action",
                 lambda t: pa.array(t.column("action").to_pylist(), pa.list_(pa.float64(), 6)))
    return [Planted("LAY035", file=V21_DATA.format(1), episode=1, feature="action")]


@case("v2.1")
def action_stored_as_strings(root):
    _edit_column(root, V21_DATA.format(1), "action",
                 lambda t: pa.array([[str(v) for v in row] for row in t.column("action").to_pylist()],
                                    pa.list_(pa.string(), 6)))
    return [Planted("LAY036", file=V21_DATA.format(1), episode=1, feature="action")]


@case("v2.1")
def image_stored_as_binary(root):
    still = "observation.images.still"
    edit_json(root / "meta/info.json", lambda i: i["features"].update(
        {still: {"dtype": "image", "shape": [8, 8, 3], "names": ["height", "width", "channels"]}}))
    for path in sorted(root.glob("data/*/*.parquet")):
        edit_parquet(path, lambda t: t.append_column(still, pa.array([b"\x89PNG"] * t.num_rows, pa.binary())))
    return [Planted("LAY037", file=V21_DATA.format(0), episode=0, feature=still)]


@case("v2.1")
def undeclared_column(root):
    _edit_column(root, V21_DATA.format(2), "action", lambda t: t.column("action"))
    edit_parquet(root / V21_DATA.format(2), lambda t: t.append_column("debug", pa.array([1] * t.num_rows)))
    return [Planted("LAY038", file=V21_DATA.format(2), episode=2, feature="debug")]


# ---------------------------------------------------------------- indices

def _edit_episode_rows(root: Path, change: Callable[[dict], None]) -> None:
    """Change v3.0's episodes metadata rows (dicts, in order)."""
    def edit(table: pa.Table) -> pa.Table:
        rows = table.to_pylist()
        change(rows)
        return pa.Table.from_pylist(rows, schema=table.schema)
    edit_parquet(root / V30_EPISODES, edit)


@case("v3.0")
def range_longer_than_length(root):
    _edit_episode_rows(root, lambda rows: rows[2].update(dataset_to_index=rows[2]["dataset_to_index"] + 1))
    return [Planted("IDX002", file=V30_EPISODES, episode=2)]


@case("v3.0")
def range_shifted(root):
    def shift(rows):
        rows[2].update(dataset_from_index=rows[2]["dataset_from_index"] + 1,
                       dataset_to_index=rows[2]["dataset_to_index"] + 1)
    _edit_episode_rows(root, shift)
    return [Planted("IDX003", file=V30_EPISODES, episode=2), Planted("IDX004", file=V30_EPISODES, episode=2)]


@case("v2.1")
def length_one_too_many(root):
    edit_jsonl(root / "meta/episodes.jsonl", lambda rows: rows[1].update(length=rows[1]["length"] + 1))
    return [Planted("IDX005", file="meta/episodes.jsonl", episode=1)]


@case("v2.1")
def rows_carry_another_episode_index(root):
    _edit_column(root, V21_DATA.format(2), "episode_index", lambda t: pa.array([7] * t.num_rows, pa.int64()))
    return [Planted("IDX010", file="meta/episodes.jsonl", episode=2),
            Planted("IDX013", file=V21_DATA.format(2), episode=7)]


@case("v3.0")
def episode_rows_interleaved(root):
    def interleave(table: pa.Table) -> pa.Table:
        first, second = rows_of(table, 0), rows_of(table, 1)
        order = np.concatenate([first[:20], second, first[20:]])
        return table.take(pa.array(order))
    edit_parquet(root / V30_DATA.format(0), interleave)
    return [Planted("IDX012", file=V30_DATA.format(0), episode=0)]


@case("v2.1")
def null_episode_index(root):
    _edit_column(root, V21_DATA.format(1), "episode_index",
                 lambda t: pa.array([None] + t.column("episode_index").to_pylist()[1:], pa.int64()))
    return [Planted("IDX014", file=V21_DATA.format(1))]


@case("v3.0")
def splits_short(root):
    edit_json(root / "meta/info.json", lambda i: i.update(splits={"train": "0:4"}))
    return [Planted("IDX031", file="meta/info.json")]


# ---------------------------------------------------------------- videos

@case("v2.1", videos=True)
def video_longer_than_episode(root):
    """The last episode loses its last 5 rows (metadata follows); its mp4 keeps every frame."""
    n = 5
    edit_parquet(root / V21_DATA.format(2), lambda t: t.slice(0, t.num_rows - n))
    edit_jsonl(root / "meta/episodes.jsonl", lambda rows: rows[2].update(length=rows[2]["length"] - n))
    edit_json(root / "meta/info.json", lambda i: i.update(total_frames=i["total_frames"] - n))
    return [Planted("VID008", file=f"videos/chunk-000/{TOP}/episode_000002.mp4", episode=2, feature=TOP)]


# ---------------------------------------------------------------- stats

@case("v2.1")
def episode_stats_line_missing(root):
    edit_jsonl(root / "meta/episodes_stats.jsonl", lambda rows: rows.pop(1))
    return [Planted("STA002", file="meta/episodes_stats.jsonl", episode=1)]


@case("v3.0")
def episode_stats_column_of_text(root):
    """Episode 1's action count is text: the episodes file's stats cannot be read as numbers (before, validate
    stopped with exit 3)."""
    name = "stats/action/count"
    edit_parquet(root / V30_EPISODES, lambda t: replace_column(t, name, pa.array(
        [["x"] if i == 1 else [str(row[0])] for i, row in enumerate(t.column(name).to_pylist())],
        pa.list_(pa.string()))))
    return [Planted("STA003", file=V30_EPISODES)]


@case("v2.1")
def episode_stats_line_of_text(root):
    edit_jsonl(root / "meta/episodes_stats.jsonl", lambda rows: rows[1]["stats"]["action"].update(count=["x"]))
    return [Planted("STA003", file="meta/episodes_stats.jsonl", episode=1)]


@case("v3.0")
def stats_lack_std(root):
    edit_json(root / "meta/stats.json", lambda s: s["action"].pop("std"))
    return [Planted("STA014", file="meta/stats.json", feature="action")]


@case("v3.0")
def constant_channel_recomputed(root):
    """State channel 4 reads 9.81 in every row, and every stat of the state is recomputed from the data."""
    channel = 4
    per_episode = {}
    for path in sorted(root.glob("data/*/*.parquet")):
        def flatten(table: pa.Table) -> pa.Table:
            state = vectors(table, STATE)
            state[:, channel] = 9.81
            for e in sorted(set(table.column("episode_index").to_pylist())):
                per_episode[e] = state[rows_of(table, e)]
            return replace_column(table, STATE, pa.array(list(state), table.schema.field(STATE).type))
        edit_parquet(path, flatten)

    def episode_stats(table: pa.Table) -> pa.Table:
        for name in _stats(per_episode[0], quantiles=True):
            column = f"stats/{STATE}/{name}"
            if column in table.column_names:
                table = replace_column(table, column, [_stats(per_episode[e], quantiles=True)[name].tolist()
                                                       for e in table.column("episode_index").to_pylist()])
        return table
    edit_parquet(root / V30_EPISODES, episode_stats)
    everything = np.concatenate([per_episode[e] for e in sorted(per_episode)])
    edit_json(root / "meta/stats.json", lambda s: s.update(
        {STATE: {k: v.tolist() for k, v in _stats(everything, quantiles=True).items()}}))
    return [Planted("STA030", file="meta/stats.json", feature=STATE, channel=channel)]


@case("v3.0")
def index_stats_stale(root):
    edit_json(root / "meta/stats.json", lambda s: s["index"].update(max=[s["index"]["max"][0] + 100]))
    return [Planted("STA041", file="meta/stats.json", feature="index")]


@case("v2.1")
def ragged_vector_column(root):
    def ragged(t: pa.Table) -> pa.Array:
        rows = t.column(STATE).to_pylist()
        return pa.array([rows[0][:5]] + rows[1:], pa.list_(pa.float32()))
    _edit_column(root, V21_DATA.format(1), STATE, ragged)
    return [Planted("STA051", file=V21_DATA.format(1), feature=STATE)]


@case("v2.1")
def damaged_action_page(root):
    """The action column's first page header is overwritten: the file opens, the column does not read."""
    path = root / V21_DATA.format(1)
    pq.write_table(pq.read_table(path), path, compression="none", use_dictionary=False)
    meta = pq.ParquetFile(path).metadata
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    chunk = meta.row_group(0).column(next(i for i, n in enumerate(names) if n.startswith("action.")))
    with open(path, "r+b") as f:
        f.seek(chunk.data_page_offset)
        f.write(b"\xff" * 16)
    return [Planted("STA052", file=V21_DATA.format(1))]


# ---------------------------------------------------------------- tasks

@case("v2.1")
def episode_lists_unknown_task(root):
    edit_jsonl(root / "meta/episodes.jsonl", lambda rows: rows[1].update(tasks=["open the drawer"]))
    return [Planted("TSK003", file="meta/episodes.jsonl", episode=1)]


@case("v2.1")
def empty_task_text(root):
    def empty(rows):
        old = rows[1]["task"]
        rows[1]["task"] = ""
        return old
    old = []
    edit_jsonl(root / "meta/tasks.jsonl", lambda rows: old.append(empty(rows)))
    edit_jsonl(root / "meta/episodes.jsonl",
               lambda rows: [r.update(tasks=["" if t == old[0] else t for t in r["tasks"]]) for r in rows])
    return [Planted("TSK004", file="meta/tasks.jsonl")]


@case("v2.1")
def episode_lists_another_task(root):
    tasks = [json.loads(line)["task"] for line in (root / "meta/tasks.jsonl").read_text().splitlines()]
    edit_jsonl(root / "meta/episodes.jsonl", lambda rows: rows[1].update(tasks=[tasks[0]]))
    return [Planted("TSK005", file=V21_DATA.format(1), episode=1)]


# ---------------------------------------------------------------- codes no other table plants

WRIST = "observation.images.wrist"


@case("v2.1")
def tasks_file_missing(root):
    (root / "meta/tasks.jsonl").unlink()
    return [Planted("LAY001", file="meta/tasks.jsonl")]


@case("v3.0")
def camera_names_abbreviated(root):
    edit_json(root / "meta/info.json", lambda i: i["features"][TOP].update(names=["h", "w", "c"]))
    return [Planted("LAY018", file="meta/info.json", feature=TOP)]


@case("v2.1")
def video_file_missing(root):
    planted = media.remove_video(root, 1, TOP)
    return [Planted("LAY040", file=planted.file, episode=1, feature=TOP)]


@case("v2.1")
def leftover_video(root):
    stray = f"videos/chunk-000/{TOP}/episode_000009.mp4"
    shutil.copyfile(root / f"videos/chunk-000/{TOP}/episode_000000.mp4", root / stray)
    return [Planted("LAY042", file=stray)]


@case("v3.0")
def camera_left_out_of_info(root):
    """info.json forgot a camera whose videos and meta/episodes columns are there (issue 30's silent loss)."""
    edit_json(root / "meta/info.json", lambda i: i["features"].pop(WRIST))
    return [Planted("LAY044", file="meta/info.json", feature=WRIST)]


@case("v3.0")
def staging_left_by_a_killed_command(root):
    """An in-place quantiles killed by SIGKILL leaves its metadata staging folder inside the dataset."""
    (root / ".lerodoc-meta.lerodoc-tmp-4242-0123abcd/meta").mkdir(parents=True)
    return [Planted("LAY045", file=".lerodoc-meta.lerodoc-tmp-4242-0123abcd")]


@case("v3.0", videos=True)
def timestamps_jitter(root):
    """Jitter of 0.3 ms: the summaries name the tolerance_s at which every timestamp and query passes."""
    media.jitter_timestamps(root, 1)
    return [Planted("TS007"), Planted("VID011")]


@case("v2.1", videos=True)
def codec_differs_from_info(root):
    media.set_video_info(root, TOP, codec="av1")
    return [Planted("VID002", file=f"videos/chunk-000/{TOP}/episode_000000.mp4", feature=TOP)]


@case("v2.1", videos=True)
def video_plays_at_half_fps(root):
    """A camera-wide finding: it names the first file at the wrong rate and no episode."""
    planted = media.retime_video(root, 1, TOP)
    return [Planted("VID004", file=planted.file, feature=TOP)]


@case("v2.1", deep=True)
def first_frame_does_not_decode(root):
    planted = media.corrupt_frame(root, 1, TOP, "first")
    return [Planted("VID012", file=planted.file, episode=1, feature=TOP)]


@case("v2.1", videos=True)
def mp4_tag_not_utf8(root):
    """One bit of the encoder tag ("Lavf...") flipped: the frames are intact (tests/test_fuzz.py's flip_tag)."""
    path = root / f"videos/chunk-000/{TOP}/episode_000001.mp4"
    data = bytearray(path.read_bytes())
    data[data.find(b"Lavf") + 1] ^= 0x80
    path.write_bytes(bytes(data))
    return [Planted("VID013", file=path.relative_to(root).as_posix(), episode=1, feature=TOP)]


@case("v3.0")
def window_shorter_than_episode(root):
    """Episode 2's stored window ends 5 frames early (metadata only; no file opened)."""
    _edit_episode_rows(root, lambda rows: rows[2].update(
        {f"videos/{TOP}/to_timestamp": rows[2][f"videos/{TOP}/to_timestamp"] - 5 / 30}))
    return [Planted("VID014", file=V30_VIDEO.format(TOP, 1), episode=2, feature=TOP)]


@case("v3.0")
def nan_in_stats(root):
    edit_json(root / "meta/stats.json", lambda s: s["action"]["std"].__setitem__(2, float("nan")))
    return [Planted("STA010", file="meta/stats.json", feature="action", channel=2)]


@case("v3.0")
def stats_lack_a_feature(root):
    edit_json(root / "meta/stats.json", lambda s: s.pop("action"))
    return [Planted("STA015", file="meta/stats.json", feature="action")]


@case("v3.0")
def stats_lack_a_camera(root):
    edit_json(root / "meta/stats.json", lambda s: s.pop(TOP))
    return [Planted("STA016", file="meta/stats.json", feature=TOP)]


@case("v2.1")
def v21_stats_without_quantiles(root):
    """The factory's v2.1 writes no q01/q99 (as lerobot's v2.1 writers): nothing to edit."""
    return [Planted("STA021", file="meta/episodes_stats.jsonl", feature=STATE)]


@case("v2.1")
def mean_just_above_max(root):
    def nudge(rows):
        state = rows[1]["stats"][STATE]
        state["mean"][0] = state["max"][0] + 1e-4 * (state["max"][0] - state["min"][0])
    edit_jsonl(root / "meta/episodes_stats.jsonl", nudge)
    return [Planted("STA023", file="meta/episodes_stats.jsonl", episode=1, feature=STATE, channel=0)]


@case(None)
def cancellation_std(root):
    """lerobot >= 0.4's float32 E[x^2] - E[x]^2 std on a channel constantly 9.81 (tests/test_stats_tolerance.py)."""
    values = tolerance.with_constant(tolerance.varied(50, 4), 2, 9.81)
    tolerance.plant(root.parent, values, tolerance.lerobot_061(values), "v2.1")
    return [Planted("STA042", file="meta/episodes_stats.jsonl", episode=0, feature=STATE, channel=2)]


@case(None)
def quantile_off_the_histogram(root):
    values = tolerance.varied(600, 3, scale=1.0)
    stats = tolerance.lerobot_061(values)
    near = {k: v.copy() for k, v in stats.items()}
    near["q10"][0] += 0.06 * (stats["max"][0] - stats["min"][0])
    tolerance.plant(root.parent, values, near, "v3.0", dataset_stats=stats)
    return [Planted("STA043", file=V30_EPISODES, episode=0, feature=STATE, channel=0)]


@case("v2.1")
def stale_v21_stats_json(root):
    """A v2.0-era stats.json beside episodes_stats.jsonl: its values are 1.5x the data's."""
    stale = {k: (np.asarray(v, dtype=np.float64) * 1.5).tolist()
             for k, v in _stats(_all_rows(root, STATE)).items() if k != "count"}
    (root / "meta/stats.json").write_text(json.dumps({STATE: stale | {"count": [len(_all_rows(root, STATE))]}}))
    return [Planted("STA044", file="meta/stats.json", feature=STATE)]


def _all_rows(root: Path, name: str) -> np.ndarray:
    return np.concatenate([vectors(pq.read_table(p), name) for p in sorted(root.glob("data/*/*.parquet"))])


# ---------------------------------------------------------------- the tests

def findings(root: Path, videos: bool = False, deep: bool = False):
    return run_checks(open_context(root, videos=videos or deep, deep=deep))


def at(finding, planted: Planted) -> bool:
    """The planted code at exactly its file and episode (None: the finding names none), and at its feature and
    channel where the planter names them."""
    return (finding.code, finding.file, finding.episode) == (planted.code, planted.file, planted.episode) and all(
        getattr(planted, key) is None or getattr(finding, key) == getattr(planted, key) for key in ("feature", "channel"))


def describe(found) -> str:
    return "\n".join(f"  {f.code} {f.file} ep={f.episode} {f.feature}[{f.channel}]: {f.message}" for f in found)


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    return {version: make_dataset(root / version, **spec).root for version, spec in BASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_code_is_found_where_it_was_planted(bases, tmp_path, name):
    base, plant = CASES[name]
    root = tmp_path / "ds"
    if base is not None:
        shutil.copytree(bases[base], root)
    expected = plant(root)
    found = findings(root, videos=name in VIDEO_CASES, deep=name in DEEP_CASES)
    for planted in expected:
        assert any(at(f, planted) for f in found), f"{name}: no {planted} among\n{describe(found)}"


def with_quantiles(root: Path) -> Path:
    """Add q01..q99 (numpy) to a v2.1 dataset's episode stats of every numeric vector feature, as pi0.5 needs."""
    info = json.loads((root / "meta/info.json").read_text())
    vector = [k for k, s in info["features"].items() if s["dtype"] not in ("video", "image") and s["shape"] != [1]]

    tables = {}

    def add(rows):
        for row in rows:
            table = tables[row["episode_index"]] = pq.read_table(root / V21_DATA.format(row["episode_index"]))
            for key in vector:
                row["stats"][key] = {k: v.tolist() for k, v in _stats(vectors(table, key), quantiles=True).items()}
    edit_jsonl(root / "meta/episodes_stats.jsonl", add)
    everything = {key: np.concatenate([vectors(t, key) for _, t in sorted(tables.items())]) for key in vector}
    (root / "meta/stats.json").write_text(json.dumps(   # dataset quantiles: v2.1 keeps them in stats.json
        {key: {k: v.tolist() for k, v in _stats(values, quantiles=True).items()} for key, values in everything.items()}))
    return root


CLEAN = {
    "v2.1-with-quantiles": lambda root: with_quantiles(make_dataset(root, **BASES["v2.1"]).root),
    "v3.0": lambda root: make_dataset(root, **BASES["v3.0"]).root,
    "v3.0-av1-list-storage": lambda root: make_dataset(root, version="v3.0", episodes=4, codec="av1",
                                                       episodes_per_file=3, vector_storage="list").root,
}


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_dataset_is_quiet(tmp_path, name):
    """No code at all, warnings included, on a clean dataset: with --videos and --deep."""
    found = findings(CLEAN[name](tmp_path / "ds"), deep=True)
    assert not found, f"{name}:\n{describe(found)}"


# Codes no planted case can make fire, each with the reason (none today). A code listed here that a case plants,
# or a catalogue code neither planted nor listed, fails test_every_code_has_a_planted_case.
UNPLANTABLE: dict[str, str] = {}


def planted_codes() -> dict[str, str]:
    """code -> the planted case asserting it at its file and episode: this module's CASES, the data defects of
    fixtures/defects_data.py (test_checks_data.py, same exact `at`) and the media defects of
    test_checks_media.py's DEFECTS (exact (code, file, episode, feature) of every error). The codes of a planter
    are the Planted values its own source returns."""
    from tests.fixtures.defects_data import DEFECTS as DATA
    from tests.test_checks_media import DEFECTS as MEDIA
    out: dict[str, str] = {}
    for where, table in (("test_check_codes.py", CASES), ("defects_data.py", DATA)):
        for name, (_, plant) in table.items():
            for code in _codes_of(plant):
                out.setdefault(code, f"{where}::{name}")
    for name, (_, _, code) in MEDIA.items():
        out.setdefault(code, f"test_checks_media.py::DEFECTS[{name!r}]")
    return out


def test_every_code_has_a_planted_case():
    """Each catalogue code is planted by a case whose test asserts that exact code at its file and episode, or is
    listed in UNPLANTABLE with the reason; nothing else (a grep of quoted codes in other tests does not count)."""
    codes = {row["code"] for row in catalogue()}
    planted = planted_codes()
    assert not sorted(codes - set(planted) - set(UNPLANTABLE)), \
        f"check codes no planted case fires: {sorted(codes - set(planted) - set(UNPLANTABLE))}"
    assert not sorted(set(UNPLANTABLE) & set(planted)), "listed as unplantable but planted"
    assert not sorted((set(planted) | set(UNPLANTABLE)) - codes), "planted codes validate does not know"


def _codes_of(plant) -> list[str]:
    """The codes of the Planted values a planter returns, read from its own source (no dataset needed)."""
    import inspect
    return re.findall(r'Planted\("([A-Z]+\d{3})"', inspect.getsource(plant))
