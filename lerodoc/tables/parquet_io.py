"""Parquet rows in and out: per-episode slices, row groups sized by bytes (`RowGroups`), column checksums.

Every read goes through `read_parquet`, `read_row_groups` or `iter_batches`, and each first holds the footer's
claims for the columns it reads to the budget rule (lerodoc.budget, `_within_budget`): the column chunks must lie in
bytes the file really holds, and what decoding them allocates must fit the memory budget. Strings stored with a
dictionary are read as dictionaries and measured before they are expanded (`_expand`): a footer cannot say how long
the values its indices repeat are.
"""

from __future__ import annotations

import os
import threading
import weakref
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lerodoc import access, budget
from lerodoc.errors import LerodocError


class Unreadable(LerodocError):
    """pyarrow could not read a parquet file; `reason` is its own words."""

    def __init__(self, reason: str, **where):
        super().__init__(f"cannot read parquet ({reason})", **where)
        self.reason = reason


@contextmanager
def _readable(path: Path | str, episode: int | None):
    """Turn pyarrow's failure to read a parquet file (truncated, corrupt, not parquet) into a clear error."""
    try:
        yield
    except (OSError, pa.ArrowException) as exc:
        raise Unreadable(' '.join(str(exc).split()), file=path, episode=episode) from None


def read_parquet(path: Path | str, columns: list[str] | Callable[[str], bool] | None = None,
                 episode: int | None = None) -> pa.Table:
    """A whole parquet file (only `columns` if given: names, or which of the file's column names to read); an
    unreadable file, or one whose footer claims more than the file holds or the memory budget allows, is a clear
    error. Read through a small buffer, not pre-buffered: pre-buffering a local file allocates its bytes once more,
    and fresh pages cost more than the read."""
    with _readable(path, episode):
        file = _parquet_file(path, pre_buffer=False, buffer_size=1 << 20)
        if callable(columns):   # chosen from the footer just read: the file is opened once
            columns = [name for name in file.schema_arrow.names if columns(name)]
        return _read(file, path, columns, None, _within_budget(file, path, columns, None, episode), episode)


def open_parquet(path: Path | str, episode: int | None = None, streaming: bool = False) -> pq.ParquetFile:
    """A parquet file opened for its footer (schema, row counts) and row groups; an unreadable file is a clear
    error. `streaming` reads it through a small buffer, for `iter_batches`."""
    with _readable(path, episode):
        return _parquet_file(path, pre_buffer=False, buffer_size=1 << 20) if streaming else _parquet_file(path)


# ---------------------------------------------------------------- footers, parsed once for the same bytes

@dataclass
class _Footer:
    """A parsed footer, and what is worked out from it once: its Arrow schema and its `_Leaves`."""
    meta: pq.FileMetaData
    schema: pa.Schema | None = None
    leaves: _Leaves | None = None


FOOTER_TAIL = 64 << 10      # bytes read from a local file's end to find its footer (an episodes file's is about 26 KB)
FOOTER_CHUNK = 4 << 10      # what a parsed footer holds a column chunk, about: 2.2-3.5 KB measured (an episodes
                            # file's 26 KB footer, 79 chunks, holds 280 KB parsed; a 3 KB one of 9 chunks, 20 KB)
FOOTERS_HELD = 48 << 20     # parsed footers held at most (by that estimate), the least recently used let go first:
                            # a merge of 100 parts of 200 episodes reads 100 footers of each kind, about 34 MB
_FOOTERS: dict[bytes, tuple[_Footer, int]] = {}   # a footer's bytes -> it parsed, and its estimated size
_FOOTERS_LOCK = threading.Lock()
_footers_held = 0


def _footer_bytes(tail: bytes | None) -> bytes | None:
    """A parquet file's footer (its metadata, length and magic) from the file's last bytes, when all of it is there."""
    if not tail or len(tail) < 12 or tail[-4:] != b"PAR1":
        return None
    size = int.from_bytes(tail[-8:-4], "little") + 8
    return tail[-size:] if size <= len(tail) else None


def _footer(path: Path | str) -> tuple[object, bytes | None, _Footer | None]:
    """(what pyarrow opens for `path`, its footer's bytes where the file's last FOOTER_TAIL bytes hold it, that footer
    as parsed earlier in this process or None). The key is the footer's own bytes, read from the checked file at
    every open: a file rewritten since is read through its own footer, never through one parsed before."""
    source, tail = access.source_tail(path, FOOTER_TAIL)
    key = _footer_bytes(tail)
    if key is None:
        return source, None, None
    with _FOOTERS_LOCK:
        held = _FOOTERS.pop(key, None)
        if held is None:
            return source, key, None
        _FOOTERS[key] = held   # the most recently used last
        return source, key, held[0]


def _keep(key: bytes | None, footer: _Footer) -> None:
    """Hold a footer just parsed under its bytes (none: not held), the least recently used let go past
    FOOTERS_HELD."""
    global _footers_held
    if key is None:
        return
    size = len(key) + FOOTER_CHUNK * footer.meta.num_row_groups * footer.meta.num_columns
    with _FOOTERS_LOCK:
        if key not in _FOOTERS:
            _FOOTERS[key] = (footer, size)
            _footers_held += size
        while _footers_held > FOOTERS_HELD and len(_FOOTERS) > 1:
            _footers_held -= _FOOTERS.pop(next(iter(_FOOTERS)))[1]


def _parquet_file(path: Path | str, **options) -> pq.ParquetFile:
    """`path` opened by pyarrow with `options`, its footer parsed once per process for the same bytes (`_footer`)."""
    source, key, footer = _footer(path)
    file = pq.ParquetFile(source, metadata=None if footer is None else footer.meta, **options)
    if footer is None:
        footer = _Footer(file.metadata)
        _keep(key, footer)
    _KNOWN[file] = footer
    return file


# ---------------------------------------------------------------- the budget rule for a read

# bytes a decoded value of each physical type takes (BYTE_ARRAY: its offset, or its dictionary index; the bytes
# themselves are counted apart)
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12, "BYTE_ARRAY": 4}


