"""The driver surfaces opt-in: an OCI ``createContainer`` hook for the containers that ask.

NVIDIA's node software reads the driver's kernel surfaces at fixed paths
(``/proc/driver/nvidia``, ``/proc/devices``, ``/proc/modules``, ``/sys/bus/pci/devices``);
the staged overlay holds them under its driver root. runc refuses every mount under
``/proc`` in a container's spec, NRI's mounts included, so they are not mounts of the
adjustment: the plugin adds the overlay's ``bin/nvml-mock-surfaces-hook`` as a
``createContainer`` hook, which binds them in the container's mount namespace before the
root switch (``nvml_mock_node.surfaces_hook``), on runc and crun alike.

A pod opts in with ``nvml-mock.nvidia.com/driver-surfaces: "true"``, under the trust rules
of the device opt-in: its namespace must be allowed (``--device-namespaces``), and a node
with a real NVIDIA driver gets no hook (the mock's files would shadow the real driver's).
A runtime that refuses hook adjustments (containerd's ``default_validator`` with
``reject_oci_hook_adjustment``) fails such a pod's creation with its own message naming this
plugin; nothing else about the container changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from nvml_mock_protocol import names
from nvml_mock_protocol.hostgpu import HostDriver

from nvml_mock_nri.adjust import Decision, DeviceRefusal, Policy
from nvml_mock_nri.selection import Selection

__all__ = ["HOOK_TIMEOUT_S", "SurfacesHook", "plan_surfaces", "wants_surfaces"]

HOOK_TIMEOUT_S: Final = 10
"""The runtime kills a hook that runs longer (the hook binds a few dozen mounts)."""
VOID: Final = "void"
"""The toolkit's ``NVIDIA_VISIBLE_DEVICES`` value for "leave this container alone"."""


@dataclass(frozen=True, slots=True)
class SurfacesHook:
    """The hook one container gets: the launcher on the host and the driver root it shows."""

    path: str
    root: str

    @property
    def args(self) -> list[str]:
        return [names.SURFACES_HOOK, "--root", self.root]


def wants_surfaces(pod_annotations: Mapping[str, str]) -> bool:
    """Whether the pod opted in to the driver surfaces."""
    value = pod_annotations.get(names.ANNOTATION_DRIVER_SURFACES, "")
    return value.strip().lower() == "true"


def plan_surfaces(
    policy: Policy,
    decision: Decision,
    *,
    namespace: str,
    pod_annotations: Mapping[str, str],
    host_driver: Callable[[], HostDriver],
    selection: Selection,
) -> SurfacesHook | None:
    """The hook for a container of a pod that opted in, or None: not opted in, or refused
    with the refusal in *decision*'s warnings (a refused namespace costs no I/O, as for
    devices).

    A container granted the hook whose ``NVIDIA_VISIBLE_DEVICES`` (its own, or what
    *decision* sets) is the toolkit's ``void`` also gets ``MOCK_NVML_VISIBLE_DEVICES=all``:
    node software keeps ``void`` so the toolkit leaves it alone (NVIDIA's DRA driver chart
    does, in its GPU kubelet plugin) and sees every GPU through real NVML, which never reads
    the variable; the mock library reads its own twin first. A value the pod set for the
    twin is kept."""
    if not wants_surfaces(pod_annotations):
        return None
    if namespace not in policy.device_namespaces:
        decision.surfaces_refused = DeviceRefusal.NAMESPACE_NOT_ALLOWED
        decision.warnings.append(
            f"driver surfaces refused: namespace {namespace!r} is not allowed to opt in "
            "(--device-namespaces / NVML_MOCK_DEVICE_NAMESPACES); the overlay and env are "
            "still injected"
        )
        return None
    driver = host_driver()
    if driver.present:
        decision.surfaces_refused = DeviceRefusal.REAL_DRIVER
        decision.warnings.append(
            f"driver surfaces refused: {driver.reason}, and the mock's /proc/driver and PCI "
            "files would shadow the real driver's; the overlay and env are still injected"
        )
        return None
    root = policy.mount.source
    hook = SurfacesHook(path=f"{root}/{names.OVERLAY_BIN_DIR}/{names.SURFACES_HOOK}", root=root)
    decision.notes.append(f"driver surfaces: createContainer hook {hook.path}")
    visible = dict(decision.env).get(names.ENV_NVIDIA_VISIBLE_DEVICES, selection.own_env)
    if visible is not None and visible.strip().lower() == VOID and not selection.own_twin:
        decision.env.append((names.ENV_MOCK_NVML_VISIBLE_DEVICES, "all"))
        decision.notes.append(
            f"driver surfaces: {names.ENV_NVIDIA_VISIBLE_DEVICES}=void kept for the toolkit; "
            f"{names.ENV_MOCK_NVML_VISIBLE_DEVICES}=all shows the node's GPUs, as real NVML does"
        )
    return hook
