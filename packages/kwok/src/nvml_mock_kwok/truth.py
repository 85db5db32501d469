"""Recorded truth: what NVIDIA's components published on one mock node of a profile.

One JSON fixture per variant (a profile, with or without a MIG layout) under ``truth/``,
written by ``nvml-mock-kwok record`` and read by the generator. A variant without a fixture
has no recorded truth and is refused: a fake node is never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

from nvml_mock_kwok.errors import TruthError
from nvml_mock_kwok.identity import Identity

__all__ = [
    "COMPONENTS",
    "SCHEMA_VERSION",
    "STRATEGIES",
    "Truth",
    "load_truth",
    "truth_dir",
    "variants",
]

SCHEMA_VERSION: Final = 1
STRATEGIES: Final = ("none", "single", "mixed")
"""The device plugin's and GFD's MIG strategies."""
COMPONENTS: Final = (
    "nvidia-device-plugin",
    "gpu-feature-discovery",
    "gpu-kubelet-plugin",
    "compute-domain-kubelet-plugin",
)
"""The NVIDIA components a recording drives, by their binaries' names."""
GPU_DRIVER: Final = "gpu.nvidia.com"
COMPUTE_DOMAIN_DRIVER: Final = "compute-domain.nvidia.com"


def truth_dir() -> Path:
    """Where the package keeps its fixtures."""
    return Path(str(resources.files("nvml_mock_kwok") / "truth"))


def variants(directory: Path | None = None) -> tuple[str, ...]:
    """The variants with recorded truth."""
    root = directory or truth_dir()
    return tuple(sorted(p.stem for p in root.glob("*.json")))


@dataclass(frozen=True)
class Truth:
    """One fixture, read and checked."""

    variant: str
    profile: str
    gpu_count: int
    mig: str | None
    identity: Identity
    components: Mapping[str, Mapping[str, Any]]
    device_plugin: Mapping[str, Mapping[str, Mapping[str, int]]]
    """Per strategy: per resource, ``capacity`` and ``allocatable``."""
    gfd: Mapping[str, Mapping[str, str]]
    """Per strategy: the labels GFD writes."""
    resource_slices: Mapping[str, list[dict[str, Any]]]
    """Per DRA driver: the specs of the slices it publishes for the node."""
    faults: Mapping[str, Mapping[str, Any]]
    """Per recorded fault (``xid79``): what the components published with it on GPU 0."""
    data: Mapping[str, Any]

    def strategy(self, name: str) -> tuple[Mapping[str, Mapping[str, int]], Mapping[str, str]]:
        """The device plugin's resources and GFD's labels under MIG strategy ``name``."""
        if name not in self.device_plugin or name not in self.gfd:
            recorded = ", ".join(sorted(set(self.device_plugin) & set(self.gfd))) or "none"
            raise TruthError(
                f"variant {self.variant} has no recorded truth for MIG strategy {name!r} "
                f"(recorded: {recorded})"
            )
        return self.device_plugin[name], self.gfd[name]


def _need(data: Mapping[str, Any], key: str, kind: type, source: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind):
        raise TruthError(f"{source}: {key} must be a {kind.__name__}, got {value!r}")
    return value


def parse_truth(data: Mapping[str, Any], source: str) -> Truth:
    """Check one fixture's shape; :class:`TruthError` names the file and the key."""
    if data.get("schemaVersion") != SCHEMA_VERSION:
        raise TruthError(
            f"{source}: schemaVersion must be {SCHEMA_VERSION}, got {data.get('schemaVersion')!r}"
        )
    try:
        identity = Identity.from_data(_need(data, "identity", dict, source))
    except (KeyError, TypeError, ValueError) as exc:
        raise TruthError(f"{source}: identity is malformed ({exc})") from exc
    mig = data.get("mig")
    return Truth(
        variant=_need(data, "variant", str, source),
        profile=_need(data, "profile", str, source),
        gpu_count=_need(data, "gpuCount", int, source),
        mig=mig if isinstance(mig, str) else None,
        identity=identity,
        components=_need(data, "components", dict, source),
        device_plugin=_need(data, "devicePlugin", dict, source),
        gfd=_need(data, "gfd", dict, source),
        resource_slices=data.get("resourceSlices") or {},
        faults=data.get("faults") or {},
        data=data,
    )


def load_truth(variant: str, directory: Path | None = None) -> Truth:
    """The recorded truth of ``variant``; :class:`TruthError` when there is none."""
    root = directory or truth_dir()
    path = root / f"{variant}.json"
    if not path.is_file():
        known = ", ".join(variants(root)) or "none"
        raise TruthError(
            f"profile {variant!r} has no recorded truth (recorded: {known}); "
            "record it with `nvml-mock-kwok record`"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TruthError(f"{path.name}: cannot read the fixture ({exc})") from exc
    if not isinstance(data, dict):
        raise TruthError(f"{path.name}: a fixture is a JSON object")
    return parse_truth(data, path.name)
