"""What to inject into one container: pure decisions, no I/O, no protobuf.

The rules (skip, mount, env merge, device choice) live here as plain functions of
plain values so that each edge case is a one-line test and the NRI wiring in
:mod:`nvml_mock_nri.plugin` only translates. File-system look-ups (device nodes,
the CDI spec, the real-driver check) are passed in as callables, so the one place that touches the
disk is :mod:`nvml_mock_nri.devices`.

Env rules, all in :func:`merge_env`:

* Only keys the plugin adds or changes are returned; the runtime keeps the rest,
  and other NRI plugins own what they set (NRI fails a request when two plugins
  set the same key).
* ``PATH`` and ``LD_LIBRARY_PATH`` get the overlay's ``bin``/``lib`` prepended,
  unless they already hold it. An absent ``PATH`` becomes the overlay's ``bin``
  followed by the standard default search path that containerd itself gives a
  container without one: a ``PATH`` of only the overlay would hide ``sh``, ``ls``
  and every other command the image relies on. An empty ``PATH`` (the pod asked for
  no search path) or an absent/empty ``LD_LIBRARY_PATH`` (the loader's defaults
  apply after it anyway) becomes the overlay directory alone, never with a trailing
  ``:``, which would add the working directory to the search.
* ``MOCK_NVML_CONFIG`` and ``NODE_NAME`` are set only when the pod did not set
  them. The three fabric variables are one identity: if the pod set any of them,
  the plugin sets none, so a pod never sees half its own identity and half the
  node's.
* ``NVIDIA_VISIBLE_DEVICES`` is set to the GPUs a container was given by CDI names or
  device nodes (:meth:`nvml_mock_nri.selection.Selection.env_value`), so NVML inside shows
  exactly those; never when the container sets it itself.

What the container was given is read once, by :mod:`nvml_mock_nri.selection`; the rules
here read that value (:func:`plan` is the one entry of CreateContainer), never the
container's devices or CDI names themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from nvml_mock_protocol import names
from nvml_mock_protocol.hostgpu import HostDriver

from nvml_mock_nri.devices import DeviceNode, DeviceScan
from nvml_mock_nri.selection import Selection
from nvml_mock_nri.settings import Settings, normalize_path

DEFAULT_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The search path containerd gives a container whose image sets none."""

MOUNT_TYPE: Final = "bind"
MOUNT_OPTIONS: Final = ("rbind", "ro", "nosuid", "nodev")


class DeviceRefusal(enum.Enum):
    """Why an opted-in container gets no device nodes (GPU devices or IMEX channels);
    the value is the metric label."""

    NAMESPACE_NOT_ALLOWED = "namespace_not_allowed"
    """The pod's namespace is not in ``--device-namespaces``."""
    REAL_DRIVER = "real_driver"
    """A real NVIDIA driver is loaded on the node: the mock's majors are the real GPUs'."""


class SkipReason(enum.Enum):
    """Why a container gets no adjustment; the value is the metric label."""

    OPT_OUT = "opt_out"
    EXCLUDED_NAMESPACE = "excluded_namespace"
    OVERLAY_ALREADY_MOUNTED = "overlay_already_mounted"


@dataclass(frozen=True, slots=True)
class FabricIdentity:
    """The node's ComputeDomain identity, as the topology service reports it.

    What is injected, nothing more: the revision it was answered at belongs to the
    identity cache's snapshot.
    """

    domain: str
    cluster_uuid: str
    clique_id: int


@dataclass(frozen=True, slots=True)
class MountSpec:
    """One bind mount in NRI's terms."""

    source: str
    destination: str
    type: str = MOUNT_TYPE
    options: tuple[str, ...] = MOUNT_OPTIONS


