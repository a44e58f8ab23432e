"""A streaming response that closes its body when the response ends, however it ends.

Starlette stops iterating a stream when its client goes away but leaves the generator suspended, to be
closed whenever the garbage collector gets to it; until then the request behind it holds its booked load.
"""

from __future__ import annotations

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class ClosingStreamingResponse(StreamingResponse):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[union-attr]  # an async generator here