@dataclass(frozen=True)
class _Leaves:
    """What the budget rule needs of a file's schema, per parquet leaf column: its top-level column, physical type,
    the bytes a decoded value takes, the bytes of its levels per value (an int16 for each of definition and
    repetition), its path; the leaves of string columns, which `_dictionary_reader` reads as dictionaries, and those
    of list columns."""
    owner: list[str]
    kinds: list[str]
    widths: list[int]
    levels: list[int]
    paths: list[str]
    strings: frozenset[int]
    repeated: frozenset[int]     # leaves of list columns: their values per row are the page headers' to say


_KNOWN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # an open ParquetFile -> its _Footer


def _leaves_of(meta: pq.FileMetaData, file: pq.ParquetFile | None = None) -> _Leaves:
    """The file's _Leaves, worked out once per footer (`_footer`) or open `file` (a per-episode reader reads many
    row groups of one)."""
    footer = _KNOWN.get(file) if file is not None else None
    if footer is not None and footer.leaves is not None:
        return footer.leaves
    leaves = _schema_leaves(meta)
    if footer is not None:
        footer.leaves = leaves
    elif file is not None:
        _KNOWN[file] = _Footer(meta, leaves=leaves)
    return leaves


def footer_schema(meta: pq.FileMetaData) -> pq.ParquetSchema:
    """A footer's parquet schema, as `meta.schema` gives it but without the reference cycle that property makes (the
    footer caches its schema, which points back at the footer): each footer read through it was garbage that only
    CPython's cycle collector frees, and under the CLI's raised threshold (`cli.GC_FIRST_THRESHOLD`) a validate of
    400 one-episode files of 300 features held 470 MB of them (a footer of 300 columns is about 1.2 MB in memory)."""
    return pq.ParquetSchema(meta)


SCHEMAS_HELD = 4   # recent schemas whose _Leaves are kept: a dataset's data files share one or a few
_SCHEMAS: list[tuple[pq.ParquetSchema, bytes | None, _Leaves]] = []   # most recent first
_SCHEMAS_LOCK = threading.Lock()


def _schema_leaves(meta: pq.FileMetaData) -> _Leaves:
    """The _Leaves of a footer's schema, worked out once for equal schemas (the same parquet schema and the same
    stored Arrow schema, which decides the Arrow types): a v2.1 dataset's files, an episode each, share one, and
    its 310 columns took 4.4 ms a file to work out."""
    schema, stored = footer_schema(meta), (meta.metadata or {}).get(b"ARROW:schema")
    with _SCHEMAS_LOCK:
        for known, known_stored, leaves in _SCHEMAS:
            if known_stored == stored and known.equals(schema):
                return leaves
    leaves = _work_out_leaves(meta)
    with _SCHEMAS_LOCK:
        _SCHEMAS.insert(0, (schema, stored, leaves))
        del _SCHEMAS[SCHEMAS_HELD:]
    return leaves


def _work_out_leaves(meta: pq.FileMetaData) -> _Leaves:
    """`_schema_leaves` of a schema not seen lately."""
    parquet = footer_schema(meta)
    schema = parquet.to_arrow_schema()
    owner, strings = [], set()
    for field in schema:
        if _holds_strings(field.type):
            strings.update(range(len(owner), len(owner) + _leaves(field.type)))
        owner += [field.name] * _leaves(field.type)
    columns = [parquet.column(j) for j in range(min(meta.num_columns, len(owner)))]
    kinds = [c.physical_type for c in columns]
    leaves = _Leaves(owner, kinds,
                     [max(c.length or 0, 1) if k == "FIXED_LEN_BYTE_ARRAY" else _WIDTH.get(k, 8)
                      for c, k in zip(columns, kinds)],
                     [2 * (c.max_definition_level > 0) + 2 * (c.max_repetition_level > 0) for c in columns],
                     [c.path for c in columns], frozenset(strings),
                     frozenset(j for j, c in enumerate(columns) if c.max_repetition_level > 0))
    return leaves


def _picked(leaves: _Leaves, columns: list[str] | None) -> list[int]:
    """The leaves of `columns` (None: all)."""
    wanted = None if columns is None else set(columns)
    return [j for j, name in enumerate(leaves.owner[:len(leaves.kinds)]) if wanted is None or name in wanted]


def decoded_claims(meta: pq.FileMetaData, columns: list[str] | None = None, groups: list[int] | None = None,
                   file: pq.ParquetFile | None = None) -> dict[int, tuple[dict[str, int], dict[str, int], int]]:
    """What reading `columns` (None: all) of row groups `groups` (None: all) takes, from the footer alone. Per row
    group: per top-level column, the bytes its decoded values take at most and the bytes of its column chunks in
    the file; and the most one column chunk needs while it is decoded (its pages uncompressed and its levels). A
    value count, not a chunk's uncompressed size, sizes the values: a dictionary-encoded chunk of 70 bytes can hold
    10^8 values; what the footer counts is what pyarrow decodes once `_pages_agree`. `file`: the open file `meta` is
    the footer of, whose schema is then worked out once."""
    leaves = _leaves_of(meta, file)
    picked = _picked(leaves, columns)
    claims: dict[int, tuple[dict[str, int], dict[str, int], int]] = {}
    for i in range(meta.num_row_groups) if groups is None else groups:
        group = meta.row_group(i)
        decoded: dict[str, int] = {}
        stored: dict[str, int] = {}
        transient = 0
        for j in picked:
            if j >= group.num_columns:
                break
            chunk, name = group.column(j), leaves.owner[j]
            count, uncompressed = max(chunk.num_values, 0), max(chunk.total_uncompressed_size, 0)
            if j not in leaves.repeated:   # a value a row, however few values the chunk claims
                count = max(count, group.num_rows)
            values = count * leaves.widths[j]
            if leaves.kinds[j] == "BYTE_ARRAY":
                values += uncompressed            # the bytes of plain strings, or of a dictionary
            decoded[name] = decoded.get(name, 0) + values
            stored[name] = stored.get(name, 0) + max(chunk.total_compressed_size, 0)
            transient = max(transient, count * leaves.levels[j] + uncompressed)
        if decoded:
            claims[i] = decoded, stored, transient
    return claims


