"""A loss-curve PNG with numpy and zlib only: a white canvas, axes, the loss per step and its moving average."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np


def _png(image: np.ndarray) -> bytes:
    """(H, W, 3) uint8 -> PNG bytes."""
    height, width, _ = image.shape
    raw = b"".join(b"\x00" + image[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def _polyline(image: np.ndarray, xs: np.ndarray, ys: np.ndarray, color: tuple[int, int, int]) -> None:
    for x0, y0, x1, y1 in zip(xs[:-1], ys[:-1], xs[1:], ys[1:]):
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        px = np.linspace(x0, x1, n).round().astype(int)
        py = np.linspace(y0, y1, n).round().astype(int)
        image[py, px] = color
    if len(xs) == 1:
        image[int(ys[0]), int(xs[0])] = color


def plot_losses(metrics: Path, out: Path, width: int = 800, height: int = 400) -> None:
    """Loss (log scale) against step from metrics.jsonl: the raw curve in light blue, a 10% moving average in
    dark blue, axes in gray."""
    rows = [json.loads(line) for line in Path(metrics).read_text().splitlines() if line]
    steps = np.array([r["step"] for r in rows], float)
    losses = np.log10(np.maximum([r["loss"] for r in rows], 1e-12))
    image = np.full((height, width, 3), 255, np.uint8)
    margin = 40
    image[margin:height - margin, margin] = image[height - margin, margin:width - margin] = (120, 120, 120)
    if len(rows):
        def to_x(s):
            return margin + 1 + (s - steps.min()) / max(1.0, np.ptp(steps)) * (width - 2 * margin - 2)

        def to_y(v):
            return height - margin - 1 - (v - losses.min()) / max(1e-9, np.ptp(losses)) * (height - 2 * margin - 2)

        window = max(1, len(rows) // 10)
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        _polyline(image, to_x(steps), to_y(losses), (160, 190, 235))
        _polyline(image, to_x(steps[window - 1:]), to_y(smooth), (20, 60, 160))
    out.write_bytes(_png(image))
