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
    from lerodoc.pi05.config import RunConfig
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



def test_quiet_train_prints_only_the_result_and_verbose_the_steps(tmp_path):
    """-q: no start line, no progress line, no per-step line on stderr, only the result on stdout. -v: what the
    default shows (the start line, the progress line) plus one line per metrics flush and the time taken, as every
    command's -v adds detail on stderr. In-process and one step each: a CPU step of the tiny preset is seconds."""
    from tests.fixtures.factory import make_dataset
    from tests.fixtures.tokenizer import train_tokenizer
    from tests.helpers import run_here
    require(importable("sentencepiece"), "lerodoc's train extra is not installed")
    root = make_dataset(tmp_path / "ds", version="v3.0", episodes=2, lengths=[12, 12],
                        cameras=("observation.images.top",)).root
    tokenizer = train_tokenizer(tmp_path / "tok")
    common = ("--preset", "tiny", "--tokenizer", tokenizer, "--steps", "1", "--batch-per-device", "1",
              "--log-every", "1", "--save-every", "0", "--workers", "0", "--weights", "none")
    quiet, verbose = (run_here(flag, "train", "pi05", root, "-o", tmp_path / flag, *common)
                      for flag in ("-q", "-v"))
    for proc in (quiet, verbose):
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("trained 1 steps: loss "), proc.stdout
    assert quiet.stderr == "", quiet.stderr
    said = verbose.stderr
    assert "pi0.5 tiny from random initialisation" in said and "train " in said, said   # start and progress lines
    assert "step 1/1: loss " in said and "lerodoc train pi05: exit 0 in" in said, said
