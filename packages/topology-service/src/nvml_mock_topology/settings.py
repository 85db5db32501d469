"""The one frozen settings object of the topology service, from flags with env twins.

Every flag has an env twin; the flag wins, and an empty env value counts as unset.
The options are declared once in :data:`OPTIONS` (the shared pattern of
``nvml_mock_protocol.settings``), from which the command line, the precedence and
the README's table come. Values are checked here, once, so that a bad value stops
the service at start with the key and the value named (exit 3) instead of
surfacing later as a confusing runtime error.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvml_mock_protocol import settings as s
from nvml_mock_protocol.logs import ENV_LOG_FORMAT, ENV_LOG_LEVEL, LOG_FORMATS, LOG_LEVELS
from nvml_mock_protocol.names import TOPOLOGY_SERVICE_PORT
from nvml_mock_protocol.topology import DOCUMENT_MAX_BYTES, DOCUMENT_MAX_ITEMS

from nvml_mock_topology._version import __version__
from nvml_mock_topology.errors import ConfigError

__all__ = [
    "DEFAULT_TOPOLOGY_FILE",
    "ENV_ACCESS_LOG",
    "ENV_ALLOW_EMPTY",
    "ENV_DRAIN_SECONDS",
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
    "ENV_REPORT_RATE",
    "ENV_SCENARIOS_FILE",
    "ENV_TOPOLOGY_FILE",
    "ENV_WRITE_TOKEN_FILE",
    "OPTIONS",
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
ENV_DRAIN_SECONDS: Final = "NVML_MOCK_TOPOLOGY_DRAIN_SECONDS"
ENV_MAX_CONNECTIONS: Final = "NVML_MOCK_TOPOLOGY_MAX_CONNECTIONS"
ENV_SCENARIOS_FILE: Final = "NVML_MOCK_TOPOLOGY_SCENARIOS_FILE"
ENV_WRITE_TOKEN_FILE: Final = "NVML_MOCK_TOPOLOGY_WRITE_TOKEN_FILE"
ENV_REPORT_RATE: Final = "NVML_MOCK_TOPOLOGY_REPORT_RATE"

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
    drain_seconds: float = 0.0
    """Seconds the service keeps answering after SIGTERM, with ``/readyz`` at 503, before
    it stops: the time Kubernetes takes to stop routing new connections to it."""
    max_connections: int = 32768
    """Connections (and requests in flight) served at once; beyond it a request is answered
    503 and its connection closed. Each NRI plugin holds one watch connection, so this must
    stay above the number of nodes."""
    scenarios_file: Path | None = None
    """The scenario document (YAML or JSON); None serves no scenarios."""
    write_token_file: Path | None = None
    """The bearer token of the write API (agents' reports); None keeps the write API off."""
    report_rate: float = 500.0
    """Agents' reports taken per second (a second's worth of burst); the rest are answered
    429 with a ``Retry-After`` that spreads them, so identity lookups keep their latency
    while 10,000 agents report at once. 0 takes every report."""
    log_format: str = "text"
    """``text`` or ``json`` (one object per line)."""
    log_level: str = "info"
    """``debug``, ``info``, ``warning`` or ``error``."""


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("is not a boolean; use true/false, 1/0, yes/no or on/off")


def _number(*, minimum: float, maximum: float = math.inf) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise ValueError("is not a number") from None
        if not (minimum < number <= maximum) or math.isnan(number):
            raise ValueError(f"must be above {minimum:g} and at most {maximum:g}")
        return number

    return parse


def _integer(*, minimum: int, maximum: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value.strip().replace("_", ""))
        except ValueError:
            raise ValueError("is not a whole number") from None
        if not minimum <= number <= maximum:
            raise ValueError(f"must be between {minimum} and {maximum}")
        return number

    return parse


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise ValueError("is not a port number") from None
    if not 0 <= port <= 65535:
        raise ValueError("is outside 0..65535")
    return port


def _choice(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        lowered = value.strip().lower()
        if lowered not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return lowered

    return parse


def _topology_file(value: str) -> Path:
    if not value.strip():
        raise ValueError("is empty; give the topology document's path")
    return Path(value)


def _host(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty")
    return value.strip()


OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option(
        "topology_file",
        "--topology-file",
        ENV_TOPOLOGY_FILE,
        _topology_file,
        "topology document",
        metavar="PATH",
        doc="the topology document (YAML or JSON)",
    ),
    s.Option("host", "--host", ENV_HOST, _host, "listen address"),
    s.Option(
        "port",
        "--port",
        ENV_PORT,
        _port,
        "listen port",
        doc="listen port (`0`: any free port, logged)",
    ),
    s.Option(
        "allow_empty",
        "--allow-empty",
        ENV_ALLOW_EMPTY,
        _bool,
        "start empty when the file is missing",
        action="switch",
        doc="start with an empty topology when the file is missing, and load it when it appears",
    ),
    s.Option(
        "max_watch_seconds",
        "--max-watch-seconds",
        ENV_MAX_WATCH,
        _number(minimum=0, maximum=3600),
        "cap on a watch's wait",
        metavar="S",
        doc="cap on a watch's `wait` (0 < S ≤ 3600)",
    ),
    s.Option(
        "poll_interval",
        "--poll-interval",
        ENV_POLL_INTERVAL,
        _number(minimum=0, maximum=3600),
        "seconds between file checks",
        metavar="S",
        doc="how often the file's stat and resolved path are checked (0 < S ≤ 3600)",
    ),
    s.Option(
        "access_log",
        "--access-log",
        ENV_ACCESS_LOG,
        _bool,
        "log every request",
        action="switch",
        doc="one log line per request",
    ),
    s.Option(
        "max_file_bytes",
        "--max-file-size",
        ENV_MAX_FILE_SIZE,
        _integer(minimum=1, maximum=1 << 30),
        "largest topology file",
        metavar="BYTES",
        default_doc="`8388608` (8 MiB)",
        doc="largest topology file accepted; a larger one is refused without being read",
    ),
    s.Option(
        "max_document_items",
        "--max-document-items",
        ENV_MAX_DOCUMENT_ITEMS,
        _integer(minimum=1, maximum=100_000_000),
        "most values in a document, YAML aliases expanded",
        metavar="N",
        doc="most values (mappings, lists, scalars, keys included) a document may hold, "
        "YAML aliases expanded",
    ),
    s.Option(
        "header_timeout",
        "--header-timeout",
        ENV_HEADER_TIMEOUT,
        _number(minimum=0, maximum=3600),
        "seconds to receive a request's headers",
        metavar="S",
        doc="seconds a client has to send a request's headers, from its first byte (or from "
        "connecting); slower: `408` and the connection is closed",
    ),
    s.Option(
        "keep_alive_timeout",
        "--keep-alive-timeout",
        ENV_KEEP_ALIVE_TIMEOUT,
        _number(minimum=0, maximum=3600),
        "seconds an idle connection stays open",
        metavar="S",
        doc="seconds an idle kept-alive connection stays open between requests",
    ),
    s.Option(
        "drain_seconds",
        "--drain-seconds",
        ENV_DRAIN_SECONDS,
        _number(minimum=0, maximum=300),
        "seconds to keep answering after SIGTERM",
        metavar="S",
        doc="seconds the service keeps answering after SIGTERM (or SIGINT), `/readyz` "
        "answering `503 draining`, before it stops taking connections: the time the "
        "endpoints controller and kube-proxy take to stop routing to it. A second signal "
        "stops at once. Then at most 10 s for requests in flight",
    ),
    s.Option(
        "max_connections",
        "--max-connections",
        ENV_MAX_CONNECTIONS,
        _integer(minimum=1, maximum=1_000_000),
        "connections served at once, beyond: 503",
        metavar="N",
        doc="connections and requests in flight at once; beyond it a request is answered `503` "
        "and its connection closed. Each node's NRI plugin holds one watch connection: keep it "
        "above the node count",
    ),
    s.Option(
        "scenarios_file",
        "--scenarios-file",
        ENV_SCENARIOS_FILE,
        s.optional(_topology_file),
        "scenario document",
        metavar="PATH",
        default_doc="none (no scenarios)",
        doc="the scenario document (YAML or JSON), followed like the topology file; "
        "missing at start: none served until it appears",
    ),
    s.Option(
        "write_token_file",
        "--write-token-file",
        ENV_WRITE_TOKEN_FILE,
        s.optional(_topology_file),
        "bearer token of the write API",
        metavar="PATH",
        default_doc="none (write API off)",
        doc="turns the write API (the node agents' scenario reports) on; each report needs "
        "`Authorization: Bearer` with this file's content (a Secret key; re-read on change)",
    ),
    s.Option(
        "report_rate",
        "--report-rate",
        ENV_REPORT_RATE,
        _number(minimum=0, maximum=1_000_000),
        "agents' reports taken per second, beyond: 429",
        metavar="N",
        doc="agents' reports taken per second (one second's worth of burst); the rest are "
        "answered `429` with a `Retry-After` that books each agent a later slot at this rate, "
        "so lookups keep their latency while every agent reports at once. `0` takes all",
    ),
    s.Option(
        "log_format",
        "--log-format",
        ENV_LOG_FORMAT,
        _choice(LOG_FORMATS),
        " or ".join(LOG_FORMATS),
        doc="log lines on stderr in the shape every nvml-mock command shares "
        "(`nvml_mock_protocol.logs`); `json` is one object per line "
        "(`ts`, `level`, `logger`, `msg`, extras, `exc`)",
    ),
    s.Option(
        "log_level",
        "--log-level",
        ENV_LOG_LEVEL,
        _choice(LOG_LEVELS),
        ", ".join(LOG_LEVELS),
        doc=", ".join(f"`{level}`" for level in LOG_LEVELS),
    ),
)
"""Every option of the service: flag, env twin, parser, help and the README's meaning."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvml-mock-topology-service",
        description="Serve each node's ComputeDomain identity from a topology document.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    s.add_options(parser, OPTIONS, Settings())
    return parser


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Build the settings from ``argv`` (flags) and ``environ`` (env twins); the flag wins.

    An empty env value counts as unset. Raises :class:`ConfigError` naming the flag or
    env var and its value; argparse itself exits with status 2 on unknown flags.
    """
    env = os.environ if environ is None else environ
    try:
        return s.resolve(Settings, OPTIONS, _parser().parse_args(argv), env)
    except s.SettingsError as exc:
        raise ConfigError(f"{exc.key}={exc.value!r} {exc.reason}") from None
