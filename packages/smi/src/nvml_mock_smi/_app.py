"""What every command shares: loading NVML, picking the GPUs, the ``-l`` loop, the errors.

:func:`run` hands the parsed options to the command the registry names; the commands
(:mod:`._commands`) render through :func:`each_pass`, which initialises NVML once per run
and shuts it down on the way out, whatever happened.
"""

from __future__ import annotations

import time

from ._errors import (
    DRIVER_MESSAGE,
    EXIT_DRIVER_NOT_LOADED,
    EXIT_GPU_LOST,
    EXIT_LIBRARY_NOT_FOUND,
    EXIT_NO_PERMISSION,
    EXIT_NOT_FOUND,
    EXIT_OTHER,
    EXIT_VERSION_MISMATCH,
    LIBRARY_MESSAGE,
    NO_DEVICES_MESSAGE,
    SmiError,
)
from ._nvml import (
    ERROR_DRIVER_NOT_LOADED,
    ERROR_GPU_IS_LOST,
    ERROR_GPU_NOT_FOUND,
    ERROR_LIB_RM_VERSION_MISMATCH,
    ERROR_NO_PERMISSION,
    Device,
    LibraryNotFoundError,
    Nvml,
    NvmlError,
)
from ._options import Options

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def open_nvml(path: str | None) -> Nvml:
    """Load and initialise the library, mapping failures to the real tool's messages."""
    try:
        nvml = Nvml(path)
    except LibraryNotFoundError:
        raise SmiError(LIBRARY_MESSAGE, EXIT_LIBRARY_NOT_FOUND) from None
    try:
        nvml.init()
    except NvmlError as exc:
        if exc.code == ERROR_DRIVER_NOT_LOADED:
            raise SmiError(DRIVER_MESSAGE, EXIT_DRIVER_NOT_LOADED) from None
        if exc.code == ERROR_GPU_NOT_FOUND:
            raise SmiError(NO_DEVICES_MESSAGE, EXIT_NOT_FOUND) from None
        if exc.code == ERROR_NO_PERMISSION:
            raise SmiError(
                "Failed to initialize NVML: Insufficient Permissions", EXIT_NO_PERMISSION
            ) from None
        if exc.code == ERROR_LIB_RM_VERSION_MISMATCH:
            raise SmiError(
                "Failed to initialize NVML: Driver/library version mismatch", EXIT_VERSION_MISMATCH
            ) from None
        raise SmiError(f"Failed to initialize NVML: {exc.text}", EXIT_OTHER) from None
    return nvml


def legacy_bus_id(bus_id: str) -> str:
    """``00000000:18:00.0`` as the real tool names a GPU in its handle errors: ``0000:18:00.0``."""
    domain, sep, rest = bus_id.partition(":")
    return f"{domain[-4:]}{sep}{rest}" if sep else bus_id


def _bus_name(device: Device | None) -> str:
    """`` 0000:18:00.0`` style name of *device* for handle errors, from the driver side (the
    library's bus-id export, which answers for a lost GPU too, in this process's view); empty
    when unknown."""
    if device is None:
        return ""
    try:
        return legacy_bus_id(device.driver_bus_id())
    except NvmlError:
        return ""


def handle_error(device: Device | None, code: int, text: str) -> SmiError:
    """The real tool's line for a GPU it cannot open: ``Unable to determine the device handle
    for GPU0000:18:00.0: GPU is lost.  Reboot the system to recover this GPU`` (the bus id in
    its four-digit-domain form, glued to "GPU", as drivers from the 520 series on print it)."""
    where = _bus_name(device)
    if code == ERROR_GPU_IS_LOST:
        return SmiError(
            f"Unable to determine the device handle for GPU{where}: {text}.  "
            "Reboot the system to recover this GPU",
            EXIT_GPU_LOST,
        )
    return SmiError(f"Unable to determine the device handle for GPU{where}: {text}", EXIT_OTHER)


