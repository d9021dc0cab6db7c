"""Typed results of the lerodoc.api calls whose operations report a plain dict (info, export lerobot, eval pi05).

The other calls return their operation's own report dataclass (`ops.convert.ConvertReport`, `hub.Pushed`, ...).
Each class here has the operation's keys as fields, in the order `--json` prints them, and `to_json()` gives that
dict back unchanged: a key the operation adds without a field here fails at `from_json`, not silently."""

from __future__ import annotations

from dataclasses import asdict, dataclass


class _FromJson:
    @classmethod
    def from_json(cls, report: dict):
        return cls(**report)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Info(_FromJson):
    """`lerodoc info`: what a dataset holds, from metadata and container headers only."""
    dataset: str
    codebase_version: str
    fps: float
    robot_type: str | None
    episodes: int
    frames: int
    tasks: int
    totals_in_info: dict
    data_files: int
    size_bytes: int
    features: dict
    cameras: dict
    stats: dict
    transfer: dict | None = None   # a hub dataset's requests and bytes; absent from --json for a local one

    def to_json(self) -> dict:
        report = asdict(self)
        if self.transfer is None:
            del report["transfer"]
        return report


@dataclass
class Export(_FromJson):
    """`lerodoc export lerobot`: the policy directory written and what it holds."""
    output: str
    checkpoint: str
    step: int
    cameras: list
    state_dim: int
    action_dim: int
    chunk_size: int
    tokenizer: str
    lerobot_shapes: bool


@dataclass
class EvalScores(_FromJson):
    """`lerodoc eval pi05`: open-loop scores of a policy and its baselines (docs/eval.md says what each is)."""
    source: str
    source_kind: str
    step: int | None
    dataset: str
    episodes: list
    held_out: bool
    stride: int
    frames: int
    action_horizon: int
    action_key: str
    action_names: list
    cameras: list
    seed: int
    device: str
    policy: dict
    baselines: dict
    beats: dict
    latency_ms_median: float
    output: str | None
    seconds: float


@dataclass
class Trained(_FromJson):
    """`lerodoc train pi05`: what the run did (rank 0's view), where its checkpoints are."""
    steps: int
    final_loss: float | None
    val_loss: float | None
    first_loss: float | None
    samples_per_s: float | None
    data_wait: float | None
    mfu: float | None
    skipped_steps: int
    flops_per_sample: float | None
    output: str
    checkpoint: str | None
    params: int
    rank: int
    world_size: int
    global_batch: int
    max_token_len: int
    weights: str | None
    cameras: list
    held_out: list


@dataclass
class Sweep:
    """`lerodoc train pi05 --sweep`: one row per batch per device tried, in order (an `oom` row ended it)."""
    runs: list[dict]

    @property
    def fits(self) -> list[dict]:
        """The rows that ran (no `oom`)."""
        return [r for r in self.runs if not r.get("oom")]

    @property
    def best(self) -> dict | None:
        """The row with the most samples/s."""
        return max(self.fits, key=lambda r: r["samples_per_s"], default=None)

    def to_json(self) -> dict:
        fits, best = self.fits, self.best
        return {"runs": self.runs, "largest_batch": fits[-1]["batch_per_device"] if fits else None,
                "best_batch": best["batch_per_device"] if best else None}
