"""API errors: the one table from a failure's type to its status and code, each API's own
shape for them, and request-body parsing that produces them.

Every path that answers a failure goes through ``api_error``: the app's exception handlers
(a direct answer), the stream fallbacks of every surface (a failure mid-stream) and the
event a stream that waited for a model load ends with. So a failure has one status and
code wherever it happens.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..chat.template_kwargs import ChatTemplateError
from ..engine.engine import QueueFullError
from ..engine.generation import EngineUnavailableError, GenerationError
from ..fleet.pool import (
    AdapterRefused,
    ModelBusy,
    ModelLoadFailed,
    ModelTooLarge,
    PoolFull,
    UnknownModel,
)
from ..request import RequestError
from .encoding import BodyEncodingError, decompressed

M = TypeVar("M", bound=BaseModel)

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
}
_LLAMA_CPP_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers  # e.g. a 405's Allow

    def openai_body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": _OPENAI_TYPES.get(self.status, "server_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def ollama_body(self) -> dict:
        """Ollama's: one string (its clients raise it as ``ResponseError``), led by the
        field it is about when the message does not name it."""
        named = not self.param or self.param in self.message
        return {"error": self.message if named else f"{self.param}: {self.message}"}

    def llama_cpp_body(self) -> dict:
        """llama.cpp's server (``/infill``): the status repeated as ``code``."""
        kind = _LLAMA_CPP_TYPES.get(self.status, "server_error")
        return {"error": {"code": self.status, "message": self.message, "type": kind}}

    def anthropic_body(self) -> dict:
        return {
            "type": "error",
            "error": {
                "type": _ANTHROPIC_TYPES.get(self.status, "api_error"),
                "message": self.message,
            },
        }


@dataclass(frozen=True)
class Failure:
    """How the APIs answer one type of failure."""

    status: int
    code: str | None = None
    prefix: str = ""  # before the exception's own message
    param: str | None = None  # the request field at fault, when the exception names none
    headers: dict[str, str] | None = None


RETRY_AFTER_S = "5"

# The one table: a failure's type (or its nearest listed base class) -> how it is answered.
# A new failure type gets its row here; every surface, direct or streamed, follows.
FAILURES: dict[type[Exception], Failure] = {
    RequestError: Failure(400),  # the request cannot be served for this model
    ChatTemplateError: Failure(400),
    AdapterRefused: Failure(400, "invalid_adapter", param="model"),
    UnknownModel: Failure(404, "model_not_found", param="model"),
    ModelBusy: Failure(409, "model_busy"),
    QueueFullError: Failure(429, prefix="server is busy: "),
    ModelLoadFailed: Failure(500, "model_load_failed"),
    GenerationError: Failure(500, prefix="generation failed: "),
    EngineUnavailableError: Failure(503, prefix="service unavailable: "),
    PoolFull: Failure(503, "model_capacity", headers={"Retry-After": RETRY_AFTER_S}),
    ModelTooLarge: Failure(503, "model_too_large"),
}
UNEXPECTED = Failure(500, prefix="internal error: ")


def failure_of(exc: Exception) -> Failure:
    """The table's row for ``exc``: its own type's, else its nearest listed base's."""
    for cls in type(exc).__mro__:
        if cls in FAILURES:
            return FAILURES[cls]
    return UNEXPECTED


def api_error(exc: Exception) -> APIError:
    """``exc`` as the APIs answer it: an ``APIError`` as raised, starlette's HTTP errors
    with their status, everything else by the table."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, HTTPException):
        return APIError(exc.status_code, exc.detail, headers=dict(exc.headers or {}) or None)
    failure = failure_of(exc)
    return APIError(
        failure.status,
        f"{failure.prefix}{exc}",
        param=getattr(exc, "param", None) or failure.param,
        code=failure.code,
        headers=failure.headers,
    )


def is_anthropic_path(path: str) -> bool:
    return path.startswith("/v1/messages")


def is_ollama_path(path: str) -> bool:
    return path.startswith("/api/")


def error_body(request_path: str, error: APIError) -> dict:
    """The error in the shape of the API the path belongs to."""
    if is_anthropic_path(request_path):
        return error.anthropic_body()
    if is_ollama_path(request_path):
        return error.ollama_body()
    if request_path == "/infill":
        return error.llama_cpp_body()
    return error.openai_body()


def error_response(request_path: str, error: APIError) -> JSONResponse:
    body = error_body(request_path, error)
    return JSONResponse(body, status_code=error.status, headers=error.headers)


# Bodies above this are decoded and validated in a worker thread: 16 MB of JSON takes about
# half a second, which on the event loop would stall /health and every stream.
OFF_LOOP_BYTES = 256 * 1024


async def parse_body(request: Request, model: type[M]) -> M:
    """Decode (``Content-Encoding``) and validate a JSON body; every failure is a 400
    naming the bad field (413/415 for a body too large once decoded, or encoded unknowably)."""
    state = getattr(request.app.state, "vllm", None)
    try:
        raw = decompressed(
            await request.body(),
            request.headers.get("content-encoding"),
            state.max_body_bytes if state is not None else 16 * 1024 * 1024,
        )
    except BodyEncodingError as exc:
        raise APIError(exc.status, str(exc)) from None
    if len(raw) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(decode_body, raw, model)
    return decode_body(raw, model)


def decode_body(raw: bytes, model: type[M]) -> M:
    """The body as ``model``, as strictly as OpenAI reads it.

    The JSON decoder (jiter) bounds nesting at 200 levels, refuses lone surrogates
    (``"\\ud800"``), bytes that are not UTF-8 and ``NaN``/``Infinity``, so nothing that
    cannot be encoded again is ever echoed; validation is strict, so ``"max_tokens": "10"``
    and ``"stream": "yes"`` are errors rather than coerced."""
    try:
        data: Any = from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        raise APIError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object")
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        raise validation_error(exc) from None


def part_text(part: dict, key: str, param: str) -> str:
    """A content part's text field: a string or absent; anything else is a 400 naming it
    (a number there would otherwise fail deep in the converter as a 500)."""
    value = part.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise APIError(400, f"{param}.{key} must be a string", param=f"{param}.{key}")
    return value


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "dict", "list"}


def _union_tag(part: object) -> bool:
    """Pydantic names the union member an error was found under (``str``,
    ``literal['none','auto']``, ``list[ContentPart]``); that is not part of the field path."""
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part)


def validation_error(exc: ValidationError) -> APIError:
    first = exc.errors()[0]
    param = ".".join(str(p) for p in first["loc"] if not _union_tag(p)) or None
    detail = first["msg"]
    more = len(exc.errors()) - 1
    message = f"{param}: {detail}" if param else detail
    if more:
        message += f" (and {more} more error{'s' if more > 1 else ''})"
    return APIError(400, message, param=param)
