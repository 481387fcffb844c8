"""OpenAI-format errors, so every client library sees the shape it already parses."""

from __future__ import annotations

from typing import Any

import msgspec

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "timeout_error",
}


class OpenAIError(Exception):
    """An error that becomes `{"error": {...}}` with its HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _TYPE_BY_STATUS.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)

    def body_bytes(self) -> bytes:
        return msgspec.json.encode(self.body())


def error_body(
    message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)


def not_found_model(model: str) -> OpenAIError:
    return OpenAIError(
        404,
        f"The model `{model}` does not exist or is not served here.",
        param="model",
        code="model_not_found",
    )


def rate_limited(message: str, *, retry_after_s: float, headers: dict[str, str] | None = None) -> OpenAIError:
    h = {"retry-after": str(max(1, int(retry_after_s + 0.999)))}
    h.update(headers or {})
    return OpenAIError(429, message, code="rate_limit_exceeded", headers=h)


def unavailable(message: str, *, code: str = "no_capacity") -> OpenAIError:
    return OpenAIError(503, message, code=code)


def internal_error() -> OpenAIError:
    """What a server answers when its own code failed before the response started."""
    return OpenAIError(500, "Internal error; the request was not completed.", code="internal_error")


def body_too_large(max_bytes: int) -> OpenAIError:
    return OpenAIError(413, f"Request body exceeds {max_bytes} bytes.", code="request_too_large")
