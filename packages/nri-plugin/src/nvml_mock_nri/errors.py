"""Errors of the NRI plugin, and which of them end the process.

::

    NriPluginError              base of everything this package raises on purpose
     +-- ConfigError            bad flag, env value or runtime-sent config (fatal: exit 3)
     +-- IdentityError          one failed request to the topology service (``kind`` is the
                                metric label); retried with backoff, never fatal
     +-- UnknownDeviceError     a container's own NVIDIA_VISIBLE_DEVICES names a GPU the node
                                lacks: its CreateContainer fails, as with the toolkit

``ConfigError`` is fatal because the same input fails the same way on every try.
``IdentityError`` is transient by nature (the service restarts, the network heals): the
identity watch counts it, keeps the last known identity and asks again.

The runtime connection's own failures (cannot connect, registration refused,
connection lost) are the protocol package's errors and the stub's disconnect
report; :mod:`nvml_mock_nri.service` turns them into exit code 1.

Everything that can go wrong while answering one CreateContainer call (a missing
device tree, a file that is not a character device, a topology service that does
not answer) is not an error here: the plugin logs it, counts it and injects what it
can, because failing the call would fail the user's container creation. The one
exception is :class:`UnknownDeviceError`, where a real node fails the creation too.
"""

from __future__ import annotations

__all__ = ["ConfigError", "IdentityError", "NriPluginError", "UnknownDeviceError"]


class NriPluginError(Exception):
    """Base class of every error this package raises."""


class ConfigError(NriPluginError):
    """A configuration key has a value the plugin cannot use.

    The message names the key (flag, env var or runtime config key) and the value.
    """

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__(f"{key}={value!r}: {reason}")


class IdentityError(NriPluginError):
    """One identity request to the topology service failed.

    ``kind`` is one of :data:`nvml_mock_nri.metrics.TOPOLOGY_ERROR_KINDS` (``connect``,
    ``timeout``, ``http_status``, ``bad_response``) and labels the failure metric.
    """

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


class UnknownDeviceError(NriPluginError):
    """A container's own ``NVIDIA_VISIBLE_DEVICES`` names a device the node does not have.

    ``entry`` is the first such entry; the message is the NVIDIA container toolkit's
    (``nvidia-container-cli: device error: <entry>: unknown device``), which the runtime
    reports as the container's creation error.
    """

    def __init__(self, entry: str, message: str) -> None:
        self.entry = entry
        super().__init__(message)
