"""The names every part of nvml-mock agrees on.

Env var names, paths, annotations, the NRI plugin identity and ports live here
once, so that the plugin that injects a value, the library that reads it, the
Helm chart that wires it and the demo that checks it cannot drift apart. Each
is a default; the services let flags and env twins override them.
"""

from __future__ import annotations

# Not ``from typing import Final``: short-lived commands (nvidia-smi, nvml-mock-ctl,
# check-fabric) import these names, and typing (with the re it brings) costs them
# milliseconds; type checkers treat this constant as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# Overlay: staged on the host, bind-mounted read-only into every container.
OVERLAY_HOST_PATH: Final = "/var/lib/nvml-mock"
OVERLAY_MOUNT_PATH: Final = "/opt/nvml-mock"
OVERLAY_LIB_DIR: Final = "lib"
OVERLAY_BIN_DIR: Final = "bin"
OVERLAY_CONFIG_DIR: Final = "config"
OVERLAY_DEV_DIR: Final = "dev"
OVERLAY_CDI_DIR: Final = "cdi"
OVERLAY_RUNTIME_DIR: Final = "runtime"
OVERLAY_IMEX_DIR: Final = "imex"
"""In the overlay, beside ``dev/``: what NVIDIA's DRA driver reads for the IMEX channels."""
IMEX_PROC_DEVICES_FILE: Final = "proc-devices"
"""The substitute ``/proc/devices`` at ``<overlay>/imex/proc-devices`` (its format exactly)."""
IMEX_CHANNELS_DIR: Final = "nvidia-caps-imex-channels"
"""IMEX channel nodes: ``dev/nvidia-caps-imex-channels/channelN`` in the overlay,
``/dev/nvidia-caps-imex-channels/channelN`` in containers; also the name of their major."""
LIBRARY_NAME: Final = "libnvidia-ml.so.1"
STATE_FILE_NAME: Final = "state.nvmlmock"
"""Rendered GPU state inside ``config/``; the library's fallback when MOCK_NVML_CONFIG is unset."""
LIVE_FILE_NAME: Final = "live.nvmlmock"
"""The live layer beside the state in ``config/`` (values that change at run time)."""
OVERLAY_CUDA_SOCKET: Final = "run/cuda.sock"
"""In the overlay: the unix socket through which the NRI plugin publishes, for a CUDA process
in a container (which sees the overlay read-only), its memory use into the live layer. The
mock libcuda finds it at ``<overlay>/run/cuda.sock``, the overlay being the directory above
``config/``."""
ENV_MOCK_CUDA_PUBLISH_SOCKET: Final = "MOCK_CUDA_PUBLISH_SOCKET"
"""Names that socket for the mock libcuda instead (empty: publish through no socket)."""
ENV_OVERLAY_HOST_PATH: Final = "NVML_MOCK_OVERLAY_HOST_PATH"
"""Where the overlay is staged on the node (the stager, the NRI plugin's mount source)."""
ENV_OVERLAY_MOUNT_PATH: Final = "NVML_MOCK_OVERLAY_MOUNT_PATH"
"""Where containers see the overlay (the NRI plugin's mount target, the launchers' fallback)."""
ENV_LOCK_DIR: Final = "NVML_MOCK_LOCK_DIR"
"""Where the overlay's writers keep their lock files: outside the overlay, given to no
container (a read-only holder of a shared file could otherwise stop every writer)."""
DEFAULT_LOCK_DIR: Final = "/run/nvml-mock"


# Env vars injected into containers (and read by the library and tools).
ENV_PATH: Final = "PATH"
ENV_LD_LIBRARY_PATH: Final = "LD_LIBRARY_PATH"
ENV_MOCK_NVML_CONFIG: Final = "MOCK_NVML_CONFIG"
ENV_MOCK_NVML_LIVE: Final = "MOCK_NVML_LIVE"
"""The live layer the library maps (default: ``live.nvmlmock`` beside the state)."""
ENV_NODE_NAME: Final = "NODE_NAME"
ENV_FABRIC_CLUSTER_UUID: Final = "MOCK_FABRIC_CLUSTER_UUID"
ENV_FABRIC_CLIQUE_ID: Final = "MOCK_FABRIC_CLIQUE_ID"
ENV_FABRIC_DOMAIN: Final = "MOCK_FABRIC_DOMAIN"
FABRIC_ENV_VARS: Final = (ENV_FABRIC_CLUSTER_UUID, ENV_FABRIC_CLIQUE_ID, ENV_FABRIC_DOMAIN)
ENV_NVIDIA_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
ENV_LD_PRELOAD: Final = "LD_PRELOAD"
"""Set only for pods annotated :data:`ANNOTATION_CUDA_RUNTIME` (the NRI plugin)."""
"""The GPUs NVML enumerates in a container (the NVIDIA container toolkit's variable): the
library reads it at init; the NRI plugin sets it from a container's CDI GPUs or GPU nodes."""
ENV_MOCK_NVML_VISIBLE_DEVICES: Final = "MOCK_NVML_VISIBLE_DEVICES"
"""The mock library's own twin of ``NVIDIA_VISIBLE_DEVICES`` (same grammar), read first when
set: the NRI plugin sets it to ``all`` in a container given the driver surfaces whose
``NVIDIA_VISIBLE_DEVICES`` is the toolkit's ``void``, since such a driver component sees every
GPU of the node, as real NVML, which never reads the toolkit's variable."""

