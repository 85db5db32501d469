"""Read the build information a Go linker embeds in every binary (``go version -m``).

The re-record command must know which NVIDIA component it drove without trusting ``--version``
(a binary built without the project's linker flags prints ``unknown``). Go writes the main
module's path and version and the VCS revision into a ``.go.buildinfo`` blob; since Go 1.18 the
strings are inline, each prefixed with its length as an unsigned varint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvml_mock_kwok.errors import RecordError

__all__ = ["GoBuild", "read_build"]

_MAGIC: Final = b"\xff Go buildinf:"
_HEADER: Final = 32
_INLINE: Final = 0x2
_SENTINEL: Final = 16


@dataclass(frozen=True)
class GoBuild:
    """What a Go binary says it is."""

    path: str
    module: str
    version: str
    revision: str
    modified: bool

    def describe(self) -> str:
        """The version and revision as one string, for a fixture's header."""
        suffix = "+modified" if self.modified else ""
        return f"{self.module}@{self.version} ({self.revision[:12]}{suffix})"


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            break
    raise ValueError("truncated varint")


def read_build(binary: Path) -> GoBuild:
    """Parse ``binary``'s Go build info; :class:`RecordError` when it is not a Go binary."""
    try:
        data = binary.read_bytes()
    except OSError as exc:
        raise RecordError(f"cannot read {binary}: {exc.strerror}") from exc
    at = data.find(_MAGIC)
    if at < 0 or len(data) < at + _HEADER:
        raise RecordError(f"{binary} carries no Go build info (not a Go binary?)")
    if not data[at + 15] & _INLINE:
        raise RecordError(
            f"{binary} was built by a Go older than 1.18; its build info is not inline"
        )
    try:
        size, pos = _uvarint(data, at + _HEADER)
        pos += size  # the Go version
        size, pos = _uvarint(data, pos)
        modinfo = data[pos : pos + size]
    except ValueError as exc:
        raise RecordError(f"{binary}: malformed Go build info ({exc})") from exc
    text = modinfo[_SENTINEL:-_SENTINEL].decode("utf-8", "replace") if size > 2 * _SENTINEL else ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "path" and len(parts) > 1:
            fields["path"] = parts[1]
        elif parts[0] == "mod" and len(parts) > 2:
            fields["module"], fields["version"] = parts[1], parts[2]
        elif parts[0] == "build" and len(parts) > 1 and "=" in parts[1]:
            key, _, value = parts[1].partition("=")
            fields[key] = value
    if "module" not in fields:
        raise RecordError(f"{binary}: its Go build info names no main module")
    return GoBuild(
        path=fields.get("path", ""),
        module=fields["module"],
        version=fields["version"],
        revision=fields.get("vcs.revision", ""),
        modified=fields.get("vcs.modified") == "true",
    )
