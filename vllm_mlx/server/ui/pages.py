"""The playground and status pages: one HTML document each, with its CSS and JavaScript
inlined from the package's ``static/`` files, so a page is a single response that loads
nothing else (no build step, no CDN, works offline).

Each page is sent with a Content-Security-Policy naming the SHA-256 of its one script and
one stylesheet and allowing connections to this server only, so the browser itself refuses
anything from outside.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from starlette.responses import HTMLResponse

_STATIC = resources.files(__package__) / "static"

# page name -> (HTML template, scripts in order); every page uses style.css
PAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "playground": ("playground.html", ("common.js", "stream.js", "render.js", "playground.js")),
    "status": ("status.html", ("common.js", "status.js")),
}


@dataclass(frozen=True)
class Page:
    html: str  # with %AUTH% still to fill in
    csp: str


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _read(name: str) -> str:
    return (_STATIC / name).read_text(encoding="utf-8")


@cache
def page(name: str) -> Page:
    """A page assembled from its static files (read once per process)."""
    template, scripts = PAGES[name]
    style = _read("style.css")
    script = "\n".join(_read(s) for s in scripts)
    html = _read(template).replace("%STYLE%", style).replace("%SCRIPT%", script)
    csp = "; ".join(
        [
            "default-src 'none'",
            f"script-src {_digest(script)}",
            f"style-src {_digest(style)}",
            "connect-src 'self'",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
    return Page(html, csp)


def page_response(name: str, api_key_required: bool) -> HTMLResponse:
    """The page; ``data-auth`` tells its script to ask for the key before the first call."""
    built = page(name)
    html = built.html.replace("%AUTH%", "required" if api_key_required else "open", 1)
    return HTMLResponse(
        html,
        headers={
            "Content-Security-Policy": built.csp,
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-cache",
        },
    )
