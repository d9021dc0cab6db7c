"""repair: every fixable planted defect is gone afterwards, what is not fixable is named, and the
result loads in lerobot 0.6.1 with its frames aligned."""

from __future__ import annotations

import shutil

import pytest

from lerodoc.checks import ERROR, open_context, run_checks
from lerodoc.errors import LerodocError
from lerodoc.ops.repair import repair
from tests.fixtures.defects_data import BASES, DEFECTS
from tests.fixtures.factory import make_dataset
from tests.helpers import expect_from_fixture, run_cli
from tests.lerobot_oracle import check_with_lerobot

# Planted defects that need a human: data that cannot be read or is ambiguous (repair refuses with a
# clear error) and channels that need choosing (validate keeps warning).
REFUSED = {"truncated_parquet", "malformed_info_json", "truncated_episodes_metadata", "stray_data_file",
           "unresolvable_task_index", "nan_in_data", "missing_data_file"}
STILL_WARNED = {"extreme_channel_recomputed": "STA031"}


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    return {version: make_dataset(root / version, **spec) for version, spec in BASES.items()}


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_repair_fixes_what_is_fixable_and_refuses_the_rest(bases, tmp_path, name):
    version, plant = DEFECTS[name]
    root = tmp_path / "ds"
    shutil.copytree(bases[version].root, root)
    planted = {p.code for p in plant(root)}
    if name in REFUSED:
        with pytest.raises(LerodocError):
            repair(root, tmp_path / "out")
        assert not (tmp_path / "out").exists()
        return
    report = repair(root, tmp_path / "out")
    after = run_checks(open_context(tmp_path / "out", videos=True))
    assert [f for f in after if f.severity == ERROR] == []
    if name in STILL_WARNED:
        assert STILL_WARNED[name] in {f.code for f in after}
    else:
        assert not planted & {f.code for f in after}, report.remaining


def test_missing_episode_is_dropped_only_when_asked(bases, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(bases["v2.1"].root, root)
    DEFECTS["missing_data_file"][1](root)
    report = repair(root, tmp_path / "out", drop_broken=True)
    assert any("dropped" in c for c in report.changes)
    assert len(open_context(tmp_path / "out").dataset.episodes) == 2


def test_in_place_swaps_and_keeps_the_input_name(bases, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(bases["v3.0"].root, root)
    DEFECTS["wrong_data_file_index"][1](root)
    proc = run_cli("repair", root, "--in-place", "--json")
    assert proc.returncode == 0
    assert [f for f in run_checks(open_context(root)) if f.severity == ERROR] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


@pytest.mark.lerobot
def test_repaired_dataset_loads_aligned_in_lerobot(bases, tmp_path):
    fixture = bases["v3.0"]
    root = tmp_path / "ds"
    shutil.copytree(fixture.root, root)
    for name in ("wrong_data_file_index", "count_zero_placeholder", "stats_shape_1x1", "nested_names"):
        version, plant = DEFECTS[name]
        if version == "v3.0":
            plant(root)
    repair(root, tmp_path / "out")
    check_with_lerobot(tmp_path / "out", expect_from_fixture(fixture), backend="pyav")
