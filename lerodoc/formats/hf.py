"""The Hugging Face `datasets` description of the data columns, stored in each data parquet's
schema metadata (key b"huggingface"), and the Arrow types that go with it.

Vectors are written as `Sequence` with a length: `datasets` before 4 knows only `Sequence`, and 4.x
still reads it (lerobot 0.6.1 loads such files), so one form serves both.
"""

from __future__ import annotations

import json

import pyarrow as pa

from lerodoc.tables.parquet_io import is_list_type

ARROW = {"float16": pa.float16(), "float32": pa.float32(), "float64": pa.float64(), "int8": pa.int8(),
         "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(), "uint8": pa.uint8(),
         "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(), "bool": pa.bool_(),
         "string": pa.string()}
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def arrow_type(spec: dict) -> pa.DataType:
    """The column type for a feature spec: scalar for shape (1,), fixed-size list for (N,)."""
    if spec["dtype"] == "image":
        return IMAGE
    value = ARROW[spec["dtype"]]
    shape = list(spec["shape"])
    if shape == [1]:
        return value
    if len(shape) == 1:
        return pa.list_(value, shape[0])
    for size in reversed(shape):
        value = pa.list_(value, size)
    return value


def dtype_name(kind: pa.DataType) -> str:
    """The info.json dtype of an Arrow value type."""
    for name, arrow in ARROW.items():
        if kind == arrow:
            return name
    if pa.types.is_large_string(kind):
        return "string"
    raise ValueError(f"no LeRobot dtype for Arrow type {kind}")


def hf_feature(spec: dict) -> dict:
    if spec["dtype"] == "image":
        return {"_type": "Image"}
    shape = list(spec["shape"])
    value = {"dtype": spec["dtype"], "_type": "Value"}
    if shape == [1]:
        return value
    if len(shape) == 1:
        return {"feature": value, "length": shape[0], "_type": "Sequence"}
    return {"shape": shape, "dtype": spec["dtype"], "_type": f"Array{len(shape)}D"}


def schema_for(features: dict, columns: list[str], base: pa.Schema | None = None) -> pa.Schema:
    """The data schema for `columns` (in order): their Arrow types from `features`, and the `datasets`
    metadata, keeping any other metadata of `base`."""
    fields = [pa.field(name, arrow_type(features[name])) for name in columns]
    metadata = dict(base.metadata or {}) if base is not None else {}
    metadata[b"huggingface"] = json.dumps({"info": {"features": {n: hf_feature(features[n]) for n in columns}}}).encode()
    return pa.schema(fields, metadata=metadata)


# ---------------------------------------------------------------- the load-time cast

CAST_ON_LOAD = frozenset({"LAY035"})   # problems the `datasets` cast resolves by itself (a numeric dtype)


def list_levels(kind: pa.DataType) -> tuple[list[int | None], pa.DataType]:
    """The list sizes around a column's values (None for variable-length) and the value type."""
    sizes = []
    while is_list_type(kind):
        sizes.append(kind.list_size if pa.types.is_fixed_size_list(kind) else None)
        kind = kind.value_type
    return sizes, kind


def schema_problems(features: dict, schema: pa.Schema) -> list[tuple[str, str, str]]:
    """(code, feature, message) for each data column that the `datasets` cast to `features` (what
    LeRobotDataset does on load) would refuse or change; codes are validate's LAY03x. Each message names
    meta/info.json beside the column: the feature it declares and the column disagree, and either may be wrong."""
    out, names = [], set(schema.names)   # a new list at each `schema.names`: asked once, not once a feature
    for name, spec in features.items():
        if spec.get("dtype") == "video":
            continue
        declared = f"meta/info.json declares dtype {spec.get('dtype')}, shape {spec.get('shape')}"
        if name not in names:
            out.append(("LAY032", name, f"no column {name!r} ({declared})"))
            continue
        problem = column_problem(spec, schema.field(name).type)
        if problem:
            out.append((problem[0], name, f"column {name!r} {problem[1]} ({declared})"))
    for name in schema.names:
        if name not in features and not name.startswith("__index_level_"):
            out.append(("LAY038", name, f"column {name!r} ({schema.field(name).type}) is not in meta/info.json's "
                                        "features"))
    return out


def column_problem(spec: dict, kind: pa.DataType) -> tuple[str, str] | None:
    """Why a column of type `kind` does not hold the feature `spec`, as (code, text), or None."""
    dtype, shape = spec["dtype"], list(spec.get("shape") or [])
    if dtype == "image":
        if not (pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0):
            return "LAY037", f"is {kind}, not struct<bytes, path>"
        return None
    if dtype not in ARROW:
        return None
    sizes, value = list_levels(kind)
    if shape == [1] and sizes:
        if sizes == [None] or sizes == [1]:
            return "LAY033", f"is {kind} for a shape [1] feature; lerobot needs a scalar {dtype} column"
        return "LAY034", f"is {kind} for a shape [1] feature"
    if len(shape) == 1 and shape != [1] and (len(sizes) != 1 or sizes[0] not in (None, shape[0])):
        return "LAY034", f"is {kind} for shape {shape}; expected a list of {shape[0]} {dtype}"
    if len(shape) > 1 and len(sizes) != len(shape):
        return "LAY034", f"is {kind} for shape {shape}; expected {len(shape)} list levels"
    expected = ARROW[dtype]
    if value == expected or (dtype == "string" and pa.types.is_large_string(value)):
        return None
    numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) for t in (value, expected)]
    if all(numeric):
        return "LAY035", f"holds {value}, feature dtype is {dtype}"
    return "LAY036", f"holds {value}, feature dtype is {dtype}"


def storage_type(spec: dict, kind: pa.DataType) -> pa.DataType:
    """The type lerobot 0.6.1 writes for a column now stored as `kind`: a list of one value becomes the
    scalar a shape-(1,) feature needs, a variable-length list a fixed-size list of shape[0]; the value
    type is kept (a numeric dtype difference is cast on load, and casting here could lose values)."""
    if spec.get("dtype") in (None, "image", "video", "string") or len(list(spec.get("shape") or [])) != 1:
        return kind
    sizes, value = list_levels(kind)
    shape = list(spec["shape"])
    if shape == [1] and sizes in ([None], [1]):
        return value
    if shape != [1] and sizes == [None]:
        return pa.list_(value, shape[0])
    return kind


def storage_schema(features: dict, schema: pa.Schema) -> tuple[pa.Schema, dict[str, dict[str, str]]]:
    """`schema` (a data file's) as lerobot 0.6.1 stores it: each column's `storage_type` and `datasets`
    metadata describing `features`; also {column: {"from", "to"}} for each column whose type changed."""
    fields, changed = [], {}
    for f in schema:
        spec = features.get(f.name)
        kind = storage_type(spec, f.type) if isinstance(spec, dict) else f.type
        if kind != f.type:
            changed[f.name] = {"from": str(f.type), "to": str(kind)}
        fields.append(pa.field(f.name, kind))
    described = {f.name: hf_feature(features[f.name]) for f in schema
                 if isinstance(features.get(f.name), dict) and features[f.name].get("dtype") != "video"}
    metadata = dict(schema.metadata or {})
    metadata[b"huggingface"] = json.dumps({"info": {"features": described}}).encode()
    return pa.schema(fields, metadata=metadata), changed