def _within_budget(file: pq.ParquetFile, path: Path | str, columns: list[str] | None, groups: list[int] | None,
                   episode: int | None, one_group_at_a_time: bool = False) -> int:
    """The budget rule for one read, before it: the column chunks read lie in bytes the file holds on disk (a
    sparse file's holes hold none), and what decoding them takes fits the memory budget (lerodoc.budget): all of
    them, or with `one_group_at_a_time` (a streaming read) the largest row group's. A LerodocError names the file
    and the largest column otherwise. Returns the bytes decoding takes, for `_expand`."""
    claims = decoded_claims(file.metadata, columns, groups, file)
    if not claims:
        return 0
    stored: dict[str, int] = {}
    for _, group_stored, _ in claims.values():
        for name, size in group_stored.items():
            stored[name] = stored.get(name, 0) + size
    total = sum(stored.values())
    if not (access.is_remote(path) or access.is_url(path)):   # a hub file's bytes are what the hub serves
        with access.open_binary(path) as f:
            held = budget.held(f.fileno())
            if total > held:
                raise LerodocError(f"its footer places {total} bytes of column chunks in a file that holds {held} "
                                   f"bytes on disk (a sparse or damaged file)", file=path, episode=episode,
                                   field=max(stored, key=stored.get))
            _pages_agree(f.fileno(), file, columns, list(claims), path, episode)
    # the values decoded stay; a chunk's pages and levels are let go once it is decoded
    parts = [(sum(d.values()) + transient, d) for d, _, transient in claims.values()]
    if not one_group_at_a_time:
        decoded: dict[str, int] = {}
        for d, _, _ in claims.values():
            for name, size in d.items():
                decoded[name] = decoded.get(name, 0) + size
        parts = [(sum(decoded.values()) + max(t for _, _, t in claims.values()), decoded)]
    need, decoded = max(parts, key=lambda part: part[0])
    largest = max(decoded, key=decoded.get)
    what = "a row group" if one_group_at_a_time else f"the {len(decoded)} column(s) read"
    budget.check(need, f"decoding {what} ({largest!r}: {budget.human(decoded[largest])})", file=path,
                 field=largest, episode=episode)
    return need


def _pages_agree(fd: int, file: pq.ParquetFile, columns: list[str] | None, groups: list[int], path: Path | str,
                 episode: int | None) -> None:
    """The page headers of the chunks read agree with the footer: as many values as it counts, and pages no larger
    uncompressed than it says. pyarrow decodes what the page headers say (a list row holds any number of values)
    and decompresses a whole page whatever the rows read, so a footer counting 10^6 values over pages holding 10^8,
    or a few MB over a page that inflates to 2 GB, would pass the budget; a LerodocError names the column instead.
    A flat column stored uncompressed needs no walk: pyarrow decodes the rows the footer counts, from pages no
    larger than the file's own bytes."""
    meta = file.metadata
    leaves = _leaves_of(meta, file)
    picked = _picked(leaves, columns)
    for i in groups:
        group = meta.row_group(i)
        for j in picked:
            if j >= group.num_columns:
                break
            chunk = group.column(j)
            if j not in leaves.repeated and chunk.compression == "UNCOMPRESSED":
                continue
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < (chunk.dictionary_page_offset or 0) < start:
                start = chunk.dictionary_page_offset
            try:
                values, raw = _page_values(fd, start, start + chunk.total_compressed_size)
            except ValueError:
                continue     # pages this walk cannot follow: pyarrow names the damage when it reads them
            if values != chunk.num_values or raw > chunk.total_uncompressed_size:
                raise LerodocError(f"its page headers hold {values} values in {raw} bytes where its footer counts "
                                   f"{chunk.num_values} values in {chunk.total_uncompressed_size} bytes (a crafted "
                                   f"or damaged file)", file=path, episode=episode, field=leaves.owner[j])


def _page_values(fd: int, start: int, end: int) -> tuple[int, int]:
    """(values of the data pages, bytes of all pages uncompressed) in bytes [start, end) of a column chunk, from the
    page headers. ValueError where the headers do not read or do not tile the bytes. A chunk of up to a MiB is read
    in one go (an episode's chunk usually is), a larger one a header at a time."""
    values = raw = 0
    first = os.pread(fd, min(end - start, 1 << 20), start)
    whole = start + len(first) == end
    pos = start
    while pos < end:
        want = 256
        while True:
            inside = pos - start + want <= len(first) or whole
            buf, at = (first, pos - start) if inside else (os.pread(fd, min(want, end - pos), pos), 0)
            try:
                kind, size, stored, count, after = _page_header(buf, at)
                break
            except IndexError:
                if inside and whole or not inside and len(buf) < want or want >= 1 << 24:
                    raise ValueError("page header cut short") from None
                want *= 16
        if kind in (0, 3):            # DATA_PAGE, DATA_PAGE_V2
            if count is None:
                raise ValueError("data page header without its value count")
            values += count
        raw += size
        pos += after - at + stored
    if pos != end:
        raise ValueError("pages overrun their column chunk")
    return values, raw


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 varint at buf[pos:]: (value, position after it); IndexError where the bytes end first."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("thrift varint over 64 bits")


def _skip(buf: bytes, pos: int, kind: int, depth: int = 0) -> int:
    """Past one Thrift compact value of type `kind` at buf[pos:], as a list element or a map's (where a bool takes a
    byte of its own) or a struct field of another type."""
    if depth > 16:
        raise ValueError("thrift values nested too deep")
    if kind in (1, 2, 3):
        return pos + 1
    if kind in (4, 5, 6):
        return _varint(buf, pos)[1]
    if kind == 7:
        pos += 8
    elif kind == 8:
        length, pos = _varint(buf, pos)
        pos += length
    elif kind in (9, 10):                          # list, set: size and element type, then the elements
        head = buf[pos]
        count, pos = _varint(buf, pos + 1) if head >> 4 == 15 else (head >> 4, pos + 1)
        for _ in range(count):
            pos = _skip(buf, pos, head & 0x0F, depth + 1)
    elif kind == 11:                               # map: size, key and value types, then the pairs
        count, pos = _varint(buf, pos)
        if count:
            types, pos = buf[pos], pos + 1
            for _ in range(count):
                pos = _skip(buf, _skip(buf, pos, types >> 4, depth + 1), types & 0x0F, depth + 1)
    elif kind == 12:
        return _struct(buf, pos, depth + 1)[1]
    else:
        raise ValueError(f"thrift type {kind}")
    if pos > len(buf):
        raise IndexError("thrift value runs past the bytes read")
    return pos


