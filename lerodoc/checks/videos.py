"""Videos (VID, with --videos): every episode's frames as lerobot will look them up, from the containers.

No frame is decoded (except with --deep): each file's frame times come from its index (lerodoc.media.frames: the
mp4 sample tables, a PyAV demux for anything else), and are compared with numpy. Per file: it opens,
its codec, size and frame rate agree with info.json, its time base can place frames at k/fps. Per episode
and camera: the [from_timestamp, to_timestamp) window lies inside the file, holds as many frames as the
episode has rows, overlaps no other window, and every row's query time (from_timestamp + timestamp) has
a frame within tolerance_s. Missing files are the layout family's (LAY040, LAY041).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from lerodoc.media.clips import read_errors, reason, window, window_frames
from lerodoc.checks.common import ERROR, WARNING, Context, Finding, finding_factory
from lerodoc.checks.timestamps import Rows, episode_rows, tolerance_advice
from lerodoc.formats.model import Episode
from lerodoc.formats import v30
from lerodoc.formats.info import codec_name
from lerodoc.media.frames import Index, Unreadable, index, open_video, strict_tags

WINDOWS = "lerodoc repair recomputes the windows from the packets' timestamps"
CODES = {
    "VID001": (ERROR, "a video file cannot be read (truncated, corrupt, or no video stream)",
               "restore the file from a good copy; the episodes named cannot be decoded until then", False),
    "VID002": (WARNING, "a camera's codec or pixel format differs from its info.json entry",
               "set video.codec / video.pix_fmt in info.json to the files' values (repair does)", True),
    "VID003": (ERROR, "a camera's frame size differs from its info.json shape or video.height/width",
               "set shape and video.height/video.width in info.json to the files' size (repair does)", True),
    "VID004": (ERROR, "a video's frame rate differs from info.json fps",
               "re-encode the video at info.json fps, or correct fps", False),
    "VID005": (ERROR, "the file's time base cannot place frames at k/fps within tolerance_s",
               "lerodoc repair (and convert, merge) stream-copies the packets onto a 1/15360 s time base, each "
               "frame at k/fps", True),
    "VID006": (ERROR, "an episode's [from_timestamp, to_timestamp) window lies outside its video file", WINDOWS, True),
    "VID007": (ERROR, "an episode's window holds fewer frames than the episode has rows (lerobot then "
                      "silently returns the next episode's frames, or fails)", WINDOWS, True),
    "VID008": (WARNING, "an episode's window holds more frames than the episode has rows", WINDOWS, True),
    "VID009": (ERROR, "two episodes' windows overlap in one video file", WINDOWS, True),
    "VID010": (ERROR, "a row's query time (from_timestamp + timestamp) has no frame within tolerance_s",
               WINDOWS, True),
    "VID011": (WARNING, "the smallest tolerance_s at which every video query finds a frame",
               "pass it to lerobot (--tolerance_s), or repair the windows and timestamps", False),
    "VID012": (ERROR, "--deep: the first or last frame of an episode's window does not decode at its time",
               "re-encode the episode from its source frames", False),
    "VID014": (ERROR, "an episode's [from_timestamp, to_timestamp) window in the metadata spans fewer frames at fps "
                      "than the episode has rows (a shifted window: lerobot serves another episode's frames)",
               WINDOWS, True),
    "VID013": (WARNING, "a video's metadata tags are not UTF-8 (a flipped bit): the frames are intact, but "
                        "PyAV's default reader, lerobot's pyav backend, refuses to open the file",
               "lerodoc repair (or convert, merge) writes the file anew with fresh tags", True),
}
_finding = finding_factory(CODES)


# ---------------------------------------------------------------- the family

@dataclass
class Episodes:
    """The episodes one camera's file holds, with their rows (None where unreadable)."""
    key: str
    file: str
    members: list[tuple[Episode, Rows | None]]


