"""Where a dataset's bytes are: a local folder, or a hub repository read by HTTP range requests.

Every reader builds paths as `root / relative` and reads them through a few calls: `Path` methods (`is_file`,
`stat`, `glob`, `read_bytes`, `open`) and, for pyarrow and PyAV, `source(path)`. A local root is a plain `Path`
and `source` hands its path on unchanged. A root named `hf://datasets/OWNER/NAME[@REVISION]` is a `HubPath`: the
same calls, answered by its `HubStore`, which lists the repository once at one commit (huggingface_hub's
HfFileSystem) and reads each file by range requests, so that parquet footers and the column chunks asked for,
mp4 box headers and moov boxes are all that cross the network. The store meters what it fetched (`transfer`).

A HubPath is never a local path: `os.fspath` of it raises, so a reader that bypasses this module fails loudly
instead of looking on the local disk.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import re
import shutil
import stat as stat_module
import threading
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from urllib.parse import quote

from lerodoc import confined
from lerodoc.errors import LerodocError
from lerodoc.files import new_file, write_bytes
from lerodoc.hub_errors import hub_errors

SCHEME = "hf://"
_URL = re.compile(r"hf://datasets/(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*)"
                  r"(?:@(?P<rev>[^/][^\s]*?))?/?")


def is_url(text: object) -> bool:
    """Whether DATASET as typed (or as Typer's Path made of it: `hf:/datasets/...`) names a hub dataset."""
    return str(text).startswith(("hf://", "hf:/"))


def parse_url(text: str) -> tuple[str, str | None]:
    """(repo id, revision or None) of `hf://datasets/OWNER/NAME[@REVISION]`; ValueError otherwise."""
    text = str(text)
    if text.startswith("hf:/") and not text.startswith("hf://"):
        text = "hf://" + text[len("hf:/"):]
    m = _URL.fullmatch(text)
    if not m or ".." in m.group("repo"):
        raise ValueError("a hub dataset is named hf://datasets/OWNER/NAME or hf://datasets/OWNER/NAME@REVISION")
    return m.group("repo"), m.group("rev")


# ---------------------------------------------------------------- metering

class Meter:
    """Requests made and response bytes received through huggingface_hub's HTTP client, process-wide."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes = 0

    def response(self, response) -> None:
        size = response.headers.get("content-length")
        with self.lock:
            self.requests += 1
            self.bytes += int(size) if size and size.isdigit() else 0

    def reading(self) -> tuple[int, int]:
        with self.lock:
            return self.requests, self.bytes


METER = Meter()
_installed = False


def _install_meter() -> None:
    """Count every response of huggingface_hub's client (its own hook kept): a client factory adding one hook."""
    global _installed
    if _installed:
        return
    # huggingface_hub: loaded only for hub work, never by --help or a local command
    from huggingface_hub import set_client_factory
    from huggingface_hub.utils import _http

    def factory():
        client = _http.default_client_factory()
        client.event_hooks["response"] = [*client.event_hooks.get("response", []), METER.response]
        return client
    set_client_factory(factory)
    _installed = True


# ---------------------------------------------------------------- the hub store

@dataclass
class Stat:
    st_size: int
    st_mode: int
    st_mtime: float = 0.0


class HubStore:
    """One hub dataset repository at one commit: its file listing, range reads, and what they cost."""

    def __init__(self, repo: str, revision: str | None = None):
        _install_meter()
        # huggingface_hub: loaded only for hub work, never by --help or a local command
        from huggingface_hub import HfApi, HfFileSystem
        self.repo, self.revision = repo, revision
        self.started = METER.reading()
        self.file_bytes = 0          # bytes of file content received (range reads)
        self.reads = 0               # range reads made
        self.lock = threading.Lock()
        self.spans: dict[str, list[list]] = {}   # per file: sorted, disjoint [start, bytes] already fetched
        self.kept = 0                              # bytes held in `spans`
        self.disk: Path | None = None              # `persist`: where fetched ranges are kept on disk
        self.on_disk: dict[str, list[tuple[int, int, Path]]] = {}   # per file: (start, end, span file), sorted
        self.disk_bytes = 0                        # bytes read back from `disk` instead of fetched
        self.url = f"{SCHEME}datasets/{repo}" + (f"@{revision}" if revision else "")
        with hub_errors(self.url):
            self.sha = HfApi().dataset_info(repo, revision=revision).sha or revision or "main"
            self.fs = HfFileSystem(skip_instance_cache=True)
            self.base = f"datasets/{repo}@{self.sha}"
            listing = self.fs.find(self.base, detail=True, withdirs=False)
        self.sizes: dict[str, int] = {}
        for name, entry in listing.items():
            rel = name[len(self.base) + 1:] if name.startswith(self.base + "/") else None
            if rel and entry.get("type") == "file":
                self.sizes[rel] = int(entry.get("size") or 0)
        self.dirs = {""} | {"/".join(rel.split("/")[:i]) for rel in self.sizes for i in range(1, rel.count("/") + 1)}

    def root(self) -> HubPath:
        _STORES[(self.repo, self.sha)] = self
        cls = type("HubPath", (HubPath,), {"store": self})
        return cls(_ANCHOR, "hub:" + quote(f"{self.url}@{self.sha}", safe=""))

    def open(self, rel: str) -> RangeFile:
        if rel not in self.sizes:
            raise FileNotFoundError(f"{self.url}/{rel}")
        return RangeFile(self, rel, self.sizes[rel])

    def persist(self, folder: Path) -> None:
        """Keep every range fetched from now on as a file under `folder` (one per range, written under a new name
        and renamed, so a span file is whole or absent; named by a hash of the repository path, so nothing the
        repository names becomes a local path), and read ranges from there before fetching them: a download
        interrupted and run again fetches only what the first run had not. Ranges kept for another commit are
        dropped."""
        folder = Path(folder)
        commit = folder / "commit"
        if folder.is_dir() and (not commit.is_file() or commit.read_text() != f"{self.repo}@{self.sha}"):
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if not commit.is_file():
            write_bytes(commit, f"{self.repo}@{self.sha}".encode())
        self.disk, self.on_disk = folder, {}

    def _spans_on_disk(self, rel: str) -> list[tuple[int, int, Path]]:
        if rel not in self.on_disk:
            spans = []
            folder = self.disk / hashlib.sha1(rel.encode()).hexdigest()
            for file in folder.glob("*-*") if folder.is_dir() else ():
                start, _, end = file.name.partition("-")
                if start.isdigit() and end.isdigit() and file.stat().st_size == int(end) - int(start):
                    spans.append((int(start), int(end), file))
            self.on_disk[rel] = sorted(spans)
        return self.on_disk[rel]

    def fetch(self, rel: str, start: int, end: int, handle=None) -> bytes:
        """Bytes [start, end) of a file: the parts `persist` kept on disk read from there, the rest by one range
        request each (kept on disk when persisting)."""
        if self.disk is None:
            return self._request(rel, start, end, handle)
        pieces, pos = [], start
        for s0, s1, file in self._spans_on_disk(rel):
            if s1 <= pos or s0 >= end:
                continue
            if s0 > pos:
                pieces.append(self._request_kept(rel, pos, s0, handle))
                pos = s0
            with open(file, "rb") as f:
                f.seek(pos - s0)
                pieces.append(f.read(min(s1, end) - pos))
            with self.lock:
                self.disk_bytes += len(pieces[-1])
            pos = min(s1, end)
        if pos < end:
            pieces.append(self._request_kept(rel, pos, end, handle))
        return b"".join(pieces)

    def _request_kept(self, rel: str, start: int, end: int, handle=None) -> bytes:
        data = self._request(rel, start, end, handle)
        if len(data) == end - start:
            folder = self.disk / hashlib.sha1(rel.encode()).hexdigest()
            folder.mkdir(exist_ok=True)
            write_bytes(folder / f"{start}-{end}", data)
            self.on_disk[rel] = sorted([*self.on_disk.get(rel, []), (start, end, folder / f"{start}-{end}")])
        return data

    def _request(self, rel: str, start: int, end: int, handle=None) -> bytes:
        """Bytes [start, end) of a file: one range request (huggingface_hub retries 429 and 5xx answers).
        `handle` is the file's HfFileSystemFile (`handle_of`), kept by the caller to skip opening it again."""
        with hub_errors(f"{self.url}/{rel}"):
            data = (handle or self.handle_of(rel))._fetch_range(start, end)
        with self.lock:
            self.reads += 1
            self.file_bytes += len(data)
        return data

    KEEP = 512 << 20   # bytes of fetched spans kept for re-reads; past it, the spans are dropped and refetched

    def cached(self, rel: str, start: int, end: int, fetch) -> bytes:
        """Bytes [start, end) of `rel`, fetching (by `fetch(start, end)`) only the gaps between spans already held."""
        with self.lock:
            spans = [list(x) for x in self.spans.get(rel, [])]
        gaps, pos = [], start
        for s0, data in spans:
            s1 = s0 + len(data)
            if s1 <= pos or s0 >= end:
                continue
            if s0 > pos:
                gaps.append((pos, s0))
            pos = max(pos, s1)
        if pos < end:
            gaps.append((pos, end))
        spans += [[a, fetch(a, b)] for a, b in gaps]
        spans.sort(key=lambda x: x[0])
        merged: list[list] = []
        for s0, data in spans:   # join touching or overlapping spans
            if merged and s0 <= merged[-1][0] + len(merged[-1][1]):
                m0, mdata = merged[-1]
                merged[-1][1] = mdata + data[m0 + len(mdata) - s0:]
            else:
                merged.append([s0, data])
        out = b""
        for s0, data in merged:
            if s0 <= start < s0 + len(data):
                out = data[start - s0:end - s0]
                break
        with self.lock:
            self.kept += sum(len(d) for _, d in merged) - sum(len(d) for _, d in self.spans.get(rel, []))
            self.spans[rel] = merged
            if self.kept > self.KEEP:
                self.spans, self.kept = {}, 0
        return out

    def handle_of(self, rel: str):
        """huggingface_hub's file object for `rel` (no request: its size comes from the listing)."""
        with hub_errors(f"{self.url}/{rel}"):
            return self.fs.open(f"{self.base}/{rel}", "rb", cache_type="none", block_size=1 << 20,
                                size=self.sizes[rel])

    def transfer(self) -> dict:
        """What this store has cost so far: every request and response byte through huggingface_hub (listing
        and API calls included), and the file bytes of its range reads, beside the repository's size."""
        requests, received = METER.reading()
        return {"source": self.url, "commit": self.sha, "requests": requests - self.started[0],
                "bytes": received - self.started[1], "range_reads": self.reads, "file_bytes": self.file_bytes,
                "repository_bytes": sum(self.sizes.values()),
                **({"resumed_bytes": self.disk_bytes} if self.disk is not None else {})}


class RangeFile(io.RawIOBase):
    """A read-only, seekable file of a hub repository. A read fetches only the bytes of it no earlier read of the
    same file (through any RangeFile of the store) fetched, in one range request per gap: readers that open a
    parquet file several times (footer, then the columns each check needs) pay for its bytes once."""

    def __init__(self, store: HubStore, rel: str, size: int):
        super().__init__()
        self.store, self.rel, self.size, self.pos = store, rel, size, 0
        self.name = f"{store.url}/{rel}"
        self._handle = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: 0, 1: self.pos, 2: self.size}[whence] + offset
        return self.pos

    def read_range(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if start >= end:
            return b""
        return self.store.cached(self.rel, start, end, self._fetch)

    def _fetch(self, start: int, end: int) -> bytes:
        if self._handle is None:
            self._handle = self.store.handle_of(self.rel)
        return self.store.fetch(self.rel, start, end, self._handle)

    def readinto(self, buffer) -> int:
        data = self.read_range(self.pos, self.pos + len(buffer))
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else self.pos + size
        data = self.read_range(self.pos, end)
        self.pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)


