"""`lerodoc eval pi05`: open-loop scores of a trained policy on recorded episodes, against baselines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lerodoc import render
from lerodoc.api import eval_pi05
from lerodoc.options import DatasetArg, ForceOpt, JsonOpt, existing_folder
from lerodoc.selection import format_ranges, parse

app = typer.Typer(name="eval", no_args_is_help=True, help="Evaluate trained policies on recorded episodes.")


@app.command("pi05")
def pi05(
    source: Annotated[Path, typer.Argument(help="A run folder (its newest checkpoint), RUN/checkpoints/step-N, or a "
                                           "folder of `lerodoc export lerobot`.", callback=existing_folder)],
    dataset: DatasetArg = None,
    episodes: Annotated[Optional[list[str]], typer.Option("--episodes", "-e", help="Episodes to evaluate: N, N-M, "
                                                          "N,M-K or a JSON list [N, M] (repeatable).",
                                                          show_default="the run's held-out episodes on the dataset "
                                                          "it trained on, else every episode")] = None,
    stride: Annotated[int, typer.Option(min=1, help="Predict at every N-th frame of each episode.")] = 1,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the HTML page here (outside the "
                                                   "dataset).", rich_help_panel="Output")] = None,
    force: ForceOpt = False,
    batch_size: Annotated[int, typer.Option(min=1, help="Frames per forward pass.")] = 16,
    seed: Annotated[int, typer.Option(help="Seeds the noise each chunk is sampled from.")] = 0,
    device: Annotated[str, typer.Option(help="auto (cuda when available), cpu or cuda.")] = "auto",
    json: JsonOpt = False,
) -> None:
    """Score a pi0.5 policy open-loop on DATASET's recorded episodes, against baselines.

    At each chosen frame the policy predicts an action chunk from the recorded cameras, state and task (a fixed
    noise draw: results repeat); the chunk, unnormalised with the run's quantiles, is compared with the actions
    recorded over the next steps (steps past the episode's end left out). MAE and MSE per action dimension and
    overall, in the dataset's units and divided by each dimension's q01..q99 range; by horizon step; per
    episode. Baselines on the same frames: hold the last recorded action, the dataset's mean action, and the
    weights the run started from (when it started from any). Also the median latency of one chunk at batch 1.

    -o writes a self-contained HTML page (no script, no network): the scores table, error by horizon step,
    predicted against recorded actions per joint for a few episodes, and camera frames.

    Exit 0 when evaluated, 3 when the dataset lacks a feature the policy needs (or shapes it differently).

    Example: lerodoc eval pi05 runs/pusht-pi05 data/pusht --episodes 190-205 -o eval.html
    """
    chosen = parse(episodes, "--episodes") if episodes else None
    numbers = None if chosen is None else [n for lo, hi in chosen.spans for n in range(lo, hi + 1)]
    with render.progress(not json) as track:
        report = eval_pi05(source, dataset, episodes=numbers, stride=stride, output=output, force=force,
                           batch_size=batch_size, seed=seed, device=device, progress=track).to_json()
    if json:
        render.print_json(report)
        return
    names = {"policy": "policy"} | {k: k.replace("_", " ") for k in report["baselines"]}
    rows = [[names["policy"], f"{report['policy']['mae']:.4g}", f"{report['policy']['mse']:.4g}",
             f"{report['policy']['mae_normalised']:.4g}", ""]]
    for name, b in report["baselines"].items():
        if b["available"]:
            rows.append([names[name], f"{b['mae']:.4g}", f"{b['mse']:.4g}", f"{b['mae_normalised']:.4g}",
                         "policy better" if report["beats"][name] else "baseline better or equal"])
        else:
            rows.append([names[name], "-", "-", "-", f"not available: {b['reason']}"])
    render.out().print(render.table(f"{report['frames']} frames of episodes {format_ranges(report['episodes'])}"
                                  + (" (held out)" if report["held_out"] else ""),
                                  ["", "MAE", "MSE", "MAE / (q99 - q01)", "against the policy"], rows))
    render.out().print(f"median latency of one chunk at batch 1 on {report['device']}: "
                       f"{report['latency_ms_median']:.1f} ms" + (f"; page written to {report['output']}"
                                                                  if report["output"] else ""))
