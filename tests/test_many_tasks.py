"""Task lists of tens of thousands of texts (an instruction an episode, as language-annotated collections have) are
numbered with one look-up a text (`formats.model.number_tasks`): merge, repair and tasks scanned the list for each
text, and took minutes (two sources of 20,000 tasks: 14 s to number them alone)."""

from __future__ import annotations

import json
import time

from bench.dataset import numeric_v30
from lerodoc import api
from lerodoc.dataset import Dataset
from lerodoc.formats import v30
from lerodoc.formats.model import number_tasks
from tests.helpers import run_cli

TASKS = 60_000
SECONDS = 8   # each command here: under a second on a 2-core machine; with a scan a text, 21 s (tasks) to 155 s (merge)


def _dataset(root, prefix: str) -> list[str]:
    """A 10-episode dataset whose task list holds TASKS texts: task 0 ("move", which every frame uses) and
    TASKS - 1 of its own. Returns the list."""
    numeric_v30(root, 100, 10, {"observation.state": 2, "action": 2})
    ds = Dataset.open(root)
    texts = ["move"] + [f"{prefix}: put object {i} in the bin" for i in range(1, TASKS)]
    v30.write_meta(root, ds.info, ds.episodes, texts, None)
    return texts


def _timed(fn):
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def test_number_tasks_keeps_the_first_of_equal_texts_and_leaves_unused_out():
    numbering: dict[str, int] = {}
    assert number_tasks(["a", "b", "a"], numbering) == (0, 1, 0)
    assert number_tasks(["c", "b", "d"], numbering, used={0, 1}) == (2, 1, -1)
    assert list(numbering) == ["a", "b", "c"]


def test_merge_of_two_sources_of_sixty_thousand_tasks(tmp_path):
    a, b = _dataset(tmp_path / "a", "a"), _dataset(tmp_path / "b", "b")
    report, seconds = _timed(lambda: api.merge([tmp_path / "a", tmp_path / "b"], tmp_path / "out"))
    assert report.tasks == 2 * TASKS - 1
    assert Dataset.open(tmp_path / "out").tasks == a + b[1:]   # "move" once, where it first came
    assert seconds < SECONDS, f"merge took {seconds:.1f} s"


def test_repair_and_tasks_of_sixty_thousand_tasks(tmp_path):
    texts = _dataset(tmp_path / "a", "a")
    report, seconds = _timed(lambda: api.repair(tmp_path / "a", tmp_path / "repaired"))
    assert Dataset.open(tmp_path / "repaired").tasks == texts
    assert seconds < SECONDS, f"repair took {seconds:.1f} s"
    report, seconds = _timed(lambda: api.tasks(tmp_path / "a", tmp_path / "renamed", changes=[f"{texts[2]}=move"]))
    renamed = Dataset.open(tmp_path / "renamed").tasks
    assert renamed == texts[:2] + texts[3:]   # the renamed text joins "move", which came first
    assert seconds < SECONDS, f"tasks took {seconds:.1f} s"


def test_tasks_command_renaming_every_task_prints_the_edits_not_the_list(tmp_path):
    """`lerodoc tasks --from` a list renaming every one of 60,000 texts (a translation of the instructions): each old
    text is found once (the table's "was" column scanned every rename for each task), and a list past
    commands.tasks.SHOWN is printed as its edited tasks only."""
    texts = _dataset(tmp_path / "a", "a")
    renames = [f"{t} (v2)" for t in texts[:-1]] + [texts[-1]]   # the last one kept
    (tmp_path / "tasks.json").write_text(json.dumps(renames))
    proc, seconds = _timed(lambda: run_cli("tasks", tmp_path / "a", "-o", tmp_path / "out", "--from",
                                           tmp_path / "tasks.json"))
    rows = [line.split(None, 1) for line in proc.stdout.splitlines()]
    numbered = [int(row[0]) for row in rows if row and row[0].isdigit() and len(row) > 1 and " (v2)" in row[1]]
    assert numbered == list(range(TASKS - 1))   # every renamed task listed, in order; the one kept is not
    assert f"{texts[-2]} (v2)  {texts[-2]}" in proc.stdout   # each with the text it was
    assert "1 other tasks as they were (--json lists every task)" in proc.stdout
    assert Dataset.open(tmp_path / "out").tasks == renames
    assert seconds < SECONDS, f"tasks took {seconds:.1f} s"
