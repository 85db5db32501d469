"""Logging setup of the topology service's entry point.

Modules only call ``logging.getLogger(__name__)``; the handler is installed here,
once, by ``main``. The same formatter is handed to uvicorn through its
``log_config`` so that server and access lines look like ours (``--log-format
json`` gives one JSON object per line on stderr).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final, TextIO

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging", "uvicorn_log_config"]

_RESERVED: Final = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "color_message",
}
_HANDLER_NAME: Final = "nvml-mock-topology"


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + (
        f".{int(record.msecs):03d}Z"
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg`` and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``ts level logger: msg key=value ...`` for humans."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(
            f"{key}={value}"
            for key, value in record.__dict__.items()
            if key not in _RESERVED and not key.startswith("_")
        )
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extras:
            line += f" {extras}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


def configure_logging(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Install the one stderr handler on the root logger; calling it again replaces it."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(_formatter(fmt))
    root.addHandler(handler)
    root.setLevel(level.upper())


def uvicorn_log_config(level: str, fmt: str) -> dict[str, Any]:
    """uvicorn's ``log_config``: its loggers propagate to our root handler, nothing else."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "loggers": {
            "uvicorn": {"level": level.upper(), "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
            "uvicorn.access": {"level": level.upper(), "handlers": [], "propagate": True},
        },
    }
