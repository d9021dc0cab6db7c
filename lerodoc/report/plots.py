"""The report's figures, drawn with matplotlib's object API (no pyplot state, no display): as SVG where the drawing
is small whatever the data (histograms, bars, a short time series), as PNG where it has many points (`SVG_POINTS`)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["text.parse_math"] = False   # a task or channel name is shown as written: "$5" is not math
# Every string a dataset gives is drawn as `render.shown` makes it for a terminal (a control character as `\x1b`):
# SVG is XML, which holds no control character, and one in a channel or task name broke the whole image.
# SVG text as text, for the viewer's fonts to draw: matplotlib's glyph outlines and Agg's rasterising of them were most
# of a histogram grid's time (163 channels: 0.22 s against 0.61 s as PNG). The salt makes its ids, so its bytes, fixed.
matplotlib.rcParams["svg.fonttype"] = "none"
matplotlib.rcParams["svg.hashsalt"] = "lerodoc"
import numpy as np  # noqa: E402
from matplotlib.collections import LineCollection, PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FormatStrFormatter, LogFormatter, MaxNLocator  # noqa: E402

from lerodoc.render import shown  # noqa: E402

FLAG_FACE = "#fde2e1"
FLAG_EDGE = "#c0392b"
BAR = "#4c72b0"
COLUMNS = 8          # small multiples per row
DPI = 80


def margins(fig: Figure, left: float, right: float, top: float, bottom: float, wspace: float = 0.0,
            hspace: float = 0.0) -> None:
    """Fixed margins around the figure's grid of Axes and gaps between them, all in inches. Constrained layout finds
    them by measuring every tick label, a third of a small figure's drawing time; a figure whose labels are short and
    of known size (numbers at 7 points, a title, a feature name) gets room for them up front."""
    width, height = fig.get_size_inches()
    rows, cols = fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
    panel_w = (width - left - right - (cols - 1) * wspace) / cols
    panel_h = (height - top - bottom - (rows - 1) * hspace) / rows
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height,
                        wspace=wspace / panel_w, hspace=hspace / panel_h)


def png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def svg(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", dpi=DPI, metadata={"Date": None})
    return buffer.getvalue()


def histograms(feature: str, hists: list[tuple[np.ndarray, np.ndarray] | None], rows: list[dict]) -> bytes:
    """`histogram_grid`'s SVG."""
    return svg(histogram_grid(feature, hists, rows))


def histogram_grid(feature: str, hists: list[tuple[np.ndarray, np.ndarray] | None], rows: list[dict]) -> Figure:
    """One figure of a panel per channel, `COLUMNS` a row (the channels of one feature, or where `rows` name several
    features, the small ones packed together by `report.assemble`, each panel naming its feature's channel): each
    histogram as a filled step outline scaled to its panel (its tallest bin at 95% of the panel's height), the
    range's ends below, the channel's name above; a flagged panel red, with its flags. The panels are drawn on one
    Axes whose units are the figure's inches (no Axes, axis or tick objects per panel: those were nine tenths of a
    grid's drawing, which grew with the channels: 163 of them for a humanoid's state); all outlines are one
    PolyCollection, all frames another."""
    channels = len(hists)
    packed = len({row.get("feature") for row in rows}) > 1
    ncols = min(COLUMNS, channels)
    nrows = -(-channels // ncols)
    width, height = 1.9 * ncols, 1.35 * nrows + 0.6
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    side, top, bottom = 0.015 * width, 0.7, 0.25   # margins in inches (the suptitle above, the range ends below)
    across, down = 0.12, 0.75                      # gaps between panels, in panel widths and heights (names above)
    panel_w = (width - 2 * side) / (ncols + across * (ncols - 1))
    panel_h = (height - top - bottom) / (nrows + down * (nrows - 1))
    frames, outlines, faces, edges, widths, tick_lines = [], [], [], [], [], []
    for c, (hist, row) in enumerate(zip(hists, rows)):
        r, k = divmod(c, ncols)
        x0 = side + k * panel_w * (1 + across)
        y0 = height - top - panel_h - r * panel_h * (1 + down)
        flagged = bool(row["flags"])
        frames.append([(x0, y0), (x0 + panel_w, y0), (x0 + panel_w, y0 + panel_h), (x0, y0 + panel_h)])
        faces.append(FLAG_FACE if flagged else "white")
        edges.append(FLAG_EDGE if flagged else "black")
        widths.append(1.5 if flagged else 0.8)
        if hist is not None:
            counts, bin_edges = hist
            xs = np.linspace(x0, x0 + panel_w, len(bin_edges))   # `histogram`'s bins are of one width
            ys = y0 + counts / max(int(counts.max()), 1) * 0.95 * panel_h
            outlines.append((np.column_stack([np.repeat(xs, 2), np.concatenate([[y0], np.repeat(ys, 2), [y0]])]),
                             FLAG_EDGE if flagged else BAR))
            for x, text, align in ((x0, bin_edges[0], "left"), (x0 + panel_w, bin_edges[-1], "right")):
                tick_lines.append([(x, y0), (x, y0 - 0.03)])
                ax.text(x, y0 - 0.045, f"{text:.3g}", fontsize=6, ha=align, va="top")
        if packed:   # several features' channels: each panel names its own
            label = shown(row["name"]) if row["name"] else f"{shown(row['feature'])} {row['channel']}"
        else:
            label = f"{c}: {shown(row['name'])}" if row["name"] else f"channel {c}"
        ax.text(x0 + panel_w / 2, y0 + panel_h + 0.03, label[:26] + ("\n" + ", ".join(row["flags"]) if flagged else ""),
                fontsize=7, ha="center", va="bottom", color=FLAG_EDGE if flagged else "black")
    ax.add_collection(PolyCollection(frames, facecolors=faces, edgecolors=edges, linewidths=widths), autolim=False)
    if outlines:
        polygons, colors = zip(*outlines)
        ax.add_collection(PolyCollection(polygons, facecolors=colors, edgecolors=colors, linewidths=0.5),
                          autolim=False)
        ax.add_collection(LineCollection(tick_lines, colors="black", linewidths=0.8), autolim=False)
    if packed:
        feature = f"{rows[0]['feature']} to {rows[-1]['feature']} ({len({row['feature'] for row in rows})} features)"
    fig.suptitle(f"{shown(feature)}: distribution of each channel over all frames (red: flagged)", fontsize=10)
    return fig


def episode_lengths(lengths: np.ndarray, fps: int) -> bytes:
    """The distribution of episode lengths ((episodes,) integers): up to 50 bins, one per distinct length below."""
    fig = Figure(figsize=(7, 2.6))
    ax = fig.subplots()
    margins(fig, left=0.75, right=0.15, top=0.75, bottom=0.5)   # ticks, labels; the title and the seconds axis on top
    ax.hist(lengths, bins=min(50, max(1, len(np.unique(lengths)))), color=BAR, edgecolor="white")
    ax.set_xlabel(f"episode length (frames at {fps} fps)")
    ax.set_ylabel("episodes")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{len(lengths)} episodes: min {int(lengths.min())}, median {int(np.median(lengths))}, "
                 f"max {int(lengths.max())}", fontsize=10)
    seconds = ax.secondary_xaxis("top", functions=(lambda f: f / fps, lambda s: s * fps))
    seconds.set_xlabel("seconds", fontsize=8)
    return svg(fig)


