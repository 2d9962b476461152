"""The internal API's door for a host itself (/internal/v1/host): who the web host
takes it for. A runner's agent asks it at start, so a wrong token or address is said
then, not at its first run."""

from django.http import HttpRequest
from ninja import Router, Schema

from sandbox.hosts import Host

router = Router(tags=["hosts"])


class HostOut(Schema):
    name: str
    state: str


@router.get("/host", response=HostOut)
def this_host(request: HttpRequest) -> HostOut:
    host: Host = request.auth  # type: ignore[attr-defined]
    return HostOut(name=host.name, state=host.state)
