"""``nvml-mock-ctl``'s allocation verbs and the allocations part of ``status``.

A test suite without Kubernetes makes GPUs busy the way the NRI plugin does for a running
container: ``alloc`` puts one allocation record into the node's live layer (a process with
its PID on the GPUs it holds, using memory and following a utilization pattern), ``release``
removes it, and ``status`` lists every record. All of it goes through the allocation API of
:class:`nvml_mock_live.LiveLayer` (the writer the plugin uses), so what a hand-made record
shows through NVML is exactly what a container's would. ``--gpus`` takes what a container is
given: whole GPUs, and MIG devices by ``MIG-<uuid>`` or ``<gpu>:<mig>`` (resolved against the
node's MIG layout now, as the plugin resolves ``NVIDIA_VISIBLE_DEVICES``), so a test can put
load on a GPU instance without a DRA claim.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

from nvml_mock_live import (
    Allocation,
    AllocationError,
    LiveLayer,
    parse_memory,
    parse_utilization,
)
from nvml_mock_live.mig import is_mig_token, mig_devices, resolve_holdings

from nvml_mock_engine import gpu_select
from nvml_mock_engine.ctl_report import (
    allocation_rows,
    holding,
    print_allocations,
    utilization_text,
)
from nvml_mock_engine.errors import LiveValueError

__all__ = [
    "ID_PREFIX",
    "allocation_rows",
    "find",
    "holding",
    "holdings",
    "make",
    "print_allocations",
    "put",
    "utilization_text",
]

ID_PREFIX: Final = "ctl-"
"""Ids ``alloc`` makes up when none is given: ``ctl-<pid>``, so the plugin's (runtime
container ids) and hand-made ones never collide."""


MigHolding = tuple[int, int, int]
"""A MIG device a record holds: (board GPU, GPU instance id, compute instance id)."""


def holdings(layer: LiveLayer, spec: str) -> tuple[list[int], tuple[MigHolding, ...]]:
    """The board GPUs and MIG devices *spec* names: ``all``, or a comma-separated list of
    indices, GPU UUIDs, ``MIG-<uuid>`` and ``<gpu>:<mig>``. A GPU named whole and through one
    of its MIG devices is held whole. Raises :class:`LiveValueError` naming a part that is
    nothing of this node."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    wanted = [p for p in parts if is_mig_token(p)]
    if not wanted:
        return gpu_select.select_gpus(layer.board, spec), ()
    plain = [p for p in parts if not is_mig_token(p)]
    whole = gpu_select.select_gpus(layer.board, ",".join(plain)) if plain else []
    parents, held, unknown = resolve_holdings(wanted, layer.board, mig_devices(layer, layer.board))
    if unknown:
        raise LiveValueError(
            "gpus",
            unknown[0],
            "is no MIG device of this node now (MIG-<uuid> or <gpu>:<mig>, as nvidia-smi -L "
            "lists them)",
        )
    gpus = [*parents, *(g for g in whole if g not in parents)]
    mig = tuple((d.gpu, d.gpu_instance, d.compute_instance) for d in held if d.gpu not in whole)
    return gpus, mig


def _text(flag: str, value: str | None) -> str:
    """A name flag as the record stores it: text only. A command line that is not UTF-8
    reaches Python as surrogate escapes, which no record can hold."""
    if value is None:
        return ""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise LiveValueError(flag, shown, "is not UTF-8 text") from None
    return value


def make(
    *,
    gpus: Sequence[int],
    pid: str,
    memory: str | None,
    utilization: str | None,
    container_id: str | None,
    name: str | None,
    pod: str | None,
    namespace: str | None,
    mig: Sequence[MigHolding] = (),
    now_ms: int | None = None,
) -> Allocation:
    """The allocation ``alloc`` records, from its flags as typed; every value is checked
    before anything is written (LiveValueError names the flag and the value)."""
    if not pid.strip().isdigit() or not 0 < int(pid) < 1 << 32:
        raise LiveValueError("pid", pid, "must be a process id, 1..4294967295")
    try:
        used = parse_memory(memory) if memory is not None else 0
    except ValueError as exc:
        raise LiveValueError("memory", memory, str(exc)) from None
    pattern = level = period = seed = 0
    if utilization is not None:
        try:
            pattern, level, period, seed = parse_utilization(utilization)
        except ValueError as exc:
            raise LiveValueError("utilization", utilization, str(exc)) from None
    texts = {
        "id": _text("id", container_id),
        "name": _text("name", name),
        "pod": _text("pod", pod),
        "namespace": _text("namespace", namespace),
    }
    return Allocation(
        container_id=texts["id"] if container_id is not None else f"{ID_PREFIX}{int(pid)}",
        pid=int(pid),
        gpus=tuple(gpus),
        used_memory_bytes=used,
        pod=texts["pod"],
        namespace=texts["namespace"],
        container_name=texts["name"],
        mig=tuple(mig),
        util_pattern=pattern,
        util_level=level,
        util_period_ms=period,
        util_seed=seed,
        start_time_ms=now_ms if now_ms is not None else time.time_ns() // 1_000_000,
    )


def put(layer: LiveLayer, alloc: Allocation) -> None:
    """Record *alloc* (replacing a record of the same id); a refused field is a
    LiveValueError, so the command exits 3 with nothing written."""
    try:
        layer.put(alloc)
    except AllocationError as exc:
        raise LiveValueError("allocation", alloc.container_id, str(exc)) from None


def find(layer: LiveLayer, wanted: str) -> Allocation:
    """The record whose id is *wanted*, or starts with it when that names one record (ids
    from a runtime are 64 hex digits)."""
    records = layer.list()
    exact = [a for a in records if a.container_id == wanted]
    if exact:
        return exact[0]
    prefixed = [a for a in records if wanted and a.container_id.startswith(wanted)]
    if len(prefixed) == 1:
        return prefixed[0]
    if prefixed:
        raise LiveValueError("id", wanted, f"is the start of {len(prefixed)} allocations' ids")
    raise LiveValueError("id", wanted, "is no allocation of this node (status lists them)")
