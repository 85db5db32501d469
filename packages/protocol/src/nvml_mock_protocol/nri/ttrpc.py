"""ttrpc message framing, without I/O.

ttrpc is containerd's small RPC protocol: every message is a 10-byte
big-endian header (data length, stream id, type, flags) and a protobuf body.
This module turns bytes into messages and back and nothing else, so the same
code serves the plugin stub, the runtime test double and the fuzz tests, and
none of it needs a socket to be tested.

The 4 MiB limit is checked on the header, before any buffer for the body
exists. An oversized message is skipped byte by byte (as the Go server does)
and reported as :class:`OversizedMessage`, so the caller can answer
``RESOURCE_EXHAUSTED`` on that stream and keep the connection.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from nvml_mock_protocol.nri.errors import MessageTooLargeError, ProtocolError

HEADER: Final = struct.Struct(">IIBB")
HEADER_SIZE: Final = HEADER.size
MESSAGE_LENGTH_MAX: Final = 4 << 20
"""Largest body ttrpc accepts (``messageLengthMax``), excluding the header."""


class MessageType(IntEnum):
    """The ``type`` byte of a ttrpc header."""

    REQUEST = 1
    RESPONSE = 2
    DATA = 3
    """Streaming only; NRI never uses it."""


class Code(IntEnum):
    """gRPC status codes, as carried in a ttrpc response's status."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


@dataclass(frozen=True, slots=True)
class Message:
    """One complete ttrpc message."""

    stream_id: int
    type: MessageType
    flags: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class OversizedMessage:
    """A message whose declared length exceeded the limit; its body was discarded."""

    stream_id: int
    type: MessageType
    flags: int
    length: int


def encode_message(
    stream_id: int,
    message_type: MessageType,
    payload: bytes,
    flags: int = 0,
    *,
    max_length: int = MESSAGE_LENGTH_MAX,
) -> bytes:
    """Return header + payload; refuse (locally, like the Go sender) past ``max_length``."""
    if len(payload) > max_length:
        raise MessageTooLargeError("ttrpc message", len(payload), max_length)
    if not 0 <= stream_id <= 0xFFFFFFFF:
        raise ValueError(f"stream id {stream_id} is outside uint32")
    return HEADER.pack(len(payload), stream_id, message_type, flags) + payload


class TtrpcDecoder:
    """Incremental decoder of one ttrpc byte stream.

    Feed it bytes as they arrive, in any split; it returns the messages that
    became complete. A header with an unknown message type raises
    :class:`ProtocolError` (the stream cannot be resynchronised after that).
    """

    __slots__ = ("_buffer", "_discard", "_max_length")

    def __init__(self, max_length: int = MESSAGE_LENGTH_MAX) -> None:
        self._buffer = bytearray()
        self._discard = 0
        self._max_length = max_length

    @property
    def buffered(self) -> int:
        """Bytes held waiting for the rest of a message."""
        return len(self._buffer)

    @property
    def idle(self) -> bool:
        """True between messages: nothing held, nothing being skipped."""
        return not self._buffer and not self._discard

    def feed(self, data: bytes) -> list[Message | OversizedMessage]:
        """Consume ``data``; return every message it completed, in order."""
        if self._discard:
            skipped = min(self._discard, len(data))
            self._discard -= skipped
            data = data[skipped:]
        buffer = self._buffer
        buffer += data
        out: list[Message | OversizedMessage] = []
        offset = 0
        end = len(buffer)
        while end - offset >= HEADER_SIZE:
            length, stream_id, raw_type, flags = HEADER.unpack_from(buffer, offset)
            try:
                message_type = MessageType(raw_type)
            except ValueError:
                del buffer[:]
                raise ProtocolError(
                    f"unknown ttrpc message type 0x{raw_type:02x} on stream {stream_id}"
                ) from None
            if length > self._max_length:
                offset += HEADER_SIZE
                available = end - offset
                if available >= length:
                    offset += length
                else:
                    self._discard = length - available
                    offset = end
                out.append(OversizedMessage(stream_id, message_type, flags, length))
                continue
            if end - offset - HEADER_SIZE < length:
                break
            start = offset + HEADER_SIZE
            offset = start + length
            out.append(Message(stream_id, message_type, flags, bytes(buffer[start:offset])))
        if offset:
            del buffer[:offset]
        return out
