"""What NVIDIA's DRA driver gave a container, read from its CDI names and device nodes.

NVIDIA's DRA driver (``k8s-dra-driver-gpu``) writes one transient CDI spec per prepared
claim and hands the runtime fully qualified CDI names of its own vendors and classes:

====================================================  =========================================
``k8s.gpu.nvidia.com/claim=<claim uid>-gpu-<minor>``   a whole GPU, named by its device minor
``k8s.gpu.nvidia.com/claim=<uid>-gpu-<minor>-mig-<profile>-<profile id>-<placement start>``
                                                       a MIG device of the GPU of that minor
``k8s.gpu.nvidia.com/claim=<uid>-gpu-vfio-<n>``        a GPU passed through to a VM (no NVML)
``k8s.compute-domain.nvidia.com/claim=<uid>-channel-<id>``  an IMEX channel of a ComputeDomain
``k8s.compute-domain.nvidia.com/device=all``           the compute-domain daemon's driver files
====================================================  =========================================

Each spec's common edits set ``NVIDIA_VISIBLE_DEVICES=void`` (so that a legacy toolkit hook
leaves the container alone) and its device edits add the device nodes: ``/dev/nvidia<minor>``
for a GPU, and for a MIG device its parent's node and the two capability devices of its GPU
and compute instances (``/dev/nvidia-caps/nvidia-cap<N>``, minors from
:mod:`nvml_mock_protocol.mig_caps`). The runtime has applied all of it before the plugin sees
the container, so the plugin reads the names (``CDI_devices``, ``cdi.k8s.io/*`` annotations)
for which claim kinds were given, and the device nodes for which GPU and which instances:

- a GPU claim shows the GPU of its minor (the mock stages ``/dev/nvidia<N>`` for the GPU of
  index ``N``, so the minor is the index);
- a MIG claim shows the MIG device whose GPU and compute instance capabilities the container
  was given, looked up in the node's live MIG layout (as a real node's NVML shows the MIG
  device a container can open); the profile and placement in the name are the scheduler's
  view and are not needed;
- channel and daemon claims give no GPU: a container with only those and the spec's
  ``void`` sees none, as on a real node.

A name of these kinds that names nothing of this node (a minor past the node's GPUs, a MIG
claim without the capability devices of a live MIG device of its GPU, a malformed name) is
*unresolvable*: the plugin fails the container's creation with the runtime's words for a CDI
name it cannot resolve, as the node's runtime does for a name no spec defines.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from nvml_mock_live.mig import MigDevice
from nvml_mock_protocol.mig_caps import MigCap, cap_of_path

__all__ = [
    "CD_CLAIM_KIND",
    "CD_DEVICE_KIND",
    "GPU_CLAIM_KIND",
    "DraDevice",
    "DraKind",
    "MigSource",
    "dra_devices",
    "gpu_tokens",
    "mig_caps",
    "unresolvable_message",
]

GPU_CLAIM_KIND: Final = "k8s.gpu.nvidia.com/claim"
"""The CDI vendor and class of the GPU kubelet plugin's per-claim specs."""
CD_CLAIM_KIND: Final = "k8s.compute-domain.nvidia.com/claim"
"""The compute-domain kubelet plugin's per-claim specs (channels)."""
CD_DEVICE_KIND: Final = "k8s.compute-domain.nvidia.com/device"
"""The compute-domain kubelet plugin's base spec (the daemon's ``all``)."""
CDI_ANNOTATION_PREFIX: Final = "cdi.k8s.io/"

_UID: Final = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU: Final = re.compile(rf"(?P<uid>{_UID})-gpu-(?P<minor>[0-9]+)")
_MIG: Final = re.compile(
    rf"(?P<uid>{_UID})-gpu-(?P<minor>[0-9]+)-mig-(?P<profile>[a-z0-9][a-z0-9-]*)"
    r"-(?P<pid>[0-9]+)-(?P<start>[0-9]+)"
)
_VFIO: Final = re.compile(rf"(?P<uid>{_UID})-gpu-vfio-(?P<n>[0-9]+)")
_CHANNEL: Final = re.compile(rf"(?P<uid>{_UID})-channel-(?P<id>[0-9]+)")
_DAEMON: Final = re.compile(rf"(?P<uid>{_UID})-daemon-(?P<id>[0-9]+)")

MigSource = Callable[[], Sequence[MigDevice]]
"""The node's MIG devices now; called only for a container that has MIG claims or MIG
capability devices."""


class DraKind(enum.Enum):
    """What one DRA CDI name gives."""

    GPU = "gpu"
    MIG = "mig"
    VFIO = "vfio"
    CHANNEL = "channel"
    DAEMON = "daemon"


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One DRA CDI name, parsed: its claim, and the GPU minor or channel id it names."""

    qualified: str
    kind: DraKind
    claim: str
    number: int
    """The GPU's minor (GPU, MIG), the vfio index, or the channel or daemon id."""


class _Device(Protocol):
    @property
    def path(self) -> str: ...


class _Linux(Protocol):
    @property
    def devices(self) -> Iterable[_Device]: ...


class _CdiDevice(Protocol):
    @property
    def name(self) -> str: ...


