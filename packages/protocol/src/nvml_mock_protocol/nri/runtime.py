"""A runtime-side NRI test double: what containerd does to plugins, in-process.

:class:`RuntimeDouble` listens on a unix socket like containerd's NRI
adaptation, accepts plugins, performs the handshake (RegisterPlugin within
the registration timeout, Configure, Synchronize with split parts when the
state is large), checks event masks, and then drives lifecycle events through
every subscribed plugin in index order. It keeps containerd's failure rules,
because those are what a plugin must survive:

- a plugin answering with an error status fails the operation
  (:class:`PluginError`) and stays connected;
- a plugin that does not answer within the request timeout, or whose
  connection broke, is closed and dropped, and the operation continues
  without it (fail-open);
- two plugins setting the same entry fail the creation
  (:class:`AdjustmentConflictError`).

Tests and the local demo use it (one instance per simulated node; several
instances live happily in one event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any

from google.protobuf.message import Message

from nvml_mock_protocol._version import __version__
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.adjustment import AdjustmentMerger
from nvml_mock_protocol.nri.connection import CallContext, NriConnection
from nvml_mock_protocol.nri.errors import (
    ConnectionClosedError,
    DeadlineExceededError,
    PluginError,
    ProtocolError,
    TtrpcError,
)
from nvml_mock_protocol.nri.events import NOTIFICATION_RPCS, VALID_EVENTS, Event
from nvml_mock_protocol.nri.stub import PLUGIN_SERVICE, RUNTIME_SERVICE, check_plugin_identity
from nvml_mock_protocol.nri.ttrpc import MESSAGE_LENGTH_MAX, Code

logger = logging.getLogger(__name__)

SYNC_PART_LIMIT = MESSAGE_LENGTH_MAX - 1024
"""Default serialized size of one Synchronize part, leaving room for the ttrpc envelope."""


@dataclass(eq=False)
class PluginHandle:
    """A registered plugin as the runtime double sees it."""

    name: str
    index: str
    connection: NriConnection
    events: int = 0
    """The accepted subscription mask (0 from the plugin already expanded to all)."""
    config: str = ""
    nri_version: str = ""
    """The NRI version the plugin sent at registration; empty when it sent none."""

    @property
    def id(self) -> str:
        """``NN-name``."""
        return f"{self.index}-{self.name}"

    @property
    def closed(self) -> bool:
        return self.connection.closed

    def subscribed(self, event: Event) -> bool:
        return bool(self.events & event.bit)


@dataclass(frozen=True)
class CreateContainerResult:
    """What the runtime would create, after every plugin had its say."""

    container: api.Container
    """The container as adjusted by all plugins, in order."""
    adjustment: api.ContainerAdjustment
    """All plugins' adjustments as one message."""
    updates: list[api.ContainerUpdate] = field(default_factory=list)
    evictions: list[api.ContainerEviction] = field(default_factory=list)
    consulted: tuple[str, ...] = ()
    """Plugins (``NN-name``) that answered, in call order."""
    dropped: tuple[str, ...] = ()
    """Plugins dropped during this call (timeout or broken connection)."""

    def env(self) -> dict[str, str]:
        """The container's final environment as a dict."""
        return dict(entry.partition("=")[::2] for entry in self.container.env)


class _PluginDroppedError(Exception):
    """Internal: the plugin was dropped during a call."""


