"""Django's own middleware, with the hooks that block on nothing run on daphne's loop.

Under ASGI, `MiddlewareMixin.__acall__` takes each `process_request` and
`process_response` to a thread and back: about 0.2 ms a hop on a small machine, and
Django's stack made ~14 of them for every request before its view ran. The hooks of
these middleware only read headers and cookies, set lazy objects and write headers, so
here they run where the request already is. Two may block, and only sometimes:
saving a session and storing messages reach the database; those answers still go to
a thread, and only when there is something to save. Under WSGI (and the test client)
nothing changes: `__call__` is Django's own.

`process_view` (CSRF's) is not touched: it may parse a whole multipart body, which
must never happen on the loop.
"""

from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.middleware import clickjacking, common, csrf, security


class OnLoop:
    """Mixin for a `MiddlewareMixin` whose hooks block on nothing (see the module)."""

    process_request: Any
    process_response: Any
    get_response: Any

    def response_blocks(self, request: HttpRequest) -> bool:
        """True when this request's `process_response` may reach the database."""
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        response = self.process_request(request) if hasattr(self, "process_request") else None
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_blocks(request):
                response = await sync_to_async(self.process_response, thread_sensitive=True)(
                    request, response
                )
            else:
                response = self.process_response(request, response)
        return response


class SecurityMiddleware(OnLoop, security.SecurityMiddleware):
    pass


class SessionMiddleware(OnLoop, sessions.SessionMiddleware):
    # process_request makes a lazy store; only a save (or a delete of an emptied
    # session's cookie, which is pure) happens in process_response.
    def response_blocks(self, request: HttpRequest) -> bool:
        session = getattr(request, "session", None)
        return (
            session is not None
            and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)
            and not session.is_empty()
        )


class CommonMiddleware(OnLoop, common.CommonMiddleware):
    pass


class CsrfViewMiddleware(OnLoop, csrf.CsrfViewMiddleware):
    # The secret is read from, and written to, a cookie: no session, no database.
    def __init__(self, get_response: Any) -> None:
        if settings.CSRF_USE_SESSIONS:
            raise ImproperlyConfigured(
                "config.loop_middleware.CsrfViewMiddleware keeps the "
                "CSRF secret in a cookie; use Django's own with "
                "CSRF_USE_SESSIONS."
            )
        super().__init__(get_response)


class AuthenticationMiddleware(OnLoop, auth.AuthenticationMiddleware):
    pass  # request.user is lazy: it is loaded in the view's thread, if at all


class MessageMiddleware(OnLoop, messages.MessageMiddleware):
    # Storing is needed only when messages were read or added; the fallback storage
    # may then write to the session.
    def response_blocks(self, request: HttpRequest) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and bool(storage.used or storage.added_new)


class XFrameOptionsMiddleware(OnLoop, clickjacking.XFrameOptionsMiddleware):
    pass
