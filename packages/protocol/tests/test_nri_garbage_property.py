"""Property: whatever bytes a peer sends, only its own connection can suffer.

Each example opens a real unix socketpair, puts the runtime-side transport on
one end and writes arbitrary bytes (optionally after a valid registration) on
the other. The connection either stays usable or is closed with a reason;
nothing escapes into the event loop, and a well-formed call on a fresh
connection still works afterwards.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nvml_mock_protocol.nri import NriConnection, api_pb2, ttrpc_pb2
from nvml_mock_protocol.nri.connection import CallContext

RUNTIME = "nri.pkg.api.v1alpha1.Runtime"


def _register_frame() -> bytes:
    payload = api_pb2.RegisterPluginRequest(plugin_name="p", plugin_idx="10").SerializeToString()
    body = ttrpc_pb2.Request(
        service=RUNTIME, method="RegisterPlugin", payload=payload
    ).SerializeToString()
    message = struct.pack(">IIBB", len(body), 1, 1, 0) + body
    return struct.pack(">II", 2, len(message)) + message


async def _exercise(garbage: list[bytes], prefix_valid: bool) -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    calls: list[str] = []

    async def register(payload: bytes, context: CallContext) -> bytes:
        calls.append(api_pb2.RegisterPluginRequest.FromString(payload).plugin_name)
        return b""

    services = {RUNTIME: {"RegisterPlugin": register}}

    async def serve_one(data: list[bytes]) -> tuple[NriConnection, bytes]:
        ours, theirs = socket.socketpair()
        _, connection = await loop.connect_accepted_socket(
            lambda: NriConnection.runtime_side(services, "fuzz"), ours
        )
        reader, writer = await asyncio.open_unix_connection(sock=theirs)
        for chunk in data:
            writer.write(chunk)
        await writer.drain()
        writer.write_eof()
        received = await asyncio.wait_for(reader.read(), 5)
        await asyncio.wait_for(connection.wait_closed(), 5)
        writer.close()
        return connection, received

    data = ([_register_frame()] if prefix_valid else []) + garbage
    connection, _ = await serve_one(data)
    assert connection.closed and connection.close_reason
    # A clean peer on a fresh connection is still served.
    calls.clear()
    _, received = await serve_one([_register_frame()])
    assert calls == ["p"]
    assert received == struct.pack(">II", 2, 10) + struct.pack(">IIBB", 0, 1, 2, 0)
    assert errors == []


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=4), st.booleans())
def test_garbage_only_hurts_its_own_connection(garbage: list[bytes], prefix_valid: bool) -> None:
    asyncio.run(_exercise(garbage, prefix_valid))
