"""Publishing for CUDA processes in containers: the node-side writer acting for them.

A container sees the overlay read-only, so the mock libcuda in it cannot write its memory use
into the live layer. The plugin serves a unix socket in the overlay
(:data:`~nvml_mock_protocol.names.OVERLAY_CUDA_SOCKET`, reachable in every container through
the same read-only bind mount: connecting to a socket is not a write). A client sends one line
per change, ``<GPU or MIG UUID> <bytes>\\n``, and reads one line back: ``ok``, or
``refused: <why>`` (the connection stays), or ``error: <why>`` (a malformed frame; the
connection is then closed). Zero bytes removes that record.

The peer is a tenant, so nothing it sends is believed but the bytes, and those are bounded:

- its PID is the kernel's (``SO_PEERCRED``, in the plugin's PID namespace: the node's);
- its container is found from that PID, never from what it says: a container id of the
  allocation records in the path of ``/proc/<pid>/cgroup``, else the nearest ancestor that is
  a recorded container's process (the PID the runtime gave at PostStartContainer);
- it may publish only on the GPUs and MIG devices that container's allocation record holds
  (what the runtime gave it, and GPUs it named that no container was given:
  :mod:`nvml_mock_nri.allocations`), so it shows nothing where its container shows nothing
  already; a MIG device only as itself, never its siblings; anything else is refused and
  logged;
- bytes at most the GPU's (MIG device's) memory; at most
  :data:`~nvml_mock_nri.allocations.RECORDS_PER_POD` records per container, at most
  :data:`CONNECTIONS_PER_CONTAINER` connections per container (peers of no recorded container
  share one such allowance; such a peer is judged again at each frame, so a process that
  connected before the runtime's PostStartContainer was handled publishes once it is) and
  :data:`CONNECTIONS_MAX` in all; a frame is at most :data:`FRAME_MAX` bytes; a peer that
  does not read its replies is closed once they no longer fit its socket buffer.

The records have the driver's own shape (container id ``cuda-<pid>-<gpu>[-<gi>-<ci>]``, the
host PID, container name ``cuda``) and the container's pod and namespace. They go when the
connection closes, which the kernel does when the process dies, SIGKILL included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import selectors
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Final

from nvml_mock_live import Allocation, LiveLayer, LiveLayerError
from nvml_mock_live.allocations import pack
from nvml_mock_live.mig import MIG_MEMORY_SLICES, mig_devices
from nvml_mock_protocol import names

from nvml_mock_nri.allocations import RECORDS_PER_POD, AllocationRecorder, Grant

__all__ = [
    "CONNECTIONS_MAX",
    "CONNECTIONS_PER_CONTAINER",
    "FRAME_MAX",
    "CudaPublisher",
    "container_of",
]

logger = logging.getLogger(__name__)

FRAME_MAX: Final = 128
"""The longest line a client may send (a MIG UUID, a space, 20 digits and the newline fit)."""
CONNECTIONS_MAX: Final = 1024
"""Connections served at once; more are closed at accept."""
CONNECTIONS_PER_CONTAINER: Final = 64
"""Connections one container may hold at once (its CUDA processes)."""
ANCESTORS_MAX: Final = 64
"""How far up the process tree a peer is followed to its container's process."""
_FRAME: Final = re.compile(
    rb"(?P<uuid>(?:GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
    rb"-[0-9a-fA-F]{12}) (?P<bytes>0|[1-9][0-9]{0,19})"
)
_CONTAINER_ID: Final = re.compile(r"[0-9a-f]{64}")
_CRED: Final = struct.Struct("3i")


def container_of(pid: int, grants: dict[str, Grant], proc_root: str) -> Grant | None:
    """The recorded container process *pid* belongs to, or None (see the module docstring)."""
    proc = Path(proc_root)
    try:
        cgroup = (proc / str(pid) / "cgroup").read_text(errors="replace")
    except OSError:
        return None
    for token in _CONTAINER_ID.findall(cgroup):
        if token in grants:
            return grants[token]
    by_pid = {g.pid: g for g in grants.values() if g.pid > 0}
    current = pid
    for _ in range(ANCESTORS_MAX):
        if current in by_pid:
            return by_pid[current]
        try:
            stat = (proc / str(current) / "stat").read_text(errors="replace")
            current = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None
        if current <= 1:
            return None
    return None


@dataclasses.dataclass
class _Held:
    record_id: str
    gpu: int
    mig: tuple[int, int, int] | None
    used: int


@dataclasses.dataclass
class _Conn:
    sock: socket.socket
    pid: int
    grant: Grant | None
    started_ms: int
    key: str | None
    """The container its connection count is charged to (None: no recorded container)."""
    buffer: bytes = b""
    held: dict[str, _Held] = dataclasses.field(default_factory=dict)
    refused_logged: bool = False
    waiting: dict[str, int] = dataclasses.field(default_factory=dict)
    """The newest use per device sent before the peer's container was recorded: a process
    can allocate before the runtime's PostStartContainer, and it sends only on a change, so
    the frame is judged again once a container is recorded (:meth:`CudaPublisher.recorded`)."""


