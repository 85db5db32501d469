"""Render one node's GPU state into the format the mock library reads.

Rendering is a pure function of the config: the same node, profile, count and overrides
give the same bytes, so re-staging a node never changes what its containers see, and a
diff of two states shows exactly what a config change did. Per-GPU identities (UUID,
serial, PDI, fabric GUID) are hashed from the node name, the profile and the GPU's position,
so every node of a cluster gets its own GPUs and the same node keeps them across restarts.
Addresses and the NUMA/NVLink layout come from the profile: a real board sits at the same
PCI addresses on every node of a model, and tools that key on the bus id expect that.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from nvml_mock_engine._version import __version__
from nvml_mock_engine.config import EngineConfig
from nvml_mock_engine.errors import ConfigError
from nvml_mock_engine.mig import records
from nvml_mock_engine.schema import (
    GPU_KEYS,
    SYSTEM_KEYS,
    Kind,
    ValueType,
    format_value,
    parse_default,
    validate_value,
)

__all__ = ["STATE_MAGIC", "RenderedState", "derive_gpu", "gpu_uuid", "render", "render_text"]

STATE_MAGIC: Final = "nvml-mock-state 1"
FABRIC_STATE_COMPLETED: Final = 3
ARCH_AMPERE: Final = 7
"""``NVML_DEVICE_ARCH_AMPERE``: from here on row remapping replaces page retirement."""
ZERO_UUID: Final = "00000000-0000-0000-0000-000000000000"
_SYSTEM_SOURCES: Final[Mapping[str, str]] = {"node_name": "node", "nvml_version": "driver_version"}
"""The config key a ``[system]`` value comes from, where the two names differ."""
_MAX_STATE_BYTES: Final = 1 << 20
_MAX_LINE_BYTES: Final = 1023
_FORMAT_DEFAULTS: Final[Mapping[str, ValueType]] = {
    key: spec_default
    for key, spec in GPU_KEYS.items()
    if spec.default is not None
    and spec.derived is None
    and (spec_default := parse_default(spec)) is not None
}
"""The defaults ``keys.toml`` declares, written out so a state file reads complete."""


@dataclass(frozen=True, slots=True)
class RenderedState:
    """A node's state as key/value sections, ready to be written."""

    system: Mapping[str, ValueType]
    gpus: Sequence[Mapping[str, ValueType]]
    header: str

    def text(self) -> str:
        """The state file's text; ``ConfigError`` when it exceeds the format's size bounds."""
        lines = [STATE_MAGIC, f"# {self.header}", "[system]"]
        lines += [f"{k}={format_value(SYSTEM_KEYS[k], v)}" for k, v in self.system.items()]
        for index, gpu in enumerate(self.gpus):
            lines.append("")
            lines.append(f"[gpu {index}]")
            for key in GPU_KEYS:
                if key not in gpu:
                    continue
                value = gpu[key]
                if GPU_KEYS[key].kind is Kind.MIG_GI_PROFILE:
                    assert isinstance(value, tuple)
                    lines += [f"{key}={record}" for record in value]
                else:
                    lines.append(f"{key}={format_value(GPU_KEYS[key], value)}")
        text = "\n".join(lines) + "\n"
        if len(text.encode()) > _MAX_STATE_BYTES:
            raise ConfigError("count", "the rendered state is larger than the format's 1 MiB")
        for number, line in enumerate(lines, start=1):
            if len(line.encode()) > _MAX_LINE_BYTES:
                raise ConfigError("state", f"line {number} is longer than {_MAX_LINE_BYTES} bytes")
        return text


def gpu_uuid(node: str, profile_key: str, index: int) -> str:
    """The UUID of GPU *index* on *node*: 128 bits of SHA-256, in NVML's ``GPU-`` form."""
    digest = _digest("uuid", node, profile_key, str(index)).hex()
    return f"GPU-{digest[0:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def derive_gpu(config: EngineConfig, index: int) -> dict[str, ValueType]:
    """All state values of GPU *index*: profile, then derived identity and layout, overrides."""
    profile = config.profile
    per_node = profile.default_count
    position, board = index % per_node, index // per_node
    bus_id = _shift_domain(profile.pci_bus_ids[position], board, profile.pci_bus_ids)
    domain, bus, device = _bus_parts(bus_id)
    numa = profile.numa_nodes[position]
    module = index // profile.gpus_per_serial
    serial_digest = _digest("serial", config.node, profile.key, str(module))
    serial = f"1{int.from_bytes(serial_digest[:8], 'big') % 10**12:012d}"

    values: dict[str, ValueType] = {
        **_FORMAT_DEFAULTS,
        "remapped_rows_supported": profile.architecture >= ARCH_AMPERE,
        "retired_pages_supported": profile.architecture < ARCH_AMPERE,
        **profile.gpu,
    }
    values.update(
        {
            "name": profile.name,
            "uuid": gpu_uuid(config.node, profile.key, index),
            "serial": serial,
            "pdi": int.from_bytes(_digest("pdi", config.node, profile.key, str(index))[:8], "big"),
            "board_id": (domain << 16) | (bus << 8) | device,
            "minor_number": index,
            "architecture": profile.architecture,
            "cuda_cc_major": profile.cuda_cc[0],
            "cuda_cc_minor": profile.cuda_cc[1],
            "module_id": profile.module_ids[position],
            "pci_bus_id": bus_id,
            "numa_node": numa,
            "cpu_affinity": profile.cpu_affinity[numa],
            "nvlink_remote_bus_ids": _nvlink_remotes(config, board),
            "fabric_attached": config.fabric is not None,
            "fabric_cluster_uuid": config.fabric.cluster_uuid if config.fabric else ZERO_UUID,
            "fabric_clique_id": config.fabric.clique_id if config.fabric else 0,
            "fabric_state": FABRIC_STATE_COMPLETED if config.fabric else 0,
            "gpu_group": index // profile.gpus_per_group,
            "mig_gi_profile": records(profile.mig) if profile.gpu.get("mig_capable") else (),
        }
    )
    values.update(config.defaults)
    values.update(config.gpus.get(index, {}))
    if values.get("platform_supported"):
        _derive_platform(values, config, index)
    return values


