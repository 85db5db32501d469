"""The stub's transport: a thread reads the socket and answers plain handlers in place.

Against the runtime double and against a hand-rolled peer (``test_nri_wire``'s), over real
unix sockets: where each kind of handler runs, replies to what one read brought go out
in one write, a request in any split gets the same answer, a runtime that stops reading
loses its connection instead of holding a writer, and errors keep their status codes.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from pathlib import Path

import pytest
from nvml_mock_protocol.nri import (
    Event,
    Plugin,
    RuntimeDouble,
    RuntimeInfo,
    Stub,
    TtrpcError,
    threaded,
    ttrpc_pb2,
)
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.errors import PluginError
from test_nri_wire import RawPeer, handshake, raw_runtime

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"


class Mixed(Plugin):
    """A plain CreateContainer and a coroutine StopContainer; records their threads."""

    def __init__(self, padding: int = 0) -> None:
        self.threads: dict[str, str] = {}
        self.padding = padding

    def configure(self, runtime: RuntimeInfo) -> list[Event]:
        return [Event.CREATE_CONTAINER, Event.STOP_CONTAINER]

    def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.ContainerAdjustment:
        self.threads["create"] = threading.current_thread().name
        adjust = api.ContainerAdjustment(env=[api.KeyValue(key="FROM", value=container.name)])
        if self.padding:
            adjust.annotations["pad"] = "p" * self.padding
        return adjust

    async def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]:
        await asyncio.sleep(0)
        self.threads["stop"] = threading.current_thread().name
        return []


def _pod() -> api.PodSandbox:
    return api.PodSandbox(id="sb", name="p", uid="u", namespace="default")


def _container(name: str = "main") -> api.Container:
    return api.Container(id=f"ctr-{name}", pod_sandbox_id="sb", name=name, env=["PATH=/bin"])


async def test_plain_methods_run_on_the_connection_thread_coroutines_on_the_loop(
    sock_dir: Path,
) -> None:
    plugin = Mixed()
    path = sock_dir / "nri.sock"
    async with (
        RuntimeDouble(path) as runtime,
        Stub(plugin, name="mixed", index="10", socket_path=path),
    ):
        await runtime.wait_for_plugins(1)
        result = await runtime.create_container(_pod(), _container())
        assert result.env()["FROM"] == "main"
        await runtime.stop_container(_pod(), result.container)
    assert plugin.threads["create"] == "nri plugin 10-mixed"
    assert plugin.threads["stop"] == threading.main_thread().name


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "coroutine"])
async def test_a_refusal_keeps_its_status_either_way(sock_dir: Path, plain: bool) -> None:
    class Plain(Plugin):
        def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            raise TtrpcError(7, "denied here")

    class Coroutine(Plugin):
        async def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            raise TtrpcError(7, "denied here")

    class Broken(Plugin):
        def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            raise RuntimeError("plain bug")

    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path) as runtime:
        async with Stub(Plain() if plain else Coroutine(), name="no", index="10", socket_path=path):
            await runtime.wait_for_plugins(1)
            with pytest.raises(PluginError, match="denied here"):
                await runtime.create_container(_pod(), _container())
            assert [p.id for p in runtime.plugins] == ["10-no"], "still connected"
        async with asyncio.timeout(5):
            while runtime.plugins:
                await asyncio.sleep(0.01)
        async with Stub(Broken(), name="bug", index="10", socket_path=path):
            await runtime.wait_for_plugins(1)
            with pytest.raises(PluginError, match="plain bug"):
                await runtime.create_container(_pod(), _container())


def _request(sid: int, method: str, payload: bytes) -> bytes:
    body = ttrpc_pb2.Request(service=PLUGIN, method=method, payload=payload).SerializeToString()
    message = struct.pack(">IIBB", len(body), sid, 1, 0) + body
    return struct.pack(">II", 1, len(message)) + message


async def _configured(peer: RawPeer, starting: asyncio.Task[None]) -> None:
    await handshake(peer)
    await starting
    peer.send_raw(_request(1, "Configure", b""))
    _, sid, response = await peer.response()
    assert sid == 1 and not response.HasField("status")


async def test_requests_read_together_are_answered_in_one_write(sock_dir: Path) -> None:
    path = sock_dir / "raw.sock"
    async with raw_runtime(path) as peers:
        stub = Stub(Mixed(), name="ref", index="50", socket_path=path)
        starting = asyncio.create_task(stub.start())
        peer = await peers.get()
        await _configured(peer, starting)
        connection = stub._connection
        assert connection is not None
        writes: list[bytes] = []
        original = connection._write

        def spy(data: bytes) -> None:
            writes.append(data)
            original(data)

        connection._write = spy  # type: ignore[method-assign]
        requests = [
            api.CreateContainerRequest(pod=_pod(), container=_container(name)).SerializeToString()
            for name in ("a", "b")
        ]
        together = _request(3, "CreateContainer", requests[0])
        together += _request(5, "CreateContainer", requests[1])
        peer.send_raw(together)
        answers = [await peer.response(), await peer.response()]
        assert [sid for _, sid, _ in answers] == [3, 5]
        values = [
            api.CreateContainerResponse.FromString(r.payload).adjust.env[0].value
            for _, _, r in answers
        ]
        assert values == ["a", "b"]
        assert len(writes) == 1, "both replies in one write"
        await stub.close()


async def test_a_request_in_pieces_gets_the_answer_of_a_whole_one(sock_dir: Path) -> None:
    path = sock_dir / "raw.sock"
    async with raw_runtime(path) as peers:
        stub = Stub(Mixed(), name="ref", index="50", socket_path=path)
        starting = asyncio.create_task(stub.start())
        peer = await peers.get()
        await _configured(peer, starting)
        payload = api.CreateContainerRequest(pod=_pod(), container=_container()).SerializeToString()
        peer.send_raw(_request(3, "CreateContainer", payload))
        _, _, whole = await peer.response()
        cuts = (1, 9, 17, 18, 100)  # inside and across both headers, and in the body
        for sid, cut in zip(range(5, 100, 2), cuts, strict=False):
            frame = _request(sid, "CreateContainer", payload)
            peer.send_raw(frame[:cut])
            await peer.writer.drain()
            await asyncio.sleep(0.02)
            peer.send_raw(frame[cut:])
            _, answered, pieces = await peer.response()
            assert answered == sid
            assert pieces.payload == whole.payload
        await stub.close()


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 3_000_000])
def test_the_reply_envelope_is_protobufs_own_encoding(size: int) -> None:
    payload = b"x" * size
    assert (
        threaded._response_bytes(payload) == ttrpc_pb2.Response(payload=payload).SerializeToString()
    )


async def test_a_runtime_that_stops_reading_loses_the_connection(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(threaded, "SEND_TIMEOUT", 0.3)
    path = sock_dir / "raw.sock"
    async with raw_runtime(path) as peers:
        stub = Stub(Mixed(padding=3_000_000), name="ref", index="50", socket_path=path)
        starting = asyncio.create_task(stub.start())
        peer = await peers.get()
        await _configured(peer, starting)
        payload = api.CreateContainerRequest(pod=_pod(), container=_container()).SerializeToString()
        peer.send_raw(_request(3, "CreateContainer", payload))  # then never reads again
        disconnect = await asyncio.wait_for(stub.wait_closed(), 10)
        assert disconnect.by_runtime
        assert disconnect.reason.startswith("connection lost:"), disconnect.reason


class Later(Plugin):
    """Leaves work for after its replies: the work waits on *gate*, and every step is logged."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.log: list[str] = []

    def configure(self, runtime: RuntimeInfo) -> list[Event]:
        return [Event.CREATE_CONTAINER, Event.START_CONTAINER, Event.STOP_CONTAINER]

    def state_change(
        self, event: Event, pod: api.PodSandbox, container: api.Container | None
    ) -> None:
        assert container is not None
        self.log.append(f"answer {container.name}")
        if container.name == "boom":
            threaded.after_reply(self._boom)
            threaded.after_reply(lambda: self.log.append("after boom"))
        else:
            threaded.after_reply(lambda: self._later(container.name))

    def _later(self, name: str) -> None:
        assert self.gate.wait(10), "the test never opened the gate"
        self.log.append(f"work {name}")

    def _boom(self) -> None:
        raise RuntimeError("bookkeeping failed")

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self.log.append(f"create {container.name}")


