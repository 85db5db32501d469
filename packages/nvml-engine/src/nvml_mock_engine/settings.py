"""Each ``nvml-mock-engine`` subcommand's settings: one frozen object, from flags and env twins.

Each subcommand's flags are declared once (the tables below, in the shared pattern of
``nvml_mock_protocol.settings``): the parser, the precedence (the flag, then the env
twin, then the default; an empty env value counts as unset) and the README's table all
come from them. The node options go on to :func:`~nvml_mock_engine.config.resolve_config`,
which merges them over the config file and the profile and checks what only the profile
can tell (the GPU count's range, the driver version); a value that does not even parse
(``--count eight``) is refused here, named by its config key, its value and where it came
from, so it reads like every other config error of the package.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from nvml_mock_live import locate
from nvml_mock_protocol import names
from nvml_mock_protocol import settings as s
from nvml_mock_protocol.logs import (
    DEFAULT_LOG_FORMAT,
    ENV_LOG_FORMAT,
    ENV_LOG_LEVEL,
    LOG_FORMATS,
    LOG_LEVELS,
)

from nvml_mock_engine.errors import ConfigError
from nvml_mock_engine.kernel_log import parse_sink
from nvml_mock_engine.schema import MAX_GPUS

__all__ = [
    "AGENT_OPTIONS",
    "CHAR_MAJOR_MAX",
    "CTL_OPTIONS",
    "ENV_CONFIG_FILE",
    "ENV_DRIVER_VERSION",
    "ENV_GPU_COUNT",
    "ENV_HOST_PATH",
    "ENV_IMEX_CHANNELS",
    "ENV_IMEX_MAJOR",
    "ENV_LIVE_FILE",
    "ENV_MIG",
    "ENV_MOUNT_PATH",
    "ENV_PROFILE",
    "ENV_STATE_FILE",
    "IMEX_CHANNELS_DEFAULT",
    "IMEX_CHANNELS_MAX",
    "LOCATION_FIELDS",
    "LOG_OPTIONS",
    "NODE_OPTIONS",
    "PROFILES_OPTIONS",
    "RENDER_OPTIONS",
    "STAGE_OPTIONS",
    "AgentSettings",
    "CommandSettings",
    "CtlSettings",
    "NodeSettings",
    "ProfilesSettings",
    "RenderSettings",
    "StageSettings",
    "config_error",
    "located_by_flags",
    "options_table",
]

ENV_PROFILE: Final = "NVML_MOCK_PROFILE"
ENV_GPU_COUNT: Final = "NVML_MOCK_GPU_COUNT"
ENV_CONFIG_FILE: Final = "NVML_MOCK_ENGINE_CONFIG"
ENV_DRIVER_VERSION: Final = "NVML_MOCK_DRIVER_VERSION"
ENV_MOUNT_PATH: Final = names.ENV_OVERLAY_MOUNT_PATH
ENV_HOST_PATH: Final = names.ENV_OVERLAY_HOST_PATH
ENV_LIVE_FILE: Final = names.ENV_MOCK_NVML_LIVE
"""The variable that points the library at a live file points ``nvml-mock-ctl`` at it too."""
ENV_STATE_FILE: Final = names.ENV_MOCK_NVML_CONFIG
ENV_KERNEL_LOG: Final = "NVML_MOCK_KERNEL_LOG"
"""Where Xids are also written as the NVIDIA driver writes them (``kernel_log``); off."""
ENV_IMEX_CHANNELS: Final = "NVML_MOCK_IMEX_CHANNELS"
ENV_IMEX_MAJOR: Final = "NVML_MOCK_IMEX_MAJOR"
ENV_MIG: Final = "NVML_MOCK_MIG"
IMEX_CHANNELS_DEFAULT: Final = 8
"""IMEX channel nodes staged unless told otherwise (as many as the reference system stages)."""
IMEX_CHANNELS_MAX: Final = 2048
"""The most IMEX channels NVIDIA's driver offers (``NVreg_ImexChannelCount``'s default)."""
CHAR_MAJOR_MAX: Final = 4095
"""The largest character major Linux has (12 bits)."""


@dataclass(frozen=True, kw_only=True)
class CommandSettings:
    """What every subcommand is configured with: its logging (``lib-path`` has nothing else)."""

    log_format: str = DEFAULT_LOG_FORMAT
    """``text`` or ``json`` (one object per line), on stderr."""
    log_level: str = "info"
    """Lowest level logged: ``debug``, ``info``, ``warning`` or ``error``."""


@dataclass(frozen=True, kw_only=True)
class NodeSettings(CommandSettings):
    """What to render for the node (``render`` and ``stage``); None leaves it to the file."""

    profile: str | None = None
    """Profile name or profile file; else the config file's, else ``a100``."""
    count: int | None = None
    """GPUs on the node (1..64, checked with the config file); else the profile's node size."""
    node: str | None = None
    """Node name seeding UUIDs and serials; else the config file's, else the host name."""
    config: Path | None = None
    """YAML config file: profile, count, overrides."""
    driver_version: str | None = None
    """Driver version reported; else the config file's, else the profile's."""


