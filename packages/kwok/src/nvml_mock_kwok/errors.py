"""The errors this package raises, so callers catch one family and print its message."""

from __future__ import annotations

__all__ = ["KwokError", "PlanError", "RecordError", "TruthError"]


class KwokError(Exception):
    """Base of every error this package raises on purpose; its text is for the user."""


class TruthError(KwokError, ValueError):
    """A profile has no recorded truth, or a fixture is malformed."""


class PlanError(KwokError, ValueError):
    """The topology document cannot hold the fleet asked for (node count, clique shape)."""


class RecordError(KwokError):
    """A component could not be run or did not publish what a recording needs."""
