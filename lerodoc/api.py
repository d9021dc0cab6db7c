"""lerodoc from Python: the operations the commands run, with typed arguments, returning the reports `--json` prints.

    from lerodoc import api
    report = api.validate("data/pusht", videos=True)
    if report["errors"]:
        api.repair("data/pusht", "data/pusht_fixed")

Each function opens nothing but what it is given, writes only where it is told (a new folder, or the dataset itself
with `in_place=True`), and returns the operation's report as a plain dict (the keys of the command's `--json`,
without the envelope's `command`, `version`, `ok` and `exit_code`). Bad input raises `lerodoc.errors.LerodocError`
(its `file`, `episode`, `field` and `hint` locate it; `UsageError` for arguments that cannot fit the dataset).
Episode selections are sets of numbers, never command-line strings. Every command is a thin layer over these
calls' operations (`lerodoc.ops`, `lerodoc.report`). See docs/api.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from lerodoc.errors import LerodocError, UsageError  # noqa: F401  (re-exported: what the calls raise)
from lerodoc.conventions import TOLERANCE_S

PathLike = str | Path

__all__ = ["convert", "merge", "delete", "split", "select", "flatten", "quantiles", "validate", "repair", "report",
           "eval_pi05", "LerodocError", "UsageError"]


def _selection(numbers: Iterable[int]):
    from lerodoc.selection import Selection
    return Selection.of(int(n) for n in numbers)


def convert(dataset: PathLike, output: PathLike, *, to: str | None = None, workers: int = 1,
            force: bool = False, dry_run: bool = False) -> dict:
    """`lerodoc convert`: v2.x to v3.0, v3.0 to v2.1 (`to`), into `output`."""
    from lerodoc.ops.convert import convert as run
    return run(Path(dataset), Path(output), to=to, workers=workers, force=force, dry_run=dry_run).to_json()


def merge(datasets: Iterable[PathLike], output: PathLike, *, exclude: Mapping[int, Iterable[int]] | None = None,
          episodes: Mapping[int, Iterable[int]] | None = None, to: str = "v3.0", workers: int = 1,
          force: bool = False, dry_run: bool = False) -> dict:
    """`lerodoc merge`: the datasets in order into `output`; `exclude` / `episodes` map a dataset's position in
    `datasets` to the episode numbers it leaves out / keeps only."""
    from lerodoc.ops.merge import merge as run
    return run([Path(d) for d in datasets], Path(output),
               exclude={i: _selection(e) for i, e in (exclude or {}).items()},
               episodes={i: _selection(e) for i, e in (episodes or {}).items()},
               to=to, workers=workers, force=force, dry_run=dry_run).to_json()


def delete(dataset: PathLike, episodes: Iterable[int], output: PathLike | None = None, *, in_place: bool = False,
           to: str | None = None, workers: int = 1, force: bool = False, dry_run: bool = False) -> dict:
    """`lerodoc delete`: the dataset without `episodes`, renumbered, into `output` (or `in_place`)."""
    from lerodoc.ops.delete import delete as run
    return run(Path(dataset), None if output is None else Path(output), _selection(episodes), to=to,
               in_place=in_place, workers=workers, force=force, dry_run=dry_run).to_json()


def split(dataset: PathLike, output: PathLike, parts: Mapping[str, float] | Mapping[str, Iterable[int]], *,
          seed: int | None = None, to: str | None = None, workers: int = 1, force: bool = False,
          dry_run: bool = False) -> dict:
    """`lerodoc split`: each part a complete dataset at `output/<part>`. `parts` maps a part's name to a fraction
    of the episodes ({"train": 0.9, "val": 0.1}; `seed` shuffles first) or to its episode numbers."""
    from lerodoc.ops.split import split as run
    if not parts:
        raise UsageError("give at least one part")
    by_fraction = all(isinstance(v, (int, float)) for v in parts.values())
    return run(Path(dataset), Path(output), fractions=dict(parts) if by_fraction else None,
               parts=None if by_fraction else {name: _selection(numbers) for name, numbers in parts.items()},
               seed=seed, to=to, workers=workers, force=force, dry_run=dry_run).to_json()


def select(dataset: PathLike, output: PathLike | None = None, *, state: Iterable[str] = (),
           action: Iterable[str] = (), keep_source: bool = False, in_place: bool = False, workers: int = 1,
           force: bool = False, dry_run: bool = False) -> dict:
    """`lerodoc select`: observation.state / action built from slices, names, globs or features."""
    from lerodoc.ops.select import select as run
    return run(Path(dataset), None if output is None else Path(output), state=list(state), action=list(action),
               keep_source=keep_source, in_place=in_place, workers=workers, force=force, dry_run=dry_run).to_json()


def flatten(dataset: PathLike, output: PathLike | None = None, *, columns: Iterable[str] | None = None,
            in_place: bool = False, workers: int = 1, force: bool = False, dry_run: bool = False) -> dict:
    """`lerodoc flatten`: list[1] columns to scalars, constant-length lists to fixed-size lists."""
    from lerodoc.ops.flatten import flatten as run
    return run(Path(dataset), None if output is None else Path(output), in_place=in_place,
               columns=None if columns is None else list(columns), workers=workers, force=force,
               dry_run=dry_run).to_json()


def quantiles(dataset: PathLike, output: PathLike | None = None, *, store: bool = True,
              features: Iterable[str] | None = None, openpi_norm_stats: PathLike | None = None,
              workers: int = 1, force: bool = False) -> dict:
    """`lerodoc quantiles`: exact stats and q01..q99, stored in the dataset's own meta/ (the default), in a copy at
    `output`, or nowhere (`store=False`, a dry run)."""
    from lerodoc.ops.quantiles import quantiles as run
    return run(Path(dataset), None if output is None else Path(output), in_place=store and output is None,
               features=None if features is None else list(features), workers=workers,
               openpi_path=None if openpi_norm_stats is None else Path(openpi_norm_stats), force=force).to_json()


def validate(dataset: PathLike, *, videos: bool = False, deep: bool = False, tolerance_s: float = TOLERANCE_S) -> dict:
    """`lerodoc validate`: the findings (code, severity, file, episode, field, message, hint) and their counts."""
    from lerodoc.ops.validate import validate as run
    return run(Path(dataset), videos=videos, deep=deep, tolerance_s=tolerance_s).to_json()


def repair(dataset: PathLike, output: PathLike | None = None, *, in_place: bool = False, drop_broken: bool = False,
           workers: int = 1, force: bool = False, dry_run: bool = False) -> dict:
    """`lerodoc repair`: metadata rebuilt from the data and video files; what changed and what still needs a
    human (`remaining`)."""
    from lerodoc.ops.repair import repair as run
    return run(Path(dataset), None if output is None else Path(output), in_place=in_place, workers=workers,
               force=force, drop_broken=drop_broken, dry_run=dry_run).to_json()


def report(dataset: PathLike, output: PathLike, *, videos: bool = False, episodes: Iterable[int] | None = None,
           sample: int = 3, workers: int = 1, force: bool = False) -> dict:
    """`lerodoc report`: one self-contained HTML page at `output`; time series and frames of `episodes`, else of
    `sample` episodes spread evenly."""
    from lerodoc.report import build
    return build(Path(dataset), Path(output), videos=videos, sample=sample, workers=workers, force=force,
                 episodes=None if episodes is None else _selection(episodes)).to_json()


def eval_pi05(source: PathLike, dataset: PathLike, *, episodes: Iterable[int] | None = None, stride: int = 1,
              output: PathLike | None = None, force: bool = False, batch_size: int = 16, seed: int = 0,
              device: str = "auto", progress=None) -> dict:
    """`lerodoc eval pi05`: open-loop scores of the policy at `source` (a run, a checkpoint or a `lerodoc export
    lerobot` folder) on `dataset`'s `episodes` (default: the run's held-out episodes on the dataset it trained on,
    else all), every `stride`-th frame: `policy` and `baselines` (hold the last action, the mean action, the base
    weights), each with MAE/MSE overall, per dimension, per horizon step and per episode; the HTML page at
    `output` when given. `progress(label, total) -> tick(n)` reports progress."""
    from lerodoc.pi05.evaluate import evaluate
    return evaluate(Path(source), Path(dataset), episodes=None if episodes is None else _selection(episodes),
                    stride=stride, batch_size=batch_size, seed=seed, device=device,
                    output=None if output is None else Path(output), force=force, progress=progress).report
