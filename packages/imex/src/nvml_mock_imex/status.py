"""The domain status a daemon reports and the layouts ``nvidia-imex-ctl`` prints it in.

The text layout of ``-N`` is NVIDIA's: the connectivity legend, a timestamp
(``5/12/2025 06:08:10.580``), one ``Node #N - <host> - <status> - Version: <driver>`` line per
node of the node list, the ``Nodes From\\To`` matrix of connection codes (row: the node that
connects, column: the node it connects to) and ``Domain State``. NVIDIA publishes no example
of ``-N -j``; the JSON layout carries the same facts under the names of the text layout.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "CONNECTED",
    "CONNECTION_NAMES",
    "DAEMON_STATES",
    "DEGRADED",
    "DISCONNECTED",
    "INITIALIZING",
    "INVALID",
    "LEGEND",
    "MISMATCH",
    "NEVER",
    "READY",
    "RECOVERING",
    "SHUTTING_DOWN",
    "UNAVAILABLE",
    "UP",
    "VERSION_MISMATCH",
    "DomainStatus",
    "NodeStatus",
    "render_json",
    "render_text",
    "timestamp",
]

INVALID: Final = "I"
NEVER: Final = "N"
RECOVERING: Final = "R"
DISCONNECTED: Final = "D"
VERSION_MISMATCH: Final = "!V!"
MISMATCH: Final = "!M!"
CONNECTED: Final = "C"

LEGEND: Final = (
    "Connectivity Table Legend:\n"
    "I - Invalid - Node wasn't reachable, no connection status available\n"
    "N - Never Connected\n"
    "R - Recovering - Connection was lost, but clean up has not yet been triggered.\n"
    "D - Disconnected - Connection was lost, and clean up has been triggreed.\n"
    "A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.\n"
    "!V! - Version mismatch, communication disabled.\n"
    "!M! - Node map mismatch, communication disabled.\n"
    "C - Connected - Ready for operation\n"
)
"""NVIDIA's legend, word for word (its spelling included)."""

READY: Final = "READY"
"""``-q``: the daemon serves (and a node's ``status`` in ``-N``: that node's daemon is up)."""
UNAVAILABLE: Final = "UNAVAILABLE"
"""``-q``: no daemon answers this node's command service; a node's ``status`` in ``-N``: no
connection to that node's daemon now."""
INITIALIZING: Final = "INITIALIZING"
"""``-q``: the daemon runs but does not serve yet."""
SHUTTING_DOWN: Final = "SHUTTING_DOWN"
"""``-q``: the daemon was told to stop and is closing its connections."""
DAEMON_STATES: Final = (INITIALIZING, READY, SHUTTING_DOWN, UNAVAILABLE)
"""The answers of ``-q`` the work-alike gives, named as NVIDIA's daemon names them (it has
more: ``STARTING_AUTH_SERVER`` with GSSAPI, ``WAITING_FOR_RECOVERY`` after an unclean stop
with importers left, ``INIT_GPU``; none of those applies to a mock node)."""
DEGRADED: Final = "DEGRADED"
UP: Final = "UP"
CONNECTION_NAMES: Final = {
    INVALID: "INVALID",
    NEVER: "NEVER_CONNECTED",
    RECOVERING: "RECOVERING",
    DISCONNECTED: "DISCONNECTED",
    VERSION_MISMATCH: "VERSION_MISMATCH",
    MISMATCH: "NODE_MAP_MISMATCH",
    CONNECTED: "CONNECTED",
}
"""A connection's ``status`` in ``-N -j``. NVIDIA's published sample shows ``CONNECTED``;
the others are the legend's words in the same form."""


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """One node of the node list as this daemon sees it."""

    index: int
    host: str
    status: str
    """``READY`` (this node, or a peer connected now) or ``UNAVAILABLE``."""
    version: str = ""
    counted: bool = True
    """Whether the node is part of this node's domain: it resolves and its clique is this
    node's. Nodes that are not are shown but never make the domain degraded."""


