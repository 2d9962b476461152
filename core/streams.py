"""A response body made chunk by chunk by blocking code (a Git tree read as a tar), for
daphne: Django consumes a synchronous iterator whole before sending any of it under
ASGI, which would hold a large tree in memory. Each chunk is read in a worker thread
as it is sent instead; a client that goes away closes the iterator (and what it holds
open)."""

import asyncio
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse


async def _pulled(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    # Not the one thread shared by every synchronous view: a long stream would take
    # turns with them, chunk by chunk.
    def pull() -> bytes | None:
        return next(chunks, None)

    step = sync_to_async(pull, thread_sensitive=False)
    pulling: asyncio.Future[bytes | None] | None = None
    try:
        while True:
            pulling = asyncio.ensure_future(step())
            # Shielded: a client gone mid-step cancels this generator, not the step,
            # which is let finish before the iterator is closed below (closing one
            # still running in its thread would fail).
            chunk = await asyncio.shield(pulling)
            if chunk is None:
                break
            yield chunk
    finally:
        if pulling is not None and not pulling.done():
            await asyncio.wait([pulling])
        close = getattr(chunks, "close", None)
        if close is not None:
            await sync_to_async(close, thread_sensitive=False)()


def streamed(chunks: Iterator[bytes], content_type: str) -> StreamingHttpResponse:
    return StreamingHttpResponse(_pulled(chunks), content_type=content_type)


def in_chunks[R: StreamingHttpResponse](response: R) -> R:
    """A response whose content blocking code reads (a FileResponse's file: an
    artifact), sent the same way: never read whole into memory first."""
    content = response.streaming_content
    if not response.is_async and isinstance(content, Iterator):
        response.streaming_content = _pulled(content)
    return response