def time_series(episodes: list[tuple[int, np.ndarray, dict[str, np.ndarray]]], flagged: dict[str, set[int]],
                names: dict[str, list[str | None]]) -> bytes:
    """Channels against the row timestamps: one column per sampled (episode, times, {feature: (frames, channels)}),
    one row per feature; one time axis for all panels (episodes of different lengths compare at a glance), each
    panel its own value axis. Flagged channels are drawn thick and red, over the others.

    A panel's unflagged channels are one `plot` call (a line each, colours in the cycle's order as before).

    Downsampling: an episode of more than `DECIMATE_FROM` frames a pixel column of its panel (a panel is at most the
    figure's width over the episodes, in pixels: with 3 episodes 313, so more than 5,008 frames, 2.8 min at 30 fps)
    is drawn from `m4` of its rows, `RUNS_PER_PIXEL` runs a pixel column: per channel the first, last, smallest and
    largest row of each run (and its first NaN), so every line keeps its ends, its extremes, its gaps and its path
    across each pixel column, and the axes are those of every row; only the zigzag inside half a pixel column is left
    out, which changes a pixel's shade, not the picture. Shorter episodes are drawn from every row.

    SVG when at most `SVG_POINTS` points are drawn (the viewer's fonts draw its text), else PNG."""
    features = list(episodes[0][2])
    ncols = len(episodes)
    width_in = min(16.0, 1.5 + 3.4 * ncols)
    fig = Figure(figsize=(width_in, 1.8 * len(features) + 0.6))
    axes = fig.subplots(len(features), ncols, sharex=True, squeeze=False)
    # a feature's name and its value ticks on the left of each row, each panel's own value ticks between panels,
    # the episode titles above (and a scale such as 1e6 above each panel), the time ticks and label below
    margins(fig, left=0.85, right=0.1, top=0.3, bottom=0.45, wspace=0.6, hspace=0.3)
    pixels = int(width_in * DPI / ncols) + 1       # a panel's width is at most this
    drawn = 0                                      # points: SVG or PNG
    for col, (episode, times, series) in enumerate(episodes):
        axes[0, col].set_title(f"episode {episode}", fontsize=9)
        axes[-1, col].set_xlabel("timestamp (s)", fontsize=8)
        for row, feature in enumerate(features):
            ax, values, bad = axes[row, col], series[feature], flagged.get(feature, set())
            xs, ys = (m4(times, values, RUNS_PER_PIXEL * pixels) if len(times) > DECIMATE_FROM * pixels
                      else (times, values))
            good = [c for c in range(values.shape[1]) if c not in bad]
            drawn += ys.size
            if good:
                ax.plot(xs if xs.ndim == 1 else xs[:, good], ys[:, good], linewidth=0.8, alpha=0.8)
            for c in sorted(bad):
                if c < values.shape[1]:
                    ax.plot(xs if xs.ndim == 1 else xs[:, c], ys[:, c], color=FLAG_EDGE, linewidth=1.6, zorder=3,
                            label=f"{c}: {shown(names[feature][c] or '')} (flagged)")
            ax.tick_params(labelsize=7)
            for axis in (ax.xaxis, ax.yaxis):   # a few ticks a small panel: each tick's objects were most of its time
                axis.set_major_locator(MaxNLocator(nbins=4))
            if col == 0:
                ax.set_ylabel(shown(feature), fontsize=8)
            if bad and col == ncols - 1:
                ax.legend(fontsize=6, loc="upper right")
    return svg(fig) if drawn <= SVG_POINTS else png(fig)


