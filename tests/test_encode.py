"""encode: image features to video, and --reencode.

Image datasets written by lerobot's own recorder (0.3.3, 0.4.4, 0.6.1) and by an exporter are encoded, then
loaded by lerobot 0.6.1's LeRobotDataset with every frame's identity checked (the identity patterns survive
lossy video; every output in one lerobot start-up). Re-encoding is checked on the files themselves: the
keyframe interval is measured from the output's packets, quality against the source's decoded frames.
"""

from __future__ import annotations

import copy
import hashlib
import json

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from lerodoc.media import encoding
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.media.frames import probe
from tests.fixtures.factory import make_dataset
from tests.helpers import decode_all, expect_from_fixture, importable, require, rows_by_episode, run_cli, run_json
from tests.lerobot_oracle import check_many_with_lerobot
from tests.zoo import members

IMAGE_MEMBERS = ("lerobot-0.3.3-record-images", "lerobot-0.4.4-record-images", "lerobot-0.6.1-record-images",
                 "export-v30-images")
ZOO = {m.name: m for m in members() if m.name in IMAGE_MEMBERS}
TOP, WRIST = "observation.images.top", "observation.images.wrist"


def tree_digests(root) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.blake2b(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def keyframe_gaps(path) -> list[int]:
    """Distances between consecutive keyframes, from the file's packets (demuxed by PyAV, not lerodoc)."""
    with av.open(str(path)) as container:
        keys = [i for i, p in enumerate(p for p in container.demux(video=0) if p.size) if p.is_keyframe]
    return [b - a for a, b in zip(keys, keys[1:])]


def image_frames(root, key: str) -> list[np.ndarray]:
    """Every stored image of a camera, in row order, as RGB."""
    frames = []
    for f in sorted(root.glob("data/*/*.parquet")):
        for value in pq.read_table(f, columns=[key]).column(key).to_pylist():
            decoded = av.CodecContext.create("png", "r").decode(av.Packet(value["bytes"]))[0]
            frames.append(decoded.to_ndarray(format="rgb24"))
    return frames


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("encode")
    out: dict[str, dict] = {}
    for name, member in ZOO.items():
        before = tree_digests(member.root)
        report = run_json("encode", member.root, "-o", tmp / name)
        root = tmp / name   # v3.0 whatever the member's version (a v2.1 one's edit is converted on the way)
        assert json.loads((root / "meta/info.json").read_text())["codebase_version"] == "v3.0"
        expect = copy.deepcopy(member.expect)
        expect["video_keys"] = sorted(json.loads((member.root / "meta/info.json").read_text())["features"])
        expect["video_keys"] = [k for k in expect["video_keys"] if k.startswith("observation.images.")]
        out[name] = {"member": member, "report": report, "out": tmp / name, "load": root, "expect": expect,
                     "unchanged": tree_digests(member.root) == before}

    # a video dataset with long GOPs (30), re-encoded to GOP 5
    g = make_dataset(tmp / "g", version="v3.0", dataset_id=3, episodes=4, episodes_per_file=2, gop=30)
    before = tree_digests(g.root)
    out["gop"] = {"src": g, "out": tmp / "g_gop5", "expect": expect_from_fixture(g), "load": tmp / "g_gop5",
                  "report": run_json("encode", g.root, "-o", tmp / "g_gop5", "--reencode", "--gop", "5",
                                     "--crf", "18")}
    out["cameras"] = {"src": g, "out": tmp / "g_top", "expect": expect_from_fixture(g), "load": tmp / "g_top",
                      "report": run_json("encode", g.root, "-o", tmp / "g_top", "--reencode", "--crf", "20",
                                         "--cameras", TOP)}
    out["dry"] = {"report": run_json("encode", g.root, "-o", tmp / "g_dry", "--reencode", "--gop", "5",
                                     "--dry-run"), "out": tmp / "g_dry"}
    out["g_unchanged"] = tree_digests(g.root) == before
    jobs = [{"root": str(case["load"]), "expect": case["expect"], "backend": "pyav"}
            for case in out.values() if isinstance(case, dict) and "load" in case]
    labels = [label for label, case in out.items() if isinstance(case, dict) and "load" in case]
    for label, rep in zip(labels, check_many_with_lerobot(jobs)):
        out[label]["lerobot"] = rep
    return out


@pytest.mark.parametrize("name", IMAGE_MEMBERS)
def test_lerobot_image_datasets_become_video_datasets(built, name):
    case = built[name]
    member, out, report = case["member"], case["out"], case["report"]
    assert case["unchanged"], "the input changed"
    cameras = case["expect"]["video_keys"]
    info = json.loads((out / "meta/info.json").read_text())
    assert info["video_path"] and sorted(report["cameras"]) == cameras
    for key in cameras:
        spec = info["features"][key]
        assert spec["dtype"] == "video"
        assert spec["info"]["video.codec"] == "av1" and spec["info"]["video.pix_fmt"] == "yuv420p"
        assert (spec["info"]["video.height"], spec["info"]["video.width"]) == tuple(spec["shape"][:2])
        assert spec["info"]["video.g"] == 2 and spec["info"]["video.crf"] == 30
    # the data keeps every other column's values, and loses the image columns
    src_rows, out_rows = rows_by_episode(member.root), rows_by_episode(out)
    assert sorted(src_rows) == sorted(out_rows)
    for e, rows in src_rows.items():
        assert set(out_rows[e]) == set(rows) - set(cameras)
        for column, values in out_rows[e].items():
            assert values == rows[column], (e, column)
    # each camera's frames, in order, are the stored images (lossy: PSNR), and the frame counts are the rows
    ds = Dataset.open(out)
    for key in cameras:
        images = image_frames(member.root, key)
        decoded = []
        for ep in ds.episodes:
            span = ep.videos[key]
            frames = [img for t, img in decode_all(out / span.file)
                      if span.from_timestamp - 1e-4 <= t < span.to_timestamp - 1e-4]
            assert len(frames) == ep.length, (key, ep.index)
            decoded += frames
        scores = [encoding.psnr(a, b) for a, b in zip(decoded, images)]
        assert len(decoded) == len(images) and min(scores) > 35, (key, min(scores))
    assert report["psnr_min_db"] > 35 and report["encoded"] == len(cameras) * len(ds.episodes)
    # the camera stats stay as the source had them
    source = Dataset.open(member.root)
    for ep, src_ep in zip(ds.episodes, source.episodes):
        for key in cameras:
            assert {s: v.tolist() for s, v in ep.stats[key].items()} == \
                {s: v.tolist() for s, v in src_ep.stats[key].items()}


def test_every_output_loads_aligned_in_lerobot(built):
    bad = {label: case["lerobot"]["problems"] for label, case in built.items()
           if isinstance(case, dict) and "lerobot" in case and not case["lerobot"]["ok"]}
    assert not bad, bad
    checked = [case["lerobot"]["frames_checked"] for case in built.values() if isinstance(case, dict)
               and "lerobot" in case]
    assert len(checked) == len(IMAGE_MEMBERS) + 2 and all(checked)


def test_reencode_sets_the_keyframe_interval_and_keeps_quality(built):
    case, src = built["gop"], built["gop"]["src"]
    assert built["g_unchanged"]
    files = sorted(case["out"].glob("videos/*/*/*.mp4"))
    assert len(files) == 4 and all(f["changed"] for f in case["report"]["files"])
    for path in files:
        rel = path.relative_to(case["out"])
        assert max(keyframe_gaps(src.root / rel)) == 30
        assert max(keyframe_gaps(path)) == 5, rel
        before, after = decode_all(src.root / rel), decode_all(path)
        assert [t for t, _ in before] == [t for t, _ in after]
        assert min(encoding.psnr(a, b) for (_, a), (_, b) in zip(before, after)) > 35
    assert case["report"]["psnr_min_db"] > 35
    spec = json.loads((case["out"] / "meta/info.json").read_text())["features"][TOP]["info"]
    assert spec["video.g"] == 5 and spec["video.crf"] == 18 and spec["video.codec"] == "h264"
    # episodes metadata and data are untouched: same bytes
    same = tree_digests(src.root)
    got = tree_digests(case["out"])
    assert {k: v for k, v in got.items() if not k.startswith(("videos/", "meta/info.json"))} == \
        {k: v for k, v in same.items() if not k.startswith(("videos/", "meta/info.json"))}


def test_reencode_of_one_camera_leaves_the_others_byte_identical(built):
    case, src = built["cameras"], built["cameras"]["src"]
    got, want = tree_digests(case["out"]), tree_digests(src.root)
    top = [k for k in got if k.startswith(f"videos/{TOP}/")]
    wrist = [k for k in got if k.startswith(f"videos/{WRIST}/")]
    assert top and wrist
    assert all(got[k] != want[k] for k in top) and all(got[k] == want[k] for k in wrist)
    assert {f["camera"] for f in case["report"]["files"]} == {TOP}
    info = json.loads((case["out"] / "meta/info.json").read_text())["features"]
    assert info[TOP]["info"]["video.crf"] == 20 and "video.crf" not in info[WRIST]["info"]
    # what was not asked for (codec, keyframe interval) stays as the camera had it
    assert probe(case["out"] / top[0]).codec == "h264" and max(keyframe_gaps(case["out"] / top[0])) == 30


def test_dry_run_writes_nothing_and_lists_the_plan(built):
    case = built["dry"]
    assert not case["out"].exists() and not list(case["out"].parent.glob(f".{case['out'].name}*"))
    assert case["report"]["output"] is None and case["report"]["encoded"] == 4
    assert all("keyframe interval 30 -> 5" in f["why"] for f in case["report"]["files"])


def test_files_already_as_asked_are_kept_and_nothing_to_do_is_said(built, tmp_path):
    g = built["gop"]["out"]
    proc = run_cli("encode", g, "-o", tmp_path / "again", "--reencode", "--gop", "5", "--crf", "18", check=False)
    assert proc.returncode == 0 and "already has the settings" in proc.stdout and "Traceback" not in proc.stderr
    assert not (tmp_path / "again").exists()
    proc = run_cli("encode", g, "-o", tmp_path / "x", check=False)
    assert proc.returncode == 3 and "no image features" in proc.stderr and "--reencode" in proc.stderr
    proc = run_cli("encode", g, "-o", tmp_path / "x", "--reencode", "--cameras", "observation.images.nope",
                   check=False)
    assert proc.returncode == 2 and "observation.images.nope" in proc.stderr


def test_hevc_where_pyav_encodes_it_else_a_clear_error(built, tmp_path, monkeypatch):
    from lerodoc.ops import encode
    g = built["gop"]["src"]
    if encoding.can_encode("hevc"):
        report = run_json("encode", g.root, "-o", tmp_path / "hevc", "--reencode", "--codec", "hevc",
                          "--cameras", WRIST)
        assert report["encoded"] == 2 and probe(next((tmp_path / "hevc").glob(f"videos/{WRIST}/*/*.mp4"))
                                                       ).codec == "hevc"
    monkeypatch.setattr(encoding, "can_encode", lambda codec: codec != "hevc")
    with pytest.raises(LerodocError, match="no libx265 encoder, so it cannot encode hevc") as error:
        encode.encode(g.root, tmp_path / "none", reencode=True, codec="hevc")
    assert error.value.hint == "choose --codec h264 or av1"
    assert not (tmp_path / "none").exists()


def test_in_place_swaps_in_the_video_dataset(tmp_path):
    import shutil
    root = tmp_path / "ds"
    shutil.copytree(ZOO["lerobot-0.6.1-record-images"].root, root)
    report = run_json("encode", root, "--in-place", "--cameras", "observation.images.wrist")
    assert report["output"] == str(root) and report["cameras"] == ["observation.images.wrist"]
    info = Dataset.open(root).info
    assert info.video_keys == ["observation.images.wrist"] and info.image_keys == ["observation.images.front"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]   # no staging or scratch folder left


def test_v20_is_refused_pointing_to_convert(tmp_path):
    src = make_dataset(tmp_path / "v20", version="v2.0", episodes=2)
    proc = run_cli("encode", src.root, "-o", tmp_path / "out", check=False)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "lerodoc convert" in proc.stderr and not (tmp_path / "out").exists()


def test_an_encoded_lerobot_image_dataset_trains(built, tmp_path):
    """The bar: lerobot's recorder wrote images; encode, exact quantiles, then train pi05 --preset tiny."""
    require(importable("torch") and importable("sentencepiece"), "train extras (torch, sentencepiece)")
    from tests.fixtures.tokenizer import train_tokenizer
    run_cli("quantiles", built["lerobot-0.6.1-record-images"]["out"], "-o", tmp_path / "q")
    tokenizer = train_tokenizer(tmp_path / "tok")
    proc = run_cli("train", "pi05", tmp_path / "q", "-o", tmp_path / "run", "--tokenizer", tokenizer, "--preset",
                   "tiny", "--steps", "3", "--batch-per-device", "2", "--workers", "1", "--json")
    summary = json.loads(proc.stdout)
    assert summary["steps"] == 3 and np.isfinite(summary["final_loss"])
    assert (tmp_path / "run/checkpoints/step-000003/model.safetensors").is_file()
