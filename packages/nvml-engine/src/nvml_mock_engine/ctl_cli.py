"""``nvml-mock-ctl``'s full command line: every verb, on ``argparse``.

The command starts in :mod:`nvml_mock_engine.ctl`, whose quick path
(:mod:`nvml_mock_engine.ctl_quick`) answers the plain forms of ``status`` and ``xid``;
everything else, ``--help`` and every refusal included, is parsed and run here.

Every verb writes through the node's live layer (:class:`nvml_mock_live.LiveLayer`), so a change
reaches every process on the node, and in every container, on its next NVML call. The verbs
keep the names users of the reference system know (``fail``, ``xid``, ``temp``, ``power``,
``util``, ``clocks``, ``throttle``, ``pstate``, ``ecc``, ``nvlink``, ``fabric-health``,
``recovery-action``, ``set``, ``status``, ``reset``); faults follow the recipes of
:mod:`nvml_mock_engine.faults`. ``alloc`` and ``release`` put and remove an allocation
record by hand (:mod:`nvml_mock_engine.ctl_alloc`), as the NRI plugin does for a container.

A command computes the change for every GPU it names and validates all of it before it writes
any: a bad value is refused naming the key and the value, and nothing changes. Exit codes: 0
done, 1 the live layer cannot be opened or written (the message says why: missing, not
staged, read-only), 2 usage error, 3 a value refused (nothing written).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nvml_mock_live import LiveLayer, vocabulary
from nvml_mock_live.vocabulary import parse_live_value
from nvml_mock_protocol import settings as s
from nvml_mock_protocol.logs import configure_logging

from nvml_mock_engine import ctl_alloc, ctl_report, faults, gpu_select, kernel_log
from nvml_mock_engine._version import __version__
from nvml_mock_engine.ctl import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, EXIT_VALUE
from nvml_mock_engine.errors import CtlUsageError, LiveLayerError, LiveValueError, NvmlEngineError
from nvml_mock_engine.faults import Event, FaultOptions, GpuView
from nvml_mock_engine.library import library_path
from nvml_mock_engine.scenario_ctl import add_scenario_verb
from nvml_mock_engine.schema import LIVE_GPU_KEYS
from nvml_mock_engine.settings import (
    CTL_OPTIONS,
    ENV_LIVE_FILE,
    ENV_STATE_FILE,
    LOG_OPTIONS,
    CtlSettings,
    config_error,
    located_by_flags,
)
from nvml_mock_engine.values import int_arg, links, milliwatts, names, yes_no

__all__ = [
    "ENV_LIVE_FILE",
    "ENV_STATE_FILE",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "EXIT_VALUE",
    "main",
]


_TRIGGER_KEYS: Final = vocabulary.TRIGGER_KEYS
FABRIC_STATES: Final[Mapping[str, int]] = {
    "not-supported": 0,
    "not-started": 1,
    "in-progress": 2,
    "completed": 3,
}
"""``NVML_GPU_FABRIC_STATE_*`` (nvml.h)."""
# named for the command, whichever module of it logs: a log pipeline sees one source
logger = logging.getLogger("nvml_mock_engine.ctl")


@dataclass
class Change:
    """What one command does to one GPU: values set now, values armed for its trigger, keys
    cleared, and events sent after the values are written (now, or armed for the trigger)."""

    values: dict[str, object] = field(default_factory=dict)
    armed: dict[str, object] = field(default_factory=dict)
    clear: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    armed_events: list[Event] = field(default_factory=list)


Builder = Callable[[argparse.Namespace, GpuView], Change]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        args.settings = located_by_flags(
            s.resolve(CtlSettings, (*LOG_OPTIONS, *CTL_OPTIONS), args, os.environ), args
        )
    except s.SettingsError as exc:
        # Logging is not set up yet (its own settings may be what is wrong).
        print(f"nvml-mock-ctl: invalid configuration: {config_error(exc)}", file=sys.stderr)
        return EXIT_VALUE
    configure_logging(args.settings.log_level, args.settings.log_format)
    try:
        result: int = args.handler(args)
    except CtlUsageError as exc:
        logger.error("%s", exc)
        return EXIT_USAGE
    except LiveValueError as exc:
        logger.error("refused, nothing written: %s", exc)
        return EXIT_VALUE
    except (NvmlEngineError, LiveLayerError, OSError) as exc:  # exit 1
        logger.error("%s", exc)
        return EXIT_FAILURE
    return result


# -- locating the live layer ------------------------------------------------------------


def live_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """The live file and the board state the command works on."""
    settings: CtlSettings = args.settings
    return settings.live_path, settings.state_path


def _open(args: argparse.Namespace, *, writable: bool) -> LiveLayer:
    live, state = live_paths(args)
    if not state.is_file():
        settings: CtlSettings = args.settings
        where = (
            f"the overlay {settings.overlay_path}" if not settings.live_file else f"{live.parent}"
        )
        raise LiveLayerError(
            f"cannot open the live layer {live}: no board state {state} "
            f"(is {where} staged? `nvml-mock-engine stage` creates both)"
        )
    named: CtlSettings = args.settings
    if writable and named.live_file is None and named.state_file is not None and not live.exists():
        # a rendered state named by MOCK_NVML_CONFIG / --state-file, without a staged overlay
        # (the README's walk-through): the live layer beside it is made for its GPUs, where
        # the library looks for it (a named --live-file or an overlay is never made here)
        import nvml_mock_live

        nvml_mock_live.create(live, nvml_mock_live.read_board(state))
        logger.info("created the live layer %s for the board %s", live, state)
    # this package's own library, named directly: finding it through the installed
    # providers' entry points would import importlib.metadata on every command
    return LiveLayer.open(live, state=state, library=library_path(), writable=writable)


def select_gpus(layer: LiveLayer, spec: str) -> list[int]:
    """GPU indices from ``all`` or a comma-separated list of indices and UUIDs."""
    return gpu_select.select_gpus(layer.board, spec)


# -- verbs ------------------------------------------------------------------------------


def _trigger(args: argparse.Namespace, gpu: GpuView) -> dict[str, int] | None:
    """The ``fault_trigger*`` values the trigger flags ask for on *gpu* (None: now)."""
    seed = getattr(args, "trigger_seed", None)
    if seed is not None and getattr(args, "probability", None) is None:
        raise CtlUsageError("--seed goes with --probability")
    trigger = vocabulary.trigger_values(
        after_calls=getattr(args, "after_calls", None),
        probability=getattr(args, "probability", None),
        seed=seed,
        at=getattr(args, "at", None),
    )
    if trigger is None:
        return None
    return {**trigger, "fault_trigger_arm": vocabulary.arm_tag(gpu.live)}


def _with_trigger(
    args: argparse.Namespace, gpu: GpuView, values: Mapping[str, object], events: Sequence[Event]
) -> Change:
    trigger = _trigger(args, gpu)
    if trigger is None:
        return Change(values=dict(values), events=list(events))
    return Change(values=dict(trigger), armed=dict(values), armed_events=list(events))


def _build_fail(args: argparse.Namespace, gpu: GpuView) -> Change:
    options = FaultOptions(
        count=int_arg("count", args.count, 1, 1 << 32),
        uncontained=args.uncontained,
        remap_failure=args.remap_failure,
        temperature_c=int_arg("temp", args.temp, 0, 200) if args.temp is not None else None,
        links=tuple(links("link", args.link, gpu)) if args.link else (0,),
        fabric_reasons=tuple(names(args.reason)) if args.reason else ("degraded-bandwidth",),
    )
    for reason in options.fabric_reasons:
        if reason not in faults.FABRIC_HEALTH_FIELDS and reason != "incorrect-configuration":
            choices = ", ".join([*faults.FABRIC_HEALTH_FIELDS, "incorrect-configuration"])
            raise LiveValueError(
                "reason", reason, f"is not a fabric health field; fields: {choices}"
            )
    plan = faults.plan(args.fault, gpu, options)
    return _with_trigger(args, gpu, plan.values, plan.events)


def _build_set(args: argparse.Namespace, gpu: GpuView) -> Change:
    values: dict[str, object] = {}
    for item in args.assignments:
        key, eq, text = item.partition("=")
        if not eq or not key:
            raise CtlUsageError(f"{item!r}: expected KEY=VALUE")
        if key in _TRIGGER_KEYS:
            raise LiveValueError(
                key, text, "is set by the trigger flags (--after-calls, --probability, --at)"
            )
        values[key.strip()] = parse_live_value(key.strip(), text)
    return _with_trigger(args, gpu, values, ())


def _build_xid(args: argparse.Namespace, gpu: GpuView) -> Change:
    given = [flag for flag in ("after_calls", "probability", "at") if getattr(args, flag, None)]
    if given:
        raise CtlUsageError(
            f"xid takes no trigger (--{given[0].replace('_', '-')}): a GPU has one trigger, "
            "and an Xid alone would move it for the faults armed there; a triggered `fail` "
            "sends its Xids armed (`fail fallen-off-bus --after-calls N` for Xid 79)"
        )
    code = int_arg("xid", args.code, 1, (1 << 32) - 1)
    if (args.gpu_instance is None) != (args.compute_instance is None):
        raise CtlUsageError("--gi and --ci name one MIG device together: give both or neither")
    if args.gpu_instance is None:
        return Change(events=[Event(faults.EVENT_XID, code)])
    gi = int_arg("gpu_instance", args.gpu_instance, 0, 0xFFFE)
    ci = int_arg("compute_instance", args.compute_instance, 0, 0xFFFE)
    return Change(events=[Event(faults.EVENT_XID, code, gi, ci)])


def _build_temp(args: argparse.Namespace, gpu: GpuView) -> Change:
    values: dict[str, object] = {"temperature_c": parse_live_value("temperature_c", args.celsius)}
    if args.memory is not None:
        values["memory_temperature_c"] = parse_live_value("memory_temperature_c", args.memory)
    return Change(values=values)


def _build_power(args: argparse.Namespace, gpu: GpuView) -> Change:
    if args.watts is None and args.limit is None:
        raise CtlUsageError("power: give a draw (WATTS) and/or --limit WATTS")
    values: dict[str, object] = {}
    if args.watts is not None:
        values["power_usage_mw"] = milliwatts("power_usage_mw", args.watts)
    if args.limit is not None:
        values["power_limit_mw"] = milliwatts("power_limit_mw", args.limit)
    return Change(values=values)


def _build_util(args: argparse.Namespace, gpu: GpuView) -> Change:
    utilization = vocabulary.parse_utilization_words(
        args.pattern, period=args.period, seed=args.seed
    )
    util_values, clear = vocabulary.utilization_values(
        utilization, now_ms=time.time_ns() // 1_000_000
    )
    change = Change(values=dict(util_values), clear=clear)
    if args.memory is not None:
        change.values["util_mem_pct"] = parse_live_value("util_mem_pct", args.memory)
    return change


_CLOCK_FLAGS: Final = {
    "sm": ("clock_sm_mhz", "max_clock_sm_mhz"),
    "graphics": ("clock_graphics_mhz", "max_clock_graphics_mhz"),
    "mem": ("clock_mem_mhz", "max_clock_mem_mhz"),
    "video": ("clock_video_mhz", "max_clock_video_mhz"),
}


def _build_clocks(args: argparse.Namespace, gpu: GpuView) -> Change:
    values: dict[str, object] = {}
    for flag, (key, limit_key) in _CLOCK_FLAGS.items():
        text = getattr(args, flag)
        if text is None:
            continue
        value = parse_live_value(key, text)
        limit = gpu.board_number(limit_key)
        if isinstance(value, int) and limit and value > limit:
            raise LiveValueError(
                key, value, f"is above the GPU's maximum {limit} MHz (GPU {gpu.board.index})"
            )
        values[key] = value
    if not values:
        raise CtlUsageError("clocks: give at least one of --sm, --graphics, --mem, --video (MHz)")
    return Change(values=values)


def _build_throttle(args: argparse.Namespace, gpu: GpuView) -> Change:
    bits = gpu.current("clocks_event_reasons") if args.add else 0
    for word in (w for item in args.reasons for w in names(item)):
        if word == "none":
            continue
        if word in faults.CLOCKS_EVENT_REASONS:
            bits |= faults.CLOCKS_EVENT_REASONS[word]
        elif word.startswith("0x"):
            bits |= int_arg("clocks_event_reasons", word)
        else:
            choices = ", ".join(["none", *faults.CLOCKS_EVENT_REASONS])
            raise LiveValueError(
                "clocks_event_reasons", word, f"is not a clock event reason; reasons: {choices}"
            )
    return Change(values={"clocks_event_reasons": bits})


def _build_pstate(args: argparse.Namespace, gpu: GpuView) -> Change:
    text = args.pstate.upper().removeprefix("P")
    return Change(values={"pstate": parse_live_value("pstate", text)})


_ECC_FLAGS: Final = {
    "volatile_corrected": "ecc_volatile_corrected",
    "volatile_uncorrected": "ecc_volatile_uncorrected",
    "aggregate_corrected": "ecc_aggregate_corrected",
    "aggregate_uncorrected": "ecc_aggregate_uncorrected",
    "retired_sbe": "retired_pages_sbe",
    "retired_dbe": "retired_pages_dbe",
    "retired_pending": "retired_pages_pending",
    "remapped_correctable": "remapped_rows_correctable",
    "remapped_uncorrectable": "remapped_rows_uncorrectable",
    "remapped_pending": "remapped_rows_pending",
    "remapped_failure": "remapped_rows_failure",
    "mode": "ecc_enabled",
}


def _build_ecc(args: argparse.Namespace, gpu: GpuView) -> Change:
    values = {
        key: parse_live_value(key, getattr(args, flag))
        for flag, key in _ECC_FLAGS.items()
        if getattr(args, flag) is not None
    }
    if not values:
        raise CtlUsageError("ecc: give at least one counter or --mode")
    return Change(values=values)


def _build_nvlink(args: argparse.Namespace, gpu: GpuView) -> Change:
    mask = gpu.current("nvlink_down_mask")
    values: dict[str, object] = {}
    if args.down is not None:
        for link in links("down", args.down, gpu):
            mask |= 1 << link
    if args.up is not None:
        for link in links("up", args.up, gpu):
            mask &= ~(1 << link)
    if args.down is not None or args.up is not None:
        values["nvlink_down_mask"] = mask
    for flag, key in (
        ("crc", "nvlink_crc_errors"),
        ("replay", "nvlink_replay_errors"),
        ("recovery", "nvlink_recovery_errors"),
    ):
        text = getattr(args, flag)
        if text is not None:
            values[key] = parse_live_value(key, text)
    if not values:
        raise CtlUsageError(
            "nvlink: give --down/--up LINKS and/or --crc/--replay/--recovery counts"
        )
    return Change(values=values)


def _build_fabric_health(args: argparse.Namespace, gpu: GpuView) -> Change:
    if gpu.board_number("fabric_attached") != 1:
        raise LiveValueError(
            "fabric_health_mask",
            "-",
            f"GPU {gpu.board.index} is not fabric-attached (no fabric info)",
        )
    mask = (
        int_arg("mask", args.mask, 0, (1 << 32) - 1)
        if args.mask is not None
        else gpu.current("fabric_health_mask")
    )
    flags = {
        name: yes_no(name, getattr(args, name.replace("-", "_")))
        for name in faults.FABRIC_HEALTH_FIELDS
        if getattr(args, name.replace("-", "_")) is not None
    }
    incorrect = args.incorrect_configuration
    if incorrect is not None and incorrect not in faults.INCORRECT_CONFIGURATION:
        choices = ", ".join(faults.INCORRECT_CONFIGURATION)
        raise LiveValueError("incorrect-configuration", incorrect, f"must be one of {choices}")
    values: dict[str, object] = {"fabric_health_mask": faults.fabric_mask(mask, flags, incorrect)}
    if args.fabric_state is not None:
        if args.fabric_state not in FABRIC_STATES:
            raise LiveValueError(
                "fabric_state", args.fabric_state, f"must be one of {', '.join(FABRIC_STATES)}"
            )
        values["fabric_state"] = FABRIC_STATES[args.fabric_state]
    return Change(values=values)


def _build_recovery_action(args: argparse.Namespace, gpu: GpuView) -> Change:
    action = args.action.lower()
    if action not in faults.RECOVERY_ACTIONS:
        raise LiveValueError(
            "recovery_action", args.action, f"must be one of {', '.join(faults.RECOVERY_ACTIONS)}"
        )
    return Change(values={"recovery_action": faults.RECOVERY_ACTIONS[action]})


def _build_reset(args: argparse.Namespace, gpu: GpuView) -> Change:
    keys = list(args.keys) if args.keys else list(LIVE_GPU_KEYS)
    for key in keys:
        if key not in LIVE_GPU_KEYS:
            raise LiveValueError(key, None, "is not a live key")
    return Change(clear=keys)


# -- applying ---------------------------------------------------------------------------


def _check_mig_events(layer: LiveLayer, index: int, events: Sequence[Event]) -> None:
    """Refuse, before anything is written, an event on a MIG device the GPU does not have."""
    wanted = [(e.gpu_instance, e.compute_instance) for e in events if e.gpu_instance is not None]
    if not wanted:
        return
    have = {(d.gpu_instance, d.compute_instance) for d in layer.mig_devices(index)}
    for gi, ci in wanted:
        if (gi, ci) not in have:
            listed = ", ".join(f"{g}/{c}" for g, c in sorted(have)) or "none (MIG off or empty)"
            raise LiveValueError(
                "--gi/--ci", f"{gi}/{ci}", f"is not a MIG device of GPU {index}; GI/CI: {listed}"
            )


_ARMABLE: Final = frozenset(
    {
        "temp",
        "power",
        "util",
        "clocks",
        "throttle",
        "pstate",
        "ecc",
        "nvlink",
        "fabric-health",
        "recovery-action",
    }
)
"""Verbs that only set values, so their values can wait for a trigger (``fail`` and ``set``
arm theirs, and ``fail`` its events, themselves). ``xid`` takes no trigger: a trigger is the
GPU's one, and an Xid alone would move the trigger of the faults already armed there."""