def _struct(buf: bytes, pos: int, depth: int = 0, keep: frozenset = frozenset()) -> tuple[dict, int]:
    """A Thrift compact struct at buf[pos:]: ({field id: integer} for its integer fields in `keep`, and {field id:
    struct} for its struct fields in `keep`, the rest skipped; position after it). The common types are read in
    line: every read of a data file walks its page headers."""
    if depth > 16:
        raise ValueError("thrift structs nested too deep")
    fields, last = {}, 0
    while True:
        head = buf[pos]
        pos += 1
        if not head:
            return fields, pos
        kind = head & 0x0F
        if head >> 4:
            last += head >> 4
        else:
            value, pos = _varint(buf, pos)
            last = (value >> 1) ^ -(value & 1)
        if kind == 5 or kind == 6:             # i32, i64: a zigzag varint
            value, pos = _varint(buf, pos)
            if last in keep:
                fields[last] = (value >> 1) ^ -(value & 1)
        elif kind == 1 or kind == 2:           # a bool field: its value is its type, no byte of its own
            continue
        elif kind == 8:                        # binary: a length, then the bytes
            length, pos = _varint(buf, pos)
            pos += length
            if pos > len(buf):
                raise IndexError("thrift field runs past the bytes read")
        elif kind == 12:
            if last in keep:
                fields[last], pos = _struct(buf, pos, depth + 1, _COUNT)
            else:
                pos = _struct(buf, pos, depth + 1)[1]
        else:
            pos = _skip(buf, pos, kind, depth)


_COUNT = frozenset({1})                      # a data page header's num_values
_PAGE = frozenset({1, 2, 3, 5, 8})           # type, uncompressed and compressed size, data page header (v1, v2)


def _page_header(buf: bytes, pos: int) -> tuple[int, int, int, int | None, int]:
    """(page type, uncompressed size, compressed size, its data page header's value count or None, position after
    it) of the parquet page header at buf[pos:]. ValueError for one without its sizes; IndexError where the bytes
    end first."""
    fields, after = _struct(buf, pos, 0, _PAGE)
    kind, size, stored = fields.get(1), fields.get(2), fields.get(3)
    if kind is None or size is None or stored is None or size < 0 or stored < 0:
        raise ValueError("page header without its sizes")
    count = (fields.get(5 if kind == 0 else 8) or {}).get(1)
    return kind, size, stored, None if count is None or count < 0 else count, after


def _dictionary_reader(file: pq.ParquetFile, path: Path | str, columns: list[str] | None,
                       groups: list[int] | None) -> pq.ParquetFile:
    """`file`, or where a column of `columns` holding strings (or lists of them) is dictionary-encoded, the same
    file (its footer reused) reading such columns as dictionaries, for `_expand` to measure before they are
    expanded. (Strings inside a struct, such as an image's bytes, are left as they are: pyarrow reads no
    dictionary there.)"""
    meta = file.metadata
    leaves = _leaves_of(meta, file)
    strings = [j for j in sorted(leaves.strings) if leaves.kinds[j:j + 1] == ["BYTE_ARRAY"]
               and (columns is None or leaves.owner[j] in columns)]
    if not strings or access.is_url(path) and not access.is_remote(path):   # a hub URL as text: nothing to reopen
        return file
    encoded = sorted({leaves.paths[j] for i in (range(meta.num_row_groups) if groups is None else groups)
                      for j in strings if meta.row_group(i).column(j).has_dictionary_page})
    if not encoded:
        return file
    return pq.ParquetFile(access.source(path), metadata=meta, read_dictionary=encoded, pre_buffer=False,
                          buffer_size=1 << 20)


def _holds_strings(kind: pa.DataType) -> bool:
    """Whether an Arrow type is strings or bytes, or lists of them (at any depth): the types read as dictionaries
    (pyarrow cannot do so inside a struct)."""
    while is_list_type(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) \
        or pa.types.is_large_binary(kind)


def _expand(data, schema: pa.Schema, need: int, path: Path | str, episode: int | None):
    """(A table or record batch read by `_dictionary_reader` with its dictionary columns expanded to the types
    `schema`, the file's own, gives them; the bytes they grew by), once those bytes, added to the `need` of the
    read, are known to fit the memory budget. A column the file itself stores as a dictionary stays one. (Read a
    row group at a time: pyarrow reads no dictionary in a list over several.)"""
    grown, names = {}, set(schema.names)   # a new list at each `schema.names`: asked once
    for i, field in enumerate(data.schema):
        if field.name in names and schema.field(field.name).type != field.type:
            grown[field.name] = sum(_expanded_bytes(chunk) for chunk in _chunks(data.column(i)))
    if not grown:
        return data, 0
    largest = max(grown, key=grown.get)
    budget.check(need + sum(grown.values()), f"expanding the dictionary of column {largest!r} "
                 f"({budget.human(grown[largest])})", file=path, field=largest, episode=episode)
    fields = [schema.field(f.name) if f.name in grown else f for f in data.schema]
    columns = [[_undictionary(chunk, field.type) for chunk in _chunks(data.column(i))] if field.name in grown
               else data.column(i) for i, field in enumerate(fields)]
    target = pa.schema(fields, metadata=data.schema.metadata)
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays([c[0] if isinstance(c, list) else c for c in columns],
                                          schema=target), sum(grown.values())
    return pa.Table.from_arrays([pa.chunked_array(c, type=f.type) if isinstance(c, list) else c
                                 for c, f in zip(columns, fields)], schema=target), sum(grown.values())