# ---------------------------------------------------------------- the path handle

_ANCHOR = "/"   # under it, one part naming the store (never a real folder): equal paths mean one store's file


class HubPath(PurePosixPath):
    """A path inside a hub dataset, answering the `Path` calls lerodoc's readers make. Each store makes its own
    subclass (`HubStore.root`), so paths built from the root with `/` carry the store."""

    store: HubStore

    @property
    def rel(self) -> str:
        return "/".join(self.parts[2:])

    def __str__(self) -> str:
        if not self.root:   # relative (what relative_to gives): plain letters
            return super().__str__()
        return f"{self.store.url}/{self.rel}".rstrip("/")

    def __fspath__(self):
        if not self.root:
            return super().__str__()
        raise TypeError(f"{self} is a hub path: read it through lerodoc.access, not the local file system")

    def __repr__(self) -> str:
        return f"HubPath({str(self)!r})"

    def __reduce__(self):   # to a worker process: the same commit's store, listed there once
        return _reopen, (self.store.repo, self.store.sha, self.rel)

    def is_file(self) -> bool:
        return self.rel in self.store.sizes

    def is_dir(self) -> bool:
        return self.rel in self.store.dirs

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def is_symlink(self) -> bool:
        return False

    def stat(self, *, follow_symlinks: bool = True) -> Stat:
        if self.is_file():
            return Stat(self.store.sizes[self.rel], stat_module.S_IFREG | 0o444)
        if self.is_dir():
            return Stat(0, stat_module.S_IFDIR | 0o555)
        raise FileNotFoundError(str(self))

    lstat = stat

    def resolve(self, strict: bool = False) -> HubPath:
        return self

    def absolute(self) -> HubPath:
        return self

    def expanduser(self) -> HubPath:
        return self

    def open(self, mode: str = "rb", buffering: int = -1, encoding=None, errors=None, newline=None):
        if any(c in mode for c in "wax+"):
            raise PermissionError(f"{self} is read-only")
        raw = self.store.open(self.rel)
        return io.TextIOWrapper(io.BufferedReader(raw), encoding=encoding or "utf-8", errors=errors,
                                newline=newline) if "b" not in mode else raw

    def read_bytes(self) -> bytes:
        with self.store.open(self.rel) as f:
            return f.read()

    def read_text(self, encoding=None, errors=None) -> str:
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")

    def iterdir(self):
        prefix = self.rel + "/" if self.rel else ""
        names = {p[len(prefix):].split("/")[0] for p in [*self.store.sizes, *self.store.dirs]
                 if p.startswith(prefix) and p != self.rel and p[len(prefix):]}
        return iter(sorted(self / n for n in names))

    def glob(self, pattern: str):
        prefix = self.rel + "/" if self.rel else ""
        depth = pattern.count("/")
        for p in sorted([*self.store.sizes, *self.store.dirs]):
            if p.startswith(prefix) and p != self.rel:
                tail = p[len(prefix):]
                if "**" in pattern:
                    ok = fnmatch.fnmatchcase(tail, pattern.replace("**/", "*")) or \
                        fnmatch.fnmatchcase(tail, pattern.replace("**/", ""))
                else:
                    ok = tail.count("/") == depth and all(
                        fnmatch.fnmatchcase(a, b) for a, b in zip(tail.split("/"), pattern.split("/")))
                if ok:
                    yield self / tail

    def rglob(self, pattern: str):
        return self.glob("**/" + pattern)


