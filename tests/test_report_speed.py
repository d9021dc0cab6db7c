"""report's own work at scale (issue 37): what it does per episode is whole-column numpy work, not Python calls, and
its figures are drawn the way the plain ones would be.

- the Python calls `lerodoc.report.assemble.build` makes in its process (validate, Dataset.open, require_columns,
  read_rows and validate's data file reads left out in the thread that runs them, validate's reader threads
  included: they are other modules' work, and they walk the pages of each row group, one an episode as the factory
  writes; with workers=2 the figures are drawn in processes of their
  own, and the threads that hand them over are plumbing) do not grow with the episode count: 200 and 2,000 episodes
  of one data file make the same calls with the figures drawn elsewhere, and about 100 fewer with them drawn here
  (their ticks follow the data), not some per episode (at 8fe333d, 47,000 calls more: numpy's split of every column into
  episodes, the episodes' rows joined again, a task-change scan and its generator per episode; until this test left
  matplotlib's drawing out, the data files' names gathered by a generator, 1,800 more, hidden by the drawing's own
  differences);
- episodes interleaved over two data files are put back in the episodes' order (one gather): every episode's rows
  and task changes are its own, read whole or (a file whose columns do not convert whole) episode by episode;
- a histogram grid is one Axes whatever its channels, one outline a channel, flagged ones red;
- an episode of far more frames than pixels is drawn from `m4`, whose points hold each run's ends, extremes and
  gaps; one of fewer frames from every row;
- features are read in batches of at most READ_TOGETHER bytes of values (a larger feature alone), and a batch's
  values are let go before the next batch is read: a million episodes' state and action together are over a
  gigabyte, and 302 small features read one at a time read every file 302 times.
"""

from __future__ import annotations

import re
import sys
import threading
import weakref
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.checks import common
from lerodoc.report import assemble as report_module
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.report import data
from tests.fixtures.factory import make_dataset

EPISODES_META = "meta/episodes/chunk-000/file-000.parquet"


def _dataset(root, episodes: int, per_file: int | None = None):
    return make_dataset(root, version="v3.0", episodes=episodes, lengths=10, cameras=(), state_dim=16, action_dim=16,
                        episodes_per_file=per_file or episodes, noise=0.3).root


class _Calls:
    """Python function calls (sys.setprofile 'call' events, every thread) while a `build` runs, but none inside the
    functions named in `pause` (callables on a module or class, patched for the run) in the thread that runs them
    (validate runs beside the reads: pausing every thread would leave out whichever of their calls met it), and none
    of the standard library's thread and process plumbing (`PLUMBING`: how many of the drawing processes' threads
    take a result, and how often they wake, changes from run to run)."""

    PLUMBING = tuple(str(Path(threading.__file__).parent / name) for name in (
        "concurrent", "multiprocessing", "selectors.py", "threading.py", "queue.py", "weakref.py"))

    def __init__(self, monkeypatch, pause: list[tuple[object, str]]):
        self.count, self.paused = 0, threading.local()
        for owner, name in pause:
            monkeypatch.setattr(owner, name, self._paused(getattr(owner, name)))

    def _paused(self, fn):
        def wrapper(*args, **kwargs):
            self.paused.depth = getattr(self.paused, "depth", 0) + 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.paused.depth -= 1
        return wrapper

    def _hook(self, frame, event, arg):
        if event == "call" and not getattr(self.paused, "depth", 0) \
                and not frame.f_code.co_filename.startswith(self.PLUMBING):
            self.count += 1

    def build(self, root, out, workers: int = 1) -> int:
        self.count = 0
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        try:
            report_module.build(root, out, force=True, workers=workers)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        return self.count


@pytest.mark.parametrize("workers", [1, 2])   # figures drawn here (about 588,000 calls), or in processes
def test_report_makes_no_python_call_per_episode(tmp_path, monkeypatch, workers):
    small, large = _dataset(tmp_path / "small", 200), _dataset(tmp_path / "large", 2000)
    calls = _Calls(monkeypatch, [(report_module, "validate"), (Dataset, "open"), (Dataset, "require_columns"),
                                 (data, "read_rows"), (common, "read_data_file")])
    report_module.build(small, tmp_path / "warm.html", force=True)     # matplotlib's imports and caches
    few = calls.build(small, tmp_path / "small.html", workers)
    many = calls.build(large, tmp_path / "large.html", workers)
    assert many - few < 300, (few, many)    # 1,800 more episodes: not a call for every six


