"""A real browser for the UI tests: Debian's chromium driven by playwright's Python API.

playwright cannot download its own browser build offline, so the system chromium is used
through ``executable_path``. Without either, the browser tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest

CHROMIUM = os.environ.get("VLLM_MLX_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    """Per module: playwright's sync API keeps an asyncio loop running in this thread while
    it is started, which would break later tests that call ``asyncio.run``."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(
            f"no chromium at {CHROMIUM} (apt-get install chromium; scripts/install.sh --test)"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    # playwright's node driver fails to start threads with scripts/test.sh's OpenBLAS preload
    preload = os.environ.pop("LD_PRELOAD", None)
    try:
        playwright = sync_api.sync_playwright().start()
        # --no-sandbox: the tests may run as root, where chromium's sandbox refuses to start
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    finally:
        if preload is not None:
            os.environ["LD_PRELOAD"] = preload
    yield browser
    browser.close()
    playwright.stop()


LAST_REPLY_ENDED = """() => {
  const reply = [...document.querySelectorAll('[data-role=assistant]')].at(-1);
  return Boolean(reply && reply.dataset.state && reply.dataset.state !== 'streaming');
}"""


@dataclass
class Tab:
    """A page plus what the tests check on every page: console errors, uncaught exceptions
    and requests to anywhere but the server."""

    page: object
    origin: str
    errors: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)  # JSON bodies POSTed to the API

    def open(self, path: str = "/") -> None:
        self.page.goto(self.origin + path)
        self.page.wait_for_selector("body[data-ready='1']")

    def ask(self, text: str) -> None:
        """Type into the textarea and press Enter, as a person would."""
        self.page.fill("#prompt", text)
        self.page.press("#prompt", "Enter")

    def last_reply(self):
        return self.page.locator('[data-role="assistant"]').last

    def wait_done(self, timeout: float = 60_000) -> None:
        """Until the last reply's request has ended (done, stopped or failed)."""
        self.page.wait_for_function(LAST_REPLY_ENDED, timeout=timeout)


@pytest.fixture
def tab(browser) -> Iterator:
    """Use as ``with tab(base) as t``; the page's checks are asserted when the block ends."""

    @contextmanager
    def opened(base: str, allow_errors: bool = False):
        context = browser.new_context(viewport={"width": 1100, "height": 720})
        page = context.new_page()
        t = Tab(page, base)
        page.on("console", lambda m: m.type == "error" and t.errors.append(m.text))
        page.on("pageerror", lambda e: t.errors.append(f"uncaught: {e}"))

        def seen(request) -> None:
            parts = urlsplit(request.url)
            if parts.scheme in ("http", "https") and f"{parts.scheme}://{parts.netloc}" != base:
                t.outside.append(request.url)
            if request.method == "POST" and request.post_data:
                t.bodies.append(request.post_data_json)

        page.on("request", seen)
        try:
            yield t
        finally:
            context.close()
        assert not t.outside, f"the page loaded from outside: {t.outside}"
        if not allow_errors:
            assert not t.errors, f"console errors: {t.errors}"

    return opened
