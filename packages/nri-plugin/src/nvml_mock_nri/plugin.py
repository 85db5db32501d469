"""The plugin's NRI behaviour: Configure, Synchronize, CreateContainer and the life cycle.

:class:`Injector` turns a CreateContainerRequest into a ContainerAdjustment with
the rules of :mod:`nvml_mock_nri.adjust`, keeps the probe state and metrics, and
logs one line per skipped container. Its steps call each module once, in this order: the
kept answers (:mod:`~nvml_mock_nri.replies`), what the container was given, read once into
one value (:mod:`~nvml_mock_nri.selection`), the adjustment (:mod:`~nvml_mock_nri.adjust`),
the refusal (:mod:`~nvml_mock_nri.unknown_devices`), the driver-surfaces hook
(:mod:`~nvml_mock_nri.surfaces`), the CUDA runtime opt-in (:mod:`~nvml_mock_nri.cuda_runtime`);
``tests/test_selection.py`` traces it.
It knows nothing about sockets; the
connection to the runtime is :mod:`nvml_mock_nri.service`'s job.

Every call runs on the NRI connection's own thread (the stub calls plain methods there),
not on the event loop. A container without a device or IMEX channel opt-in costs no I/O
but one stat (of the staged state, for a container with its own NVIDIA_VISIBLE_DEVICES):
the identity is read from the in-memory cache, and the encoded answer of such a container
is kept by the inputs that decide it (:mod:`nvml_mock_nri.replies`).

The one wait is at start. Registration and the first identity request start
together, and containers created in the first moments would race the answer and
start without their fabric identity. So from Configure on, for at most
``--identity-hold`` seconds (never more than :data:`HOLD_SHARE` of the runtime's
request timeout, so the runtime does not drop the plugin), CreateContainer waits
for the first answer (blocking the connection's thread on an event the watch, on the loop,
sets); after that it injects without the identity and the log and ``/readyz`` say so. The
one blocking call is the device look-up of opted-in pods (a readdir and a stat per staged
node, some 20 µs), made inline: handing it to another thread costs more than it does
(measured: p90 from 0.2 ms to 4 ms through containerd's NRI code). If that file system ever
hangs, the connection's thread stops, the runtime drops the plugin after its timeout, and
``/healthz`` (served from its own thread) reports the wedge so that kubelet restarts the pod.

Start, stop and removal of containers (and Synchronize) keep the live layer's allocation
records (:mod:`nvml_mock_nri.allocations`): a few writes to a mapped file, on the connection's
thread right after the event is answered (the service leaves them for after the reply); none
of it can fail a container.

The one container CreateContainer fails is one whose own ``NVIDIA_VISIBLE_DEVICES`` names a
GPU the node lacks, with the NVIDIA container toolkit's message, as a real node fails it
(:mod:`nvml_mock_nri.unknown_devices`; ``--unknown-visible-devices allow`` turns it off).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Final

from nvml_mock_protocol import hostgpu
from nvml_mock_protocol.hostgpu import HostDriver
from nvml_mock_protocol.nri import api_pb2

from nvml_mock_nri import devices as devices_mod
from nvml_mock_nri import unknown_devices
from nvml_mock_nri.adjust import Decision, FabricIdentity, Policy, plan
from nvml_mock_nri.allocations import AllocationRecorder
from nvml_mock_nri.cuda_publish import CudaPublisher
from nvml_mock_nri.cuda_runtime import plan_cuda_runtime
from nvml_mock_nri.devices import DeviceScan
from nvml_mock_nri.errors import UnknownDeviceError
from nvml_mock_nri.health import PluginState
from nvml_mock_nri.identity import IdentityCache, Status
from nvml_mock_nri.metrics import Metrics
from nvml_mock_nri.replies import CACHE_ENTRIES, ReplyCache, common_key
from nvml_mock_nri.selection import select
from nvml_mock_nri.settings import Settings, apply_runtime_config
from nvml_mock_nri.surfaces import HOOK_TIMEOUT_S, SurfacesHook, plan_surfaces

__all__ = ["EVENT_MASK", "Injector"]

logger = logging.getLogger(__name__)

LIFECYCLE_EVENTS: Final = (
    api_pb2.START_CONTAINER,
    api_pb2.POST_START_CONTAINER,
    api_pb2.STOP_CONTAINER,
    api_pb2.REMOVE_CONTAINER,
)
"""The events that keep the allocation records (every supported containerd offers them)."""
EVENT_MASK = sum(1 << (e - 1) for e in (api_pb2.CREATE_CONTAINER, *LIFECYCLE_EVENTS))
"""CreateContainer and the life-cycle events (NRI mask bit ``1 << (event - 1)``: 0x668)."""
HOLD_SHARE: Final = 0.25
"""The start-up hold is at most this share of the runtime's request timeout."""


