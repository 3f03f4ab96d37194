"""API errors in each API's own shape, and request-body parsing that produces them."""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from .encoding import BodyEncodingError, decode_body

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

    def anthropic_body(self) -> dict:
        return {
            "type": "error",
            "error": {
                "type": _ANTHROPIC_TYPES.get(self.status, "api_error"),
                "message": self.message,
            },
        }


def is_anthropic_path(path: str) -> bool:
    return path.startswith("/v1/messages")


def error_response(request_path: str, error: APIError) -> JSONResponse:
    body = error.anthropic_body() if is_anthropic_path(request_path) else error.openai_body()
    return JSONResponse(body, status_code=error.status, headers=error.headers)


async def parse_body(request: Request, model: type[M]) -> M:
    """Decode (``Content-Encoding``) and validate a JSON body; every failure is a 400
    naming the bad field (413/415 for a body too large once decoded, or encoded unknowably)."""
    state = getattr(request.app.state, "vllm", None)
    try:
        raw = decode_body(
            await request.body(),
            request.headers.get("content-encoding"),
            state.max_body_bytes if state is not None else 16 * 1024 * 1024,
        )
    except BodyEncodingError as exc:
        raise APIError(exc.status, str(exc)) from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


def validation_error(exc: ValidationError) -> APIError:
    first = exc.errors()[0]
    param = ".".join(str(p) for p in first["loc"]) or None
    detail = first["msg"]
    more = len(exc.errors()) - 1
    message = f"{param}: {detail}" if param else detail
    if more:
        message += f" (and {more} more error{'s' if more > 1 else ''})"
    return APIError(400, message, param=param)
