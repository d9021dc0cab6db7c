"""Timestamps (TS): each episode's parquet `timestamp` column against k/fps, k the row in the episode.

lerobot fetches frame k of an episode's video at `from_timestamp + timestamp[k]` and needs a frame
within tolerance_s of that time (1e-4 s by default, strict `<` in 0.6.1); v2.x loaders also wanted every
step to be 1/fps within tolerance_s. So an episode fails when a timestamp sits tolerance_s or more off
k/fps (v3.0), or a step does (v2.x); the findings then say why: an offset start, steps going back,
repeated, skipping frames, uneven, or a slow drift. Reads only the bookkeeping columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from lerodoc.checks.common import (ERROR, WARNING, Context, Finding, data_files, episode_columns, finding_factory,
                                   flat_column, ragged_arange)
from lerodoc.dataset import Dataset
from lerodoc.formats.model import Episode

REWRITE = "lerodoc repair rewrites timestamps as frame_index/fps"
CODES = {
    "TS001": (ERROR, "an episode's timestamps do not start at 0 (an offset, e.g. wall-clock time)", REWRITE, True),
    "TS002": (ERROR, "timestamps go backwards or are not finite", REWRITE, True),
    "TS003": (ERROR, "consecutive rows share a timestamp (duplicated timestamps)", REWRITE, True),
    "TS004": (ERROR, "timestamps skip whole frames (frames dropped while recording)",
              REWRITE + "; the dropped frames stay lost, the rows then line up with the video", True),
    "TS005": (ERROR, "steps between timestamps differ from 1/fps by tolerance_s or more (jitter)", REWRITE, True),
    "TS006": (ERROR, "timestamps drift away from k/fps although every step is within tolerance_s",
              REWRITE + "; check that info.json fps is the recording rate", True),
    "TS007": (WARNING, "the smallest tolerance_s at which every timestamp passes",
              "pass it to lerobot (--tolerance_s), or repair the timestamps", True),
}
_finding = finding_factory(CODES)
FEATURE = "timestamp"


@dataclass(frozen=True)
class Rows:
    """One episode's bookkeeping columns, in row order."""
    timestamp: np.ndarray            # float64 seconds, the stored (often float32) values
    frame_index: np.ndarray | None


def episode_rows(ctx: Context) -> list[Rows | None]:
    """Rows of each episode of ctx.dataset (same order), None where its data file does not hold them.

    Reads each data file's bookkeeping columns once per context (layout.data_files); rows are where the
    metadata puts them, and an episode whose rows carry another episode_index is left out (the indices
    family reports it)."""
    if "timestamps.rows" not in ctx.cache:
        columns = {path: _file_columns(data.columns) for path, data in data_files(ctx).items() if data.ok}
        ctx.cache["timestamps.rows"] = [_slice(columns.get(ep.data_file), ep) for ep in ctx.dataset.episodes]
    return ctx.cache["timestamps.rows"]


def _file_columns(table) -> dict[str, np.ndarray | None]:
    return {name: flat_column(table, name) for name in ("timestamp", "frame_index", "episode_index")}


def _slice(columns: dict | None, ep: Episode) -> Rows | None:
    if columns is None or columns["timestamp"] is None:
        return None
    rows = slice(ep.data_row, ep.data_row + ep.length)
    if ep.data_row + ep.length > len(columns["timestamp"]):
        return None
    owner = columns["episode_index"]
    if owner is not None and (owner[rows] != ep.index).any():
        return None
    frame_index = columns["frame_index"]
    return Rows(columns["timestamp"][rows].astype(np.float64),
                None if frame_index is None else frame_index[rows])


# ---------------------------------------------------------------- measuring one episode

@dataclass(frozen=True)
class Timing:
    """How one episode's timestamps sit against k/fps; row arrays hold the later row of each bad step."""
    start: float              # the first timestamp
    worst_offset: float       # max |timestamp[k] - k/fps|: what lerobot's video lookup sees
    worst_offset_row: int
    worst_step: float         # max |timestamp[k] - timestamp[k-1] - 1/fps|: what v2.x loaders checked
    drift: float              # max |timestamp[k] - timestamp[0] - k/fps|
    backwards: np.ndarray
    repeated: np.ndarray
    skipped: np.ndarray
    uneven: np.ndarray

    def needed(self, version: str) -> float:
        """The deviation a tolerance_s must exceed for this episode to pass."""
        return max(self.worst_offset, self.worst_step if version != "v3.0" else 0.0)


