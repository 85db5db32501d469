"""Byte-level conversations with the stub and the runtime double over real unix sockets.

The peer here is written with bare ``struct`` and asyncio streams, not with the
package's codecs, so these tests check our bytes against the wire format that
containerd's NRI and ttrpc define rather than against themselves.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from nvml_mock_protocol.nri import Event, Plugin, RuntimeDouble, RuntimeInfo, Stub, ttrpc_pb2
from nvml_mock_protocol.nri import api_pb2 as api

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"


def h(text: str) -> bytes:
    out = bytearray()
    for i, part in enumerate(text.split('"')):
        out += part.encode() if i % 2 else bytes.fromhex(part)
    return bytes(out)


class RawPeer:
    """A hand-rolled mux + ttrpc endpoint that records every frame it reads."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buffers: dict[int, bytearray] = {}
        self.frame_sizes: list[int] = []
        self.raw: bytearray = bytearray()

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    def send(
        self, conn: int, sid: int, mtype: int, body: bytes, *, length: int | None = None
    ) -> None:
        message = (
            struct.pack(">IIBB", len(body) if length is None else length, sid, mtype, 0) + body
        )
        for start in range(0, len(message), 4096):
            chunk = message[start : start + 4096]
            self.writer.write(struct.pack(">II", conn, len(chunk)) + chunk)

    def request(
        self, conn: int, sid: int, method: str, payload: bytes, service: str = PLUGIN
    ) -> None:
        body = ttrpc_pb2.Request(
            service=service, method=method, payload=payload
        ).SerializeToString()
        self.send(conn, sid, 1, body)

    async def read_message(self, timeout: float = 5.0) -> tuple[int, int, int, bytes]:
        """Next complete ttrpc message: (conn, stream id, type, body)."""
        async with asyncio.timeout(timeout):
            while True:
                for conn, buf in self.buffers.items():
                    if len(buf) >= 10:
                        length, sid, mtype, _ = struct.unpack_from(">IIBB", buf)
                        if len(buf) >= 10 + length:
                            body = bytes(buf[10 : 10 + length])
                            del buf[: 10 + length]
                            return conn, sid, mtype, body
                header = await self.reader.readexactly(8)
                conn, length = struct.unpack(">II", header)
                payload = await self.reader.readexactly(length)
                self.raw += header + payload
                self.frame_sizes.append(length)
                self.buffers.setdefault(conn, bytearray()).extend(payload)

    async def response(self, timeout: float = 5.0) -> tuple[int, int, ttrpc_pb2.Response]:
        conn, sid, mtype, body = await self.read_message(timeout)
        assert mtype == 2
        return conn, sid, ttrpc_pb2.Response.FromString(body)


class ReferencePlugin(Plugin):
    def __init__(self, padding: int = 0) -> None:
        self.padding = padding
        self.runtime: RuntimeInfo | None = None
        self.states: list[tuple[Event, str]] = []

    async def configure(self, runtime: RuntimeInfo) -> list[Event]:
        self.runtime = runtime
        return [Event.CREATE_CONTAINER]

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.ContainerAdjustment:
        adjust = api.ContainerAdjustment(
            mounts=[
                api.Mount(
                    destination="/data", type="bind", source="/srv/data", options=["rbind", "ro"]
                )
            ],
            env=[api.KeyValue(key="FOO", value="bar")],
        )
        device = adjust.linux.devices.add(path="/dev/fuse", type="c", major=10, minor=229)
        device.file_mode.value = 0o666
        if self.padding:
            adjust.annotations["pad"] = "p" * self.padding
        return adjust

    async def state_change(
        self, event: Event, pod: api.PodSandbox, container: api.Container | None
    ) -> None:
        self.states.append((event, container.id if container else ""))


@asynccontextmanager
async def raw_runtime(path: Path) -> AsyncIterator[asyncio.Queue[RawPeer]]:
    peers: asyncio.Queue[RawPeer] = asyncio.Queue()
    writers: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await peers.put(RawPeer(reader, writer))

    server = await asyncio.start_unix_server(accept, str(path))
    try:
        yield peers
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def handshake(peer: RawPeer) -> None:
    conn, sid, mtype, body = await peer.read_message()
    assert (conn, sid, mtype) == (2, 1, 1)
    request = ttrpc_pb2.Request.FromString(body)
    assert (request.service, request.method) == ("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin")
    register = api.RegisterPluginRequest.FromString(request.payload)
    assert (register.plugin_name, register.plugin_idx) == ("ref", "50")
    assert request.timeout_nano == 5_000_000_000
    peer.send_raw(h("00 00 00 02 00 00 00 0a 00 00 00 00 00 00 00 01 02 00"))


