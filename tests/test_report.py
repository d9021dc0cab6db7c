"""report: a self-contained page that loads in a browser and shows planted defects; its JSON; bad input."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.fixtures.defects_data import edit_parquet, replace_column, rows_of, vectors
from tests.fixtures.defects_media import shift_window
from tests.fixtures.factory import make_dataset
from tests.helpers import require, run_cli, run_json

FLAT = ("observation.state", 2)        # set to one value on every frame
SPIKED = ("action", 4)                 # x3000 on one frame (a jump)
SHIFTED = ("observation.images.top", 2)   # camera, episode whose window is moved 0.4 frame late: the first of
#                                           file-001, so the window stays inside the file (a file's last episode
#                                           moved late would pass the file's end: VID006, not VID010)
CHECKER = """<script>addEventListener('load', () => {
  const images = [...document.images];
  const b = document.body;
  b.setAttribute('data-images', images.length);
  b.setAttribute('data-broken', images.filter(i => !(i.complete && i.naturalWidth > 0)).length);
  b.setAttribute('data-text', b.innerText.trim().length);
  b.setAttribute('data-height', document.documentElement.scrollHeight);
});</script>"""


def chromium() -> str:
    """The headless browser scripts/test.sh installs; under CI its absence fails the test."""
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    require(exe, "chromium is not installed (scripts/test.sh installs it: apt-get install chromium)")
    return exe


def browse(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={profile}", "--virtual-time-budget=10000", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def defective(tmp_path_factory) -> Path:
    """A v3.0 factory dataset with a flat state channel, an action channel x3000 on one frame and one
    camera's window of episode 2 moved 0.4 frame late (every frame lerobot looks up there is off by 13 ms)."""
    root = make_dataset(tmp_path_factory.mktemp("report") / "defective", version="v3.0", episodes=4,
                        lengths=[40, 52, 47, 61], cameras=("observation.images.top", "observation.images.wrist")).root

    def plant(table):
        state, action = vectors(table, "observation.state"), vectors(table, "action")
        state[:, FLAT[1]] = 7.0
        spiked = rows_of(table, 2)
        if len(spiked):
            action[spiked[10], SPIKED[1]] *= 3000
        table = replace_column(table, "observation.state", list(state))
        return replace_column(table, "action", list(action))
    for path in sorted(root.glob("data/*/*.parquet")):
        edit_parquet(path, plant)
    shift_window(root, SHIFTED[1], SHIFTED[0], 0.4 / 30)
    return root


