"""How many agent reports the service takes per second, and when a refused agent comes back.

One worker answers identity lookups and agents' reports on the same event loop. When a
scenario lands on 10,000 nodes at once, every agent has something to say at the same
moment; taken as fast as they arrive, the reports would fill the loop and lookups would
queue behind them. The budget takes reports at a steady rate (a token bucket, one
second's worth of burst) and answers the rest ``429`` before their body is read, which
costs about what a lookup costs.

A refused agent is told when to come back (``Retry-After``) from a reservation: each
refusal books the next free slot at the budget's rate, so 10,000 refused agents come
back spread evenly over ``10,000 / rate`` seconds instead of all together a second
later. The agent adds its own jitter under a second on top.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Final

__all__ = ["RETRY_AFTER_MAX_SECONDS", "ReportBudget"]

RETRY_AFTER_MAX_SECONDS: Final = 600
"""The longest ``Retry-After`` given: past it the slots are booked again from now."""


class ReportBudget:
    """A token bucket of ``rate`` reports per second (``rate`` of burst); O(1) per report.

    ``rate`` 0 takes every report (no budget).
    """

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._tokens = rate
        self._filled = clock()
        self._next_slot = 0.0
        self.refused = 0
        """Reports answered 429 so far."""

    def take(self) -> int:
        """0 when a report may be taken now; else the seconds the agent should wait."""
        if self.rate <= 0:
            return 0
        now = self._clock()
        self._tokens = min(self.rate, self._tokens + (now - self._filled) * self.rate)
        self._filled = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0
        self.refused += 1
        # Book the next slot after the ones already given out, so the refused come back
        # at the budget's rate; a slot too far ahead starts the booking over from now.
        slot = max(now, self._next_slot) + 1 / self.rate
        if slot - now > RETRY_AFTER_MAX_SECONDS:
            slot = now + 1 / self.rate
        self._next_slot = slot
        return max(1, math.ceil(slot - now))