def test_episodes_interleaved_over_files_are_put_back_in_order(tmp_path, monkeypatch):
    """Episodes 0..3 of 10 frames, file 0 holding episodes 0 and 2, file 1 episodes 1 and 3 (so the files' parts are
    gathered back into the episodes' order); task_index changes at frame 4 of episode 1, and episode 2 has a task of
    its own from its first row (an episode's first row is no change)."""
    root = _dataset(tmp_path / "ds", 4, per_file=2)
    files = sorted(root.glob("data/*/*.parquet"))
    whole = pa.concat_tables([pq.read_table(p) for p in files])
    episodes = np.asarray(whole.column("episode_index").to_pylist())
    tasks = np.asarray(whole.column("task_index").to_pylist())
    tasks[np.flatnonzero(episodes == 1)[4:]] = 7
    tasks[episodes == 2] = 9
    whole = whole.set_column(whole.column_names.index("task_index"), "task_index",
                             pa.array(tasks, type=whole.schema.field("task_index").type))
    for path, held in zip(files, ([0, 2], [1, 3])):
        pq.write_table(whole.filter(pa.array(np.isin(episodes, held))), path)
    meta = pq.read_table(root / EPISODES_META)
    for column, values in (("data/file_index", [0, 1, 0, 1]), ("dataset_from_index", [0, 20, 10, 30]),
                           ("dataset_to_index", [10, 30, 20, 40])):
        meta = meta.set_column(meta.column_names.index(column), column,
                               pa.array(values, type=meta.schema.field(column).type))
    pq.write_table(meta, root / EPISODES_META)

    ds = Dataset.open(root)
    assert [(ep.index, ep.data_file[-9:], ep.data_row) for ep in ds.episodes] == [
        (0, "0.parquet", 0), (1, "1.parquet", 0), (2, "0.parquet", 10), (3, "1.parquet", 10)]
    sampled = [ds.episodes[1], ds.episodes[2]]
    columns = data.read_columns(ds, data.channel_features(ds), sampled, workers=2)
    state = np.asarray(whole.column("observation.state").to_pylist())
    for position, ep in enumerate(ds.episodes):
        mine = episodes == ep.index
        np.testing.assert_array_equal(columns.values["observation.state"][columns.rows(position)], state[mine])
        np.testing.assert_array_equal(columns.task_index[columns.rows(position)], tasks[mine])
    assert sorted(columns.timestamps) == [1, 2]
    assert data.task_changes(ds, columns) == [{"episode": 1, "frame": 4, "from": int(tasks[episodes == 1][0]),
                                               "to": 7}]

    def unconvertible(*args):
        raise LerodocError("does not convert whole")
    monkeypatch.setattr(data, "_whole_file", unconvertible)   # episode by episode, joined: the same columns
    again = data.read_columns(ds, data.channel_features(ds), sampled)
    for name, values in columns.values.items():
        np.testing.assert_array_equal(again.values[name], values)
    np.testing.assert_array_equal(again.task_index, columns.task_index)
    assert again.timestamps.keys() == columns.timestamps.keys()
    for k, times in columns.timestamps.items():
        np.testing.assert_array_equal(again.timestamps[k], times)


