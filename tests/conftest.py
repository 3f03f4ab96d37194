"""Shared fixtures: the real default model served over real HTTP and loaded in-process, once
per test session each, the embedding models server, and the tiny tokenizer the in-process model
tests use. Every httpx client of the test process shares one default TLS context."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from embedding_models import write_embedding_models_dir  # noqa: E402
from servers import cli_server  # noqa: E402
from tiny_models import build_tiny_tokenizer  # noqa: E402


def _share_the_default_tls_context(transports: ModuleType) -> None:
    """Each httpx client (the openai, anthropic and ollama SDKs' too, on httpx or httpx2)
    builds a TLS context from the CA bundle, 30-150 ms here, and the tests build thousands of
    clients, all for plain-HTTP loopback. The default context (verify=True, no client
    certificate) is built once per CA setting instead; any other argument builds its own."""
    build = transports.create_ssl_context

    @functools.cache
    def built(trust_env: bool, cafile: str | None, capath: str | None):
        return build(verify=True, trust_env=trust_env)

    def create(verify=True, cert=None, trust_env=True):
        if verify is not True or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        return built(trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))

    transports.create_ssl_context = create


for _name in ("httpx._transports.default", "httpx2._transports.default"):
    with contextlib.suppress(ImportError):
        _share_the_default_tls_context(importlib.import_module(_name))


@pytest.fixture(scope="session")
def real_server(tmp_path_factory) -> str:
    """Base URL of `vllm-mlx serve` on the embedded default model."""
    log = tmp_path_factory.mktemp("server") / "server.log"
    with cli_server("--served-model-name", "smollm2", log_path=log) as base:
        yield base


@pytest.fixture(scope="session")
def embedded_model():
    """The embedded default model loaded in-process with the default switches, on the native
    kernels (tests that take it skip where they are not built). Shared by every test that takes
    it: hold per-test state (caches, sources, engines) outside it, never on it."""
    from vllm_mlx import native
    from vllm_mlx.models import load_model

    if not native.available():
        pytest.skip("vllm_mlx.native is not built")
    return load_model(None, progress=False)


@pytest.fixture(scope="session")
def openai_client(real_server):
    import openai

    return openai.OpenAI(base_url=f"{real_server}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="session")
def embedding_server(tmp_path_factory) -> str:
    """Base URL of `vllm-mlx serve --models-dir` over tiny embedding models, rerankers and a
    tiny chat model (tests/embedding_models.py)."""
    root = tmp_path_factory.mktemp("embedding-models")
    models = write_embedding_models_dir(root / "models")
    with cli_server("--models-dir", str(models), log_path=root / "server.log") as base:
        yield base


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    """A tiny quantized Llama base, two adapters and mlx-lm's tokens for each
    (tests/tiny_adapters.py); the CPU path runs the base on the native fused blocks."""
    from tiny_adapters import make_fleet

    return make_fleet(tmp_path_factory.mktemp("adapters"), quantized=True)


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny byte-level tokenizer of tests/tiny_models.py (cached there; do not mutate)."""
    return build_tiny_tokenizer()