def _armed(args: argparse.Namespace, gpu: GpuView, change: Change) -> Change:
    """*change* waiting for the trigger the flags ask for (unchanged without one)."""
    trigger = _trigger(args, gpu)
    if trigger is None:
        return change
    if change.clear:
        raise CtlUsageError(
            f"{args.verb}: this change clears keys, which cannot wait for a trigger "
            "(a pattern, or `set` with --after-calls/--probability/--at, can)"
        )
    return Change(values=dict(trigger), armed=change.values, armed_events=change.events)


def _apply(args: argparse.Namespace, builder: Builder) -> int:
    announcer = kernel_log.Announcer(kernel_log.open_sink(args.settings.kernel_log))
    with _open(args, writable=True) as layer, contextlib.closing(announcer):
        gpus = select_gpus(layer, args.gpu)
        plans: list[tuple[int, Change]] = []
        for index in gpus:
            view = GpuView(layer.board[index], layer.values(index))
            change = builder(args, view)
            if getattr(args, "arm", False):
                change = _armed(args, view, change)
            # everything is checked, for every GPU, before the first write
            change.values = dict(layer.validate(index, change.values))
            change.armed = dict(layer.validate(index, change.armed))
            _check_mig_events(layer, index, [*change.events, *change.armed_events])
            plans.append((index, change))
        for index, change in plans:
            if change.clear:
                layer.clear(index, change.clear)
            if change.values:
                layer.set(index, change.values)
            if change.armed:
                layer.set(index, change.armed, armed=True)
            for event, armed in (
                *((e, False) for e in change.events),
                *((e, True) for e in change.armed_events),
            ):
                layer.event(
                    index,
                    event.event_type,
                    event.data,
                    gpu_instance=event.gpu_instance,
                    compute_instance=event.compute_instance,
                    armed=armed,
                )
            # the kernel log has one line per Xid sent now; an armed one fires per process,
            # at no moment the node could log
            announcer.events(layer, index, change.events)
            _report(layer, index, change)
    return EXIT_OK