async def test_stub_reference_exchange_byte_for_byte(sock_dir: Path) -> None:
    path = sock_dir / "raw.sock"
    plugin = ReferencePlugin()
    async with raw_runtime(path) as peers:
        stub = Stub(plugin, name="ref", index="50", socket_path=path)
        starting = asyncio.create_task(stub.start())
        peer = await peers.get()
        await handshake(peer)
        await starting
        assert stub.registered

        configure = h('12 0a "containerd" 1a 06 "v2.1.0" 20 88 27 28 e8 07')
        peer.request(1, 1, "Configure", configure)
        mark = len(peer.raw)
        await peer.read_message()
        assert bytes(peer.raw[mark:]) == h(
            "00 00 00 01 00 00 00 0e 00 00 00 04 00 00 00 01 02 00 12 02 10 08"
        )
        assert stub.request_timeout == 1.0
        assert plugin.runtime is not None and plugin.runtime.registration_timeout == 5.0

        peer.request(1, 3, "Synchronize", b"")
        mark = len(peer.raw)
        await peer.read_message()
        assert bytes(peer.raw[mark:]) == h("00 00 00 01 00 00 00 0a 00 00 00 00 00 00 00 03 02 00")
        assert stub.synchronized

        create = api.CreateContainerRequest(
            pod=api.PodSandbox(id="p", namespace="default", name="pod"),
            container=api.Container(id="c", name="main"),
        )
        peer.request(1, 5, "CreateContainer", create.SerializeToString())
        mark = len(peer.raw)
        _, sid, response = await peer.response()
        frame = bytes(peer.raw[mark:])
        assert sid == 5
        assert frame[:22] == h("00 00 00 01 00 00 00 5b 00 00 00 51 00 00 00 05 02 00 12 4f 0a 4d")
        adjust = api.CreateContainerResponse.FromString(response.payload).adjust
        assert adjust.env[0].key == "FOO"
        assert adjust.linux.devices[0].file_mode.value == 0o666

        # Anything unknown answers UNIMPLEMENTED (12) with Go's wording.
        peer.request(1, 7, "Frobnicate", b"")
        mark = len(peer.raw)
        await peer.read_message()
        assert bytes(peer.raw[mark + 18 :]) == h('0a 15 08 0c 12 11 "method Frobnicate"')
        # NRI v0.12's dedicated notification RPC is answered (empty reply), not UNIMPLEMENTED:
        # containerd 2.3+ then never falls back to StateChange for the plugin
        start = api.StartContainerRequest(pod=create.pod, container=create.container)
        peer.request(1, 9, "StartContainer", start.SerializeToString())
        _, sid, response = await peer.response()
        assert sid == 9 and not response.HasField("status") and response.payload == b""
        assert plugin.states == [(Event.START_CONTAINER, "c")]
        peer.request(1, 11, "Configure", b"", service="some.Other")
        _, _, response = await peer.response()
        assert (response.status.code, response.status.message) == (12, "service some.Other")

        # ...and StateChange is how those events arrive from an older runtime.
        event = api.StateChangeEvent(
            event=api.START_CONTAINER, pod=create.pod, container=create.container
        )
        peer.request(1, 13, "StateChange", event.SerializeToString())
        _, sid, response = await peer.response()
        assert sid == 13 and not response.HasField("status")
        assert plugin.states == [(Event.START_CONTAINER, "c")] * 2

        # Stream id rules.
        peer.request(1, 14, "StateChange", b"")
        _, sid, response = await peer.response()
        assert (sid, response.status.code, response.status.message) == (
            14,
            3,
            "StreamID must be odd",
        )
        peer.request(1, 13, "StateChange", b"")
        _, _, response = await peer.response()
        assert response.status.message == "StreamID cannot be re-used and must increment"

        # A garbled request body is answered, not fatal.
        peer.send(1, 15, 1, b"\xff\xff\xff")
        _, _, response = await peer.response()
        assert response.status.code == 3

        # Oversized request: body skipped, RESOURCE_EXHAUSTED, connection kept.
        big = (4 << 20) + 1
        peer.send(1, 17, 1, b"", length=big)
        chunk = b"\0" * 4096
        for start in range(0, big, 4096):
            piece = chunk[: min(4096, big - start)]
            peer.send_raw(struct.pack(">II", 1, len(piece)) + piece)
        _, sid, response = await peer.response()
        assert (sid, response.status.code) == (17, 8)
        peer.request(1, 19, "StateChange", event.SerializeToString())
        _, sid, response = await peer.response()
        assert sid == 19 and not response.HasField("status")

        assert max(peer.frame_sizes) <= 4096
        peer.writer.close()
        disconnect = await asyncio.wait_for(stub.wait_closed(), 5)
        assert disconnect.by_runtime


