"""A scripted server for driving the real agent CLIs: the real app over real HTTP, whose
"model" answers each request by a rule the test chooses (decided from the prompt, so the
clients' side requests and retries cannot shift a fixed sequence), and which records every
request the client sent."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# the app and its state come through tests/servers.py, which follows the server's layout
from servers import ServerState, create_app, thread_server

from vllm_mlx.engine.sources import SourceDefaults, Step
from vllm_mlx.options import RuntimeOptions
from vllm_mlx.runtime import build_replay_runtime

ROOT = Path(__file__).resolve().parents[2]
CLIENTS_BIN = ROOT / ".clients" / "node_modules" / ".bin"


def client_binary(name: str) -> str | None:
    """The CLI installed by `scripts/install.sh --clients` (project-local), else on PATH."""
    local = CLIENTS_BIN / name
    return str(local) if local.exists() else shutil.which(name)


class ScriptedSource(SourceDefaults):
    """A token source whose output for each request is ``script(prompt text)``, tokenized by
    the model's real tokenizer and ended with EOS."""

    def __init__(self, tokenizer, script: Callable[[str], str]):
        self.tokenizer, self.script = tokenizer, script
        self._running: dict[int, list] = {}  # uid -> [token ids, position, max_tokens]
        self._next_uid = 0

    def insert(self, prompt, *, sampler, processors, max_tokens, checkpoints=()):
        text = self.script(self.tokenizer.decode(prompt))
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        uid, self._next_uid = self._next_uid, self._next_uid + 1
        self._running[uid] = [ids, 0, max_tokens]
        return uid, 0

    def remove(self, uid: int) -> None:
        self._running.pop(uid, None)

    def step(self) -> tuple[list[Step], list[int]]:
        steps, ended = [], []
        for uid, state in list(self._running.items()):
            ids, position, max_tokens = state
            if position >= len(ids):
                ended.append(uid)
                del self._running[uid]
                continue
            state[1] += 1
            at_limit = state[1] >= max_tokens
            steps.append(Step(uid, ids[position], None, at_limit))
            if at_limit:
                del self._running[uid]
        return steps, ended

    def reset(self) -> None:
        self._running.clear()


@dataclass
class Seen:
    """One request as the server received it (body decoded when it is JSON)."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: object = None
    status: int | None = None
    response: bytes = b""


@dataclass
class Recorder:
    """ASGI middleware keeping every HTTP request and the start of each response."""

    app: Callable
    seen: list[Seen] = field(default_factory=list)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        entry = Seen(scope["method"], scope["path"], scope["query_string"].decode(), headers)
        entry.body = _decode(raw, headers.get("content-encoding", ""))
        self.seen.append(entry)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        async def recording_send(message):
            if message["type"] == "http.response.start":
                entry.status = message["status"]
            elif message["type"] == "http.response.body" and len(entry.response) < 65536:
                entry.response += message.get("body", b"")
            await send(message)

        await self.app(scope, replay, recording_send)

    def generations(self, path_prefix: str) -> list[Seen]:
        """The generation requests on one surface (count_tokens and probes left out)."""
        return [
            s
            for s in self.seen
            if s.method == "POST"
            and s.path.startswith(path_prefix)
            and "count_tokens" not in s.path
        ]


def _decode(raw: bytes, encoding: str) -> object:
    if not raw:
        return None
    if encoding == "gzip":
        raw = gzip.decompress(raw)
    elif encoding == "zstd":
        return {"_encoded": "zstd", "bytes": len(raw)}
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw


@contextmanager
def scripted_server(
    script: Callable[[str], str],
    *,
    context_length: int | None = None,
    tool_parser: str = "hermes",
    reasoning_parser: str | None = None,
    served_model_name: str = "replay",
):
    """The real app in a thread around a :class:`ScriptedSource`; yields (base URL,
    recorder). ``context_length`` overrides the model's (to make prompts over-context, or
    to fit a client's large system prompt, which the replay never runs)."""
    runtime = build_replay_runtime(
        "",
        options=RuntimeOptions.of(tool_call_parser=tool_parser, reasoning_parser=reasoning_parser),
    )
    runtime.engine.source = ScriptedSource(runtime.loaded.tokenizer, script)
    if context_length is not None:
        runtime.pipeline.context_length = context_length
    recorder = Recorder(create_app(ServerState(runtime.pipeline, served_model_name)))
    try:
        with thread_server(recorder) as base:
            yield base, recorder
    finally:
        runtime.close()


def offline_env(home: Path) -> dict[str, str]:
    """A clean environment for a client: its own HOME (no user settings), nothing else."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM")}
    return {**keep, "HOME": str(home), "NO_COLOR": "1"}


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def run_claude(
    base: str, workdir: Path, prompt: str, *args: str, output: str = "json", timeout: float = 120
) -> Run:
    """`claude -p PROMPT --output-format OUTPUT` against ``base``, offline, bounded in turns
    (``stream-json`` prints every message the user would see, one JSON object a line)."""
    env = {
        **offline_env(workdir / "home"),
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_API_KEY": "sk-unused",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    command = [client_binary("claude"), "-p", prompt, "--output-format", output]
    command += ["--verbose"] if output == "stream-json" else []
    command += ["--max-turns", "3", "--model", "replay", "--no-session-persistence", *args]
    return _run(command, env, workdir, timeout)


def run_codex(base: str, workdir: Path, prompt: str, *args: str, timeout: float = 120) -> Run:
    """`codex exec --json PROMPT` against ``base`` through a Responses provider block."""
    codex_home = workdir / "codex-home"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "replay"\n'
        'model_provider = "local"\n'
        "[model_providers.local]\n"
        'name = "vllm-mlx"\n'
        f'base_url = "{base}/v1"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )
    env = {**offline_env(workdir / "home"), "CODEX_HOME": str(codex_home)}
    command = [client_binary("codex"), "exec", "--json", "--skip-git-repo-check", "--ephemeral"]
    command += ["--sandbox", "danger-full-access", *args, prompt]
    return _run(command, env, workdir, timeout)


def _run(command: list[str], env: dict[str, str], workdir: Path, timeout: float) -> Run:
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        command,
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def jsonl(text: str) -> list[dict]:
    """Codex's `--json` events (other lines, such as warnings, skipped)."""
    events = []
    for line in text.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events
