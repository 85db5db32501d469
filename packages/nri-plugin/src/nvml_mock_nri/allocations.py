"""Allocation records: which running container holds which GPUs, in the node's live layer.

While a container that holds GPUs runs, the live layer holds a record of it: host PID, pod,
namespace, container name, the GPUs, the memory it uses on each (annotation
``nvml-mock.nvidia.com/gpu-memory``, else ``--gpu-memory-share`` of the GPU) and its
utilization pattern (annotation ``nvml-mock.nvidia.com/gpu-utilization``). Every NVML client
on the node then sees a compute process, used memory and utilization on those GPUs. The
record goes when the container stops or is removed; Synchronize (at every (re)connection)
replaces every record by the runtime's running containers, so a plugin restart leaves
nothing behind and loses nothing.

What a container may record (:class:`~nvml_mock_nri.selection.Selection` says what it was
given and named):

- **Given**: the GPUs and MIG devices whose device nodes the runtime gave it (``/dev/nvidiaN``;
  for a MIG device also its GPU and compute instance capability nodes), as far as its names
  (own ``NVIDIA_VISIBLE_DEVICES``, CDI names, DRA claims) select them, or all of them when it
  has nodes and no names. A pod with the device opt-in gets every mock node from this
  plugin, so for it only the names in its CDI devices (which the runtime resolved and a pod
  spec cannot write) count as given.
- **Declared**: what its names select beyond that (a device plugin's ``envvar`` strategy,
  or the pod's own word). A declared GPU is recorded only while no other container was
  *given* it (or a MIG device of it): declarations never touch a claimed GPU. A container
  given a GPU later takes it out of the earlier declarations (their records are rewritten
  without it, or removed).
- At most :data:`RECORDS_PER_POD` records per pod.

So a pod without a claim changes nothing NVML or the exporter shows for a claimed GPU, and
one pod adds at most :data:`RECORDS_PER_POD` processes (and exporter series per GPU).

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
from nvml_mock_nri.health import PluginState
from nvml_mock_nri.metrics import Metrics
from nvml_mock_nri.selection import MigSource, Selection, Visibility, VisibleSource, select
from nvml_mock_nri.settings import Settings

__all__ = ["RECORDS_PER_POD", "STARTING_MAX", "AllocationRecorder", "Grant"]

logger = logging.getLogger(__name__)

STARTING_MAX = 4096
"""Containers started (StartContainer) and not yet post-started that are remembered."""
RECORDS_PER_POD = 16
"""Records one pod may hold at once (its containers); more are logged and not recorded, so
one pod adds at most this many processes to every NVML client and the exporter."""


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
        self._kept: dict[str, _Kept] = {}
        """The records this process wrote or Synchronize found, by container id: what each
        was given (the claims declarations keep off) and declared (what a later claim takes
        away), and its pod (the per-pod limit)."""
        self._synced = False
        """Whether a Synchronize succeeded: before it, a record of an earlier plugin may exist
        that :attr:`_kept` does not know. After it, a stop of a container not kept writes
        nothing, so StopContainer then RemoveContainer cost one pass over the records, not
        two, and a container without GPUs none."""
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

    def grants(self) -> dict[str, Grant]:
        """What each recorded container holds now, by container id: the GPUs and MIG devices
        its CUDA processes may publish their use on (:mod:`nvml_mock_nri.cuda_publish`, from
        its own thread: one copy of the records taken at once)."""
        return {cid: _grant(cid, k) for cid, k in list(self._kept.items())}

    def grant(self, container_id: str) -> Grant | None:
        """What the recorded container *container_id* holds now (None: no record)."""
        kept = self._kept.get(container_id)
        return None if kept is None else _grant(container_id, kept)

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
        """The record for a running *container* as things stand, or None when it holds
        nothing (see the module docstring). Annotation values that cannot be used are logged
        and replaced by the defaults; they never keep the record from being written."""
        selection = _held(policy, pod, container, self.mig_devices)
        if selection is None:
            return None
        derived = self._derive(selection, _opted_in(policy, pod), pod, container)
        return None if derived is None else derived.alloc

    def _claimed(self, besides: str) -> set[int]:
        """The GPUs other containers than *besides* were given (whole or a MIG device)."""
        claimed: set[int] = set()
        for cid, kept in self._kept.items():
            if cid != besides:
                claimed.update(kept.derived.given)
        return claimed

    def _derive(
        self,
        selection: Selection,
        opted_in: bool,
        pod: api_pb2.PodSandbox,
        container: api_pb2.Container,
    ) -> _Derived | None:
        board = self._board
        visible = selection.visible
        tokens = visible.tokens
        wanted = [*tokens, *selection.runtime_tokens] if opted_in else list(tokens)
        # MIG entries resolve through the node's MIG layout as it is now, at start
        devices = mig_devices(self._open(), board) if any(map(is_mig_token, wanted)) else []
        whole: list[int]
        mig: list[MigDevice]
        if visible.kind is Visibility.ALL:
            whole, mig = [g.index for g in board], []
        else:
            whole, mig = _resolve(tokens, board, devices, pod, container)
        if opted_in:
            # every mock node is this plugin's: only the runtime's own CDI names are given
            g_whole, g_mig = _resolve(selection.runtime_tokens, board, devices, pod, container)
            given_whole = [g for g in g_whole if selection.gives_gpu(g)]
            given_mig = [d for d in g_mig if selection.gives_mig(d)]
        else:
            given_whole = [g for g in whole if selection.gives_gpu(g)]
            given_mig = [d for d in mig if selection.gives_mig(d)]
        declared_whole: list[int] = []
        declared_mig: list[MigDevice] = []
        if selection.named:
            declared_whole = [g for g in whole if g not in given_whole]
            declared_mig = [d for d in mig if d not in given_mig]
        if declared_whole or declared_mig:
            claimed = self._claimed(container.id)
            kept_whole = [g for g in declared_whole if g not in claimed]
            kept_mig = [d for d in declared_mig if d.gpu not in claimed]
            lost = {g for g in declared_whole if g in claimed}
            lost.update(d.gpu for d in declared_mig if d.gpu in claimed)
            if lost:
                self.metrics.allocations_limited.inc()
                logger.info(
                    "not recorded on GPU %s: named without being given, and another "
                    "container was given it",
                    ",".join(map(str, sorted(lost))),
                    extra=_context(pod, container),
                )
            declared_whole, declared_mig = kept_whole, kept_mig
        alloc = self._allocation(
            (*given_whole, *declared_whole), (*given_mig, *declared_mig), pod, container
        )
        if alloc is None:
            return None
        return _Derived(
            alloc,
            pack(alloc, len(board)),
            self._live,
            tuple(given_whole),
            tuple(given_mig),
            tuple(declared_whole),
            tuple(declared_mig),
        )

    def _allocation(
        self,
        whole: tuple[int, ...],
        held_mig: tuple[MigDevice, ...],
        pod: api_pb2.PodSandbox,
        container: api_pb2.Container,
    ) -> Allocation | None:
        """The record of a container holding GPUs *whole* and MIG devices *held_mig*."""
        gpus, mig = _holding(whole, held_mig)
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
            self._open()
            self._starting[container.id] = self._derive(
                selection, _opted_in(policy, pod), pod, container
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
            if (
                early is not None
                and early.live is live
                and not (early.declared_gpus and early.declared_gpus & self._claimed(container.id))
            ):
                # only the PID and the start time are new since StartContainer
                started = container.started_at // 1_000_000 if container.started_at > 0 else 0
                when = started or early.alloc.start_time_ms
                record = with_process(early.record, container.pid, when)
                alloc = dataclasses.replace(early.alloc, pid=container.pid, start_time_ms=when)
                derived = dataclasses.replace(early, alloc=alloc, record=record)
            else:  # no StartContainer seen, a re-stage or a new claim since: derived now
                selection = _held(policy, pod, container, self.mig_devices)
                if selection is None:
                    return
                fresh = self._derive(selection, _opted_in(policy, pod), pod, container)
                if fresh is None:
                    return
                derived, alloc, record = fresh, fresh.alloc, fresh.record
            if not self._room(pod.id, container.id):
                self.metrics.allocations_limited.inc()
                logger.warning(
                    "not recorded: the pod already holds %d records (the most one pod may)",
                    RECORDS_PER_POD,
                    extra=_context(pod, container),
                )
                return
            live.put_record(record)
            self._kept[container.id] = _Kept(pod.id, derived)
            if derived.given:
                self._release(live, derived.given, container.id)
        except LiveLayerError as exc:
            self._failed(f"container {pod.namespace}/{pod.name}/{container.name}", exc)
            return
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

    def _room(self, pod_id: str, container_id: str) -> bool:
        """Whether the pod may hold one more record (a rewrite of its own always may)."""
        if container_id in self._kept:
            return True
        held = sum(1 for k in self._kept.values() if k.pod_id == pod_id)
        return held < RECORDS_PER_POD

    def _release(self, live: LiveLayer, given: frozenset[int], owner: str) -> None:
        """Container *owner* was given *given*: earlier declarations on those GPUs lose them
        (their records are rewritten without them, or removed)."""
        for cid, kept in list(self._kept.items()):
            was = kept.derived
            if cid == owner or not (was.declared_gpus & given):
                continue
            self.metrics.allocations_limited.inc()
            declared_whole = tuple(g for g in was.declared_whole if g not in given)
            declared_mig = tuple(d for d in was.declared_mig if d.gpu not in given)
            gpus, mig = _holding(
                (*was.given_whole, *declared_whole), (*was.given_mig, *declared_mig)
            )
            if not gpus:
                live.remove(cid)
                del self._kept[cid]
                logger.info(
                    "record of container %s removed: another container was given the GPUs "
                    "it only named",
                    cid,
                )
                continue
            alloc = dataclasses.replace(
                was.alloc,
                gpus=gpus,
                mig=tuple((d.gpu, d.gpu_instance, d.compute_instance) for d in mig),
            )
            record = pack(alloc, live.gpu_count)
            live.put_record(record)
            self._kept[cid] = _Kept(
                kept.pod_id,
                dataclasses.replace(
                    was,
                    alloc=alloc,
                    record=record,
                    declared_whole=declared_whole,
                    declared_mig=declared_mig,
                ),
            )

    def stopped(self, container: api_pb2.Container) -> None:
        """StopContainer / RemoveContainer: the container holds nothing any more."""
        self._starting.pop(container.id, None)
        if self._synced:
            if container.id not in self._kept:
                return  # not recorded (or already removed at its StopContainer)
        elif not select(container).may_hold:
            return  # never recorded (without a Synchronize: judged by the container)
        try:
            removed = self._open().remove(container.id)
        except LiveLayerError as exc:
            self._failed(f"container {container.id}", exc)
            return
        self._kept.pop(container.id, None)
        self._ok()
        if removed:
            self.metrics.allocations_removed.inc()

    def synchronize(
        self,
        policy: Policy,
        pods: Iterable[api_pb2.PodSandbox],
        containers: Iterable[api_pb2.Container],
    ) -> int:
        """Synchronize: the records become exactly the running containers' allocations
        (given ones first, so that declarations keep off them; at most
        :data:`RECORDS_PER_POD` per pod). Returns how many were recorded."""
        by_id = {p.id: p for p in pods}
        running: list[tuple[api_pb2.PodSandbox, api_pb2.Container, Selection]] = []
        for c in containers:
            if c.state != api_pb2.CONTAINER_RUNNING or c.pod_sandbox_id not in by_id:
                continue
            selection = _held(policy, by_id[c.pod_sandbox_id], c, self.mig_devices)
            if selection is not None:
                running.append((by_id[c.pod_sandbox_id], c, selection))
        if not running and self._live is None and not self.live_path.exists():
            self._kept = {}
            self._synced = True
            return 0  # nothing to record and nothing recorded: no live layer needed
        try:
            self._open()
            self._kept = {}
            # first what each was given: the claims every declaration is judged against
            for pod, container, selection in running:
                found = self._derive(selection, _opted_in(policy, pod), pod, container)
                if found is not None and found.given and self._room(pod.id, container.id):
                    self._kept[container.id] = _Kept(pod.id, found)
            # then every record, its declarations kept off the others' claims
            claimants = set(self._kept)
            derived: list[tuple[api_pb2.PodSandbox, _Derived]] = []
            for pod, container, selection in running:
                if (
                    container.id in self._kept
                    and not self._kept[container.id].derived.declared_gpus
                ):
                    derived.append((pod, self._kept[container.id].derived))
                    continue
                if container.id not in claimants and not self._room(pod.id, container.id):
                    continue
                found = self._derive(selection, _opted_in(policy, pod), pod, container)
                if found is not None:
                    derived.append((pod, found))
                    self._kept[container.id] = _Kept(pod.id, found)
            live = self._open()
            live.replace_all(d.alloc for _, d in derived)
        except LiveLayerError as exc:
            self._kept = {}
            self._failed("synchronize", exc)
            return 0
        # the records are now exactly these: a later stop of any other container (and the
        # RemoveContainer after a StopContainer) has nothing to remove
        self._synced = True
        self._starting.clear()
        self._ok()
        return len(derived)


@dataclasses.dataclass(frozen=True, slots=True)
class _Derived:
    """A container's record as derived: the allocation, its packed record (PostStartContainer
    adds the PID), the live file it was packed for (a re-stage in between makes
    PostStartContainer derive it again, for the new GPUs), and what it holds because it was
    given it, and only because it named it."""

    alloc: Allocation
    record: bytes
    live: LiveLayer | None
    given_whole: tuple[int, ...]
    given_mig: tuple[MigDevice, ...]
    declared_whole: tuple[int, ...]
    declared_mig: tuple[MigDevice, ...]

    @property
    def given(self) -> frozenset[int]:
        """The GPUs it was given, whole or a MIG device of them: its claims."""
        return frozenset((*self.given_whole, *(d.gpu for d in self.given_mig)))

    @property
    def declared_gpus(self) -> frozenset[int]:
        """The GPUs it holds (whole or a MIG device of them) by declaration alone."""
        return frozenset((*self.declared_whole, *(d.gpu for d in self.declared_mig)))


@dataclasses.dataclass(frozen=True, slots=True)
class Grant:
    """What one recorded container holds: its process (the runtime's PID), its pod, the GPUs
    it holds whole and its MIG devices ``(gpu, gpu instance, compute instance)``."""

    container_id: str
    pid: int
    pod: str
    namespace: str
    gpus: frozenset[int]
    mig: frozenset[tuple[int, int, int]]


@dataclasses.dataclass(frozen=True, slots=True)
class _Kept:
    """One record written: its pod, and what it was derived from (with the PID)."""

    pod_id: str
    derived: _Derived


def _grant(container_id: str, kept: _Kept) -> Grant:
    alloc = kept.derived.alloc
    parents = {m[0] for m in alloc.mig}
    whole = frozenset(g for g in alloc.gpus if g not in parents)
    return Grant(container_id, alloc.pid, alloc.pod, alloc.namespace, whole, frozenset(alloc.mig))


def _holding(
    whole: Iterable[int], held_mig: Iterable[MigDevice]
) -> tuple[tuple[int, ...], tuple[MigDevice, ...]]:
    """A record's GPUs (whole ones, then MIG parents, once each) and MIG devices (those of
    GPUs not held whole)."""
    whole_ = tuple(dict.fromkeys(whole))
    mig = tuple(d for d in dict.fromkeys(held_mig) if d.gpu not in whole_)
    return tuple(dict.fromkeys((*whole_, *(d.gpu for d in mig)))), mig


def _held(
    policy: Policy,
    pod: api_pb2.PodSandbox,
    container: api_pb2.Container,
    mig: MigSource | None = None,
) -> Selection | None:
    """What *container* was given and named, or None when it names no GPU, gets no
    overlay, or its only GPU nodes are the mock's own (the device opt-in)."""
    selection = select(container, mig)
    if not selection.may_hold:
        return None
    if skip_reason(policy, pod.namespace, pod.annotations, ()) is not None:
        return None
    if selection.visible.source is VisibleSource.DEVICE_NODES and _opted_in(policy, pod):
        return None
    return selection


