"""`lerodoc export lerobot`: a tiny-preset run's policy directory loads in lerobot 0.6.1 (PI05Policy.from_pretrained
and make_pre_post_processors, in the reference venv) and, for the same raw observation and noise, its actions are
lerodoc's own (lerodoc.pi05.policy), normalisation, prompt, tokeniser and unnormalisation included."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.factory import make_dataset
from tests.fixtures.tokenizer import train_tokenizer
from tests.helpers import importable, require, run_cli

require(importable("torch") and importable("sentencepiece"), "lerodoc's train extra is not installed")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ORACLE = REPO / "tests/lerobot_oracle"


@functools.cache
def venv_with_pi() -> str:
    """The reference venv's python if it imports lerobot's pi05 (and transformers), else ''."""
    from tests.lerobot_oracle import lerobot_python
    python = str(lerobot_python())
    check = subprocess.run([python, "-c", "import transformers, lerobot.policies.pi05"], capture_output=True)
    return "" if check.returncode else python


def lerobot_pi(tmp: Path):
    """A runner for scripts in the reference venv with lerobot[pi] (transformers): offline, HF_HOME in `tmp`,
    the repository on PYTHONPATH (bench.lerobot_pi05). Fails under CI, skips elsewhere, when it lacks them."""
    python = str(venv_with_pi())
    if not python:
        require(False, "the reference venv lacks lerobot[pi] (transformers): scripts/lerobot-venv.sh installs it")
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
           "OMP_NUM_THREADS": "1"}

    def run(script: str, *args) -> subprocess.CompletedProcess:
        proc = subprocess.run([python, str(ORACLE / script), *map(str, args)], capture_output=True, text=True,
                              env=env, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc
    return run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished tiny run: 2 cameras, 6-dim state and action, a SentencePiece tokenizer made on the spot."""
    tmp = tmp_path_factory.mktemp("export")
    make_dataset(tmp / "ds", version="v3.0", episodes=2, lengths=[30, 40], bframes=2)
    tokenizer = train_tokenizer(tmp / "tok")
    out = tmp / "run"
    run_cli("train", "pi05", tmp / "ds", "-o", out, "--tokenizer", tokenizer, "--preset", "tiny", "--steps", "6",
            "--batch-per-device", "4", "--save-every", "6", "--workers", "0", "--lr", "1e-2")
    return out


def observation(policy, batch: int = 3, seed: int = 0):
    """Random images, states mostly within the run's q01..q99 (some below: the prompt's -1 bin), tasks, noise."""
    g = np.random.default_rng(seed)
    size = policy.spec.image_size
    images = {c: g.integers(0, 256, (batch, size, size, 3), dtype=np.uint8) for c in policy.spec.cameras}
    s = policy.norm_stats["state"]
    q01, q99 = np.asarray(s["q01"]), np.asarray(s["q99"])
    state = (q01 + (q99 - q01) * g.uniform(-0.1, 1.05, (batch, len(q01)))).astype(np.float32)
    noise = torch.randn(batch, policy.model.config.action_horizon, 32, generator=torch.Generator().manual_seed(seed))
    return images, state, ["pick up the cube", "place the cube", " pick_up the cube "][:batch], noise