_STORES: dict[tuple[str, str], HubStore] = {}


def _reopen(repo: str, sha: str, rel: str) -> HubPath:
    store = _STORES.get((repo, sha)) or HubStore(repo, sha)
    root = store.root()
    return root / rel if rel else root


# ---------------------------------------------------------------- what readers call

def is_remote(path: object) -> bool:
    return isinstance(path, HubPath)


def path(value) -> Path | HubPath:
    """`Path(value)`, except that a HubPath stays one (never opens anything: see `as_root` for a URL)."""
    return value if isinstance(value, HubPath) else Path(value)


def as_root(path: Path | PurePath | str) -> Path | HubPath:
    """A dataset root as the readers take it: a HubPath stays one, a URL becomes one, anything else is a Path."""
    if isinstance(path, HubPath):
        return path
    if is_url(path):
        return open_url(str(path))
    return Path(path)


def open_url(text: str) -> HubPath:
    """The root of the hub dataset `text` names (lists the repository once; a HubError when that fails)."""
    try:
        repo, revision = parse_url(text)
    except ValueError as exc:
        raise LerodocError(str(exc), file=text, hint="e.g. hf://datasets/lerobot/pusht or "
                                                     "hf://datasets/lerobot/pusht@v3.0") from None
    return HubStore(repo, revision).root()


