"""`meta/info.json` for every version: one dataclass, unknown keys kept in `extra`."""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass, field, fields
from pathlib import Path

from lerodoc.errors import LerodocError
from lerodoc.formats.jsonl import read_json, write_json
from lerodoc.formats.paths import component, template

# Bounds on what info.json may claim, far past any real dataset (the largest hold about 1e8 frames, record at up
# to 1000 fps, and have features of a few thousand values or images up to 4096x4096x4): a value beyond them
# is a damaged or crafted file, refused here, before anything is sized from it. Nothing is ever allocated from
# the totals anyway: the data on disk decides (Dataset.total_frames counts the episodes' rows).
MAX_FPS = 10_000
MAX_ELEMENTS = 1 << 28           # values in one feature's shape (a frame of it)
LIMITS = {"total_episodes": 10 ** 10, "total_frames": 10 ** 10, "total_tasks": 10 ** 10,
          "chunks_size": 10 ** 9,                                 # files (v3.0) or episodes (v2.x) per chunk folder
          "data_files_size_in_mb": 10 ** 7, "video_files_size_in_mb": 10 ** 7}   # 10 TB per file

# Columns every LeRobot data parquet holds besides the features the robot recorded.
INDEX_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")
# where state and action live when the user does not name them: lerobot's names, then openpi's LIBERO conversion's
STATE_FEATURES = ("observation.state", "state")
ACTION_FEATURES = ("action", "actions")
DEFAULT_FEATURE_SPECS = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
NON_NUMERIC_DTYPES = ("video", "image", "string")
# The dtypes a feature may name: lerobot's numpy names that a parquet column holds (formats.hf.ARROW gives each its
# Arrow type), and the three above. Every writer writes these and no other (`complex128` has no Arrow type).
NUMERIC_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                  "uint64", "bool")
DTYPES = (*NUMERIC_DTYPES, *NON_NUMERIC_DTYPES)
# what the versions' data_path / video_path templates may name
TEMPLATE_KEYS = {"episode_chunk": 0, "episode_index": 0, "video_key": "camera", "chunk_index": 0, "file_index": 0}
NAME_MAX = 255       # bytes of one file or folder name (Linux, macOS, Windows): a longer one cannot be opened
TEMPLATE_MAX = 1024  # bytes of a filled-in path template (lerobot's are ~70): room left for the dataset's own path


