"""Layout and schema: the metadata opens, info.json is well-formed, every file the episodes reference
is where the version's templates put it, and each data parquet's columns match the features.

What the families share (`finding_factory`, `data_files`, ...) lives in lerodoc.checks.common.
"""

from __future__ import annotations

import string
from dataclasses import replace
from pathlib import Path

from lerodoc import access, formats
from lerodoc.checks.common import (ERROR, WARNING, Context, DataFile, Finding, data_files, finding_factory, relative,
                                    valid_spec)
from lerodoc.errors import LerodocError
from lerodoc.promote.staging import leftovers
from lerodoc.formats import v21, v30
from lerodoc.formats.hf import schema_problems
from lerodoc.formats.info import CAMERA_NAMES, INDEX_FEATURES, unreadable_names
from lerodoc.formats.jsonl import parse
from lerodoc.formats.paths import UnsafePath
from lerodoc.formats.model import Episode
from lerodoc.promote.kept import undeclared_cameras
from lerodoc.conventions import INFO_PATH
from lerodoc.formats.jsonl import read_json

CODES = {
    "LAY001": (ERROR, "a metadata file (or the dataset folder) is missing",
               "point at the folder holding meta/info.json, or restore the file", False),
    "LAY002": (ERROR, "a metadata file cannot be read (malformed JSON, truncated parquet, missing field)",
               "restore the file from a good copy", False),
    "LAY003": (ERROR, "info.json names a codebase_version lerodoc does not read",
               "set codebase_version to v2.0, v2.1 or v3.0 to match the files", False),
    "LAY010": (WARNING, "info.json fps is a float, not an integer",
               "lerodoc repair writes fps as an integer", True),
    "LAY011": (ERROR, "an info.json total is missing or not an integer",
               "lerodoc repair writes the totals from the data", True),
    "LAY012": (ERROR, "data_path/video_path is missing, its placeholders do not match the version, or it leads "
                      "outside the dataset (absolute, a '..' segment: not fixable, the dataset does not open)",
               "lerodoc repair writes the version's default templates", True),
    "LAY013": (ERROR, "a feature's dtype or shape is malformed",
               "give the feature a numpy dtype (or image/video/string) and a list of positive sizes", False),
    "LAY014": (ERROR, "a bookkeeping feature (timestamp, frame_index, episode_index, index, task_index) "
                      "is not declared", "declare it in info.json features with shape [1]", False),
    "LAY015": (ERROR, "a feature name is not one usable file name: '/' (lerobot flattens stats keys with '/'), "
                      "'\\', '..', a control character, empty or over 255 bytes (a camera's name is a folder)",
               "rename the feature", False),
    "LAY016": (WARNING, "a feature's names are nested (list of lists or dict), not a flat list",
               "lerodoc repair flattens names to a plain list", True),
    "LAY017": (WARNING, "a feature's names are not a list of one name per channel",
               "give one name per channel", False),
    "LAY018": (WARNING, "camera names are not [height, width, channels]",
               "lerodoc repair writes [\"height\", \"width\", \"channels\"]", True),
    "LAY019": (ERROR, "camera names are missing or fewer than 3 (lerobot's policy features index names[2])",
               "lerodoc repair writes [\"height\", \"width\", \"channels\"]", True),
    "LAY020": (WARNING, "a feature's own fps differs from info.json fps",
               "lerodoc repair unifies the fps fields", True),
    "LAY021": (WARNING, "info.json's codebase_version v2.0 understates the files: meta/episodes_stats.jsonl, "
                        "v2.1's per-episode stats, is there (and read as v2.0, it is ignored)",
               "set codebase_version to v2.1 if the per-episode stats are right", False),
    "LAY030": (ERROR, "a data file the episodes reference is missing",
               "restore the file; its episodes cannot be loaded", False),
    "LAY031": (ERROR, "a data file cannot be read (truncated or corrupt parquet)",
               "restore the file from a good copy", False),
    "LAY032": (ERROR, "a feature has no column in a data file", "restore the column or drop the feature", False),
    "LAY033": (ERROR, "a shape-(1,) feature is stored as a list column (lerobot: Couldn't cast list to ...)",
               "lerodoc flatten (or repair) turns list[1] columns into scalars", True),
    "LAY034": (ERROR, "a column's nesting or list size does not match the feature's shape",
               "rewrite the column with shape[0] values per row, or fix the feature's shape", False),
    "LAY035": (WARNING, "a column's numeric type differs from the feature dtype (lerobot casts on load)",
               "store the column as the feature's dtype, or change the dtype", False),
    "LAY036": (ERROR, "a column's type cannot hold the feature's dtype",
               "rewrite the column with the feature's dtype", False),
    "LAY037": (ERROR, "an image feature is not stored as struct{bytes, path}",
               "store images as Hugging Face Image structs (PNG bytes)", False),
    "LAY038": (ERROR, "a data column is not a declared feature (the load-time cast fails)",
               "declare the column in info.json features, or drop it", False),
    "LAY039": (WARNING, "a data file's Hugging Face metadata uses the datasets>=4 'List' type, which "
                        "datasets<4 (openpi, lerobot<=0.3) cannot read (Feature type 'List' not found)",
               "lerodoc flatten (or repair) rewrites the metadata as Sequence, which every version reads", True),
    "LAY040": (ERROR, "a video file the episodes reference is missing",
               "restore the file; its episodes cannot be decoded", False),
    "LAY041": (ERROR, "a file is stored under a folder that does not follow the version's template",
               "lerodoc repair moves it to the path the template gives", True),
    "LAY042": (WARNING, "a file under data/ or videos/ that no episode references",
               "delete it if it is a leftover", False),
    "LAY043": (ERROR, "an unreferenced data parquet that lerobot v3.0 reads (it globs data/*/*.parquet)",
               "move the file out of data/; it shifts every global row index", False),
    "LAY044": (ERROR, "a camera has video files and episode metadata but no info.json feature: lerobot ignores it "
                      "and a rewrite would lose it", "lerodoc repair restores its feature entry from the video files",
               True),
    "LAY045": (WARNING, "a staging folder or temporary file that a lerodoc command which did not finish (killed, "
                        "a power cut) left inside or beside the dataset",
               "the next lerodoc command writing this dataset or output removes its staging folders; a link or "
               "file under such a name is no staging of lerodoc's: delete it by hand", False),
}


