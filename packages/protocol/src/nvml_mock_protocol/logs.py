"""One log-line contract for every nvml-mock command.

Log pipelines parse what the engine, the NRI plugin, the topology service and
check-fabric write on stderr, and a Helm value sets ``NVML_MOCK_LOG_FORMAT`` /
``NVML_MOCK_LOG_LEVEL`` for all of them at once. So the line shape is a contract
between the parts, like an env var name, and lives here once:

- ``json``: one object per line with ``ts`` (UTC, ISO 8601, milliseconds, ``Z``),
  ``level`` (lower case), ``logger``, ``msg``, then every field bound through
  ``extra=`` (``node``, ``namespace``, ``pod``, ``container``, ``path`` ...) under
  its own name, then ``exc`` (the formatted traceback) when there is one.
- ``text``: ``<ts> <LEVEL> <logger>: <msg> key=value ...``, the traceback on the
  lines after.

Every line is one line and bounded, whatever a value holds: the plugin logs values a pod
wrote (``NVIDIA_VISIBLE_DEVICES``, annotations, names), so control characters are escaped
(``\\n``, ``\\x00``: a newline cannot forge a line, a NUL cannot reach the log) and a
message is cut at :data:`MESSAGE_MAX_CHARS`, a context value at :data:`VALUE_MAX_CHARS`
and a traceback at :data:`TRACEBACK_MAX_CHARS`, each saying how long it was
(:func:`printable`).

Entry points call :func:`configure_logging` once; modules only call
``logging.getLogger(__name__)``. Importing this module stays as light as
:mod:`nvml_mock_protocol.names` (no pydantic, yaml or protobuf): check-fabric and
nvidia-smi start in every workload container and must start fast.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Final, TextIO

from nvml_mock_protocol import settings as s
from nvml_mock_protocol.names import ENV_LOG_FORMAT, ENV_LOG_LEVEL, LOG_FORMATS, LOG_LEVELS

__all__ = [
    "DEFAULT_LOG_FORMAT",
    "ENV_LOG_FORMAT",
    "ENV_LOG_LEVEL",
    "HANDLER_NAME",
    "JSON_FIELDS",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LOG_OPTIONS",
    "MESSAGE_MAX_CHARS",
    "TRACEBACK_MAX_CHARS",
    "VALUE_MAX_CHARS",
    "JsonFormatter",
    "TextFormatter",
    "configure_logging",
    "formatter_for",
    "printable",
    "record_context",
]

DEFAULT_LOG_FORMAT: Final = "text"
LOG_OPTIONS: Final = (
    s.Option(
        "log_format",
        "--log-format",
        ENV_LOG_FORMAT,
        s.choice(*LOG_FORMATS),
        "text or json logs on stderr",
        metavar="{" + ",".join(LOG_FORMATS) + "}",
        doc="`text` or `json` logs on stderr",
    ),
    s.Option(
        "log_level",
        "--log-level",
        ENV_LOG_LEVEL,
        s.choice(*LOG_LEVELS),
        "lowest level logged: " + ", ".join(LOG_LEVELS),
        metavar="{" + ",".join(LOG_LEVELS) + "}",
        doc=", ".join(f"`{level}`" for level in LOG_LEVELS),
    ),
)
"""``--log-format`` and ``--log-level`` with their env twins, for a command's option table
(fields ``log_format`` and ``log_level`` of its settings)."""
JSON_FIELDS: Final = ("ts", "level", "logger", "msg")
"""The fields every JSON line starts with; ``exc`` follows the context when set."""
HANDLER_NAME: Final = "nvml-mock"
"""Name of the one handler :func:`configure_logging` owns on the root logger."""

MESSAGE_MAX_CHARS: Final = 4096
"""Longest message written; the rest is cut, saying how long it was."""
VALUE_MAX_CHARS: Final = 512
"""Longest context value written (a pod's env value, a name)."""
TRACEBACK_MAX_CHARS: Final = 16384
"""Longest traceback written."""

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 256 else f"\\u{ord(char):04x}")