class RuntimeDouble:
    """An NRI runtime for tests: listens on ``socket_path`` and drives plugins.

    Use as ``async with RuntimeDouble(path) as runtime:``. Timeouts are in
    seconds. ``plugin_config`` maps a plugin id (``NN-name``) or name to the
    text sent as Configure's ``config``.
    """

    def __init__(
        self,
        socket_path: str | PathLike[str],
        *,
        runtime_name: str = "nvml-mock-runtime-double",
        runtime_version: str = __version__,
        registration_timeout: float = 5.0,
        request_timeout: float = 2.0,
        plugin_config: Mapping[str, str] | None = None,
        valid_events: int = VALID_EVENTS,
        label: str = "runtime",
        sync_part_limit: int = SYNC_PART_LIMIT,
        nri_version: str = "",
        send_timeouts: bool = True,
        notification_rpcs: bool = True,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        self.plugin_config = dict(plugin_config or {})
        self.valid_events = valid_events
        self.label = label
        self.sync_part_limit = sync_part_limit
        self.nri_version = nri_version
        self.send_timeouts = send_timeouts
        """False plays an NRI before v0.7 (containerd 1.7.0 to 1.7.25): Configure carries no
        timeouts, though the double still enforces ``request_timeout``."""
        self.notification_rpcs = notification_rpcs
        """True plays NRI v0.12+ (containerd 2.3+): each notification-only event goes on its
        own RPC, and a plugin that answers it UNIMPLEMENTED gets it on StateChange and is
        listed in :attr:`deprecations`; False plays an older NRI (StateChange only)."""
        self.deprecations: list[tuple[str, str]] = []
        """``(plugin id, event)`` for each event a plugin took only through the deprecated
        StateChange (containerd logs "uses deprecated StateChange" and lists it)."""
        self.pods: dict[str, api.PodSandbox] = {}
        """Pods known to the runtime (sent in Synchronize), by id."""
        self.containers: dict[str, api.Container] = {}
        """Containers known to the runtime (sent in Synchronize), by id."""
        self.dropped: list[tuple[str, str]] = []
        """``(plugin id, reason)`` for every plugin closed by the runtime, oldest first."""
        self.unsolicited_updates: list[api.UpdateContainersRequest] = []
        """Every UpdateContainers request received from plugins."""
        self._plugins: list[PluginHandle] = []
        self._server: asyncio.AbstractServer | None = None
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[NriConnection] = set()

    async def start(self) -> None:
        """Create the socket (removing a stale one, parent made 0700) and listen."""
        self.socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._accept, str(self.socket_path))
        logger.info("%s: listening on %s", self.label, self.socket_path)

    async def attach(self, sock: socket.socket) -> None:
        """Serve a plugin over an already connected socket (a launched plugin's socketpair)."""
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(self._accept, sock)

    async def close(self) -> None:
        """Stop listening, close every plugin connection, remove the socket."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        for connection in list(self._connections):
            connection.close("runtime shutting down")
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> RuntimeDouble:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def plugins(self) -> list[PluginHandle]:
        """Plugins that completed the handshake and are still connected, in call order."""
        return [p for p in self._plugins if not p.closed]

    async def wait_for_plugins(self, count: int = 1, timeout: float = 5.0) -> list[PluginHandle]:
        """Wait until at least ``count`` plugins are synchronized; return them."""
        async with asyncio.timeout(timeout):
            while len(self.plugins) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.plugins

    async def wait_for_drop(self, count: int = 1, timeout: float = 5.0) -> list[tuple[str, str]]:
        """Wait until at least ``count`` plugins have been dropped; return the drops."""
        async with asyncio.timeout(timeout):
            while len(self.dropped) < count:
                self._changed.clear()
                await self._changed.wait()
        return list(self.dropped)

    def _notify(self) -> None:
        self._changed.set()

    def _accept(self) -> NriConnection:
        loop = asyncio.get_running_loop()
        registered: asyncio.Future[api.RegisterPluginRequest] = loop.create_future()

        async def register(payload: bytes, context: CallContext) -> bytes:
            request = api.RegisterPluginRequest.FromString(payload)
            if registered.done():
                raise TtrpcError(Code.UNKNOWN, "plugin already registered")
            try:
                check_plugin_identity(request.plugin_name, request.plugin_idx)
            except ValueError as exc:
                registered.set_exception(exc)
                raise TtrpcError(Code.UNKNOWN, f"failed to register plugin: {exc}") from None
            registered.set_result(request)
            return b""

        async def update_containers(payload: bytes, context: CallContext) -> bytes:
            request = api.UpdateContainersRequest.FromString(payload)
            self.unsolicited_updates.append(request)
            self._notify()
            return api.UpdateContainersResponse().SerializeToString()

        services = {
            RUNTIME_SERVICE: {"RegisterPlugin": register, "UpdateContainers": update_containers}
        }
        connection = NriConnection.runtime_side(services, label=f"{self.label} peer")
        self._connections.add(connection)
        connection.add_close_callback(lambda _reason: self._forget(connection))
        task = loop.create_task(self._handshake(connection, registered))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return connection

    def _forget(self, connection: NriConnection) -> None:
        self._connections.discard(connection)
        self._notify()

    async def _handshake(
        self, connection: NriConnection, registered: asyncio.Future[api.RegisterPluginRequest]
    ) -> None:
        closed = asyncio.ensure_future(connection.wait_closed())
        try:
            waiters: set[asyncio.Future[Any]] = {registered, closed}
            await asyncio.wait(
                waiters,
                timeout=self.registration_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            closed.cancel()
        if not registered.done():
            if not connection.closed:
                logger.warning("%s: plugin registration timed out", self.label)
                connection.close("plugin registration timed out")
            registered.cancel()
            return
        if registered.exception() is not None:
            logger.warning("%s: refused plugin: %s", self.label, registered.exception())
            connection.close(f"registration refused: {registered.exception()}")
            return
        request = registered.result()
        plugin = PluginHandle(
            request.plugin_name, request.plugin_idx, connection, nri_version=request.NRI_version
        )
        logger.info(
            "%s: plugin %s registered, NRI version %s",
            self.label,
            plugin.id,
            plugin.nri_version or "unknown",
        )
        plugin.config = self.plugin_config.get(plugin.id, self.plugin_config.get(plugin.name, ""))
        connection.label = f"{self.label} plugin {plugin.id}"
        try:
            await self._configure(plugin)
            async with self._lock:
                await self._synchronize(plugin)
                self._plugins.append(plugin)
                self._plugins.sort(key=lambda p: p.index)
        except _PluginDroppedError:
            return
        except PluginError as exc:
            # containerd closes a plugin whose Configure or Synchronize fails.
            self._drop(plugin, f"failed to start plugin: {exc}")
            return
        logger.info("%s: plugin %s synchronized, events 0x%x", self.label, plugin.id, plugin.events)
        self._notify()

    async def _configure(self, plugin: PluginHandle) -> None:
        request = api.ConfigureRequest(
            config=plugin.config,
            runtime_name=self.runtime_name,
            runtime_version=self.runtime_version,
            NRI_version=self.nri_version,
        )
        if self.send_timeouts:
            request.registration_timeout = round(self.registration_timeout * 1000)
            request.request_timeout = round(self.request_timeout * 1000)
        reply = api.ConfigureResponse.FromString(await self._call(plugin, "Configure", request))
        events = reply.events or self.valid_events
        if events & ~self.valid_events:
            self._drop(plugin, f"invalid plugin events: 0x{reply.events:x}")
            raise _PluginDroppedError
        plugin.events = events

    async def _synchronize(self, plugin: PluginHandle) -> None:
        parts = _split_sync(
            list(self.pods.values()), list(self.containers.values()), self.sync_part_limit
        )
        try:
            async with asyncio.timeout(self.request_timeout):
                for number, part in enumerate(parts, start=1):
                    reply = api.SynchronizeResponse.FromString(
                        await self._call(plugin, "Synchronize", part, own_deadline=False)
                    )
                    if number < len(parts) and (not reply.more or len(reply.update)):
                        self._drop(plugin, "plugin does not handle split sync requests")
                        raise _PluginDroppedError
        except TimeoutError:
            self._drop(plugin, "failed to synchronize: context deadline exceeded")
            raise _PluginDroppedError from None

    def _drop(self, plugin: PluginHandle, reason: str) -> None:
        logger.warning("%s: closing plugin %s, %s", self.label, plugin.id, reason)
        self.dropped.append((plugin.id, reason))
        plugin.connection.close(reason)
        self._notify()

    async def _call(
        self,
        plugin: PluginHandle,
        method: str,
        request: Message,
        *,
        own_deadline: bool = True,
    ) -> bytes:
        deadline = self.request_timeout if own_deadline else None
        try:
            return await plugin.connection.call(
                PLUGIN_SERVICE, method, request.SerializeToString(), timeout=deadline
            )
        except DeadlineExceededError:
            self._drop(plugin, f"failed to handle {method} request: context deadline exceeded")
            raise _PluginDroppedError from None
        except (ConnectionClosedError, ProtocolError) as exc:
            self._drop(plugin, f"failed to handle {method} request: {exc}")
            raise _PluginDroppedError from None
        except TtrpcError as exc:
            raise PluginError(plugin.id, method, exc.code, exc.message) from exc

    def _subscribed(self, event: Event) -> list[PluginHandle]:
        return [p for p in self._plugins if not p.closed and p.subscribed(event)]

    def add_pod(self, pod: api.PodSandbox) -> None:
        """Make ``pod`` known to the runtime (it is sent to later Synchronizes)."""
        self.pods[pod.id] = pod

    def add_container(self, container: api.Container) -> None:
        """Make ``container`` known to the runtime (it is sent to later Synchronizes)."""
        self.containers[container.id] = container

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> CreateContainerResult:
        """Run CreateContainer through every subscribed plugin; return the outcome.

        Raises :class:`PluginError` when a plugin answers with an error and
        :class:`AdjustmentConflictError` when two plugins set the same entry.
        """
        async with self._lock:
            merger = AdjustmentMerger(container)
            updates: list[api.ContainerUpdate] = []
            evictions: list[api.ContainerEviction] = []
            consulted: list[str] = []
            dropped: list[str] = []
            for plugin in self._subscribed(Event.CREATE_CONTAINER):
                request = api.CreateContainerRequest(pod=pod, container=merger.container)
                try:
                    payload = await self._call(plugin, "CreateContainer", request)
                except _PluginDroppedError:
                    dropped.append(plugin.id)
                    continue
                reply = api.CreateContainerResponse.FromString(payload)
                merger.apply(plugin.id, reply.adjust)
                updates.extend(reply.update)
                evictions.extend(reply.evict)
                consulted.append(plugin.id)
            created = merger.created()
            created.state = api.CONTAINER_CREATED
            self.pods.setdefault(pod.id, pod)
            self.containers[created.id] = created
            return CreateContainerResult(
                container=created,
                adjustment=merger.adjustment,
                updates=updates,
                evictions=evictions,
                consulted=tuple(consulted),
                dropped=tuple(dropped),
            )

    async def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> list[api.ContainerUpdate]:
        """Run UpdateContainer through subscribed plugins; return their updates."""
        async with self._lock:
            updates: list[api.ContainerUpdate] = []
            for plugin in self._subscribed(Event.UPDATE_CONTAINER):
                request = api.UpdateContainerRequest(
                    pod=pod, container=container, linux_resources=resources
                )
                with contextlib.suppress(_PluginDroppedError):
                    reply = await self._call(plugin, "UpdateContainer", request)
                    updates.extend(api.UpdateContainerResponse.FromString(reply).update)
            return updates

    async def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]:
        """Run StopContainer through subscribed plugins; return their updates."""
        async with self._lock:
            updates: list[api.ContainerUpdate] = []
            for plugin in self._subscribed(Event.STOP_CONTAINER):
                request = api.StopContainerRequest(pod=pod, container=container)
                with contextlib.suppress(_PluginDroppedError):
                    reply = await self._call(plugin, "StopContainer", request)
                    updates.extend(api.StopContainerResponse.FromString(reply).update)
            stored = self.containers.get(container.id)
            if stored is not None:
                stored.state = api.CONTAINER_STOPPED
            return updates

    async def start_container(
        self, pod: api.PodSandbox, container_id: str, pid: int, started_at_ns: int | None = None
    ) -> api.Container:
        """Start a created container as containerd does: StartContainer (before the task
        runs), then, running with its ``pid``, PostStartContainer; returns the container."""
        stored = self.containers[container_id]
        await self.state_change(Event.START_CONTAINER, pod, stored)
        stored.state = api.CONTAINER_RUNNING
        stored.pid = pid
        stored.started_at = time.time_ns() if started_at_ns is None else started_at_ns
        await self.state_change(Event.POST_START_CONTAINER, pod, stored)
        return stored

    async def remove_container(self, pod: api.PodSandbox, container_id: str) -> None:
        """Remove a container: RemoveContainer, and the runtime forgets it (later
        Synchronizes no longer list it)."""
        stored = self.containers.pop(container_id)
        await self.state_change(Event.REMOVE_CONTAINER, pod, stored)

    async def state_change(
        self, event: Event, pod: api.PodSandbox, container: api.Container | None = None
    ) -> None:
        """Deliver a notification-only event to subscribed plugins: on its own RPC (NRI
        v0.12+), falling back to StateChange for a plugin that does not implement it, or on
        StateChange alone when the double plays an older NRI."""
        async with self._lock:
            for plugin in self._subscribed(event):
                with contextlib.suppress(_PluginDroppedError):
                    if self.notification_rpcs and await self._notify_rpc(
                        plugin, event, pod, container
                    ):
                        continue
                    request = api.StateChangeEvent(event=api.Event.Name(event.value), pod=pod)
                    if container is not None:
                        request.container.CopyFrom(container)
                    await self._call(plugin, "StateChange", request)

    async def _notify_rpc(
        self,
        plugin: PluginHandle,
        event: Event,
        pod: api.PodSandbox,
        container: api.Container | None,
    ) -> bool:
        """*event* on its own RPC; False when the plugin answers UNIMPLEMENTED (recorded as
        a deprecation once per plugin and event, as containerd warns once)."""
        method = NOTIFICATION_RPCS[event]
        request = getattr(api, f"{method}Request")(pod=pod)
        if container is not None:
            request.container.CopyFrom(container)
        try:
            await self._call(plugin, method, request)
        except PluginError as exc:
            if exc.code != Code.UNIMPLEMENTED:
                raise
            if (plugin.id, event.name) not in self.deprecations:
                self.deprecations.append((plugin.id, event.name))
            return False
        return True


def _split_sync(
    pods: Iterable[api.PodSandbox], containers: Iterable[api.Container], limit: int
) -> list[api.SynchronizeRequest]:
    """Split the runtime state into Synchronize parts under the message limit."""
    parts = [api.SynchronizeRequest()]
    size = 0
    for kind, items in (("pods", pods), ("containers", containers)):
        for item in items:
            item_size = item.ByteSize() + 6
            if size and size + item_size > limit:
                parts[-1].more = True
                parts.append(api.SynchronizeRequest())
                size = 0
            getattr(parts[-1], kind).add().CopyFrom(item)
            size += item_size
    return parts