async def test_work_after_a_reply_runs_once_it_is_written_before_the_next_request(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = Later()
    path = sock_dir / "nri.sock"
    async with (
        RuntimeDouble(path) as runtime,
        Stub(plugin, name="later", index="10", socket_path=path),
    ):
        await runtime.wait_for_plugins(1)
        # the reply comes while the work it left is still blocked: it was written first
        await asyncio.wait_for(runtime.state_change(Event.START_CONTAINER, _pod(), _container()), 5)
        assert plugin.log == ["answer main"]
        asking = asyncio.create_task(runtime.create_container(_pod(), _container("next")))
        await asyncio.sleep(0.2)
        assert not asking.done(), "the next request waits for the work of the one before"
        plugin.gate.set()
        await asyncio.wait_for(asking, 5)
        assert plugin.log == ["answer main", "work main", "create next"]
        # work that fails is logged; the reply went out, the rest of the work still runs, and
        # the connection keeps serving
        await runtime.state_change(Event.START_CONTAINER, _pod(), _container("boom"))
        await runtime.create_container(_pod(), _container("again"))
        assert plugin.log[-3:] == ["answer boom", "after boom", "create again"]
        assert len(runtime.plugins) == 1
    assert "work after a reply failed" in caplog.text
    assert "bookkeeping failed" in caplog.text


def test_work_left_outside_a_connection_runs_at_once() -> None:
    done: list[str] = []
    threaded.after_reply(lambda: done.append("now"))
    assert done == ["now"]