def _derive_platform(values: dict[str, ValueType], config: EngineConfig, index: int) -> None:
    """Identifiers of the platform info an override has not set.

    The fabric GUID is the GPU's own. The chassis serial names the rack, so every tray of the
    same NVLink domain (fabric cluster UUID) reports the same one; a board outside any rack
    (an HGX baseboard) reports an empty serial.
    """
    guid = _digest("ib-guid", config.node, config.profile.key, str(index))
    values.setdefault("platform_ib_guid", int.from_bytes(guid[:8], "big"))
    if config.profile.rack_chassis:
        rack = str(values["fabric_cluster_uuid"])
        digest = _digest("chassis", config.profile.key, rack)
        serial = f"1{int.from_bytes(digest[:8], 'big') % 10**12:012d}"
    else:
        serial = ""
    values.setdefault("platform_chassis_serial", serial)


def render(config: EngineConfig) -> RenderedState:
    """Render *config*; raises ``ConfigError`` when overrides make the node inconsistent."""
    gpus = [derive_gpu(config, index) for index in range(config.count)]
    _check_consistent(gpus)
    system: dict[str, ValueType] = {
        "driver_version": config.driver_version,
        "nvml_version": config.nvml_version,
        "cuda_driver_version": config.cuda_driver_version,
        "device_count": config.count,
        "node_name": config.node,
        "profile": config.profile.key,
    }
    for key, value in system.items():
        try:
            validate_value(SYSTEM_KEYS[key], value)
        except ValueError as exc:
            raise ConfigError(_SYSTEM_SOURCES.get(key, key), str(exc)) from None
    header = (
        f"rendered by nvml-mock-engine {__version__}: profile {config.profile.key}, "
        f"{config.count} GPU(s), node {config.node}"
    )
    return RenderedState(system=system, gpus=gpus, header=header)


def render_text(config: EngineConfig) -> str:
    """Render *config* to the state file's text, checked against the format's size bounds."""
    return render(config).text()


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(("nvml-mock", *parts)).encode()).digest()


def _bus_parts(bus_id: str) -> tuple[int, int, int]:
    domain, bus, rest = bus_id.split(":")
    return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)


def _shift_domain(bus_id: str, board: int, layout: Sequence[str]) -> str:
    """The address of the same slot on the *board*-th copy of the layout (next PCI domains)."""
    if board == 0:
        return bus_id
    stride = max(_bus_parts(b)[0] for b in layout) + 1
    domain = _bus_parts(bus_id)[0] + board * stride
    return f"{domain:08X}{bus_id[8:]}"


def _nvlink_remotes(config: EngineConfig, board: int) -> tuple[str, ...]:
    """Each link's remote (an NVSwitch port), links spread in contiguous runs over the switches.

    The state format repeats the last id for links past the list, so trailing repeats are
    dropped to keep 18 links within one value.
    """
    switches = config.profile.nvswitch_bus_ids
    links = config.profile.gpu.get("nvlink_count", 0)
    if not switches or not isinstance(links, int) or links == 0:
        return ()
    shifted = [_shift_domain(s, board, switches) for s in switches]
    per_link = [shifted[link * len(shifted) // links] for link in range(links)]
    while len(per_link) > 1 and per_link[-1] == per_link[-2]:
        per_link.pop()
    return tuple(per_link)


def _check_consistent(gpus: Sequence[Mapping[str, ValueType]]) -> None:
    seen_uuid: dict[object, int] = {}
    seen_bus: dict[object, int] = {}
    for index, gpu in enumerate(gpus):
        for key, seen in (("uuid", seen_uuid), ("pci_bus_id", seen_bus)):
            other = seen.setdefault(gpu[key], index)
            if other != index:
                raise ConfigError(f"gpus[{index}].{key}", f"{gpu[key]} is also GPU {other}'s")
        total, reserved, used = (
            gpu["memory_total_bytes"],
            gpu["memory_reserved_bytes"],
            gpu["memory_used_bytes"],
        )
        assert isinstance(total, int) and isinstance(reserved, int) and isinstance(used, int)
        if reserved + used > total:
            raise ConfigError(
                f"gpus[{index}].memory_used_bytes",
                f"reserved ({reserved}) + used ({used}) exceed memory_total_bytes ({total})",
            )
        bar_total, bar_used = gpu["bar1_total_bytes"], gpu["bar1_used_bytes"]
        assert isinstance(bar_total, int) and isinstance(bar_used, int)
        if bar_used > bar_total:
            raise ConfigError(f"gpus[{index}].bar1_used_bytes", "exceeds bar1_total_bytes")
        links = gpu.get("nvlink_count", 0)
        assert isinstance(links, int)
        if links and not gpu.get("nvlink_version"):
            raise ConfigError(f"gpus[{index}].nvlink_version", "must be set when nvlink_count > 0")
