"""What to render for one node: profile, GPU count, driver, fabric identity and overrides.

The settings come from flags (with env twins, handled by the CLI) and from an optional
YAML config file; a flag wins over the file, the file over the profile's defaults. All of
it is validated here, before anything is written, and every error names the key that is
wrong the way the user wrote it (``gpus[3].memory_total_bytes: must be a positive
integer``), so a bad value fails at start instead of surfacing as an NVML init error in
some container later.

Config file (all keys optional)::

    version: 1
    profile: gb200            # a packaged name or the path of a profile file
    count: 4                  # 1..64
    node: gpu-node-7          # seeds UUIDs and serials
    driver_version: "580.65.06"
    cuda_driver_version: 13000
    fabric: {cluster_uuid: "…", clique_id: 2}
    defaults: {temperature_c: 40}           # state keys, applied to every GPU
    gpus:                                   # per-GPU state keys, by index
      3: {memory_total_bytes: 85899345920}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

import yaml

from nvml_mock_engine.errors import ConfigError
from nvml_mock_engine.profiles import FabricDefaults, Profile, load_profile
from nvml_mock_engine.schema import GPU_KEYS, MAX_GPUS, ValueType, validate_value

__all__ = [
    "CONFIG_VERSION",
    "EngineConfig",
    "GpuOverrides",
    "cuda_version_for_driver",
    "load_config_file",
    "resolve_config",
]

CONFIG_VERSION: Final = 1
_DRIVER_RE: Final = re.compile(r"\d{3}\.\d{1,3}(\.\d{1,3})?")
_FILE_KEYS: Final = frozenset(
    {
        "version",
        "profile",
        "count",
        "node",
        "driver_version",
        "cuda_driver_version",
        "fabric",
        "defaults",
        "gpus",
        "mig",
    }
)
_CUDA_BY_BRANCH: Final[Mapping[int, int]] = MappingProxyType(
    {
        470: 11040,
        510: 11060,
        515: 11070,
        520: 11080,
        525: 12000,
        530: 12010,
        535: 12020,
        545: 12030,
        550: 12040,
        555: 12050,
        560: 12060,
        565: 12070,
        570: 12080,
        575: 12090,
        580: 13000,
        590: 13010,
        595: 13020,
        610: 13030,  # 610.43.02/03: "CUDA UMD Version: 13.3" (sglang#27487, finpilot#160)
    }
)

GpuOverrides = Mapping[str, ValueType]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything the renderer needs for one node; frozen and fully validated."""

    profile: Profile
    count: int
    """GPUs on the node, 1..64."""
    node: str
    """Node name; seeds UUIDs and serials so each node's GPUs are its own."""
    driver_version: str
    cuda_driver_version: int
    """CUDA driver API version as NVML reports it (13000 for CUDA 13.0)."""
    fabric: FabricDefaults | None
    """Fabric identity for fabric-attached GPUs (None for boards without fabric)."""
    defaults: GpuOverrides = field(default_factory=lambda: MappingProxyType({}))
    """State values applied to every GPU after the profile's."""
    gpus: Mapping[int, GpuOverrides] = field(default_factory=lambda: MappingProxyType({}))
    """Per-GPU state values by index, applied last."""

    @property
    def nvml_version(self) -> str:
        """NVML's version string: the CUDA major, then the driver version (``13.580.65.06``)."""
        return f"{self.cuda_driver_version // 1000}.{self.driver_version}"


def cuda_version_for_driver(driver_version: str) -> int | None:
    """The CUDA driver API version a driver branch ships with, or None for an unknown branch.

    A branch newer than every branch of the table (a 600- or 610-series driver) gets the
    newest CUDA version the table knows: a driver runs every CUDA release up to its own, and
    its real pairing is not published here; set ``cuda_driver_version`` to pin it."""
    try:
        branch = int(driver_version.split(".", 1)[0])
    except ValueError:
        return None
    if branch > max(_CUDA_BY_BRANCH):
        return _CUDA_BY_BRANCH[max(_CUDA_BY_BRANCH)]
    return _CUDA_BY_BRANCH.get(branch)


