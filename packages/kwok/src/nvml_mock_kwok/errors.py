"""The ways nvml-mock-kwok fails, so the command line maps each to one exit code::

KwokError           anything this package names and refuses to go on with (exit 1)
 ├── TruthError     a profile or MIG strategy without recorded truth, a malformed
 │                  fixture (exit 3, before anything is made)
 ├── PlanError      the topology document cannot hold the fleet asked for: a node
 │                  count, a clique shape, an unknown domain or node (exit 3)
 ├── RecordError    a component could not be run or did not publish (exit 1)
 └── ApiError       the API server or topology service answered an error status
                    (``nvml_mock_kwok.kube``; exit 1)
"""

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
