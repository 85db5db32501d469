"""Per-node watches: the long polls of the identity and of the scenarios, and their waking.

Both stores answer ``revision`` + ``wait`` the same way: at once when the node's answer
already differs from the revision the client has, otherwise after a change to that node,
the timeout, the client going away or the service shutting down, whichever comes first.
One future per waiting request, kept per node, so a change to one node wakes only that
node's watchers and 5,000 idle watches cost 5,000 futures. Event loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from nvml_mock_topology.snapshot import Answer

__all__ = ["Watchers"]


class Watchers:
    """The waiting watches of one store, by node."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._watching = 0

    @property
    def watching(self) -> int:
        """How many watch requests are waiting now."""
        return self._watching

    async def watch(
        self,
        node: str,
        known: int,
        timeout: float,
        gone: asyncio.Future[None] | None,
        lookup: Callable[[str], Answer],
        *,
        closing: bool,
    ) -> Answer:
        """``lookup(node)`` once its revision differs from ``known`` (or the wait ended).

        Returns at once when it already differs, ``timeout`` is not positive or the store
        is ``closing``; otherwise waits for a wake, ``timeout`` seconds or ``gone`` (the
        client disconnected) and looks the node up again.
        """
        answer = lookup(node)
        if answer.revision != known or timeout <= 0 or closing:
            return answer
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        waiters = self._waiters.setdefault(node, set())
        waiters.add(waiter)
        timer = loop.call_later(timeout, _resolve, waiter)
        if gone is not None:
            gone.add_done_callback(lambda _: _resolve(waiter))
        self._watching += 1
        try:
            await waiter
        finally:
            self._watching -= 1
            timer.cancel()
            waiters.discard(waiter)
            if not waiters and self._waiters.get(node) is waiters:
                del self._waiters[node]
        return lookup(node)

    def wake(self, nodes: Iterable[str]) -> int:
        """Wake the watchers of ``nodes``; returns how many were waiting."""
        woken = 0
        for node in nodes:
            woken += _wake_all(self._waiters.get(node, ()))
        return woken

    def wake_where(self, wanted: Callable[[str], bool]) -> int:
        """Wake the watchers of every watched node for which ``wanted(node)`` holds."""
        woken = 0
        for node, waiters in self._waiters.items():
            if wanted(node):
                woken += _wake_all(waiters)
        return woken

    def release(self) -> int:
        """Answer every waiting watch now (unchanged). Returns how many."""
        return self.wake_where(lambda _: True)


def _wake_all(waiters: Iterable[asyncio.Future[None]]) -> int:
    woken = 0
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
            woken += 1
    return woken


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
