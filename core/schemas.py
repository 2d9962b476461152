"""The ground floor of Berth's contract: the base classes of every request and response
model, the one error object, and `answers()`, which declares for a JSON API operation
its success model and the error object under every status the operation can answer.

Each app's `schemas.py` declares its resources once, on these bases; its JSON API
operations (`api.py`) and its MCP tools (`mcp.py`) both answer with those models, so
the contract is written in one place (docs/architecture.md).
"""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema


class Out(BaseModel):
    """A response model: what a door answers (JSON API and MCP alike)."""


class In(BaseModel):
    """A request body. Strict: a field the model does not name, or a value of another
    JSON type than declared ("1" for an integer, 0 for a boolean), is refused with 422
    in the one error shape, never coerced or passed on."""

    model_config = ConfigDict(extra="forbid", strict=True)


# An ISO 8601 instant written by the summaries as a string (Python's isoformat).
Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]


class ErrorObject(Out):
    code: str = Field(description="snake_case and stable: what a client switches on")
    message: str = Field(description="what happened and what to do next")
    details: dict[str, Any] = Field(description="facts about it, by name (may be empty)")


class ErrorOut(Out):
    """The one error shape of every door (core.errors):
    `{"error": {"code", "message", "details"}}`."""

    error: ErrorObject


# What any operation of the JSON API can answer, whatever it does (config.api and
# config.middleware): 400 for a malformed request (a Content-Length that is not a
# number), 401 without a valid token, 413 for a body past MAX_REQUEST_BODY.
EVERY_OPERATION = (400, 401, 413)
# The others, each named by the operations that can answer it:
# 403 a missing scope or role, 404 a missing resource, 409 a state that forbids it,
# 422 invalid input, 429 a team quota (with Retry-After), 503 unavailable for now.
ERROR_STATUSES = frozenset({*EVERY_OPERATION, 403, 404, 409, 422, 429, 503})


def answers(ok: Any, *errors: int, status: int = 200) -> dict[int, Any]:
    """The `response=` of a ninja operation: `ok` (a model, `list[model]`, or None for
    no body) under `status`, and ErrorOut under EVERY_OPERATION and `errors`."""
    unknown = set(errors) - ERROR_STATUSES
    if unknown:
        raise ValueError(f"not an error status of the API: {sorted(unknown)}")
    return {status: ok, **{code: ErrorOut for code in sorted({*EVERY_OPERATION, *errors})}}


# core.errors.QuotaExceeded: every 429 says when to ask again (config.api sets it).
RETRY_AFTER = {
    "description": "seconds to wait before asking again",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}


def declare_headers(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI schema with the Retry-After header declared on every 429 answer (ninja
    declares no response headers of its own)."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            quota = responses.get(429, responses.get("429"))
            if quota is not None:
                quota["headers"] = {"Retry-After": RETRY_AFTER}
    return schema
