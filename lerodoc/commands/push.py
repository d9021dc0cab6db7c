"""`lerodoc push`: upload a dataset to a hub dataset repository, with a generated dataset card."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from lerodoc import api, render
from lerodoc.options import DatasetArg, JsonOpt, refuse_hub_dataset


def push(
    dataset: DatasetArg,
    repo_id: Annotated[str, typer.Argument(help="Dataset repository to upload to (created if missing).")],
    revision: Annotated[Optional[str], typer.Option("--revision", "-r", help="Branch to commit to.")] = None,
    private: Annotated[Optional[bool], typer.Option("--private/--public", help="Visibility of a new repository.")
                       ] = None,
    message: Annotated[Optional[str], typer.Option("--message", "-m", help="Commit message.")] = None,
    json: JsonOpt = False,
) -> None:
    """Validate DATASET, then upload every file of it in one commit to REPO_ID on the hub (HF_ENDPOINT, HF_TOKEN).

    A README.md dataset card (format, totals, features, cameras, lerodoc version) is generated unless
    the dataset has its own. A dataset with validation errors is not pushed.

    Example: lerodoc push data/pusht_v30 me/pusht --private
    """
    refuse_hub_dataset("push", [dataset])
    pushed = api.push(dataset, repo_id, revision=revision, private=private, message=message)
    if json:
        render.print_json(pushed.to_json())
        return
    render.out().print(f"pushed {len(pushed.files)} files ({render.human_bytes(pushed.bytes)}) to {pushed.repo}, "
                       f"{pushed.card}\n{pushed.url}", highlight=False, soft_wrap=True)