@dataclass(frozen=True, kw_only=True)
class RenderSettings(NodeSettings):
    """``render``: where the state goes."""

    output: str = "-"
    """State file to write (atomically); ``-`` is stdout."""


@dataclass(frozen=True, kw_only=True)
class StageSettings(NodeSettings):
    """``stage``: the overlay root and how to lay it out."""

    dir: Path
    """Overlay root to stage (``DIR``)."""
    no_devices: bool = False
    """Create no mock device nodes under ``dev/``."""
    no_driver_root: bool = False
    """Lay out no driver root (``usr/lib64``, ``usr/bin``, ``proc/``, ``sys/``)."""
    mount_path: str = names.OVERLAY_MOUNT_PATH
    """Where containers see the overlay; the launchers fall back to it."""
    host_path: str | None = None
    """Where the host sees ``DIR``, for the CDI spec's device ``hostPath``; None means ``DIR``."""
    imex_channels: int = IMEX_CHANNELS_DEFAULT
    """IMEX channel nodes under ``dev/nvidia-caps-imex-channels/``; 0 stages none."""
    imex_major: int | None = None
    """The channels' character major; None picks the first free one in 240..254."""
    mig: str | None = None
    """MIG layout made at staging (:mod:`nvml_mock_engine.mig_layout`); None: the config
    file's ``mig``, else the node's layout is left as it is."""


@dataclass(frozen=True, kw_only=True)
class ProfilesSettings(CommandSettings):
    """``profiles``: the listing's form."""

    json: bool = False
    """One JSON object per profile instead of a text line."""


def _count(value: str) -> int:
    # The range is checked with the config file's count, in one place (resolve_config).
    try:
        return int(value.strip(), 10)
    except ValueError:
        raise ValueError(f"must be an integer in 1..{MAX_GPUS}") from None


def _path(value: str) -> Path:
    return Path(s.name(value))


def _imex_major(value: str) -> int | None:
    # "auto" (or blank, as an env twin a chart renders empty) leaves the choice to stage time.
    if value.strip().lower() in ("", "auto"):
        return None
    return s.int_range(1, CHAR_MAJOR_MAX)(value)


def _mig(value: str) -> str | None:
    # checked against the board once the profile is known (mig_layout.parse_spec)
    return value.strip() or None


LOG_OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option(
        "log_format",
        "--log-format",
        ENV_LOG_FORMAT,
        s.choice(*LOG_FORMATS),
        "log line format on stderr: " + " or ".join(LOG_FORMATS),
        doc="`text` or `json` (one object per line) on stderr",
    ),
    s.Option(
        "log_level",
        "--log-level",
        ENV_LOG_LEVEL,
        s.choice(*LOG_LEVELS),
        "lowest level logged: " + ", ".join(LOG_LEVELS),
        doc=", ".join(f"`{level}`" for level in LOG_LEVELS),
    ),
)
"""On the command and on every subcommand, before or after its name."""

NODE_OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option(
        "profile",
        "--profile",
        ENV_PROFILE,
        s.optional(s.name),
        "profile name or profile file",
        default_doc="config file, else `a100`",
    ),
    s.Option(
        "count",
        "--count",
        ENV_GPU_COUNT,
        s.optional(_count),
        f"GPUs on the node, 1..{MAX_GPUS}",
        default_doc="the profile's GPUs per node",
    ),
    s.Option(
        "node",
        "--node",
        names.ENV_NODE_NAME,
        s.optional(s.name),
        "node name; seeds UUIDs and serials",
        default_doc="host name",
    ),
    s.Option(
        "config",
        "--config",
        ENV_CONFIG_FILE,
        s.optional(_path),
        "YAML config file: profile, count, overrides",
        doc="YAML config file (above)",
    ),
    s.Option(
        "driver_version",
        "--driver-version",
        ENV_DRIVER_VERSION,
        s.optional(s.name),
        "driver version reported",
        default_doc="the profile's",
    ),
)
"""``render`` and ``stage``: what to render."""

