"""Every writing command plans first: --dry-run prints that plan and writes nothing, and the real run then
writes exactly the planned episodes and files, re-encoding exactly the planned clips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lerodoc.dataset import Dataset
from lerodoc.ops.convert import convert
from lerodoc.ops.flatten import flatten
from lerodoc.ops.merge import merge, source_selections
from lerodoc.ops.repair import repair
from lerodoc.ops.select import select
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and modification time."""
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def written_nothing(parent: Path, before: dict[str, tuple[int, int]]) -> bool:
    """Nothing under `parent` changed or appeared (no output, no staging sibling)."""
    return snapshot(parent) == before


def planned_files(plan: dict) -> dict[str, list[int]]:
    return {f["file"]: f.get("episodes", []) for f in plan["files"]
            if f["file"].startswith(("data/", "videos/"))}


def actual_files(root: Path) -> dict[str, list[int]]:
    """Each data and video file of the written dataset with the episodes it holds, from its metadata; and
    every data/video file on disk (so a file the metadata does not name shows up too)."""
    ds = Dataset.open(root)
    files: dict[str, list[int]] = {}
    for ep in ds.episodes:
        for rel in [ep.data_file] + [span.file for span in ep.videos.values()]:
            files.setdefault(rel, []).append(ep.index)
    on_disk = {p.relative_to(root).as_posix() for top in ("data", "videos") for p in (root / top).rglob("*")
               if p.is_file()}
    assert on_disk == set(files)
    return files


def planned_episodes(plan: dict) -> list[tuple]:
    return [(e["episode"], e["length"], e["data_file"]) for e in plan["episodes"]]


def actual_episodes(root: Path) -> list[tuple]:
    return [(e.index, e.length, e.data_file) for e in Dataset.open(root).episodes]


def test_convert_dry_run_plans_the_cuts_and_re_encodes_it_then_makes(tmp_path):
    fixture = make_dataset(tmp_path / "in" / "src", version="v3.0", episodes=4, episodes_per_file=2, gop=10,
                           keyframe_at_episode_start=False)
    before = snapshot(tmp_path)
    dry = convert(fixture.root, tmp_path / "out", to="v2.1", dry_run=True)
    assert written_nothing(tmp_path, before)
    plan = dry.plan
    assert plan["reencode"], "the fixture's episodes start off a keyframe: the plan must re-encode some clips"
    report = convert(fixture.root, tmp_path / "out", to="v2.1")
    assert report.reencoded_clips == plan["reencode"]
    assert planned_episodes(plan) == actual_episodes(tmp_path / "out")
    assert planned_files(plan) == actual_files(tmp_path / "out")
    out = Dataset.open(tmp_path / "out")
    assert {f["file"] for f in plan["files"] if f["action"] == "re-encode"} == \
        {out.episodes[c["episode"]].videos[c["camera"]].file for c in report.reencoded_clips}


def test_merge_dry_run_plan_matches_the_merge(tmp_path):
    a = make_dataset(tmp_path / "in" / "a", version="v2.1", episodes=3, noise=20)
    b = make_dataset(tmp_path / "in" / "b", version="v3.0", episodes=3, episodes_per_file=2)
    before = snapshot(tmp_path)
    exclude = source_selections(["B:1"], [a.root, b.root], "--exclude")
    dry = merge([a.root, b.root], tmp_path / "out", exclude=exclude, dry_run=True)
    assert written_nothing(tmp_path, before)
    plan = dry.plan
    assert [(e["source"], e["source_episode"]) for e in plan["episodes"]] == \
        [(str(a.root), 0), (str(a.root), 1), (str(a.root), 2), (str(b.root), 0), (str(b.root), 2)]
    report = merge([a.root, b.root], tmp_path / "out", exclude=exclude)
    assert report.reencoded_clips == plan["reencode"] == []
    assert planned_episodes(plan) == actual_episodes(tmp_path / "out")
    assert planned_files(plan) == actual_files(tmp_path / "out")
    # a file planned as a link is the source's file (a second name for it); every other file is new
    linked = {f["file"] for f in plan["files"] if f["action"] == "link"}
    assert linked, "B's last file holds exactly its last episode: the plan reuses it"
    assert {rel for rel in planned_files(plan) if (tmp_path / "out" / rel).stat().st_nlink > 1} == linked


def test_repair_dry_run_plan_matches_the_repair(tmp_path):
    fixture = make_dataset(tmp_path / "in" / "src", version="v2.1", episodes=3)
    info = fixture.root / "meta/info.json"
    raw = json.loads(info.read_text())
    info.write_text(json.dumps({**raw, "total_frames": raw["total_frames"] + 7}))   # IDX030: repair fixes it
    before = snapshot(tmp_path)
    dry = repair(fixture.root, tmp_path / "out", dry_run=True)
    assert written_nothing(tmp_path, before)
    assert dry.output is None and dry.plan["episodes"]
    repair(fixture.root, tmp_path / "out")
    assert planned_episodes(dry.plan) == actual_episodes(tmp_path / "out")
    assert planned_files(dry.plan) == actual_files(tmp_path / "out")