SVG_POINTS = 50_000   # a time series of at most this many points drawn is SVG (a few hundred KB), more is PNG
DECIMATE_FROM = 16   # an episode of more frames than this a pixel column of its panel is drawn from `m4`, at
RUNS_PER_PIXEL = 2   # this many runs a pixel column (5 rows a run: 10 a pixel column, at most 5/8 of every row)


def m4(times: np.ndarray, values: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """M4 aggregation (Jugel et al., VLDB 2014) of the (frames, channels) `values` against `times`, with gaps: the
    rows cut into `buckets` equal runs (the last one shorter), and of each run, per channel, its first and last row,
    the rows of its smallest and largest value (NaN left out) and its first NaN row (its first row where it has
    none), in row order: ((5 * runs, channels) times, (5 * runs, channels) values). A line through them covers the
    pixels a line through every row covers when a run is at most a pixel column wide, and breaks where that one
    does."""
    frames, channels = values.shape
    size = -(-frames // buckets)
    runs = -(-frames // size)
    padded = np.concatenate([values, np.repeat(values[-1:], runs * size - frames, axis=0)])   # ties: the real row
    cut = padded.reshape(runs, size, channels)
    gaps = np.isnan(cut)
    base = (np.arange(runs) * size)[:, None]
    picks = np.stack([np.broadcast_to(base, (runs, channels)),
                      np.broadcast_to(np.minimum(base + size - 1, frames - 1), (runs, channels)),
                      base + np.where(gaps, np.inf, cut).argmin(axis=1),
                      base + np.where(gaps, -np.inf, cut).argmax(axis=1),
                      base + gaps.argmax(axis=1)], axis=1)   # (runs, 5, channels)
    rows = np.sort(picks, axis=1).reshape(runs * 5, channels)
    return times[rows], np.take_along_axis(values, rows, axis=0)


def task_counts(tasks: list[str], counts: list[int], top: int = 30) -> bytes:
    order = np.argsort(counts)[::-1][:top]
    labels = [shown(tasks[i]) for i in order]
    labels = [label if len(label) <= 60 else label[:57] + "..." for label in labels]
    fig = Figure(figsize=(7, 0.28 * len(order) + 0.9), layout="constrained")
    ax = fig.subplots()
    ax.barh(range(len(order)), [counts[i] for i in order], color=BAR)
    ax.set_yticks(range(len(order)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("episodes")
    return svg(fig)


def training_curves(rows: list[dict]) -> Figure:
    """Loss (per step and smoothed, log scale), learning rate, gradient norm and samples/s against step."""
    steps = np.array([r["step"] for r in rows], float)

    def column(key: str) -> np.ndarray:
        return np.array([r.get(key, np.nan) if r.get(key) is not None else np.nan for r in rows], float)

    fig = Figure(figsize=(10, 6.5), layout="constrained")
    (loss_ax, lr_ax), (norm_ax, speed_ax) = fig.subplots(2, 2, sharex=True)
    loss = column("loss")
    loss_ax.plot(steps, loss, color="#9ab8e0", linewidth=0.8, label="per step")
    window = max(1, min(50, len(rows) // 10))
    if len(rows) >= window:
        smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
        loss_ax.plot(steps[window - 1:], smooth, color="#1f4e9c", linewidth=1.6, label=f"mean of {window} steps")
    if np.nanmin(loss, initial=np.inf) > 0:
        loss_ax.set_yscale("log")
        loss_ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))   # plain numbers, not 2x10^0
        loss_ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    loss_ax.set_ylabel("loss")
    loss_ax.legend(fontsize=8)
    lr_ax.plot(steps, column("lr"), color="#2a9d8f")
    lr_ax.set_ylabel("learning rate")
    norm_ax.plot(steps, column("grad_norm"), color="#e76f51", linewidth=0.8)
    norm_ax.set_ylabel("gradient norm (before clipping)")
    speed = column("samples_per_s")     # written once per logging window, on its last step
    held = np.isfinite(speed)
    speed_ax.plot(steps[held], speed[held], ".-", color="#6a4c93", markersize=4)
    speed_ax.set_ylabel("samples / s")
    for ax in (norm_ax, speed_ax):
        ax.set_xlabel("step")
    for ax in (loss_ax, lr_ax, norm_ax, speed_ax):
        ax.grid(alpha=0.3)
    fig.suptitle("training", fontsize=11)
    return fig