class Container(Protocol):
    """The parts of an NRI ``Container`` read here."""

    @property
    def annotations(self) -> Mapping[str, str]: ...
    @property
    def CDI_devices(self) -> Iterable[_CdiDevice]: ...  # noqa: N802 - the NRI field name
    @property
    def linux(self) -> _Linux: ...


def unresolvable_message(qualified: str) -> str:
    """The runtime's words for a CDI name it cannot resolve (containerd's CDI injection)."""
    return f"unresolvable CDI devices {qualified}"


def cdi_names(container: Container) -> list[str]:
    """Every CDI name the container was given (devices, then ``cdi.k8s.io/*`` annotations)."""
    found = [d.name.strip() for d in container.CDI_devices]
    for key, value in container.annotations.items():
        if key.startswith(CDI_ANNOTATION_PREFIX):
            found.extend(part.strip() for part in value.split(","))
    return [name for name in found if name]


def _parse(qualified: str) -> DraDevice | str | None:
    """The DRA device of *qualified*; None for a name of another vendor; the name itself
    when it is of a DRA vendor but malformed."""
    kind, sep, name = qualified.partition("=")
    if not sep:
        return None
    if kind == GPU_CLAIM_KIND:
        for pattern, dra_kind, group in (
            (_GPU, DraKind.GPU, "minor"),
            (_MIG, DraKind.MIG, "minor"),
            (_VFIO, DraKind.VFIO, "n"),
        ):
            match = pattern.fullmatch(name)
            if match is not None:
                return DraDevice(qualified, dra_kind, match["uid"], int(match[group]))
        return qualified
    if kind == CD_CLAIM_KIND:
        for pattern, dra_kind in ((_CHANNEL, DraKind.CHANNEL), (_DAEMON, DraKind.DAEMON)):
            match = pattern.fullmatch(name)
            if match is not None:
                return DraDevice(qualified, dra_kind, match["uid"], int(match["id"]))
        return qualified
    if kind == CD_DEVICE_KIND:
        return DraDevice(qualified, DraKind.DAEMON, "", -1) if name == "all" else qualified
    return None


def dra_devices(container: Container) -> tuple[list[DraDevice], list[str]]:
    """The DRA devices the container was given, once each in first-seen order, and the
    names of DRA kinds that do not parse (unresolvable)."""
    devices: dict[str, DraDevice] = {}
    bad: list[str] = []
    for qualified in cdi_names(container):
        parsed = _parse(qualified)
        if isinstance(parsed, DraDevice):
            devices.setdefault(qualified, parsed)
        elif isinstance(parsed, str) and parsed not in bad:
            bad.append(parsed)
    return list(devices.values()), bad


def mig_caps(container: Container) -> list[MigCap]:
    """The compute instance capabilities among the container's device nodes (the GPU
    instance ``access`` nodes beside them add nothing to which device it is)."""
    caps: list[MigCap] = []
    for device in container.linux.devices:
        cap = cap_of_path(device.path)
        if cap is not None and cap.compute_instance is not None and cap not in caps:
            caps.append(cap)
    return caps


def _has_gi(container: Container, cap: MigCap) -> bool:
    wanted = MigCap(cap.gpu, cap.gpu_instance)
    return any(cap_of_path(d.path) == wanted for d in container.linux.devices)


@dataclass(frozen=True, slots=True)
class GpuTokens:
    """What DRA names give a container: ``NVIDIA_VISIBLE_DEVICES`` tokens, whether any DRA
    name was present at all, and the names that resolve to nothing of this node."""

    tokens: tuple[str, ...]
    present: bool
    unresolved: tuple[str, ...]


def gpu_tokens(
    container: Container, mig: MigSource | None = None, gpu_count: int | None = None
) -> GpuTokens:
    """The GPUs and MIG devices the container's DRA claims give, as the library's tokens
    (GPU indices, ``MIG-`` UUIDs). *gpu_count* (the node's GPUs, when known) and *mig* (the
    node's MIG devices) judge which names resolve; without them no GPU name is refused and
    MIG claims stay unresolved."""
    devices, bad = dra_devices(container)
    tokens: list[str] = []
    unresolved: list[str] = list(bad)
    mig_claims = [d for d in devices if d.kind is DraKind.MIG]
    for device in devices:
        if device.kind is DraKind.GPU:
            if gpu_count is not None and device.number >= gpu_count:
                unresolved.append(device.qualified)
            elif str(device.number) not in tokens:
                tokens.append(str(device.number))
    if mig_claims:
        live = list(mig()) if mig is not None else []
        caps = [c for c in mig_caps(container) if _has_gi(container, c)]
        for claim in mig_claims:
            mine = [c for c in caps if c.gpu == claim.number]
            found = [
                d
                for d in live
                for c in mine
                if (d.gpu, d.gpu_instance, d.compute_instance)
                == (c.gpu, c.gpu_instance, c.compute_instance)
            ]
            if not found:
                unresolved.append(claim.qualified)
            for d in found:
                if d.uuid not in tokens:
                    tokens.append(d.uuid)
    return GpuTokens(tuple(tokens), bool(devices or bad), tuple(unresolved))