def check(ctx: Context) -> list[Finding]:
    if ctx.dataset is None:
        return []
    if not ctx.videos:
        return metadata_windows(ctx)
    if not ctx.dataset.info.video_keys:
        return []   # no camera: no episode's rows to set against a file (a million episodes' rows: 400 MB)
    ds, findings, misses = ctx.dataset, [], []
    rows = episode_rows(ctx)
    for key in ds.info.video_keys:
        streams: dict[str, Index] = {}
        for group in _groups(ctx, key, rows):
            if not (ctx.root / group.file).is_file():
                continue                                   # layout reports missing and misplaced files
            try:
                streams[group.file] = stream = index(ctx.root / group.file)
            except Unreadable as exc:
                findings.append(_unreadable(group, exc))
                continue
            found, worst = _file_findings(ctx, group, stream)
            findings += found
            if not strict_tags(ctx.root / group.file):
                findings.append(_finding("VID013", f"{group.file} has metadata tags that are not UTF-8; PyAV opens it "
                                                   "only with metadata_errors relaxed",
                                         file=group.file, episode=_single(group), feature=group.key))
            misses += worst
            if ctx.deep:
                findings += _deep(ctx, group, stream)
        findings += _parameters(ctx, key, streams)
    return findings + _summary(ctx, misses)


def metadata_windows(ctx: Context) -> list[Finding]:
    """Without --videos, no file opened: each v3.0 episode's stored window against its length, counting the k/fps
    frame times inside it by the half-frame rule (`clips.window`), as the files lerobot writes place them. With
    --videos, VID007 counts the file's real frames instead."""
    ds = ctx.dataset
    if ds.version != "v3.0":
        return []                                   # v2.x windows are whole files, nothing stored to contradict
    fps, findings = ds.info.fps, []
    for key in ds.info.video_keys:
        for ep in ds.episodes:
            span = ep.videos.get(key)
            if span is None or span.from_timestamp is None or span.to_timestamp is None:
                continue
            frames = window_frames(span.from_timestamp, span.to_timestamp, fps)
            if frames < ep.length:
                findings.append(_finding(
                    "VID014", f"episode {ep.index} {key}: window [{span.from_timestamp:.4f}, "
                              f"{span.to_timestamp:.4f}) s is {frames} frames' worth at {fps} fps for {ep.length} "
                              f"rows, so at least {ep.length - frames} row(s) get a frame from outside it (from the "
                              "metadata; validate --videos counts the file's frames)",
                    file=span.file, episode=ep.index, feature=key))
    return findings


def _groups(ctx: Context, key: str, rows: list[Rows | None]) -> list[Episodes]:
    groups: dict[str, Episodes] = {}
    for ep, ep_rows in zip(ctx.dataset.episodes, rows):
        if key in ep.videos:
            file = ep.videos[key].file
            groups.setdefault(file, Episodes(key, file, [])).members.append((ep, ep_rows))
    return list(groups.values())


def _single(group: Episodes) -> int | None:
    """The episode a file holds when it holds one."""
    return group.members[0][0].index if len(group.members) == 1 else None


def _unreadable(group: Episodes, exc: Unreadable) -> Finding:
    episodes = [ep.index for ep, _ in group.members]
    named = ", ".join(map(str, episodes[:10])) + (f" and {len(episodes) - 10} more" if len(episodes) > 10 else "")
    return _finding("VID001", f"{group.file} {exc.message}; episode(s) {named} read {group.key} frames from it",
                    file=group.file, episode=_single(group), feature=group.key)


def _reason(exc: Exception) -> str:
    """FFmpeg's words for an error, without the file path it appends."""
    return reason(exc)


# ---------------------------------------------------------------- one file's episodes

@dataclass(frozen=True)
class Grid:
    """How far a file's frames sit from multiples of 1/fps, and whether its time base is the reason."""
    deviation: float        # max |t - round(t*fps)/fps| over frames, seconds
    step: Fraction          # the finest step its ticks take (gcd of tick differences) in seconds

    def explained_by_time_base(self, tolerance_s: float) -> bool:
        return self.deviation >= tolerance_s and self.deviation <= float(self.step) / 2 + 1e-12


def grid(stream: Index, fps: int) -> Grid:
    times = stream.times
    deviation = float(np.abs(times - np.rint(times * fps) / fps).max())
    gcd = int(np.gcd.reduce(np.diff(stream.ticks))) if len(stream.ticks) > 1 else 0
    return Grid(deviation, gcd * stream.time_base)


