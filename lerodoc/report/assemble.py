"""The report put together: `build` gathers (lerodoc.report.data), has the figures drawn (lerodoc.report.plots, in
processes of their own when workers > 1) and writes the page (lerodoc.report.page). Findings come from `lerodoc
validate`, stats and flags from `lerodoc quantiles`.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from lerodoc import __version__
from lerodoc.budget import memory_budget
from lerodoc.dataset import Dataset
from lerodoc.formats.jsonl import write_text
from lerodoc.ops.rewrite import tree_size
from lerodoc.ops.validate import ValidateReport, catalogue, validate
from lerodoc.report import data, page
from lerodoc.conventions import TOLERANCE_S
from lerodoc.selection import Selection
from lerodoc.tables.stats import groups_of
from lerodoc.promote.staging import check_output
from lerodoc.run.parallel import SideProcess

Progress = Callable[[str, int], Callable[[int], None]]
SHOWN_FINDINGS = 100   # per family; the JSON and `lerodoc validate` hold all of them
PLOTS = "lerodoc.report.plots"   # the module that draws the figures, in processes of their own
DRAWING_PROCESSES = 2  # at most (--workers caps them; 1: none): two histogram grids, the lengths and the time series
SHOWN_TASKS = 5        # in the summary; the Tasks section lists every one
PACKED_CHANNELS = 4    # a feature of at most this many channels shares its histogram grid with its small neighbours
PACKED_PANELS = 32     # panels of such a shared grid, at most
SERIES_FEATURES = 16   # features whose sampled episodes' time series are drawn, at most (a row of panels each)
READ_TOGETHER = 64 << 20   # bytes of values: consecutive features read in one pass over the data files, at most


@dataclass
class Report:
    dataset: str
    output: str
    summary: dict
    validate: dict
    channels: list[dict]
    select: str | None
    episodes: dict
    thumbnails: list[dict] = field(default_factory=list)
    tasks: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def build(root: Path, out: Path, *, videos: bool = False, episodes: Selection | None = None, sample: int = 3,
          workers: int = 1, tolerance_s: float = TOLERANCE_S, progress: Progress | None = None,
          force: bool = False) -> Report:
    """Write the report of the dataset at `root` to `out` (never inside the dataset; over an existing file only with
    `force`); decode frames only with `videos`. Time series and frames show the `episodes` selected (an episode the
    dataset lacks is a usage error naming the ones it holds), else `sample` episodes spread evenly."""
    started = time.perf_counter()
    check_output(out, (root,), force=force, folder=False)   # before any work
    ds = Dataset.open(root)
    ds.require_columns()
    sampled = data.sample_episodes(ds, sample, episodes)   # a selection the dataset cannot meet fails before work
    # the figures are drawn in processes of their own, started here: matplotlib's import (a third of a second) and
    # its drawing are Python that held the GIL against the reads and validate
    # (with workers=1, none: the figures are drawn here, and a script calling the API starts no process)
    drawing = min(workers, DRAWING_PROCESSES) if workers > 1 else 0
    if ds.data_bytes() <= memory_budget():
        with SideProcess(PLOTS, workers=drawing) as figures, ThreadPoolExecutor(1) as pool:
            # validate (mostly numpy and pyarrow, which let go of the GIL) runs beside the reads, on this Dataset (it
            # reads the episodes' stats, the reads here their data columns; opening its own and confining the tree
            # again cost 0.1-0.2 s at 20,000 episodes)
            verdict = pool.submit(validate, ds.root, videos=videos, tolerance_s=tolerance_s, dataset=ds)
            return _build(ds, out, verdict.result, videos, sampled, workers, tolerance_s, progress, started,
                          figures.submit)
    # Past the memory budget, one after the other on one Dataset: validate's peak and the features' values together
    # passed 2 GB at a million episodes (2692.7 MiB beside each other, 1717.6 MiB one after the other). The drawing
    # processes (about 130 MiB) start after validate, beside the first feature's read, not beside validate's peak.
    verdict = validate(ds.root, videos=videos, tolerance_s=tolerance_s, dataset=ds)
    with SideProcess(PLOTS, workers=drawing) as figures:
        return _build(ds, out, lambda: verdict, videos, sampled, workers, tolerance_s, progress, started,
                      figures.submit)


def _build(ds: Dataset, out: Path, verdict: Callable[[], ValidateReport], videos: bool, sampled: list, workers: int,
           tolerance_s: float, progress: Progress | None, started: float, draw: Callable[..., Future]) -> Report:
    features = data.channel_features(ds)
    batches = _batches(features, ds.info.features, ds.total_frames)
    tick = progress("data", len(ds.data_files()) * (1 + len(batches))) if progress else None
    columns = data.read_columns(ds, [], sampled, workers=workers, tick=tick)   # task_index, timestamps: no feature
    changes = data.task_changes(ds, columns)
    columns.task_index = None   # every row's: let go before the features are read
    thumbs = data.thumbnail_plan(ds, sampled, columns.timestamps)
    if videos and thumbs:
        tick_frames = progress("frames", len(thumbs)) if progress else None
        data.decode_thumbnails(ds, thumbs, tolerance_s, workers=max(workers, 2), tick=tick_frames)
    chosen = {id(ep) for ep in sampled}
    position = {id(ep): i for i, ep in enumerate(ds.episodes) if id(ep) in chosen}   # of the sampled episodes
    channels: list[dict] = []
    series: dict[str, dict[int, np.ndarray]] = {}   # feature -> sampled episode -> its rows
    grids = []
    # A batch of features' values at a time (`_batches`), each feature's let go once its rows are made: a million
    # episodes' state and action together are over a gigabyte, and 302 features of 2 channels read one at a time
    # read each of a v2.1 dataset's 400 files 302 times. A feature's channel rows, histograms and the sampled
    # episodes' rows are kept.
    # Features of at most PACKED_CHANNELS channels share grids of up to PACKED_PANELS panels: an exporter that stores
    # each sensor as its own feature gave 302 grids of two panels, most of its report's time.
    pack: list[tuple[str, list, list[dict]]] = []
    for name, values in _feature_values(ds, batches, workers, tick):
        rows = data.channel_rows(ds, {name: values})
        channels.extend(rows)
        series[name] = {ep.index: values[columns.rows(position[id(ep)])].copy() for ep in sampled}
        hists = data.channel_histograms(values)
        del values
        if len(rows) > PACKED_CHANNELS:
            if pack:   # the small features before it first: the grids keep the features' order
                grids.append(_packed(pack, draw))
            grids.append((name, draw("histograms", name, hists, rows)))
            continue
        if sum(len(r) for _, _, r in pack) + len(rows) > PACKED_PANELS:
            grids.append(_packed(pack, draw))
        pack.append((name, hists, rows))
    if pack:
        grids.append(_packed(pack, draw))
    per_task = Counter([task for ep in ds.episodes for task in set(ep.tasks)])
    counts = [per_task[task] for task in ds.tasks]
    plotted = _plotted(list(series), channels)
    shown = draw("time_series", *_series(sampled, columns, {name: series[name] for name in plotted}, channels)) \
        if series else None   # the longest
    lengths = draw("episode_lengths", np.diff(columns.starts), ds.info.fps)
    per_task_figure = draw("task_counts", ds.tasks, counts) if len(ds.tasks) > 1 else None
    summary = _summary(ds, counts, int(columns.starts[-1]))
    findings = verdict().to_json()
    report = Report(
        dataset=str(ds.root), output=str(Path(out).absolute()), summary=summary, validate=findings,
        channels=channels, select=data.select_command(ds, channels),
        episodes={"lengths": np.diff(columns.starts).tolist(), "sampled": [ep.index for ep in sampled]},
        thumbnails=[t.to_json(tolerance_s) for t in thumbs if videos],
        tasks={"episodes_per_task": dict(zip(ds.tasks, counts)), "changes": changes,
               "episodes_with_changes": len({c["episode"] for c in changes})})
    sections = [
        ("summary", "Summary", _summary_html(summary, findings, videos)),
        ("channels", "Channels", _channels_html(features, [(alt, g.result()) for alt, g in grids], channels,
                                                report.select)),
        ("episodes", "Episodes", _episodes_html(ds, sampled, lengths.result(), shown and shown.result(), thumbs,
                                                videos, tolerance_s, (len(plotted), len(series)))),
        ("tasks", "Tasks", _tasks_html(ds, counts, changes, per_task_figure and per_task_figure.result())),
    ]
    subtitle = (f"{escape(str(ds.root))} &middot; lerodoc {__version__} &middot; "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    # a report is there whole or not at all
    write_text(Path(out), page.document(f"{ds.root.name}: lerodoc report", sections, subtitle))
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _batches(features: list[str], specs: dict, frames: int) -> list[list[str]]:
    """`features` in consecutive batches read together: as many as hold at most READ_TOGETHER bytes of values at
    `frames` rows (the dtypes `read_columns` gives them), a larger feature alone."""
    batches: list[list[str]] = []
    held = 0
    for name in features:
        group = groups_of([name], specs)[0]
        size = frames * group.widths[0] * np.dtype(group.dtype).itemsize
        if not batches or held + size > READ_TOGETHER:
            batches.append([])
            held = 0
        batches[-1].append(name)
        held += size
    return batches


def _feature_values(ds: Dataset, batches: list[list[str]], workers: int, tick) -> Iterator[tuple[str, np.ndarray]]:
    """(feature, its values) in the features' order, a batch read at a time, each feature's values handed out and
    dropped from its batch's."""
    for batch in batches:
        read = data.read_columns(ds, batch, [], workers=workers, tick=tick, tasks=False).values
        for name in batch:
            yield name, read.pop(name)