def _read(file: pq.ParquetFile, path: Path | str, columns: list[str] | None, groups: list[int] | None, need: int,
          episode: int | None) -> pa.Table:
    """Row groups `groups` (None: all) of `columns` of `file`, its dictionary-encoded strings measured and expanded
    a row group at a time (`_dictionary_reader`, `_expand`)."""
    reader = _dictionary_reader(file, path, columns, groups)
    if reader is file:
        return file.read(columns=columns) if groups is None else file.read_row_groups(groups, columns=columns)
    parts = []
    for i in range(file.metadata.num_row_groups) if groups is None else groups:
        part, grown = _expand(reader.read_row_group(i, columns=columns), file.schema_arrow, need, path, episode)
        parts.append(part)
        need += grown
    return pa.concat_tables(parts) if parts else file.read_row_groups([], columns=columns)


def _chunks(column: pa.ChunkedArray | pa.Array) -> list[pa.Array]:
    return column.chunks if isinstance(column, pa.ChunkedArray) else [column]


def _offsets(array: pa.Array) -> np.ndarray:
    """The value offsets of a string or binary array (int64), its own offset applied."""
    large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    return np.frombuffer(array.buffers()[1], dtype=np.int64 if large else np.int32,
                         count=len(array) + 1 + array.offset)[array.offset:].astype(np.int64)


def _indices(array: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """A dictionary array's indices (int64, clipped into its dictionary: a null slot holds any value) and, where
    some are null, which are valid."""
    raw = array.indices
    indices = np.frombuffer(raw.buffers()[1], dtype=numpy_dtype(raw.type), count=len(raw) + raw.offset)[raw.offset:]
    indices = np.clip(indices.astype(np.int64), 0, max(len(array.dictionary) - 1, 0))
    if not raw.null_count:
        return indices, None
    bits = np.unpackbits(np.frombuffer(raw.buffers()[0], dtype=np.uint8), bitorder="little")
    return indices, bits[raw.offset:raw.offset + len(raw)].astype(bool)


def _expanded_bytes(array: pa.Array) -> int:
    """The bytes the dictionary-encoded strings in `array` (at any list depth) take expanded: each index's value
    length, counted with the dictionary's lengths (no expansion)."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        if not len(array.dictionary) or not len(array):
            return 0
        indices, _ = _indices(array)
        counts = np.bincount(indices, minlength=len(array.dictionary))
        return int(counts @ np.diff(_offsets(array.dictionary)))
    if is_list_type(kind):
        return _expanded_bytes(array.values)
    return 0


def _undictionary(array: pa.Array, kind: pa.DataType) -> pa.Array:
    """`array` (dictionary-encoded strings, or lists of them) as the plain `kind` it encodes, gathered with numpy
    a few MB at a time: pyarrow's own decoding imports pyarrow.compute (a third of a second)."""
    if not pa.types.is_dictionary(array.type):
        if not is_list_type(array.type):
            return array
        own = array.buffers()[:1 if pa.types.is_fixed_size_list(array.type) else 2]
        return pa.Array.from_buffers(kind, len(array), own, null_count=array.null_count, offset=array.offset,
                                     children=[_undictionary(array.values, kind.value_type)])
    words = array.dictionary
    indices, valid = _indices(array)
    starts = _offsets(words)
    lengths = np.diff(starts)[indices] if len(words) else np.zeros(len(indices), np.int64)
    if valid is not None:
        lengths[~valid] = 0
    ends = np.zeros(len(indices) + 1, np.int64)
    np.cumsum(lengths, out=ends[1:])
    data = np.frombuffer(words.buffers()[2], dtype=np.uint8) if len(words) and words.buffers()[2] else \
        np.zeros(0, np.uint8)
    out, first = np.empty(int(ends[-1]), np.uint8), starts[:-1][indices] if len(words) else indices
    lo = 0
    while lo < len(indices):   # a block of values of about 4 MB (or one longer value): byte positions, gathered
        hi = max(lo + 1, int(np.searchsorted(ends, ends[lo] + (4 << 20), side="right")) - 1)
        hi = min(hi, len(indices))
        if hi == lo + 1:
            out[ends[lo]:ends[hi]] = data[first[lo]:first[lo] + lengths[lo]]
        elif ends[hi] > ends[lo]:
            out[ends[lo]:ends[hi]] = data[np.repeat(first[lo:hi] - ends[lo:hi], lengths[lo:hi])
                                          + np.arange(ends[lo], ends[hi])]
        lo = hi
    wide = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    if not wide and ends[-1] >= 1 << 31:
        raise ValueError("expanded strings over 2 GiB in a 32-bit-offset column")
    mask = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, len(indices), [mask, pa.py_buffer(ends.astype(np.int64 if wide else np.int32)),
                                                      pa.py_buffer(out)],
                                 null_count=0 if valid is None else int((~valid).sum()))


def _leaf_chunks(meta: pq.FileMetaData) -> Iterator[tuple[str, pq.ColumnChunkMetaData]]:
    """(top-level column, one of its leaf column chunks) for every leaf chunk of every row group, from the footer."""
    schema = footer_schema(meta).to_arrow_schema()
    owner = [name for field in schema for name in [field.name] * _leaves(field.type)]
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        for j in range(min(group.num_columns, len(owner))):
            yield owner[j], group.column(j)


def leaf_values(meta: pq.FileMetaData) -> dict[str, int]:
    """Top-level column -> the values its leaf columns hold in the file, from the footer (a list column of N rows
    of width D holds N * D)."""
    held = dict.fromkeys(footer_schema(meta).to_arrow_schema().names, 0)
    for name, chunk in _leaf_chunks(meta):
        held[name] += chunk.num_values
    return held


def null_free(meta: pq.FileMetaData) -> set[str]:
    """The top-level columns whose every leaf chunk's footer statistics count no null (a chunk without a null count
    leaves its column out): from the footer alone."""
    free = set(footer_schema(meta).to_arrow_schema().names)
    for name, chunk in _leaf_chunks(meta):
        stats = chunk.statistics
        if stats is None or not stats.has_null_count or stats.null_count:
            free.discard(name)
    return free