def printable(value: object, limit: int = VALUE_MAX_CHARS, *, keep_newlines: bool = False) -> str:
    """``value`` as text fit for one log line (or one error message) from untrusted input:
    control characters escaped, at most ``limit`` characters kept (then ``...(N chars)``).

    ``keep_newlines`` leaves line breaks of a traceback, which this module writes itself.
    """
    text = value if isinstance(value, str) else str(value)
    cut = len(text) > limit
    if cut:
        text = text[:limit]
    if keep_newlines:
        text = "\n".join(_CONTROL.sub(_escape, line) for line in text.split("\n"))
    else:
        text = _CONTROL.sub(_escape, text)
    if cut:
        text += f"...({len(value if isinstance(value, str) else str(value))} chars)"
    return text


def _bounded_context(record: logging.LogRecord, *, structured: bool) -> dict[str, object]:
    """The context with every value made printable and bounded: numbers, booleans and
    None kept; with ``structured`` (JSON) a small list or mapping too, since JSON escapes
    what it holds; anything else as its printable text."""
    bounded: dict[str, object] = {}
    for key, value in record_context(record).items():
        if isinstance(value, bool | int | float) or value is None:
            bounded[key] = value
        elif isinstance(value, str):
            bounded[key] = printable(value)
        elif structured and isinstance(value, list | tuple | dict):
            encoded = json.dumps(value, default=str, ensure_ascii=False)
            bounded[key] = value if len(encoded) <= VALUE_MAX_CHARS else printable(encoded)
        else:
            bounded[key] = printable(value)
    return bounded


_EXC_FIELD: Final = "exc"
# Attributes every LogRecord has, plus those formatters add and uvicorn's
# colourised duplicate of the message: none of them is caller context.
_NOT_CONTEXT: Final = (
    frozenset(logging.makeLogRecord({}).__dict__)
    | {"message", "asctime", "color_message"}
    | {*JSON_FIELDS, _EXC_FIELD}
)


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def record_context(record: logging.LogRecord) -> dict[str, object]:
    """The fields a caller bound through ``extra=`` (or an adapter), in the order given.

    Names starting with ``_`` stay private; a field named like a contract field
    (``ts``, ``level``, ``logger``, ``msg``, ``exc``) cannot replace it.
    """
    return {
        key: value
        for key, value in record.__dict__.items()
        if key not in _NOT_CONTEXT and not key.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, the context, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": printable(record.getMessage(), MESSAGE_MAX_CHARS),
        }
        payload.update(_bounded_context(record, structured=True))
        if record.exc_info:
            payload[_EXC_FIELD] = printable(
                self.formatException(record.exc_info), TRACEBACK_MAX_CHARS, keep_newlines=True
            )
        # default=str: a context value JSON cannot encode is logged as its text, not lost.
        return json.dumps(payload, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger>: <msg> key=value ...`` for humans; traceback on the next lines."""

    def format(self, record: logging.LogRecord) -> str:
        message = printable(record.getMessage(), MESSAGE_MAX_CHARS)
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {message}"
        context = " ".join(
            f"{key}={value}" for key, value in _bounded_context(record, structured=False).items()
        )
        if context:
            line = f"{line} {context}"
        if record.exc_info:
            trace = self.formatException(record.exc_info)
            # Each traceback line indented: none can pass for a line of its own.
            trace = printable(trace, TRACEBACK_MAX_CHARS, keep_newlines=True)
            line = f"{line}\n" + "\n".join(f"  {part}" for part in trace.split("\n"))
        return line


def formatter_for(fmt: str) -> logging.Formatter:
    """The formatter for a ``--log-format`` value; ``ValueError`` names an unknown one."""
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return TextFormatter()
    raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at emit time (it may be replaced after setup)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """``StreamHandler`` assigns its stream; this handler always follows ``sys.stderr``."""


def configure_logging(level: str, fmt: str, stream: TextIO | None = None) -> logging.Handler:
    """Install the one log handler on the root logger and set the root level.

    ``level`` is a level name in any case (``debug`` ... ``error``, or ``critical``);
    ``fmt`` one of :data:`LOG_FORMATS`. Calling it again replaces the handler it
    installed before, so a process never writes a line twice. Without ``stream``
    lines go to ``sys.stderr`` as it is when each line is written. Raises
    ``ValueError`` naming a bad level or format before changing anything.
    """
    formatter = formatter_for(fmt)
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == HANDLER_NAME:
            root.removeHandler(existing)
            existing.close()
    handler: logging.Handler = _StderrHandler() if stream is None else logging.StreamHandler(stream)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(numeric)
    return handler
