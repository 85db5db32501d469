"""The plugin side of NRI: connect, register, and serve the runtime's calls.

An NRI plugin is written as a subclass of :class:`Plugin` that overrides the
events it cares about; :class:`Stub` does everything else: it connects to the
runtime's socket (or uses the socket inherited as fd 3 when the runtime
launched the plugin), registers with name and index, answers Configure with
the event mask, reassembles split Synchronize requests, dispatches events,
answers every notification-only event on its own RPC (NRI v0.12+, containerd
2.3+: StartContainer, PostStartContainer, RemoveContainer, ...) and on
StateChange (what older runtimes send), answers UNIMPLEMENTED for anything
else, and reports the disconnect that ends every connection.

Sketch::

    class Injector(Plugin):
        async def create_container(self, pod, container):
            return api.ContainerAdjustment(env=[api.KeyValue(key="A", value="1")])

    stub = Stub(Injector(), name="nvml-mock", index="10")
    disconnect = await stub.run()   # returns when the runtime goes away
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from os import PathLike
from typing import Any, ClassVar, Final, TypeAlias, TypeVar

from nvml_mock_protocol import names
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.connection import CallContext
from nvml_mock_protocol.nri.errors import ConnectionClosedError, RegistrationError, TtrpcError
from nvml_mock_protocol.nri.events import (
    NOTIFICATION_RPCS,
    STATE_CHANGE_EVENTS,
    VALID_EVENTS_V0_8,
    Event,
    event_mask,
)
from nvml_mock_protocol.nri.threaded import AnyHandler, ThreadedConnection, connect_unix
from nvml_mock_protocol.nri.ttrpc import Code

T = TypeVar("T")
MaybeAwaitable: TypeAlias = T | Awaitable[T]
"""What a :class:`Plugin` method returns: the value (a plain method, called on the
connection's thread) or an awaitable of it (a coroutine method, run on the event loop)."""

logger = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
NRI_API_VERSION = "v0.12.2"
"""The NRI release whose wire contract this package follows (``proto/``'s field numbers).

Sent as the plugin's NRI version at registration; runtimes from NRI v0.12 (containerd 2.3)
log and compare it, older ones skip the field."""
DEFAULT_REGISTRATION_TIMEOUT = 5.0
"""Seconds to wait for the RegisterPlugin reply (containerd's registration timeout)."""

_PLUGIN_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
_PLUGIN_INDEX = re.compile(r"[0-9]{2}")


def check_plugin_identity(name: str, index: str) -> None:
    """Raise :class:`ValueError` naming the problem if containerd would refuse the pair."""
    if not _PLUGIN_NAME.fullmatch(name):
        raise ValueError(f"invalid plugin name {name!r}: use letters, digits and _.+-")
    if not _PLUGIN_INDEX.fullmatch(index):
        raise ValueError(f"invalid plugin index {index!r}: must be exactly two digits")


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """What the runtime told the plugin in Configure."""

    config: str
    """Plugin configuration text from the runtime; empty for external plugins."""
    runtime_name: str
    runtime_version: str
    registration_timeout: float | None
    """Seconds; ``None`` when the runtime did not send it (NRI before v0.7)."""
    request_timeout: float | None
    """Seconds every call may take before the runtime drops the plugin; ``None`` if not sent."""
    nri_version: str


@dataclass(frozen=True, slots=True)
class Disconnect:
    """How a plugin's connection to the runtime ended."""

    reason: str
    by_runtime: bool
    """True when the runtime (or the socket) ended it, False after :meth:`Stub.close`."""


_NOTIFICATION_REQUESTS: Final[dict[Event, Any]] = {
    Event.RUN_POD_SANDBOX: api.RunPodSandboxRequest,
    Event.STOP_POD_SANDBOX: api.StopPodSandboxRequest,
    Event.REMOVE_POD_SANDBOX: api.RemovePodSandboxRequest,
    Event.POST_CREATE_CONTAINER: api.PostCreateContainerRequest,
    Event.START_CONTAINER: api.StartContainerRequest,
    Event.POST_START_CONTAINER: api.PostStartContainerRequest,
    Event.POST_UPDATE_CONTAINER: api.PostUpdateContainerRequest,
    Event.REMOVE_CONTAINER: api.RemoveContainerRequest,
    Event.POST_UPDATE_POD_SANDBOX: api.PostUpdatePodSandboxRequest,
}
"""The request message of each notification-only event's own RPC."""


class Plugin:
    """Base class of NRI plugins: override the events you handle.

    Every method has a harmless default. A method may be a coroutine function (``async
    def``: it runs on the event loop, and may await anything) or a plain function: then
    the stub calls it on the connection's own thread the moment the request is read and
    writes its reply at once, which is several times cheaper per call than a trip through
    the event loop (:mod:`~nvml_mock_protocol.nri.threaded`). A plain method must not
    touch asyncio objects (use :meth:`asyncio.AbstractEventLoop.call_soon_threadsafe`),
    and a slow one holds up the runtime's next calls.

    When :meth:`configure` returns ``None`` the subscription is derived from the methods
    a subclass overrides (or taken from :attr:`events` when set). A handler that raises
    fails the runtime's operation (status UNKNOWN, or the code of a raised
    :class:`TtrpcError`); a handler slower than :attr:`RuntimeInfo.request_timeout` gets
    the plugin dropped by the runtime.
    """

    events: ClassVar[frozenset[Event] | None] = None
    """Explicit subscription; ``None`` derives it from the overridden methods."""

    def configure(self, runtime: RuntimeInfo) -> MaybeAwaitable[Iterable[Event] | int | None]:
        """Handle Configure; return the events (or a raw mask) to subscribe to."""
        return None

    def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> MaybeAwaitable[Iterable[api.ContainerUpdate] | None]:
        """Receive every existing pod and container (split parts already joined)."""
        return None

    def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> MaybeAwaitable[api.ContainerAdjustment | api.CreateContainerResponse | bytes | None]:
        """Adjust a container being created; ``None`` leaves it unchanged. ``bytes`` are a
        serialized CreateContainerResponse, sent as they are (a plugin may keep the
        encoding of an answer it gives often)."""
        return None

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> MaybeAwaitable[Iterable[api.ContainerUpdate] | api.UpdateContainerResponse | None]:
        """React to a resource update of a container."""
        return None

    def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> MaybeAwaitable[Iterable[api.ContainerUpdate] | None]:
        """React to a container being stopped."""
        return None

    def state_change(
        self, event: Event, pod: api.PodSandbox, container: api.Container | None
    ) -> MaybeAwaitable[None]:
        """Receive a notification-only event (``container`` is None for pod events), whether
        the runtime sent it on the event's own RPC or, before NRI v0.12, on StateChange."""
        return None

    def shutdown(self) -> MaybeAwaitable[None]:
        """Handle the runtime's Shutdown call (containerd never sends it)."""
        return None

    def default_events(self) -> frozenset[Event]:
        """The subscription used when :meth:`configure` returns ``None``."""
        if self.events is not None:
            return self.events
        cls = type(self)
        chosen: set[Event] = set()
        if cls.create_container is not Plugin.create_container:
            chosen.add(Event.CREATE_CONTAINER)
        if cls.update_container is not Plugin.update_container:
            chosen.add(Event.UPDATE_CONTAINER)
        if cls.stop_container is not Plugin.stop_container:
            chosen.add(Event.STOP_CONTAINER)
        if cls.state_change is not Plugin.state_change:
            # Only the events every supported containerd accepts.
            chosen.update(e for e in STATE_CHANGE_EVENTS if e.bit & VALID_EVENTS_V0_8)
        return frozenset(chosen)


async def _settled(value: MaybeAwaitable[T]) -> T:
    """The value of a plugin method's result, awaited if it is awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value


def _bind(
    method: Callable[..., Any],
    decode: Callable[[bytes], tuple[Any, ...]],
    encode: Callable[[Any], bytes],
) -> AnyHandler:
    """The RPC handler around one plugin method: inline for a plain method, on the loop
    for a coroutine method (see :class:`Plugin`)."""
    if inspect.iscoroutinefunction(method):

        async def deferred(payload: bytes, context: CallContext) -> bytes:
            return encode(await method(*decode(payload)))

        return deferred

    def inline(payload: bytes, context: CallContext) -> bytes:
        return encode(method(*decode(payload)))

    return inline


class Stub:
    """Runs one :class:`Plugin` against one NRI runtime connection.

    Exactly one of ``socket_path`` (dial it) or ``sock`` (an already connected
    socket, e.g. the runtime-launched plugin's fd 3) is used; ``sock`` wins.
    Use :meth:`from_environment` to honour ``NRI_PLUGIN_SOCKET``,
    ``NRI_PLUGIN_NAME`` and ``NRI_PLUGIN_IDX`` as the Go stub does.
    """

    def __init__(
        self,
        plugin: Plugin,
        *,
        name: str = names.NRI_PLUGIN_NAME,
        index: str = names.NRI_PLUGIN_INDEX,
        socket_path: str | PathLike[str] = names.NRI_SOCKET_PATH,
        sock: socket.socket | None = None,
        registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
        on_disconnect: Callable[[Disconnect], object] | None = None,
        nri_version: str = NRI_API_VERSION,
    ) -> None:
        check_plugin_identity(name, index)
        self.nri_version = nri_version
        """Sent in RegisterPlugin; empty sends none (the runtime then logs it as unknown)."""
        self.plugin = plugin
        self.name = name
        self.index = index
        self.socket_path = os.fspath(socket_path)
        self._sock = sock
        self._registration_timeout = registration_timeout
        self._on_disconnect = on_disconnect
        self._connection: ThreadedConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runtime: RuntimeInfo | None = None
        self._events = 0
        self._registered = False
        self._closing = False
        self._sync_pods: list[api.PodSandbox] = []
        self._sync_containers: list[api.Container] = []
        self._synchronized: asyncio.Event | None = None
        self._sync_done = False
        self._synchronize: AnyHandler = self._synchronize_handler()
        self._disconnect: asyncio.Future[Disconnect] | None = None

    @classmethod
    def from_environment(
        cls,
        plugin: Plugin,
        *,
        name: str = names.NRI_PLUGIN_NAME,
        index: str = names.NRI_PLUGIN_INDEX,
        socket_path: str | PathLike[str] = names.NRI_SOCKET_PATH,
        environ: Mapping[str, str] | None = None,
        registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
        on_disconnect: Callable[[Disconnect], object] | None = None,
        nri_version: str = NRI_API_VERSION,
    ) -> Stub:
        """Build a stub the way a runtime-launched plugin must.

        ``NRI_PLUGIN_SOCKET`` (an fd number) replaces ``socket_path``;
        ``NRI_PLUGIN_NAME`` / ``NRI_PLUGIN_IDX`` replace ``name`` / ``index``.
        Raises :class:`ValueError` naming the variable when a value is unusable.
        """
        env = os.environ if environ is None else environ
        sock = None
        raw_fd = env.get(names.ENV_NRI_PLUGIN_SOCKET)
        if raw_fd:
            try:
                fd = int(raw_fd)
            except ValueError:
                raise ValueError(
                    f"{names.ENV_NRI_PLUGIN_SOCKET}={raw_fd!r} is not a file descriptor number"
                ) from None
            try:
                sock = socket.socket(fileno=fd)
            except OSError as exc:
                raise ValueError(
                    f"{names.ENV_NRI_PLUGIN_SOCKET}={raw_fd!r} is not a usable socket: {exc}"
                ) from None
        return cls(
            plugin,
            name=env.get(names.ENV_NRI_PLUGIN_NAME) or name,
            index=env.get(names.ENV_NRI_PLUGIN_IDX) or index,
            socket_path=socket_path,
            sock=sock,
            registration_timeout=registration_timeout,
            on_disconnect=on_disconnect,
            nri_version=nri_version,
        )

    @property
    def plugin_id(self) -> str:
        """``NN-name``, as the runtime names the plugin in its logs."""
        return f"{self.index}-{self.name}"

    @property
    def runtime(self) -> RuntimeInfo | None:
        """What Configure carried; ``None`` before Configure."""
        return self._runtime

    @property
    def request_timeout(self) -> float | None:
        """Seconds the runtime allows each call; ``None`` before Configure or if not sent."""
        return self._runtime.request_timeout if self._runtime else None

    @property
    def events(self) -> int:
        """The subscription mask sent in the ConfigureResponse (0 before Configure)."""
        return self._events

    @property
    def registered(self) -> bool:
        return self._registered

    @property
    def synchronized(self) -> bool:
        """True once the final part of Synchronize has been answered."""
        return self._sync_done

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.closed

    async def start(self) -> None:
        """Connect and register; return once the runtime accepted the registration.

        Raises :class:`OSError` when the socket cannot be reached and
        :class:`RegistrationError` when the runtime refuses or does not answer.
        Configure and Synchronize are served as they arrive (they may come
        before the registration reply); await :meth:`wait_synchronized` to
        know the handshake is complete.
        """
        if self._connection is not None:
            raise RuntimeError("stub already started; create a new Stub to reconnect")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._synchronized = asyncio.Event()
        self._disconnect = loop.create_future()
        label = f"plugin {self.plugin_id}"
        services = {PLUGIN_SERVICE: self._service_table()}
        sock = self._sock if self._sock is not None else await connect_unix(self.socket_path)
        connection = ThreadedConnection.plugin_side(sock, services, label)
        self._connection = connection
        connection.start()
        connection.add_close_callback(self._on_closed)
        request = api.RegisterPluginRequest(
            plugin_name=self.name, plugin_idx=self.index, NRI_version=self.nri_version
        )
        try:
            await connection.call(
                RUNTIME_SERVICE,
                "RegisterPlugin",
                request.SerializeToString(),
                timeout=self._registration_timeout,
            )
        except (TtrpcError, ConnectionClosedError) as exc:
            connection.close(f"registration failed: {exc}")
            raise RegistrationError(f"{self.plugin_id}: registration failed: {exc}") from exc
        self._registered = True
        logger.info(
            "registered with the runtime as %s (NRI %s)",
            self.plugin_id,
            self.nri_version or "version not sent",
        )

    async def wait_synchronized(self, timeout: float | None = None) -> None:
        """Wait until the handshake (Configure + Synchronize) is complete.

        Raises :class:`ConnectionClosedError` if the connection ends first and
        :class:`TimeoutError` after ``timeout`` seconds.
        """
        if self._synchronized is None or self._disconnect is None:
            raise RuntimeError("stub not started")
        sync = asyncio.ensure_future(self._synchronized.wait())
        try:
            waiters: set[asyncio.Future[Any]] = {sync, self._disconnect}
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sync.cancel()
        if self._synchronized.is_set():
            return
        if self._disconnect.done():
            raise ConnectionClosedError(
                f"disconnected before synchronize: {self._disconnect.result().reason}"
            )
        raise TimeoutError(f"no Synchronize from the runtime within {timeout}s")

    async def wait_closed(self) -> Disconnect:
        """Wait for the connection to end; return how it ended."""
        if self._disconnect is None:
            raise RuntimeError("stub not started")
        return await asyncio.shield(self._disconnect)

    async def run(self) -> Disconnect:
        """:meth:`start`, then :meth:`wait_closed`."""
        await self.start()
        return await self.wait_closed()

    async def close(self) -> Disconnect | None:
        """Close the connection (the plugin's clean shutdown) and wait for it."""
        if self._connection is None:
            return None
        self._closing = True
        self._connection.close("plugin closed the connection")
        return await self.wait_closed()

    async def __aenter__(self) -> Stub:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def update_containers(
        self,
        updates: Iterable[api.ContainerUpdate],
        evictions: Iterable[api.ContainerEviction] = (),
        *,
        timeout: float | None = None,
    ) -> list[api.ContainerUpdate]:
        """Ask the runtime for unsolicited updates; return those that failed."""
        if self._connection is None or not self._registered:
            raise RuntimeError("stub not registered")
        request = api.UpdateContainersRequest(update=list(updates), evict=list(evictions))
        payload = await self._connection.call(
            RUNTIME_SERVICE,
            "UpdateContainers",
            request.SerializeToString(),
            timeout=timeout if timeout is not None else self.request_timeout,
        )
        return list(api.UpdateContainersResponse.FromString(payload).failed)

    def _on_closed(self, reason: str) -> None:
        disconnect = Disconnect(reason=reason, by_runtime=not self._closing)
        if disconnect.by_runtime:
            logger.warning("%s: disconnected from the runtime: %s", self.plugin_id, reason)
        else:
            logger.info("%s: connection closed", self.plugin_id)
        if self._disconnect is not None and not self._disconnect.done():
            self._disconnect.set_result(disconnect)
        if self._on_disconnect is not None:
            try:
                self._on_disconnect(disconnect)
            except Exception:
                logger.exception("%s: on_disconnect callback failed", self.plugin_id)

    def _service_table(self) -> dict[str, AnyHandler]:
        plugin = self.plugin
        table: dict[str, AnyHandler] = {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "CreateContainer": _bind(plugin.create_container, _create_request, _create_response),
            "UpdateContainer": _bind(plugin.update_container, _update_request, _update_response),
            "StopContainer": _bind(plugin.stop_container, _stop_request, _stop_response),
            "StateChange": self._state_change_handler(),
            "Shutdown": _bind(plugin.shutdown, _no_arguments, _empty),
        }
        for event, method in NOTIFICATION_RPCS.items():
            table[method] = self._notification(event)
        return table

    def _notification(self, event: Event) -> AnyHandler:
        """The handler of *event*'s own RPC: the plugin sees it as it sees a StateChange
        (the pod, and the container of a container event); the reply is the empty response."""
        message = _NOTIFICATION_REQUESTS[event]
        container_event = "container" in message.DESCRIPTOR.fields_by_name

        def decode(payload: bytes) -> tuple[Any, ...]:
            request = message.FromString(payload)
            container = (
                request.container if container_event and request.HasField("container") else None
            )
            return event, request.pod, container

        return _bind(self.plugin.state_change, decode, _empty)

    def _state_change_handler(self) -> AnyHandler:
        """StateChange (what runtimes before NRI v0.12 send): an unknown event is answered
        without bothering the plugin."""
        method = self.plugin.state_change

        def decode(payload: bytes) -> tuple[Any, ...] | None:
            request = api.StateChangeEvent.FromString(payload)
            try:
                event = Event(request.event)
            except ValueError:
                logger.debug("%s: ignoring unknown event %d", self.plugin_id, request.event)
                return None
            container = request.container if request.HasField("container") else None
            return event, request.pod, container

        if inspect.iscoroutinefunction(method):

            async def deferred(payload: bytes, context: CallContext) -> bytes:
                arguments = decode(payload)
                if arguments is not None:
                    await method(*arguments)
                return b""

            return deferred

        def inline(payload: bytes, context: CallContext) -> bytes:
            arguments = decode(payload)
            if arguments is not None:
                method(*arguments)
            return b""

        return inline

    async def _configure(self, payload: bytes, context: CallContext) -> bytes:
        request = api.ConfigureRequest.FromString(payload)
        info = RuntimeInfo(
            config=request.config,
            runtime_name=request.runtime_name,
            runtime_version=request.runtime_version,
            registration_timeout=(
                request.registration_timeout / 1000 if request.registration_timeout else None
            ),
            request_timeout=request.request_timeout / 1000 if request.request_timeout else None,
            nri_version=request.NRI_version,
        )
        self._runtime = info
        chosen = await _settled(self.plugin.configure(info))
        if chosen is None:
            chosen = self.plugin.default_events()
        mask = chosen if isinstance(chosen, int) else event_mask(chosen)
        if mask == 0:
            raise TtrpcError(Code.UNKNOWN, f"plugin {self.plugin_id} subscribes to no event")
        self._events = mask
        timeout = (
            f"request timeout {info.request_timeout:g}s"
            if info.request_timeout is not None
            else "no request timeout sent (NRI before v0.7)"
        )
        logger.info(
            "%s: configured by %s %s (%s), events 0x%x",
            self.plugin_id,
            info.runtime_name,
            info.runtime_version,
            timeout,
            mask,
        )
        return api.ConfigureResponse(events=mask).SerializeToString()

    def _synchronize_handler(self) -> AnyHandler:
        """Synchronize: parts joined here, the whole given to the plugin once (inline or on
        the loop, as the plugin's method is)."""
        method = self.plugin.synchronize

        def part(payload: bytes) -> tuple[list[api.PodSandbox], list[api.Container]] | None:
            request = api.SynchronizeRequest.FromString(payload)
            self._sync_pods.extend(request.pods)
            self._sync_containers.extend(request.containers)
            if request.more:
                return None
            pods, self._sync_pods = self._sync_pods, []
            containers, self._sync_containers = self._sync_containers, []
            return pods, containers

        def done(
            pods: list[api.PodSandbox],
            containers: list[api.Container],
            updates: Iterable[api.ContainerUpdate] | None,
        ) -> bytes:
            self._sync_done = True
            if self._loop is not None and self._synchronized is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed
                    self._loop.call_soon_threadsafe(self._synchronized.set)
            logger.info(
                "%s: synchronized (%d pods, %d containers)",
                self.plugin_id,
                len(pods),
                len(containers),
            )
            return api.SynchronizeResponse(update=list(updates or ())).SerializeToString()

        if inspect.iscoroutinefunction(method):

            async def deferred(payload: bytes, context: CallContext) -> bytes:
                joined = part(payload)
                if joined is None:
                    return _MORE
                return done(*joined, await _settled(method(*joined)))

            return deferred

        def inline(payload: bytes, context: CallContext) -> bytes:
            joined = part(payload)
            if joined is None:
                return _MORE
            updates = method(*joined)
            assert not inspect.isawaitable(updates), "a plain synchronize returns its value"
            return done(*joined, updates)

        return inline


_MORE: Final = api.SynchronizeResponse(more=True).SerializeToString()


def _empty(result: object) -> bytes:
    return b""


def _no_arguments(payload: bytes) -> tuple[Any, ...]:
    return ()


def _create_request(payload: bytes) -> tuple[Any, ...]:
    request = api.CreateContainerRequest.FromString(payload)
    return request.pod, request.container


def _create_response(
    result: api.ContainerAdjustment | api.CreateContainerResponse | bytes | None,
) -> bytes:
    if result is None:
        return b""
    if isinstance(result, bytes):
        return result
    if isinstance(result, api.ContainerAdjustment):
        return api.CreateContainerResponse(adjust=result).SerializeToString()
    return result.SerializeToString()


def _update_request(payload: bytes) -> tuple[Any, ...]:
    request = api.UpdateContainerRequest.FromString(payload)
    return request.pod, request.container, request.linux_resources


def _update_response(
    result: Iterable[api.ContainerUpdate] | api.UpdateContainerResponse | None,
) -> bytes:
    if result is None:
        return b""
    if isinstance(result, api.UpdateContainerResponse):
        return result.SerializeToString()
    return api.UpdateContainerResponse(update=list(result)).SerializeToString()


def _stop_request(payload: bytes) -> tuple[Any, ...]:
    request = api.StopContainerRequest.FromString(payload)
    return request.pod, request.container


def _stop_response(result: Iterable[api.ContainerUpdate] | None) -> bytes:
    return api.StopContainerResponse(update=list(result or ())).SerializeToString()