async def test_stub_reply_over_4kib_goes_out_in_frames_of_at_most_4096(sock_dir: Path) -> None:
    path = sock_dir / "raw.sock"
    async with raw_runtime(path) as peers:
        stub = Stub(ReferencePlugin(padding=20_000), name="ref", index="50", socket_path=path)
        starting = asyncio.create_task(stub.start())
        peer = await peers.get()
        await handshake(peer)
        await starting
        peer.request(1, 1, "Configure", b"")
        await peer.response()
        peer.frame_sizes.clear()
        peer.request(1, 3, "CreateContainer", api.CreateContainerRequest().SerializeToString())
        _, _, response = await peer.response()
        adjust = api.CreateContainerResponse.FromString(response.payload).adjust
        assert adjust.annotations["pad"] == "p" * 20_000
        assert len(peer.frame_sizes) >= 5
        assert all(size <= 4096 for size in peer.frame_sizes)
        await stub.close()


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">II", 1, 10) + struct.pack(">IIBB", 0, 1, 0x7F, 0),  # bad ttrpc type
        struct.pack(">II", 1, 0xFFFFFFF0),  # mux length past the limit
    ],
    ids=["bad-type", "huge-frame"],
)
async def test_stub_drops_a_garbage_runtime_with_a_reason(
    sock_dir: Path, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = sock_dir / "raw.sock"
    async with raw_runtime(path) as peers:
        stub = Stub(ReferencePlugin(), name="ref", index="50", socket_path=path)
        starting = asyncio.create_task(stub.start())
        peer = await peers.get()
        await handshake(peer)
        await starting
        with caplog.at_level(logging.WARNING):
            peer.send_raw(garbage)
            disconnect = await asyncio.wait_for(stub.wait_closed(), 5)
        assert disconnect.by_runtime
        assert disconnect.reason.startswith("protocol error:")
        assert "protocol error" in caplog.text
        assert await peer.reader.read() == b""  # the stub hung up


async def test_runtime_double_survives_garbage_peers(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = sock_dir / "nri.sock"
    rng = random.Random(1234)
    async with RuntimeDouble(path, registration_timeout=1.0) as runtime:
        blobs = [
            struct.pack(">II", 2, 10) + struct.pack(">IIBB", 0, 1, 0x55, 0),
            struct.pack(">II", 2, 0xFFFFFFFF),
            *[struct.pack(">II", 2, 64) + rng.randbytes(64) for _ in range(5)],
            *[rng.randbytes(rng.randint(1, 300)) for _ in range(5)],
        ]
        with caplog.at_level(logging.WARNING):
            for blob in blobs[:2]:
                reader, writer = await asyncio.open_unix_connection(str(path))
                writer.write(blob)
                assert await asyncio.wait_for(reader.read(), 5) == b""
                writer.close()
            assert caplog.text.count("protocol error") == 2
            writers = []
            for blob in blobs[2:]:
                reader, writer = await asyncio.open_unix_connection(str(path))
                writer.write(blob)
                writers.append((reader, writer))
            # Every garbage connection ends: by a framing error or the registration timeout.
            for reader, writer in writers:
                await asyncio.wait_for(reader.read(), 5)
                writer.close()
        assert "plugin registration timed out" in caplog.text or "protocol error" in caplog.text
        # The runtime still serves real plugins.
        async with Stub(ReferencePlugin(), name="ok", index="10", socket_path=path):
            (handle,) = await runtime.wait_for_plugins(1)
            assert handle.id == "10-ok"


async def test_runtime_double_closes_a_silent_peer_after_the_registration_timeout(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path, registration_timeout=0.2):
        with caplog.at_level(logging.WARNING):
            reader, writer = await asyncio.open_unix_connection(str(path))
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
        assert "plugin registration timed out" in caplog.text


async def test_runtime_double_refuses_an_invalid_event_mask(sock_dir: Path) -> None:
    class Greedy(Plugin):
        async def configure(self, runtime: RuntimeInfo) -> int:
            return 0x8000

    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path) as runtime:
        stub = Stub(Greedy(), name="greedy", index="10", socket_path=path)
        await stub.start()
        ((plugin, reason),) = await runtime.wait_for_drop(1)
        assert (plugin, reason) == ("10-greedy", "invalid plugin events: 0x8000")
        assert (await asyncio.wait_for(stub.wait_closed(), 5)).by_runtime