def _file_findings(ctx: Context, group: Episodes, stream: Index) -> tuple[list[Finding], list[tuple]]:
    """Time base, then each episode's window, frame count and query times; also each episode's worst miss."""
    ds, tol, fps = ctx.dataset, ctx.tolerance_s, ctx.dataset.info.fps
    stored = ds.version == "v3.0"              # v2.x windows are [0, length/fps) of a file per episode
    fit = grid(stream, fps)
    out = []
    if fit.explained_by_time_base(tol):
        out.append(_finding("VID005", f"{group.file} places frames on a {fit.step} s grid (time base "
                                      f"{stream.time_base}), up to {fit.deviation * 1e3:.3g} ms off k/{fps} s, "
                                      f"beyond tolerance_s {tol:g} s",
                            file=group.file, episode=_single(group), feature=group.key))
    # a file holding exactly its episodes' frames gets its windows back from the packets
    tiles = stored and len(stream.ticks) == sum(ep.length for ep, _ in group.members)
    members = sorted(group.members, key=lambda m: m[0].videos[group.key].from_timestamp)
    misses = []
    for ep, rows in members:
        found, miss = _episode(ctx, group, stream, ep, rows, stored, fit)
        out += [replace(f, fixable=f.fixable and tiles and (f.code != "VID010" or fit.deviation < tol))
                for f in found]
        if miss is not None:
            misses.append((miss, ep.index, group.key))
    return out + _overlaps(group, members, stream, fps, stored, tiles), misses


def _frame_range(stream: Index, ep: Episode, key: str, fps: int, stored: bool) -> tuple[int, int]:
    """Indices [lo, hi) of the frames in the episode's window (clips.window's half-frame rule)."""
    if not stored:
        return 0, len(stream.ticks)
    span = ep.videos[key]
    lo, hi = window(span.from_timestamp, span.to_timestamp, fps)
    return (int(np.searchsorted(stream.times, float(lo), "right")),
            int(np.searchsorted(stream.times, float(hi), "right")))


