"""Hub I/O: the named assets, downloads through huggingface_hub or ModelScope, offline lookup, dataset push.

Nothing here waits on the network to find something that is already on disk: `locate` reads local paths
and the Hugging Face cache only. Downloads honour HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE and HF_TOKEN
(MODELSCOPE_ENDPOINT and MODELSCOPE_API_TOKEN for `--source modelscope`); completed files are kept, so
running a download again fetches only what is missing, and a transfer cut mid-file resumes by Range request.
"""

from __future__ import annotations

import json
import os
import struct
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lerodoc import __version__
from lerodoc.conventions import INFO_PATH, WRITES
from lerodoc.errors import LerodocError
from lerodoc.hub_errors import HubError, hub_errors, offline, reach_hub


@dataclass(frozen=True)
class Asset:
    """A named file lerodoc's trainer needs, where it is published and which `lerodoc train` flag takes it."""
    kind: str                   # "tokenizer" or "weights"
    name: str
    repo: str                   # Hugging Face model repository
    modelscope_repo: str        # the usual ModelScope mirror; --repo overrides either
    file: str                   # what `locate` returns
    extras: tuple[str, ...]     # fetched alongside `file`
    train_flag: str


ASSETS = {a.name: a for a in (
    Asset("tokenizer", "paligemma", "google/paligemma-3b-pt-224", "AI-ModelScope/paligemma-3b-pt-224",
          "tokenizer.model", (), "--tokenizer"),
    Asset("weights", "pi05_base", "lerobot/pi05_base", "lerobot/pi05_base",
          "model.safetensors", ("config.json",), "--weights"),
)}
KINDS = {"tokenizer": "tokenizer.model", "weights": "model.safetensors"}
SOURCES = ("hf", "modelscope")


def asset(kind: str, name: str) -> Asset:
    known = [a.name for a in ASSETS.values() if a.kind == kind]
    if name not in ASSETS or ASSETS[name].kind != kind:
        raise LerodocError(f"unknown {kind} {name!r}", hint=f"known: {', '.join(known)}; or pass --repo")
    return ASSETS[name]


def download_command(a: Asset) -> str:
    return f"lerodoc download {a.kind} {a.name}"


def modelscope_dir(repo: str) -> Path:
    """Where a ModelScope download lands without -o: beside the Hugging Face cache, so `locate` finds it."""
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import constants
    return Path(constants.HF_HOME) / "modelscope" / repo


def cached_file(repo: str, filename: str, *, repo_type: str = "model", revision: str | None = None,
                cache_dir: Path | None = None) -> Path | None:
    """`filename` of `repo` at `revision` (main) in the Hugging Face cache (HF_HUB_CACHE, or `cache_dir`), found by
    huggingface_hub's own try_to_load_from_cache (the ref's snapshot, a commit hash too); None when absent. A repo
    with no folder in the cache answers before that import (most of a second), so a missing asset fails fast."""
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import constants
    folder = f"{repo_type}s--{repo.replace('/', '--')}"   # the cache's layout (huggingface_hub's repo_folder_name)
    if not (Path(cache_dir or constants.HF_HUB_CACHE) / folder).is_dir():
        return None
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import try_to_load_from_cache
    found = try_to_load_from_cache(repo, filename, cache_dir=cache_dir, revision=revision, repo_type=repo_type)
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


def lerobot_home() -> Path:
    """lerobot's HF_LEROBOT_HOME (lerobot.utils.constants): $HF_LEROBOT_HOME, else $HF_HOME/lerobot. A dataset named
    by repo id lives at HF_LEROBOT_HOME/owner/name; lerobot's own hub downloads go to HF_LEROBOT_HOME/hub."""
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import constants
    return Path(os.environ.get("HF_LEROBOT_HOME") or Path(constants.HF_HOME) / "lerobot").expanduser()


DATASET_REVISIONS = (None, "v3.0", "v2.1", "v2.0")   # main, then the version tags lerobot downloads by


def dataset_places(repo_id: str) -> list[str]:
    """Where `find_dataset` looks for a repo id, in order (for messages and docs)."""
    home = lerobot_home()
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import constants
    return [str(home / repo_id), f"the hub cache {home / 'hub'} (lerobot's downloads)",
            f"the hub cache {constants.HF_HUB_CACHE}"]


