"""NVIDIA's IMEX node list (``IMEX_NODE_CONFIG_FILE``): one node per line, an IPv4 or IPv6
address or a host name, in the same order on every node of the domain (the order is the
node's index, ``Node #N`` in ``nvidia-imex-ctl -N``).

The DRA driver's compute-domain daemon writes either the pod IPs of the daemons of its
clique, or (its ``IMEXDaemonsWithDNSNames`` feature gate, on by default) a fixed list of
``compute-domain-daemon-<n>`` names, of which only those of running daemons resolve (it maps
them in ``/etc/hosts``). A name that does not resolve is therefore no error: that node is not
part of the domain yet, and is looked up again on ``SIGUSR1`` and every few seconds. A line
that is neither an address nor a valid host name, or an entry given twice, is an error.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvml_mock_imex.errors import NodeListError
from nvml_mock_imex.textfile import read_small

__all__ = ["NodeEntry", "load_nodes", "parse_nodes"]

_LABEL: Final = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
MAX_NODES: Final = 1024
"""More nodes than any NVLink domain holds (NVL72: 18 trays); a longer list is a mistake."""


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """One line of the node list: its index and the address or name as written."""

    index: int
    name: str

    @property
    def is_address(self) -> bool:
        try:
            ipaddress.ip_address(self.name)
        except ValueError:
            return False
        return True


def _valid_host(name: str) -> bool:
    if len(name) > 253:
        return False
    return all(_LABEL.fullmatch(label) for label in name.rstrip(".").split("."))


def parse_nodes(text: str, path: str = "<node list>") -> list[NodeEntry]:
    """The nodes of *text*. Raises :class:`NodeListError` naming the line."""
    entries: list[NodeEntry] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if any(c.isspace() for c in line):
            raise NodeListError(
                f"{path}:{number}: {line!r} is not one address or host name per line"
            )
        try:
            name = str(ipaddress.ip_address(line))
        except ValueError:
            if not _valid_host(line) or line.replace(".", "").isdigit():
                raise NodeListError(
                    f"{path}:{number}: {line!r} is neither an IP address nor a host name"
                ) from None
            name = line.lower()
        if name in seen:
            raise NodeListError(
                f"{path}:{number}: duplicate node {line!r} (already on line {seen[name]})"
            )
        seen[name] = number
        entries.append(NodeEntry(len(entries), name))
        if len(entries) > MAX_NODES:
            raise NodeListError(f"{path}: more than {MAX_NODES} nodes")
    if not entries:
        raise NodeListError(f"{path}: the node list names no node")
    return entries


def load_nodes(path: str | Path) -> list[NodeEntry]:
    """The node list at *path*. Raises :class:`NodeListError` naming it."""
    try:
        text = read_small(path)
    except (OSError, ValueError) as exc:
        raise NodeListError(f"cannot read the IMEX node list {path}: {exc}") from None
    return parse_nodes(text, str(path))
