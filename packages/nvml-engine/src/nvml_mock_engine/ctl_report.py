"""What ``nvml-mock-ctl`` prints: ``status`` (its table and its JSON document) and the line
each change reports.

One author for every line, whichever path ran the command: the full command line
(:mod:`nvml_mock_engine.ctl_cli`) and the quick path of ``status`` and ``xid``
(:mod:`nvml_mock_engine.ctl_quick`) both print through these functions, so their output
cannot drift apart. Nothing heavy is imported here (the key kinds and the vocabulary's
numbers come from the light tables of the live package); ``datetime`` loads only to show an
armed time trigger.
"""

from __future__ import annotations

from nvml_mock_live.kinds import EVENTS, TRIGGER_KEYS, TRIGGERS, UTIL_PATTERNS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Final

    from nvml_mock_live import Allocation

__all__ = [
    "EVENT_NAMES",
    "allocation_rows",
    "change_line",
    "describe",
    "event_text",
    "gpu_row",
    "held_text",
    "holding",
    "print_allocations",
    "print_status",
    "show",
    "status_document",
    "trigger_text",
    "utilization_text",
]

EVENT_NAMES: Final[Mapping[int, str]] = {bit: name for name, bit in EVENTS.items()}
"""The names events are reported by, by ``nvmlEventType*`` bit."""
_PATTERN_NAMES: Final = {number: name for name, number in UTIL_PATTERNS.items()}
_MiB: Final = 1 << 20


def show(key: str, value: object) -> str:
    """A live value as a report shows it: masks and ``hex32`` keys in hex."""
    # the key table loads here, not with the module: ``xid`` reports events only
    from nvml_mock_live.slots import LIVE_KEY_KINDS

    if isinstance(value, int) and (
        LIVE_KEY_KINDS.get(key) == "HEX32" or key in ("clocks_event_reasons", "nvlink_down_mask")
    ):
        return hex(value)
    return str(value)


def describe(values: Mapping[str, object]) -> str:
    """``key=value ...`` for *values*, in their order."""
    return " ".join(f"{k}={show(k, v)}" for k, v in values.items())


def event_text(
    event_type: int, data: int, gpu_instance: int | None = None, compute_instance: int | None = None
) -> str:
    """One event as a report names it: ``xid 79``, ``clock``, ``... on GI 1 CI 0``."""
    name = EVENT_NAMES.get(event_type, hex(event_type))
    text = f"{name} {data}" if event_type == EVENTS["xid"] else name
    if gpu_instance is not None:
        text += f" on GI {gpu_instance} CI {compute_instance}"
    return text


def trigger_text(values: Mapping[str, object]) -> str | None:
    """The fault trigger *values* hold, in words (None when they hold none)."""
    kind = values.get("fault_trigger")
    if kind is None:
        return None
    param = values.get("fault_trigger_param", 0)
    assert isinstance(param, int)
    if kind == TRIGGERS["after-calls"]:
        return f"after {param} calls"
    if kind == TRIGGERS["probability"]:
        seed = values.get("fault_trigger_seed", 0)
        return f"probability {param / 1_000_000:g} per call, seed {seed}"
    if kind == TRIGGERS["at"]:
        from datetime import datetime

        try:
            moment = datetime.fromtimestamp(param / 1000).astimezone()
        except (OverflowError, OSError, ValueError):  # written by hand, past what datetime shows
            return f"at {param} ms since the epoch"
        return "at " + moment.isoformat(timespec="seconds")
    return "now"


def change_line(
    index: int,
    uuid: str,
    *,
    clear: Sequence[str] = (),
    values: Mapping[str, object] | None = None,
    armed: Mapping[str, object] | None = None,
    events: Sequence[tuple[int, int, int | None, int | None]] = (),
    armed_events: Sequence[tuple[int, int, int | None, int | None]] = (),
) -> str:
    """The line a change to GPU *index* reports: what was reset, cleared, set or armed (with
    its trigger) and the events sent now or armed, each as ``(type, data, gpu instance,
    compute instance)``."""
    values = values or {}
    armed = armed or {}
    parts = []
    if clear and not values and not armed:
        from nvml_mock_live.slots import LIVE_KEY_KINDS

        parts.append("reset" if len(clear) == len(LIVE_KEY_KINDS) else "cleared " + " ".join(clear))
    if armed:
        parts.append(f"armed ({trigger_text(values)}) {describe(armed)}")
    elif values:
        parts.append(describe(values))
    if events:
        parts.append("events " + ", ".join(event_text(*event) for event in events))
    if armed_events:
        parts.append("armed events " + ", ".join(event_text(*event) for event in armed_events))
    return f"GPU {index} {uuid}: {'; '.join(parts) or 'no change'}"


# -- status ------------------------------------------------------------------------------


def gpu_row(
    index: int, uuid: str, values: dict[str, int], armed: Iterable[str]
) -> dict[str, object]:
    """One GPU of ``status``: its live values, the keys armed (sorted) and its trigger."""
    shown_armed = sorted(armed)
    return {
        "index": index,
        "uuid": uuid,
        "lost": values.get("gpu_lost", 0) == 1 and "gpu_lost" not in shown_armed,
        "values": values,
        "armed": shown_armed,
        "trigger": trigger_text(values),
    }