_finding = finding_factory(CODES)


# ---------------------------------------------------------------- the family

def check(ctx: Context) -> list[Finding]:
    if ctx.dataset is None:
        return [_open_failure(ctx)]
    raw = _raw_info(ctx)
    return [*_info_fields(ctx, raw), *_feature_specs(ctx), *_undeclared_cameras(ctx), *_data_file_findings(ctx),
            *_schemas(ctx), *_hf_metadata(ctx), *_placement(ctx), *_leftovers(ctx)]


def _leftovers(ctx: Context) -> list[Finding]:
    """LAY045: what unfinished commands left staging this dataset (`staging.leftovers`); nothing for a hub one."""
    if access.is_remote(ctx.root):
        return []
    return [_finding("LAY045", f"{path} was left by a lerodoc command that did not finish",
                     file=relative(ctx.root, path)) for path in leftovers(ctx.root)]


def _open_failure(ctx: Context) -> Finding:
    """The one finding for a dataset whose metadata could not be read."""
    error = ctx.open_error
    if error is None:
        return _finding("LAY002", "the dataset could not be opened")
    file = relative(ctx.root, error.file)
    if file == ".":   # the dataset folder itself
        file, text = None, f"{ctx.root}: {error.message}"
    else:
        text = f"{file}: {error.message}" if file else error.message
    where = dict(file=file, episode=error.episode)
    if error.field == "codebase_version":
        return _finding("LAY003", text, **where)
    if isinstance(error, UnsafePath):   # a name or path leading outside the dataset (formats.paths)
        text = f"{file}: {error.field}: {error.message}" if file and error.field else text
        if error.field in ("data_path", "video_path") and error.file and Path(error.file).name == "info.json":
            return replace(_finding("LAY012", text, **where), fixable=False,
                           hint=f"set {error.field} to the version's template relative to the dataset folder "
                                "and put the files there")
        if (error.field or "").startswith("features."):
            return _finding("LAY015", text, feature=error.field[len("features."):], **where)
    if error.file is not None and not access.path(error.file).exists():
        return _finding("LAY001", text, **where)
    return _finding("LAY002", text + (f" ({error.hint})" if error.hint else ""), **where)


