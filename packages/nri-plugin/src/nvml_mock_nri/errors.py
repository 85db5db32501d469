"""Errors of the NRI plugin, and which of them end the process.

::

    NriPluginError
     +-- ConfigError    bad flag, env value or runtime-sent config (exit 3)

The runtime connection's own failures (cannot connect, registration refused,
connection lost) are the protocol package's errors and the stub's disconnect
report; :mod:`nvml_mock_nri.service` turns them into exit code 1.

Everything that can go wrong while answering one CreateContainer call (a missing
device tree, a file that is not a character device, a topology service that does
not answer) is not an error here: the plugin logs it, counts it and injects what it
can, because failing the call would fail the user's container creation.
"""

from __future__ import annotations


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
