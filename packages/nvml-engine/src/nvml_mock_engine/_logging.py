"""Logging setup shared by this package's entry points (`nvml-mock-engine`, `nvml-mock-smi`).

Modules only call ``logging.getLogger(__name__)``; handlers are attached here, once, by
the entry point, from ``--log-format text|json`` and ``--log-level`` (env twins
``NVML_MOCK_LOG_FORMAT`` / ``NVML_MOCK_LOG_LEVEL``). Logs go to stderr so that stdout stays
the command's output (a state file on ``-o -``, a path from ``lib-path``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Final, TextIO

__all__ = [
    "ENV_LOG_FORMAT",
    "ENV_LOG_LEVEL",
    "LOG_FORMATS",
    "JsonFormatter",
    "add_logging_args",
    "configure_logging",
]

ENV_LOG_FORMAT: Final = "NVML_MOCK_LOG_FORMAT"
ENV_LOG_LEVEL: Final = "NVML_MOCK_LOG_LEVEL"
LOG_FORMATS: Final = ("text", "json")
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
_HANDLER_NAME: Final = "nvml-mock-engine"
_RESERVED: Final = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg`` and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
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


def add_logging_args(
    parser: argparse.ArgumentParser, environ: Mapping[str, str], *, sub: bool = False
) -> None:
    """Add ``--log-format`` and ``--log-level`` with their env twins as defaults.

    With ``sub=True`` (for subcommand parsers) the options default to "not given", so the
    same options may appear before or after the subcommand without one resetting the other.
    """
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=argparse.SUPPRESS if sub else environ.get(ENV_LOG_FORMAT, "text"),
        help=f"log line format on stderr (env {ENV_LOG_FORMAT}; default text)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        type=str.lower,
        default=argparse.SUPPRESS if sub else environ.get(ENV_LOG_LEVEL, "info").lower(),
        help=f"lowest level logged (env {ENV_LOG_LEVEL}; default info)",
    )


def configure_logging(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Install the one stderr handler on the root logger; calling it again replaces it."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(numeric)