def _fail(exc: NvmlError) -> SmiError:
    code = EXIT_GPU_LOST if exc.code == ERROR_GPU_IS_LOST else EXIT_OTHER
    return SmiError(f"Unable to determine the device handle for GPU: {exc.text}", code)


def lost_error(device: Device) -> SmiError:
    return handle_error(device, ERROR_GPU_IS_LOST, device.nvml.error_string(ERROR_GPU_IS_LOST))


def all_devices(nvml: Nvml) -> list[Device]:
    """Every GPU NVML counts; a lost one is kept (marked) so each view can say so."""
    try:
        count = nvml.device_count()
    except NvmlError as exc:
        raise _fail(exc) from None
    devices = []
    for i in range(count):
        try:
            handle, lost = nvml.handle_or_lost(i)
        except NvmlError as exc:
            raise _fail(exc) from None
        devices.append(Device(nvml, handle, i, lost=lost))
    return devices


def select(devices: list[Device], ids: tuple[str, ...]) -> list[Device]:
    """The GPUs ``-i`` names (index, UUID, PCI bus id or serial), in the order given."""
    if not ids:
        return devices
    chosen: list[Device] = []
    for ident in ids:
        device = _find(devices, ident)
        if device is None:
            raise SmiError(NO_DEVICES_MESSAGE, EXIT_NOT_FOUND)
        if all(d.index != device.index for d in chosen):
            chosen.append(device)
    return chosen


def _find(devices: list[Device], ident: str) -> Device | None:
    if ident.isdigit() and int(ident) < len(devices):
        return devices[int(ident)]
    key = ident.upper()
    for device in devices:
        try:
            if key.startswith(("GPU-", "MIG-")) and device.uuid().upper() == key:
                return device
            if ":" in key and _same_bus(device.pci_info().busId.decode(), key):
                return device
            if not key.startswith("GPU-") and ":" not in key and device.serial().upper() == key:
                return device
        except NvmlError:
            continue
    return None


def _same_bus(bus_id: str, wanted: str) -> bool:
    """``00000000:06:00.0`` matches ``0000:06:00.0``, ``06:00.0`` and ``6:0.0``."""

    def parts(text: str) -> tuple[int, int, int, int] | None:
        try:
            rest, func = text.rsplit(".", 1)
            pieces = rest.split(":")
            domain = int(pieces[-3], 16) if len(pieces) == 3 else 0
            return domain, int(pieces[-2], 16), int(pieces[-1], 16), int(func, 16)
        except (ValueError, IndexError):
            return None

    mine, other = parts(bus_id.upper()), parts(wanted)
    return mine is not None and mine == other


def run(options: Options, write: Callable[[str], None]) -> int:
    """Execute ``options`` with the command the parser chose; output goes through ``write``."""
    from ._registry import by_name

    return by_name(options.command).run(options, write)


def each_pass(options: Options, render: Callable[[Nvml, list[Device], list[Device]], int]) -> int:
    """Open NVML, then call ``render(nvml, selected, every_gpu)`` once, or every
    ``-l``/``-lms`` interval until interrupted; return the last pass's exit code.

    The GPUs are counted afresh on each pass (a GPU lost between passes shows as lost); no
    GPU at all, or an ``-i`` that names none, ends the run with the real tool's message.
    """
    nvml = open_nvml(options.library)
    try:
        while True:
            everything = all_devices(nvml)
            if not everything:
                raise SmiError(NO_DEVICES_MESSAGE, EXIT_NOT_FOUND)
            code = render(nvml, select(everything, options.ids), everything)
            if options.loop_seconds is None:
                return code
            time.sleep(options.loop_seconds)
    finally:
        nvml.shutdown()


def require_present(devices: list[Device]) -> None:
    """Views that need every GPU they show (the table, the report, the matrices) end the
    run on the first lost one, as the real tool does."""
    for device in devices:
        if device.lost:
            raise lost_error(device)
