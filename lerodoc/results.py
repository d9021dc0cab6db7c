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
