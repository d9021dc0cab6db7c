"""lerodoc from Python: one function per command, with typed arguments, returning the command's typed result.

    from lerodoc import api
    report = api.validate("data/pusht", videos=True)
    if report.errors:
        api.repair("data/pusht", "data/pusht_fixed")

Each function opens nothing but what it is given, writes only where it is told (a new folder, or the dataset itself
with `in_place=True`), and returns a dataclass: the operation's report (`report.episodes`, `report.output`, ...),
whose `to_json()` is what the command's `--json` prints (without the envelope's `command`, `version`, `ok` and
`exit_code`). Bad input raises `lerodoc.errors.LerodocError` (its `file`, `episode`, `field` and `hint` locate
it; `UsageError` for arguments that cannot fit the dataset). Episode selections are sets of numbers, never
command-line strings. Every command parses its options, calls one of these and renders what it returns. A DATASET
is a folder or `hf://datasets/OWNER/NAME[@REVISION]` (read in place, where the call only reads). See docs/api.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Mapping

from lerodoc.conventions import TOLERANCE_S
from lerodoc.errors import LerodocError, UsageError
from lerodoc.hub import fetch_asset, fetch_dataset, push_dataset
from lerodoc.results import EvalScores, Export, Info, Sweep, Trained
from lerodoc.selection import Selection, format_ranges

# Every call imports its operation inside: the operations load numpy and pyarrow (convert, merge and validate's add
# 0.29 s to importing lerodoc.cli, median wall at load 3), and lerodoc.cli imports this module through the commands,
# so `lerodoc --help` would pay it (tests/test_startup.py).

PathLike = str | Path
Progress = Callable   # progress(label, total) -> tick(n): how the commands draw their bars

__all__ = ["info", "convert", "merge", "delete", "split", "tasks", "features", "encode", "flatten", "select",
           "quantiles", "validate", "repair", "report", "download_dataset", "download_tokenizer",
           "download_weights", "push", "train_pi05", "export_lerobot", "eval_pi05", "LerodocError", "UsageError"]


def _dataset(value):
    """A dataset argument as the operations take it: a folder, or a hub dataset opened for range reads."""
    if isinstance(value, str) and value.startswith(("hf:/", "hf://")):
        # start-up: --help imports lerodoc.api and not lerodoc.access
        from lerodoc.access import open_url
        return open_url(value)
    return Path(value) if isinstance(value, (str, Path)) else value   # a hub dataset the caller opened


def _optional_path(value: PathLike | None) -> Path | None:
    return None if value is None else Path(value)


def _selection(numbers):
    """Episode numbers as a Selection; a Selection (what the commands parse) as it is, its typed text kept for
    the messages."""
    return numbers if isinstance(numbers, Selection) else Selection.of(int(n) for n in numbers)


def _engine(engine: str, ray_address: str | None):
    # start-up: --help imports lerodoc.api and not lerodoc.run.engine
    from lerodoc.run.engine import make
    return make(engine, ray_address)


def info(dataset: PathLike):
    """`lerodoc info`: version, fps, totals, features, cameras and which stats exist (`results.Info`)."""
    # start-up: lerodoc.ops.info loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.info import describe
    return Info.from_json(describe(_dataset(dataset)))


def convert(dataset: PathLike, output: PathLike, *, to: str | None = None, workers: int = 1, force: bool = False,
            dry_run: bool = False, data_file_size_mb: float | None = None, video_file_size_mb: float | None = None,
            engine: str = "pool", ray_address: str | None = None, progress: Progress | None = None):
    """`lerodoc convert`: v2.x to v3.0, v3.0 to v2.1 (`to`), into `output` (`ops.convert.ConvertReport`)."""
    # start-up: lerodoc.ops.convert loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.convert import convert as run
    return run(_dataset(dataset), Path(output), to=to, workers=workers, force=force,
               data_file_size_mb=data_file_size_mb, video_file_size_mb=video_file_size_mb, progress=progress,
               engine=_engine(engine, ray_address), dry_run=dry_run)


def merge(datasets: Iterable[PathLike], output: PathLike, *, exclude: Mapping[int, Iterable[int]] | None = None,
          episodes: Mapping[int, Iterable[int]] | None = None, to: str = "v3.0", workers: int = 1,
          force: bool = False, dry_run: bool = False, engine: str = "pool", ray_address: str | None = None,
          progress: Progress | None = None):
    """`lerodoc merge`: the datasets in order into `output`; `exclude` / `episodes` map a dataset's position in
    `datasets` to the episode numbers it leaves out / keeps only (`ops.merge.MergeReport`)."""
    # start-up: lerodoc.ops.merge loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.merge import merge as run
    return run([_dataset(d) for d in datasets], Path(output),
               exclude={i: _selection(e) for i, e in (exclude or {}).items()},
               episodes={i: _selection(e) for i, e in (episodes or {}).items()},
               to=to, workers=workers, force=force, dry_run=dry_run, progress=progress,
               engine=_engine(engine, ray_address))


def delete(dataset: PathLike, episodes: Iterable[int], output: PathLike | None = None, *, in_place: bool = False,
           to: str | None = None, workers: int = 1, force: bool = False, dry_run: bool = False,
           progress: Progress | None = None):
    """`lerodoc delete`: the dataset without `episodes`, renumbered, into `output` (or `in_place`)
    (`ops.merge.MergeReport`)."""
    # start-up: lerodoc.ops.delete loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.delete import delete as run
    return run(_dataset(dataset), _optional_path(output), _selection(episodes), to=to, in_place=in_place,
               workers=workers, force=force, dry_run=dry_run, progress=progress)


def split(dataset: PathLike, output: PathLike,
          parts: Mapping[str, float] | Mapping[str, Iterable[int]] | None = None, *,
          fractions: Mapping[str, float] | None = None, episodes: Mapping[str, Iterable[int]] | None = None,
          seed: int | None = None, to: str | None = None, workers: int = 1, force: bool = False,
          dry_run: bool = False, progress: Progress | None = None):
    """`lerodoc split`: each part a complete dataset at `output/<part>`. `parts` maps a part's name to a fraction
    of the episodes ({"train": 0.9, "val": 0.1}; `seed` shuffles first) or to its episode numbers; `fractions`
    and `episodes` say which explicitly (one of the three) (`ops.split.SplitReport`)."""
    # start-up: lerodoc.ops.split loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.split import split as run
    if parts is not None:
        if not parts:
            raise UsageError("give at least one part")
        if all(isinstance(v, (int, float)) for v in parts.values()):
            fractions = parts
        else:
            episodes = parts
    return run(_dataset(dataset), Path(output), fractions=None if fractions is None else dict(fractions),
               parts=None if episodes is None else {name: _selection(e) for name, e in episodes.items()},
               seed=seed, to=to, workers=workers, force=force, dry_run=dry_run, progress=progress)


def tasks(dataset: PathLike, output: PathLike | None = None, *, changes: Iterable[str] = (),
          from_file: PathLike | None = None, in_place: bool = False, workers: int = 1, force: bool = False,
          dry_run: bool = False):
    """`lerodoc tasks`: task texts edited by `changes` ('OLD TEXT=NEW TEXT', as --set takes them) or a JSON file
    (`from_file`: {"old": "new"} or the texts by task_index) (`ops.tasks.TasksReport`)."""
    # start-up: lerodoc.ops.tasks loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.tasks import edit_tasks
    return edit_tasks(_dataset(dataset), _optional_path(output), set_=list(changes),
                      from_file=_optional_path(from_file), in_place=in_place, dry_run=dry_run, workers=workers,
                      force=force)


def features(dataset: PathLike, output: PathLike | None = None, *, drop: Iterable[str] = (),
             rename: Mapping[str, str] | Iterable[str] = (), in_place: bool = False, workers: int = 1,
             force: bool = False, dry_run: bool = False):
    """`lerodoc features`: features and cameras dropped, or renamed ({"old": "new"}, or 'OLD=NEW' as --rename
    takes them) (`ops.features.FeaturesReport`)."""
    # start-up: lerodoc.ops.features loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.features import edit_features
    renames = [f"{old}={new}" for old, new in rename.items()] if isinstance(rename, Mapping) else list(rename)
    return edit_features(_dataset(dataset), _optional_path(output), drop=list(drop), rename=renames,
                         in_place=in_place, dry_run=dry_run, workers=workers, force=force)


def encode(dataset: PathLike, output: PathLike | None = None, *, reencode: bool = False, codec: str | None = None,
           gop: int | None = None, crf: int | None = None, pix_fmt: str | None = None, preset: str | None = None,
           cameras: Iterable[str] = (), in_place: bool = False, workers: int = 1, force: bool = False,
           dry_run: bool = False, progress: Progress | None = None):
    """`lerodoc encode`: image features encoded as video features, or (`reencode`) the video files whose settings
    change re-encoded (`ops.encode.EncodeReport`)."""
    # start-up: lerodoc.ops.encode loads av, numpy, pyarrow (--help imports this module)
    from lerodoc.ops.encode import encode as run
    return run(_dataset(dataset), _optional_path(output), reencode=reencode, codec=codec, gop=gop, crf=crf,
               pix_fmt=pix_fmt, preset=preset, cameras=list(cameras), in_place=in_place, dry_run=dry_run,
               workers=workers, force=force, progress=progress)


def select(dataset: PathLike, output: PathLike | None = None, *, state: Iterable[str] = (),
           action: Iterable[str] = (), keep_source: bool = False, in_place: bool = False, workers: int = 1,
           force: bool = False, dry_run: bool = False):
    """`lerodoc select`: observation.state / action built from slices, names, globs or features
    (`ops.select.SelectReport`)."""
    # start-up: lerodoc.ops.select loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.select import select as run
    return run(_dataset(dataset), _optional_path(output), state=list(state), action=list(action),
               keep_source=keep_source, in_place=in_place, workers=workers, force=force, dry_run=dry_run)


def flatten(dataset: PathLike, output: PathLike | None = None, *, columns: Iterable[str] | None = None,
            in_place: bool = False, workers: int = 1, force: bool = False, dry_run: bool = False):
    """`lerodoc flatten`: list[1] columns to scalars, constant-length lists to fixed-size lists
    (`ops.flatten.FlattenReport`)."""
    # start-up: lerodoc.ops.flatten loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.flatten import flatten as run
    return run(_dataset(dataset), _optional_path(output), in_place=in_place,
               columns=None if columns is None else list(columns), workers=workers, force=force, dry_run=dry_run)


def quantiles(dataset: PathLike, output: PathLike | None = None, *, store: bool = True,
              features: Iterable[str] | None = None, openpi_norm_stats: PathLike | None = None,
              openpi_state_key: str | None = None, openpi_action_key: str | None = None, budget_mb: int = 512,
              workers: int = 1, force: bool = False, engine: str = "pool", ray_address: str | None = None):
    """`lerodoc quantiles`: exact stats and q01..q99, stored in the dataset's own meta/ (the default), in a copy at
    `output`, or nowhere (`store=False`, a dry run); `budget_mb` of memory holds values
    (`ops.quantiles.QuantilesReport`)."""
    # start-up: lerodoc.ops.quantiles loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.quantiles import quantiles as run
    return run(_dataset(dataset), _optional_path(output), in_place=store and output is None,
               features=None if features is None else list(features), workers=workers, budget=budget_mb << 17,
               openpi_path=_optional_path(openpi_norm_stats),
               openpi_features={"state": openpi_state_key, "actions": openpi_action_key}, force=force,
               engine=_engine(engine, ray_address))


def validate(dataset: PathLike, *, videos: bool = False, deep: bool = False, tolerance_s: float = TOLERANCE_S,
             engine: str = "pool", ray_address: str | None = None, stats: bool | None = None):
    """`lerodoc validate`: the findings (code, severity, file, episode, field, message, hint) and their counts
    (`ops.validate.ValidateReport`: `errors`, `warnings`, `findings`)."""
    # start-up: lerodoc.ops.validate loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.validate import validate as run
    return run(_dataset(dataset), videos=videos, deep=deep, tolerance_s=tolerance_s,
               engine=_engine(engine, ray_address), stats=stats)


def repair(dataset: PathLike, output: PathLike | None = None, *, in_place: bool = False, drop_broken: bool = False,
           workers: int = 1, force: bool = False, dry_run: bool = False):
    """`lerodoc repair`: metadata rebuilt from the data and video files; what changed and what still needs a
    human (`remaining`) (`ops.repair.RepairReport`)."""
    # start-up: lerodoc.ops.repair loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.repair import repair as run
    return run(_dataset(dataset), _optional_path(output), in_place=in_place, workers=workers, force=force,
               drop_broken=drop_broken, dry_run=dry_run)


def report(dataset: PathLike, output: PathLike, *, videos: bool = False, episodes: Iterable[int] | None = None,
           sample: int = 3, tolerance_s: float = TOLERANCE_S, workers: int = 1, force: bool = False,
           progress: Progress | None = None):
    """`lerodoc report`: one self-contained HTML page at `output`; time series and frames of `episodes`, else of
    `sample` episodes spread evenly (`report.Report`)."""
    # start-up: lerodoc.report loads numpy, pyarrow (--help imports this module)
    from lerodoc.report.assemble import build
    return build(_dataset(dataset), Path(output), videos=videos, sample=sample, workers=workers,
                 tolerance_s=tolerance_s, force=force, progress=progress,
                 episodes=None if episodes is None else _selection(episodes))


def download_dataset(repo_id: str, *, revision: str | None = None, output: PathLike | None = None,
                     source: str = "hf", include: Iterable[str] = (), episodes: Iterable[int] | None = None,
                     force: bool = False, progress: Progress | None = None):
    """`lerodoc download dataset`: the repository fetched and validated (`hub.Fetched`, with `findings`), or with
    `episodes` only those, written to `output` as a complete dataset of their own (`ops.download.DownloadReport`)."""
    if episodes is None:
        return fetch_dataset(repo_id, revision=revision, output=_optional_path(output), source=source,
                             include=list(include))
    # start-up: lerodoc.ops.download loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.download import download_episodes, refuse_partial
    refuse_partial(_optional_path(output), list(include), source)
    return download_episodes(repo_id, _selection(episodes), _optional_path(output), revision=revision, force=force,
                             progress=progress)


def download_tokenizer(name: str = "paligemma", *, repo: str | None = None, revision: str | None = None,
                       output: PathLike | None = None, source: str = "hf"):
    """`lerodoc download tokenizer`: fetched, then loaded as a SentencePiece model (`hub.Fetched`)."""
    return fetch_asset("tokenizer", name, repo=repo, revision=revision, output=_optional_path(output),
                       source=source)


def download_weights(name: str = "pi05_base", *, repo: str | None = None, revision: str | None = None,
                     output: PathLike | None = None, source: str = "hf"):
    """`lerodoc download weights`: model.safetensors fetched, its header checked against its size
    (`hub.Fetched`)."""
    return fetch_asset("weights", name, repo=repo, revision=revision, output=_optional_path(output),
                       source=source)


def push(dataset: PathLike, repo_id: str, *, revision: str | None = None, private: bool | None = None,
         message: str | None = None):
    """`lerodoc push`: the dataset validated, then uploaded in one commit with a generated card (`hub.Pushed`)."""
    return push_dataset(_dataset(dataset), repo_id, revision=revision, private=private, message=message)


def train_pi05(dataset: PathLike, output: PathLike, *, preset: str = "full", weights: str | None = None,
               tokenizer: str = "paligemma", action_key: str | None = None, state_key: str | None = None,
               cameras: Iterable[str] = (), skip_checks: Iterable[str] = (), state_in_prompt: bool = True,
               action_horizon: int = 0, max_token_len: int = 0, val_episodes: Iterable[int] | None = None,
               val_fraction: float | None = None, val_every: int = 100, val_samples: int = 256, steps: int = 1000,
               batch_per_device: int = 4, lr: float = 2.5e-5, min_lr: float = 2.5e-6, warmup_steps: int | None = None,
               weight_decay: float = 0.01, clip: float = 1.0, ema: float | None = None, seed: int = 0,
               precision: str = "auto", device: str = "auto", compile: bool = False, float8: str | None = None,
               gradient_checkpointing: bool = False, fsdp: bool = False, fsdp_reshard: bool = True, workers: int = 0,
               nproc: int | None = None, save_every: int = 1000, keep: int = 2, log_every: int = 10,
               wandb_project: str | None = None, tensorboard: bool = False, resume: bool = False,
               sweep_batches: Iterable[int] | None = None, progress: bool = False):
    """`lerodoc train pi05`: preflight (every missing prerequisite named at once, before torch loads), then pi0.5
    fine-tuning of `preset` from `weights` (None: pi05_base for full, random for tiny; "none": random) into the run
    folder `output`, as one process or, on several GPUs (`nproc`), a launched job; `val_episodes` /
    `val_fraction` are held out. Returns rank 0's `results.Trained` (None in the other ranks' processes), or with
    `sweep_batches` the batch sweep (`results.Sweep`). `state_key="none"` trains without state, `cameras=["none"]`
    without images; `progress` draws the progress line. docs/train.md says what each option does."""
    from lerodoc.pi05.preflight import preflight_command   # before torch loads: every missing prerequisite at once
    from lerodoc.pi05.weights import weights_for
    dataset, output, cameras, skip_checks = _dataset(dataset), Path(output), list(cameras), list(skip_checks)
    weights = weights_for(preset, weights)
    sweep = sweep_batches is not None
    preflight_command(dataset, output, resume, sweep, tokenizer, weights, action_key, state_key, cameras,
                      ",".join(skip_checks) or None)
    # start-up: lerodoc.pi05.tracking loads numpy (--help imports this module)
    from lerodoc.pi05.tracking import require
    require(wandb_project is not None, tensorboard)
    # start-up: lerodoc.pi05.config loads av, numpy, pyarrow, torch (--help imports this module)
    from lerodoc.pi05.config import RunConfig
    from lerodoc.pi05.data import DataSpec
    # start-up: lerodoc.pi05.launch loads av, numpy, pyarrow, rich, safetensors, torch (--help imports this module)
    from lerodoc.pi05.launch import run_job
    from lerodoc.pi05.preflight import AUTO
    no_state = state_key is not None and state_key.lower() == "none"
    data = DataSpec(action_key=action_key or AUTO, state_key=None if no_state else (state_key or AUTO),
                    cameras=tuple(c.lower() if c.lower() == "none" else c for c in cameras),
                    action_horizon=action_horizon, image_size=0, state_in_prompt=state_in_prompt and not no_state,
                    max_token_len=max_token_len)
    run = RunConfig(dataset=str(dataset), output=str(output), tokenizer=tokenizer, preset=preset, weights=weights,
                    steps=steps, batch_per_device=batch_per_device, lr=lr, min_lr=min_lr, warmup_steps=warmup_steps,
                    weight_decay=weight_decay, clip=clip, ema=ema, seed=seed, precision=precision, device=device,
                    compile=compile, float8=float8, gradient_checkpointing=gradient_checkpointing, fsdp=fsdp,
                    fsdp_reshard=fsdp_reshard, workers=workers, save_every=save_every, keep=keep,
                    log_every=log_every, data=data, wandb_project=wandb_project, tensorboard=tensorboard,
                    val_episodes=None if val_episodes is None else format_ranges({int(n) for n in val_episodes}),
                    val_fraction=val_fraction, val_every=val_every, val_samples=val_samples,
                    skip_checks=tuple(c.strip().upper() for c in skip_checks if c.strip()))
    result = run_job(run, resume=resume, progress=progress, nproc=nproc,
                     sweep_batches=list(sweep_batches) if sweep else None)
    if result is None:      # not the job's first process: rank 0's process reports
        return None
    return Sweep(result) if sweep else Trained.from_json(result)


def export_lerobot(source: PathLike, output: PathLike, *, device: str = "cuda"):
    """`lerodoc export lerobot`: a lerobot 0.6.1 PI05 policy directory from a run or checkpoint
    (`results.Export`)."""
    # start-up: lerodoc.pi05.export loads numpy, pyarrow (--help imports this module)
    from lerodoc.pi05.export import export_lerobot as run
    return Export.from_json(run(Path(source), Path(output), device=device))


def eval_pi05(source: PathLike, dataset: PathLike, *, episodes: Iterable[int] | None = None, stride: int = 1,
              output: PathLike | None = None, force: bool = False, batch_size: int = 16, seed: int = 0,
              device: str = "auto", progress: Progress | None = None):
    """`lerodoc eval pi05`: open-loop scores of the policy at `source` (a run, a checkpoint or a `lerodoc export
    lerobot` folder) on `dataset`'s `episodes` (default: the run's held-out episodes on the dataset it trained on,
    else all), every `stride`-th frame: `policy` and `baselines` (hold the last action, the mean action, the base
    weights), each with MAE/MSE overall, per dimension, per horizon step and per episode; the HTML page at
    `output` when given (`results.EvalScores`)."""
    # start-up: lerodoc.pi05.evaluate loads av, numpy, pyarrow, torch (--help imports this module)
    from lerodoc.pi05.evaluate import evaluate
    return EvalScores.from_json(evaluate(
        Path(source), _dataset(dataset), episodes=None if episodes is None else _selection(episodes),
        stride=stride, batch_size=batch_size, seed=seed, device=device, output=_optional_path(output), force=force,
        progress=progress).report)
