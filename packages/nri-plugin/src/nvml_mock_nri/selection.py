"""What one container was given, read once from the runtime's request into one value.

The NRI container carries every shape in which a device plugin, a DRA driver or the pod
itself hands a container GPUs. :func:`select` reads all of them, once per container and
event, into a frozen :class:`Selection`; the adjustment (:mod:`nvml_mock_nri.adjust`), the
refusals (:mod:`nvml_mock_nri.unknown_devices`), the driver-surfaces hook
(:mod:`nvml_mock_nri.surfaces`) and the allocation records (:mod:`nvml_mock_nri.allocations`)
read only that value, never the container's devices, CDI names or env themselves. So the
plugin's CreateContainer enters each module once, in this order (``tests/test_selection.py``
traces it):

1. :mod:`~nvml_mock_nri.replies` — is the answer kept (the common case)? If so, done;
2. :mod:`~nvml_mock_nri.selection` — this module: the :class:`Selection`;
3. :mod:`~nvml_mock_nri.adjust` — skip, mount, env, device nodes and IMEX channels;
4. :mod:`~nvml_mock_nri.unknown_devices` — the refusal of a GPU the node lacks;
5. :mod:`~nvml_mock_nri.surfaces` — the driver-surfaces hook;
6. :mod:`~nvml_mock_nri.cuda_runtime` — the CUDA runtime work-alike's preload.

The shapes, and what each means (on a real node the NVIDIA container toolkit narrows NVML
inside a container to what it was allocated):

1. ``NVIDIA_VISIBLE_DEVICES`` in the container's env (the device plugin's ``envvar``
   strategy, or the pod itself). It is the container's own word for what it *sees* and wins.
2. CDI device names of the kind ``nvidia.com/gpu`` (``=0``, ``=GPU-…``, ``=all``, MIG devices
   as ``=<gpu>:<mig>`` and ``=MIG-…``), in the container's CDI devices or in its
   ``cdi.k8s.io/*`` annotations (comma lists of fully qualified names).
3. NVIDIA's DRA driver's names: ``k8s.gpu.nvidia.com/claim=<uid>-gpu-<minor>`` (a GPU),
   ``…-gpu-<minor>-mig-<profile>-<profile id>-<start>`` (a MIG device: the one whose GPU and
   compute instance capability nodes the container was given, in the node's live MIG
   layout), ``…-gpu-vfio-<n>`` and the ComputeDomain kinds (no GPU). They count with 2.
4. GPU device nodes ``/dev/nvidiaN`` (the mock stages the GPU of index ``N`` at minor ``N``)
   and MIG capability nodes ``/dev/nvidia-caps/nvidia-cap<N>``.

Seeing and holding differ. What a container *sees* (the ``NVIDIA_VISIBLE_DEVICES`` it keeps
or gets) is its own business: 1 wins, else 2 and 3, else 4. What it *holds* on the node
(the allocation records every NVML client reads) is only what the runtime gave it: the
GPUs and MIG devices whose device nodes are in its request (:meth:`Selection.gives_gpu`,
:meth:`Selection.gives_mig`); a name without its node (an own env value, an annotation
naming another pod's claim) is a *declaration* that never touches a GPU another container
was given (:mod:`nvml_mock_nri.allocations` says what declarations may record).

The toolkit's and the DRA driver's CDI specs add ``NVIDIA_VISIBLE_DEVICES=void`` to every
container they give a device, so a ``void`` beside such names is the spec's marker, not the
pod's choice, and the names decide.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from nvml_mock_live.mig import MigDevice
from nvml_mock_protocol import names
from nvml_mock_protocol.mig_caps import MigCap, cap_of_path

__all__ = [
    "AMBIENT",
    "CDI_ANNOTATION_PREFIX",
    "GPU_CLAIM_KIND",
    "DraDevice",
    "DraKind",
    "MigSource",
    "Selection",
    "Visibility",
    "VisibleSelection",
    "VisibleSource",
    "is_mig_entry",
    "parse_visible_devices",
    "select",
    "unresolvable_message",
]

GPU_CDI_KIND: Final = "nvidia.com/gpu"
"""The CDI kind NVIDIA's device plugin, DRA driver and toolkit name GPUs with."""
NVIDIA_CDI_PREFIX: Final = "nvidia.com/"
"""CDI names of NVIDIA's device plugin and toolkit (a device plugin served the container)."""
CDI_ANNOTATION_PREFIX: Final = "cdi.k8s.io/"
"""Annotations whose values are comma lists of CDI device names (the CDI spec's rule)."""
GPU_CLAIM_KIND: Final = "k8s.gpu.nvidia.com/claim"
"""The CDI vendor and class of the DRA driver's GPU kubelet plugin's per-claim specs."""
CD_CLAIM_KIND: Final = "k8s.compute-domain.nvidia.com/claim"
"""The compute-domain kubelet plugin's per-claim specs (channels)."""
CD_DEVICE_KIND: Final = "k8s.compute-domain.nvidia.com/device"
"""The compute-domain kubelet plugin's base spec (the daemon's ``all``)."""
GPU_NODE_PREFIX: Final = "/dev/nvidia"
VOID: Final = "void"
NONE: Final = "none"
ALL: Final = "all"

