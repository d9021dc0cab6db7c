"""The path a user walks: the card's four commands typed as written inside a dataset lerobot wrote, and no silent
step between a raw dataset and training (a shifted video window, image cameras, random weights, a state key that
is not there, every local GPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lerodoc.dataset import Dataset
from lerodoc.pi05 import launch
from tests.fixtures.factory import make_dataset
from tests.fixtures.tokenizer import train_tokenizer
from tests.helpers import importable, require, run_cli, run_here

require(importable("torch") and importable("sentencepiece"), "lerodoc's train extra is not installed")

ZOO = Path(__file__).parent / "zoo/members"
TINY = ("--preset", "tiny", "--weights", "none", "--steps", "2", "--workers", "0", "--device", "cpu")


def typed(cwd: Path, command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`command` as a user types it in a shell standing in `cwd` (`lerodoc` is `python -m lerodoc`)."""
    args = command.split()
    assert args[0] == "lerodoc"
    return subprocess.run([sys.executable, "-m", "lerodoc", *args[1:]], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def media_files(root: Path) -> dict[str, tuple[int, bytes]]:
    return {p.relative_to(root).as_posix(): (p.stat().st_ino, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file() and p.parts[len(root.parts)] in ("data", "videos")}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture()
def recorded(tmp_path) -> Path:
    """A copy of a dataset lerobot 0.6.1's recorder wrote (two cameras, v3.0)."""
    root = tmp_path / "recorded"
    shutil.copytree(ZOO / "lerobot-0.6.1-record", root)
    return root


def test_card_commands_typed_inside_a_lerobot_dataset(recorded, tmp_path):
    media = media_files(recorded)
    stats_before = json.loads((recorded / "meta/stats.json").read_text())

    proc = typed(recorded, "lerodoc quantiles")                                        # 1: stores the stats
    assert proc.returncode == 0, proc.stderr
    assert f"stats stored in {recorded}" in proc.stdout and "q01/q99:" in proc.stdout
    stored = json.loads((recorded / "meta/stats.json").read_text())
    ds = Dataset.open(recorded)
    for feature in ("action", "observation.state"):
        column = np.stack(pq.read_table(recorded / "data/chunk-000/file-000.parquet",
                                        columns=[feature]).column(0).to_numpy(zero_copy_only=False))
        for q in ("q01", "q99"):
            want = np.quantile(column.astype(np.float64), float(q[1:]) / 100, axis=0, method="linear")
            np.testing.assert_allclose(stored[feature][q], want, rtol=1e-6, err_msg=f"{feature} {q}")
        assert stored[feature][q] != stats_before[feature].get(q) and "q99" in ds.episodes[0].stats[feature]
    assert media_files(recorded) == media, "the data and video files must keep their bytes and inodes"
    assert sorted(p.name for p in recorded.iterdir()) == ["data", "meta", "videos"], "no temporary left behind"

    proc = typed(recorded, "lerodoc validate --videos")                                 # 2: reports
    assert proc.returncode == 0, proc.stderr
    assert f"{recorded}: 0 errors" in proc.stdout

    empty_hub = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    proc = typed(recorded, "lerodoc train pi05 --batch-per-device 4", env=empty_hub)  # 3: both downloads named
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 3, proc.stderr
    assert "lerodoc download tokenizer paligemma" in text and "lerodoc download weights pi05_base" in text, text
    assert "--weights none" in text and "Traceback" not in proc.stderr
    assert not (recorded / "runs").exists() and not (recorded.parent / "runs").exists()


def test_preflight_names_every_missing_asset_before_torch_loads(recorded, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-hf")}
    code = ("import sys; from lerodoc.cli import main; sys.argv = ['lerodoc', 'train', 'pi05', sys.argv[1]]\n"
            "try: main()\nexcept SystemExit as e: assert e.code == 3, e.code\nassert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code, str(recorded)], check=True, capture_output=True, env=env)


def test_random_initialisation_only_when_asked_and_said_first(recorded, tokenizer, tmp_path):
    typed(recorded, "lerodoc quantiles")
    proc = run_cli("train", "pi05", recorded, "-o", tmp_path / "run", "--tokenizer", tokenizer, *TINY, "--json")
    summary = json.loads(proc.stdout)
    assert summary["weights"] is None and summary["cameras"] == ["observation.images.front",
                                                                  "observation.images.wrist"]
    header = next(line for line in proc.stderr.splitlines() if line.startswith("pi0.5"))
    assert "from random initialisation" in header and "2 camera(s)" in header


def test_image_cameras_are_refused_with_the_encode_command(tmp_path, tokenizer):
    root = tmp_path / "images"
    shutil.copytree(ZOO / "lerobot-0.6.1-record-images", root)
    run_cli("quantiles", root)
    proc = run_cli("train", "pi05", root, "-o", tmp_path / "run", "--tokenizer", tokenizer, *TINY, check=False)
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 3 and f"lerodoc encode {root} -o ENCODED" in text and "--camera none" in text, text
    assert not (tmp_path / "run").exists()
    blind = run_cli("train", "pi05", root, "-o", tmp_path / "blind", "--tokenizer", tokenizer, *TINY,
                    "--camera", "none", "--json")
    assert json.loads(blind.stdout)["cameras"] == [] and "0 camera(s) (--camera none)" in blind.stderr


def test_a_window_shifted_into_the_next_episode_is_refused_before_any_model(tmp_path, tokenizer):
    root = tmp_path / "shifted"
    make_dataset(root, version="v3.0", episodes=3, lengths=[77, 80, 70], fps=30)
    run_cli("quantiles", root)
    path = next((root / "meta/episodes").rglob("*.parquet"))
    table = pq.read_table(path)
    key = "videos/observation.images.top/from_timestamp"
    shifted = table.column(key).to_pylist()
    shifted[0] += 1.0       # episode 0 now starts 30 frames late: its last 30 rows read episode 1's frames
    pq.write_table(table.set_column(table.schema.get_field_index(key), key,
                                    __import__("pyarrow").array(shifted, table.schema.field(key).type)), path)

    plain = json.loads(run_cli("validate", root, "--json", check=False).stdout)
    codes = {(f["code"], f["episode"], f.get("field", f.get("feature"))) for f in plain["findings"]}
    assert ("VID014", 0, "observation.images.top") in codes, plain["findings"]
    vid014 = next(f for f in plain["findings"] if f["code"] == "VID014")
    assert "47 frames' worth" in vid014["message"] and "77 rows" in vid014["message"]

    proc = run_cli("train", "pi05", root, "-o", tmp_path / "run", "--tokenizer", tokenizer, *TINY, check=False)
    assert proc.returncode == 3 and "VID007" in proc.stderr and "episode 0" in proc.stderr, proc.stderr
    assert "parameters" not in proc.stderr and not (tmp_path / "run").exists()


def test_validate_passes_every_lerobot_written_window():
    """The metadata-only window check refuses nothing lerobot's writers wrote."""
    for member in sorted(p for p in ZOO.iterdir() if p.is_dir() and p.name.startswith("lerobot-")):
        ds = Dataset.open(member)
        from lerodoc.checks import open_context
        from lerodoc.checks.videos import metadata_windows
        assert metadata_windows(open_context(member, ds)) == [], member.name


def test_a_named_state_key_that_is_absent_is_an_error(recorded, tokenizer, tmp_path):
    run_cli("quantiles", recorded)
    proc = run_cli("train", "pi05", recorded, "-o", tmp_path / "run", "--tokenizer", tokenizer, *TINY,
                   "--state-key", "observation.joints", check=False)
    assert proc.returncode == 3 and "observation.joints" in proc.stderr and "no such feature" in proc.stderr


def test_two_local_processes_by_nproc_through_the_elastic_launcher(recorded, tokenizer, tmp_path):
    run_cli("quantiles", recorded)
    proc = run_cli("train", "pi05", recorded, "-o", tmp_path / "run", "--tokenizer", tokenizer, *TINY,
                   "--nproc", "2", "--batch-per-device", "2", "--json", env={"OMP_NUM_THREADS": "1"})
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert summary["world_size"] == 2 and summary["global_batch"] == 4, summary
    assert "starting 2 training process(es)" in proc.stderr


@pytest.mark.parametrize("env, nproc, gpus, want", [
    ({}, None, 0, None),                                                  # CPU: one process, no launcher
    ({}, None, 1, None),
    ({}, None, 8, launch.Launch(8, source="every GPU on this host; --nproc chooses")),
    ({}, 2, 8, launch.Launch(2, source="--nproc")),
    ({"LOCAL_RANK": "0", "WORLD_SIZE": "16", "RANK": "3"}, None, 8, None),   # torchrun's child: joins as it is
    # seed 001's platform: WORLD_SIZE = nodes, RANK = node index, GPU_NUM_PER_NODE; one process per node
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "23456", "GPU_NUM_PER_NODE": "8"},
     None, 8, launch.Launch(8, 2, 1, "10.0.0.5:23456", "WORLD_SIZE nodes, RANK node index, GPU_NUM_PER_NODE")),
    ({"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "10.0.0.5", "GPU_NUM_PER_NODE": "4"}, None, 4,
     launch.Launch(4, 1, 0, None, "WORLD_SIZE nodes, RANK node index, GPU_NUM_PER_NODE")),
])
def test_launch_plan(env, nproc, gpus, want):
    assert launch.plan(env, nproc, gpus) == want


def test_launch_plan_refuses_a_node_index_past_the_nodes():
    from lerodoc.errors import LerodocError
    with pytest.raises(LerodocError, match="RANK=2"):
        launch.plan({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h"}, None, 8)


def test_repair_writes_what_it_can_lists_every_lost_video_file_and_drops_their_episodes_when_asked(tmp_path,
                                                                                                   tokenizer):
    """Without --drop-broken, repair writes the episodes it can (an output LeRobotDataset 0.6.1 loads), names every
    lost file with its camera and episodes, and exits 1; --in-place refuses; with --drop-broken it exits 0 and the
    output trains."""
    from tests.helpers import expect_episodes, expect_from_fixture
    from tests.lerobot_oracle import check_with_lerobot
    fixture = make_dataset(tmp_path / "partial", version="v3.0", episodes=6, lengths=[30, 32, 34, 36, 38, 40],
                           episodes_per_file=2)
    (fixture.root / "videos/observation.images.top/chunk-000/file-001.mp4").unlink()        # episodes 2, 3
    (fixture.root / "videos/observation.images.wrist/chunk-000/file-002.mp4").write_bytes(b"not an mp4")  # 4, 5
    proc = run_cli("repair", fixture.root, "-o", tmp_path / "fixed", "--json", check=False)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lost = [(f["code"], f["file"], f["field"], f["episode"]) for f in report["remaining"] if f["severity"] == "error"]
    assert lost == [("LAY040", "videos/observation.images.top/chunk-000/file-001.mp4", "observation.images.top", 2),
                    ("VID001", "videos/observation.images.wrist/chunk-000/file-002.mp4", "observation.images.wrist",
                     4)], report["remaining"]
    assert "episodes 4, 5 of the input" in report["remaining"][1]["message"]
    assert "--drop-broken" in report["remaining"][0]["hint"]
    fixed = Dataset.open(tmp_path / "fixed")
    assert [ep.length for ep in fixed.episodes] == [30, 32]
    check_with_lerobot(tmp_path / "fixed", {**expect_from_fixture(fixture), "episodes": expect_episodes(fixture, [0, 1])})

    before = sorted((p.relative_to(fixture.root), p.stat().st_mtime_ns) for p in fixture.root.rglob("*"))
    proc = run_cli("repair", fixture.root, "--in-place", check=False)
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 3 and "file-001.mp4 is missing" in text and "--drop-broken" in text, text
    assert sorted((p.relative_to(fixture.root), p.stat().st_mtime_ns) for p in fixture.root.rglob("*")) == before

    proc = run_cli("repair", fixture.root, "-o", tmp_path / "dropped", "--drop-broken")
    assert "episode(s) 2, 3, 4, 5 dropped (--drop-broken)" in proc.stdout
    assert [ep.length for ep in Dataset.open(tmp_path / "dropped").episodes] == [30, 32]
    run_cli("train", "pi05", tmp_path / "dropped", "-o", tmp_path / "run", "--tokenizer", tokenizer, *TINY)


def test_repair_names_the_features_drop_for_a_camera_with_no_files(tmp_path):
    fixture = make_dataset(tmp_path / "lost", version="v2.1", episodes=2, lengths=[20, 24])
    shutil.rmtree(fixture.root / "videos/chunk-000/observation.images.wrist")
    proc = run_cli("repair", fixture.root, "-o", tmp_path / "fixed", check=False)
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 3 and f"lerodoc features {fixture.root} -o OUT --drop observation.images.wrist" in text


def test_merge_delete_split_never_carry_count_zero_placeholders(tmp_path):
    from lerodoc import formats
    root = tmp_path / "placeholder"
    make_dataset(root, version="v3.0", episodes=4, lengths=[20, 22, 24, 26])
    ds = Dataset.open(root)
    ds.episodes[1].stats["observation.images.top"] = {"min": np.zeros((3, 1, 1)), "max": np.zeros((3, 1, 1)),
                                                      "mean": np.zeros((3, 1, 1)), "std": np.zeros((3, 1, 1)),
                                                      "count": np.array([0])}
    formats.module("v3.0").write_stats(root, ds.info, ds.episodes, ds.stats)
    before = json.loads(run_cli("validate", root, "--json", check=False).stdout)
    assert any(f["code"] == "STA011" for f in before["findings"]), "the planted placeholder must be seen"
    run_cli("merge", root, root, "-o", tmp_path / "merged")
    run_cli("delete", root, "-o", tmp_path / "deleted", "-e", "3")
    run_cli("split", root, "-o", tmp_path / "split", "--into", "a=0.5,b=0.5")
    for out in (tmp_path / "merged", tmp_path / "deleted", tmp_path / "split/a"):
        report = json.loads(run_cli("validate", out, "--json", check=False).stdout)
        assert not [f for f in report["findings"] if f["code"] == "STA011"], (out, report["findings"])
        assert report["errors"] == 0, (out, report["findings"])


def test_report_succeeds_on_every_zoo_member(tmp_path):
    members = sorted(p for p in ZOO.iterdir() if p.is_dir())
    assert len(members) >= 40
    for member in members:
        proc = run_here("report", member, "-o", tmp_path / f"{member.name}.html")
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (member.name, proc.stderr[-2000:])


def test_report_histograms_constant_huge_nan_and_integer_channels():
    from lerodoc.report.data import histogram
    for column in (np.float32([-4000.46] * 5 + [-4000.4602]), np.array([1e308, -1e308]), np.full(7, 3.0),
                   np.array([0.0]), np.array([5, 6], dtype=np.int64), np.float32([1e5 + 1e-3, 1e5])):
        counts, edges = histogram(column, 40)
        assert counts.sum() == len(column) and np.isfinite(edges).all() and (np.diff(edges) > 0).all(), column


def test_openpi_norm_stats_from_openpi_named_features_follow_openpis_reader(tmp_path):
    """A dataset with openpi's LIBERO names (state, actions): the norm stats are found by name, and the file holds
    exactly what openpi.shared.normalize reads: {"norm_stats": {key: NormStats}} with mean, std, q01, q99 as flat
    float lists of the feature's own dims, all finite."""
    root = tmp_path / "libero"
    make_dataset(root, version="v3.0", episodes=2, lengths=[30, 40])
    run_cli("features", root, "-o", tmp_path / "renamed", "--rename", "observation.state=state",
            "--rename", "action=actions")
    renamed = tmp_path / "renamed"
    norm = tmp_path / "assets/norm_stats.json"
    run_cli("quantiles", renamed, "--openpi-norm-stats", norm)
    raw = json.loads(norm.read_text())
    assert set(raw) == {"norm_stats"} and set(raw["norm_stats"]) == {"state", "actions"}
    ds = Dataset.open(renamed)
    for key, feature in (("state", "state"), ("actions", "actions")):
        entry = raw["norm_stats"][key]
        assert set(entry) == {"mean", "std", "q01", "q99"}
        dims = int(np.prod(ds.info.features[feature]["shape"]))
        for stat, values in entry.items():
            assert isinstance(values, list) and len(values) == dims and all(isinstance(v, float) for v in values)
            assert np.isfinite(values).all()
            np.testing.assert_allclose(values, np.ravel(ds.stats[feature][stat]), rtol=1e-12)
    proc = run_cli("quantiles", renamed, "--openpi-norm-stats", norm, "--openpi-state-key", "nope", check=False)
    assert proc.returncode == 3 and "'nope' is not in the dataset" in " ".join(proc.stderr.split())
