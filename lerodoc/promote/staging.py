"""Outputs appear whole or not at all: write to a hidden temp sibling, verify, rename.

Every staging folder is made under a fresh, unpredictable name by `mkdtemp` (created exclusively: a name a dataset
planted, as a link or anything else, is never reused and never followed), and a promotion over an existing output
is one atomic exchange of the two names. A staging folder left by a command that died (SIGKILL, a power cut) is
removed by the next command that writes the same output, under its lock, and `lerodoc validate` names one left
inside or beside a dataset (`leftovers`).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import secrets
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from lerodoc import access, confined, formats
from lerodoc.conventions import INFO_PATH
from lerodoc.dataset import Dataset
from lerodoc.errors import LerodocError, UsageError, VerificationError, no_room
from lerodoc.promote import load
from lerodoc.promote.kept import require_kept
from lerodoc.promote.links import link_tree
from lerodoc.promote.locks import output_lock

TEMP_SUFFIX = ".lerodoc-tmp"


STAGING_MARKS = (TEMP_SUFFIX, ".lerodoc-scratch", ".lerodoc-old")   # what a staging folder's name says it is
META_STAGING = f".lerodoc-meta{TEMP_SUFFIX}-"   # the in-place metadata swap's folder, inside the dataset


def leftovers(root: Path) -> list[Path]:
    """What commands that did not finish left staging the output or dataset `root`: beside it, its staging folders
    (`.<name><mark>-<pid>-<random>`, `fresh_folder`) and its writers' temporary files (`files.fresh_name`); inside
    it, the in-place metadata swap's folders. Names of other outputs are never matched, even when they begin alike."""
    root = Path(root).absolute()
    staging = re.compile(re.escape(f".{root.name[:150]}") + "(" + "|".join(map(re.escape, STAGING_MARKS)) + r")-\d+-")
    found = []
    for folder, left in ((root, lambda n: n.startswith(META_STAGING)),
                         (root.parent, lambda n: bool(staging.match(n)) or (
                             (m := WRITER_TEMP.fullmatch(n)) is not None and m.group(1) == root.name[:180]))):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found += [folder / name for name in names if left(name)]
    return sorted(found)


def _remove_leftovers(out: Path) -> None:
    """Remove the staging folders dead commands left for `out`. Called with `out`'s lock held, so no command that
    could own them is alive. Only real folders are removed (without following a link in them): a link or file
    under such a name is no staging lerodoc made, and is left where it is (validate names it)."""
    for path in leftovers(out):
        if _pid_of(path.name) != os.getpid() and stat.S_ISDIR(os.lstat(path).st_mode):   # not this command's own
            shutil.rmtree(path, ignore_errors=True)                                    # (encode's live scratch)


def _pid_of(name: str) -> int | None:
    """The pid a staging name (`fresh_folder`, `.<name><mark>-<pid>-<random>`) carries, or None."""
    match = re.search(r"-(\d+)-[0-9a-z_]+$", name)
    return int(match.group(1)) if match else None


