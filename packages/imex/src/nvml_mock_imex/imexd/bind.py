"""Which node of the node list this daemon is, and its listening sockets.

``BIND_INTERFACE_IP`` names the node's address outright (it must be an address of the node
list). Left empty, as NVIDIA's daemon does, the node is found from the node list: the first
entry that resolves to an address this host can listen on at ``SERVER_PORT``. Several
daemons on one host (loopback addresses, one shared config) thereby take one entry each, in
the order they start. Two entries that resolve to the address this daemon takes (``localhost``
and ``127.0.0.1``) are refused: peers are told apart by address, and the daemon would dial
itself as the other node.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from nvml_mock_imex.config import ImexConfig
from nvml_mock_imex.errors import ImexConfigError
from nvml_mock_imex.nodes import NodeEntry

__all__ = ["Bound", "bind_node", "listen_tcp", "resolve"]


@dataclass(frozen=True, slots=True)
class Bound:
    me: int
    address: str
    sock: socket.socket


def resolve(name: str) -> str | None:
    """The first address of *name*, or None when it does not resolve (yet)."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return str(infos[0][4][0]) if infos else None


def listen_tcp(address: str, port: int) -> socket.socket:
    """A listening TCP socket on *address*:*port*. Raises OSError."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def bind_node(config: ImexConfig, nodes: list[NodeEntry]) -> Bound:
    """This node and its peer socket. Raises :class:`ImexConfigError` naming the port and
    what each candidate address answered."""
    resolved = [(n, resolve(n.name)) for n in nodes]
    if config.bind_ip:
        mine = [(n, a) for n, a in resolved if a == config.bind_ip]
        if not mine:
            raise ImexConfigError(
                f"{config.path}: BIND_INTERFACE_IP={config.bind_ip} is not the address of any "
                f"node in the node list {config.node_config_file}"
            )
        candidates = mine
    else:
        candidates = [(n, a) for n, a in resolved if a is not None]
    tried: list[str] = []
    for node, address in candidates:
        assert address is not None
        try:
            sock = listen_tcp(address, config.server_port)
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
                raise ImexConfigError(
                    f"cannot listen on {address}:{config.server_port} (SERVER_PORT): {exc.strerror}"
                ) from None
            tried.append(f"{address}: {exc.strerror}")
            continue
        twins = [n for n, a in resolved if a == address and n.index != node.index]
        if twins:
            sock.close()
            raise ImexConfigError(
                f"{config.node_config_file}: node #{node.index} ({node.name}) and node "
                f"#{twins[0].index} ({twins[0].name}) are both {address}, this node's "
                "address: a daemon cannot be two nodes of its list"
            )
        return Bound(node.index, address, sock)
    detail = "; ".join(tried) if tried else "no entry resolves to an address"
    raise ImexConfigError(
        f"no node of the node list {config.node_config_file} is this host: cannot listen on "
        f"SERVER_PORT {config.server_port} at any of its addresses ({detail})"
    )
