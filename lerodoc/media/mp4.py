"""Box-level MP4 join and cut: rebuild the sample tables, let the kernel copy the sample bytes.

The fast path behind video.concat and video.cut, for plain (not fragmented) mp4 files holding one
video track. Only headers are parsed (ftyp, moov); each clip's samples are chosen by presentation
time, and the output is written as ftyp + moov + mdat (moov first), the mdat payload being each
clip's byte ranges copied with copy_file_range. Whatever this module does not understand raises
Unsupported, and the caller remuxes with PyAV instead.

The headers are untrusted: a 4 KB sparse file can claim 10^8 samples. What they claim is held to the budget rule
(lerodoc.budget) before anything is sized from it: the boxes read and the samples claimed must lie in bytes the file
really holds on disk, and the per-sample tables must fit the memory budget; a claim over either is a LerodocError
naming the file and the box (never Unsupported, whose PyAV fallback would index the same claim).

The same headers also say what a video track holds (`picture`: codec, frame size, pixel format; `average_rate`)
without opening PyAV, for `lerodoc info`; whatever they do not settle is Unsupported, and the caller asks PyAV.
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from lerodoc import access, budget
from lerodoc.media import clips
from lerodoc.media.clips import Clip, NotOnKeyframe, Written, fits_grid, reason, window_ticks
from lerodoc.errors import LerodocError
from lerodoc.files import new_file


class Unsupported(Exception):
    """The input (or the join) is outside what this module handles: remux with PyAV instead."""


# ---------------------------------------------------------------- boxes

CONTAINERS = {b"moov", b"trak", b"edts", b"mdia", b"minf", b"stbl"}
ALLOWED = {  # what each level may hold; anything else (moof, mvex, sgpd, a second hdlr...) is Unsupported
    b"file": {b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide"},
    b"moov": {b"mvhd", b"trak", b"udta", b"meta", b"iods"},
    b"trak": {b"tkhd", b"edts", b"mdia", b"udta", b"meta"},
    b"edts": {b"elst"},
    b"mdia": {b"mdhd", b"hdlr", b"minf"},
    b"minf": {b"vmhd", b"dinf", b"stbl"},
    b"stbl": {b"stsd", b"stts", b"ctts", b"stss", b"stsc", b"stsz", b"stco", b"co64", b"sdtp"},
}
REPEATABLE = {b"udta", b"meta"}  # may sit at two levels; copied as they are, never read
DURATION_AT = {b"mvhd": (16, 24), b"tkhd": (20, 28), b"mdhd": (16, 24)}  # payload offset, by version
TIMESCALE_AT = {b"mvhd": (12, 20), b"mdhd": (12, 20)}
VISUAL_ENTRY = 78  # bytes of SampleEntry and VisualSampleEntry fields before a sample entry's boxes


@dataclass
class Box:
    kind: bytes
    raw: memoryview               # the whole box, header included
    header: int
    children: list[Box] | None = None

    @property
    def payload(self) -> memoryview:
        return self.raw[self.header:]

    @property
    def version(self) -> int:
        return self.payload[0]


def _header(buf, pos: int, end: int) -> tuple[bytes, int, int]:
    """(type, header length, size) of the box at buf[pos:], which must end by `end`."""
    if end - pos < 8:
        raise Unsupported("truncated box header")
    size, kind = struct.unpack_from(">I4s", buf, pos)
    header = 8
    if size == 1:
        if end - pos < 16:
            raise Unsupported("truncated box header")
        size, header = struct.unpack_from(">Q", buf, pos + 8)[0], 16
    elif size == 0:
        size = end - pos
    if size < header or pos + size > end:
        raise Unsupported(f"box {kind!r} overruns its parent (truncated file?)")
    return kind, header, size


def _children(parent: bytes, buf: memoryview, pos: int, end: int) -> list[Box]:
    boxes = []
    while pos < end:
        kind, header, size = _header(buf, pos, end)
        if kind not in ALLOWED[parent]:
            raise Unsupported(f"{kind!r} box in {parent!r}")
        box = Box(kind, buf[pos:pos + size], header)
        if kind in CONTAINERS:
            box.children = _children(kind, buf, pos + header, pos + size)
        boxes.append(box)
        pos += size
    return boxes


def _index(box: Box, found: dict[bytes, Box]) -> dict[bytes, Box]:
    """Every box below `box` by type; a type seen twice (a second track, say) is Unsupported."""
    for child in box.children:
        if child.kind in found and child.kind not in REPEATABLE:
            raise Unsupported(f"more than one {child.kind!r} box")
        found[child.kind] = child
        if child.children is not None:
            _index(child, found)
    return found


def _count(box: Box, skip: int = 0) -> int:
    """A full box's entry count, `skip` bytes after its version and flags."""
    return struct.unpack_from(">I", box.payload, 4 + skip)[0]


