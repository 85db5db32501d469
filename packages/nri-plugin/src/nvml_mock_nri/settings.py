"""The plugin's one frozen settings object, from flags, env twins and runtime config.

Every option is declared once in :data:`OPTIONS` (flag, env twin, default, parser,
and the key under which the runtime may send it in Configure), so the command
line, the env, the runtime config and the README's table cannot drift apart. The
machinery (the declaration's shape, the flags, flag-over-env precedence) is the
shared one of ``nvml_mock_protocol.settings``; the runtime config is the plugin's own.
Precedence is flag, then env (an empty env value counts as unset), then the
YAML the runtime sends in Configure, then the default. A value that cannot be
used raises :class:`~nvml_mock_nri.errors.ConfigError` naming the key and value.
"""

from __future__ import annotations

import argparse
import dataclasses
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import nvml_mock_protocol.settings as shared
import yaml
from nvml_mock_protocol import hostgpu, logs, names

from nvml_mock_nri.errors import ConfigError

DeviceMode = Literal["raw", "cdi"]
LogFormat = Literal["text", "json"]

DEFAULT_REQUEST_TIMEOUT: Final = 2.0
"""Seconds; the runtime's per-call deadline until Configure says otherwise (NRI's default)."""

_PLUGIN_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_.+-]+$")
_PLUGIN_INDEX_RE: Final = re.compile(r"^[0-9]{2}$")
_LOG_LEVELS: Final = (*logs.LOG_LEVELS, "critical")
"""The shared levels, and ``critical``, which the plugin has always accepted."""