def _report(layer: LiveLayer, index: int, change: Change) -> None:
    def rows(events: Sequence[Event]) -> list[tuple[int, int, int | None, int | None]]:
        return [(e.event_type, e.data, e.gpu_instance, e.compute_instance) for e in events]

    print(
        ctl_report.change_line(
            index,
            layer.board[index].uuid,
            clear=change.clear,
            values=change.values,
            armed=change.armed,
            events=rows(change.events),
            armed_events=rows(change.armed_events),
        )
    )


def _cmd_status(args: argparse.Namespace) -> int:
    with _open(args, writable=False) as layer:
        gpus = select_gpus(layer, args.gpu)
        rows = [
            ctl_report.gpu_row(
                index, layer.board[index].uuid, layer.values(index), layer.armed(index)
            )
            for index in gpus
        ]
        records = ctl_report.holding(layer.list(), gpus)
        if args.json:
            uuids = [gpu.uuid for gpu in layer.board]
            document = ctl_report.status_document(
                str(layer.path), layer.generation, rows, records, uuids
            )
            print(json.dumps(document, indent=2))
            return EXIT_OK
        ctl_report.print_status(str(layer.path), layer.generation, rows, records)
    return EXIT_OK


def _cmd_alloc(args: argparse.Namespace) -> int:
    with _open(args, writable=True) as layer:
        gpus, mig = ctl_alloc.holdings(layer, args.gpus)
        alloc = ctl_alloc.make(
            gpus=gpus,
            mig=mig,
            pid=args.pid,
            memory=args.memory,
            utilization=args.utilization,
            container_id=args.id,
            name=args.name,
            pod=args.pod,
            namespace=args.namespace,
        )
        ctl_alloc.put(layer, alloc)
        held = ctl_report.held_text([gpu.uuid for gpu in layer.board], alloc)
        print(
            f"allocation {alloc.container_id}: pid {alloc.pid} on {held}; "
            f"{alloc.used_memory_bytes // (1 << 20)}MiB each, utilization "
            f"{ctl_report.utilization_text(alloc)}"
        )
    return EXIT_OK