def _raw_info(ctx: Context) -> dict:
    try:
        return read_json(ctx.root / INFO_PATH)
    except LerodocError:   # it opened a moment ago; a file changing under us is not a data problem
        return {}


def _templates(version: str):
    """The format module holding the version's path templates (v2.0 shares v2.1's)."""
    return v30 if version == "v3.0" else v21


def _placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _info_fields(ctx: Context, raw: dict) -> list[Finding]:
    ds, out = ctx.dataset, []
    info_file = INFO_PATH
    fps = raw.get("fps")
    if isinstance(fps, float):
        out.append(_finding("LAY010", f"info.json fps is {fps!r}, a float; lerobot expects an integer",
                            file=info_file))
    totals = ["total_episodes", "total_frames", "total_tasks"]
    if ds.version != "v3.0":
        totals += ["total_videos", "total_chunks"]    # the v2.1 -> v3.0 converter deletes them: KeyError
    for key in totals:
        value = raw.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            out.append(_finding("LAY011", f"info.json {key} is {'missing' if key not in raw else repr(value)}, "
                                          f"not an integer", file=info_file))
    if ds.version == "v2.0" and formats.files_version(ctx.root) == "v2.1":
        out.append(_finding("LAY021", f"info.json codebase_version is v2.0, but {v21.EPISODES_STATS_PATH} (v2.1's "
                                      "per-episode stats) is there", file=info_file))
    module = _templates(ds.version)
    for key, default, needed in (("data_path", module.DATA_PATH, True),
                                 ("video_path", module.VIDEO_PATH, bool(ds.info.video_keys))):
        template = raw.get(key)
        if not needed:
            continue
        expected = _placeholders(default)
        if not isinstance(template, str) or _placeholders(template) != expected:
            out.append(_finding("LAY012", f"info.json {key} is {template!r}; a {ds.version} template uses "
                                          f"{{{', '.join(sorted(expected))}}}, e.g. {default!r}", file=info_file))
    return out


def _feature_specs(ctx: Context) -> list[Finding]:
    info, out = ctx.dataset.info, []
    where = dict(file=INFO_PATH)
    for name, spec in info.features.items():
        if not valid_spec(spec):
            out.append(_finding("LAY013", f"feature {name!r} has dtype {spec.get('dtype')!r} and shape "
                                          f"{spec.get('shape')!r}", feature=name, **where))
            continue
        if spec["dtype"] in ("image", "video") and len(spec["shape"]) != 3:   # lerobot's policy features need 3
            out.append(_finding("LAY013", f"camera {name!r} has shape {spec['shape']!r}, not [height, width, "
                                          "channels]", feature=name, **where))
            continue
        out += _names_findings(name, spec, info.fps)
    for name in INDEX_FEATURES:
        if name not in info.features:
            out.append(_finding("LAY014", f"info.json features lack {name!r}", feature=name, **where))
    return out


def _undeclared(ctx: Context) -> dict[str, list[str]]:
    if "undeclared_cameras" not in ctx.cache:
        ctx.cache["undeclared_cameras"] = undeclared_cameras(ctx.dataset)
    return ctx.cache["undeclared_cameras"]


def _undeclared_cameras(ctx: Context) -> list[Finding]:
    """A camera whose videos and episode metadata are there but whose info.json feature is gone (LAY044)."""
    ds, out = ctx.dataset, []
    where = "the meta/episodes columns videos/{}/..." if ds.version == "v3.0" else "the episode stats of {!r}"
    for key, files in sorted(_undeclared(ctx).items()):
        out.append(_finding("LAY044", f"camera {key!r} has {len(files)} video file(s) ({files[0]}"
                                      f"{', ...' if len(files) > 1 else ''}) and {where.format(key)}, but info.json "
                                      "does not declare it: lerobot ignores the camera and a rewrite would lose it",
                            file=INFO_PATH, feature=key))
    return out