RENDER_OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option(
        "output",
        "--output",
        "",
        s.name,
        "state file to write, '-' for stdout",
        aliases=("-o",),
        default_doc="`-` (stdout)",
        doc="state file, written atomically",
    ),
)

STAGE_OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option(
        "no_devices",
        "--no-devices",
        "",
        s.boolean,
        "do not create device nodes",
        action="switch",
    ),
    s.Option(
        "no_driver_root",
        "--no-driver-root",
        "",
        s.boolean,
        "do not lay the overlay out as a driver root (usr/, proc/, sys/)",
        action="switch",
    ),
    s.Option(
        "mount_path",
        "--mount-path",
        ENV_MOUNT_PATH,
        s.abs_path,
        "where containers see the overlay (launchers' fallback)",
    ),
    s.Option(
        "host_path",
        "--host-path",
        ENV_HOST_PATH,
        s.optional(s.abs_path),
        "where the host sees DIR, for the CDI spec's device hostPath",
        default_doc="`DIR`",
        doc="where the host sees `DIR`, for the CDI spec's device `hostPath`",
    ),
    s.Option(
        "imex_channels",
        "--imex-channels",
        ENV_IMEX_CHANNELS,
        s.int_range(0, IMEX_CHANNELS_MAX),
        f"IMEX channel nodes to create, 0..{IMEX_CHANNELS_MAX} (0: none)",
        metavar="N",
        doc=f"IMEX channel nodes `dev/{names.IMEX_CHANNELS_DIR}/channel0..N-1` and "
        f"`{names.OVERLAY_IMEX_DIR}/{names.IMEX_PROC_DEVICES_FILE}`, 0..{IMEX_CHANNELS_MAX}; "
        "0 stages neither",
    ),
    s.Option(
        "imex_major",
        "--imex-major",
        ENV_IMEX_MAJOR,
        _imex_major,
        f"the IMEX channels' character major, 1..{CHAR_MAJOR_MAX}, or auto",
        metavar="M",
        default_doc="`auto`: the first major in 240..254 the node's `/proc/devices` lacks",
        doc=f"the IMEX channels' character major, 1..{CHAR_MAJOR_MAX}; refused if the "
        "node's `/proc/devices` lists it",
    ),
    s.Option(
        "mig",
        "--mig",
        ENV_MIG,
        _mig,
        "MIG layout to make: all-disabled, all-enabled, all-balanced, all-<profile> or a "
        "mig-parted list (JSON/YAML)",
        metavar="LAYOUT",
        default_doc="the config file's `mig`, else the node's layout is kept",
        doc="MIG layout made at staging, with mig-parted's names (`all-1g.10gb`) or a list of "
        "`{devices, mig-enabled, mig-devices}`; replaces the GPUs' MIG layout",
    ),
)

PROFILES_OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option(
        "json",
        "--json",
        "",
        s.boolean,
        "one JSON object per profile instead of a text line",
        action="switch",
    ),
)


def config_error(error: s.SettingsError) -> ConfigError:
    """The package's config error for a refused flag or env value: key, value and source."""
    return ConfigError(error.field, f"{error.reason}, got {error.value!r} ({error.key})")


def options_table() -> str:
    """The README's table of every subcommand's flags, in the order ``--help`` lists them."""
    stage = StageSettings(dir=Path("DIR"))
    rows = [
        *s.table_rows(NODE_OPTIONS, stage),
        *s.table_rows(RENDER_OPTIONS, RenderSettings(), note="render"),
        *s.table_rows(STAGE_OPTIONS, stage, note="stage"),
        *s.table_rows(PROFILES_OPTIONS, ProfilesSettings(), note="profiles"),
        *s.table_rows(LOG_OPTIONS, stage),
    ]
    return "\n".join([s.TABLE_HEADER, *rows])


@dataclass(frozen=True, kw_only=True)
class CtlSettings(CommandSettings):
    """``nvml-mock-ctl``: where the node's live layer is (every verb)."""

    overlay_path: Path = Path(names.OVERLAY_HOST_PATH)
    """The node's overlay; the live layer is ``config/live.nvmlmock`` in it."""
    live_file: Path | None = None
    """The live layer file itself, instead of the overlay's."""
    state_file: Path | None = None
    """The board state the live layer follows (default: ``state.nvmlmock`` beside it)."""
    kernel_log: str = "off"
    """Where an Xid sent to a GPU is also written as the NVIDIA driver writes it
    (:mod:`nvml_mock_engine.kernel_log`): ``off``, ``file:PATH``, ``journald[:SOCKET]``,
    ``kmsg[:PATH]``."""

    @property
    def live_path(self) -> Path:
        """The live file the command works on: the library's rule (``--live-file``, else the
        one beside ``--state-file``), else the overlay's."""
        if self.live_file is not None:
            return self.live_file
        if self.state_file is not None:
            return locate.live_beside(self.state_file)
        return self.overlay_path / names.OVERLAY_CONFIG_DIR / names.LIVE_FILE_NAME

    @property
    def state_path(self) -> Path:
        """The board state the command checks values against."""
        return self.state_file or self.live_path.parent / names.STATE_FILE_NAME


