"""Write what lerobot 0.6.1 writes: every writing command given a v2.x dataset leaves v3.0, which LeRobotDataset
0.6.1 loads (it refuses v2.1), unless told `--to v2.1`. The edits that keep a dataset's file layout (tasks,
features, select, flatten, encode, quantiles -o) write it to a scratch folder and convert it (`ops.derive.as_written`);
the rewrites (delete, split, repair, merge, convert) write v3.0 themselves (`rewrite.WRITES`). Each output is
loaded by lerobot 0.6.1 and its frames held to the episodes it should hold."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.factory import make_dataset
from tests.helpers import expect_episodes, run_cli
from tests.lerobot_oracle import check_many_with_lerobot, summarize

CAMERA = "observation.images.top"
TASK = "pick up the cube"


def version(root: Path) -> str:
    return json.loads((root / "meta/info.json").read_text())["codebase_version"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """A v2.1 dataset (list columns, one camera) through every writing command; -> (name, output, expect) rows."""
    area = tmp_path_factory.mktemp("written")
    fixture = make_dataset(area / "v21", version="v2.1", episodes=3, lengths=[10, 12, 9], cameras=(CAMERA,),
                           vector_storage="list")
    src = fixture.root
    every = expect_episodes(fixture)

    def expect(episodes=None, **changes) -> dict:
        eps = every if episodes is None else [every[e] for e in episodes]
        return {"fps": fixture.spec.fps, "video_keys": [CAMERA], "episodes": [{**ep, **changes} for ep in eps]}
    renamed = [{**ep, "values": {"observation.joints" if k == "observation.state" else k: v
                                 for k, v in ep["values"].items()}} for ep in every]
    tasks = [{**ep, "task": "grab it" if ep["task"] == TASK else ep["task"]} for ep in every]
    cases = [
        ("delete", ["delete", src, "--episodes", "1"], "delete", expect([0, 2])),
        ("split", ["split", src, "--episodes", "a:0-1,b:2"], "split/a", expect([0, 1])),
        ("repair", ["repair", src], "repair", expect()),
        ("quantiles -o", ["quantiles", src], "quantiles", expect()),
        ("tasks", ["tasks", src, "--set", f"{TASK}=grab it"], "tasks", {**expect(), "episodes": tasks}),
        ("features", ["features", src, "--rename", "observation.state=observation.joints"], "features",
         {**expect(), "episodes": renamed}),
        ("select", ["select", src, "--state", "observation.state[0:2]"], "select", expect()),
        ("flatten", ["flatten", src], "flatten", expect()),
        ("encode --reencode", ["encode", src, "--reencode", "--gop", "4"], "encode", expect()),
        ("merge", ["merge", src, src], "merge", {**expect(), "episodes": every + every}),
        ("convert", ["convert", src], "convert", expect()),
    ]
    rows = []
    for name, argv, written, expected in cases:
        out = area / name.split()[0]
        run_cli(*argv, "-o", out)
        rows.append((name, area / written if "/" in written else out, expected))
    for name, argv in [("delete --in-place", ["delete", "--episodes", "1"]),
                       ("features --in-place", ["features", "--rename", "observation.state=observation.joints"])]:
        copy = area / name.replace(" --", "-")
        shutil.copytree(src, copy)
        run_cli(argv[0], copy, *argv[1:], "--in-place")
        assert not [p.name for p in area.iterdir() if p.name.startswith(".")], "a scratch or staging folder was left"
        rows.append((name, copy, expect([0, 2]) if argv[0] == "delete" else {**expect(), "episodes": renamed}))
    assert version(src) == "v2.1"   # the input is untouched
    return area, rows


def test_every_writing_command_leaves_v30_from_a_v21_dataset(outputs):
    _, rows = outputs
    assert {name: version(out) for name, out, _ in rows} == {name: "v3.0" for name, _, _ in rows}
    for name, out, _ in rows:
        proc = run_cli("validate", out, "--json", check=False)
        assert proc.returncode == 0, (name, proc.stdout[-2000:], proc.stderr)


def test_lerobot_061_loads_every_output_with_the_frames_it_should_hold(outputs):
    _, rows = outputs
    reports = check_many_with_lerobot([{"root": str(out), "expect": expected, "frames": "all"}
                                       for _, out, expected in rows])
    failed = {name: summarize(report) for (name, _, _), report in zip(rows, reports) if not report["ok"]}
    assert not failed, failed


def test_to_v21_still_writes_v21_when_asked(tmp_path):
    fixture = make_dataset(tmp_path / "v21", version="v2.1", episodes=2, lengths=[8, 9], cameras=(CAMERA,))
    run_cli("delete", fixture.root, "--episodes", "0", "-o", tmp_path / "out", "--to", "v2.1")
    assert version(tmp_path / "out") == "v2.1"


def test_a_v20_dataset_written_as_v30_validates_clean(tmp_path):
    """v2.0's stats.json has no count, which v3.0's checks and lerobot's stats aggregation need: the format layer
    gives each feature's stats the dataset's frame count (formats.v20.read), so that a camera's stats, which no
    command recomputes without decoding, reach the v3.0 output whole."""
    fixture = make_dataset(tmp_path / "v20", version="v2.0", episodes=2, lengths=[8, 9], cameras=(CAMERA,))
    assert "count" not in json.loads((fixture.root / "meta/stats.json").read_text())[CAMERA]
    for name, argv in [("convert", ["convert"]), ("quantiles", ["quantiles"]),
                       ("encode", ["encode", "--reencode", "--gop", "4"])]:
        out = tmp_path / name
        run_cli(argv[0], fixture.root, *argv[1:], "-o", out)
        assert version(out) == "v3.0"
        assert json.loads((out / "meta/stats.json").read_text())[CAMERA]["count"] == [17], name
        proc = run_cli("validate", out, "--json", check=False)
        assert proc.returncode == 0 and json.loads(proc.stdout)["errors"] == 0, (name, proc.stdout[-1500:])
