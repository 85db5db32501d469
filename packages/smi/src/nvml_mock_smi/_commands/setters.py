"""The commands that change a GPU: ``-pm``, ``-c``, ``-pl``, ``-e``, ``-ac``/``-rac``,
``-lgc``/``-rgc``, ``-lmc``/``-rmc`` and ``--auto-boost-default`` (see :mod:`.._set`).

Each is a top-level mode of its own, as in the real tool, which runs one change per call;
``build`` checks the value's form (a bad one is the real tool's invalid-combination answer,
exit 2) and ``run`` applies it to the GPUs of ``-i`` (default all).
"""

from __future__ import annotations

from .._options import Options, bad, common_fields
from .._registry import ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._set import Session

    Act = Callable[[Session], str]


def _enable(value: str) -> int:
    from .._set import enable_state

    mode = enable_state(value)
    if mode is None:
        raise bad()
    return mode


def _compute(value: str) -> int:
    names = {"DEFAULT": 0, "EXCLUSIVE_THREAD": 1, "PROHIBITED": 2, "EXCLUSIVE_PROCESS": 3}
    text = value.strip().upper()
    if text.isdigit() and int(text) in names.values():
        return int(text)
    if text not in names:
        raise bad()
    return names[text]


def _watts(value: str) -> float:
    try:
        watts = float(value)
    except ValueError:
        raise bad() from None
    if not 0 < watts < float("inf"):
        raise bad()
    return watts


def _pair(value: str, *, single: bool) -> tuple[int, int]:
    from .._set import clock_pair

    pair = clock_pair(value, single=single)
    if pair is None:
        raise bad()
    return pair


def _make(name: str, option: Option, act: Callable[[str], Act]) -> Command:
    """A set command: ``option`` selects it, ``act(value)`` is the change it makes."""

    def build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
        value = values.get(option.key, "")
        act(value)  # the value's form is checked now, before NVML loads
        return Options(command=name, extra={"value": value}, **common_fields(values, environ))

    def run(options: Options, write: Callable[[str], None]) -> int:
        from .._set import run as apply

        return apply(options, write, act(options.extra["value"]))

    return Command(name, select=(option.key,), options=(option, ID, LIBRARY), build=build, run=run)


def _persistence(value: str) -> Act:
    from .._set import persistence

    return persistence(_enable(value))


def _compute_mode(value: str) -> Act:
    from .._set import compute_mode

    return compute_mode(_compute(value))


def _power_limit(value: str) -> Act:
    from .._set import power_limit

    return power_limit(_watts(value))


def _ecc(value: str) -> Act:
    from .._set import ecc

    return ecc(_enable(value))


def _app_clocks(value: str) -> Act:
    from .._set import applications_clocks

    mem, graphics = _pair(value, single=False)
    return applications_clocks(mem, graphics)


def _lock(kind: str) -> Callable[[str], Act]:
    def make(value: str) -> Act:
        from .._set import locked_clocks

        lo, hi = _pair(value, single=True)
        if lo > hi:
            raise bad()
        return locked_clocks(kind, lo, hi)

    return make


def _reset(keys: tuple[str, ...]) -> Callable[[str], Act]:
    def make(value: str) -> Act:
        from .._set import reset_clocks

        return reset_clocks(keys)

    return make


def _auto_boost(value: str) -> Act:
    from .._set import auto_boost_default

    return auto_boost_default(_enable(value))


COMMANDS = (
    _make("set-persistence", Option(("-pm", "--persistence-mode"), "pm", value=True), _persistence),
    _make(
        "set-compute-mode", Option(("-c", "--compute-mode"), "compute", value=True), _compute_mode
    ),
    _make("set-power-limit", Option(("-pl", "--power-limit"), "pl", value=True), _power_limit),
    _make("set-ecc", Option(("-e", "--ecc-config"), "ecc", value=True), _ecc),
    _make(
        "set-app-clocks", Option(("-ac", "--applications-clocks"), "ac", value=True), _app_clocks
    ),
    _make(
        "reset-app-clocks",
        Option(("-rac", "--reset-applications-clocks"), "rac"),
        _reset(("app_clock_mem_mhz", "app_clock_graphics_mhz")),
    ),
    _make(
        "lock-gpu-clocks", Option(("-lgc", "--lock-gpu-clocks"), "lgc", value=True), _lock("gpu")
    ),
    _make(
        "reset-gpu-clocks",
        Option(("-rgc", "--reset-gpu-clocks"), "rgc"),
        _reset(("locked_gpu_clock_min_mhz", "locked_gpu_clock_max_mhz")),
    ),
    _make(
        "lock-memory-clocks",
        Option(("-lmc", "--lock-memory-clocks"), "lmc", value=True),
        _lock("mem"),
    ),
    _make(
        "reset-memory-clocks",
        Option(("-rmc", "--reset-memory-clocks"), "rmc"),
        _reset(("locked_mem_clock_min_mhz", "locked_mem_clock_max_mhz")),
    ),
    _make(
        "set-auto-boost-default",
        Option(("--auto-boost-default",), "auto-boost-default", value=True),
        _auto_boost,
    ),
)
