"""`lerodoc export lerobot`: a lerobot 0.6.1 pretrained-policy directory from a lerodoc pi0.5 run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lerodoc import api, render
from lerodoc.options import JsonOpt, existing_folder

app = typer.Typer(name="export", no_args_is_help=True, help="Export trained policies for other tools.")


@app.command("lerobot")
def lerobot(
    source: Annotated[Path, typer.Argument(help="A run folder (its newest checkpoint) or RUN/checkpoints/step-N.",
                                           callback=existing_folder)],
    output: Annotated[Path, typer.Option("--output", "-o", help="The policy directory to write (must not exist "
                                         "or be empty).", rich_help_panel="Output")],
    device: Annotated[str, typer.Option(help="Device of the policy and its processors (cuda, cpu, mps, ...), as "
                                        "lerobot's own checkpoints carry it; lerobot-record and async inference "
                                        "override it with the policy's.")] = "cuda",
    json: JsonOpt = False,
) -> None:
    """Write a lerobot PI05 policy directory: config.json, model.safetensors and the pre/post-processors
    with the dataset's quantile stats, loadable offline by PI05Policy.from_pretrained and
    make_pre_post_processors (lerobot-record --policy.path=DIR).

    The tokenizer step names google/paligemma-3b-pt-224 when the run used PaliGemma's tokenizer and the hub
    cache holds it; otherwise DIR/tokenizer holds the run's SentencePiece model as a tokenizer.json that
    AutoTokenizer loads, and the processor names that folder by its absolute path.

    Example: lerodoc export lerobot runs/pusht-pi05 -o policies/pusht
    """
    summary = api.export_lerobot(source, output, device=device)
    if json:
        render.print_json(summary.to_json())
        return
    render.out().print(f"wrote {summary.output} from step {summary.step} ({summary.checkpoint}): "
                       f"{len(summary.cameras)} camera(s), state {summary.state_dim}, action "
                       f"{summary.action_dim} x {summary.chunk_size}; tokenizer {summary.tokenizer}")
    if not summary.lerobot_shapes:
        render.message("note", "these are not the full preset's shapes; lerobot's PI05Policy builds "
                               "gemma_2b/gemma_300m and loads this directory only where those sizes are patched")