def find_dataset(repo_id: str) -> Path:
    """The root of the dataset that `repo_id` (owner/name) names on this machine, as lerobot finds it: the folder
    HF_LEROBOT_HOME/owner/name (where LeRobotDataset(repo_id) reads and `lerodoc download dataset` writes), else a
    snapshot in lerobot's hub cache (HF_LEROBOT_HOME/hub) or in the Hugging Face cache (main or a version tag).
    Never touches the network. A repo id found nowhere is a LerodocError whose hint is the download command."""
    home = lerobot_home()
    local = home / repo_id
    if (local / INFO_PATH).is_file():
        return local
    for cache_dir in (home / "hub", None):
        for revision in DATASET_REVISIONS:
            info = cached_file(repo_id, INFO_PATH, repo_type="dataset", revision=revision, cache_dir=cache_dir)
            if info:
                return info.parent.parent
    raise LerodocError(f"is neither a folder here nor a dataset on this machine (looked in "
                       f"{'; '.join(dataset_places(repo_id))})", file=repo_id,
                       hint=f"run `lerodoc download dataset {repo_id}` (it puts it at {local}), or give the "
                            "dataset's folder")


def locate(kind: str, spec: str) -> Path:
    """The local `tokenizer.model` or `model.safetensors` that `spec` names; never touches the network.

    `spec` is a file, a folder holding the file, or a known asset name (looked up in the Hugging Face
    cache, then in the ModelScope download folder). Raises LerodocError naming the missing file and the
    `lerodoc download` command that fetches it.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}")
    filename, path = KINDS[kind], Path(spec).expanduser()
    if path.exists():
        found = path / filename if path.is_dir() else path
        if not found.is_file():
            raise LerodocError(f"no {filename} in this folder", file=path,
                               hint=f"pass the {kind} file itself or a folder holding {filename}")
        return found
    if spec not in ASSETS or ASSETS[spec].kind != kind:
        raise LerodocError(f"not a file, a folder or a known {kind} name", file=spec,
                           hint=f"known: {', '.join(a.name for a in ASSETS.values() if a.kind == kind)}")
    a = ASSETS[spec]
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import constants
    cached = cached_file(a.repo, a.file)
    if cached:
        return cached
    mirrored = modelscope_dir(a.modelscope_repo) / a.file
    if mirrored.is_file():
        return mirrored
    raise LerodocError(
        f"{a.kind} {a.name} ({a.file} of {a.repo}) is not in the Hugging Face cache {constants.HF_HUB_CACHE}",
        file=a.file, hint=f"run `{download_command(a)}` (or `{download_command(a)} --source modelscope` where "
                          f"huggingface.co is out of reach), or pass the path of a local {a.file}")


@dataclass
class Fetched:
    """What a download put where, how it was checked, and how to hand it to `lerodoc train`."""
    kind: str
    repo: str
    source: str
    path: str
    files: list[str]
    verified: str
    train: str
    findings: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def fetch_asset(kind: str, name: str, *, repo: str | None = None, revision: str | None = None,
                output: Path | None = None, source: str = "hf") -> Fetched:
    """Download a named asset (or its files from `repo`), then check that it loads."""
    a = asset(kind, name)
    repo = repo or (a.repo if source == "hf" else a.modelscope_repo)
    files = [a.file, *a.extras]
    if source == "hf":
        # huggingface_hub: loaded only for hub work, never by --help or a local command
        from huggingface_hub import hf_hub_download
        if not all(cached_file(repo, f, revision=revision) for f in files) or output:
            reach_hub(repo, "download")   # one try, in seconds, instead of the client's retries
        with hub_errors(repo, f"`{download_command(a)} --source modelscope`"):
            paths = [Path(hf_hub_download(repo, f, revision=revision, local_dir=output)) for f in files]
    else:
        root = _modelscope_fetch(repo, "model", revision, output or modelscope_dir(repo), files, a)
        paths = [root / f for f in files]
    main = paths[0]
    verified = (check_tokenizer if kind == "tokenizer" else check_safetensors)(main)
    return Fetched(kind, repo, source, str(main), [str(p) for p in paths], verified,
                   f"lerodoc train pi05 ... {a.train_flag} {main}")


def fetch_dataset(repo: str, *, revision: str | None = None, output: Path | None = None, source: str = "hf",
                  include: list[str] | None = None) -> Fetched:
    """Download a dataset repository and validate what arrived (unless --include took only part of it).

    Without `output` it goes where LeRobotDataset(repo) reads it, HF_LEROBOT_HOME/owner/name (`placed_download`)."""
    target = Path(output) if output else lerobot_home() / repo
    with placed_download(target, repo, placed=output is None):
        if source == "hf":
            # huggingface_hub: loaded only for hub work, never by --help or a local command
            from huggingface_hub import snapshot_download
            reach_hub(repo, "download")
            with hub_errors(repo, "--source modelscope"):
                root = Path(snapshot_download(repo, repo_type="dataset", revision=revision, local_dir=target,
                                              allow_patterns=include or None))
        else:
            root = _modelscope_fetch(repo, "dataset", revision, target, include, None)
    files = visible_files(root)
    fetched = Fetched("dataset", repo, source, str(root), files, "not validated (--include took part of it)",
                      f"lerodoc train pi05 {repo if output is None else root}")
    if not include:
        # start-up: lerodoc.ops.validate loads numpy, pyarrow (--help imports this module)
        from lerodoc.ops.validate import validate
        report = validate(root)
        fetched.findings = [f.to_json() for f in report.findings]
        fetched.verified = f"validate: {report.errors} errors, {report.warnings} warnings"
        if report.version not in (None, WRITES):   # the hub's snapshot as published: said, not rewritten
            fetched.notes.append(f"{report.version}: LeRobotDataset 0.6.1 loads v3.0 only; lerodoc's commands read "
                                 f"it as it is, and `lerodoc convert {root} -o OUT` writes the v3.0 lerobot loads")
    return fetched


HF_DOWNLOAD_META = Path(".cache/huggingface/download")   # huggingface_hub's local_dir bookkeeping
KEPT_DOWNLOAD_META = Path(".cache/lerodoc-download")     # the same, once the download is complete


@contextmanager
def placed_download(target: Path, repo: str, *, placed: bool):
    """Download into HF_LEROBOT_HOME/owner/name so that LeRobotDataset(repo) reads it offline.

    lerobot 0.6.1 takes a folder holding huggingface_hub's local_dir bookkeeping (.cache/huggingface/download) for
    a stale mirror and fetches the dataset again, so a complete download moves it aside (.cache/lerodoc-download),
    and the next download of the same repo moves it back (only changed files are fetched again). A folder there
    that no download made (one lerobot-record wrote, say) is never written into."""
    if not placed:
        yield
        return
    hf_meta, kept = target / HF_DOWNLOAD_META, target / KEPT_DOWNLOAD_META
    if kept.is_dir() and not hf_meta.exists():
        hf_meta.parent.mkdir(parents=True, exist_ok=True)
        kept.rename(hf_meta)
    elif target.exists() and not hf_meta.exists() and (not target.is_dir() or any(target.iterdir())):
        raise LerodocError("holds files that no `lerodoc download dataset` put there (a dataset recorded there, "
                           "say); nothing was downloaded", file=target,
                           hint=f"give -o FOLDER to download {repo} elsewhere, or move that folder away")
    yield
    if hf_meta.is_dir():
        hf_meta.rename(kept)


def visible_files(root: Path) -> list[str]:
    """The files of a folder, relative and sorted, without hidden ones (download metadata, temp trees)."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))