def _packed(pack: list[tuple[str, list, list[dict]]], draw: Callable[..., Future]) -> tuple[str, Future]:
    """One grid of the small features in `pack` ((name, histograms, channel rows) each), which is emptied: (its alt
    text, its drawing)."""
    names = [name for name, _, _ in pack]
    alt = names[0] if len(names) == 1 else f"{names[0]} to {names[-1]}"
    grid = draw("histograms", names[0], [h for _, hists, _ in pack for h in hists],
                [r for _, _, rows in pack for r in rows])
    pack.clear()
    return alt, grid


def _plotted(features: list[str], rows: list[dict]) -> list[str]:
    """The features whose time series are drawn, a row of panels each, in the features' order: at most
    SERIES_FEATURES, chosen those with a flagged channel first, then the others in order (state and action lead it in
    lerobot's datasets)."""
    flagged = {r["feature"] for r in rows if r["flags"]}
    chosen = set(sorted(features, key=lambda f: f not in flagged)[:SERIES_FEATURES])
    return [f for f in features if f in chosen]


def _series(sampled, columns, series: dict[str, dict[int, np.ndarray]], rows: list[dict]) -> tuple:
    """`plots.time_series`' arguments: the sampled episodes' (index, timestamps, {feature: rows}), the flagged
    channels and the channel names of each feature."""
    flagged: dict[str, set[int]] = {}
    names: dict[str, list] = {}
    for r in rows:
        names.setdefault(r["feature"], []).append(r["name"])
        if r["flags"]:
            flagged.setdefault(r["feature"], set()).add(r["channel"])
    chosen = [(ep.index, columns.timestamps[ep.index],
               {name: by_episode[ep.index] for name, by_episode in series.items()}) for ep in sampled]
    return chosen, flagged, names


