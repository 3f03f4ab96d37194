"""A local stand-in for the Hugging Face hub: the part of its HTTP API that
``huggingface_hub``'s downloads use (repo info, the file tree, ``resolve`` with HEAD,
ranges and the headers the client reads), serving model folders as repos at given commits.

Requests are recorded, a repo can answer as gated (401) and a file can stall after some
bytes until released, so tests can kill a download half-way. Point the client at it with
``HF_ENDPOINT=stand_in.url`` and ``HF_HUB_DISABLE_XET=1``."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    """A repo: commits (sha -> folder of files), branches/tags (name -> sha), gating."""

    commits: dict[str, Path]
    refs: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    token: str | None = None  # the token a gated repo lets in

    def commit(self, revision: str | None) -> str | None:
        revision = revision or "main"
        return revision if revision in self.commits else self.refs.get(revision)


def commit_sha(label: str) -> str:
    """A 40-hex commit id for a label (stable across runs)."""
    return hashlib.sha1(label.encode()).hexdigest()


class HubStandIn:
    """``with HubStandIn() as hub: hub.add("org/name", folder)``; ``hub.url`` is the
    endpoint; ``hub.requests`` lists ``(method, path, Range header)``."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.stall: dict[str, int] = {}  # file name -> bytes sent before stalling
        self.release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def add(self, repo_id: str, folder: Path, *, sha: str | None = None, ref: str = "main",
            gated: bool = False, token: str | None = None) -> str:  # fmt: skip
        """Serve ``folder`` as ``repo_id`` at commit ``sha`` (``ref`` points at it)."""
        sha = sha or commit_sha(f"{repo_id}:{folder}")
        repo = self.repos.setdefault(repo_id, Repo({}))
        repo.commits[sha] = folder
        repo.refs[ref] = sha
        repo.gated, repo.token = gated, token
        return sha

    def downloads(self, name: str) -> list[tuple[str, str, str | None]]:
        """The GET requests for files called ``name``."""
        return [r for r in self.requests if r[0] == "GET" and r[1].endswith("/" + name)]

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


def _handler(hub: HubStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path, self.headers.get("Range")))
            api = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/(revision|tree)/(.+?))?/?", path)
            resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            repo_id = api[1] if api else resolve[1] if resolve else None
            repo = hub.repos.get(repo_id or "")
            if repo is None:
                return self._error(404 if repo_id else 400, "RepoNotFound")
            if repo.gated and self.headers.get("Authorization") != f"Bearer {repo.token}":
                return self._error(401, "GatedRepo")
            revision = (api[3] if api else resolve[2]) if (api or resolve) else None
            sha = repo.commit(revision)
            if sha is None:
                return self._error(404, "RevisionNotFound")
            folder = repo.commits[sha]
            files = sorted(p for p in folder.rglob("*") if p.is_file())
            if api and api[2] != "tree":
                siblings = [{"rfilename": str(p.relative_to(folder))} for p in files]
                return self._json({"id": repo_id, "sha": sha, "siblings": siblings})
            if api:
                tree = [
                    {"type": "file", "path": str(p.relative_to(folder)),
                     "size": p.stat().st_size, "oid": _oid(p)}
                    for p in files
                ]  # fmt: skip
                return self._json(tree)
            return self._file(folder / resolve[3], sha, head)  # type: ignore[index]

        def _file(self, file: Path, sha: str, head: bool) -> None:
            if not file.is_file():
                return self._error(404, "EntryNotFound")
            data = file.read_bytes()
            start, end = 0, len(data)
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
            if match and not head:
                start = int(match[1])
                end = min(int(match[2]) + 1, len(data)) if match[2] else len(data)
            ranged = (start, end) != (0, len(data))
            self.send_response(206 if ranged else 200)
            self.send_header("ETag", f'"{_oid(file)}"')
            self.send_header("X-Repo-Commit", sha)
            self.send_header("Content-Length", str(end - start))
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
            self.end_headers()
            if head:
                return
            body = data[start:end]
            limit = hub.stall.get(file.name)
            if limit is not None and not start:
                self.wfile.write(body[:limit])
                self.wfile.flush()
                hub.release.wait(60)
                self.close_connection = True
                return  # the rest is never sent: the client sees a cut connection
            self.wfile.write(body)

        def _json(self, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str) -> None:
            body = json.dumps({"error": code}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    return Handler


def _oid(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()