def load_config_file(path: Path) -> dict[str, object]:
    """Read a config file into a mapping (validated by ``resolve_config``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("config", f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path} must hold a mapping, got {type(data).__name__}")
    for key in data:
        if key not in _FILE_KEYS:
            raise ConfigError(str(key), f"unknown key (known: {', '.join(sorted(_FILE_KEYS))})")
    version = data.get("version", CONFIG_VERSION)
    if version != CONFIG_VERSION:
        raise ConfigError("version", f"must be {CONFIG_VERSION}, got {version!r}")
    return {str(k): v for k, v in data.items()}


def resolve_config(
    *,
    profile: str | None = None,
    count: int | None = None,
    node: str | None = None,
    driver_version: str | None = None,
    cuda_driver_version: int | None = None,
    file_data: Mapping[str, object] | None = None,
    default_node: str = "localhost",
) -> EngineConfig:
    """Merge explicit settings (flags, env) over *file_data* over the profile's defaults."""
    data = dict(file_data or {})
    profile_ref = profile if profile is not None else data.get("profile", "a100")
    if not isinstance(profile_ref, str) or not profile_ref:
        raise ConfigError("profile", f"must be a profile name, got {profile_ref!r}")
    chosen = load_profile(profile_ref)

    raw_count: object = count if count is not None else data.get("count", chosen.default_count)
    if isinstance(raw_count, bool) or not isinstance(raw_count, int):
        raise ConfigError("count", f"must be an integer in 1..{MAX_GPUS}, got {raw_count!r}")
    if not 1 <= raw_count <= MAX_GPUS:
        raise ConfigError("count", f"must be an integer in 1..{MAX_GPUS}, got {raw_count}")

    node_name = node if node is not None else data.get("node", default_node)
    _check_node(node_name)
    assert isinstance(node_name, str)

    driver = driver_version if driver_version is not None else data.get("driver_version")
    if driver is None:
        driver = chosen.driver_version
    if not isinstance(driver, str) or not _DRIVER_RE.fullmatch(driver):
        raise ConfigError(
            "driver_version", f"must look like 580.65.06 (branch.minor[.patch]), got {driver!r}"
        )

    cuda: object = cuda_driver_version
    if cuda is None:
        cuda = data.get("cuda_driver_version")
    if cuda is None:
        if driver == chosen.driver_version:
            cuda = chosen.cuda_driver_version
        else:
            cuda = cuda_version_for_driver(driver)
            if cuda is None:
                raise ConfigError(
                    "cuda_driver_version",
                    f"driver branch of {driver} is unknown; set cuda_driver_version (e.g. 13000)",
                )
    if isinstance(cuda, bool) or not isinstance(cuda, int) or not 1000 <= cuda <= 99999:
        raise ConfigError("cuda_driver_version", f"must be an integer such as 13000, got {cuda!r}")

    fabric = _fabric(data.get("fabric"), chosen)
    defaults = _overrides(data.get("defaults", {}), "defaults")
    gpus = _gpu_overrides(data.get("gpus", {}), raw_count)
    return EngineConfig(
        profile=chosen,
        count=raw_count,
        node=node_name,
        driver_version=driver,
        cuda_driver_version=cuda,
        fabric=fabric,
        defaults=MappingProxyType(defaults),
        gpus=MappingProxyType({k: MappingProxyType(v) for k, v in gpus.items()}),
    )


def _check_node(node: object) -> None:
    if not isinstance(node, str) or not node:
        raise ConfigError("node", f"must be a non-empty name, got {node!r}")
    if len(node) > 253 or any(ord(ch) < 0x20 or ch == "\x7f" for ch in node):
        raise ConfigError(
            "node", f"must be a node name (at most 253 printable chars), got {node!r}"
        )


def _fabric(value: object, profile: Profile) -> FabricDefaults | None:
    if value is None:
        return profile.fabric
    if profile.fabric is None:
        raise ConfigError(
            "fabric", f"profile {profile.key} is not fabric-attached; its GPUs have no identity"
        )
    if not isinstance(value, dict):
        raise ConfigError("fabric", "must be a mapping with cluster_uuid and/or clique_id")
    for key in value:
        if key not in ("cluster_uuid", "clique_id"):
            raise ConfigError(f"fabric.{key}", "unknown key (known: cluster_uuid, clique_id)")
    uuid = _value("fabric.cluster_uuid", "fabric_cluster_uuid", value.get("cluster_uuid"))
    clique = _value("fabric.clique_id", "fabric_clique_id", value.get("clique_id"))
    return FabricDefaults(
        cluster_uuid=str(uuid).lower() if uuid is not None else profile.fabric.cluster_uuid,
        clique_id=int(clique) if isinstance(clique, int) else profile.fabric.clique_id,
    )


def _value(path: str, state_key: str, raw: object) -> ValueType | None:
    if raw is None:
        return None
    try:
        return validate_value(GPU_KEYS[state_key], raw)
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None


def _overrides(value: object, path: str) -> dict[str, ValueType]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"must be a mapping of state keys, got {type(value).__name__}")
    result: dict[str, ValueType] = {}
    for key, raw in value.items():
        key_path = f"{path}.{key}"
        if not isinstance(key, str) or key not in GPU_KEYS:
            raise ConfigError(key_path, "unknown state key (see STATE-FORMAT.md for the keys)")
        checked = _value(key_path, key, raw)
        if checked is None:
            raise ConfigError(key_path, "must have a value")
        result[key] = checked
    return result


def _gpu_overrides(value: object, count: int) -> dict[int, dict[str, ValueType]]:
    items: list[tuple[object, object]]
    if value is None:
        return {}
    if isinstance(value, list):
        items = list(enumerate(value))
    elif isinstance(value, dict):
        items = list(value.items())
    else:
        raise ConfigError("gpus", "must be a list (by position) or a mapping of index to overrides")
    result: dict[int, dict[str, ValueType]] = {}
    for index, overrides in items:
        if isinstance(index, bool) or not isinstance(index, int):
            raise ConfigError(f"gpus[{index!r}]", "index must be an integer")
        path = f"gpus[{index}]"
        if not 0 <= index < count:
            raise ConfigError(
                path, f"index out of range: the node has {count} GPUs (0..{count - 1})"
            )
        if overrides is None:
            continue
        result[index] = _overrides(overrides, path)
    return result
