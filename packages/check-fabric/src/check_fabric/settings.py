"""check-fabric's configuration: one frozen object from flags and their env twins.

Every flag has an env twin so the tool can be steered inside a container
without changing its command; the flag wins when both are given, and an empty
env value counts as unset. The flags are declared once in :data:`OPTIONS`, in
the shared pattern of ``nvml_mock_protocol.settings``, which also renders the
README's table. Values are validated here, once, and a bad one stops the run
naming the key and value before NVML is touched.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NoReturn

from nvml_mock_protocol import settings as s
from nvml_mock_protocol.logs import LOG_OPTIONS
from nvml_mock_protocol.names import ENV_NODE_NAME

from check_fabric._version import __version__
from check_fabric.errors import ConfigError, UsageError
from check_fabric.imex import DEFAULT_IMEX_DIR, PROC_DEVICES, SUBSTITUTE_PROC_DEVICES
from check_fabric.model import UINT32_MAX, normalize_cluster_uuid

ENV_JSON = "CHECK_FABRIC_JSON"
ENV_EXPECT_CLIQUE = "CHECK_FABRIC_EXPECT_CLIQUE"
ENV_EXPECT_CLUSTER_UUID = "CHECK_FABRIC_EXPECT_CLUSTER_UUID"
ENV_REQUIRE_COMPLETED = "CHECK_FABRIC_REQUIRE_COMPLETED"
ENV_TOPOLOGY_URL = "CHECK_FABRIC_TOPOLOGY_URL"
ENV_TOPOLOGY_TIMEOUT = "CHECK_FABRIC_TOPOLOGY_TIMEOUT"
ENV_IMEX = "CHECK_FABRIC_IMEX"
ENV_IMEX_ONLY = "CHECK_FABRIC_IMEX_ONLY"
ENV_IMEX_DIR = "CHECK_FABRIC_IMEX_DIR"
ENV_PROC_DEVICES = "CHECK_FABRIC_PROC_DEVICES"

DEFAULT_TOPOLOGY_TIMEOUT = 5.0


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
    imex: bool = False
    """Also check the IMEX channel device nodes (``--imex``); the exit reflects both checks."""
    imex_only: bool = False
    """Check only the IMEX channels; NVML is not loaded (``--imex-only``, implies ``imex``)."""
    imex_dir: str = DEFAULT_IMEX_DIR
    """The directory holding ``channel<N>``."""
    proc_devices: str | None = None
    """The file that names the channels' major; None = the substitute, then ``/proc/devices``."""
    log_format: str = "text"
    """``text`` or ``json``; logs go to stderr."""
    log_level: str = "warning"
    """``debug``, ``info``, ``warning`` or ``error``; the default keeps a normal run silent."""


def _clique(value: str) -> int:
    try:
        number = int(value.strip(), 10)
    except ValueError:
        raise ValueError("expected a decimal cliqueId") from None
    if not 0 <= number <= UINT32_MAX:
        raise ValueError(f"a cliqueId is a uint32 (0..{UINT32_MAX})")
    return number


def _cluster_uuid(value: str) -> str:
    try:
        return normalize_cluster_uuid(value.strip())
    except ValueError:
        raise ValueError("expected a UUID (8-4-4-4-12 hex digits)") from None


OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option(
        "json",
        "--json",
        ENV_JSON,
        s.boolean,
        "print one JSON document instead of the text report",
        action="toggle",
        doc="print one JSON document instead of the text report "
        "(env: `1/true/yes/on`, `0/false/no/off`)",
    ),
    s.Option(
        "expect_clique",
        "--expect-clique",
        ENV_EXPECT_CLIQUE,
        s.optional(_clique),
        "every fabric GPU must report cliqueId N (uint32)",
        metavar="N",
    ),
    s.Option(
        "expect_cluster_uuid",
        "--expect-cluster-uuid",
        ENV_EXPECT_CLUSTER_UUID,
        s.optional(_cluster_uuid),
        "every fabric GPU must report this clusterUuid",
        metavar="UUID",
    ),
    s.Option(
        "require_completed",
        "--require-completed",
        ENV_REQUIRE_COMPLETED,
        s.boolean,
        "every fabric GPU must have completed fabric registration",
        action="toggle",
    ),
    s.Option(
        "topology_url",
        "--topology-url",
        ENV_TOPOLOGY_URL,
        s.optional(s.url),
        "base URL of the topology service to compare with; unset = no comparison",
        metavar="URL",
    ),
    s.Option(
        "node_name",
        "--node-name",
        ENV_NODE_NAME,
        s.optional(s.name),
        "the node to ask the topology service about; required with a topology URL",
        metavar="NAME",
        doc="the node to ask about; required with a topology URL "
        "(the NRI plugin injects `NODE_NAME`)",
    ),
    s.Option(
        "topology_timeout",
        "--topology-timeout",
        ENV_TOPOLOGY_TIMEOUT,
        s.seconds(3600),
        "seconds to wait for the topology service (0 < SECONDS ≤ 3600)",
        metavar="SECONDS",
    ),
    s.Option(
        "imex",
        "--imex",
        ENV_IMEX,
        s.boolean,
        "also check the IMEX channel device nodes; the exit status reflects both checks",
        action="toggle",
        doc="also check the IMEX channel device nodes (see below); "
        "the exit status reflects both checks",
    ),
    s.Option(
        "imex_only",
        "--imex-only",
        ENV_IMEX_ONLY,
        s.boolean,
        "check only the IMEX channels, without NVML or the topology service",
        action="toggle",
    ),
    s.Option(
        "imex_dir",
        "--imex-dir",
        ENV_IMEX_DIR,
        s.abs_path,
        "the directory of the IMEX channel device nodes (channel<N>)",
        metavar="PATH",
        doc="the directory of the IMEX channel device nodes (`channel<N>`)",
    ),
    s.Option(
        "proc_devices",
        "--proc-devices",
        ENV_PROC_DEVICES,
        s.optional(s.abs_path),
        "the /proc/devices-format file naming the channels' major",
        metavar="PATH",
        doc="the `/proc/devices`-format file that names the `nvidia-caps-imex-channels` major",
        default_doc=f"`{SUBSTITUTE_PROC_DEVICES}`, then `{PROC_DEVICES}`",
    ),
    *LOG_OPTIONS,
)
"""Every flag of check-fabric, its env twin and its parser."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}\n{self.format_usage().rstrip()}")


def build_parser() -> argparse.ArgumentParser:
    """The command line: one flag per option (help lines name the env twins), and --version."""
    parser = _Parser(
        prog="check-fabric",
        description=(
            "Read every GPU's NVLink fabric identity (clusterUuid, cliqueId, state) through NVML "
            "and check that the GPUs agree, optionally with expected values and with the "
            "topology service."
        ),
        epilog=(
            "exit codes: 0 all good; 1 error (bad flag or env value, NVML error, topology "
            "service unusable, an IMEX channel present but unusable); 2 fabric not supported "
            "on at least one GPU, or no IMEX channel; 3 mismatch"
        ),
    )
    s.add_options(parser, OPTIONS, Settings())
    parser.add_argument("--version", action="version", version=f"check-fabric {__version__}")
    return parser


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Parse ``argv`` over ``environ``; raises ``UsageError`` or ``ConfigError``."""
    args = build_parser().parse_args(list(argv))
    try:
        given = s.gather(OPTIONS, args, environ)
    except s.SettingsError as exc:
        raise ConfigError(exc.key, exc.value, exc.reason) from None
    settings = Settings(**{field: found.value for field, found in given.items()})
    if settings.imex_only:
        # Nothing of the fabric check runs, so an expectation of it would go unchecked.
        for name in ("expect_clique", "expect_cluster_uuid", "require_completed", "topology_url"):
            if name in given and getattr(settings, name) not in (None, False):
                raise ConfigError(
                    given[name].key,
                    given[name].text,
                    f"checks the GPUs' fabric, which {given['imex_only'].key} does not read",
                )
        settings = dataclasses.replace(settings, imex=True)
    if settings.topology_url is not None and settings.node_name is None:
        node = given.get("node_name")
        raise ConfigError(
            node.key if node else ENV_NODE_NAME,
            node.text if node else "",
            f"a node name is required with a topology URL ({settings.topology_url})",
        )
    return settings