def test_exported_policy_gives_lerodocs_actions_in_lerobot(run, tmp_path):
    from safetensors.torch import load_file, save_file

    from lerodoc.pi05.policy import Policy

    lerobot = lerobot_pi(tmp_path)
    summary = json.loads(run_cli("export", "lerobot", run, "-o", tmp_path / "policy", "--json").stdout)
    policy_dir = tmp_path / "policy"
    assert summary["step"] == 6 and summary["cameras"] == ["observation.images.top", "observation.images.wrist"]
    config = json.loads((policy_dir / "config.json").read_text())
    assert config["type"] == "pi05" and config["chunk_size"] == 10 and config["image_resolution"] == [56, 56]
    assert config["normalization_mapping"] == {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}
    assert summary["tokenizer"] == str((policy_dir / "tokenizer").resolve())   # not PaliGemma: a folder beside

    # the checkpoint's own lerobot/ folder is this directory but for where the tokenizer folder lives
    inside = run / "checkpoints/step-000006/lerobot"
    for name in ("config.json", "policy_postprocessor.json", "model.safetensors"):
        assert (inside / name).read_bytes() == (policy_dir / name).read_bytes(), name
    assert (inside / "model.safetensors").samefile(run / "checkpoints/step-000006/model.safetensors")  # a hard link
    for path in policy_dir.glob("*.safetensors"):
        assert (inside / path.name).read_bytes() == path.read_bytes(), path.name
    pre = (inside / "policy_preprocessor.json").read_text()
    assert pre == (policy_dir / "policy_preprocessor.json").read_text().replace(
        summary["tokenizer"], str((run / "tokenizer").resolve()))
    assert (run / "tokenizer/tokenizer.json").read_bytes() == (policy_dir / "tokenizer/tokenizer.json").read_bytes()

    policy = Policy.load(run)
    images, state, tasks, noise = observation(policy)
    ours = policy.predict(images, state, tasks, noise=noise)
    s = policy.norm_stats["state"]
    assert (state < np.asarray(s["q01"])).any()   # some state below q01: lerobot's prompt bin -1 is exercised
    save_file({**{f"image.{c}": torch.from_numpy(v) for c, v in images.items()}, "state": torch.from_numpy(state),
               "noise": noise}, str(tmp_path / "inputs.safetensors"))
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    lerobot("policy_infer.py", policy_dir, tmp_path / "inputs.safetensors", tmp_path / "tasks.json",
            tmp_path / "out.safetensors")
    theirs = load_file(str(tmp_path / "out.safetensors"))

    inputs = policy.inputs(images, state, tasks)
    mask = theirs["token_masks"].bool()
    assert torch.equal(mask, inputs["token_masks"]) and torch.equal(theirs["tokens"][mask], inputs["tokens"][mask])
    a = policy.norm_stats["actions"]
    q01, q99 = np.asarray(a["q01"], np.float32), np.asarray(a["q99"], np.float32)
    theirs_actions = theirs["actions"].numpy()
    assert theirs_actions.shape == ours.shape == (3, 10, 6)
    # 1e-5 in the normalised space the model predicts in, and so 1e-5 of each channel's half-range (q99 - q01) / 2
    # in raw units (this dataset's actions span ~1e3: float32's own step there is ~1e-4)
    normalised = [2 * (x - q01) / (q99 - q01) - 1 for x in (theirs_actions, ours)]
    np.testing.assert_allclose(*normalised, rtol=0, atol=1e-5)
    assert (np.abs(theirs_actions - ours) <= 1e-5 * np.maximum(1, (q99 - q01) / 2)).all()
    assert np.abs(normalised[1]).max() > 0.1   # a trained policy, not zeros


def test_tokenizer_folder_encodes_as_sentencepiece_bpe_with_byte_fallback(tmp_path):
    """PaliGemma's tokenizer is a BPE model with byte fallback and no dummy prefix: a model of that kind, written
    as a tokenizer folder, gives SentencePiece's ids in transformers' AutoTokenizer."""
    import sentencepiece as spm

    from lerodoc.formats.jsonl import write_json
    from lerodoc.pi05.export import tokenizer_files

    lerobot = lerobot_pi(tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"Task: pick up cube {i}, State: {i % 256} {3 * i % 256};\nAction: "
                                for i in range(300)))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "bpe"), vocab_size=400,
                                   model_type="bpe", byte_fallback=True, normalization_rule_name="identity",
                                   add_dummy_prefix=False, remove_extra_whitespaces=False,
                                   user_defined_symbols=["\n"], pad_id=0, eos_id=1, bos_id=2, unk_id=3,
                                   hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "bpe.model"))
    texts = ["Task: pick up cube 7, State: 1 -1 255;\nAction: ", "Task:  place the zebra ;\nAction: ",
             " é 日本 text"]
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    tok, config = tokenizer_files(tmp_path / "bpe.model", 64)
    write_json(folder / "tokenizer.json", tok)
    write_json(folder / "tokenizer_config.json", config)
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    proc = lerobot("policy_tokenize.py", folder, tmp_path / "texts.json")
    assert json.loads(proc.stdout) == sp.encode(texts, add_bos=True)