def _summary(ds: Dataset, counts: list[int], frames: int) -> dict:
    return {"version": ds.version, "robot_type": ds.info.robot_type, "fps": ds.info.fps,
            "episodes": len(ds.episodes), "frames": frames, "duration_s": round(frames / ds.info.fps, 3),
            "size_bytes": tree_size(ds.root), "tasks": len(ds.tasks),
            "episodes_per_task": dict(zip(ds.tasks, counts)), "cameras": data.cameras(ds)}


def _summary_html(summary: dict, verdict: dict, videos: bool) -> str:
    facts = [["version", summary["version"]], ["robot type", summary["robot_type"]], ["fps", summary["fps"]],
             ["episodes", summary["episodes"]], ["frames", summary["frames"]],
             ["duration", f"{summary['duration_s'] / 60:.1f} min ({summary['duration_s']:.1f} s)"],
             ["size on disk", f"{summary['size_bytes'] / 1e6:,.1f} MB"]]
    html = page.table(["", ""], [[k, page.number(v)] for k, v in facts])
    top = sorted(summary["episodes_per_task"].items(), key=lambda kv: -kv[1])[:SHOWN_TASKS]
    html += f"<h3>Tasks ({summary['tasks']})</h3>" + page.table(
        ["task", "episodes"], [[t, n] for t, n in top], numeric={1})
    if summary["tasks"] > len(top):
        html += f"<p class=note>... and {summary['tasks'] - len(top)} more under Tasks.</p>"
    if summary["cameras"]:
        html += "<h3>Cameras</h3>" + page.table(
            ["camera", "files", "codec", "size", "pixel format", "fps", "GOP (frames)"],
            [[c["camera"], c["files"], page.number(c["codec"]),
              f"{c['width']}x{c['height']}" if c["width"] else c["error"], page.number(c["pix_fmt"]),
              page.number(c["fps"]), page.number(c["gop"])] for c in summary["cameras"]])
    errors, warnings = verdict["errors"], verdict["warnings"]
    kind = "bad" if errors else "warn" if warnings else "ok"
    html += (f'<h3>Validate{" --videos" if videos else ""}</h3><div class="verdict {kind}">{errors} errors, '
             f"{warnings} warnings</div>")
    if not videos:
        html += "<p class=note>Video containers were not checked; pass --videos to check them and show frames.</p>"
    families = {row["code"]: row["family"] for row in catalogue()}
    by_family: dict[str, list[dict]] = {}
    for f in verdict["findings"]:
        by_family.setdefault(families.get(f["code"], "other"), []).append(f)
    for family, findings in by_family.items():
        shown = findings[:SHOWN_FINDINGS]
        rows = [[f["code"], f["severity"], _where(f), f["message"],
                 (f["hint"] or "") + (" (lerodoc repair fixes it)" if f["fixable"] else "")] for f in shown]
        html += f"<h3>{escape(family)} ({len(findings)})</h3>" + page.table(
            ["code", "severity", "where", "what", "fix"], rows, [f'class="{f["severity"]}"' for f in shown])
        if len(findings) > len(shown):
            html += f"<p class=note>... and {len(findings) - len(shown)} more (lerodoc validate lists them all).</p>"
    return html