def test_flatten_and_select_dry_runs_plan_the_files_they_rewrite(tmp_path):
    fixture = make_dataset(tmp_path / "in" / "src", version="v3.0", episodes=3, episodes_per_file=2,
                           vector_storage="list")
    before = snapshot(tmp_path)
    flat = flatten(fixture.root, tmp_path / "flat", dry_run=True)
    sel = select(fixture.root, tmp_path / "sel", state=["observation.state[0:2]"], dry_run=True)
    assert written_nothing(tmp_path, before)
    for plan, run in ((flat.plan, lambda: flatten(fixture.root, tmp_path / "flat")),
                      (sel.plan, lambda: select(fixture.root, tmp_path / "sel", state=["observation.state[0:2]"]))):
        run()
        out = tmp_path / ("flat" if plan is flat.plan else "sel")
        transformed = {f["file"]: f["episodes"] for f in plan["files"] if f["action"] == "transform"}
        assert transformed == {k: v for k, v in actual_files(out).items() if k.startswith("data/")}
        # every file outside meta/ the plan does not name is the input's, hard-linked: the same inode
        named = {f["file"] for f in plan["files"]}
        assert "meta/" in named
        for rel in snapshot(fixture.root):
            if rel not in named and not rel.startswith("meta/"):
                assert (out / rel).stat().st_ino == (fixture.root / rel).stat().st_ino, rel


@pytest.mark.parametrize("command", [["convert", "{src}", "-o", "{out}", "--to", "v2.1"],
                                     ["merge", "{src}", "{src}", "-o", "{out}"],
                                     ["repair", "{src}", "-o", "{out}"],
                                     ["flatten", "{src}", "-o", "{out}"],
                                     ["select", "{src}", "-o", "{out}", "--state", "observation.state[0:2]"]])
def test_cli_dry_run_prints_the_plan_and_writes_nothing(tmp_path, command):
    fixture = make_dataset(tmp_path / "in" / "src", version="v3.0", episodes=2, vector_storage="list")
    args = [a.format(src=fixture.root, out=tmp_path / "out") for a in command]
    before = snapshot(tmp_path)
    shown = run_cli(*args, "--dry-run")
    assert "dry run: nothing written" in shown.stdout and "plan: files" in shown.stdout
    as_json = json.loads(run_cli(*args, "--dry-run", "--json").stdout)
    assert as_json["plan"]["files"]
    assert written_nothing(tmp_path, before)


def test_the_plan_names_the_clips_it_retimes(tmp_path):
    """A 1/1000 time base at 30 fps cannot place frames on k/30: the plan says which clips go onto the grid
    (by stream copy), and the run re-times exactly those."""
    from tests.zoo import members

    [member] = [m for m in members() if m.name == "export-v21-timebase-1000"]
    dry = convert(member.root, tmp_path / "out", to="v3.0", dry_run=True)
    assert dry.plan["retime"] and not (tmp_path / "out").exists()
    report = convert(member.root, tmp_path / "out", to="v3.0")
    assert report.retimed_clips == dry.plan["retime"]
    assert planned_files(dry.plan) == actual_files(tmp_path / "out")
    fixed = repair(member.root, tmp_path / "fixed", dry_run=True)
    assert any("onto the 1/fps frame grid" in change for change in fixed.plan["changes"])


@pytest.mark.parametrize("to", ["v3.0", "v2.1"])
def test_a_row_job_makes_each_piece_from_its_pick_and_new_episode_and_pickles_to_them(tmp_path, to):
    """rewrite.plan's row jobs hold their picks and new episodes, not a RowPiece an episode (128 bytes each): a job
    gives the pieces in order, each one naming its source rows and its new place, and a worker process receives
    them as a tuple of RowPieces."""
    import pickle
    from lerodoc.ops import rewrite
    a = make_dataset(tmp_path / "a", version="v2.1", episodes=3, lengths=[3, 4, 5], cameras=()).root
    b = make_dataset(tmp_path / "b", version="v3.0", episodes=2, lengths=[6, 7], cameras=()).root
    picks = [rewrite.Pick(ds, ep, (0,)) for ds in (Dataset.open(a), Dataset.open(b)) for ep in ds.episodes]
    info = picks[0].dataset.info
    plan = rewrite.plan(picks, info, ["t"], to, rewrite.target_schema(picks[0].dataset)[0], caps_mb=(100, 500))
    pieces = [piece for job in plan.row_jobs for piece in job]
    assert sorted(piece.episode for piece in pieces) == [0, 1, 2, 3, 4]
    for piece in pieces:
        pick, new = picks[piece.episode], plan.episodes[piece.episode]
        assert (piece.src_row, piece.length, piece.source_episode, piece.task_map) == \
            (pick.episode.data_row, pick.episode.length, pick.episode.index, (0,))
        assert (piece.out_file, piece.from_index) == (new.data_file, new.from_index)
        assert str(piece.src_file).endswith(pick.episode.data_file) and piece.link is False
    for job in plan.row_jobs:
        sent = pickle.loads(pickle.dumps(job))
        assert isinstance(sent, tuple) and list(sent) == list(job) and len(job) == len(sent) > 0
        assert all(type(piece) is rewrite.RowPiece for piece in sent)
        assert len({id(piece.task_map) for piece in sent}) == len({id(piece.task_map) for piece in job})  # shared
        assert job.out_files == list(dict.fromkeys(piece.out_file for piece in job))
