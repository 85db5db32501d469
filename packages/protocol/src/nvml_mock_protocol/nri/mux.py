"""NRI connection multiplexing framing, without I/O.

containerd's NRI runs two ttrpc connections over one unix socket: ConnID 1
(the runtime calls the plugin) and ConnID 2 (the plugin calls the runtime).
Each frame is an 8-byte big-endian header (ConnID, length) and a payload;
payloads are not aligned to ttrpc messages, so each ConnID is a byte stream.

Two limits matter and they are different:

- sending: every payload is at most :data:`MAX_SEND_PAYLOAD` (4096) bytes,
  because the Go reader fails with ENOMEM on a frame larger than its 4096-byte
  bufio buffer and the call never completes;
- receiving: a declared length past :data:`MAX_RECEIVE_PAYLOAD` (a full ttrpc
  message plus header, the Go writer's own maximum) is refused before any
  buffer is allocated.
"""

from __future__ import annotations

import struct
from typing import Final

from nvml_mock_protocol.nri.errors import MessageTooLargeError
from nvml_mock_protocol.nri.ttrpc import HEADER_SIZE, MESSAGE_LENGTH_MAX

HEADER: Final = struct.Struct(">II")
HEADER_SIZE_MUX: Final = HEADER.size
PLUGIN_SERVICE_CONN: Final = 1
"""The runtime is the ttrpc client, the plugin serves ``nri.pkg.api.v1alpha1.Plugin``."""
RUNTIME_SERVICE_CONN: Final = 2
"""The plugin is the ttrpc client, the runtime serves ``nri.pkg.api.v1alpha1.Runtime``."""
MAX_SEND_PAYLOAD: Final = 4096
MAX_RECEIVE_PAYLOAD: Final = HEADER_SIZE + MESSAGE_LENGTH_MAX


def encode_frames(conn_id: int, data: bytes, max_payload: int = MAX_SEND_PAYLOAD) -> bytes:
    """Split ``data`` into frames for ``conn_id`` of at most ``max_payload`` bytes each.

    Returns the frames concatenated, ready for one write (so frames of two
    messages never interleave). Empty ``data`` produces no frame.
    """
    if max_payload <= 0:
        raise ValueError(f"max_payload must be positive, got {max_payload}")
    size = len(data)
    if size <= max_payload:
        return HEADER.pack(conn_id, size) + data if size else b""
    view = memoryview(data)
    parts: list[bytes] = []
    for start in range(0, size, max_payload):
        chunk = view[start : start + max_payload]
        parts.append(HEADER.pack(conn_id, len(chunk)))
        parts.append(bytes(chunk))
    return b"".join(parts)


class MuxDecoder:
    """Incremental decoder of the multiplexed socket stream.

    :meth:`feed` returns ``(conn_id, payload)`` pairs in arrival order;
    consecutive payloads of one ConnID are to be concatenated by the caller.
    A length past the limit raises :class:`MessageTooLargeError` before allocation.
    """

    __slots__ = ("_buffer", "_max_payload")

    def __init__(self, max_payload: int = MAX_RECEIVE_PAYLOAD) -> None:
        self._buffer = bytearray()
        self._max_payload = max_payload

    @property
    def buffered(self) -> int:
        """Bytes held waiting for the rest of a frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Consume ``data``; return every frame it completed, in order."""
        buffer = self._buffer
        buffer += data
        out: list[tuple[int, bytes]] = []
        offset = 0
        end = len(buffer)
        while end - offset >= HEADER_SIZE_MUX:
            conn_id, length = HEADER.unpack_from(buffer, offset)
            if length > self._max_payload:
                del buffer[:]
                raise MessageTooLargeError(
                    f"mux frame on conn {conn_id}", length, self._max_payload
                )
            start = offset + HEADER_SIZE_MUX
            if end - start < length:
                break
            offset = start + length
            out.append((conn_id, bytes(buffer[start:offset])))
        if offset:
            del buffer[:offset]
        return out