def _leaves(kind: pa.DataType) -> int:
    """How many parquet leaf columns store an Arrow type."""
    if pa.types.is_struct(kind):
        return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaves(kind.key_type) + _leaves(kind.item_type)
    if is_list_type(kind):
        return _leaves(kind.value_type)
    return 1


def iter_batches(file: pq.ParquetFile, path: Path | str, columns: list[str] | None = None, episode: int | None = None,
                 batch_size: int = 1 << 14) -> Iterator[pa.RecordBatch]:
    """The rows of a parquet `file` (opened `streaming` from `path`) as record batches of `columns`. A few MB at
    a time keeps memory small and reused: reading a large file whole allocates it several times over, and
    fresh pages cost more than decoding. An unreadable file, or a row group whose footer claims more than the file
    holds or the memory budget allows (the reader holds one at a time), is a clear error."""
    with _readable(path, episode):
        need = _within_budget(file, path, columns, None, episode, one_group_at_a_time=True)
        reader = _dictionary_reader(file, path, columns, None)
        if reader is file:
            yield from file.iter_batches(batch_size=batch_size, columns=columns)
            return
        for i in range(file.metadata.num_row_groups):   # a group at a time: its dictionaries are its own
            grown = 0
            for batch in reader.iter_batches(batch_size=batch_size, row_groups=[i], columns=columns):
                batch, more = _expand(batch, file.schema_arrow, need + grown, path, episode)
                grown += more
                yield batch


def read_row_groups(file: pq.ParquetFile, path: Path | str, groups: list[int], columns: list[str] | None = None,
                    episode: int | None = None) -> pa.Table:
    """Row groups `groups` of a parquet `file` opened from `path` (only `columns` if given); an unreadable file,
    or one whose footer claims more than the file holds or the memory budget allows, is a clear error."""
    with _readable(path, episode):
        return _read(file, path, columns, groups, _within_budget(file, path, columns, groups, episode), episode)


def read_schema(path: Path | str, episode: int | None = None) -> pa.Schema:
    """A parquet file's Arrow schema from its footer; an unreadable file is a clear error."""
    with _readable(path, episode):
        source, key, footer = _footer(path)
        if footer is None:
            footer = _Footer(pq.read_metadata(source))
            _keep(key, footer)
        if footer.schema is None:
            footer.schema = footer_schema(footer.meta).to_arrow_schema()
        return footer.schema


def is_list_type(kind: pa.DataType) -> bool:
    """Whether an Arrow type is a list of any storage: list, large_list or fixed_size_list."""
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def numpy_dtype(kind: pa.DataType) -> np.dtype | None:
    """The numpy dtype of a fixed-width integer or float Arrow type, else None."""
    if pa.types.is_floating(kind):
        return np.dtype(f"f{kind.bit_width // 8}")
    if pa.types.is_integer(kind):
        return np.dtype(f"{'i' if pa.types.is_signed_integer(kind) else 'u'}{kind.bit_width // 8}")
    return None


def to_numpy(array: pa.Array) -> np.ndarray:
    """A numpy view of a numeric array without nulls; other arrays go through pyarrow's conversion.

    The view path avoids `Array.to_numpy`, whose first call imports pandas (a quarter second per
    worker process).
    """
    dtype = numpy_dtype(array.type)
    if dtype is not None and array.null_count == 0:
        return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array) + array.offset)[array.offset:]
    return array.to_numpy(zero_copy_only=False)


GROUP_BYTES = 128 << 20   # a row group's rows in memory: one group for a small file, a few hundred for a huge one


def write_groups(writer: pq.ParquetWriter, table: pa.Table, limit: int = GROUP_BYTES) -> None:
    """`table` through `writer` as row groups of about `limit` bytes each (one group when it is smaller): never a
    group per episode, which costs readers a footer entry and a seek per group (pyarrow reads 20,000 groups of 10
    rows 40x slower than the same rows in one)."""
    rows = table.num_rows
    per_group = rows if table.nbytes <= limit else max(1, int(rows * limit / max(table.nbytes, 1)))
    writer.write_table(table, row_group_size=max(per_group, 1))


class RowGroups:
    """Tables appended to one parquet file, held until about `limit` bytes are waiting and then written as one
    row group (`write_groups`); `close` writes what is left. Episodes reach their rows by their row range
    (dataset_from_index/dataset_to_index, or the data_row of v3.0's episodes metadata), not by row group."""

    def __init__(self, writer: pq.ParquetWriter, limit: int = GROUP_BYTES):
        self.writer, self.limit = writer, limit
        self.waiting: list[pa.Table] = []
        self.held = 0

    def write(self, table: pa.Table) -> None:
        self.waiting.append(table)
        self.held += table.nbytes
        if self.held >= self.limit:
            self.close()

    def close(self) -> None:
        if self.waiting:
            write_groups(self.writer, pa.concat_tables(self.waiting), self.limit)
        self.waiting, self.held = [], 0


