"""The kubelet's side of the device-plugin API, enough to read what a device plugin advertises.

A device plugin registers at the kubelet's socket (``Registration/Register``: API version,
its socket's name, the resource name), then the kubelet dials it and reads the device list
from ``ListAndWatch``. The kubelet's node status follows from that list: capacity counts every
device, allocatable only the healthy ones. The messages are tiny, so they are read with a
protobuf wire decoder here instead of generated code (field numbers from the kubelet's
``v1beta1`` API: RegisterRequest version 1, endpoint 2, resource_name 3; ListAndWatchResponse
devices 1; Device ID 1, health 2).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc

from nvml_mock_kwok.errors import RecordError

__all__ = ["Advertised", "FakeKubelet", "decode_fields"]

HEALTHY: Final = "Healthy"
_REGISTER: Final = "/v1beta1.Registration/Register"
_LIST_AND_WATCH: Final = "/v1beta1.DevicePlugin/ListAndWatch"


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise RecordError("a device plugin sent a malformed protobuf message")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def decode_fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """Split one protobuf message into ``(field number, value)`` pairs, in wire order."""
    fields: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _uvarint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _uvarint(data, pos)
            fields.append((number, value))
        elif wire == 2:
            size, pos = _uvarint(data, pos)
            fields.append((number, data[pos : pos + size]))
            pos += size
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise RecordError(f"a device plugin sent protobuf wire type {wire}")
    return fields


def _text(fields: list[tuple[int, int | bytes]], number: int) -> str:
    for field, value in fields:
        if field == number and isinstance(value, bytes):
            return value.decode("utf-8")
    return ""


@dataclass(frozen=True)
class Advertised:
    """One resource as a device plugin advertises it: device IDs and their health."""

    resource: str
    devices: dict[str, str]

    @property
    def capacity(self) -> int:
        """What the kubelet puts in the node's capacity: every device."""
        return len(self.devices)

    @property
    def allocatable(self) -> int:
        """What the kubelet puts in the node's allocatable: the healthy devices."""
        return sum(1 for health in self.devices.values() if health == HEALTHY)


class FakeKubelet:
    """A registration server on ``<dir>/kubelet.sock`` that reads every plugin's device list."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.socket = directory / "kubelet.sock"
        self._endpoints: queue.Queue[tuple[str, str]] = queue.Queue()
        self._latest: dict[str, Advertised] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            "v1beta1.Registration",
            {
                "Register": grpc.unary_unary_rpc_method_handler(
                    self._register,
                    request_deserializer=lambda raw: raw,
                    response_serializer=lambda raw: raw,
                )
            },
        )
        self._server.add_generic_rpc_handlers((handler,))
        self._channels: list[grpc.Channel] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> FakeKubelet:
        self._server.add_insecure_port(f"unix:{self.socket}")
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)
        for channel in self._channels:
            channel.close()

    def _register(self, request: bytes, context: Any) -> bytes:
        fields = decode_fields(request)
        endpoint, resource = _text(fields, 2), _text(fields, 3)
        thread = threading.Thread(target=self._watch, args=(endpoint, resource), daemon=True)
        self._threads.append(thread)
        thread.start()
        return b""

    def _watch(self, endpoint: str, resource: str) -> None:
        # the plugin names its socket relative to the kubelet's directory
        channel = grpc.insecure_channel(f"unix:{self.directory / endpoint}")
        self._channels.append(channel)
        stream = channel.unary_stream(
            _LIST_AND_WATCH, request_serializer=lambda raw: raw, response_deserializer=lambda r: r
        )
        replies: Iterator[bytes] = stream(b"")
        try:
            for reply in replies:
                devices: dict[str, str] = {}
                for number, value in decode_fields(reply):
                    if number == 1 and isinstance(value, bytes):
                        device = decode_fields(value)
                        devices[_text(device, 1)] = _text(device, 2)
                with self._changed:
                    self._latest[resource] = Advertised(resource, devices)
                    self._changed.notify_all()
        except grpc.RpcError:
            return

    def wait(self, timeout: float, *, settle: float = 2.0) -> dict[str, Advertised]:
        """Every resource advertised, once no new list has come for ``settle`` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self._latest), timeout):
                raise RecordError(f"no device plugin registered within {timeout:.0f}s")
            while self._changed.wait(settle):
                pass
            return dict(self._latest)

    def snapshot(self) -> dict[str, Advertised]:
        """The latest list per resource."""
        with self._lock:
            return dict(self._latest)
