"""The Hugging Face `datasets` description of the data columns, stored in each data parquet's
schema metadata (key b"huggingface"), and the Arrow types that go with it.

Vectors are written as `Sequence` with a length: `datasets` before 4 knows only `Sequence`, and 4.x
still reads it (lerobot 0.6.1 loads such files), so one form serves both.
"""

from __future__ import annotations

import json

import pyarrow as pa

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
