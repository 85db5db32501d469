"""The exporter's one frozen settings object, from flags with env twins.

Declared once in :data:`OPTIONS` (the shared pattern of ``nvml_mock_protocol.settings``):
the command line, the precedence (flag, then env twin, then default; an empty env value is
unset) and the README's table come from it. A bad value stops the start naming the key and
the value (exit 3) before NVML is touched.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

from nvml_mock_protocol import names
from nvml_mock_protocol import settings as s
from nvml_mock_protocol.logs import LOG_OPTIONS

from nvml_mock_exporter._version import __version__
from nvml_mock_exporter.errors import ArgumentsError, ConfigError

__all__ = [
    "HOSTNAME_LABELS",
    "OPTIONS",
    "Settings",
    "build_parser",
    "live_file_of",
    "parse_settings",
]

ENV_HOST: Final = "NVML_MOCK_EXPORTER_HOST"
ENV_PORT: Final = "NVML_MOCK_EXPORTER_PORT"
ENV_COLLECTORS: Final = "NVML_MOCK_EXPORTER_COLLECTORS"
ENV_COLLECT_INTERVAL: Final = "NVML_MOCK_EXPORTER_COLLECT_INTERVAL"
ENV_NVML_TIMEOUT: Final = "NVML_MOCK_EXPORTER_NVML_TIMEOUT"
ENV_XID_WINDOW: Final = "NVML_MOCK_EXPORTER_XID_COUNT_WINDOW_SIZE"
ENV_HOSTNAME_LABEL: Final = "NVML_MOCK_EXPORTER_HOSTNAME_LABEL"
ENV_KUBERNETES: Final = "NVML_MOCK_EXPORTER_KUBERNETES"
ENV_MAX_CONNECTIONS: Final = "NVML_MOCK_EXPORTER_MAX_CONNECTIONS"
ENV_REQUEST_TIMEOUT: Final = "NVML_MOCK_EXPORTER_REQUEST_TIMEOUT"
HOSTNAME_LABELS: Final = ("hostname", "Hostname", "none")
"""``hostname`` (dcgm-exporter since the 2026 rename), ``Hostname`` (before it), or none."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the exporter is configured with."""

    host: str = "0.0.0.0"
    """Address to listen on."""
    port: int = names.EXPORTER_PORT
    """TCP port (dcgm-exporter's 9400; 0 picks a free one, logged)."""
    collectors: Path | None = None
    """A counters file in dcgm-exporter's CSV format; None serves its default set."""
    collect_interval: float = 30.0
    """Seconds between collections (dcgm-exporter's ``--collect-interval``, 30 s)."""
    nvml_timeout: float = 10.0
    """Seconds an NVML call may take before its GPU is left out of the collections."""
    xid_window_ms: int = 300000
    """The window of ``DCGM_EXP_XID_ERRORS_COUNT`` in ms (dcgm-exporter's default, 5 min)."""
    hostname_label: str = "hostname"
    """The host label's key: ``hostname``, ``Hostname`` or ``none``."""
    node_name: str = ""
    """The host label's value; empty: this machine's host name."""
    kubernetes: bool = True
    """Add ``pod``/``namespace``/``container`` from the node's allocation records."""
    live_file: Path | None = None
    """The live layer holding the allocation records; None: beside ``MOCK_NVML_CONFIG``, else
    the overlay's."""
    max_connections: int = 256
    """Connections open at once; past it the one waiting longest for a request is closed."""
    request_timeout: float = 10.0
    """Seconds a request's head may take to arrive, and an answer may stand without progress."""
    log_format: str = "text"
    """``text`` or ``json``."""
    log_level: str = "info"
    """``debug``, ``info``, ``warning`` or ``error``."""

    @property
    def host_label(self) -> str:
        """The host label's value."""
        return self.node_name or socket.gethostname()


def _hostname_label(value: str) -> str:
    # case matters here: the two spellings are the two label keys
    if value.strip() not in HOSTNAME_LABELS:
        raise ValueError(f"must be one of {', '.join(HOSTNAME_LABELS)} (case matters)")
    return value.strip()


def _path(value: str) -> Path:
    if not value.strip():
        raise ValueError("is empty")
    return Path(value)


OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option("host", "--host", ENV_HOST, s.name, "listen address"),
    s.Option(
        "port",
        "--port",
        ENV_PORT,
        s.int_range(0, 65535),
        "listen port",
        doc="listen port (`0`: any free port, logged)",
    ),
    s.Option(
        "collectors",
        "--collectors",
        ENV_COLLECTORS,
        s.optional(_path),
        "counters file in dcgm-exporter's CSV format",
        metavar="PATH",
        aliases=("-f",),
        default_doc="none (dcgm-exporter's default set)",
        doc="a counters file in dcgm-exporter's CSV format (`name, type, help` a line); "
        "followed on change, a bad version refused with its line named while the last good "
        "set keeps serving",
    ),
    s.Option(
        "collect_interval",
        "--collect-interval",
        ENV_COLLECT_INTERVAL,
        s.seconds(3600),
        "seconds between collections",
        metavar="S",
        doc="seconds between collections; a scrape serves the last one",
    ),
    s.Option(
        "nvml_timeout",
        "--nvml-timeout",
        ENV_NVML_TIMEOUT,
        s.seconds(3600),
        "seconds an NVML call may take before its GPU is left out",
        metavar="S",
        doc="seconds an NVML call may take; past it, that GPU's series are left out until "
        "the call returns",
    ),
    s.Option(
        "xid_window_ms",
        "--xid-count-window-size",
        ENV_XID_WINDOW,
        s.int_range(1, 86_400_000),
        "window of DCGM_EXP_XID_ERRORS_COUNT in ms",
        metavar="MS",
        doc="the window of `DCGM_EXP_XID_ERRORS_COUNT`, in ms (its `window_size_in_ms`)",
    ),
    s.Option(
        "hostname_label",
        "--hostname-label",
        ENV_HOSTNAME_LABEL,
        _hostname_label,
        "the host label's key: " + ", ".join(HOSTNAME_LABELS),
        metavar="{" + ",".join(HOSTNAME_LABELS) + "}",
        doc="the host label's key: `hostname` (dcgm-exporter since 2026), `Hostname` "
        "(before), `none` (no host label, dcgm-exporter's `--no-hostname`)",
    ),
    s.Option(
        "node_name",
        "--node-name",
        names.ENV_NODE_NAME,
        s.name,
        "the host label's value",
        metavar="NAME",
        default_doc="this machine's host name",
    ),
    s.Option(
        "kubernetes",
        "--kubernetes",
        ENV_KUBERNETES,
        s.boolean,
        "pod, namespace and container labels from the allocation records",
        action="toggle",
        doc="`pod`, `namespace`, `container` labels on a GPU's series from the node's "
        "allocation records (the NRI plugin's)",
    ),
    s.Option(
        "live_file",
        "--live-file",
        names.ENV_MOCK_NVML_LIVE,
        s.optional(_path),
        "the live layer holding the allocation records",
        metavar="PATH",
        default_doc="beside `MOCK_NVML_CONFIG`, else the overlay's",
    ),
    s.Option(
        "max_connections",
        "--max-connections",
        ENV_MAX_CONNECTIONS,
        s.int_range(1, 4096),
        "connections open at once",
        metavar="N",
        doc="connections open at once; past it, the connection that has waited longest for "
        "a request is closed (a scraper sending its request at once always gets in)",
    ),
    s.Option(
        "request_timeout",
        "--request-timeout",
        ENV_REQUEST_TIMEOUT,
        s.seconds(600),
        "seconds a request head may take to arrive",
        metavar="S",
        doc="seconds a request's line and headers may take to arrive (from the connection or "
        "the last answer), and an answer may stand without the client reading; past it the "
        "connection is closed",
    ),
    *LOG_OPTIONS,
)
"""Every flag of the exporter, its env twin and its parser."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgumentsError(2, f"{self.prog}: error: {message}\n{self.format_usage().rstrip()}")


def build_parser() -> argparse.ArgumentParser:
    """The command line: one flag per option (help lines name the env twins), and --version."""
    parser = _Parser(
        prog="nvml-mock-exporter",
        description=(
            "Serve the node's GPUs, read through NVML, as Prometheus metrics under "
            "dcgm-exporter's names (port 9400, /metrics)."
        ),
        epilog="exit codes: 0 stopped; 1 unexpected failure; 2 usage; 3 bad configuration, "
        "no NVML, or the port cannot be bound",
    )
    s.add_options(parser, OPTIONS, Settings())
    parser.add_argument("--version", action="version", version=f"nvml-mock-exporter {__version__}")
    return parser


def parse_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Parse ``argv`` over ``environ``; raises :class:`ConfigError` naming a bad value."""
    args = build_parser().parse_args(list(argv))
    try:
        return s.resolve(Settings, OPTIONS, args, environ)
    except s.SettingsError as exc:
        raise ConfigError(exc.key, exc.value, exc.reason) from None


def live_file_of(settings: Settings, environ: Mapping[str, str]) -> Path:
    """Where the allocation records are: the setting, else beside the state, else the overlay."""
    if settings.live_file is not None:
        return settings.live_file
    state = environ.get(names.ENV_MOCK_NVML_CONFIG, "").strip()
    if state:
        return Path(state).parent / names.LIVE_FILE_NAME
    overlay = environ.get(names.ENV_OVERLAY_MOUNT_PATH, "").strip() or names.OVERLAY_MOUNT_PATH
    return Path(overlay) / names.OVERLAY_CONFIG_DIR / names.LIVE_FILE_NAME
