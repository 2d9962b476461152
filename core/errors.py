"""The one error shape of Berth's HTTP API.

`{"error": {"code": "snake_case", "message": "what happened and what to do", "details": {}}}`
"""

from typing import Any

from django.http import JsonResponse


class BerthError(Exception):
    """An expected failure a client can act on; every door renders it the same way."""

    status = 400
    code = "bad_request"

    def __init__(
        self,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        if code:
            self.code = code
        if status:
            self.status = status

    def as_dict(self) -> dict[str, Any]:
        return error_body(self.code, self.message, self.details)


class NotFound(BerthError):
    status = 404
    code = "not_found"


class MissingScope(BerthError):
    status = 403
    code = "missing_scope"


class Forbidden(BerthError):
    status = 403
    code = "forbidden"


class Conflict(BerthError):
    status = 409
    code = "conflict"


class Invalid(BerthError):
    status = 422
    code = "invalid"


class QuotaExceeded(BerthError):
    """A team limit said no; `retry_after` (seconds) becomes the Retry-After header."""

    status = 429
    code = "quota_exceeded"

    def __init__(
        self,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        retry_after: int,
        code: str | None = None,
    ) -> None:
        super().__init__(message, {**(details or {}), "retry_after_s": retry_after}, code=code)
        self.retry_after = retry_after


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(
    status: int, code: str, message: str, details: dict[str, Any] | None = None
) -> JsonResponse:
    return JsonResponse(error_body(code, message, details), status=status)
