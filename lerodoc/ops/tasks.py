"""Edit task strings. Frames keep their task_index, or are re-pointed where two texts become one; the
tasks file (tasks.parquet / tasks.jsonl), every episode's tasks list and the task_index stats follow.
The data files go through `ops.derive` (values checksummed; videos and other files kept as they are); when
no task_index moves, they are kept as they are too and only the metadata is written.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from lerodoc import formats
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.model import number_tasks, require_task_rows
from lerodoc.ops.derive import derive
from lerodoc.promote.staging import output_target
from lerodoc.tables.parquet_io import column_matrix, from_numpy


@dataclass(frozen=True)
class TaskRemap:
    """The transform: task_index k becomes task_map[k]; an `identity` when no index moves (texts renamed only)."""
    task_map: tuple[int, ...]

    @property
    def identity(self) -> bool:
        return list(self.task_map) == list(range(len(self.task_map)))

    @property
    def changed(self) -> tuple[str, ...]:
        return () if self.identity else ("task_index",)

    def apply(self, table: pa.Table, path: str) -> pa.Table:
        if self.identity or "task_index" not in table.column_names:
            return table
        old = column_matrix(table.column("task_index"), table.num_rows)[:, 0]
        require_task_rows(old, len(self.task_map), file=path)
        field_ = table.schema.field("task_index")
        new = np.asarray(self.task_map, dtype=np.int64)[old]
        return table.set_column(table.column_names.index("task_index"), field_, from_numpy(new, field_.type))


@dataclass
class TasksReport:
    dataset: str
    output: str | None
    renamed: dict[str, str] = field(default_factory=dict)       # old text -> new text
    tasks: list[str] = field(default_factory=list)              # the new tasks, position == task_index
    task_map: list[int] = field(default_factory=list)           # old task_index -> new task_index
    merged: dict[str, list[str]] = field(default_factory=dict)  # new text -> the old texts it joins
    episodes_changed: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def parse_set(value: str, known: list[str], tasks_file: Path | None = None) -> tuple[str, str]:
    """`old text=new text` -> (old, new). Either text may hold `=`: the split taken is the one whose left
    side is an existing task."""
    cuts = [i for i, c in enumerate(value) if c == "="]
    listed = set(known)
    for i in cuts:
        if value[:i] in listed:
            return value[:i], value[i + 1:]
    if not cuts:
        raise UsageError(f"--set {value!r}: expected 'OLD TEXT=NEW TEXT'")
    raise UsageError(f"--set {value!r}: no task reads {value[:cuts[0]]!r}", file=tasks_file,
                     hint="lerodoc info DATASET --json lists the tasks" if len(known) > 20
                     else f"tasks: {'; '.join(repr(t) for t in known)}")


def read_mapping(path: Path, known: list[str]) -> dict[str, str]:
    """A tasks.json: {"old text": "new text", ...}, or a list of new texts by task_index."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise LerodocError(f"cannot read it ({exc})", file=path) from None
    if isinstance(data, list):
        if len(data) != len(known) or not all(isinstance(t, str) for t in data):
            raise LerodocError(f"a list must hold one text per task ({len(known)})", file=path)
        return {old: new for old, new in zip(known, data) if old != new}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise LerodocError('expected {"old text": "new text", ...} or a list of texts by task_index', file=path)
    listed = set(known)
    unknown = [k for k in data if k not in listed]
    if unknown:
        raise LerodocError(f"no task reads {unknown[0]!r}", file=path)
    return dict(data)


def plan(ds: Dataset, mapping: dict[str, str]) -> TasksReport:
    """The new task list and the old -> new task_index map."""
    report = TasksReport(dataset=str(ds.root), output=None, renamed=dict(mapping))
    for old, new in mapping.items():
        if not new.strip():
            raise UsageError(f"task {old!r} would become empty", field="tasks")
    texts = [mapping.get(t, t) for t in ds.tasks]
    numbering: dict[str, int] = {}
    report.task_map = list(number_tasks(texts, numbering))
    report.tasks = list(numbering)
    for old, new in zip(ds.tasks, texts):
        report.merged.setdefault(new, []).append(old)
    report.merged = {new: olds for new, olds in report.merged.items() if len(olds) > 1}
    report.episodes_changed = [ep.index for ep in ds.episodes if any(t in mapping for t in ep.tasks)]
    return report


def edit_tasks(src: Path, out: Path | None = None, *, set_: list[str] = (), from_file: Path | None = None,
               in_place: bool = False, dry_run: bool = False, workers: int = 1, force: bool = False) -> TasksReport:
    """Write `src` with its task texts edited."""
    started = time.perf_counter()
    ds = Dataset.open(src)
    ds.require_complete()   # before the edit: a truncated tasks file must not pass as a shorter list
    mapping = read_mapping(from_file, ds.tasks) if from_file else {}
    for value in set_:
        old, new = parse_set(value, ds.tasks, ds.root / formats.module(ds.version).TASKS_PATH)
        mapping[old] = new
    if not mapping:
        raise UsageError("nothing to edit: give --set 'OLD=NEW' or --from tasks.json")
    report = plan(ds, mapping)
    if not dry_run:
        output_target(ds.root, out, in_place)   # the one -o / --in-place rule
        ds.info.total_tasks = len(report.tasks)
        for ep in ds.episodes:
            ep.tasks = list(dict.fromkeys(mapping.get(t, t) for t in ep.tasks))
        ds.tasks = report.tasks
        report.output = str(derive(ds, out, TaskRemap(tuple(report.task_map)), dict(ds.info.features),
                                   in_place=in_place, force=force, workers=workers))
    report.seconds = round(time.perf_counter() - started, 3)
    return report
