"""A read of a session's files, done by its host's agent for the web host (runner hosts,
part 2; docs/hosts.md): the exec channel lists and reads /workspace, and each answer
goes through the internal API to the read in progress there (sessions.snapshot), which
builds the tree in the web host's store and says what to list and read next. This host
keeps nothing of it.

The agent asks for a read when the session has snapshots pending (the keeper, under
the session's lock, once its syncs are applied). A channel that does not answer ends
the read failed and worth asking again; a web host that does not answer leaves the
rows pending for the keeper's next round.
"""

import logging
from typing import Any

from django.conf import settings

from sandbox import webapi
from sandbox.loop import on_thread
from sessions.channel import ChannelError, Endpoint, ask, channel_of
from sessions.models import Session

log = logging.getLogger("berth.runner_agent")

LIST_ENTRIES = 2000  # per manifest answer
LIST_DIRS = 200  # folders asked for in one manifest request
READ_BYTES = 4 << 20  # per read answer (a larger file comes alone)
TIMEOUT_S = 60.0
MAX_ANSWER = 24 << 20  # a read answer: one file at the file cap, in base64
SEND_BYTES = 6 << 20  # of base64 per request to the web host (one larger file alone)


class Ended(Exception):
    """The web host ended the read (past the caps or its bound): its rows say why."""


async def take(session: Session) -> None:
    """Every snapshot asked of the session, answered by one read (the caller holds the
    session's lock, and it is ready with its syncs applied)."""
    assert session.run is not None and session.run.sandbox is not None
    web = webapi.client()
    try:
        opened = await on_thread(web.post)(f"/sessions/{session.public_id}/reads", {})
        token = opened.get("read")
        if not token:
            return
        path = f"/reads/{token}"
        try:
            ns = await on_thread(channel_of)(session.run.sandbox)
            await _list(ns, web, path)
            await _read(ns, web, path)
        except Ended:
            return
        except ChannelError as e:
            error = f"The session's exec channel did not answer ({e}); try again."
            await on_thread(web.post)(f"{path}/finish", {"error": error, "unanswered": True})
            return
        await on_thread(web.post)(f"{path}/finish", {})
    except (webapi.WebUnavailable, webapi.WebRefused) as e:
        log.info("session %s: its files were not read: %s", session.public_id, e)


async def _list(ns: Endpoint, web: webapi.WebAPI, path: str) -> None:
    level = [""]
    while level:
        below: list[str] = []
        for at in range(0, len(level), LIST_DIRS):
            dirs, start = level[at : at + LIST_DIRS], None
            while True:
                answer = await _ask(
                    ns,
                    {
                        "op": "manifest",
                        "dirs": dirs,
                        "start": start,
                        "max_entries": LIST_ENTRIES,
                        "max_file_bytes": settings.WORKSPACE_MAX_FILE_BYTES,
                    },
                )
                taken = await on_thread(web.post)(
                    f"{path}/entries", {"entries": answer.get("entries") or []}
                )
                if taken.get("folders") is None:
                    raise Ended
                below += taken["folders"]
                start = answer.get("next")
                if not start:
                    break
        level = below


async def _read(ns: Endpoint, web: webapi.WebAPI, path: str) -> None:
    paths = list((await on_thread(web.get)(f"{path}/wanted"))["paths"])
    while paths:
        answer = await _ask(
            ns,
            {
                "op": "read",
                "paths": paths,
                "max_bytes": READ_BYTES,
                "max_file_bytes": settings.WORKSPACE_MAX_FILE_BYTES,
            },
        )
        files = answer.get("files") or []
        for group in _groups(files):
            taken = await on_thread(web.post)(f"{path}/contents", {"files": group})
            if not taken.get("taken"):
                raise Ended
        rest = list(answer.get("rest") or [])
        if not files or len(rest) >= len(paths):
            raise ChannelError("the exec channel read nothing")
        paths = rest


def _groups(files: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Files in requests of at most SEND_BYTES of content (one larger file alone)."""
    groups: list[list[dict[str, Any]]] = [[]]
    size = 0
    for f in files:
        weight = len(str(f.get("data") or ""))
        if groups[-1] and size + weight > SEND_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(f)
        size += weight
    return [g for g in groups if g]


async def _ask(ns: Endpoint, request: dict[str, Any]) -> dict[str, Any]:
    answer = await ask(ns, request, timeout=TIMEOUT_S, max_answer=MAX_ANSWER)
    if not answer.get("ok"):
        raise ChannelError(f"the exec channel refused: {answer.get('error')}")
    return answer