def measure(ts: np.ndarray, fps: int, tolerance_s: float) -> Timing:
    """Compare timestamps `ts` (seconds, one per row) with k/fps."""
    period = 1.0 / fps
    k = np.arange(len(ts))
    offset = np.abs(ts - k * period)
    offset = np.where(np.isfinite(offset), offset, np.inf)
    step = np.diff(ts)
    error = np.abs(step - period)
    error = np.where(np.isfinite(error), error, np.inf)
    backwards = ~(step > -tolerance_s)                 # NaN counts as going back
    repeated = ~backwards & (step < tolerance_s)
    # a repeat followed by a double step is one repeated timestamp, not also a dropped frame
    refill = np.append(False, repeated[:-1] & (np.abs(step[:-1] + step[1:] - 2 * period) < tolerance_s))
    skipped = (step >= 1.5 * period) & ~refill
    uneven = (error >= tolerance_s) & ~(backwards | repeated | skipped | refill)
    drift = np.abs(ts - ts[0] - k * period)
    return Timing(start=float(ts[0]), worst_offset=float(offset.max()), worst_offset_row=int(offset.argmax()),
                  worst_step=float(error.max()) if len(error) else 0.0,
                  drift=float(np.nan_to_num(drift, nan=np.inf).max()), backwards=_later_rows(backwards),
                  repeated=_later_rows(repeated), skipped=_later_rows(skipped), uneven=_later_rows(uneven))


def _later_rows(steps: np.ndarray) -> np.ndarray:
    """The row ending each flagged step (step i goes from row i to row i+1)."""
    return np.flatnonzero(steps) + 1


def fails(timing: Timing, version: str, tolerance_s: float) -> bool:
    """True when lerobot (at `tolerance_s`) rejects the episode: strict `<` passes."""
    return timing.needed(version) >= tolerance_s


# ---------------------------------------------------------------- the family

def check(ctx: Context) -> list[Finding]:
    if ctx.dataset is None:
        return []
    ds, tol = ctx.dataset, ctx.tolerance_s
    findings, worst, columns = [], [], {}
    for position in np.flatnonzero(failing(ctx)).tolist():   # the failing episodes are told one by one
        ep = ds.episodes[position]
        if ep.data_file not in columns:
            columns[ep.data_file] = _file_columns(data_files(ctx)[ep.data_file].columns)
        rows = _slice(columns[ep.data_file], ep)
        timing = measure(rows.timestamp, ds.info.fps, tol)
        found = _episode_findings(ep, rows, timing, ds.info.fps, tol)
        findings += [_adjust(f, ds, rows) for f in found]
        worst.append((timing.needed(ds.version), ep.index, bool(found and found[0].code == "TS001")))
    if worst:
        findings.append(_adjust(_summary(worst, ds.info.fps, tol), ds, None))
    return findings


CHUNK_ROWS = 1 << 20     # rows measured at once: memory bounded even where the metadata's spans overlap; 8 MB
                         # temporaries, which malloc reuses (at 2^22, each chunk's 32 MB ones were mapped anew)


def failing(ctx: Context) -> np.ndarray:
    """Per metadata episode: True when lerobot (at ctx.tolerance_s) rejects its timestamps, over whole columns (what
    `measure` and `fails` tell of one episode, for all at once), one data file at a time. Episodes whose rows are
    not where the metadata puts them are left out, as `episode_rows` leaves them out."""
    ds, meta = ctx.dataset, episode_columns(ctx)
    files = data_files(ctx)
    out = np.zeros(len(meta.length), bool)
    order = np.argsort(meta.file, kind="stable")   # each file's episodes, in metadata order
    bounds = np.searchsorted(meta.file[order], np.arange(len(meta.files) + 1))
    for f, path in enumerate(meta.files):
        data = files.get(path)
        columns = _file_columns(data.columns) if data is not None and data.ok else None
        ts = None if columns is None else columns["timestamp"]
        if ts is None:
            continue
        mine = order[bounds[f]:bounds[f + 1]]
        start, length = meta.data_row[mine], meta.length[mine]
        chosen = mine[(length > 0) & (start >= 0) & (start + length <= len(ts))]
        length = meta.length[chosen]
        chunk = (np.cumsum(length) - length) // CHUNK_ROWS
        cuts = np.r_[0, np.flatnonzero(np.diff(chunk)) + 1, len(chosen)]
        for lo, hi in zip(cuts[:-1], cuts[1:]):      # a chunk of episodes at a time
            some = chosen[lo:hi]
            out[some] = _failing(ts, columns["episode_index"], meta.data_row[some], meta.length[some],
                                 meta.index[some], ds.info.fps, ctx.tolerance_s, ds.version)
    return out