def test_a_histogram_grid_draws_every_channel_on_one_axes():
    """A grid holds one Axes whatever its channels (an Axes with its ticks a panel made 163 channels take 2.5 s): one
    frame a channel, one outline a channel with a finite value (red when flagged), its tallest bin at 95% of its
    panel's height and its bins across the panel's width; the name (and flags) above, the range's ends below. Drawn
    twice, the same PNG."""
    import matplotlib.colors
    from lerodoc.report import plots
    rng = np.random.default_rng(0)
    hists = [data.histogram(rng.normal(size=500), 40) for _ in range(20)]
    hists[5] = None   # a channel without one finite value
    rows = [{"name": f"j{c}", "flags": ["extreme"] if c in (1, 2) else []} for c in range(20)]
    fig = plots.histogram_grid("state", hists, rows)
    assert len(fig.axes) == 1
    frames, outlines, ticks = fig.axes[0].collections
    assert len(frames.get_paths()) == 20 and len(outlines.get_paths()) == 19 and len(ticks.get_segments()) == 38
    red = matplotlib.colors.to_rgba(plots.FLAG_EDGE)
    assert [tuple(color) == red for color in outlines.get_facecolors()] == [c in (1, 2) for c in range(20) if c != 5]
    assert [tuple(color) == red for color in frames.get_edgecolors()] == [c in (1, 2) for c in range(20)]
    for frame, outline in zip(frames.get_paths()[:5], outlines.get_paths()[:5]):
        (x0, y0), (x1, y1) = frame.vertices.min(axis=0), frame.vertices.max(axis=0)
        xs, ys = outline.vertices[:, 0], outline.vertices[:, 1]
        assert xs.min() == pytest.approx(x0) and xs.max() == pytest.approx(x1)
        assert ys.min() == pytest.approx(y0) and ys.max() == pytest.approx(y0 + 0.95 * (y1 - y0))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "1: j1\nextreme" in texts and "5: j5" in texts and "0: j0" in texts
    assert f"{hists[0][1][0]:.3g}" in texts and f"{hists[0][1][-1]:.3g}" in texts
    assert plots.png(fig)[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots.png(plots.histogram_grid("state", hists, rows)) == plots.png(fig)


def test_a_histogram_is_numpys_of_the_values_over_its_edges():
    rng = np.random.default_rng(1)
    for column in (rng.normal(3.0, 2.0, size=10_000), rng.normal(size=5_000).astype(np.float32) * 1e4 + 1e5):
        counts, edges = data.histogram(column, 40)
        np.testing.assert_array_equal(counts, np.histogram(column, bins=edges)[0])
        np.testing.assert_allclose(edges, np.linspace(column.min(), column.max(), 41), rtol=1e-6)


def test_m4_keeps_each_runs_ends_extremes_and_gaps():
    from lerodoc.report.plots import m4
    rng = np.random.default_rng(2)
    frames, runs = 10_007, 50
    times = np.arange(frames) / 30.0
    values = np.cumsum(rng.normal(size=(frames, 3)), axis=0).astype(np.float32)
    values[5000, 1] = np.nan
    values[7000:7300, 2] = np.nan
    xs, ys = m4(times, values, runs)
    size = -(-frames // runs)
    assert xs.shape == ys.shape == (5 * (-(-frames // size)), 3)
    for c in range(3):
        assert (np.diff(xs[:, c]) >= 0).all()                      # in time order
        assert xs[0, c] == times[0] and xs[-1, c] == times[-1]     # the line's ends
        for run in range(0, frames, size):
            span, mine = values[run:run + size, c], ys[5 * (run // size):5 * (run // size) + 5, c]
            assert mine[0] == span[0] or np.isnan(span[0])
            assert mine[-1] == span[-1] or np.isnan(span[-1])
            assert np.isnan(mine).any() == np.isnan(span).any()    # a gap stays a gap
            if not np.isnan(span).all():
                assert np.nanmin(mine) == np.nanmin(span) and np.nanmax(mine) == np.nanmax(span)


@pytest.mark.parametrize("frames, channels", [(300, 2), (20_000, 2), (20_000, 16)])
def test_time_series_draws_every_row_unless_far_more_than_pixels(frames, channels, monkeypatch):
    """m4 only past DECIMATE_FROM frames a pixel column; SVG up to SVG_POINTS points drawn, PNG past them (3 episodes
    of 20,000 frames in 16 channels: 3 x 3,130 m4 rows x 16 = 150,240 points)."""
    from lerodoc.report import plots
    seen = []
    real = plots.m4
    monkeypatch.setattr(plots, "m4", lambda *a: seen.append(a[2]) or real(*a))
    times = np.arange(frames) / 30.0
    series = {"action": np.cumsum(np.ones((frames, channels)), axis=0)}
    image = plots.time_series([(0, times, series)] * 3, {"action": {1}}, {"action": [f"j{c}" for c in range(channels)]})
    rows = 5 * seen[0] if seen else frames
    svg = 3 * rows * channels <= plots.SVG_POINTS
    assert svg == (channels == 2)
    assert image.startswith(b"<?xml") if svg else image[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(seen) == (3 if frames == 20_000 else 0)


def test_read_columns_copies_each_file_into_place_of_the_type_concatenate_gives(tmp_path):
    """Each file's values go into one array as they come (its parts let go), widened where a later file stores a
    column wider (float64 after float32): the values and the type np.concatenate of the files' values gives."""
    fixture = make_dataset(tmp_path / "src", version="v3.0", episodes=4, lengths=5, episodes_per_file=2)
    root = fixture.root
    files = sorted(root.glob("data/*/*.parquet"))
    assert len(files) == 2
    table = pq.read_table(files[1])
    state = np.asarray(table.column("observation.state").to_pylist(), dtype=np.float64) + 1e-9   # not float32
    wide = pa.array(state.tolist(), pa.list_(pa.float64()))
    pq.write_table(table.set_column(table.column_names.index("observation.state"), "observation.state", wide),
                   files[1])
    ds = Dataset.open(root)
    columns = data.read_columns(ds, data.channel_features(ds), [ds.episodes[0]], workers=2)
    first = np.asarray(pq.read_table(files[0]).column("observation.state").to_pylist(), dtype=np.float32)
    expected = np.concatenate([first, state])
    assert columns.values["observation.state"].dtype == expected.dtype == np.float64
    np.testing.assert_array_equal(columns.values["observation.state"], expected)
    action = np.concatenate([np.asarray(pq.read_table(f).column("action").to_pylist(), dtype=np.float32)
                             for f in files])
    # the second file's state and action are converted side by side (one group, float64 there): widened alike
    assert columns.values["action"].dtype == np.float64
    np.testing.assert_array_equal(columns.values["action"], action)


@pytest.mark.parametrize("together", ["one feature", "every feature"])
def test_report_holds_one_batch_of_features_values_at_a_time(tmp_path, monkeypatch, together):
    """Features are read in batches of at most READ_TOGETHER bytes of values, and a batch's values are let go before
    the next batch is read: with room for one feature's values, one feature a read; with the default, this small
    dataset's features in one read (one pass over its files, where 302 features read one at a time read each file
    302 times)."""
    root = _dataset(tmp_path / "ds", 6, per_file=4)
    real, features, held = data.read_columns, [], []
    channel_features = data.channel_features(Dataset.open(root))
    assert len(channel_features) >= 2
    one_feature = 60 * 16 * np.dtype(np.float32).itemsize   # 6 episodes of 10 frames, 16 float32 channels
    if together == "one feature":
        monkeypatch.setattr(report_module, "READ_TOGETHER", one_feature)
    assert report_module.READ_TOGETHER >= one_feature * len(channel_features) or together == "one feature"

    def read_columns(ds, wanted, *args, **kwargs):
        assert [ref() for ref in held if ref() is not None] == [], "a batch's values outlived their turn"
        columns = real(ds, wanted, *args, **kwargs)
        features.append(list(wanted))
        assert sum(v.nbytes for v in columns.values.values()) <= report_module.READ_TOGETHER
        held.extend(weakref.ref(values) for values in columns.values.values())
        return columns
    monkeypatch.setattr(data, "read_columns", read_columns)
    report = report_module.build(root, tmp_path / "report.html")
    batches = [[name] for name in channel_features] if together == "one feature" else [channel_features]
    assert features == [[]] + batches   # task_index and timestamps, then the batches
    assert [r["feature"] for r in report.channels] == [name for name in channel_features for _ in range(16)]


def test_a_feature_larger_than_a_batch_is_read_alone():
    specs = {"a": {"dtype": "float32", "shape": [2]}, "b": {"dtype": "float64", "shape": [2]},
             "c": {"dtype": "float32", "shape": [1000]}, "d": {"dtype": "float32", "shape": [2]},
             "e": {"dtype": "float32", "shape": [2]}}
    frames = report_module.READ_TOGETHER // 1000   # c alone is 4x the limit; a, b, d and e together far less
    assert report_module._batches(list(specs), specs, frames) == [["a", "b"], ["c"], ["d", "e"]]
    assert report_module._batches(list(specs), specs, 0) == [list(specs)]
    assert report_module._batches([], specs, frames) == []


def test_many_small_features_share_grids_and_the_time_series_shows_a_few(tmp_path, monkeypatch):
    """An exporter that stores each sensor as its own feature: 302 features of 2 channels took 62.9 s to report (a
    grid of two panels each, and a time series of 302 rows of panels). Features of at most PACKED_CHANNELS channels
    share grids of up to PACKED_PANELS panels, and the time series draws SERIES_FEATURES features, flagged ones
    first, saying how many; every channel is still in the JSON and the table."""
    from bench.dataset import numeric_v30
    from lerodoc import api
    drawn = []
    original = report_module._series

    def spy(sampled, columns, series, rows):
        drawn.append(list(series))
        return original(sampled, columns, series, rows)
    monkeypatch.setattr(report_module, "_series", spy)
    dims = {"observation.sensor_x": 2, "observation.sensor_y": 2, "observation.state": 8, "action": 8,
            **{f"observation.sensor_{i}": 2 for i in range(40)}}
    root = numeric_v30(tmp_path / "ds", 200, 20, dims)
    report = api.report(root, tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    alts = re.findall(r'alt="([^"]*) histograms"', html)
    assert alts == ["observation.sensor_x to observation.sensor_y", "observation.state", "action",
                    "observation.sensor_0 to observation.sensor_15",
                    "observation.sensor_16 to observation.sensor_31", "observation.sensor_32 to observation.sensor_39"]
    assert len(report.channels) == 2 * 2 + 8 + 8 + 40 * 2
    assert drawn == [list(dims)[:report_module.SERIES_FEATURES]]
    assert f"{report_module.SERIES_FEATURES} of {len(dims)} features drawn" in html
