"""The default summary table: what people see when they type ``nvidia-smi``.

The layout is the 91-column box: a header with the tool, driver and CUDA versions (the line
most scripts grep), one three-line block per GPU, and the process table. Column widths match
the real tool so that screen-scraping parsers keep working. What changed between driver
generations is data (:data:`STYLES`): drivers before 570 rule the version line off with
``|---...---+`` (a pipe first), print a line of spaces before the process table and give
the PID column ten characters (the process name the six saved).
"""

from __future__ import annotations

from ._nvml import ECC_UNCORRECTED, ECC_VOLATILE, ERROR_NOT_SUPPORTED, Device, Nvml, NvmlError
from ._processes import ProcessRow, process_rows
from ._values import COMPUTE_MODES, clock_stamp, cuda_version

TYPE_CHECKING = False
if TYPE_CHECKING:
    # not at run time: typing and collections.abc would cost the bare table more
    # start-up time than its NVML calls
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

WIDE = "+" + "-" * 89 + "+"
SPLIT = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
DOUBLE = "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"
OLD_SPLIT = "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"


class Style:
    """What one driver generation's table looks like where generations differ."""

    __slots__ = ("gap", "kmd", "name_width", "pid_width", "version_rule")

    def __init__(
        self, version_rule: str, gap: str, pid_width: int, name_width: int, kmd: bool = False
    ) -> None:
        self.kmd = kmd
        """Whether the version line names "KMD Version" and "CUDA UMD Version" (610 on)."""
        self.version_rule = version_rule
        """The line under the version line."""
        self.gap = gap
        """The line between the GPU boxes and the process table."""
        self.pid_width = pid_width
        self.name_width = name_width


STYLES: tuple[tuple[tuple[int, ...], Style], ...] = (
    ((610,), Style(SPLIT, "", 16, 32, kmd=True)),
    ((570,), Style(SPLIT, "", 16, 32)),
    ((0,), Style(OLD_SPLIT, " " * 89, 10, 38)),
)
"""Newest first: the first whose version the driver reaches."""
CURRENT = STYLES[1][1]
"""The style of the drivers the packaged profiles use (570 to 595)."""


def version_line(driver: str, cuda: str, kmd: bool) -> str:
    """The header's version row: from 610 on the real tool names the kernel driver's and the
    CUDA user-mode driver's versions ("KMD Version", "CUDA UMD Version"; the 610.43.02 and
    610.43.03 tables on file in public issues), before that "Driver Version", "CUDA Version"."""
    if kmd:
        return f"| NVIDIA-SMI {driver:<23}KMD Version: {driver:<14}CUDA UMD Version: {cuda:<9}|"
    return f"| NVIDIA-SMI {driver:<23}Driver Version: {driver:<15}CUDA Version: {cuda:<9}|"


def style_for(driver: tuple[int, ...]) -> Style:
    """The table style of the tool of ``driver``."""
    return next(style for since, style in STYLES if driver >= since)


def row(left: str, middle: str, right: str) -> str:
    """One line of the GPU box: cells of 41, 24 and 22 columns, each ending in a space."""
    return f"|{left:<40} |{middle:<23} |{right:<21} |"


def wide_row(text: str) -> str:
    """One line of a full-width box (89 columns inside)."""
    return f"|{text:<88} |"


def _try(fn: Callable[..., T], *args: object) -> T | NvmlError:
    try:
        return fn(*args)
    except NvmlError as exc:
        return exc


def header(nvml: Nvml, style: Style = CURRENT) -> list[str]:
    driver = _value(nvml.driver_version)
    cuda = _value(nvml.cuda_driver_version)
    cuda_s = cuda_version(cuda) if isinstance(cuda, int) else "N/A"
    return [
        clock_stamp() + "       ",
        WIDE,
        version_line(str(driver), cuda_s, style.kmd),
        style.version_rule,
        row(
            " GPU  Name                 Persistence-M",
            " Bus-Id          Disp.A",
            " Volatile Uncorr. ECC",
        ),
        row(
            " Fan  Temp   Perf          Pwr:Usage/Cap",
            "           Memory-Usage",
            " GPU-Util  Compute M.",
        ),
        row("", "", "               MIG M."),
        DOUBLE,
    ]


def _value(fn: Callable[[], T]) -> T | str:
    got = _try(fn)
    return "N/A" if isinstance(got, NvmlError) else got


def _text(got: object, fmt: Callable[[Any], object] = str) -> str:
    if isinstance(got, NvmlError):
        return "N/A" if got.code == ERROR_NOT_SUPPORTED else "ERR!"
    return str(fmt(got))


