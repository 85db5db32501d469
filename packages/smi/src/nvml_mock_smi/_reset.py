"""``nvidia-smi -r`` / ``--gpu-reset``: a GPU reset clears the faults the node injected.

On the mock a reset is what it is on a real GPU from the outside: the GPU comes back with
its board values, so every live value of the GPU (faults, counters, a lost GPU) is cleared
in the node's live layer. Only a caller that may write the live layer may reset (on the node,
as root; inside a container the overlay is read-only), as only root may reset a real GPU.
The messages and exit codes are the real tool's: ``GPU 00000000:1A:00.0 was successfully
reset.`` (and ``All done.`` after a reset of every GPU), or ``The following GPUs could not be
reset:`` with one line per GPU and its reason (exit 4 for ``Insufficient Permissions``).

A reset is refused while a process runs on one of the GPUs (``In use by another client``, exit
255, as the real tool does), and it applies an ECC mode that ``nvidia-smi -e`` left pending.

The GPUs are NVML's, as in every other command: ``-i 0`` inside an ``NVIDIA_VISIBLE_DEVICES``
view is the view's first GPU, whatever its place on the board. Each is found in the live layer
by the bus id the driver side knows, which answers for a lost GPU too.
"""

from __future__ import annotations

import os

from ._errors import EXIT_NO_PERMISSION, EXIT_NOT_FOUND, EXIT_OTHER, NO_DEVICES_MESSAGE, SmiError
from ._nvml import NvmlError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nvml_mock_live import LiveLayer

    from ._nvml import Device
    from ._options import Options

EXIT_NOT_SUPPORTED = 3


def _bus(device: Device) -> str:
    try:
        return device.driver_bus_id()
    except NvmlError:
        return ""


def _refused(buses: Sequence[str], reason: str, code: int) -> SmiError:
    lines = ["The following GPUs could not be reset:"]
    lines += [f"  GPU {bus}: {reason}" for bus in buses]
    return SmiError("\n".join(lines), code)


def _busy(device: Device) -> bool:
    """NVML shows a compute or graphics process on ``device`` (never, when it cannot tell)."""
    if device.lost:
        return False
    for kind in ("Compute", "Graphics"):
        try:
            if device.running_processes(kind):
                return True
        except NvmlError:
            continue
    return False


def _in_use(buses: Sequence[str]) -> SmiError:
    lines = ["The following GPUs could not be reset:"]
    lines += [f"  GPU {bus}: In use by another client" for bus in buses]
    many = len(buses) > 1
    these = "these devices" if many else "this device"
    lines += [
        "",
        f"{len(buses)} {'devices are' if many else 'device is'} currently being used by one or"
        " more other processes (e.g., Fabric Manager, CUDA application, graphics application"
        " such as an X server, or a monitoring application such as another instance of"
        f" nvidia-smi). Please first kill all processes using {these}"
        " and all compute applications running in the system.",
    ]
    return SmiError("\n".join(lines), EXIT_OTHER)


def _records(layer: LiveLayer, buses: Sequence[str]) -> list[int | None]:
    """The live layer record of each bus id (None for one the board does not have)."""
    from ._app import _same_bus

    found: list[int | None] = []
    for bus in buses:
        match = [
            g.index for g in layer.board if bus and _same_bus(g.values.get("pci_bus_id", ""), bus)
        ]
        found.append(match[0] if match else None)
    return found


def _clear(live: str, state: str | None, buses: Sequence[str]) -> None:
    """Clear the live values of the GPUs at ``buses``, applying a pending ECC or MIG mode."""
    from nvml_mock_engine.errors import LiveLayerError, NvmlEngineError
    from nvml_mock_live import LiveLayer

    try:
        with LiveLayer.open(live, state=state) as layer:
            records = _records(layer, buses)
            if any(r is None for r in records):
                raise _refused(buses, "Not Supported", EXIT_NOT_SUPPORTED)
            for index in records:
                assert index is not None
                pending = layer.values(index).get("ecc_pending", 0)
                layer.clear(index)
                if pending:
                    layer.set(index, {"ecc_enabled": pending == 2})
                layer.reset_mig(index)  # a pending MIG mode takes effect; instances are gone
    except PermissionError:
        raise _refused(buses, "Insufficient Permissions", EXIT_NO_PERMISSION) from None
    except (NvmlEngineError, LiveLayerError, OSError) as exc:
        if "Read-only" in str(exc) or "Permission" in str(exc):
            raise _refused(buses, "Insufficient Permissions", EXIT_NO_PERMISSION) from None
        raise _refused(buses, "Unknown Error", EXIT_OTHER) from None


def reset(options: Options, write: Callable[[str], None]) -> int:
    """Clear the live values of the GPUs of ``-i`` (default all); return the exit code."""
    from ._app import all_devices, open_nvml, select
    from ._board import live_path, loaded_library, state_path

    nvml = open_nvml(options.library)
    try:
        everything = all_devices(nvml)
        if not everything:
            raise SmiError(NO_DEVICES_MESSAGE, EXIT_NOT_FOUND)
        devices = select(everything, options.ids)
        buses = [_bus(d) for d in devices]
        state = state_path(nvml.path or loaded_library(), os.environ)
        live = live_path(state, os.environ)
        if not live or not os.path.isfile(live):
            raise _refused(buses, "Not Supported", EXIT_NOT_SUPPORTED)
        if not os.access(live, os.W_OK):
            raise _refused(buses, "Insufficient Permissions", EXIT_NO_PERMISSION)
        busy = [bus for device, bus in zip(devices, buses, strict=True) if _busy(device)]
        if busy:
            raise _in_use(busy)
        _clear(live, state, buses)
    finally:
        nvml.shutdown()
    for bus in buses:
        write(f"GPU {bus} was successfully reset.\n")
    if not options.ids:
        write("All done.\n")
    return 0
