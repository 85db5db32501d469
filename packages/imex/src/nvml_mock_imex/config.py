"""NVIDIA's IMEX config file (``/etc/nvidia-imex/config.cfg``, the DRA driver's
``/imexd/imexd.cfg``): ``KEY=VALUE`` lines, ``#`` comments, read once at start.

The keys the work-alike acts on are in :class:`ImexConfig`; every other key NVIDIA's file
documents (log rotation, syslog, authentication, GSS settings) is accepted and ignored, as
they change nothing a mock domain can show. A key NVIDIA's file does not document is
refused by name, so a typo (``SERVER_PROT``) does not silently fall back to a default. Values
are checked as NVIDIA's file describes them (ports 0..65535, paths of at most 256 bytes).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvml_mock_imex.errors import ImexConfigError
from nvml_mock_imex.textfile import read_small

__all__ = [
    "DEFAULT_CMD_PORT",
    "DEFAULT_NODE_CONFIG_FILE",
    "DEFAULT_SERVER_PORT",
    "ImexConfig",
    "load_config",
    "parse_config",
]

DEFAULT_SERVER_PORT: Final = 50000
"""NVIDIA's ``SERVER_PORT`` default: the TCP port peers connect to."""
DEFAULT_CMD_PORT: Final = 50005
"""The command service port of NVIDIA's shipped config (and the DRA driver's template)."""
DEFAULT_NODE_CONFIG_FILE: Final = "/etc/nvidia-imex/nodes_config.cfg"
"""NVIDIA's ``IMEX_NODE_CONFIG_FILE`` default."""
_MAX_PATH: Final = 256

_IGNORED: Final = frozenset(
    {
        "STATS_FILE_NAME",
        "LOG_APPEND_TO_LOG",
        "LOG_FILE_MAX_SIZE",
        "LOG_MAX_ROTATE_COUNT",
        "LOG_USE_SYSLOG",
        "NETWORK_INTERFACE",
        "IMEX_ENABLE_AUTH_ENCRYPTION",
        "IMEX_AUTH_ENCRYPTION_MODE",
        "IMEX_AUTH_SOURCE",
        "IMEX_SERVER_KEY",
        "IMEX_SERVER_CERT",
        "IMEX_SERVER_CERT_AUTH",
        "IMEX_CLIENT_KEY",
        "IMEX_CLIENT_CERT",
        "IMEX_CLIENT_CERT_AUTH",
        "IMEX_SECURITY_TARGET_OVERRIDE",
        "IMEX_GSS_SERVICE_NAME",
        "IMEX_GSS_TIMEOUT_SEC",
        "IMEX_GSS_RETRY_INTERVAL_SEC",
        "IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC",
        "IMEX_GSS_SHUTDOWN_ON_FAILURE",
    }
)
_USED: Final = frozenset(
    {
        "LOG_LEVEL",
        "LOG_FILE_NAME",
        "DAEMONIZE",
        "BIND_INTERFACE_IP",
        "SERVER_PORT",
        "IMEX_NODE_CONFIG_FILE",
        "IMEX_WAIT_FOR_QUORUM",
        "IMEX_CMD_ENABLED",
        "IMEX_CMD_BIND_INTERFACE_IP",
        "IMEX_CMD_PORT",
        "IMEX_CMD_UNIX_DOMAIN_PATH",
        "IMEX_NODE_DISCONNECTED_GRACE_TIME",
    }
)
QUORUM_MODES: Final = ("NONE", "RECOVERY")
_INTEGER: Final = re.compile(r"-?[0-9]+")
"""A config integer: plain ASCII digits, a minus sign where the range allows one; no ``+``,
no ``_`` separators, no other scripts' digits (all of which Python's ``int`` would take)."""


@dataclass(frozen=True, slots=True)
class ImexConfig:
    """What the work-alike reads of the config file."""

    path: str
    log_level: int = 4
    log_file: str = ""
    daemonize: bool = True
    bind_ip: str = ""
    server_port: int = DEFAULT_SERVER_PORT
    node_config_file: str = DEFAULT_NODE_CONFIG_FILE
    wait_for_quorum: str = "RECOVERY"
    """Checked and kept; it changes nothing: NVIDIA's daemon waits for a quorum only after an
    unclean stop that left importers, which a mock node never has."""
    cmd_enabled: bool = False
    cmd_bind_ip: str = ""
    cmd_port: int | None = None
    cmd_unix_path: str = ""
    disconnected_grace: int = -1
    """Seconds a lost peer stays *recovering* before it is *disconnected*; -1 forever."""


