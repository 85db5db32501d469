"""Which GPUs a container was given, and the ``NVIDIA_VISIBLE_DEVICES`` that says so.

On a real node the NVIDIA container toolkit narrows NVML inside a container to the GPUs
a device plugin or DRA driver allocated it. Those allocations reach the runtime in three
shapes, and :func:`visible_gpus` reads all of them from the NRI container, as plain data:

1. ``NVIDIA_VISIBLE_DEVICES`` in the container's env (the device plugin's ``envvar``
   strategy, or the pod itself). It is the container's own word and always wins.
2. CDI device names of the kind ``nvidia.com/gpu`` (``nvidia.com/gpu=0``,
   ``nvidia.com/gpu=GPU-…``, ``nvidia.com/gpu=all``, and for MIG devices the names
   ``nvidia-ctk cdi generate`` gives them, ``nvidia.com/gpu=<gpu>:<mig>`` and
   ``nvidia.com/gpu=MIG-…``), in the container's CDI devices or in its ``cdi.k8s.io/*``
   annotations (a comma list of fully qualified names each). A CDI device's name is the
   toolkit's ``NVIDIA_VISIBLE_DEVICES`` entry for it, so names pass through as written.
3. GPU device nodes ``/dev/nvidiaN`` in the container's Linux devices (the device plugin's
   ``volume-mounts``/device strategies). The mock stages ``/dev/nvidiaN`` for the GPU of
   index ``N`` (the rendered state's minor numbers are the indices), so ``N`` is the index.

4. NVIDIA's DRA driver's CDI names (``k8s.gpu.nvidia.com/claim=<uid>-gpu-<minor>``, its
   MIG and ComputeDomain kinds): the GPU of the minor, or the MIG device whose capability
   device nodes the container was given (:mod:`nvml_mock_nri.dra`). They count with the
   CDI names of 2.

With none of them the container holds no allocation: NVML shows every GPU of the node
(the ambient default) and nothing is recorded for it.

The toolkit's own CDI specs add ``NVIDIA_VISIBLE_DEVICES=void`` to every container that
gets one of their devices (so that the legacy hook leaves it alone); a ``void`` beside
``nvidia.com/gpu`` CDI names is therefore read as that spec's marker, not as the pod's
choice, and the CDI names decide. The DRA driver's specs do the same, so a ``void`` beside
any of its names is its marker too: the container sees what its claims give (nothing, for
a container with only ComputeDomain claims, as on a real node).

The grammar of the env value is the library's (the engine README, "Visible devices"):
``all``, ``none``, ``void`` or empty, or a comma list of indices, ``GPU-`` UUIDs (full or
a unique prefix), bus ids and MIG devices (``MIG-`` UUIDs, ``<gpu>:<mig>``); empty list
entries are ignored, ``all`` anywhere means all.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from nvml_mock_protocol import names

from nvml_mock_nri import dra

GPU_CDI_KIND: Final = "nvidia.com/gpu"
"""The CDI kind NVIDIA's device plugin, DRA driver and toolkit name GPUs with."""
CDI_ANNOTATION_PREFIX: Final = "cdi.k8s.io/"
"""Annotations whose values are comma lists of CDI device names (the CDI spec's rule)."""
VOID: Final = "void"
NONE: Final = "none"
ALL: Final = "all"

_GPU_NODE: Final = re.compile(r"/dev/nvidia([0-9]+)")
_MIG_INDEX: Final = re.compile(r"[0-9]+:[0-9]+")


def is_mig_entry(token: str) -> bool:
    """Whether *token* names a MIG device (``MIG-<uuid>``, or ``<gpu>:<mig>``: MIG device
    ``<mig>`` of GPU ``<gpu>``), which only the node's live MIG layout can resolve."""
    text = token.strip()
    return text.upper().startswith("MIG-") or _MIG_INDEX.fullmatch(text) is not None


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
    """``nvidia.com/gpu=…`` CDI names (devices or ``cdi.k8s.io/*`` annotations)."""
    DEVICE_NODES = "device_nodes"
    """``/dev/nvidiaN`` device nodes in the container's Linux devices."""
    AMBIENT = "ambient"
    """Nothing given: NVML shows every GPU, and the container holds none of them."""


@dataclass(frozen=True, slots=True)
class VisibleSelection:
    """The GPUs a container sees, as the tokens it was given (indices, UUIDs, bus ids).

    Tokens are kept as written (deduplicated, in first-seen order): resolving them to GPUs
    needs the node's state, which the library does at ``nvmlInit`` and the live-layer writer
    does when it records an allocation.
    """

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


class Container(dra.Container, Protocol):
    """The parts of an NRI ``Container`` that :func:`visible_gpus` reads: what
    :mod:`nvml_mock_nri.dra` reads, and the env."""

    @property
    def env(self) -> Iterable[str]: ...