def _cmd_release(args: argparse.Namespace) -> int:
    with _open(args, writable=True) as layer:
        for wanted in args.ids:  # every id is found before the first is removed
            ctl_alloc.find(layer, wanted)
        for wanted in args.ids:
            alloc = ctl_alloc.find(layer, wanted)
            layer.remove(alloc.container_id)
            print(f"released {alloc.container_id} (pid {alloc.pid})")
    return EXIT_OK


# -- the parser -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvml-mock-ctl",
        description="Change the mock GPUs of this node while processes use them "
        "(through the live layer).",
        epilog="Exit codes: 0 done, 1 the live layer cannot be opened or written, 2 usage error, "
        "3 a value refused (nothing written). `scenario` reads the topology service: 1 it "
        "cannot be reached or refused.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    defaults = CtlSettings()
    s.add_options(parser, (*LOG_OPTIONS, *CTL_OPTIONS), defaults)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(
        name: str, help_text: str, builder: Builder | None, *, gpu_default: str | None = None
    ) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=help_text, description=help_text)
        # The same flags after the verb, without resetting those given before it.
        s.add_options(sub, (*LOG_OPTIONS, *CTL_OPTIONS), defaults, suppress=True)
        sub.add_argument(
            "-i",
            "--gpu",
            required=gpu_default is None,
            default=gpu_default,
            help="GPUs: indices and/or UUIDs, comma separated, or all"
            + (f" (default {gpu_default})" if gpu_default else ""),
        )
        if builder is not None:
            sub.set_defaults(handler=lambda args: _apply(args, builder))
        if name in _ARMABLE:
            sub.set_defaults(arm=True)
            # util's own --seed seeds its pattern; its probability trigger is seeded 0
            _add_trigger_args(sub, seed=name != "util")
        return sub

    fail = verb("fail", "inject a fault, as a real driver shows it", _build_fail)
    fail.add_argument("fault", choices=list(faults.FAULTS), help="the fault")
    fail.add_argument("--count", default="1", help="errors to add (ECC, NVLink; default 1)")
    fail.add_argument("--link", help="nvlink-down: the links, comma separated, or all (default 0)")
    fail.add_argument(
        "--uncontained", action="store_true", help="ecc-uncorrectable on Ampere+: Xid 95, not 94"
    )
    fail.add_argument(
        "--remap-failure",
        action="store_true",
        help="ecc-uncorrectable: the retirement/remap fails (Xid 64)",
    )
    fail.add_argument(
        "--temp", help="thermal: the temperature in C (default: slowdown threshold + 3)"
    )
    fail.add_argument(
        "--reason",
        help="fabric-degraded: health fields that turn bad, comma separated "
        f"({', '.join([*faults.FABRIC_HEALTH_FIELDS, 'incorrect-configuration'])}; "
        "default degraded-bandwidth)",
    )
    _add_trigger_args(fail)

    xid = verb(
        "xid", "send an Xid (nvmlEventTypeXidCriticalError) to the GPU's event sets", _build_xid
    )
    xid.add_argument("code", help="the Xid, e.g. 79")
    xid.add_argument(
        "--gi",
        "-gi",
        dest="gpu_instance",
        metavar="ID",
        help="on this GPU instance's MIG device (with --ci): event waiters get its ids",
    )
    xid.add_argument(
        "--ci",
        "-ci",
        dest="compute_instance",
        metavar="ID",
        help="the compute instance of that MIG device (with --gi)",
    )
    for flag in ("--after-calls", "--probability", "--at"):  # refused with the reason
        xid.add_argument(flag, help=argparse.SUPPRESS)

    temp = verb("temp", "set the GPU temperature", _build_temp)
    temp.add_argument("celsius", help="degrees C")
    temp.add_argument("--memory", help="the memory (HBM) temperature, C")

    power = verb("power", "set the power draw and/or limit", _build_power)
    power.add_argument(
        "watts", nargs="?", help="the draw: watts (350, 350.5W) or milliwatts (350000mW)"
    )
    power.add_argument("--limit", help="the power limit, same units")

    util = verb("util", "set utilization: a percentage, or a pattern", _build_util)
    util.add_argument(
        "pattern",
        nargs="+",
        metavar="PCT|PATTERN",
        help=f"N, or {vocabulary.utilization_grammar().removeprefix('N | ')}",
    )
    util.add_argument(
        "--period", help="the pattern's period: 500ms, 1.5s, 30s, 1m30s (default: the pattern's)"
    )
    util.add_argument("--seed", help="seed of the pattern's noise (default 0)")
    util.add_argument("--memory", help="memory utilization, percent")

    clocks = verb("clocks", "set current clocks (MHz, at most the GPU's maximum)", _build_clocks)
    for flag in _CLOCK_FLAGS:
        clocks.add_argument(f"--{flag}", help=f"{flag} clock, MHz")

    throttle = verb("throttle", "set the clock event (throttle) reasons", _build_throttle)
    throttle.add_argument(
        "reasons",
        nargs="+",
        metavar="REASON",
        help=f"none, or names: {', '.join(faults.CLOCKS_EVENT_REASONS)}",
    )
    throttle.add_argument(
        "--add",
        action="store_true",
        help="add to the reasons already shown instead of replacing them",
    )

    pstate = verb("pstate", "set the performance state", _build_pstate)
    pstate.add_argument("pstate", help="0..15 or P0..P15")

    ecc = verb("ecc", "set ECC counters, retired pages, remapped rows or the ECC mode", _build_ecc)
    for flag in _ECC_FLAGS:
        ecc.add_argument(f"--{flag.replace('_', '-')}", dest=flag, help=_ECC_FLAGS[flag])

    nvlink = verb("nvlink", "take NVLinks down or up, set their error counters", _build_nvlink)
    nvlink.add_argument("--down", help="links to take down, comma separated, or all")
    nvlink.add_argument("--up", help="links to bring back up, comma separated, or all")
    nvlink.add_argument("--crc", help="CRC errors on each down link")
    nvlink.add_argument("--replay", help="replay errors on each down link")
    nvlink.add_argument("--recovery", help="recovery errors on each down link")

    fabric = verb(
        "fabric-health",
        "set the fabric health mask fields and the fabric state",
        _build_fabric_health,
    )
    for name in faults.FABRIC_HEALTH_FIELDS:
        fabric.add_argument(
            f"--{name}", metavar="yes|no", help=f"{name} (NVML_GPU_FABRIC_HEALTH_MASK_*)"
        )
    fabric.add_argument(
        "--incorrect-configuration",
        metavar="NAME",
        help=f"one of {', '.join(faults.INCORRECT_CONFIGURATION)}",
    )
    fabric.add_argument("--mask", help="start from this raw health mask (default: the current one)")
    fabric.add_argument(
        "--state", dest="fabric_state", help=f"fabric state: {', '.join(FABRIC_STATES)}"
    )

    recovery = verb(
        "recovery-action",
        "set the GPU recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)",
        _build_recovery_action,
    )
    recovery.add_argument("action", help=", ".join(faults.RECOVERY_ACTIONS))

    set_ = verb("set", "set any live keys", _build_set)
    set_.add_argument("assignments", nargs="+", metavar="KEY=VALUE")
    _add_trigger_args(set_)

    status = verb(
        "status", "show the live values of the GPUs and their allocations", None, gpu_default="all"
    )
    status.add_argument("--json", action="store_true", help="one JSON document")
    status.set_defaults(handler=_cmd_status)

    verb(
        "reset", "clear live values: the board values answer again", _build_reset, gpu_default="all"
    ).add_argument(
        "keys", nargs="*", metavar="KEY", help="only these keys (default: every live key)"
    )
    add_scenario_verb(verbs)

    alloc_help = "record a process holding GPUs (memory used, utilization), as for a container"
    alloc = verbs.add_parser("alloc", help=alloc_help, description=alloc_help)
    s.add_options(alloc, (*LOG_OPTIONS, *CTL_OPTIONS), defaults, suppress=True)
    alloc.add_argument(
        "--gpus",
        required=True,
        help="GPUs and MIG devices: indices, UUIDs, MIG-<uuid>, <gpu>:<mig>, comma separated, "
        "or all",
    )
    alloc.add_argument("--pid", required=True, help="the process id NVML lists (a host PID)")
    alloc.add_argument("--memory", help="memory used on each GPU: 20Gi, 512Mi, bytes (default 0)")
    alloc.add_argument(
        "--utilization",
        metavar="PATTERN",
        help=f"{vocabulary.utilization_grammar()}, then period=30s seed=N (default: none)",
    )
    alloc.add_argument(
        "--id", help=f"the record's id, which release takes (default {ctl_alloc.ID_PREFIX}PID)"
    )
    alloc.add_argument("--name", help="the container's name")
    alloc.add_argument("--pod", help="the pod's name")
    alloc.add_argument("--namespace", help="the pod's namespace")
    alloc.set_defaults(handler=_cmd_alloc)

    release_help = "remove allocation records (by id, or a prefix naming one)"
    release = verbs.add_parser("release", help=release_help, description=release_help)
    s.add_options(release, (*LOG_OPTIONS, *CTL_OPTIONS), defaults, suppress=True)
    release.add_argument("ids", nargs="+", metavar="ID")
    release.set_defaults(handler=_cmd_release)
    return parser


def _add_trigger_args(parser: argparse.ArgumentParser, *, seed: bool = True) -> None:
    group = parser.add_argument_group("trigger (default: now)")
    exclusive = group.add_mutually_exclusive_group()
    exclusive.add_argument(
        "--after-calls", metavar="N", help="apply after N calls on the GPU (counted per process)"
    )
    exclusive.add_argument(
        "--probability", metavar="P", help="apply on each call with probability P (0..1], seeded"
    )
    exclusive.add_argument("--at", metavar="TIME", help="apply at TIME: unix seconds or ISO 8601")
    if seed:
        group.add_argument("--seed", dest="trigger_seed", help="seed of --probability (default 0)")


if __name__ == "__main__":
    sys.exit(main())