def from_numpy(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """An integer or float Arrow array of type `kind` over numpy values (no pandas import, unlike `pa.array`)."""
    values = np.ascontiguousarray(values, dtype=numpy_dtype(kind))
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def arrow_array(values: list | np.ndarray, kind: pa.DataType | None = None, present: np.ndarray | None = None
                ) -> pa.Array:
    """`pa.array(values, kind)` built from numpy buffers where it can be, since `pa.array` imports pandas on
    its first call (a third of a second or more): numbers, strings, and lists (or numpy arrays) of those nested
    to any depth with one shape per row (rows may be None). Anything else (ragged rows, mixed types) goes to
    `pa.array`. `values` may be the rows already stacked, a (rows, *shape) array of numbers; `present` then says
    which rows hold a value (the others are None, as in a list)."""
    stacked = isinstance(values, np.ndarray) and values.dtype.kind in "iuf"
    if not stacked and present is not None:
        values = [v if p else None for v, p in zip(values, present)]
    missing = None if not stacked or present is None or present.all() else ~np.asarray(present, dtype=bool)
    held = (values if missing is None else values[~missing]) if stacked else [v for v in values if v is not None]
    listed = (lambda: [None if missing is not None and missing[i] else v.tolist() for i, v in enumerate(values)]) \
        if stacked else (lambda: [v.tolist() if isinstance(v, np.ndarray) else v for v in values])
    try:
        if not stacked and (kind is not None and (pa.types.is_string(kind) or pa.types.is_list(kind)
                                                  and pa.types.is_string(kind.value_type))
                            or held and _has_str(held[0])):
            return _strings(values, kind)
        if stacked:
            shapes = {values.shape[1:]}
        elif {type(v) for v in held} <= {int, float, bool}:   # plain numbers: no shape to ask each for
            shapes = {()} if held else set()
        else:
            shapes = {v.shape if isinstance(v, np.ndarray) else np.shape(v) for v in held}
        if len(shapes) > 1:
            raise ValueError("ragged")
        shape = shapes.pop() if shapes else ()
        if not shape and len(held) != len(values):
            raise ValueError("None among scalars")
        flat = np.asarray(held)
        if flat.dtype.kind not in "iuf":
            raise ValueError("not numbers")
        leaf = kind
        while leaf is not None and pa.types.is_list(leaf):
            leaf = leaf.value_type
        leaf = leaf or (pa.int64() if flat.dtype.kind in "iu" else pa.float64())
        if not (pa.types.is_integer(leaf) or pa.types.is_floating(leaf)) \
                or pa.types.is_integer(leaf) and flat.dtype.kind == "f":
            raise ValueError("not a number type, or floats for integers")
        array = from_numpy(flat.reshape(-1), leaf)
        for size in reversed(shape[1:]):          # inner list levels: every row has the same shape
            array = pa.ListArray.from_arrays(from_numpy(np.arange(0, len(array) + 1, size, dtype=np.int32),
                                                        pa.int32()), array)
        if shape:                                  # the rows' own lists, None where a row is None
            if stacked:
                lengths = np.full(len(values), shape[0], dtype=np.int32)
                if missing is not None:
                    lengths[missing] = 0
            else:
                lengths = np.array([0 if v is None else shape[0] for v in values], dtype=np.int32)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            array = _lists(offsets, array, _missing(values) if not stacked else missing)
        return array if kind is None or array.type == kind else array.cast(kind)
    except (ValueError, TypeError, pa.ArrowException):
        return pa.array(listed(), type=kind)


def regular_rows(column: pa.ChunkedArray | pa.Array, dtype) -> np.ndarray | None:
    """A numeric column of (nested) lists as one (rows, *shape) array of `dtype`, when no row or value is null and
    every row has the same shape; else None. The inverse of `arrow_array`, without a Python object per value."""
    array = _one_array(column)
    shape = [len(array)]
    while is_list_type(array.type):
        regular = _equal_rows(array)
        if regular is None:
            return None
        width, array = regular
        shape.append(width)
    if array.null_count or numpy_dtype(array.type) is None:
        return None
    values = to_numpy(array)
    if _lossy(values.dtype, dtype) and not exact_cast(values, dtype).all():
        return None   # a cast would make numbers nobody wrote (NaN -> -9.2e18, 2.5 -> 2, 1e30): the caller's to name
    # a copy, even of float64: a view would keep Arrow's buffer, and the pages of its pool, for as long as the stats
    # live (quantiles -o of 100k episodes: 1155-1164 MiB resident with views, 890-892 MiB with copies)
    return values.astype(dtype).reshape(shape)


def _equal_rows(array: pa.Array) -> tuple[int, pa.Array] | None:
    """(the rows' one length, their values in order) of a list array with rows, no null row and every row of one
    length; else None. The offsets are read once, for both (a stats column of a few hundred rows took 22 us,
    most of it Python calls, when they were read twice)."""
    if array.null_count or not len(array):
        return None
    if pa.types.is_fixed_size_list(array.type):
        return array.type.list_size, list_values(array)
    offsets = to_numpy(array.offsets)
    width = offsets[1] - offsets[0]
    if (offsets[1:] - offsets[:-1] != width).any():
        return None
    return int(width), array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def exact_cast(values: np.ndarray, dtype) -> np.ndarray:
    """Which of `values` `astype(dtype)` keeps as they are: every one, but floats cast to an integer type, where
    NaN, infinities, fractions and numbers past the type's range would change (a NaN count would become
    -9.2e18)."""
    if not _lossy(values.dtype, dtype):
        return np.ones(values.shape, dtype=bool)
    limits = np.iinfo(dtype)
    return (values == np.round(values)) & (values >= limits.min) & (values < float(limits.max))


def _lossy(kind: np.dtype, dtype) -> bool:
    """Whether a cast from `kind` to `dtype` can change a value that `exact_cast` must then look at: floats to an
    integer type."""
    return kind.kind == "f" and np.dtype(dtype).kind in "iu"


def _one_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column as one array: its one chunk as it is (combine_chunks copies nothing then, but takes a few us, and
    a stats table is read column by column), else the chunks combined."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _has_str(value) -> bool:
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return isinstance(value, str)


def _missing(values: list) -> np.ndarray:
    return np.array([v is None for v in values], dtype=bool)


def _lists(offsets: np.ndarray, values: pa.Array, missing: np.ndarray | None = None) -> pa.Array:
    """A list array of `values` cut at the int32 `offsets`, its rows null where `missing` is True, from its buffers:
    `ListArray.from_arrays` with a mask imports pyarrow.compute (26 ms a process that writes one)."""
    validity = None if missing is None or not missing.any() else \
        pa.py_buffer(np.packbits(~np.asarray(missing, dtype=bool), bitorder="little"))
    return pa.Array.from_buffers(pa.list_(values.type), len(offsets) - 1,
                                 [validity, pa.py_buffer(np.ascontiguousarray(offsets, dtype=np.int32))],
                                 children=[values])


def _strings(values: list, kind: pa.DataType | None) -> pa.Array:
    """A string array, or a list<string> array of lists of strings, from their UTF-8 bytes."""
    nested = kind is not None and pa.types.is_list(kind) or any(isinstance(v, (list, tuple)) for v in values)
    words = [w for v in values if v is not None for w in (v if nested else [v])]
    if not all(isinstance(w, str) for w in words):
        raise TypeError("not strings")
    data = [w.encode() for w in words]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in data], dtype=np.int64)])
    if offsets[-1] >= 2 ** 31:
        raise ValueError("too long for 32-bit offsets")
    strings = pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets.astype(np.int32)),
                                                             pa.py_buffer(b"".join(data))])
    if not nested:
        if len(words) != len(values):
            raise ValueError("None among strings")
        return strings
    counts = np.array([0 if v is None else len(v) for v in values], dtype=np.int32)
    list_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return _lists(list_offsets, strings, _missing(values))


