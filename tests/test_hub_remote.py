"""hf://datasets/OWNER/NAME read in place (issue 27): validate and info of a served 1,000-episode dataset by range
requests, the same findings as the local copy, what the server sent, and the hub's refusals as one paragraph;
`download dataset --episodes` of chosen episodes: what `delete` of the full copy writes, file for file, fetching little
more than those episodes' own bytes, resumed after an interruption."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lerodoc.media import mp4
from lerodoc.ops.delete import delete
from lerodoc.selection import Selection, parse
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_episodes
from tests.hubserver import HubServer, folder_files
from tests.lerobot_oracle import check_with_lerobot

CAMERAS = ("observation.images.top", "observation.images.wrist")
FILLER = 25_000   # bytes added to each video sample: videos are 98% of the served dataset, as on a real one


def pad_videos(root: Path, filler: int) -> None:
    """Make every mp4 under `root` video-heavy at no encoding cost: each sample gets an H.264 filler-data NAL unit
    (type 12, which decoders skip) of `filler` bytes, so frames, times and keyframes stay what they were."""
    nal = struct.pack(">I", filler - 4) + b"\x0c" + b"\xff" * (filler - 6) + b"\x80"
    for path in sorted(root.glob("videos/*/*/*.mp4")):
        track = mp4.read_track(path)
        n = len(track.size)
        out = mp4.layout([mp4.Part(track, 0, n)])
        out.size = out.size + filler
        mdat = struct.pack(">I4s", int(out.size.sum()) + 8, b"mdat")
        head = len(track.ftyp) + len(mp4.build_moov(track, out, np.array([0]), [n])) + len(mdat)
        data = path.read_bytes()
        body = b"".join(data[o:o + s] + nal for o, s in zip(track.offset.tolist(), track.size.tolist()))
        path.write_bytes(track.ftyp + mp4.build_moov(track, out, np.array([head]), [n]) + mdat + body)


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """1,000 episodes of 3 frames, 100 episodes per data and video file, two cameras whose samples are padded to
    about 25 KB (`pad_videos`); served as me/big, plus a gated copy of meta/info.json only and a rate-limited
    repository."""
    root = tmp_path_factory.mktemp("remote") / "big"
    fixture = make_dataset(root, version="v3.0", episodes=1000, lengths=3, episodes_per_file=100, height=32,
                           width=48, cameras=CAMERAS)
    pad_videos(root, FILLER)
    with HubServer() as hub:
        files = folder_files(root)
        hub.add("dataset", "me/big", files)
        hub.add("dataset", "me/gated", {"meta/info.json": files["meta/info.json"]}, gated=True)
        hub.refuse["me/limited"] = 429
        yield hub, root, files, fixture


def lerodoc(hub: HubServer, *args: str, env: dict | None = None) -> tuple[int, dict]:
    """Run the CLI in its own process (huggingface_hub reads HF_ENDPOINT at import) with --json."""
    environ = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1", **(env or {})}
    environ.pop("HF_HUB_OFFLINE", None) if "HF_HUB_OFFLINE" not in (env or {}) else None
    done = subprocess.run([sys.executable, "-m", "lerodoc", *args, "--json"], capture_output=True, text=True,
                          env=environ, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_validate_remote_equals_local_and_reads_no_video(served):
    hub, root, files, _ = served
    code_local, local = lerodoc(hub, "validate", str(root))
    hub.reset_counts()
    code, remote = lerodoc(hub, "validate", "hf://datasets/me/big")
    assert (code, remote["findings"]) == (code_local, local["findings"])
    assert remote["codebase_version"] == "v3.0" and remote["dataset"] == "hf://datasets/me/big"
    total = sum(len(d) for d in files.values())
    videos = sum(len(d) for p, d in files.items() if p.startswith("videos/"))
    tables = total - videos   # meta/ and the data parquet: what validate's checks read (stats need every column)
    ranged = [r for r in hub.log if "range" in r.headers]
    assert not any("/videos/" in r.path for r in ranged), "validate without --videos reads no video byte"
    assert hub.file_bytes <= tables, (hub.file_bytes, tables)
    assert hub.file_bytes <= 0.02 * total, (hub.file_bytes, total)   # the bar
    t = remote["transfer"]
    assert t["repository_bytes"] == total and t["file_bytes"] == hub.file_bytes
    assert t["requests"] == len(hub.log) and t["bytes"] >= hub.file_bytes
    print(f"validate hf://: {hub.file_bytes} of {total} bytes ({hub.file_bytes / total:.1%}), "
          f"{len(hub.log)} requests")


def test_info_remote_reads_moov_not_samples(served):
    hub, root, files, _ = served
    _, local = lerodoc(hub, "info", str(root))
    hub.reset_counts()
    code, remote = lerodoc(hub, "info", "hf://datasets/me/big")
    assert code == 0
    for key in ("codebase_version", "fps", "episodes", "frames", "tasks", "features", "stats", "size_bytes"):
        assert remote[key] == local[key], key
    assert {k: {n: v for n, v in c.items()} for k, c in remote["cameras"].items()} == local["cameras"]
    video_bytes = sum(len(d) for p, d in files.items() if p.startswith("videos/"))
    probed = sum(len(files[f"videos/{k}/chunk-000/file-000.mp4"]) for k in CAMERAS)
    assert hub.bytes_of("videos/") <= probed < video_bytes
    assert remote["transfer"]["requests"] == len(hub.log)
    # meta/episodes: its footer and the columns other than the per-episode stats (info takes which stats every
    # episode holds from the footer's null counts), never the stats columns' chunks, most of the file
    episodes_meta = "meta/episodes/chunk-000/file-000.parquet"
    size = len(files[episodes_meta])
    meta = pq.ParquetFile(root / episodes_meta).metadata
    tail = max(64 << 10, meta.serialized_size + 8)   # what pyarrow reads first from the end: the footer and more
    chunks = [(c.path_in_schema.startswith("stats/"), c.dictionary_page_offset or c.data_page_offset,
               c.total_compressed_size) for g in range(meta.num_row_groups)
              for c in (meta.row_group(g).column(i) for i in range(meta.row_group(g).num_columns))]
    own = sum(n for stats, _, n in chunks if not stats)
    for stats, start, n in chunks:
        if stats and start + n <= size - tail:
            assert not any(a < start + n and start < b for a, b in hub.spans[episodes_meta]), (start, n)
    read = hub.bytes_of(episodes_meta)
    assert read <= own + tail < size / 5, (read, own, tail, size)
    print(f"info hf://: {hub.file_bytes} bytes; {read} of meta/episodes' {size}")


@pytest.mark.parametrize("repo, says", [
    ("me/none", "no such repository"),
    ("me/gated", "is gated"),
    ("me/limited", "429"),
])
def test_refusals_are_one_paragraph(served, repo, says):
    hub = served[0]
    code, body = lerodoc(hub, "validate", f"hf://datasets/{repo}")
    assert code == 5 and says in body["error"]["message"] and body["error"]["hint"]
    assert body["error"]["file"] == f"hf://datasets/{repo}"


def test_offline_and_unreachable_are_one_paragraph(served):
    hub = served[0]
    code, body = lerodoc(hub, "info", "hf://datasets/me/big", env={"HF_HUB_OFFLINE": "1"})
    assert code == 5 and "HF_HUB_OFFLINE" in body["error"]["message"]
    code, body = lerodoc(hub, "info", "hf://datasets/me/big", env={"HF_ENDPOINT": "http://127.0.0.1:9"})
    assert code == 5 and "ConnectError" in body["error"]["message"]


HEAD = 32 << 10   # PyAV reads a file in 32 KiB blocks: opening it reads its first (box headers, moov, 1st sample)


def video_spans(hub: HubServer) -> dict[str, list[tuple[int, int]]]:
    """The byte ranges the server sent of each video file since reset_counts, by path in the repository."""
    return {p: s for p, s in hub.spans.items() if p.startswith("videos/")}


def test_validate_videos_remote_equals_local_and_reads_each_video_head(served):
    """validate --videos: the same findings; of each video file only its first 32 KiB (the box headers and moov,
    which mp4.read_track reads, and PyAV's first read of the file when the check opens it), nothing of the rest."""
    hub, root, files, _ = served
    code_local, local = lerodoc(hub, "validate", str(root), "--videos")
    hub.reset_counts()
    code, remote = lerodoc(hub, "validate", "hf://datasets/me/big", "--videos")
    assert (code, remote["findings"]) == (code_local, local["findings"])
    videos = {p: len(d) for p, d in files.items() if p.startswith("videos/")}
    spans = video_spans(hub)
    assert set(spans) == set(videos), "every video file is checked"
    assert all(b <= HEAD for s in spans.values() for _, b in s), spans
    read = sum(b - a for s in spans.values() for a, b in s)
    assert read <= HEAD * len(videos) < 0.005 * sum(videos.values())
    total = sum(len(d) for d in files.values())
    print(f"validate --videos hf://: {hub.file_bytes} of {total} bytes ({hub.file_bytes / total:.2%}); video "
          f"{read} of {sum(videos.values())} ({read / sum(videos.values()):.2%}), {len(hub.log)} requests")


LOOKAHEAD = 17   # samples past a frame that FFmpeg's frame-threaded decoder may read first (up to 16 threads)


def test_report_videos_remote_reads_the_sampled_frames(served, tmp_path):
    """report --videos: the same thumbnails (frame times) and findings; of a video file holding a sampled episode,
    besides its first 32 KiB, only bytes from the keyframe before the episode's window to LOOKAHEAD samples past it
    (and the rest of PyAV's 32 KiB read there); of every other video file only its first 32 KiB."""
    hub, root, files, _ = served
    _, local = lerodoc(hub, "report", str(root), "--videos", "-o", str(tmp_path / "local.html"))
    hub.reset_counts()
    code, remote = lerodoc(hub, "report", "hf://datasets/me/big", "--videos", "-o", str(tmp_path / "remote.html"))
    assert code == 0 and remote["thumbnails"] == local["thumbnails"] and len(remote["thumbnails"]) == 18
    assert not any(t["error"] for t in remote["thumbnails"])
    assert remote["validate"]["findings"] == local["validate"]["findings"]
    for key in ("summary", "channels", "episodes", "tasks"):
        assert remote[key] == local[key], key
    allowed: dict[str, list[tuple[int, int]]] = {}
    own = 0
    for e in remote["episodes"]["sampled"]:
        for key in CAMERAS:
            relative = f"videos/{key}/chunk-000/file-{e // 100:03d}.mp4"
            track = mp4.read_track(root / relative)
            first, stop = (e % 100) * 3, (e % 100) * 3 + 3
            key_before = max(i for i in range(first + 1) if track.sync[i])
            end = track.offset[min(stop + LOOKAHEAD, len(track.size)) - 1] + track.size[
                min(stop + LOOKAHEAD, len(track.size)) - 1]
            allowed.setdefault(relative, []).append((int(track.offset[key_before]), int(end) + HEAD))
            own += int(track.size[first:stop].sum())
    spans = video_spans(hub)
    for relative, ranges in spans.items():
        for a, b in ranges:
            assert b <= HEAD or any(lo <= a and b <= hi for lo, hi in allowed.get(relative, [])), (relative, a, b)
    read = sum(b - a for s in spans.values() for a, b in s)
    videos = sum(len(d) for p, d in files.items() if p.startswith("videos/"))
    print(f"report --videos hf://: {hub.file_bytes} bytes, video {read} of {videos} ({read / videos:.2%}); the "
          f"sampled windows' own samples {own}, {len(remote['thumbnails'])} frames")


def test_validate_videos_of_a_damaged_file_equals_local(small, tmp_path):
    """A truncated video file: validate --videos of the served copy names it as the local copy does (VID001)."""
    hub, root = small
    files = folder_files(root)
    damaged = f"videos/{CAMERAS[1]}/chunk-000/file-001.mp4"
    files[damaged] = files[damaged][:len(files[damaged]) * 6 // 10]
    hub.add("dataset", "me/damaged", files)
    local_root = tmp_path / "damaged"
    for relative, data in files.items():
        (local_root / relative).parent.mkdir(parents=True, exist_ok=True)
        (local_root / relative).write_bytes(data)
    code_local, local = lerodoc(hub, "validate", str(local_root), "--videos")
    code, remote = lerodoc(hub, "validate", "hf://datasets/me/damaged", "--videos")
    assert (code, remote["findings"]) == (code_local, local["findings"]) and code == 1
    assert [(f["code"], f["file"]) for f in remote["findings"] if f["severity"] == "error"] == [("VID001", damaged)]


CHOSEN = "0-9,500"


def own_bytes(root: Path, episodes: list[int]) -> int:
    """The chosen episodes' own bytes in the served files: their row groups (one per episode, 100 per file) and
    their video samples (3 per episode per camera, in order), read from the local copy's footers and moov boxes."""
    total = 0
    for e in episodes:
        group = pq.ParquetFile(root / f"data/chunk-000/file-{e // 100:03d}.parquet").metadata.row_group(e % 100)
        total += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
        for key in CAMERAS:
            track = mp4.read_track(root / f"videos/{key}/chunk-000/file-{e // 100:03d}.mp4")
            total += int(track.size[(e % 100) * 3:(e % 100) * 3 + 3].sum())
    return total


def test_download_episodes_is_delete_of_the_full_copy_and_resumes(served, tmp_path):
    hub, root, files, fixture = served
    out = tmp_path / "dl"
    needed = f"videos/{CAMERAS[1]}/chunk-000/file-005.mp4"   # episode 500's second camera
    hub.reset_counts()
    hub.deny[needed] = 403   # the hub refuses a file part way through the download
    try:
        code, failed = lerodoc(hub, "download", "dataset", "me/big", "--episodes", CHOSEN, "-o", str(out))
    finally:
        del hub.deny[needed]
    first = hub.file_bytes
    assert code == 5 and "answered 403" in failed["error"]["message"] and "resume" in failed["error"]["hint"]
    assert not out.exists() and not list(tmp_path.rglob("info.json")), "no complete-looking output"
    assert first > 0 and (tmp_path / ".dl.lerodoc-download").is_dir()

    hub.reset_counts()
    code, report = lerodoc(hub, "download", "dataset", "me/big", "--episodes", CHOSEN, "-o", str(out))
    assert code == 0 and report["findings"] == [] and report["frames"] == 33
    assert not (tmp_path / ".dl.lerodoc-download").exists()
    t = report["transfer"]
    assert t["resumed_bytes"] >= first and t["file_bytes"] == hub.file_bytes   # nothing fetched twice
    chosen = list(parse(CHOSEN, "--episodes").resolve(range(1000), "--episodes"))
    own = own_bytes(root, chosen)
    assert report["episodes"] == chosen and report["episode_bytes"] == own
    fetched = first + hub.file_bytes
    assert fetched <= 3 * own, (fetched, own)   # the bar
    print(f"download --episodes {CHOSEN}: {fetched} bytes fetched ({first} before the interruption) for "
          f"{own} bytes of its episodes ({fetched / own:.2f}x), of a {t['repository_bytes']}-byte repository")

    delete(root, tmp_path / "deleted", Selection.of(sorted(set(range(1000)) - set(chosen))))
    assert folder_files(out) == folder_files(tmp_path / "deleted")
    check_with_lerobot(out, {"fps": fixture.spec.fps, "episodes": expect_episodes(fixture, chosen)}, backend="pyav")


def test_download_episodes_needs_an_output_and_the_hf_hub(served, tmp_path):
    hub = served[0]
    code, body = lerodoc(hub, "download", "dataset", "me/big", "--episodes", "0")
    assert code == 2 and "-o DIR" in body["error"]["message"]
    code, body = lerodoc(hub, "download", "dataset", "me/big", "--episodes", "1000", "-o", str(tmp_path / "x"))
    assert code == 2 and "no episode 1000" in body["error"]["message"] and not (tmp_path / "x").exists()


@pytest.fixture(scope="session")
def small(served, tmp_path_factory):
    """A 4-episode dataset (2 per file, two cameras) served as me/small beside me/big, for the commands that read
    every file."""
    hub = served[0]
    root = tmp_path_factory.mktemp("remote-small") / "small"
    make_dataset(root, version="v3.0", episodes=4, episodes_per_file=2, cameras=CAMERAS)
    hub.add("dataset", "me/small", folder_files(root))
    return hub, root


@pytest.mark.parametrize("args, says", [
    (("delete", "URL", "-o", "OUT", "--episodes", "0"), "`lerodoc delete` writes a new dataset"),
    (("merge", "URL", "URL", "-o", "OUT"), "`lerodoc merge` writes a new dataset"),
    (("quantiles", "URL"), "stores the stats in the dataset itself"),
    (("push", "URL", "me/copy"), "uploads the files of a local dataset"),
])
def test_writing_commands_refuse_a_hub_dataset(small, tmp_path, args, says):
    hub = small[0]
    args = [{"URL": "hf://datasets/me/small", "OUT": str(tmp_path / "out")}.get(a, a) for a in args]
    code, body = lerodoc(hub, *args)
    assert code == 2 and says in body["error"]["message"], body
    assert "lerodoc download dataset me/small -o DIR" in body["error"]["hint"] and not (tmp_path / "out").exists()


def test_plans_report_and_quantiles_copy_of_a_hub_dataset(small, tmp_path):
    hub, root = small
    url = "hf://datasets/me/small"
    _, local = lerodoc(hub, "delete", str(root), "--dry-run", "--episodes", "1")
    code, remote = lerodoc(hub, "delete", url, "--dry-run", "--episodes", "1")
    assert code == 0 and remote["plan"] == {**local["plan"], "episodes": [
        {**e, "source": url} for e in local["plan"]["episodes"]]}
    _, local = lerodoc(hub, "report", str(root), "-o", str(tmp_path / "local.html"))
    code, remote = lerodoc(hub, "report", url, "-o", str(tmp_path / "remote.html"))
    assert code == 0 and (tmp_path / "remote.html").is_file()
    for key in ("summary", "channels", "episodes", "tasks"):
        assert remote[key] == local[key], key
    assert remote["validate"]["findings"] == local["validate"]["findings"]
    lerodoc(hub, "quantiles", str(root), "-o", str(tmp_path / "local"))
    code, remote = lerodoc(hub, "quantiles", url, "-o", str(tmp_path / "remote"))
    assert code == 0 and remote["stored"]
    assert folder_files(tmp_path / "remote") == folder_files(tmp_path / "local")   # the whole copy, stats included


@pytest.fixture(scope="session")
def parquet_only(served, tmp_path_factory):
    """A parquet-only dataset (no camera) of 500 episodes of 20 frames with 32-dim state and action, each data file
    one row group as lerobot writes it, its info.json counting one frame too many (IDX030), served as me/tables
    beside me/big."""
    hub = served[0]
    root = tmp_path_factory.mktemp("remote-tables") / "tables"
    make_dataset(root, version="v3.0", episodes=500, lengths=20, episodes_per_file=250, cameras=(), state_dim=32,
                 action_dim=32)
    for path in sorted(root.glob("data/*/*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table, path, row_group_size=table.num_rows)
    info = json.loads((root / "meta/info.json").read_text())
    info["total_frames"] += 1
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    hub.add("dataset", "me/tables", folder_files(root))
    return hub, root, folder_files(root)


def test_validate_remote_parquet_only_reads_a_tenth_and_says_stats_were_skipped(parquet_only):
    """Issue 37 item 3: without --stats, validate hf:// reads the bookkeeping columns and footers, not every numeric
    column (nor the episodes' stats columns): at most 10% of the bytes, the same findings as the local copy checked
    without stats, and the output names what was skipped. With --stats it finds what the local default finds."""
    hub, root, files = parquet_only
    url = "hf://datasets/me/tables"
    total = sum(len(d) for d in files.values())
    _, local = lerodoc(hub, "validate", str(root), "--no-stats")
    hub.reset_counts()
    code, remote = lerodoc(hub, "validate", url)
    served_bytes = hub.file_bytes
    assert code == 1 and [f["code"] for f in remote["findings"]] == ["IDX030"]
    assert remote["findings"] == local["findings"]
    assert [s["run_with"] for s in remote["skipped"]] == ["--stats"] == [s["run_with"] for s in local["skipped"]]
    assert served_bytes <= 0.10 * total, (served_bytes, total)
    assert remote["transfer"]["file_bytes"] == served_bytes
    done = subprocess.run([sys.executable, "-m", "lerodoc", "validate", url], capture_output=True, text=True,
                          env={**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1"}, timeout=300)
    assert "skipped: per-episode stats" in done.stdout and "--stats runs them" in done.stdout, done.stdout
    _, local_default = lerodoc(hub, "validate", str(root))
    assert local_default["skipped"] == []
    hub.reset_counts()
    code, remote_stats = lerodoc(hub, "validate", url, "--stats")
    assert code == 1 and remote_stats["findings"] == local_default["findings"] and remote_stats["skipped"] == []
    assert hub.file_bytes > 0.5 * total          # what the recomputation costs: why it is not the default
    print(f"validate hf:// parquet-only: {served_bytes} of {total} bytes ({served_bytes / total:.1%}); "
          f"with --stats {hub.file_bytes} ({hub.file_bytes / total:.1%})")