def test_page_loads_in_chromium_and_shows_the_planted_defects(defective, tmp_path):
    page = tmp_path / "report.html"
    run_cli("report", defective, "-o", page, "--videos", "--sample", "4")
    html = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", html), "the page must not load anything"
    assert "<script" not in html.lower()

    checked = tmp_path / "checked.html"           # a copy with a probe that reads the images once loaded
    checked.write_text(html.replace("</body>", CHECKER + "</body>"))
    dom = browse(checked, tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = dict(re.findall(r'data-(images|broken|text|height)="(\d+)"', dom.stdout))
    assert body, f"the probe did not run: {dom.stdout[:500]}"
    # 2 histogram grids, lengths, time series, 2 cameras x 4 episodes x 3 frames, tasks
    assert int(body["images"]) == 2 + 1 + 1 + 24 + 1
    assert int(body["broken"]) == 0, f"{body['broken']} images did not load"
    assert int(body["text"]) > 2000 and int(body["height"]) > 3000

    shot = tmp_path / "report.png"
    done = browse(page, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2400")
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    from PIL import Image
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.shape == (2400, 1280)
    assert (pixels < 200).mean() > 0.02 and pixels.std() > 20, "the page renders blank"
    print(f"screenshot: {shot}")

    flagged = {(f, int(c)): flags for f, c, flags in
               re.findall(r'<tr class="flagged" data-feature="([^"]+)" data-channel="(\d+)" data-flags="([^"]*)"',
                          dom.stdout)}
    assert "near-constant" in flagged[FLAT] and "extreme" in flagged[SPIKED]
    assert set(flagged) == {FLAT, SPIKED}
    assert "--state 'observation.state[0:2,3:6]' --action 'action[0:4,5]'" in unescape(html)
    captions = re.findall(r'<figcaption class="(mismatch|aligned)" data-row-ts="([-\d.]+)" data-pts="([-\d.]+)">',
                          dom.stdout)
    assert len(captions) == 24
    bad = [(float(t), float(p)) for kind, t, p in captions if kind == "mismatch"]
    assert len(bad) == 3 and all(abs(abs(p - t) - 0.4 / 30) < 1e-3 for t, p in bad)
    assert all(abs(float(p) - float(t)) < 1e-4 for kind, t, p in captions if kind == "aligned")


def test_json_report_is_exact_and_names_the_defects(defective, tmp_path):
    out = run_json("report", defective, "-o", tmp_path / "r.html", "--videos", "--sample", "2")
    assert Path(out["output"]).exists()
    assert out["summary"]["episodes"] == 4 and out["summary"]["frames"] == 40 + 52 + 47 + 61
    assert [c["codec"] for c in out["summary"]["cameras"]] == ["h264", "h264"]
    assert out["episodes"]["sampled"] == [0, 3]
    state = np.concatenate([np.array(pq.read_table(p, columns=["observation.state"]).column(0).to_pylist())
                            for p in sorted(defective.glob("data/*/*.parquet"))])
    rows = {(r["feature"], r["channel"]): r for r in out["channels"]}
    for c in range(6):
        for key, level in (("q01", 0.01), ("q50", 0.5), ("q99", 0.99)):
            assert rows[("observation.state", c)][key] == np.quantile(state[:, c].astype(np.float32), level)
    assert rows[FLAT]["flags"] == ["near-constant"] and rows[SPIKED]["flags"] == ["extreme"]
    # sampled episodes 0 and 3 are aligned; the shifted window is episode 2's
    assert len(out["thumbnails"]) == 12 and not any(t["mismatch"] for t in out["thumbnails"])
    camera, episode = SHIFTED   # the shifted window, and nothing else, is a video error: VID010 at its file
    video_errors = [(f["code"], f["file"], f["episode"], f["field"]) for f in out["validate"]["findings"]
                    if f["code"].startswith("VID") and f["severity"] == "error"]
    assert video_errors == [("VID010", f"videos/{camera}/chunk-000/file-001.mp4", episode, camera)]
    assert out["tasks"]["episodes_per_task"] == {"pick up the cube": 2, "place the cube": 2}


def test_without_videos_no_frame_is_decoded(defective, tmp_path):
    out = run_json("report", defective, "-o", tmp_path / "r.html")
    assert out["thumbnails"] == []
    assert "Frames are decoded only with --videos" in (tmp_path / "r.html").read_text()


def test_task_changes_within_an_episode_are_listed(tmp_path):
    root = make_dataset(tmp_path / "src", version="v2.1", episodes=2, lengths=[20, 20], cameras=()).root

    def change(table):
        tasks = np.asarray(table.column("task_index").to_pylist())
        tasks[12:] = 1 - tasks[12:]
        return replace_column(table, "task_index", tasks.tolist())
    edit_parquet(next(root.glob("data/*/episode_000001.parquet")), change)
    out = run_json("report", root, "-o", tmp_path / "r.html")
    assert out["tasks"]["changes"] == [{"episode": 1, "frame": 12, "from": 1, "to": 0}]
    assert out["select"] is None


@pytest.mark.parametrize("breakage", ["not a dataset", "missing data file"])
def test_bad_input_is_one_error_with_exit_3(tmp_path, breakage):
    root = make_dataset(tmp_path / "src", version="v2.1", episodes=2, lengths=[20, 20], cameras=()).root
    if breakage == "not a dataset":
        shutil.rmtree(root / "meta")
    else:
        next(root.glob("data/*/episode_000001.parquet")).unlink()
    proc = run_cli("report", root, "-o", tmp_path / "r.html", "--json", check=False)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "error:" in proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == 3
    if breakage == "missing data file":
        assert "episode_000001.parquet" in proc.stderr
    assert not (tmp_path / "r.html").exists()


def test_training_curves_have_labelled_axes(tmp_path):
    from lerodoc.pi05.plot import plot_losses
    from lerodoc.report.plots import training_curves
    rows = [{"step": s, "loss": 2.0 / s, "grad_norm": 1.0 + 1 / s, "lr": 1e-3 * min(1, s / 5), "step_s": 0.1}
            | ({"samples_per_s": 80.0 + s} if s % 10 == 0 else {}) for s in range(1, 41)]
    fig = training_curves(rows)
    labels = {ax.get_ylabel() for ax in fig.axes}
    assert labels == {"loss", "learning rate", "gradient norm (before clipping)", "samples / s"}
    assert {ax.get_xlabel() for ax in fig.axes} >= {"step"}
    speed = next(ax for ax in fig.axes if ax.get_ylabel() == "samples / s").lines[0]
    assert list(speed.get_xdata()) == [10, 20, 30, 40]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plot_losses(metrics, tmp_path / "loss.png")
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_non_finite_values_are_counted_per_channel_across_blocks_of_rows():
    from lerodoc.report.data import _non_finite
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(1000, 5)).astype(np.float32)
    matrix[rng.integers(0, 1000, 40), rng.integers(0, 5, 40)] = np.nan
    matrix[[3, 999, 64], [1, 4, 4]] = [np.inf, -np.inf, np.nan]
    want = [int((~np.isfinite(matrix[:, c])).sum()) for c in range(5)]
    assert _non_finite(matrix, rows=64).tolist() == _non_finite(matrix).tolist() == want and sum(want) > 3
    assert _non_finite(np.arange(12).reshape(4, 3), rows=3).tolist() == [0, 0, 0]


@pytest.mark.parametrize("beside", [True, False])
def test_validate_runs_beside_the_figures_only_within_the_memory_budget(tmp_path, monkeypatch, beside):
    """Within the memory budget report's validate runs in a thread of its own, beside the reads and figures; past
    it (a million episodes: 2692.7 MiB beside, 1717.6 MiB one after the other) in this thread, before the first
    feature is read. Either way on the report's own Dataset, and the report is the same."""
    import threading

    from lerodoc.report import assemble as report_module
    from lerodoc.report import data
    monkeypatch.delenv("LERODOC_MEMORY_BUDGET", raising=False)
    if not beside:   # the data files past the budget the report weighs them against (the readers' own stays)
        monkeypatch.setattr(report_module, "memory_budget", lambda: 1)
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=3, lengths=12, cameras=()).root
    events = []
    real_validate, real_read = report_module.validate, data.read_columns

    def validate(*args, **kwargs):
        events.append(("validate", threading.current_thread() is threading.main_thread(), "dataset" in kwargs))
        return real_validate(*args, **kwargs)

    def read_columns(*args, **kwargs):
        events.append(("read", None, None))
        return real_read(*args, **kwargs)
    monkeypatch.setattr(report_module, "validate", validate)
    monkeypatch.setattr(data, "read_columns", read_columns)
    out = report_module.build(root, tmp_path / "r.html")
    checks = [e for e in events if e[0] == "validate"]
    assert checks == [("validate", not beside, True)]
    if not beside:
        assert events[0][0] == "validate"   # done before any column is read
    assert out.validate["errors"] == 0 and len(out.channels) > 0


