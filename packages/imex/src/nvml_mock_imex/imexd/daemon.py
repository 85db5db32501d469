"""The daemon's event loop: the peer server, one link task per peer, the command service.

Each daemon connects to every other node of its list (so each link's state is this node's
own row of the matrix) and answers the connections of the others. A link is connected from
the peer's ``hello`` answer until a ``pong`` is missing for
:data:`~nvml_mock_imex.wire.PEER_TIMEOUT` or the socket closes; it then retries every
half second. Names that do not resolve are looked up again every two seconds and on
``SIGUSR1``, which also re-reads the node list (as the DRA driver's daemon expects when its
DNS name mapping changes).

Nothing a peer sends can stop a link: a bad frame of any kind closes that one connection and
the peer shows as not connected until it answers properly again. A node of the list whose
name resolves to this daemon's own address is never dialled (it would be this daemon,
refusing itself); it stays ``N`` and keeps the domain ``DEGRADED``, and is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from typing import Final

from nvml_mock_imex import status as st
from nvml_mock_imex import wire
from nvml_mock_imex.clique import CliqueSource
from nvml_mock_imex.config import ImexConfig
from nvml_mock_imex.domain import DomainView, Link
from nvml_mock_imex.errors import FrameError, ImexConfigError, ImexError
from nvml_mock_imex.imexd.bind import Bound, listen_tcp, resolve
from nvml_mock_imex.nodes import NodeEntry, load_nodes

__all__ = ["Daemon", "command_sockets"]

logger = logging.getLogger(__name__)

RETRY: Final = 0.5
RESOLVE_EVERY: Final = 2.0
CONNECT_TIMEOUT: Final = 1.0


class Daemon:
    """One IMEX work-alike daemon."""

    def __init__(
        self,
        config: ImexConfig,
        nodes: list[NodeEntry],
        bound: Bound,
        clique: CliqueSource,
        version: str,
    ) -> None:
        self.config = config
        self.bound = bound
        self.clique = clique
        self.view = DomainView(bound.me, nodes, version, config.disconnected_grace)
        self._links: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._addresses: dict[int, str | None] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self._reloading = asyncio.Lock()
        self._reloads: set[asyncio.Task[None]] = set()
        self._self_named: set[int] = set()

    # -- life cycle ----------------------------------------------------------

    async def run(self, cmd_sockets: list[socket.socket]) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        loop.add_signal_handler(signal.SIGUSR1, self._on_sigusr1)
        self._servers.append(
            await asyncio.start_server(self._peer, sock=self.bound.sock, limit=wire.MAX_LINE)
        )
        for sock in cmd_sockets:
            self._servers.append(
                await asyncio.start_server(self._command, sock=sock, limit=wire.MAX_LINE)
            )
        await self._start_links()
        ager = asyncio.ensure_future(self._age())
        self.view.phase = st.READY
        me = self.view.nodes[self.bound.me]
        logger.info(
            "IMEX daemon work-alike running: node #%d (%s) on %s:%d, %d node(s) in %s, clique %s",
            me.index,
            me.name,
            self.bound.address,
            self.config.server_port,
            len(self.view.nodes),
            self.config.node_config_file,
            self.clique.current or "none",
        )
        await self._stop.wait()
        self.view.phase = st.SHUTTING_DOWN
        ager.cancel()
        for task in self._reloads:
            task.cancel()
        await asyncio.gather(ager, *self._reloads, return_exceptions=True)
        await self._stop_links()
        for server in self._servers:
            server.close()
        self.clique.stop()
        logger.info("IMEX daemon work-alike stopped")
        return 0

    def _on_sigusr1(self) -> None:
        task = asyncio.ensure_future(self.reload())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def reload(self) -> None:
        """``SIGUSR1``: re-read the node list and reconnect (this node keeps its place).
        One at a time; the file is read without blocking (a FIFO there is refused, not
        waited on) and bounded, so the daemon keeps answering throughout."""
        async with self._reloading:
            await self._reload()

    async def _reload(self) -> None:
        try:
            nodes = load_nodes(self.config.node_config_file)
        except ImexError as exc:
            logger.error("SIGUSR1: keeping the node list: %s", exc)
            return
        me = self.view.nodes[self.bound.me].name
        if self.bound.me >= len(nodes) or nodes[self.bound.me].name != me:
            logger.error(
                "SIGUSR1: keeping the node list: node #%d is no longer %s in %s",
                self.bound.me,
                me,
                self.config.node_config_file,
            )
            return
        logger.info("SIGUSR1: re-reading the node list and reconnecting")
        await self._stop_links()
        self.view.reset(nodes)
        await self._start_links()

    async def _start_links(self) -> None:
        self._addresses = {}
        for node in self.view.nodes:
            if node.index != self.bound.me:
                self._links.append(asyncio.ensure_future(self._link(node)))

    async def _stop_links(self) -> None:
        for task in self._links:
            task.cancel()
        await asyncio.gather(*self._links, return_exceptions=True)
        self._links = []

    async def _age(self) -> None:
        while True:
            self.view.age()
            await asyncio.sleep(0.25)

    # -- outgoing links --------------------------------------------------------

    def _hello(self) -> dict[str, object]:
        me = self.view.nodes[self.bound.me]
        return {
            "t": "hello",
            "index": me.index,
            "host": me.name,
            "nodes": [n.name for n in self.view.nodes],
            "clique": self.clique.current,
            "version": self.view.version,
        }

    async def _address(self, node: NodeEntry) -> str | None:
        loop = asyncio.get_running_loop()
        address = await loop.run_in_executor(None, resolve, node.name)
        if address is None and self._addresses.get(node.index, "") is not None:
            logger.warning("node #%d: %s does not resolve (yet)", node.index, node.name)
        self._addresses[node.index] = address
        return address

    def _is_me(self, node: NodeEntry, address: str) -> bool:
        """Whether *node* resolves to this daemon's own address (logged once)."""
        if address != self.bound.address:
            self._self_named.discard(node.index)
            return False
        if node.index not in self._self_named:
            self._self_named.add(node.index)
            logger.error(
                "node #%d (%s) resolves to this node's own address %s: not dialled "
                "(a daemon cannot be two nodes of %s)",
                node.index,
                node.name,
                address,
                self.config.node_config_file,
            )
        return True

    async def _link(self, node: NodeEntry) -> None:
        link = self.view.links[node.index]
        while True:
            address = await self._address(node)
            link.resolved = address is not None
            if address is None or self._is_me(node, address):
                await asyncio.sleep(RESOLVE_EVERY)
                continue
            opened: asyncio.StreamWriter | None = None
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(address, self.config.server_port, limit=wire.MAX_LINE),
                    CONNECT_TIMEOUT,
                )
                opened = writer
                wire.send(writer, self._hello())
                await writer.drain()
                answer = await wire.read(reader, wire.PEER_TIMEOUT)
                if answer.get("t") != "hello":
                    logger.warning(
                        "node #%d (%s) refused this node: %s",
                        node.index,
                        node.name,
                        answer.get("reason", answer),
                    )
                    link.code = st.MISMATCH
                    await asyncio.sleep(RETRY * 4)
                    continue
                if not self._accept(node, link, answer):
                    await asyncio.sleep(RETRY)
                    continue
                await self._ping(node, link, reader, writer)
            except (OSError, TimeoutError, ConnectionError, FrameError) as exc:
                if link.code == st.CONNECTED:
                    logger.warning(
                        "node #%d (%s): connection lost: %s",
                        node.index,
                        node.name,
                        exc or type(exc).__name__,
                    )
                self.view.lost(node.index)
            except Exception as exc:
                # whatever a peer sent, the link lives on and shows the peer as lost
                logger.warning(
                    "node #%d (%s): connection closed: %s: %s",
                    node.index,
                    node.name,
                    type(exc).__name__,
                    exc,
                )
                self.view.lost(node.index)
            finally:
                if opened is not None:
                    opened.close()
            await asyncio.sleep(RETRY)

    def _accept(self, node: NodeEntry, link: Link, answer: dict[str, object]) -> bool:
        """Whether the peer's ``hello`` makes the link connected; a peer of another node
        list, clique or driver major is a mismatch (shown, not counted)."""
        link.version = str(answer.get("version", ""))
        theirs = answer.get("nodes")
        if theirs != [n.name for n in self.view.nodes]:
            if link.code != st.MISMATCH:
                logger.warning(
                    "node #%d (%s): node map mismatch (its node list differs)",
                    node.index,
                    node.name,
                )
            link.code = st.MISMATCH
            return False
        if answer.get("clique") != self.clique.current:
            if link.code != st.MISMATCH:
                logger.warning(
                    "node #%d (%s): clique %s is not this node's (%s); not part of the domain",
                    node.index,
                    node.name,
                    answer.get("clique") or "none",
                    self.clique.current or "none",
                )
            link.code = st.MISMATCH
            return False
        if link.version.split(".")[0] != self.view.version.split(".")[0]:
            link.code = st.VERSION_MISMATCH
            return False
        if link.code != st.CONNECTED:
            logger.info("node #%d (%s): connected", node.index, node.name)
        link.code = st.CONNECTED
        link.lost_at = None
        return True

    async def _ping(
        self,
        node: NodeEntry,
        link: Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Ping until the link fails (raises) or the peer's clique moves (returns)."""
        while True:
            wire.send(writer, {"t": "ping", "clique": self.clique.current})
            await writer.drain()
            answer = await wire.read(reader, wire.PEER_TIMEOUT)
            if answer.get("t") != "pong":
                raise FrameError(f"expected a pong, got {answer.get('t')!r}")
            row = answer.get("row")
            link.row = tuple(str(c) for c in row) if isinstance(row, list) else None
            if answer.get("clique") != self.clique.current:
                logger.warning(
                    "node #%d (%s): its clique moved to %s",
                    node.index,
                    node.name,
                    answer.get("clique") or "none",
                )
                link.code = st.MISMATCH
                link.row = None
                return
            await asyncio.sleep(wire.PING_INTERVAL)

    # -- incoming ------------------------------------------------------------

    async def _peer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # a handler still running at shutdown is cancelled; it must still end normally, as
        # Python 3.11's stream server reads a cancelled handler's exception() and logs that
        # as a traceback
        with contextlib.suppress(asyncio.CancelledError):
            await self._serve_peer(reader, writer)

    async def _command(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._serve_command(reader, writer)

    async def _serve_peer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            hello = await wire.read(reader, wire.PEER_TIMEOUT * 2)
            index, host = hello.get("index"), hello.get("host")
            known = (
                isinstance(index, int)
                and 0 <= index < len(self.view.nodes)
                and self.view.nodes[index].name == host
                and index != self.bound.me
            )
            if hello.get("t") != "hello" or not known:
                reason = (
                    f"peer {host!r} claims to be this node (#{index})"
                    if index == self.bound.me
                    else f"unknown peer {host!r} (node #{index}): not in the node list "
                    f"{self.config.node_config_file}"
                )
                logger.warning("refusing a connection from %s: %s", peer, reason)
                wire.send(writer, {"t": "refused", "reason": reason})
                await writer.drain()
                return
            wire.send(writer, self._hello())
            await writer.drain()
            while True:
                frame = await wire.read(reader, wire.PEER_TIMEOUT * 4)
                if frame.get("t") != "ping":
                    raise FrameError(f"expected a ping, got {frame.get('t')!r}")
                wire.send(
                    writer,
                    {"t": "pong", "row": list(self.view.my_row()), "clique": self.clique.current},
                )
                await writer.drain()
        except (OSError, TimeoutError, ConnectionError):
            return
        except FrameError as exc:
            logger.warning("closing a peer connection from %s: %s", peer, exc)
        except Exception as exc:
            # one connection, never the daemon
            logger.warning(
                "closing a peer connection from %s: %s: %s", peer, type(exc).__name__, exc
            )
        finally:
            writer.close()

    async def _serve_command(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            request = await wire.read(reader, 2.0)
            if request.get("t") != "status":
                wire.send(writer, {"t": "error", "reason": f"unknown request {request.get('t')!r}"})
            else:
                status = self.view.status(self.clique.current)
                wire.send(writer, {"t": "status", "status": status.to_wire()})
            await writer.drain()
        except (OSError, TimeoutError, ConnectionError, FrameError) as exc:
            logger.debug("command connection: %s", exc)
        finally:
            writer.close()


def command_sockets(config: ImexConfig, bound: Bound) -> list[socket.socket]:
    """The command service's sockets (``IMEX_CMD_*``). With no ``IMEX_CMD_BIND_INTERFACE_IP``
    the port is opened on this node's own address, so that several daemons of one host
    (loopback tests) each have their own. Raises :class:`ImexConfigError`."""
    sockets: list[socket.socket] = []
    if not config.cmd_enabled:
        return sockets
    if config.cmd_port is not None:
        address = config.cmd_bind_ip or bound.address
        try:
            sockets.append(listen_tcp(address, config.cmd_port))
        except OSError as exc:
            raise ImexConfigError(
                f"cannot listen on {address}:{config.cmd_port} (IMEX_CMD_PORT): {exc.strerror}"
            ) from None
    if config.cmd_unix_path:
        path = config.cmd_unix_path
        with contextlib.suppress(FileNotFoundError):
            if os.path.exists(path) and not _is_socket(path):
                raise ImexConfigError(f"IMEX_CMD_UNIX_DOMAIN_PATH {path} exists and is no socket")
            os.unlink(path)
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            unix.bind(path)
            unix.listen(16)
        except OSError as exc:
            unix.close()
            raise ImexConfigError(
                f"cannot listen on {path} (IMEX_CMD_UNIX_DOMAIN_PATH): {exc.strerror}"
            ) from None
        unix.setblocking(False)
        sockets.append(unix)
    return sockets


def _is_socket(path: str) -> bool:
    import stat

    return stat.S_ISSOCK(os.lstat(path).st_mode)
