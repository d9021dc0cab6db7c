"""A hub on 127.0.0.1 for tests: the routes huggingface_hub 2.4 and modelscope_hub 0.5 call, over real HTTP.

Hugging Face layout (HF_ENDPOINT=server.url):
  GET  /api/{type}s/{repo}[/revision/{rev}]      repo info with `sha` and `siblings`
  GET  /api/{type}s/{repo}/tree/{rev}[/{path}]   file and folder listing (?recursive=true: every level)
  HEAD/GET /[datasets/]{repo}/resolve/{rev}/{path}  ETag, X-Repo-Commit, Content-Length; Range -> 206
  POST /api/repos/create, /api/validate-yaml, /api/{type}s/{repo}/preupload/{rev}, .../commit/{rev}
ModelScope layout (MODELSCOPE_ENDPOINT=server.url): see `_modelscope`.

`cut[path] = n` makes the next GET of that file stop after n bytes and drop the connection (once);
`fail.add(path)` answers 500 to its GETs until removed (the client retries these); `deny[path] = status` answers its
GETs with `status` until removed (403: not retried, the client fails at once); `refuse[repo_id] = status` answers
every route of that repository with `status` (429: rate-limited). Every request is kept in `log`; `Range: bytes=a-b` (or `a-`) is
served as 206, and `sent` counts the body bytes of every answer (`file_bytes` those of file contents; `spans[path]`
the [start, stop) byte ranges of that file sent, in order).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class Repo:
    files: dict[str, bytes]
    gated: bool = False
    commits: int = 1

    @property
    def sha(self) -> str:
        return hashlib.sha1(f"{sorted(self.files)}{self.commits}".encode()).hexdigest()


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def folder_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


class HubServer:
    """Serve `repos[(type, repo_id)]` until `close()`; use as a context manager."""

    def __init__(self):
        self.repos: dict[tuple[str, str], Repo] = {}
        self.cut: dict[str, int] = {}
        self.fail: set[str] = set()
        self.deny: dict[str, int] = {}
        self.refuse: dict[str, int] = {}
        self.log: list[Request] = []
        self.sent = 0
        self.file_bytes = 0
        self.spans: dict[str, list[tuple[int, int]]] = {}
        self._count = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def add(self, repo_type: str, repo_id: str, files: dict[str, bytes], gated: bool = False) -> Repo:
        self.repos[(repo_type, repo_id)] = Repo(dict(files), gated)
        return self.repos[(repo_type, repo_id)]

    def reset_counts(self) -> None:
        with self._count:
            self.log.clear()
            self.sent = self.file_bytes = 0
            self.spans.clear()

    def counted(self, n: int, file: str | None = None, start: int = 0) -> None:
        with self._count:
            self.sent += n
            if file is not None:
                self.file_bytes += n
                self.spans.setdefault(file, []).append((start, start + n))

    def bytes_of(self, prefix: str) -> int:
        """File bytes sent since `reset_counts` from the files whose path starts with `prefix`."""
        with self._count:
            return sum(b - a for path, spans in self.spans.items() if path.startswith(prefix) for a, b in spans)

    def gets(self, suffix: str) -> list[Request]:
        """GET requests whose unquoted path (query included) ends with `suffix`."""
        return [r for r in self.log if r.method == "GET" and unquote(r.path).endswith(suffix)]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True   # headers and body go out as two writes: no 40 ms delayed-ACK stall between

        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:
            self._route()

        def do_GET(self) -> None:
            self._route()

        def do_POST(self) -> None:
            self._route()

        def _route(self) -> None:
            hub.log.append(Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            url = urlsplit(self.path)
            path, self.query = unquote(url.path), parse_qs(url.query)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if self.command == "POST" else b""
            for methods, pattern, method in ROUTES:
                m = re.fullmatch(pattern, path)
                if m and self.command in methods:
                    return method(self, body, **m.groupdict())
            self._json({"error": f"no route for {self.command} {path}"}, 404)

        # --- helpers -------------------------------------------------------------------------------------
        def _json(self, payload, status: int = 200, headers: dict | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for k, v in {"Content-Type": "application/json", "Content-Length": str(len(data)),
                         **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
                hub.counted(len(data))

        def _repo(self, kind: str | None, repo_id: str) -> Repo | None:
            repo_type = {"datasets": "dataset", "dataset": "dataset", None: "model", "models": "model",
                         "model": "model"}[kind]
            repo = hub.repos.get((repo_type, repo_id))
            if repo_id in hub.refuse:
                self._json({"error": "refused"}, hub.refuse[repo_id], {"Retry-After": "0"})
                return None
            if repo is None:
                self._json({"error": "Repository not found"}, 404, {"X-Error-Code": "RepoNotFound"})
            elif repo.gated and not self.headers.get("Authorization"):
                self._json({"error": "gated"}, 403, {"X-Error-Code": "GatedRepo"})
                return None
            return repo

        def _send_file(self, repo: Repo, path: str, extra: dict[str, str]) -> None:
            if path not in repo.files:
                return self._json({"error": "Entry not found"}, 404, {"X-Error-Code": "EntryNotFound"})
            if path in hub.fail and self.command == "GET":
                return self._json({"error": "internal"}, 500)
            if path in hub.deny and self.command == "GET":
                return self._json({"error": "denied"}, hub.deny[path])
            data = repo.files[path]
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            start = int(m.group(1)) if m else 0
            stop = min(len(data), int(m.group(2)) + 1) if m and m.group(2) else len(data)
            self.send_response(206 if m else 200)
            headers = {"Content-Length": str(max(0, stop - start)), "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream", **extra}
            if m:
                headers["Content-Range"] = f"bytes {start}-{stop - 1}/{len(data)}"
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command == "HEAD":
                return
            cut = hub.cut.pop(path, None) if self.command == "GET" else None
            body = data[start:stop] if cut is None else data[start:cut]
            self.wfile.write(body)
            hub.counted(len(body), file=path, start=start)
            if cut is not None:
                self.wfile.flush()
                self.close_connection = True

        # --- Hugging Face --------------------------------------------------------------------------------
        def _hf_info(self, body, kind, repo_id, rev="main") -> None:
            if repo := self._repo(kind, repo_id):
                self._json({"id": repo_id, "sha": repo.sha, "private": False, "gated": repo.gated,
                            "siblings": [{"rfilename": p} for p in repo.files]})

        def _hf_tree(self, body, kind, repo_id, rev, path=None) -> None:
            """Files and folders below `path` (all levels with ?recursive=true, else its children), in one page."""
            if repo := self._repo(kind, repo_id):
                prefix = f"{path.strip('/')}/" if path else ""
                recursive = self.query.get("recursive", ["false"])[0].lower() == "true"
                entries: dict[str, dict] = {}
                for p, d in sorted(repo.files.items()):
                    if not p.startswith(prefix):
                        continue
                    parts = p[len(prefix):].split("/")
                    for i in range(1, len(parts) if recursive else min(2, len(parts))):
                        folder = prefix + "/".join(parts[:i])
                        entries.setdefault(folder, {"type": "directory", "path": folder, "oid": "0" * 40, "size": 0})
                    if recursive or len(parts) == 1:
                        entries[p] = {"type": "file", "path": p, "size": len(d), "oid": git_oid(d)}
                if path and not entries:
                    return self._json({"error": "Entry not found"}, 404, {"X-Error-Code": "EntryNotFound"})
                self._json(list(entries.values()))

        def _hf_file(self, body, kind, repo_id, rev, path) -> None:
            if repo := self._repo(kind, repo_id):
                data = repo.files.get(path, b"")
                self._send_file(repo, path, {"ETag": f'"{git_oid(data)}"', "X-Repo-Commit": repo.sha})

        def _hf_create(self, body) -> None:
            req = json.loads(body)
            repo_id = "/".join(filter(None, [req.get("organization"), req["name"]]))
            repo_type = req.get("type") or "model"
            hub.repos.setdefault((repo_type, repo_id), Repo({}))
            prefix = "" if repo_type == "model" else f"{repo_type}s/"
            self._json({"url": f"{hub.url}/{prefix}{repo_id}", "name": repo_id})

        def _hf_validate_yaml(self, body) -> None:
            self._json({"errors": [], "warnings": []})

        def _hf_preupload(self, body, kind, repo_id, rev) -> None:
            if self._repo(kind, repo_id):
                self._json({"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                      for f in json.loads(body)["files"]]})

        def _hf_commit(self, body, kind, repo_id, rev) -> None:
            if repo := self._repo(kind, repo_id):
                for line in body.splitlines():
                    item = json.loads(line)
                    if item["key"] == "file":
                        repo.files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                repo.commits += 1
                self._json({"commitUrl": f"{hub.url}/{kind}/{repo_id}/commit/{repo.sha}", "commitOid": repo.sha,
                            "pullRequestUrl": None})

        # --- ModelScope ----------------------------------------------------------------------------------
        def _ms_files(self, body, kind, repo_id, listing) -> None:
            if repo := self._repo(kind, repo_id):
                files = [{"Type": "blob", "Path": p, "Name": p.rsplit("/", 1)[-1], "Size": len(d),
                          "Sha256": hashlib.sha256(d).hexdigest(), "Revision": repo.sha}
                         for p, d in repo.files.items()]
                self._json({"Code": 200, "Success": True, "Data": {"Files": files, "TotalCount": len(files)}})

        def _ms_file(self, body, kind, repo_id) -> None:
            if repo := self._repo(kind, repo_id):
                path = self.query.get("FilePath", [""])[0]
                data = repo.files.get(path, b"")
                self._send_file(repo, path, {"ETag": f'"{git_oid(data)}"'})

    repo = r"(?P<repo_id>[^/]+/[^/]+)"
    get, post, file = ("GET",), ("POST",), ("GET", "HEAD")
    ROUTES = [
        (get, rf"/api/(?P<kind>models|datasets)/{repo}/revision/(?P<rev>[^/]+)", Handler._hf_info),
        (get, rf"/api/(?P<kind>models|datasets)/{repo}", Handler._hf_info),
        (get, rf"/api/(?P<kind>models|datasets)/{repo}/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?", Handler._hf_tree),
        (post, r"/api/repos/create", Handler._hf_create),
        (post, r"/api/validate-yaml", Handler._hf_validate_yaml),
        (post, rf"/api/(?P<kind>models|datasets)/{repo}/preupload/(?P<rev>[^/]+)", Handler._hf_preupload),
        (post, rf"/api/(?P<kind>models|datasets)/{repo}/commit/(?P<rev>[^/]+)", Handler._hf_commit),
        (file, rf"/(?:(?P<kind>datasets)/)?{repo}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", Handler._hf_file),
        (get, rf"/api/v1/(?P<kind>models|datasets)/{repo}/repo/(?P<listing>files|tree)", Handler._ms_files),
        (file, rf"/api/v1/(?P<kind>models|datasets)/{repo}/repo", Handler._ms_file),
    ]
    return Handler
