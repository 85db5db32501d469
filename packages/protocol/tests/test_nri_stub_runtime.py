"""A plugin built on the stub against the runtime double over a real unix socket."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_protocol.nri import (
    NRI_API_VERSION,
    AdjustmentConflictError,
    Disconnect,
    Event,
    Plugin,
    PluginError,
    RegistrationError,
    RuntimeDouble,
    RuntimeInfo,
    Stub,
    TtrpcError,
)
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.events import NOTIFICATION_RPCS, STATE_CHANGE_EVENTS


def make_pod(name: str = "pod-a", namespace: str = "default") -> api.PodSandbox:
    return api.PodSandbox(
        id=f"sandbox-{name}",
        name=name,
        uid=f"uid-{name}",
        namespace=namespace,
        labels={"app": name},
        annotations={"nvml-mock.nvidia.com/devices": "true"},
    )


def make_container(name: str = "main", pod: api.PodSandbox | None = None) -> api.Container:
    pod = pod or make_pod()
    return api.Container(
        id=f"ctr-{name}",
        pod_sandbox_id=pod.id,
        name=name,
        env=["PATH=/usr/bin", "HOME=/root"],
        mounts=[api.Mount(destination="/etc/hosts", type="bind", source="/h", options=["ro"])],
    )


class Recorder(Plugin):
    """Injects env, a mount and a device; records what it was told."""

    def __init__(self, env_value: str = "bar", padding: int = 0) -> None:
        self.runtime: RuntimeInfo | None = None
        self.synced: tuple[list[str], list[str]] | None = None
        self.created: list[tuple[str, str, list[str]]] = []
        self.env_value = env_value
        self.padding = padding

    async def configure(self, runtime: RuntimeInfo) -> list[Event]:
        self.runtime = runtime
        return [Event.CREATE_CONTAINER]

    async def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> None:
        self.synced = ([p.id for p in pods], [c.id for c in containers])

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.ContainerAdjustment:
        self.created.append((pod.namespace, container.name, list(container.env)))
        adjust = api.ContainerAdjustment(
            env=[api.KeyValue(key="FOO", value=self.env_value)],
            mounts=[
                api.Mount(
                    destination="/data", type="bind", source="/srv/data", options=["rbind", "ro"]
                )
            ],
        )
        adjust.linux.devices.add(
            path="/dev/fuse", type="c", major=10, minor=229
        ).file_mode.value = 0o666
        if self.padding:
            adjust.annotations["padding"] = "x" * self.padding
        return adjust


async def test_full_lifecycle_over_unix_socket(sock_dir: Path) -> None:
    path = sock_dir / "nri.sock"
    async with RuntimeDouble(
        path, request_timeout=1.5, plugin_config={"10-recorder": "key: value"}
    ) as runtime:
        pod = make_pod()
        runtime.add_pod(pod)
        runtime.add_container(make_container("existing", pod))
        disconnects: list[Disconnect] = []
        plugin = Recorder()
        stub = Stub(
            plugin, name="recorder", index="10", socket_path=path, on_disconnect=disconnects.append
        )
        await stub.start()
        await stub.wait_synchronized(timeout=5)
        assert stub.registered and stub.synchronized
        assert stub.request_timeout == 1.5
        assert stub.events == Event.CREATE_CONTAINER.bit == 0x8
        assert plugin.runtime is not None
        assert plugin.runtime.config == "key: value"
        assert plugin.runtime.runtime_name == "nvml-mock-runtime-double"
        assert plugin.runtime.registration_timeout == 5.0
        assert plugin.synced == (["sandbox-pod-a"], ["ctr-existing"])
        (handle,) = await runtime.wait_for_plugins(1)
        assert handle.id == "10-recorder" and handle.events == 0x8

        result = await runtime.create_container(pod, make_container("main", pod))
        assert result.consulted == ("10-recorder",)
        assert result.env() == {"PATH": "/usr/bin", "HOME": "/root", "FOO": "bar"}
        assert [m.destination for m in result.container.mounts] == ["/etc/hosts", "/data"]
        (device,) = result.container.linux.devices
        assert (device.path, device.major, device.minor, device.file_mode.value) == (
            "/dev/fuse",
            10,
            229,
            0o666,
        )
        assert plugin.created == [("default", "main", ["PATH=/usr/bin", "HOME=/root"])]

        # Notification events the plugin did not subscribe to are not sent.
        await runtime.state_change(Event.START_CONTAINER, pod, result.container)

        disconnect = await stub.close()
        assert disconnect == Disconnect("plugin closed the connection", by_runtime=False)
        assert disconnects == [disconnect]
        await asyncio.wait_for(_until(lambda: not runtime.plugins), 5)


async def test_reply_over_4kib_is_split_into_small_frames(sock_dir: Path) -> None:
    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path) as runtime:
        stub = Stub(Recorder(padding=20_000), name="big", index="20", socket_path=path)
        async with stub:
            await runtime.wait_for_plugins(1)
            writes: list[bytes] = []
            connection = stub._connection
            assert connection is not None
            original = connection._write

            def spy(data: bytes) -> None:
                writes.append(data)
                original(data)

            connection._write = spy  # type: ignore[method-assign]
            result = await runtime.create_container(make_pod(), make_container())
            assert result.container.annotations["padding"] == "x" * 20_000
            (reply,) = writes
            assert len(reply) > 20_000, "one write for the whole reply"
            sizes, offset = [], 0
            while offset < len(reply):
                conn_id, size = struct.unpack_from(">II", reply, offset)
                assert conn_id == 1
                sizes.append(size)
                offset += 8 + size
            assert offset == len(reply) and len(sizes) >= 5
            assert max(sizes) <= 4096, "frames of at most 4096 bytes, as the Go reader needs"


async def test_runtime_drops_a_plugin_that_misses_the_deadline(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Slow(Recorder):
        async def create_container(
            self, pod: api.PodSandbox, container: api.Container
        ) -> api.ContainerAdjustment:
            await asyncio.sleep(2)
            return await super().create_container(pod, container)

    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path, request_timeout=0.3) as runtime:
        fast = Stub(Recorder(env_value="fast"), name="fast", index="20", socket_path=path)
        slow = Stub(Slow(), name="slow", index="10", socket_path=path)
        await fast.start()
        await slow.start()
        await runtime.wait_for_plugins(2)
        assert [p.id for p in runtime.plugins] == ["10-slow", "20-fast"]
        with caplog.at_level(logging.WARNING):
            result = await runtime.create_container(make_pod(), make_container())
        assert result.dropped == ("10-slow",)
        assert result.consulted == ("20-fast",)
        assert result.env()["FOO"] == "fast"
        assert (
            "closing plugin 10-slow, failed to handle CreateContainer request: "
            "context deadline exceeded" in caplog.text
        )
        gone = await asyncio.wait_for(slow.wait_closed(), 5)
        assert gone.by_runtime
        assert [p.id for p in runtime.plugins] == ["20-fast"]
        await fast.close()


async def test_plugin_error_fails_creation_and_keeps_plugin(sock_dir: Path) -> None:
    class Refuser(Plugin):
        async def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            raise TtrpcError(2, "denied")

    path = sock_dir / "nri.sock"
    async with (
        RuntimeDouble(path) as runtime,
        Stub(Refuser(), name="refuser", index="10", socket_path=path),
    ):
        await runtime.wait_for_plugins(1)
        with pytest.raises(PluginError, match="denied") as info:
            await runtime.create_container(make_pod(), make_container())
        assert info.value.code == 2 and info.value.plugin == "10-refuser"
        assert [p.id for p in runtime.plugins] == ["10-refuser"]


async def test_runtime_closes_a_plugin_whose_configure_fails(sock_dir: Path) -> None:
    class BadConfig(Plugin):
        async def configure(self, runtime: RuntimeInfo) -> None:
            raise TtrpcError(3, "bad config")

    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path) as runtime:
        stub = Stub(BadConfig(), name="badcfg", index="10", socket_path=path)
        await stub.start()
        dropped = await runtime.wait_for_drop(1)
        assert dropped[0][0] == "10-badcfg" and "bad config" in dropped[0][1]
        assert runtime.plugins == []
        disconnect = await asyncio.wait_for(stub.wait_closed(), 5)
        assert disconnect.by_runtime


async def test_two_plugins_setting_one_env_conflict(sock_dir: Path) -> None:
    path = sock_dir / "nri.sock"
    async with (
        RuntimeDouble(path) as runtime,
        Stub(Recorder(), name="a", index="10", socket_path=path),
        Stub(Recorder(), name="b", index="20", socket_path=path),
    ):
        await runtime.wait_for_plugins(2)
        with pytest.raises(
            AdjustmentConflictError,
            match='plugins "20-b" and "10-a" both tried to set Mounts /data',
        ):
            await runtime.create_container(make_pod(), make_container())


async def test_registration_refused_for_bad_index(sock_dir: Path) -> None:
    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path):
        stub = Stub(Recorder(), name="ok", index="10", socket_path=path)
        stub.index = "1"  # bypass the local check to see the runtime refuse it
        with pytest.raises(RegistrationError, match="two digits"):
            await stub.start()


async def test_inherited_socket_like_a_launched_plugin(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    monkeypatch.setenv("NRI_PLUGIN_SOCKET", str(theirs.detach()))
    monkeypatch.setenv("NRI_PLUGIN_NAME", "launched")
    monkeypatch.setenv("NRI_PLUGIN_IDX", "05")
    async with RuntimeDouble(sock_dir / "unused.sock") as runtime:
        await runtime.attach(ours)
        stub = Stub.from_environment(Recorder(), socket_path=sock_dir / "absent.sock")
        assert stub.plugin_id == "05-launched"
        async with stub:
            (handle,) = await runtime.wait_for_plugins(1)
            assert handle.id == "05-launched"


async def test_runtime_going_away_is_surfaced(sock_dir: Path) -> None:
    path = sock_dir / "nri.sock"
    runtime = RuntimeDouble(path)
    await runtime.start()
    stub = Stub(Recorder(), name="p", index="10", socket_path=path)
    await stub.start()
    await runtime.wait_for_plugins(1)
    await runtime.close()
    disconnect = await asyncio.wait_for(stub.wait_closed(), 5)
    assert disconnect.by_runtime


async def _until(predicate: object) -> None:
    assert callable(predicate)
    while not predicate():
        await asyncio.sleep(0.01)


async def test_split_synchronize_is_joined_for_the_plugin(sock_dir: Path) -> None:
    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path, sync_part_limit=2000) as runtime:
        for i in range(40):
            pod = make_pod(f"pod-{i}")
            runtime.add_pod(pod)
            runtime.add_container(make_container(f"c{i}", pod))
        plugin = Recorder()
        async with Stub(plugin, name="sync", index="10", socket_path=path) as stub:
            await stub.wait_synchronized(timeout=5)
            assert plugin.synced is not None
            pods, containers = plugin.synced
            assert pods == [f"sandbox-pod-{i}" for i in range(40)]
            assert containers == [f"ctr-c{i}" for i in range(40)]
            await runtime.wait_for_plugins(1)


async def test_runtime_closes_a_plugin_that_mishandles_split_sync(sock_dir: Path) -> None:
    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path, sync_part_limit=500) as runtime:
        for i in range(10):
            runtime.add_pod(make_pod(f"pod-{i}"))
        stub = Stub(Recorder(), name="old", index="10", socket_path=path)
        stub._synchronize = _old_synchronize  # type: ignore[method-assign]
        await stub.start()
        ((plugin, reason),) = await runtime.wait_for_drop(1)
        assert (plugin, reason) == ("10-old", "plugin does not handle split sync requests")
        assert (await asyncio.wait_for(stub.wait_closed(), 5)).by_runtime


async def _old_synchronize(payload: bytes, context: object) -> bytes:
    """A pre-v0.7 plugin: ignores `more` and answers with an empty reply."""
    return b""


async def test_unsolicited_updates_reach_the_runtime(sock_dir: Path) -> None:
    path = sock_dir / "nri.sock"
    async with (
        RuntimeDouble(path) as runtime,
        Stub(Recorder(), name="upd", index="10", socket_path=path) as stub,
    ):
        await stub.wait_synchronized(timeout=5)
        failed = await stub.update_containers(
            [api.ContainerUpdate(container_id="ctr-x")],
            [api.ContainerEviction(container_id="ctr-y", reason="test")],
        )
        assert failed == []
        (request,) = runtime.unsolicited_updates
        assert request.update[0].container_id == "ctr-x"
        assert request.evict[0].reason == "test"


def test_stub_refuses_bad_identity_and_bad_socket_env() -> None:
    with pytest.raises(ValueError, match="invalid plugin index '1'"):
        Stub(Recorder(), name="x", index="1")
    with pytest.raises(ValueError, match="invalid plugin name 'a b'"):
        Stub(Recorder(), name="a b", index="10")
    with pytest.raises(ValueError, match="NRI_PLUGIN_SOCKET='three'"):
        Stub.from_environment(Recorder(), environ={"NRI_PLUGIN_SOCKET": "three"})


async def test_events_derived_from_overridden_methods(sock_dir: Path) -> None:
    class Watcher(Plugin):
        async def stop_container(self, pod: api.PodSandbox, container: api.Container) -> None:
            return None

        async def state_change(
            self, event: Event, pod: api.PodSandbox, container: api.Container | None
        ) -> None:
            return None

    path = sock_dir / "nri.sock"
    async with (
        RuntimeDouble(path, valid_events=0x7FF) as runtime,
        Stub(Watcher(), name="w", index="10", socket_path=path) as stub,
    ):
        (handle,) = await runtime.wait_for_plugins(1)
        # STOP_CONTAINER + every StateChange event a containerd 2.1 accepts.
        assert (
            stub.events
            == handle.events
            == 0x200 | 0x1 | 0x2 | 0x4 | 0x10 | 0x20 | 0x40 | 0x100 | 0x400
        )


async def test_missing_socket_is_an_os_error(sock_dir: Path) -> None:
    stub = Stub(Recorder(), name="p", index="10", socket_path=sock_dir / "absent.sock")
    with pytest.raises(FileNotFoundError):
        await stub.start()


async def test_several_runtime_doubles_in_one_event_loop(sock_dir: Path) -> None:
    nodes = [RuntimeDouble(sock_dir / f"node-{i}.sock", label=f"node-{i}") for i in range(3)]
    stubs = [
        Stub(Recorder(env_value=f"node-{i}"), name="inj", index="10", socket_path=node.socket_path)
        for i, node in enumerate(nodes)
    ]
    for node in nodes:
        await node.start()
    try:
        for stub in stubs:
            await stub.start()
        results = []
        for node in nodes:
            await node.wait_for_plugins(1)
            results.append(await node.create_container(make_pod(), make_container()))
        assert [r.env()["FOO"] for r in results] == ["node-0", "node-1", "node-2"]
    finally:
        for stub in stubs:
            await stub.close()
        for node in nodes:
            await node.close()


class Lifecycle(Plugin):
    """Handles every container event after creation and records what reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None]] = []

    async def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> list[api.ContainerUpdate]:
        self.seen.append(
            ("update", pod.name, f"{container.id} shares={resources.cpu.shares.value}")
        )
        return [api.ContainerUpdate(container_id=container.id, ignore_failure=True)]

    async def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]:
        self.seen.append(("stop", pod.name, container.id))
        return [api.ContainerUpdate(container_id="ctr-sidecar")]

    async def state_change(
        self, event: Event, pod: api.PodSandbox, container: api.Container | None
    ) -> None:
        self.seen.append((event.name, pod.name, container.id if container is not None else None))