@dataclass(frozen=True)
class Settings:
    """Everything the plugin is configured with; built once at start."""

    socket_path: str = names.NRI_SOCKET_PATH
    """NRI socket of the runtime."""
    plugin_name: str = names.NRI_PLUGIN_NAME
    """Name the plugin registers under (``[A-Za-z0-9_.+-]+``)."""
    plugin_index: str = names.NRI_PLUGIN_INDEX
    """Two-digit index; the runtime calls plugins in index order."""
    health_addr: str = f":{names.NRI_PLUGIN_HEALTH_PORT}"
    """``host:port`` of /healthz, /readyz and /metrics; empty disables them."""
    overlay_host_path: str = names.OVERLAY_HOST_PATH
    """Where the overlay is staged on the node."""
    overlay_mount_path: str = names.OVERLAY_MOUNT_PATH
    """Where containers see the overlay (read-only)."""
    node_name: str = ""
    """This node's name; injected as NODE_NAME and used to look up fabric identity."""
    topology_url: str = ""
    """Base URL of the topology service; empty means no fabric identity is injected."""
    excluded_namespaces: tuple[str, ...] = ()
    """Namespaces never injected, in addition to ``kube-system`` and the release namespace."""
    release_namespace: str = ""
    """Namespace nvml-mock is installed in; never injected."""
    device_namespaces: tuple[str, ...] = ()
    """Namespaces whose pods may opt in to device nodes; empty means none may."""
    host_proc_root: str = hostgpu.DEFAULT_PROC_ROOT
    """Where the node's ``/proc`` is seen, to detect a real NVIDIA driver."""
    host_sys_root: str = hostgpu.DEFAULT_SYS_ROOT
    """Where the node's ``/sys`` is seen, to detect a real NVIDIA driver."""
    device_injection_mode: DeviceMode = "raw"
    """How opted-in pods get device nodes: ``raw`` nodes or a ``cdi`` reference."""
    device_host_path: str = ""
    """Directory of staged mock device nodes; empty means ``<overlay-host-path>/dev``."""
    cdi_device_name: str = names.CDI_DEVICE_NAME
    """CDI device added in ``cdi`` mode."""
    cdi_spec_host_path: str = names.CDI_SPEC_HOST_PATH
    """CDI spec whose presence enables ``cdi`` mode; raw is the fallback without it."""
    opt_out_annotation: str = names.ANNOTATION_INJECT
    """Pod annotation whose value ``false`` opts the pod out."""
    device_annotation: str = names.ANNOTATION_DEVICES
    """Pod annotation whose value ``true`` opts the pod in to device nodes."""
    imex_channel_annotation: str = names.ANNOTATION_IMEX_CHANNELS
    """Pod annotation whose value ``true`` opts the pod in to the IMEX channel devices."""
    imex_channel_host_path: str = ""
    """Directory of staged IMEX channels; empty means
    ``<overlay-host-path>/dev/nvidia-caps-imex-channels``."""
    topology_watch_seconds: float = 30.0
    """Seconds one identity watch request waits for a change."""
    topology_timeout: float = 5.0
    """Seconds to connect and to wait for a reply beyond the watch wait."""
    topology_backoff_max: float = 30.0
    """Longest pause, in seconds, between retries after topology errors."""
    identity_hold: float = 0.5
    """Seconds CreateContainer waits for the first node identity after registration (at most
    a quarter of the runtime's request timeout); 0 never waits."""
    runtime_request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    """Seconds the runtime allows each call, used when Configure does not say (NRI before
    v0.7, i.e. containerd 1.7.0 to 1.7.25); containerd's ``plugin_request_timeout``."""
    wedge_threshold: float = 0.0
    """Seconds of a stuck call or a stopped event loop before the probes report a wedge;
    0 means twice the runtime's request timeout."""
    gpu_memory_share: float = 0.5
    """Share (0..1) of each held GPU's memory a container uses when its pod has no
    ``nvml-mock.nvidia.com/gpu-memory`` annotation."""
    unknown_visible_devices: str = "fail"
    """``fail``: CreateContainer fails, with the NVIDIA container toolkit's message, for a
    container whose own ``NVIDIA_VISIBLE_DEVICES`` names a GPU the node lacks (what a real
    node does); ``allow``: it starts, and its ``nvmlInit`` refuses the value."""
    log_format: LogFormat = "text"
    """``text`` or ``json`` (one object per line)."""
    log_level: str = "info"
    """debug, info, warning, error or critical."""
    explicit: frozenset[str] = frozenset()
    """Names of the fields set by a flag or env var; runtime config does not override them."""

    @property
    def effective_device_host_path(self) -> str:
        """The device directory, derived from the overlay when not set."""
        return self.device_host_path or (
            self.overlay_host_path.rstrip("/") + "/" + names.OVERLAY_DEV_DIR
        )

    @property
    def effective_imex_channel_host_path(self) -> str:
        """The IMEX channel directory, derived from the overlay when not set."""
        return self.imex_channel_host_path or "/".join(
            (self.overlay_host_path.rstrip("/"), names.OVERLAY_DEV_DIR, names.IMEX_CHANNELS_DIR)
        )

    @property
    def all_excluded_namespaces(self) -> frozenset[str]:
        """``kube-system``, the release namespace and the configured ones."""
        extra = (self.release_namespace,) if self.release_namespace else ()
        return frozenset((*names.EXCLUDED_NAMESPACES, *self.excluded_namespaces, *extra))

    @property
    def health_endpoint(self) -> tuple[str, int] | None:
        """``(host, port)`` to listen on, or None when the endpoints are disabled."""
        if not self.health_addr:
            return None
        return _split_host_port(self.health_addr)


def _split_host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


# Parsers: text in, typed value out, ValueError with a reason otherwise.


def _text(value: str) -> str:
    return value.strip()


def _name(value: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError("must not be empty")
    return value


def _plugin_name(value: str) -> str:
    if not _PLUGIN_NAME_RE.match(value):
        raise ValueError("must be non-empty and use only letters, digits and _ . + -")
    return value


def _plugin_index(value: str) -> str:
    if not _PLUGIN_INDEX_RE.match(value):
        raise ValueError("must be exactly two digits, e.g. 10")
    return value


def normalize_path(path: str) -> str:
    """An absolute path in one spelling: no ``//``, ``.``, ``..`` or trailing ``/``.

    Mount destinations are compared as strings, so ``/opt//nvml-mock`` or
    ``/opt/nvml-mock/.`` must read as ``/opt/nvml-mock``. A relative path is taken as
    relative to ``/``, as runtimes resolve mount destinations inside the root file system.
    The rewrite is lexical (no symlinks are followed): containers are not yet created.
    """
    normalized = posixpath.normpath("/" + path)
    return "/" + normalized.lstrip("/")


def _abs_path(value: str) -> str:
    value = value.strip()
    if not value.startswith("/"):
        raise ValueError("must be an absolute path")
    return normalize_path(value)


def _optional_abs_path(value: str) -> str:
    return _abs_path(value) if value.strip() else ""


def _health_addr(value: str) -> str:
    value = value.strip()
    if not value:
        return ""
    if ":" not in value:
        raise ValueError("must be host:port or :port (empty disables the endpoints)")
    host, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("port must be a number from 0 to 65535")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError("an IPv6 host must be written in brackets, e.g. [::1]:8080")
    return value


def _url(value: str) -> str:
    value = value.strip()
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL with a host, or empty")
    return value.rstrip("/")


def _csv(value: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item.strip() for item in value.split(",") if item.strip()))


