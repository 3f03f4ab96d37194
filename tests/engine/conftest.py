"""The engine tests' name for the embedded default model, loaded once per session
(tests/conftest.py's ``embedded_model``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def loaded(embedded_model):
    return embedded_model