def _entries(box: Box, columns: int, dtype: str = ">u4", skip: int = 0) -> np.ndarray:
    """A full box's table as an (entry_count, columns) int64 array."""
    payload, count = box.payload, _count(box, skip)
    width = np.dtype(dtype).itemsize * columns
    if 8 + skip + count * width > len(payload):
        raise Unsupported(f"{box.kind!r} table overruns its box")
    return np.frombuffer(payload, dtype, count * columns, 8 + skip).reshape(count, columns).astype(np.int64)


def _box(kind: bytes, *parts: bytes) -> bytes:
    body = b"".join(parts)
    if len(body) + 8 < 1 << 32:
        return struct.pack(">I4s", len(body) + 8, kind) + body
    return struct.pack(">I4sQ", 1, kind, len(body) + 16) + body


def _table_box(kind: bytes, rows: np.ndarray, dtype: str = ">u4", prefix: bytes = b"") -> bytes:
    """A version-0 full box: flags, `prefix`, entry count, then the rows."""
    rows = np.asarray(rows)
    if rows.size and (rows.min() < 0 or rows.max() >= 1 << (8 * np.dtype(dtype).itemsize)):
        raise Unsupported(f"{kind!r} value out of range")
    return _box(kind, bytes(4), prefix, struct.pack(">I", len(rows)), rows.astype(dtype).tobytes())


def _where(box: Box, at: dict) -> tuple[int, int]:
    """(position in the box, width) of a field that is 32-bit in version 0 and 64-bit in version 1."""
    return box.header + at[box.kind][box.version != 0], 8 if box.version else 4


def _get(box: Box, at: dict) -> int:
    start, width = _where(box, at)
    return int.from_bytes(box.raw[start:start + width], "big")


def _set(box: Box, at: dict, value: int) -> bytes:
    """The box with the field set to `value`."""
    start, width = _where(box, at)
    if not 0 <= value < 1 << (8 * width):
        raise Unsupported(f"{box.kind!r} duration does not fit its version")
    raw = bytearray(box.raw)
    raw[start:start + width] = value.to_bytes(width, "big")
    return bytes(raw)


def _runs(values: np.ndarray) -> np.ndarray:
    """Run-length code: (count, value) rows."""
    starts = np.flatnonzero(np.diff(values, prepend=values[0] - 1))
    return np.stack([np.diff(starts, append=len(values)), values[starts]], axis=1)


# ---------------------------------------------------------------- reading a track

@dataclass
class Track:
    """The one video track of an mp4: its boxes and per-sample tables, in decode order."""
    path: Path
    ftyp: bytes
    moov: Box
    boxes: dict[bytes, Box]
    timescale: int
    media_time: int           # the edit list's media_time, 0 without one
    offset: np.ndarray        # file offset of each sample
    size: np.ndarray
    delta: np.ndarray         # stts duration
    dts: np.ndarray
    pts: np.ndarray           # dts + ctts - media_time, as FFmpeg reports it
    sync: np.ndarray          # bool
    sdtp: bytes | None        # one byte per sample
    stsd: bytes               # the sample description, without its per-file bit rates (btrt)


def read_track(path: Path) -> Track:
    """Parse `path`'s headers (never its sample bytes) into a Track. Cuts of one file in a row parse it once."""
    try:
        return _read_track(access.path(path), *access.version(path))
    except (OSError, struct.error, ValueError, IndexError) as exc:
        raise Unsupported(f"unreadable mp4 headers ({exc})") from None


@functools.lru_cache(maxsize=1024)
def _read_track(path: Path, *version: int) -> Track:
    """read_track, remembered while the file's version (`access.version`) stays the same."""
    with access.open_binary(path) as f:
        held = version[1] if access.is_remote(path) else budget.held(f.fileno())
        ftyp, moov, mdats = _top_level(f, version[1], path, held)
    return _track(path, ftyp, moov, mdats, held)


# bytes read_track and frames.index allocate per sample: a dozen int64 tables and their temporaries
SAMPLE_BYTES = 160


def _within_budget(path: Path, what: str, count: int, need: int, held: int, box: str) -> None:
    """The budget rule for a claim of the headers, before anything is sized from it: `count` bytes (or samples,
    each at least a byte) must lie in the `held` bytes the file holds on disk, and `need` bytes fit the memory
    budget. A LerodocError naming the file and the box otherwise."""
    if count > held:
        raise LerodocError(f"its {box} box claims {what}, but the file holds {held} bytes on disk (a sparse or "
                           f"damaged file)", file=path, field=box)
    budget.check(need, f"reading the {what} its {box} box claims", file=path, field=box)


