"""A real service in a test: the app under uvicorn on loopback, in a thread of its own.

The service's own tests and those of its clients (the node agent's) run it this way:
a real server on a free port, with its own event loop, so requests go through HTTP and
the store is changed on the loop that serves it (:meth:`ThreadedServer.call`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import uvicorn

__all__ = ["ThreadedServer"]

_T = TypeVar("_T")


class ThreadedServer:
    """An ASGI app under uvicorn on 127.0.0.1 in a daemon thread; a context manager.

    ``port=0`` takes a free port; :attr:`url` is set once the server listens. Extra
    keyword arguments go to :class:`uvicorn.Config`.
    """

    def __init__(self, app: Any, *, port: int = 0, **config: Any) -> None:
        self.app = app
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config)
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.url = ""

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(self.server.serve())
        finally:
            self.loop.close()

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                break
            self.thread.join(0.01)
        assert self.server.started, "uvicorn did not start"
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive():
            self.server.should_exit = True
            self.thread.join(10)

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on the server's loop thread and return its result."""
        assert self.loop is not None

        async def run() -> _T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(5)