class Injector:
    """Answers the runtime's calls for one plugin instance."""

    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        state: PluginState | None = None,
        identity: IdentityCache | None = None,
        scan: Callable[[str], DeviceScan] = devices_mod.scan_device_nodes,
        cdi_spec_exists: Callable[[str], bool] = devices_mod.cdi_spec_exists,
        file_exists: Callable[[str], bool] = os.path.isfile,
        host_driver: Callable[[], HostDriver] | None = None,
        scan_channels: Callable[[str], DeviceScan] = devices_mod.scan_imex_channels,
        recorder: AllocationRecorder | None = None,
    ) -> None:
        self.base_settings = settings
        """Flags, env and defaults; runtime config is applied on top of these."""
        self.settings = settings
        self.policy = Policy.from_settings(settings)
        self.metrics = metrics or Metrics()
        self.state = state or PluginState()
        self.identity = identity
        self.recorder = recorder or AllocationRecorder(settings, self.metrics, self.state)
        self.publisher: CudaPublisher | None = None
        """The socket CUDA processes in containers publish through (set by the service)."""
        self._node_gpus = unknown_devices.NodeGpus(self.recorder.state_path)
        self._scan = scan
        self._scan_channels = scan_channels
        self._cdi_spec_exists = cdi_spec_exists
        self._file_exists = file_exists
        self._detect_driver = host_driver or (
            lambda: hostgpu.detect(settings.host_proc_root, settings.host_sys_root)
        )
        self._node = settings.node_name or None
        self.replies = ReplyCache()
        """Encoded answers of the common case (:mod:`nvml_mock_nri.replies`)."""
        self._policy_generation = 0
        """Part of every kept answer's key: a policy change retires them even if an answer
        computed under the old one is stored after the cache was emptied."""
        self._keyed_identity: FabricIdentity | None = None
        self._identity_serial = 0
        """Stands for the identity in the kept answers' keys (see :meth:`_answer`)."""
        self._hold_until: float | None = None
        self._hold_seconds = 0.0
        self._hold_reported = False
        self.state.request_timeout = settings.runtime_request_timeout
        if settings.wedge_threshold:
            self.state.wedge_override = settings.wedge_threshold
        # Read at scrape time from the health thread: a stopped loop cannot clear a
        # gauge it set, so "registered" is 1 only while the loop is also alive.
        self.metrics.registered.set_function(self._registered_value)
        self.metrics.loop_lag.set_function(lambda: self.state.loop_lag() or 0.0)
        # the calls being answered are the probes' in-flight table, read at scrape time:
        # no gauge to keep per call
        self.metrics.in_flight.set_function(self.state.in_flight)

    def check_host_driver(self) -> HostDriver:
        """Detect a real NVIDIA driver; record it for the probes, metric and log on change.

        Run at start and again for every container with a device or IMEX channel opt-in
        (once per container), so a driver loaded after the plugin started still closes the
        door (the check costs a few stats and one read).
        """
        driver = self._detect_driver()
        previous = self.state.host_driver
        self.state.host_driver = driver
        self.metrics.real_driver.set(1 if driver.present else 0)
        if previous is None or previous.present != driver.present:
            if driver.present:
                logger.warning(
                    "device opt-in disabled on this node: %s; opted-in pods get the overlay "
                    "and env without device nodes or IMEX channels",
                    driver.reason,
                    extra={"node": self._node},
                )
            elif previous is not None:
                logger.info(
                    "no real NVIDIA driver on this node any more; device opt-in enabled again",
                    extra={"node": self._node},
                )
        return driver

    def _registered_value(self) -> float:
        return 1.0 if self.state.registered and not self.state.loop_stalled() else 0.0

    # -- handshake -----------------------------------------------------------

    def configure(
        self, config: str, runtime: str, version: str, request_timeout: float | None
    ) -> int:
        """Apply the runtime's Configure; returns the event mask.

        Raises ConfigError when the runtime-sent YAML config is unusable; the
        caller turns that into an error reply, and the runtime drops the plugin.
        """
        settings, ignored = apply_runtime_config(self.base_settings, config)
        for key in ignored:
            logger.info(
                "runtime config key %s ignored: a flag or env var sets the same option", key
            )
        if settings != self.settings:
            self.settings = settings
            self.policy = Policy.from_settings(settings)
            self._policy_generation += 1
            self.replies.clear()
            logger.info("applied the plugin config sent by the runtime")
        if request_timeout:
            timeout, source = request_timeout, "sent by the runtime"
        else:
            timeout = self.settings.runtime_request_timeout
            source = "not sent by the runtime (NRI before v0.7); --runtime-request-timeout"
        self.state.request_timeout = timeout
        self.state.registered = True
        self._start_hold(timeout)
        logger.info(
            "configured by %s %s: request timeout %.3fs (%s), wedged after %.3fs, events 0x%x",
            runtime or "runtime",
            version or "(version unknown)",
            timeout,
            source,
            self.state.wedge_threshold,
            EVENT_MASK,
        )
        return EVENT_MASK

    def _start_hold(self, request_timeout: float) -> None:
        """Open the start-up window in which CreateContainer waits for the first identity."""
        identity = self.identity
        if identity is None or identity.snapshot.status is not Status.UNKNOWN:
            return
        wanted = self.settings.identity_hold
        hold = min(wanted, HOLD_SHARE * request_timeout)
        if hold < wanted:
            logger.warning(
                "--identity-hold %.2fs is more than %g of the runtime's request timeout "
                "(%.2fs); holding CreateContainer for the node identity at most %.2fs",
                wanted,
                HOLD_SHARE,
                request_timeout,
                hold,
            )
        if hold <= 0:
            return
        self._hold_seconds = hold
        self._hold_until = time.monotonic() + hold
        identity.hold_note = f"CreateContainer is held up to {hold:.2f}s after start for it"

    def _await_identity(self, pod: api_pb2.PodSandbox, container: api_pb2.Container) -> None:
        """The start-up hold: wait for the first identity while the window is open."""
        identity = self.identity
        if identity is None or self._hold_until is None:
            return
        if identity.snapshot.status is not Status.UNKNOWN:
            self._hold_until = None  # known: no container waits again (until a reconnection)
            return
        remaining = self._hold_until - time.monotonic()
        # known now, or the window has closed: either way no later container waits
        self._hold_until = None
        if identity.wait_known(remaining):
            return
        if not self._hold_reported:
            self._hold_reported = True
            identity.hold_note = f"the {self._hold_seconds:.2f}s start-up hold expired"
            logger.warning(
                "no node identity from the topology service within the %.2fs start-up hold; "
                "injecting containers without fabric identity until it answers",
                self._hold_seconds,
                extra={"node": self._node},
            )
        if remaining > 0:
            logger.info(
                "held %.2fs for the node identity, none yet: injecting without fabric identity",
                remaining,
                extra=self._context(pod, container),
            )

    def synchronize(
        self, pods: list[api_pb2.PodSandbox], containers: list[api_pb2.Container]
    ) -> None:
        """Synchronize: rebuild the allocation records from the running containers, then
        record the end of it (the plugin never changes existing containers)."""
        recorded = self.recorder.synchronize(self.policy, pods, containers)
        if self.publisher is not None:
            self.publisher.republish()  # Synchronize replaced every record, CUDA's too
        logger.debug("allocation records rebuilt: %d running containers hold GPUs", recorded)
        self.synchronized(len(pods), len(containers))

    def container_starting(self, pod: api_pb2.PodSandbox, container: api_pb2.Container) -> None:
        """StartContainer (before the task runs): derive the allocation record."""
        self.recorder.starting(self.policy, pod, container)

    def container_started(self, pod: api_pb2.PodSandbox, container: api_pb2.Container) -> None:
        """PostStartContainer (which has the PID): record the allocation, then judge again
        what its CUDA processes sent before it was recorded."""
        self.recorder.started(self.policy, pod, container)
        if self.publisher is not None:
            self.publisher.recorded()

    def container_stopped(self, container: api_pb2.Container) -> None:
        """StopContainer and RemoveContainer: drop the allocation record."""
        self.recorder.stopped(container)

    def synchronized(self, pods: int, containers: int) -> None:
        """Record the end of Synchronize (the plugin never changes existing containers)."""
        self.state.synchronized = True
        self.metrics.synchronized.set(1)
        logger.debug(
            "synchronized with the runtime: %d pods, %d containers already exist "
            "(existing containers are left as they are)",
            pods,
            containers,
        )

    def disconnected(self) -> None:
        """Record that the runtime connection is gone."""
        self.state.registered = False
        self.state.synchronized = False
        self.metrics.synchronized.set(0)

    # -- CreateContainer -----------------------------------------------------

    def create_container(
        self, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> api_pb2.CreateContainerResponse:
        """The adjustment for one new container, as a message (see :meth:`answer_create`)."""
        return api_pb2.CreateContainerResponse.FromString(self.answer_create(pod, container))

    def answer_create(self, pod: api_pb2.PodSandbox, container: api_pb2.Container) -> bytes:
        """The serialized CreateContainerResponse for one new container. Raises only
        :class:`UnknownDeviceError` (the container's own NVIDIA_VISIBLE_DEVICES names a GPU
        the node lacks), which fails the creation as the NVIDIA container toolkit does; any
        other fault is logged and the container starts without the overlay."""
        token = self.state.begin()
        started = time.perf_counter()
        try:
            return self._answer(pod, container)
        except UnknownDeviceError as exc:
            self.metrics.unknown_devices_refused.inc()
            logger.warning(
                "failing the container's creation: %s (as the NVIDIA container toolkit does)",
                exc,
                extra={**self._context(pod, container), "entry": exc.entry},
            )
            raise
        except Exception:
            self.metrics.errors.inc()
            logger.exception(
                "could not compute the adjustment; the container starts without the overlay",
                extra=self._context(pod, container),
            )
            return b""
        finally:
            self.metrics.create.observe(time.perf_counter() - started)
            self.state.end(token)

    def _answer(self, pod: api_pb2.PodSandbox, container: api_pb2.Container) -> bytes:
        """The common case from :attr:`replies` when it was answered before, else the full
        rules (whose answer is kept when it is the common case)."""
        if self._hold_until is not None:
            self._await_identity(pod, container)
        # read once: the key and the full rules see the same identity
        identity = self.identity.current if self.identity is not None else None
        key = None
        if not logger.isEnabledFor(logging.DEBUG):  # the full path logs each injection
            if identity is not self._keyed_identity:
                # a small integer in the keys, not the identity (whose hash is computed in
                # Python on every look-up): a new identity is a new serial
                self._keyed_identity = identity
                self._identity_serial += 1
            key = common_key(
                self.policy,
                pod,
                container,
                extra=(self._identity_serial, self._policy_generation),
                board_revision=self._board_revision,
            )
            if key is not None:
                replies = self.replies
                cached = replies.get(key)
                if cached is not None:
                    replies.hits += 1
                    self.metrics.create.injections += 1
                    return cached
        response, plain = self._create_container(pod, container, identity)
        reply = response.SerializeToString()
        if key is not None and plain:
            replies = self.replies
            if len(replies) >= CACHE_ENTRIES:
                replies.clear()  # a node rarely has so many: start again
            replies[key] = reply
        return reply

    def _board_revision(self) -> object:
        if self.settings.unknown_visible_devices != unknown_devices.FAIL:
            return None
        live = self.recorder.live
        return self._node_gpus.revision(None if live is None or live.retired else live)

    def _create_container(
        self,
        pod: api_pb2.PodSandbox,
        container: api_pb2.Container,
        identity: FabricIdentity | None,
    ) -> tuple[api_pb2.CreateContainerResponse, bool]:
        """The full rules; also whether the answer is a plain injection (no skip, no
        opt-in, nothing logged), which :attr:`replies` may keep."""
        policy = self.policy
        host_driver = _once(self.check_host_driver)
        # what the container was given, read once; every step below reads only this value
        selection = select(container, self.recorder.mig_devices)
        decision = plan(
            policy,
            selection,
            namespace=pod.namespace,
            pod_annotations=pod.annotations,
            env=container.env,
            mount_destinations=[m.destination for m in container.mounts],
            identity=identity,
            host_driver=host_driver,
            cdi_spec_exists=self._cdi_spec_exists,
            scan=self._scan,
            scan_channels=self._scan_channels,
        )
        if decision.skip is not None:
            self.metrics.skip(decision.skip)
            logger.info(
                "not injecting: %s",
                decision.skip.value.replace("_", " "),
                extra={**self._context(pod, container), "reason": decision.skip.value},
            )
            return api_pb2.CreateContainerResponse(), False
        if self.settings.unknown_visible_devices == unknown_devices.FAIL:
            unknown_devices.refuse(selection, self._node_gpus)
        if decision.wants_devices:
            self._count_devices(decision)
        if decision.wants_imex_channels:
            self._count_imex_channels(decision)
        hook = plan_surfaces(
            policy,
            decision,
            namespace=pod.namespace,
            pod_annotations=pod.annotations,
            host_driver=host_driver,
            selection=selection,
        )
        plan_cuda_runtime(
            policy,
            decision,
            pod_annotations=pod.annotations,
            selection=selection,
            exists=self._file_exists,
        )
        self._report(decision, pod, container)
        self.metrics.create.injections += 1
        response = _response(decision, hook)
        plain = not (
            decision.wants_devices
            or decision.wants_imex_channels
            or hook is not None
            or decision.warnings
            or decision.notes
        )
        return response, plain

    def _count_devices(self, decision: Decision) -> None:
        if decision.cdi_devices:
            self.metrics.device_injections.labels("cdi").inc()
        elif decision.devices:
            self.metrics.device_injections.labels("raw").inc()
        elif decision.devices_suppressed:
            self.metrics.devices_suppressed.inc()
        elif decision.devices_refused is not None:
            self.metrics.devices_refused.labels(decision.devices_refused.value).inc()

    def _count_imex_channels(self, decision: Decision) -> None:
        if decision.imex_channels:
            self.metrics.imex_channel_injections.inc()
        elif decision.imex_refused is not None:
            self.metrics.imex_channels_refused.labels(decision.imex_refused.value).inc()

    def _report(
        self, decision: Decision, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> None:
        if decision.warnings or decision.notes:
            context = self._context(pod, container)
            for message in decision.warnings:
                logger.warning("%s", message, extra=context)
            for message in decision.notes:
                logger.info("%s", message, extra=context)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "injecting: %d env, %d devices, %d CDI devices, %d IMEX channels",
                len(decision.env),
                len(decision.devices),
                len(decision.cdi_devices),
                len(decision.imex_channels),
                extra=self._context(pod, container),
            )

    def _context(self, pod: api_pb2.PodSandbox, container: api_pb2.Container) -> dict[str, object]:
        return {
            "node": self._node,
            "namespace": pod.namespace,
            "pod": pod.name,
            "container": container.name,
        }


def _once(check: Callable[[], HostDriver]) -> Callable[[], HostDriver]:
    """``check`` run at most once: one real-driver look-up per container, not per opt-in."""
    found: list[HostDriver] = []

    def cached() -> HostDriver:
        if not found:
            found.append(check())
        return found[0]

    return cached


def _response(decision: Decision, hook: SurfacesHook | None) -> api_pb2.CreateContainerResponse:
    response = api_pb2.CreateContainerResponse()
    adjust = response.adjust
    mount = decision.mount
    if mount is not None:
        adjust.mounts.add(
            destination=mount.destination,
            type=mount.type,
            source=mount.source,
            options=mount.options,
        )
    for key, value in decision.env:
        adjust.env.add(key=key, value=value)
    # The runtime allows each added device in the container's device cgroup (containerd's
    # NRI spec generator adds the rule; rules in an adjustment's resources are not applied).
    for node in (*decision.devices, *decision.imex_channels):
        device = adjust.linux.devices.add(
            path=node.path, type=node.type, major=node.major, minor=node.minor
        )
        device.file_mode.value = node.file_mode
        device.uid.value = node.uid
        device.gid.value = node.gid
    for name in decision.cdi_devices:
        adjust.CDI_devices.add(name=name)
    if hook is not None:
        added = adjust.hooks.create_container.add(path=hook.path, args=hook.args)
        added.timeout.value = HOOK_TIMEOUT_S
    return response