def _device_mode(value: str) -> str:
    value = value.strip().lower()
    if value not in ("raw", "cdi"):
        raise ValueError("must be raw or cdi")
    return value


def _cdi_name(value: str) -> str:
    value = value.strip()
    kind, sep, device = value.partition("=")
    if not sep or "/" not in kind or not device:
        raise ValueError("must be a fully qualified CDI device name, vendor.com/class=device")
    return value


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError("must be a number of seconds") from None
    if not 0 < seconds < float("inf"):
        raise ValueError("must be a positive number of seconds")
    return seconds


def _non_negative_seconds(value: str) -> float:
    if value.strip() in ("0", "0.0"):
        return 0.0
    return _positive_seconds(value)


def _optional_positive_seconds(value: str) -> float:
    return _positive_seconds(value) if value.strip() else 0.0


def _share(value: str) -> float:
    try:
        share = float(value)
    except ValueError:
        raise ValueError("must be a number from 0 to 1") from None
    if not 0.0 <= share <= 1.0:
        raise ValueError("must be a number from 0 to 1")
    return share


def _unknown_devices_mode(value: str) -> str:
    value = value.strip().lower()
    if value not in ("fail", "allow"):
        raise ValueError("must be fail or allow")
    return value


def _log_format(value: str) -> str:
    value = value.strip().lower()
    if value not in logs.LOG_FORMATS:
        raise ValueError("must be " + " or ".join(logs.LOG_FORMATS))
    return value


def _log_level(value: str) -> str:
    value = value.strip().lower()
    if value not in _LOG_LEVELS:
        raise ValueError("must be one of " + ", ".join(_LOG_LEVELS))
    return value


@dataclass(frozen=True)
class Option(shared.Option):
    """One setting: how it is spelled on each surface and how its text is parsed."""

    runtime_key: str | None = None
    """Key accepted in the YAML config the runtime sends in Configure (None: not accepted)."""


