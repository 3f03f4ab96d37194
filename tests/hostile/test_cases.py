"""The hostile cases through the real CLI server (replay): each is a 4xx in its API's
shape naming the field, the near-misses succeed, the server stays up and /health keeps
answering while they run."""

from __future__ import annotations

import httpx
import pytest

from .cases import ACCEPTED, CASES
from .hostile import HealthProbe, check_answer, error_param, post


@pytest.fixture(scope="module")
def probe(replay_cli):
    with HealthProbe(replay_cli) as running:
        yield running
    assert running.samples and not running.failures(), running.failures()[:5]


@pytest.mark.parametrize(("name", "path", "body", "param"), CASES, ids=[c[0] for c in CASES])
def test_hostile_case_is_a_4xx_in_the_apis_shape(replay_cli, probe, name, path, body, param):
    stream = b'"stream":true' in body
    reply = post(replay_cli, path, body)
    assert 400 <= reply.status_code < 500, (name, reply.status_code, reply.text[:300])
    check_answer(path, reply, stream=stream)
    if param is not None:
        assert error_param(reply) == param, reply.json()
    assert httpx.get(f"{replay_cli}/health", timeout=30).status_code == 200


@pytest.mark.parametrize(("name", "path", "body"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_near_miss_succeeds(replay_cli, probe, name, path, body):
    reply = post(replay_cli, path, body)
    assert reply.status_code == 200, (name, reply.text[:300])
    check_answer(path, reply, stream=b'"stream":true' in body)