def _top_level(f, file_size: int, path: Path, held: int) -> tuple[bytes, bytes, list[tuple[int, int]]]:
    """The ftyp and moov boxes, and the (start, end) of each mdat payload."""
    boxes, mdats, pos = {}, [], 0
    while pos < file_size:
        f.seek(pos)
        kind, header, size = _header(f.read(16), 0, file_size - pos)
        if kind not in ALLOWED[b"file"] or kind in boxes:
            raise Unsupported(f"top-level {kind!r} box")
        if kind == b"mdat":
            mdats.append((pos + header, pos + size))
        elif kind in (b"ftyp", b"moov"):
            _within_budget(path, f"{size} bytes", size, size, held, kind.decode())
            f.seek(pos)
            boxes[kind] = f.read(size)
        pos += size
    if set(boxes) != {b"ftyp", b"moov"}:
        raise Unsupported("no ftyp or moov box")
    return boxes[b"ftyp"], boxes[b"moov"], mdats


def _track(path: Path, ftyp: bytes, raw_moov: bytes, mdats: list[tuple[int, int]], held: int) -> Track:
    moov = Box(b"moov", memoryview(raw_moov), 8)
    moov.children = _children(b"moov", moov.raw, _header(moov.raw, 0, len(raw_moov))[1], len(raw_moov))
    boxes = _index(moov, {})
    needed = {b"mvhd", b"tkhd", b"mdhd", b"hdlr", b"stsd", b"stts", b"stsc", b"stsz"}
    if not needed <= boxes.keys() or (b"stco" in boxes) == (b"co64" in boxes):
        raise Unsupported("incomplete sample tables")
    if bytes(boxes[b"hdlr"].payload[8:12]) != b"vide":
        raise Unsupported("not a video track")
    if _count(boxes[b"stsd"]) != 1:
        raise Unsupported("more than one sample description")
    size = _sizes(boxes[b"stsz"], sum(end - start for start, end in mdats), path, held)
    if not len(size):
        raise Unsupported("no samples")
    delta = _expand(_entries(boxes[b"stts"], 2), len(size), b"stts")
    dts = np.cumsum(delta) - delta
    cts = np.zeros_like(dts)
    if b"ctts" in boxes:
        cts = _expand(_entries(boxes[b"ctts"], 2, ">i4"), len(size), b"ctts")
    sync = np.ones(len(size), bool)
    if b"stss" in boxes:
        numbers = _entries(boxes[b"stss"], 1)[:, 0]
        if len(numbers) and numbers.min() < 1:
            raise Unsupported("stss names sample 0")
        sync[:] = False
        sync[numbers - 1] = True
    sdtp = bytes(boxes[b"sdtp"].payload[4:]) if b"sdtp" in boxes else None
    if sdtp is not None and len(sdtp) != len(size):
        raise Unsupported("sdtp and stsz disagree")
    chunks = _entries(boxes[b"stco"], 1) if b"stco" in boxes else _entries(boxes[b"co64"], 1, ">u8")
    offset = _offsets(_entries(boxes[b"stsc"], 3), chunks[:, 0], size)
    _check_in_mdat(offset, size, mdats)
    timescale = _get(boxes[b"mdhd"], TIMESCALE_AT)
    media_time = _media_time(boxes, timescale, dts + cts)
    return Track(path, ftyp, moov, boxes, timescale, media_time, offset, size, delta, dts,
                 dts + cts - media_time, sync, sdtp, _without_btrt(boxes[b"stsd"]))


def _without_btrt(stsd: Box) -> bytes:
    """stsd with its one visual sample entry's btrt box dropped: bit rates differ between files."""
    payload = stsd.payload
    kind, header, size = _header(payload, 8, len(payload))
    entry, pos = payload[8:8 + size], header + VISUAL_ENTRY
    kept = []
    while pos < size:
        child, _, length = _header(entry, pos, size)
        if child != b"btrt":
            kept.append(bytes(entry[pos:pos + length]))
        pos += length
    return _box(b"stsd", bytes(payload[:8]), _box(kind, bytes(entry[header:header + VISUAL_ENTRY]), *kept))


def _sizes(stsz: Box, room: int, path: Path, held: int) -> np.ndarray:
    """Each sample's size. Every table is sized by its box, which lies in the file, except stsz's count of
    samples of one fixed size: that one is checked against the `room` the mdat boxes have (bytes) before
    anything is allocated from it. Either count is then held to the budget rule: a sample takes a byte or more of
    the `held` bytes the file has on disk, and the tables of every sample fit the memory budget."""
    (fixed,) = struct.unpack_from(">I", stsz.payload, 4)
    if fixed:
        count = _count(stsz, skip=4)
        if count * fixed > room:
            raise Unsupported(f"stsz claims {count} samples of {fixed} bytes; the mdat boxes hold {room} bytes")
        _within_budget(path, f"{count} samples", count * fixed, count * SAMPLE_BYTES, held, "stsz")
        return np.full(count, fixed, np.int64)
    sizes = _entries(stsz, 1, skip=4)[:, 0]
    _within_budget(path, f"{len(sizes)} samples", len(sizes), len(sizes) * SAMPLE_BYTES, held, "stsz")
    return sizes