def test_export_refuses_a_run_without_state_in_the_prompt_and_a_taken_folder(run, tmp_path):
    step = tmp_path / "step"
    shutil.copytree(run / "checkpoints/step-000006", step)
    trainer = json.loads((step / "trainer.json").read_text())
    trainer["run"]["data"]["state_in_prompt"] = False
    (step / "trainer.json").write_text(json.dumps(trainer))
    proc = run_cli("export", "lerobot", step, "-o", tmp_path / "policy", check=False)
    assert proc.returncode == 3 and "state in the prompt" in " ".join(proc.stderr.split())
    assert not (tmp_path / "policy").exists() and "Traceback" not in proc.stderr
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken/file").write_text("x")
    proc = run_cli("export", "lerobot", run, "-o", tmp_path / "taken", check=False)
    assert proc.returncode == 3 and "already exists" in proc.stderr
    before = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    proc = run_cli("export", "lerobot", run, "-o", run / "policy", check=False)   # never inside its input
    assert proc.returncode == 3 and "-o is inside the input" in " ".join(proc.stderr.split())
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == before
    proc = run_cli("export", "lerobot", tmp_path / "taken", "-o", tmp_path / "p2", check=False)
    assert proc.returncode == 3 and "trainer.json" in proc.stderr


# ------------------------------------------------------------------------------------------------------------
# The reverse: --weights takes a lerobot-made PI05 policy directory


def first_batch(dataset: Path, tokenizer: Path, tmp: Path) -> tuple[dict, object]:
    """lerodoc's step-0 batch of a tiny run (as `lerodoc train pi05 --batch-per-device 4 --seed 0` makes it),
    as model inputs, and the run's setup."""
    from lerodoc.pi05.data import DataSpec
    from lerodoc.pi05.feed import step_batches, to_device
    from lerodoc.pi05.train import RunConfig, prepare
    data = DataSpec(action_key="action", state_key="observation.state", cameras=(), action_horizon=0,
                    image_size=0, state_in_prompt=True, max_token_len=0)
    setup = prepare(RunConfig(dataset=str(dataset), output=str(tmp / "unused"), tokenizer=str(tokenizer),
                              preset="tiny", batch_per_device=4, workers=0, data=data), resume=False, writes=False)
    batch = to_device(next(step_batches(setup, 0, 1)), torch.device("cpu"))
    return batch, setup