def status_document(
    path: str,
    generation: int,
    rows: Sequence[dict[str, object]],
    records: Sequence[Allocation],
    uuids: Sequence[str],
) -> dict[str, object]:
    """``status --json``'s document."""
    return {
        "live_file": path,
        "generation": generation,
        "gpus": list(rows),
        "allocations": allocation_rows(records, uuids),
    }


def print_status(
    path: str, generation: int, rows: Sequence[dict[str, object]], records: Sequence[Allocation]
) -> None:
    """``status``'s table: a line per GPU, the allocations, the file and its generation."""
    print(f"{'GPU':<4} {'UUID':<41} {'STATE':<8} LIVE VALUES")
    for row in rows:
        row_values = row["values"]
        row_armed = row["armed"]
        assert isinstance(row_values, dict) and isinstance(row_armed, list)
        shown = [
            f"{k}={show(k, v)}{'*' if k in row_armed else ''}"
            for k, v in row_values.items()
            if k not in TRIGGER_KEYS
        ]
        state = (
            "lost" if row["lost"] else ("armed" if row_armed else ("live" if shown else "board"))
        )
        line = f"{row['index']:<4} {row['uuid']:<41} {state:<8} {' '.join(shown) or '-'}"
        if row_armed:
            line += f"  (* when triggered: {row['trigger']})"
        print(line)
    print_allocations(records)
    print(f"live layer {path}, generation {generation}")


# -- allocations -------------------------------------------------------------------------


def utilization_text(alloc: Allocation) -> str:
    """The record's utilization pattern as ``parse_utilization`` reads it back."""
    name = _PATTERN_NAMES.get(alloc.util_pattern)
    if name is None:
        return f"pattern {alloc.util_pattern}"
    if name == "none":
        return "-"
    if name == "steady":
        text = "idle" if alloc.util_level == 0 else f"steady {alloc.util_level}"
    elif name == "busy":
        text = "busy"
    else:
        text = f"{name} {alloc.util_level}"
    if alloc.util_period_ms:
        text += f" period={alloc.util_period_ms}ms"
    if alloc.util_seed:
        text += f" seed={alloc.util_seed}"
    return text


def _gpus_text(alloc: Allocation) -> str:
    """The devices a record holds, short: ``0`` for a whole GPU, ``0:gi7/ci0`` per MIG
    device (``status``'s GPUS column)."""
    parts: list[str] = []
    for gpu in alloc.gpus:
        mig = [f"{gpu}:gi{gi}/ci{ci}" for g, gi, ci in alloc.mig if g == gpu]
        parts.extend(mig or [str(gpu)])
    return ",".join(parts)


def held_text(uuids: Sequence[str], alloc: Allocation) -> str:
    """What ``alloc`` says a record holds: each whole GPU with its UUID, each MIG device with
    its GPU and instance ids."""
    parts: list[str] = []
    for gpu in alloc.gpus:
        uuid = uuids[gpu] if gpu < len(uuids) else "?"
        mig = [f"GPU {gpu} {uuid} MIG GI {gi} CI {ci}" for g, gi, ci in alloc.mig if g == gpu]
        parts.extend(mig or [f"GPU {gpu} {uuid}"])
    return ", ".join(parts)


def holding(records: Sequence[Allocation], gpus: Sequence[int]) -> list[Allocation]:
    """The records that hold any of *gpus*, in slot order."""
    return [a for a in records if set(a.gpus) & set(gpus)]


def allocation_rows(records: Sequence[Allocation], uuids: Sequence[str]) -> list[dict[str, object]]:
    """*records* as ``status --json`` shows them, on a board whose GPUs have *uuids*. A GPU
    bit past the board (a damaged record) shows with no UUID rather than failing the
    listing."""
    return [
        {
            "id": alloc.container_id,
            "container": alloc.container_name,
            "pod": alloc.pod,
            "namespace": alloc.namespace,
            "pid": alloc.pid,
            "gpus": list(alloc.gpus),
            "gpu_uuids": [uuids[g] if g < len(uuids) else None for g in alloc.gpus],
            "mig": [list(held) for held in alloc.mig],
            "memory_bytes": alloc.used_memory_bytes,
            "utilization": utilization_text(alloc),
            "start_time_ms": alloc.start_time_ms,
        }
        for alloc in records
    ]


def print_allocations(records: Sequence[Allocation]) -> None:
    """The table ``status`` prints under the GPUs' (nothing when there is no record)."""
    if not records:
        return
    header = ("ID", "CONTAINER", "POD", "NAMESPACE", "PID", "GPUS", "MEMORY", "UTILIZATION")
    body = [
        (
            alloc.container_id,
            alloc.container_name or "-",
            alloc.pod or "-",
            alloc.namespace or "-",
            str(alloc.pid),
            _gpus_text(alloc),
            f"{alloc.used_memory_bytes // _MiB}MiB",
            utilization_text(alloc),
        )
        for alloc in records
    ]
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(len(header))]
    print(f"allocations ({len(records)}; memory is per GPU held)")
    for line in (header, *body):
        print(" ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
