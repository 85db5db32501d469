"""NRI events and subscription masks.

A plugin subscribes in its ConfigureResponse with a bit mask where event
``e`` is bit ``1 << (e - 1)``. Zero means "every event", which is almost never
what a plugin wants, so the helpers here make masks explicit. Which bits a
runtime accepts depends on its NRI version; a mask outside them gets the
plugin refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import Final


class Event(IntEnum):
    """Lifecycle events (``nri.pkg.api.v1alpha1.Event``)."""

    UNKNOWN = 0
    RUN_POD_SANDBOX = 1
    STOP_POD_SANDBOX = 2
    REMOVE_POD_SANDBOX = 3
    CREATE_CONTAINER = 4
    POST_CREATE_CONTAINER = 5
    START_CONTAINER = 6
    POST_START_CONTAINER = 7
    UPDATE_CONTAINER = 8
    POST_UPDATE_CONTAINER = 9
    STOP_CONTAINER = 10
    REMOVE_CONTAINER = 11
    UPDATE_POD_SANDBOX = 12
    POST_UPDATE_POD_SANDBOX = 13
    VALIDATE_CONTAINER_ADJUSTMENT = 14

    @property
    def bit(self) -> int:
        """This event's bit in a subscription mask."""
        return 1 << (self.value - 1) if self.value else 0


VALID_EVENTS_V0_8: Final = 0x7FF
"""Mask bits accepted by NRI up to v0.9 (containerd 1.7.26+, 2.0, 2.1)."""
VALID_EVENTS: Final = 0x3FFF
"""Mask bits accepted by NRI v0.10 and later (containerd 2.2+)."""

STATE_CHANGE_EVENTS: Final = frozenset(
    {
        Event.RUN_POD_SANDBOX,
        Event.STOP_POD_SANDBOX,
        Event.REMOVE_POD_SANDBOX,
        Event.POST_CREATE_CONTAINER,
        Event.START_CONTAINER,
        Event.POST_START_CONTAINER,
        Event.POST_UPDATE_CONTAINER,
        Event.REMOVE_CONTAINER,
        Event.POST_UPDATE_POD_SANDBOX,
    }
)
"""Notification-only events: each its own RPC from NRI v0.12 on (containerd 2.3+), which falls
back to ``StateChange`` (and lists the plugin as using a deprecated interface) only when a plugin
answers that RPC UNIMPLEMENTED; before v0.12 ``StateChange`` is the only way they come."""

NOTIFICATION_RPCS: Final = {
    Event.RUN_POD_SANDBOX: "RunPodSandbox",
    Event.STOP_POD_SANDBOX: "StopPodSandbox",
    Event.REMOVE_POD_SANDBOX: "RemovePodSandbox",
    Event.POST_CREATE_CONTAINER: "PostCreateContainer",
    Event.START_CONTAINER: "StartContainer",
    Event.POST_START_CONTAINER: "PostStartContainer",
    Event.POST_UPDATE_CONTAINER: "PostUpdateContainer",
    Event.REMOVE_CONTAINER: "RemoveContainer",
    Event.POST_UPDATE_POD_SANDBOX: "PostUpdatePodSandbox",
}
"""The dedicated Plugin-service method of each notification-only event (NRI v0.12 api.proto)."""


def event_mask(events: Iterable[Event]) -> int:
    """The subscription mask for ``events``."""
    mask = 0
    for event in events:
        if event is Event.UNKNOWN:
            raise ValueError("Event.UNKNOWN cannot be subscribed to")
        mask |= event.bit
    return mask


def events_in_mask(mask: int) -> frozenset[Event]:
    """The events a mask subscribes to; 0 means every event the runtime knows."""
    if mask == 0:
        mask = VALID_EVENTS
    return frozenset(e for e in Event if e is not Event.UNKNOWN and mask & e.bit)