_GPU_NODE: Final = re.compile(r"/dev/nvidia([0-9]+)")
_MIG_INDEX: Final = re.compile(r"[0-9]+:[0-9]+")
_UID: Final = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU: Final = re.compile(rf"(?P<uid>{_UID})-gpu-(?P<minor>[0-9]+)")
_MIG: Final = re.compile(
    rf"(?P<uid>{_UID})-gpu-(?P<minor>[0-9]+)-mig-(?P<profile>[a-z0-9][a-z0-9-]*)"
    r"-(?P<pid>[0-9]+)-(?P<start>[0-9]+)"
)
_VFIO: Final = re.compile(rf"(?P<uid>{_UID})-gpu-vfio-(?P<n>[0-9]+)")
_CHANNEL: Final = re.compile(rf"(?P<uid>{_UID})-channel-(?P<id>[0-9]+)")
_DAEMON: Final = re.compile(rf"(?P<uid>{_UID})-daemon-(?P<id>[0-9]+)")
_VISIBLE: Final = names.ENV_NVIDIA_VISIBLE_DEVICES + "="
_TWIN: Final = names.ENV_MOCK_NVML_VISIBLE_DEVICES + "="
_PRELOAD: Final = names.ENV_LD_PRELOAD + "="

MigSource = Callable[[], Sequence[MigDevice]]
"""The node's MIG devices now; called only for a container that has MIG claims or MIG
capability devices, at most once per :func:`select`."""


def is_mig_entry(token: str) -> bool:
    """Whether *token* names a MIG device (``MIG-<uuid>``, or ``<gpu>:<mig>``: MIG device
    ``<mig>`` of GPU ``<gpu>``), which only the node's live MIG layout can resolve."""
    text = token.strip()
    return text.upper().startswith("MIG-") or _MIG_INDEX.fullmatch(text) is not None


def unresolvable_message(qualified: str) -> str:
    """The runtime's words for a CDI name it cannot resolve (containerd's CDI injection)."""
    return f"unresolvable CDI devices {qualified}"


# -- what a container sees -----------------------------------------------------


class Visibility(enum.Enum):
    """How many GPUs a selection names."""

    ALL = "all"
    """Every GPU of the node."""
    NONE = "none"
    """No GPU (``none``, ``void`` or an empty value)."""
    LIST = "list"
    """Exactly the GPUs in :attr:`VisibleSelection.tokens`."""


class VisibleSource(enum.Enum):
    """Where a selection came from; the ambient one is no allocation at all."""

    ENV = "env"
    """``NVIDIA_VISIBLE_DEVICES`` in the container's own env."""
    CDI = "cdi"
    """``nvidia.com/gpu=…`` or DRA CDI names (devices or ``cdi.k8s.io/*`` annotations)."""
    DEVICE_NODES = "device_nodes"
    """``/dev/nvidiaN`` device nodes in the container's Linux devices."""
    AMBIENT = "ambient"
    """Nothing given: NVML shows every GPU, and the container holds none of them."""


