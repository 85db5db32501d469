"""Errors of the topology service.

::

    TopologyServiceError          base of everything this package raises on purpose
    ├── ConfigError               a flag or env var has a bad value (exit 3, names key and value)
    └── StartupError              the topology cannot be served at start (exit 3): the file is
                                  missing, unreadable or invalid, or the port cannot be bound

A document that fails to *reload* is not an exception that escapes: the last
good document keeps serving and the failure is reported by ``/readyz``, a
metric and the log.
"""

from __future__ import annotations

__all__ = ["ConfigError", "StartupError", "TopologyServiceError"]


class TopologyServiceError(Exception):
    """Base of this package's errors."""


class ConfigError(TopologyServiceError):
    """A setting has a value the service cannot use; the message names the key and the value."""


class StartupError(TopologyServiceError):
    """The service cannot start serving (missing or invalid topology file, port in use)."""
