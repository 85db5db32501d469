"""The one logging setup of the plugin's entry point: text or one JSON object per line.

Modules only call ``logging.getLogger(__name__)`` and pass per-container context
(``node``, ``namespace``, ``pod``, ``container``) through ``extra``; this module
is where those keys become JSON fields, so an operator can filter the plugin's
log by pod without parsing prose.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Final, TextIO

CONTEXT_KEYS: Final = ("node", "namespace", "pod", "container", "reason")
"""Record attributes copied into each JSON line (and appended to text lines)."""

_HANDLER_NAME: Final = "nvml-mock-nri"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, the context keys, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            value = record.__dict__.get(key)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """Human-readable lines; context keys follow the message as ``key=value``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = " ".join(
            f"{key}={record.__dict__[key]}"
            for key in CONTEXT_KEYS
            if record.__dict__.get(key) is not None
        )
        return f"{line} [{context}]" if context else line


def configure_logging(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Install the plugin's handler on the root logger; calling it again replaces it."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx logs every request at INFO; the identity watch would flood the log.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, root.level))
    logging.getLogger("httpcore").setLevel(max(logging.WARNING, root.level))
