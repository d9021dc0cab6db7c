"""docs/img/eval.png: the error-by-horizon plot and one episode's per-joint plot of `lerodoc eval pi05`, side by side,
drawn by the page's own figure code (lerodoc.pi05.eval_page) from an evaluation of RUN on DATASET.

    python scripts/eval_figure.py RUN DATASET [EPISODE] [-o docs/img/eval.png]
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
