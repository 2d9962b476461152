"""The internal API at /internal/v1: what runner hosts ask of the web host (docs/hosts.md,
"The internal API"). A NinjaAPI of its own: each host authenticates with its token
(sandbox.host_auth), no user's token opens it, and it is left out of the public API's
schema and docs. Its errors have the public API's one shape."""

from config.api import BerthAPI, install_error_handlers
from runs.host_api import router as runs_router
from sandbox.host_api import router as host_router
from sandbox.host_auth import HostAuth
from sessions.host_api import router as sessions_router

internal = BerthAPI(
    title="Berth internal API",
    version="1",
    description="Runner hosts' API on the web host: `Authorization: Bearer berth_host_…`.",
    auth=HostAuth(),
    urls_namespace="internal",
    docs_url=None,
    openapi_url=None,
)
install_error_handlers(internal)
internal.add_router("/", host_router)
internal.add_router("/", runs_router)
internal.add_router("/", sessions_router)