OPTIONS: Final[tuple[Option, ...]] = (
    Option("socket_path", "--socket-path", names.ENV_NRI_SOCKET_PATH, _abs_path, "NRI socket"),
    Option("plugin_name", "--plugin-name", names.ENV_NRI_PLUGIN_NAME, _plugin_name, "plugin name"),
    Option(
        "plugin_index", "--plugin-index", names.ENV_NRI_PLUGIN_INDEX, _plugin_index, "plugin index"
    ),
    Option(
        "health_addr",
        "--health-addr",
        "NVML_MOCK_HEALTH_ADDR",
        _health_addr,
        "host:port for /healthz, /readyz, /metrics (empty disables)",
    ),
    Option(
        "overlay_host_path",
        "--overlay-host-path",
        names.ENV_OVERLAY_HOST_PATH,
        _abs_path,
        "overlay directory on the node",
        "overlayHostPath",
    ),
    Option(
        "overlay_mount_path",
        "--overlay-mount-path",
        names.ENV_OVERLAY_MOUNT_PATH,
        _abs_path,
        "overlay mount point in containers",
        "overlayMountPath",
    ),
    Option("node_name", "--node-name", names.ENV_NODE_NAME, _text, "this node's name"),
    Option(
        "topology_url",
        "--topology-url",
        "NVML_MOCK_TOPOLOGY_URL",
        _url,
        "topology service base URL (empty: no fabric identity)",
    ),
    Option(
        "excluded_namespaces",
        "--excluded-namespaces",
        "NVML_MOCK_EXCLUDED_NAMESPACES",
        _csv,
        "comma-separated namespaces never injected (kube-system always is)",
        "excludedNamespaces",
    ),
    Option(
        "release_namespace",
        "--release-namespace",
        "NVML_MOCK_RELEASE_NAMESPACE",
        _text,
        "namespace nvml-mock runs in (never injected)",
        "releaseNamespace",
    ),
    Option(
        "device_namespaces",
        "--device-namespaces",
        "NVML_MOCK_DEVICE_NAMESPACES",
        _csv,
        "comma-separated namespaces whose pods may opt in to device nodes (empty: none)",
    ),
    Option(
        "host_proc_root",
        "--host-proc-root",
        hostgpu.ENV_HOST_PROC_ROOT,
        _abs_path,
        "the node's /proc, to detect a real NVIDIA driver",
    ),
    Option(
        "host_sys_root",
        "--host-sys-root",
        hostgpu.ENV_HOST_SYS_ROOT,
        _abs_path,
        "the node's /sys, to detect a real NVIDIA driver",
    ),
    Option(
        "device_injection_mode",
        "--device-injection-mode",
        "NVML_MOCK_DEVICE_INJECTION_MODE",
        _device_mode,
        "raw or cdi",
        "deviceInjectionMode",
    ),
    Option(
        "device_host_path",
        "--device-host-path",
        "NVML_MOCK_DEVICE_HOST_PATH",
        _optional_abs_path,
        "staged device nodes (default <overlay-host-path>/dev)",
        "deviceHostPath",
    ),
    Option(
        "cdi_device_name",
        "--cdi-device-name",
        "NVML_MOCK_CDI_DEVICE_NAME",
        _cdi_name,
        "CDI device added in cdi mode",
        "cdiDeviceName",
    ),
    Option(
        "cdi_spec_host_path",
        "--cdi-spec-host-path",
        "NVML_MOCK_CDI_SPEC_HOST_PATH",
        _abs_path,
        "CDI spec that must exist for cdi mode",
        "cdiSpecHostPath",
    ),
    Option(
        "opt_out_annotation",
        "--opt-out-annotation",
        "NVML_MOCK_OPT_OUT_ANNOTATION",
        _name,
        "pod annotation; value false opts out",
        "optOutAnnotation",
    ),
    Option(
        "device_annotation",
        "--device-annotation",
        "NVML_MOCK_DEVICE_ANNOTATION",
        _name,
        "pod annotation; value true opts in to devices",
        "deviceAnnotation",
    ),
    Option(
        "imex_channel_annotation",
        "--imex-channel-annotation",
        "NVML_MOCK_IMEX_CHANNEL_ANNOTATION",
        _name,
        "pod annotation; value true opts in to the IMEX channels",
        "imexChannelAnnotation",
    ),
    Option(
        "imex_channel_host_path",
        "--imex-channel-host-path",
        "NVML_MOCK_IMEX_CHANNEL_HOST_PATH",
        _optional_abs_path,
        "staged IMEX channels (default <overlay-host-path>/dev/nvidia-caps-imex-channels)",
        "imexChannelHostPath",
    ),
    Option(
        "topology_watch_seconds",
        "--topology-watch-seconds",
        "NVML_MOCK_TOPOLOGY_WATCH_SECONDS",
        _positive_seconds,
        "seconds one identity watch waits for a change",
    ),
    Option(
        "topology_timeout",
        "--topology-timeout",
        "NVML_MOCK_TOPOLOGY_TIMEOUT",
        _positive_seconds,
        "seconds to connect / reply beyond the watch wait",
    ),
    Option(
        "topology_backoff_max",
        "--topology-backoff-max",
        "NVML_MOCK_TOPOLOGY_BACKOFF_MAX",
        _positive_seconds,
        "longest pause between topology retries",
    ),
    Option(
        "identity_hold",
        "--identity-hold",
        "NVML_MOCK_IDENTITY_HOLD",
        _non_negative_seconds,
        "seconds CreateContainer waits for the first identity after registration (0: never)",
    ),
    Option(
        "runtime_request_timeout",
        "--runtime-request-timeout",
        "NVML_MOCK_RUNTIME_REQUEST_TIMEOUT",
        _positive_seconds,
        "the runtime's per-call timeout when Configure does not send one (containerd < 1.7.26)",
    ),
    Option(
        "wedge_threshold",
        "--wedge-threshold",
        "NVML_MOCK_WEDGE_THRESHOLD",
        _optional_positive_seconds,
        "seconds of a stuck call or event loop before /healthz fails (empty: 2 x request timeout)",
    ),
    Option(
        "gpu_memory_share",
        "--gpu-memory-share",
        names.ENV_GPU_MEMORY_SHARE,
        _share,
        "share (0..1) of a held GPU's memory a container uses without the gpu-memory annotation",
        "gpuMemoryShare",
    ),
    Option(
        "unknown_visible_devices",
        "--unknown-visible-devices",
        "NVML_MOCK_UNKNOWN_VISIBLE_DEVICES",
        _unknown_devices_mode,
        "fail (the toolkit's CreateContainer error) or allow (left to nvmlInit) for a "
        "container's own NVIDIA_VISIBLE_DEVICES naming a GPU the node lacks",
        "unknownVisibleDevices",
    ),
    Option("log_format", "--log-format", logs.ENV_LOG_FORMAT, _log_format, "text or json"),
    Option("log_level", "--log-level", logs.ENV_LOG_LEVEL, _log_level, "log level"),
)