@dataclass(frozen=True, slots=True)
class VisibleSelection:
    """The GPUs a container sees, as the tokens it was given (indices, UUIDs, bus ids, MIG
    devices), kept as written (deduplicated, first-seen order): resolving them needs the
    node's state, which the library does at ``nvmlInit`` and the recorder at start."""

    kind: Visibility
    tokens: tuple[str, ...] = ()
    source: VisibleSource = VisibleSource.AMBIENT

    @property
    def allocated(self) -> bool:
        """Whether a device plugin, DRA driver or the pod chose the GPUs (not the ambient
        all-GPUs default)."""
        return self.source is not VisibleSource.AMBIENT

    def env_value(self) -> str:
        """The ``NVIDIA_VISIBLE_DEVICES`` value that shows exactly these GPUs."""
        if self.kind is Visibility.ALL:
            return ALL
        if self.kind is Visibility.NONE:
            return NONE
        return ",".join(self.tokens)


AMBIENT: Final = VisibleSelection(Visibility.ALL)
"""No allocation: every GPU, nothing held."""


def parse_visible_devices(
    value: str, source: VisibleSource = VisibleSource.ENV
) -> VisibleSelection:
    """A ``NVIDIA_VISIBLE_DEVICES`` value as a selection (the library's grammar: ``all``,
    ``none``, ``void`` or empty, or a comma list; empty entries ignored, ``all`` anywhere
    means all)."""
    stripped = value.strip()
    if stripped in ("", VOID, NONE):
        return VisibleSelection(Visibility.NONE, (), source)
    tokens = _dedup(part.strip() for part in stripped.split(","))
    if any(token.lower() == ALL for token in tokens):
        return VisibleSelection(Visibility.ALL, (), source)
    if not tokens:
        return VisibleSelection(Visibility.NONE, (), source)
    return VisibleSelection(Visibility.LIST, tokens, source)


# -- DRA names -----------------------------------------------------------------


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


def _parse_dra(qualified: str) -> DraDevice | str | None:
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


# -- the container, as read here ------------------------------------------------


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
    """The parts of an NRI ``Container`` that :func:`select` reads."""

    @property
    def env(self) -> Iterable[str]: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...
    @property
    def CDI_devices(self) -> Iterable[_CdiDevice]: ...  # noqa: N802 - the NRI field name
    @property
    def linux(self) -> _Linux: ...


