"""A stopped run's /workspace sent up to the web host by its host's agent (the web host
reads it: runs.outputs_up), as a tar in pieces through the internal API.

The volume is read on this host as `runs.outputs.walk_volume` reads it (no link ever
followed, every file opened O_NOFOLLOW) and written as a tar stream here, a file's data
in blocks (a large file is never held whole), or taken from the engine's archive of it
where the volume's folder is not on this host. A piece not answered is sent again
(the web host keeps it once); the web host gone for SHIP_PATIENCE_S ends the read with
the changes marked unread. The read itself is asked for once, and waited for."""

import tarfile
from collections.abc import Iterator
from typing import Any

from logs.shipped import patiently
from runs.outputs import walk_volume
from sandbox import webapi

PIECE_BYTES = 4 << 20  # under MAX_REQUEST_BODY, which daphne reads whole
READ_TIMEOUT_S = 30 * 60.0
BLOCK = tarfile.BLOCKSIZE


def volume_tar(root: str) -> Iterator[bytes]:
    """The volume at `root` as a tar stream (members under `workspace/`)."""
    for info, opener in walk_volume(root):
        yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        if info.type != tarfile.REGTYPE or not info.size:
            continue
        left = info.size
        with opener() as source:
            while left:
                block = source.read(min(1 << 20, left))
                if not block:
                    raise OSError(f"{info.name} shrank while it was read")
                left -= len(block)
                yield block
        if info.size % BLOCK:
            yield b"\0" * (BLOCK - info.size % BLOCK)
    yield b"\0" * (2 * BLOCK)


def send(run_public_id: str, stream: Iterator[bytes]) -> dict[str, Any]:
    """Send the tar `stream` up in pieces, then have the web host read it: the run's
    outputs fields (changes, artifacts, artifacts_refused, changes_commit)."""
    web = webapi.client()
    path = f"/runs/{run_public_id}/workspace"
    at, pending = 0, bytearray()
    for data in stream:
        pending += data
        while len(pending) >= PIECE_BYTES:
            at = _put(web, path, at, bytes(pending[:PIECE_BYTES]))
            del pending[:PIECE_BYTES]
    if pending or not at:
        at = _put(web, path, at, bytes(pending))
    # Read on the web host while this waits: as long as a large tree takes, and never
    # sent twice (a second read would race the first one's artifacts and commit).
    answer: dict[str, Any] = web.post(
        f"/runs/{run_public_id}/outputs", {"size": at}, timeout=READ_TIMEOUT_S
    )
    return answer


def _put(web: webapi.WebAPI, path: str, at: int, piece: bytes) -> int:
    answer = patiently(lambda: web.post_bytes(f"{path}?at={at}", piece))
    return int(answer["size"])
