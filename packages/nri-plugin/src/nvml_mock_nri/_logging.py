"""The plugin's logging setup: the shared line shape, with httpx kept quiet.

The handler and both line formats are the ones every nvml-mock command shares
(``nvml_mock_protocol.logs``): per-container context that modules pass through
``extra`` (``node``, ``namespace``, ``pod``, ``container``, ``reason``) becomes
JSON fields and ``key=value`` text, so an operator can filter the plugin's log
by pod without parsing prose. What stays here is what only the plugin needs.
"""

from __future__ import annotations

import logging
from typing import TextIO

from nvml_mock_protocol import logs

__all__ = ["configure_logging"]

_CHATTY: tuple[str, ...] = ("httpx", "httpcore")
"""Loggers that report every request at INFO: the identity watch would flood the log."""


def configure_logging(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Install the shared handler on the root logger; calling it again replaces it."""
    logs.configure_logging(level, fmt, stream)
    floor = max(logging.WARNING, logging.getLogger().level)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(floor)