@dataclass(frozen=True, slots=True)
class Selection:
    """Everything one container was given, as one value (see the module docstring)."""

    visible: VisibleSelection = AMBIENT
    """What NVML inside the container shows."""
    own_env: str | None = None
    """The container's own ``NVIDIA_VISIBLE_DEVICES`` (the first entry, as getenv)."""
    own_twin: bool = False
    """Whether the container sets the library's twin ``MOCK_NVML_VISIBLE_DEVICES`` itself."""
    own_preload: str | None = None
    """The container's own ``LD_PRELOAD`` (where the CUDA runtime opt-in puts the overlay's
    runtime work-alikes in front)."""
    device_paths: frozenset[str] = frozenset()
    """Every device path in the request (the runtime's, a device plugin's, earlier plugins')."""
    gpu_nodes: frozenset[int] = frozenset()
    """``N`` of every ``/dev/nvidiaN``: the GPUs the runtime gave the container nodes of."""
    mig_caps: frozenset[tuple[int, int, int]] = frozenset()
    """``(gpu, gpu instance, compute instance)`` of every compute instance capability node
    whose GPU instance capability node is there too: the MIG devices it can open."""
    nvidia_devices: bool = False
    """Whether it already has a ``/dev/nvidia*`` node or an ``nvidia.com/`` CDI device (a
    device plugin or CDI served it: the mock's own device nodes are not added)."""
    runtime_tokens: tuple[str, ...] = ()
    """The GPU tokens of the names in the container's CDI devices alone (which the
    runtime resolved and a pod spec cannot write), as opposed to ``cdi.k8s.io/*``
    annotations and the env."""
    claims: tuple[DraDevice, ...] = ()
    """The DRA devices named, once each in first-seen order."""
    unresolved: tuple[str, ...] = ()
    """DRA names that name nothing here whatever the node's GPU count: malformed names of
    the DRA kinds, and MIG claims without the capability nodes of a live MIG device."""

    @property
    def may_hold(self) -> bool:
        """Whether the container names or was given any GPU (not ambient, not none)."""
        return self.visible.allocated and self.visible.kind is not Visibility.NONE

    @property
    def named(self) -> bool:
        """Whether names (the env, CDI names, claims) chose the GPUs, not device nodes."""
        return self.visible.source in (VisibleSource.ENV, VisibleSource.CDI)

    def env_value(self) -> str | None:
        """The ``NVIDIA_VISIBLE_DEVICES`` the plugin sets, or None to set nothing: only for a
        container given GPUs by CDI names or device nodes that does not choose itself (a
        ``void`` beside names is their spec's marker, which they replace)."""
        if self.visible.source in (VisibleSource.CDI, VisibleSource.DEVICE_NODES):
            value = self.visible.env_value()
            return None if value == self.own_env else value
        return None

    def gives_gpu(self, gpu: int) -> bool:
        """Whether the runtime gave the container the node of board GPU *gpu*."""
        return gpu in self.gpu_nodes

    def gives_mig(self, device: MigDevice) -> bool:
        """Whether the runtime gave the container *device*: its parent's node and the GPU
        and compute instance capability nodes."""
        return device.gpu in self.gpu_nodes and (
            (device.gpu, device.gpu_instance, device.compute_instance) in self.mig_caps
        )


EMPTY: Final = Selection()
"""A container given nothing: no own ``NVIDIA_VISIBLE_DEVICES``, no CDI names, no
``/dev/nvidia*`` node."""