async def test_update_stop_and_state_change_reach_the_plugin(sock_dir: Path) -> None:
    path = sock_dir / "nri.sock"
    pod = make_pod()
    container = make_container("main", pod)
    plugin = Lifecycle()
    async with (
        RuntimeDouble(path) as runtime,
        Stub(plugin, name="life", index="10", socket_path=path),
    ):
        await runtime.wait_for_plugins(1)
        created = await runtime.create_container(pod, container)
        assert created.consulted == ()  # not subscribed to CreateContainer
        resources = api.LinuxResources()
        resources.cpu.shares.value = 512
        updates = await runtime.update_container(pod, container, resources)
        assert [(u.container_id, u.ignore_failure) for u in updates] == [("ctr-main", True)]
        await runtime.state_change(Event.START_CONTAINER, pod, container)
        stopped = await runtime.stop_container(pod, container)
        assert [u.container_id for u in stopped] == ["ctr-sidecar"]
        assert runtime.containers["ctr-main"].state == api.CONTAINER_STOPPED
        await runtime.state_change(Event.REMOVE_POD_SANDBOX, pod)
        # An event the plugin is not subscribed to is not delivered.
        await runtime.state_change(Event.POST_UPDATE_POD_SANDBOX, pod)
    assert plugin.seen == [
        ("update", "pod-a", "ctr-main shares=512"),
        ("START_CONTAINER", "pod-a", "ctr-main"),
        ("stop", "pod-a", "ctr-main"),
        ("REMOVE_POD_SANDBOX", "pod-a", None),
    ]