def test_lerobot_policy_directory_starts_a_run_at_lerobots_loss(run, tmp_path):
    from dataclasses import asdict

    from safetensors.torch import load_file, save_file

    lerobot = lerobot_pi(tmp_path)
    config = json.loads((run / "config.json").read_text())
    dataset, tokenizer = Path(config["dataset"]), Path(config["tokenizer"])
    batch, setup = first_batch(dataset, tokenizer, tmp_path)
    inputs = {f"image.{i}": image.contiguous() for i, image in enumerate(batch["images"])}
    inputs |= {k: batch[k].contiguous() for k in ("tokens", "actions", "noise", "time")}
    inputs |= {k: batch[k].to(torch.uint8).contiguous() for k in ("token_masks", "action_is_pad")}
    save_file(inputs, str(tmp_path / "batch.safetensors"))
    stats = {key: {k: np.ravel(v).astype(np.float32).tolist() for k, v in setup.dataset.stats[key].items()
                   if k in ("mean", "std", "min", "max", "q01", "q99")} for key in ("observation.state", "action")}
    policy = tmp_path / "lerobot_policy"
    spec = {"dir": str(policy), "model": asdict(setup.config), "cameras": list(setup.run.data.cameras),
            "state_dim": len(stats["observation.state"]["q01"]), "tokenizer_max_length": 48, "stats": stats,
            "batch": str(tmp_path / "batch.safetensors"), "loss": str(tmp_path / "loss.safetensors")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    lerobot("policy_make.py", tmp_path / "spec.json")
    theirs = load_file(spec["loss"])["loss"].item()

    out = tmp_path / "run"
    run_cli("train", "pi05", dataset, "-o", out, "--tokenizer", tokenizer, "--preset", "tiny", "--steps", "1",
            "--batch-per-device", "4", "--workers", "0", "--log-every", "1", "--save-every", "0", "--weights", policy)
    ours = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["loss"]
    assert abs(ours - theirs) < 1e-5 * max(1.0, abs(theirs)), (ours, theirs)

    # the same directory with other cameras, or other quantiles, is refused before training
    def refused(edit, words: str) -> None:
        other = tmp_path / f"other-{words.split()[0]}"
        shutil.copytree(policy, other)
        edit(other)
        proc = run_cli("train", "pi05", dataset, "-o", tmp_path / "refused", "--tokenizer", tokenizer, "--preset",
                       "tiny", "--steps", "1", "--workers", "0", "--weights", other, check=False)
        text = " ".join(proc.stderr.split())
        assert proc.returncode == 3 and words in text and "Traceback" not in text, proc.stderr
        assert not (tmp_path / "refused").exists()

    def rename_camera(folder: Path) -> None:
        cfg = json.loads((folder / "config.json").read_text())
        cfg["input_features"]["observation.images.side"] = cfg["input_features"].pop("observation.images.wrist")
        (folder / "config.json").write_text(json.dumps(cfg))

    def shift_quantiles(folder: Path) -> None:
        path = next(folder.glob("policy_preprocessor_step_*_normalizer_processor.safetensors"))
        state = load_file(str(path))
        state["action.q99"] = state["action.q99"] + 1
        save_file(state, str(path))

    refused(rename_camera, "sees cameras observation.images.top, observation.images.side")
    refused(shift_quantiles, "other q99 stats")


def test_paligemma_from_the_hub_cache_is_named_not_copied(run, tmp_path):
    """A run trained with --tokenizer paligemma: the processor names google/paligemma-3b-pt-224 when the hub cache
    holds its tokenizer files (AutoTokenizer loads it offline there), and writes a folder when it holds only the
    SentencePiece model (what `lerodoc download tokenizer paligemma` fetches)."""
    step = tmp_path / "step"
    shutil.copytree(run / "checkpoints/step-000006", step)
    trainer = json.loads((step / "trainer.json").read_text())
    model_file = Path(trainer["run"]["tokenizer"])
    trainer["run"]["tokenizer"] = "paligemma"
    (step / "trainer.json").write_text(json.dumps(trainer))
    repo = tmp_path / "hf/hub/models--google--paligemma-3b-pt-224"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs/main").write_text("0" * 40)
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    shutil.copyfile(model_file, snapshot / "tokenizer.model")
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}

    def export(name: str) -> dict:
        summary = json.loads(run_cli("export", "lerobot", step, "-o", tmp_path / name, "--json", env=env).stdout)
        steps = json.loads((tmp_path / name / "policy_preprocessor.json").read_text())["steps"]
        assert [s["config"]["tokenizer_name"] for s in steps if s["registry_name"] == "tokenizer_processor"] == [
            summary["tokenizer"]]
        return summary

    assert export("model-only")["tokenizer"] == str((tmp_path / "model-only/tokenizer").resolve())
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tmp_path / "model-only/tokenizer" / name, snapshot / name)
    assert export("cached")["tokenizer"] == "google/paligemma-3b-pt-224"
    assert not (tmp_path / "cached/tokenizer").exists()


def test_weights_hub_id_resolves_from_the_cache_offline(run, tmp_path):
    """--weights owner/name: a lerobot policy repo in the Hugging Face cache is found with HF_HUB_OFFLINE=1 (the
    policy folder, so its config is checked); one that is not cached is a hub error (exit 5), not a traceback."""
    run_cli("export", "lerobot", run, "-o", tmp_path / "policy", "--device", "cpu")
    repo = tmp_path / "hf/hub/models--someone--policy"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs/main").write_text("1" * 40)
    shutil.copytree(tmp_path / "policy", repo / "snapshots" / ("1" * 40))
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    show = "from lerodoc.pi05.weights import locate_weights; print(*locate_weights('someone/policy'), sep='|')"
    proc = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    weights, folder = proc.stdout.strip().split("|")
    assert Path(weights).name == "model.safetensors" and (Path(folder) / "config.json").is_file()
    config = json.loads((run / "config.json").read_text())
    missing = run_cli("train", "pi05", config["dataset"], "-o", tmp_path / "r", "--tokenizer", config["tokenizer"],
                      "--preset", "tiny", "--weights", "someone/other", check=False, env=env)
    assert missing.returncode == 5 and "someone/other" in missing.stderr and "Traceback" not in missing.stderr