def gpu_block(device: Device) -> list[str]:
    """The three lines of one GPU."""
    name = _text(_try(device.name))
    if len(name) > 28:
        name = name[:25] + "..."
    persistence = _text(_try(device.persistence_mode), lambda v: "On" if v else "Off")
    pci = _try(device.pci_info)
    bus_id = "N/A" if isinstance(pci, NvmlError) else pci.busId.decode()
    disp = _text(_try(device.display_active), lambda v: "On" if v else "Off")
    ecc = _try(device.ecc_mode)
    if isinstance(ecc, NvmlError):
        ecc_s = _text(ecc)
    elif not ecc[0]:
        ecc_s = "Off"
    else:
        ecc_s = _text(_try(device.total_ecc_errors, ECC_UNCORRECTED, ECC_VOLATILE))
    fan = _text(_try(device.fan_speed), lambda v: f"{v}%")
    temp = _text(_try(device.temperature), lambda v: f"{v}C")
    perf = _text(_try(device.performance_state), lambda v: f"P{v}")
    usage = _text(_try(device.power_usage), lambda v: f"{round(v / 1000)}W")
    cap = _text(_try(device.enforced_power_limit), lambda v: f"{round(v / 1000)}W")
    mem = _try(device.memory_info)
    if isinstance(mem, NvmlError):
        used = total = _text(mem)
    else:
        used, total = f"{mem.used // 1048576}MiB", f"{mem.total // 1048576}MiB"
    util = _try(device.utilization)
    util_s = _text(util) if isinstance(util, NvmlError) else f"{util.gpu}%"
    compute = _text(_try(device.compute_mode), lambda v: COMPUTE_MODES.get(v, "N/A"))
    mig = _try(device.mig_mode)
    mig_s = _text(mig) if isinstance(mig, NvmlError) else ("Enabled" if mig[0] else "Disabled")
    if not isinstance(mig, NvmlError) and mig[0] == 1 and not isinstance(ecc, NvmlError) and ecc[0]:
        # with MIG on the real tool shows the ECC mode in place of the (per MIG device) error
        # count; utilization is N/A because NVML answers none in MIG mode
        ecc_s = "On"
    return [
        row(
            f" {device.index:>3}  {name:<29}{persistence:>4}",
            f"   {bus_id:<16}{disp:>4}",
            f" {ecc_s:>20}",
        ),
        row(
            f" {fan:>3}{temp:>6}{perf:>6}{usage:>16} / {cap:>5}",
            f" {used:>10} / {total:>9}",
            f" {util_s:>7}{compute:>13}",
        ),
        row("", "", f" {mig_s:>20}"),
        SPLIT,
    ]


def process_table(rows: list[tuple[int, ProcessRow]], style: Style = CURRENT) -> list[str]:
    pid_w, name_w = style.pid_width, style.name_width
    out = [
        WIDE,
        wide_row(" Processes:"),
        wide_row(
            "  GPU   GI   CI"
            + "PID".rjust(pid_w + 1)
            + "   Type   "
            + "Process name".ljust(name_w + 4)
            + "GPU Memory"
        ),
        wide_row(
            "        ID   ID                                                               Usage"
        ),
        "|" + "=" * 89 + "|",
    ]
    if not rows:
        out.append(wide_row("  No running processes found"))
    for index, proc in rows:
        name = proc.name if len(proc.name) <= name_w else "..." + proc.name[-(name_w - 3) :]
        mem = "N/A" if proc.used_mib is None else f"{proc.used_mib}MiB"
        ids = f"{index:>5}{proc.gi:>6}{proc.ci:>5}{proc.pid:>{pid_w}}{proc.kind:>7}"
        out.append(wide_row(f"{ids}   {name:<{name_w}}{mem:>14}"))
    out.append(WIDE)
    return out


def render(nvml: Nvml, devices: list[Device]) -> str:
    from ._generation import parse_driver_version
    from ._mig_view import mig_devices, table_block

    driver = _try(nvml.driver_version)
    style = style_for(parse_driver_version("" if isinstance(driver, NvmlError) else driver))
    lines = header(nvml, style)
    procs: list[tuple[int, ProcessRow]] = []
    migs: list[tuple[int, Any]] = []
    any_mig = False
    for device in devices:
        lines += gpu_block(device)
        got = process_rows(device)
        if not isinstance(got, str):
            procs += [(device.index, p) for p in got]
        mig = _try(device.mig_mode)
        if not isinstance(mig, NvmlError) and mig[0] == 1:
            any_mig = True
            migs += [(device.index, m) for m in mig_devices(device)]
    lines.append(style.gap)
    if any_mig:
        # the real tool shows this box whenever a shown GPU has MIG on
        lines += table_block(migs)
        lines.append("")
    lines += process_table(procs, style)
    return "\n".join(lines) + "\n"