def select(container: Container, mig: MigSource | None = None) -> Selection:
    """What *container* was given (module docstring). *mig* gives the node's MIG devices,
    which MIG claims and MIG capability nodes resolve against (asked at most once, and only
    when the container has either); without it they name no device."""
    own_env: str | None = None
    own_twin = False
    own_preload: str | None = None
    for entry in container.env:
        if entry.startswith(_VISIBLE):
            if own_env is None:
                own_env = entry[len(_VISIBLE) :]
        elif entry.startswith(_TWIN):
            own_twin = True
        elif own_preload is None and entry.startswith(_PRELOAD):
            own_preload = entry[len(_PRELOAD) :]
    device_names = [d.name.strip() for d in container.CDI_devices]
    annotated: list[str] = []
    for key, value in container.annotations.items():
        if key.startswith(CDI_ANNOTATION_PREFIX):
            annotated.extend(part.strip() for part in value.split(","))
    paths = [d.path for d in container.linux.devices]
    if own_env is None and not device_names and not annotated and not paths:
        if own_twin or own_preload is not None:
            return Selection(own_twin=own_twin, own_preload=own_preload)
        return EMPTY

    gpu_nodes: list[int] = []
    gi_caps: set[tuple[int, int]] = set()
    ci_caps: list[MigCap] = []
    nvidia_devices = False
    for path in paths:
        if path.startswith(GPU_NODE_PREFIX):
            nvidia_devices = True
            match = _GPU_NODE.fullmatch(path)
            if match is not None:
                gpu_nodes.append(int(match.group(1)))
                continue
        cap = cap_of_path(path)
        if cap is None:
            continue
        if cap.compute_instance is None:
            gi_caps.add((cap.gpu, cap.gpu_instance))
        elif cap not in ci_caps:
            ci_caps.append(cap)
    caps = [c for c in ci_caps if (c.gpu, c.gpu_instance) in gi_caps]
    if any(n.startswith(NVIDIA_CDI_PREFIX) for n in device_names):
        nvidia_devices = True

    # the names: nvidia.com/gpu names, then DRA claims (from devices, then annotations)
    claims: dict[str, DraDevice] = {}
    unresolved: list[str] = []
    gpu_names: list[str] = []
    runtime_names: list[str] = []
    from_devices = len(device_names)
    for position, qualified in enumerate((*device_names, *annotated)):
        if not qualified:
            continue
        kind, sep, name = qualified.partition("=")
        if sep and kind == GPU_CDI_KIND:
            if name.strip():
                gpu_names.append(name.strip())
                if position < from_devices:
                    runtime_names.append(name.strip())
            continue
        parsed = _parse_dra(qualified)
        if isinstance(parsed, DraDevice):
            claims.setdefault(qualified, parsed)
            if position < from_devices:
                runtime_names.append(qualified)
        elif isinstance(parsed, str) and parsed not in unresolved:
            unresolved.append(parsed)

    live: Sequence[MigDevice] = ()
    if (caps or ci_caps) and mig is not None:
        live = mig()
    claim_tokens: dict[str, list[str]] = {}
    for claim in claims.values():
        if claim.kind is DraKind.GPU:
            claim_tokens[claim.qualified] = [str(claim.number)]
        elif claim.kind is DraKind.MIG:
            found = [
                d.uuid
                for d in live
                for c in caps
                if c.gpu == claim.number
                and (d.gpu, d.gpu_instance, d.compute_instance)
                == (c.gpu, c.gpu_instance, c.compute_instance)
            ]
            if not found:
                unresolved.append(claim.qualified)
            claim_tokens[claim.qualified] = found
    given = bool(gpu_names) or bool(claims) or bool(unresolved)
    named_tokens = _dedup((*gpu_names, *(t for ts in claim_tokens.values() for t in ts)))

    if own_env is not None and not (given and own_env.strip() == VOID):
        visible = parse_visible_devices(own_env)
    elif given:
        visible = (
            parse_visible_devices(",".join(named_tokens), VisibleSource.CDI)
            if named_tokens
            else VisibleSelection(Visibility.NONE, (), VisibleSource.CDI)
        )
    elif gpu_nodes:
        visible = VisibleSelection(
            Visibility.LIST,
            _with_mig_caps(_dedup(map(str, gpu_nodes)), ci_caps, live),
            VisibleSource.DEVICE_NODES,
        )
    else:
        visible = AMBIENT
    runtime_tokens = _dedup(
        t
        for qualified in runtime_names
        for t in claim_tokens.get(qualified, [] if qualified in claims else [qualified])
    )
    return Selection(
        visible=visible,
        own_env=own_env,
        own_twin=own_twin,
        own_preload=own_preload,
        device_paths=frozenset(paths),
        gpu_nodes=frozenset(gpu_nodes),
        mig_caps=frozenset((c.gpu, c.gpu_instance, c.compute_instance or 0) for c in caps),
        nvidia_devices=nvidia_devices,
        runtime_tokens=runtime_tokens,
        claims=tuple(claims.values()),
        unresolved=tuple(unresolved),
    )


def _with_mig_caps(
    nodes: tuple[str, ...], caps: Sequence[MigCap], live: Sequence[MigDevice]
) -> tuple[str, ...]:
    """GPU nodes with the MIG capability devices of some of their instances stand for
    those MIG devices (a real node's NVML shows the container the instances it can open)."""
    if not caps or not live:
        return nodes
    out: list[str] = []
    for node in nodes:
        mine = [
            d.uuid
            for d in live
            for c in caps
            if str(d.gpu) == node
            and (d.gpu, d.gpu_instance, d.compute_instance)
            == (c.gpu, c.gpu_instance, c.compute_instance)
        ]
        out.extend(mine or [node])
    return _dedup(out)


def _dedup(items: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return tuple(seen)
