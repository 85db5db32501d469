"""GPU profiles: what a real board of each kind reports, as YAML package data.

A profile holds the values every GPU of that board shares (name, memory, clocks, power,
PCI ids, firmware strings: taken from real ``nvidia-smi -q -x`` captures where one
exists) and the layout of a real node of that board (PCI addresses, modules, NUMA and
CPU affinity, NVLink switches, fabric attachment, how many GPUs a node holds). What
differs per GPU and per node (UUIDs, serials) is derived by the renderer, not stored.

Profiles are plain data so that adding a board is adding a file; ``load_profile`` accepts
a packaged name or the path of such a file, and validates it the same way either way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Final

import yaml

from nvml_mock_engine.errors import ProfileError
from nvml_mock_engine.mig import MigGpuInstanceProfile, parse_mig_table
from nvml_mock_engine.schema import GPU_KEYS, MAX_GPUS, KeySpec, Kind, ValueType, validate_value

__all__ = [
    "ARCHITECTURES",
    "DERIVED_GPU_KEYS",
    "PCI_CLASSES",
    "FabricDefaults",
    "Profile",
    "load_profile",
    "profile_names",
]

ARCHITECTURES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "kepler": 2,
        "maxwell": 3,
        "pascal": 4,
        "volta": 5,
        "turing": 6,
        "ampere": 7,
        "ada": 8,
        "hopper": 9,
        "blackwell": 10,
        "rubin": 13,
    }
)
"""``nvmlDeviceArchitecture_t`` values by the name a profile uses."""

DERIVED_GPU_KEYS: Final = frozenset(k for k, spec in GPU_KEYS.items() if spec.derived == "render")
"""State keys the renderer computes from the profile's layout, the node and the index
(``derived = "render"`` in ``keys.toml``)."""

OPTIONAL_GPU_KEYS: Final = frozenset(
    k for k, spec in GPU_KEYS.items() if not spec.required and spec.derived != "render"
)
"""State keys a profile may leave out: the format (or the library) gives them a default."""

_PACKAGE: Final = "nvml_mock_engine.profiles"
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML has it (about 10x faster), else the pure-Python one."""
_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]*")
_TOP_KEYS: Final = frozenset(
    {
        "name",
        "default_count",
        "driver_version",
        "cuda_driver_version",
        "architecture",
        "cuda_compute_capability",
        "layout",
        "fabric",
        "gpu",
        "mig",
    }
)
_LAYOUT_KEYS: Final = frozenset(
    {
        "pci_bus_ids",
        "module_ids",
        "numa_nodes",
        "cpu_affinity",
        "gpus_per_serial",
        "gpus_per_group",
        "nvswitch_bus_ids",
        "rack_chassis",
        "pci_class",
        "machine",
    }
)
PCI_CLASSES: Final[Mapping[int, str]] = MappingProxyType(
    {0x030000: "graphics", 0x030200: "compute"}
)
"""The PCI class codes a GPU function has, by the mode they mean: ``0x030200`` (3D
controller) for a board whose display is off, as datacenter boards ship; ``0x030000`` (VGA
controller) for a board in graphics mode. GPU feature discovery labels ``gpu.mode`` from it."""


@dataclass(frozen=True, slots=True)
class FabricDefaults:
    """The fabric identity a fabric-attached board reports before any ComputeDomain is applied."""

    cluster_uuid: str
    clique_id: int


@dataclass(frozen=True, slots=True)
class Profile:
    """One board: shared per-GPU values plus the layout of a real node of it."""

    key: str
    """Profile name (``gb200``) or, for a profile file, its stem."""
    name: str
    """Product name exactly as the board reports it (``NVIDIA GB200``)."""
    default_count: int
    """GPUs in a real node of this board."""
    driver_version: str
    cuda_driver_version: int
    architecture: int
    architecture_name: str
    cuda_cc: tuple[int, int]
    pci_bus_ids: tuple[str, ...]
    module_ids: tuple[int, ...]
    numa_nodes: tuple[int, ...]
    cpu_affinity: Mapping[int, str]
    gpus_per_serial: int
    gpus_per_group: int
    nvswitch_bus_ids: tuple[str, ...]
    rack_chassis: bool
    """GPUs sit in trays of a rack-scale chassis (NVL72): the platform info names the chassis."""
    fabric: FabricDefaults | None
    """None for boards that answer fabric queries NOT_SUPPORTED."""
    gpu: Mapping[str, ValueType]
    """Validated state values shared by every GPU of the board."""
    mig: tuple[MigGpuInstanceProfile, ...] = ()
    """The board's MIG GPU-instance profiles (NVIDIA's published table); empty without MIG."""
    pci_class: int = 0x030200
    """The GPU function's PCI class code (``layout.pci_class``, one of :data:`PCI_CLASSES`):
    what the staged PCI sysfs tree's ``class`` file holds."""
    machine: str = ""
    """The node's machine: its DMI product name (``layout.machine``), as the firmware of a
    real system with this board reports it in ``/sys/class/dmi/id/product_name`` (GPU
    feature discovery's ``nvidia.com/gpu.machine``). Empty: a profile file that names none,
    and the staged root has no such file."""