@dataclass
class Info:
    codebase_version: str
    fps: int
    features: dict
    robot_type: str | None = None
    total_episodes: int = 0
    total_frames: int = 0
    total_tasks: int = 0
    chunks_size: int = 1000
    splits: dict = field(default_factory=dict)
    data_path: str | None = None
    video_path: str | None = None
    data_files_size_in_mb: int = 100
    video_files_size_in_mb: int = 200
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict, source: Path | None = None) -> Info:
        if not isinstance(raw, dict):
            raise LerodocError("is not a JSON object", file=source)
        known = {f.name for f in fields(cls)} - {"extra"}
        missing = [k for k in ("codebase_version", "fps", "features") if k not in raw]
        if missing:
            raise LerodocError(f"lacks required field(s) {', '.join(missing)}", file=source, field=missing[0])
        values = {k: v for k, v in raw.items() if k in known}
        fps = values["fps"]
        if not isinstance(fps, (int, float)) or isinstance(fps, bool) or not 0 < fps <= MAX_FPS \
                or float(fps) != int(fps):
            raise LerodocError(f"fps must be a positive whole number up to {MAX_FPS}, got {fps!r}", file=source,
                               field="fps")
        values["fps"] = int(fps)
        if not isinstance(values["features"], dict) or not values["features"]:
            raise LerodocError("features must be a non-empty object", file=source, field="features")
        for name, spec in values["features"].items():
            component(name, field=f"features.{name}", file=source, what="feature name")   # a camera's is a folder
            if not isinstance(spec, dict) or "dtype" not in spec or "shape" not in spec:
                raise LerodocError("each feature needs dtype and shape", file=source, field=f"features.{name}")
            if not isinstance(spec["dtype"], str):
                raise LerodocError(f"dtype must be a string, got {spec['dtype']!r}", file=source,
                                   field=f"features.{name}.dtype")
            shape = spec["shape"]
            if not isinstance(shape, (list, tuple)) or not all(_whole(n) and n > 0 for n in shape):
                raise LerodocError(f"shape must be a list of positive whole numbers, got {shape!r}", file=source,
                                   field=f"features.{name}.shape")
            if (values_per_frame := math.prod(int(n) for n in shape)) > MAX_ELEMENTS:
                raise LerodocError(f"{name}'s shape {shape!r} claims {values_per_frame:,} values per frame; "
                                   f"lerodoc reads at most {MAX_ELEMENTS:,} (a 4096x4096x4 image holds "
                                   f"{4096 * 4096 * 4:,})", file=source, field=f"features.{name}.shape")
            if not isinstance(spec.get("info"), (dict, type(None))):
                raise LerodocError(f"info must be an object, got {spec['info']!r}", file=source,
                                   field=f"features.{name}.info")
        for name, kind in (("total_episodes", int), ("total_frames", int), ("total_tasks", int),
                           ("chunks_size", int), ("data_files_size_in_mb", float),
                           ("video_files_size_in_mb", float), ("robot_type", str), ("data_path", str),
                           ("video_path", str), ("splits", dict)):
            value = values.get(name)
            if value is None:
                values.pop(name, None)   # absent or null: the default
                if name == "robot_type" and name in raw:
                    values[name] = None
            elif not (_whole(value) if kind is int else
                      isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float
                      else isinstance(value, kind)):
                raise LerodocError(f"must be {_KINDS[kind]}, got {value!r}", file=source, field=name)
        for name in ("chunks_size", "data_files_size_in_mb", "video_files_size_in_mb"):
            if name in values and values[name] <= 0:
                raise LerodocError(f"{name} must be positive, got {values[name]!r}", file=source, field=name)
        for name, most in LIMITS.items():
            if name in values and values[name] > most:
                raise LerodocError(f"{name} claims {values[name]!r}, more than any dataset holds (lerodoc reads up "
                                   f"to {most:,})", file=source, field=name,
                                   hint="a damaged or crafted info.json: restore it from a good copy")
        for name in ("data_path", "video_path"):
            if values.get(name) is not None:
                try:   # every placeholder one of the versions' keys, the braces balanced, no field ever too wide
                    _narrow(values[name])
                    values[name].format(**TEMPLATE_KEYS)
                except (KeyError, ValueError, IndexError, AttributeError) as exc:
                    raise LerodocError(f"is not a path template lerobot fills ({type(exc).__name__}: {exc}; "
                                       f"keys: {', '.join(TEMPLATE_KEYS)})", file=source, field=name) from None
                cameras = [k for k, f in values["features"].items() if f["dtype"] == "video"]
                template(values[name], field=name, file=source, fill=TEMPLATE_KEYS, keys=cameras)
                _openable(values[name], cameras, field=name, file=source)
        extra = {k: v for k, v in raw.items() if k not in known}
        return cls(**values, extra=extra)

    def whole_file_caps(self, data_mb: float | None = None, video_mb: float | None = None) -> tuple[float, float]:
        """The output's file-size caps: `data_mb`/`video_mb` where given, else this info's. Returned as asked, for
        the plan to cut files by (a test may ask for tiny files), and stored in this info as lerobot writes them:
        whole MB, at least 1."""
        caps = (data_mb or self.data_files_size_in_mb, video_mb or self.video_files_size_in_mb)
        self.data_files_size_in_mb, self.video_files_size_in_mb = (max(1, math.ceil(c)) for c in caps)
        return caps

    @classmethod
    def load(cls, path: Path) -> Info:
        return cls.from_dict(read_json(path), source=path)

    # --- features -------------------------------------------------------------------------
    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f["dtype"] == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f["dtype"] == "image"]

    @property
    def data_keys(self) -> list[str]:
        """Features stored as parquet columns (everything but videos)."""
        return [k for k, f in self.features.items() if f["dtype"] != "video"]

    @property
    def numeric_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f["dtype"] not in NON_NUMERIC_DTYPES]

    def describe(self, version: str, data_path: str, video_path: str, episodes: list, tasks: int,
                 foreign: tuple[str, ...]) -> None:
        """Point info at a version's path templates, set its totals from `episodes`, and drop the
        `foreign` keys that belong to other versions."""
        self.codebase_version = version
        self.data_path, self.video_path = data_path, (video_path if self.video_keys else None)
        self.total_episodes, self.total_frames, self.total_tasks = len(episodes), sum(e.length for e in episodes), tasks
        self.splits = {"train": f"0:{len(episodes)}"}
        for key in foreign:
            self.extra.pop(key, None)

    def to_dict(self, order: tuple[str, ...], derived: dict | None = None) -> dict:
        """Serialise in `order` (a version's key order), then derived values, then unknown keys."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        values.update(derived or {})
        out = {k: values[k] for k in order if k in values}
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out

    def write(self, path: Path, order: tuple[str, ...], derived: dict | None = None) -> None:
        write_json(path, self.to_dict(order, derived))


_KINDS = {int: "a whole number", float: "a number", str: "a string", dict: "an object"}


def _narrow(path_template: str) -> None:
    """ValueError when a placeholder of `path_template` asks for a field wider than NAME_MAX (`{episode_index:0300d}`
    fills a 300-character name, `{episode_index:0999999999d}` a gigabyte) or takes its format from another field
    (`{episode_index:{file_index}}` is as wide as a file index, which a crafted episodes table sets), before anything
    is filled in."""
    for _, _, spec, _ in string.Formatter().parse(path_template):
        if "{" in (spec or ""):
            raise ValueError(f"the format {spec!r} holds a placeholder")
        if any(int(width) > NAME_MAX for width in re.findall(r"[0-9]+", spec or "")):
            raise ValueError(f"the format {spec!r} is wider than a file name ({NAME_MAX} bytes)")


def _openable(path_template: str, cameras: list[str], *, field: str, file: object) -> None:
    """Refuse a template that, filled in with the largest numbers info.json may claim and each camera, names a file
    or folder longer than NAME_MAX bytes or a path longer than TEMPLATE_MAX: such a file could never be opened."""
    largest = {**TEMPLATE_KEYS, **dict.fromkeys(("episode_chunk", "episode_index", "chunk_index", "file_index"),
                                               max(LIMITS.values()))}
    for camera in cameras or ["camera"]:
        filled = path_template.format(**{**largest, "video_key": camera}).encode()
        longest = max(len(name) for name in filled.split(b"/"))
        if longest > NAME_MAX or len(filled) > TEMPLATE_MAX:
            problem = (f"a file or folder name of {longest:,} bytes (names hold at most {NAME_MAX})"
                       if longest > NAME_MAX else
                       f"a path of {len(filled):,} bytes (lerodoc reads templates of up to {TEMPLATE_MAX})")
            raise LerodocError(f"fills in to {problem}, which no file system opens", file=file, field=field)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()


def flat_names(names) -> list[str] | None:
    """A feature's channel names as a flat list, whatever shape `names` has in the wild (None for a value that
    cannot be names at all, such as a number)."""
    if names is None or not isinstance(names, (list, dict)):
        return None
    if isinstance(names, dict):
        values = list(names.values())
        return flat_names(values[0] if len(values) == 1 else values)
    if isinstance(names, list) and len(names) == 1 and isinstance(names[0], list):
        return flat_names(names[0])
    if isinstance(names, list) and all(isinstance(n, list) for n in names):
        return [str(x) for sub in names for x in sub]
    return [str(n) for n in names]


# info.json names for the codecs FFmpeg calls by their canonical name (and the encoder and fourcc names that
# writers put in `video.codec`), so that two datasets naming one codec differently agree
CODEC_ALIASES = {"libsvtav1": "av1", "libaom-av1": "av1", "librav1e": "av1", "libdav1d": "av1", "av01": "av1",
                 "libx264": "h264", "libopenh264": "h264", "avc1": "h264", "avc": "h264",
                 "libx265": "hevc", "h265": "hevc", "hvc1": "hevc", "hev1": "hevc", "libvpx-vp9": "vp9"}


def codec_name(name) -> str | None:
    """The canonical (FFmpeg) name of a codec as info.json or a container names it: lowercased, aliases
    resolved (`libsvtav1` and `AV01` are `av1`); None stays None."""
    if name is None:
        return None
    name = str(name).lower()
    return CODEC_ALIASES.get(name, name)


CAMERA_NAMES = ["height", "width", "channels"]   # lerobot's names of a camera's [H, W, C] shape (LAY018)


def unreadable_names(names) -> bool:
    """Whether lerobot 0.6.1's policy features cannot read a camera's names: they read names[2] (an IndexError,
    KeyError or TypeError where names are null, a dict, or a list of fewer than 3: LAY019)."""
    return not isinstance(names, list) or len(names) < 3


AXES = {"height": 0, "width": 1, "channel": 2, "channels": 2}   # a camera's axis names, to their place in [H, W, C]


def channels_last(names, shape: list, frame: tuple | None = None) -> list | None:
    """A camera's shape as [height, width, channels] where its names name each axis once, in any order
    (channels first: [3, 480, 640] named [channels, height, width]); None where they do not. lerobot 0.6.1 reads a
    camera as channels last when names[2] is 'channel(s)', else as channels first: renaming a channels-first
    shape without reordering it would make a [3, 480, 640] image one of 640 channels. `frame`: a video's (height,
    width) as its info says; a shape that already leads with them stays as it is (the names are what is wrong)."""
    places = [AXES.get(n) if isinstance(n, str) else None for n in names] if isinstance(names, list) else []
    if len(shape) != 3 or len(places) != 3 or sorted(p for p in places if p is not None) != [0, 1, 2]:
        return None
    out = [0, 0, 0]
    for place, size in zip(places, shape):
        out[place] = size
    if frame is not None and out[:2] != list(frame) and list(shape[:2]) == list(frame):
        return list(shape)
    return out


def camera_shape(names, shape: list, frame: tuple | None = None) -> list:
    """A camera's 3-d shape as [height, width, channels]: by its names where they name each axis (`channels_last`),
    else by its video's (height, width) where its info says them (a shape led by them is kept, one that ends with
    them is channels first), else by its small axis (at most 4 values: channels last kept, channels first
    moved last); a shape none of these tells stays as it is."""
    by_names = channels_last(names, shape, frame)
    if by_names is not None:
        return by_names
    if len(shape) != 3:
        return list(shape)
    if frame is not None:
        if list(shape[:2]) == list(frame):
            return list(shape)
        if list(shape[1:]) == list(frame):
            return [shape[1], shape[2], shape[0]]
    if 0 < shape[2] <= 4:
        return list(shape)
    if 0 < shape[0] <= 4:
        return [shape[1], shape[2], shape[0]]
    return list(shape)


def video_frame(spec: dict) -> tuple[int, int] | None:
    """A video feature's (height, width) as its info says, when it says both as integers; else None."""
    info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
    height, width = info.get("video.height"), info.get("video.width")
    return (height, width) if all(isinstance(v, int) and not isinstance(v, bool) for v in (height, width)) else None


def canonical_feature(spec: dict) -> dict:
    """A feature spec with flat `names` (numeric features) and a canonical codec name (videos)."""
    spec = {**spec}
    if spec["dtype"] not in ("video", "image") and spec.get("names") is not None:
        spec["names"] = flat_names(spec["names"])
    if spec["dtype"] == "video" and spec.get("info"):
        spec["info"] = {**spec["info"], "video.codec": codec_name(spec["info"].get("video.codec"))}
    return spec