def parse_visible_devices(
    value: str, source: VisibleSource = VisibleSource.ENV
) -> VisibleSelection:
    """A ``NVIDIA_VISIBLE_DEVICES`` value as a selection (the library's grammar)."""
    stripped = value.strip()
    if stripped in ("", VOID, NONE):
        return VisibleSelection(Visibility.NONE, (), source)
    tokens = _dedup(part.strip() for part in stripped.split(","))
    if any(token.lower() == ALL for token in tokens):
        return VisibleSelection(Visibility.ALL, (), source)
    if not tokens:
        return VisibleSelection(Visibility.NONE, (), source)
    return VisibleSelection(Visibility.LIST, tokens, source)


def cdi_gpu_names(container: Container) -> tuple[str, ...]:
    """The ``nvidia.com/gpu`` device names (after ``=``) the container was given through
    CDI, from its CDI devices and its ``cdi.k8s.io/*`` annotations, in first-seen order."""
    names_: list[str] = [d.name for d in container.CDI_devices]
    for key, value in container.annotations.items():
        if key.startswith(CDI_ANNOTATION_PREFIX):
            names_.extend(value.split(","))
    found: list[str] = []
    for qualified in names_:
        kind, sep, name = qualified.strip().partition("=")
        if sep and kind == GPU_CDI_KIND and name.strip():
            found.append(name.strip())
    return _dedup(found)


def gpu_device_indices(container: Container) -> tuple[str, ...]:
    """The indices ``N`` of the ``/dev/nvidiaN`` GPU nodes in the container's devices."""
    found: list[str] = []
    for device in container.linux.devices:
        match = _GPU_NODE.fullmatch(device.path)
        if match is not None:
            found.append(str(int(match.group(1))))
    return _dedup(found)


def may_hold_gpus(container: Container) -> bool:
    """False when none of :func:`visible_gpus`'s sources can name a GPU: no own
    ``NVIDIA_VISIBLE_DEVICES``, no CDI names (devices or ``cdi.k8s.io/*`` annotations) and no
    ``/dev/nvidia*`` node. A cheap test first, so that the life-cycle events of the many
    containers without GPUs skip the full reading."""
    if len(container.CDI_devices):  # type: ignore[arg-type]
        return True
    for key in container.annotations:
        if key.startswith(CDI_ANNOTATION_PREFIX):
            return True
    prefix = names.ENV_NVIDIA_VISIBLE_DEVICES + "="
    for entry in container.env:
        if entry.startswith(prefix):
            return True
    return any(device.path.startswith("/dev/nvidia") for device in container.linux.devices)


def visible_gpus(container: Container, mig: dra.MigSource | None = None) -> VisibleSelection:
    """The GPUs ``container`` holds: its own ``NVIDIA_VISIBLE_DEVICES``, else its
    ``nvidia.com/gpu`` and DRA CDI names, else its ``/dev/nvidiaN`` nodes, else none
    allocated (:data:`AMBIENT`: every GPU shown, none held). *mig* gives the node's MIG
    devices, which DRA MIG claims and MIG capability device nodes resolve against
    (:mod:`nvml_mock_nri.dra`); without it they name no device."""
    env = _env_value(container.env)
    cdi = cdi_gpu_names(container)
    claims = dra.gpu_tokens(container, mig)
    given = bool(cdi) or claims.present
    if env is not None and not (given and env.strip() == VOID):
        return parse_visible_devices(env)
    if given:
        tokens = _dedup((*cdi, *claims.tokens))
        if not tokens:
            return VisibleSelection(Visibility.NONE, (), VisibleSource.CDI)
        return parse_visible_devices(",".join(tokens), VisibleSource.CDI)
    nodes = gpu_device_indices(container)
    if nodes:
        return VisibleSelection(
            Visibility.LIST, _with_mig_caps(nodes, container, mig), VisibleSource.DEVICE_NODES
        )
    return AMBIENT


def _with_mig_caps(
    nodes: tuple[str, ...], container: Container, mig: dra.MigSource | None
) -> tuple[str, ...]:
    """GPU nodes with the MIG capability devices of some of their instances stand for
    those MIG devices (a real node's NVML shows the container the instances it can open)."""
    caps = dra.mig_caps(container)
    if not caps or mig is None:
        return nodes
    live = list(mig())
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


def visible_env(container: Container, mig: dra.MigSource | None = None) -> str | None:
    """The ``NVIDIA_VISIBLE_DEVICES`` value the plugin sets, or None to set nothing.

    Set only for a container that was given GPUs by CDI names or device nodes and does
    not choose for itself; a value the pod (or a device plugin's env strategy) set is
    never overwritten, and an unallocated container keeps the ambient all-GPUs view.
    """
    selection = visible_gpus(container, mig)
    if selection.source in (VisibleSource.CDI, VisibleSource.DEVICE_NODES):
        return selection.env_value()
    return None


def _env_value(entries: Iterable[str]) -> str | None:
    """The container's ``NVIDIA_VISIBLE_DEVICES``; the first entry wins, as getenv."""
    prefix = names.ENV_NVIDIA_VISIBLE_DEVICES + "="
    for entry in entries:
        if entry.startswith(prefix):
            return entry[len(prefix) :]
    return None


def _dedup(items: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return tuple(seen)