def source(path):
    """What pyarrow and PyAV open: a local regular file's checked path (`confined.source`: no link, FIFO or
    device), a hub file as a seekable range-reading file object."""
    if isinstance(path, HubPath):
        return path.store.open(path.rel)
    if is_url(path):   # a hub file named as text (a row span's key): pyarrow resolves the hf:// scheme itself
        return str(path)
    return confined.source(path)


def source_tail(path, size: int) -> tuple[object, bytes | None]:
    """`source(path)` and, for a local file, its last `size` bytes read from the descriptor that was checked
    (`confined.source_tail`); a hub file's tail is None (its bytes are range reads, not worth a second one)."""
    if isinstance(path, HubPath) or is_url(path):
        return source(path), None
    return confined.source_tail(path, size)


def open_binary(path):
    """A file opened for reading bytes: a hub file by range reads, a local one through `confined.open_file`."""
    return path.store.open(path.rel) if isinstance(path, HubPath) else confined.open_file(path)


def read_bytes(path) -> bytes:
    """A whole file's bytes: a hub file's by range reads, a local regular file's through `confined`."""
    return path.read_bytes() if isinstance(path, HubPath) else confined.read_bytes(path)


def files(root, folder: str, suffix: str = "") -> list[str]:
    """The files ending in `suffix` under `root/folder`, relative to `root` and sorted, hidden ones left out: a hub
    repository's from its listing, a local folder's regular files only (`confined.files_under`: links neither
    listed nor followed, bar a cache snapshot's)."""
    if isinstance(root, HubPath):
        base = f"{root.rel}/" if root.rel else ""
        start = base + (f"{folder}/" if folder else "")
        return sorted(rel[len(base):] for rel in root.store.sizes if rel.startswith(start) and rel.endswith(suffix)
                      and not any(part.startswith(".") for part in rel[len(base):].split("/")))
    return confined.files_under(root, folder, suffix)