def _expand(runs: np.ndarray, samples: int, kind: bytes) -> np.ndarray:
    """A run-length table's (count, value) rows as one value per sample, once its counts are known to add up to
    the `samples` stsz holds (a table claiming more is Unsupported before anything is allocated)."""
    if (runs[:, 0] < 0).any() or int(runs[:, 0].sum()) != samples:
        raise Unsupported(f"{kind!r} and stsz disagree")
    return np.repeat(runs[:, 1], runs[:, 0])


def _offsets(stsc: np.ndarray, chunks: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Each sample's file offset, from the chunk map and the chunk offsets."""
    first, per_chunk, description = stsc.T
    runs = np.diff(first, append=len(chunks) + 1)
    if not len(first) or first[0] != 1 or (runs <= 0).any() or (per_chunk <= 0).any() or (description != 1).any():
        raise Unsupported("unusual stsc")
    per_chunk = np.repeat(per_chunk, runs)
    if per_chunk.sum() != len(size):
        raise Unsupported("stsc and stsz disagree")
    start = np.cumsum(size) - size                      # as if the file were one chunk
    return start + np.repeat(chunks - start[np.cumsum(per_chunk) - per_chunk], per_chunk)


def _check_in_mdat(offset: np.ndarray, size: np.ndarray, mdats: list[tuple[int, int]]) -> None:
    starts, ends = np.array(mdats, np.int64).reshape(-1, 2).T
    k = np.searchsorted(starts, offset, side="right") - 1
    if k.min() < 0 or (offset + size > ends[k]).any() or size.min() <= 0:
        raise Unsupported("a sample lies outside the mdat boxes (truncated file?)")


def _media_time(boxes: dict[bytes, Box], timescale: int, composition: np.ndarray) -> int:
    """The edit list's start in media ticks; only a single edit covering every sample is handled."""
    if b"elst" not in boxes:
        return 0
    elst = boxes[b"elst"]
    if _count(elst) != 1:
        raise Unsupported("edit list with several edits")
    duration, media_time, rate = struct.unpack_from(">Qqi" if elst.version else ">Iii", elst.payload, 8)
    movie_scale = _get(boxes[b"mvhd"], TIMESCALE_AT)
    if rate != 1 << 16 or media_time < 0 or composition.min() < media_time or \
            Fraction(duration * timescale, movie_scale) <= int(composition.max()) - media_time:
        raise Unsupported("edit list that is not a plain shift of the whole track")
    return media_time


# ---------------------------------------------------------------- what a track holds

ENTRY_CODECS = {b"av01": "av1", b"avc1": "h264", b"avc3": "h264", b"hvc1": "hevc", b"hev1": "hevc"}
CONFIG_BOX = {"av1": b"av1C", "h264": b"avcC", "hevc": b"hvcC"}
# The pixel format FFmpeg's decoder reports, by (bit depth, chroma format: 0 monochrome, 1 4:2:0, 2 4:2:2,
# 3 4:4:4), for the formats tests/test_mp4.py checks against PyAV; any other is Unsupported (PyAV is asked).
# H.264 decodes monochrome as 4:2:0, and names 8-bit full range "yuvj..." and an RGB matrix "gbrp": its SPS is read
# for both (_h264_format), such files left to PyAV. HEVC names 8-bit 4:2:0 full range "yuvj420p" and 4:4:4 with an
# RGB matrix "gbrp", from the end of an SPS not read here, so those two are not in its table. libdav1d (AV1) does
# neither.
PIX_FMTS = {
    "av1": {(8, 1): "yuv420p", (10, 1): "yuv420p10le"},
    "h264": {(8, 0): "yuv420p", (8, 1): "yuv420p", (8, 2): "yuv422p", (8, 3): "yuv444p",
             (10, 0): "yuv420p10le", (10, 1): "yuv420p10le", (10, 2): "yuv422p10le", (10, 3): "yuv444p10le"},
    "hevc": {(8, 0): "gray", (10, 0): "gray10le", (12, 0): "gray12le", (8, 2): "yuv422p",
             (10, 1): "yuv420p10le", (12, 1): "yuv420p12le", (10, 2): "yuv422p10le"},
}
H264_HIGH = {100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135}   # profiles whose SPS names chroma, depth


@dataclass(frozen=True)
class Picture:
    """What FFmpeg reports for a video track: its codec (canonical name), frame size and pixel format."""
    codec: str
    width: int
    height: int
    pix_fmt: str


def picture(track: Track) -> Picture:
    """The track's Picture, from its sample description: the entry's type and size, and its codec configuration
    box (av1C, avcC with the first SPS, hvcC) for the chroma format and bit depth. Unsupported where these do not
    settle what FFmpeg would report (another codec, a box cut short, a format PIX_FMTS does not name)."""
    try:
        kind, width, height, boxes = _sample_entry(track.stsd)
        codec = ENTRY_CODECS.get(kind)
        if codec is None or CONFIG_BOX[codec] not in boxes:
            raise Unsupported(f"sample entry {kind!r} without a configuration box lerodoc reads")
        config = boxes[CONFIG_BOX[codec]]
        if codec == "av1":
            depth, chroma = _av1_format(config)
        elif codec == "hevc":
            depth, chroma = 8 + (config[17] & 7), config[16] & 3
        else:
            depth, chroma = _h264_format(config, b"colr" in boxes)
    except (struct.error, IndexError, ValueError):
        raise Unsupported("sample description cut short") from None
    pix_fmt = PIX_FMTS[codec].get((depth, chroma))
    if pix_fmt is None:
        raise Unsupported(f"{codec} {depth}-bit chroma format {chroma}")
    return Picture(codec, width, height, pix_fmt)


def _sample_entry(stsd: bytes) -> tuple[bytes, int, int, dict[bytes, bytes]]:
    """(type, width, height, {box type: payload}) of the one visual sample entry in `stsd` (a whole box)."""
    payload = memoryview(stsd)[8:]
    kind, header, size = _header(payload, 8, len(payload))
    entry = payload[8:8 + size]
    width, height = struct.unpack_from(">HH", entry, header + 24)
    boxes, pos = {}, header + VISUAL_ENTRY
    while pos < size:
        child, child_header, length = _header(entry, pos, size)
        boxes.setdefault(child, bytes(entry[pos + child_header:pos + length]))
        pos += length
    return kind, width, height, boxes


def _av1_format(av1c: bytes) -> tuple[int, int]:
    """(bit depth, chroma format) from an av1C box: high_bitdepth, twelve_bit, monochrome, subsampling x and y."""
    flags = av1c[2]
    depth = 12 if flags & 0x20 else 10 if flags & 0x40 else 8
    sub_x, sub_y = flags >> 3 & 1, flags >> 2 & 1
    chroma = 0 if flags & 0x10 else {(1, 1): 1, (1, 0): 2, (0, 0): 3}.get((sub_x, sub_y), -1)
    return depth, chroma


def _h264_format(avcc: bytes, has_colr: bool) -> tuple[int, int]:
    """(bit depth, chroma format) from the first SPS in an avcC box. Unsupported where its colour signal makes
    FFmpeg name another format (8-bit full range: "yuvj..."; RGB matrix: "gbrp"), or where the SPS does not
    say and a colr box might."""
    if avcc[5] & 31 < 1:
        raise Unsupported("avcC holds no SPS")
    (length,) = struct.unpack_from(">H", avcc, 6)
    sps = Bits(avcc[8:8 + length])
    sps.u(8)                                     # NAL unit header
    profile = sps.u(8)
    sps.u(16)                                    # constraint flags, level
    sps.ue()                                     # seq_parameter_set_id
    chroma, depth = 1, 8
    if profile in H264_HIGH:
        chroma = sps.ue()
        if chroma == 3:
            sps.u(1)                             # separate_colour_plane_flag
        depth = 8 + sps.ue()
        sps.ue()                                 # bit_depth_chroma_minus8
        sps.u(1)                                 # qpprime_y_zero_transform_bypass_flag
        if sps.u(1):                             # seq_scaling_matrix_present_flag
            for i in range(12 if chroma == 3 else 8):
                if sps.u(1):
                    sps.scaling_list(16 if i < 6 else 64)
    sps.ue()                                     # log2_max_frame_num_minus4
    poc_type = sps.ue()
    if poc_type == 0:
        sps.ue()
    elif poc_type == 1:
        sps.u(1)
        sps.se(), sps.se()
        for _ in range(sps.ue()):
            sps.se()
    sps.ue(), sps.u(1)                           # max_num_ref_frames, gaps_in_frame_num_value_allowed_flag
    sps.ue(), sps.ue()                           # picture size in macroblocks
    if not sps.u(1):                             # frame_mbs_only_flag
        sps.u(1)
    sps.u(1)                                     # direct_8x8_inference_flag
    if sps.u(1):                                 # frame_cropping_flag
        for _ in range(4):
            sps.ue()
    full_range = rgb = None
    if sps.u(1):                                 # vui_parameters_present_flag
        if sps.u(1) and sps.u(8) == 255:         # aspect_ratio_info_present_flag; aspect_ratio_idc Extended_SAR
            sps.u(32)
        if sps.u(1):                             # overscan_info_present_flag
            sps.u(1)
        if sps.u(1):                             # video_signal_type_present_flag
            sps.u(3)
            full_range = sps.u(1)
            if sps.u(1):                         # colour_description_present_flag
                sps.u(16)
                rgb = sps.u(8) == 0              # matrix_coefficients 0: identity (GBR)
    if (full_range is None or (chroma == 3 and rgb is None)) and has_colr:
        raise Unsupported("the SPS leaves the colour signal to a colr box")
    if (full_range and depth == 8) or (chroma == 3 and rgb):
        raise Unsupported("full-range or RGB H.264")
    return depth, chroma


class Bits:
    """A big-endian bit reader over a NAL unit (its emulation prevention bytes removed), with the exp-Golomb
    codes of H.264's parameter sets. Reading past the end is Unsupported."""

    def __init__(self, nal: bytes):
        rbsp = bytes(nal).replace(b"\x00\x00\x03", b"\x00\x00")
        self.value, self.left = int.from_bytes(rbsp, "big"), 8 * len(rbsp)

    def u(self, n: int) -> int:
        if n > self.left:
            raise Unsupported("parameter set cut short")
        self.left -= n
        return self.value >> self.left & ((1 << n) - 1)

    def ue(self) -> int:
        zeros = 0
        while not self.u(1):
            zeros += 1
            if zeros > 31:
                raise Unsupported("parameter set holds an exp-Golomb code over 32 bits")
        return (1 << zeros) - 1 + self.u(zeros)

    def se(self) -> int:
        k = self.ue()
        return (k + 1) // 2 if k & 1 else -(k // 2)

    def scaling_list(self, size: int) -> None:
        """Skip a scaling_list(): deltas until one makes the next scale 0."""
        last = following = 8
        for _ in range(size):
            if following:
                following = (last + self.se()) % 256
            last = following or last


def average_rate(track: Track) -> Fraction:
    """Frames per second as FFmpeg's mp4 demuxer reports it (the stream's average_rate): the samples over the
    stts duration, in the track's time scale. Unsupported where FFmpeg would clip a delta or round the fraction
    (either over 2^31), or has no duration to divide by."""
    total = int(track.delta.sum())
    if track.timescale <= 0 or total <= 0 or int(track.delta.max()) >= 1 << 31:
        raise Unsupported("no frame rate in the sample tables")
    rate = Fraction(track.timescale * len(track.delta), total)
    if max(rate.numerator, rate.denominator) >= 1 << 31:
        raise Unsupported(f"frame rate {rate} is one FFmpeg rounds")
    return rate


# ---------------------------------------------------------------- choosing and placing samples

@dataclass(frozen=True)
class Part:
    """A clip's samples: track samples [start, stop), decode order."""
    track: Track
    start: int
    stop: int

    def ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """(offset, length) of the file byte ranges holding the samples, adjacent samples merged."""
        offset, size = self.track.offset[self.start:self.stop], self.track.size[self.start:self.stop]
        breaks = np.flatnonzero(offset[1:] != offset[:-1] + size[:-1]) + 1
        first = np.concatenate([[0], breaks])
        ends = np.concatenate([breaks, [len(offset)]]) - 1
        return offset[first], offset[ends] + size[ends] - offset[first]


def select(track: Track, clip: Clip, fps: int, episode: int | None) -> Part:
    """The clip's samples, with clips.window's half-frame rule; NotOnKeyframe if it starts off one."""
    lo, hi = window_ticks(clip, Fraction(1, track.timescale), fps)
    inside = np.ones(len(track.pts), bool)
    if lo is not None:
        inside &= track.pts > lo
    if hi is not None:
        inside &= track.pts <= hi
    picked = np.flatnonzero(inside)
    if not len(picked):
        raise Unsupported("no frames in the window")
    start, stop = int(picked[0]), int(picked[-1]) + 1
    if stop - start != len(picked):
        raise Unsupported("the window's frames are not contiguous in decode order")
    if not track.sync[start]:
        raise NotOnKeyframe(clip.path, episode)
    if track.pts[start:stop].min() < track.pts[start]:
        raise Unsupported("frames shown before the clip's keyframe")
    return Part(track, start, stop)


def clip_bytes(clip: Clip, fps: int, episode: int | None) -> int | None:
    """How many bytes the clip's samples take in its file, from the sample tables; None for a file this module
    does not read, or a clip that does not start on a keyframe."""
    try:
        part = select(read_track(clip.path), clip, fps, episode)
    except (Unsupported, NotOnKeyframe):
        return None
    return int(part.track.size[part.start:part.stop].sum())


@dataclass
class Layout:
    """The output's sample tables (decode order) and each clip's presentation span in it."""
    size: np.ndarray
    delta: np.ndarray
    cts: np.ndarray           # composition offsets to write, with media_time added back
    sync: np.ndarray
    sdtp: bytes | None
    media_time: int
    spans: list[tuple[int, int, int]]   # (start, end, frames) in media ticks

    @property
    def duration(self) -> int:
        return self.spans[-1][1]


def layout(parts: list[Part]) -> Layout:
    """Place the clips back to back: presentation times consecutive, decode times continuous."""
    first = parts[0].track
    for part in parts[1:]:
        if part.track.timescale != first.timescale or part.track.stsd != first.stsd:
            raise Unsupported("clips differ in time scale or sample description")
    if len({p.track.sdtp is None for p in parts}) > 1:
        raise Unsupported("only some clips have sdtp")
    spans, pts, dts, present, decode = [], [], [], 0, 0
    for p in parts:
        t, s = p.track, slice(p.start, p.stop)
        shown = t.pts[s] - t.pts[p.start]
        pts.append(present + shown)
        dts.append(decode + t.dts[s] - t.dts[p.start])
        end = present + int((shown + t.delta[s]).max())
        spans.append((present, end, p.stop - p.start))
        present, decode = end, decode + int(t.delta[s].sum())
    offsets = np.concatenate(pts) - np.concatenate(dts)
    media_time = max(first.media_time, -int(offsets.min()))

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p.track, name)[p.start:p.stop] for p in parts])
    sdtp = None if first.sdtp is None else b"".join(p.track.sdtp[p.start:p.stop] for p in parts)
    return Layout(cat("size"), cat("delta"), offsets + media_time, cat("sync"), sdtp, media_time, spans)


