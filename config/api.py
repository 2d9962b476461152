"""The JSON API at /api/v1: one NinjaAPI; each app adds its router (thin doors)."""

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.openapi.schema import OpenAPISchema

from accounts.api import router as accounts_router
from accounts.auth import TokenAuth
from config.middleware import too_large
from core.errors import BerthError, QuotaExceeded, error_response
from core.schemas import declare_headers
from deploys.api import router as deploys_router
from previews.api import router as previews_router
from runs.api import router as runs_router
from runs.caches_api import router as caches_router
from runs.logs_api import router as logs_router
from runs.secrets_api import router as secrets_router
from sessions.api import router as sessions_router
from sessions.terminal_api import router as terminals_router
from workspaces.api import router as workspaces_router
from workspaces.review_api import router as reviews_router

log = logging.getLogger(__name__)


class BerthAPI(NinjaAPI):
    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> OpenAPISchema:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        declare_headers(schema)
        return schema


api = BerthAPI(
    title="Berth API",
    version="1",
    description="Workspaces, runs, previews and deploys for people and agents. "
    "Authenticate with `Authorization: Bearer berth_…`.",
    auth=TokenAuth(),
    urls_namespace="api",
    docs_url="/docs",
)


def berth_error(request: HttpRequest, exc: BerthError) -> HttpResponse:
    response = error_response(exc.status, exc.code, exc.message, exc.details)
    if isinstance(exc, QuotaExceeded):
        response["Retry-After"] = str(exc.retry_after)
    return response


def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors: list[dict[str, Any]] = [
        {"loc": [str(p) for p in e.get("loc", [])], "msg": e.get("msg", "")} for e in exc.errors
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid input"}
    where = ".".join(first["loc"][1:] or first["loc"]) or "body"
    return error_response(422, "invalid", f"{where}: {first['msg']}", {"errors": errors})


def authentication_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(401, "unauthenticated", "Send `Authorization: Bearer <token>`.")


def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if exc.status_code == 400 and "parse" in str(exc).lower():
        # ninja's "Cannot parse request body": bad JSON is invalid input like any other.
        return error_response(
            422, "invalid_json", "The request body is not valid JSON, or is nested too deeply."
        )
    return error_response(exc.status_code, "http_error", str(exc))


def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(404, "not_found", "No such resource.")


def request_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return too_large(settings.MAX_REQUEST_BODY)


def too_deep(request: HttpRequest, exc: RecursionError) -> HttpResponse:
    return error_response(422, "invalid_json", "The JSON body is nested too deeply.")


def unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    log.exception("unexpected error in %s %s", request.method, request.path)
    return error_response(
        500,
        "internal_error",
        "Something went wrong on our side; it has "
        "been logged. Try again, and tell your operator if it persists.",
    )


def install_error_handlers(target: NinjaAPI) -> None:
    """One error shape for every API Berth serves (the public one, the internal one)."""
    target.exception_handler(BerthError)(berth_error)
    target.exception_handler(ValidationError)(validation_error)
    target.exception_handler(AuthenticationError)(authentication_error)
    target.exception_handler(HttpError)(http_error)
    target.exception_handler(Http404)(not_found)
    target.exception_handler(RequestDataTooBig)(request_too_big)
    target.exception_handler(RecursionError)(too_deep)
    target.exception_handler(Exception)(unexpected)


install_error_handlers(api)
api.add_router("/", accounts_router)
api.add_router("/", workspaces_router)
api.add_router("/", reviews_router)
api.add_router("/", logs_router)
api.add_router("/", runs_router)
api.add_router("/", secrets_router)
api.add_router("/", caches_router)
api.add_router("/", sessions_router)
api.add_router("/", terminals_router)
api.add_router("/", previews_router)
api.add_router("/", deploys_router)