def column_matrix(column: pa.ChunkedArray | pa.Array, num_rows: int) -> np.ndarray:
    """A scalar or (fixed-size) list column as an (N, D) array. (Array methods, not pyarrow.compute, whose
    import takes a tenth of a second.)"""
    array = _one_array(column)
    if is_list_type(array.type):
        return to_numpy(list_values(array)).reshape(num_rows, -1)
    return to_numpy(array).reshape(num_rows, -1)


def _canonical_parts(array: pa.Array):
    """Byte strings (or buffers) that identify an array's values, the same for list and fixed_size_list
    storage."""
    kind = array.type
    if is_list_type(kind):
        lengths = array.value_lengths()
        if lengths.null_count:
            yield repr([i for i, v in enumerate(lengths.to_pylist()) if v is None]).encode()
            lengths = lengths.drop_null()
        yield memoryview(to_numpy(lengths).astype(np.int64))
        yield from _canonical_parts(array.flatten())
    elif pa.types.is_struct(kind):
        for i in range(kind.num_fields):
            yield kind.field(i).name.encode()
            yield from _canonical_parts(array.field(i))
    elif pa.types.is_binary(kind) or pa.types.is_string(kind) or pa.types.is_large_binary(kind) \
            or pa.types.is_large_string(kind):
        for value in array.to_pylist():
            data = b"\x00null" if value is None else (value.encode() if isinstance(value, str) else value)
            yield len(data).to_bytes(8, "little") + data
    else:
        yield str(kind).encode()
        values = np.ascontiguousarray(to_numpy(array))
        yield values.tobytes() if values.dtype == object else memoryview(values)   # hashed without a copy


def column_digests(table: pa.Table) -> dict[str, tuple[int, int]]:
    """(CRC-32, byte count) of each column's values: equal digests mean equal values and element types,
    however the column is chunked. CRC-32 is the check parquet's own pages carry; it catches the shifted,
    dropped or altered values of a faulty rewrite (any error up to 32 bits long, others but once in 2**32),
    at several times sha256's speed. Numeric columns and lists of them without nulls are checked chunk by
    chunk, the same bytes as their combined array gives, without copying or combining them."""
    digests = {}
    for name in table.column_names:
        crc, size = 0, 0
        column = table.column(name)
        streams = _numeric_streams(column.type, column.chunks)
        for part in (streams if streams is not None else _canonical_parts(column.combine_chunks())):
            crc = zlib.crc32(part, crc)
            size += part.nbytes if isinstance(part, memoryview) else len(part)
        digests[name] = (crc, size)
    return digests


def _numeric_streams(kind: pa.DataType, chunks: list[pa.Array]) -> Iterator | None:
    """`_canonical_parts` of the chunks combined, yielded chunk by chunk, for a numeric column or (nested)
    lists of numbers with no null at any level; None for anything else."""
    levels, leaf = [], kind
    while is_list_type(leaf):
        levels.append(leaf)
        leaf = leaf.value_type
    if numpy_dtype(leaf) is None:
        return None
    arrays = [list(chunks)]                 # the chunks' arrays at each list level, then at the leaf
    for _ in levels:
        if any(a.null_count for a in arrays[-1]):
            return None
        arrays.append([list_values(a) for a in arrays[-1]])
    if any(a.null_count for a in arrays[-1]):
        return None

    def parts():
        for level in arrays[:-1]:
            for array in level:
                yield memoryview(_list_lengths(array))
        yield str(leaf).encode()
        for array in arrays[-1]:
            if len(array):
                yield memoryview(np.ascontiguousarray(to_numpy(array)))
    return parts()


def list_values(array: pa.Array) -> pa.Array:
    """The values of a list array's rows, in order: `flatten()`, which imports pyarrow.compute (a tenth of a
    second per process), so sliced from the child values by offsets where no row is null."""
    if array.null_count == 0 and pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        return array.values.slice(array.offset * size, len(array) * size)
    if array.null_count == 0 and (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)) and len(array):
        offsets = to_numpy(array.offsets)
        return array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return array.flatten()


def _list_lengths(array: pa.Array) -> np.ndarray:
    """The int64 lengths of a list array without nulls (from its offsets or fixed size: no pyarrow.compute)."""
    if pa.types.is_fixed_size_list(array.type):
        return np.full(len(array), array.type.list_size, dtype=np.int64)
    return np.diff(to_numpy(array.offsets)).astype(np.int64)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` in `schema` (columns in its order, its types and metadata). A list column whose rows each hold
    one value becomes the scalar the schema wants (the one change of representation a cast cannot make);
    values are never changed. Raises LerodocError naming the column (the caller adds file and episode)."""
    if table.schema.equals(schema, check_metadata=False):
        return table.replace_schema_metadata(schema.metadata)
    missing = sorted(set(schema.names) ^ set(table.column_names))
    if missing:
        raise LerodocError(f"columns differ from the target schema: {missing}", field=missing[0])
    table = table.select(schema.names)
    for name in schema.names:
        kind, target = table.schema.field(name).type, schema.field(name).type
        if is_list_type(kind) and not is_list_type(target):
            column = table.column(name).combine_chunks()
            if column.null_count or len(column) and (_list_lengths(column) != 1).any():
                raise LerodocError("holds lists that are not all of one value, so it cannot become a scalar",
                                   field=name)
            table = table.set_column(table.column_names.index(name), name, list_values(column))
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise LerodocError(f"cannot be cast to the target schema ({exc})") from None