def _names_findings(name: str, spec: dict, fps: int) -> list[Finding]:
    """names: flat, one per channel; cameras [height, width, channels]; the feature's own fps."""
    where = dict(file=INFO_PATH, feature=name)
    names, shape, out = spec.get("names"), spec["shape"], []
    if spec["dtype"] in ("image", "video"):
        if unreadable_names(names):
            shown = "null" if names is None else _outline(names) if _nested(names) else repr(names)
            out.append(_finding("LAY019", f"camera {name!r} has names {shown}: lerobot 0.6.1 reads names[2] to "
                                          "tell channels last from first", **where))
        elif names != CAMERA_NAMES:
            out.append(_finding("LAY018", f"camera {name!r} has names {names!r}", **where))
    elif _nested(names):
        out.append(_finding("LAY016", f"feature {name!r} has nested names ({_outline(names)}), not a flat list",
                            **where))
    elif names is not None and not (isinstance(names, list) and (len(shape) > 1 or len(names) == shape[0])):
        out.append(_finding("LAY017", f"feature {name!r} has names {_outline(names)} for shape {shape}", **where))
    own_fps = spec.get("fps")
    if own_fps is not None and own_fps != fps:
        out.append(_finding("LAY020", f"feature {name!r} has fps {own_fps!r}, info.json fps is {fps}", **where))
    return out


def _nested(names: object) -> bool:
    """Names as a dict, or a list holding lists or dicts (not one flat list of names)."""
    return isinstance(names, dict) or isinstance(names, list) and any(isinstance(n, (list, dict)) for n in names)


def _outline(names: object) -> str:
    """A short picture of a nested names value: [[26 names]], {motors: [14 names]}."""
    if isinstance(names, dict):
        return "{" + ", ".join(f"{k}: {_outline(v)}" for k, v in list(names.items())[:3]) + "}"
    if isinstance(names, list) and any(isinstance(n, (list, dict)) for n in names):
        return "[" + ", ".join(_outline(n) for n in names[:3]) + (", ..." if len(names) > 3 else "") + "]"
    return f"[{len(names)} names]" if isinstance(names, list) else repr(names)


# ---------------------------------------------------------------- data files and their schemas

def _only_episode(episodes: list[Episode]) -> int | None:
    return episodes[0].index if len(episodes) == 1 else None


def _data_file_findings(ctx: Context) -> list[Finding]:
    out, by_file = [], ctx.dataset.episodes_by_data_file()
    for path, data in data_files(ctx).items():
        if data.ok or data.error == "missing" and _stray_for(ctx, path):
            continue   # a misplaced file is reported by _placement
        episodes = by_file.get(path, [])
        where = dict(file=path, episode=_only_episode(episodes))
        span = f"episode {episodes[0].index}" if len(episodes) == 1 else \
            f"episodes {episodes[0].index}..{episodes[-1].index}"
        if data.error == "missing":
            out.append(_finding("LAY030", f"{path} ({span}) does not exist; {_led_by(ctx, episodes[0])}", **where))
        else:
            out.append(_finding("LAY031", f"{path} ({span}) cannot be read: {data.error}", **where))
    return out


def _schemas(ctx: Context) -> list[Finding]:
    """Column checks, once per distinct schema (named by its first file and how many share it)."""
    groups: dict[str, list[DataFile]] = {}
    for data in data_files(ctx).values():
        if data.ok:
            groups.setdefault(data.schema.remove_metadata().to_string(), []).append(data)
    by_file, out = ctx.dataset.episodes_by_data_file(), []
    for files in groups.values():
        first = files[0]
        others = f" (and {len(files) - 1} more files with this schema)" if len(files) > 1 else ""
        where = dict(file=first.path, episode=_only_episode(by_file.get(first.path, [])))
        for code, feature, text in schema_problems(ctx.dataset.info.features, first.schema):
            out.append(_finding(code, f"{first.path}: {text}{others}", feature=feature, **where))
    return out


def _uses_list_type(raw: bytes | None) -> bool:
    """Whether a schema's `huggingface` metadata (`raw`) has a datasets>=4 {"_type": "List"} feature."""
    if not raw:
        return False
    try:
        described = parse(raw, "its huggingface metadata")   # bounded: 10^5 levels would end in RecursionError
    except LerodocError:
        return False

    def walk(node: object) -> bool:
        if isinstance(node, dict):
            return node.get("_type") == "List" or any(walk(v) for v in node.values())
        return isinstance(node, list) and any(walk(v) for v in node)
    return walk(described)


