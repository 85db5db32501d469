"""The encoded CreateContainer answers of the common case, kept by what decides them.

Most containers of a node ask for nothing but the overlay: no device, IMEX channel or
driver-surface opt-in, no CDI devices, no ``cdi.k8s.io/*`` annotations, no
``/dev/nvidia*`` device nodes, not skipped. For them the answer (the mount and the env
entries of :func:`nvml_mock_nri.adjust.merge_env`) is a function of a few inputs only:

- the container's entries of the env keys the rules read (``PATH``, ``LD_LIBRARY_PATH``,
  ``MOCK_NVML_CONFIG``, ``NODE_NAME``, the three fabric keys, ``NVIDIA_VISIBLE_DEVICES``),
  the first of each, in the container's order (changed keys keep that order);
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

from collections.abc import Callable, Hashable
from typing import Final

from nvml_mock_protocol import names
from nvml_mock_protocol.nri import api_pb2

from nvml_mock_nri.adjust import Policy
from nvml_mock_nri.settings import normalize_path
from nvml_mock_nri.visible import CDI_ANNOTATION_PREFIX

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


def _opted_in(value: str) -> bool:
    return value.strip().lower() == "true"


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
    """
    annotations = pod.annotations
    if annotations:
        if annotations.get(policy.opt_out_annotation, "").strip().lower() == "false":
            return None  # a skip: logged and counted on the full path
        for key in (
            policy.device_annotation,
            policy.imex_annotation,
            names.ANNOTATION_DRIVER_SURFACES,
        ):
            if _opted_in(annotations.get(key, "")):
                return None
    if pod.namespace in policy.excluded_namespaces:
        return None
    if len(container.CDI_devices):
        return None
    for key in container.annotations:
        if key.startswith(CDI_ANNOTATION_PREFIX):
            return None
    if container.HasField("linux"):
        for device in container.linux.devices:
            if device.path.startswith(_GPU_NODE_PREFIX):
                return None
    target = policy.mount.destination
    needle = target.rsplit("/", 1)[-1] or "/"
    for mount in container.mounts:
        destination = mount.destination
        if destination == target or (
            needle in destination and normalize_path(destination) == target
        ):
            return None  # already mounted: a skip
    deciding: list[tuple[str, str]] = []
    seen: set[str] = set()
    for entry in container.env:
        key, sep, value = entry.partition("=")
        if sep and key in DECIDING_ENV_KEYS and key not in seen:
            seen.add(key)
            deciding.append((key, value))
    board = board_revision() if names.ENV_NVIDIA_VISIBLE_DEVICES in seen else None
    return (tuple(deciding), extra, board)


class ReplyCache:
    """Encoded answers by :func:`common_key`; emptied with :meth:`clear`."""

    __slots__ = ("_entries", "hits")

    def __init__(self) -> None:
        self._entries: dict[tuple[Hashable, ...], bytes] = {}
        self.hits = 0

    def get(self, key: tuple[Hashable, ...]) -> bytes | None:
        found = self._entries.get(key)
        if found is not None:
            self.hits += 1
        return found

    def put(self, key: tuple[Hashable, ...], reply: bytes) -> None:
        if len(self._entries) >= CACHE_ENTRIES:
            self._entries.clear()
        self._entries[key] = reply

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
