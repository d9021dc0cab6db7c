"""`lerodoc train pi05`'s options and RunConfig declare the same defaults: the command line and a RunConfig built
in Python (bench, tests, notebooks) run the same training unless told otherwise."""

from __future__ import annotations

import dataclasses

import typer.main

from lerodoc.cli import app
from tests.helpers import importable, require

require(importable("torch"), "lerodoc's train extra is not installed")

# options whose command-line value is turned into a different RunConfig value, and why
TRANSFORMED = {
    "weights": "None on the command line is the preset's default (pi05.weights.weights_for); in RunConfig it is "
               "already resolved, None meaning random initialisation",
    "wandb_project": "RunConfig holds it only when --wandb is given",
    "skip_checks": "a comma-separated string on the command line, a tuple in RunConfig",
}


def test_train_options_default_as_runconfig():
    from lerodoc.pi05.train import RunConfig
    command = typer.main.get_command(app).commands["train"].commands["pi05"]
    cli = {p.name: p.default for p in command.params}
    fields = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
              for f in dataclasses.fields(RunConfig)
              if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    shared = sorted(set(cli) & set(fields) - set(TRANSFORMED))
    assert len(shared) >= 20, shared
    differ = {name: (cli[name], fields[name]) for name in shared if cli[name] != fields[name]}
    assert not differ, f"the command line and RunConfig disagree on (cli, RunConfig): {differ}"
    assert set(TRANSFORMED) <= set(cli), "a listed exception is no longer an option"


def test_no_measured_numbers_in_trains_help():
    """Figures drift: they live in docs/train.md with their results files, not in --help."""
    import re
    command = typer.main.get_command(app).commands["train"].commands["pi05"]
    for param in command.params:
        text = getattr(param, "help", "") or ""
        assert not re.search(r"\d+(\.\d+)? ?(GB|GiB|samples/s|% MFU|x faster)", text), (param.name, text)