def _failing(ts_file: np.ndarray, owner: np.ndarray | None, start: np.ndarray, length: np.ndarray,
             index: np.ndarray, fps: int, tol: float, version: str) -> np.ndarray:
    """`fails` of each span (start, length) of one file's columns, and no row of it owned by another episode (by
    `owner`, the file's episode_index, when it has a usable one): per row whether it is off by tolerance_s or more,
    then per span whether any row is."""
    rows = ragged_arange(start, length)
    span = np.repeat(np.arange(len(length)), length)
    ts, period = ts_file[rows].astype(np.float64), 1.0 / fps
    off = ~(np.abs(ts - (rows - np.repeat(start, length)) * period) < tol)       # NaN and inf are off
    if version != "v3.0":
        step = ~(np.abs(np.diff(ts, append=0.0) - period) < tol)
        step[np.cumsum(length) - 1] = False                     # no step from an episode's last row
        off |= step
    count = np.bincount(span[off], minlength=len(length))
    if owner is None:
        return count > 0
    foreign = owner[rows] != np.repeat(index, length)
    return (count > 0) & (np.bincount(span[foreign], minlength=len(length)) == 0)


def _adjust(finding: Finding, ds: Dataset, rows: Rows | None) -> Finding:
    """Severity and fixability for this dataset: timestamps only matter where video frames are looked up
    by them, and the rewrite needs frame_index = 0..length-1."""
    severity = finding.severity if ds.info.video_keys else WARNING
    fixable = finding.fixable and (rows is None or rows.frame_index is not None
                                   and np.array_equal(rows.frame_index, np.arange(len(rows.frame_index))))
    return replace(finding, severity=severity, fixable=fixable)


def _episode_findings(ep: Episode, rows: Rows, t: Timing, fps: int, tol: float) -> list[Finding]:
    """The reasons a failing episode fails: an offset start, bad steps, or else a drift."""
    ts = rows.timestamp
    where = dict(file=ep.data_file, episode=ep.index, feature=FEATURE)
    worst = f"worst |timestamp - k/{fps}| is {t.worst_offset:.3g} s at row {t.worst_offset_row}"
    out = []
    if not abs(t.start) < tol:
        out.append(_finding("TS001", f"episode {ep.index} timestamps start at {t.start:.6f} s instead of 0, "
                                     f"so every frame lookup is off by that much ({worst})", **where))
    offset = bool(out)
    for code, found, text in (
            ("TS002", t.backwards, "go back (or are not finite)"),
            ("TS003", t.repeated, "repeat the previous row's timestamp"),
            ("TS004", t.skipped, f"jump by {_jumps(t.skipped, ts, fps)} frame periods of 1/{fps} s"),
            ("TS005", t.uneven, f"are up to {t.worst_step:.3g} s off the 1/{fps} s step")):
        if len(found):
            k = int(found[0])
            out.append(_finding(code, f"episode {ep.index}: {len(found)} step(s) {text}, first from row {k - 1} "
                                      f"({ts[k - 1]:.6f} s) to row {k} ({ts[k]:.6f} s); {worst}", **where))
    if len(out) == offset and (t.drift >= tol or not offset):
        out.append(_finding("TS006", f"episode {ep.index} timestamps drift up to {t.drift:.3g} s away from "
                                     f"k/{fps} s while every step is within {tol:g} s of 1/{fps} s; {worst}",
                            **where))
    return out


def _jumps(rows: np.ndarray, ts: np.ndarray, fps: int) -> str:
    if not len(rows):
        return ""
    jumps = np.rint((ts[rows] - ts[rows - 1]) * fps).astype(int)
    return str(jumps[0]) if (jumps == jumps[0]).all() else f"{jumps.min()}-{jumps.max()}"


def _summary(worst: list[tuple[float, int, bool]], fps: int, tol: float) -> Finding:
    needed, episode, _ = max(worst)
    offsets = [e for _, e, offset in worst if offset]
    scope = f"{len(worst)} episode(s) fail at tolerance_s {tol:g}"
    if offsets:
        scope += f", {len(offsets)} of them start off 0 (first: episode {offsets[0]})"
    return _finding("TS007", f"{scope}; {tolerance_advice(needed, fps, f'episode {episode}')}", feature=FEATURE)


def tolerance_advice(needed: float, fps: int, where: str) -> str:
    """What tolerance_s passes a worst deviation of `needed` seconds, or that none sensibly does."""
    half = 0.5 / fps
    if not needed < half:
        return (f"the worst ({where}) is {needed:.3g} s off, at least half a frame ({half:.3g} s), so no "
                f"tolerance_s picks the right frames")
    return f"they pass with tolerance_s {suggest_tolerance(needed):.2g} or more (worst {needed:.3g} s, {where})"


def suggest_tolerance(needed: float) -> float:
    """The smallest two-significant-digit value strictly above `needed` (lerobot 0.6.1 tests `<`)."""
    if needed <= 0:
        return 1e-9
    scale = 10.0 ** (math.floor(math.log10(needed)) - 1)
    value = math.ceil(needed / scale) * scale
    return value + scale if value <= needed else value