def _remove(path: Path) -> None:
    """Remove `path` whatever it is, never following a link: a folder tree (shutil.rmtree refuses to follow links),
    else the name alone."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def fresh_folder(beside: Path, mark: str) -> Path:
    """A new empty folder in `beside`'s parent named `.<name><mark>-<pid>-<random>`, created exclusively
    (`mkdtemp`): no name that already exists, whatever it is, is ever used."""
    beside = Path(beside).absolute()
    return Path(tempfile.mkdtemp(prefix=f".{beside.name[:150]}{mark}-{os.getpid()}-", dir=beside.parent))


DATASET_ENTRIES = {"meta", "data", "videos", "images", "README.md", ".gitattributes", ".cache"}   # a dataset's top
SPLIT_MARK = ".lerodoc-split.json"   # in split's output folder, beside its parts
OWN_MARKS = ("lerodoc.json", "trainer.json", SPLIT_MARK)   # export lerobot's folder, a checkpoint's, split's


def _entries(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def replaceable(out: Path) -> str | None:
    """What the existing folder `out` is, when --force may replace it: an empty folder, a LeRobot dataset
    (meta/info.json, and nothing at its top level a dataset does not hold), or lerodoc's own earlier output (an
    `export lerobot` folder, a checkpoint, split's parts: the file `OWN_MARKS` names). None for anything else: a
    shelf of datasets, a home folder, a folder of other things is never wiped."""
    names = _entries(out)
    if not names:
        return "an empty folder"
    if _is_dataset(out, names):
        return "a LeRobot dataset"
    if any(os.path.isfile(out / mark) and not os.path.islink(out / mark) for mark in OWN_MARKS):
        return "lerodoc's own output"
    return None


def _real_dir(path: Path) -> bool:
    return stat.S_ISDIR(os.lstat(path).st_mode)


def _is_dataset(folder: Path, names: list[str]) -> bool:
    info = folder / INFO_PATH
    return (os.path.isfile(info) and not os.path.islink(info)
            and all(n in DATASET_ENTRIES or n.startswith(".") and ".lerodoc-" in n for n in names))


def _holds(folder: Path, shown: int = 5) -> str:
    names = _entries(folder)
    listed = ", ".join(n + ("/" if _real_dir(folder / n) else "") for n in names[:shown])
    return listed + (f" and {len(names) - shown} more" if len(names) > shown else "")


def check_output(out: Path, inputs=(), *, force: bool = False, folder: bool = True, own: bool = False) -> Path:
    """The one rule for an `-o` (returned absolute): never the input itself, a path inside one of `inputs` or one
    that holds an input, not even with --force (links resolved: that is --in-place's job, where a command has
    it). An existing output only with --force, and then only what `replaceable` proves may go (an empty folder
    is taken over without it); a folder output never replaces a file or a link, a file output never a folder.
    `own`: the place is lerodoc's by construction (an --in-place rewrite of the dataset, a checkpoint of a run),
    so --force replaces it whatever it holds. Raises LerodocError (exit 3) before anything is written."""
    out = Path(out).absolute()
    real = Path(os.path.realpath(out))
    for src in inputs:
        if access.is_remote(src):   # a hub dataset is read in place: no local path can be it
            continue
        source = Path(os.path.realpath(src))
        if real == source or real.is_relative_to(source) or source.is_relative_to(real):
            relation = ("is the input" if real == source else "is inside the input" if real.is_relative_to(source)
                        else "holds the input")
            raise LerodocError(f"-o {relation} {src}: writing there would destroy it", file=out,
                               hint="choose an -o outside the input" + (" (--force does not change this)"
                                                                        if force else ""))
    if not os.path.lexists(out):
        return out
    if _real_dir(out):
        if not folder:
            raise LerodocError("is a folder; this command writes a file", file=out,
                               hint="give a file name for -o (a folder is never replaced by a file)")
        if own:
            return out
        what = replaceable(out)
        if what == "an empty folder":
            return out
        if what is None:
            raise LerodocError(f"already exists and holds {_holds(out)}: not a dataset nor lerodoc's own output, so "
                               "it is never replaced, not even with --force", file=out,
                               hint="choose another -o (a new folder, or one inside this one)")
        if not force:
            raise LerodocError(f"already exists: {what} ({_holds(out)})", file=out,
                               hint="choose another -o, or pass --force to replace it")
        return out
    if folder:
        kind = "a link" if os.path.islink(out) else "a file"
        raise LerodocError(f"is {kind}; this command writes a folder, and never replaces {kind} with one", file=out,
                           hint="choose another -o")
    if not force:
        raise LerodocError("already exists", file=out, hint="choose another -o, or pass --force to replace the file")
    return out


_promoted: list[Path] | None = None   # while `recording_outputs` runs: the outputs promoted, in order


@contextmanager
def recording_outputs():
    """Yield the list of the datasets this process promotes while the block runs (staged_output's output, the
    root whose meta/ staged_meta swapped), each only once verified and in place: what a command wrote, for a step
    that follows it (--push-to-hub)."""
    global _promoted
    saved, _promoted = _promoted, []
    try:
        yield _promoted
    finally:
        _promoted = saved


def _record(out: Path, staged: Path | None = None) -> None:
    """`out` is promoted (from the staging folder `staged`): outputs promoted inside that folder (split's parts)
    are part of it now and are no longer listed on their own."""
    if _promoted is not None:
        if staged is not None:
            _promoted[:] = [p for p in _promoted if not p.is_relative_to(Path(staged).absolute())]
        _promoted.append(Path(out).absolute())


def output_target(src: Path, out: Path | None, in_place: bool, *, dry_run: bool = False) -> Path | None:
    """The one `-o OUTPUT` / `--in-place` rule of the writing commands: exactly one of them (a usage error, exit 2,
    otherwise), except that a --dry-run, which writes nothing, may have neither. The folder the command writes:
    for --in-place the dataset where it really lives (`src` with links resolved: a link naming the dataset stays a
    link, and the dataset it names is the one rewritten), else `out`; None for a dry run without -o."""
    if dry_run and out is None and not in_place:
        return None
    if in_place == (out is not None):
        raise UsageError("give either -o OUTPUT or --in-place (or --dry-run to only see the plan)")
    return in_place_root(src) if in_place else Path(out)


def in_place_root(src: Path) -> Path:
    """The folder an --in-place command rewrites for the dataset named `src`: the dataset itself, links resolved."""
    return Path(os.path.realpath(src))


def require_unchanged(root: Path, seen: tuple | None) -> None:
    """Refuse to swap a new tree or meta/ in for the dataset at `root` when its meta/ is no longer what the
    command read (`seen`, `Dataset.meta_seen`): another writer changed it meanwhile, and swapping would undo that
    writer's work without a word."""
    if seen and confined.meta_state(root) != seen:
        raise LerodocError("the dataset's metadata changed while this command ran (another command or program "
                           "wrote it); nothing was replaced, so the other change is kept", file=Path(root) / "meta",
                           hint="run the command again: it reads the metadata as it is now")


@contextmanager
def scratch_beside(out: Path):
    """Yield an empty hidden folder beside `out` (same file system, so its files can be renamed into the staged
    output) for work that comes before the output is staged (encode's clips); removed when the block ends, either
    way."""
    Path(out).absolute().parent.mkdir(parents=True, exist_ok=True)
    scratch = fresh_folder(out, ".lerodoc-scratch")
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def one_writer(stage):
    """Run a staging context manager (`staged_output`) as the one writer of its output, and say a full disk once.

    The output's lock (`locks.output_lock`, beside the staging folder) is taken before the staging folder is
    made and held until the output is promoted: a second command writing the same -o (or --in-place on the same
    dataset) stops at once, and the -o is checked again under the lock (another writer may just have made it).
    A write that runs out of room (ENOSPC, EDQUOT, EFBIG: `errors.no_room`) becomes one LerodocError naming the
    output file (exit 3); the staging folder is removed as for any error, and the input was never written."""
    @functools.wraps(stage)
    @contextmanager
    def run(out: Path, *, force: bool = False, inputs=(), own: bool = False, **options):
        out = check_output(out, inputs, force=force, own=own)
        out.parent.mkdir(parents=True, exist_ok=True)
        with output_lock(out):
            check_output(out, inputs, force=force, own=own)   # again: another writer may just have made it
            _remove_leftovers(out)
            with stage(out, force=force, inputs=inputs, own=own, **options) as tmp, _said_of(tmp, out):
                yield tmp
    return run


@contextmanager
def _said_of(tmp: Path, out: Path):
    """Errors of a block writing the staging folder `tmp` of `out`, in the output's terms: a file named in the
    staging folder (which is gone by the time the user reads it) by its place in `out`, and a write that ran out
    of room as one LerodocError naming its file (`errors.no_room`)."""
    try:
        yield
    except LerodocError as exc:
        if exc.file:
            exc.file = str(_in_output(exc.file, tmp, out))
        raise
    except OSError as exc:
        full = no_room(exc, _in_output(exc.filename, tmp, out))
        if full is None:
            raise
        raise full from exc


WRITER_TEMP = re.compile(r"\.(.+)\.\d+-[0-9a-f]+\.lerodoc-new")   # a writer's temporary name (files.fresh_name)


def _in_output(name, tmp: Path, out: Path) -> Path:
    """Where the file `name` (an error's file name, maybe None) is in the output: under `out` for a file in the
    staging folder `tmp`, under its own name for a writer's temporary one; the output itself when there is no
    name."""
    if not name:
        return out
    path = Path(os.fsdecode(name)).absolute()
    if match := WRITER_TEMP.fullmatch(path.name):
        path = path.with_name(match.group(1))
    return out / path.relative_to(tmp) if path.is_relative_to(tmp) else path


_WRITTEN: dict[str, Dataset] = {}   # a staging folder -> the Dataset its command last opened it as (`written`)


def written(tmp: Path, ds: Dataset) -> None:
    """Note `ds`, the staged output at `tmp` as its command opened it after its last metadata write (a rewrite's
    verify): promotion's kept check (`require_kept`) reads what the output holds from it instead of opening the
    output again, as long as the output's meta/ is still the one `ds` read (`Dataset.meta_seen`)."""
    _WRITTEN[os.fspath(tmp)] = ds


def _written(tmp: Path) -> Dataset | None:
    """The Dataset noted for `tmp` by `written` while its meta/ is unchanged since, else None; the note is used
    once."""
    ds = _WRITTEN.pop(os.fspath(tmp), None)
    return ds if ds is not None and ds.meta_seen == confined.meta_state(tmp) else None


def folder_mode(out: Path) -> int:
    """The permissions a promoted output folder takes: those of the folder it replaces (an --in-place rewrite keeps
    its dataset's), else those mkdir gives a new folder (0o777 less the umask). mkdtemp makes the staging folder
    0o700, private while it is written; promoted so, nobody else could read the dataset."""
    try:
        held = os.lstat(out)
    except FileNotFoundError:
        held = None
    if held is not None and stat.S_ISDIR(held.st_mode):
        return stat.S_IMODE(held.st_mode)
    umask = os.umask(0o022)   # read it the only way POSIX offers, and put it back
    os.umask(umask)
    return 0o777 & ~umask


@one_writer
@contextmanager
def staged_output(out: Path, *, force: bool = False, inputs=(), keep=None, dropped: set[str] = frozenset(),
                  renamed: dict[str, str] | None = None, seen: tuple | None = None, own: bool = False):
    """Yield a temp directory beside `out`; promote it to `out` only when the block succeeds.

    Any exception (Ctrl-C included) removes the temp directory, so no half-written dataset is left
    under the name the user asked for. A dataset that LeRobotDataset 0.6.1 could not load
    (`load.problems`: a data column its `datasets` cast refuses, a video off the k/fps grid or with
    tags that are not UTF-8) is not promoted either: that is a VerificationError. Nor is one that lost a
    feature, data column or camera (undeclared ones included) of the datasets in `keep` (default `inputs`; paths,
    or datasets the command opened) the command was not asked to drop or rename (`kept.require_kept`).
    An in-place rewrite passes `seen`, the input's meta/ as it was read (`Dataset.meta_seen`): the old tree is
    not replaced when its meta/ changed since (`require_unchanged`).
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = fresh_folder(out, TEMP_SUFFIX)
    try:
        yield tmp
        if (tmp / INFO_PATH).is_file():
            problems = load.problems(tmp)
            if problems:
                raise VerificationError("the output would not load in LeRobotDataset: " + "; ".join(problems[:3])
                                        + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""),
                                        file=out, hint="nothing was written; the input has the same problem: "
                                                       "lerodoc repair (or convert) fixes it, then run this command "
                                                       "on its output")
            require_kept(list(inputs if keep is None else keep), _written(tmp) or tmp, dropped=set(dropped),
                         renamed=renamed)
        check_output(out, inputs, force=force, own=own)   # the swap verifies what it swaps: what took `out`'s
        require_unchanged(out, seen)                       # place meanwhile is held to the same rule
        os.chmod(tmp, folder_mode(out))
        if os.path.lexists(out):
            exchange(tmp, out)   # one atomic step: `out` is the new tree, `tmp` holds the old one (or the file or
            _remove(tmp)         # link --force replaced, which is unlinked, never followed)
        else:
            tmp.rename(out)
    except BaseException:
        _remove(tmp)
        raise
    finally:
        _WRITTEN.pop(os.fspath(tmp), None)
    _record(out, tmp)


@contextmanager
def staged_edit(src: Path, out: Path | None, *, in_place: bool = False, force: bool = False,
                rewrite: set[str] = frozenset(), dropped: set[str] = frozenset(),
                renamed: dict[str, str] | None = None, seen: tuple | None = None, opened=None):
    """Yield a temp tree that mirrors `src` except the `rewrite` paths, which the block writes.

    The tree is promoted to `out`, or, with `in_place`, swapped in for `src` (the old tree is removed
    only after the new one is in place, and only when its meta/ is still the `seen` one). Unchanged files are
    hard links, so no bytes are copied. `opened` is `src` as the command opened it, for a command that has not
    changed its info: what the output must keep (`kept.require_kept`) is then read from it, not from a second open.
    """
    target = output_target(src, out, in_place)
    with staged_output(target, force=force or in_place, inputs=() if in_place else (src,),
                       keep=(src if opened is None else opened,),
                       dropped=dropped, renamed=renamed, seen=seen if in_place else None, own=in_place) as tmp:
        link_tree(access.path(src), tmp, set(rewrite))
        yield tmp


def exchange(a: Path, b: Path) -> None:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE); elsewhere, or on a file system without
    it, two renames through a third name."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        renameat2 = None
    if renameat2 is not None:
        at_fdcwd, rename_exchange = -100, 2
        if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), str(a))
    middle = a.with_name(f".{a.name[:150]}.lerodoc-old-{os.getpid()}-{secrets.token_hex(8)}")   # unpredictable
    os.rename(a, middle)
    os.rename(b, a)
    os.rename(middle, b)


@contextmanager
def staged_meta(root: Path, rewrite: set[str], *, seen: tuple | None = None):
    """Yield a temp root whose meta/ mirrors `root`'s except the `rewrite` paths (all under meta/), which the block
    writes; then swap the new meta/ in for the old in one atomic step. Only meta/ changes: the dataset folder (a
    shell may be standing in it), its data and video files keep their inodes and bytes. The temp root is a hidden
    folder inside `root` (same file system, nothing of the dataset written outside it) and is removed either
    way. The dataset's lock (`locks.output_lock`, the one --in-place edits take; a file beside the dataset while
    the block runs) keeps a second writer out; a full disk is said as for staged_output. The dataset is the one a
    link named `root` leads to (`in_place_root`), and its meta/ is swapped only while it is still what the command
    read (`seen`: `require_unchanged`)."""
    root = in_place_root(root)
    with output_lock(root):
        _remove_leftovers(root)
        with _staged_meta(root, rewrite, seen) as tmp, _said_of(tmp, root):
            yield tmp
    _record(root)


@contextmanager
def _staged_meta(root: Path, rewrite: set[str], seen: tuple | None):
    outside = sorted(p for p in rewrite if not p.startswith(f"{formats.META_DIR}/"))
    if outside:
        raise ValueError(f"staged_meta rewrites meta/ only, not {outside}")
    tmp = Path(tempfile.mkdtemp(prefix=f"{META_STAGING}{os.getpid()}-", dir=root))
    try:
        link_tree(root / formats.META_DIR, tmp / formats.META_DIR,
                  {p[len(formats.META_DIR) + 1:] for p in rewrite})
        yield tmp
        meta = root / formats.META_DIR
        if not stat.S_ISDIR(os.lstat(meta).st_mode):
            raise LerodocError("is no longer a folder (a link or a file took its place); nothing was replaced",
                               file=meta, hint="restore the dataset's meta/ folder, then run the command again")
        require_unchanged(root, seen)
        exchange(tmp / formats.META_DIR, meta)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