def profile_names() -> tuple[str, ...]:
    """The packaged profiles, sorted."""
    root = resources.files(_PACKAGE)
    return tuple(
        sorted(
            entry.name.removesuffix(".yaml")
            for entry in root.iterdir()
            if entry.name.endswith(".yaml")
        )
    )


def load_profile(name_or_path: str) -> Profile:
    """Load and validate a packaged profile by name, or a profile file by path.

    Raises ``ProfileError`` naming the file and key when it does not validate, and
    ``ProfileError`` with key ``profile`` for an unknown name.
    """
    if "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        path = Path(name_or_path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(
                "profile", f"cannot read profile file {path}: {exc.strerror}"
            ) from exc
        return parse_profile(text, key=path.stem, origin=str(path))
    if not _NAME_RE.fullmatch(name_or_path) or name_or_path not in profile_names():
        known = ", ".join(profile_names())
        raise ProfileError("profile", f"unknown profile {name_or_path!r} (known: {known})")
    text = resources.files(_PACKAGE).joinpath(f"{name_or_path}.yaml").read_text(encoding="utf-8")
    return parse_profile(text, key=name_or_path, origin=f"profiles/{name_or_path}.yaml")


def parse_profile(text: str, *, key: str, origin: str) -> Profile:
    """Validate profile YAML *text*; errors name ``<origin>: <key>``."""
    try:
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise ProfileError(origin, f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(origin, "must be a mapping")
    return _Parser(origin).profile(data, key)


class _Parser:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, key: str, message: str) -> ProfileError:
        return ProfileError(f"{self.origin}: {key}", message)

    def profile(self, data: dict[object, object], key: str) -> Profile:
        self.unknown(data, _TOP_KEYS, "")
        name = self.text(data, "name", 95)
        default_count = self.integer(data, "default_count", 1, MAX_GPUS)
        driver_version = self.text(data, "driver_version", 79)
        cuda = self.integer(data, "cuda_driver_version", 1000, 99999)
        arch_name = self.text(data, "architecture", 32)
        if arch_name not in ARCHITECTURES:
            raise self.fail("architecture", f"unknown architecture {arch_name!r}")
        cc_text = self.text(data, "cuda_compute_capability", 8)
        match = re.fullmatch(r"(\d{1,2})\.(\d{1,2})", cc_text)
        if match is None:
            raise self.fail("cuda_compute_capability", f"must be MAJOR.MINOR, got {cc_text!r}")
        layout = data.get("layout")
        if not isinstance(layout, dict):
            raise self.fail("layout", "must be a mapping")
        self.unknown(layout, _LAYOUT_KEYS, "layout.")
        bus_ids = self.bus_ids(layout, "pci_bus_ids", "layout.pci_bus_ids")
        if len(bus_ids) != default_count:
            raise self.fail("layout.pci_bus_ids", f"must list default_count={default_count} ids")
        modules = self.int_list(layout, "module_ids", default_count)
        numa = self.int_list(layout, "numa_nodes", default_count)
        affinity = self.affinity(layout, set(numa))
        per_serial = self.integer(layout, "gpus_per_serial", 1, 8, prefix="layout.")
        per_group = self.integer(layout, "gpus_per_group", 1, MAX_GPUS, prefix="layout.")
        switches = self.bus_ids(layout, "nvswitch_bus_ids", "layout.nvswitch_bus_ids")
        rack_chassis = layout.get("rack_chassis", False)
        if not isinstance(rack_chassis, bool):
            raise self.fail("layout.rack_chassis", f"must be true or false, got {rack_chassis!r}")
        pci_class = self.pci_class(layout.get("pci_class", "0x030200"))
        machine = self.machine(layout.get("machine", ""))
        gpu = self.gpu(data.get("gpu"))
        if len(set(bus_ids)) != len(bus_ids):
            raise self.fail("layout.pci_bus_ids", "ids must be distinct")
        return Profile(
            key=key,
            name=name,
            default_count=default_count,
            driver_version=driver_version,
            cuda_driver_version=cuda,
            architecture=ARCHITECTURES[arch_name],
            architecture_name=arch_name,
            cuda_cc=(int(match.group(1)), int(match.group(2))),
            pci_bus_ids=bus_ids,
            module_ids=modules,
            numa_nodes=numa,
            cpu_affinity=MappingProxyType(affinity),
            gpus_per_serial=per_serial,
            gpus_per_group=per_group,
            nvswitch_bus_ids=switches,
            rack_chassis=rack_chassis,
            fabric=self.fabric(data.get("fabric")),
            gpu=MappingProxyType(gpu),
            mig=self.mig(data.get("mig"), gpu),
            pci_class=pci_class,
            machine=machine,
        )

    def machine(self, value: object) -> str:
        """A DMI product name: printable ASCII, at most 64 bytes (SMBIOS strings are short
        and the kernel shows them as they are), no leading or trailing blank."""
        if (
            not isinstance(value, str)
            or len(value) > 64
            or not all(" " <= c <= "~" for c in value)
            or value != value.strip()
        ):
            raise self.fail(
                "layout.machine",
                f"must be printable ASCII of at most 64 characters, no blank at either end, "
                f"got {value!r}",
            )
        return value

    def pci_class(self, value: object) -> int:
        known = ", ".join(f"0x{code:06x} ({mode})" for code, mode in PCI_CLASSES.items())
        code = (
            int(value, 16)
            if isinstance(value, str) and re.fullmatch(r"0x[0-9a-fA-F]{6}", value)
            else None
        )
        if code is None or code not in PCI_CLASSES:
            raise self.fail("layout.pci_class", f"must be one of {known}, got {value!r}")
        return code

    def mig(self, value: object, gpu: Mapping[str, ValueType]) -> tuple[MigGpuInstanceProfile, ...]:
        if value is None:
            if gpu.get("mig_capable"):
                raise self.fail("mig", "a MIG-capable board (gpu.mig_capable: 1) needs its table")
            return ()
        if not gpu.get("mig_capable"):
            raise self.fail("mig", "only a MIG-capable board (gpu.mig_capable: 1) has a table")
        try:
            return parse_mig_table(value)
        except ValueError as exc:
            raise self.fail("mig", str(exc)) from None

    def unknown(self, data: dict[object, object], allowed: frozenset[str], prefix: str) -> None:
        for item in data:
            if item not in allowed:
                raise self.fail(f"{prefix}{item}", "unknown key")

    def text(self, data: dict[object, object], key: str, max_len: int) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string, got {value!r}")
        if len(value.encode()) > max_len:
            raise self.fail(key, f"longer than {max_len} bytes")
        return value

    def integer(
        self, data: dict[object, object], key: str, low: int, high: int, prefix: str = ""
    ) -> int:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(prefix + key, f"must be an integer in {low}..{high}, got {value!r}")
        return value

    def bus_ids(self, data: dict[object, object], key: str, path: str) -> tuple[str, ...]:
        try:
            value = validate_value(KeySpec(Kind.BUS_ID_LIST, max_len=2**16), data.get(key, []))
        except ValueError as exc:
            raise self.fail(path, str(exc)) from None
        assert isinstance(value, tuple)
        return value

    def int_list(self, data: dict[object, object], key: str, count: int) -> tuple[int, ...]:
        value = data.get(key)
        if (
            not isinstance(value, list)
            or len(value) != count
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
        ):
            raise self.fail(f"layout.{key}", f"must be a list of {count} non-negative integers")
        return tuple(value)

    def affinity(self, data: dict[object, object], numa: set[int]) -> dict[int, str]:
        value = data.get("cpu_affinity")
        if not isinstance(value, dict):
            raise self.fail("layout.cpu_affinity", "must map each NUMA node to a cpu list")
        result: dict[int, str] = {}
        for node, cpus in value.items():
            path = f"layout.cpu_affinity.{node}"
            if not isinstance(node, int) or isinstance(node, bool) or node < 0:
                raise self.fail(path, "NUMA node must be a non-negative integer")
            try:
                validate_value(KeySpec(Kind.CPU_LIST), cpus)
            except ValueError as exc:
                raise self.fail(path, str(exc)) from None
            assert isinstance(cpus, str)
            result[node] = cpus
        missing = sorted(numa - set(result))
        if missing:
            raise self.fail("layout.cpu_affinity", f"no cpu list for NUMA node(s) {missing}")
        return result

    def fabric(self, value: object) -> FabricDefaults | None:
        if value is None:
            return None
        if not isinstance(value, dict) or set(value) != {"cluster_uuid", "clique_id"}:
            raise self.fail("fabric", "must be null or a mapping of cluster_uuid and clique_id")
        try:
            uuid = validate_value(GPU_KEYS["fabric_cluster_uuid"], value["cluster_uuid"])
            clique = validate_value(GPU_KEYS["fabric_clique_id"], value["clique_id"])
        except ValueError as exc:
            raise self.fail("fabric", str(exc)) from None
        assert isinstance(uuid, str) and isinstance(clique, int)
        return FabricDefaults(cluster_uuid=uuid.lower(), clique_id=clique)

    def gpu(self, value: object) -> dict[str, ValueType]:
        if not isinstance(value, dict):
            raise self.fail("gpu", "must be a mapping of state keys")
        result: dict[str, ValueType] = {}
        for key, raw in value.items():
            path = f"gpu.{key}"
            if key not in GPU_KEYS:
                raise self.fail(path, "unknown state key")
            if key in DERIVED_GPU_KEYS:
                raise self.fail(path, "is derived from the layout; set it in an override instead")
            try:
                result[key] = validate_value(GPU_KEYS[key], raw)
            except ValueError as exc:
                raise self.fail(path, str(exc)) from None
        required = set(GPU_KEYS) - DERIVED_GPU_KEYS - OPTIONAL_GPU_KEYS
        missing = sorted(required - set(result))
        if missing:
            raise self.fail("gpu", f"missing required key(s): {', '.join(missing)}")
        return result
