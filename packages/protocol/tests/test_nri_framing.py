"""Golden bytes and properties of the sans-IO mux and ttrpc codecs."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri import ttrpc_pb2
from nvml_mock_protocol.nri.errors import MessageTooLargeError, ProtocolError
from nvml_mock_protocol.nri.mux import (
    MAX_RECEIVE_PAYLOAD,
    MAX_SEND_PAYLOAD,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    MuxDecoder,
    encode_frames,
)
from nvml_mock_protocol.nri.ttrpc import (
    MESSAGE_LENGTH_MAX,
    Message,
    MessageType,
    OversizedMessage,
    TtrpcDecoder,
    encode_message,
)


def h(text: str) -> bytes:
    """Bytes from a spec-style listing: hex pairs and "quoted" ASCII runs."""
    out = bytearray()
    for i, part in enumerate(text.split('"')):
        out += part.encode() if i % 2 else bytes.fromhex(part)
    return bytes(out)


def wire(conn_id: int, stream_id: int, message_type: MessageType, body: bytes) -> bytes:
    return encode_frames(conn_id, encode_message(stream_id, message_type, body))


# Golden bytes of a minimal plugin's exchange with the runtime, written out by hand from
# the mux, ttrpc and protobuf encodings (not produced by the code under test).


def test_register_plugin_request_frame() -> None:
    payload = api.RegisterPluginRequest(plugin_name="py-inject", plugin_idx="50")
    request = ttrpc_pb2.Request(
        service="nri.pkg.api.v1alpha1.Runtime",
        method="RegisterPlugin",
        payload=payload.SerializeToString(),
        timeout_nano=5_000_000_000,
    )
    frame = wire(RUNTIME_SERVICE_CONN, 1, MessageType.REQUEST, request.SerializeToString())
    expected = h(
        "00 00 00 02 00 00 00 4f  00 00 00 45 00 00 00 01 01 00"
        '0a 1c "nri.pkg.api.v1alpha1.Runtime" 12 0e "RegisterPlugin"'
        '1a 0f 0a 09 "py-inject" 12 02 "50" 20 80 e4 97 d0 12'
    )
    assert len(expected) == 87
    assert frame == expected


def test_empty_ok_response_is_a_zero_length_message() -> None:
    frame = wire(RUNTIME_SERVICE_CONN, 1, MessageType.RESPONSE, b"")
    assert frame == h("00 00 00 02 00 00 00 0a 00 00 00 00 00 00 00 01 02 00")
    assert ttrpc_pb2.Response().SerializeToString() == b""


def test_configure_request_payload_decodes() -> None:
    payload = h('12 0a "containerd" 1a 06 "v2.1.0" 20 88 27 28 e8 07')
    request = api.ConfigureRequest.FromString(payload)
    assert request.runtime_name == "containerd"
    assert request.runtime_version == "v2.1.0"
    assert request.registration_timeout == 5000
    assert request.request_timeout == 1000
    assert api.ConfigureRequest(request_timeout=2000).SerializeToString() == h("28 d0 0f")


def test_configure_response_frame() -> None:
    body = ttrpc_pb2.Response(
        payload=api.ConfigureResponse(events=0x08).SerializeToString()
    ).SerializeToString()
    assert body == h("12 02 10 08")
    frame = wire(PLUGIN_SERVICE_CONN, 1, MessageType.RESPONSE, body)
    assert frame == h("00 00 00 01 00 00 00 0e 00 00 00 04 00 00 00 01 02 00 12 02 10 08")


def test_synchronize_more_reply_payload() -> None:
    assert api.SynchronizeResponse(more=True).SerializeToString() == h("10 01")


def test_create_container_response_frame() -> None:
    kv = api.KeyValue(key="FOO", value="bar")
    mount = api.Mount(destination="/data", type="bind", source="/srv/data", options=["rbind", "ro"])
    device = api.LinuxDevice(path="/dev/fuse", type="c", major=10, minor=229)
    device.file_mode.value = 0o666
    assert kv.SerializeToString() == h('0a 03 "FOO" 12 03 "bar"')
    assert mount.SerializeToString() == h(
        '0a 05 "/data" 12 04 "bind" 1a 09 "/srv/data" 22 05 "rbind" 22 02 "ro"'
    )
    assert device.SerializeToString() == h(
        '0a 09 "/dev/fuse" 12 01 "c" 18 0a 20 e5 01 2a 03 08 b6 03'
    )
    adjust = api.ContainerAdjustment(mounts=[mount], env=[kv])
    adjust.linux.devices.append(device)
    m, k, d = mount.SerializeToString(), kv.SerializeToString(), device.SerializeToString()
    adjust_bytes = (
        bytes([0x1A, len(m)]) + m + bytes([0x22, len(k)]) + k
        + bytes([0x32, len(d) + 2, 0x0A, len(d)]) + d
    )  # fmt: skip
    assert adjust.SerializeToString() == adjust_bytes
    response = api.CreateContainerResponse(adjust=adjust).SerializeToString()
    assert response[:2] == h("0a 4d")
    body = ttrpc_pb2.Response(payload=response).SerializeToString()
    assert body[:4] == h("12 4f 0a 4d")
    frame = wire(PLUGIN_SERVICE_CONN, 5, MessageType.RESPONSE, body)
    assert frame[:18] == h("00 00 00 01 00 00 00 5b 00 00 00 51 00 00 00 05 02 00")
    assert len(frame) == 8 + 0x5B


def test_error_status_bodies() -> None:
    denied = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=2, message="denied"))
    assert denied.SerializeToString() == h('0a 0a 08 02 12 06 "denied"')
    unknown = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=12, message="method X"))
    assert unknown.SerializeToString() == h('0a 0c 08 0c 12 08 "method X"')


# The mux codec.


def test_large_write_is_split_into_4096_byte_frames() -> None:
    data = bytes(range(256)) * 40  # 10 240 bytes
    frames = encode_frames(PLUGIN_SERVICE_CONN, data)
    sizes = []
    offset = 0
    while offset < len(frames):
        conn_id, length = struct.unpack_from(">II", frames, offset)
        assert conn_id == PLUGIN_SERVICE_CONN
        sizes.append(length)
        offset += 8 + length
    assert sizes == [4096, 4096, 2048]
    decoded = MuxDecoder().feed(frames)
    assert b"".join(p for _, p in decoded) == data


def test_mux_length_past_limit_is_refused_before_allocation() -> None:
    decoder = MuxDecoder()
    tracemalloc.start()
    try:
        with pytest.raises(MessageTooLargeError) as info:
            decoder.feed(struct.pack(">II", 1, 0xFFFFFFFF))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.length == 0xFFFFFFFF
    assert info.value.limit == MAX_RECEIVE_PAYLOAD
    assert peak < 64 * 1024
    assert decoder.buffered == 0


def test_mux_accepts_exactly_the_limit() -> None:
    decoder = MuxDecoder(max_payload=16)
    assert decoder.feed(struct.pack(">II", 2, 16) + b"x" * 16) == [(2, b"x" * 16)]
    with pytest.raises(MessageTooLargeError):
        decoder.feed(struct.pack(">II", 2, 17))


@given(
    st.lists(st.tuples(st.integers(0, 0xFFFFFFFF), st.binary(max_size=9000)), max_size=8),
    st.lists(st.integers(1, 5000), max_size=20),
)
def test_mux_round_trip_under_any_split(writes: list[tuple[int, bytes]], cuts: list[int]) -> None:
    stream = b"".join(encode_frames(c, d) for c, d in writes)
    decoder = MuxDecoder()
    got: list[tuple[int, bytes]] = []
    offset = 0
    for cut in [*cuts, len(stream)]:
        got += decoder.feed(stream[offset : offset + cut])
        offset += cut
    got += decoder.feed(stream[offset:])
    per_conn_expected: dict[int, bytes] = {}
    for c, d in writes:
        per_conn_expected[c] = per_conn_expected.get(c, b"") + d
    per_conn_got: dict[int, bytes] = {}
    for c, d in got:
        assert len(d) <= MAX_SEND_PAYLOAD
        per_conn_got[c] = per_conn_got.get(c, b"") + d
    assert {c: d for c, d in per_conn_got.items() if d} == {
        c: d for c, d in per_conn_expected.items() if d
    }
    assert decoder.buffered == 0


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=600), max_size=12))
def test_mux_decoder_survives_arbitrary_bytes(chunks: list[bytes]) -> None:
    decoder = MuxDecoder()
    for chunk in chunks:
        try:
            frames = decoder.feed(chunk)
        except ProtocolError:
            return  # a framing error is the only allowed failure
        for _, payload in frames:
            assert len(payload) <= MAX_RECEIVE_PAYLOAD
    assert decoder.buffered < 8 + MAX_RECEIVE_PAYLOAD


# The ttrpc codec.


def test_ttrpc_oversized_body_is_skipped_without_buffering() -> None:
    decoder = TtrpcDecoder()
    length = MESSAGE_LENGTH_MAX + 1
    tracemalloc.start()
    try:
        events = decoder.feed(struct.pack(">IIBB", length, 7, 1, 0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert events == [OversizedMessage(7, MessageType.REQUEST, 0, length)]
    assert peak < 64 * 1024
    chunk = b"\0" * 65536
    remaining = length
    while remaining > len(chunk):
        assert decoder.feed(chunk) == []
        assert decoder.buffered == 0
        remaining -= len(chunk)
    follow_up = encode_message(9, MessageType.REQUEST, b"ok")
    assert decoder.feed(b"\0" * remaining + follow_up) == [
        Message(9, MessageType.REQUEST, 0, b"ok")
    ]


def test_ttrpc_refuses_to_encode_past_the_limit() -> None:
    with pytest.raises(MessageTooLargeError):
        encode_message(1, MessageType.REQUEST, b"\0" * (MESSAGE_LENGTH_MAX + 1))


def test_ttrpc_unknown_message_type_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="unknown ttrpc message type 0x7f"):
        TtrpcDecoder().feed(struct.pack(">IIBB", 0, 1, 0x7F, 0))


@given(
    st.lists(
        st.tuples(
            st.integers(0, 0xFFFFFFFF),
            st.sampled_from(list(MessageType)),
            st.integers(0, 255),
            st.binary(max_size=3000),
        ),
        max_size=8,
    ),
    st.lists(st.integers(1, 4096), max_size=20),
)
def test_ttrpc_round_trip_under_any_split(
    messages: list[tuple[int, MessageType, int, bytes]], cuts: list[int]
) -> None:
    stream = b"".join(encode_message(s, t, p, f) for s, t, f, p in messages)
    decoder = TtrpcDecoder()
    got: list[Message | OversizedMessage] = []
    offset = 0
    for cut in cuts:
        got += decoder.feed(stream[offset : offset + cut])
        offset += cut
    got += decoder.feed(stream[offset:])
    assert got == [Message(s, t, f, p) for s, t, f, p in messages]


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=600), max_size=12))
def test_ttrpc_decoder_survives_arbitrary_bytes(chunks: list[bytes]) -> None:
    decoder = TtrpcDecoder()
    for chunk in chunks:
        try:
            decoded = decoder.feed(chunk)
        except ProtocolError:
            return
        for message in decoded:
            if isinstance(message, Message):
                assert len(message.payload) <= MESSAGE_LENGTH_MAX
    assert decoder.buffered < 10 + MESSAGE_LENGTH_MAX
