"""One plugin process: health endpoints, identity watch and the runtime connection.

Lifecycle, and why:

1. The health listener binds first, so a port clash fails the start (exit 3)
   before anything is registered. The loop's heartbeat starts with it: the
   probes read its age to tell a stopped event loop (see :mod:`nvml_mock_nri.health`).
2. The identity watch starts in the background; registration never waits for
   the topology service (containers are injected without fabric identity until
   it answers, and ``/readyz`` says so).
3. The plugin connects to the runtime's NRI socket, registers, and serves
   Configure, Synchronize and CreateContainer.
4. The connection ends one of two ways. SIGTERM/SIGINT: the plugin closes its
   socket (the clean NRI shutdown) and exits 0. The runtime going away
   (containerd restarted, or it dropped the plugin after a timeout): the plugin
   logs it and exits 1 at once. It does not reconnect in-process: a restarted
   pod re-registers with fresh state, kubelet's restart counter and back-off
   make a flapping runtime visible, and a plugin that silently stopped being
   called (NRI fails open) cannot hide behind a reconnect loop. This is the
   reference plugin's choice too.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from nvml_mock_protocol import names
from nvml_mock_protocol.hostgpu import HostDriver
from nvml_mock_protocol.nri import api_pb2
from nvml_mock_protocol.nri.errors import RegistrationError, TtrpcError
from nvml_mock_protocol.nri.events import Event
from nvml_mock_protocol.nri.stub import Disconnect, Plugin, RuntimeInfo, Stub
from nvml_mock_protocol.nri.threaded import after_reply
from nvml_mock_protocol.nri.ttrpc import Code

from nvml_mock_nri import devices as devices_mod
from nvml_mock_nri.cuda_publish import CudaPublisher
from nvml_mock_nri.devices import DeviceScan
from nvml_mock_nri.errors import ConfigError, UnknownDeviceError
from nvml_mock_nri.health import HealthServer, PluginState
from nvml_mock_nri.identity import IdentityCache, IdentityWatcher
from nvml_mock_nri.metrics import Metrics
from nvml_mock_nri.plugin import Injector
from nvml_mock_nri.settings import Settings

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_CONFIG = 3

CONFIG_ERROR_GRACE = 0.05
"""Seconds between refusing a runtime config and closing the connection (lets the reply go)."""


async def _heartbeat(state: PluginState) -> None:
    """Keep :attr:`PluginState.heartbeat` fresh for as long as the loop runs."""
    while True:
        state.beat()
        await asyncio.sleep(state.heartbeat_interval)


class NriAdapter(Plugin):
    """The stub's view of the plugin: NRI calls delegated to an :class:`Injector`.

    Every container call is a plain method, so the stub answers it on the NRI
    connection's own thread, with no trip through the event loop (the identity watch
    and the heartbeat keep the loop). Only Configure runs on the loop: it is once per
    connection and schedules the close of a refused config there.

    The life-cycle events answer at once and keep the allocation records after the reply
    is written (:func:`~nvml_mock_protocol.nri.threaded.after_reply`), before the next
    request is read: the runtime no longer waits for the records, which a container's
    start cannot be failed by anyway, while every later request still finds them written.
    Measured through containerd's NRI code, the four events went from 1.3x to 1.0x a
    no-op plugin's time, and the next CreateContainer got faster too.
    """

    events = frozenset(
        {
            Event.CREATE_CONTAINER,
            Event.START_CONTAINER,
            Event.POST_START_CONTAINER,
            Event.STOP_CONTAINER,
            Event.REMOVE_CONTAINER,
        }
    )

    def __init__(self, injector: Injector, on_config_error: Callable[[], None]) -> None:
        self.injector = injector
        self.config_error: ConfigError | None = None
        self._on_config_error = on_config_error

    async def configure(self, runtime: RuntimeInfo) -> int:
        try:
            return self.injector.configure(
                runtime.config,
                runtime.runtime_name,
                runtime.runtime_version,
                runtime.request_timeout,
            )
        except ConfigError as exc:
            self.config_error = exc
            logger.error("the plugin config sent by the runtime is unusable: %s", exc)
            # Close our side too: not every runtime drops a plugin whose Configure failed,
            # and a plugin that is connected but never configured would inject nothing.
            asyncio.get_running_loop().call_later(CONFIG_ERROR_GRACE, self._on_config_error)
            message = f"nvml-mock: bad plugin config: {exc}"
            raise TtrpcError(Code.INVALID_ARGUMENT, message) from None

    def synchronize(
        self, pods: list[api_pb2.PodSandbox], containers: list[api_pb2.Container]
    ) -> Iterable[api_pb2.ContainerUpdate] | None:
        self.injector.synchronize(pods, containers)
        return None

    def stop_container(
        self, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> Iterable[api_pb2.ContainerUpdate] | None:
        after_reply(partial(self.injector.container_stopped, container))
        return None

    def state_change(
        self, event: Event, pod: api_pb2.PodSandbox, container: api_pb2.Container | None
    ) -> None:
        if container is None:
            return
        injector = self.injector
        if event is Event.START_CONTAINER:
            after_reply(partial(injector.container_starting, pod, container))
        elif event is Event.POST_START_CONTAINER:
            after_reply(partial(injector.container_started, pod, container))
        elif event is Event.REMOVE_CONTAINER:
            after_reply(partial(injector.container_stopped, container))

    def create_container(self, pod: api_pb2.PodSandbox, container: api_pb2.Container) -> bytes:
        try:
            return self.injector.answer_create(pod, container)
        except UnknownDeviceError as exc:  # the runtime fails the creation with this message
            raise TtrpcError(Code.UNKNOWN, str(exc)) from None


class PluginService:
    """Everything one plugin process runs; :meth:`run` returns the exit code."""

    def __init__(
        self,
        settings: Settings,
        *,
        environ: Mapping[str, str] | None = None,
        scan: Callable[[str], DeviceScan] = devices_mod.scan_device_nodes,
        cdi_spec_exists: Callable[[str], bool] = devices_mod.cdi_spec_exists,
        host_driver: Callable[[], HostDriver] | None = None,
        scan_channels: Callable[[str], DeviceScan] = devices_mod.scan_imex_channels,
    ) -> None:
        self.settings = settings
        self._environ = os.environ if environ is None else environ
        self.metrics = Metrics()
        self.state = PluginState()
        self.identity: IdentityCache | None = None
        if settings.topology_url:
            self.identity = IdentityCache(settings.topology_url, self.metrics)
            self.state.identity_check = self.identity.readiness
        self.injector = Injector(
            settings,
            metrics=self.metrics,
            state=self.state,
            identity=self.identity,
            scan=scan,
            cdi_spec_exists=cdi_spec_exists,
            host_driver=host_driver,
            scan_channels=scan_channels,
        )
        self.adapter = NriAdapter(self.injector, self.stop)
        self.health: HealthServer | None = None
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def stop(self) -> None:
        """Ask :meth:`run` to close the connection and return 0 (safe from any thread)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def run(self) -> int:
        """Serve until stopped (0), the runtime goes away (1) or the start fails (1/3)."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.state.beat()
        heartbeat = asyncio.create_task(_heartbeat(self.state), name="loop heartbeat")
        try:
            return await self._run()
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)

    async def _run(self) -> int:
        self.injector.check_host_driver()
        endpoint = self.settings.health_endpoint
        if endpoint is not None:
            try:
                self.health = HealthServer(*endpoint, self.state, self.metrics)
            except OSError as exc:
                logger.error(
                    "cannot listen for health checks on %s (--health-addr): %s",
                    self.settings.health_addr,
                    exc.strerror or exc,
                )
                return EXIT_CONFIG
            self.health.start()
            host, port = self.health.address
            logger.info("health endpoints listening on http://%s:%d", host, port)
        publisher = CudaPublisher(
            self.injector.recorder, self.settings.overlay_host_path, self.settings.host_proc_root
        )
        try:
            publisher.start()
            self.injector.publisher = publisher
        except OSError as exc:
            logger.warning(
                "not publishing for CUDA processes in containers: cannot serve %s: %s",
                publisher.path,
                exc.strerror or exc,
            )
        watch_task: asyncio.Task[None] | None = None
        try:
            if self.identity is not None:
                watcher = IdentityWatcher(
                    self.identity,
                    self.settings.node_name,
                    watch_seconds=self.settings.topology_watch_seconds,
                    timeout=self.settings.topology_timeout,
                    backoff_max=self.settings.topology_backoff_max,
                )
                watch_task = asyncio.create_task(watcher.run(), name="identity watch")
            return await self._connect_and_serve()
        finally:
            if watch_task is not None:
                watch_task.cancel()
                await asyncio.gather(watch_task, return_exceptions=True)
            if self.health is not None:
                self.health.close()
            if self.injector.publisher is not None:
                self.injector.publisher.close()
                self.injector.publisher = None

    def _make_stub(self) -> Stub:
        # A plugin launched by the runtime gets its socket as an fd and its index in
        # NRI_PLUGIN_IDX (the Go stub's names); an explicit --plugin-index still wins.
        keys = [names.ENV_NRI_PLUGIN_SOCKET]
        if "plugin_index" not in self.settings.explicit:
            keys.append(names.ENV_NRI_PLUGIN_IDX)
        environ = {key: self._environ[key] for key in keys if self._environ.get(key)}
        return Stub.from_environment(
            self.adapter,
            name=self.settings.plugin_name,
            index=self.settings.plugin_index,
            socket_path=self.settings.socket_path,
            environ=environ,
        )

    async def _connect_and_serve(self) -> int:
        assert self._stop is not None
        settings = self.settings
        try:
            stub = self._make_stub()
        except ValueError as exc:
            logger.error("cannot use the runtime-provided socket: %s", exc)
            return EXIT_CONFIG
        where = (
            f"fd {self._environ[names.ENV_NRI_PLUGIN_SOCKET]}"
            if self._environ.get(names.ENV_NRI_PLUGIN_SOCKET)
            else settings.socket_path
        )
        logger.info(
            "nvml-mock-nri: registering plugin %s/%s on %s",
            stub.index,
            stub.name,
            where,
        )
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            return await self._serve(stub, where, stopped)
        finally:
            stopped.cancel()

    async def _serve(self, stub: Stub, where: str, stopped: asyncio.Future[Any]) -> int:
        starting = asyncio.ensure_future(stub.start())
        await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            logger.info("stopping before the runtime answered the registration")
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            await stub.close()
            return EXIT_OK
        try:
            starting.result()
        except OSError as exc:
            logger.error(
                "cannot connect to the NRI socket %s: %s (is NRI enabled in the container "
                "runtime?); exiting",
                where,
                exc.strerror or exc,
            )
            return EXIT_RUNTIME
        except RegistrationError as exc:
            logger.error("the runtime refused the registration: %s; exiting", exc)
            return EXIT_RUNTIME
        closed = asyncio.ensure_future(stub.wait_closed())
        await asyncio.wait({stopped, closed}, return_when=asyncio.FIRST_COMPLETED)
        if closed.done():
            return self._lost(closed.result())
        closed.cancel()
        logger.info("stopping: closing the NRI connection")
        await stub.close()
        self.injector.disconnected()
        if self.adapter.config_error is not None:
            logger.error("exiting: the runtime sent an unusable plugin config")
            return EXIT_CONFIG
        return EXIT_OK

    def _lost(self, disconnect: Disconnect) -> int:
        self.injector.disconnected()
        if self.adapter.config_error is not None:
            logger.error(
                "the runtime dropped the plugin after its config was refused (%s); exiting",
                self.adapter.config_error,
            )
            return EXIT_CONFIG
        logger.error(
            "lost the connection to the container runtime (%s); new containers are no "
            "longer injected; exiting so that the pod restarts and registers again",
            disconnect.reason,
        )
        return EXIT_RUNTIME