def check_tokenizer(path: Path) -> str:
    """Load the SentencePiece model; a file that does not load is a failed download."""
    try:
        # sentencepiece: optional, loaded only where a tokenizer is built or read
        import sentencepiece
    except ImportError:
        return "not loaded (sentencepiece is not installed: pip install 'lerodoc[train]')"
    try:
        sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as exc:
        raise LerodocError(f"is not a SentencePiece model ({exc})", file=path,
                           hint="delete it and download again") from None
    return f"SentencePiece model loads, {sp.get_piece_size()} pieces"


def check_safetensors(path: Path) -> str:
    """Read the safetensors header and check that the tensors it lists end where the file ends."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > size - 8:
                raise ValueError(f"header length {length} exceeds the file")
            header = json.loads(f.read(length))
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        end = max((v["data_offsets"][1] for v in tensors.values()), default=0)
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise LerodocError(f"is not a readable safetensors file ({exc})", file=path,
                           hint="delete it and download again") from None
    if 8 + length + end != size:
        raise LerodocError(f"holds {size} bytes but its header describes {8 + length + end}", file=path,
                           hint="the download is incomplete: delete it and download again")
    return f"safetensors header reads, {len(tensors)} tensors"


def _modelscope_fetch(repo: str, repo_type: str, revision: str | None, local_dir: Path,
                      patterns: list[str] | None, a: Asset | None) -> Path:
    """Download `patterns` (file names or globs; None: everything) of a ModelScope repo into `local_dir`."""
    try:
        # optional, only with --source modelscope
        from modelscope_hub import HubApi, HubError as ModelScopeError
    except ImportError:
        raise LerodocError("--source modelscope needs the ModelScope client",
                           hint="pip install 'lerodoc[hub]'") from None
    wanted = [a.file, *a.extras] if a else patterns
    if offline():
        if a and all((local_dir / f).is_file() for f in wanted):
            return local_dir
        raise HubError("is not on disk and downloads are off (HF_HUB_OFFLINE=1)", file=repo,
                       hint="run the same command where ModelScope is reachable, then copy the folder over")
    try:
        return Path(HubApi().download_repo(repo, repo_type, revision=revision, local_dir=local_dir,
                                           allow_patterns=wanted or None))
    except ModelScopeError as exc:
        raise HubError(f"ModelScope download failed ({type(exc).__name__}: {exc}); what arrived is kept", file=repo,
                       hint="run the same command again to resume; check the id, or set MODELSCOPE_ENDPOINT"
                       ) from None


@dataclass
class Pushed:
    dataset: str
    repo: str
    commit: str
    url: str
    files: list[str]
    bytes: int
    card: str

    def to_json(self) -> dict:
        return asdict(self)


def push_dataset(root: Path, repo: str, *, revision: str | None = None, private: bool | None = None,
                 message: str | None = None) -> Pushed:
    """Validate `root`, then upload every file of it to the dataset repository `repo` in one commit.

    A README.md dataset card is generated unless the dataset has its own. Hidden files (download
    metadata, lerodoc's temporary trees) are left out.
    """
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import CommitOperationAdd, HfApi
    from lerodoc.formats.paths import regular_files
    # start-up: lerodoc.ops.validate loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.validate import validate

    files = regular_files(root)   # the dataset's own files: no link leading outside it, no FIFO or device
    report = validate(root)       # the dataset's own problems first: they stop the push whatever the network
    if report.errors:
        raise LerodocError(f"has {report.errors} validation errors; nothing was pushed", file=root,
                           hint=f"see `lerodoc validate {root}`; `lerodoc repair` fixes most")
    reach_hub(repo, "push")       # then one try, in seconds: an unreachable hub is said without the client's retries
    ops = [CommitOperationAdd(rel, str(root / rel)) for rel in files]
    card = "kept the dataset's own README.md"
    if "README.md" not in files:
        text = dataset_card(root, warnings=report.warnings)
        ops.append(CommitOperationAdd("README.md", text.encode()))
        card = "generated README.md"
    api = HfApi()
    with hub_errors(repo, operation="push"):
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        info = api.create_commit(repo, ops, repo_type="dataset", revision=revision,
                                 commit_message=message or f"Upload dataset with lerodoc {__version__}")
    return Pushed(str(root), repo, info.oid, info.commit_url, [op.path_in_repo for op in ops],
                  sum((root / f).stat().st_size for f in files), card)


def push_outputs(outputs: list[Path], repo: str) -> list[Pushed]:
    """--push-to-hub: push each dataset a command wrote (`push_dataset`: validated first, regular files only) to
    `repo`; an output that holds parts instead of a dataset (split's OUT/<part>) pushes each part to REPO_<part>,
    the repository lerobot's split_dataset names."""
    pushed = []
    for out in dict.fromkeys(Path(o) for o in outputs):
        if (out / INFO_PATH).is_file():
            pushed.append(push_dataset(out, repo))
            continue
        parts = sorted(p for p in out.iterdir() if (p / INFO_PATH).is_file() and not p.name.startswith("."))
        if not parts:
            raise LerodocError("holds no dataset to push", file=out)
        pushed += [push_dataset(part, f"{repo}_{part.name}") for part in parts]
    return pushed


def dataset_card(root: Path, *, warnings: int = 0) -> str:
    """A README.md for the hub: the viewer config, then version, totals, features and cameras.

    lerodoc keeps no edit history inside a dataset, so the card records the dataset as pushed.
    """
    # start-up: lerodoc.ops.info loads numpy, pyarrow (--help imports this module)
    from lerodoc.ops.info import describe
    d = describe(root)
    data_glob = "data/*/*.parquet"
    rows = "\n".join(f"| `{name}` | {f['dtype']} | {f['shape']} |" for name, f in d["features"].items())
    cameras = ", ".join(f"`{k}` ({c.get('codec', '?')} {c.get('width', '?')}x{c.get('height', '?')})"
                        for k, c in d["cameras"].items()) or "none"
    return f"""---
tags:
- LeRobot
- lerodoc
configs:
- config_name: default
  data_files: {data_glob}
---

# {root.name}

A LeRobot dataset, pushed with lerodoc {__version__} after `lerodoc validate` found 0 errors and {warnings}
warnings.

| | |
|---|---|
| format | LeRobot {d['codebase_version']} |
| robot type | {d['robot_type']} |
| fps | {d['fps']} |
| episodes | {d['episodes']} |
| frames | {d['frames']} |
| tasks | {d['tasks']} |
| cameras | {cameras} |

| feature | dtype | shape |
|---|---|---|
{rows}
"""
