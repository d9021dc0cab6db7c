"""Stats checks with tolerances that fit the data: what lerobot's own formulas write (float32 sums, the
float32 E[x^2] - E[x]^2 of lerobot >= 0.4, 5000-bin histogram quantiles) gives no error, whatever the
dtype and magnitude; stats that really are wrong still do.

The stats are written here exactly as lerobot computes them, reimplemented in numpy:
- lerobot 0.3.3 `get_feature_stats`: np.min/max/mean/std over axis 0 of the episode buffer, in its dtype;
- lerobot 0.4.x-0.6.1 `RunningQuantileStats`, one update per episode: mean and mean of squares in
  float32 (0.6.1 promotes ints and float16 to float32, 0.4.x keeps ints), std = sqrt(max(0, E[x^2] -
  E[x]^2)), quantiles interpolated in a 5000-bin histogram over [min - 1e-10, max + 1e-10].
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.checks import open_context, run_checks
from lerodoc.checks.common import ERROR, Finding, WARNING
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError
from lerodoc.pi05.preflight import check_dataset, check_features, open_checked
from tests.fixtures.factory import make_dataset

STATE = "observation.state"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
FAMILIES = ("layout", "indices", "tasks", "stats")


# ---------------------------------------------------------------- lerobot's formulas

def lerobot_033(x: np.ndarray) -> dict[str, np.ndarray]:
    """lerobot 0.3.3 compute_episode_stats on a vector feature (v2.1 episodes_stats.jsonl)."""
    return {"min": np.min(x, axis=0), "max": np.max(x, axis=0), "mean": np.mean(x, axis=0),
            "std": np.std(x, axis=0), "count": np.array([len(x)])}


def histogram_quantile(column: np.ndarray, q: float) -> float:
    """RunningQuantileStats._compute_single_quantile after one update."""
    edges = np.linspace(column.min() - 1e-10, column.max() + 1e-10, 5000 + 1)
    cumsum = np.cumsum(np.histogram(column, bins=edges)[0])
    target = q * len(column)
    idx = int(np.searchsorted(cumsum, target))
    if idx == 0:
        return float(edges[0])
    if idx >= len(cumsum):
        return float(edges[-1])
    before, inside = cumsum[idx - 1], cumsum[idx] - cumsum[idx - 1]
    if inside == 0:
        return float(edges[idx])
    return float(edges[idx] + (target - before) / inside * (edges[idx + 1] - edges[idx]))


def lerobot_061(x: np.ndarray, promote: bool = True) -> dict[str, np.ndarray]:
    """lerobot 0.6.1 (promote=True) or 0.4.x (promote=False) get_feature_stats on a vector feature."""
    batch = x.astype(np.result_type(x.dtype, np.float32)) if promote else x
    mean, squares = np.mean(batch, axis=0), np.mean(batch ** 2, axis=0)
    stats = {"min": np.min(batch, axis=0), "max": np.max(batch, axis=0), "mean": mean,
             "std": np.sqrt(np.maximum(0, squares - mean ** 2)), "count": np.array([len(x)])}
    for key, q in QUANTILES.items():
        stats[key] = np.array([histogram_quantile(batch[:, c], q) for c in range(batch.shape[1])])
    return stats


# ---------------------------------------------------------------- a one-episode dataset holding `values`

def plant(tmp_path: Path, values: np.ndarray, stats: dict, version: str = "v2.1",
          dataset_stats: dict | None = None) -> Path:
    """A dataset whose observation.state rows are `values` (their dtype becomes the feature's), with
    `stats` as episode 0's stats (v3.0: also as stats.json, or `dataset_stats`)."""
    n, width = values.shape
    root = make_dataset(tmp_path / "ds", version=version, episodes=1, lengths=n, cameras=(),
                        state_dim=width).root
    dtype = str(values.dtype)
    data = root / ("data/chunk-000/episode_000000.parquet" if version == "v2.1" else
                   "data/chunk-000/file-000.parquet")
    table = pq.read_table(data)
    hf = json.loads(table.schema.metadata[b"huggingface"])
    hf["info"]["features"][STATE]["feature"]["dtype"] = dtype
    column = pa.array(list(values), type=pa.list_(pa.from_numpy_dtype(values.dtype), width))
    table = table.set_column(table.column_names.index(STATE), pa.field(STATE, column.type), column)
    pq.write_table(table.replace_schema_metadata({b"huggingface": json.dumps(hf).encode()}), data)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"][STATE]["dtype"] = dtype
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    as_json = {k: np.asarray(v).tolist() for k, v in stats.items()}
    if version == "v2.1":
        path = root / "meta/episodes_stats.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows[0]["stats"][STATE] = as_json
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return root
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    episodes = pq.read_table(path)
    episodes = episodes.drop([c for c in episodes.column_names if c.startswith(f"stats/{STATE}/")])
    for name, value in as_json.items():
        kind = pa.list_(pa.int64()) if name == "count" else pa.list_(pa.float64())
        episodes = episodes.append_column(f"stats/{STATE}/{name}", pa.array([value], type=kind))
    pq.write_table(episodes, path)
    meta = json.loads((root / "meta/stats.json").read_text())
    meta[STATE] = {k: np.asarray(v).tolist() for k, v in (dataset_stats or stats).items()}
    (root / "meta/stats.json").write_text(json.dumps(meta, indent=4))
    return root


def findings(root: Path) -> list[Finding]:
    return run_checks(open_context(root), FAMILIES)


def errors(found: list[Finding]) -> list[str]:
    return [f"{f.code} {f.file} ep={f.episode} {f.feature}[{f.channel}]: {f.message}"
            for f in found if f.severity == ERROR]


def codes(found: list[Finding], feature: str = STATE) -> dict[str, list[int | None]]:
    out: dict[str, list] = {}
    for f in found:
        if f.feature == feature:
            out.setdefault(f.code, []).append(f.channel)
    return out


def varied(n: int, width: int, scale: float = 1.0, offset: float = 0.0, seed: int = 0,
           dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (offset + scale * rng.standard_normal((n, width))).astype(dtype)


def with_constant(values: np.ndarray, channel: int, value: float) -> np.ndarray:
    values = values.copy()
    values[:, channel] = value
    return values


# ---------------------------------------------------------------- lerobot's output passes

@pytest.mark.parametrize("n", [300, 1000, 5000])
def test_constant_float32_channel_with_a_float32_mean_outside_min_max_is_clean(tmp_path, n):
    """The field report: `min[134] = 4.8539 > mean[134] = 4.85389` on a channel constant in the episode."""
    values = with_constant(varied(n, 3), 1, 4.8539)
    stats = lerobot_033(values)
    assert not stats["min"][1] <= stats["mean"][1] <= stats["max"][1], "float32 sum happened to be exact"
    found = findings(plant(tmp_path, values, stats))
    assert errors(found) == []
    assert not {"STA022", "STA023", "STA040"} & set(codes(found))


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_lerobot_cancellation_std_on_a_constant_981_channel_is_a_warning(tmp_path, version):
    """lerobot >= 0.4: std = sqrt(E[x^2] - E[x]^2) in float32 gives ~0.008 on a channel constantly 9.81."""
    values = with_constant(varied(50, 4), 2, 9.81)
    stats = lerobot_061(values)
    assert 1e-3 < stats["std"][2] < 0.05
    found = findings(plant(tmp_path, values, stats, version))
    assert errors(found) == []
    warned = [f for f in found if f.code == "STA042"]
    assert warned and all(f.severity == WARNING and f.channel == 2 for f in warned)
    assert all("repair recomputes" in f.hint for f in warned)
    assert "STA043" not in codes(found)     # histogram quantiles (padded by 1e-10) are within bins
    if version == "v3.0":
        assert {f.episode for f in warned} == {0, None}   # per-episode stats and stats.json


@pytest.mark.parametrize("promote", [True, False], ids=["0.6.1", "0.4.x"])
@pytest.mark.parametrize("n", [200, 4000])
def test_lerobot_061_stats_of_varied_float32_data_are_clean(tmp_path, promote, n):
    values = varied(n, 6, scale=0.3, offset=1.5)
    found = findings(plant(tmp_path, values, lerobot_061(values, promote), "v3.0"))
    assert errors(found) == []
    assert not {"STA022", "STA023", "STA040", "STA043"} & set(codes(found))


def test_large_magnitude_channels(tmp_path):
    """1e5 with a range of a few units: float32 ulp there is 0.0078; the cancellation std is ~80."""
    values = varied(300, 3, scale=2.0, offset=1e5)
    values = with_constant(values, 0, 1e5)
    stats = lerobot_061(values)
    assert stats["std"][0] > 10
    found = findings(plant(tmp_path, values, stats, "v3.0"))
    assert errors(found) == []
    assert 0 in codes(found).get("STA042", [])
    wrong = {k: v.copy() for k, v in stats.items()}
    wrong["mean"][1] += 0.2 * (stats["max"][1] - stats["min"][1])   # 1e5 +- 2: an offset of 20% of the range
    found = findings(plant(tmp_path / "wrong", values, wrong, "v3.0"))
    assert 1 in codes(found).get("STA040", [])


def test_tiny_magnitude_channels(tmp_path):
    """Values ~1e-6: no absolute tolerance may swallow them."""
    values = varied(400, 3, scale=1e-7, offset=1e-6)
    stats = lerobot_061(values)
    found = findings(plant(tmp_path, values, stats, "v3.0"))
    assert errors(found) == []
    wrong = {k: v.copy() for k, v in stats.items()}
    wrong["mean"][2] *= 1.05    # 5e-8 off
    wrong["std"][1] *= 1.5      # 5e-8 off
    found = [f for f in findings(plant(tmp_path / "wrong", values, wrong, "v3.0")) if f.code == "STA040"]
    assert found and all(f.severity == ERROR and f.channel == 2 and "also std" in f.message for f in found)


def test_float64_state_is_held_to_float64_rounding(tmp_path):
    """The same relative error (1e-6 of the magnitude) is float32 rounding, but not float64's."""
    values = varied(500, 3, scale=0.5, offset=2.0, dtype=np.float64)
    stats = lerobot_061(values)   # result_type(float64, float32) = float64: stats in float64
    assert errors(findings(plant(tmp_path / "exact", values, stats))) == []
    nudged = {k: v.copy() for k, v in stats.items()}
    nudged["mean"][0] += 1e-6 * np.abs(values[:, 0]).max()
    assert 0 in codes(findings(plant(tmp_path / "f64", values, nudged))).get("STA040", [])
    as32 = values.astype(np.float32)
    nudged32 = {k: v.copy() for k, v in lerobot_061(as32).items()}
    nudged32["mean"][0] += 1e-6 * np.abs(as32[:, 0]).max()
    found = findings(plant(tmp_path / "f32", as32, nudged32))
    assert errors(found) == [] and "STA040" not in codes(found)


@pytest.mark.parametrize("promote", [True, False], ids=["0.6.1", "0.4.x"])
def test_int_channels_are_exact_for_min_max(tmp_path, promote):
    rng = np.random.default_rng(1)
    values = rng.integers(0, 4096, size=(300, 3)).astype(np.int64)
    values[:, 2] = 1000
    stats = lerobot_061(values, promote)
    assert errors(findings(plant(tmp_path / "clean", values, stats, "v3.0"))) == []
    wrong = {k: v.copy() for k, v in stats.items()}
    wrong["max"] = wrong["max"].astype(np.float64)
    wrong["max"][0] += 1
    assert 0 in codes(findings(plant(tmp_path / "wrong", values, wrong, "v3.0"))).get("STA040", [])


# ---------------------------------------------------------------- wrong stats stay errors

def clean_033(n: int = 200) -> tuple[np.ndarray, dict]:
    values = with_constant(varied(n, 4), 3, 4.8539)
    return values, lerobot_033(values)


@pytest.mark.parametrize("channel", [0, 3], ids=["varied", "constant"])
def test_mean_outside_the_range_by_one_percent_is_an_error(tmp_path, channel):
    values, stats = clean_033()
    span = max(stats["max"][channel] - stats["min"][channel], abs(stats["max"][channel]))
    stats["mean"] = stats["mean"].astype(np.float64)
    stats["mean"][channel] = stats["max"][channel] + 0.01 * span
    found = findings(plant(tmp_path, values, stats))
    assert channel in codes(found).get("STA022", [])
    assert all(f.severity == ERROR for f in found if f.code == "STA022")


def test_min_above_max_is_an_error(tmp_path):
    values, stats = clean_033()
    stats["min"][1], stats["max"][1] = stats["max"][1], stats["min"][1]
    assert 1 in codes(findings(plant(tmp_path, values, stats))).get("STA022", [])


def test_count_that_disagrees_with_the_rows_is_an_error(tmp_path):
    values, stats = clean_033()
    stats["count"] = np.array([len(values) + 1])
    found = [f for f in findings(plant(tmp_path, values, stats)) if f.code == "STA040"]
    assert found and found[0].severity == ERROR and "count" in found[0].message


def test_nan_in_the_stats_is_an_error(tmp_path):
    values, stats = clean_033()
    stats["std"] = stats["std"].astype(np.float64)
    stats["std"][2] = np.nan
    assert 2 in codes(findings(plant(tmp_path, values, stats))).get("STA010", [])


def test_std_beyond_cancellation_is_an_error(tmp_path):
    values = with_constant(varied(50, 4), 2, 9.81)
    stats = lerobot_061(values)
    stats["std"][2] = 0.5                   # far beyond sqrt(1.5 n eps) * 9.81 ~ 0.03
    stats["std"][0] *= 1.1                  # a varied channel 10% off
    found = [f for f in findings(plant(tmp_path, values, stats, "v3.0")) if f.code == "STA040"]
    assert [(f.severity, f.channel) for f in found if f.episode == 0] == [(ERROR, 0)]
    assert "std[0]" in found[0].message and "2 channels off" in found[0].message


def test_slightly_out_of_order_beyond_rounding_is_a_warning(tmp_path):
    """A mean 1e-5 of the range above max on a varied channel: not rounding, not misleading."""
    values, stats = clean_033(200)
    stats = {k: np.asarray(v, dtype=np.float64) for k, v in stats.items()}
    span = stats["max"][0] - stats["min"][0]
    stats["mean"][0] = stats["max"][0] + 1e-4 * span
    found = findings(plant(tmp_path, values, stats))
    assert 0 in codes(found).get("STA023", [])
    assert "STA022" not in codes(found)


# ---------------------------------------------------------------- quantiles

def test_histogram_quantiles_pass_and_wrong_ones_are_named(tmp_path):
    values = varied(600, 3, scale=1.0)
    values[:, 1] = np.where(np.arange(600) % 5 == 0, 1.0, 0.0) + 0.01 * values[:, 1]   # 80% ~0, 20% ~1
    stats = lerobot_061(values)
    assert errors(findings(plant(tmp_path / "clean", values, stats, "v3.0"))) == []
    span = stats["max"] - stats["min"]
    near = {k: v.copy() for k, v in stats.items()}
    near["q10"][0] += 0.06 * span[0]        # a few % off: a warning
    found = findings(plant(tmp_path / "near", values, near, "v3.0", dataset_stats=stats))
    assert [(f.severity, f.channel) for f in found if f.code == "STA043"] == [(WARNING, 0)]
    assert errors(found) == []
    wild = {k: v.copy() for k, v in stats.items()}
    wild["q10"][1] = wild["q50"][1] = 0.45   # the data's are ~0: wildly off, though still in order
    found = findings(plant(tmp_path / "wild", values, wild, "v3.0", dataset_stats=stats))
    assert [(f.severity, f.channel) for f in found if f.code == "STA040"] == [(ERROR, 1)]
    assert "STA022" not in codes(found)


def test_dataset_quantiles_of_lerobots_weighted_average_are_not_compared(tmp_path):
    """lerobot 0.6.1 aggregates quantiles as a count-weighted mean of the episodes': not the data's."""
    values = varied(300, 2)
    stats = lerobot_061(values)
    dataset = {k: v.copy() for k, v in stats.items()}
    dataset["q01"] = dataset["q01"] + 0.3 * (dataset["q50"] - dataset["q01"])
    found = findings(plant(tmp_path, values, stats, "v3.0", dataset_stats=dataset))
    assert errors(found) == [] and not {"STA040", "STA043"} & set(codes(found))


# ---------------------------------------------------------------- missing quantiles, stale v2.1 stats.json

def test_missing_quantiles_warn_in_validate_and_stop_pi05_preflight(tmp_path):
    values = varied(100, 4)
    stats = {k: v for k, v in lerobot_061(values).items() if not k.startswith("q")}
    root = plant(tmp_path, values, stats, "v3.0")
    found = [f for f in findings(root) if f.code == "STA020"]
    assert [f.severity for f in found if f.feature == STATE] == [WARNING]
    assert errors(findings(root)) == []
    ctx = open_checked(root)
    check_dataset(ctx, tuple(ctx.dataset.info.video_keys))   # validate's errors only
    with pytest.raises(LerodocError) as caught:
        check_features(ctx.dataset, "action", STATE)
    assert "q01/q99" in caught.value.message and "lerodoc quantiles" in caught.value.hint


def test_stale_v21_stats_json_is_a_warning(tmp_path):
    """v2.1 readers aggregate episodes_stats.jsonl; a stats.json left from v2.0 misleads no training."""
    values, stats = clean_033()
    root = plant(tmp_path, values, stats)
    stale = {k: (np.asarray(v, dtype=np.float64) * 1.5).tolist() for k, v in stats.items() if k != "count"}
    (root / "meta/stats.json").write_text(json.dumps({STATE: stale | {"count": [len(values)]}}))
    found = findings(root)
    assert errors(found) == []
    assert [f.severity for f in found if f.code == "STA044" and f.feature == STATE] == [WARNING]


def test_camera_without_stats_is_a_warning_a_vector_without_stats_an_error(tmp_path):
    """lerobot's convert_image_to_video writes stats.json without the cameras: LeRobotDataset loads it."""
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=2, lengths=12,
                        cameras=("observation.images.top",), height=32, width=48).root
    meta = json.loads((root / "meta/stats.json").read_text())
    camera = meta.pop("observation.images.top")
    (root / "meta/stats.json").write_text(json.dumps(meta))
    found = findings(root)
    assert [(f.code, f.severity) for f in found if f.feature == "observation.images.top"] == [("STA016", WARNING)]
    assert errors(found) == []
    meta.pop("action")
    (root / "meta/stats.json").write_text(json.dumps(meta | {"observation.images.top": camera}))
    found = findings(root)
    assert [(f.code, f.severity) for f in found if f.feature == "action" and f.code.startswith("STA01")] \
        == [("STA015", ERROR)]


def test_sample_std_is_accepted_a_larger_one_is_not(tmp_path):
    """torch.std (and exporters built on it) write the sample std, ddof=1: sqrt(n/(n-1)) above numpy's."""
    values = varied(20, 3, scale=0.5, offset=1.0)
    stats = lerobot_033(values)
    stats["std"] = np.std(values.astype(np.float64), axis=0, ddof=1)
    found = findings(plant(tmp_path / "ddof1", values, stats))
    assert errors(found) == [] and "STA040" not in codes(found)
    stats["std"] = stats["std"] * 1.03     # beyond sqrt(20/19) = 1.026 of the population std
    assert 0 in codes(findings(plant(tmp_path / "ddof1-more", values, stats))).get("STA040", [])