def test_figures_of_crafted_names_are_well_formed_svg_showing_escapes():
    """A feature, channel or task name holding markup, an escape sequence and a bidi override: each SVG figure still
    parses as XML (a control character is not XML: the image broke), has no element the name brought, and shows
    the control characters as `render.shown` shows them on a terminal."""
    import warnings
    import xml.etree.ElementTree as ET

    from lerodoc.report import data, plots
    crafted = '</text><script>alert(1)</script>&amp;"\x1b[31m\u202e'
    hists = [data.histogram(np.random.default_rng(0).normal(size=100), 40)]
    series = [(0, np.arange(10) / 30, {crafted: np.zeros((10, 2))})]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # matplotlib: no glyph for a control character in the PNG case
        figures = [plots.histograms(crafted, hists, [{"name": crafted, "flags": ["extreme"]}]),
                   plots.task_counts([crafted, "b"], [3, 1]),
                   plots.time_series(series, {crafted: {1}}, {crafted: [crafted, crafted]})]
    for figure in figures:
        assert figure.startswith(b"<?xml")
        root = ET.fromstring(figure)
        assert not [e for e in root.iter() if e.tag.endswith("script")]
        text = "".join(e.text or "" for e in root.iter())
        assert "\\x1b[31m" in text and "\\u202e" in text and "\x1b" not in text