def _int(path: str, line: int, key: str, value: str, *, low: int, high: int) -> int:
    if not _INTEGER.fullmatch(value):
        raise ImexConfigError(f"{path}:{line}: {key}={value!r} is not an integer ({low}..{high})")
    number = int(value)
    if not low <= number <= high:
        raise ImexConfigError(f"{path}:{line}: {key}={value} is out of range ({low}..{high})")
    return number


def _bool(path: str, line: int, key: str, value: str) -> bool:
    return _int(path, line, key, value, low=0, high=1) == 1


def _ip(path: str, line: int, key: str, value: str) -> str:
    if not value:
        return ""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ImexConfigError(
            f"{path}:{line}: {key}={value!r} is not a valid IPv4 or IPv6 address"
        ) from None


def _path(path: str, line: int, key: str, value: str) -> str:
    if len(value.encode()) > _MAX_PATH:
        raise ImexConfigError(f"{path}:{line}: {key} is longer than {_MAX_PATH} bytes")
    return value


def parse_config(text: str, path: str = "<config>") -> ImexConfig:
    """The config of *text*. Raises :class:`ImexConfigError` naming the line and key."""
    values: dict[str, object] = {}
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ImexConfigError(f"{path}:{number}: {raw.strip()!r} is not a KEY=VALUE line")
        if key not in _USED and key not in _IGNORED:
            raise ImexConfigError(f"{path}:{number}: unknown key {key!r}")
        if key in seen:
            raise ImexConfigError(
                f"{path}:{number}: {key} is set twice (first on line {seen[key]})"
            )
        seen[key] = number
        if key in _IGNORED:
            continue
        if key == "LOG_LEVEL":
            values["log_level"] = _int(path, number, key, value, low=0, high=4)
        elif key == "LOG_FILE_NAME":
            values["log_file"] = _path(path, number, key, value)
        elif key == "DAEMONIZE":
            values["daemonize"] = _bool(path, number, key, value)
        elif key == "BIND_INTERFACE_IP":
            values["bind_ip"] = _ip(path, number, key, value)
        elif key == "SERVER_PORT":
            values["server_port"] = _int(path, number, key, value, low=1, high=65535)
        elif key == "IMEX_NODE_CONFIG_FILE":
            values["node_config_file"] = _path(path, number, key, value) or DEFAULT_NODE_CONFIG_FILE
        elif key == "IMEX_WAIT_FOR_QUORUM":
            if value not in QUORUM_MODES:
                raise ImexConfigError(
                    f"{path}:{number}: IMEX_WAIT_FOR_QUORUM={value!r} is not one of "
                    + ", ".join(QUORUM_MODES)
                )
            values["wait_for_quorum"] = value
        elif key == "IMEX_CMD_ENABLED":
            values["cmd_enabled"] = _bool(path, number, key, value)
        elif key == "IMEX_CMD_BIND_INTERFACE_IP":
            values["cmd_bind_ip"] = _ip(path, number, key, value)
        elif key == "IMEX_CMD_PORT":
            values["cmd_port"] = (
                _int(path, number, key, value, low=1, high=65535) if value else None
            )
        elif key == "IMEX_CMD_UNIX_DOMAIN_PATH":
            values["cmd_unix_path"] = _path(path, number, key, value)
        elif key == "IMEX_NODE_DISCONNECTED_GRACE_TIME":
            values["disconnected_grace"] = _int(path, number, key, value, low=-1, high=2**31 - 1)
    config = ImexConfig(path=path, **values)  # type: ignore[arg-type]
    if config.cmd_enabled and config.cmd_port is None and not config.cmd_unix_path:
        raise ImexConfigError(
            f"{path}: IMEX_CMD_ENABLED=1 needs IMEX_CMD_PORT or IMEX_CMD_UNIX_DOMAIN_PATH"
        )
    return config


def load_config(path: str | Path) -> ImexConfig:
    """The config file at *path*. Raises :class:`ImexConfigError` naming it."""
    try:
        text = read_small(path)
    except (OSError, ValueError) as exc:
        raise ImexConfigError(f"cannot read the IMEX config file {path}: {exc}") from None
    return parse_config(text, str(path))
