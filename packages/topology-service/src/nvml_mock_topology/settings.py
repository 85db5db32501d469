"""The one frozen settings object of the topology service, from flags with env twins.

Every flag has an env twin; the flag wins. Values are checked here, once, so
that a bad value stops the service at start with the key and the value named
(exit 3) instead of surfacing later as a confusing runtime error.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvml_mock_protocol.logs import ENV_LOG_FORMAT, ENV_LOG_LEVEL, LOG_FORMATS, LOG_LEVELS
from nvml_mock_protocol.names import TOPOLOGY_SERVICE_PORT
from nvml_mock_protocol.topology import DOCUMENT_MAX_BYTES, DOCUMENT_MAX_ITEMS

from nvml_mock_topology._version import __version__
from nvml_mock_topology.errors import ConfigError

__all__ = [
    "DEFAULT_TOPOLOGY_FILE",
    "ENV_ACCESS_LOG",
    "ENV_ALLOW_EMPTY",
    "ENV_HEADER_TIMEOUT",
    "ENV_HOST",
    "ENV_KEEP_ALIVE_TIMEOUT",
    "ENV_LOG_FORMAT",
    "ENV_LOG_LEVEL",
    "ENV_MAX_CONNECTIONS",
    "ENV_MAX_DOCUMENT_ITEMS",
    "ENV_MAX_FILE_SIZE",
    "ENV_MAX_WATCH",
    "ENV_POLL_INTERVAL",
    "ENV_PORT",
    "ENV_TOPOLOGY_FILE",
    "Settings",
    "parse_settings",
]

ENV_TOPOLOGY_FILE: Final = "NVML_MOCK_TOPOLOGY_FILE"
ENV_HOST: Final = "NVML_MOCK_TOPOLOGY_HOST"
ENV_PORT: Final = "NVML_MOCK_TOPOLOGY_PORT"
ENV_ALLOW_EMPTY: Final = "NVML_MOCK_TOPOLOGY_ALLOW_EMPTY"
ENV_MAX_WATCH: Final = "NVML_MOCK_TOPOLOGY_MAX_WATCH"
ENV_POLL_INTERVAL: Final = "NVML_MOCK_TOPOLOGY_POLL_INTERVAL"
ENV_ACCESS_LOG: Final = "NVML_MOCK_TOPOLOGY_ACCESS_LOG"
ENV_MAX_FILE_SIZE: Final = "NVML_MOCK_TOPOLOGY_MAX_FILE_SIZE"
ENV_MAX_DOCUMENT_ITEMS: Final = "NVML_MOCK_TOPOLOGY_MAX_DOCUMENT_ITEMS"
ENV_HEADER_TIMEOUT: Final = "NVML_MOCK_TOPOLOGY_HEADER_TIMEOUT"
ENV_KEEP_ALIVE_TIMEOUT: Final = "NVML_MOCK_TOPOLOGY_KEEP_ALIVE_TIMEOUT"
ENV_MAX_CONNECTIONS: Final = "NVML_MOCK_TOPOLOGY_MAX_CONNECTIONS"

DEFAULT_TOPOLOGY_FILE: Final = "/etc/nvml-mock/topology/topology.yaml"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the service is configured with."""

    topology_file: Path = Path(DEFAULT_TOPOLOGY_FILE)
    """The topology document (YAML or JSON), usually a ConfigMap key mounted as a file."""
    host: str = "0.0.0.0"
    """Address to listen on."""
    port: int = TOPOLOGY_SERVICE_PORT
    """TCP port to listen on (0 picks a free port; the chosen one is logged)."""
    allow_empty: bool = False
    """Start with an empty topology when the file is missing, and load it when it appears."""
    max_watch_seconds: float = 60.0
    """Upper bound on the ``wait`` of a watch request, in seconds."""
    poll_interval: float = 1.0
    """How often the file's identity (stat and resolved path) is checked, in seconds."""
    access_log: bool = False
    """Log one line per request (off by default: a watch-heavy cluster makes a lot of them)."""
    max_file_bytes: int = DOCUMENT_MAX_BYTES
    """Largest topology file accepted, in bytes; a larger one is refused without being read."""
    max_document_items: int = DOCUMENT_MAX_ITEMS
    """Most values (mappings, lists, scalars; YAML aliases expanded) a document may hold."""
    header_timeout: float = 10.0
    """Seconds a client has to send a request's headers, from its first byte (slow clients
    dripping a header a byte at a time are cut off after this)."""
    keep_alive_timeout: float = 5.0
    """Seconds an idle keep-alive connection stays open between requests."""
    max_connections: int = 32768
    """Connections (and requests in flight) served at once; beyond it a request is answered
    503 and its connection closed. Each NRI plugin holds one watch connection, so this must
    stay above the number of nodes."""
    log_format: str = "text"
    """``text`` or ``json`` (one object per line)."""
    log_level: str = "info"
    """``debug``, ``info``, ``warning`` or ``error``."""