LOCATION_FIELDS: Final = ("overlay_path", "live_file", "state_file")
"""The options that say where a command's live layer is."""

C = TypeVar("C", bound="CtlSettings")


def located_by_flags(settings: C, args: argparse.Namespace) -> C:
    """*settings* with the rule "the flag wins" kept across the three location options:
    when any of them is given as a flag, a live or state file that only the environment
    names is dropped, so ``--overlay-path OV`` works on OV even in a shell (or a pod) whose
    ``MOCK_NVML_CONFIG`` names another node's state (it silently wrote the other one)."""
    flagged = {f for f in LOCATION_FIELDS if getattr(args, f, None) is not None}
    if not flagged:
        return settings
    live_file = settings.live_file if "live_file" in flagged else None
    state_file = settings.state_file if "state_file" in flagged else None
    return dataclasses.replace(settings, live_file=live_file, state_file=state_file)


def _kernel_log(value: str) -> str:
    kind, target = parse_sink(value)
    return f"{kind}:{target}" if target else kind


CTL_OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option(
        "overlay_path",
        "--overlay-path",
        ENV_HOST_PATH,
        lambda value: Path(s.abs_path(value)),
        f"the node's overlay; the live layer is config/{names.LIVE_FILE_NAME} in it",
    ),
    s.Option(
        "live_file",
        "--live-file",
        ENV_LIVE_FILE,
        s.optional(_path),
        "the live layer file itself, instead of the overlay's",
        default_doc="the overlay's",
    ),
    s.Option(
        "state_file",
        "--state-file",
        ENV_STATE_FILE,
        s.optional(_path),
        "the board state the live layer follows",
        default_doc=f"`{names.STATE_FILE_NAME}` beside the live file",
    ),
    s.Option(
        "kernel_log",
        "--kernel-log",
        ENV_KERNEL_LOG,
        _kernel_log,
        "also write each Xid as the NVIDIA driver does: off, file:PATH, journald, kmsg",
        metavar="SINK",
        doc="also write each Xid sent as the NVIDIA driver writes it (`NVRM: Xid (PCI:…): 79, "
        "…`): `off`, `file:PATH` (syslog-style lines), `journald[:SOCKET]`, `kmsg[:PATH]` "
        "(`/dev/kmsg`); refused on a node with a real NVIDIA driver",
    ),
)
"""On the command and on every verb, before or after its name."""


# -- agent ----------------------------------------------------------------------------

ENV_TOPOLOGY_URL: Final = "NVML_MOCK_TOPOLOGY_URL"
"""The topology service (the NRI plugin reads the same variable)."""
ENV_AGENT_NODE_LABELS: Final = "NVML_MOCK_AGENT_NODE_LABELS"
ENV_AGENT_TOKEN_FILE: Final = "NVML_MOCK_AGENT_TOKEN_FILE"
ENV_AGENT_PROBE_ADDR: Final = "NVML_MOCK_AGENT_PROBE_ADDR"
ENV_AGENT_APPLIED_FILE: Final = "NVML_MOCK_AGENT_APPLIED_FILE"
ENV_AGENT_MAX_WAIT: Final = "NVML_MOCK_AGENT_MAX_WAIT"
ENV_AGENT_REPORT_SPREAD: Final = "NVML_MOCK_AGENT_REPORT_SPREAD"
ENV_AGENT_HEARTBEAT: Final = "NVML_MOCK_AGENT_HEARTBEAT"


