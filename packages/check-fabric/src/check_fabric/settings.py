"""check-fabric's configuration: one frozen object from flags and their env twins.

Every flag has an env twin so the tool can be steered inside a container
without changing its command; the flag wins when both are given. Values are
validated here, once, and a bad one stops the run naming the key and value
before NVML is touched.
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from nvml_mock_protocol.logs import ENV_LOG_FORMAT, ENV_LOG_LEVEL, LOG_FORMATS, LOG_LEVELS
from nvml_mock_protocol.names import ENV_NODE_NAME

from check_fabric._version import __version__
from check_fabric.errors import ConfigError, UsageError
from check_fabric.model import UINT32_MAX, normalize_cluster_uuid

ENV_JSON = "CHECK_FABRIC_JSON"
ENV_EXPECT_CLIQUE = "CHECK_FABRIC_EXPECT_CLIQUE"
ENV_EXPECT_CLUSTER_UUID = "CHECK_FABRIC_EXPECT_CLUSTER_UUID"
ENV_REQUIRE_COMPLETED = "CHECK_FABRIC_REQUIRE_COMPLETED"
ENV_TOPOLOGY_URL = "CHECK_FABRIC_TOPOLOGY_URL"
ENV_TOPOLOGY_TIMEOUT = "CHECK_FABRIC_TOPOLOGY_TIMEOUT"

DEFAULT_TOPOLOGY_TIMEOUT = 5.0

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything one run of check-fabric needs to know."""

    json: bool = False
    """Print one JSON document instead of the reference text (``--json``)."""
    expect_clique: int | None = None
    """Every fabric GPU must report this cliqueId (uint32)."""
    expect_cluster_uuid: str | None = None
    """Every fabric GPU must report this clusterUuid (normalized lowercase 8-4-4-4-12)."""
    require_completed: bool = False
    """Every fabric GPU must have completed registration (state 3, probe status success)."""
    topology_url: str | None = None
    """Base URL of the topology service; when set, NVML must match its answer for the node."""
    node_name: str | None = None
    """The node to ask the topology service about (the downward API's ``NODE_NAME``)."""
    topology_timeout: float = DEFAULT_TOPOLOGY_TIMEOUT
    """Seconds to wait for the topology service (connect and read)."""
    log_format: str = "text"
    """``text`` or ``json``; logs go to stderr."""
    log_level: str = "warning"
    """``debug``, ``info``, ``warning`` or ``error``; the default keeps a normal run silent."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}\n{self.format_usage().rstrip()}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="check-fabric",
        description=(
            "Read every GPU's NVLink fabric identity (clusterUuid, cliqueId, state) through NVML "
            "and check that the GPUs agree, optionally with expected values and with the "
            "topology service."
        ),
        epilog=(
            "exit codes: 0 all good; 1 error (bad flag or env value, NVML error, topology "
            "service unusable); 2 fabric not supported on at least one GPU; 3 mismatch"
        ),
    )
    parser.add_argument(
        "--json",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"print one JSON document instead of the text report (env {ENV_JSON})",
    )
    parser.add_argument(
        "--expect-clique",
        metavar="N",
        help=f"every fabric GPU must report cliqueId N (env {ENV_EXPECT_CLIQUE})",
    )
    parser.add_argument(
        "--expect-cluster-uuid",
        metavar="UUID",
        help=f"every fabric GPU must report this clusterUuid (env {ENV_EXPECT_CLUSTER_UUID})",
    )
    parser.add_argument(
        "--require-completed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="every fabric GPU must have completed fabric registration "
        f"(env {ENV_REQUIRE_COMPLETED})",
    )
    parser.add_argument(
        "--topology-url",
        metavar="URL",
        help="compare with the topology service's identity for the node "
        f"(env {ENV_TOPOLOGY_URL}; unset = no comparison)",
    )
    parser.add_argument(
        "--node-name",
        metavar="NAME",
        help=f"the node to ask the topology service about (env {ENV_NODE_NAME})",
    )
    parser.add_argument(
        "--topology-timeout",
        metavar="SECONDS",
        help="how long to wait for the topology service "
        f"(env {ENV_TOPOLOGY_TIMEOUT}, default {DEFAULT_TOPOLOGY_TIMEOUT:g})",
    )
    parser.add_argument(
        "--log-format",
        metavar="{" + ",".join(LOG_FORMATS) + "}",
        help=f"log format (env {ENV_LOG_FORMAT})",
    )
    parser.add_argument(
        "--log-level",
        metavar="{" + ",".join(LOG_LEVELS) + "}",
        help=f"log level (env {ENV_LOG_LEVEL}, default warning)",
    )
    parser.add_argument("--version", action="version", version=f"check-fabric {__version__}")
    return parser


def _pick(
    flag_value: object, flag: str, environ: Mapping[str, str], env: str
) -> tuple[str, object]:
    """The value and the key it came from: the flag if given, else the env twin."""
    if flag_value is not None:
        return flag, flag_value
    return env, environ.get(env)


def _bool(key: str, value: object) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(key, value, "expected one of 1/true/yes/on or 0/false/no/off")


def _text(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _choice(key: str, value: object, choices: Sequence[str], default: str) -> str:
    text = _text(value)
    if text is None:
        return default
    if text.lower() not in choices:
        raise ConfigError(key, value, f"expected one of {', '.join(choices)}")
    return text.lower()


def _clique(key: str, value: object) -> int | None:
    text = _text(value)
    if text is None:
        return None
    try:
        number = int(text, 10)
    except ValueError:
        raise ConfigError(key, value, "expected a decimal cliqueId") from None
    if not 0 <= number <= UINT32_MAX:
        raise ConfigError(key, value, f"a cliqueId is a uint32 (0..{UINT32_MAX})")
    return number


def _url(key: str, value: object) -> str | None:
    text = _text(value)
    if text is None:
        return None
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(key, value, "expected an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise ConfigError(key, value, "expected a base URL without query or fragment")
    return text.rstrip("/")


def _seconds(key: str, value: object) -> float:
    text = _text(value)
    if text is None:
        return DEFAULT_TOPOLOGY_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        raise ConfigError(key, value, "expected a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise ConfigError(key, value, "expected more than 0 and at most 3600 seconds")
    return seconds


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Parse ``argv`` over ``environ``; raises ``UsageError`` or ``ConfigError``."""
    args = build_parser().parse_args(list(argv))
    json_out = _bool(*_pick(args.json, "--json", environ, ENV_JSON))
    completed = _bool(
        *_pick(args.require_completed, "--require-completed", environ, ENV_REQUIRE_COMPLETED)
    )
    clique = _clique(*_pick(args.expect_clique, "--expect-clique", environ, ENV_EXPECT_CLIQUE))
    key, raw_uuid = _pick(
        args.expect_cluster_uuid, "--expect-cluster-uuid", environ, ENV_EXPECT_CLUSTER_UUID
    )
    cluster_uuid = None
    if (text := _text(raw_uuid)) is not None:
        try:
            cluster_uuid = normalize_cluster_uuid(text)
        except ValueError:
            raise ConfigError(key, raw_uuid, "expected a UUID (8-4-4-4-12 hex digits)") from None
    url = _url(*_pick(args.topology_url, "--topology-url", environ, ENV_TOPOLOGY_URL))
    node_key, node_value = _pick(args.node_name, "--node-name", environ, ENV_NODE_NAME)
    node = _text(node_value)
    if url is not None and node is None:
        raise ConfigError(
            node_key, node_value or "", f"a node name is required with a topology URL ({url})"
        )
    timeout = _seconds(
        *_pick(args.topology_timeout, "--topology-timeout", environ, ENV_TOPOLOGY_TIMEOUT)
    )
    log_format = _choice(
        *_pick(args.log_format, "--log-format", environ, ENV_LOG_FORMAT), LOG_FORMATS, "text"
    )
    log_level = _choice(
        *_pick(args.log_level, "--log-level", environ, ENV_LOG_LEVEL), LOG_LEVELS, "warning"
    )
    return Settings(
        json=json_out,
        expect_clique=clique,
        expect_cluster_uuid=cluster_uuid,
        require_completed=completed,
        topology_url=url,
        node_name=node,
        topology_timeout=timeout,
        log_format=log_format,
        log_level=log_level,
    )