@dataclass(frozen=True)
class Policy:
    """The settings that decide an adjustment, precomputed for the hot path."""

    mount: MountSpec
    bin_dir: str
    lib_dir: str
    state_path: str
    node_name: str
    excluded_namespaces: frozenset[str]
    opt_out_annotation: str
    device_annotation: str
    device_namespaces: frozenset[str]
    device_mode: str
    device_host_path: str
    cdi_device_name: str
    cdi_spec_host_path: str
    imex_annotation: str
    imex_host_path: str

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        """The policy the given settings describe."""
        mount_path = normalize_path(settings.overlay_mount_path)
        return cls(
            mount=MountSpec(
                source=normalize_path(settings.overlay_host_path), destination=mount_path
            ),
            bin_dir=f"{mount_path}/{names.OVERLAY_BIN_DIR}",
            lib_dir=f"{mount_path}/{names.OVERLAY_LIB_DIR}",
            state_path=f"{mount_path}/{names.OVERLAY_CONFIG_DIR}/{names.STATE_FILE_NAME}",
            node_name=settings.node_name,
            excluded_namespaces=settings.all_excluded_namespaces,
            opt_out_annotation=settings.opt_out_annotation,
            device_annotation=settings.device_annotation,
            device_namespaces=frozenset(settings.device_namespaces),
            device_mode=settings.device_injection_mode,
            device_host_path=settings.effective_device_host_path,
            cdi_device_name=settings.cdi_device_name,
            cdi_spec_host_path=settings.cdi_spec_host_path,
            imex_annotation=settings.imex_channel_annotation,
            imex_host_path=settings.effective_imex_channel_host_path,
        )


@dataclass(slots=True)
class Decision:
    """What one container gets. ``skip`` set means nothing at all."""

    skip: SkipReason | None = None
    mount: MountSpec | None = None
    env: list[tuple[str, str]] = field(default_factory=list)
    devices: list[DeviceNode] = field(default_factory=list)
    cdi_devices: list[str] = field(default_factory=list)
    devices_suppressed: bool = False
    """The pod opted in, but a device plugin already gave the container NVIDIA devices."""
    devices_refused: DeviceRefusal | None = None
    """The pod opted in, but the trust boundary forbids device nodes here."""
    imex_channels: list[DeviceNode] = field(default_factory=list)
    """IMEX channel devices, always raw (also in cdi mode)."""
    imex_refused: DeviceRefusal | None = None
    """The pod opted in to IMEX channels, but the trust boundary forbids them here."""
    surfaces_refused: DeviceRefusal | None = None
    """The pod opted in to the driver surfaces, but the trust boundary forbids them here
    (:mod:`nvml_mock_nri.surfaces`)."""
    warnings: list[str] = field(default_factory=list)
    """Things the operator should hear about (logged at WARNING by the caller)."""
    notes: list[str] = field(default_factory=list)
    """Decisions worth a line at INFO (e.g. devices suppressed for a device plugin)."""
    wants_devices: bool = False
    """The pod opted in to device nodes (whatever came of it)."""
    wants_imex_channels: bool = False
    """The pod opted in to IMEX channels (whatever came of it)."""


def skip_reason(
    policy: Policy,
    namespace: str,
    pod_annotations: Mapping[str, str],
    mount_destinations: Iterable[str],
) -> SkipReason | None:
    """The first rule that excludes this container, or None to inject it.

    Mount destinations are compared in one spelling (:func:`normalize_path`), so
    ``/opt//nvml-mock`` or ``/opt/nvml-mock/`` count as the overlay already mounted.
    """
    if pod_annotations.get(policy.opt_out_annotation, "").strip().lower() == "false":
        return SkipReason.OPT_OUT
    if namespace in policy.excluded_namespaces:
        return SkipReason.EXCLUDED_NAMESPACE
    target = policy.mount.destination
    for destination in mount_destinations:
        if destination == target or normalize_path(destination) == target:
            return SkipReason.OVERLAY_ALREADY_MOUNTED
    return None


