"""The ways check-fabric can fail before it reaches a verdict.

Every failure the tool can name is one of these, so that the command line maps
them to exit code 1 in one place and prints ``str(error)`` as the one line for each::

    CheckFabricError            anything check-fabric names and refuses to go on with
     ├── UsageError             the command line does not parse (unknown flag, missing value)
     ├── ConfigError            a flag or env value is invalid (names the key and value)
     ├── NvmlCallError          an NVML call failed (names the call, GPU index and NVML's reason)
     └── IdentityLookupError    the topology service could not be asked for the node's
                                identity, or its answer is unusable (names the URL)

The names are the project's own: ``nvml_mock_protocol.topology.TopologyError`` is an
invalid topology document, and the engine's nvidia-smi work-alike has its own
``NvmlError``; neither is raised here.

A mismatch, a GPU without fabric support, or a node without any GPU is not an
error: it is a verdict (see ``checks``), with its own exit code.
"""

from __future__ import annotations


class CheckFabricError(Exception):
    """Base of every failure check-fabric names; maps to exit code 1."""


class UsageError(CheckFabricError):
    """The command line does not parse; argparse's message, without its exit status 2.

    argparse exits 2 on a usage error, but 2 means "fabric not supported" to
    scripts written for the reference tool, so usage errors exit 1 here.
    """


class ConfigError(CheckFabricError):
    """A flag or env value is invalid."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__(f"invalid {key}={value!r}: {reason}")


class NvmlCallError(CheckFabricError):
    """An NVML call returned an error other than the ones check-fabric interprets.

    Its text starts in the reference tool's stderr form (``nvmlInit: <reason>``,
    ``handle[2]: <reason>``), which scripts written for it may grep.
    """

    def __init__(
        self,
        call: str,
        code: int,
        name: str,
        message: str,
        *,
        index: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.call = call
        self.code = code
        self.name = name
        self.message = message
        self.index = index
        self.hint = hint
        where = call if index is None else f"{call}[{index}]"
        text = f"{where}: {message} ({name}, code {code})"
        if hint:
            text += f"; {hint}"
        super().__init__(text)


class IdentityLookupError(CheckFabricError):
    """The topology service could not be reached or answered something unusable."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"topology: GET {url}: {reason}")