# Logging: every command reads these (flags win); see ``nvml_mock_protocol.logs``.
ENV_LOG_FORMAT: Final = "NVML_MOCK_LOG_FORMAT"
"""``text`` or ``json``: the shape of every log line on stderr."""
ENV_LOG_LEVEL: Final = "NVML_MOCK_LOG_LEVEL"
"""The lowest level logged: ``debug``, ``info``, ``warning`` or ``error``."""
LOG_FORMATS: Final = ("text", "json")
"""The values of ``--log-format`` / ``NVML_MOCK_LOG_FORMAT`` (the lines: ``logs``)."""
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
"""The values of ``--log-level`` / ``NVML_MOCK_LOG_LEVEL`` every command accepts."""

# Pod annotations.
ANNOTATION_PREFIX: Final = "nvml-mock.nvidia.com/"
ANNOTATION_INJECT: Final = "nvml-mock.nvidia.com/inject"
"""``"false"`` (case-insensitive) opts a pod out of injection."""
ANNOTATION_DEVICES: Final = "nvml-mock.nvidia.com/devices"
"""``"true"`` (case-insensitive) opts a pod in to mock device nodes."""
ANNOTATION_IMEX_CHANNELS: Final = "nvml-mock.nvidia.com/imex-channels"
"""``"true"`` (case-insensitive) opts a pod in to the IMEX channel device nodes."""
ANNOTATION_DRIVER_SURFACES: Final = "nvml-mock.nvidia.com/driver-surfaces"
"""``"true"`` (case-insensitive) opts a pod in to the driver root's kernel surfaces at their
fixed paths (``/proc/driver/nvidia``, ``/proc/devices``, ``/sys/bus/pci/devices``, ...)."""
SURFACES_HOOK: Final = "nvml-mock-surfaces-hook"
"""The overlay's ``bin/`` launcher of the OCI hook that shows a container those surfaces."""
ANNOTATION_GPU_MEMORY: Final = "nvml-mock.nvidia.com/gpu-memory"
"""Framebuffer memory a pod's container uses on each GPU it holds (``20Gi``, ``512Mi``, bytes)."""
ANNOTATION_GPU_UTILIZATION: Final = "nvml-mock.nvidia.com/gpu-utilization"
"""Utilization pattern of a pod's container on its GPUs (``60``, ``steady 60``, ``busy``,
``burst 80 period=10s``, ``sine``)."""
ANNOTATION_CUDA_RUNTIME: Final = "nvml-mock.nvidia.com/cuda-runtime"
"""``"true"`` (case-insensitive) preloads the overlay's CUDA runtime work-alikes
(:data:`CUDA_RUNTIME_PRELOADS`) into the pod's containers; never without it."""
CUDA_RUNTIME_PRELOADS: Final = (
    "lib/cuda-runtime/libcudart.so.13",
    "lib/cuda-runtime/libcudart.so.12",
)
"""The CUDA runtime work-alikes, relative to the overlay, in preload order: one per CUDA
major that PyTorch wheels load (by their sonames, which a preloaded library satisfies)."""
ENV_GPU_MEMORY_SHARE: Final = "NVML_MOCK_GPU_MEMORY_SHARE"
"""The NRI plugin's default share of a GPU's memory a container uses without the annotation."""

# CDI.
CDI_KIND: Final = "nvml-mock.nvidia.com/gpu"
CDI_DEVICE_NAME: Final = "nvml-mock.nvidia.com/gpu=all"
CDI_SPEC_HOST_PATH: Final = "/var/run/cdi/nvml-mock-nri.yaml"

# NRI plugin identity.
NRI_PLUGIN_NAME: Final = "nvml-mock"
NRI_PLUGIN_INDEX: Final = "10"
NRI_SOCKET_PATH: Final = "/var/run/nri/nri.sock"
ENV_NRI_SOCKET_PATH: Final = "NRI_SOCKET_PATH"
"""The env twin of the plugin's ``--socket-path`` (the runtime's socket it dials)."""
ENV_NRI_PLUGIN_INDEX: Final = "NRI_PLUGIN_INDEX"
"""The env twin of the plugin's ``--plugin-index``."""
ENV_NRI_PLUGIN_SOCKET: Final = "NRI_PLUGIN_SOCKET"
"""Set by a runtime that launches the plugin: the inherited socket's fd (always ``3``)."""
ENV_NRI_PLUGIN_NAME: Final = "NRI_PLUGIN_NAME"
"""Set by a runtime that launches the plugin: the name part of ``NN-name``."""
ENV_NRI_PLUGIN_IDX: Final = "NRI_PLUGIN_IDX"
"""Set by a runtime that launches the plugin: the two-digit index part of ``NN-name``."""
EXCLUDED_NAMESPACES: Final = ("kube-system",)
"""Always excluded; the release namespace is added by the deployment."""

# Ports.
TOPOLOGY_SERVICE_PORT: Final = 8090
NRI_PLUGIN_HEALTH_PORT: Final = 8080
EXPORTER_PORT: Final = 9400
"""The metrics exporter's port: dcgm-exporter's, which the GPU operator's Service names
``gpu-metrics``."""
EXPORTER_PORT_NAME: Final = "gpu-metrics"

# Topology service HTTP paths.
TOPOLOGY_IDENTITY_PATH: Final = "/v1/nodes/{node}/identity"
TOPOLOGY_DOCUMENT_PATH: Final = "/v1/topology"

# Scenarios (served by the topology service, applied by the node agent).
SCENARIOS_NODE_PATH: Final = "/v1/nodes/{node}/scenarios"
SCENARIOS_REPORT_PATH: Final = "/v1/nodes/{node}/scenarios/status"
SCENARIOS_LIST_PATH: Final = "/v1/scenarios"
SCENARIOS_FILE_NAME: Final = "scenarios.yaml"
APPLIED_FILE_NAME: Final = "scenarios.applied.json"
"""What the node agent applied, beside the live layer in ``config/`` (survives its restarts)."""
AGENT_PROBE_PORT: Final = 8091
