"""Selections: one parser for episode ranges (lerobot's JSON list too), usage errors (exit 2) that name the valid
range in the command's own words, channel slices checked against the feature; `convert` to the version a
dataset already has is a no-op."""

from __future__ import annotations

import json

import pytest

from lerodoc.errors import ExitCode, UsageError
from lerodoc.selection import Selection, format_ranges, items, parse
from tests.fixtures.factory import make_dataset
from tests.helpers import run_cli, run_here


@pytest.mark.parametrize("values, episodes", [
    (["3"], (3,)), (["1-3"], (1, 2, 3)), (["0,2-3"], (0, 2, 3)), (["0", "5"], (0, 5)), (["3 - 4, 1"], (1, 3, 4)),
    (["[0, 2, 5]"], (0, 2, 5)), (["[5,0]", "1-2"], (0, 1, 2, 5)), (["2-2"], (2,)),
])
def test_one_syntax_and_lerobots_json_list(values, episodes):
    assert parse(values, "-e").resolve(range(10), "-e") == episodes


@pytest.mark.parametrize("values, words", [
    (["5-3"], "-e '5-3': 5-3 is a reversed range"), ([""], "-e: no episode given"), (["[]"], "no episode given"),
    (["1,,2"], "an empty item between commas"), (["a"], "'a' is not an episode number or range"),
    (["-1"], "'-1' is not an episode number"), (["[1.5]"], "not a JSON list of episode numbers"),
    (["[true]"], "not a JSON list"), (["{1}"], "is not an episode number or range"),
])
def test_bad_syntax_is_a_usage_error(values, words):
    with pytest.raises(UsageError, match=None) as caught:
        parse(values, "-e")
    assert words in caught.value.message and caught.value.exit_code == ExitCode.USAGE == 2


def test_out_of_range_names_the_holders_episodes_without_expanding_huge_ranges():
    with pytest.raises(UsageError) as caught:
        parse("2-999999999999", "--episodes").resolve([0, 1, 2, 3, 7], "--episodes")
    assert caught.value.message == "--episodes 2-999999999999: the dataset has no episode 999999999999 " \
                                   "(it holds episodes 0-3,7)"
    with pytest.raises(UsageError, match=r"source B \(day2\) has no episode 4 \(it holds episodes 0-3,7\)"):
        parse("4", "--exclude").resolve([0, 1, 2, 3, 7], "--exclude", "source B (day2)")


def test_helpers_round_trip():
    assert format_ranges([5, 0, 1, 2, 9, 8]) == "0-2,5,8-9"
    chosen = Selection.of([7, 1, 2, 3])
    assert chosen.text == "1-3,7" and chosen.resolve(range(8), "-e") == (1, 2, 3, 7)
    assert items("train:[0, 1],val:2-3, test:4") == ["train:[0, 1]", "val:2-3", "test:4"]


def test_select_slice_past_the_feature_is_a_usage_error_naming_its_channels(tmp_path):
    f = make_dataset(tmp_path / "ds", version="v3.0", episodes=2, cameras=(), state_dim=8)
    for spec, words in (("observation.state[0:40]", "the slice 0:40 is out of range: observation.state has 8 channels "
                                                    "(0:8, or channels 0-7)"),
                        ("observation.state[6:2]", "the slice 6:2 selects no channel of observation.state"),
                        ("observation.state[9]", "channel 9 is out of range: observation.state has 8 channels (0-7)")):
        proc = run_cli("select", f.root, "-o", tmp_path / "out", "--state", spec, check=False)
        assert proc.returncode == 2 and words in " ".join(proc.stderr.split()), (spec, proc.stderr)
        assert not (tmp_path / "out").exists()
    ok = run_cli("select", f.root, "-o", tmp_path / "out", "--state", "observation.state[0:8]", check=False)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_convert_to_the_version_it_already_has_is_a_no_op(tmp_path, version):
    f = make_dataset(tmp_path / "ds", version=version, episodes=2, cameras=())
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    proc = run_cli("convert", f.root, "-o", tmp_path / "out", "--to", version, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"is already {version}: nothing to convert, nothing written" in " ".join(proc.stdout.split())
    as_json = run_cli("convert", f.root, "-o", tmp_path / "out", "--to", version, "--json", check=False)
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and report["unchanged"] is True and report["output"] is None
    assert report["to_version"] == version and report["episodes"] == 2
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before



def test_report_episodes_take_the_one_selection(tmp_path):
    """report --episodes is the shared selection (ranges, lerobot's JSON list); a reversed, empty or out-of-range
    one is exit 2 naming the dataset's episodes, before anything is read or written; --sample counts. (The page
    itself is drawn in test_report; here only the choice of episodes, which comes before any plot.)"""
    from lerodoc.dataset import Dataset
    from lerodoc.report.data import sample_episodes
    f = make_dataset(tmp_path / "ds", version="v3.0", episodes=4, lengths=[6] * 4, cameras=())
    ds = Dataset.open(f.root)
    for values, chosen in ((["[0, 3]"], [0, 3]), (["1-2"], [1, 2]), (["3", "0"], [0, 3])):
        assert [ep.index for ep in sample_episodes(ds, 3, parse(values, "--episodes"))] == chosen
    assert [ep.index for ep in sample_episodes(ds, 2)] == [0, 3]
    page = tmp_path / "r.html"
    for values, words in ((["5-3"], "--episodes '5-3': 5-3 is a reversed range"),
                          (["9"], "--episodes 9: the dataset has no episode 9 (it holds episodes 0-3)"),
                          (["[1, 7]"], "--episodes [1, 7]: the dataset has no episode 7 (it holds episodes 0-3)"),
                          (["[]"], "--episodes '[]': no episode given"), ([""], "--episodes: no episode given")):
        proc = run_here("report", f.root, "-o", page, *[a for v in values for a in ("--episodes", v)], "--json")
        assert proc.returncode == 2 and words in json.loads(proc.stdout)["error"]["message"], (values, proc.stdout)
        assert words in " ".join(proc.stderr.split()) and not page.exists()