def parse_env(entries: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` entries as a mapping; the first of duplicate keys wins (as getenv),
    entries without ``=`` are ignored."""
    env: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if sep and key and key not in env:
            env[key] = value
    return env


def _holds(search_path: str, directory: str) -> bool:
    # Only absolute entries can name the overlay; relative ones are searched from the cwd.
    return any(
        part.startswith("/") and normalize_path(part) == directory
        for part in search_path.split(":")
    )


def _prepended(current: str | None, directory: str, default: str) -> str | None:
    """The new value of a search path, or None when it already holds ``directory``."""
    if current is None:
        return f"{directory}:{default}" if default else directory
    if not current:
        return directory
    if _holds(current, directory):
        return None
    return f"{directory}:{current}"


def merge_env(
    policy: Policy,
    existing: Sequence[str],
    identity: FabricIdentity | None,
    visible: str | None = None,
) -> list[tuple[str, str]]:
    """The env entries to emit: changed keys in the container's order, then new keys.

    ``visible`` is the ``NVIDIA_VISIBLE_DEVICES`` the container's allocation asks for
    (:meth:`nvml_mock_nri.selection.Selection.env_value`); None sets nothing.
    """
    current = parse_env(existing)
    changed: dict[str, str] = {}
    path = _prepended(current.get(names.ENV_PATH), policy.bin_dir, DEFAULT_PATH)
    if path is not None:
        changed[names.ENV_PATH] = path
    ld_path = _prepended(current.get(names.ENV_LD_LIBRARY_PATH), policy.lib_dir, "")
    if ld_path is not None:
        changed[names.ENV_LD_LIBRARY_PATH] = ld_path
    if names.ENV_MOCK_NVML_CONFIG not in current:
        changed[names.ENV_MOCK_NVML_CONFIG] = policy.state_path
    if policy.node_name and names.ENV_NODE_NAME not in current:
        changed[names.ENV_NODE_NAME] = policy.node_name
    if identity is not None and not any(key in current for key in names.FABRIC_ENV_VARS):
        changed[names.ENV_FABRIC_CLUSTER_UUID] = identity.cluster_uuid
        changed[names.ENV_FABRIC_CLIQUE_ID] = str(identity.clique_id)
        changed[names.ENV_FABRIC_DOMAIN] = identity.domain
    if visible is not None and current.get(names.ENV_NVIDIA_VISIBLE_DEVICES) != visible:
        changed[names.ENV_NVIDIA_VISIBLE_DEVICES] = visible
    ordered = [(key, changed.pop(key)) for key in current if key in changed]
    ordered.extend(changed.items())
    return ordered


def wants_devices(policy: Policy, pod_annotations: Mapping[str, str]) -> bool:
    """Whether the pod opted in to device nodes."""
    return pod_annotations.get(policy.device_annotation, "").strip().lower() == "true"


def wants_imex_channels(policy: Policy, pod_annotations: Mapping[str, str]) -> bool:
    """Whether the pod opted in to the IMEX channel devices."""
    return pod_annotations.get(policy.imex_annotation, "").strip().lower() == "true"


def _refusal(
    policy: Policy,
    namespace: str,
    host_driver: Callable[[], HostDriver],
    what: str,
    reached: str,
) -> tuple[DeviceRefusal, str] | None:
    """The trust boundary of every pod-authored device opt-in: the namespace allow-list,
    then the real-driver check (in that order, so a refused namespace costs no I/O)."""
    if namespace not in policy.device_namespaces:
        return DeviceRefusal.NAMESPACE_NOT_ALLOWED, (
            f"{what} refused: namespace {namespace!r} is not allowed to opt in "
            "(--device-namespaces / NVML_MOCK_DEVICE_NAMESPACES); the overlay and env are "
            "still injected"
        )
    driver = host_driver()
    if driver.present:
        return DeviceRefusal.REAL_DRIVER, (
            f"{what} refused: {driver.reason}, so the mock's device numbers would "
            f"open {reached}; the overlay and env are still injected"
        )
    return None


def plan_devices(
    policy: Policy,
    decision: Decision,
    *,
    namespace: str,
    selection: Selection,
    host_driver: Callable[[], HostDriver],
    cdi_spec_exists: Callable[[str], bool],
    scan: Callable[[str], DeviceScan],
) -> None:
    """Fill ``decision`` with the devices of an opted-in container.

    Suppressed when the container already has NVIDIA devices: then a device plugin
    allocated it GPUs, and its allocation, not the annotation, decides what it sees.
    Refused (raw and CDI alike) outside the namespaces of ``--device-namespaces`` and
    on a node with a real NVIDIA driver, where the mock's device numbers name the
    real GPUs: the annotation is pod-authored, so it must not open the hardware.
    """
    if selection.nvidia_devices:
        decision.devices_suppressed = True
        decision.notes.append(
            "container already has NVIDIA devices from a device plugin or CDI; "
            "adding no mock devices (the overlay and env are still injected)"
        )
        return
    refusal = _refusal(policy, namespace, host_driver, "device nodes", "the real GPUs")
    if refusal is not None:
        decision.devices_refused, message = refusal
        decision.warnings.append(message)
        return
    if policy.device_mode == "cdi":
        if cdi_spec_exists(policy.cdi_spec_host_path):
            decision.cdi_devices.append(policy.cdi_device_name)
            return
        decision.warnings.append(
            f"device injection mode is cdi but the CDI spec {policy.cdi_spec_host_path} "
            "does not exist; falling back to raw device nodes"
        )
    result = scan(policy.device_host_path)
    decision.devices.extend(result.nodes)
    decision.warnings.extend(result.problems)


def plan_imex_channels(
    policy: Policy,
    decision: Decision,
    *,
    namespace: str,
    selection: Selection,
    host_driver: Callable[[], HostDriver],
    scan: Callable[[str], DeviceScan],
) -> None:
    """Fill ``decision`` with the IMEX channels of an opted-in container.

    Channels are raw device nodes in both device modes (no CDI spec describes them),
    independent of the GPU device opt-in, and never suppressed by a device plugin's
    GPU allocation: a workload that was given real or allocated GPUs still needs its
    channels. Only a channel path the container already has is left as it is (the
    runtime, a DRA driver or an earlier plugin put it there). The trust boundary is
    the device opt-in's: ``--device-namespaces``, and no channels on a node with a real
    NVIDIA driver, whose own channel major may be the staged one (the kernel hands out
    dynamic character majors from 254 downwards, where the stage picks its major).
    """
    refusal = _refusal(
        policy, namespace, host_driver, "IMEX channels", "the real driver's IMEX channels"
    )
    if refusal is not None:
        decision.imex_refused, message = refusal
        decision.warnings.append(message)
        return
    result = scan(policy.imex_host_path)
    decision.warnings.extend(result.problems)
    present = selection.device_paths
    for node in result.nodes:
        if node.path in present:
            decision.notes.append(
                f"container already has {node.path}; leaving that IMEX channel as it is"
            )
            continue
        decision.imex_channels.append(node)


def decide(
    policy: Policy,
    *,
    namespace: str,
    pod_annotations: Mapping[str, str],
    env: Sequence[str],
    mount_destinations: Iterable[str],
    identity: FabricIdentity | None,
    visible: str | None = None,
) -> Decision:
    """The skip, mount and env part of the decision (devices: :func:`plan_devices`)."""
    reason = skip_reason(policy, namespace, pod_annotations, mount_destinations)
    if reason is not None:
        return Decision(skip=reason)
    return Decision(mount=policy.mount, env=merge_env(policy, env, identity, visible))


def plan(
    policy: Policy,
    selection: Selection,
    *,
    namespace: str,
    pod_annotations: Mapping[str, str],
    env: Sequence[str],
    mount_destinations: Iterable[str],
    identity: FabricIdentity | None,
    host_driver: Callable[[], HostDriver],
    cdi_spec_exists: Callable[[str], bool],
    scan: Callable[[str], DeviceScan],
    scan_channels: Callable[[str], DeviceScan],
) -> Decision:
    """The whole decision for one container given *selection*: skip, mount and env
    (:func:`decide`), then the device nodes and IMEX channels the pod opted in to
    (:func:`plan_devices`, :func:`plan_imex_channels`). The one call CreateContainer makes
    here."""
    decision = decide(
        policy,
        namespace=namespace,
        pod_annotations=pod_annotations,
        env=env,
        mount_destinations=mount_destinations,
        identity=identity,
        visible=selection.env_value(),
    )
    if decision.skip is not None:
        return decision
    decision.wants_devices = wants_devices(policy, pod_annotations)
    decision.wants_imex_channels = wants_imex_channels(policy, pod_annotations)
    if decision.wants_devices:
        plan_devices(
            policy,
            decision,
            namespace=namespace,
            selection=selection,
            host_driver=host_driver,
            cdi_spec_exists=cdi_spec_exists,
            scan=scan,
        )
    if decision.wants_imex_channels:
        plan_imex_channels(
            policy,
            decision,
            namespace=namespace,
            selection=selection,
            host_driver=host_driver,
            scan=scan_channels,
        )
    return decision
