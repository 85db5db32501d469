"""Allocation records: which running container holds which GPUs, in the node's live layer.

While a container that was given GPUs runs (a device plugin's or DRA driver's CDI names,
``/dev/nvidiaN`` nodes, or its own ``NVIDIA_VISIBLE_DEVICES``: :func:`visible_gpus`), the
live layer holds a record of it: host PID, pod, namespace, container name, the GPUs, the
memory it uses on each (annotation ``nvml-mock.nvidia.com/gpu-memory``, else
``--gpu-memory-share`` of the GPU) and its utilization pattern (annotation
``nvml-mock.nvidia.com/gpu-utilization``). Every NVML client on the node then sees a compute
process, used memory and utilization on those GPUs. The record goes when the container
stops or is removed; Synchronize (at every (re)connection) replaces every record by the
runtime's running containers, so a plugin restart leaves nothing behind and loses nothing.

A container without an allocation (the ambient, all-GPUs case) records nothing, and neither
does one whose only GPU device nodes are those this plugin added on the device opt-in (node
software such as NVIDIA's device plugin: it opens every GPU and holds none). Excluded
namespaces and opted-out pods get no overlay and so no record.

Nothing here ever fails a container: a live layer that cannot be written (not staged yet,
a re-stage in progress, a library of another version) is logged once per cause, counted
(``nvml_mock_nri_allocation_errors_total``) and shown on ``/readyz`` as a note; the next
event tries again (and reopens a file a re-stage replaced).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from nvml_mock_live import (
    Allocation,
    BoardGpu,
    LiveLayer,
    LiveLayerError,
    parse_memory,
    parse_utilization,
)
from nvml_mock_live.allocations import pack, with_process
from nvml_mock_live.mig import (
    MIG_MEMORY_SLICES,
    MigDevice,
    is_mig_token,
    mig_devices,
    resolve_holdings,
)
from nvml_mock_protocol import names
from nvml_mock_protocol.nri import api_pb2

from nvml_mock_nri.adjust import Policy, skip_reason, wants_devices
from nvml_mock_nri.dra import MigSource
from nvml_mock_nri.health import PluginState
from nvml_mock_nri.metrics import Metrics
from nvml_mock_nri.settings import Settings
from nvml_mock_nri.visible import (
    Visibility,
    VisibleSelection,
    VisibleSource,
    may_hold_gpus,
    visible_gpus,
)

__all__ = ["STARTING_MAX", "AllocationRecorder"]

logger = logging.getLogger(__name__)

STARTING_MAX = 4096
"""Containers started (StartContainer) and not yet post-started that are remembered."""


class AllocationRecorder:
    """Writes the live layer's allocation records from the container life cycle."""

    def __init__(self, settings: Settings, metrics: Metrics, state: PluginState) -> None:
        overlay = Path(settings.overlay_host_path)
        config = overlay / names.OVERLAY_CONFIG_DIR
        self.live_path = config / names.LIVE_FILE_NAME
        self.state_path = config / names.STATE_FILE_NAME
        self.library_path = overlay / names.OVERLAY_LIB_DIR / names.LIBRARY_NAME
        self.settings = settings
        self.metrics = metrics
        self.state = state
        self._live: LiveLayer | None = None
        self._board: list[BoardGpu] = []
        self._problem: str | None = None
        self._recorded: set[str] | None = None
        """Ids of the containers whose record this process wrote or Synchronize found; None
        until a Synchronize succeeded (a record of an earlier plugin may exist). A stop of a
        container not in it writes nothing, so StopContainer then RemoveContainer cost one
        pass over the records, not two, and a container without GPUs none."""
        self._starting: dict[str, _Derived | None] = {}
        """What StartContainer derived, by container id (None: it holds no GPU), until its
        PostStartContainer writes it with the PID, or its stop drops it."""

    # -- the file ------------------------------------------------------------

    def _open(self) -> LiveLayer:
        """The live file, reopened when a re-stage retired or replaced the one held."""
        live = self._live
        if live is not None and not live.retired:
            return live
        if live is not None:
            live.close()
            self._live = None
        opened = LiveLayer.open(self.live_path, state=self.state_path, library=self.library_path)
        self._board = list(opened.board)
        self._live = opened
        return opened

    @property
    def live(self) -> LiveLayer | None:
        """The live file this process has open (None before the first write); a re-stage
        of other GPUs retires it (:attr:`LiveLayer.retired`), and the next write reopens."""
        return self._live

    def _failed(self, what: str, exc: Exception) -> None:
        self.metrics.allocation_errors.inc()
        problem = f"allocation records not written: {exc}"
        if problem != self._problem:
            logger.warning("%s: %s; containers run without GPU activity records", what, exc)
        self._problem = problem
        self.state.allocation_problem = problem

    def _ok(self) -> None:
        if self._problem is not None:
            logger.info("allocation records are written again")
        self._problem = None
        self.state.allocation_problem = None

    def close(self) -> None:
        """Close the live file (records stay: they describe running containers)."""
        if self._live is not None:
            self._live.close()
            self._live = None

    # -- what a container holds ----------------------------------------------

    def mig_devices(self) -> list[MigDevice]:
        """The node's MIG devices now (for DRA MIG claims and MIG capability device nodes);
        none when the live layer cannot be read (the failure is reported as a write's)."""
        try:
            live = self._open()
            return mig_devices(live, self._board)
        except LiveLayerError as exc:
            self._failed("MIG layout", exc)
            return []

    def holds_gpus(
        self, policy: Policy, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> bool:
        """Whether *container* may hold GPUs (decided from strings, before any I/O, except
        for MIG claims): the ambient case, opted-out pods and excluded namespaces never
        touch the live layer."""
        return _held(policy, pod, container, self.mig_devices) is not None

    def allocation(
        self, policy: Policy, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> Allocation | None:
        """The record for a running *container*, or None when it holds no GPU (or gets no
        overlay). Annotation values that cannot be used are logged and replaced by the
        defaults; they never keep the record from being written."""
        selection = _held(policy, pod, container, self.mig_devices)
        return None if selection is None else self._allocation(selection, pod, container)

    def _allocation(
        self, selection: VisibleSelection, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> Allocation | None:
        board = self._board
        mig: tuple[MigDevice, ...] = ()
        if selection.kind is Visibility.ALL:
            gpus = tuple(g.index for g in board)
        else:
            # MIG entries resolve through the node's MIG layout as it is now, at start
            devices = (
                mig_devices(self._open(), board)
                if any(is_mig_token(t) for t in selection.tokens)
                else []
            )
            gpus, mig, unknown = resolve_holdings(selection.tokens, board, devices)
            if unknown:
                logger.warning(
                    "allocation names no GPU of this node: %s",
                    ", ".join(unknown),
                    extra=_context(pod, container),
                )
        if not gpus:
            return None
        annotations: Mapping[str, str] = pod.annotations
        memory = self._memory(annotations, gpus, mig, pod, container)
        pattern, level, period, seed = self._utilization(annotations, pod, container)
        started = container.started_at // 1_000_000 if container.started_at > 0 else 0
        return Allocation(
            container_id=container.id,
            pid=container.pid,
            gpus=gpus,
            mig=tuple((d.gpu, d.gpu_instance, d.compute_instance) for d in mig),
            used_memory_bytes=memory,
            pod=_fit(pod.name, 247),
            namespace=_fit(pod.namespace, 63),
            container_name=_fit(container.name, 63),
            util_pattern=pattern,
            util_level=level,
            util_period_ms=period,
            util_seed=seed,
            start_time_ms=started or time.time_ns() // 1_000_000,
        )

    def _memory(
        self,
        annotations: Mapping[str, str],
        gpus: tuple[int, ...],
        mig: tuple[MigDevice, ...],
        pod: api_pb2.PodSandbox,
        container: api_pb2.Container,
    ) -> int:
        text = annotations.get(names.ANNOTATION_GPU_MEMORY)
        if text is not None:
            try:
                return parse_memory(text)
            except ValueError as exc:
                logger.warning(
                    "annotation %s ignored: %s; using --gpu-memory-share",
                    names.ANNOTATION_GPU_MEMORY,
                    exc,
                    extra=_context(pod, container),
                )
        # the share is of the smallest device held: a MIG device has its GPU instance's
        # memory slices of its GPU's memory
        parents = {d.gpu for d in mig}
        sizes = [self._board[g].memory_total_bytes for g in gpus if g not in parents]
        sizes += [
            self._board[d.gpu].memory_total_bytes
            * min(d.slices, MIG_MEMORY_SLICES)
            // MIG_MEMORY_SLICES
            for d in mig
        ]
        return int(min(sizes) * self.settings.gpu_memory_share)

    def _utilization(
        self, annotations: Mapping[str, str], pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> tuple[int, int, int, int]:
        text = annotations.get(names.ANNOTATION_GPU_UTILIZATION)
        if text is None:
            return 0, 0, 0, 0
        try:
            return parse_utilization(text)
        except ValueError as exc:
            logger.warning(
                "annotation %s=%r ignored: %s; no utilization recorded",
                names.ANNOTATION_GPU_UTILIZATION,
                text,
                exc,
                extra=_context(pod, container),
            )
            return 0, 0, 0, 0

    # -- the life cycle --------------------------------------------------------

    def starting(
        self, policy: Policy, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> None:
        """StartContainer, sent before the container's task runs: derive its record (what it
        holds, its memory and utilization), packed, and keep it for PostStartContainer, which
        has the PID. Nothing is written yet: no process of the container exists to be shown."""
        if len(self._starting) >= STARTING_MAX:
            self._starting.clear()  # starts whose PostStart never came: derived again then
        try:
            selection = _held(policy, pod, container, self.mig_devices)
            if selection is None:
                self._starting[container.id] = None
                return
            live = self._open()
            alloc = self._allocation(selection, pod, container)
            self._starting[container.id] = (
                None if alloc is None else _Derived(alloc, pack(alloc, live.gpu_count), live)
            )
        except LiveLayerError as exc:
            self._failed(f"container {pod.namespace}/{pod.name}/{container.name}", exc)

    def started(
        self, policy: Policy, pod: api_pb2.PodSandbox, container: api_pb2.Container
    ) -> None:
        """PostStartContainer: record what the container holds, with its PID (one write per
        start; the record StartContainer derived, given the PID, else derived now)."""
        known = container.id in self._starting
        early = self._starting.pop(container.id, None)
        try:
            if known and early is None:
                return  # StartContainer found it holds no GPU
            live = self._open()
            if early is not None and early.live is live:
                # only the PID and the start time are new since StartContainer
                alloc = early.alloc
                started = container.started_at // 1_000_000 if container.started_at > 0 else 0
                record = with_process(early.record, container.pid, started or alloc.start_time_ms)
            else:  # no StartContainer seen, or a re-stage since: derived now
                selection = _held(policy, pod, container, self.mig_devices)
                if selection is None:
                    return
                derived = self._allocation(selection, pod, container)
                if derived is None:
                    return
                alloc, record = derived, pack(derived, live.gpu_count)
            live.put_record(record)
        except LiveLayerError as exc:
            self._failed(f"container {pod.namespace}/{pod.name}/{container.name}", exc)
            return
        if self._recorded is not None:
            self._recorded.add(container.id)
        self.metrics.allocations_recorded.inc()
        self._ok()
        if logger.isEnabledFor(logging.DEBUG):  # its arguments cost even when not logged
            logger.debug(
                "recorded GPUs %s, pid %d, %d bytes",
                ",".join(map(str, alloc.gpus)),
                container.pid,
                alloc.used_memory_bytes,
                extra=_context(pod, container),
            )

    def stopped(self, container: api_pb2.Container) -> None:
        """StopContainer / RemoveContainer: the container holds nothing any more."""
        self._starting.pop(container.id, None)
        if self._recorded is not None:
            if container.id not in self._recorded:
                return  # not recorded (or already removed at its StopContainer)
        elif not may_hold_gpus(container) or not visible_gpus(container).allocated:
            return  # never recorded (without the ids of a Synchronize: judged by the container)
        try:
            removed = self._open().remove(container.id)
        except LiveLayerError as exc:
            self._failed(f"container {container.id}", exc)
            return
        if self._recorded is not None:
            self._recorded.discard(container.id)
        self._ok()
        if removed:
            self.metrics.allocations_removed.inc()

    def synchronize(
        self,
        policy: Policy,
        pods: Iterable[api_pb2.PodSandbox],
        containers: Iterable[api_pb2.Container],
    ) -> int:
        """Synchronize: the records become exactly the running containers' allocations.
        Returns how many were recorded."""
        by_id = {p.id: p for p in pods}
        running = [
            (by_id[c.pod_sandbox_id], c)
            for c in containers
            if c.state == api_pb2.CONTAINER_RUNNING
            and c.pod_sandbox_id in by_id
            and self.holds_gpus(policy, by_id[c.pod_sandbox_id], c)
        ]
        if not running and self._live is None and not self.live_path.exists():
            self._recorded = set()
            return 0  # nothing to record and nothing recorded: no live layer needed
        try:
            live = self._open()
            wanted: list[Allocation] = []
            for pod, container in running:
                alloc = self.allocation(policy, pod, container)
                if alloc is not None:
                    wanted.append(alloc)
            live.replace_all(wanted)
        except LiveLayerError as exc:
            self._failed("synchronize", exc)
            return 0
        # the records are now exactly these: a later stop of any other container (and the
        # RemoveContainer after a StopContainer) has nothing to remove
        self._recorded = {a.container_id for a in wanted}
        self._starting.clear()
        self._ok()
        return len(wanted)


@dataclasses.dataclass(frozen=True, slots=True)
class _Derived:
    """A container's record as StartContainer derived it: the allocation, its packed record
    (PostStartContainer adds the PID) and the live file it was packed for (a re-stage in
    between makes PostStartContainer derive it again, for the new GPUs)."""

    alloc: Allocation
    record: bytes
    live: LiveLayer


def _held(
    policy: Policy,
    pod: api_pb2.PodSandbox,
    container: api_pb2.Container,
    mig: MigSource | None = None,
) -> VisibleSelection | None:
    """What *container* holds, or None when it holds no GPU or gets no overlay."""
    if not may_hold_gpus(container):
        return None
    if skip_reason(policy, pod.namespace, pod.annotations, ()) is not None:
        return None
    selection = visible_gpus(container, mig)
    if not selection.allocated or selection.kind is Visibility.NONE:
        return None
    if selection.source is VisibleSource.DEVICE_NODES and _mocks_own_devices(policy, pod):
        return None
    return selection


def _mocks_own_devices(policy: Policy, pod: api_pb2.PodSandbox) -> bool:
    """Whether a container's GPU device nodes are the ones this plugin adds on the device
    opt-in (the pod asked, in an allowed namespace), not a device plugin's allocation.

    Node software runs that way (NVIDIA's device plugin, GPU feature discovery, the DRA
    driver's kubelet plugins): it opens every GPU and holds none, and on a real node no
    NVML client lists it as a compute process. On a real node with the chart, NVIDIA's
    device plugin once showed on every GPU with half its memory. A pod that opts in and is
    also given device nodes by a device plugin's device-list strategy records nothing
    either: its env (the default strategy) or CDI names are what count."""
    return pod.namespace in policy.device_namespaces and wants_devices(policy, pod.annotations)


def _fit(text: str, limit: int) -> str:
    """*text* cut to *limit* UTF-8 bytes (names are display only; the id is the key)."""
    raw = text.encode("utf-8")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def _context(pod: api_pb2.PodSandbox, container: api_pb2.Container) -> dict[str, object]:
    return {"namespace": pod.namespace, "pod": pod.name, "container": container.name}