# ---------------------------------------------------------------- writing

def build_moov(first: Track, out: Layout, chunk_offsets: np.ndarray, chunk_samples: list[int]) -> bytes:
    """The first clip's moov with its durations, edit list and sample tables replaced."""
    movie_scale = _get(first.boxes[b"mvhd"], TIMESCALE_AT)
    movie_duration = -(-out.duration * movie_scale // first.timescale)   # rounded up: keeps the last frame
    edts = _edts(movie_duration, out.media_time)
    tkhd = _set(first.boxes[b"tkhd"], DURATION_AT, movie_duration)
    new = {
        b"mvhd": _set(first.boxes[b"mvhd"], DURATION_AT, movie_duration),
        b"tkhd": tkhd if b"edts" in first.boxes else tkhd + edts,
        b"edts": edts,
        b"mdhd": _set(first.boxes[b"mdhd"], DURATION_AT, int(out.delta.sum())),
        b"stbl": _stbl(first.stsd, out, chunk_offsets, chunk_samples),
    }
    return _rebuild(first.moov, new)


def _rebuild(box: Box, new: dict[bytes, bytes]) -> bytes:
    if box.kind in new:
        return new[box.kind]
    if box.children is None:
        return bytes(box.raw)
    return _box(box.kind, *(_rebuild(child, new) for child in box.children))


def _edts(duration: int, media_time: int) -> bytes:
    if duration < 1 << 32 and media_time < 1 << 31:
        elst = _box(b"elst", struct.pack(">IIIii", 0, 1, duration, media_time, 1 << 16))
    else:
        elst = _box(b"elst", struct.pack(">IIQqi", 1 << 24, 1, duration, media_time, 1 << 16))
    return _box(b"edts", elst)


def _stbl(stsd: bytes, out: Layout, chunk_offsets: np.ndarray, chunk_samples: list[int]) -> bytes:
    chunk_runs = _runs(np.array(chunk_samples))
    first_chunk = np.cumsum(chunk_runs[:, 0]) - chunk_runs[:, 0] + 1
    parts = [stsd, _table_box(b"stts", _runs(out.delta))]
    if out.cts.any():
        parts.append(_table_box(b"ctts", _runs(out.cts)))
    if not out.sync.all():
        parts.append(_table_box(b"stss", np.flatnonzero(out.sync) + 1))
    if out.sdtp is not None:
        parts.append(_box(b"sdtp", bytes(4), out.sdtp))
    parts += [_table_box(b"stsc", np.stack([first_chunk, chunk_runs[:, 1], np.ones_like(first_chunk)], 1)),
              _table_box(b"stsz", out.size, prefix=bytes(4)),
              _table_box(b"co64", chunk_offsets, ">u8")]
    return _box(b"stbl", *parts)


def write(out_path: Path, parts: list[Part], out: Layout) -> None:
    """ftyp, moov, then mdat holding each clip's samples as one chunk, copied in the kernel."""
    first = parts[0].track
    lengths = [int(p.track.size[p.start:p.stop].sum()) for p in parts]
    payload = sum(lengths)
    mdat = _mdat_header(payload)
    samples = [p.stop - p.start for p in parts]
    chunks = np.cumsum(lengths) - lengths
    head = len(first.ftyp) + len(build_moov(first, out, chunks, samples)) + len(mdat)
    moov = build_moov(first, out, chunks + head, samples)
    with new_file(out_path) as tmp, open(tmp, "wb") as dst:   # a new file: `out_path` may be a link to an input
        dst.write(first.ftyp + moov + mdat)
        dst.flush()
        for part in parts:
            if access.is_remote(part.track.path):   # a hub file: its sample ranges only, by range reads
                for offset, length in zip(*part.ranges()):
                    for at in range(int(offset), int(offset + length), access.COPY_BLOCK):
                        dst.write(access.read_range(part.track.path, at,
                                                    min(at + access.COPY_BLOCK, int(offset + length))))
                dst.flush()
                continue
            with access.open_binary(part.track.path) as src:
                for offset, length in zip(*part.ranges()):
                    _copy(src.fileno(), dst.fileno(), int(offset), int(length))


def _copy(src: int, dst: int, offset: int, length: int) -> None:
    """Append src[offset:offset + length] to dst: copy_file_range, else sendfile, else read/write."""
    end = offset + length
    for mover in MOVERS:
        try:
            while offset < end:
                moved = mover(src, dst, offset, end - offset)
                if not moved:
                    raise Unsupported("source file ended early")
                offset += moved
            return
        except OSError:
            if mover is _read_write:
                raise


def _mdat_header(payload: int) -> bytes:
    if payload + 8 < 1 << 32:
        return struct.pack(">I4s", payload + 8, b"mdat")
    return struct.pack(">I4sQ", 1, b"mdat", payload + 16)


def _copy_file_range(src: int, dst: int, offset: int, count: int) -> int:
    return os.copy_file_range(src, dst, count, offset)


def _sendfile(src: int, dst: int, offset: int, count: int) -> int:
    return os.sendfile(dst, src, offset, count)


def _read_write(src: int, dst: int, offset: int, count: int) -> int:
    return os.write(dst, os.pread(src, min(count, 1 << 20), offset))


MOVERS = [mover for mover, call in ((_copy_file_range, "copy_file_range"), (_sendfile, "sendfile"))
          if hasattr(os, call)] + [_read_write]


# ---------------------------------------------------------------- checking

def verify(path: Path, parts: list[Part], out: Layout) -> None:
    """Re-open the written file with FFmpeg: frame count, time base, and each clip's first packet."""
    import av   # PyAV: loaded by a join only, not by reading headers
    # container facts only: skip_frame spares the decoding FFmpeg does while probing the stream
    try:   # strict, as lerobot's pyav backend reads: tags copied from a source that are not UTF-8 fail here
        with av.open(access.source(path), format="mp4", options={"skip_frame": "all"}) as container:
            stream = container.streams.video[0]
            if len(container.streams) != 1 or stream.frames != len(out.size) or \
                    stream.time_base != Fraction(1, parts[0].track.timescale):
                raise Unsupported("written file reads back with other frame count or time base")
            for part, (start, _, _) in zip(parts, out.spans):
                container.seek(start, stream=stream, backward=True, any_frame=False)
                packet = next((p for p in container.demux(stream) if p.pts is None or p.pts >= start), None)
                if packet is None or (packet.pts, packet.size, packet.is_keyframe) != \
                        (start, int(part.track.size[part.start]), True):
                    raise Unsupported(f"written file reads back a wrong clip start at tick {start}")
    except (clips.read_errors() + (IndexError,)) as exc:   # IndexError: no video stream
        raise Unsupported(f"written file does not read back ({reason(exc)})") from None


def concat(clips: list[Clip], out_path: Path, fps: int, episodes: list[int | None]) -> list[Written]:
    """video.concat without demuxing: clips back to back in `out_path`, each one's span read from the tables."""
    tracks: dict[Path, Track] = {}
    parts = []
    for clip, episode in zip(clips, episodes):
        if clip.path not in tracks:
            tracks[clip.path] = read_track(clip.path)
            if not fits_grid(Fraction(1, tracks[clip.path].timescale), fps):
                raise Unsupported(f"time base 1/{tracks[clip.path].timescale} cannot place frames at k/{fps} s")
        parts.append(select(tracks[clip.path], clip, fps, episode))
    out = layout(parts)
    write(out_path, parts, out)
    verify(out_path, parts, out)
    tb = Fraction(1, parts[0].track.timescale)
    return [Written(float(start * tb), float(end * tb), frames, "") for start, end, frames in out.spans]