def _hf_metadata(ctx: Context) -> list[Finding]:
    uses: dict[bytes | None, bool] = {}   # per distinct metadata text, parsed once (files of one writer share it)
    files = []
    for data in data_files(ctx).values():
        if data.ok:
            raw = (data.schema.metadata or {}).get(b"huggingface")
            if raw not in uses:
                uses[raw] = _uses_list_type(raw)
            if uses[raw]:
                files.append(data.path)
    if not files:
        return []
    others = f" (and {len(files) - 1} more files)" if len(files) > 1 else ""
    return [_finding("LAY039", f"{files[0]}: the huggingface schema metadata uses 'List'{others}", file=files[0])]


# ---------------------------------------------------------------- where files are on disk

def _strays(ctx: Context) -> dict[str, list[str]]:
    """Parquet ("data") and mp4 ("videos") files anywhere outside meta/ that no episode references."""
    if "strays" not in ctx.cache:
        ds = ctx.dataset
        referenced = set(ds.data_files()) | {f for key in ds.info.video_keys for f in ds.video_files(key)}
        ctx.cache["strays"] = {kind: [p for p in formats.loose_files(ctx.root, suffix) if p not in referenced]
                               for kind, suffix in (("data", ".parquet"), ("videos", ".mp4"))}
    return ctx.cache["strays"]


def _stray_for(ctx: Context, expected: str, key: str | None = None) -> str | None:
    """The unreferenced file that is `expected` stored under another folder (formats.find_misplaced)."""
    kind = "videos" if expected.endswith(".mp4") else "data"
    return formats.find_misplaced(expected, _strays(ctx)[kind], key)


def _placement(ctx: Context) -> list[Finding]:
    """Missing or misplaced referenced files, and files nothing references."""
    ds, out, placed = ctx.dataset, [], set()
    by_file = None
    for path, data in data_files(ctx).items():
        stray = data.error == "missing" and _stray_for(ctx, path)
        if stray:
            placed.add(stray)
            by_file = ds.episodes_by_data_file() if by_file is None else by_file
            out.append(_finding("LAY041", f"data file {stray} belongs at {path}, where the episodes look for it",
                                file=stray, episode=_only_episode(by_file.get(path, []))))
    for key in ds.info.video_keys:
        first_episode = {}
        for ep in ds.episodes:
            if key in ep.videos:
                first_episode.setdefault(ep.videos[key].file, ep)
        for path, ep in first_episode.items():
            episode = ep.index
            if (ctx.root / path).is_file():
                continue
            stray = _stray_for(ctx, path, key)
            where = dict(episode=episode, feature=key)
            if stray:
                placed.add(stray)
                out.append(_finding("LAY041", f"video {stray} belongs at {path}, where the episodes look for it",
                                    file=stray, **where))
            else:
                out.append(_finding("LAY040", f"video {path} (camera {key}, from episode {episode}) does not exist; "
                                              f"{_led_by(ctx, ep, key)}", file=path, **where))
    return out + _unreferenced(ctx, placed)


def _led_by(ctx: Context, ep: Episode, key: str | None = None) -> str:
    """Which metadata value leads to an episode's data (or `key` video) file: where a wrong pointer is held."""
    file, fields, template = ctx.dataset.pointer(ep, key)
    return f"episode {ep.index}'s {fields} in {file}, filled into {INFO_PATH}'s {template}, lead there"


def _unreferenced(ctx: Context, placed: set[str]) -> list[Finding]:
    out, undeclared = [], {f for files in _undeclared(ctx).values() for f in files}
    for paths in _strays(ctx).values():
        for path in paths:
            if path in placed or path in undeclared:   # an undeclared camera's videos: LAY044
                continue
            read_by_v30 = ctx.dataset.version == "v3.0" and Path(path).parts[0] == "data" and len(Path(path).parts) == 3
            code = "LAY043" if read_by_v30 else "LAY042"
            out.append(_finding(code, f"{path} is on disk but no episode references it", file=path))
    return out
