"""validate's data families (layout, indices, tasks, stats): each planted defect is found at its
location, and clean datasets (every version, both codecs, the real G1 subset) have no error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lerodoc.checks import open_context, run_checks
from lerodoc.checks.common import ERROR, Finding
from lerodoc.ops.quantiles import quantiles
from tests.fixtures.defects_data import BASES, DEFECTS, EXTREME_CHANNEL, Planted
from tests.fixtures.factory import make_dataset
from tests.helpers import require

FAMILIES = ("layout", "indices", "tasks", "stats")
G1 = Path(__file__).resolve().parents[2] / "shared/data/g1_v21"


def findings(root: Path) -> list[Finding]:
    return run_checks(open_context(root), FAMILIES)


def at(finding: Finding, planted: Planted) -> bool:
    """The planted code at exactly its file and episode (None: the finding names none), and at its feature and
    channel where the planter names them."""
    return (finding.code, finding.file, finding.episode) == (planted.code, planted.file, planted.episode) and all(
        getattr(planted, key) is None or getattr(finding, key) == getattr(planted, key) for key in ("feature", "channel"))


def errors(found: list[Finding]) -> list[str]:
    return [f"{f.code} {f.file} ep={f.episode} {f.feature}[{f.channel}]: {f.message}"
            for f in found if f.severity == ERROR]


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    return {version: make_dataset(root / version, **spec).root for version, spec in BASES.items()}


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_planted_defect_is_found_where_it_was_planted(bases, tmp_path, name):
    version, plant = DEFECTS[name]
    root = tmp_path / "ds"
    shutil.copytree(bases[version], root)
    expected = plant(root)
    found = findings(root)
    assert all(f.file is None or not Path(f.file).is_absolute() for f in found)
    for planted in expected:
        assert any(at(f, planted) for f in found), \
            f"{name}: no {planted} among\n" + "\n".join(f"  {f.code} {f.file} ep={f.episode} {f.feature}"
                                                      f"[{f.channel}]: {f.message}" for f in found)


def test_bases_are_clean(bases):
    for root in bases.values():
        assert errors(findings(root)) == []


def test_extreme_channel_is_flagged_though_its_stats_agree_with_the_data(bases, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(bases["v3.0"], root)
    DEFECTS["extreme_channel_recomputed"][1](root)
    found = findings(root)
    assert [f.channel for f in found if f.code == "STA031"] == [EXTREME_CHANNEL]
    assert not [f for f in found if f.feature == "observation.state" and f.code.startswith("STA04")]


@pytest.mark.parametrize("spec", [
    dict(version="v2.0"), dict(version="v2.1"), dict(version="v2.1", codec="av1"),
    dict(version="v3.0", episodes=5), dict(version="v3.0", episodes=4, codec="av1", episodes_per_file=3),
    dict(version="v3.0", episodes=3, vector_storage="list"),
], ids=lambda spec: "-".join(str(v) for v in spec.values()))
def test_clean_factory_dataset_has_no_error(tmp_path, spec):
    root = make_dataset(tmp_path / "ds", **spec).root
    assert errors(findings(root)) == []


@pytest.mark.parametrize("version", sorted(BASES))
def test_lerodoc_quantiles_output_is_clean_and_has_pi05_quantiles(bases, tmp_path, version):
    quantiles(bases[version], tmp_path / "out")
    found = findings(tmp_path / "out")
    assert errors(found) == []
    assert not [f for f in found if f.code in ("STA020", "STA021")]


@pytest.mark.shared
def test_real_g1_dataset_has_no_error_and_names_its_quirks():
    require(G1.is_dir(), "the real G1 subset is not in ../shared/data/g1_v21")
    found = findings(G1)
    assert errors(found) == []
    codes = {(f.code, f.feature) for f in found}
    assert ("LAY016", "observation.state") in codes        # names nested one level
    assert ("LAY018", "observation.images.cam_high") in codes   # names[2] == "channel"
    # recorded without q01/q99: a warning for validate (train pi05's preflight refuses it on its own)
    assert {(f.code, f.severity) for f in found if f.feature == "observation.state" and f.code.startswith("STA02")} \
        == {("STA021", "warning")}


def test_missing_quantiles_are_a_warning_on_every_version(bases, tmp_path):
    """lerobot's converter and older recorders write no q01/q99: not a defect of the dataset."""
    root = tmp_path / "ds"
    shutil.copytree(bases["v3.0"], root)
    DEFECTS["missing_quantiles"][1](root)
    found = [f for f in findings(root) if f.code in ("STA020", "STA021")]
    assert [(f.code, f.severity, f.feature) for f in found] == [("STA020", "warning", "action")]
    assert errors(findings(root)) == []


def test_unopenable_dataset_gives_one_finding(tmp_path):
    found = findings(tmp_path / "nothing-here")
    assert [f.code for f in found] == ["LAY001"]
