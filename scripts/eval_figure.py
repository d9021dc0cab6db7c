"""docs/img/eval.png: the error-by-horizon plot and one episode's per-joint plot of `lerodoc eval pi05`, side by side,
drawn by the page's own figure code (lerodoc.pi05.eval_page) from an evaluation of RUN on DATASET; with --results, the
evaluation's report, the run's held-out losses (and those of the runs named by --also) and provenance as a results
file, which docs/eval.md cites.

    python scripts/eval_figure.py RUN DATASET [EPISODE] [-o docs/img/eval.png] [--results docs/results/F.json]
                                  [--also UNTRAINED_RUN]
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lerodoc.pi05.eval_page import episode_figure, horizon_figure  # noqa: E402
from lerodoc.pi05.evaluate import evaluate  # noqa: E402
from lerodoc.report.plots import png  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("dataset")
    parser.add_argument("episode", nargs="?", type=int)
    parser.add_argument("-o", "--output", default="docs/img/eval.png")
    parser.add_argument("--results", type=Path, help="also write the report, held-out losses and provenance here")
    parser.add_argument("--also", type=Path, action="append", default=[],
                        help="another run to evaluate on the same episodes (its report goes to --results too)")
    args = parser.parse_args()
    command = "python scripts/eval_figure.py " + " ".join(sys.argv[1:])
    result = evaluate(Path(args.run), Path(args.dataset))
    episode = args.episode if args.episode is not None else result.report["episodes"][0]
    from PIL import Image
    left = Image.open(io.BytesIO(png(horizon_figure(result.report))))
    right = Image.open(io.BytesIO(png(episode_figure(result, episode))))
    canvas = Image.new("RGB", (left.width + right.width, max(left.height, right.height)), "white")
    canvas.paste(left, (0, 0))
    canvas.paste(right, (left.width, 0))
    canvas.save(args.output, optimize=True)
    print(f"wrote {args.output}: policy MSE {result.report['policy']['mse']:.4g}, baselines "
          + ", ".join(f"{k} {b['mse']:.4g}" for k, b in result.report["baselines"].items() if b["available"]))
    if args.results:
        write_results(args.results, command, [(Path(args.run), result.report)] + [
            (run, evaluate(run, Path(args.dataset), episodes=_episodes(result.report)).report) for run in args.also])


def _episodes(report: dict):
    from lerodoc.selection import parse
    return parse([",".join(map(str, report["episodes"]))], "--episodes")


def write_results(path: Path, command: str, evaluated: list[tuple[Path, dict]]) -> None:
    """Each run's report and held-out losses (metrics.jsonl's val_loss by step), with the provenance of bench's
    results files (git commit, versions, machine, load, command)."""
    import json

    import torch

    from bench.results import provenance, write_results as write
    runs = {}
    for run, report in evaluated:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        config = json.loads((run / "config.json").read_text())
        runs[run.name] = {"config": {k: config.get(k) for k in ("steps", "lr", "batch_per_device", "seed", "weights",
                                                               "val_episodes", "val_samples")},
                          "val_loss": {str(r["step"]): r["val_loss"] for r in rows if "val_loss" in r},
                          "train_seconds": sum(r.get("step_s", 0) for r in rows) or None,
                          "eval": report}
    write({"provenance": provenance(command, torch=torch.__version__), "runs": runs}, path)


if __name__ == "__main__":
    main()
