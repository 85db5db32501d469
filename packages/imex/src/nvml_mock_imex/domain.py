"""One daemon's view of its IMEX domain: the state of its link to each peer, and the
:class:`~nvml_mock_imex.status.DomainStatus` that view adds up to.

Pure bookkeeping (no sockets, no clock of its own), so the rules are tested on their own:

- a node counts toward the domain when it resolves and its clique is this node's; a node of
  another clique, or one whose node list differs, is a node-map mismatch (``!M!``) and does
  not count, nor does one that does not resolve (``I``);
- the domain is ``UP`` when every counted peer is connected, else ``DEGRADED`` (this node
  itself is always up: a daemon that is not answers no status at all);
- this node's own state (``nvidia-imex-ctl -q``) is its daemon's, never the domain's, as
  NVIDIA's daemon answers it: ``INITIALIZING`` until it serves, ``READY`` from then on
  whatever its peers do, ``SHUTTING_DOWN`` once it is told to stop. NVIDIA's compute-domain
  daemon uses ``-q`` as its readiness check ("the local IMEX daemon is ready, not the entire
  domain"), so a lost peer makes no survivor unready; the loss shows in the node status and
  the domain state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from nvml_mock_imex import status as st
from nvml_mock_imex.nodes import NodeEntry

__all__ = ["DomainView", "Link"]


@dataclass(slots=True)
class Link:
    """This node's connection to one peer."""

    code: str = st.NEVER
    resolved: bool = True
    version: str = ""
    row: tuple[str, ...] | None = None
    """The peer's own row of the matrix, from its last ``pong``."""
    lost_at: float | None = None


@dataclass(slots=True)
class DomainView:
    me: int
    nodes: list[NodeEntry]
    version: str
    grace: int = -1
    links: dict[int, Link] = field(default_factory=dict)
    phase: str = st.INITIALIZING
    """This daemon's own state, set by the daemon as it starts and stops."""

    def __post_init__(self) -> None:
        self.reset(self.nodes)

    def reset(self, nodes: list[NodeEntry]) -> None:
        """A new node list (``SIGUSR1``): links start over."""
        self.nodes = nodes
        self.links = {n.index: Link() for n in nodes if n.index != self.me}

    def lost(self, index: int, now: float | None = None) -> None:
        link = self.links[index]
        if link.code in (st.CONNECTED, st.RECOVERING, st.DISCONNECTED):
            if link.code == st.CONNECTED:
                link.lost_at = time.monotonic() if now is None else now
            link.code = st.RECOVERING
        link.row = None

    def age(self, now: float | None = None) -> None:
        """Recovering links past ``IMEX_NODE_DISCONNECTED_GRACE_TIME`` are disconnected."""
        now = time.monotonic() if now is None else now
        for link in self.links.values():
            if (
                link.code == st.RECOVERING
                and self.grace >= 0
                and link.lost_at is not None
                and now - link.lost_at >= self.grace
            ):
                link.code = st.DISCONNECTED

    def counted(self, index: int) -> bool:
        if index == self.me:
            return True
        link = self.links[index]
        return link.resolved and link.code not in (st.MISMATCH, st.VERSION_MISMATCH)

    def domain(self) -> str:
        peers = [i for i in self.links if self.counted(i)]
        up = [i for i in peers if self.links[i].code == st.CONNECTED]
        return st.UP if len(up) == len(peers) else st.DEGRADED

    def my_row(self) -> tuple[str, ...]:
        row: list[str] = []
        for node in self.nodes:
            if node.index == self.me:
                row.append(st.CONNECTED)
            else:
                link = self.links[node.index]
                row.append(link.code if link.resolved else st.INVALID)
        return tuple(row)

    def status(self, clique: str | None) -> st.DomainStatus:
        rows: list[tuple[str, ...]] = []
        shown: list[st.NodeStatus] = []
        width = len(self.nodes)
        for node in self.nodes:
            if node.index == self.me:
                rows.append(self.my_row())
                shown.append(st.NodeStatus(node.index, node.name, st.READY, self.version))
                continue
            link = self.links[node.index]
            connected = link.code == st.CONNECTED
            row = link.row if connected and link.row and len(link.row) == width else None
            rows.append(row or tuple(st.INVALID for _ in self.nodes))
            shown.append(
                st.NodeStatus(
                    node.index,
                    node.name,
                    st.READY if connected else st.UNAVAILABLE,
                    link.version if connected else "",
                    self.counted(node.index),
                )
            )
        return st.DomainStatus(
            me=self.me,
            state=self.phase,
            domain=self.domain(),
            version=self.version,
            clique=clique,
            nodes=tuple(shown),
            matrix=tuple(rows),
        )
