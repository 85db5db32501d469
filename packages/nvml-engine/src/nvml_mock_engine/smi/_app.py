"""Runs one parsed command: loads NVML, picks the GPUs, renders the chosen view.

Each mode imports only what it renders, so ``-L`` pays for ctypes and nothing else.
NVML is initialised once per run and shut down on the way out, whatever happened.
"""

from __future__ import annotations

import time

from ._errors import (
    DRIVER_MESSAGE,
    EXIT_DRIVER_NOT_LOADED,
    EXIT_GPU_LOST,
    EXIT_INVALID_ARGUMENT,
    EXIT_LIBRARY_NOT_FOUND,
    EXIT_NO_PERMISSION,
    EXIT_NOT_FOUND,
    EXIT_OTHER,
    EXIT_VERSION_MISMATCH,
    INVALID_ARGS_MESSAGE,
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


def _bus_name(nvml: Nvml, index: int | None) -> str:
    """`` 0000:18:00.0`` style name of GPU *index* for handle errors, from the driver side
    (the board state); empty when unknown."""
    if index is None:
        return ""
    import os

    from ._board import board_gpus, legacy_bus_id, loaded_library, state_path

    gpus = board_gpus(state_path(nvml.path or loaded_library(), os.environ))
    if index < len(gpus) and gpus[index].get("pci_bus_id"):
        return legacy_bus_id(gpus[index]["pci_bus_id"])
    return ""


def handle_error(nvml: Nvml, index: int | None, code: int, text: str) -> SmiError:
    """The real tool's line for a GPU it cannot open: ``Unable to determine the device handle
    for GPU0000:18:00.0: GPU is lost.  Reboot the system to recover this GPU`` (the bus id in
    its four-digit-domain form, glued to "GPU", as drivers from the 520 series on print it)."""
    where = _bus_name(nvml, index)
    if code == ERROR_GPU_IS_LOST:
        return SmiError(
            f"Unable to determine the device handle for GPU{where}: {text}.  "
            "Reboot the system to recover this GPU",
            EXIT_GPU_LOST,
        )
    return SmiError(f"Unable to determine the device handle for GPU{where}: {text}", EXIT_OTHER)


def _fail(exc: NvmlError, nvml: Nvml | None = None, index: int | None = None) -> SmiError:
    if nvml is None:
        code = EXIT_GPU_LOST if exc.code == ERROR_GPU_IS_LOST else EXIT_OTHER
        return SmiError(f"Unable to determine the device handle for GPU: {exc.text}", code)
    return handle_error(nvml, index, exc.code, exc.text)


def lost_error(device: Device) -> SmiError:
    return handle_error(
        device.nvml, device.index, ERROR_GPU_IS_LOST, device.nvml.error_string(ERROR_GPU_IS_LOST)
    )


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
            raise _fail(exc, nvml, i) from None
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
    """Execute ``options``; every line of output goes through ``write``."""
    if options.mode == "help":
        from ._options import HELP

        write(HELP)
        return 0
    if options.mode == "help-query-gpu":
        from ._fields import help_text

        write(help_text())
        return 0
    if options.mode == "help-query-apps":
        from ._apps import help_text as apps_help

        write(apps_help())
        return 0
    if options.mode == "query-gpu":
        from ._fields import lookup

        for name in options.query_fields:
            if lookup(name) is None:
                raise SmiError(
                    f'Field "{name}" is not a valid field to query.', EXIT_INVALID_ARGUMENT
                )
    if options.mode == "query-apps":
        from ._apps import lookup as app_lookup

        for name in options.query_fields:
            if app_lookup(name) is None:
                raise SmiError(
                    f'Field "{name}" is not a valid field to query.', EXIT_INVALID_ARGUMENT
                )
    if options.mode == "query" and options.display:
        from ._sections import DISPLAY_TYPES

        if any(d not in DISPLAY_TYPES for d in options.display):
            raise SmiError(INVALID_ARGS_MESSAGE, EXIT_INVALID_ARGUMENT)

    if options.mode == "reset":
        from ._reset import reset

        return reset(options, write)

    nvml = open_nvml(options.library)
    try:
        if options.mode == "version":
            write(_version(nvml))
            return 0
        while True:
            code = _once(nvml, options, write)
            if options.loop_seconds is None:
                return code
            time.sleep(options.loop_seconds)
    finally:
        nvml.shutdown()


def _once(nvml: Nvml, options: Options, write: Callable[[str], None]) -> int:
    everything = all_devices(nvml)
    if not everything:
        raise SmiError(NO_DEVICES_MESSAGE, EXIT_NOT_FOUND)
    devices = select(everything, options.ids)
    mode = options.mode
    lost = [d for d in devices if d.lost]
    if mode == "list":
        write(_list(devices))
        return EXIT_GPU_LOST if lost else 0
    if mode == "query-gpu":
        from ._fields import Ctx, lookup, refuse_newer

        fields = [lookup(n) for n in options.query_fields]
        refuse_newer(nvml, options.query_fields)
        rows = []
        if options.csv_header:
            rows.append(", ".join(f.header(options.csv_units) for f in fields if f is not None))
        for device in devices:
            if device.lost:
                cell = f"[{nvml.error_string(ERROR_GPU_IS_LOST)}]"
                rows.append(", ".join(cell for f in fields if f is not None))
                continue
            ctx = Ctx(nvml, device, len(everything))
            rows.append(", ".join(f.cell(ctx, options.csv_units) for f in fields if f is not None))
        write("\n".join(rows) + "\n")
        return EXIT_GPU_LOST if lost else 0
    if lost:
        # the table, the report and the matrices need every GPU they show
        raise lost_error(lost[0])
    if mode == "table":
        from ._table import render as table

        write(table(nvml, devices))
    elif mode == "query":
        from ._document import render as document

        write(document(nvml, devices, len(everything), xml=options.xml, display=options.display))
    elif mode == "query-apps":
        from ._apps import render as apps

        write(
            apps(
                nvml,
                devices,
                options.query_fields,
                header=options.csv_header,
                units=options.csv_units,
            )
        )
    elif mode == "topo":
        from ._topology import matrix

        write(matrix(devices))
    elif mode == "nvlink-status":
        from ._topology import nvlink_status

        write(nvlink_status(devices))
    elif mode == "nvlink-caps":
        from ._topology import nvlink_capabilities

        write(nvlink_capabilities(devices))
    return 0


def _list(devices: list[Device]) -> str:
    lines = []
    for device in devices:
        if device.lost:
            lines.append(lost_error(device).message)
            continue
        try:
            name, uuid = device.name(), device.uuid()
        except NvmlError as exc:
            raise _fail(exc, device.nvml, device.index) from None
        lines.append(f"GPU {device.index}: {name} (UUID: {uuid})")
    return "\n".join(lines) + "\n"


def _version(nvml: Nvml) -> str:
    def get(fn: Callable[[], object]) -> str:
        try:
            return str(fn())
        except NvmlError:
            return "N/A"

    driver = get(nvml.driver_version)
    nvml_version = get(nvml.nvml_version)
    parts = nvml_version.split(".")
    if len(parts) >= 3:
        nvml_version = ".".join(parts[1:3])
    from ._values import cuda_version

    cuda = get(nvml.cuda_driver_version)
    cuda_s = cuda_version(int(cuda)) if cuda.isdigit() else cuda
    return (
        f"NVIDIA-SMI version  : {driver}\n"
        f"NVML version        : {nvml_version}\n"
        f"DRIVER version      : {driver}\n"
        f"CUDA Version        : {cuda_s}\n"
    )
