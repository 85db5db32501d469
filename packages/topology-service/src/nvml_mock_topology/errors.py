"""Errors of the topology service.

Every exception this package defines, and what it means::

    * TopologyServiceError    base of everything this package raises on purpose
      + ConfigError           a flag or env var has a bad value (exit 3; names the key and value)
      + StartupError          the topology cannot be served at start (exit 3): the file is
                              missing, unreadable, not a regular file, over a limit or invalid,
                              or the port cannot be bound
      + ProblemError          one HTTP request is refused (its status and the sentence of its
                              ``detail``); caught by the API and answered, never escapes

``ConfigError`` means the same in every nvml-mock package: a setting that cannot be
used, named with its value. An invalid topology *document* is
:class:`nvml_mock_protocol.topology.TopologyError`, the protocol package's; this
package catches it and turns it into a ``StartupError`` at start or a refused
reload afterwards, and defines no exception of that name.

A document that fails to *reload* is not an exception that escapes: the last
good document keeps serving and the failure is reported by ``/readyz``, a
metric and the log.
"""

from __future__ import annotations

__all__ = ["ConfigError", "ProblemError", "StartupError", "TopologyServiceError"]


class TopologyServiceError(Exception):
    """Base of this package's errors."""


class ConfigError(TopologyServiceError):
    """A setting has a value the service cannot use; the message names the key and the value."""


class StartupError(TopologyServiceError):
    """The service cannot start serving (missing or invalid topology file, port in use)."""


class ProblemError(TopologyServiceError):
    """A request the API refuses, with its HTTP status and the sentence for ``detail``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