def _resolve(
    tokens: Iterable[str],
    board: list[BoardGpu],
    devices: list[MigDevice],
    pod: api_pb2.PodSandbox,
    container: api_pb2.Container,
) -> tuple[list[int], list[MigDevice]]:
    """The whole GPUs and the MIG devices *tokens* name (unknown ones are a warning)."""
    listed = list(tokens)
    if not listed:
        return [], []
    gpus, mig, unknown = resolve_holdings(listed, board, devices)
    if unknown:
        logger.warning(
            "allocation names no GPU of this node: %s",
            ", ".join(unknown),
            extra=_context(pod, container),
        )
    parents = {d.gpu for d in mig}
    return [g for g in gpus if g not in parents], list(mig)


def _opted_in(policy: Policy, pod: api_pb2.PodSandbox) -> bool:
    """Whether a container's GPU device nodes may be the ones this plugin adds on the device
    opt-in (the pod asked, in an allowed namespace), not a device plugin's allocation.

    Node software runs that way (NVIDIA's device plugin, GPU feature discovery, the DRA
    driver's kubelet plugins): it opens every GPU and holds none, and on a real node no
    NVML client lists it as a compute process. Such a pod's nodes prove nothing, so only
    the names in its CDI devices count as given."""
    return pod.namespace in policy.device_namespaces and wants_devices(policy, pod.annotations)


def _fit(text: str, limit: int) -> str:
    """*text* cut to *limit* UTF-8 bytes (names are display only; the id is the key)."""
    raw = text.encode("utf-8")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def _context(pod: api_pb2.PodSandbox, container: api_pb2.Container) -> dict[str, object]:
    return {"namespace": pod.namespace, "pod": pod.name, "container": container.name}
