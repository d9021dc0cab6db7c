"""The options the commands share, declared once each as an Annotated type and spelt out in every signature that
takes them (`in_place: InPlaceOpt = False`), and the one context that pushes what a writing command wrote
(`pushing`)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from lerodoc import render
from lerodoc.conventions import INFO_PATH
from lerodoc.errors import LerodocError, UsageError
from lerodoc.hub import find_dataset, push_outputs
from lerodoc.run.parallel import default_workers


def resolve_dataset(value: Optional[str | Path]) -> Path:
    """DATASET as typed, or the current folder when it is left out and holds meta/info.json (the card's commands
    are typed inside a dataset), or, when no such folder exists, a repo id (owner/name) found as lerobot finds it
    (`hub.find_dataset`: HF_LEROBOT_HOME/owner/name, then the hub caches; a folder of that name here wins). Not
    found, a folder or a repo id, is exit 3 (a repo id's with the `lerodoc download dataset` hint); a DATASET left
    out where the current folder is no dataset, or a file, is a usage error (exit 2).
    `hf://datasets/OWNER/NAME[@REVISION]` is the hub dataset itself, read in place by range requests
    (`lerodoc.access`; exit 5 when the hub refuses or cannot be reached). The arguments that take it are typed
    `str`: Typer before 0.29 makes the callback's answer a Path again when the argument is typed Path, and a hub
    dataset's handle is not one."""
    if value is None:
        try:
            here = Path.cwd()
        except FileNotFoundError:
            raise typer.BadParameter("give a DATASET: the current folder no longer exists (replaced by an "
                                     "--in-place rewrite?); cd into the dataset again", param_hint="DATASET") from None
        if (here / INFO_PATH).is_file():
            return here
        raise typer.BadParameter(f"give a DATASET: the current folder ({here}) holds no {INFO_PATH}",
                                 param_hint="DATASET")
    if str(value).startswith(("hf:/", "hf://")):   # a hub dataset, read by range requests (lerodoc.access)
        from lerodoc.access import open_url   # hashlib and the confined layer: only for an hf:// DATASET
        return open_url(str(value))
    value = Path(value)
    if not value.exists():
        if looks_like_repo_id(str(value)):
            return find_dataset(str(value))
        raise LerodocError("does not exist: no such dataset folder", file=value, field="DATASET",
                           hint="check the path (a repo id is written owner/name); not found is exit 3, a repo id "
                                "or a path alike")
    if not value.is_dir():
        raise typer.BadParameter(f"{str(value)!r} is a file; give the dataset's root folder (the one holding meta/)",
                                 param_hint="DATASET")
    return value


def existing_folder(value: Path) -> Path:
    """A folder argument that must be there (a run, a checkpoint, an export): not found is exit 3, as for DATASET
    (docs/exit-codes.md: one code for not found); a file where a folder goes is a usage error (exit 2)."""
    if not value.exists():
        raise LerodocError("does not exist", file=value, hint="check the path")
    if not value.is_dir():
        raise typer.BadParameter(f"{str(value)!r} is a file; give a folder")
    return value


def looks_like_repo_id(text: str) -> bool:
    """owner/name as the hub spells repo ids (one slash, no leading dot or slash): what DATASET may be instead of a
    folder."""
    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*", text) is not None \
        and ".." not in text


def resolve_datasets(values: list[str]) -> list[Path]:
    """`resolve_dataset` for each of several DATASETs (merge's SOURCES); none may be left out."""
    return [resolve_dataset(v) for v in values]


def working_in(dataset: Path) -> bool:
    """Whether the current folder is the dataset or inside it: a default output path is then put beside the dataset
    instead, as nothing is ever written into a command's input."""
    here, root = Path.cwd().resolve(), Path(dataset).resolve()
    return here == root or here.is_relative_to(root)


DatasetArg = Annotated[Optional[str], typer.Argument(
    help="Dataset root (the folder holding meta/), or a repo id (owner/name) found under HF_LEROBOT_HOME or in "
    "the hub cache, as lerobot finds it, or hf://datasets/OWNER/NAME[@REVISION] where the command only reads "
    "(info, validate, report, quantiles -o, the --dry-run plans): read in place by range requests.",
    callback=resolve_dataset, show_default="the current folder, when it holds meta/info.json")]
OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Where to write the new dataset (must not exist).",
                                         rich_help_panel="Output")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace the output if it exists.",
                                        rich_help_panel="Output")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON report on stdout instead of tables.",
                                       rich_help_panel="Output")]
InPlaceOpt = Annotated[bool, typer.Option("--in-place", help="Rewrite the dataset itself (a new tree is built "
                                          "beside it and swapped in).", rich_help_panel="Output")]
WorkersOpt = Annotated[int, typer.Option("--workers", "-j", min=1, help="Processes to use, at most: copying rows "
                                         "takes one for each 64 MiB of data files (none below 128 MiB).",
                                         show_default="the CPUs available", rich_help_panel="Performance")]
DEFAULT_WORKERS = default_workers()
OptionalOutput = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the result here (unchanged "
                                                        "files are hard links).", rich_help_panel="Output")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan and write nothing.",
                                         rich_help_panel="Output")]


