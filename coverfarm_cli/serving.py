"""The farm's HTTP server (``serve`` and ``up``): uvicorn with bounds on slow and idle connections, and a
log that does not flood when connections cannot be accepted.

- A request's head (request line and headers) must arrive whole within ``header_timeout_s`` of the
  connection opening or of the previous response's end; else the server answers 408 and closes the
  connection. h11, which uvicorn parses with here, has no such bound: a client sending a header line every
  few seconds held its connection, and its file, for ever.
- A connection idle between requests is closed after ``idle_timeout_s`` (uvicorn's keep-alive timeout).
- A server out of open files fails every ``accept()``: asyncio logs each failure with its traceback, and
  retries a listening socket's whole backlog each time, hundreds of thousands of tracebacks a minute. The
  loop's exception handler here says it once per ``ACCEPT_ERROR_EVERY_S``, with how many there were.

A response being streamed (an event stream) is not bounded: only the wait for a request's head is.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from coverfarm.settings import Settings

log = logging.getLogger("coverfarm.serve")

# What asyncio's event loop says when accept() fails for want of files, buffers or memory.
ACCEPT_ERROR = "socket.accept() out of system resource"
ACCEPT_ERROR_EVERY_S = 10.0
REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with the request head's bound (``header_timeout_s``, set by
    ``bounded_protocol``) timed from the connection's opening and from each response's end."""

    header_timeout_s = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_request():
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self._in_request():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _in_request(self) -> bool:
        """A request's head has arrived and its response is not complete."""
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self._in_request():
            return
        self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()


def bounded_protocol(header_timeout_s: float) -> type[BoundedH11Protocol]:
    """``BoundedH11Protocol`` with its bound (uvicorn makes one protocol object per connection from it)."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"header_timeout_s": header_timeout_s})


class AcceptErrorLog:
    """An event loop's exception handler: a failed ``accept()`` is said at most once per ``every_s`` (with
    how many failed since it was last said, and no traceback); anything else goes to asyncio's own."""

    def __init__(self, every_s: float = ACCEPT_ERROR_EVERY_S) -> None:
        self.every_s = every_s
        self.failed = 0
        self._next = 0.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_ERROR:
            loop.default_exception_handler(context)
            return
        self.failed += 1
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every_s
        error = context.get("exception")
        log.error(
            "cannot accept connections: %s (%d time(s) since last said; said again in %.0f s at the most): "
            "raise this process's open-files limit (ulimit -n) or lower the number of clients",
            error, self.failed, self.every_s,
        )  # fmt: skip
        self.failed = 0


class FarmServer(uvicorn.Server):
    """uvicorn's server with ``AcceptErrorLog`` as its loop's exception handler."""

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(AcceptErrorLog())
        await super().serve(sockets)


def farm_server(app: Any, settings: Settings, host: str, port: int, **config: Any) -> FarmServer:
    """The server of ``app`` on ``host:port`` with the farm's bounds (``settings``: ``header_timeout_s``,
    ``idle_timeout_s``); ``config``: more of uvicorn's ``Config``."""
    return FarmServer(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            http=bounded_protocol(settings.header_timeout_s),
            timeout_keep_alive=max(1, round(settings.idle_timeout_s)),
            **config,
        )
    )
