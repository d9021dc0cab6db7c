"""Edit task strings. Frames keep their task_index, or are re-pointed where two texts become one; the
tasks file (tasks.parquet / tasks.jsonl), every episode's tasks list and the task_index stats follow.
The data files go through `ops.derive` (values checksummed; videos and other files kept as they are).
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
from lerodoc.errors import LerodocError
from lerodoc.ops.derive import derive
from lerodoc.parquet_io import column_matrix, from_numpy, read_schema
from lerodoc.staging import staged_edit


@dataclass(frozen=True)
class TaskRemap:
    """The transform: task_index k becomes task_map[k] (`changed` is empty when no index moves)."""
    task_map: tuple[int, ...]

    @property
    def changed(self) -> tuple[str, ...]:
        return () if list(self.task_map) == list(range(len(self.task_map))) else ("task_index",)

    def apply(self, table: pa.Table, path: str) -> pa.Table:
        if not self.changed or "task_index" not in table.column_names:
            return table
        old = column_matrix(table.column("task_index"), table.num_rows)[:, 0]
        if old.size and (old.min() < 0 or old.max() >= len(self.task_map)):
            raise LerodocError(f"task_index {int(old.max())} has no task", file=path, field="task_index")
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
    for i in cuts:
        if value[:i] in known:
            return value[:i], value[i + 1:]
    if not cuts:
        raise LerodocError(f"--set {value!r}: expected 'OLD TEXT=NEW TEXT'")
    raise LerodocError(f"--set {value!r}: no task reads {value[:cuts[0]]!r}", file=tasks_file,
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
    unknown = [k for k in data if k not in known]
    if unknown:
        raise LerodocError(f"no task reads {unknown[0]!r}", file=path)
    return dict(data)


def plan(ds: Dataset, mapping: dict[str, str]) -> TasksReport:
    """The new task list and the old -> new task_index map."""
    report = TasksReport(dataset=str(ds.root), output=None, renamed=dict(mapping))
    for old, new in mapping.items():
        if not new.strip():
            raise LerodocError(f"task {old!r} would become empty", field="tasks")
    texts = [mapping.get(t, t) for t in ds.tasks]
    report.tasks = list(dict.fromkeys(texts))
    report.task_map = [report.tasks.index(t) for t in texts]
    for old, new in zip(ds.tasks, texts):
        report.merged.setdefault(new, []).append(old)
    report.merged = {new: olds for new, olds in report.merged.items() if len(olds) > 1}
    report.episodes_changed = [ep.index for ep in ds.episodes if any(t in mapping for t in ep.tasks)]
    return report


def write_metadata(ds: Dataset, out: Path | None, *, in_place: bool = False, force: bool = False) -> Path:
    """Write `ds`'s metadata (info, tasks, episodes, stats) anew; every data and video file stays as it is
    (hard links)."""
    ds.require_complete()
    if ds.version == "v2.0":
        raise LerodocError("v2.0 datasets are read-only here", file=ds.root / formats.INFO_PATH,
                           hint="convert it first: lerodoc convert DATASET -o OUT --to v2.1")
    for data_file in ds.data_files():   # kept as they are: their footers must at least read
        read_schema(ds.path(data_file))
    module = formats.module(ds.version)
    meta = {formats.INFO_PATH, module.TASKS_PATH} | module.stats_files(ds.root)
    if ds.version != "v3.0":
        meta.add(module.EPISODES_PATH)   # v3.0's episodes files hold the per-episode stats: in stats_files
    with staged_edit(ds.root, out, in_place=in_place, force=force, rewrite=meta) as tmp:
        module.write_meta(tmp, ds.info, ds.episodes, ds.tasks, ds.stats)
    return Path(ds.root if in_place else out).absolute()


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
        raise LerodocError("nothing to edit: give --set 'OLD=NEW' or --from tasks.json")
    report = plan(ds, mapping)
    if not dry_run:
        if out is None and not in_place:
            raise LerodocError("give -o OUTPUT or --in-place (or --dry-run to only see the plan)",
                               file=ds.root / formats.INFO_PATH)
        ds.info.total_tasks = len(report.tasks)
        for ep in ds.episodes:
            ep.tasks = list(dict.fromkeys(mapping.get(t, t) for t in ep.tasks))
        ds.tasks = report.tasks
        remap = TaskRemap(tuple(report.task_map))
        if remap.changed:
            report.output = str(derive(ds, out, remap, dict(ds.info.features), in_place=in_place, force=force,
                                       workers=workers))
        else:   # no task_index moves: only the metadata is written, data and videos are the same files
            report.output = str(write_metadata(ds, out, in_place=in_place, force=force))
    report.seconds = round(time.perf_counter() - started, 3)
    return report