def _labels(value: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in s.csv(value):
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{item!r} is not KEY=VALUE")
        labels[key.strip()] = text.strip()
    return labels


def _probe_addr(value: str) -> tuple[str, int] | None:
    return None if not value.strip() else s.host_port(value)


def _seconds_or_zero(maximum: float) -> Callable[[str], float]:
    """A number of seconds from 0 (off) to ``maximum``."""
    above_zero = s.seconds(maximum)

    def parse(value: str) -> float:
        try:
            if float(value) == 0:
                return 0.0
        except ValueError:
            pass
        return above_zero(value)

    return parse


@dataclass(frozen=True, kw_only=True)
class AgentSettings(CtlSettings):
    """``agent``: the node, the service it watches and where it writes (the live layer)."""

    topology_url: str = ""
    """The topology service's base URL; empty: no scenarios, the agent only keeps the
    surfaces true."""
    node: str = ""
    """This node's name (the downward API's ``spec.nodeName``; required with a topology
    service)."""
    node_labels: dict[str, str] | None = None
    """This node's labels, for scenario selectors with ``labels``."""
    token_file: Path | None = None
    """The write API's bearer token, sent with every report."""
    probe_addr: tuple[str, int] | None = ("0.0.0.0", names.AGENT_PROBE_PORT)
    """``/healthz``, ``/readyz`` and ``/metrics``; None serves none."""
    applied_file: Path | None = None
    """What the agent applied (default: ``scenarios.applied.json`` beside the live layer)."""
    max_wait: float = 55.0
    """Longest watch the agent asks the service for, in seconds."""
    report_spread: float = 5.0
    """A change is reported after a random delay under this many seconds (0: at once), so
    10,000 agents that see the same scenario land do not all report in the same moment;
    changes within the delay go out as one report."""
    heartbeat: float = 300.0
    """The last report is sent again after this many seconds without a change (0: never),
    so a service that restarted, and lost the status, learns it again."""

    @property
    def applied_path(self) -> Path:
        """Beside the live file itself, links followed: in a staged overlay that is the state
        root (``.nvml-mock/``), which outlives generations, not the per-generation
        ``config/`` a re-stage replaces (the record was lost on every re-stage)."""
        if self.applied_file is not None:
            return self.applied_file
        return Path(os.path.realpath(self.live_path)).parent / names.APPLIED_FILE_NAME

    @property
    def earlier_applied_path(self) -> Path | None:
        """Where an agent of an earlier release kept the record (read once if the new place
        has none): beside ``config/live.nvmlmock`` without following links."""
        if self.applied_file is not None:
            return None
        earlier = self.live_path.parent / names.APPLIED_FILE_NAME
        return None if earlier == self.applied_path else earlier


AGENT_OPTIONS: Final[tuple[s.Option, ...]] = (
    s.Option(
        "topology_url",
        "--topology-url",
        ENV_TOPOLOGY_URL,
        s.url,
        "the topology service's base URL; without one no scenarios, only the surfaces kept true",
        metavar="URL",
        default_doc="none",
    ),
    s.Option(
        "node",
        "--node",
        names.ENV_NODE_NAME,
        s.name,
        "this node's name",
        default_doc="required with --topology-url",
    ),
    s.Option(
        "node_labels",
        "--node-labels",
        ENV_AGENT_NODE_LABELS,
        _labels,
        "this node's labels, KEY=VALUE comma separated (for label selectors)",
        metavar="LABELS",
        default_doc="none",
    ),
    s.Option(
        "token_file",
        "--token-file",
        ENV_AGENT_TOKEN_FILE,
        s.optional(_path),
        "bearer token sent with reports (the service's write token)",
        metavar="PATH",
        default_doc="none",
    ),
    s.Option(
        "probe_addr",
        "--probe-addr",
        ENV_AGENT_PROBE_ADDR,
        _probe_addr,
        "host:port of /healthz, /readyz and /metrics; empty: none",
        metavar="ADDR",
        default_doc=f"`0.0.0.0:{names.AGENT_PROBE_PORT}`",
    ),
    s.Option(
        "applied_file",
        "--applied-file",
        ENV_AGENT_APPLIED_FILE,
        s.optional(_path),
        "what the agent applied, kept across its restarts",
        metavar="PATH",
        default_doc=f"`{names.APPLIED_FILE_NAME}` beside the live file (links followed)",
    ),
    s.Option(
        "max_wait",
        "--max-wait",
        ENV_AGENT_MAX_WAIT,
        s.seconds(3600),
        "longest watch asked of the service, seconds",
        metavar="S",
    ),
    s.Option(
        "report_spread",
        "--report-spread",
        ENV_AGENT_REPORT_SPREAD,
        _seconds_or_zero(3600),
        "a change is reported after a random delay under this, seconds (0: at once)",
        metavar="S",
    ),
    s.Option(
        "heartbeat",
        "--heartbeat",
        ENV_AGENT_HEARTBEAT,
        _seconds_or_zero(86400),
        "the last report is sent again after this without a change, seconds (0: never)",
        metavar="S",
    ),
)
"""``agent``: on top of the live layer's options (those of ``nvml-mock-ctl``)."""