def read_range(path, start: int, end: int) -> bytes:
    """Bytes [start, end) of a file, for copying them out once: a hub file's by range reads that the store's memory
    does not keep (`HubStore.fetch`), a local one's by pread (`confined.read_range`)."""
    if isinstance(path, HubPath):
        return path.store.fetch(path.rel, start, end)
    return confined.read_range(path, start, end)


def copy_file(src, dst: Path) -> None:
    """The whole file `src` (a hub file, fetched in ranges of COPY_BLOCK) as the new file `dst` (`files.new_file`)."""
    with new_file(dst) as tmp, open(tmp, "wb") as f:
        total = size(src)
        for start in range(0, total, COPY_BLOCK):
            f.write(read_range(src, start, min(start + COPY_BLOCK, total)))


COPY_BLOCK = 64 << 20


def size(path) -> int:
    return path.stat().st_size


def version(path) -> tuple[int, int, int]:
    """What a cache of a file's contents is keyed by, besides its path: a local file's inode, size and modification
    time (writing the file anew changes them), a hub file's size (it is read at the one commit its path names).
    OSError when the file cannot be looked at."""
    if isinstance(path, HubPath):
        return 0, size(path), 0
    stat = os.stat(path)
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def transfer(path: object) -> dict | None:
    """The transfer a hub root has cost so far (`HubStore.transfer`); None for a local one."""
    return path.store.transfer() if isinstance(path, HubPath) else None