def _bool(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{key}={value!r} is not a boolean; use true/false, 1/0, yes/no or on/off")


def _number(key: str, value: str, *, minimum: float, maximum: float = math.inf) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not a number") from None
    if not (minimum < number <= maximum) or math.isnan(number):
        raise ConfigError(f"{key}={value!r} must be above {minimum:g} and at most {maximum:g}")
    return number


def _integer(key: str, value: str, *, minimum: int, maximum: int) -> int:
    try:
        number = int(value.strip().replace("_", ""))
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not a whole number") from None
    if not minimum <= number <= maximum:
        raise ConfigError(f"{key}={value!r} must be between {minimum} and {maximum}")
    return number


def _port(key: str, value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise ConfigError(f"{key}={value!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key}={value!r} is outside 0..65535")
    return port


def _choice(key: str, value: str, choices: Sequence[str]) -> str:
    lowered = value.strip().lower()
    if lowered not in choices:
        raise ConfigError(f"{key}={value!r} must be one of {', '.join(choices)}")
    return lowered


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvml-mock-topology-service",
        description="Serve each node's ComputeDomain identity from a topology document.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add = parser.add_argument
    add("--topology-file", metavar="PATH", help=f"topology document (env {ENV_TOPOLOGY_FILE})")
    add("--host", help=f"listen address (env {ENV_HOST}; default 0.0.0.0)")
    add("--port", help=f"listen port (env {ENV_PORT}; default {TOPOLOGY_SERVICE_PORT})")
    add(
        "--allow-empty",
        action="store_const",
        const="true",
        help=f"start empty when the file is missing (env {ENV_ALLOW_EMPTY})",
    )
    add(
        "--max-watch-seconds",
        metavar="S",
        help=f"cap on a watch's wait (env {ENV_MAX_WATCH}; default 60)",
    )
    add(
        "--poll-interval",
        metavar="S",
        help=f"seconds between file checks (env {ENV_POLL_INTERVAL}; default 1)",
    )
    add(
        "--access-log",
        action="store_const",
        const="true",
        help=f"log every request (env {ENV_ACCESS_LOG})",
    )
    add(
        "--max-file-size",
        metavar="BYTES",
        help=f"largest topology file (env {ENV_MAX_FILE_SIZE}; default {DOCUMENT_MAX_BYTES})",
    )
    add(
        "--max-document-items",
        metavar="N",
        help=(
            f"most values in a document, YAML aliases expanded (env {ENV_MAX_DOCUMENT_ITEMS}; "
            f"default {DOCUMENT_MAX_ITEMS})"
        ),
    )
    add(
        "--header-timeout",
        metavar="S",
        help=f"seconds to receive a request's headers (env {ENV_HEADER_TIMEOUT}; default 10)",
    )
    add(
        "--keep-alive-timeout",
        metavar="S",
        help=f"seconds an idle connection stays open (env {ENV_KEEP_ALIVE_TIMEOUT}; default 5)",
    )
    add(
        "--max-connections",
        metavar="N",
        help=f"connections served at once, beyond: 503 (env {ENV_MAX_CONNECTIONS}; default 32768)",
    )
    add("--log-format", help=f"{' or '.join(LOG_FORMATS)} (env {ENV_LOG_FORMAT}; default text)")
    add("--log-level", help=f"{', '.join(LOG_LEVELS)} (env {ENV_LOG_LEVEL}; default info)")
    return parser


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Build the settings from ``argv`` (flags) and ``environ`` (env twins); the flag wins.

    Raises :class:`ConfigError` naming the flag or env var and its value; argparse
    itself exits with status 2 on unknown flags.
    """
    env = os.environ if environ is None else environ
    args = _parser().parse_args(argv)

    def pick(flag: str | None, key: str) -> tuple[str, str] | None:
        if flag is not None:
            return f"--{key}", flag
        env_key = _ENV_OF[key]
        if env_key in env:
            return env_key, env[env_key]
        return None

    values: dict[str, object] = {}
    if (got := pick(args.topology_file, "topology-file")) is not None:
        if not got[1].strip():
            raise ConfigError(f"{got[0]}={got[1]!r} is empty; give the topology document's path")
        values["topology_file"] = Path(got[1])
    if (got := pick(args.host, "host")) is not None:
        if not got[1].strip():
            raise ConfigError(f"{got[0]}={got[1]!r} is empty")
        values["host"] = got[1].strip()
    if (got := pick(args.port, "port")) is not None:
        values["port"] = _port(*got)
    if (got := pick(args.allow_empty, "allow-empty")) is not None:
        values["allow_empty"] = _bool(*got)
    if (got := pick(args.max_watch_seconds, "max-watch-seconds")) is not None:
        values["max_watch_seconds"] = _number(*got, minimum=0, maximum=3600)
    if (got := pick(args.poll_interval, "poll-interval")) is not None:
        values["poll_interval"] = _number(*got, minimum=0, maximum=3600)
    if (got := pick(args.access_log, "access-log")) is not None:
        values["access_log"] = _bool(*got)
    if (got := pick(args.max_file_size, "max-file-size")) is not None:
        values["max_file_bytes"] = _integer(*got, minimum=1, maximum=1 << 30)
    if (got := pick(args.max_document_items, "max-document-items")) is not None:
        values["max_document_items"] = _integer(*got, minimum=1, maximum=100_000_000)
    if (got := pick(args.header_timeout, "header-timeout")) is not None:
        values["header_timeout"] = _number(*got, minimum=0, maximum=3600)
    if (got := pick(args.keep_alive_timeout, "keep-alive-timeout")) is not None:
        values["keep_alive_timeout"] = _number(*got, minimum=0, maximum=3600)
    if (got := pick(args.max_connections, "max-connections")) is not None:
        values["max_connections"] = _integer(*got, minimum=1, maximum=1_000_000)
    if (got := pick(args.log_format, "log-format")) is not None:
        values["log_format"] = _choice(*got, LOG_FORMATS)
    if (got := pick(args.log_level, "log-level")) is not None:
        values["log_level"] = _choice(*got, LOG_LEVELS)
    return Settings(**values)  # type: ignore[arg-type]


_ENV_OF: Final = {
    "topology-file": ENV_TOPOLOGY_FILE,
    "host": ENV_HOST,
    "port": ENV_PORT,
    "allow-empty": ENV_ALLOW_EMPTY,
    "max-watch-seconds": ENV_MAX_WATCH,
    "poll-interval": ENV_POLL_INTERVAL,
    "access-log": ENV_ACCESS_LOG,
    "max-file-size": ENV_MAX_FILE_SIZE,
    "max-document-items": ENV_MAX_DOCUMENT_ITEMS,
    "header-timeout": ENV_HEADER_TIMEOUT,
    "keep-alive-timeout": ENV_KEEP_ALIVE_TIMEOUT,
    "max-connections": ENV_MAX_CONNECTIONS,
    "log-format": ENV_LOG_FORMAT,
    "log-level": ENV_LOG_LEVEL,
}
