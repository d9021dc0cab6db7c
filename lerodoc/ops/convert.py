"""Convert a dataset between LeRobot versions: v2.0/v2.1 -> v3.0, v3.0 -> v2.1, v2.0 -> v2.1.

Nothing changes but the layout: episodes keep their order, rows their values (`episode_index`/`index`
are rewritten only when the source was not numbered 0..N-1), videos their packets.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lerodoc import formats
from lerodoc.budget import give_back
from lerodoc.conventions import INFO_PATH
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.formats.model import stats_stack
from lerodoc.ops import rewrite
from lerodoc.ops.stats import dataset_quantiles
from lerodoc.promote.staging import check_output, staged_output
from lerodoc.tables.stats import dataset_stats


@dataclass
class ConvertReport:
    source: str
    output: str | None            # None when nothing was written (`unchanged`)
    from_version: str
    to_version: str
    episodes: int
    frames: int
    data_files: int
    video_files: int
    bytes_in: int
    bytes_out: int
    seconds: float = 0.0
    renumbered_episodes: list[int] = field(default_factory=list)
    reencoded_clips: list[dict] = field(default_factory=list)
    retimed_clips: list[dict] = field(default_factory=list)   # stream-copied onto the k/fps grid (VID005)
    normalised_columns: dict[str, dict] = field(default_factory=dict)   # column -> {"from", "to"} Arrow types
    warnings: list[str] = field(default_factory=list)
    canonical: list[str] = field(default_factory=list)   # what repair would have fixed, fixed on the way
    plan: dict | None = None      # --dry-run: what a run would write
    unchanged: bool = False       # the dataset already is `to_version`: nothing converted, nothing written

    def to_json(self) -> dict:
        """--json: the input is `dataset`, as in every command's report (docs/json.md)."""
        body = asdict(self)
        return {"dataset": body.pop("source"), **body}


def convert(src: Path, out: Path, *, to: str | None = None, workers: int = 1, force: bool = False,
            data_file_size_mb: float | None = None, video_file_size_mb: float | None = None,
            progress: rewrite.Progress | None = None, engine=None, dry_run: bool = False,
            replacing: tuple | None = None) -> ConvertReport:
    """Convert the dataset at `src` to version `to` (v3.0, or v2.1 for a v3.0 input) into `out`; `engine`
    (`lerodoc.run.engine`) runs the file jobs on a cluster. `dry_run` returns the report with the plan
    (`rewrite.Plan.to_json`), writing nothing. `replacing`: `out` is a dataset an --in-place edit read
    (`Dataset.meta_seen` of it), swapped for the converted tree only while its meta/ is still that
    (`ops.derive` converts its v2.x edits so)."""
    started = time.perf_counter()
    ds = Dataset.open(src)
    to = to or ("v2.1" if ds.version == "v3.0" else "v3.0")
    if ds.version == to:   # "convert if needed": nothing to do is a success that says so, and writes nothing
        return ConvertReport(source=str(src), output=None, from_version=ds.version, to_version=to,
                             episodes=len(ds.episodes), frames=ds.total_frames, data_files=len(ds.data_files()),
                             video_files=sum(len(ds.video_files(k)) for k in ds.info.video_keys), bytes_in=0,
                             bytes_out=0, unchanged=True,
                             seconds=round(time.perf_counter() - started, 3))
    own = replacing is not None
    if not dry_run:   # before any work: an -o on the input, or taken, stops here
        check_output(out, (ds.root,), force=force or own, own=own)
    ds.require_complete()
    if not ds.episodes:
        raise LerodocError("dataset has no episodes", file=ds.root / INFO_PATH)
    caps = ds.info.whole_file_caps(data_file_size_mb, video_file_size_mb)
    out = Path(out).absolute()
    report = ConvertReport(source=str(src), output=str(out), from_version=ds.version, to_version=to,
                           episodes=len(ds.episodes), frames=ds.total_frames, data_files=0, video_files=0,
                           bytes_in=rewrite.tree_size(ds.root), bytes_out=0)
    # canonical output: what repair would fix in names and spellings is fixed on the way (validate of the output
    # then has nothing for repair); the data files and their schema are the same either way
    schema, report.normalised_columns = rewrite.target_schema(ds)
    features, report.canonical = rewrite.canonical_features(ds.info.features)
    ds.info.features = features
    picks = [rewrite.Pick(ds, ep) for ep in ds.episodes]
    plan = rewrite.plan(picks, ds.info, ds.tasks, to, schema, caps_mb=caps, workers=workers)
    report.reencoded_clips = plan.reencoded
    if dry_run:
        report.plan = plan.to_json()
        report.data_files = len({ep.data_file for ep in plan.episodes})
        report.video_files = len(plan.video_files)
        report.seconds = round(time.perf_counter() - started, 3)
        return report
    with staged_output(out, force=force or own, inputs=(ds.root,), keep=(ds,), seen=replacing, own=own) as tmp:
        result = rewrite.execute(plan, tmp, workers=workers, progress=progress, engine=engine)
        episodes = result.episodes
        stats = _stats(tmp, ds, episodes, workers, report) if to == "v3.0" else None
        formats.module(to).write_meta(tmp, ds.info, episodes, ds.tasks, stats)
        report.renumbered_episodes = result.renumbered
        report.retimed_clips = result.retimed
        if result.computed_stats:
            report.warnings.append("source had no per-episode stats: computed them from the parquet for numeric "
                                   "features (camera stats need decoding and were not computed)")
        report.data_files = len({ep.data_file for ep in episodes})
        report.video_files = len({span.file for ep in episodes for span in ep.videos.values()})
        expected = rewrite.planned(episodes)
        result = episodes = plan = picks = None   # the new episodes let go before verify opens the output
        give_back()
        rewrite.verify(tmp, to, expected)
        report.bytes_out = rewrite.tree_size(tmp)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _stats(tmp: Path, ds: Dataset, episodes: list, workers: int, report: ConvertReport) -> dict:
    """v3.0's dataset stats: the per-episode stats aggregated over the source's; where the source has no q01/q99
    for a numeric feature (lerobot's v2.1 stats, validate's STA020), exact ones from the written rows, as
    `lerodoc quantiles` computes them, and a line in `report.canonical` saying so."""
    lacking = [k for k in ds.info.numeric_keys if not {"q01", "q99"} <= set((ds.stats or {}).get(k, {}))]
    quantiles = None
    if lacking:
        files = [tmp / f for f in dict.fromkeys(ep.data_file for ep in episodes)]
        quantiles, _ = dataset_quantiles(files, lacking, ds.info.features, sum(ep.length for ep in episodes),
                                         workers=workers)
        report.canonical.append(f"exact q01..q99 computed for {', '.join(lacking)}: the source had none (STA020)")
    return dataset_stats(stats_stack(episodes), quantiles, previous=ds.stats)