class EngineName(str, Enum):
    pool = "pool"
    ray = "ray"


EngineOpt = Annotated[EngineName, typer.Option("--engine", case_sensitive=False, help="Where the work units run: "
                                               "this machine's processes (pool) or a Ray cluster (ray; pip install "
                                               "'lerodoc[scale]'; see docs/scale.md).", rich_help_panel="Performance")]
RayAddressOpt = Annotated[Optional[str], typer.Option("--ray-address", metavar="ADDR", help="With --engine ray: the "
                                                      "cluster to join (host:6379, ray://host:10001).",
                                                      show_default="RAY_ADDRESS, else a local cluster",
                                                      rich_help_panel="Performance")]


class Target(str, Enum):
    v21 = "v2.1"
    v30 = "v3.0"


EditVersionOpt = Annotated[Optional[Target], typer.Option("--to", case_sensitive=False, help="Version to write "
                                                          "(default: v3.0, the one LeRobotDataset 0.6.1 loads; v2.1 "
                                                          "for lerobot 0.3).")]


def _repo_id(value: Optional[str]) -> Optional[str]:
    if value is not None and not looks_like_repo_id(value):
        raise typer.BadParameter(f"{value!r} is not a hub repository id (owner/name)", param_hint="--push-to-hub")
    return value


PushOpt = Annotated[Optional[str], typer.Option(
    "--push-to-hub", metavar="REPO", callback=_repo_id, rich_help_panel="Output",
    help="Once the output is written and verified, validate it and upload it to this hub dataset repository in "
    "one commit (created if missing; HF_ENDPOINT, HF_TOKEN), as `lerodoc push` does; split pushes each part to "
    "REPO_<part>, as lerobot names them.")]


def refuse_hub_dataset(command: str, datasets: list, *, dry_run: bool = False, output: Path | None = None) -> None:
    """A hub dataset (hf://datasets/...) is read in place and never written, and the writing commands read every byte
    they copy: given one among `datasets`, they stop here (exit 2), unless they only plan (`dry_run`) or, for
    quantiles, store the stats in a local copy (`output`)."""
    from lerodoc.access import is_remote   # hashlib and the confined layer, past --help
    remote = [d for d in datasets if is_remote(d)]
    if not remote or dry_run or (command == "quantiles" and output is not None):
        return
    repo = remote[0].store.repo
    does = {"push": "uploads the files of a local dataset",
            "quantiles": "stores the stats in the dataset itself unless -o names a copy"}.get(
        command, "writes a new dataset from all of its input's files")
    raise UsageError(f"{remote[0]} is a hub dataset, read in place by range requests and never written; `lerodoc "
                     f"{command}` {does}, so it takes a local dataset (a hub dataset is taken by info, validate, "
                     "report, quantiles -o and the --dry-run plans)",
                     hint=f"download it first (lerodoc download dataset {repo} -o DIR, or with --episodes 0-9 for "
                          "some episodes only), then run this command on DIR")


@contextmanager
def pushing(command: str, push_to_hub: Optional[str], datasets: list, *, dry_run: bool = False,
            output: Path | None = None):
    """The body of a writing command, run with `--push-to-hub REPO` (lerobot's editors' push_to_hub): a hub dataset
    among `datasets` is refused first (`refuse_hub_dataset`); the body runs as it is; then, only when it ended well,
    every dataset it wrote (the outputs promoted after verification, `staging.recording_outputs`; a convert with
    nothing to do: the first of `datasets` as it is) is pushed by `hub.push_outputs`, and the result says what was
    pushed (--json: the envelope's `pushed`)."""
    refuse_hub_dataset(command, datasets, dry_run=dry_run, output=output)
    if push_to_hub is None:
        yield
        return
    if dry_run:
        raise typer.BadParameter("--dry-run writes nothing to push; drop one of them", param_hint="--push-to-hub")
    from lerodoc.promote.staging import recording_outputs   # numpy and pyarrow: never on --help
    with render.held_json() as bodies, recording_outputs() as written:
        try:
            yield
        except typer.Exit as stop:   # findings (repair with errors left): the result as it is, nothing pushed
            for body in bodies:
                render.write_json({**body, "pushed": []})
            render.warning(f"nothing was pushed to {push_to_hub}: the command exited {stop.exit_code}")
            raise
    outputs = written or [datasets[0]]   # nothing written: convert found DATASET already at --to
    try:
        pushed = push_outputs(outputs, push_to_hub)
    except LerodocError as exc:
        where = ", ".join(str(o) for o in outputs)
        exc.hint = (f"{exc.hint}; " if exc.hint else "") + f"the output is complete at {where}: `lerodoc push " \
                   f"{where} {push_to_hub}` sends it once the cause is fixed"
        raise
    for body in bodies:
        render.write_json({**body, "pushed": [p.to_json() for p in pushed]})
    if not bodies:
        for p in pushed:
            render.out().print(f"pushed {len(p.files)} files ({render.human_bytes(p.bytes)}) of {p.dataset} to "
                               f"{p.repo}: {p.url}")