def _where(finding: dict) -> str:
    parts = [finding["file"], None if finding["episode"] is None else f"episode {finding['episode']}",
             finding["field"], None if finding["channel"] is None else f"channel {finding['channel']}"]
    return ", ".join(p for p in parts if p)


def _channels_html(features: list[str], grids: list[tuple[str, bytes]], rows: list[dict], select: str | None) -> str:
    if not features:
        return "<p class=note>No numeric state or action feature.</p>"
    flagged = [r for r in rows if r["flags"]]
    html = (f"<p>{len(rows)} channels in {len(features)} features; {len(flagged)} flagged: <b>near-constant</b> "
            "(q99 - q01 &lt; 1e-6), <b>extreme</b> (quantile-normalised min or max beyond &plusmn;10), <b>NaN</b> "
            "(non-finite values; stats over the finite ones). Stats are exact, over every frame.</p>")
    if select:
        html += f"<p>Keep the trainable channels:</p><pre>{escape(select)}</pre>"
    elif features:
        html += "<p>No state or action channel is flagged: nothing to drop with <code>lerodoc select</code>.</p>"
    headers = ["feature", "ch", "name", "min", "q01", "q50", "q99", "max", "std", "flags"]

    def channel_table(chosen: list[dict]) -> str:
        return page.table(
            headers,
            [[r["feature"], r["channel"], r["name"],
              *(page.number(r[k]) for k in ("min", "q01", "q50", "q99", "max", "std")),
              ", ".join(r["flags"]) + (f" ({r['nan']} values)" if r["nan"] else "")] for r in chosen],
            [(f'class="flagged" data-feature="{escape(r["feature"])}" data-channel="{r["channel"]}" '
              f'data-flags="{escape(",".join(r["flags"]))}"') if r["flags"] else "" for r in chosen],
            numeric={1, 3, 4, 5, 6, 7, 8})
    if flagged:
        html += "<h3>Flagged channels</h3>" + channel_table(flagged)
    for name, grid in grids:
        html += page.image(grid, alt=f"{name} histograms")
    html += f"<details><summary>All {len(rows)} channels</summary>{channel_table(rows)}</details>"
    return html


