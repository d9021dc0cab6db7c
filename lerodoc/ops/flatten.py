"""Flatten list columns: list<T> of length 1 becomes T, lists of one constant length become fixed-size
lists; info.json shapes/dtypes and the parquet `datasets` metadata follow. Ragged lists are an error."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, UsageError
from lerodoc.formats.hf import dtype_name
from lerodoc.ops import derive
from lerodoc.run.parallel import pmap
from lerodoc.tables.parquet_io import is_list_type, read_parquet, read_schema, to_numpy


@dataclass
class FlattenReport:
    dataset: str
    output: str | None
    columns: dict[str, dict] = field(default_factory=dict)   # column -> {"from": type, "to": type, "shape": [...]}
    seconds: float = 0.0
    plan: dict | None = None      # --dry-run: what a run would write (`derive.Plan.to_json`)
    unchanged: bool = False       # no list column to flatten: nothing written, a success (like convert's no-op)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Flatten:
    """The transform: each listed column to a scalar (length 1) or a fixed-size list of its length."""
    lengths: tuple[tuple[str, int], ...]

    @property
    def changed(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.lengths)

    def apply(self, table: pa.Table, path: str) -> pa.Table:
        for name, length in self.lengths:
            column = table.column(name).combine_chunks()
            flat = pc.list_flatten(column)
            value = flat if length == 1 else pa.FixedSizeListArray.from_arrays(flat, length)
            table = table.set_column(table.column_names.index(name), name, value)
        return table


def _flattenable(kind: pa.DataType) -> bool:
    """Variable-length lists, and fixed-size lists of one item (which should be scalars)."""
    return is_list_type(kind) and (not pa.types.is_fixed_size_list(kind) or kind.list_size == 1)


def list_lengths(args: tuple[str, list[tuple[int, int, int]], list[str]]) -> dict[str, list[tuple[int, int, int]]]:
    """Worker: per column, (episode, shortest, longest) list length; a null list counts as length -1."""
    path, episodes, columns = args
    table = read_parquet(path, columns)
    out: dict[str, list[tuple[int, int, int]]] = {}
    for name in columns:
        lengths = pc.list_value_length(table.column(name).combine_chunks())
        values = to_numpy(lengths) if lengths.null_count == 0 else to_numpy(pc.fill_null(lengths, -1))
        out[name] = [(index, int(values[start:start + n].min()), int(values[start:start + n].max()))
                     for index, start, n in episodes if n]
    return out


def plan(ds: Dataset, columns: list[str] | None, workers: int) -> tuple[Flatten, dict, dict[str, dict]]:
    """What to flatten: (transform, new features, per-column summary); ragged or null lists raise."""
    schema = read_schema(ds.path(ds.episodes[0].data_file), ds.episodes[0].index)   # the footer alone
    names = set(schema.names)   # a new list at each `schema.names`: asked once
    candidates = [n for n in ds.info.data_keys if n in names and _flattenable(schema.field(n).type)]
    chosen = candidates if columns is None else list(columns)
    for name in chosen:
        if name not in names or not is_list_type(schema.field(name).type):
            raise UsageError(f"{name!r} is not a list column of this dataset (list columns: "
                             f"{', '.join(candidates) or 'none'})", field=name)
    by_file = ds.row_spans(absolute=True)
    seen: dict[str, list[tuple[int, int, int]]] = {name: [] for name in chosen}
    for part in pmap(list_lengths, [(f, eps, chosen) for f, eps in by_file.items()], workers=workers,
                     nbytes=ds.data_bytes()):
        for name, rows in part.items():
            seen[name].extend(rows)
    lengths, features, summary = [], dict(ds.info.features), {}
    for name in chosen:
        rows = sorted(seen[name])
        first = rows[0][1]
        for episode, low, high in rows:
            if low != high or low != first or low < 0:
                problem = "a null list" if low < 0 else f"lists of {low}..{high} items" if low != high else \
                    f"lists of {low} items where episode {rows[0][0]} has {first}"
                raise LerodocError(f"is ragged: {problem}; only lists of one constant length can be flattened",
                                   file=ds.root, episode=episode, field=name)
        value_type = schema.field(name).type.value_type
        features[name] = {**features[name], "dtype": dtype_name(value_type), "shape": [first]}
        lengths.append((name, first))
        summary[name] = {"from": str(schema.field(name).type), "to": str(value_type if first == 1
                                                                          else pa.list_(value_type, first)),
                         "shape": [first]}
    return Flatten(tuple(lengths)), features, summary


def flatten(src: Path, out: Path | None = None, *, in_place: bool = False, columns: list[str] | None = None,
            workers: int = 1, force: bool = False, dry_run: bool = False) -> FlattenReport:
    """Flatten `columns` (default: every variable-length list column) into a new dataset or in place;
    `dry_run` returns the report with the plan, writing nothing."""
    started = time.perf_counter()
    ds = Dataset.open(src)
    transform, features, summary = plan(ds, columns, workers)
    report = FlattenReport(dataset=str(ds.root), output=None, columns=summary)
    if not summary:   # nothing to do is a success that says so, and writes nothing
        report.unchanged = True
    elif dry_run:
        report.plan = derive.plan(ds, transform, features).to_json()
    else:
        report.output = str(derive.derive(ds, out, transform, features, in_place=in_place, force=force,
                                          workers=workers))
    report.seconds = round(time.perf_counter() - started, 3)
    return report
