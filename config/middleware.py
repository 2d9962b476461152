from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from core.errors import error_response


class Hooks:
    """A middleware whose hooks block on nothing (no database, no files): they run in
    the request's own mode, ASGI or WSGI, with no hop to a thread and back (a plain
    sync middleware, or MiddlewareMixin's hooks, cost two per request under daphne)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[..., Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        early = self.before(request)
        return early if early is not None else self.after(request, self.get_response(request))

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        early = self.before(request)
        if early is not None:
            return early
        return self.after(request, await self.get_response(request))

    def before(self, request: HttpRequest) -> HttpResponse | None:
        return None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        return response


class BodySizeLimitMiddleware(Hooks):
    """Refuse oversized bodies before anything parses them.

    Content-Length is checked up front; a body sent without one (chunked) is measured
    once Django has it. Either way the answer is 413 `too_large` in the one error shape.
    """

    def before(self, request: HttpRequest) -> HttpResponse | None:
        # A git push carries a whole pack: it has its own, larger cap (GIT_MAX_PUSH_MB).
        limit = (
            settings.GIT_MAX_PUSH_BYTES
            if request.path.startswith("/git/")
            else settings.MAX_REQUEST_BODY
        )
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return error_response(400, "bad_request", "The Content-Length header is not a number.")
        if length > limit:
            return too_large(limit)
        return None


def too_large(limit: int) -> HttpResponse:
    return error_response(
        413,
        "too_large",
        f"The request body is larger than {limit // (1024 * 1024)} MB. "
        "Send large files in several smaller requests.",
        {"limit_bytes": limit},
    )


class ApiErrorShapeMiddleware(Hooks):
    """Give API errors that Django or ninja answered on their own (405, 400, ...) the one
    error shape, so a client never has to parse an HTML error page."""

    PREFIXES = ("/api/", "/internal/")
    CODES = {
        400: "bad_request",
        404: "not_found",
        405: "method_not_allowed",
        413: "too_large",
        500: "internal_error",
    }

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if (
            response.status_code >= 400
            and request.path.startswith(self.PREFIXES)
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            status = response.status_code
            message = {
                405: f"{request.method} is not allowed here; allowed: "
                f"{response.get('Allow', 'none')}.",
            }.get(status, response.reason_phrase or "The request failed.")
            shaped = error_response(status, self.CODES.get(status, "http_error"), message)
            if "Allow" in response:
                shaped["Allow"] = response["Allow"]
            return shaped
        return response
