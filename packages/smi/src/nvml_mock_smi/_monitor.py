"""``dmon`` and ``pmon``: device and process statistics as scrolling columns.

Monitoring scripts parse these by position, so the layout is the real tool's, measured on
590 and 610 captures (``tests/smi_fixtures/exporter``): two ``#`` lines (names, units), then
one row per GPU (``dmon``) or per process (``pmon``) per sample, each column right-aligned in
its width and a trailing space; ``-`` where NVML has no value. ``-s`` picks the column groups
in the order given (``dmon``: ``p`` power and temperatures, ``u`` utilization, ``c`` clocks,
``v`` power/thermal violations, ``m`` memory, ``e`` ECC and PCIe replays, ``t`` PCIe
throughput; default ``puc``. ``pmon``: ``u`` utilization, ``m`` memory; default ``u``). ``-o
D``/``T`` prefix the date (``YYYYMMDD``) and time (``HH:MM:SS``); ``-c N`` stops after N
samples, ``-d N`` waits N seconds between them (default 1).
"""

from __future__ import annotations

import time
from ctypes import byref, c_uint, c_ulonglong

from ._errors import EXIT_INVALID_ARGUMENT, SmiError
from ._nvml import (
    CLOCK_GRAPHICS,
    CLOCK_MEM,
    ECC_CORRECTED,
    ECC_UNCORRECTED,
    ECC_VOLATILE,
    PCIE_UTIL_RX,
    PCIE_UTIL_TX,
    VALUE_NOT_AVAILABLE_ULL,
    Device,
    NvmlError,
    ProcessUtilizationSample,
    ViolationTime,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ._nvml import Nvml
    from ._options import Options

NONE = "-"
FI_MEMORY_TEMP = 82
PERF_POLICY_POWER, PERF_POLICY_THERMAL = 0, 1
MIB = 1024 * 1024


def _read(fn: Callable[[], object]) -> str:
    """``fn()`` as text, or ``-`` when NVML has no answer."""
    try:
        value = fn()
    except NvmlError:
        return NONE
    return NONE if value is None else str(value)


class Sampler:
    """One GPU's readings for one ``dmon`` row; keeps what the violation deltas need."""

    def __init__(self, device: Device) -> None:
        self.d = device
        self._violations: dict[int, tuple[float, int]] = {}

    def _violation(self, policy: int) -> int | None:
        viol = ViolationTime()
        d = self.d
        d.nvml.call("nvmlDeviceGetViolationStatus", d.handle, c_uint(policy), byref(viol))
        now = time.monotonic()
        before = self._violations.get(policy)
        self._violations[policy] = (now, int(viol.violationTime))
        if before is None or now <= before[0]:
            return 0
        spent_ns = max(0, int(viol.violationTime) - before[1])
        return min(100, round(spent_ns / ((now - before[0]) * 1e9) * 100))

    def _mtemp(self) -> int | None:
        value = int(self.d.field_value(FI_MEMORY_TEMP))
        return value or None

    def _ecc(self, err: int) -> int | None:
        current, _ = self.d.ecc_mode()
        return self.d.total_ecc_errors(err, ECC_VOLATILE) if current else None

    def _protected(self) -> int:
        self.d.conf_compute_mem_size()
        return 0  # confidential computing is off on every modelled board: nothing in use

    def group(self, letter: str) -> list[str]:
        d = self.d
        if letter == "p":
            return [
                _read(lambda: d.power_usage() // 1000),
                _read(d.temperature),
                _read(self._mtemp),
            ]
        if letter == "u":
            util = _read_util(d)
            return [
                *util,
                *(_engine(d, name) for name in ENGINES),
            ]
        if letter == "c":
            return [
                _read(lambda: d.clock_info(CLOCK_MEM)),
                _read(lambda: d.clock_info(CLOCK_GRAPHICS)),
            ]
        if letter == "v":
            power = _read(lambda: self._violation(PERF_POLICY_POWER))
            thermal = _read(lambda: self._violation(PERF_POLICY_THERMAL))
            return [power, thermal if thermal == NONE else str(int(int(thermal) > 0))]
        if letter == "m":
            return [
                _read(lambda: int(d.memory_info().used) // MIB),
                _read(lambda: int(d.bar1_memory_info().bar1Used) // MIB),
                _read(self._protected),
            ]
        if letter == "e":
            return [
                _read(lambda: self._ecc(ECC_CORRECTED)),
                _read(lambda: self._ecc(ECC_UNCORRECTED)),
                _read(d.pcie_replay_counter),
            ]
        return [
            _read(lambda: d.pcie_throughput(PCIE_UTIL_RX) // 1024),
            _read(lambda: d.pcie_throughput(PCIE_UTIL_TX) // 1024),
        ]


ENGINES = (
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetJpgUtilization",
    "nvmlDeviceGetOfaUtilization",
)


def _engine(d: Device, name: str) -> str:
    return _read(lambda: d.engine_utilization(name))


def _read_util(d: Device) -> list[str]:
    try:
        util = d.utilization()
    except NvmlError:
        return [NONE, NONE]
    return [str(util.gpu), str(util.memory)]


DMON_GROUPS: dict[str, list[tuple[str, str]]] = {
    "p": [("pwr", "W"), ("gtemp", "C"), ("mtemp", "C")],
    "u": [("sm", "%"), ("mem", "%"), ("enc", "%"), ("dec", "%"), ("jpg", "%"), ("ofa", "%")],
    "c": [("mclk", "MHz"), ("pclk", "MHz")],
    "v": [("pviol", "%"), ("tviol", "bool")],
    "m": [("fb", "MB"), ("bar1", "MB"), ("ccpm", "MB")],
    "e": [("sbecc", "errs"), ("dbecc", "errs"), ("pci", "errs")],
    "t": [("rxpci", "MB/s"), ("txpci", "MB/s")],
}
PMON_GROUPS: dict[str, list[tuple[str, str]]] = {
    "u": [("sm", "%"), ("mem", "%"), ("enc", "%"), ("dec", "%"), ("jpg", "%"), ("ofa", "%")],
    "m": [("fb", "MB"), ("ccpm", "MB")],
}


def groups(value: str | None, known: dict[str, list[tuple[str, str]]], default: str) -> str:
    """The ``-s`` letters, checked, in the order given (each once)."""
    letters = value if value is not None else default
    if not letters or any(c not in known for c in letters) or len(set(letters)) != len(letters):
        raise SmiError(
            f'Invalid value "{letters}" for -s. Please run with -h for help.',
            EXIT_INVALID_ARGUMENT,
        )
    return letters


def stamps(value: str | None) -> str:
    """The ``-o`` letters: ``D`` (date) and/or ``T`` (time), printed date first."""
    if value is None:
        return ""
    letters = value.upper()
    if not letters or set(letters) - {"D", "T"}:
        raise SmiError(
            f'Invalid value "{value}" for -o. Please run with -h for help.', EXIT_INVALID_ARGUMENT
        )
    return "".join(c for c in "DT" if c in letters)


class Layout:
    """Lines of one monitor: the ``#`` name and unit lines and the rows, text or CSV."""

    def __init__(self, stamp: str, csv: bool, widths: list[int], left_last: int = 0) -> None:
        self.stamp = stamp
        self.csv = csv
        self.widths = widths
        self.left_last = left_last
        """Width of a last, left-aligned column (``pmon``'s command); 0: none."""

    def _prefix(self, lead: str, date: str, clock: str) -> str:
        out = ""
        if "D" in self.stamp:
            out += date + "   "
        if "T" in self.stamp:
            out += clock + "    "
        return lead + out

    def line(self, cells: list[str], *, lead: str, date: str = "", clock: str = "") -> str:
        if self.csv:
            stamp = [
                c.strip() for c, on in ((date, "D" in self.stamp), (clock, "T" in self.stamp)) if on
            ]
            return lead.strip() + ", ".join([*stamp, *cells])
        first = self.widths[0] - (0 if self.stamp else 1)
        text = self._prefix(lead, date, clock) + cells[0].rjust(first)
        last = len(cells) - (1 if self.left_last else 0)
        for cell, width in zip(cells[1:last], self.widths[1:last], strict=True):
            text += cell.rjust(width)
        if self.left_last:
            return text + "    " + cells[-1].ljust(self.left_last)
        return text + " "

    def heading(self, names: list[str], units: list[str]) -> list[str]:
        return [
            self.line(names, lead="#", date="Date    ", clock="Time    "),
            self.line(units, lead="#", date="YYYYMMDD", clock="HH:MM:SS"),
        ]


def _csv_format(options: Options) -> tuple[bool, bool, bool]:
    """``--format``: (csv, header, units); ``csv`` is required, ``noheader``/``nounit`` drop
    the name and unit lines."""
    value = options.extra.get("format")
    if value is None:
        return False, True, True
    parts = {p.strip().lower() for p in value.split(",") if p.strip()}
    if "csv" not in parts or parts - {"csv", "noheader", "nounit", "nounits"}:
        raise SmiError(
            f'Invalid value "{value}" for --format. Please run with -h for help.',
            EXIT_INVALID_ARGUMENT,
        )
    return True, "noheader" not in parts, not parts & {"nounit", "nounits"}


def _count_and_delay(options: Options) -> tuple[int | None, float]:
    count = options.extra.get("count")
    delay = options.extra.get("delay", "1")
    if count is not None and (not count.isdigit() or int(count) < 1):
        raise SmiError(
            f'Invalid value "{count}" for -c. Please run with -h for help.', EXIT_INVALID_ARGUMENT
        )
    if not delay.isdigit() or not 1 <= int(delay) <= 30:
        raise SmiError(
            f'Invalid value "{delay}" for -d. Please run with -h for help.', EXIT_INVALID_ARGUMENT
        )
    return (int(count) if count is not None else None), float(delay)


def _clock() -> tuple[str, str]:
    now = time.localtime(time.time())  # the fine clock, as every other stamp
    return time.strftime("%Y%m%d", now), time.strftime("%H:%M:%S", now)


def _samples(
    options: Options,
    write: Callable[[str], None],
    heading: list[str],
    sample: Callable[[str, str], list[str]],
) -> None:
    count, delay = _count_and_delay(options)
    if heading:
        write("\n".join(heading) + "\n")
    done = 0
    while count is None or done < count:
        if done:
            time.sleep(delay)
        rows = sample(*_clock())
        if rows:
            write("\n".join(rows) + "\n")
        done += 1


def dmon(options: Options, write: Callable[[str], None]) -> int:
    """Run ``dmon`` with ``options``; return the exit code."""
    from ._app import each_pass, require_present

    letters = groups(options.extra.get("select"), DMON_GROUPS, "puc")
    stamp = stamps(options.extra.get("stamp"))
    csv, header, units = _csv_format(options)
    columns = [c for letter in letters for c in DMON_GROUPS[letter]]
    layout = Layout(stamp, csv, [5 if not stamp else 3] + [7] * len(columns))
    names = ["gpu", *(n for n, _ in columns)]
    unit_row = ["Idx", *(u for _, u in columns)]
    heading = layout.heading(names, unit_row)
    heading = [h for h, keep in zip(heading, (header, units), strict=True) if keep]

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)
        samplers = [Sampler(d) for d in devices]

        def sample(date: str, clock: str) -> list[str]:
            return [
                layout.line(
                    [str(s.d.index), *(v for letter in letters for v in s.group(letter))],
                    lead=" ",
                    date=date,
                    clock=clock,
                )
                for s in samplers
            ]

        _samples(options, write, heading, sample)
        return 0

    return each_pass(options, render)


def _process_rows(device: Device, letters: str) -> list[list[str]]:
    """One row per process on ``device``: pid, type, the ``-s`` columns, command."""
    kinds: dict[int, set[str]] = {}
    used: dict[int, int] = {}
    for kind, letter in (("Compute", "C"), ("Graphics", "G")):
        try:
            found = device.running_processes(kind)
        except NvmlError:
            continue
        for p in found:
            pid = int(p.pid)
            kinds.setdefault(pid, set()).add(letter)
            memory = int(p.usedGpuMemory)
            if memory != VALUE_NOT_AVAILABLE_ULL:
                used[pid] = used.get(pid, 0) + memory
    samples = _process_utilization(device)
    rows = []
    for pid in sorted(kinds):
        kind = "C+G" if len(kinds[pid]) == 2 else next(iter(kinds[pid]))
        util = samples.get(pid)
        cells: list[str] = []
        for letter in letters:
            if letter == "u":
                # a process that ran nothing in the window: the real tool prints "-" (NVML
                # has no sample for it; the mock's idle records report 0 %)
                if util is None or util.smUtil == util.memUtil == util.encUtil == util.decUtil == 0:
                    cells += [NONE] * 6
                else:
                    cells += [str(util.smUtil), str(util.memUtil), str(util.encUtil)]
                    cells += [str(util.decUtil), NONE, NONE]
            else:
                cells += [str(used[pid] // MIB) if pid in used else NONE, NONE]
        rows.append([str(pid), kind, *cells, _command(device, pid)])
    return rows


def _command(device: Device, pid: int) -> str:
    """The process's name as the real tool prints it: the program, at most 15 characters."""
    return _read(lambda: device.nvml.process_name(pid)).rsplit("/", 1)[-1][:15]


def _process_utilization(device: Device) -> dict[int, ProcessUtilizationSample]:
    count = c_uint(0)
    d = device
    try:
        d.nvml.call("nvmlDeviceGetProcessUtilization", d.handle, None, byref(count), c_ulonglong(0))
    except NvmlError:
        if count.value == 0:
            return {}
    samples = (ProcessUtilizationSample * max(1, count.value))()
    try:
        d.nvml.call(
            "nvmlDeviceGetProcessUtilization", d.handle, samples, byref(count), c_ulonglong(0)
        )
    except NvmlError:
        return {}
    return {int(samples[i].pid): samples[i] for i in range(count.value)}


def pmon(options: Options, write: Callable[[str], None]) -> int:
    """Run ``pmon`` with ``options``; return the exit code."""
    from ._app import each_pass, require_present

    letters = groups(options.extra.get("select"), PMON_GROUPS, "u")
    stamp = stamps(options.extra.get("stamp"))
    columns = [c for letter in letters for c in PMON_GROUPS[letter]]
    widths = [5 if not stamp else 3, 11, 6] + [7] * len(columns)
    layout = Layout(stamp, False, widths, left_last=15)
    head = Layout(stamp, False, [5 if not stamp else 3, 12, 7] + [7] * len(columns))
    names = ["gpu", "pid", "type", *(n for n, _ in columns)]
    units = ["Idx", "#", "C/G", *(u for _, u in columns)]
    # the names stand one place right of the values below them, as in the real tool
    heading = [
        head.line(names, lead="#", date="Date    ", clock="Time    ") + "   command ",
        head.line(units, lead="#", date="YYYYMMDD", clock="HH:MM:SS") + "   name ",
    ]

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)

        def sample(date: str, clock: str) -> list[str]:
            rows = []
            for d in devices:
                procs = _process_rows(d, letters) or [[NONE, NONE, *([NONE] * len(columns)), NONE]]
                rows += [
                    layout.line([str(d.index), *p], lead=" ", date=date, clock=clock) for p in procs
                ]
            return rows

        _samples(options, write, heading, sample)
        return 0

    return each_pass(options, render)