@dataclass(frozen=True, slots=True)
class DomainStatus:
    """What one daemon answers on its command service."""

    me: int
    state: str
    """This node's answer to ``-q``: its daemon's own state (:data:`DAEMON_STATES`), never
    the domain's."""
    domain: str
    """``UP`` (every counted node connected) or ``DEGRADED``."""
    version: str
    clique: str | None
    nodes: tuple[NodeStatus, ...]
    matrix: tuple[tuple[str, ...], ...]
    when: float = field(default_factory=time.time)

    def to_wire(self) -> dict[str, object]:
        return {
            "me": self.me,
            "state": self.state,
            "domain": self.domain,
            "version": self.version,
            "clique": self.clique,
            "when": self.when,
            "nodes": [
                {
                    "index": n.index,
                    "host": n.host,
                    "status": n.status,
                    "version": n.version,
                    "counted": n.counted,
                }
                for n in self.nodes
            ],
            "matrix": [list(row) for row in self.matrix],
        }

    @classmethod
    def from_wire(cls, data: dict[str, object]) -> DomainStatus:
        """Raises KeyError, TypeError or ValueError for an answer of another shape."""
        nodes = data["nodes"]
        matrix = data["matrix"]
        if not isinstance(nodes, list) or not isinstance(matrix, list):
            raise TypeError("nodes and matrix must be lists")
        clique = data.get("clique")
        return cls(
            me=int(str(data["me"])),
            state=str(data["state"]),
            domain=str(data["domain"]),
            version=str(data["version"]),
            clique=None if clique is None else str(clique),
            when=float(str(data["when"])),
            nodes=tuple(
                NodeStatus(
                    int(n["index"]),
                    str(n["host"]),
                    str(n["status"]),
                    str(n.get("version", "")),
                    bool(n.get("counted", True)),
                )
                for n in nodes
            ),
            matrix=tuple(tuple(str(c) for c in row) for row in matrix),
        )


def timestamp(when: float) -> str:
    """NVIDIA's timestamp: month/day/year without padding, then time to the millisecond."""
    local = time.localtime(when)
    millis = int((when % 1) * 1000)
    return (
        f"{local.tm_mon}/{local.tm_mday}/{local.tm_year} "
        f"{local.tm_hour:02d}:{local.tm_min:02d}:{local.tm_sec:02d}.{millis:03d}"
    )


def render_text(status: DomainStatus) -> str:
    """``nvidia-imex-ctl -N``, in NVIDIA's layout."""
    lines = [LEGEND, timestamp(status.when), "Nodes:"]
    for node in status.nodes:
        lines.append(
            f"Node #{node.index:<3} - {node.host:<15} - {node.status:<20} - Version: "
            f"{node.version}".rstrip()
        )
    lines.append("")
    header = " Nodes From\\To  " + "".join(f"{n.index:<4}" for n in status.nodes)
    lines.append(header.rstrip())
    for node, row in zip(status.nodes, status.matrix, strict=True):
        lines.append((f"{node.index:>8}        " + "".join(f"{c:<4}" for c in row)).rstrip())
    lines.append("")
    lines.append(f"Domain State: {status.domain}")
    return "\n".join(lines) + "\n"


def render_json(status: DomainStatus) -> str:
    """``nvidia-imex-ctl -N -j`` in the layout of NVIDIA's published sample: ``nodes`` by
    index (``status``, ``host``, ``connections`` by index with ``host``, ``status`` and
    ``changed``, ``changed``, ``version``, ``hostName``), ``timestamp``, and the domain state
    as the last ``status`` (DCGM reads it as the last ``"status":`` of the text). ``changed``
    is always true: a one-shot query has nothing earlier to compare with."""
    body = {
        "nodes": {
            str(n.index): {
                "status": n.status,
                "host": n.host,
                "connections": {
                    str(other.index): {
                        "host": other.host,
                        "status": CONNECTION_NAMES.get(code, code),
                        "changed": True,
                    }
                    for other, code in zip(status.nodes, status.matrix[n.index], strict=True)
                },
                "changed": True,
                "version": n.version,
                "hostName": "",
            }
            for n in status.nodes
        },
        "timestamp": timestamp(status.when),
        "status": status.domain,
    }
    return json.dumps(body, indent=2) + "\n"