class CudaPublisher:
    """Serves :data:`~nvml_mock_protocol.names.OVERLAY_CUDA_SOCKET` on a thread of its own."""

    def __init__(self, recorder: AllocationRecorder, overlay: str, proc_root: str) -> None:
        self.recorder = recorder
        self.path = Path(overlay) / names.OVERLAY_CUDA_SOCKET
        self.proc_root = proc_root
        self._lock = threading.Lock()
        self._conns: dict[int, _Conn] = {}
        self._live: LiveLayer | None = None
        self._selector: selectors.BaseSelector | None = None
        self._server: socket.socket | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    # -- life cycle ------------------------------------------------------------

    def start(self) -> None:
        """Bind the socket (a stale one of an earlier plugin is replaced) and serve.
        Raises OSError when it cannot be bound: no overlay directory (never created here,
        so a plugin without a staged node leaves no trace), or a read-only one."""
        self.path.parent.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            server.bind(str(self.path))
            os.chmod(self.path, 0o666)  # containers run as any user; the peer's creds decide
            server.listen(64)
        except OSError:
            server.close()
            raise
        server.setblocking(False)
        self._server = server
        self._wake = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(server, selectors.EVENT_READ, None)
        self._selector.register(self._wake[0], selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="cuda publish", daemon=True)
        self._thread.start()
        logger.info("publishing for CUDA processes in containers on %s", self.path)

    def close(self) -> None:
        """Stop serving; every record published through the socket is removed."""
        self._stopping = True
        if self._wake is not None:
            self._wake[1].send(b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for conn in list(self._conns.values()):
                self._drop(conn)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        if self._selector is not None:
            self._selector.close()
        if self._wake is not None:
            for end in self._wake:
                end.close()
        if self._live is not None:
            self._live.close()

    def republish(self) -> None:
        """Write every held record again (Synchronize replaced the records wholesale)."""
        with self._lock:
            for conn in self._conns.values():
                for held in conn.held.values():
                    try:
                        self._put(conn, held)
                    except LiveLayerError as exc:
                        logger.warning("CUDA record %s not rewritten: %s", held.record_id, exc)

    def recorded(self) -> None:
        """A container was recorded (PostStartContainer): judge again the frames of peers
        that were in no recorded container when they sent them."""
        with self._lock:
            for conn in list(self._conns.values()):
                if not conn.waiting or conn.key is not None:
                    continue
                waiting, conn.waiting = conn.waiting, {}
                for uuid, used in waiting.items():
                    reply = self._frame(conn, f"{uuid} {used}".encode())
                    if reply != "ok" and conn.key is not None:
                        logger.warning("CUDA publish of pid %d refused: %s", conn.pid, reply)

    # -- the loop --------------------------------------------------------------

    def _loop(self) -> None:
        assert self._selector is not None and self._wake is not None
        while not self._stopping:
            for key, _ in self._selector.select(timeout=1.0):
                if key.fileobj is self._server:
                    self._accept()
                elif key.fileobj is self._wake[0]:
                    continue
                else:
                    with self._lock:
                        conn = self._conns.get(key.fd)
                        if conn is not None:
                            self._readable(conn)

    def _accept(self) -> None:
        assert self._server is not None
        try:
            sock, _ = self._server.accept()
        except OSError:
            return
        sock.setblocking(False)
        pid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))[0]
        grant = container_of(pid, self.recorder.grants(), self.proc_root) if pid > 0 else None
        with self._lock:
            # peers of no recorded container share one container's allowance
            key = grant.container_id if grant is not None else None
            mine = sum(1 for c in self._conns.values() if c.key == key)
            if len(self._conns) >= CONNECTIONS_MAX or mine >= CONNECTIONS_PER_CONTAINER:
                logger.warning(
                    "CUDA publish connection of pid %d closed: too many connections", pid
                )
                sock.close()
                return
            now = time.time_ns() // 1_000_000
            self._conns[sock.fileno()] = _Conn(sock, pid, grant, now, key)
        assert self._selector is not None
        self._selector.register(sock, selectors.EVENT_READ, None)

    def _readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.buffer += data
        while b"\n" in conn.buffer:
            line, conn.buffer = conn.buffer.split(b"\n", 1)
            if len(line) + 1 > FRAME_MAX:
                self._fail(conn, f"a frame longer than {FRAME_MAX} bytes")
                return
            reply = self._frame(conn, line)
            if reply.startswith("error:"):
                self._fail(conn, reply[len("error: ") :])
                return
            if not self._send(conn, reply):
                return
        if len(conn.buffer) >= FRAME_MAX:
            self._fail(conn, f"a frame longer than {FRAME_MAX} bytes")

    def _send(self, conn: _Conn, reply: str) -> bool:
        try:
            conn.sock.send(reply.encode() + b"\n", socket.MSG_NOSIGNAL)
        except OSError:  # it does not read its replies (or is gone): closed
            self._drop(conn)
            return False
        return True

    def _fail(self, conn: _Conn, why: str) -> None:
        logger.warning("CUDA publish connection of pid %d closed: %s", conn.pid, why)
        with contextlib.suppress(OSError):
            conn.sock.send(f"error: {why}\n".encode(), socket.MSG_NOSIGNAL)
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        """Close *conn* and remove every record it published."""
        self._conns.pop(conn.sock.fileno(), None)
        if self._selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(conn.sock)
        for held in conn.held.values():
            try:
                self._open().remove(held.record_id)
            except LiveLayerError as exc:
                logger.warning("CUDA record %s not removed: %s", held.record_id, exc)
        conn.held.clear()
        conn.sock.close()

    # -- one frame ---------------------------------------------------------------

    def _frame(self, conn: _Conn, line: bytes) -> str:
        match = _FRAME.fullmatch(line)
        if match is None:
            return "error: a frame is '<GPU or MIG UUID> <bytes>'"
        uuid = match["uuid"].decode()
        used = int(match["bytes"])
        # what the container holds now (a claim elsewhere may have taken a GPU it only named;
        # a stopped container holds nothing)
        grant = conn.grant if conn.key is None else self.recorder.grant(conn.key)
        if conn.key is not None and grant is None:
            return self._refused(conn, "the process's container holds no GPU any more")
        if grant is None:
            # recorded since it connected (a process that allocates before the runtime's
            # PostStartContainer is handled)? Judged again, and charged to it from now on
            grant = container_of(conn.pid, self.recorder.grants(), self.proc_root)
            if grant is None:
                if len(conn.waiting) < RECORDS_PER_POD or uuid in conn.waiting:
                    conn.waiting[uuid] = used
                return self._refused(conn, "the process is in no container holding GPUs")
            mine = sum(1 for c in self._conns.values() if c.key == grant.container_id)
            if mine >= CONNECTIONS_PER_CONTAINER:
                return self._refused(conn, "the container holds too many connections")
            conn.grant, conn.key = grant, grant.container_id
        conn.grant = grant
        try:
            live = self._open()
        except LiveLayerError as exc:
            return self._refused(conn, f"the live layer cannot be written: {exc}")
        where = self._resolve(live, uuid)
        if where is None:
            return self._refused(conn, f"{uuid} is no GPU of this node")
        gpu, mig, total = where
        allowed = gpu in grant.gpus if mig is None else (gpu in grant.gpus or mig in grant.mig)
        if not allowed:
            return self._refused(conn, f"{uuid} was not given to container {grant.container_id}")
        if used > total:
            return self._refused(conn, f"{used} bytes is more than {uuid} has ({total})")
        held = conn.held.get(uuid)
        if used == 0:
            if held is not None:
                del conn.held[uuid]
                live.remove(held.record_id)
            return "ok"
        if held is None:
            count = sum(len(c.held) for c in self._conns.values() if c.key == grant.container_id)
            if count >= RECORDS_PER_POD:
                return self._refused(conn, f"the container holds {RECORDS_PER_POD} records already")
            suffix = f"{gpu}" if mig is None else f"{gpu}-{mig[1]}-{mig[2]}"
            held = _Held(f"cuda-{conn.pid}-{suffix}", gpu, mig, used)
        held.used = used
        try:
            self._put(conn, held)
        except LiveLayerError as exc:
            return self._refused(conn, f"not written: {exc}")
        conn.held[uuid] = held
        return "ok"

    def _put(self, conn: _Conn, held: _Held) -> None:
        grant = conn.grant
        assert grant is not None
        live = self._open()
        alloc = Allocation(
            container_id=held.record_id,
            pid=conn.pid,
            gpus=(held.gpu,),
            mig=(held.mig,) if held.mig is not None else (),
            used_memory_bytes=held.used,
            pod=grant.pod,
            namespace=grant.namespace,
            container_name="cuda",
            start_time_ms=conn.started_ms,
        )
        live.put_record(pack(alloc, live.gpu_count))

    def _refused(self, conn: _Conn, why: str) -> str:
        if not conn.refused_logged:
            conn.refused_logged = True
            logger.warning("CUDA publish of pid %d refused: %s", conn.pid, why)
        return f"refused: {why}"

    def _open(self) -> LiveLayer:
        live = self._live
        if live is not None and not live.retired:
            return live
        if live is not None:
            live.close()
            self._live = None
        recorder = self.recorder
        self._live = LiveLayer.open(
            recorder.live_path, state=recorder.state_path, library=recorder.library_path
        )
        return self._live

    def _resolve(
        self, live: LiveLayer, uuid: str
    ) -> tuple[int, tuple[int, int, int] | None, int] | None:
        """(board GPU, MIG device or None, its memory) of *uuid*, or None."""
        board = list(live.board)
        wanted = uuid.lower()
        for g in board:
            if g.uuid.lower() == wanted:
                return g.index, None, g.memory_total_bytes
        if not wanted.startswith("mig-"):
            return None
        try:
            devices = mig_devices(live, board)
        except LiveLayerError:
            return None
        for d in devices:
            if d.uuid.lower() == wanted:
                total = board[d.gpu].memory_total_bytes * min(d.slices, MIG_MEMORY_SLICES)
                return (
                    d.gpu,
                    (d.gpu, d.gpu_instance, d.compute_instance),
                    total // MIG_MEMORY_SLICES,
                )
        return None