def _episodes_html(ds: Dataset, sampled, lengths: bytes, series: bytes | None, thumbs, videos: bool,
                   tolerance_s: float, plotted: tuple[int, int]) -> str:
    html = page.image(lengths, alt="episode lengths")
    if series:
        html += f"<h3>State and action of {len(sampled)} sampled episodes</h3>"
        if plotted[0] < plotted[1]:
            html += (f"<p class=note>{plotted[0]} of {plotted[1]} features drawn (those with a flagged channel "
                     "first); the Channels section has every channel's stats.</p>")
        html += page.image(series, alt="state and action time series")
    if not ds.info.video_keys:
        return html
    html += "<h3>Frames</h3>"
    if not videos:
        return html + "<p class=note>Frames are decoded only with --videos.</p>"
    html += (f"<p class=note>First, middle and last row of each sampled episode. Caption: the row's timestamp "
             f"and the presentation time (PTS) of the frame decoded for it, both from the start of the episode's "
             f"video window; red where they differ by more than {tolerance_s:g} s (lerobot's tolerance).</p>")
    for camera in ds.info.video_keys:
        mine = [t for t in thumbs if t.camera == camera]
        html += f"<h3>{escape(camera)}</h3>"
        by_episode: dict[int, list] = {}
        for t in mine:
            by_episode.setdefault(t.episode, []).append(t)
        html += page.table(["episode", "first", "middle", "last"],
                           [[e, *(page.Html(_thumb(t, tolerance_s)) for t in ts)] for e, ts in by_episode.items()])
    return html


def _thumb(t: data.Thumb, tolerance_s: float) -> str:
    bad = t.mismatch(tolerance_s)
    if t.error:
        caption = f"row {t.row} &middot; t {t.row_timestamp:.3f} s &middot; {escape(t.error)}"
    else:
        caption = (f"row {t.row} &middot; t {t.row_timestamp:.3f} s &middot; PTS {t.pts:.3f} s"
                   + (f" &middot; &Delta; {1000 * t.delta():+.1f} ms" if bad else ""))
    img = page.image(t.jpeg, "image/jpeg", alt=f"{t.camera} episode {t.episode} row {t.row}", cls="thumb") \
        if t.jpeg else ""
    attrs = (f'class="{"mismatch" if bad else "aligned"}" data-row-ts="{t.row_timestamp:.6f}" '
             f'data-pts="{"" if t.pts is None else f"{t.pts:.6f}"}"')
    return f"<figure>{img}<figcaption {attrs}>{caption}</figcaption></figure>"


def _tasks_html(ds: Dataset, counts: list[int], changes: list[dict], per_task: bytes | None) -> str:
    if not ds.tasks:
        return "<p class=note>No tasks listed.</p>"
    html = page.table(["task_index", "task", "episodes"],
                      [[i, t, c] for i, (t, c) in enumerate(zip(ds.tasks, counts))], numeric={2})
    if per_task:
        html += page.image(per_task, alt="episodes per task")
    episodes = len({c["episode"] for c in changes})
    html += (f"<h3>Task changes within episodes</h3><p>{len(changes)} per-frame task changes in {episodes} "
             f"episodes.</p>")
    if changes:
        def name(i: int) -> str:
            return ds.tasks[i] if 0 <= i < len(ds.tasks) else f"(no task {i})"
        shown = changes[:200]
        html += page.table(["episode", "frame", "from", "to"],
                           [[str(c["episode"]), str(c["frame"]), name(c["from"]), name(c["to"])] for c in shown])
        if len(changes) > len(shown):
            html += f"<p class=note>... and {len(changes) - len(shown)} more (see --json).</p>"
    return html
