"""Every check code in validate's catalogue is triggered by a test, where its defect is; clean datasets are quiet.

tests/test_checks_data.py (fixtures/defects_data.py) and tests/test_checks_media.py plant most defects. The
cases here plant the rest, one minimal defect each, into a clean factory dataset, and assert that the code
appears at the defect's location. `test_every_code_is_triggered_by_a_test` keeps the catalogue and the
tests in step: a new code without a test that plants it fails there. Stats here are recomputed with numpy
(the factory's `_stats`), never by lerodoc.
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
from tests.fixtures.factory import _stats, make_dataset

TESTS = Path(__file__).resolve().parent
STATE = "observation.state"
CASES: dict[str, tuple[str, Callable[[Path], list[Planted]]]] = {}   # name -> (base, planter)
VIDEO_CASES: set[str] = set()   # cases that need validate --videos


def case(base: str, videos: bool = False):
    def register(planter):
        CASES[planter.__name__] = (base, planter)
        if videos:
            VIDEO_CASES.add(planter.__name__)
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
    return [Planted("LAY037", file=V21_DATA.format(0), feature=still)]


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


# ---------------------------------------------------------------- the tests

def findings(root: Path, videos: bool = False, deep: bool = False):
    return run_checks(open_context(root, videos=videos or deep, deep=deep))


def at(finding, planted: Planted) -> bool:
    return finding.code == planted.code and all(
        getattr(planted, key) is None or getattr(finding, key) == getattr(planted, key)
        for key in ("file", "episode", "feature", "channel"))


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
    shutil.copytree(bases[base], root)
    expected = plant(root)
    found = findings(root, videos=name in VIDEO_CASES)
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


def test_every_code_is_triggered_by_a_test():
    """Each catalogue code is planted here, in fixtures/defects_data.py, or in test_checks_media.py's DEFECTS,
    or asserted by name in a test function of another test module (see the list it prints when it fails)."""
    planted_here = {p.code for name, (base, plant) in CASES.items() for p in _codes_of(plant)}
    data = set(re.findall(r'Planted\("([A-Z]+\d{3})"', (TESTS / "fixtures/defects_data.py").read_text()))
    from tests.test_checks_media import DEFECTS as MEDIA
    media = {code for _, _, code in MEDIA.values()}
    elsewhere = set()
    for path in TESTS.glob("test_*.py"):
        if path.name != Path(__file__).name:
            for body in re.split(r"\n(?=def test_)", path.read_text())[1:]:
                elsewhere |= set(re.findall(r'"([A-Z]{2,3}\d{3})"', body))
    codes = {row["code"] for row in catalogue()}
    untested = sorted(codes - planted_here - data - media - elsewhere)
    assert not untested, f"check codes no test triggers: {untested}"


def _codes_of(plant) -> list[Planted]:
    """The Planted values a planter returns, read from its source (no dataset needed)."""
    import inspect
    return [Planted(code) for code in re.findall(r'Planted\("([A-Z]+\d{3})"', inspect.getsource(plant))]
