"""The one logging setup of the check-fabric entry point.

Logs go to stderr so they never mix with the report on stdout (which scripts
parse); the default level is WARNING so a normal run logs nothing.
``--log-format json`` emits one JSON object per line for log collectors.
"""

from __future__ import annotations

import json
import logging
import sys
import time

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


class JsonFormatter(logging.Formatter):
    """One object per line: ``ts``, ``level``, ``logger``, ``msg`` (and ``exc`` when set)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def configure_logging(level: str, fmt: str) -> None:
    """Install the stderr handler on the ``check_fabric`` logger (idempotent)."""
    root = logging.getLogger("check_fabric")
    for handler in list(root.handlers):
        if getattr(handler, "_check_fabric", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._check_fabric = True  # type: ignore[attr-defined]
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("check-fabric: %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level.upper())
    root.propagate = False
