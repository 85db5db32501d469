"""The encoded CreateContainer answers of the common case, kept by what decides them.

Most containers of a node ask for nothing but the overlay: no device, IMEX channel,
driver-surface or CUDA runtime opt-in, no CDI devices, no ``cdi.k8s.io/*`` annotations, no
``/dev/nvidia*`` device nodes, not skipped. For them the answer (the mount and the env
entries of :func:`nvml_mock_nri.adjust.merge_env`) is a function of a few inputs only:

- the container's entries of the env keys the rules read (``PATH``, ``LD_LIBRARY_PATH``,
  ``MOCK_NVML_CONFIG``, ``NODE_NAME``, the three fabric keys, ``NVIDIA_VISIBLE_DEVICES``),
  in the container's order (changed keys keep that order; the first of a key decides);
- the node's fabric identity;
- with an own ``NVIDIA_VISIBLE_DEVICES``, the staged GPUs it is checked against (the
  state file's identity: a re-stage is a new key);
- the policy (runtime config; the cache is emptied when it changes).

:func:`common_key` reads exactly those, and says ``None`` for every other container,
which takes the full path. Two replicas of one Deployment differ in ``HOSTNAME`` and
the like, which decide nothing, so they share an entry. What is kept is the serialized
``CreateContainerResponse``: the rules, the message building and the encoding are paid
once per distinct key, not per container. Only answers the full path gave without a
warning or a note are kept, so a cached answer never hides a log line.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from operator import methodcaller
from typing import Final

from nvml_mock_protocol import names
from nvml_mock_protocol.nri import api_pb2

from nvml_mock_nri.adjust import Policy
from nvml_mock_nri.selection import CDI_ANNOTATION_PREFIX
from nvml_mock_nri.settings import normalize_path

__all__ = ["DECIDING_ENV_KEYS", "ReplyCache", "common_key"]

DECIDING_ENV_KEYS: Final = frozenset(
    {
        names.ENV_PATH,
        names.ENV_LD_LIBRARY_PATH,
        names.ENV_MOCK_NVML_CONFIG,
        names.ENV_NODE_NAME,
        *names.FABRIC_ENV_VARS,
        names.ENV_NVIDIA_VISIBLE_DEVICES,
    }
)
"""The env keys whose values the injection rules read; every other key decides nothing."""
CACHE_ENTRIES: Final = 1024
"""Distinct answers kept; past it the cache starts again (a node rarely has so many)."""
_GPU_NODE_PREFIX: Final = "/dev/nvidia"
_SURFACES: Final = names.ANNOTATION_DRIVER_SURFACES
_CUDA_RUNTIME: Final = names.ANNOTATION_CUDA_RUNTIME
_VISIBLE_PREFIX: Final = f"{names.ENV_NVIDIA_VISIBLE_DEVICES}="


_DECIDING_PREFIXES: Final = tuple(f"{key}=" for key in sorted(DECIDING_ENV_KEYS))
"""``KEY=`` of every deciding key: one C-level ``startswith`` rules out the other entries."""
_DECIDES: Final = methodcaller("startswith", _DECIDING_PREFIXES)


def _opted_in(value: str) -> bool:
    return value.strip().lower() == "true"


def _annotations_decide(policy: Policy, annotations: Mapping[str, str]) -> bool:
    """Whether the pod's annotations opt it out of the overlay or in to anything more."""
    if annotations.get(policy.opt_out_annotation, "").strip().lower() == "false":
        return True  # a skip: logged and counted on the full path
    if _CUDA_RUNTIME in annotations:
        return True  # a preload, or a warning about the value: the full path
    return any(
        _opted_in(annotations.get(key, ""))
        for key in (policy.device_annotation, policy.imex_annotation, _SURFACES)
    )


def _mounted(policy: Policy, mounts: Iterable[api_pb2.Mount]) -> bool:
    """Whether a mount of the container is already at the overlay's destination."""
    target = policy.mount.destination
    needle = target.rsplit("/", 1)[-1] or "/"
    for mount in mounts:
        destination = mount.destination
        if destination == target or (
            needle in destination and normalize_path(destination) == target
        ):
            return True
    return False


def common_key(
    policy: Policy,
    pod: api_pb2.PodSandbox,
    container: api_pb2.Container,
    *,
    extra: Hashable,
    board_revision: Callable[[], Hashable],
) -> tuple[Hashable, ...] | None:
    """The key of *container*'s answer when it is the common case, else ``None``.

    *extra* is what else decides the answer (the identity); *board_revision* is asked
    only when the container sets its own ``NVIDIA_VISIBLE_DEVICES``.

    This runs for every container, mostly with cold caches (the runtime does much between
    two creations), so each test is one C-level call where one does: empty repeated fields
    and maps are false, and ``startswith`` with a tuple rules out env entries that decide
    nothing without splitting them.
    """
    annotations = pod.annotations
    if annotations and _annotations_decide(policy, annotations):
        return None
    if pod.namespace in policy.excluded_namespaces or container.CDI_devices:
        return None
    if container.annotations and any(
        key.startswith(CDI_ANNOTATION_PREFIX) for key in container.annotations
    ):
        return None
    if container.HasField("linux") and any(
        device.path.startswith(_GPU_NODE_PREFIX) for device in container.linux.devices
    ):
        return None
    if container.mounts and _mounted(policy, container.mounts):
        return None  # already mounted: a skip
    # Every deciding entry, in the container's order: a key that repeats (whose first
    # entry decides) only makes the key more particular than it need be, never wrong.
    deciding = tuple(filter(_DECIDES, container.env))
    board = None
    for entry in deciding:
        if entry.startswith(_VISIBLE_PREFIX):
            board = board_revision()
            break
    return (deciding, extra, board)


class ReplyCache(dict[tuple[Hashable, ...], bytes]):
    """Encoded answers by :func:`common_key`; emptied with :meth:`clear`.

    A dict itself, so a look-up is one C call (``get``); the caller counts :attr:`hits`."""

    __slots__ = ("hits",)

    def __init__(self) -> None:
        super().__init__()
        self.hits = 0

    def put(self, key: tuple[Hashable, ...], reply: bytes) -> None:
        if len(self) >= CACHE_ENTRIES:
            self.clear()
        self[key] = reply
