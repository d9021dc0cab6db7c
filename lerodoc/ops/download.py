"""Download chosen episodes of a hub dataset as a complete dataset of their own (issue 27, step 3).

The hub repository is read in place (`lerodoc.access`): its metadata, the footers and the row groups of the chosen
episodes' data files, the mp4 boxes and moov of their video files, and their sample ranges. `delete`'s engine
(`ops.merge` over `ops.rewrite`) writes the output from there, keeping only those episodes, so the result is, file
for file, what `lerodoc delete` of a full download writes when it deletes every other episode: renumbered, the
tasks the kept frames use, exact stats, videos joined by stream copy and every window read back.

Every range fetched is kept under a hidden folder beside the output (`cache_for`) until the output is in place,
so a download that stops (a dropped connection, Ctrl-C) fetches only what it lacked when run again; the output
itself appears only whole (`staging.staged_output`).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lerodoc import access
from lerodoc.conventions import WRITES
from lerodoc.dataset import Dataset
from lerodoc.errors import UsageError
from lerodoc.hub_errors import reach_hub
from lerodoc.media import mp4
from lerodoc.media.clips import Clip
from lerodoc.ops import rewrite
from lerodoc.ops.merge import merge
from lerodoc.ops.validate import validate
from lerodoc.promote.staging import check_output
from lerodoc.selection import Selection
from lerodoc.tables.parquet_io import open_parquet

CACHE_SUFFIX = ".lerodoc-download"


@dataclass
class DownloadReport:
    repo: str
    revision: str | None
    output: str
    codebase_version: str
    episodes: list[int]            # the source episodes, in order; output episode i is episodes[i]
    frames: int = 0
    tasks: int = 0
    files: list[str] = field(default_factory=list)
    transfer: dict = field(default_factory=dict)
    episode_bytes: int = 0         # the chosen episodes' own bytes: their row groups and their video samples
    findings: list[dict] = field(default_factory=list)
    verified: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def cache_for(out: Path) -> Path:
    """The hidden folder beside `out` that keeps fetched ranges until the download is complete."""
    out = Path(out).absolute()
    return out.parent / f".{out.name}{CACHE_SUFFIX}"


def url_of(repo: str, revision: str | None) -> str:
    return f"{access.SCHEME}datasets/{repo}" + (f"@{revision}" if revision else "")


def download_episodes(repo: str, episodes: Selection, out: Path, *, revision: str | None = None,
                      force: bool = False, progress: rewrite.Progress | None = None) -> DownloadReport:
    """Write `episodes` of the hub dataset `repo` (at `revision`) as a complete dataset at `out`, fetching only what
    they need; validate what was written."""
    started = time.perf_counter()
    out = check_output(out, force=force)   # before a byte is fetched
    cache = cache_for(out)
    reach_hub(repo, "download")            # one try, in seconds, instead of the client's retries
    root = access.open_url(url_of(repo, revision))
    store = root.store
    fresh = not cache.exists()
    store.persist(cache)
    ds = Dataset.open(root)
    try:
        chosen = list(episodes.resolve([ep.index for ep in ds.episodes], "--episodes"))
    except UsageError:
        if fresh:   # nothing to resume: a selection the dataset does not hold leaves nothing behind
            shutil.rmtree(cache, ignore_errors=True)
        raise
    version = WRITES
    report = DownloadReport(repo, revision, str(out), version, chosen)
    done = merge([ds], out, episodes={0: episodes}, to=version, force=force, progress=progress)
    report.frames, report.tasks = done.frames, done.tasks
    report.episode_bytes = own_bytes(ds, chosen)
    report.transfer = store.transfer()
    shutil.rmtree(cache, ignore_errors=True)   # the output is in place: nothing is left to resume
    checked = validate(out)
    report.findings = [f.to_json() for f in checked.findings]
    report.verified = f"validate: {checked.errors} errors, {checked.warnings} warnings"
    report.files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def own_bytes(ds: Dataset, numbers: list[int]) -> int:
    """The bytes that are the episodes' own in the source: the compressed column chunks of the row groups that hold
    their rows (a row group shared with other episodes counts in proportion to the rows it holds of theirs) and the
    samples of their video windows. Read from the footers and moov boxes the download fetched already."""
    wanted = set(numbers)
    total = 0
    for relative, eps in ds.episodes_by_data_file().items():
        eps = [ep for ep in eps if ep.index in wanted]
        if not eps:
            continue
        meta = open_parquet(ds.path(relative), eps[0].index).metadata
        offset = 0
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            rows = group.num_rows
            shared = sum(max(0, min(offset + rows, ep.data_row + ep.length) - max(offset, ep.data_row)) for ep in eps)
            if shared and rows:
                size = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
                total += size * shared // rows
            offset += rows
    for key in ds.info.video_keys:
        for ep in (ep for ep in ds.episodes if ep.index in wanted and key in ep.videos):
            span = ep.videos[key]
            path = ds.path(span.file)
            clip = Clip(path, span.from_timestamp, span.to_timestamp) if ds.version == "v3.0" else Clip(path)
            total += mp4.clip_bytes(clip, ds.info.fps, ep.index) or 0   # a file mp4 does not read: not counted
    return total


def refuse_partial(output: Path | None, include: list[str], source: str) -> None:
    """--episodes needs -o (a part of a dataset is never placed where LeRobotDataset(REPO_ID) takes it for the
    whole) and reads the Hugging Face hub; --include picks files, not episodes."""
    if output is None:
        raise UsageError("--episodes writes a dataset of those episodes only: give -o DIR for it (it is never put "
                         "where LeRobotDataset(REPO_ID) would take it for the whole dataset)",
                         hint="e.g. lerodoc download dataset OWNER/NAME --episodes 0-9 -o DIR")
    if include:
        raise UsageError("--episodes and --include cannot be combined: --episodes writes a complete dataset of "
                         "the episodes, --include takes files as they are", hint="drop one of them")
    if source != "hf":
        raise UsageError("--episodes reads the Hugging Face hub (or an HF_ENDPOINT mirror) by range requests; "
                         "ModelScope is not supported for it yet", hint="drop --source, or drop --episodes")