_BY_RUNTIME_KEY: Final[dict[str, Option]] = {o.runtime_key: o for o in OPTIONS if o.runtime_key}


def build_parser() -> argparse.ArgumentParser:
    """The command line: one flag per option, each defaulting to its env twin."""
    parser = argparse.ArgumentParser(
        prog="nvml-mock-nri-plugin",
        description="containerd NRI plugin that injects the nvml-mock overlay into containers.",
        epilog="Every flag has an env twin; the flag wins, and an empty env value is unset.",
    )
    shared.add_options(parser, OPTIONS, Settings())
    return parser


def _parse(option: Option, key: str, text: str) -> Any:
    try:
        return option.parse(text)
    except ValueError as exc:
        raise ConfigError(key, text, str(exc)) from None


def _validate(settings: Settings) -> Settings:
    if settings.topology_url and not settings.node_name:
        raise ConfigError(
            names.ENV_NODE_NAME,
            settings.node_name,
            "--node-name (NODE_NAME) is required when --topology-url is set",
        )
    return settings


def load_settings(argv: Sequence[str] | None, environ: Mapping[str, str]) -> Settings:
    """Settings from the command line and the environment (the flag wins).

    Raises SystemExit (2) for unknown flags, as argparse does, and ConfigError for
    a value that cannot be used.
    """
    args = build_parser().parse_args(argv)
    try:
        given = shared.gather(OPTIONS, args, environ)
    except shared.SettingsError as exc:
        raise ConfigError(exc.key, exc.value, exc.reason) from None
    values = {field: found.value for field, found in given.items()}
    return _validate(Settings(**values, explicit=frozenset(given)))


def apply_runtime_config(settings: Settings, text: str) -> tuple[Settings, list[str]]:
    """Settings with the runtime-sent YAML config applied.

    Returns the new settings and the keys that were ignored because a flag or env
    var set the same option. An empty config changes nothing. Raises ConfigError
    naming the key for an unknown key or a bad value.
    """
    if not text.strip():
        return settings, []
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("config", _shorten(text), f"is not valid YAML: {exc}") from None
    if document is None:
        return settings, []
    if not isinstance(document, dict):
        raise ConfigError("config", _shorten(text), "must be a YAML mapping of option to value")
    changes: dict[str, Any] = {}
    overridden: list[str] = []
    for key, given in document.items():
        option = _BY_RUNTIME_KEY.get(key) if isinstance(key, str) else None
        if option is None:
            known = ", ".join(sorted(_BY_RUNTIME_KEY))
            raise ConfigError(f"config.{key}", given, f"is not a known key (known: {known})")
        raw = given
        if option.field == "excluded_namespaces" and isinstance(given, list):
            raw = ",".join(str(item) for item in given)
        if isinstance(raw, (dict, list)) or raw is None:
            raise ConfigError(f"config.{key}", raw, "must be a single value")
        value = _parse(option, f"config.{key}", str(raw))
        if option.field in settings.explicit:
            overridden.append(key)
            continue
        changes[option.field] = value
    return _validate(dataclasses.replace(settings, **changes)), overridden


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(settings: Settings) -> dict[str, object]:
    """The settings as a flat mapping for the start-up log line."""
    out = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    out.pop("explicit")
    return out