async def test_runtime_closes_a_plugin_that_subscribes_to_nothing(sock_dir: Path) -> None:
    class Idle(Plugin):
        async def configure(self, runtime: RuntimeInfo) -> list[Event]:
            return []

    path = sock_dir / "nri.sock"
    async with RuntimeDouble(path) as runtime:
        stub = Stub(Idle(), name="idle", index="10", socket_path=path)
        await stub.start()
        ((plugin, reason),) = await runtime.wait_for_drop(1)
        assert plugin == "10-idle"
        assert "subscribes to no event" in reason and "status 2" in reason
        assert (await asyncio.wait_for(stub.wait_closed(), 5)).by_runtime


async def test_the_plugin_sends_its_nri_version_at_registration(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with RuntimeDouble(sock_dir / "v.sock") as runtime:
        async with Stub(Recorder(), name="ver", index="10", socket_path=runtime.socket_path):
            (handle,) = await runtime.wait_for_plugins(1)
            assert handle.nri_version == NRI_API_VERSION == "v0.12.2"
        async with Stub(
            Recorder(), name="old", index="11", socket_path=runtime.socket_path, nri_version=""
        ):
            (handle,) = await runtime.wait_for_plugins(1)
            assert handle.nri_version == ""
    messages = [r.getMessage() for r in caplog.records]
    assert "runtime: plugin 10-ver registered, NRI version v0.12.2" in messages
    assert "runtime: plugin 11-old registered, NRI version unknown" in messages


async def test_configure_without_timeouts_like_nri_before_v0_7(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    recorder = Recorder()
    double = RuntimeDouble(sock_dir / "old.sock", send_timeouts=False, runtime_version="v1.7.0")
    async with double, Stub(recorder, name="old", index="10", socket_path=double.socket_path):
        await double.wait_for_plugins(1)
    assert recorder.runtime is not None
    assert recorder.runtime.request_timeout is None
    assert recorder.runtime.registration_timeout is None
    messages = [r.getMessage() for r in caplog.records]
    assert any("no request timeout sent (NRI before v0.7)" in m for m in messages), messages
    assert not any("Nones" in m for m in messages)


class _EveryNotification(Lifecycle):
    events = frozenset(NOTIFICATION_RPCS)


class _PreV012Stub(Stub):
    """A stub as plugins built on NRI before v0.12 are: StateChange only."""

    def _service_table(self) -> dict[str, Any]:
        table = super()._service_table()
        for method in NOTIFICATION_RPCS.values():
            del table[method]
        return table


@pytest.mark.parametrize("rpcs", [True, False], ids=["nri-v0.12+", "older-nri"])
async def test_notification_events_on_their_own_rpcs_or_state_change(
    sock_dir: Path, rpcs: bool
) -> None:
    """NRI v0.12+ (containerd 2.3+) sends each notification on its own RPC and the stub
    answers every one, so nothing is listed as deprecated; an older runtime sends
    StateChange, which the stub answers too: the plugin sees the same events either way."""
    path = sock_dir / "nri.sock"
    pod = make_pod()
    container = make_container("main", pod)
    plugin = _EveryNotification()
    async with (
        RuntimeDouble(path, notification_rpcs=rpcs) as runtime,
        Stub(plugin, name="life", index="10", socket_path=path),
    ):
        await runtime.wait_for_plugins(1)
        for event in NOTIFICATION_RPCS:
            pod_event = "POD_SANDBOX" in event.name
            await runtime.state_change(event, pod, None if pod_event else container)
        assert runtime.deprecations == []
    assert plugin.seen == [
        (e.name, "pod-a", None if "POD_SANDBOX" in e.name else "ctr-main")
        for e in NOTIFICATION_RPCS
    ]


async def test_a_plugin_without_the_rpcs_falls_back_to_state_change_as_deprecated(
    sock_dir: Path,
) -> None:
    """What containerd 2.3+ does with a plugin built before NRI v0.12: the dedicated RPC is
    answered UNIMPLEMENTED, the event goes on StateChange and the plugin is listed (once per
    event) as using the deprecated interface."""
    path = sock_dir / "nri.sock"
    pod = make_pod()
    container = make_container("main", pod)
    plugin = Lifecycle()
    async with (
        RuntimeDouble(path) as runtime,
        _PreV012Stub(plugin, name="old", index="10", socket_path=path),
    ):
        await runtime.wait_for_plugins(1)
        await runtime.state_change(Event.START_CONTAINER, pod, container)
        await runtime.state_change(Event.START_CONTAINER, pod, container)
        assert runtime.deprecations == [("10-old", "START_CONTAINER")]
    assert plugin.seen == [("START_CONTAINER", "pod-a", "ctr-main")] * 2


def test_every_notification_event_has_its_rpc_in_the_api() -> None:
    """The method names are the Plugin service's in api.proto (and their messages exist)."""
    service = api.DESCRIPTOR.services_by_name["Plugin"]
    assert set(NOTIFICATION_RPCS) == set(STATE_CHANGE_EVENTS)
    for method in NOTIFICATION_RPCS.values():
        rpc = service.methods_by_name[method]
        assert rpc.input_type.name == f"{method}Request"
        assert rpc.output_type.name == f"{method}Response"
