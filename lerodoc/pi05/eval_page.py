"""The page of `lerodoc eval pi05`: one self-contained HTML file in the style of `lerodoc report` (lerodoc.report.page:
inline CSS, images as data: URIs, no script, no network). Scores against the baselines, the error by horizon step,
predicted against recorded actions per joint for a few episodes, and camera frames of those episodes (decoded by
the report's thumbnail code)."""

from __future__ import annotations

import time
from html import escape
from pathlib import Path

import numpy as np

from lerodoc import __version__
from lerodoc.conventions import TOLERANCE_S
from lerodoc.formats.jsonl import write_text
from lerodoc.report import data as report_data, page
from lerodoc.selection import format_ranges

SAMPLED = 3             # episodes drawn per joint
CHUNKS_PER_EPISODE = 12  # predicted chunks drawn over each episode's recorded actions
COLORS = {"policy": "#1f4e9c", "hold_last_action": "#e76f51", "mean_action": "#2a9d8f", "base_weights": "#6a4c93"}
BASELINES = {"hold_last_action": "hold the last recorded action", "mean_action": "the dataset's mean action",
             "base_weights": "the weights the run started from"}   # the report's baseline keys, as the page says them


def write_page(out: Path, result, dataset, progress=None) -> None:
    """Draw `result` (evaluate.Evaluation) and write it to `out` whole."""
    # start-up: lerodoc.report.plots loads matplotlib
    from lerodoc.report.plots import png
    r = result.report
    sampled = _sampled(r["episodes"])
    sections = [("scores", "Scores", _scores_html(r, BASELINES)),
                ("horizon", "Error by horizon step", page.image(png(horizon_figure(r)), alt="error by horizon step")
                 + "<p class=note>Mean absolute error over all action dimensions, each normalised by its q01..q99 "
                   "range, at each step of the predicted chunk (step 0: the frame's own action).</p>")]
    joints = ""
    for number in sampled:
        joints += f"<h3>Episode {number}</h3>" + page.image(png(episode_figure(result, number)),
                                                            alt=f"episode {number}: predicted and recorded actions")
    sections.append(("joints", "Predicted and recorded actions", joints + (
        f"<p class=note>Black: the recorded action of each joint against time. Coloured: chunks the policy predicted "
        f"({r['action_horizon']} steps from the frame they start at; up to {CHUNKS_PER_EPISODE} per "
        f"episode).</p>")))
    sections.append(("dims", "Per dimension and per episode", _detail_html(r)))
    sections.append(("cameras", "Camera frames", _cameras_html(dataset, result, sampled, progress)))
    subtitle = (f"{escape(r['source'])} ({escape(r['source_kind'])}, step {r['step']}) on {escape(r['dataset'])} "
                f"&middot; lerodoc {__version__} &middot; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    write_text(out, page.document(f"{Path(r['dataset']).name}: lerodoc eval pi05", sections, subtitle))


def _sampled(episodes: list[int]) -> list[int]:
    """Up to SAMPLED of the evaluated episodes, spread evenly (first and last included)."""
    if len(episodes) <= SAMPLED:
        return list(episodes)
    return [episodes[i] for i in np.linspace(0, len(episodes) - 1, SAMPLED).round().astype(int)]


def _scores_html(r: dict, baselines: dict) -> str:
    rows = [["policy", r["step"], *(page.number(r["policy"][k]) for k in ("mae", "mse", "mae_normalised",
                                                                          "mse_normalised")), ""]]
    for name, scores in r["baselines"].items():
        label = f"{name}: {baselines[name]}"
        if not scores["available"]:
            rows.append([label, "", "", "", "", "", f"not available: {scores['reason']}"])
            continue
        verdict = "policy better" if r["beats"][name] else "baseline better or equal"
        rows.append([label, "", *(page.number(scores[k]) for k in ("mae", "mse", "mae_normalised",
                                                                    "mse_normalised")), verdict])
    which = (f"the run's held-out episodes {escape(_ranges(r['episodes']))}" if r["held_out"]
             else f"episodes {escape(_ranges(r['episodes']))}")
    return (f"<p>{r['frames']} frames of {which}, every {r['stride']}{'st' if r['stride'] == 1 else 'th'} frame; "
            f"one chunk of {r['action_horizon']} actions each, from a fixed noise draw (seed {r['seed']}). "
            f"Median latency of one chunk at batch 1 on {escape(r['device'])}: {r['latency_ms_median']:.1f} ms.</p>"
            + page.table(["", "step", "MAE", "MSE", "MAE (q01..q99)", "MSE (q01..q99)", "against the policy"], rows,
                         numeric={2, 3, 4, 5})
            + "<p class=note>MAE and MSE over every action dimension and every chunk step inside its episode; "
              "(q01..q99): each dimension's error divided by its q01..q99 range in the run's stats.</p>")


def _detail_html(r: dict) -> str:
    methods = [("policy", r["policy"])] + [(k, v) for k, v in r["baselines"].items() if v["available"]]
    dims = page.table(["dimension", *(f"{name} MAE" for name, _ in methods)],
                      [[name, *(page.number(m["per_dim"]["mae"][i]) for _, m in methods)]
                       for i, name in enumerate(r["action_names"])], numeric=set(range(1, len(methods) + 1)))
    episodes = page.table(["episode", "frames", *(f"{name} MAE (q01..q99)" for name, _ in methods)],
                          [[e["episode"], e["frames"], *(page.number(m["per_episode"][i]["mae_normalised"])
                                                         for _, m in methods)]
                           for i, e in enumerate(r["policy"]["per_episode"])],
                          numeric=set(range(1, len(methods) + 2)))
    return (f"<h3>MAE per action dimension ({escape(r['action_key'])}, its units)</h3>{dims}"
            f"<h3>Per episode</h3>{episodes}")


def _cameras_html(dataset, result, sampled: list[int], progress) -> str:
    cameras = result.report["cameras"]
    if not cameras:
        return "<p class=note>The policy sees no camera.</p>"
    chosen = [ep for ep in dataset.episodes if ep.index in set(sampled)]
    position = {ep.index: i for i, ep in enumerate(dataset.episodes)}
    frames = result.frames
    timestamps = {ep.index: frames.timestamp[frames.episode == position[ep.index]] for ep in chosen}
    thumbs = [t for t in report_data.thumbnail_plan(dataset, chosen, timestamps) if t.camera in cameras]
    tick = progress("thumbs", len(thumbs)) if progress else None
    report_data.decode_thumbnails(dataset, thumbs, TOLERANCE_S, workers=2, tick=tick)
    html = "<p class=note>First, middle and last frame of each drawn episode, as recorded.</p>"
    for camera in cameras:
        by_episode: dict[int, list] = {}
        for t in thumbs:
            if t.camera == camera:
                by_episode.setdefault(t.episode, []).append(t)
        html += f"<h3>{escape(camera)}</h3>" + page.table(
            ["episode", "first", "middle", "last"],
            [[e, *(page.Html(_figure(t)) for t in ts)] for e, ts in by_episode.items()])
    return html


def _figure(t) -> str:
    img = page.image(t.jpeg, "image/jpeg", alt=f"{t.camera} episode {t.episode} row {t.row}", cls="thumb") \
        if t.jpeg else ""
    caption = escape(t.error) if t.error else f"row {t.row} &middot; t {t.row_timestamp:.3f} s"
    return f"<figure>{img}<figcaption>{caption}</figcaption></figure>"


def _ranges(numbers: list[int]) -> str:
    return format_ranges(numbers)


# ------------------------------------------------------------------------------------------------ figures


def horizon_figure(r: dict):
    """Normalised MAE against chunk step, the policy and each available baseline."""
    # matplotlib: loaded only when a plot is drawn
    from matplotlib.figure import Figure
    fig = Figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.subplots()
    methods = [("policy", r["policy"])] + [(k, v) for k, v in r["baselines"].items() if v["available"]]
    for name, m in methods:
        values = m["by_horizon"]["mae_normalised"]
        ax.plot(np.arange(len(values)), values, "o-" if name == "policy" else ".--", markersize=4,
                linewidth=2 if name == "policy" else 1.2, color=COLORS.get(name), label=name)
    ax.set_xlabel("step of the predicted chunk")
    ax.set_ylabel("MAE / (q99 - q01)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def episode_figure(result, number: int):
    """One panel per action dimension: the recorded actions of episode `number` against time, and up to
    CHUNKS_PER_EPISODE predicted chunks, evenly spaced over the evaluated frames, from where each starts."""
    # matplotlib: loaded only when a plot is drawn
    from matplotlib.figure import Figure
    from lerodoc.report.plots import COLUMNS
    r, frames = result.report, result.frames
    position = result.numbers.index(number)
    mine = np.flatnonzero(frames.episode == position)
    t = frames.timestamp[mine]
    dt = float(np.median(np.diff(t))) if len(t) > 1 else 1.0
    recorded = frames.raw_action[mine]
    evaluated = np.flatnonzero(frames.episode[result.rows] == position)
    shown = evaluated[np.unique(np.linspace(0, len(evaluated) - 1, min(CHUNKS_PER_EPISODE, len(evaluated)))
                                .round().astype(int))] if len(evaluated) else evaluated
    A = recorded.shape[1]
    ncols = min(COLUMNS // 2, A)
    nrows = -(-A // ncols)
    fig = Figure(figsize=(3.2 * ncols, 2.1 * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for d, ax in enumerate(axes):
        if d >= A:
            ax.set_axis_off()
            continue
        ax.plot(t, recorded[:, d], color="black", linewidth=1.2, label="recorded")
        for k, i in enumerate(shown):
            steps = result.valid[i]
            start = frames.timestamp[result.rows[i]]
            ax.plot(start + dt * np.arange(len(steps))[steps], result.predicted[i, steps, d],
                    color=COLORS["policy"], linewidth=1, alpha=0.8, label="predicted" if k == 0 else None)
        ax.set_title(f"{d}: {r['action_names'][d]}"[:40], fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"episode {number}: {r['action_key']} against time (s), recorded and predicted chunks", fontsize=9)
    return fig