def _misses(times: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query time: the distance to the nearest frame, and that frame's time."""
    at = np.searchsorted(times, queries)
    below, above = times[np.clip(at - 1, 0, len(times) - 1)], times[np.clip(at, 0, len(times) - 1)]
    nearest = np.where(np.abs(queries - below) <= np.abs(above - queries), below, above)
    return np.abs(queries - nearest), nearest


@dataclass(frozen=True)
class Queries:
    """An episode's query times (from_timestamp + timestamp) against a file's frames."""
    times: np.ndarray
    miss: np.ndarray         # distance to the nearest frame, seconds
    nearest: np.ndarray      # that frame's time

    @property
    def worst(self) -> float:
        return float(np.nan_to_num(self.miss, nan=np.inf).max())


def _queries(stream: Index, start_s: float, rows: Rows | None) -> Queries | None:
    if rows is None or not len(rows.timestamp):
        return None
    times = start_s + rows.timestamp
    return Queries(times, *_misses(stream.times, times))


def _episode(ctx: Context, group: Episodes, stream: Index, ep: Episode, rows: Rows | None, stored: bool,
             fit: Grid) -> tuple[list[Finding], float | None]:
    """At most one finding (the first that applies: window outside the file, too few or too many frames,
    query misses) and the episode's worst query miss (None without readable rows)."""
    queries = _queries(stream, ep.videos[group.key].from_timestamp, rows)
    found = (_window_finding(ctx, group, stream, ep, queries, stored)
             or _query_finding(ctx, group, stream, ep, queries, fit))
    return [found] if found else [], None if queries is None else queries.worst


def _held(ep: Episode, key: str) -> str:
    """Where an episode's stored window is held: its episodes metadata row's from/to_timestamp columns."""
    return f"{ep.source or v30.EPISODES_META}'s videos/{key}/from_timestamp, to_timestamp"


def _window_finding(ctx: Context, group: Episodes, stream: Index, ep: Episode, queries: Queries | None,
                    stored: bool) -> Finding | None:
    span, fps = ep.videos[group.key], ctx.dataset.info.fps
    where = dict(file=group.file, episode=ep.index, feature=group.key)
    name, window = f"episode {ep.index} {group.key}", f"window [{span.from_timestamp:.4f}, {span.to_timestamp:.4f}) s"
    if stored:   # where the window is held: a wrong window is the episodes metadata's, not the video's
        window += f" ({_held(ep, group.key)})"
    if stored and (outside := _outside(span, stream, ctx.tolerance_s)):
        last = "" if queries is None else f", its last row queries {queries.times[-1]:.2f} s"
        return _finding("VID006", f"{name}: {window} {outside}{last}", **where)
    lo, hi = _frame_range(stream, ep, group.key, fps, stored)
    frames = hi - lo
    held = f"{window} of {group.file} holds" if stored else f"{group.file} holds"
    if frames < ep.length:
        short = ep.length - frames
        effect = (f"lerobot serves at least {short} row(s) a frame from outside the window (another "
                  f"episode's), with no error" if stored else f"the last {short} row(s) have no frame")
        return _finding("VID007", f"{name}: {held} {frames} frames for {ep.length} rows, so {effect}", **where)
    if frames > ep.length:
        return _finding("VID008", f"{name}: {held} {frames} frames for {ep.length} rows", **where)
    return None


def _query_finding(ctx: Context, group: Episodes, stream: Index, ep: Episode, queries: Queries | None,
                   fit: Grid) -> Finding | None:
    """Rows whose query time finds no frame, unless the time base (VID005) or the timestamps themselves
    (the timestamps family) explain it: then queries at exactly k/fps would miss too."""
    tol, fps = ctx.tolerance_s, ctx.dataset.info.fps
    if queries is None or queries.worst < tol or fit.explained_by_time_base(tol):
        return None
    ideal, _ = _misses(stream.times, ep.videos[group.key].from_timestamp + np.arange(ep.length) / fps)
    if ideal.max() < tol:
        return None
    k = int(np.nan_to_num(queries.miss, nan=np.inf).argmax())
    bad = int(np.count_nonzero(~(queries.miss < tol)))
    past = f", past the file's end at {stream.end_s:.3f} s" if queries.times[k] > stream.end_s else ""
    return _finding("VID010", f"episode {ep.index} {group.key}: {bad} of {ep.length} rows find no frame within "
                              f"{tol:g} s; row {k} queries {queries.times[k]:.4f} s, the nearest frame is at "
                              f"{queries.nearest[k]:.4f} s ({queries.miss[k]:.3g} s away){past}",
                    file=group.file, episode=ep.index, feature=group.key)


def _outside(span, stream: Index, tol: float) -> str | None:
    """Why the window is not inside the file, or None."""
    first, end = float(stream.times[0]), stream.end_s
    if not span.to_timestamp > span.from_timestamp:
        return "is empty"
    if span.to_timestamp > end + tol:
        return f"ends past the file's end at {end:.3f} s"
    if span.from_timestamp < first - tol:
        return f"starts before the file's first frame at {first:.4f} s"
    return None


def _overlaps(group: Episodes, members: list, stream: Index, fps: int, stored: bool, tiles: bool) -> list[Finding]:
    """Consecutive windows (by start) that share frames."""
    if not stored:
        return []
    out = []
    for (a, _), (b, _) in zip(members, members[1:]):
        shared = (_frame_range(stream, a, group.key, fps, stored)[1]
                  - _frame_range(stream, b, group.key, fps, stored)[0])
        if shared > 0:
            sa, sb = a.videos[group.key], b.videos[group.key]
            out.append(replace(_finding(
                "VID009", f"episode {b.index} {group.key}: window [{sb.from_timestamp:.4f}, {sb.to_timestamp:.4f}) s "
                          f"shares {shared} frame(s) with episode {a.index}'s [{sa.from_timestamp:.4f}, "
                          f"{sa.to_timestamp:.4f}) s in {group.file} (windows as {_held(b, group.key)})",
                file=group.file, episode=b.index, feature=group.key), fixable=tiles))
    return out


# ---------------------------------------------------------------- codec parameters, per camera

def _parameters(ctx: Context, key: str, streams: dict[str, Index]) -> list[Finding]:
    """Files whose codec, pixel format, size or frame rate disagree with info.json, one finding per value."""
    ds = ctx.dataset
    spec = ds.info.features[key]
    info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
    expected = {"codec": codec_name(info.get("video.codec")), "pix_fmt": info.get("video.pix_fmt"),
                "size": _size(spec, info), "fps": ds.info.fps}
    groups: dict[tuple[str, str], list[str]] = {}
    for file, stream in streams.items():
        actual = {"codec": stream.codec, "pix_fmt": stream.pix_fmt, "size": (stream.height, stream.width),
                  "fps": _fps(stream)}
        for name, value in actual.items():
            if expected[name] is not None and value is not None and not _same(name, value, expected[name]):
                groups.setdefault((name, _show(name, value)), []).append(file)
    code = {"codec": "VID002", "pix_fmt": "VID002", "size": "VID003", "fps": "VID004"}
    return [_finding(code[name], f"{len(files)} of {len(streams)} {key} file(s) have {name} {shown}, info.json "
                                 f"says {_show(name, expected[name])} (first: {files[0]})",
                     file=files[0], feature=key)
            for (name, shown), files in groups.items()]


def _size(spec: dict, info: dict) -> tuple[int, int] | None:
    """(height, width) from video.height/width, else from shape and its names; None when neither says."""
    shape, names = spec.get("shape"), spec.get("names")
    try:
        if info.get("video.height") and info.get("video.width"):
            return int(info["video.height"]), int(info["video.width"])
        if isinstance(names, list) and "height" in names and "width" in names:
            return int(shape[names.index("height")]), int(shape[names.index("width")])
        return (int(shape[0]), int(shape[1])) if isinstance(shape, list) and len(shape) == 3 else None
    except (TypeError, ValueError, IndexError):
        return None                                 # a malformed entry is the layout family's finding


def _fps(stream: Index) -> float | None:
    times = stream.times
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None


def _same(name: str, actual, expected) -> bool:
    if name == "fps":
        return abs(actual / expected - 1) < 0.005
    return actual == expected


def _show(name: str, value) -> str:
    if name == "size":
        return f"{value[1]}x{value[0]}"
    return f"{value:.3f}".rstrip("0").rstrip(".") if name == "fps" else str(value)


# ---------------------------------------------------------------- dataset summary and --deep

def _summary(ctx: Context, misses: list[tuple[float, int, str]]) -> list[Finding]:
    if not misses or max(misses)[0] < ctx.tolerance_s:
        return []
    needed, episode, key = max(misses)
    failing = sum(1 for miss, _, _ in misses if miss >= ctx.tolerance_s)
    advice = tolerance_advice(needed, ctx.dataset.info.fps, f"episode {episode} {key}")
    return [_finding("VID011", f"{failing} episode-camera pair(s) have video queries that miss at tolerance_s "
                               f"{ctx.tolerance_s:g}; {advice}")]


def _deep(ctx: Context, group: Episodes, stream: Index) -> list[Finding]:
    """Decode the first and last frame of each episode's window and check they come out at their time."""
    fps, stored = ctx.dataset.info.fps, ctx.dataset.version == "v3.0"
    targets = []
    for ep, _ in group.members:
        lo, hi = _frame_range(stream, ep, group.key, fps, stored)
        if hi > lo:
            targets += [(ep, "first", int(stream.ticks[lo])), (ep, "last", int(stream.ticks[hi - 1]))]
    out, path = [], ctx.root / group.file
    try:
        with open_video(path) as container:
            for ep, which, tick in targets:
                problem = _decode_at(container, tick)
                if problem:
                    out.append(_finding("VID012", f"episode {ep.index} {group.key}: the {which} frame "
                                                  f"({float(tick * stream.time_base):.4f} s) of {group.file} {problem}",
                                        file=group.file, episode=ep.index, feature=group.key))
    except read_errors() as exc:
        out.append(_finding("VID012", f"{group.file} cannot be opened for decoding ({_reason(exc)})",
                            file=group.file, feature=group.key))
    return out


def _decode_at(container, tick: int) -> str | None:
    """None when the frame at `tick` decodes, else what went wrong."""
    stream = container.streams.video[0]
    try:
        container.seek(tick, stream=stream, backward=True, any_frame=False)
        for frame in container.decode(stream):
            if frame.pts is not None and frame.pts >= tick:
                return None if frame.pts == tick else (
                    f"does not decode: the decoder's next frame is at {float(frame.pts * stream.time_base):.4f} s")
    except read_errors() + (ValueError,) as exc:
        return f"does not decode ({_reason(exc)})"
    return "does not decode: the decoder returned no frame at or after it"
